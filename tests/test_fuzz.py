"""The fuzz suite's CI profile: bench/fuzz.py's properties with a few inputs each.

The CI profile is derandomized (the same inputs on every run: CI must be reproducible); the long
profile (thousands of fresh inputs per part) is ``python bench/fuzz.py``; every input that
ever broke metalint is a regression test in ``tests/test_hostile_input.py``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings

ROOT = Path(__file__).resolve().parent.parent


def _fuzz():
    spec = importlib.util.spec_from_file_location("metalint_bench_fuzz", ROOT / "bench" / "fuzz.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fuzz = _fuzz()
CI = settings(
    max_examples=12,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


def test_check_never_dies_and_ml900_is_cpythons_verdict():
    sources = fuzz.collect(fuzz.check_sources(), 16, seed=1)
    counts = fuzz.run_check_folder(sources, budget=5.0, jobs=2)
    assert counts["inputs"] == 16
    fine = {"checked", "ML900 (CPython rejects)", "inputs", "seconds"}
    assert {k: n for k, n in counts.items() if k not in fine} == {}


@CI
@given(fuzz.fix_source())
# the property once took a new method before the class's trailing blank line for a wrong edit
@example(
    (
        "import torch\nfrom torch import nn\n\nclass LayerScale(nn.Module):\n"
        "    def __init__(self, dim, init_values=1e-5, inplace=False):\n"
        "        super().__init__()\n        self.inplace = inplace  # \n"
        "        self.gamma = nn.Parameter(init_values * torch.ones(dim))\n\n",
        "\n",
    )
)
def test_fix_edits_only_the_class_compiles_and_is_idempotent(case):
    text, _newline = case
    assert fuzz.fix_outcome(text) == "ok"


@pytest.mark.parametrize("kind", ["safetensors", "torch"])
def test_loader_loads_the_file_every_mutation_starts_from(kind):
    # "refused" is an accepted outcome for a mutant: without this, a loader that refuses
    # every file (as the record check once refused every torch.save(model.state_dict()))
    # would pass the properties below
    assert fuzz.loader_outcome(fuzz.pristine(kind), kind) == "loaded (= reference)"


@CI
@given(fuzz.mutated_safetensors())
def test_loader_refuses_or_matches_safetensors(data):
    pytest.importorskip("safetensors")
    assert fuzz.loader_outcome(data, "safetensors") in fuzz.LOADER_FINE


@settings(CI, max_examples=20)
@given(fuzz.mutated_torch_zip())
def test_loader_refuses_or_matches_torch_load(data):
    assert fuzz.loader_outcome(data, "torch") in fuzz.LOADER_FINE


# every fault once, an edit that makes one snapshot stale, then concurrent runs, one killed
EVERY_FAULT = [
    ("edit", "a.py", 1),
    *(("spoil", how, i) for i, how in enumerate(fuzz._SPOILS)),
    ("edit", "b.py", 1),
    ("concurrent", 3, 0.4),
    ("concurrent", 2, None),
]


@pytest.mark.slow  # a fuzz profile: concurrent and killed runs over a cache
@settings(CI, max_examples=2)
@given(fuzz.cache_rounds())
@example(EVERY_FAULT)
def test_cache_faults_never_change_what_check_reports(steps):
    counts = fuzz.cache_round_outcomes(steps)
    assert counts and all(k.startswith("ok: ") for k in counts), counts
