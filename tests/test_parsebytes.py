"""Class-level statements the fact collector passes by are left out of the libcst parse; what
a rule reads of a class body (imports, ``_apply`` bindings, classes in compound statements,
names that keep a helper) is still parsed, with every row where it was."""

from __future__ import annotations

import ast

from metalint.fix.registry import fix_for
from metalint.rules import all_rules
from metalint.static.elide import elide
from metalint.static.engine import analyze_source

PIPELINE = {"rules": all_rules(), "fix_for": fix_for}


def _results(source: str) -> tuple[dict, dict]:
    full = analyze_source(source, "m.py", "pkg.m", elide_unread=False, **PIPELINE).to_json()
    short = analyze_source(source, "m.py", "pkg.m", **PIPELINE).to_json()
    return full, short


def _codes(result: dict) -> list[str]:
    return sorted(d["code"] for d in result["diagnostics"])


def _elided(source: str) -> str:
    out = elide(source, ast.parse(source))
    assert len(out.splitlines()) == len(source.splitlines())
    ast.parse(out)
    return out


FIELDS = '''\
from dataclasses import dataclass
import torch
from torch import nn


@dataclass
class Output:
    """What the model returns."""

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


class Net(nn.Module):
    base_model_prefix = "net"
    _no_split_modules = [
        "Block",
        "Layer",
    ]

    def __init__(self, d):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d) * 0.5)
'''


def test_class_level_fields_are_left_out_and_rows_kept():
    out = _elided(FIELDS)
    assert "hidden_states" not in out and "_no_split_modules" not in out
    assert '"""What the model returns."""' in out  # a docstring is a string already
    kept, source = out.splitlines(), FIELDS.splitlines()
    assert kept.index("    def __init__(self, d):") == source.index("    def __init__(self, d):")
    full, short = _results(FIELDS)
    assert short == full
    assert [(d["code"], d["location"]["row"]) for d in short["diagnostics"]] == [
        ("ML001", 25),
        ("ML012", 23),
        ("ML015", 25),
    ]


def test_a_short_class_statement_stays():
    source = FIELDS.replace(
        '    _no_split_modules = [\n        "Block",\n        "Layer",\n    ]\n', ""
    )
    assert 'base_model_prefix = "net"' in _elided(source)


APPLY_ALIAS = """\
import torch
from torch import nn


def move_states(self, fn):
    self.state = fn(self.state)
    return nn.Module._apply(self, fn)


class Recurrent(nn.Module):
    _apply = (
        move_states
    )
    other = [
        1,
        2,
    ]

    def __init__(self, d):
        super().__init__()
        self.cell = nn.Linear(d, d)
        self.state = torch.zeros(d)
"""


def test_an_apply_binding_over_several_rows_is_still_read():
    out = _elided(APPLY_ALIAS)
    assert "move_states\n" in out and "other = [" not in out
    full, short = _results(APPLY_ALIAS)
    assert short == full
    # ML013 is reported at the binding the run of statements after it does not swallow
    assert ("ML013", 11) in [(d["code"], d["location"]["row"]) for d in short["diagnostics"]]


CLASS_IMPORT = """\
import torch


class Net(torch.nn.Module):
    from torch import nn as tnn
    sizes = (
        1,
        2,
    )

    def __init__(self, d):
        super().__init__()
        self.gamma = tnn.Parameter(torch.ones(d) * 1e-5)
"""


def test_an_import_in_a_class_body_is_still_parsed():
    out = _elided(CLASS_IMPORT)
    assert "from torch import nn as tnn" in out and "sizes = (" not in out
    full, short = _results(CLASS_IMPORT)
    assert short == full
    # ``tnn.Parameter`` is known for torch's only through the import in the class body
    assert ("ML001", 13) in [(d["code"], d["location"]["row"]) for d in short["diagnostics"]]


NESTED = """\
import torch
from torch import nn

FLAG = True


class Outer:
    table = {
        "a": 1,
        "b": 2,
    }
    if FLAG:

        class Inner(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.gamma = nn.Parameter(torch.ones(d) * 1e-5)
"""


def test_a_class_in_a_class_level_compound_statement_is_still_checked():
    out = _elided(NESTED)
    assert "class Inner(nn.Module):" in out and '"a": 1' not in out
    full, short = _results(NESTED)
    assert short == full
    assert {d["symbol"] for d in short["diagnostics"]} == {"Outer.Inner"}
    assert "ML001" in _codes(short)


HELPER_NAMED = """\
import torch
from torch import nn


def make_scale(d):
    return torch.linspace(0, 1, d).tolist()


class Net(nn.Module):
    builders = dict(
        scale=make_scale,
        other=None,
    )

    def __init__(self, d):
        super().__init__()
        self.scale = self.builders["scale"](d)
        self.w = nn.Parameter(torch.ones(d) * 1e-5)
"""


def test_a_function_a_class_statement_names_keeps_its_body():
    out = _elided(HELPER_NAMED)
    assert "scale=make_scale" not in out  # the statement is left out,
    assert "torch.linspace(0, 1, d).tolist()" in out  # the helper it names is not
    full, short = _results(HELPER_NAMED)
    assert short == full
    # the helper's ``.tolist()`` is still seen (another file's construction may call it)
    assert [tuple(r) for r in short["functions"]["pkg.m.make_scale"]["meta_reads"]] == [
        ("ML008", 6)
    ]


SHARED_ROWS = """\
import torch
from torch import nn


class Net(nn.Module):
    a = [
        1,
    ]; b = 2
    c = (
        3,
    )
    d = 4; e = [
        5,
    ]

    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d) * 1e-5)
"""


def test_statements_sharing_rows_stay():
    out = _elided(SHARED_ROWS)
    assert "]; b = 2" in out and "d = 4; e = [" in out and "c = (" not in out
    full, short = _results(SHARED_ROWS)
    assert short == full
    assert _codes(short) == ["ML001", "ML012", "ML015"]


UNREACHED = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d) * 1e-5)


class Net(nn.Module):
    def __init__(self, d):
        super().__init__()
        self._build(d)

    def _build(self, d):
        self.body = self._stack(d)

    def _stack(self, d):
        return nn.Sequential(Block(d), Block(d))

    def setup(self):
        self.ready = True
        self._fill()

    def _fill(self):
        for m in self.modules():
            nn.init.zeros_(m.weight)

    def _loop(self, steps):
        self.state = self._compute(steps)

    def _compute(self, steps):
        total = 0
        for i in range(steps):
            total += i
        return total
"""


def test_what_only_an_unreached_private_method_calls_is_left_out():
    out = _elided(UNREACHED)
    assert "self.state = self._compute(steps)" in out  # kept: it writes to self
    assert "total += i" not in out  # what only it calls is no rule's business
    full, short = _results(UNREACHED)
    assert short == full


def test_what_construction_and_a_public_method_reach_is_still_read():
    out = _elided(UNREACHED)
    # __init__ -> _build -> _stack: construction builds two Blocks there
    assert "return nn.Sequential(Block(d), Block(d))" in out
    # the public ``setup`` may be a root's entry point: what ``_fill`` applies is its
    assert "nn.init.zeros_(m.weight)" in out
    full, short = _results(UNREACHED)
    assert short == full
    net = next(c for c in short["classes"] if c["fullname"] == "pkg.m.Net")
    assert "pkg.m.Block" in net["protocol"]["children"]
    assert net["protocol"]["applies"]["setup"][0][0] == "block"
    assert "_compute" in net["methods"]  # named still, by its stub


OWN_CALLS = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self._setup(False)

    def _setup(self, apply_init=True):
        if apply_init:
            self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.weight)

    def _refresh(self):
        self._setup(True)

    def _report(self):
        return self._describe()

    def _describe(self):
        return "net"
"""


def test_a_private_method_calling_what_construction_runs_stays():
    # ``_refresh`` is a second call site of ``_setup``: its argument is no longer known to
    # be False in a default build, so the applied init may run there (ML010)
    out = _elided(OWN_CALLS)
    assert "self._setup(True)" in out
    full, short = _results(OWN_CALLS)
    assert short == full
    assert [(d["code"], d["location"]["row"]) for d in short["diagnostics"]] == [("ML010", 13)]
    alone = OWN_CALLS.replace("        self._setup(True)\n", "        pass\n")
    assert _results(alone)[1]["diagnostics"] == []


def test_a_private_method_calling_only_what_nothing_runs_is_left_out():
    out = _elided(OWN_CALLS)
    assert "return self._describe()" not in out and 'return "net"' not in out
    full, short = _results(OWN_CALLS)
    assert short == full
