"""Read a ``torch.distributed.checkpoint`` folder without running anything it holds.

``FileSystemReader.read_metadata`` unpickles ``.metadata`` with plain ``pickle``: a
``__reduce__`` in it runs. Here:

- :func:`read_metadata` reads ``.metadata`` (a regular file, at most :data:`MAX_METADATA`
  bytes) with a :class:`~metalint.loader.pickles.PickleReader` that knows only the classes
  DCP's ``Metadata`` is made of (``torch/distributed/checkpoint/metadata.py`` and
  ``filesystem.py``: ``Metadata``, ``TensorStorageMetadata``, ``TensorProperties``,
  ``ChunkStorageMetadata``, ``BytesStorageMetadata``, ``StorageMeta``, ``MetadataIndex``,
  ``_StorageInfo``; ``torch.Size``, dtypes, layouts, paths) and builds each of them itself
  from checked fields, then rebuilds a clean ``Metadata`` from what it checked;
- :func:`check_items` checks, before any read, that every chunk of every tensor has a stored
  item in a regular file of the folder (a plain file name: no path, no link out of the folder)
  that lies inside that file and needs no stream transform;
- :func:`load` runs ``dcp.load`` with a reader whose ``read_metadata`` returns that checked
  metadata (also in place of the rank-local ``__<rank>.metadata`` fallback), that opens only
  regular files, and that checks each item's torch zip (:func:`check_zip_records`: records
  uncompressed and of their size, ``data.pkl`` bounded) before ``torch.load(weights_only=True)``
  reads it; its planner refuses a bytes item (DCP would ``torch.load(weights_only=False)`` it).
  Torch's ``CheckpointException`` (a ``BaseException``) becomes one line.
"""

from __future__ import annotations

import dataclasses
import io
import os
import warnings
from contextlib import contextmanager
from pathlib import PurePosixPath, PureWindowsPath

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystem, _StorageInfo
from torch.distributed.checkpoint.metadata import (
    _MEM_FORMAT_ENCODING,
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

from metalint.loader.errors import CheckpointError
from metalint.loader.pickles import PLAIN_KEYS, PickleReader, PickleRefused
from metalint.loader.records import check_zip_records
from metalint.loader.safeio import open_regular, read_limited, require_regular

#: the most bytes ``.metadata`` may hold
MAX_METADATA = 256 * 2**20
#: the most work units its pickle may cost (about 50k chunks)
MAX_METADATA_WORK = 10_000_000

_MODULE = "torch.distributed.checkpoint.metadata"
_CLASSES = {
    (_MODULE, c.__name__): c
    for c in (
        Metadata,
        TensorStorageMetadata,
        TensorProperties,
        ChunkStorageMetadata,
        BytesStorageMetadata,
        StorageMeta,
        MetadataIndex,
    )
}
_CLASSES["torch.distributed.checkpoint.filesystem", "_StorageInfo"] = _StorageInfo
_FIELDS = {c: {f.name for f in dataclasses.fields(c)} for c in _CLASSES.values()}
_LAYOUTS = {str(v): v for v in vars(torch).values() if isinstance(v, torch.layout)}
_PATHS = {"PosixPath": PurePosixPath, "PurePosixPath": PurePosixPath}
_PATHS.update(WindowsPath=PureWindowsPath, PureWindowsPath=PureWindowsPath)


class _Global:
    def __init__(self, name: str):
        self.name = name


_GET_LAYOUT = _Global("_get_layout")
_ORDERED_DICT = _Global("OrderedDict")
_U63 = 2**63


def _size(value) -> torch.Size:
    if type(value) not in (list, tuple) or not all(type(x) is int and 0 <= x < _U63 for x in value):
        raise PickleRefused("torch.Size of other than non-negative ints")
    return torch.Size(value)


def _optional(value, kind, what: str):
    if value is not None and type(value) is not kind:
        raise PickleRefused(f"{what} is a {type(value).__name__}")
    return value


class _MetadataReader(PickleReader):
    def find_class(self, module, name):
        cls = _CLASSES.get((module, name))
        if cls is not None:
            return cls
        if (module, name) == (_MODULE, "_MEM_FORMAT_ENCODING"):
            return _MEM_FORMAT_ENCODING
        if module == "torch":
            if name == "Size":
                return torch.Size
            value = vars(torch).get(name) if not name.startswith("_") else None
            if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
                return value
        if (module, name) == ("torch.serialization", "_get_layout"):
            return _GET_LAYOUT
        if module == "pathlib" and name in _PATHS:
            return _PATHS[name]
        if (module, name) == ("collections", "OrderedDict"):
            return _ORDERED_DICT
        raise PickleRefused(f"global {module}.{name} is not allowed in DCP metadata")

    def call(self, func, args):
        self.charge(len(args))
        if func is torch.Size and len(args) == 1:
            self.charge(len(args[0]) if type(args[0]) in (list, tuple) else 0)
            return _size(args[0])
        if func is _MEM_FORMAT_ENCODING and len(args) == 1 and type(args[0]) is int:
            return _MEM_FORMAT_ENCODING(args[0])
        if func is _GET_LAYOUT and len(args) == 1 and args[0] in _LAYOUTS:
            return _LAYOUTS[args[0]]
        if func in (PurePosixPath, PureWindowsPath) and all(type(a) is str for a in args):
            return str(func(*args))
        if func is _ORDERED_DICT and not args:
            return {}
        raise PickleRefused(f"call of {getattr(func, '__name__', type(func).__name__)}")

    def new(self, cls, args):
        if cls in _FIELDS and args == ():
            return cls.__new__(cls)
        raise PickleRefused(f"new {getattr(cls, '__name__', type(cls).__name__)} object")

    def build(self, obj, state):
        cls = type(obj)
        if cls is TensorProperties:
            if type(state) is not tuple or len(state) != 5:
                raise PickleRefused("TensorProperties state is not a 5-tuple")
            dtype, layout, requires_grad, fmt, pin = state
            if not isinstance(dtype, torch.dtype) or not isinstance(layout, torch.layout):
                raise PickleRefused("TensorProperties without a dtype and layout")
            if not isinstance(fmt, _MEM_FORMAT_ENCODING):
                raise PickleRefused("TensorProperties without a memory format")
            obj.__setstate__((dtype, layout, bool(requires_grad), fmt, bool(pin)))
            return
        fields = _FIELDS.get(cls)
        if fields is None or type(state) is not dict or not set(state) <= fields:
            raise PickleRefused(f"state of {cls.__name__}")
        self.charge(len(state))
        if cls is MetadataIndex:  # hashed as a dict key: only checked values
            _optional(state.get("fqn"), str, "MetadataIndex.fqn")
            _optional(state.get("offset"), torch.Size, "MetadataIndex.offset")
            _optional(state.get("index"), int, "MetadataIndex.index")
        for k, v in state.items():
            object.__setattr__(obj, k, v)

    def key_ok(self, key):
        kind = type(key)
        if kind is MetadataIndex:
            return type(getattr(key, "fqn", None)) is str
        return kind is str or kind in PLAIN_KEYS


def read_metadata(folder: str) -> Metadata:
    """The checked ``Metadata`` of the DCP folder ``folder`` (see the module docstring)."""
    path = os.path.join(folder, ".metadata")
    data = read_limited(path, MAX_METADATA, "DCP metadata ")
    try:
        md = _MetadataReader(data, max_work=MAX_METADATA_WORK).load()
        return _checked(md)
    except PickleRefused as exc:
        raise CheckpointError(f"DCP metadata refused: {exc}", file=path) from None
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        msg = str(exc).splitlines()[0][:120] if str(exc) else ""
        raise CheckpointError(
            f"DCP metadata refused: {type(exc).__name__}: {msg}", file=path
        ) from None


def _checked(md) -> Metadata:
    """A new ``Metadata`` from the checked parts of ``md``."""
    if type(md) is not Metadata:
        raise PickleRefused(f"holds a {type(md).__name__}, not a Metadata")
    sdm = getattr(md, "state_dict_metadata", None)
    storage = getattr(md, "storage_data", None)
    if type(sdm) is not dict or type(storage) is not dict:
        raise PickleRefused("no state_dict_metadata or storage_data dict")
    entries = {}
    for name, meta in sdm.items():
        if type(name) is not str:
            raise PickleRefused(f"entry name of type {type(name).__name__}")
        if type(meta) is BytesStorageMetadata:
            entries[name] = BytesStorageMetadata()
        elif type(meta) is TensorStorageMetadata:
            entries[name] = _checked_tensor(name, meta)
        else:
            raise PickleRefused(f"entry {name[:80]!r} is a {type(meta).__name__}")
    items = dict(_checked_item(key, info) for key, info in storage.items())
    version = getattr(md, "version", None)
    return Metadata(
        state_dict_metadata=entries,
        planner_data=None,
        storage_data=items,
        storage_meta=StorageMeta(),
        version=version if type(version) is str else None,
    )


def _checked_item(key, info) -> tuple[MetadataIndex, _StorageInfo]:
    """A new storage item (its index and info) from the checked parts of one."""
    fqn, offset = getattr(key, "fqn", None), getattr(key, "offset", None)
    if type(key) is not MetadataIndex or type(fqn) is not str or type(offset) is not torch.Size:
        raise PickleRefused("storage_data key is not a MetadataIndex of a name and offsets")
    if type(info) is not _StorageInfo:
        raise PickleRefused(f"storage item of {fqn[:80]!r} is a {type(info).__name__}")
    rel, off, n = (getattr(info, a, None) for a in ("relative_path", "offset", "length"))
    if type(rel) is not str or not all(type(x) is int and 0 <= x < _U63 for x in (off, n)):
        raise PickleRefused(f"storage item of {fqn[:80]!r} has no path, offset, length")
    td = getattr(info, "transform_descriptors", None)
    if td is not None and (type(td) not in (list, tuple) or any(type(t) is not str for t in td)):
        raise PickleRefused(f"storage item of {fqn[:80]!r}: bad transform descriptors")
    return MetadataIndex(fqn, offset), _StorageInfo(rel, off, n, td)


def _checked_tensor(name: str, meta) -> TensorStorageMetadata:
    props, size, chunks = (getattr(meta, a, None) for a in ("properties", "size", "chunks"))
    if type(props) is not TensorProperties or not isinstance(
        getattr(props, "dtype", None), torch.dtype
    ):
        raise PickleRefused(f"tensor {name[:80]!r} has no dtype")
    if type(size) is not torch.Size or type(chunks) is not list:
        raise PickleRefused(f"tensor {name[:80]!r} has no size and chunk list")
    checked = []
    for c in chunks:
        offsets, sizes = getattr(c, "offsets", None), getattr(c, "sizes", None)
        if (
            type(c) is not ChunkStorageMetadata
            or type(offsets) is not torch.Size
            or type(sizes) is not torch.Size
            or len(offsets) != len(size)
            or len(sizes) != len(size)
            or any(o + s > d for o, s, d in zip(offsets, sizes, size))
        ):
            raise PickleRefused(f"tensor {name[:80]!r} has a chunk outside its size")
        checked.append(ChunkStorageMetadata(offsets=offsets, sizes=sizes))
    return TensorStorageMetadata(TensorProperties(dtype=props.dtype), size, checked)


def check_items(folder: str, md: Metadata, names) -> None:
    """Every chunk of every tensor in ``names`` has a stored item inside a regular file of
    ``folder``, without stream transforms (see the module docstring)."""
    sizes: dict[str, int] = {}
    for name in names:
        for chunk in md.state_dict_metadata[name].chunks:
            info = md.storage_data.get(MetadataIndex(name, chunk.offsets))
            if info is None:
                raise CheckpointError(
                    f"DCP metadata has no stored item for the chunk at {list(chunk.offsets)}",
                    file=folder,
                    tensor=name,
                )
            _check_item(folder, name, info, sizes)


def _check_item(folder: str, name: str, info: _StorageInfo, sizes: dict[str, int]) -> None:
    rel = info.relative_path
    if rel in (".", "..") or not rel or any(c in rel for c in "/\\\0"):
        raise CheckpointError(
            f"stored item file {rel[:80]!r} is not a file name in the checkpoint folder",
            file=folder,
            tensor=name,
        )
    f = os.path.join(folder, rel)
    if rel not in sizes:
        sizes[rel] = require_regular(f).st_size
        if os.path.dirname(os.path.realpath(f)) != os.path.realpath(folder):
            raise CheckpointError(
                "is a link out of the checkpoint folder; refused", file=f, tensor=name
            )
    end = info.offset + info.length
    if end > sizes[rel]:
        raise CheckpointError(
            f"stored item at bytes {info.offset}-{end} runs past the end of the file "
            f"({sizes[rel]} bytes): truncated",
            file=f,
            tensor=name,
        )
    if info.transform_descriptors:
        raise CheckpointError(
            f"stored item needs stream transforms {list(info.transform_descriptors)}; "
            "not supported",
            file=f,
            tensor=name,
        )


class _Window(io.RawIOBase):
    """Bytes ``[offset, offset + length)`` of the open file ``f``, as a file."""

    def __init__(self, f, offset: int, length: int):
        self._f, self._start, self._len, self._pos = f, offset, length, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, pos, whence=0):
        base = (0, self._pos, self._len)[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, b):
        n = max(0, min(len(b), self._len - self._pos))
        self._f.seek(self._start + self._pos)
        got = self._f.readinto(memoryview(b)[:n]) if n else 0
        self._pos += got
        return got


class _RegularFiles(FileSystem):
    @contextmanager
    def create_stream(self, path, mode):
        if mode != "rb":
            raise CheckpointError(f"opened with mode {mode!r}; only reads", file=str(path))
        with open_regular(path) as f:
            yield f


class _CheckedReader(FileSystemReader):
    """``FileSystemReader`` on checked metadata: see the module docstring."""

    def __init__(self, folder: str, md: Metadata, tensor: str):
        super().__init__(folder)
        self.fs = _RegularFiles()
        self._md = md
        self._tensor = tensor

    def read_metadata(self, *args, **kwargs) -> Metadata:
        return self._md

    def _slice_file(self, file, sinfo):
        f = os.path.join(str(self.path), sinfo.relative_path)
        label = f"{f} (stored item at bytes {sinfo.offset}-{sinfo.offset + sinfo.length})"
        window = _Window(file, sinfo.offset, sinfo.length)
        check_zip_records(label, fileobj=window, tensor=self._tensor, require_zip=True)
        return super()._slice_file(file, sinfo)


class _TensorsOnly(DefaultLoadPlanner):
    def load_bytes(self, read_item, value):
        raise CheckpointError(f"DCP bytes item {read_item.dest_index.fqn[:80]!r} refused")


def load(folder: str, md: Metadata, state_dict: dict) -> None:
    """``dcp.load(state_dict)`` from ``folder`` with the checked metadata ``md``; every
    failure one :class:`CheckpointError`."""
    import torch.distributed.checkpoint as dcp

    (name,) = state_dict
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.load(
                state_dict,
                storage_reader=_CheckedReader(folder, md, name),
                planner=_TensorsOnly(),
                no_dist=True,
            )
    except CheckpointError:
        raise
    except (Exception, CheckpointException) as exc:
        raise _one_line(exc, folder, name) from None


def _one_line(exc: BaseException, folder: str, name: str) -> CheckpointError:
    if isinstance(exc, CheckpointException):
        inner = [e for e, _ in exc.failures.values() if isinstance(e, BaseException)]
        mine = [e for e in inner if isinstance(e, CheckpointError)]
        if mine:
            return CheckpointError(str(mine[0]))
        if inner:
            exc = inner[0]
    text = str(exc).strip()
    msg = text.splitlines()[0] if text else ""
    return CheckpointError(f"read failed: {type(exc).__name__}: {msg}", file=folder, tensor=name)
