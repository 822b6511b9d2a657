"""ML008/ML009 through helpers in other files: ``__init__`` calling a module-level function
of another module of the checked tree (imported by name, or through a module alias) that
reads a tensor's value (``.item()``, ``.tolist()``) or copies one it creates to a real device
(``.cuda()``), itself or through a function it calls, is reported at the call, with the
function and line of the cause in ``Diagnostic.via``."""

from __future__ import annotations

import json
import textwrap

from metalint.check import run_check
from metalint.config import Settings

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
