"""Tensor-parallel loading: each rank reads only its slice (real torch.distributed, gloo)."""

from __future__ import annotations

import json
import socket

import pytest
import torch
from loader_models import TP_PLAN, TPModel, random_state, tp_worker

from metalint.loader import Shard, ShardPlan, load_checkpoint, save_safetensors
from metalint.loader.sharding import chunk_bounds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_chunk_bounds_like_torch_chunk():
    for n in range(9):
        for world in (1, 2, 3, 4):
            got = [chunk_bounds(n, r, world) for r in range(world)]
            ref = torch.arange(n).chunk(world) if n else []
            sizes = [b - a for a, b in got]
            assert sum(sizes) == n
            assert [s for s in sizes if s] == [len(c) for c in ref]


def test_plan_placements():
    plan = ShardPlan.make({"layers.*.up.weight": "rows", "*.down.weight": Shard(1)}, 1, 2)
    assert plan.local_slice("layers.0.up.weight", (6, 4)) == (0, 3, 6)
    assert plan.local_slice("x.down.weight", (4, 6)) == (1, 3, 6)
    assert plan.local_slice("norm.weight", (4,)) is None
    with pytest.raises(ValueError):
        ShardPlan.make({}, 2, 2)


@pytest.mark.parametrize("fmt", ["safetensors", "torch"])
def test_shard_without_process_group(tmp_path, fmt):
    sd = random_state(TPModel)
    if fmt == "safetensors":
        path = tmp_path / "m.safetensors"
        save_safetensors(sd, path)
    else:
        path = tmp_path / "m.pt"
        torch.save(sd, path)
    for rank in range(2):
        r = load_checkpoint(TPModel, path, shard_plan=TP_PLAN, rank=rank, world_size=2)
        m = r.model
        assert torch.equal(m.up.weight, sd["up.weight"].chunk(2, 0)[rank])
        assert torch.equal(m.down.weight, sd["down.weight"].chunk(2, 1)[rank])
        assert m.down.weight.is_contiguous()
        assert torch.equal(m.norm.weight, sd["norm.weight"])
        expect = (sd["up.weight"].numel() + sd["down.weight"].numel()) * 4 // 2 + sum(
            v.numel() * 4 for k, v in sd.items() if k.startswith("norm")
        )
        assert r.bytes_read == expect


def test_two_gloo_ranks_read_only_their_slice(tmp_path):
    sd = random_state(TPModel)
    path = tmp_path / "m.safetensors"
    save_safetensors(sd, path)
    import warnings

    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(sd, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    # fork: the ranks inherit the imported torch instead of importing it again (seconds on a
    # busy 2-core box); tp_worker sets one intra-op thread first
    torch.multiprocessing.start_processes(
        tp_worker,
        args=(2, _free_port(), str(path), str(tmp_path)),
        nprocs=2,
        join=True,
        start_method="fork",
    )
    full_split = (sd["up.weight"].numel() + sd["down.weight"].numel()) * 4
    norm = sum(v.numel() * 4 for k, v in sd.items() if k.startswith("norm"))
    seen_rows = []
    for rank in range(2):
        res = json.loads((tmp_path / f"rank{rank}.json").read_text())
        calls = {name: how for name, how in res["calls"]}
        # split tensors: only get_slice, never the whole tensor; replicated: whole
        assert calls["norm.weight"] == "full" and calls["norm.bias"] == "full"
        assert calls["up.weight"] == [[6 * rank, 6 * rank + 6]]
        assert calls["down.weight"] == [[None, None], [6 * rank, 6 * rank + 6]]
        assert res["bytes_read"] == full_split // 2 + norm
        assert res["shapes"]["up.weight"] == [6, 8] and res["shapes"]["down.weight"] == [8, 6]
        seen_rows.append(tuple(res["sharded"]["up.weight"]))
    assert seen_rows == [(0, 0, 6), (0, 6, 12)]
