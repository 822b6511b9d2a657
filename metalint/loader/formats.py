"""Checkpoint formats, read one tensor at a time.

:func:`open_checkpoint` returns a :class:`Source`: every entry's name, shape and dtype known
up front (all headers validated before anything is read; only regular files are opened, see
:mod:`metalint.loader.safeio`), and ``read(name, dim, start, stop)``
that returns one tensor (or one slice along ``dim``) as a CPU tensor the caller owns.

- ``.safetensors`` file: header validated by :mod:`metalint.loader.validate`, tensors read with
  ``safetensors.safe_open(framework="pt")`` (``get_tensor``; ``get_slice`` for a shard, which
  reads only that shard's bytes).
- a folder with ``*.safetensors.index.json`` (``weight_map``), the index file itself, or a
  folder of ``*.safetensors`` files: every shard validated first.
- torch zip files (``.bin``, ``.pt``, ``.pth``; also ``pytorch_model.bin.index.json``):
  ``torch.load(mmap=True, weights_only=True)``, so nothing but tensors and plain containers is
  unpickled and the data stays in the page cache until one tensor is copied out.
- a ``torch.distributed.checkpoint`` folder (has ``.metadata``): shapes and dtypes from the
  metadata (read and checked by :mod:`metalint.loader.dcp`, never by plain ``pickle``), each
  tensor read with ``dcp.load(..., no_dist=True)`` into a one-entry state dict;
  inside an initialised process group that entry is a meta tensor that DCP materialises
  (PyTorch PR #113319), otherwise an empty CPU tensor of the stored dtype. A shard plan on a
  DCP folder reads the whole tensor, then keeps the rank's slice.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from metalint.loader.errors import CheckpointError
from metalint.loader.records import check_zip_records
from metalint.loader.safeio import not_regular, open_regular, read_limited, require_regular
from metalint.loader.validate import TensorEntry, read_header

ST_TO_TORCH: dict[str, torch.dtype] = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "U16": getattr(torch, "uint16", None),
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I32": torch.int32,
    "U32": getattr(torch, "uint32", None),
    "F32": torch.float32,
    "F64": torch.float64,
    "I64": torch.int64,
    "U64": getattr(torch, "uint64", None),
    "C64": torch.complex64,
    "F8_E5M2": getattr(torch, "float8_e5m2", None),
    "F8_E4M3": getattr(torch, "float8_e4m3fn", None),
    "F8_E8M0": getattr(torch, "float8_e8m0fnu", None),
}

TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
#: the most bytes an index file may hold (a 100k-tensor index is about 10 MB)
MAX_INDEX = 64 * 2**20


@dataclass(frozen=True)
class Entry:
    """One tensor in a checkpoint: where it is and what it looks like."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    file: str
    # byte range inside ``file`` for safetensors; None for other formats
    begin: int | None = None
    end: int | None = None

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * self.itemsize


def _slice_index(ndim: int, dim: int, start: int, stop: int):
    return tuple([slice(None)] * dim + [slice(start, stop)])


class Source:
    """A validated checkpoint; ``read`` returns owned CPU tensors, one at a time."""

    kind = "?"
    #: whether ``read`` returns a fresh tensor (True) or a view of file-backed memory (False)
    owned_reads = True

    def __init__(self, path: str):
        self.path = path
        self.entries: dict[str, Entry] = {}

    def read(self, name: str, dim: int | None = None, start: int = 0, stop: int = 0):
        raise NotImplementedError

    def read_box(self, name: str, box: tuple[slice, ...]):
        """The elements of ``name`` inside ``box`` (one slice per leading dim): a DTensor's
        local shard. Reads only those bytes where the format allows."""
        return self.read(name)[box].clone()

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SafetensorsSource(Source):
    kind = "safetensors"
    # safetensors >= 0.4 returns tensors backed by its mmap of the file
    owned_reads = False

    def __init__(self, path: str, files: list[str], weight_map: dict[str, str] | None = None):
        super().__init__(path)
        self._handles: dict[str, object] = {}
        headers = {f: read_header(f) for f in files}
        if weight_map is None:
            owner: dict[str, str] = {}
            for f, h in headers.items():
                for name in h.tensors:
                    if name in owner:
                        raise CheckpointError(
                            f"tensor is stored twice, in {owner[name]} and {f}",
                            file=path,
                            tensor=name,
                        )
                    owner[name] = f
            weight_map = owner
        for name, f in weight_map.items():
            te: TensorEntry | None = headers[f].tensors.get(name)
            if te is None:
                raise CheckpointError(
                    f"the index maps it to {os.path.basename(f)}, which does not hold it",
                    file=path,
                    tensor=name,
                )
            dtype = ST_TO_TORCH.get(te.dtype)
            if dtype is None:
                raise CheckpointError(
                    f"dtype {te.dtype} has no torch equivalent", file=f, tensor=name
                )
            self.entries[name] = Entry(name, te.shape, dtype, f, te.begin, te.end)

    def _handle(self, f: str):
        h = self._handles.get(f)
        if h is None:
            from safetensors import safe_open

            h = safe_open(f, framework="pt", device="cpu")
            self._handles[f] = h
        return h

    def read(self, name, dim=None, start=0, stop=0):
        e = self.entries[name]
        try:
            h = self._handle(e.file)
            if dim is None:
                return h.get_tensor(name)
            return h.get_slice(name)[_slice_index(len(e.shape), dim, start, stop)]
        except CheckpointError:
            raise
        except Exception as exc:  # OSError, SafetensorError, ...
            raise CheckpointError(
                f"read failed: {type(exc).__name__}: {exc}", file=e.file, tensor=name
            ) from exc

    def read_box(self, name, box):
        e = self.entries[name]
        try:
            return self._handle(e.file).get_slice(name)[box]
        except Exception as exc:
            raise CheckpointError(
                f"read failed: {type(exc).__name__}: {exc}", file=e.file, tensor=name
            ) from exc

    def close(self):
        for h in self._handles.values():
            close = getattr(h, "__exit__", None)
            if close is not None:
                try:
                    close(None, None, None)
                except Exception:
                    pass
        self._handles.clear()


def _torch_load(f: str) -> dict[str, torch.Tensor]:
    # a memory-mapped load trusts each record's offset and size: check them first
    require_regular(f)
    check_zip_records(f)
    try:
        obj = torch.load(f, map_location="cpu", mmap=True, weights_only=True)
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"torch.load(mmap=True, weights_only=True) failed: {msg}", file=f
        ) from exc
    if not isinstance(obj, dict):
        raise CheckpointError(f"holds a {type(obj).__name__}, not a state dict", file=f)
    for k, v in obj.items():
        if not isinstance(k, str):  # repr() of a key of 10**5000 raises
            raise CheckpointError(f"not a flat state dict: a key is a {type(k).__name__}", file=f)
        if not isinstance(v, torch.Tensor):
            raise CheckpointError(
                f"not a flat state dict: key {k!r} holds a {type(v).__name__}", file=f
            )
    return obj


class TorchZipSource(Source):
    kind = "torch"
    owned_reads = False

    def __init__(self, path: str, files: list[str], weight_map: dict[str, str] | None = None):
        super().__init__(path)
        self._sds: dict[str, dict[str, torch.Tensor]] = {f: _torch_load(f) for f in files}
        if weight_map is None:
            weight_map = {}
            for f, sd in self._sds.items():
                for name in sd:
                    if name in weight_map:
                        raise CheckpointError(
                            f"tensor is stored twice, in {weight_map[name]} and {f}",
                            file=path,
                            tensor=name,
                        )
                    weight_map[name] = f
        for name, f in weight_map.items():
            t = self._sds[f].get(name)
            if t is None:
                raise CheckpointError(
                    f"the index maps it to {os.path.basename(f)}, which does not hold it",
                    file=path,
                    tensor=name,
                )
            self.entries[name] = Entry(name, tuple(t.shape), t.dtype, f)

    def read(self, name, dim=None, start=0, stop=0):
        e = self.entries[name]
        t = self._sds[e.file][name]
        if dim is not None:
            t = t[_slice_index(len(e.shape), dim, start, stop)]
        # A view of the mmap-ed file: the caller's one cast/copy is the only allocation.
        return t

    def read_box(self, name, box):
        return self._sds[self.entries[name].file][name][box]

    def close(self):
        self._sds.clear()


class DCPSource(Source):
    kind = "dcp"

    def __init__(self, path: str):
        super().__init__(path)
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        from metalint.loader import dcp

        self.metadata = md = dcp.read_metadata(path)
        self.non_tensors: list[str] = []
        #: name -> stored chunks (offsets, sizes): what a sharded read overlaps
        self.chunks: dict[str, list] = {}
        for name, meta in md.state_dict_metadata.items():
            if isinstance(meta, TensorStorageMetadata):
                dtype = meta.properties.dtype
                self.entries[name] = Entry(name, tuple(meta.size), dtype, path)
                self.chunks[name] = list(meta.chunks)
            else:
                self.non_tensors.append(name)
        dcp.check_items(path, md, self.entries)

    def load_into(self, state_dict: dict) -> None:
        """``dcp.load`` of the one-entry ``state_dict`` (a tensor or a DTensor), checked."""
        from metalint.loader import dcp

        dcp.load(self.path, self.metadata, state_dict)

    def read(self, name, dim=None, start=0, stop=0):
        import torch.distributed as dist

        e = self.entries[name]
        distributed = dist.is_available() and dist.is_initialized()
        # Inside a process group DCP materialises a meta entry itself (PR #113319; it asks the
        # group for its device); without one it needs a real destination. Reads are local
        # (no_dist=True) either way: no collective per tensor, ranks need not be in lockstep.
        dev = "meta" if distributed else "cpu"
        sd = {name: torch.empty(e.shape, dtype=e.dtype, device=dev)}
        self.load_into(sd)
        t = sd.pop(name).cpu()
        if dim is not None:
            t = t[_slice_index(len(e.shape), dim, start, stop)].clone()
        return t


def _read_index(index: Path) -> dict[str, str]:
    """The index's ``weight_map``: tensor name -> the absolute path of the file holding it.
    Every file name is checked (a non-empty string, no NUL, not absolute, inside the index's
    folder, an existing file) before any is opened."""
    raw = read_limited(index, MAX_INDEX, "index ")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeError, ValueError, RecursionError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(f"cannot read index: {msg}", file=str(index)) from None
    wm = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wm, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in wm.items()
    ):
        raise CheckpointError(
            "index has no weight_map of tensor name -> file name", file=str(index)
        )
    root = index.parent.resolve()
    checked: dict[str, str] = {}
    return {name: _index_file(index, root, name, fname, checked) for name, fname in wm.items()}


def _index_file(index: Path, root: Path, name: str, fname: str, checked: dict[str, str]) -> str:
    """The path of the file ``fname`` an index names for tensor ``name``, or a
    CheckpointError naming both."""
    if fname in checked:
        return checked[fname]

    def fail(why: str):
        return CheckpointError(f"weight_map file {fname!r} {why}", file=str(index), tensor=name)

    if not fname or "\0" in fname:
        raise fail("is not a file name")
    if os.path.isabs(fname) or fname.startswith(("/", "\\")):
        raise fail("is an absolute path (an index names files in its own folder)")
    try:
        f = (index.parent / fname).resolve()
        mode = f.stat().st_mode if f.exists() else None
    except (OSError, ValueError, RuntimeError) as exc:
        raise fail(f"cannot be opened: {exc}") from None
    if root not in f.parents:
        raise fail("is outside the checkpoint folder")
    if mode is None:
        raise fail("does not exist")
    kind = not_regular(mode)
    if kind:
        raise fail(f"is {kind}, not a regular file; refused")
    checked[fname] = str(f)
    return str(f)


def _from_index(index: Path) -> Source:
    wm = _read_index(index)
    files = sorted(set(wm.values()))
    if index.name.endswith(".safetensors.index.json"):
        return SafetensorsSource(str(index), files, wm)
    return TorchZipSource(str(index), files, wm)


def _inside(folder: Path, files: list[str]) -> list[str]:
    """``files`` of ``folder``, refused when one is a link out of it (as an index's are)."""
    root = folder.resolve()
    for f in files:
        if Path(f).resolve().parent != root:
            raise CheckpointError("is a link out of the checkpoint folder; refused", file=f)
    return files


def open_checkpoint(checkpoint) -> Source:
    """Open and validate ``checkpoint`` (a file or folder); see the module docstring."""
    p = Path(checkpoint)
    if not p.exists():
        raise CheckpointError("no such file or folder", file=str(p))
    if p.is_dir():
        return _open_folder(p)
    require_regular(p)
    if p.name.endswith(".index.json"):
        return _from_index(p)
    if p.suffix == ".safetensors":
        return SafetensorsSource(str(p), [str(p)])
    if p.suffix in TORCH_SUFFIXES:
        return TorchZipSource(str(p), [str(p)])
    # Unknown suffix: sniff. A zip file starts with PK.
    with open_regular(p) as f:
        magic = f.read(2)
    if magic == b"PK":
        return TorchZipSource(str(p), [str(p)])
    return SafetensorsSource(str(p), [str(p)])


def _open_folder(p: Path) -> Source:
    """A checkpoint folder: DCP, an index (the usual names first), safetensors shards or
    torch files."""
    # exists, not is_file: a FIFO or device under a name the loader reads is refused
    # (by the reader, with one line) rather than passed over
    if (p / ".metadata").exists():
        return DCPSource(str(p))
    for preferred in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (p / preferred).exists():
            return _from_index(p / preferred)
    indexes = sorted(p.glob("*.safetensors.index.json"))
    if len(indexes) == 1:
        return _from_index(indexes[0])
    if len(indexes) > 1:
        names = ", ".join(i.name for i in indexes)
        raise CheckpointError(f"several index files ({names}); pass one of them", file=str(p))
    shards = sorted(str(f) for f in p.glob("*.safetensors"))
    if shards:
        return SafetensorsSource(str(p), _inside(p, shards))
    zips = sorted(str(f) for f in p.iterdir() if f.suffix in TORCH_SUFFIXES and f.is_file())
    if zips:
        return TorchZipSource(str(p), _inside(p, zips))
    raise CheckpointError(
        "folder holds no .safetensors, index.json, torch .bin/.pt or DCP .metadata",
        file=str(p),
    )


TORCH_TO_ST = {v: k for k, v in ST_TO_TORCH.items() if v is not None}


def save_safetensors(tensors: dict[str, torch.Tensor], path, metadata=None) -> None:
    """Write ``tensors`` as a safetensors file (used by tests and the benchmark).

    Uses ``safetensors.torch.save_file`` when it works (it needs numpy); otherwise writes the
    same layout (header padded to 8 bytes, tensors in order) through an mmap, one tensor at a
    time, so a large file needs no second copy in memory.
    """
    try:
        import numpy  # noqa: F401
        from safetensors.torch import save_file

        seen: set[int] = set()
        flat = {}
        for k, v in tensors.items():
            v = v.contiguous()
            ptr = v.untyped_storage().data_ptr()
            # tied tensors (an embedding shared with the head) are stored once each, as the
            # fallback writer below stores them: save_file refuses shared storage
            flat[k] = v.clone() if ptr in seen and v.numel() else v
            seen.add(ptr)
        return save_file(flat, str(path), metadata=metadata)
    except ImportError:
        pass
    import mmap
    import struct

    header: dict = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    off = 0
    for name, t in tensors.items():
        n = t.numel() * t.element_size()
        header[name] = {
            "dtype": TORCH_TO_ST[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [off, off + n],
        }
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    total = 8 + len(h) + off
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(total)
    if off == 0:
        return
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), total)
        try:
            for name, t in tensors.items():
                begin, end = header[name]["data_offsets"]
                if end > begin:
                    dst = torch.frombuffer(
                        mm, dtype=torch.uint8, count=end - begin, offset=8 + len(h) + begin
                    )
                    dst.copy_(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8))
                    del dst
            mm.flush()
        finally:
            mm.close()
