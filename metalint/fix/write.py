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

The file is written in the folder it really is in (a link is written through, the link kept),
and only inside the checked tree: with ``inside`` (the real paths of the folders named, see
:func:`tree_of`), a file whose real path is elsewhere (a link out of the tree) raises
:class:`OutsideTree` and nothing is written. The folder is opened once and every step works
relative to it, without following a link at the file's own name: a folder or a file swapped
for a link after the check cannot redirect the write (the rename replaces the name, never
what a link there points to).

``METALINT_FIX_TEST_PAUSE`` (seconds, tests only) sleeps between writing the temporary file and
renaming it, so a test can kill the process in that window.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from metalint.files import MAX_SOURCE_BYTES, read_bounded

TMP_SUFFIX = ".metalint-tmp"


class ChangedOnDisk(Exception):
    """The file is not what was read: someone else changed it; it is left alone."""


class OutsideTree(Exception):
    """The file is a link to a file outside the checked tree: it is left alone."""


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


def tree_of(paths: Iterable[Path]) -> list[str]:
    """The real paths of the folders a run checks: each folder named, and the folder of each
    file named."""
    out = []
    for p in paths:
        p = Path(p)
        folder = p if p.is_dir() and not p.is_symlink() else Path(os.path.abspath(p)).parent
        out.append(os.path.realpath(folder))
    return out


def _below(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: every step relative to the folder's descriptor where the platform allows it
_AT = {os.open, os.stat, os.replace, os.unlink} <= os.supports_dir_fd and hasattr(os, "O_DIRECTORY")


def _read_at(name: str, dfd: int | None) -> bytes | None:
    """The bytes of the regular file ``name`` (no link followed), None when it is not one."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC, dir_fd=dfd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return read_bounded(fd, MAX_SOURCE_BYTES)[0]
    finally:
        os.close(fd)


def write_atomic(
    path: Path, data: bytes, expected: str | None, inside: Sequence[str] | None = None
) -> None:
    """Replace ``path`` with ``data``; ``expected`` is the digest of the bytes that were read;
    ``inside``: the real paths of the checked tree's folders (see :func:`tree_of`)."""
    path = Path(path)
    check_python(data, str(path))
    real = os.path.realpath(path)  # write through a symbolic link, keep the link
    if inside is not None and not any(_below(real, folder) for folder in inside):
        raise OutsideTree(f"{path} is a link to {real}, outside the checked tree; not written")
    folder, name = os.path.split(real)
    remove_stale_temporaries(Path(real))
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC) if _AT else None
    try:
        if dfd is not None and os.path.isdir("/proc/self/fd"):
            try:  # the folder opened is the one resolved, not a link swapped in since
                opened = os.readlink(f"/proc/self/fd/{dfd}")
            except OSError:
                opened = folder
            if opened != folder:
                raise ChangedOnDisk(f"{path} changed since it was read; not written")
        _replace(path, name if dfd is not None else real, data, expected, dfd)
    finally:
        if dfd is not None:
            os.close(dfd)


def _replace(path: Path, target: str, data: bytes, expected: str | None, dfd: int | None) -> None:
    """Write ``data`` to a temporary beside ``target`` and rename it over ``target`` (names
    relative to ``dfd`` when it is given)."""
    st = os.stat(target, dir_fd=dfd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        raise ChangedOnDisk(f"{path} is no longer a regular file; not written")
    base = os.path.basename(target)
    tmp = os.path.join(os.path.dirname(target), f".{base}.{secrets.token_hex(4)}{TMP_SUFFIX}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode))
            else:  # pragma: no cover (Windows before 3.13)
                os.chmod(tmp, stat.S_IMODE(st.st_mode))
            os.fsync(f.fileno())
        pause = os.environ.get("METALINT_FIX_TEST_PAUSE")
        if pause:
            time.sleep(float(pause))
        if expected is not None:
            now = _read_at(target, dfd)
            if now is None or digest(now) != expected:
                raise ChangedOnDisk(f"{path} changed since it was read; not written")
        os.replace(tmp, target, src_dir_fd=dfd, dst_dir_fd=dfd)
        tmp = None
        try:  # make the rename durable
            if dfd is not None:
                os.fsync(dfd)
            else:
                folder_fd = os.open(os.path.dirname(target) or ".", os.O_RDONLY)
                try:
                    os.fsync(folder_fd)
                finally:
                    os.close(folder_fd)
        except OSError:
            pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
