"""dtype policy, strict errors, init step, no partially loaded model."""

from __future__ import annotations

import pytest
import torch
from loader_models import NoHookBuffer, Plain, TinyLM, random_state
from torch import nn

from metalint.loader import CheckpointError, load_checkpoint, save_safetensors
from metalint.loader.dtype_policy import DtypePolicy, segment_match


@pytest.fixture
def ckpt(tmp_path):
    sd = random_state(TinyLM)
    sd.pop("head.weight")
    save_safetensors(sd, tmp_path / "m.safetensors")
    return tmp_path / "m.safetensors", sd


def test_segment_match():
    assert segment_match("norm", "layers.0.norm.weight")
    assert not segment_match("norm", "layers.0.prenorm.weight")
    assert segment_match("layers.0.norm", "layers.0.norm.weight")
    assert not segment_match("0.norm", "layers.10.norm.weight")
    assert not segment_match("", "a.b")


def test_dtype_none_keeps_module_dtypes(tmp_path):
    # a bf16 checkpoint into an fp32 module: load_state_dict semantics (module dtype wins)
    sd = {k: v.to(torch.bfloat16) for k, v in random_state(Plain).items()}
    save_safetensors(sd, tmp_path / "m.safetensors")
    r = load_checkpoint(Plain, tmp_path / "m.safetensors")
    assert all(p.dtype == torch.float32 for p in r.model.parameters())
    assert r.casts == {"bfloat16->float32": [4, sum(v.numel() * 2 for v in sd.values())]}
    assert torch.equal(r.model.a.weight, sd["a.weight"].float())


def test_bf16_casts_floats_only_and_ints_untouched(ckpt):
    path, sd = ckpt
    r = load_checkpoint(TinyLM, path, dtype="bf16")
    m = r.model
    assert m.embed.weight.dtype == torch.bfloat16
    assert m.layers[0].norm.weight.dtype == torch.bfloat16
    assert m.rope.inv_freq.dtype == torch.bfloat16  # non-persistent float buffer: policy too
    assert m.position_ids.dtype == torch.int64
    assert torch.equal(m.position_ids, sd["position_ids"])
    assert torch.equal(m.embed.weight, sd["embed.weight"].to(torch.bfloat16))
    n_float = sum(1 for v in sd.values() if v.is_floating_point())
    assert r.casts["float32->bfloat16"][0] == n_float
    assert not any(k.startswith("int64") for k in r.casts)


def test_keep_in_fp32_by_path_segment(ckpt):
    path, sd = ckpt
    r = load_checkpoint(TinyLM, path, dtype=torch.float16, keep_in_fp32=("norm",))
    m = r.model
    assert m.layers[0].norm.weight.dtype == torch.float32
    assert m.layers[1].norm.bias.dtype == torch.float32
    assert m.layers[0].prenorm.weight.dtype == torch.float16  # substring, not a segment
    assert m.final_norm.weight.dtype == torch.float16
    assert torch.equal(m.layers[0].norm.weight, sd["layers.0.norm.weight"])


def test_policy_unit():
    p = DtypePolicy.make("bf16", ["norm"])
    assert p.target("x.norm.weight", torch.float32) == torch.float32
    assert p.target("x.weight", torch.float32) == torch.bfloat16
    assert p.target("x.ids", torch.int64) == torch.int64
    assert p.target("x.mask", torch.bool) == torch.bool
    assert DtypePolicy.make(None).target("a", torch.float16) == torch.float16
    with pytest.raises(ValueError):
        DtypePolicy.make("int8")


def test_strict_lists_every_problem(tmp_path):
    sd = random_state(Plain)
    sd.pop("a.bias")
    sd.pop("b.bias")
    sd["extra.w"] = torch.ones(2)
    sd["junk"] = torch.ones(1)
    sd["a.weight"] = torch.ones(5, 4)
    save_safetensors(sd, tmp_path / "m.safetensors")
    with torch.device("meta"):
        m = Plain()
    with pytest.raises(CheckpointError) as ei:
        load_checkpoint(m, tmp_path / "m.safetensors")
    msg = str(ei.value)
    assert "\n" not in msg and "m.safetensors" in msg
    for part in (
        "2 missing: a.bias, b.bias",
        "2 unexpected: extra.w, junk",
        "a.weight (checkpoint [5, 4] vs model [6, 4])",
    ):
        assert part in msg
    assert all(p.device.type == "meta" for p in m.parameters())  # untouched


def test_non_strict_reports_and_inits(tmp_path):
    sd = random_state(Plain)
    sd.pop("a.bias")
    sd["junk"] = torch.ones(1)
    save_safetensors(sd, tmp_path / "m.safetensors")
    r = load_checkpoint(Plain, tmp_path / "m.safetensors", strict=False)
    assert r.missing == ["a.bias"] and r.unexpected == ["junk"]
    assert r.materialized["a.bias"] == "Linear.reset_parameters() on 'a'"
    # the init step never overwrote the loaded weight of the same module
    assert torch.equal(r.model.a.weight, sd["a.weight"])
    assert torch.isfinite(r.model.a.bias).all()


def test_allow_missing_glob(tmp_path):
    sd = random_state(Plain)
    sd.pop("b.weight")
    sd.pop("b.bias")
    save_safetensors(sd, tmp_path / "m.safetensors")
    r = load_checkpoint(Plain, tmp_path / "m.safetensors", allow_missing=["b.*"])
    assert r.allowed_missing == ["b.weight", "b.bias"] and not r.missing
    assert set(r.materialized) == {"b.weight", "b.bias"}
    assert torch.equal(r.model.a.weight, sd["a.weight"])


def test_loaded_tensors_never_overwritten_by_root_init(tmp_path):
    class Root(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.scale = nn.Parameter(torch.ones(3))

        def init_weights(self):  # re-inits everything, like a transformers root hook
            nn.init.zeros_(self.lin.weight)
            nn.init.zeros_(self.lin.bias)
            self.scale.fill_(7.0)

    save_safetensors(
        {"lin.weight": torch.full((3, 3), 2.0), "lin.bias": torch.full((3,), 3.0)},
        tmp_path / "m.safetensors",
    )
    r = load_checkpoint(Root, tmp_path / "m.safetensors", allow_missing=["scale"])
    assert r.materialized == {"scale": "Root.init_weights() on the root"}
    assert torch.equal(r.model.scale, torch.full((3,), 7.0))
    assert torch.equal(r.model.lin.weight, torch.full((3, 3), 2.0))
    assert torch.equal(r.model.lin.bias, torch.full((3,), 3.0))


def test_auto_init_runs_a_root_init_states_as_check_reads_it(tmp_path):
    # torchtitan's root entry point may be init_states(); metalint check counts what it
    # re-creates (vocabulary.ROOT_ENTRIES), so the loader runs it too (it did not before)
    class Root(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.register_buffer("freqs", torch.arange(3.0), persistent=False)

        def init_states(self, buffer_device=None):
            self.freqs.copy_(torch.arange(3.0) * 2)

    save_safetensors(random_state(Root), tmp_path / "m.safetensors")
    r = load_checkpoint(Root, tmp_path / "m.safetensors")
    assert r.materialized == {"freqs": "Root.init_states() on the root"}
    assert torch.equal(r.model.freqs, torch.tensor([0.0, 2.0, 4.0]))
    # init="init_weights" names one method: a root without it materialises nothing
    r = load_checkpoint(Root, tmp_path / "m.safetensors", init="init_weights", strict=False)
    assert r.unmaterialized == ["freqs"]


def test_unrecoverable_buffer_strict_and_not(tmp_path):
    save_safetensors(random_state(NoHookBuffer), tmp_path / "m.safetensors")
    with torch.device("meta"):
        m = NoHookBuffer()
    with pytest.raises(CheckpointError, match="not re-created by any init entry point: table"):
        load_checkpoint(m, tmp_path / "m.safetensors")
    assert m.proj.weight.device.type == "meta"
    r = load_checkpoint(m, tmp_path / "m.safetensors", strict=False)
    assert r.unmaterialized == ["table"] and m.table.device.type == "meta"
    assert m.proj.weight.device.type == "cpu"
    assert "NOT materialised" in str(r)


def test_hook_that_leaves_poison_is_not_counted(tmp_path):
    class Lazy(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))
            self.register_buffer("b", torch.ones(2), persistent=False)

        def reset_parameters(self):  # forgets the buffer
            self.w.fill_(1.0)

    save_safetensors({"w": torch.ones(2)}, tmp_path / "m.safetensors")
    with pytest.raises(CheckpointError, match="init entry point: b"):
        load_checkpoint(Lazy, tmp_path / "m.safetensors")


def test_read_failure_midway_leaves_model_untouched(tmp_path, monkeypatch):
    sd = random_state(Plain)
    save_safetensors(sd, tmp_path / "m.safetensors")
    with torch.device("meta"):
        m = Plain()
    before = {n: p for n, p in m.named_parameters()}
    from metalint.loader import formats

    real = formats.SafetensorsSource.read
    calls = []

    def flaky(self, name, *a):
        calls.append(name)
        if len(calls) == 3:
            raise CheckpointError("read failed: simulated I/O error", file=self.path, tensor=name)
        return real(self, name, *a)

    monkeypatch.setattr(formats.SafetensorsSource, "read", flaky)
    with pytest.raises(CheckpointError, match="simulated"):
        load_checkpoint(m, tmp_path / "m.safetensors")
    assert {n: p for n, p in m.named_parameters()} == before
    assert all(p.device.type == "meta" for p in m.parameters())


def test_init_failure_rolls_back_installed_tensors(tmp_path):
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))
            self.register_buffer("b", torch.ones(2), persistent=False)

        def reset_parameters(self):
            raise RuntimeError("boom")

    save_safetensors({"w": torch.ones(2)}, tmp_path / "m.safetensors")
    with torch.device("meta"):
        m = Bad()
    w = m.w
    with pytest.raises(CheckpointError, match="init entry point Bad on the root failed"):
        load_checkpoint(m, tmp_path / "m.safetensors")
    assert m.w is w and m.w.device.type == "meta" and m.b.device.type == "meta"


def test_eager_model_passed_in(tmp_path):
    sd = random_state(Plain, seed=3)
    save_safetensors(sd, tmp_path / "m.safetensors")
    m = Plain()
    r = load_checkpoint(m, tmp_path / "m.safetensors", dtype="bf16")
    assert m.a.weight.dtype == torch.bfloat16
    assert torch.equal(m.a.weight, sd["a.weight"].to(torch.bfloat16))
    assert r.loaded and not r.materialized


def test_init_callable_and_none(tmp_path):
    sd = random_state(Plain)
    sd.pop("b.bias")
    save_safetensors(sd, tmp_path / "m.safetensors")

    def fill(root):
        root.b.bias.fill_(5.0)
        root.a.weight.fill_(-1.0)  # hidden behind a meta placeholder: no effect

    r = load_checkpoint(Plain, tmp_path / "m.safetensors", allow_missing=["b.bias"], init=fill)
    assert r.materialized == {"b.bias": "fill() on the root"}
    assert torch.equal(r.model.b.bias, torch.full((2,), 5.0))
    assert torch.equal(r.model.a.weight, sd["a.weight"])
    with pytest.raises(CheckpointError, match="not re-created by any init entry point: b.bias"):
        load_checkpoint(Plain, tmp_path / "m.safetensors", allow_missing=["b.bias"], init="none")


def test_children_first_then_parent_hook(tmp_path):
    class Child(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(2))
            self.register_buffer("c", torch.zeros(2), persistent=False)

        def reset_parameters(self):
            self.w.fill_(1.0)
            self.c.fill_(2.0)

    class NoHook(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("d", torch.zeros(2), persistent=False)

    class Parent(nn.Module):
        def __init__(self):
            super().__init__()
            self.child = Child()
            self.bare = NoHook()

        def reset_parameters(self):  # re-inits its whole subtree, as some parents do
            self.child.c.fill_(-9.0)
            self.bare.d.fill_(3.0)

    save_safetensors({"child.w": torch.full((2,), 4.0)}, tmp_path / "m.safetensors")
    r = load_checkpoint(Parent, tmp_path / "m.safetensors")
    m = r.model
    assert torch.equal(m.child.w, torch.full((2,), 4.0))  # loaded, not re-initialised
    assert torch.equal(m.child.c, torch.full((2,), 2.0))  # by the child's own hook, kept
    assert torch.equal(m.bare.d, torch.full((2,), 3.0))  # nearest ancestor with a hook
    assert r.materialized == {
        "child.c": "Child.reset_parameters() on 'child'",
        "bare.d": "Parent.reset_parameters() on the root",
    }
