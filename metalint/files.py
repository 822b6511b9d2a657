"""Which files to check.

Discovery walks the given folders for ``*.py`` files, skipping what ``.gitignore`` files
(at every level, as git does) and the configured ``exclude`` patterns name. A file named on
the command line is always checked. Symbolic links to folders are not followed (no loops);
a ``.py`` link that is broken or loops is reported, not skipped. (The cache of per-file
results is :mod:`metalint.cache`.)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pathspec

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


def _spec(lines: Iterable[str]) -> pathspec.PathSpec:
    return pathspec.GitIgnoreSpec.from_lines(list(lines))


def _read_gitignore(folder: str) -> pathspec.PathSpec | None:
    try:
        with open(os.path.join(folder, ".gitignore"), encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return _spec(text.splitlines())


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
Chain = tuple[tuple[str, pathspec.PathSpec], ...]


class Discovery:
    """Paths are handled as absolute, normalised strings: a warm run on a tree of thousands of
    files spends most of its time here otherwise (``pathlib`` objects per path and parent)."""

    def __init__(self, root: Path, exclude: list[str]):
        self.root = str(root.resolve())
        self.exclude = _spec(exclude)
        self._gitignores: dict[str, pathspec.PathSpec | None] = {}

    def _gitignore(self, folder: str) -> pathspec.PathSpec | None:
        if folder not in self._gitignores:
            self._gitignores[folder] = _read_gitignore(folder)
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
            names = {e.name for e in entries}
            if base is None and ".git" in names:
                chain = ()
            spec = self._gitignore(folder) if ".gitignore" in names else None
            if spec is not None:
                chain = (*chain, (folder, spec))
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                if entry.name in ALWAYS_SKIP or entry.name.endswith(".egg-info"):
                    continue
                path = entry.path
                if not (self._excluded(path, True, base) or self._git_ignored(path, True, chain)):
                    yield from self._walk(path, base, chain, named=False)
            elif entry.name.endswith(".py"):
                path = entry.path
                if not (self._excluded(path, False, base) or self._git_ignored(path, False, chain)):
                    yield path


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
