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


# --------------------------------------------------------------------------------------------
# loader: one process group runs every scenario; each rank writes what it saw as JSON


class Gate(nn.Module):
    """A parameter the checkpoint lacks, re-created by ``reset_parameters`` (under sharding)."""

    def __init__(self, n: int = 6):
        super().__init__()
        self.g = nn.Parameter(torch.ones(n))

    def reset_parameters(self):
        with torch.no_grad():
            self.g.fill_(0.5)


class Rope(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    def _inv_freq(self):
        return 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8))

    def reset_parameters(self):
        self.inv_freq.copy_(self._inv_freq())


class ShardNet(nn.Module):
    """Uneven shards (13 rows), a frozen parameter, a non-persistent buffer, a missing
    parameter re-created by its init entry point."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 13)
        self.down = nn.Linear(13, 8)
        self.norm = nn.LayerNorm(8)
        self.frozen = nn.Parameter(torch.randn(5, 8), requires_grad=False)
        self.gate = Gate()
        self.rope = Rope()

    def forward(self, x):
        return self.norm(self.down(torch.relu(self.up(x)))) + self.frozen.sum(0)


class Boom(nn.Module):
    """Its init entry point fails on the last rank only."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def reset_parameters(self):
        import torch.distributed as dist

        if dist.get_rank() == dist.get_world_size() - 1:
            raise RuntimeError("init failed on this rank")
        with torch.no_grad():
            self.w.fill_(1.0)


class BoomNet(ShardNet):
    def __init__(self):
        super().__init__()
        self.boom = Boom()


def _shard_table(model, mesh):
    """Make the persistent buffer ``table`` a Shard(0) DTensor (buffers can be DTensors too)."""
    from torch.distributed.tensor import DTensor, Shard

    n = 10
    rows = -(-n // mesh.size())
    mine = max(0, min(rows, n - rows * mesh.get_local_rank()))
    model.register_buffer(
        "table",
        DTensor.from_local(
            torch.empty(mine, 3, device="meta"),
            mesh,
            [Shard(0)],
            run_check=False,
            shape=(n, 3),
            stride=(3, 1),
        ),
    )


def _placements(t):
    return getattr(t, "placements", None)


def _save_all(tmp: str, sd: dict) -> None:
    import warnings

    import torch.distributed.checkpoint as dcp

    from metalint.loader import save_safetensors

    save_safetensors(sd, f"{tmp}/m.safetensors")
    torch.save(sd, f"{tmp}/m.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # per_thread_copy_ahead=0: DCP's overlapping loader takes a CUDA stream whenever CUDA
        # is available, which a rank forked from a process that used CUDA cannot (seen on a
        # GPU box); the serial loader writes the same files
        writer = dcp.FileSystemWriter(f"{tmp}/dcp", per_thread_copy_ahead=0)
        dcp.save(sd, storage_writer=writer, no_dist=True)


def _state() -> dict:
    torch.manual_seed(0)
    m = ShardNet()
    sd = {k: v for k, v in m.state_dict().items() if not k.startswith("gate.")}
    sd["table"] = torch.randn(10, 3)
    return sd


def _scenario(shard: str, path: str, sd: dict, dtype=None, model_dtype=None) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule

    from metalint.loader import load_checkpoint
    from metalint.loader.distributed import shard_model

    with torch.device("meta"):
        model = ShardNet()
    if model_dtype is not None:
        model.to(model_dtype)
    shard_model(model, shard)
    _shard_table(model, init_device_mesh("cpu", (torch.distributed.get_world_size(),)))
    before = {n: (p, _placements(p), p.requires_grad) for n, p in model.named_parameters()}
    rep = load_checkpoint(model, path, dtype=dtype, allow_missing=["gate.*"])
    out = {"bytes_read": rep.bytes_read, "per_rank": rep.bytes_read_per_rank, "ok": {}}
    out["materialized"] = sorted(rep.materialized)
    for n, p in model.named_parameters():
        obj, placements, rg = before[n]
        kept = p is obj and _placements(p) == placements and p.requires_grad == rg
        full = p.full_tensor() if placements else p.detach()
        want = sd[n] if n in sd else torch.full((6,), 0.5)
        out["ok"][n] = bool(kept and torch.equal(full, want.to(full.dtype)))
        out.setdefault("dtypes", {})[n] = str(full.dtype)
    table = model.table.full_tensor()
    out["ok"]["table"] = bool(torch.equal(table, sd["table"].to(table.dtype)))
    inv = model.rope.inv_freq
    out["ok"]["rope.inv_freq"] = bool(torch.equal(inv, Rope()._inv_freq().to(inv.dtype)))
    out["local_elems"] = sum(
        t.to_local().numel() if hasattr(t, "to_local") else t.numel()
        for n, t in list(model.named_parameters()) + list(model.named_buffers())
        if n in sd
    )
    if shard == "fsdp":
        fsdp = [m for m in model.modules() if isinstance(m, FSDPModule)]
        out["fsdp_modules"] = len(fsdp)
        eff = model_dtype or (torch.bfloat16 if dtype else torch.float32)
        torch.manual_seed(1)
        x = torch.randn(3, 8, dtype=eff)
        ref = ShardNet()
        ref.load_state_dict({**sd, "gate.g": torch.full((6,), 0.5)}, strict=False)
        ref.to(eff)
        out["forward_equal"] = bool(torch.equal(model(x), ref(x)))
    return out


def _errors(tmp: str, rank: int, world: int) -> dict:
    from metalint.loader import CheckpointError, load_checkpoint
    from metalint.loader.distributed import shard_model

    out = {}
    for case in ("missing_file", "init_fails"):
        with torch.device("meta"):
            model = BoomNet() if case == "init_fails" else ShardNet()
        shard_model(model, "fsdp")
        before = {n: p for n, p in model.named_parameters()}
        path = f"{tmp}/m.safetensors"
        if case == "missing_file" and rank == world - 1:
            path = f"{tmp}/gone.safetensors"
        try:
            load_checkpoint(model, path, allow_missing=["gate.*", "boom.*"], strict=False)
            out[case] = {"raised": None}
        except CheckpointError as exc:
            unchanged = all(
                p is before[n] and p.device.type == "meta" and _placements(p) is not None
                for n, p in model.named_parameters()
            )
            out[case] = {"raised": str(exc), "unchanged": unchanged}
    return out


def loader_worker(rank: int, world: int, port: int, tmp: str) -> None:
    """One rank of tests/test_loader_dtensor.py (started by torch.multiprocessing)."""
    import json

    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        sd = _state()
        if rank == 0:
            _save_all(tmp, sd)
        dist.barrier()
        res = {
            "fsdp_st_bf16": _scenario(
                "fsdp", f"{tmp}/m.safetensors", sd, model_dtype=torch.bfloat16
            ),
            "fsdp_dcp": _scenario("fsdp", f"{tmp}/dcp", sd),
            "tp_torch": _scenario("tp", f"{tmp}/m.pt", sd),
            "fsdp_st_cast": _scenario("fsdp", f"{tmp}/m.safetensors", sd, dtype="bf16"),
        }
        if world % 2 == 0 and world > 2:
            res["fsdp+tp_st"] = _scenario("fsdp+tp", f"{tmp}/m.safetensors", sd)
        res["errors"] = _errors(tmp, rank, world)
        with open(f"{tmp}/rank{rank}.json", "w") as f:
            json.dump(res, f)
    finally:
        dist.destroy_process_group()
