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


class _Weight(nn.Module):
    def __init__(self, out_features: int, in_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))


class _Norm(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))


class TPModel(nn.Module):
    """Column-parallel ``up`` (split rows), row-parallel ``down`` (split cols), replicated norm.

    Plain parameters without init calls: building it on meta in a fresh rank process does not
    pull in the lazy imports that ``nn.Linear``'s meta init does (seconds on a busy box).
    """

    def __init__(self, d: int = 8, hidden: int = 12):
        super().__init__()
        self.up = _Weight(hidden, d)
        self.down = _Weight(d, hidden)
        self.norm = _Norm(d)


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


def raw_safetensors(
    header: dict | bytes, data: bytes = b"", *, pad: bool = True, length: int | None = None
) -> bytes:
    """Bytes of a (possibly malformed) safetensors file with a hand-made header."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def tp_worker(rank: int, world_size: int, port: int, path: str, out_dir: str) -> None:
    """One rank of the tensor-parallel test (started by torch.multiprocessing)."""
    import json
    import os

    import torch.distributed as dist
    from safetensors import safe_open

    from metalint.loader import formats, load_checkpoint

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        calls: list = []
        real_handle = formats.SafetensorsSource._handle

        class Spy:
            def __init__(self, h):
                self.h = h

            def get_tensor(self, name):
                calls.append([name, "full"])
                return self.h.get_tensor(name)

            def get_slice(self, name):
                h = self.h

                class S:
                    def __getitem__(self, idx):
                        calls.append([name, [[s.start, s.stop] for s in idx]])
                        return h.get_slice(name)[idx]

                return S()

        formats.SafetensorsSource._handle = lambda self, f: Spy(real_handle(self, f))
        with torch.device("meta"):
            model = TPModel()
        report = load_checkpoint(model, path, shard_plan=TP_PLAN)
        with safe_open(path, framework="pt") as f:
            full = {k: f.get_tensor(k) for k in f.keys()}
        up = full["up.weight"].chunk(world_size, 0)[rank]
        down = full["down.weight"].chunk(world_size, 1)[rank]
        assert torch.equal(model.up.weight, up)
        assert torch.equal(model.down.weight, down)
        assert torch.equal(model.norm.weight, full["norm.weight"])
        # the shards put together over the process group give back the full tensor
        gathered = [torch.empty_like(model.up.weight) for _ in range(world_size)]
        dist.all_gather(gathered, model.up.weight.detach().contiguous())
        assert torch.equal(torch.cat(gathered, 0), full["up.weight"])
        gathered = [torch.empty_like(model.down.weight) for _ in range(world_size)]
        dist.all_gather(gathered, model.down.weight.detach().contiguous())
        assert torch.equal(torch.cat(gathered, 1), full["down.weight"])
        # a DCP folder inside the process group: each entry is read into a meta tensor that
        # DCP materialises itself (PyTorch PR #113319)
        formats.SafetensorsSource._handle = real_handle
        with torch.device("meta"):
            model2 = TPModel()
        r2 = load_checkpoint(model2, os.path.join(out_dir, "dcp"), shard_plan=TP_PLAN)
        assert r2.format == "dcp"
        assert torch.equal(model2.up.weight, up) and torch.equal(model2.down.weight, down)
        assert torch.equal(model2.norm.bias, full["norm.bias"])
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
            json.dump(
                {
                    "calls": calls,
                    "bytes_read": report.bytes_read,
                    "sharded": report.sharded,
                    "shapes": {n: list(p.shape) for n, p in model.named_parameters()},
                },
                fh,
            )
    finally:
        dist.destroy_process_group()
