"""transformers idioms judged at model level: code-generation templates (``modular_*.py``)
judged as the code generated from them, layers picked from layer-type tables, and a fused
bias concatenated from zeros."""

from __future__ import annotations

import shutil
from pathlib import Path

from metalint.check import run_check
from metalint.config import Settings
from metalint.static.templates import generated_name, twins

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "fixtures" / "check"
TOYHUB = ROOT / "fixtures" / "transformers" / "toyhub"


def _findings(folder: Path, *paths: str, monkeypatch) -> list:
    monkeypatch.chdir(folder)
    settings = Settings(root=folder)
    result = run_check([Path(p) for p in paths], settings, use_cache=False, workers=1)
    return [
        (Path(d.filename).name, d.start.row, d.code, d.symbol, d.subject, d.root)
        for d in result.diagnostics
    ]


# -- templates ---------------------------------------------------------------------------------
def test_generated_name_of_a_template_class():
    assert generated_name("pkg.models.llama.modular_llama.LlamaMLP") == (
        "pkg.models.llama.modeling_llama.LlamaMLP"
    )
    assert generated_name("pkg.models.llama.modular_llama.Outer.Inner") == (
        "pkg.models.llama.modeling_llama.Outer.Inner"
    )
    assert generated_name("pkg.models.llama.modeling_llama.LlamaMLP") is None
    # the last part is the class, never the module
    assert generated_name("pkg.modular_thing") is None
    assert twins(["a.modular_x.A", "a.modeling_x.A", "a.modular_x.B"]) == {
        "a.modular_x.A": "a.modeling_x.A"
    }


def test_template_takes_the_judgement_of_its_generated_file(monkeypatch):
    got = _findings(TOYHUB.parent, "toyhub", monkeypatch=monkeypatch)
    root = "toyhub.models.toy.modeling_toy.ToyModel"
    # the generated model re-draws `cls_token` (its `_init_weights` names `ToyEmbeddings`): the
    # template, whose inherited dispatch names `BaseEmbeddings`, is not flagged for it; the
    # tensors the generated model loses are flagged on the template's lines, under the
    # generated root
    assert got == [
        ("modeling_toy.py", 19, "ML001", "ToyEmbeddings", ("mask_token",), root),
        ("modeling_toy.py", 26, "ML001", "ToyLayerScale", ("lambda1",), root),
        ("modular_toy.py", 13, "ML001", "ToyEmbeddings", ("mask_token",), root),
        ("modular_toy.py", 20, "ML001", "ToyLayerScale", ("lambda1",), root),
    ]


def test_template_findings_follow_the_generated_file(tmp_path, monkeypatch):
    # the generated file decides: once it re-draws `mask_token` too, neither file is flagged
    # for it, whatever the template's own inheritance says
    tree = tmp_path / "toyhub"
    shutil.copytree(TOYHUB, tree)
    modeling = tree / "models" / "toy" / "modeling_toy.py"
    text = modeling.read_text(encoding="utf-8")
    fixed = text.replace(
        "            init.trunc_normal_(module.cls_token, mean=0.0, std=self.config.initializer_range)\n",
        "            init.trunc_normal_(module.cls_token, mean=0.0, std=self.config.initializer_range)\n"
        "            init.zeros_(module.mask_token)\n",
    )
    assert fixed != text
    modeling.write_text(fixed, encoding="utf-8")
    got = _findings(tmp_path, "toyhub", monkeypatch=monkeypatch)
    assert [(f, s, sub) for f, _, _, s, sub, _ in got] == [
        ("modeling_toy.py", "ToyLayerScale", ("lambda1",)),
        ("modular_toy.py", "ToyLayerScale", ("lambda1",)),
    ]


def test_template_alone_is_judged_as_before(tmp_path, monkeypatch):
    # without its generated file a template's classes are judged among the template's own
    # classes (a model not generated yet): nothing contains `ToyEmbeddings` there
    tree = tmp_path / "toyhub"
    shutil.copytree(TOYHUB, tree)
    (tree / "models" / "toy" / "modeling_toy.py").unlink()
    got = _findings(tmp_path, "toyhub", monkeypatch=monkeypatch)
    assert [(f, s, sub, r) for f, _, _, s, sub, r in got] == [
        ("modular_toy.py", "ToyEmbeddings", ("cls_token",), None),
        ("modular_toy.py", "ToyEmbeddings", ("mask_token",), None),
        ("modular_toy.py", "ToyLayerScale", ("lambda1",), None),
    ]


def test_template_named_alone_is_judged_in_its_project(tmp_path, cli, monkeypatch):
    # a contributor checks the template they edit: the project's generated file judges it
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    shutil.copytree(TOYHUB, tmp_path / "toyhub")
    (tmp_path / "pyproject.toml").write_text("[tool.metalint]\n", encoding="utf-8")
    out = cli("check", "--no-cache", "toyhub/models/toy/modular_toy.py").output
    lines = [line for line in out.splitlines() if ": ML" in line]
    assert [line.split(" ")[0] for line in lines] == [
        "toyhub/models/toy/modular_toy.py:13:9:",
        "toyhub/models/toy/modular_toy.py:20:9:",
    ], out
    assert all("lost under `ToyModel.init_weights()`" in line for line in lines)


# -- layer-type tables ---------------------------------------------------------------------
def test_layers_of_a_layer_type_table_are_children_of_the_model(monkeypatch):
    got = _findings(CHECK, "layer_type_table.py", monkeypatch=monkeypatch)
    # `A_log`, `D` (module-level table through a local) and `expert_bias` (a dict literal
    # indexed in place) are re-created by the model's `_init_weights`; `sink` is lost there
    assert got == [
        (
            "layer_type_table.py",
            29,
            "ML001",
            "HybridAttention",
            ("sink",),
            "layer_type_table.HybridModel",
        )
    ]


# -- a bias concatenated from zeros --------------------------------------------------------
def test_bias_concatenated_from_zeros_is_what_the_model_init_gives(monkeypatch):
    got = _findings(CHECK, "zeros_concat_bias.py", monkeypatch=monkeypatch)
    # Blip-2's `torch.cat((q_bias, torch.zeros_like(v_bias), v_bias))` of zeros: the base
    # `_init_weights` zeroes every `nn.Linear` bias; a concatenation holding ones is lost
    assert got == [
        (
            "zeros_concat_bias.py",
            39,
            "ML003",
            "ScaledVisionAttention",
            ("qkv.bias",),
            "zeros_concat_bias.VisionModel",
        )
    ]
