"""Idioms of libraries measured held out (detection heads' init loop, a temporal block's
weight-normalised convolutions): what ``check`` says of each, and what the probe shows at
model level. The fixtures are ``fixtures/check/detector_init_loop.py`` and
``fixtures/check/tcn_weight_norm_hook.py``."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from metalint.check import run_check
from metalint.config import Settings

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "fixtures" / "check"


def _findings(tmp_path: Path, name: str) -> list[tuple[str, str | None, int]]:
    shutil.copy(CHECK / name, tmp_path / name)
    result = run_check(
        [tmp_path / name], Settings(root=tmp_path, select=["ALL"]), use_cache=False, workers=1
    )
    return [(d.code, d.symbol, d.start.row) for d in result.diagnostics]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name[:-3], CHECK / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_loop_handing_each_module_to_a_file_init_function_is_parent_applied(tmp_path):
    # before: nothing reported (the loop's body writes no tensor itself)
    assert _findings(tmp_path, "detector_init_loop.py") == [("ML010", "Detector", 55)]


def test_a_function_that_only_reads_the_module_is_not_an_init(tmp_path):
    assert all(sym != "Counter" for _, sym, _ in _findings(tmp_path, "detector_init_loop.py"))


def test_hook_writing_the_computed_weight_does_not_rederive_g_and_v(tmp_path):
    # before: the class's own init_weights() was taken for a re-initialisation
    got = _findings(tmp_path, "tcn_weight_norm_hook.py")
    assert got == [("ML014", "TemporalBlock", 20), ("ML014", "TemporalBlock", 21)]


@pytest.fixture(scope="module")
def probe():
    pytest.importorskip("torch")
    from metalint.probe.build import probe

    return probe


def _lost(res) -> set[str]:
    return {t for f in res.findings for t in f.subject}


def test_probe_confirms_the_detector_loses_its_head_init(probe):
    mod = _load("detector_init_loop.py")
    res = probe(mod.Detector, device="cpu", init="reset_parameters")
    # the heads' convolutions: the scaled normal weights and the prior bias
    assert {"weight", "bias"} <= _lost(res), res.findings
    assert all("of Conv2d" in f.message for f in res.findings), res.findings
    assert probe(mod.Counter, device="cpu", init="reset_parameters").findings == []


def test_probe_confirms_the_weight_norm_hook_loses_g_and_v(probe):
    mod = _load("tcn_weight_norm_hook.py")
    res = probe(lambda: mod.TemporalBlock(4, 8), device="cpu", init="auto")
    assert {"original0", "original1"} <= _lost(res), res.findings
    assert probe(lambda: mod.ReDerivedBlock(4), device="cpu", init="auto").findings == []
