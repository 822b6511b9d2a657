"""Check a torch zip checkpoint's records before ``torch.load(mmap=True)`` maps them.

A memory-mapped load takes each storage's bytes straight from its record's offset in the
file: it never looks at the record's compression or size. A record stored compressed is
read as raw bytes, and one shorter than its storage reads past its end; both load garbage
without an error (``torch.load`` without ``mmap`` refuses the second). So before the load,
every storage ``data.pkl`` names is checked against the zip's own directory: its record
must exist, be stored uncompressed, and hold exactly the storage's bytes.

``data.pkl`` is read with an unpickler that builds nothing: every global it names is a
stand-in that records which storage each tensor uses, so no code of the checkpoint runs.
Every failure is a :class:`~metalint.loader.errors.CheckpointError` naming the file and
the tensor.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from dataclasses import dataclass, field

from metalint.loader.errors import CheckpointError

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


class _Stub:
    """Stands for any object ``data.pkl`` builds; remembers the storages under it."""

    def __init__(self, *args, **kwargs):
        self.storages = [a for a in (*args, *kwargs.values()) if isinstance(a, _Storage)]
        for a in (*args, *kwargs.values()):
            if isinstance(a, _Stub):
                self.storages += a.storages

    def __call__(self, *args, **kwargs):
        return _Stub(*args, **kwargs)

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass


class _OrderedDict(dict):
    """``collections.OrderedDict`` as ``data.pkl`` builds it: a ``state_dict()`` carries its
    ``_metadata`` as pickled state (a BUILD opcode), which a plain ``dict`` cannot take."""

    def __setstate__(self, state):
        pass


@dataclass
class _Storage:
    key: str
    nbytes: int | None
    tensors: list[str] = field(default_factory=list)


class _StorageType:
    def __init__(self, name: str):
        self.name = name


class _Scanner(pickle.Unpickler):
    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module, name):
        if module in ("torch", "torch.storage") and name.endswith("Storage"):
            return _StorageType(name)
        if (module, name) == ("collections", "OrderedDict"):
            return _OrderedDict
        return _Stub

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r:.60}")
        _, stype, key, _location, numel = pid[:5]
        key = str(key)
        size = _STORAGE_ITEMSIZE.get(stype.name) if isinstance(stype, _StorageType) else None
        nbytes = numel * size if isinstance(numel, int) and size is not None else None
        s = self.storages.get(key)
        if s is None:
            s = self.storages[key] = _Storage(key, nbytes)
        return s


def check_zip_records(path: str) -> None:
    """Raise :class:`CheckpointError` unless every storage of the torch zip at ``path`` has
    an uncompressed record of exactly its size. A file that is not a zip is left to
    ``torch.load`` (which names what it is)."""
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        return
    except (OSError, ValueError, EOFError, NotImplementedError) as exc:
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
        try:
            scanner = _Scanner(zf.read(pkls[0]))
            obj = scanner.load()
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 (any malformed pickle)
            raise CheckpointError(
                f"data.pkl cannot be read: {type(exc).__name__}: {exc}", file=path
            ) from None
        _check_storages(path, zf, obj, scanner.storages, records, prefix)


def _check_storages(path, zf, obj, storages, records, prefix) -> None:
    if isinstance(obj, dict):
        for name, value in obj.items():
            for s in getattr(value, "storages", ()):
                s.tensors.append(str(name))
    for s in storages.values():
        tensor = s.tensors[0] if s.tensors else None
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
