"""ML008/ML009 through helpers in other files: ``__init__`` calling a module-level function
of another module of the checked tree (imported by name, or through a module alias) that
reads a tensor's value (``.item()``, ``.tolist()``) or copies one it creates to a real device
(``.cuda()``), itself or through a function it calls, is reported at the call, with the
function and line of the cause in ``Diagnostic.via``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from metalint.check import run_check
from metalint.config import Settings
from metalint.diagnostics import HelperReads

# a recommender's feature utilities: bucket boundaries computed with torch at build time
FEATURES = """
import math

import torch


def log_buckets(n, base=2.0):
    edges = torch.logspace(0, math.log(n, base), steps=8, base=base)
    return edges.round().long().tolist()


def bucket_count(n):
    return len(log_buckets(n))


def hashed_size(n, load=0.75):
    return int(math.ceil(n / load))


def table_rows(weights):
    return int(weights.sum().item())


def causal_mask(n):
    return torch.ones(n, n).tril().cuda()


def history_mask(n):
    return causal_mask(n).bool()
"""

MODEL = """
import torch
from torch import nn

from recsys_t import features
from recsys_t.features import bucket_count, hashed_size, table_rows


class UserTower(nn.Module):
    def __init__(self, n_users, n_items, dim, popularity):
        super().__init__()
        self.users = nn.Embedding(hashed_size(n_users), dim)
        self.items = nn.Embedding(bucket_count(n_items), dim)
        self.ages = nn.Embedding(len(features.log_buckets(120)), dim)
        self.rows = table_rows(popularity)
        self.register_buffer("mask", features.history_mask(n_items))
        self.mlp = nn.Sequential(nn.Linear(3 * dim, dim), nn.ReLU())
"""


def _check(tmp_path, with_features: bool, fmt_json: bool = False):
    pkg = tmp_path / "recsys_t"
    (pkg / "towers").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "towers" / "__init__.py").write_text("")
    (pkg / "towers" / "user.py").write_text(textwrap.dedent(MODEL))
    if with_features:
        (pkg / "features.py").write_text(textwrap.dedent(FEATURES))
    settings = Settings(root=tmp_path, select=["ML008", "ML009"])
    result = run_check([pkg], settings, use_cache=False, workers=1)
    return [d for d in result.diagnostics if d.code in ("ML008", "ML009")]


def test_reads_in_helpers_of_another_file_are_reported_at_the_call(tmp_path):
    found = _check(tmp_path, with_features=True)
    got = [(d.code, d.start.row, d.via[0], d.via[1].rsplit("/", 1)[-1], d.via[2]) for d in found]
    # bucket_count -> log_buckets (.tolist() at line 9), features.log_buckets directly;
    # hashed_size reads no tensor; table_rows' .item() is on an argument (its value unknown);
    # history_mask -> causal_mask (.cuda() of a tensor it creates, line 25)
    assert got == [
        ("ML008", 13, "recsys_t.features.log_buckets", "features.py", 9),
        ("ML008", 14, "recsys_t.features.log_buckets", "features.py", 9),
        ("ML009", 16, "recsys_t.features.causal_mask", "features.py", 25),
    ]
    assert all(d.symbol == "UserTower" and f"features.py:{d.via[2]}" in d.help for d in found)
    assert json.loads(json.dumps(found[0].to_json()))["via"]["line"] == 9


def test_helpers_outside_the_checked_tree_are_not_reported(tmp_path):
    assert _check(tmp_path, with_features=False) == []


def test_the_read_is_found_again_from_the_cache(tmp_path):
    pkg = tmp_path / "recsys_t"
    _check(tmp_path, with_features=True)
    settings = Settings(root=tmp_path, select=["ML008", "ML009"], cache_dir=tmp_path / ".cache")
    first = run_check([pkg], settings, use_cache=True, workers=1).diagnostics
    again = run_check([pkg], settings, use_cache=True, workers=1).diagnostics
    assert [d.via for d in again] == [d.via for d in first] and len(first) == 3


def test_check_lists_calls_of_other_files_and_analyses_again_only_what_the_tree_confirms(
    tmp_path, monkeypatch
):
    """A file's analysis leaves out its findings at calls of another file's functions (most
    are dropped by the tree) and lists them; ``check`` analyses again, in full, only the
    files where the tree confirms one."""
    from metalint import checking as check

    calls = []
    real = check.analyze_files

    def recording(jobs, *args):
        calls.append([(Path(job[1]).as_posix(), job[5]) for job in jobs])
        return real(jobs, *args)

    monkeypatch.setattr(check, "analyze_files", recording)
    monkeypatch.chdir(tmp_path)
    assert len(_check(tmp_path, with_features=True)) == 3
    first, again = calls
    user = "recsys_t/towers/user.py"
    assert (user, True) in first and all(defer for _, defer in first)
    assert again == [(user, False)]
    calls.clear()
    (tmp_path / "without").mkdir()
    assert _check(tmp_path / "without", with_features=False) == []
    assert len(calls) == 1  # nothing confirmed: no second analysis


def test_deferred_analysis_lists_the_calls_it_leaves_out():
    from metalint.fix.registry import fix_for
    from metalint.rules import all_rules
    from metalint.static.engine import analyze_source
    from metalint.static.results import FileResult

    def analyse(defer):
        return analyze_source(
            textwrap.dedent(MODEL),
            "user.py",
            "recsys_t.towers.user",
            rules=all_rules(),
            fix_for=fix_for,
            defer_helper_reads=defer,
        )

    full, deferred = analyse(False), analyse(True)
    at_calls = [d for d in full.diagnostics if d.condition and d.condition.get(HelperReads)]
    assert at_calls and full.helper_reads == []
    assert deferred.helper_reads == sorted(
        {(d.code, d.condition.get(HelperReads).function) for d in at_calls}
    )
    assert ("ML008", "recsys_t.features.bucket_count") in deferred.helper_reads
    assert [d for d in full.diagnostics if d not in at_calls] == deferred.diagnostics
    # what a worker sends and the cache keeps reads back the same
    again = FileResult.from_json("user.py", json.loads(json.dumps(deferred.to_json())))
    assert again.helper_reads == deferred.helper_reads


SHAPES = """
import torch


def plain(n):
    return torch.ones(n).sum().item()


def commented_header(n):  # see make_window(n)
    return n


def multi_line(
    n,
    m=2,
):
    # before the first statement: fill_(x)
    t = torch.zeros(n)
    return t.tolist()


def trailing(n):
    return n
    # indented after it: belongs to the body, cuda()

# at the module's indentation: the next statement's, item()


@torch.no_grad()
def decorated(n):
    @staticmethod
    def inner():
        return 1

    return inner()


async def later(n):
    return n
"""


def test_short_function_texts_are_the_bodies_libcst_renders():
    """The body text both summaries search is cut from the source at CPython's rows (not
    rendered): the same text as libcst's, or libcst's where a comment ends its header or
    follows its last statement."""
    import ast

    import libcst as cst

    from metalint.static.engine import _body_texts, _short_functions
    from metalint.static.syntax import parse_valid_module

    module = parse_valid_module(SHAPES)
    texts = _short_functions(module, SHAPES, ast.parse(SHAPES))
    assert [f.name.value for f, _ in texts] == [
        "plain",
        "commented_header",
        "multi_line",
        "trailing",
        "decorated",
        "later",
    ]
    for fn, text in texts:
        assert text == module.code_for_node(fn.body), fn.name.value
    # which were cut from the source (the others are rendered)
    defs = [s for s in module.body if isinstance(s, cst.FunctionDef)]
    cut = _body_texts(defs, SHAPES, ast.parse(SHAPES))
    assert sorted(defs[i].name.value for i in cut) == ["decorated", "later", "multi_line", "plain"]
