"""Idioms of an equivariant-network library measured held out (e3nn): an activation
normalised by a moment that construction reads with ``.item()`` from the activation the
caller passes, and coupling buffers registered under names made in the loop over the irreps.
What ``check`` says of each, what its fix does, and what the probe shows. The fixtures are
``fixtures/check/equivariant_activation_moment.py`` and
``fixtures/check/equivariant_loop_buffers.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst as cst
import pytest
from fixture_runs import check_all, fix_all, load_module

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "fixtures" / "check"
MOMENT = "equivariant_activation_moment.py"
LOOP = "equivariant_loop_buffers.py"


def _diagnostics(tmp_path: Path, name: str, copy: bool = True):
    """check's diagnostics on ``name`` (copied from the fixtures), every rule selected."""
    if copy:
        shutil.copy(CHECK / name, tmp_path / name)
    return check_all([tmp_path / name], tmp_path)


def _fix(tmp_path: Path, name: str) -> str:
    shutil.copy(CHECK / name, tmp_path / name)
    return fix_all([tmp_path / name], tmp_path)


def _load(name: str):
    return load_module(CHECK / name)


# -- the activation's moment, read with .item() -------------------------------------------
def test_moment_of_a_passed_activation_read_in_construction_is_reported(tmp_path):
    # before: "All checks passed!" while every e3nn model holding an activation (Gate,
    # FullyConnectedNet, the gate-points networks) raises when built on meta
    got = [(d.code, d.symbol, d.start.row) for d in _diagnostics(tmp_path, MOMENT)]
    assert got == [("ML008", "NormalizedActivation", 20), ("ML008", "InlineMoment", 33)]


def test_cpu_sample_and_predicate_are_not_reported(tmp_path):
    symbols = {d.symbol for d in _diagnostics(tmp_path, MOMENT)}
    assert not symbols & {"CpuMoment", "CheckedActivation", "Network"}


def test_passed_function_result_is_meta_only_under_a_tensor_method(tmp_path):
    src = (
        "import torch\n"
        "import torch.nn as nn\n\n\n"
        "class M(nn.Module):\n"
        "    def __init__(self, act, n):\n"
        "        super().__init__()\n"
        "        z = torch.randn(4)\n"
        "        self.a = act(z).pow(2).sum().item()\n"  # row 9: the only read
        "        self.b = float(act(z))\n"
        "        self.c = act(z).shape[0].bit_length()\n"
        "        self.d = act(n).pow(2).item()\n"
        "        self.e = unknown(z).pow(2).item()\n"
    )
    (tmp_path / "m.py").write_text(src)
    got = [(d.code, d.start.row) for d in _diagnostics(tmp_path, "m.py", copy=False)]
    assert got == [("ML008", 9)]


# -- buffers named in a loop ----------------------------------------------------------------
def test_buffers_named_in_a_loop_are_reported(tmp_path):
    # before: "All checks passed!" while the probe loses every ``cg_*`` buffer
    got = [(d.code, d.symbol, d.start.row, d.subject) for d in _diagnostics(tmp_path, LOOP)]
    assert got == [
        ("ML002", "FullTensorProduct", 32, ("cg_{ir_1.l}_{ir_2.l}_{ir_out.l}",)),
        # opt-in ML012 (``skip_init``) reads the same registrations
        ("ML012", "PerOrderScale", 36, ("scale_{l}",)),
        ("ML002", "PerOrderScale", 39, ("scale_{l}",)),
        ("ML012", "RefilledScale", 43, ("scale_{l}",)),
    ]


def test_fix_refuses_a_buffer_named_in_a_loop(tmp_path):
    out = _fix(tmp_path, LOOP)
    assert (tmp_path / LOOP).read_text() == (CHECK / LOOP).read_text()
    assert "not fixed: the buffer's name is made in a loop (`scale_{l}`)" in out
    assert (
        "not fixed: the buffer's name is made in a loop (`cg_{ir_1.l}_{ir_2.l}_{ir_out.l}`)" in out
    )


def test_attribute_name_reads_dotted_names_in_an_fstring():
    from metalint.static.syntax import attribute_name

    def name(src: str):
        return attribute_name(cst.parse_expression(src))

    assert name('f"cg_{ir_1.l}_{ir_out.l}"') == "cg_{ir_1.l}_{ir_out.l}"
    assert name('f"pos_embed_{i}"') == "pos_embed_{i}"
    assert name('"weight"') == "weight"
    assert name('f"cg_{ls[0]}"') is None
    assert name('f"cg_{l!r}"') is None
    assert name('f"{l}_cg"') is None or not name('f"{l}_cg"')[0].isdigit()


# -- the probe agrees -----------------------------------------------------------------------
def test_probe_confirms_the_meta_build_raises_on_the_moment():
    pytest.importorskip("torch")
    import torch

    from metalint.probe.build import probe

    mod = _load(MOMENT)
    for make in (lambda: mod.NormalizedActivation(torch.tanh), lambda: mod.Network()):
        codes = {f.code for f in probe(make, device="cpu", init="reset_parameters").findings}
        assert "MP006" in codes, codes
    ok = probe(lambda: mod.CpuMoment(torch.tanh), device="cpu", init="reset_parameters")
    assert ok.findings == []


def test_probe_confirms_the_loop_buffers_are_lost():
    pytest.importorskip("torch")
    from metalint.probe.build import probe

    mod = _load(LOOP)
    lost = probe(mod.FullTensorProduct, device="cpu", init="reset_parameters").findings
    assert {"cg_0_1_1", "cg_1_1_0", "cg_1_1_2"} <= {f.subject[0] for f in lost}, lost
    lost = probe(mod.PerOrderScale, device="cpu", init="reset_parameters").findings
    assert {f.subject[0] for f in lost} == {"scale_0", "scale_1", "scale_2"}, lost
    assert probe(mod.RefilledScale, device="cpu", init="reset_parameters").findings == []
