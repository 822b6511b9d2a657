"""ML004 and ML011 across files: the hook or the tie method lives in a base class elsewhere."""

from __future__ import annotations

import textwrap

from metalint.check import run_check
from metalint.config import Settings

BASES = """
import torch.nn as nn

class Resettable(nn.Module):
    def reset_parameters(self):
        for p in self.parameters(recurse=False):
            nn.init.zeros_(p)

class Tied(nn.Module):
    def tie_weights(self):
        self.head.weight = self.embed.weight

class NoHook(nn.Module):
    pass
"""
MODELS = """
import torch
import torch.nn as nn
from pkg.bases import NoHook, Resettable, Tied

class WithHook(Resettable):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.empty(d))
        nn.init.zeros_(self.w)

class WithoutHook(NoHook):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.empty(d))
        nn.init.zeros_(self.w)

class MHA(nn.MultiheadAttention):
    def __init__(self, d):
        super().__init__(d, 1)
        self.extra = nn.Parameter(torch.empty(d))
        nn.init.ones_(self.extra)

class LinearPlus(nn.Linear):
    def __init__(self, d):
        super().__init__(d, d)
        self.extra = nn.Parameter(torch.empty(d))
        nn.init.ones_(self.extra)

class TiedLM(Tied):
    def __init__(self, v, d):
        super().__init__()
        self.embed = nn.Embedding(v, d)
        self.head = nn.Linear(d, v, bias=False)
        self.head.weight = self.embed.weight

class UntiedLM(NoHook):
    def __init__(self, v, d):
        super().__init__()
        self.embed = nn.Embedding(v, d)
        self.head = nn.Linear(d, v, bias=False)
        self.head.weight = self.embed.weight
"""


def test_hook_and_tie_methods_are_found_in_other_files(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "bases.py").write_text(textwrap.dedent(BASES))
    (pkg / "models.py").write_text(textwrap.dedent(MODELS))
    settings = Settings(root=tmp_path, select=["ML004", "ML011"])
    result = run_check([pkg], settings, use_cache=False, workers=1)
    got = sorted((d.code, d.symbol) for d in result.diagnostics)
    assert got == [("ML004", "MHA"), ("ML004", "WithoutHook"), ("ML011", "UntiedLM")]
