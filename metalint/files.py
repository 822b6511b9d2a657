"""Which files to check, and the cache of per-file results.

Discovery walks the given folders for ``*.py`` files, skipping what ``.gitignore`` files
(at every level, as git does) and the configured ``exclude`` patterns name. A file named on
the command line is always checked. Symbolic links to folders are not followed (no loops);
a ``.py`` link that is broken or loops is reported, not skipped.

The cache maps a file's path to the hash of its bytes and its :class:`FileResult`. Results
do not depend on which rules are selected or on other files (see ``engine``), so the key is
the content, the metalint version, the set of registered rules and the configured hooks.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pathspec

from metalint import __version__

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


def _read_gitignore(folder: Path) -> pathspec.PathSpec | None:
    try:
        text = (folder / ".gitignore").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return _spec(text.splitlines())


def _relative(path: Path, base: Path) -> str | None:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return None


class Discovery:
    def __init__(self, root: Path, exclude: list[str]):
        self.root = root.resolve()
        self.exclude = _spec(exclude)
        self._gitignores: dict[Path, pathspec.PathSpec | None] = {}
        self._git_tops: dict[Path, Path | None] = {}

    def _gitignore(self, folder: Path) -> pathspec.PathSpec | None:
        if folder not in self._gitignores:
            self._gitignores[folder] = _read_gitignore(folder)
        return self._gitignores[folder]

    def _git_top(self, folder: Path) -> Path | None:
        # asked once per file: remembered per folder (a warm run on transformers stats ~3,400
        # folders' parents otherwise)
        if folder not in self._git_tops:
            self._git_tops[folder] = next((f for f in [folder, *folder.parents] if (f / ".git").exists()), None)
        return self._git_tops[folder]

    def ignored(self, path: Path, is_dir: bool, base: Path | None = None) -> bool:
        """Excluded or git-ignored. With ``base`` (a folder named on the command line that is
        itself excluded), patterns apply below ``base`` only: naming a folder checks it."""
        path = path.absolute()
        anchor = base or self.root
        rel = _relative(path, anchor)
        suffix = "/" if is_dir else ""
        if rel is not None and rel != "." and self.exclude.match_file(rel + suffix):
            return True
        # .gitignore files from the git top (or the root) down to the file's folder
        top = base or self._git_top(path.parent) or self.root
        for folder in [path.parent, *path.parent.parents]:
            spec = self._gitignore(folder)
            if spec is not None:
                r = _relative(path, folder)
                if r is not None and spec.match_file(r + suffix):
                    return True
            if folder == top or folder == folder.parent:
                break
        return False

    def files(self, paths: Iterable[Path]) -> Iterator[Path]:
        """Files to check, each once, in a stable order."""
        seen: set[str] = set()
        for p in paths:
            if p.is_dir() and not p.is_symlink():
                named = p.absolute()
                # a folder named explicitly is checked even when it is excluded itself
                base = named if named != self.root and self.ignored(named, True) else None
                found = sorted(self._walk(p, base))
            else:
                # explicit files are always checked (even broken links or non-.py)
                found = [p]
            for f in found:
                key = os.path.normpath(str(f.absolute()))
                if key not in seen:
                    seen.add(key)
                    yield f

    def _walk(self, folder: Path, base: Path | None = None) -> Iterator[Path]:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                if entry.name in ALWAYS_SKIP or entry.name.endswith(".egg-info"):
                    continue
                if self.ignored(path, True, base):
                    continue
                yield from self._walk(path, base)
            elif entry.name.endswith(".py"):
                if not self.ignored(path, False, base):
                    yield path


def display_path(path: Path, cwd: Path | None = None) -> str:
    cwd = cwd or Path.cwd()
    try:
        return os.path.relpath(path, cwd) if path.is_absolute() else os.path.normpath(str(path))
    except ValueError:
        return str(path)


#: bump when what a cached FileResult holds changes (2: module-level init functions)
CACHE_SCHEMA = 2

class Cache:
    """One JSON file per settings key, mapping path -> {hash, result}."""

    def __init__(self, folder: Path, key: str):
        self.folder = folder
        self.file = folder / f"{key}.json"
        self.entries: dict[str, dict] = {}
        self.dirty = False
        try:
            self.entries = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.entries = {}

    @staticmethod
    def key(rule_codes: Iterable[str], hooks: Iterable[str]) -> str:
        h = hashlib.blake2b(digest_size=12)
        h.update(f"{__version__}/{CACHE_SCHEMA}".encode())
        h.update(",".join(sorted(rule_codes)).encode())
        h.update(",".join(hooks).encode())
        return h.hexdigest()

    @staticmethod
    def digest(data: bytes) -> str:
        return hashlib.blake2b(data, digest_size=16).hexdigest()

    def get(self, path: str, digest: str) -> dict | None:
        entry = self.entries.get(path)
        if entry and entry.get("hash") == digest:
            return entry["result"]
        return None

    def put(self, path: str, digest: str, result: dict) -> None:
        self.entries[path] = {"hash": digest, "result": result}
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            gitignore = self.folder / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("# created by metalint\n*\n")
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.entries, f, separators=(",", ":"))
            os.replace(tmp, self.file)
        except OSError:
            pass  # a read-only tree is checked without a cache
