"""Loading into DTensors (FSDP2, tensor parallel, both) on 2 and 4 gloo ranks.

One process group per world size runs every scenario (tests/dist_models.py:loader_worker);
the tests below check what each rank saw."""

from __future__ import annotations

import json
import socket

import pytest
import torch
from dist_models import _state

from metalint.loader.distributed import _runs, free_port


def _run(tmp_path, world: int) -> list[dict]:
    from dist_models import loader_worker

    ctx = torch.multiprocessing.start_processes(
        loader_worker,
        args=(world, free_port(), str(tmp_path)),
        nprocs=world,
        join=False,
        start_method="fork",
    )
    deadline = 240
    import time

    t0 = time.monotonic()
    while not ctx.join(timeout=5):
        if time.monotonic() - t0 > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"{world} ranks did not finish in {deadline}s")
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def ranks(request, tmp_path_factory):
    return request.param, _run(tmp_path_factory.mktemp(f"w{request.param}"), request.param)


def test_runs_group_consecutive_indices():
    assert _runs([0, 1, 2, 5, 6, 9]) == [(0, 3), (5, 7), (9, 10)]
    assert _runs([]) == []


SCENARIOS = ["fsdp_st_bf16", "fsdp_dcp", "tp_torch", "fsdp_st_cast", "fsdp+tp_st"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_tensor_installed_as_the_same_dtensor(ranks, scenario):
    world, results = ranks
    if scenario not in results[0]:
        pytest.skip("fsdp+tp runs on 4 ranks")
    for rank, res in enumerate(results):
        got = res[scenario]
        bad = [n for n, ok in got["ok"].items() if not ok]
        assert not bad, f"rank {rank}: wrong or not the same DTensor: {bad}"
        # the missing gate was re-created by its init entry point, under the sharding
        assert "gate.g" in got["materialized"] and "rope.inv_freq" in got["materialized"]


@pytest.mark.parametrize("scenario", ["fsdp_st_bf16", "tp_torch", "fsdp_st_cast", "fsdp+tp_st"])
def test_each_rank_reads_only_its_shard(ranks, scenario):
    world, results = ranks
    if scenario not in results[0]:
        pytest.skip("fsdp+tp runs on 4 ranks")
    sd = _state()
    total = sum(v.numel() * 4 for v in sd.values())
    largest = max(v.numel() * 4 for v in sd.values())
    per = results[0][scenario]["per_rank"]
    assert per == [r[scenario]["bytes_read"] for r in results]
    for res in results:
        got = res[scenario]
        # exactly the local elements of the checkpoint's tensors, fp32
        assert got["bytes_read"] == got["local_elems"] * 4
        assert got["bytes_read"] <= total / world + largest
    assert sum(per) < total * world  # not every rank reads everything


def test_dtype_policy_module_dtype_wins_and_cast(ranks):
    _, results = ranks
    for res in results:
        assert set(res["fsdp_st_bf16"]["dtypes"].values()) == {"torch.bfloat16"}
        assert set(res["fsdp_st_cast"]["dtypes"].values()) == {"torch.bfloat16"}
        assert set(res["fsdp_dcp"]["dtypes"].values()) == {"torch.float32"}


def test_fsdp_state_intact_forward_equals_unsharded(ranks):
    _, results = ranks
    for res in results:
        for s in ("fsdp_st_bf16", "fsdp_dcp", "fsdp_st_cast"):
            assert res[s]["fsdp_modules"] >= 2
        assert res["fsdp_st_bf16"]["forward_equal"]
        assert res["fsdp_dcp"]["forward_equal"]


def test_errors_one_line_on_every_rank_model_unchanged(ranks):
    world, results = ranks
    for rank, res in enumerate(results):
        for case in ("missing_file", "init_fails"):
            got = res["errors"][case]
            assert got["raised"], f"rank {rank} did not raise for {case}"
            assert "\n" not in got["raised"]
            assert got["unchanged"], f"rank {rank}: model changed after {case}"
            if rank != world - 1:
                assert got["raised"].startswith(f"rank {world - 1} failed")
        assert "no such file" in res["errors"]["missing_file"]["raised"]
        assert "init failed on this rank" in res["errors"]["init_fails"]["raised"] or rank != (
            world - 1
        )


def test_free_port_is_bindable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason="the NCCL path needs 2 CUDA devices",
)
def test_nccl_two_gpus(tmp_path):  # pragma: no cover - runs only where GPUs are lent
    import subprocess
    import sys

    from dist_models import ShardNet

    from metalint.loader import save_safetensors

    torch.manual_seed(0)
    sd = ShardNet().state_dict()
    save_safetensors(sd, tmp_path / "m.safetensors")
    proc = subprocess.run(
        [sys.executable, "-m", "metalint", "load", str(tmp_path / "m.safetensors")]
        + ["--model", "tests/dist_models.py:ShardNet", "--device", "cuda"]
        + ["--nproc", "2", "--shard", "fsdp", "--output-format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert sum(json.loads(proc.stdout)["bytes_read_per_rank"]) == sum(
        v.numel() * 4 for v in sd.values()
    )
