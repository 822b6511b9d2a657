"""Installed packages, read as source: where the environment keeps them, which file holds a
module, and which distribution (name and version) ships it.

Nothing here imports or runs anything of an installed package: a module is found by walking
the folders of the environment as Python's path finder would (a package folder with
``__init__.py``, then ``name.py``, then a namespace folder), never through ``importlib``
(``importlib.util.find_spec`` imports the parent packages). ``.pth`` files add the folders
they list; their ``import`` lines are code and are skipped.

Which environment (see :func:`search_folders`): ``[tool.metalint] site-packages`` when set
(an empty list turns reading installed packages off), else the active virtual environment
(``$VIRTUAL_ENV``: the project's, when metalint itself is installed elsewhere), else the
environment of the interpreter running metalint.

A file is read only when it lies, links resolved, inside the folder it was found in, is a
regular file and holds at most :data:`MAX_INSTALLED_BYTES` bytes.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from metalint.files import not_regular, read_bounded, read_regular

#: bytes of the largest installed module read (a larger one stays unknown, as before)
MAX_INSTALLED_BYTES = 1 << 20
#: bytes read of a ``METADATA``, ``top_level.txt`` or ``.pth`` file
MAX_METADATA_BYTES = 64 << 10
#: ``.pth`` files read per folder, and folders one may add
MAX_PTH_FILES = 64
MAX_PTH_FOLDERS = 64

#: top-level modules never read from disk: torch (its ``nn`` modules are metalint's own
#: vocabulary) and the standard library
NEVER_READ = frozenset({"torch", "builtins", "__future__"}) | frozenset(
    getattr(sys, "stdlib_module_names", ())
)


@dataclass(frozen=True)
class ModuleFile:
    """Where an installed module lives."""

    name: str  # dotted module name
    path: str  # the real path of its file (``__init__.py`` of a package)
    folder: str  # the real path of the search folder it was found in
    is_package: bool
    dist: str  # the distribution's name ("" when no dist-info names the top-level module)
    version: str
    size: int
    mtime_ns: int

    @property
    def stamp(self) -> str:
        """What a cached summary of this file is valid for: the distribution and version,
        and the file's size and modification time (an editable install changes those)."""
        return f"{self.dist}=={self.version}:{self.size}:{self.mtime_ns}"

    @property
    def relative(self) -> str:
        return os.path.relpath(self.path, self.folder)


def venv_folders(venv: str) -> list[str]:
    """The site-packages folders of the virtual environment at ``venv``."""
    patterns = ("lib/python3*/site-packages", "lib64/python3*/site-packages", "Lib/site-packages")
    out: list[str] = []
    for pattern in patterns:
        out += sorted(glob.glob(os.path.join(glob.escape(venv), pattern)))
    return out


def interpreter_folders() -> list[str]:
    """The site-packages folders of the interpreter running metalint."""
    import sysconfig  # only when no environment is named

    paths = sysconfig.get_paths()
    return [p for p in (paths.get("purelib"), paths.get("platlib")) if p]


def search_folders(
    configured: Iterable[str] | None, environ: Mapping[str, str] | None = None
) -> list[str]:
    """The folders installed modules are looked up in, in order, each a real path once:
    ``configured`` (``[tool.metalint] site-packages``, made absolute), else
    ``$VIRTUAL_ENV``'s, else the interpreter's; then the folders their ``.pth`` files add."""
    environ = os.environ if environ is None else environ
    if configured is not None:
        base = list(configured)
    elif environ.get("VIRTUAL_ENV"):
        base = venv_folders(environ["VIRTUAL_ENV"])
    else:
        base = interpreter_folders()
    out: list[str] = []
    for folder in base:
        if not os.path.isdir(folder):
            continue
        for f in [folder, *_pth_folders(folder)]:
            real = os.path.realpath(f)
            if real not in out and os.path.isdir(real):
                out.append(real)
    return out


def _pth_folders(folder: str) -> list[str]:
    """The folders the ``.pth`` files of ``folder`` list (site's rules: one path a line,
    relative to ``folder``; a line starting with ``import`` is code: skipped)."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".pth"))[:MAX_PTH_FILES]
    except OSError:
        return []
    out: list[str] = []
    for name in names:
        text = _small_text(os.path.join(folder, name))
        for line in (text or "").splitlines():
            line = line.strip()
            if not line or line.startswith(("#", "import ", "import\t")) or "\0" in line:
                continue
            path = os.path.join(folder, line)
            if os.path.isdir(path) and len(out) < MAX_PTH_FOLDERS:
                out.append(path)
    return out


def _small_text(path: str) -> str | None:
    """The first :data:`MAX_METADATA_BYTES` of the regular file ``path`` (a ``METADATA``
    holds its headers first), decoded; None when it is not one or cannot be read."""
    try:
        if not_regular(os.stat(path).st_mode) is not None:
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not_regular(os.fstat(fd).st_mode) is not None:
            return None
        data, _ = read_bounded(fd, MAX_METADATA_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data[:MAX_METADATA_BYTES].decode("utf-8", "replace")


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def inside(path: str, folder: str) -> bool:
    """Is the real path ``path`` inside the real folder ``folder``?"""
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:
        return False


class Environment:
    """The installed modules of some search folders (see :func:`search_folders`)."""

    def __init__(self, folders: list[str]):
        self.folders = folders
        #: folder -> top-level module -> (distribution, version), filled as asked
        self._dists: dict[str, dict[str, tuple[str, str]]] = {}
        #: folder -> whether every dist-info's ``top_level.txt`` was read
        self._indexed: set[str] = set()
        #: folder -> its dist-info folders
        self._infos: dict[str, list[str]] = {}

    def find(self, module: str) -> ModuleFile | None:
        """The file of the installed ``module`` (``pkg.sub.mod``), or None: not found, not a
        source file, outside its folder (a link out), not a regular file."""
        parts = module.split(".")
        if not all(p.isidentifier() for p in parts) or parts[0] in NEVER_READ:
            return None
        for folder in self.folders:
            kind = _kind(os.path.join(folder, parts[0]))
            if kind is None:
                continue
            found = self._walk(folder, parts)
            if found is not None or kind != "namespace":
                return found  # a regular package or module hides the later folders
        return None

    def _walk(self, folder: str, parts: list[str]) -> ModuleFile | None:
        path = folder
        for p in parts[:-1]:
            path = os.path.join(path, p)
            if not os.path.isdir(path):
                return None
        last = os.path.join(path, parts[-1])
        kind = _kind(last)
        if kind == "package":
            file, is_package = os.path.join(last, "__init__.py"), True
        elif kind == "module":
            file, is_package = last + ".py", False
        else:
            return None
        real = os.path.realpath(file)
        if not inside(real, folder):
            return None
        try:
            st = os.stat(real)
        except OSError:
            return None
        dist, version = self.distribution(folder, parts[0])
        return ModuleFile(
            ".".join(parts), real, folder, is_package, dist, version, st.st_size, st.st_mtime_ns
        )

    def distribution(self, folder: str, top: str) -> tuple[str, str]:
        """(name, version) of the distribution installed in ``folder`` that ships the
        top-level module ``top``: the dist-info of that name, else the one whose
        ``top_level.txt`` lists it; ("", "") when none does."""
        known = self._dists.setdefault(folder, {})
        if top in known:
            return known[top]
        found = self._dist_named(folder, top)
        if found is None and folder not in self._indexed:
            self._indexed.add(folder)
            for info in self._dist_infos(folder):
                for name in (_small_text(os.path.join(info, "top_level.txt")) or "").split():
                    if name.isidentifier() and name not in known:
                        known[name] = _metadata(info)
            found = known.get(top)
        known[top] = found or ("", "")
        return known[top]

    def _dist_named(self, folder: str, top: str) -> tuple[str, str] | None:
        want = normalize(top)
        for info in self._dist_infos(folder):
            if normalize(os.path.basename(info).split("-", 1)[0]) == want:
                return _metadata(info)
        return None

    def _dist_infos(self, folder: str) -> list[str]:
        if folder not in self._infos:
            self._infos[folder] = _dist_infos(folder)
        return self._infos[folder]

    def read(self, module: ModuleFile) -> bytes:
        """The bytes of ``module``'s file: a regular file of at most
        :data:`MAX_INSTALLED_BYTES` (``files.TooLarge``, OSError otherwise)."""
        return read_regular(module.path, MAX_INSTALLED_BYTES)


def _kind(path: str) -> str | None:
    """How Python's path finder takes ``path`` (a name without suffix): ``package``,
    ``module``, ``namespace`` or None."""
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "__init__.py")):
            return "package"
        return "module" if os.path.isfile(path + ".py") else "namespace"
    return "module" if os.path.isfile(path + ".py") else None


def _dist_infos(folder: str) -> list[str]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(os.path.join(folder, n) for n in names if n.endswith(".dist-info"))


def _metadata(info: str) -> tuple[str, str]:
    """(Name, Version) of a dist-info's ``METADATA`` headers (the folder's name, when the
    file says nothing)."""
    name, _, version = os.path.basename(info)[: -len(".dist-info")].partition("-")
    text = _small_text(os.path.join(info, "METADATA")) or ""
    for line in text.split("\n"):
        line = line.rstrip("\r")
        if not line:
            break  # the headers end at the first blank line
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "name":
            name = value.strip()
        elif sep and key.strip().lower() == "version":
            version = value.strip()
    return name[:200], version[:200]
