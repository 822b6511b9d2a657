"""The CI profile of bench/fix_fuzz.py: generated models on which check, fix and the probe
must agree (the truth of check, safe fixes bit-identical, unsafe fixes proven by the probe).

Derandomized (the same inputs on every run); the long profile is ``python bench/fix_fuzz.py``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("torch")


def _load():
    spec = importlib.util.spec_from_file_location(
        "metalint_bench_fix_fuzz", ROOT / "bench" / "fix_fuzz.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fix_fuzz = _load()

#: inputs that broke a property, kept. ``init_weights()`` (ML010's fix) running
#: ``reset_parameters()`` (ML002's) before ``r3`` is made: ML001's kept-value fix added
#: ``r3``'s init to ``reset_parameters()`` and construction raised AttributeError
THROUGH_INIT_WEIGHTS = 'import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n    def __init__(self, d=4, v=0.5):\n        super().__init__()\n        self.pl0 = nn.ParameterList([nn.Parameter(torch.zeros(d) + k) for k in range(2)])\n        inv1 = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))\n        self.register_buffer("inv1", inv1, persistent=False)\n        self.apply(self._init_weights)\n        self.r3 = nn.Parameter(torch.rand(d))\n\n    def _init_weights(self, m):\n        if isinstance(m, nn.Linear):\n            nn.init.trunc_normal_(m.weight, std=0.02)\n            if m.bias is not None:\n                nn.init.zeros_(m.bias)\n\n\nclass Outer(nn.Module):\n    def __init__(self, d=4):\n        super().__init__()\n        self.inner = M(d)\n        self.head = nn.Linear(d, 2)\n        self.apply(self._init_weights)\n\n    def _init_weights(self, m):\n        if isinstance(m, nn.Linear):\n            nn.init.trunc_normal_(m.weight, std=0.02)\n            if m.bias is not None:\n                nn.init.zeros_(m.bias)\n\n'
#: the same call order: ML001's fix moved ``r2``'s draw into ``reset_parameters()``, which
#: ``init_weights()`` runs after the children's draws, and called the fix safe
DRAW_AFTER_APPLY = "import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n    def __init__(self, d=4, v=0.5):\n        super().__init__()\n        self.fc0 = nn.Linear(d, d)\n        self.w1 = nn.Parameter(torch.Tensor(d, d))\n        nn.init.uniform_(self.w1, -0.1, 0.1)\n        self.r2 = nn.Parameter(torch.rand(d))\n        self.apply(self._init_weights)\n        self.reset_parameters()\n\n    def _init_weights(self, m):\n        if isinstance(m, nn.Linear):\n            nn.init.trunc_normal_(m.weight, std=0.02)\n            if m.bias is not None:\n                nn.init.zeros_(m.bias)\n\n    def reset_parameters(self):\n        nn.init.zeros_(self.fc0.weight)\n\n\nclass Outer(nn.Module):\n    def __init__(self, d=4):\n        super().__init__()\n        self.inner = M(d)\n        self.head = nn.Linear(d, 2)\n\n"


@settings(
    max_examples=10,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(fix_fuzz.model_source())
@example(THROUGH_INIT_WEIGHTS)
@example(DRAW_AFTER_APPLY)
def test_check_fix_and_probe_agree_on_generated_models(text):
    assert fix_fuzz.outcome(text) == []


LAYERSCALE = (
    "import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n"
    "    def __init__(self, d=4, v=0.5):\n        super().__init__()\n"
    "        self.p0 = nn.Parameter(v * torch.ones(d))\n"
)


def test_layerscale_holds_every_property():
    assert fix_fuzz.outcome(LAYERSCALE) == []


def test_each_property_can_fail(monkeypatch):
    # without these, the properties above could pass by checking nothing
    real = fix_fuzz._cli

    def wrong_fix(folder, *args):
        if args[0] != "fix":
            return real(folder, *args)
        path = Path(folder, "m.py")
        text = path.read_text()
        if "--unsafe-fixes" in args:  # a hook check cannot judge, re-creating another value
            path.write_text(
                text
                + "\n    def reset_parameters(self):\n        nn.init.constant_(self.p0, 7.0)\n"
            )
        else:  # changes a value eagerly
            path.write_text(text.replace("v * torch.ones(d)", "(v + 1) * torch.ones(d)"))

    monkeypatch.setattr(fix_fuzz, "_cli", wrong_fix)
    bad = fix_fuzz.outcome(LAYERSCALE)
    assert "safe: M: param p0: values differ" in bad
    assert any(b.startswith("unsafe: M fixed, the probe fails: ") for b in bad), bad
    monkeypatch.setattr(fix_fuzz, "_cli", real)
    monkeypatch.setattr(fix_fuzz, "findings", lambda folder: [])
    assert "truth: M loses values, check reports nothing" in fix_fuzz.outcome(LAYERSCALE)
