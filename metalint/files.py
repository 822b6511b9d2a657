"""Which files to check.

Discovery walks the given folders for ``*.py`` files, skipping what ``.gitignore`` files
(at every level, as git does) and the configured ``exclude`` patterns name (matched by
:mod:`metalint.globs`, in linear time). A file named on the command line is always checked.
Symbolic links to folders are not followed (no loops); a ``.py`` link that is broken or loops
is reported, not skipped.

Every file is read by :func:`read_regular`: a regular file only (a FIFO, a device or a link to
one is refused after a ``stat``, before any ``open`` that could block), at most ``limit`` + 1
bytes of it.

(The cache of per-file results is :mod:`metalint.cache`.)
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from metalint.globs import PatternError, Spec, compile_pattern
from metalint.globs import spec as pattern_spec

ALWAYS_SKIP = {
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".metalint_cache",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
    ".venv",
    "venv",
    "node_modules",
    ".eggs",
}


#: bytes of the largest source file checked: a larger one is ML901 without being read
#: (analysing a file takes a few hundred times its size in memory: a generated 4 MB file of
#: parameter assignments, over 1.4 GB)
MAX_SOURCE_BYTES = 8 * 2**20
#: bytes of the largest ``.gitignore`` or configuration file read
MAX_TEXT_BYTES = 2**20


class NotRegularFile(OSError):
    """A FIFO, a device, a socket or a folder where a file was expected: never opened."""


class TooLarge(OSError):
    """A file larger than the limit: not read."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"{size} bytes, over the limit of {limit}")
        self.size = size
        self.limit = limit


_KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def not_regular(mode: int) -> str | None:
    """What a file of ``mode`` is when it is not a regular file (``"a named pipe"``), else None:
    one answer for ``check``, ``fix`` and the loader."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def read_bounded(fd: int, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` + 1 bytes of the open file ``fd``, and whether it holds more than
    ``limit``."""
    parts, left = [], limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts), left <= 0


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (a link to one is followed). Raises
    :class:`NotRegularFile` for anything else (decided by ``stat`` before ``open``, and again
    on the open file, which is opened non-blocking: a FIFO swapped in between cannot block),
    :class:`TooLarge` past ``limit`` bytes (at most ``limit`` + 1 are read), OSError."""
    st = os.stat(path)
    if (kind := not_regular(st.st_mode)) is not None:
        raise NotRegularFile(f"not a regular file ({kind})")
    if st.st_size > limit:
        raise TooLarge(st.st_size, limit)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        if (kind := not_regular(os.fstat(fd).st_mode)) is not None:
            raise NotRegularFile(f"not a regular file ({kind})")
        data, over = read_bounded(fd, limit)
    finally:
        os.close(fd)
    if over:  # it grew past the limit (or says it is empty, as /proc files do)
        raise TooLarge(limit + 1, limit)
    return data


def _read_gitignore(folder: str, warn) -> Spec | None:
    """The patterns of ``folder/.gitignore``; one that cannot be read (a pattern git cannot
    read either, a file that is not a regular file or too large) is skipped with a warning."""
    path = os.path.join(folder, ".gitignore")
    try:
        text = read_regular(path, MAX_TEXT_BYTES).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        if os.path.lexists(path):
            warn(f"{path}: not read ({exc.strerror or exc})")
        return None
    patterns = []
    for row, line in enumerate(text.split("\n"), 1):
        try:
            p = compile_pattern(line.rstrip("\r"))
        except PatternError as exc:
            warn(f"{path}:{row}: pattern {line.strip()!r} skipped ({exc})")
            continue
        if p is not None:
            patterns.append(p)
    return Spec(patterns)


def _relative(path: str, base: str) -> str | None:
    """``path`` below ``base`` (both absolute and normalised) as a posix string, "." for
    ``base`` itself, None when it is not below."""
    if path == base:
        return "."
    prefix = base if base.endswith(os.sep) else base + os.sep
    if not path.startswith(prefix):
        return None
    rel = path[len(prefix) :]
    return rel if os.sep == "/" else rel.replace(os.sep, "/")


#: the ``.gitignore`` files that apply in a folder: (folder, its spec), nearest last
Chain = tuple[tuple[str, Spec], ...]


class Discovery:
    """Paths are handled as absolute, normalised strings: a warm run on a tree of thousands of
    files spends most of its time here otherwise (``pathlib`` objects per path and parent)."""

    def __init__(self, root: Path, exclude: list[str], warn=None):
        """``warn``: called with a line for each ``.gitignore`` (or pattern of one) that
        cannot be read; ``exclude`` patterns that cannot be read raise PatternError."""
        self.root = str(root.resolve())
        self.exclude = pattern_spec(exclude)
        self._warn = warn or (lambda message: None)
        self._gitignores: dict[str, Spec | None] = {}

    def _gitignore(self, folder: str) -> Spec | None:
        if folder not in self._gitignores:
            self._gitignores[folder] = _read_gitignore(folder, self._warn)
        return self._gitignores[folder]

    def _chain(self, folder: str, base: str | None) -> Chain:
        """The ``.gitignore`` files from the git top (or ``base``, or the root) down to
        ``folder``, as git reads them."""
        top = base
        if top is None:
            top = next(
                (f for f in _ancestors(folder) if os.path.exists(os.path.join(f, ".git"))),
                self.root,
            )
        chain = []
        for f in _ancestors(folder):
            spec = self._gitignore(f)
            if spec is not None:
                chain.append((f, spec))
            if f == top:
                break
        return tuple(reversed(chain))

    def _excluded(self, path: str, is_dir: bool, base: str | None) -> bool:
        rel = _relative(path, base or self.root)
        return (
            rel is not None and rel != "." and self.exclude.match_file(rel + "/" if is_dir else rel)
        )

    @staticmethod
    def _git_ignored(path: str, is_dir: bool, chain: Chain) -> bool:
        suffix = "/" if is_dir else ""
        for folder, spec in chain:
            rel = _relative(path, folder)
            if rel is not None and spec.match_file(rel + suffix):
                return True
        return False

    def ignored(self, path: Path, is_dir: bool, base: Path | None = None) -> bool:
        """Excluded or git-ignored. With ``base`` (a folder named on the command line that is
        itself excluded), patterns apply below ``base`` only: naming a folder checks it."""
        p = os.path.abspath(path)
        b = None if base is None else os.path.abspath(base)
        return self._excluded(p, is_dir, b) or self._git_ignored(
            p, is_dir, self._chain(os.path.dirname(p), b)
        )

    def files(self, paths: Iterable[Path]) -> Iterator[Path]:
        """Files to check, each once, in a stable order."""
        seen: set[str] = set()
        for p in paths:
            if p.is_dir() and not p.is_symlink():
                named = os.path.abspath(p)
                # a folder named explicitly is checked even when it is excluded itself
                base = named if named != self.root and self.ignored(Path(named), True) else None
                found = [
                    Path(f)
                    for f in sorted(self._walk(named, base, self._chain(named, base)), key=_parts)
                ]
            else:
                # explicit files are always checked (even broken links or non-.py)
                found = [p]
            for f in found:
                key = os.path.normpath(str(f.absolute()))
                if key not in seen:
                    seen.add(key)
                    yield f

    def _walk(
        self, folder: str, base: str | None, chain: Chain, named: bool = True
    ) -> Iterator[str]:
        """``chain``: the ``.gitignore`` files that apply in ``folder``; below a ``named``
        folder, those of the parent (this folder's own is read here, where its listing shows
        whether it has one, and a nested repository, with its own ``.git``, starts afresh)."""
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            return
        if not named:
            chain = self._chain_in(folder, entries, base, chain)
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir and not (entry.name in ALWAYS_SKIP or entry.name.endswith(".egg-info")):
                if self._kept(entry.path, True, base, chain):
                    yield from self._walk(entry.path, base, chain, named=False)
            elif not is_dir and entry.name.endswith(".py"):
                if self._kept(entry.path, False, base, chain):
                    yield entry.path

    def _chain_in(self, folder: str, entries, base: str | None, chain: Chain) -> Chain:
        """The ``.gitignore`` files that apply below ``folder``: its own added; a nested
        repository (its own ``.git``) starts afresh."""
        names = {e.name for e in entries}
        if base is None and ".git" in names:
            chain = ()
        spec = self._gitignore(folder) if ".gitignore" in names else None
        return (*chain, (folder, spec)) if spec is not None else chain

    def _kept(self, path: str, is_dir: bool, base: str | None, chain: Chain) -> bool:
        return not (self._excluded(path, is_dir, base) or self._git_ignored(path, is_dir, chain))


def _ancestors(folder: str) -> Iterator[str]:
    while True:
        yield folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return
        folder = parent


def _parts(path: str) -> list[str]:
    return path.split(os.sep)


def display_path(path: Path, cwd: Path | None = None) -> str:
    cwd = cwd or Path.cwd()
    try:
        return os.path.relpath(path, cwd) if path.is_absolute() else os.path.normpath(str(path))
    except ValueError:
        return str(path)
