"""``--shard fsdp|tp`` on the shapes people shard: a transformers Llama, a torchtitan llama
(``layers`` a ModuleDict), a timm ViT (``blocks`` a Sequential), on 2 and 4 gloo ranks.

The CLI runs once (``probe --nproc 2 --shard fsdp``, the command that failed on every model with
a container of layers); every other distributed check runs in one process group per world
size (tests/shard_models.py:shard_worker), forked from this process so that no rank imports
torch again."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from shard_models import (
    MODELS,
    HookedBlock,
    Transformer,
    VisionTransformer,
    _have_transformers,
    shard_worker,
    tiny_llama,
)
from torch import nn

from metalint.config import ConfigError, load_settings
from metalint.loader.distributed import free_port, fsdp_units, shard_settings, tp_plan

HERE = Path(__file__).parent
needs_transformers = pytest.mark.skipif(
    not _have_transformers(), reason="transformers is not installed"
)


def _meta(make):
    with torch.device("meta"):
        return make()


# --------------------------------------------------------------------------------------------
# the plans (no process group)


def test_fsdp_units_are_the_blocks_never_a_container():
    titan = _meta(Transformer)
    assert fsdp_units(titan) == ["layers.0", "layers.1", "tok_embeddings", "norm", "output"]
    vit = _meta(VisionTransformer)
    # timm's blocks (a Sequential): its blocks; the Sequential holds nothing else
    assert fsdp_units(vit) == ["blocks.0", "blocks.1", "patch_embed", "norm", "head"]
    for model in (titan, vit):
        units = [model.get_submodule(u) for u in fsdp_units(model)]
        assert not any(isinstance(m, (nn.ModuleList, nn.ModuleDict)) for m in units)


@needs_transformers
def test_fsdp_units_of_transformers_follow_no_split_modules():
    llama = _meta(tiny_llama)
    assert fsdp_units(llama) == ["model.layers.0", "model.layers.1", "model", "lm_head"]


def test_fsdp_units_leave_tied_weights_to_the_root():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.layers = nn.ModuleList(HookedBlock(4) for _ in range(2))
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight

    assert fsdp_units(_meta(Tied)) == ["layers.0", "layers.1"]


def test_user_named_fsdp_modules():
    titan = _meta(Transformer)
    # a ModuleDict stands for its blocks; class names and globs per dotted segment
    assert fsdp_units(titan, ["layers"]) == ["layers.0", "layers.1"]
    assert fsdp_units(titan, ["TransformerBlock", "tok_embeddings"]) == [
        "layers.0",
        "layers.1",
        "tok_embeddings",
    ]
    assert fsdp_units(titan, ["layers.*.attention"]) == ["layers.0.attention", "layers.1.attention"]
    with pytest.raises(ValueError, match="'layerz.*' matches no module of Transformer"):
        fsdp_units(titan, ["layerz.*"])


def test_tp_plan_of_a_llama_and_a_vit():
    plan = tp_plan(_meta(Transformer))
    for i in (0, 1):
        for w in ("attention.wq", "attention.wk", "attention.wv", "feed_forward.w1"):
            assert plan[f"layers.{i}.{w}"] == "colwise"
        assert plan[f"layers.{i}.feed_forward.w3"] == "colwise"
        assert plan[f"layers.{i}.attention.wo"] == plan[f"layers.{i}.feed_forward.w2"] == "rowwise"
    assert plan["tok_embeddings"] == "rowwise" and plan["output"] == "colwise"
    vit = tp_plan(_meta(VisionTransformer))
    assert vit["blocks.1.attn.qkv"] == vit["blocks.1.mlp.fc1"] == "colwise"
    assert vit["blocks.1.attn.proj"] == vit["blocks.1.mlp.fc2"] == "rowwise"
    assert "patch_embed.proj" not in vit  # a Conv2d named proj: not a Linear
    user = tp_plan(_meta(Transformer), {"layers.*.attention.wo": "rowwise"})
    assert user == {"layers.0.attention.wo": "rowwise", "layers.1.attention.wo": "rowwise"}
    with pytest.raises(ValueError, match="tp-plan: 'nope' matches no module"):
        tp_plan(_meta(Transformer), {"nope": "colwise"})


@needs_transformers
def test_tp_plan_of_transformers_is_its_own():
    plan = tp_plan(_meta(tiny_llama))
    for i in (0, 1):
        for w in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
            assert plan[f"model.layers.{i}.{w}"] == "colwise"
        assert plan[f"model.layers.{i}.mlp.gate_proj"] == "colwise"
        assert plan[f"model.layers.{i}.mlp.up_proj"] == "colwise"
        assert plan[f"model.layers.{i}.self_attn.o_proj"] == "rowwise"
        assert plan[f"model.layers.{i}.mlp.down_proj"] == "rowwise"
    # colwise_gather_output / embedding_rowwise split the weights as colwise / rowwise
    assert plan["lm_head"] == "colwise" and plan["model.embed_tokens"] == "rowwise"


def test_plans_from_the_config(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        "[tool.metalint.probe]\n"
        'fsdp-modules = ["layers.*", "tok_embeddings"]\n'
        'tp-plan = {"layers.*.attention.wq" = "colwise"}\n'
    )
    s = load_settings(tmp_path)
    assert s.fsdp_modules == ("layers.*", "tok_embeddings")
    assert s.tp_plan == {"layers.*.attention.wq": "colwise"}
    assert shard_settings(str(tmp_path / "m.py")) == {
        "fsdp_modules": ["layers.*", "tok_embeddings"],
        "tp": {"layers.*.attention.wq": "colwise"},
    }
    (tmp_path / "pyproject.toml").write_text(
        '[tool.metalint.probe]\ntp-plan = {"layers.*.attention.wq" = "columns"}\n'
    )
    with pytest.raises(ConfigError, match="pyproject.toml.*'layers.*wq' must be one of"):
        load_settings(tmp_path)
    # the commands: one line naming the file, exit 2
    (tmp_path / "m.py").write_text(
        "import torch\n\ndef make():\n    return torch.nn.Linear(2, 2)\n"
    )
    for cmd in (
        ["probe", "--nproc", "2", "--shard", "fsdp", f"{tmp_path / 'm.py'}:make"],
        ["load", str(tmp_path / "x.safetensors"), "--model", f"{tmp_path / 'm.py'}:make"]
        + ["--nproc", "2"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "metalint", *cmd], capture_output=True, text=True, timeout=60
        )
        # probe says it as every bad setting of the probe: a usage error
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "pyproject.toml" in last and "must be one of colwise, rowwise" in last


# --------------------------------------------------------------------------------------------
# the CLI: the command that failed


def test_cli_probe_fsdp_two_ranks():
    # the two failures as reported: a ModuleDict of layers; a meta-safe block on a CPU mesh
    proc = subprocess.run(
        [sys.executable, "-m", "metalint", "probe", "--nproc", "2", "--shard", "fsdp"]
        + ["tests/shard_models.py:Transformer,HookedBlock"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "does not support containers" not in proc.stdout + proc.stderr
    for name in ("Transformer", "HookedBlock"):
        assert f"shard_models.py:{name} on cpu" in proc.stdout
    assert proc.stdout.count("sharded with fsdp over 2 ranks: passed") == 2, proc.stdout
    assert proc.stdout.rstrip().endswith("All checks passed!")


# --------------------------------------------------------------------------------------------
# one process group per world size


def _run(tmp_path, world: int, shards: tuple[str, ...]) -> list[dict]:
    # imported once here, not in every forked rank
    import torch.distributed.checkpoint  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401

    if _have_transformers():
        import transformers.models.llama.modeling_llama  # noqa: F401

    ctx = torch.multiprocessing.start_processes(
        shard_worker,
        args=(world, free_port(), str(tmp_path), shards),
        nprocs=world,
        join=False,
        start_method="fork",
    )
    t0 = time.monotonic()
    while not ctx.join(timeout=5):
        if time.monotonic() - t0 > 300:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"{world} ranks did not finish in 300s")
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.fixture(
    scope="module",
    params=[
        pytest.param((2, ("fsdp", "tp")), id="2ranks"),
        pytest.param((4, ("fsdp", "tp")), id="4ranks", marks=pytest.mark.four_ranks),
    ],
)
def ranks(request, tmp_path_factory):
    world, shards = request.param
    return world, shards, _run(tmp_path_factory.mktemp(f"w{world}"), world, shards)


def test_cpu_mesh_tracker_draws_distinct_shards_and_keeps_ranks_in_step(ranks):
    world, _, results = ranks
    plain, tracked = results[0]["rng"]["plain"], results[0]["rng"]["tracked"]
    # torch alone: no tracker on a CPU mesh, every shard the same draw
    assert all(s == plain["sharded"][0] for s in plain["sharded"])
    # the probe's tracker: distinct shards, replicas alike, every generator in step after
    assert len({json.dumps(s) for s in tracked["sharded"]}) == world
    assert all(r == tracked["replica"][0] for r in tracked["replica"])
    assert all(a == tracked["after"][0] for a in tracked["after"])
    flat = torch.tensor(tracked["sharded"]).flatten()
    assert abs(float(flat.std()) - 1.0) < 0.5 and abs(float(flat.mean())) < 0.5


def test_probe_verdicts(ranks):
    world, shards, results = ranks
    for shard in shards:
        got = results[0]["probe"]
        for name in MODELS:
            key = f"{shard}:{name}"
            if name == "tiny_llama" and not _have_transformers():
                continue
            res = got[key]
            if name == "VisionTransformer":
                # LayerScale's gamma (1e-5 * ones) is lost on meta: all four, on every layout
                assert res["lost"] == 4 and res["codes"] == ["MP011"], (key, res)
                assert "ls1.gamma" in res["messages"][0]
            elif name == "LocalDrawBlock":
                # a local shard drawn with plain torch ops: the same on every rank
                assert res["lost"] == 1 and res["codes"] == ["MP010"], (key, res)
                ranks_ = ", ".join(map(str, range(world)))
                assert f"ranks {ranks_} hold different shards of fc1.weight" in res["messages"][0]
            else:
                assert res["status"] == "passed", (key, res)
    # every rank reaches the same verdict
    verdicts = [{k: {**v, "seconds": None} for k, v in r["probe"].items()} for r in results]
    assert all(v == verdicts[0] for v in verdicts)


def test_user_plans_shard_what_they_name(ranks):
    _, _, results = ranks
    plans = results[0]["plans"]
    assert plans["fsdp"] == ["", "layers.0", "layers.1", "tok_embeddings"]
    assert plans["tp"] == {
        "layers.0.attention.wq.weight": "(Shard(dim=0),)",
        "layers.1.attention.wq.weight": "(Shard(dim=0),)",
        "output.weight": "(Shard(dim=1),)",
    }


def test_load_fsdp_index_every_tensor_equal_each_rank_reads_its_share(ranks):
    world, _, results = ranks
    names = results[0]["load"]
    assert set(names) >= {"Transformer", "VisionTransformer"}
    for name in names:
        per = results[0]["load"][name]["per_rank"]
        assert per == [r["load"][name]["bytes_read"] for r in results]
        for rank, res in enumerate(results):
            got = res["load"][name]
            bad = [n for n, ok in got["equal"].items() if not ok]
            assert not bad, f"{name} rank {rank}: {bad}"
            assert got["bytes_read"] <= got["total"] / world + got["largest"], (name, rank)
        # every element of a sharded tensor read once, a tensor left whole by every rank
        got = results[0]["load"][name]
        assert sum(per) == got["total"] + (world - 1) * got["whole"]


def test_probe_ranks_get_the_configured_plan(tmp_path, monkeypatch):
    from metalint.probe import distributed
    from metalint.probe.isolate import Options
    from metalint.probe.target import parse_target

    (tmp_path / "pyproject.toml").write_text(
        '[tool.metalint.probe]\nfsdp-modules = ["TransformerBlock"]\ntp-plan = {"out" = "rowwise"}\n'
    )
    (tmp_path / "m.py").write_text("")
    jobs = []

    def launch(module, args, nproc, timeout):
        jobs.append(json.loads(args[0]))
        return [subprocess.CompletedProcess(args, 1, "", "boom")]

    monkeypatch.setattr(distributed, "launch", launch)
    (target,) = parse_target(f"{tmp_path / 'm.py'}:make")
    (out,) = distributed.run_sharded(target, Options(), 2, "fsdp")
    assert out.kind == "error" and "boom" in out.message
    assert jobs[0]["fsdp_modules"] == ["TransformerBlock"] and jobs[0]["tp"] == {"out": "rowwise"}
