"""The cache of per-file results: written and read only by this user's metalint.

The cache maps a file's path (relative to the project) to the hash of its bytes and its
:class:`FileResult`. Results do not depend on which rules are selected or on other files (see
``engine``), so the key is the content, the metalint version and code (the size and time of
each of its files), the set of registered rules and the configured hooks.

A repository can ship a ``.metalint_cache/`` of its own, so the cache is authenticated: each
cache file carries an HMAC under a secret key made once per user outside any repository
(``$XDG_CACHE_HOME/metalint/cache-key``, else ``~/.cache/metalint/cache-key``: 32 random bytes,
mode 0600). A file whose MAC does not verify is a miss, never trusted; without a key (it
cannot be created or read) there is no cache. The cache file's name is derived under the key
too, so another user cannot even guess it. Nothing is created through a symbolic link inside
the cache folder (``O_NOFOLLOW``/``O_EXCL``), and the folder itself must lie inside the
project or the user's cache folder (see :func:`allowed_folder`).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from metalint import __version__

#: bump when what a cached FileResult holds changes (2: module-level init functions; 3: their
#: reads of a tensor's value, for ML008 across files; 4: classes swapped into a sub-model;
#: 5: findings at calls of another file's functions listed, not made, until confirmed;
#: 6: authenticated, paths relative to the project, no display path in the results; the
#: sites that materialise a model built on meta; 7: a finding's conditions as typed clauses,
#: where a class names another file's classes)
CACHE_SCHEMA = 8

#: first line of a cache file: ``metalint-cache <name> <mac>``; the second is the entries' JSON
CACHE_MAGIC = b"metalint-cache"
#: a temporary cache file older than this (seconds) was left by a killed run: removed
STALE_TMP_AGE = 600.0
#: the per-user secret's name and size (bytes)
KEY_NAME = "cache-key"
KEY_SIZE = 32

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@functools.lru_cache(maxsize=1)
def code_stamp() -> str:
    """Size and modification time of every source file of metalint itself: an editable or
    git install changed without a new version must not read results its old code cached."""
    h = hashlib.blake2b(digest_size=8)
    package = os.path.dirname(os.path.abspath(__file__))
    for folder, dirs, names in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                h.update(
                    f"{os.path.relpath(os.path.join(folder, name), package)}:{st.st_size}:{st.st_mtime_ns};".encode()
                )
    return h.hexdigest()


def user_cache_home() -> Path | None:
    """``$XDG_CACHE_HOME`` when it is an absolute path (the XDG rule), else ``~/.cache``."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg)
    try:
        return Path.home() / ".cache"
    except (RuntimeError, KeyError):  # no home directory
        return None


def user_cache_folder() -> Path | None:
    home = user_cache_home()
    return None if home is None else home / "metalint"


class NoKey(Exception):
    """The per-user key cannot be read or made: the run goes without cache."""


def secret() -> bytes:
    """This user's cache key, made on first use; :class:`NoKey` when that cannot be."""
    folder = user_cache_folder()
    if folder is None:
        raise NoKey("no home directory for the cache key")
    return _secret_in(str(folder))


@functools.lru_cache(maxsize=4)
def _secret_in(folder: str) -> bytes:
    path = os.path.join(folder, KEY_NAME)
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise NoKey(f"cannot read the cache key {path}: {exc.strerror or exc}") from None
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        _make_key(folder, path)
        return _read_key(path)
    except OSError as exc:
        raise NoKey(f"cannot create the cache key {path}: {exc.strerror or exc}") from None


def _read_key(path: str) -> bytes:
    """The key, if it is a regular file of this user, of the right size, that no one else may
    read or write (not through a link)."""
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        mine = not hasattr(os, "geteuid") or st.st_uid == os.geteuid()
        if not stat.S_ISREG(st.st_mode) or not mine or st.st_mode & 0o077:
            raise OSError(0, "not a private file of this user")
        data = os.read(fd, KEY_SIZE + 1)
    finally:
        os.close(fd)
    if len(data) != KEY_SIZE:
        raise OSError(0, "not a key")
    return data


def _make_key(folder: str, path: str) -> None:
    """Write 32 random bytes to a new private file (``O_EXCL``), then link it into place: the
    key appears whole or not at all, and of two runs making it at once one wins."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".key-")  # O_EXCL, mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(KEY_SIZE))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:  # another run made it first: use theirs
            pass
    finally:
        os.unlink(tmp)


def within(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def allowed_folder(folder: Path, project: Path) -> bool:
    """A cache folder may lie (links resolved) inside the project or the user's cache folder
    only: a cache-dir of ``../x``, or a ``.metalint_cache`` link a repository ships pointing
    elsewhere, would have ``check`` write outside both."""
    real = folder.resolve()
    if within(real, project.resolve()):
        return True
    home = user_cache_home()
    return home is not None and within(real, home.resolve())


def seal(name: str, body: bytes, key: bytes) -> bytes:
    """The bytes of a cache file ``name`` holding ``body``."""
    return b" ".join((CACHE_MAGIC, name.encode(), _mac(name, body, key).encode())) + b"\n" + body


def opened(name: str, data: bytes, key: bytes) -> bytes | None:
    """The body of cache file ``name`` if its MAC verifies under ``key``, else None."""
    head, _, body = data.partition(b"\n")
    parts = head.split(b" ")
    if len(parts) != 3 or parts[0] != CACHE_MAGIC or parts[1] != name.encode():
        return None
    if not hmac.compare_digest(parts[2], _mac(name, body, key).encode()):
        return None
    return body


def _mac(name: str, body: bytes, key: bytes) -> str:
    return hmac.new(key, name.encode() + b"\n" + body, hashlib.sha256).hexdigest()


class Cache:
    """One file per (settings, project), mapping path -> {hash, result}.

    The cache is untrusted input: anything that is not exactly what this user's metalint
    wrote for these settings and this project (a MAC that does not verify, JSON of another
    shape, an entry that does not read back as a result) is a miss. A cache that cannot be
    read or written is skipped, with at most one warning; the results are those of
    ``--no-cache``. Paths are stored relative to ``project`` (the display path of a run is
    its own)."""

    def __init__(self, folder: Path, key: str, project: Path, secret_key: bytes, warn=None):
        self.folder = folder
        self.project = str(project)
        self.secret = secret_key
        self.name = hmac.new(
            secret_key, f"{key}\n{self.project}".encode(), hashlib.sha256
        ).hexdigest()[:32]
        self.file = folder / f"{self.name}.json"
        self.entries: dict[str, dict] = {}
        self.dirty = False
        self._warn = warn
        self.warned = False
        try:
            data = _read_regular(self.file)
        except FileNotFoundError:
            return
        except OSError as exc:
            self.warn(f"cache not read ({self.file}: {exc.strerror or exc})")
            return
        self.entries = self._parse(data)

    def _parse(self, data: bytes) -> dict[str, dict]:
        body = opened(self.name, data, self.secret)
        if body is None:
            return {}
        try:
            entries = json.loads(body)
        except ValueError:
            return {}
        if not isinstance(entries, dict):
            return {}
        return entries

    def warn(self, message: str) -> None:
        if self.warned:
            return
        self.warned = True
        if self._warn is not None:
            self._warn(message)

    @staticmethod
    def key(rule_codes: Iterable[str], hooks: Iterable[str]) -> str:
        h = hashlib.blake2b(digest_size=12)
        h.update(f"{__version__}/{CACHE_SCHEMA}/{code_stamp()}".encode())
        h.update(",".join(sorted(rule_codes)).encode())
        h.update(",".join(hooks).encode())
        return h.hexdigest()

    @staticmethod
    def digest(data: bytes) -> str:
        return hashlib.blake2b(data, digest_size=16).hexdigest()

    def path_key(self, path: str) -> str:
        """``path`` (absolute, normalised) relative to the project when it is inside."""
        rel = os.path.relpath(path, self.project)
        return path if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel

    def get(self, path: str, digest: str) -> dict | None:
        """The cached result of ``path`` if its bytes hash to ``digest`` (and the entry has the
        shape this version writes), else None."""
        entry = self.entries.get(self.path_key(path))
        if (
            type(entry) is dict
            and entry.get("hash") == digest
            and type(entry.get("result")) is dict
        ):
            return entry["result"]
        return None

    def put(self, path: str, digest: str, result: dict) -> None:
        self.entries[self.path_key(path)] = {"hash": digest, "result": result}
        self.dirty = True

    def drop(self, path: str) -> None:
        """Forget an entry that did not read back."""
        if self.entries.pop(self.path_key(path), None) is not None:
            self.dirty = True

    def save(self) -> None:
        if not self.dirty:  # nothing to write; a killed run's temporary is still removed
            if self.folder.is_dir():
                self._remove_stale_temporaries()
            return
        tmp = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            _ignore_in_git(self.folder)
            self._remove_stale_temporaries()
            body = json.dumps(self.entries, separators=(",", ":")).encode()
            # mkstemp opens with O_EXCL: never through a link; os.replace renames over a link
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "wb") as f:
                f.write(seal(self.name, body, self.secret))
            os.replace(tmp, self.file)
            tmp = None
        except (OSError, ValueError) as exc:  # a read-only tree is checked without a cache
            self.warn(f"cache not written ({self.folder}: {getattr(exc, 'strerror', None) or exc})")
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def _remove_stale_temporaries(self) -> None:
        """Temporary files a killed run left behind (a running one's are younger)."""
        now = time.time()
        try:
            it = os.scandir(self.folder)
        except OSError:
            return
        with it:
            for entry in it:
                if entry.name.startswith(".tmp-") and entry.name.endswith(".json"):
                    try:
                        if now - entry.stat(follow_symlinks=False).st_mtime > STALE_TMP_AGE:
                            os.unlink(entry.path)
                    except OSError:
                        pass


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file (not a link, a FIFO or a device)."""
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def _ignore_in_git(folder: Path) -> None:
    """``folder/.gitignore`` ignoring everything, unless something of that name is there (a
    link, even a dangling one, is left alone: never followed)."""
    path = folder / ".gitignore"
    try:
        os.lstat(path)
        return
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644)
    except FileExistsError:  # made meanwhile by another run
        return
    with os.fdopen(fd, "w") as f:
        f.write("# created by metalint\n*\n")
