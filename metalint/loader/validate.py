"""Validate a safetensors header before anything is read from the file.

Pure Python, no torch. The rules are those of safetensors' own Rust ``read_metadata`` and
``Metadata::validate`` (``safetensors/src/tensor.rs``):

- the file holds at least the 8-byte little-endian u64 header length ``N``;
- ``N`` <= 100,000,000 and ``8 + N`` <= file size;
- the header is UTF-8, starts with ``{`` and is one JSON object (trailing whitespace allowed);
- ``__metadata__`` (optional) maps str to str;
- every other key is a tensor: ``dtype`` (a known safetensors dtype), ``shape`` (list of
  non-negative ints), ``data_offsets`` ``[begin, end]`` relative to the byte buffer after the
  header;
- sorted by offsets, tensors are contiguous from 0 without holes or overlap, and the last one
  ends exactly at the end of the file;
- ``prod(shape) * bits(dtype)`` is a whole number of bytes equal to ``end - begin``, computed
  with overflow checks at u64 (``usize``) width.

Bounded before the JSON is parsed (a header of ``N`` bytes of tiny objects would take many
times ``N`` in memory): at most :data:`MAX_TENSORS` tensors (counted by the ``{`` bytes: every
tensor is a JSON object) and :data:`MAX_JSON_VALUES` JSON values (bounded by the ``{``, ``[``
and ``,`` bytes); the file is opened only when it is a regular file.

Stricter than safetensors in three places (the limits above, and two that (both would be silent surprises otherwise): duplicate
JSON keys and non-finite JSON constants (``NaN``) are rejected). The sub-byte dtypes (``F4``,
``F6_*``) pass this validation but the loader refuses them (no plain torch dtype holds them).

Every failure raises :class:`~metalint.loader.errors.CheckpointError` with one line naming the
file and, when there is one, the tensor.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

from metalint.loader.errors import CheckpointError
from metalint.loader.safeio import open_regular

MAX_HEADER_SIZE = 100_000_000
#: the most tensors one safetensors file may hold
MAX_TENSORS = 200_000
#: the most JSON values its header may hold (a tensor has about 5 + its number of dims)
MAX_JSON_VALUES = 16 * MAX_TENSORS
U64_MAX = 2**64 - 1

#: safetensors dtype name -> bits per element (safetensors 0.6+ knows the sub-byte ones too)
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lies in a safetensors file (offsets are absolute file offsets)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsHeader:
    path: str
    header_size: int
    data_start: int
    file_size: int
    tensors: dict[str, TensorEntry]
    metadata: dict[str, str] | None


def _fail(path, message, tensor=None):
    raise CheckpointError(message, file=str(path), tensor=tensor)


def _no_duplicates(path):
    def hook(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                _fail(path, f"invalid header: duplicate JSON key {k!r}")
            out[k] = v
        return out

    return hook


def _reject_constant(path):
    def hook(name):
        _fail(path, f"invalid header: non-standard JSON constant {name}")

    return hook


def _is_u64(x) -> bool:
    return type(x) is int and 0 <= x <= U64_MAX


def parse_header_bytes(path, head: bytes, file_size: int) -> SafetensorsHeader:
    """Validate ``head`` (the first ``8 + N`` bytes, or fewer if the file is short)."""
    n, obj = _header_object(path, head, file_size)
    stop = 8 + n
    metadata = _metadata(path, obj.pop("__metadata__", None))
    entries = [_entry(path, name, info) for name, info in obj.items()]
    _check_layout(path, entries, file_size - stop)
    tensors = {
        e.name: TensorEntry(e.name, e.dtype, e.shape, stop + e.begin, stop + e.end) for e in entries
    }
    return SafetensorsHeader(str(path), n, stop, file_size, tensors, metadata)


def _header_object(path, head: bytes, file_size: int) -> tuple[int, dict]:
    """The header's length ``N`` and its JSON object."""
    if file_size < 8 or len(head) < 8:
        _fail(path, f"file too small for a safetensors header ({file_size} bytes, need >= 8)")
    (n,) = struct.unpack("<Q", head[:8])
    if n > MAX_HEADER_SIZE:
        _fail(path, f"header length {n} is over the {MAX_HEADER_SIZE}-byte limit")
    if 8 + n > file_size:
        _fail(path, f"header length {n} runs past the end of the file ({file_size} bytes)")
    raw = head[8 : 8 + n]
    if len(raw) != n:
        _fail(path, f"header truncated: read {len(raw)} of {n} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        _fail(path, f"header is not valid UTF-8 (byte {e.start})")
    if not text.startswith("{"):
        _fail(path, "header does not start with '{'")
    _check_size_of_structure(path, raw)
    try:
        obj = json.loads(
            text.rstrip(" \t\r\n"),
            object_pairs_hook=_no_duplicates(path),
            parse_constant=_reject_constant(path),
        )
    except CheckpointError:
        raise
    except (ValueError, RecursionError) as e:
        _fail(path, f"header is not valid JSON: {(str(e) or type(e).__name__).splitlines()[0]}")
    if not isinstance(obj, dict):
        _fail(path, "header is not a JSON object")
    return n, obj


def _check_size_of_structure(path, raw: bytes) -> None:
    """Refuse a header with more tensors or JSON values than the limits, before parsing it.
    Structural ``{ [ ,`` cannot be escaped in JSON, so their counts bound what it holds."""
    objects = raw.count(b"{")
    if objects > MAX_TENSORS + 2:  # the header itself and __metadata__
        _fail(path, f"header holds up to {objects - 1} tensors, over the {MAX_TENSORS} limit")
    values = objects + raw.count(b"[") + raw.count(b",")
    if values > MAX_JSON_VALUES:
        _fail(path, f"header holds up to {values} JSON values, over the {MAX_JSON_VALUES} limit")


def _metadata(path, metadata) -> dict[str, str] | None:
    if metadata is not None and (
        not isinstance(metadata, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        _fail(path, "invalid header: __metadata__ must map strings to strings")
    return metadata


def _entry(path, name: str, info) -> TensorEntry:
    """One tensor's header entry (offsets relative to the data after the header)."""
    if not isinstance(info, dict):
        _fail(path, "invalid header: tensor info is not an object", name)
    for key in ("dtype", "shape", "data_offsets"):
        if key not in info:
            _fail(path, f"invalid header: missing {key!r}", name)
    dtype = info["dtype"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        _fail(path, f"unknown dtype {dtype!r}", name)
    shape = info["shape"]
    if not isinstance(shape, list) or not all(_is_u64(d) for d in shape):
        _fail(path, f"invalid shape {shape!r} (need a list of non-negative integers)", name)
    offsets = info["data_offsets"]
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_u64(o) for o in offsets):
        _fail(path, f"invalid data_offsets {offsets!r} (need [begin, end])", name)
    return TensorEntry(name, dtype, tuple(shape), offsets[0], offsets[1])


def _nbytes(path, e: TensorEntry) -> int:
    """``prod(shape) * bits(dtype) / 8``, with safetensors' 64-bit overflow checks."""
    numel = 1
    for d in e.shape:
        numel *= d
        if numel > U64_MAX:
            _fail(path, f"shape {list(e.shape)} overflows 64-bit element count", e.name)
    nbits = numel * DTYPE_BITS[e.dtype]
    if nbits > U64_MAX:
        _fail(path, f"shape {list(e.shape)} x {e.dtype} overflows 64-bit byte count", e.name)
    if nbits % 8:
        _fail(path, f"shape {list(e.shape)} x {e.dtype} is not a whole number of bytes", e.name)
    return nbits // 8


def _check_layout(path, entries: list[TensorEntry], buffer: int) -> None:
    """Sorted by offsets (as ``Metadata::new`` does), the tensors tile the ``buffer`` bytes
    after the header from 0, without holes or overlap, each of exactly its size."""
    entries.sort(key=lambda e: (e.begin, e.end))
    start = 0
    for e in entries:
        if e.begin != start or e.end < e.begin:
            kind = "overlaps the previous tensor" if e.begin < start else "leaves a hole"
            if e.end < e.begin:
                kind = "ends before it begins"
            _fail(
                path, f"data_offsets [{e.begin}, {e.end}] {kind} (expected begin {start})", e.name
            )
        start = e.end
        nbytes = _nbytes(path, e)
        if e.end - e.begin != nbytes:
            _fail(
                path,
                f"shape {list(e.shape)} x {e.dtype} is {nbytes} bytes but data_offsets "
                f"span {e.end - e.begin}",
                e.name,
            )
    if start != buffer:
        what = "truncated" if start > buffer else "has trailing bytes no tensor covers"
        _fail(
            path, f"data {what}: tensors cover {start} bytes, file holds {buffer} after the header"
        )


def read_header(path) -> SafetensorsHeader:
    """Read and validate the header of the safetensors file at ``path``."""
    with open_regular(path) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) == 8:
                (n,) = struct.unpack("<Q", head)
                if n <= MAX_HEADER_SIZE and 8 + n <= size:
                    head += f.read(n)
        except OSError as e:
            _fail(path, f"cannot read: {e.strerror or e}")
    return parse_header_bytes(path, head, size)
