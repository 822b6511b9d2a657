"""A finding's conditions are typed values: one frozen dataclass per kind, built by the rule,
carried by the engine, written to the cache as their fields and read back only as the kinds
metalint registers."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from metalint.cache import Cache, seal, secret
from metalint.check import all_codes
from metalint.config import DEFAULT_HOOKS
from metalint.diagnostics import (
    CLAUSES,
    AppliesInit,
    AtMaterialisation,
    ChildrenFirst,
    Clause,
    Condition,
    Diagnostic,
    HelperReads,
    HelperRegisters,
    NoHook,
    NoMethod,
    NotOnlyReset,
    NotRecreated,
    NotRun,
    Position,
    ReturnsMeta,
    RootReplays,
    SameLaw,
    SkipsModuleHooks,
)
from metalint.rules import all_rules
from metalint.static.engine import analyze_source

SAMPLES = [
    NotRecreated(("gamma", "beta")),
    NotRecreated(("w",), hooks=("reset_parameters",)),
    NoHook(),
    NoMethod(("tie_weights", "_tie_weights")),
    NotOnlyReset("timm.layers.init_weights_vit", (("0", "jax"), ("head_bias", 0.5))),
    NotOnlyReset("pkg.init", ()),
    NotOnlyReset("pkg.init", None),
    RootReplays("init_weights"),
    AppliesInit("timm.models.efficientnet_init_weights"),
    HelperReads("pkg.utils.make_window"),
    HelperRegisters("pkg.utils.bufferize", "0", "1"),
    SameLaw("pkg.Mlp", "fc1.weight", "torch.nn.init.normal_(mean=0.0, std=0.02)"),
    AtMaterialisation(("norm.weight", "norm.bias")),
    SkipsModuleHooks(),
    ChildrenFirst(),
    ReturnsMeta("pkg.steps"),
    NotRun("setup_weights"),
]

BAD = """\
import torch
from torch import nn


class LayerScale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(1e-5 * torch.ones(dim))
"""


def test_every_kind_is_registered_and_sampled():
    assert set(CLAUSES.values()) == set(typing.get_args(Clause))
    assert {type(c) for c in SAMPLES} == set(CLAUSES.values())


@pytest.mark.parametrize("clause", SAMPLES, ids=lambda c: type(c).__name__)
def test_a_condition_reads_back_as_written(clause):
    cond = Condition("pkg.mod.Block", True, (clause, NoHook()))
    data = json.loads(json.dumps(cond.to_json()))
    back = Condition.from_json(data)
    assert back == cond
    assert back.get(type(clause)) == clause
    # through a whole diagnostic, as the cache writes it
    d = Diagnostic("ML001", "m", "a.py", Position(1, 1), Position(1, 2), condition=cond)
    again = Diagnostic.from_cache(json.loads(json.dumps(d.to_cache())))
    assert again.condition == cond


@pytest.mark.parametrize(
    "clause",
    [
        {"kind": "Diagnostic", "code": "x"},
        {"kind": "Path", "args": ["/etc/passwd"]},
        {"kind": "os.system", "command": "true"},
        {"kind": "__class__"},
        {"kind": ["NoHook"]},
        {"function": "pkg.f"},
        {"kind": "HelperReads", "function": "pkg.f", "__init__": 1},
        {"kind": "NoHook", "extra": True},
        ["NoHook"],
        "NoHook",
    ],
)
def test_only_registered_kinds_are_read_back(clause):
    data = {"cls": "pkg.A", "module": True, "clauses": [clause]}
    with pytest.raises(ValueError):
        Condition.from_json(data)


def test_the_clauses_must_be_a_list():
    with pytest.raises(ValueError):
        Condition.from_json({"cls": "pkg.A", "module": True, "clauses": {"kind": "NoHook"}})


def test_the_rule_builds_the_condition_the_engine_carries():
    result = analyze_source(BAD, "bad.py", "bad", rules=all_rules())
    (d,) = [d for d in result.diagnostics if d.code == "ML001"]
    assert d.condition == Condition("bad.LayerScale", True, (NotRecreated(("gamma",)),))


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    root = tmp_path / "proj"
    root.mkdir()
    (root / "bad.py").write_text(BAD)
    return root


def _cache_file(root: Path) -> tuple[str, Path]:
    codes, _ = all_codes()
    name = Cache(root / ".metalint_cache", Cache.key(codes, DEFAULT_HOOKS), root, secret()).name
    return name, root / ".metalint_cache" / f"{name}.json"


def test_a_cached_condition_that_names_an_unregistered_class_is_a_miss(cli, project):
    first = cli("check", "bad.py", cwd=project)
    assert first.exit_code == 1 and "bad.py:8:9: ML001" in first.output
    name, path = _cache_file(project)
    entries = json.loads(path.read_bytes().split(b"\n", 1)[1])
    (entry,) = entries.values()
    (cached,) = [d for d in entry["result"]["diagnostics"] if d["code"] == "ML001"]
    assert cached["condition"]["clauses"] == [
        {"kind": "NotRecreated", "tensors": ["gamma"], "hooks": []}
    ]
    # sealed with this user's key, so only the reading refuses it
    cached["condition"]["clauses"] = [{"kind": "Finding", "node": None}]
    path.write_bytes(seal(name, json.dumps(entries).encode(), secret()))
    for _ in range(2):  # the run that reads the bad entry, and the one after it
        r = cli("check", "bad.py", cwd=project)
        assert r.exit_code == 1, r.output
        assert "bad.py:8:9: ML001" in r.output and "Traceback" not in r.output
