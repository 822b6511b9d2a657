"""Idioms of LM building blocks measured held out (x-transformers' token embedding that the
wrapper initialises through the embedding's own ``init_()``): what ``check`` says of each, and
what the probe shows at model level; and DPO's frozen reference copy, whose freezing function
ends in ``_`` but writes no value. The fixtures are ``fixtures/check/lm_child_init_method.py``
and ``fixtures/check/lm_frozen_reference.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixture_runs import check_all, fix_all, load_module

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "fixtures" / "check"
NAME = "lm_child_init_method.py"


FROZEN = "lm_frozen_reference.py"


def _diagnostics(tmp_path: Path, copy: bool = True, name: str = NAME):
    if copy:
        shutil.copy(CHECK / name, tmp_path / name)
    return check_all([tmp_path / name], tmp_path)


def test_child_init_method_called_in_construction_is_reported(tmp_path):
    # before: "All checks passed!" while the probe loses the embedding's weight
    got = [(d.code, d.symbol, d.start.row, d.subject) for d in _diagnostics(tmp_path)]
    assert got == [("ML003", "LanguageModel", 51, ("token_emb.emb.weight",))]


def test_reading_method_and_child_reset_hook_are_not_reported(tmp_path):
    symbols = {d.symbol for d in _diagnostics(tmp_path)}
    assert not symbols & {"Counter", "ResetModel", "TokenEmbedding", "ResetEmbedding"}
    # a method that only runs the child's reset hook: the protocol runs it again
    assert not symbols & {"ResetThroughInit", "ResetThroughInitModel"}


def test_fix_calls_the_child_init_from_a_reset_hook(tmp_path):
    shutil.copy(CHECK / NAME, tmp_path / NAME)
    fix_all([tmp_path / NAME], tmp_path)
    fixed = (tmp_path / NAME).read_text()
    assert "    def reset_parameters(self):\n        self.init_()\n" in fixed
    assert _diagnostics(tmp_path, copy=False) == []


def test_function_ending_in_underscore_that_writes_no_value_is_not_an_init(tmp_path):
    # before: ML003 on DPO for ``freeze_all_layers_(self.ref_model)``; the probe passes it
    got = [(d.code, d.symbol, d.start.row) for d in _diagnostics(tmp_path, name=FROZEN)]
    assert got == [("ML003", "Shrunk", 38)]


def test_leaves_values_reads_the_function_body():
    import ast

    from metalint.static.tensors import leaves_values

    def fn(src):
        return ast.parse(src).body[0]

    assert leaves_values(
        fn("def f_(m):\n    for p in m.parameters():\n        p.requires_grad = False")
    )
    assert not leaves_values(fn("def f_(m):\n    m.weight.data.zero_()"))
    assert not leaves_values(fn("def f_(m):\n    init.constant(m.weight, 0.0)"))
    assert not leaves_values(fn("def f_(m):\n    m.weight[0] = 1.0"))
    assert not leaves_values(fn("def f_(m):\n    m.weight.data = t"))
    assert not leaves_values(fn("def f_(m):\n    helper(m)"))
    assert not leaves_values(fn("def f_(m, t):\n    torch.add(t, 1, out=m.weight)"))


def _load(name: str = NAME):
    return load_module(CHECK / name)


def test_probe_confirms_the_embedding_init_is_lost():
    pytest.importorskip("torch")
    from metalint.probe.build import probe

    mod = _load()
    res = probe(mod.LanguageModel, device="cpu", init="reset_parameters")
    assert {f.subject for f in res.findings} == {("weight",)}, res.findings
    assert "token_emb.emb.weight" in res.findings[0].message
    assert probe(mod.ResetModel, device="cpu", init="reset_parameters").findings == []
    assert probe(mod.ResetThroughInitModel, device="cpu", init="reset_parameters").findings == []


def test_probe_passes_the_frozen_reference_and_fails_the_shrunk_layer():
    pytest.importorskip("torch")
    from metalint.probe.build import probe

    mod = _load(FROZEN)
    assert probe(mod.DPO, device="cpu", init="reset_parameters").findings == []
    res = probe(mod.Shrunk, device="cpu", init="reset_parameters")
    assert ("weight",) in {f.subject for f in res.findings}, res.findings
