"""Which dtype each loaded tensor ends up in.

The policy, explicit:

- ``dtype=None``: every tensor keeps the dtype the *module* gave it, whatever the checkpoint
  holds (this is what ``load_state_dict`` does, since it ``copy_``-s into the module's tensor;
  it is *not* what ``load_state_dict(assign=True)`` does, which takes the checkpoint's dtype).
- ``dtype=torch.bfloat16`` (or any floating dtype): floating-point tensors become that dtype;
  integer, bool and complex tensors keep the module's dtype (never cast by the policy).
- ``keep_in_fp32``: patterns of module path *segments*. ``"norm"`` matches
  ``layers.0.norm.weight`` but not ``layers.0.prenorm.weight``; a dotted pattern
  (``"attn.norm"``) matches a contiguous run of segments. A floating tensor that matches stays
  (or becomes) ``float32``, even when ``dtype`` is ``None``.

The policy decides from the module tensor's dtype, never from the checkpoint's, so the same
model gets the same dtypes from a fp32 or a bf16 checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

DTYPE_NAMES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
    "fp64": torch.float64,
    "float64": torch.float64,
}


def parse_dtype(value) -> torch.dtype | None:
    if value is None or isinstance(value, torch.dtype):
        if isinstance(value, torch.dtype) and not value.is_floating_point:
            raise ValueError(f"dtype must be a floating dtype, got {value}")
        return value
    key = str(value).lower().removeprefix("torch.")
    if key not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {value!r}; choose one of bf16, fp16, fp32, fp64")
    return DTYPE_NAMES[key]


def segment_match(pattern: str, name: str) -> bool:
    """True if the dotted ``pattern`` is a contiguous run of the segments of ``name``."""
    pat = [p for p in pattern.split(".") if p]
    seg = name.split(".")
    if not pat:
        return False
    n = len(pat)
    return any(seg[i : i + n] == pat for i in range(len(seg) - n + 1))


@dataclass(frozen=True)
class DtypePolicy:
    dtype: torch.dtype | None = None
    keep_in_fp32: tuple[str, ...] = ()

    @classmethod
    def make(cls, dtype=None, keep_in_fp32: Iterable[str] | str = ()) -> DtypePolicy:
        if isinstance(keep_in_fp32, str):
            keep_in_fp32 = (keep_in_fp32,)
        return cls(parse_dtype(dtype), tuple(keep_in_fp32))

    def keeps_fp32(self, name: str) -> bool:
        return any(segment_match(p, name) for p in self.keep_in_fp32)

    def target(self, name: str, module_dtype: torch.dtype) -> torch.dtype:
        """The dtype the tensor ``name`` has after loading, given the module's dtype."""
        if not module_dtype.is_floating_point:
            return module_dtype
        if self.keeps_fp32(name):
            return torch.float32
        return self.dtype if self.dtype is not None else module_dtype
