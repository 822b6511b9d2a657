"""Check a torch zip checkpoint's records before ``torch.load(mmap=True)`` maps them.

A memory-mapped load takes each storage's bytes straight from its record's offset in the
file: it never looks at the record's compression or size. A record stored compressed is
read as raw bytes, and one shorter than its storage reads past its end; both load garbage
without an error (``torch.load`` without ``mmap`` refuses the second). So before the load,
every storage ``data.pkl`` names is checked against the zip's own directory: its record
must exist, be stored uncompressed, and hold exactly the storage's bytes.

``data.pkl`` is read by a :class:`~metalint.loader.pickles.PickleReader` that builds
nothing: every global it names is a stand-in that records which storage each tensor uses,
so no code of the checkpoint runs, and the work it may do is bounded (no nested-pickle
blow-up). The zip's central directory and ``data.pkl`` are bounded before they are unpacked
(a zip bomb is refused by its declared size and compression ratio). Every failure is a
:class:`~metalint.loader.errors.CheckpointError` naming the file and the tensor.
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass

from metalint.loader.errors import CheckpointError
from metalint.loader.pickles import PickleReader, PickleRefused
from metalint.loader.safeio import open_regular

#: the most bytes ``data.pkl`` may unpack to (about 300k tensors)
MAX_DATA_PKL = 64 * 2**20
#: the most a compressed ``data.pkl`` may grow when unpacked (torch.save stores it as is)
MAX_PKL_RATIO = 100
#: the most bytes of a zip's central directory (about 200k records)
MAX_ZIP_DIRECTORY = 16 * 2**20

#: storage class name (``torch.FloatStorage``...) -> bytes per element
_STORAGE_ITEMSIZE = {
    "UntypedStorage": 1,
    "ByteStorage": 1,
    "CharStorage": 1,
    "BoolStorage": 1,
    "QUInt8Storage": 1,
    "QInt8Storage": 1,
    "QUInt4x2Storage": 1,
    "QUInt2x4Storage": 1,
    "ShortStorage": 2,
    "HalfStorage": 2,
    "BFloat16Storage": 2,
    "IntStorage": 4,
    "FloatStorage": 4,
    "QInt32Storage": 4,
    "LongStorage": 8,
    "DoubleStorage": 8,
    "ComplexFloatStorage": 8,
    "ComplexDoubleStorage": 16,
}

_COMPRESSION = {
    zipfile.ZIP_DEFLATED: "DEFLATE",
    zipfile.ZIP_BZIP2: "BZIP2",
    zipfile.ZIP_LZMA: "LZMA",
}


class _Node:
    """Stands for any object ``data.pkl`` builds: keeps the argument tuple it was built from
    (shared, never copied), so the storages under it are found by one walk at the end."""

    __slots__ = ("args",)

    def __init__(self, args: tuple):
        self.args = args


_U63 = 2**63

#: what every global but a storage type and ``OrderedDict`` stands for
_ANY_GLOBAL = _Node(())
_ORDERED_DICT = _Node(())


@dataclass
class _Storage:
    key: str
    nbytes: int | None
    tensor: str | None = None


class _StorageType:
    def __init__(self, name: str):
        self.name = name


class _Scanner(PickleReader):
    """Reads ``data.pkl`` building nothing but dicts, lists, tuples, plain values and
    :class:`_Node` stand-ins; persistent ids become :class:`_Storage` records."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module, name):
        if module in ("torch", "torch.storage") and name.endswith("Storage"):
            return _StorageType(name)
        if (module, name) == ("collections", "OrderedDict"):
            return _ORDERED_DICT
        return _ANY_GLOBAL

    def call(self, func, args):
        # The stand-in shares ``args``; the real constructor that ``torch.load`` calls next
        # may copy them (``OrderedDict(pairs)``): charge what it would copy, so one big
        # argument reused through the memo cannot make that reader's work explode.
        self.charge(len(args) + sum(len(a) for a in args if type(a) in (tuple, list, dict)))
        # a state_dict() is an OrderedDict: a dict here, so its items are kept
        return {} if func is _ORDERED_DICT and not args else _Node(args)

    def build(self, obj, state):
        # an OrderedDict's _metadata, a stand-in's state: not needed, but torch.load sets it
        self.charge(len(state) if type(state) in (tuple, list, dict) else 1)

    def append_to(self, target, items):
        if type(target) is list:
            target.extend(items)

    def set_items(self, target, pairs):
        if type(target) is dict:
            super().set_items(target, pairs)

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
            raise PickleRefused(f"unknown persistent id {pid!r:.60}")
        _, stype, key, _location, numel = pid[:5]
        if type(key) is not str and not (type(key) is int and 0 <= key < _U63):
            raise PickleRefused(f"storage key of type {type(key).__name__}")
        if type(numel) is not int or not 0 <= numel < _U63:
            raise PickleRefused(f"storage {key!s:.40} of {type(numel).__name__} elements")
        key = str(key)
        size = _STORAGE_ITEMSIZE.get(stype.name) if isinstance(stype, _StorageType) else None
        nbytes = numel * size if size is not None else None
        s = self.storages.get(key)
        if s is None:
            s = self.storages[key] = _Storage(key, nbytes)
        return s


def _claim_storages(obj) -> None:
    """Name each storage after the first entry of the top-level dict whose value uses it.
    One walk with one set of visited argument tuples: linear in what the pickle built,
    however its objects share each other."""
    if not isinstance(obj, dict):
        return
    seen: set[int] = set()
    for name, value in obj.items():
        todo = [value]
        while todo:
            v = todo.pop()
            if isinstance(v, _Storage):
                if v.tensor is None:  # a key is a plain value; str() of a huge int raises
                    v.tensor = name if type(name) is str else f"<{type(name).__name__} key>"
            elif isinstance(v, _Node) and id(v.args) not in seen:
                seen.add(id(v.args))
                todo.extend(a for a in v.args if isinstance(a, (_Node, _Storage)))


def _zip_directory_size(fp) -> int | None:
    """The size of the zip's central directory, from its end record (None: not a zip)."""
    end_record = getattr(zipfile, "_EndRecData", None)
    if end_record is None:  # pragma: no cover - every CPython since 2.x has it
        return 0
    try:
        endrec = end_record(fp)
    except (OSError, ValueError, struct.error):
        return None
    return None if not endrec else int(endrec[zipfile._ECD_SIZE])


def check_zip_records(
    path: str, fileobj=None, *, tensor: str | None = None, require_zip: bool = False
) -> None:
    """Raise :class:`CheckpointError` unless every storage of the torch zip at ``path`` (or
    in ``fileobj``, then ``path`` names it in messages) has an uncompressed record of exactly
    its size. A file that is not a zip is left to ``torch.load`` (which names what it is),
    unless ``require_zip``. ``tensor`` is named in errors about a storage no entry claims.

    Bounded before anything is unpacked: the central directory (at most
    :data:`MAX_ZIP_DIRECTORY` bytes), ``data.pkl`` (at most :data:`MAX_DATA_PKL` bytes and
    :data:`MAX_PKL_RATIO` times its compressed size), and the pickle's own work
    (:class:`~metalint.loader.pickles.PickleReader`)."""
    own = fileobj is None
    fp = open_regular(path) if own else fileobj
    try:
        _check_zip(path, fp, tensor, require_zip)
    finally:
        if own:
            fp.close()


def _check_zip(path: str, fp, tensor: str | None, require_zip: bool) -> None:
    size_cd = _zip_directory_size(fp)
    if size_cd is None:
        if require_zip:
            raise CheckpointError("not a torch zip", file=path, tensor=tensor)
        return
    if size_cd > MAX_ZIP_DIRECTORY:
        raise CheckpointError(
            f"zip central directory of {size_cd} bytes is over the {MAX_ZIP_DIRECTORY}-byte limit",
            file=path,
        )
    try:
        fp.seek(0)
        zf = zipfile.ZipFile(fp)
    except zipfile.BadZipFile as exc:
        if require_zip:
            raise CheckpointError(f"not a torch zip: {exc}", file=path, tensor=tensor) from None
        return
    except (OSError, ValueError, EOFError, NotImplementedError, struct.error) as exc:
        # NotImplementedError: a directory entry needing a zip version zipfile lacks
        raise CheckpointError(f"not a readable zip archive: {exc}", file=path) from None
    with zf:
        infos = zf.infolist()
        pkls = [i for i in infos if i.filename.rsplit("/", 1)[-1] == "data.pkl"]
        if len(pkls) != 1:
            raise CheckpointError(
                f"a torch zip holds one data.pkl record, this one {len(pkls)}", file=path
            )
        prefix = pkls[0].filename[: -len("data.pkl")]
        records = {
            i.filename[len(prefix) + len("data/") :]: i
            for i in infos
            if i.filename.startswith(prefix + "data/")
        }
        scanner = _Scanner(_read_data_pkl(path, zf, pkls[0]))
        try:
            obj = scanner.load()
        except PickleRefused as exc:
            raise CheckpointError(f"data.pkl refused: {exc}", file=path) from None
        _claim_storages(obj)
        for s in scanner.storages.values():
            s.tensor = s.tensor or tensor
        _check_storages(path, zf, scanner.storages, records, prefix)


def _read_data_pkl(path: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """``data.pkl``'s bytes, refused before decompression when its declared size or
    compression ratio is over the limit, and cut at the limit whatever it declares."""
    where = f"record {info.filename}"
    if info.file_size > MAX_DATA_PKL:
        raise CheckpointError(
            f"{where} unpacks to {info.file_size} bytes, over the {MAX_DATA_PKL}-byte limit",
            file=path,
        )
    if info.compress_type != zipfile.ZIP_STORED and info.file_size > MAX_PKL_RATIO * max(
        info.compress_size, 1
    ):
        raise CheckpointError(
            f"{where} unpacks {info.compress_size} bytes to {info.file_size} (over "
            f"{MAX_PKL_RATIO}x): refused as a zip bomb",
            file=path,
        )
    try:
        with zf.open(info) as f:
            data = f.read(MAX_DATA_PKL + 1)
    except Exception as exc:  # noqa: BLE001 (BadZipFile, zlib.error, OSError, ...)
        msg = str(exc).splitlines()[0] if str(exc) else ""
        raise CheckpointError(
            f"data.pkl cannot be read: {type(exc).__name__}: {msg}", file=path
        ) from None
    if len(data) > MAX_DATA_PKL:
        raise CheckpointError(f"{where} unpacks to over the {MAX_DATA_PKL}-byte limit", file=path)
    return data


def _check_storages(path, zf, storages, records, prefix) -> None:
    for s in storages.values():
        tensor = s.tensor
        info = records.get(s.key)
        where = f"record {prefix}data/{s.key}"
        if info is None:
            raise CheckpointError(f"{where} is missing", file=path, tensor=tensor)
        if info.compress_type != zipfile.ZIP_STORED:
            kind = _COMPRESSION.get(info.compress_type, f"method {info.compress_type}")
            raise CheckpointError(
                f"{where} is stored {kind}-compressed; a memory-mapped load would read the "
                "compressed bytes as data (re-save it with torch.save)",
                file=path,
                tensor=tensor,
            )
        if s.nbytes is None:
            raise CheckpointError(f"{where}: unknown storage type", file=path, tensor=tensor)
        if info.file_size != s.nbytes or info.compress_size != s.nbytes:
            raise CheckpointError(
                f"{where} holds {info.file_size} bytes, its storage needs {s.nbytes}",
                file=path,
                tensor=tensor,
            )
        try:  # the record's own header, from which a load finds its bytes, is intact
            with zf.open(info):
                pass
        except Exception as exc:  # noqa: BLE001 (BadZipFile, OSError, ...)
            raise CheckpointError(f"{where}: {exc}", file=path, tensor=tensor) from None
