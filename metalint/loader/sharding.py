"""Shard plans for plain tensors: each rank reads only its slice of each tensor.

Sharded models are normally expressed as DTensors (FSDP2 ``fully_shard``,
``parallelize_module``): the loader reads each DTensor's local shard from its own mesh and
placements (:mod:`metalint.loader.distributed`) and needs no plan. A plan is for a model of
plain tensors, split by hand, with ``rank``/``world_size`` given or taken from the process
group.

A plan maps tensor-name patterns (``fnmatch`` on the full dotted name, first match wins) to a
placement:

- ``"replicate"``: every rank reads the whole tensor;
- ``"rows"``: split dim 0 (e.g. a column-parallel ``Linear`` weight ``[out, in]``);
- ``"cols"``: split dim 1 (e.g. a row-parallel ``Linear`` weight);
- ``Shard(dim)``: split any dim.

Names that match no pattern are replicated. Splits follow ``torch.chunk``: chunk size
``ceil(n / world_size)``, the last ranks may get fewer (or zero) rows, as DTensor does.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass


@dataclass(frozen=True)
class Replicate:
    def __str__(self) -> str:
        return "replicate"


@dataclass(frozen=True)
class Shard:
    dim: int

    def __str__(self) -> str:
        return {0: "rows", 1: "cols"}.get(self.dim, f"shard({self.dim})")


def _placement(value) -> Replicate | Shard:
    if isinstance(value, (Replicate, Shard)):
        return value
    if value in ("replicate", None):
        return Replicate()
    if value in ("rows", "row"):
        return Shard(0)
    if value in ("cols", "col", "columns"):
        return Shard(1)
    if isinstance(value, int):
        return Shard(value)
    raise ValueError(f"unknown placement {value!r}; use 'replicate', 'rows', 'cols' or Shard(d)")


def chunk_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[start, stop)`` of ``rank``'s chunk of ``n`` items, as ``torch.chunk`` splits them."""
    size = -(-n // world_size) if n else 0
    start = min(rank * size, n)
    return start, min(start + size, n)


@dataclass
class ShardPlan:
    rules: list[tuple[str, Replicate | Shard]]
    rank: int = 0
    world_size: int = 1

    @classmethod
    def make(cls, plan, rank: int = 0, world_size: int = 1) -> ShardPlan:
        if isinstance(plan, ShardPlan):
            return cls(plan.rules, rank, world_size)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        return cls([(k, _placement(v)) for k, v in dict(plan).items()], rank, world_size)

    def placement(self, name: str) -> Replicate | Shard:
        for pattern, placement in self.rules:
            if fnmatch.fnmatchcase(name, pattern):
                return placement
        return Replicate()

    def local_slice(self, name: str, shape: tuple[int, ...]):
        """``(dim, start, stop)`` this rank reads of ``name``, or None for the whole tensor."""
        p = self.placement(name)
        if isinstance(p, Replicate) or self.world_size == 1:
            return None
        dim = p.dim if p.dim >= 0 else p.dim + len(shape)
        if not 0 <= dim < len(shape):
            raise ValueError(f"{name}: cannot shard dim {p.dim} of a {len(shape)}-d tensor")
        start, stop = chunk_bounds(shape[dim], self.rank, self.world_size)
        return dim, start, stop
