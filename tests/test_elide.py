"""Leaving out what no rule reads changes no result: same findings, positions, fixes, summaries."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from metalint.diagnostics import Edit
from metalint.fix.registry import apply_edits, fix_for
from metalint.rules import all_rules
from metalint.static.elide import elide
from metalint.static.engine import analyze_source

PIPELINE = {"rules": all_rules(), "fix_for": fix_for}

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "fixtures").rglob("*.py")) + sorted(
    (ROOT / "tests" / "probe_models").glob("*.py")
)
EXAMPLES = [
    pytest.param(
        textwrap.dedent(getattr(src, "source", src)).lstrip("\n"), id=f"{rule.code}-{kind}-{i}"
    )
    for rule in all_rules()
    for kind, examples in (("valid", rule.VALID), ("invalid", rule.INVALID))
    for i, src in enumerate(examples)
]

SAMPLE = '''\
"""A model file."""
import torch
import torch.nn as nn

default_cfgs = {
    "tiny": dict(dim=192),
    "small": dict(dim=384),
}


def make_stages(depths, rate):
    dpr = torch.linspace(0, rate, sum(depths)).tolist()
    return nn.Sequential(*[nn.Dropout(p) for p in dpr])


def reset_all(m):
    if hasattr(m, "reset_parameters"):
        m.reset_parameters()


def unused_factory(name):
    model = Net()
    return model


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = make_stages((1, 2), 0.1)
        self.gamma = nn.Parameter(1e-5 * torch.ones(4))

    def forward(self, x):
        @torch.no_grad()
        def inner(y):
            return y

        x = inner(x)
        return self.stages(x) * self.gamma

    def forward_head(self, x): return x
'''


def test_elided_lines_keep_their_rows():
    out = elide(SAMPLE, ast.parse(SAMPLE))
    assert len(out.splitlines()) == len(SAMPLE.splitlines())
    ast.parse(out)
    kept, gone = out.splitlines(), SAMPLE.splitlines()
    # what rules read stays, row for row
    for text in (
        "def make_stages(depths, rate):",
        "    dpr = torch.linspace(0, rate, sum(depths)).tolist()",
        "        m.reset_parameters()",
        "        self.gamma = nn.Parameter(1e-5 * torch.ones(4))",
        "    def forward_head(self, x): return x",
        "import torch.nn as nn",
    ):
        assert kept[gone.index(text)] == text
    # what no rule reads goes: the cfg table, the unreferenced factory's body, forward's body
    for text in (
        '    "tiny": dict(dim=192),',
        "    model = Net()",
        "        x = inner(x)",
        "        @torch.no_grad()",
    ):
        assert text not in kept
    # every elided line is distinct (a line diff can never align a new line with one of them)
    elided = [line for line in kept if line not in gone]
    assert len(elided) == len(set(elided)) > 0


def _same(source: str) -> None:
    full = analyze_source(source, "m.py", "pkg.m", elide_unread=False, **PIPELINE).to_json()
    short = analyze_source(source, "m.py", "pkg.m", **PIPELINE).to_json()
    assert short == full
    for d in short["diagnostics"]:  # and each fix still gives a file that parses
        if d["fix"]:
            ast.parse(apply_edits(source, [Edit.from_json(e) for e in d["fix"]["edits"]]))


def test_sample_results_are_unchanged():
    _same(SAMPLE)
    codes = {
        d["code"]
        for d in analyze_source(SAMPLE, "m.py", "pkg.m", **PIPELINE).to_json()["diagnostics"]
    }
    assert {"ML001", "ML008"} <= codes  # the helper's .tolist() is still seen


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_fixture_results_are_unchanged(path):
    _same(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("source", EXAMPLES)
def test_rule_example_results_are_unchanged(source):
    _same(source)


def test_a_file_python_rejects_is_reported_as_before():
    bad = "import torch\nclass A(torch.nn.Module):\n    def forward(self):\n        return (\n"
    full = analyze_source(bad, "m.py", "m", elide_unread=False, **PIPELINE).to_json()
    assert analyze_source(bad, "m.py", "m", **PIPELINE).to_json() == full
    assert full["diagnostics"][0]["code"] == "ML900"


def test_a_caller_in_elided_code_still_counts():
    # ML003 judges `constant_(self.bn.weight, bn_weight_init)` a no-op only when no caller in
    # the file passes another value; the caller here is a builder the elision leaves out
    source = textwrap.dedent(
        """
        import torch
        from torch import nn

        class ConvNorm(nn.Module):
            def __init__(self, a, b, bn_weight_init=1):
                super().__init__()
                self.c = nn.Conv2d(a, b, 1, bias=False)
                self.bn = nn.BatchNorm2d(b)
                nn.init.constant_(self.bn.weight, bn_weight_init)

        def build_stem(width=8):
            stem = ConvNorm(3, width, bn_weight_init=0)
            return stem
        """
    )
    assert "bn_weight_init=0" not in elide(source, ast.parse(source))
    _same(source)
    # (ML015 is a candidate the cross-file pass drops when another finding names its tensor)
    codes = [
        d["code"]
        for d in analyze_source(source, "m.py", "pkg.m", **PIPELINE).to_json()["diagnostics"]
        if d["code"] != "ML015"
    ]
    assert codes == ["ML003"]


def test_methods_no_rule_reads_are_left_out_with_their_signatures():
    source = textwrap.dedent(
        """
        import torch
        from torch import nn

        def load_weights(model, path):
            state = torch.load(path)
            model.load_state_dict(state)

        class Net(nn.Module):
            def __init__(self, dim: int = 4):
                super().__init__()
                self.proj = nn.Linear(dim, dim)
                self.gamma = nn.Parameter(1e-5 * torch.ones(dim))

            @torch.jit.ignore
            def load_pretrained(self, path: str,
                                prefix: str = ""):
                load_weights(self, path)

            def reset_classifier(self, n):
                self.proj = nn.Linear(4, n)

            def group_matcher(self, coarse=False):
                from .helpers import matcher
                return matcher(coarse)

            def forward(
                self, x: torch.Tensor, mask: torch.Tensor | None = None
            ) -> torch.Tensor:
                return self.proj(x) * self.gamma
        """
    )
    out = elide(source, ast.parse(source)).splitlines()
    rows = source.splitlines()
    assert len(out) == len(rows)
    at = {text.strip(): i for i, text in enumerate(rows)}
    # nothing calls load_pretrained, which writes nothing: gone, and so is the helper only it called
    assert (
        out[at["@torch.jit.ignore"]].strip()
        == f'def load_pretrained(): """#{at["@torch.jit.ignore"] + 1}'
    )
    assert out[at["def load_weights(model, path):"]].startswith("def load_weights(): ")
    # forward keeps its name (the class summary lists it), not its signature
    assert out[at["def forward("]].strip().startswith('def forward(): """')
    # a method that writes to self, and one that imports, are read
    for text in (
        "self.proj = nn.Linear(4, n)",
        "from .helpers import matcher",
        "self.gamma = nn.Parameter(1e-5 * torch.ones(dim))",
    ):
        assert out[at[text]].strip() == text
    _same(source)


def test_a_partial_of_a_class_over_several_lines_is_kept():
    # a call of `Norm` builds an `nn.LayerNorm` (x-transformers' `LinearNoBias`): left out, the
    # name would be an unknown function whose result may be a tensor, and the fix refused
    source = textwrap.dedent(
        """
        from functools import partial
        import torch
        from torch import nn

        Norm = partial(
            nn.LayerNorm,
            eps=1e-6,
        )

        def init_(layer):
            nn.init.constant_(layer.weight, 0.5)

        class Block(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.norm = Norm(dim)
                init_(self.norm)
        """
    )
    assert "nn.LayerNorm" in elide(source, ast.parse(source))
    _same(source)
    (d,) = [  # (ML015: a candidate the cross-file pass drops, as above)
        d
        for d in analyze_source(source, "m.py", "pkg.m", **PIPELINE).to_json()["diagnostics"]
        if d["code"] != "ML015"
    ]
    assert (d["code"], d["fix"] is not None) == ("ML003", True)
