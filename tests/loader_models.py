"""Small models and checkpoint writers for the loader tests (importable as a model target:
``tests/loader_models.py:TinyLM``)."""

from __future__ import annotations

import json
import struct

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    """A RoPE ``inv_freq`` buffer that no checkpoint holds (persistent=False), re-created by
    ``reset_parameters``."""

    def __init__(self, dim: int = 8, base: float = 10000.0):
        super().__init__()
        self.dim, self.base = dim, base
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    def _inv_freq(self):
        return 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.float32) / self.dim))

    def reset_parameters(self):
        self.inv_freq.copy_(self._inv_freq())


class Block(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.prenorm = nn.LayerNorm(d)
        self.attn = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Linear(d, d)


class TinyLM(nn.Module):
    """Embedding tied to the head, RoPE non-persistent buffer, an int buffer, two blocks."""

    def __init__(self, vocab: int = 32, d: int = 8, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.rope = RotaryEmbedding(d)
        self.layers = nn.ModuleList(Block(d) for _ in range(layers))
        self.final_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("position_ids", torch.arange(16))


class NoHookBuffer(nn.Module):
    """A non-persistent buffer computed in ``__init__`` with no hook anywhere: unrecoverable."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("table", torch.linspace(0, 1, 5), persistent=False)


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.b = nn.Linear(6, 2)


class MyParam(nn.Parameter):
    """A Parameter subclass: the loader must keep the class."""


class WithSubclassParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = MyParam(torch.ones(3, 3))
        self.w.tag = "keep-me"
        self.frozen = nn.Parameter(torch.zeros(3), requires_grad=False)


class TPModel(nn.Module):
    """Column-parallel ``up`` (split rows), row-parallel ``down`` (split cols), replicated norm."""

    def __init__(self, d: int = 8, hidden: int = 12):
        super().__init__()
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)
        self.norm = nn.LayerNorm(d)


TP_PLAN = {"up.weight": "rows", "down.weight": "cols"}


def random_state(model_cls, seed: int = 0, **kw) -> dict[str, torch.Tensor]:
    """An eager model's state dict with random (non-default) values everywhere floating."""
    torch.manual_seed(seed)
    m = model_cls(**kw)
    sd = {}
    for k, v in m.state_dict().items():
        v = v.detach().clone()
        if v.is_floating_point():
            v = torch.randn_like(v)
        sd[k] = v
    return sd


def raw_safetensors(header: dict | bytes, data: bytes = b"", *, pad: bool = True,
                    length: int | None = None) -> bytes:
    """Bytes of a (possibly malformed) safetensors file with a hand-made header."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data
