"""What stands in a new user's way in `metalint load` and `metalint probe`: a model class that
needs arguments, a load that loaded nothing, a strict failure listing every key, a dotted
--model that only `probe` finds, a lost tensor reported once per enclosing class, and a
difference from eager init that is intended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from metalint.loader import save_safetensors

PKG = {
    "pkg/__init__.py": "",
    "pkg/layers.py": """
        import torch
        from torch import nn


        class LayerScale(nn.Module):
            def __init__(self, dim: int = 8):
                super().__init__()
                self.gamma = nn.Parameter(1e-5 * torch.ones(dim))


        class Block(nn.Module):
            def __init__(self, dim: int = 8):
                super().__init__()
                self.fc = nn.Linear(dim, dim)
                self.ls = LayerScale(dim)


        class Model(nn.Module):
            def __init__(self, dim: int = 8, depth: int = 2):
                super().__init__()
                self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))


        class NeedsArgs(nn.Module):
            def __init__(self, dim, vocab_size):
                super().__init__()
                self.emb = nn.Embedding(vocab_size, dim)


        def tiny():
            return NeedsArgs(8, 32)
    """,
}


@pytest.fixture
def proj(tmp_path):
    for name, text in PKG.items():
        f = tmp_path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text).lstrip("\n"))
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "proj"\nversion = "0"\n')
    return tmp_path


def _model_state(dim: int = 8, depth: int = 2) -> dict:
    blocks = nn.ModuleList(
        nn.ModuleDict({"fc": nn.Linear(dim, dim)}) for _ in range(depth)
    ).state_dict()
    sd = {f"blocks.{k}": v for k, v in blocks.items()}
    for i in range(depth):
        sd[f"blocks.{i}.ls.gamma"] = torch.full((dim,), 1e-5)
    return sd


def _one_line_error(res) -> str:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("metalint load: error: "), res.output
    assert "Traceback" not in res.output
    return lines[0]


# ----------------------------------------------------------------------------- load


def test_load_class_needing_arguments_is_an_error_without_guess_args(cli, proj):
    ckpt = proj / "m.safetensors"
    save_safetensors({"emb.weight": torch.ones(32, 8)}, ckpt)
    line = _one_line_error(cli("load", str(ckpt), "--model", "pkg.layers:NeedsArgs", cwd=proj))
    assert "NeedsArgs needs constructor arguments (dim, vocab_size)" in line
    assert "'module:callable'" in line and "--guess-args" in line
    # a factory gives them
    res = cli("load", str(ckpt), "--model", "pkg.layers:tiny", cwd=proj)
    assert res.exit_code == 0, res.output
    assert "Loaded 1 tensors" in res.output


def test_load_guess_args_builds_with_guessed_sizes(cli, proj):
    ckpt = proj / "m.safetensors"
    save_safetensors({"emb.weight": torch.ones(32, 16)}, ckpt)  # the guessed sizes
    res = cli("load", str(ckpt), "--model", "pkg.layers:NeedsArgs", "--guess-args", cwd=proj)
    assert res.exit_code == 0, res.output
    assert "Loaded 1 tensors" in res.output


def test_load_that_loads_nothing_fails_even_without_strict(cli, proj):
    ckpt = proj / "m.safetensors"
    save_safetensors({f"model.{k}": v for k, v in _model_state().items()}, ckpt)
    line = _one_line_error(
        cli("load", str(ckpt), "--model", "pkg.layers:Model", "--no-strict", cwd=proj)
    )
    assert str(ckpt) in line and "loaded 0 tensors" in line
    assert "'model.blocks.0." in line  # what the checkpoint's names look like
    empty = proj / "empty.safetensors"
    save_safetensors({}, empty)
    line = _one_line_error(
        cli("load", str(empty), "--model", "pkg.layers:Model", "--no-strict", cwd=proj)
    )
    assert "loaded 0 tensors" in line and "holds no tensor" in line


def test_strict_failure_summarises_many_keys(cli, proj):
    ckpt = proj / "big.safetensors"
    sd = {f"backbone.layers.{i}.weight": torch.ones(2) for i in range(68)}
    sd.update(_model_state())
    save_safetensors(sd, ckpt)
    line = _one_line_error(cli("load", str(ckpt), "--model", "pkg.layers:Model", cwd=proj))
    assert str(ckpt) in line
    assert "68 unexpected: " in line and "and 58 more (all under 'backbone.layers.')" in line
    assert line.count("backbone.layers.") == 10 + 1
    assert len(line) < 700, len(line)


def test_summarise_keys_keeps_short_lists():
    from metalint.loader.core import summarise_keys

    assert summarise_keys(["a.b", "c"]) == "a.b, c"
    names = [f"m.{i}.w" for i in range(12)] + ["other"]
    assert summarise_keys(names).endswith("and 3 more")  # no common prefix


def test_load_finds_a_dotted_model_as_probe_does(proj):
    """The console script (no working directory on sys.path, no PYTHONPATH) resolves a dotted
    --model from the project as the probe's child does."""
    ckpt = proj / "m.safetensors"
    save_safetensors(_model_state(), ckpt)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import sys; from metalint.cli import main; sys.exit(main())"
    # -P: like a console script, nothing is put before sys.path
    for cwd in (proj, proj / "pkg"):
        res = subprocess.run(
            [sys.executable, "-P", "-c", code, "load", str(ckpt), "--model", "pkg.layers:Model"],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        assert "Loaded 6 tensors" in res.stdout


def test_project_paths_is_the_one_resolution(proj, monkeypatch):
    from metalint.loader import command
    from metalint.probe import target

    monkeypatch.chdir(proj / "pkg")
    assert target.project_paths() == [str((proj / "pkg").resolve()), str(proj.resolve())]
    assert command.resolve_items is target.resolve_items


# ----------------------------------------------------------------------------- probe


def test_probe_dir_reports_a_lost_tensor_once_across_classes(cli, proj):
    res = cli("probe", "pkg", "--device", "cpu", "--output-format", "json", cwd=proj)
    assert res.exit_code == 1, res.output
    found = json.loads(res.stdout)
    gamma = [d for d in found if d.get("subject") == ["gamma"]]
    assert len(gamma) == 1, found  # not once for LayerScale, Block and Model
    assert gamma[0]["code"] == "MP001" and gamma[0]["location"]["row"] == 8
    assert gamma[0]["seen_in"] == ["LayerScale", "Block", "Model"]
    assert gamma[0]["message"].endswith("(also in 2 other classes: Block, Model)")


def _diag(symbol: str, row: int = 8, tensor: str = "gamma", filename: str = "pkg/layers.py"):
    from metalint.diagnostics import Diagnostic, Position

    return Diagnostic(
        "MP001",
        f"`{tensor}` of {symbol} lost its value",
        filename,
        Position(row, 9),
        Position(row, 20),
        symbol=symbol,
        subject=(tensor,),
    )


def test_merge_across_classes_text_says_also_in():
    from metalint import report
    from metalint.probe.results import merge_across_classes

    merged = merge_across_classes(
        [
            ("LayerScale", _diag("LayerScale")),
            ("Block", _diag("LayerScale")),
            ("Model", _diag("LayerScale")),
            ("Model", _diag("Model", row=20, tensor="pos")),
            ("Other", _diag("Other", row=30)),
        ]
    )
    assert len(merged) == 3
    text = report.render(merged, "text")
    assert text.count("also in") == 1 and "(also in 2 other classes: Block, Model)" in text
    assert "Found 3 errors." in text
    assert [d.seen_in for d in merged] == [("LayerScale", "Block", "Model"), (), ()]


def _declare(proj, *specs: str) -> None:
    listed = ", ".join(f'"{s}"' for s in specs)
    (proj / "pyproject.toml").write_text(
        '[project]\nname = "proj"\nversion = "0"\n\n'
        f"[tool.metalint.probe]\nexpected-differences = [{listed}]\n"
    )


def test_probe_declared_difference_is_not_a_failure_and_stale_is_reported(cli, proj):
    _declare(proj, "pkg.layers:LayerScale.gamma", "pkg.layers:Block.beta")
    res = cli("probe", "pkg/layers.py:LayerScale,Block", "--device", "cpu", cwd=proj)
    assert res.exit_code == 0, res.output
    assert "layers.py:LayerScale on cpu" in res.stdout
    assert "passed with 1 declared difference (1 tensors)" in res.stdout
    assert "declared pkg/layers.py:8:9: MP001 `gamma` of LayerScale" in res.stdout
    assert "expected-differences 'pkg.layers:LayerScale.gamma'" in res.stdout
    assert "All checks passed!" in res.stdout
    assert (
        "warning: expected-differences 'pkg.layers:Block.beta'" in res.stderr
        and "(stale)" in res.stderr
    )
    assert "LayerScale.gamma' in" not in res.stderr  # a used declaration is not stale


def test_probe_undeclared_difference_still_fails(cli, proj):
    _declare(proj, "pkg.layers:Model.gamma", "pkg.other:LayerScale.gamma")
    res = cli("probe", "pkg/layers.py:LayerScale", "--device", "cpu", cwd=proj)
    assert res.exit_code == 1, res.output
    assert "MP001 `gamma` of LayerScale" in res.stdout and "declared" not in res.stdout
    assert "stale" not in res.stderr  # neither class was built in this run


def test_probe_bad_expected_difference_is_a_one_line_error(cli, proj):
    _declare(proj, "gamma")
    res = cli("probe", "pkg/layers.py:LayerScale", "--device", "cpu", cwd=proj)
    assert res.exit_code == 2, res.output
    assert "expected-differences: 'gamma' must look like 'pkg.mod:Class.tensor'" in res.output
    assert "Traceback" not in res.output


def test_split_declared_by_file_class_and_module():
    from metalint.probe.results import Declared, split_declared

    diags = [_diag("LayerScale"), _diag("Block", row=12, tensor="beta")]
    decl = [Declared.parse("pkg.layers:LayerScale.gamma")]
    undeclared, intended, stale = split_declared(diags, decl, {})
    assert undeclared == diags[1:] and [x.spec for _, x in intended] == [decl[0].spec]
    assert stale == []
    # another module's class of the same name: not it
    other = [Declared.parse("pkg.other:LayerScale.gamma")]
    assert split_declared(diags, other, {})[0] == diags
    # the class's file, where a base class in another file set the tensor
    classes = {"k": {"cls": "LayerScale", "file": "pkg/other.py"}}
    assert split_declared(diags, other, classes)[0] == diags[1:]
    with pytest.raises(ValueError, match="must look like"):
        Declared.parse("LayerScale.gamma")


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.gamma = nn.Parameter(1e-5 * torch.ones(4))


def test_helper_allow_declares_a_difference():
    from metalint.testing import assert_meta_init_parity

    with pytest.raises(AssertionError, match="gamma"):
        assert_meta_init_parity(_Scaled)
    for allow in ({"gamma"}, {"_Scaled.gamma"}, "gamma"):
        declared = assert_meta_init_parity(_Scaled, allow=allow)
        assert [d.subject for d in declared] == [("gamma",)]


def test_helper_undeclared_fails_and_stale_is_reported():
    from metalint.testing import assert_meta_init_parity

    with pytest.raises(AssertionError, match="not meta-safe") as err:
        assert_meta_init_parity(_Scaled, allow={"beta"})
    assert "`gamma`" in str(err.value)
    with pytest.raises(AssertionError, match=r"allow='gamma' matched no difference .*stale"):
        assert_meta_init_parity(lambda: nn.Linear(4, 4), allow={"gamma"})
    with pytest.raises(AssertionError, match="stale"):
        assert_meta_init_parity(_Scaled, allow={"gamma", "Other.gamma"})
    with pytest.raises(ValueError, match="allow: 'a b' must look like"):
        assert_meta_init_parity(_Scaled, allow={"a b"})


def test_merge_keeps_class_findings_of_different_classes_apart():
    from metalint.probe.results import merge_across_classes

    a, b = _diag("A", row=1).with_(subject=()), _diag("B", row=1).with_(subject=())
    assert merge_across_classes([("A", a), ("B", b)]) == [a, b]
    assert [d.seen_in for d in merge_across_classes([("A", a), ("M", a)])] == [("A", "M")]
