"""The tree's own materialisation of a model: the sites that build it on meta, what they run
on it, and the verdicts of check, fix and probe under that sequence."""

from __future__ import annotations

import ast
import json
import shutil
import textwrap
from pathlib import Path

import pytest

from metalint.check import run_check
from metalint.config import ConfigError, load_settings
from metalint.fix.command import run_fix
from metalint.static.pipeline import materialisations
from metalint.static.results import FileResult

FIXTURES = Path(__file__).parent.parent / "fixtures" / "pipeline"
TITAN = FIXTURES / "torchtitan_repo"
ACCEL = FIXTURES / "accelerate_repo"


def sites(source: str, module: str = "train") -> list[dict]:
    source = textwrap.dedent(source)
    return materialisations(ast.parse(source), source, module, False)


def steps(site: dict) -> list[tuple]:
    return [
        (s["kind"], s.get("name") or s.get("function") or s.get("maybe", "")) for s in site["steps"]
    ]


def repo(tmp_path: Path, src: Path, monkeypatch, *, scripts: bool = True) -> Path:
    dest = tmp_path / src.name
    shutil.copytree(src, dest, ignore=None if scripts else shutil.ignore_patterns("scripts"))
    monkeypatch.chdir(dest)
    return dest


def check(root: Path):
    settings = load_settings(root)
    return run_check([Path(".")], settings, use_cache=False, workers=1).diagnostics


def lost(diags) -> set[tuple[str, str]]:
    return {(d.symbol, t) for d in diags for t in d.subject if d.code != "ML016"}


# -- sites (ast, per file) ------------------------------------------------------------------
def test_torchtitan_script_site():
    source = (TITAN / "scripts" / "train.py").read_text()
    (site,) = materialisations(ast.parse(source), source, "train", False)
    assert site["build"] == ["tinytitan.model.Transformer"]
    assert site["meta"] == "all"
    assert steps(site) == [("to_empty", ""), ("entry", "init_weights")]
    assert site["steps"][1]["line"] == 17 and site["steps"][1]["call"] == "model.init_weights()"


def test_accelerate_and_lightning_and_fsdp1_sites():
    (acc,) = sites(
        """
        from accelerate import init_empty_weights
        from pkg import Model
        def load(sd):
            with init_empty_weights():
                model = Model()
            model.load_state_dict(sd, assign=True)
        """
    )
    assert acc["meta"] == "params" and steps(acc) == [("load", False)]
    (light,) = sites(
        """
        from pkg import Model
        def main(fabric):
            with fabric.init_module(empty_init=True):
                model = Model()
            model = fabric.setup(model)
        """
    )
    assert steps(light) == [("reset", "reset_parameters")]
    assert light["steps"][0]["call"] == "fabric.init_module(empty_init=True)"
    (fsdp,) = sites(
        """
        import torch
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from pkg import Model
        def main():
            model = Model(device="meta")
            model = FSDP(model, param_init_fn=lambda m: m.to_empty(device="cuda"))
        """
    )
    assert steps(fsdp) == [("reset", "reset_parameters")]


def test_apply_loop_and_conditional_load_sites():
    (site,) = sites(
        """
        import torch
        from pkg import Model, init_fn
        def main(resume, sd):
            with torch.device("meta"):
                model = Model.from_args(3)
            model.to_empty(device="cuda")
            for m in model.modules():
                if hasattr(m, "reset_parameters"):
                    m.reset_parameters()
            model.apply(init_fn)
            if resume:
                model.load_state_dict(sd)
        """
    )
    assert site["build"] == ["pkg.Model.from_args", "pkg.Model"]
    assert steps(site) == [
        ("to_empty", ""),
        ("reset", "reset_parameters"),
        ("apply", "pkg.init_fn"),
        ("load", True),  # on one branch only: restores nothing for certain
    ]


def test_meta_build_without_materialisation_is_no_site():
    assert (
        sites(
            """
            import torch
            from pkg import Model
            def count():
                with torch.device("meta"):
                    model = Model()
                return sum(p.numel() for p in model.parameters())
            """
        )
        == []
    )


def test_sites_round_trip_through_the_cache():
    source = (TITAN / "scripts" / "train.py").read_text()
    r = FileResult("train.py", "train", materialisations=sites(source))
    back = FileResult.from_json("train.py", json.loads(json.dumps(r.to_json())))
    assert back.materialisations == r.materialisations
    old = r.to_json()
    del old["materialisations"]  # what schema 5 wrote: a miss, not a result without sites
    with pytest.raises(KeyError):
        FileResult.from_json("train.py", old)


# -- check, fix, probe on the torchtitan-style repo ------------------------------------------
TITAN_LOST = {
    ("RMSNorm", "weight"),
    ("RotaryEmbedding", "inv_freq"),
    ("RotaryEmbedding", "cos_cached"),
    ("RotaryEmbedding", "sin_cached"),
    ("LayerScale", "gamma"),
}


def test_torchtitan_check_flags_what_the_script_leaves_and_names_its_call(tmp_path, monkeypatch):
    root = repo(tmp_path, TITAN, monkeypatch)
    diags = check(root)
    assert lost(diags) == TITAN_LOST
    (root_finding,) = [d for d in diags if d.code == "ML016"]
    assert root_finding.symbol == "Transformer" and root_finding.fix is not None
    for d in diags:
        assert d.materialised == ("model.init_weights()", "scripts/train.py", 17), d
        assert "lost under `model.init_weights()` at scripts/train.py:17" in d.message or (
            d.code == "ML016"
        )
    # RMSNorm has its own reset_parameters(): only the script shows that it never runs
    (norm,) = [d for d in diags if d.symbol == "RMSNorm"]
    assert norm.code == "ML015" and norm.protocol == "root init_weights only"


def test_torchtitan_without_the_script_keeps_todays_verdicts(tmp_path, monkeypatch):
    root = repo(tmp_path, TITAN, monkeypatch, scripts=False)
    diags = check(root)
    assert {d.code for d in diags} == {"ML001", "ML002"}
    assert lost(diags) == TITAN_LOST - {("RMSNorm", "weight")}
    assert all(
        d.materialised is None and "lost under `Transformer.init_weights()`" in d.message
        for d in diags
    )


def test_init_weights_only_protocol_without_a_script(tmp_path, monkeypatch):
    root = repo(tmp_path, TITAN, monkeypatch, scripts=False)
    with open(root / "pyproject.toml", "a") as f:
        f.write('\n[tool.metalint]\nprotocol = "init_weights-only"\n')
    diags = check(root)
    assert lost(diags) == TITAN_LOST
    assert any(d.code == "ML016" for d in diags)
    assert all(d.materialised == ("Transformer.init_weights()", "", 0) for d in diags)


def test_protocol_value_is_validated(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.metalint]\nprotocol = "init_weights-onl"\n')
    with pytest.raises(ConfigError, match="init_weights-only"):
        load_settings(tmp_path)


def _probe(init: str = "auto"):
    from metalint.probe.command import run_probe
    from metalint.probe.isolate import Options

    return run_probe(["tinytitan.model:tiny_model"], Options(device="cpu", init=init, timeout=300))


def _probe_lost(rep) -> set[tuple[str, str]]:
    (o,) = rep.outcomes
    assert o.kind == "result", o
    return {
        (f["symbol"], f["message"].split("`")[1])
        for f in o.result["findings"]
        if f["code"] == "MP001"
    }


def test_torchtitan_fix_then_probe_and_check_agree(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    root = repo(tmp_path, TITAN, monkeypatch)
    before = _probe()
    (o,) = before.outcomes
    assert (
        "root init_weights() only, as model.init_weights() at scripts/train.py:17"
        in o.result["init_used"]
    )
    assert _probe_lost(before) == TITAN_LOST
    settings = load_settings(root)
    run_fix(
        [Path(".")],
        settings,
        write=True,
        show_diff=False,
        unsafe=True,
        verify=False,
        use_cache=False,
        workers=1,
        echo=lambda *a, **k: None,
    )
    text = (root / "tinytitan" / "model.py").read_text()
    assert 'if module is not self and hasattr(module, "reset_parameters"):' in text
    assert check(root) == []
    after = _probe()
    (o,) = after.outcomes
    assert o.kind == "result" and o.result["findings"] == [], o.result["findings"]
    # the explicit root-only mode is the same sequence
    assert _probe("init_weights-only").outcomes[0].result["findings"] == []


# -- accelerate: init_empty_weights + load_state_dict(assign=True) ---------------------------
def test_accelerate_load_flags_only_the_non_persistent_buffer(tmp_path, monkeypatch):
    root = repo(tmp_path, ACCEL, monkeypatch)
    diags = check(root)
    assert lost(diags) == {("RotaryEmbedding", "inv_freq")}  # not LayerScale's gamma: loaded
    (d,) = diags
    assert d.materialised == ("model.load_state_dict(..., assign=True)", "scripts/infer.py", 13)
    # the fix is the script's: its buffers stay off meta (a class's new reset_parameters(),
    # which the script never calls, would change nothing)
    run_fix(
        [Path(".")],
        load_settings(root),
        write=True,
        show_diff=False,
        unsafe=True,
        verify=False,
        use_cache=False,
        workers=1,
        echo=lambda *a, **k: None,
    )
    assert "def reset_parameters" not in (root / "tinylm" / "model.py").read_text()
    assert (
        "init_empty_weights(include_buffers=False)" in (root / "scripts" / "infer.py").read_text()
    )
    assert check(root) == []


def test_accelerate_default_builds_buffers_on_the_real_device(tmp_path, monkeypatch):
    root = repo(tmp_path, ACCEL, monkeypatch)
    script = root / "scripts" / "infer.py"
    script.write_text(
        script.read_text().replace(
            "init_empty_weights(include_buffers=True)", "init_empty_weights()"
        )
    )
    assert check(root) == []


def test_accelerate_without_the_script_keeps_todays_verdicts(tmp_path, monkeypatch):
    root = repo(tmp_path, ACCEL, monkeypatch, scripts=False)
    diags = check(root)
    assert lost(diags) == {("RotaryEmbedding", "inv_freq"), ("LayerScale", "gamma")}
    assert all(d.materialised is None for d in diags)


def test_entry_reaching_children_and_root_buffers_is_enough(tmp_path, monkeypatch):
    """fixtures/check/torchtitan_style.py: the root's init_weights() recomputes its RoPE
    table and calls each layer's init_weights(), which resets its norm: a script running it
    alone loses nothing."""
    (tmp_path / "pyproject.toml").write_text("[tool.metalint]\n")
    shutil.copy(
        Path(__file__).parent.parent / "fixtures/check/torchtitan_style.py", tmp_path / "model.py"
    )
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.py").write_text(
        textwrap.dedent(
            """
            import torch
            from model import Transformer

            def main():
                with torch.device("meta"):
                    model = Transformer()
                model.to_empty(device="cuda")
                model.init_weights(buffer_device="cuda")
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    assert check(tmp_path) == []


def test_root_own_hook_is_not_what_the_fix_calls(tmp_path, monkeypatch):
    """A root whose own reset_parameters() restores its tensor: ML015 names it, ML016 (whose
    loop skips the root) does not, so the fix never loops."""
    (tmp_path / "pyproject.toml").write_text("[tool.metalint]\n")
    (tmp_path / "model.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            class Model(nn.Module):
                def __init__(self, dim=4):
                    super().__init__()
                    self.scale = nn.Parameter(torch.ones(dim))
                    self.proj = nn.Linear(dim, dim)

                def reset_parameters(self):
                    nn.init.ones_(self.scale)

                def init_weights(self):
                    nn.init.zeros_(self.proj.weight)

            def main():
                with torch.device("meta"):
                    model = Model()
                model.to_empty(device="cpu")
                model.init_weights()
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    diags = check(tmp_path)
    assert [(d.code, d.subject) for d in diags] == [("ML015", ("scale",))]


def test_check_probe_confirms_each_finding_under_the_site(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from metalint.check import probe_findings

    root = repo(tmp_path, TITAN, monkeypatch)
    settings = load_settings(root)
    result = run_check([Path(".")], settings, use_cache=False, workers=1)
    marked = probe_findings(result.diagnostics, settings.hooks, result.results, settings.factories)
    assert {(d.code, d.verdict) for d in marked} == {
        ("ML001", "confirmed"),
        ("ML002", "confirmed"),
        ("ML015", "confirmed"),
        ("ML016", "confirmed"),
    }


NORMS_MODEL = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.plain = nn.LayerNorm(dim, elementwise_affine=False)
        self.proj = nn.Linear(dim, dim, bias=False)


class Model(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(2)])
        self.final_norm = nn.RMSNorm(dim)
        self.init_weights()

    def init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
        self.final_norm.reset_parameters()


def tiny():
    return Model()


def main():
    with torch.device("meta"):
        model = Model()
    model.to_empty(device="cpu")
    model.init_weights()
"""


def test_torch_norm_layers_at_a_root_only_site(tmp_path, monkeypatch):
    """torch's own norms: `Block.norm` (LayerNorm: weight and bias) is lost, `final_norm`
    (reset by the root's init_weights()) and an affine-free one are not; the probe agrees
    before and after the fix."""
    pytest.importorskip("torch")
    from metalint.probe.command import run_probe
    from metalint.probe.isolate import Options

    (tmp_path / "pyproject.toml").write_text("[tool.metalint]\n")
    (tmp_path / "model.py").write_text(NORMS_MODEL)
    monkeypatch.chdir(tmp_path)
    diags = check(tmp_path)
    assert {(d.code, d.subject) for d in diags} == {
        ("ML015", ("norm.weight", "norm.bias")),
        ("ML016", ()),
    }
    (o,) = run_probe(["model:tiny"], Options(device="cpu", timeout=300)).outcomes
    assert {f["message"].split("(")[1].split(" ")[0] for f in o.result["findings"]} == {
        "blocks.0.norm.weight",
        "blocks.0.norm.bias",
    }
    run_fix(
        [Path(".")],
        load_settings(tmp_path),
        write=True,
        show_diff=False,
        unsafe=True,
        verify=False,
        use_cache=False,
        workers=1,
        echo=lambda *a, **k: None,
    )
    assert check(tmp_path) == []
    (o,) = run_probe(["model:tiny"], Options(device="cpu", timeout=300)).outcomes
    assert o.result["findings"] == []


APPLY_MODEL = """
import torch
from torch import nn


class Norm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self):
        nn.init.ones_(self.weight)


class LayerScale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(0.1 * torch.ones(dim))


class Model(nn.Module):
    def __init__(self, dim=4):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.norm = Norm(dim)
        self.ls = LayerScale(dim)
        self.init_weights()

    def init_weights(self):
        for m in self.modules():
            if isinstance(m, LayerScale):
                nn.init.constant_(m.gamma, 0.1)


def init_fn(m):
    if isinstance(m, nn.Linear):
        nn.init.zeros_(m.weight)
    elif isinstance(m, NORM):
        nn.init.ones_(m.weight)
"""


def _tree(tmp_path, monkeypatch, model: str, script: str) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.metalint]\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "model.py").write_text(model)
    (tmp_path / "train.py").write_text(textwrap.dedent(script))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "norm, lost_tensors", [("Norm", set()), ("nn.LayerNorm", {("Norm", "weight")})]
)
def test_apply_site_runs_the_applied_function(tmp_path, monkeypatch, norm, lost_tensors):
    root = _tree(
        tmp_path,
        monkeypatch,
        APPLY_MODEL.replace("NORM", norm),
        """
        import torch
        from pkg.model import Model, init_fn

        def main():
            with torch.device("meta"):
                model = Model()
            model.to_empty(device="cpu")
            model.apply(init_fn)
        """,
    )
    diags = check(root)
    # the root's init_weights() never runs there: LayerScale's gamma (no hook of its own) too
    assert lost(diags) == lost_tensors | {("LayerScale", "gamma")}
    assert all(d.materialised == ("model.apply(init_fn)", "train.py", 9) for d in diags)


def test_per_module_site_never_runs_the_root_entry_point(tmp_path, monkeypatch):
    """Lightning's init_module(empty_init=True): each module's own reset_parameters(), not
    the root's init_weights(), which alone restores LayerScale's gamma."""
    model = APPLY_MODEL.replace("NORM", "Norm")
    root = _tree(tmp_path, monkeypatch, model, "")
    assert check(root) == []  # today: the root's init_weights() re-creates gamma
    (root / "train.py").write_text(
        textwrap.dedent(
            """
            from pkg.model import Model

            def main(fabric):
                with fabric.init_module(empty_init=True):
                    model = Model()
                model = fabric.setup(model)
            """
        )
    )
    diags = check(root)
    # ML010: the root's loop over its modules, which only its init_weights() replays
    assert {(d.code, d.symbol, d.subject) for d in diags} == {
        ("ML001", "LayerScale", ("gamma",)),
        ("ML010", "Model", ()),
    }
    assert {d.protocol for d in diags} == {"reset_parameters"}
    assert {d.materialised for d in diags} == {
        ("fabric.init_module(empty_init=True)", "train.py", 5)
    }


def test_a_site_materialising_an_inner_class_is_judged_too(tmp_path, monkeypatch):
    """A script that materialises one block of a bigger model (roots() sees only the model)."""
    model = APPLY_MODEL.replace("NORM", "Norm") + textwrap.dedent(
        """

        class Outer(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = Model()
        """
    )
    root = _tree(
        tmp_path,
        monkeypatch,
        model,
        """
        import torch
        from pkg.model import Model

        def main():
            with torch.device("meta"):
                model = Model()
            model.to_empty(device="cpu")
            model.init_weights()
        """,
    )
    diags = [d for d in check(root) if d.code in ("ML015", "ML016")]
    assert {(d.code, d.symbol, d.subject) for d in diags} == {
        ("ML015", "Norm", ("weight",)),
        ("ML016", "Model", ()),
    }
    assert all(d.materialised == ("model.init_weights()", "train.py", 9) for d in diags)


def test_tree_sites_of_a_class_file():
    from metalint.static.pipeline import root_only, sequences, tree_sites

    found = tree_sites(str(TITAN / "tinytitan" / "model.py"))
    assert [(Path(p).name, s["line"]) for p, s in found] == [("train.py", 12)]
    seqs = sequences(found, lambda n: "root" if n == "tinytitan.model.Transformer" else None)
    seq = root_only(seqs["root"])
    assert seq is not None and seq.runs == (("entry", "init_weights"),)
    assert tree_sites("/usr/lib/python3/site-packages/pkg/model.py") == []


def test_tree_sites_of_a_file_outside_any_project_is_the_file_alone(tmp_path):
    """A file outside any project (no ``[tool.metalint]``, no git work tree: a copy in /tmp)
    is its own tree: the probe never walks the folder around it (all of /tmp, venvs
    included, took the probe past its timeout)."""
    from metalint.static.pipeline import tree_sites

    site = (
        "import torch\nfrom m import M\n\n\ndef build():\n"
        '    with torch.device("meta"):\n        model = M()\n'
        '    model.to_empty(device="cpu")\n    model.init_weights()\n'
    )
    (tmp_path / "m.py").write_text("import torch\nclass M(torch.nn.Module):\n    pass\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "train.py").write_text(site)
    assert tree_sites(str(tmp_path / "m.py")) == []
    (tmp_path / "m.py").write_text((tmp_path / "m.py").read_text() + "\n\n" + site)
    assert [s["line"] for _, s in tree_sites(str(tmp_path / "m.py"))] == [12]
    # in a project, the whole project
    (tmp_path / "pyproject.toml").write_text("[tool.metalint]\n")
    assert sorted(Path(p).name for p, _ in tree_sites(str(tmp_path / "m.py"))) == [
        "m.py",
        "train.py",
    ]
