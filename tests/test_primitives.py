"""The shared primitives every rule and codemod asks: which tensor a call writes in place
(``inplace_write``) and what runs while a class is built (``construction``)."""

from __future__ import annotations

import libcst as cst
import pytest

from metalint.static.model import collect, construction
from metalint.static.tensors import initialised_target, inplace_write

HEADER = "import torch\nfrom torch import nn\nfrom torch.nn import init\n"


def _write(expr: str):
    source = HEADER + f"class M(nn.Module):\n    def __init__(self):\n        {expr}\n"
    facts = collect(cst.parse_module(source), "m")
    call = facts.classes[0].methods["__init__"].calls[0]  # the outermost call
    qualify = lambda node: facts.aliases.qualify(node)  # noqa: E731
    return inplace_write(call.node, qualify), initialised_target(call.node, qualify)


@pytest.mark.parametrize(
    "expr, chain, kind, name, target",
    [
        ("nn.init.zeros_(self.fc.bias)", ("self", "fc", "bias"), "zeros", "zeros_", "self.fc.bias"),
        ("init.constant_(self.w, 1.0)", ("self", "w"), "ones", "constant_", "self.w"),
        ("self.w.data.fill_(0.5)", ("self", "w", "data"), "const", "fill_", "self.w.data"),
        ("self.w.normal_(std=0.02)", ("self", "w"), "random", "normal_", "self.w"),
        # basic indexing (an integer, a slice) is a view: the write lands in the tensor
        ("torch.nn.init.normal_(self.w[0])", ("self", "w"), "random", "normal_", "self.w"),
        ("nn.init.normal_(self.w[d * 2 :], std=s)", ("self", "w"), "random", "normal_", "self.w"),
        # an index that may be a tensor copies: the write lands in no tensor of the module
        ("torch.nn.init.normal_(self.w[idx])", ("self", "w", "[]"), "random", "normal_", None),
        # a project's own function ending in one underscore mutates its first argument
        ("my_helper_(self.w)", ("self", "w"), None, "my_helper_", "self.w"),
        # set_ swaps the storage: a write of the tensor, not an initialisation of its values
        ("self.w.set_(torch.ones(3))", ("self", "w"), "storage", "set_", None),
    ],
)
def test_inplace_write(expr, chain, kind, name, target):
    w, init = _write(expr)
    assert w is not None
    assert (w.chain, w.kind, w.name) == (chain, kind, name)
    assert init == target


@pytest.mark.parametrize(
    "expr",
    [
        "self.scale_(self.w)",  # a method of the module: its own body says what it writes
        "self.reset_parameters()",
        "self.w.add(1)",  # out of place
        "x.__iadd__(self.w)",
        "torch.zeros(3).fill_(1)",  # no tensor reached by name
    ],
)
def test_not_an_inplace_write(expr):
    assert _write(expr) == (None, None)


def test_chained_inplace_reports_the_inner_call_once():
    source = HEADER + (
        "class M(nn.Module):\n    def __init__(self):\n        self.w.normal_().mul_(2)\n"
    )
    facts = collect(cst.parse_module(source), "m")
    calls = facts.classes[0].methods["__init__"].calls
    writes = [inplace_write(c.node, facts.aliases.qualify) for c in calls]
    assert [w.name for w in writes if w] == ["normal_"]


def test_construction_with_and_without_hooks():
    source = HEADER + (
        "class M(nn.Module):\n"
        "    def __init__(self):\n        self._build()\n        self.reset_parameters()\n"
        "    def _build(self):\n        pass\n"
        "    def reset_parameters(self):\n        self._init_pos()\n"
        "    def _init_pos(self):\n        pass\n"
        "    def forward(self, x):\n        return x\n"
    )
    cls = collect(cst.parse_module(source), "m").classes[0]
    names = lambda ms: sorted(m.name for m in ms)  # noqa: E731
    assert names(construction(cls)) == ["__init__", "_build", "_init_pos", "reset_parameters"]
    hook_free = construction(cls, enter_hooks=False, hooks=("reset_parameters",))
    assert names(hook_free) == ["__init__", "_build"]


@pytest.mark.parametrize(
    "expr",
    [
        "torch.hann_window(n)",
        "torch.kaiser_window(n, periodic=False)",
        "torch.signal.windows.hamming(n)",
        "torch.tril_indices(n, n)",
    ],
)
def test_window_and_index_factories_make_values(expr):
    """An audio front end's STFT window and an index table are constants made by a torch
    factory: a tensor (a plain attribute holding one is ML007), a value (a parameter made
    from one is ML001), never random (vocabulary's VALUE_FACTORIES, RNG_FREE_TORCH)."""
    from metalint.static.construction import is_tensor
    from metalint.static.tensors import value_kind
    from metalint.vocabulary import RNG_FREE_TORCH

    source = HEADER + f"class M(nn.Module):\n    def __init__(self, n):\n        w = {expr}\n"
    facts = collect(cst.parse_module(source), "m")
    method = facts.classes[0].methods["__init__"]
    (value,) = [v for _, v in method.local_values["w"]]
    qualify = facts.aliases.qualify
    assert is_tensor(value, qualify, method)
    assert value_kind(value, qualify, method) == "value"
    assert qualify(value.func) in RNG_FREE_TORCH


@pytest.mark.parametrize(
    "expr, number",
    [
        ("self._levels.prod().item()", True),  # vector-quantize-pytorch's FSQ codebook_size
        ("grid_out.shape[-1]", True),  # neuralop's DiscreteContinuousConv2d n_out
        ("x.size(0) * k", True),
        ("x.numel() // 2", True),
        ("int(v)", True),
        ("len(levels) * k", True),
        ("math.prod(levels)", True),
        ("k ** -0.5", True),  # an argument annotated int
        ("x.size()", False),  # a torch.Size
        ("x.shape[1:]", False),
        ("x.prod()", False),  # a tensor
        ("x * k", False),
        ("v", False),  # an argument without annotation: the caller may pass a tensor
        ("schedule(k)", False),  # an unknown function
    ],
)
def test_python_numbers(expr, number):
    """``is_number``: the one answer to "is this certainly a Python number" (a size kept on
    ``self`` that a hook's value reads is then no plain tensor attribute); never for a tensor
    or for what an unknown function returns."""
    from metalint.static.construction import is_number, is_tensor

    source = (
        "import math\n" + HEADER + "class M(nn.Module):\n"
        "    def __init__(self, v, k: int, levels, grid_out):\n"
        "        x = torch.ones(3, 4)\n"
        f"        w = {expr}\n"
    )
    facts = collect(cst.parse_module(source), "m")
    method = facts.classes[0].methods["__init__"]
    (value,) = [v for _, v in method.local_values["w"]]
    qualify = facts.aliases.qualify
    assert is_number(value, qualify, method) is number
    assert not (number and is_tensor(value, qualify, method))


@pytest.mark.parametrize(
    "expr, empty",
    [
        ("torch.empty(0)", True),
        ("torch.zeros(0, 4, device=d)", True),
        ("torch.empty((0,))", True),
        ("torch.tensor([])", True),
        ("torch.tensor(0)", False),  # a 0-dim tensor holding 0: one element
        ("torch.zeros(())", False),  # a 0-dim tensor
        ("torch.ones(4)", False),
        ("torch.randn(0)", False),  # not a size-first factory ML004 knows
    ],
)
def test_size_zero(expr, empty):
    from metalint.rules.missing_reset_hook import _size_zero

    def qualify(node):
        return f"torch.{node.attr.value}" if isinstance(node, cst.Attribute) else None

    assert _size_zero(cst.parse_expression(expr), qualify) is empty


@pytest.mark.parametrize(
    "expr",
    [
        "nn.Linear(dim, dim)",
        "(mode.startswith('jax'))",
        "mode.endswith(('a', 'b'))",
        "self.mode.startswith(prefix)",
        "startswith('x')",
        "f(1)",
        "dims[0]",
        "'ab'[0]",
        "1 + 2",
        "depth * 2",
        "(\n    a\n    + b\n)",
        "1",
        "'jax'",
        "self.flag",
        "not flag",
        "mode == 'jax' or depth > 2",
        "(1, 'a')",
        "x if flag else y",
    ],
)
def test_value_of_is_the_evaluation_of_the_rendered_text(expr):
    """``value_of`` answers UNKNOWN for calls, subscripts and arithmetic without rendering
    them: the same as evaluating their text, under any names."""
    from metalint.static import constants
    from metalint.static.defaults import UNKNOWN, code, value_of

    node = cst.parse_expression(expr)
    for env in (
        {},
        {"mode": "jax_impl", "prefix": "jax", "flag": True, "depth": 3, "dim": 4},
        {"mode": "x", "self.mode": "jaxy", "prefix": "j", "self.flag": False, "a": 1, "b": 2},
    ):
        expected = constants.evaluate(constants.parse(code(node)), env)
        got = value_of(node, env)
        assert got == expected and (got is UNKNOWN) == (expected is UNKNOWN), env
