"""``metalint probe --nproc N --shard fsdp|tp`` and ``metalint load --nproc N --shard``:
the CLI launches the gloo ranks itself (subprocesses, bounded by timeouts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
MODELS = HERE / "dist_models.py"


def _metalint(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "metalint", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=HERE.parent,
    )


def _line_of(text: str) -> int:
    lines = MODELS.read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if text in ln)


@pytest.fixture(scope="module")
def fsdp2():
    targets = "tests/dist_models.py:GoodShardedInit,RepeatedShardInit,LocalFanInInit"
    proc = _metalint("probe", "--nproc", "2", "--shard", "fsdp", targets, "--output-format", "json")
    assert proc.returncode == 1, proc.stderr
    return json.loads(proc.stdout)


def test_repeated_shards_flagged_at_the_init_line(fsdp2):
    mp010 = [d for d in fsdp2 if d["code"] == "MP010"]
    assert {d["message"].split(" of ")[1].split(" ")[0] for d in mp010} == {
        "proj.weight",
        "proj.bias",
    }
    assert {d["location"]["row"] for d in mp010} == {
        _line_of("nn.init.normal_(_local(p), std=0.02)")
    }


def test_local_fan_in_flagged_as_sharded_init_differs(fsdp2):
    mp011 = [d for d in fsdp2 if d["code"] == "MP011"]
    assert len(mp011) == 1 and "proj.weight" in mp011[0]["message"]
    assert "std" in mp011[0]["message"]
    assert mp011[0]["location"]["row"] == _line_of("init_whole(self.proj.weight")


def test_correct_sharded_init_passes(fsdp2):
    rows = {d["location"]["row"] for d in fsdp2}
    good = range(_line_of("class GoodShardedInit"), _line_of("class RepeatedShardInit"))
    assert not rows & set(good)


def test_tensor_parallel_from_the_cli():
    # the CLI's launch of tp ranks; 4 ranks (every model, both layouts) are
    # tests/test_shard_shapes.py's and tests/test_loader_dtensor.py's process groups
    proc = _metalint(
        "probe",
        "--nproc",
        "2",
        "--shard",
        "tp",
        "tests/dist_models.py:GoodShardedInit,RepeatedShardInit",
    )
    assert proc.returncode == 1, proc.stderr
    assert "GoodShardedInit on cpu" in proc.stdout and ": passed" in proc.stdout
    assert "ranks 0, 1 hold different shards of proj.weight" in proc.stdout


def test_nproc_needs_shard():
    proc = _metalint("probe", "--nproc", "2", "tests/dist_models.py:GoodShardedInit")
    assert proc.returncode == 2 and "--nproc needs --shard" in proc.stderr


def test_load_launches_ranks(tmp_path):
    from dist_models import ShardNet

    from metalint.loader import save_safetensors

    torch.manual_seed(0)
    sd = ShardNet().state_dict()
    save_safetensors(sd, tmp_path / "m.safetensors")
    args = ["load", str(tmp_path / "m.safetensors"), "--model", f"{MODELS}:ShardNet"]
    proc = _metalint(*args, "--nproc", "2", "--shard", "fsdp", "--output-format", "json")
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["world_size"] == 2 and rep["loaded"] == len(sd)
    total = sum(v.numel() * 4 for v in sd.values())
    assert sum(rep["bytes_read_per_rank"]) == total  # FSDP: every element read once
    assert max(rep["bytes_read_per_rank"]) < total
    bad = _metalint(*args[:1], str(tmp_path / "nope.safetensors"), *args[2:], "--nproc", "2")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "no such file" in bad.stderr


def test_sharded_probe_shares_the_eager_stage(tmp_path):
    # a factory that returns no module: one line from the shared eager stage, as the
    # single-device probe says it (the sharded probe had its own copy without the check)
    (tmp_path / "notmod.py").write_text("import torch\n\ndef make():\n    return torch.ones(4)\n")
    proc = _metalint("probe", "--nproc", "2", "--shard", "fsdp", f"{tmp_path / 'notmod.py'}:make")
    single = _metalint("probe", f"{tmp_path / 'notmod.py'}:make")
    assert proc.returncode == single.returncode != 0
    assert "returned Tensor, not an nn.Module" in single.stdout + single.stderr
    assert "returned Tensor, not an nn.Module" in proc.stdout + proc.stderr
