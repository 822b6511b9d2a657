"""Tiny models for the sharded probe and loader tests (``tests/dist_models.py:Name``)."""

from __future__ import annotations

import torch
from torch import nn


def _local(p):
    return p.to_local() if hasattr(p, "to_local") else p


def init_whole(p, fn):
    """Initialise ``p`` as a single device would: draw the whole tensor (the same on every
    rank), keep this rank's shard. DTensor's own random ops give distinct shards only on
    CUDA-like meshes; on a CPU mesh they draw locally, so every shard would repeat."""
    if not hasattr(p, "to_local"):
        return fn(p)
    from torch.distributed.tensor import distribute_tensor

    full = torch.empty(p.shape, dtype=p.dtype, device=p.to_local().device)
    fn(full)
    mine = distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None)
    with torch.no_grad():
        p.to_local().copy_(mine.to_local())


class GoodShardedInit(nn.Module):
    """``init_weights`` initialises each parameter as a whole (:func:`init_whole`)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 96)
        self.out = nn.Linear(96, 64)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 64))
        self.init_weights()

    def init_weights(self):
        for p in self.parameters():
            init_whole(p, lambda t: nn.init.normal_(t, std=0.02))
        with torch.no_grad():
            self.scale.copy_(torch.linspace(0.5, 1.5, 64))


class RepeatedShardInit(nn.Module):
    """``init_weights`` draws on the local shard: with every rank seeded alike, every shard
    holds the same values."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 96)
        self.out = nn.Linear(96, 64)
        self.init_weights()

    def init_weights(self):
        for p in self.parameters():
            nn.init.normal_(_local(p), std=0.02)


class LocalFanInInit(nn.Module):
    """``init_weights`` takes the bound from the local shard's shape: a smaller shard, a
    wider distribution."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 96)
        self.init_weights()

    def init_weights(self):
        fan_out = _local(self.proj.weight).shape[0]
        init_whole(self.proj.weight, lambda t: nn.init.normal_(t, std=1.0 / fan_out**0.5))
        nn.init.zeros_(self.proj.bias)
