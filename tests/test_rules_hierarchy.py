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


def test_a_base_re_exported_by_a_star_import_is_found(tmp_path):
    """FrEIA's idiom: ``modules/__init__.py`` does ``from .base import *`` and each module
    beside it ``from . import InvertibleModule``: the base (with its ``reset_parameters()``)
    is found through the star import, so the subclass's hook-less tensor is judged with it."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .bases import *\n")
    (pkg / "bases.py").write_text(textwrap.dedent(BASES))
    (pkg / "layers.py").write_text(
        textwrap.dedent(
            """
            import torch
            import torch.nn as nn
            from . import Resettable, NoHook

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
            """
        )
    )
    settings = Settings(root=tmp_path, select=["ML004"])
    result = run_check([pkg], settings, use_cache=False, workers=1)
    assert sorted((d.code, d.symbol) for d in result.diagnostics) == [("ML004", "WithoutHook")]


INIT_FACTORIES = """
from functools import partial
import torch.nn as nn

def init_weights_timm(module, name=""):
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=.02)

def init_weights_reset(module, name="", needs_reset=True):
    if needs_reset and hasattr(module, "reset_parameters"):
        module.reset_parameters()

def get_init(mode="jax", head_bias=0.0, needs_reset=True):
    if mode.startswith("jax"):
        return partial(init_weights_timm, needs_reset=needs_reset)
    elif mode == "reset":
        return partial(init_weights_reset, needs_reset=needs_reset)
    else:
        return partial(init_weights_timm, needs_reset=needs_reset)
"""
APPLIERS = """
import math
import torch.nn as nn
from pkg.inits import get_init, init_weights_reset, init_weights_timm
from timm.layers import named_apply

class ResetByDefault(nn.Module):
    def __init__(self, dim, weight_init="reset"):
        super().__init__()
        self.head = nn.Linear(dim, 10)
        self.weight_init_mode = "reset" if weight_init == "skip" else weight_init
        self.init_weights(needs_reset=False)

    def init_weights(self, mode="", needs_reset=True):
        mode = mode or self.weight_init_mode
        head_bias = -math.log(10) if "nlhb" in mode else 0.
        named_apply(get_init(mode, head_bias, needs_reset=needs_reset), self)

class JaxByDefault(ResetByDefault):
    def __init__(self, dim, weight_init="jax"):
        super().__init__(dim, weight_init)

class UnknownMode(nn.Module):
    def __init__(self, dim, mode):
        super().__init__()
        self.head = nn.Linear(dim, 10)
        named_apply(get_init(mode), self)

class AppliesReset(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.head = nn.Linear(dim, 10)
        self.apply(init_weights_reset)

class AppliesTimm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.head = nn.Linear(dim, 10)
        self.apply(init_weights_timm)

class JaxMode(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.head = nn.Linear(dim, 10)
        named_apply(get_init("jax_nlhb"), self)
"""


def test_parent_applied_init_judged_through_an_init_factory_in_another_file(tmp_path):
    """ML010: what ``get_init(mode)`` (defined elsewhere) returns for the default mode decides."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "inits.py").write_text(textwrap.dedent(INIT_FACTORIES))
    (pkg / "models.py").write_text(textwrap.dedent(APPLIERS))
    settings = Settings(root=tmp_path, select=["ML010"])
    result = run_check([pkg], settings, use_cache=False, workers=1)
    got = sorted(d.symbol for d in result.diagnostics)
    # (JaxByDefault's own __init__ applies nothing: the rule reports where the call is written)
    assert got == ["AppliesTimm", "JaxMode", "UnknownMode"]
    # without the factory's file the mode cannot be judged: the finding stands where the repo
    # materialises per module (under "auto" ResetByDefault is a model root whose own
    # init_weights() replays the call: nothing to report, see metalint.static.protocol)
    per_module = Settings(root=tmp_path, select=["ML010"], protocol="reset_parameters")
    alone = run_check([pkg / "models.py"], per_module, use_cache=False, workers=1)
    assert "ResetByDefault" in {d.symbol for d in alone.diagnostics}
