"""Writing a rewritten file atomically.

The new bytes go to a temporary file in the same folder (same file system), which is flushed,
fsync'ed and given the original file's mode; then, only if the file on disk still has exactly
the bytes that were read (blake2b digest), ``os.replace`` swaps it in. A process killed at any
moment leaves either the old file or the new one, never a truncated one. A process killed
between creating the temporary file and the rename leaves a ``.<name>.*.metalint-tmp`` file
(discovery ignores it: it does not end in ``.py``); the next write of that file removes it.

Before anything is written the new bytes must parse and compile as Python (CPython's own
compiler, with the file's coding cookie): otherwise :class:`NotPython` is raised and the file
is left as it was.

``METALINT_FIX_TEST_PAUSE`` (seconds, tests only) sleeps between writing the temporary file and
renaming it, so a test can kill the process in that window.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import time
from pathlib import Path

TMP_SUFFIX = ".metalint-tmp"


class ChangedOnDisk(Exception):
    """The file is not what was read: someone else changed it; it is left alone."""


class NotPython(Exception):
    """The rewritten bytes do not parse or compile: the file is left alone."""


def check_python(data: bytes, name: str) -> None:
    """Raise :class:`NotPython` unless ``data`` parses and compiles as a Python module."""
    try:
        compile(data, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, UnicodeError) as exc:
        where = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
        msg = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
        raise NotPython(f"the fixed text does not compile{where}: {msg}; not written") from None


def remove_stale_temporaries(target: Path) -> None:
    """Remove the temporary files an earlier, killed write of ``target`` left beside it."""
    prefix = f".{target.name}."
    try:
        with os.scandir(target.parent) as it:
            for entry in it:
                if entry.name.startswith(prefix) and entry.name.endswith(TMP_SUFFIX):
                    try:
                        os.unlink(entry.path)
                    except OSError:
                        pass
    except OSError:
        pass


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def write_atomic(path: Path, data: bytes, expected: str | None) -> None:
    """Replace ``path`` with ``data``; ``expected`` is the digest of the bytes that were read."""
    path = Path(path)
    check_python(data, str(path))
    target = Path(os.path.realpath(path))  # write through a symbolic link, keep the link
    st = target.stat()
    remove_stale_temporaries(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        pause = os.environ.get("METALINT_FIX_TEST_PAUSE")
        if pause:
            time.sleep(float(pause))
        if expected is not None and digest(target.read_bytes()) != expected:
            raise ChangedOnDisk(f"{path} changed since it was read; not written")
        os.replace(tmp, target)
        tmp = None
        try:  # make the rename durable
            dfd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
