"""Acceptance tests of ``metalint probe`` on the tiny models in tests/probe_models/.

Child processes are expensive here (each imports torch): one child probes the whole
``layers.py``; the rest runs in-process through :func:`metalint.probe.build.probe`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from metalint.check import check_command
from metalint.diagnostics import Diagnostic, Position
from metalint.probe.command import ProbeReport, probe_command, run_probe
from metalint.probe.isolate import Options

MODELS = Path(__file__).parent / "probe_models"
LAYERS = MODELS / "layers.py"


def line_of(path: Path, marker: str) -> int:
    for i, text in enumerate(path.read_text().splitlines(), 1):
        if marker in text:
            return i
    raise AssertionError(marker)


@pytest.fixture(scope="module")
def layers_report() -> ProbeReport:
    return run_probe([str(LAYERS)], Options(device="cpu", timeout=120))


def outcome(rep: ProbeReport, cls: str):
    (o,) = [o for o in rep.outcomes if o.label.endswith(":" + cls)]
    return o


def findings(rep: ProbeReport, cls: str) -> list[dict]:
    o = outcome(rep, cls)
    assert o.kind == "result", o
    return o.result["findings"]


def test_layerscale_dinov2_gamma_lost_at_its_line(layers_report):
    (f,) = findings(layers_report, "LayerScaleDinov2")
    assert f["code"] == "MP001"
    assert f["message"].startswith("`gamma` of LayerScaleDinov2 (gamma) lost its value")
    assert f["location"]["row"] == line_of(LAYERS, "GAMMA-LINE")
    assert Path(f["filename"]).resolve() == LAYERS.resolve()
    assert f["symbol"] == "LayerScaleDinov2"


def test_layerscale_timm_style_passes(layers_report):
    o = outcome(layers_report, "LayerScaleTimm")
    assert o.result["findings"] == []
    assert o.result["init_used"].startswith("reset_parameters()")


def test_rope_non_persistent_inv_freq_lost(layers_report):
    (f,) = findings(layers_report, "Rope")
    assert f["code"] == "MP001" and "`inv_freq`" in f["message"]
    assert (
        f["location"]["row"] == line_of(LAYERS, "INV-FREQ-LINE") - 1
    )  # computed on the line above


def test_parent_init_weights_passes_under_auto(layers_report):
    o = outcome(layers_report, "ParentInit")
    assert o.result["init_used"].startswith("root init_weights() after submodules'")
    assert o.result["findings"] == []


def test_per_module_init_weights_patching_a_child(layers_report, layers):
    from metalint.probe.build import probe

    o = outcome(layers_report, "PatchesChildNorm")
    assert o.result["findings"] == []  # timm protocol: children first, then the patch
    r = probe(layers.PatchesChildNorm, init="init_weights")  # root hook alone: children lost
    assert {d.message.split(" ")[0] for d in r.findings} == {"`bias`", "`weight`"}


def test_tied_embeddings_reported(layers_report):
    fs = findings(layers_report, "TiedEmbeddings")
    tie = [f for f in fs if f["code"] == "MP005"]
    assert tie and "embed.weight, head.weight" in tie[0]["message"]
    assert tie[0]["location"]["row"] == line_of(LAYERS, "TIE-LINE")


def test_item_in_init_is_mp006(layers_report):
    """The meta build raises (MP006); an eager build wiped by ``to_empty()`` stands in for it
    and shows what else is lost: ``w``, filled from the read value, is never re-created."""
    f, lost = findings(layers_report, "DataDependent")
    assert f["code"] == "MP006" and "item()" in f["message"]
    assert f["location"]["row"] == line_of(LAYERS, "ITEM-LINE")
    assert lost["code"] == "MP001" and lost["message"].startswith(
        "`w` of DataDependent (w) lost its value after an eager build (its meta build raised)"
    )


def test_device_escape_is_mp007(layers_report):
    fs = findings(layers_report, "Escapes")
    esc = sorted(f["location"]["row"] for f in fs if f["code"] == "MP007")
    assert esc == [line_of(LAYERS, "ESCAPE-LINE"), line_of(LAYERS, "ESCAPE-LINE") + 1]
    assert any("48 bytes on cpu" in f["message"] for f in fs)
    assert outcome(layers_report, "Escapes").result["escape_bytes"] == 80


def test_legacy_constructor_wrapped_in_a_parameter_is_kept(layers_report):
    """``nn.Parameter(torch.Tensor(n, n))`` on meta: the CPU tensor is wrapped in a new object
    (its weakref dies) but the model keeps its memory: MP007 "kept", not a freed temporary."""
    (f,) = findings(layers_report, "LegacyParameter")
    assert f["code"] == "MP007" and "kept in the model" in f["message"]
    assert f["location"]["row"] == line_of(LAYERS, "LEGACY-PARAMETER-LINE")


def test_plain_tensor_attribute_left_on_meta(layers_report):
    (f,) = findings(layers_report, "PlainAttribute")
    assert f["code"] == "MP003" and "`mask`" in f["message"]


def test_safe_module_with_inferred_arguments(layers_report):
    o = outcome(layers_report, "Safe")
    assert o.args == "in_features=16, out_features=16, num_heads=2"
    assert o.result["findings"] == []
    assert o.result["meta_alloc_bytes"] < 1 << 20


def test_uninferable_constructor_is_skipped(layers_report):
    o = outcome(layers_report, "NeedsObject")
    assert o.kind == "skip" and o.message.startswith("cannot construct: required parameter `config")


def test_hook_order_dependence_is_mp009(layers_report):
    (f,) = findings(layers_report, "ResetsChild")
    assert f["code"] == "MP009" and "parents-first fails ['fc.weight']" in f["message"]


# ---------------------------------------------------------------- in-process


@pytest.fixture(scope="module")
def layers():
    sys.path.insert(0, str(MODELS))
    try:
        import layers as mod
    finally:
        sys.path.remove(str(MODELS))
    return mod


def test_parent_init_fails_under_reset_parameters(layers):
    from metalint.probe.build import probe

    r = probe(layers.ParentInit, init="reset_parameters")
    assert r.status == "failed"
    codes = {(d.code, d.message.split(" ")[0]) for d in r.findings}
    assert ("MP002", "`weight`") in codes and ("MP001", "`bias`") in codes
    assert all(d.symbol == "Linear" for d in r.findings)
    assert r.lost == 4
    r = probe(layers.ParentInit, init="init_weights")
    assert r.findings == [] and r.init_used == "init_weights()"


def test_dotted_init_callable(layers):
    from metalint.probe.build import probe

    r = probe(layers.ParentInit, init="tests.probe_models.layers:ParentInit.init_weights")
    assert r.findings == [] and r.init_used.startswith("tests.probe_models.layers:")


def test_multihead_attention_is_a_true_finding():
    from torch import nn

    from metalint.probe.build import probe

    r = probe(lambda: nn.MultiheadAttention(8, 2))
    names = {d.message.split(" ")[0] for d in r.findings}
    assert {"`in_proj_weight`", "`in_proj_bias`"} <= names


def test_a_value_that_is_nan_eagerly_is_judged_against_another_poison():
    """whisper's ``sinusoids(n_ctx, channels=2)`` divides by ``channels // 2 - 1 == 0``: the
    eager buffer is all NaN, like the NaN poison. Re-created by the hook it passes; when
    nothing re-creates it, it is still reported lost (the poison was then a finite value)."""
    import torch
    from torch import nn

    from metalint.probe.build import probe

    def table(n: int) -> torch.Tensor:
        return torch.arange(n) / torch.zeros(n) * 0.0  # 0/0 and k/0 * 0: all NaN

    class Kept(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("table", table(4), persistent=False)
            self.reset_parameters()

        def reset_parameters(self) -> None:
            with torch.no_grad():
                self.table.copy_(table(4))

    class Lost(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("table", table(4), persistent=False)

    assert torch.isnan(table(4)).all()
    kept = probe(Kept, init="reset_parameters")
    assert kept.status == "passed" and kept.findings == [], kept.findings
    lost = probe(Lost, init="reset_parameters")
    assert lost.status == "failed" and "table" in lost.findings[0].message, lost.findings


def test_init_weights_missing_is_setup_error(layers):
    from metalint.probe.build import ProbeSetupError, probe

    with pytest.raises(ProbeSetupError):
        probe(lambda: layers.LayerScaleDinov2(4), init="init_weights")


# ---------------------------------------------------------------- CLI: formats, exit codes


def test_cli_factory_json_and_exit_1():
    runner = CliRunner()
    res = runner.invoke(
        probe_command,
        [f"{MODELS / 'small.py'}:make_unsafe", "--output-format", "json", "--device", "cpu"],
    )
    assert res.exit_code == 1, res.output
    data = json.loads(res.output)
    (d,) = data
    assert d["code"] == "MP001" and d["symbol"] == "Scale"
    assert "(0.ls.gamma and 2 more)" in d["message"]  # one finding per submodule class
    assert d["location"]["row"] == line_of(MODELS / "small.py", "SCALE-LINE")


def test_cli_crash_and_hang_do_not_stop_the_run():
    runner = CliRunner()
    crashers = MODELS / "crashers.py"
    res = runner.invoke(
        probe_command,
        [str(crashers), str(MODELS / "broken_import.py"), "--timeout", "10", "--device", "cpu"],
    )
    assert res.exit_code == 2, res.output
    out = res.output
    assert "probe crashers.py:FirstOk on cpu via reset_parameters() children first: passed" in out
    assert "error crashers.py:Segfaults: crashed (SIGSEGV)" in out
    assert "error crashers.py:Hangs: timed out after 10 s" in out
    assert "probe crashers.py:LastLost(dim=16)" in out and "1 of 1 tensors lost" in out
    assert f"crashers.py:{line_of(crashers, 'SEGV-LINE')}:1: ML900" in out
    assert f"crashers.py:{line_of(crashers, 'HANG-LINE')}:1: ML900" in out
    assert "ModuleNotFoundError" in out and "broken_import.py" in out


def test_multi_line_import_error_is_one_line():
    res = CliRunner().invoke(
        probe_command, [str(MODELS / "multiline_import_error.py"), "--device", "cpu"]
    )
    assert res.exit_code == 2, res.output
    (line,) = [ln for ln in res.output.splitlines() if " ML900 " in ln]
    assert line.startswith("tests/probe_models/multiline_import_error.py:1:1: ML900 ")
    assert line.endswith(
        "could not be checked: ImportError: torchao not installed. "
        "Please follow the instructions to install it."
    )


def test_exit_0_and_text_summary(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.metalint.probe]\nfactories = ["tests.probe_models.small:make_safe"]\n'
    )
    from metalint.probe.target import load_settings_for_probe

    assert load_settings_for_probe(tmp_path).probe == {
        "factories": ["tests.probe_models.small:make_safe"]
    }
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(MODELS.parent.parent))
    res = CliRunner().invoke(probe_command, ["--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert (
        "tests.probe_models.small:make_safe on cpu via reset_parameters() children first: passed"
        in res.output
    )
    assert res.output.rstrip().endswith("All checks passed!")


def test_configured_hooks_run_on_every_module(tmp_path):
    """``[tool.metalint] hooks`` makes check count what ``rope_init`` re-creates; the probe
    calls it on every module that has it, so the two agree. Both read the pyproject.toml
    nearest to the file they are given, or ``--config``."""
    model = tmp_path / "configured_hook.py"
    model.write_text((MODELS / "configured_hook.py").read_text())
    target, check = f"{model}:make", ["--no-cache", "--select", "ML", str(model)]
    res = CliRunner().invoke(probe_command, [target, "--device", "cpu"])
    assert res.exit_code == 1, res.output
    assert f"configured_hook.py:{line_of(model, 'THETA-LINE')}:9: MP001 `theta`" in res.output
    assert CliRunner().invoke(check_command, check).exit_code == 1

    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.metalint]\nhooks = ["rope_init", "_private"]\n')
    passed = "via reset_parameters() children first + rope_init(): passed"
    res = CliRunner().invoke(probe_command, [target, "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert passed in res.output
    res = CliRunner().invoke(check_command, check)
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(
        probe_command,
        [f"{MODELS / 'configured_hook.py'}:make", "--device", "cpu", "--config", str(config)],
    )
    assert res.exit_code == 0 and passed in res.output, res.output


def test_configured_hooks_run_under_the_materialisation_device():
    """torchtune calls ``rope_init()`` under ``with torch.device(device)``: tensors the hook
    creates land where ``to_empty`` put the model (meta stands in for a GPU here)."""
    import torch
    from torch import nn

    from metalint.probe.build import run_init

    seen = []

    class Rope(nn.Module):
        def rope_init(self):
            seen.append(torch.empty(0).device.type)

    used = run_init(nn.Sequential(Rope()), "reset_parameters", hooks=("rope_init",), device="meta")
    assert seen == ["meta"] and used == "reset_parameters() children first + rope_init()"
    assert torch.empty(0).device.type == "cpu"


def test_per_module_hooks_leave_out_built_in_and_private_ones():
    from metalint.probe.build import per_module_hooks

    hooks = (
        "reset_parameters",
        "rope_init",
        "_init_weights",
        "_private",
        "init_non_persistent_buffers",
        "rope_init",
        "init_states",
    )
    assert per_module_hooks(hooks) == ("rope_init", "init_states")


def test_transient_small_escape_is_not_reported(layers_report):
    o = outcome(layers_report, "TransientEscape")
    assert o.result["findings"] == []
    assert o.result["escape_bytes"] > 0  # seen and counted, but freed before the build ended


# ---------------------------------------------------------------- units (no torch model builds)


def test_argument_inference():
    import torch
    from torch import nn

    from metalint.probe.target import CannotConstruct, infer_arguments

    class A(nn.Module):
        def __init__(
            self, dim, num_heads, eps: float, qkv_bias: bool, depth: int, ratio: float = 4.0
        ):
            super().__init__()

    assert infer_arguments(A) == {
        "dim": 16,
        "num_heads": 2,
        "eps": 1e-5,
        "qkv_bias": False,
        "depth": 1,
    }

    class KVCache(nn.Module):  # torchtune's: the cache's dtype is required
        def __init__(self, max_seq_len: int, dtype: torch.dtype, cache_dtype=None):
            super().__init__()

    assert infer_arguments(KVCache) == {"max_seq_len": 16, "dtype": torch.float32}

    class B(nn.Module):
        def __init__(self, block_fn):
            super().__init__()

    with pytest.raises(CannotConstruct, match="`block_fn`"):
        infer_arguments(B)


def test_parse_target(tmp_path):
    from metalint.probe.target import parse_target

    (tmp_path / "a.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("")
    assert [t.path for t in parse_target(str(tmp_path))] == [
        str(tmp_path / "a.py"),
        str(tmp_path / "sub" / "b.py"),
    ]
    (t,) = parse_target(f"{tmp_path / 'a.py'}:Model")
    assert t.path == str(tmp_path / "a.py") and t.attr == "Model"
    (t,) = parse_target("pkg.mod:build_small")
    assert (t.module, t.attr, t.path) == ("pkg.mod", "build_small", None)


def test_several_classes_of_one_module_in_one_target():
    from metalint.probe.target import parse_target, resolve_items

    (t,) = parse_target(f"{LAYERS}:LayerScaleDinov2,LayerScaleTimm")
    items = resolve_items(t)
    assert [i.label for i in items] == [f"{LAYERS}:LayerScaleDinov2", f"{LAYERS}:LayerScaleTimm"]
    assert [i.qualname for i in items] == ["LayerScaleDinov2", "LayerScaleTimm"]
    assert all(i.make is not None for i in items)
    (t,) = parse_target(f"{LAYERS}:LayerScaleDinov2,NoSuchClass")
    with pytest.raises(AttributeError, match="NoSuchClass"):
        resolve_items(t)


def test_statistical_compare_accepts_two_draws_and_rejects_another_std():
    import torch

    from metalint.probe.compare import compare, tensor_stats

    for seed in range(5):
        torch.manual_seed(seed)
        a, b = torch.empty(64, 64).normal_(0, 0.02), torch.empty(64, 64).normal_(0, 0.02)
        ea, eb = tensor_stats(a), tensor_stats(b)
        ea.random = eb.random = True
        assert compare(ea, eb, b) is None
        c = torch.empty(64, 64).uniform_(-0.1, 0.1)
        d = compare(ea, tensor_stats(c), c)
        assert d is not None and d.code == "MP002" and "std" in d.detail
    # one clamped extreme value in a large tensor does not decide (timm trunc_normal_ at -2)
    x = torch.empty(512, 512).normal_(0, 0.02)
    y = torch.empty(512, 512).normal_(0, 0.02)
    y[0, 0] = -2.0
    ex = tensor_stats(x)
    ex.random = True
    assert compare(ex, tensor_stats(y), y) is None


def test_deterministic_compare_is_exact():
    import torch

    from metalint.probe.compare import compare, tensor_stats

    a = torch.arange(10, dtype=torch.float32)
    b = a.clone()
    b[3] += 1e-3
    assert compare(tensor_stats(a), tensor_stats(a.clone()), a.clone()) is None
    d = compare(tensor_stats(a), tensor_stats(b), b)
    assert d is not None and d.code == "MP001"


# ---------------------------------------------------------------- merge


def _static(code: str, symbol: str, message: str, filename: str, *subject: str) -> Diagnostic:
    return Diagnostic(
        code, message, filename, Position(1, 1), Position(1, 2), symbol=symbol, subject=subject
    )


def test_mark_verdicts(layers_report):
    from metalint.probe.merge import mark_verdicts

    f = str(LAYERS)
    diags = [
        _static(
            "ML001", "LayerScaleDinov2", "`gamma` is created from a value in `__init__`", f, "gamma"
        ),
        _static(
            "ML001", "LayerScaleTimm", "`gamma` is created from a value in `__init__`", f, "gamma"
        ),
        _static("ML002", "Rope", "`inv_freq` registered from a computed value", f, "inv_freq"),
        _static("ML008", "DataDependent", "`.item()` in `__init__`", f),
        _static("ML001", "DataDependent", "`w` is created from a value", f, "w"),
        _static("ML009", "Escapes", "`table` explicit device", f, "table"),
        _static("ML011", "TiedEmbeddings", "`head.weight` tied by assignment", f),
        _static("ML004", "Safe", "owns tensors but has no public reset hook", f),
        _static("ML001", "NotProbed", "`x` ...", f, "x"),
        _static("ML001", "LayerScaleDinov2", "`gamma` ...", "/elsewhere/other.py", "gamma"),
    ]
    got = [d.verdict for d in mark_verdicts(diags, layers_report)]
    assert got == [
        "confirmed",
        "refuted",
        "confirmed",
        "confirmed",
        "confirmed",  # judged on the eager stand-in for the meta build that raised
        "confirmed",
        "confirmed",
        "refuted",
        None,
        None,
    ]


def test_mark_verdicts_factory_submodules_and_subtree():
    from metalint.probe.merge import mark_verdicts

    classes = {
        "/m/x.py::Block": {
            "file": "/m/x.py",
            "cls": "Block",
            "attrs": [],
            "broken": {},
            "codes": [],
            "subtree_broken": 3,
            "raised": False,
        },
        "/m/x.py::Scale": {
            "file": "/m/x.py",
            "cls": "Scale",
            "attrs": ["gamma"],
            "broken": {"gamma": ["MP001"]},
            "codes": [],
            "subtree_broken": 3,
            "raised": False,
        },
    }
    diags = [
        _static("ML010", "Block", "parent-applied `_init_weights`", "/m/x.py"),
        _static("ML004", "Block", "owns no reset hook", "/m/x.py"),
        _static("ML001", "Scale", "`gamma` from a value", "/m/x.py", "gamma"),
        # tensors the default build did not make (None buffer, flag-gated parameter): not exercised
        _static(
            "ML002",
            "Scale",
            "buffer `pos_weight` is computed (`torch.tensor(w)`)",
            "/m/x.py",
            "pos_weight",
        ),
        _static("ML001", "Scale", "`rel_pos_h` is created from a value", "/m/x.py", "rel_pos_h"),
        _static(
            "ML004",
            "Scale",
            "`Scale` owns `pos_weight` but has no public reset hook",
            "/m/x.py",
            "pos_weight",
        ),
        _static(
            "ML004",
            "Scale",
            "`Scale` owns `gamma`, `pos_weight` but has no public reset hook",
            "/m/x.py",
            "gamma",
            "pos_weight",
        ),
    ]
    got = [d.verdict for d in mark_verdicts(diags, {"classes": classes})]
    assert got == ["confirmed", "refuted", "confirmed", None, None, None, "confirmed"]


def test_guessed_arguments_rejected_is_a_skip(layers_report):
    o = outcome(layers_report, "RejectsGuess")
    assert o.kind == "skip"
    assert o.message.startswith(
        "cannot construct: RejectsGuess(dim=16): eager construction raised ValueError"
    )


def test_sharded_device_needs_a_gpu_per_rank(monkeypatch):
    # seen on a 1-GPU H100 box: `probe --shard tp --nproc 4` picked NCCL on cuda and every rank
    # but 0 died of "invalid device ordinal"
    import torch

    from metalint.probe.build import ProbeSetupError, pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert pick_device("auto") == "cuda"
    assert pick_device("auto", ranks=1) == "cuda"
    assert pick_device("auto", ranks=2) == "cpu"
    with pytest.raises(ProbeSetupError, match=r"on 4 ranks needs 4 CUDA devices .* has 1"):
        pick_device("cuda", ranks=4)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert pick_device("auto", ranks=4) == "cuda" == pick_device("cuda", ranks=4)


def test_device_auto_and_cuda(layers):
    import torch

    from metalint.probe.build import ProbeSetupError, pick_device, probe

    assert pick_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert pick_device("cpu") == "cpu"
    if torch.cuda.is_available():
        r = probe(lambda: layers.LayerScaleTimm(8), device="cuda")
        assert r.device == "cuda" and r.findings == []
        r = probe(lambda: layers.LayerScaleDinov2(8), device="cuda")
        assert [d.code for d in r.findings] == ["MP001"]
    else:
        with pytest.raises(ProbeSetupError, match=r"to_empty\(device='cuda'\)"):
            probe(lambda: layers.LayerScaleTimm(8), device="cuda")


def test_non_finite_after_init_is_mp004(layers_report):
    (f,) = findings(layers_report, "LogScale")
    assert f["code"] == "MP004" and "1 non-finite of 4" in f["message"]


def test_progress_only_on_a_tty_outside_ci(monkeypatch):
    from metalint.probe import command

    class Tty:
        def isatty(self):
            return True

    monkeypatch.setattr(command.sys, "stderr", Tty())
    monkeypatch.delenv("CI", raising=False)
    assert command._progress_enabled()
    monkeypatch.setenv("CI", "true")
    assert not command._progress_enabled()


def test_reset_touching_children_is_confirmed_by_hook_order():
    """ML006: no value differs children-first, but parents-first does (MP009): confirmed."""
    from metalint.probe.merge import mark_verdicts

    classes = {
        "/m/x.py::MHA": {
            "file": "/m/x.py",
            "cls": "MHA",
            "attrs": [],
            "broken": {},
            "codes": ["MP009"],
            "subtree_broken": 0,
            "raised": False,
        },
        "/m/x.py::Other": {
            "file": "/m/x.py",
            "cls": "Other",
            "attrs": [],
            "broken": {},
            "codes": [],
            "subtree_broken": 0,
            "raised": False,
        },
    }
    diags = [
        _static("ML006", "MHA", "`k_proj.weight` of a child", "/m/x.py", "k_proj.weight"),
        _static("ML006", "Other", "`fc.weight` of a child", "/m/x.py", "fc.weight"),
    ]
    got = [d.verdict for d in mark_verdicts(diags, {"classes": classes})]
    assert got == ["confirmed", "refuted"]


def test_child_tensor_finding_is_judged_on_the_subtree():
    """ML003 on `bn.weight` (a child's tensor): broken in some build of the class: confirmed."""
    from metalint.probe.merge import mark_verdicts

    def info(cls, subtree):
        return {
            "file": "/m/x.py",
            "cls": cls,
            "attrs": [],
            "broken": {},
            "codes": [],
            "subtree_broken": subtree,
            "raised": False,
        }

    classes = {"/m/x.py::ConvNorm": info("ConvNorm", 1), "/m/x.py::Other": info("Other", 0)}
    diags = [
        _static(
            "ML003",
            "ConvNorm",
            "`bn.weight` (a tensor of the child `bn`) is initialised",
            "/m/x.py",
            "bn.weight",
        ),
        _static(
            "ML003",
            "Other",
            "`bn.weight` (a tensor of the child `bn`) is initialised",
            "/m/x.py",
            "bn.weight",
        ),
    ]
    got = [d.verdict for d in mark_verdicts(diags, {"classes": classes})]
    assert got == ["confirmed", "refuted"]


def _frozen_when_real():
    """A module that freezes its weight only when built for real: the meta build leaves it
    trainable."""
    import torch
    from torch import nn

    class FrozenWhenReal(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(3))
            if not self.weight.is_meta:
                self.weight.requires_grad_(False)

        def reset_parameters(self):
            nn.init.ones_(self.weight)

    return FrozenWhenReal()


def test_requires_grad_changed_by_the_meta_build_is_mp008():
    from metalint.probe.build import probe

    r = probe(_frozen_when_real)
    assert [(d.code, d.message.split(" ")[0]) for d in r.findings] == [("MP008", "`weight`")]
    assert "requires_grad False -> True" in r.findings[0].message


def test_distributed_stats_keep_requires_grad():
    """The all-reduced statistics of the distributed probe record a parameter's
    requires_grad, as compare.tensor_stats does (a world of one gloo rank)."""
    import torch
    import torch.distributed as dist
    from torch import nn

    from metalint.probe.compare import tensor_stats
    from metalint.probe.distributed import reduced_stats

    trainable = nn.Parameter(torch.ones(4))
    frozen = nn.Parameter(torch.ones(4), requires_grad=False)
    assert tensor_stats(trainable).requires_grad and not tensor_stats(frozen).requires_grad
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        st = reduced_stats([("trainable", trainable), ("frozen", frozen)])
    finally:
        dist.destroy_process_group()
    assert st["trainable"].requires_grad and not st["frozen"].requires_grad
    assert st["trainable"].mean == 1.0


def test_meta_build_that_raised_is_judged_on_an_eager_stand_in():
    """The model's meta build raised in one class: that class's ML008 is confirmed, and the
    ML008 of a class built after the raise was never reached (unproven). The other findings
    are judged on an eager build that ``to_empty()`` wipes in its place (SchNet's: they were
    all unproven): the parent's ``reset_parameters()`` zeroing its child's bias loses the
    child's own init (ML006 confirmed); a plain tensor is not judged (ML007: what stays on
    meta needs the meta build)."""
    from metalint.probe.build import probe
    from metalint.probe.merge import mark_verdicts

    sys.path.insert(0, str(MODELS))
    try:
        from raising import ModelRaisingFirst
    finally:
        sys.path.remove(str(MODELS))
    res = probe(ModelRaisingFirst, init="reset_parameters")
    f = str(MODELS / "raising.py")
    diags = [
        _static("ML008", "RaisesOnMeta", "`.item()` in `__init__`", f),
        _static("ML008", "NeverReachedOnMeta", "`.item()` in `__init__`", f),
        _static("ML006", "ModelRaisingFirst", "it writes `self.later.fc.bias`", f),
        _static("ML007", "NeverReachedOnMeta", "`mask` plain", f, "mask"),
    ]
    got = [d.verdict for d in mark_verdicts(diags, {"classes": res.classes})]
    assert got == ["confirmed", None, "confirmed", None]
    assert {d.code for d in res.findings} == {"MP006", "MP002", "MP009"}


def _attention_flags():
    sys.path.insert(0, str(MODELS))
    try:
        import attention_flags
    finally:
        sys.path.remove(str(MODELS))
    return attention_flags


def test_buffer_finding_is_not_judged_on_a_plain_attribute_of_its_name():
    """monai's SABlock: ``causal_mask`` is a buffer only when ``causal=True``; the default
    build keeps a plain empty tensor of that name, which survives ``to_empty()``. ML002 on the
    buffer is not exercised by that build (unproven, was refuted); the causal build loses it."""
    from metalint.probe.build import probe
    from metalint.probe.merge import mark_verdicts

    mod = _attention_flags()
    f = os.path.realpath(MODELS / "attention_flags.py")
    ml002 = _static("ML002", "CausalSelfAttention", "buffer `causal_mask`", f, "causal_mask")
    ml007 = _static("ML007", "CausalSelfAttention", "`causal_mask` plain", f, "causal_mask")
    default = probe(mod.CausalSelfAttention, init="reset_parameters")
    assert default.classes[f"{f}::CausalSelfAttention"]["plain"] == ["causal_mask"]
    got = [d.verdict for d in mark_verdicts([ml002, ml007], {"classes": default.classes})]
    assert got == [None, "refuted"]
    causal = probe(lambda: mod.CausalSelfAttention(causal=True), init="reset_parameters")
    got = [d.verdict for d in mark_verdicts([ml002, ml007], {"classes": causal.classes})]
    assert got == ["confirmed", None]


def test_merged_summary_counts_tensors_only_of_compared_builds():
    """A class built in two roots, one whose meta build raised: the tensors of that build were
    never compared and do not make a finding on them refuted (one answer for the audit and
    ``check --probe``: ``ProbeReport.classes``)."""
    from metalint.probe.command import ProbeReport
    from metalint.probe.isolate import Outcome
    from metalint.probe.merge import mark_verdicts

    def result(attrs, compared):
        info = {
            "file": "/m/x.py",
            "cls": "Block",
            "module": "x",
            "attrs": attrs,
            "plain": [],
            "broken": {},
            "codes": [],
            "subtree_broken": 0,
            "raised": False,
            "compared": compared,
        }
        return Outcome("m:r", "result", result={"classes": {"/m/x.py::Block": info}})

    diag = _static("ML001", "Block", "`gamma` from a value", "/m/x.py", "gamma")
    raised_only = ProbeReport([result(["gamma"], False), result([], True)])
    assert raised_only.classes["/m/x.py::Block"]["attrs"] == []
    assert [d.verdict for d in mark_verdicts([diag], raised_only)] == [None]
    both = ProbeReport([result(["gamma"], False), result(["gamma"], True)])
    assert [d.verdict for d in mark_verdicts([diag], both)] == ["refuted"]


def test_hook_order_names_the_module_whose_write_changed_the_verdict():
    """Both parents write a child's tensors; only ``ZeroesChildBias``'s write changes the
    verdict parents-first: MP009 is on it, not on the first foreign writer."""
    from metalint.probe.build import probe

    sys.path.insert(0, str(MODELS))
    try:
        from order import Both
    finally:
        sys.path.remove(str(MODELS))
    res = probe(Both, init="reset_parameters")
    assert [(d.code, d.symbol) for d in res.findings] == [("MP009", "ZeroesChildBias")]
    assert "b.proj.bias" in res.findings[0].message


def test_auto_runs_a_root_init_states_after_the_modules_resets():
    """torchtitan's root entry point may be ``init_states()``: ``--init auto`` runs it on the
    root after every module's reset, as check and load read the root's entry point."""
    import torch
    from torch import nn

    from metalint.probe.build import run_init

    class Root(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.register_buffer("freqs", torch.zeros(2), persistent=False)

        def init_states(self):
            self.freqs.copy_(self.lin.bias.detach() + 1)

    with torch.device("meta"):
        m = Root()
    m.to_empty(device="cpu")
    used = run_init(m, "auto")
    assert (
        used
        == "root init_states() after submodules' reset_parameters()/init_weights() children first"
    )
    assert torch.equal(m.freqs, m.lin.bias.detach() + 1)
