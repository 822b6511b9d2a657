"""Init through helper functions resolved across files: torch-geometric's ``inits`` idiom
(``glorot(self.att_src)``, ``zeros(self.bias)`` -> ``constant``, ``uniform(size, self.root)``,
``inits.normal(self.w, 0, 1)``) re-creates the tensors a hook hands them; a helper that writes
nothing, or one outside the checked tree, does not."""

from __future__ import annotations

import textwrap

from metalint.check import run_check
from metalint.config import Settings

INITS = """
import math
from typing import Any

import torch
from torch import Tensor


def uniform(size: int, value: Any):
    if isinstance(value, Tensor):
        bound = 1.0 / math.sqrt(size)
        value.data.uniform_(-bound, bound)
    else:
        for v in value.parameters() if hasattr(value, "parameters") else []:
            uniform(size, v)


def glorot(value: Any):
    if isinstance(value, Tensor):
        stdv = math.sqrt(6.0 / (value.size(-2) + value.size(-1)))
        value.data.uniform_(-stdv, stdv)
    else:
        for v in value.parameters() if hasattr(value, "parameters") else []:
            glorot(v)


def constant(value: Any, fill_value: float):
    if isinstance(value, Tensor):
        value.data.fill_(fill_value)


def zeros(value: Any):
    constant(value, 0.0)


def normal(value: Any, mean: float, std: float):
    if isinstance(value, Tensor):
        value.data.normal_(mean, std)


def shape_of(value: Any):
    return tuple(value.shape)
"""

CONV = """
import torch
from torch import nn
from torch.nn import Parameter

from graphlib_t import inits
from ..inits import glorot, shape_of, uniform, zeros


class RelConv(nn.Module):
    def __init__(self, d, relations, bias=True):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.att_src = Parameter(torch.empty(1, 2, d))
        self.root = Parameter(torch.empty(d, d))
        self.rel = Parameter(torch.empty(relations, d))
        self.scale = Parameter(torch.empty(d))
        if bias:
            self.bias = Parameter(torch.empty(d))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        self.lin.reset_parameters()
        glorot(self.att_src)
        uniform(self.root.size(0), self.root)
        inits.normal(self.rel, mean=0.0, std=1.0)
        shape_of(self.scale)
        zeros(self.bias)
"""


def _check(tmp_path, with_inits: bool):
    pkg = tmp_path / "graphlib_t"
    (pkg / "conv").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "conv" / "__init__.py").write_text("")
    (pkg / "conv" / "rel_conv.py").write_text(textwrap.dedent(CONV))
    if with_inits:
        (pkg / "inits.py").write_text(textwrap.dedent(INITS))
    settings = Settings(root=tmp_path, select=["ML"])
    result = run_check([pkg], settings, use_cache=False, workers=1)
    return sorted(
        (d.code, d.subject[0]) for d in result.diagnostics if d.code in ("ML001", "ML005")
    )


def test_helpers_in_another_file_recreate_what_they_write(tmp_path):
    # only `scale` is handed to a helper that writes nothing
    assert _check(tmp_path, with_inits=True) == [("ML005", "scale")]


def test_helpers_outside_the_checked_tree_are_unknown(tmp_path):
    got = _check(tmp_path, with_inits=False)
    assert got == [("ML005", n) for n in ("att_src", "bias", "rel", "root", "scale")]
