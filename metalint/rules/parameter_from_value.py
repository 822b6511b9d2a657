from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst

from metalint.diagnostics import NotRecreated
from metalint.static.construction import borrowed_tensor
from metalint.static.model import AttrAssign, ClassFacts, MethodFacts, construction
from metalint.static.rule import Finding, Invalid, Rule
from metalint.static.syntax import short, string_value
from metalint.static.tensors import parameter_value, same_tensor, value_kind


@dataclass(frozen=True)
class ParameterSite:
    """What the rule matched, handed to its fix (:mod:`metalint.fix.parameter_from_value`):
    the attribute, the method of construction that sets it, and either the ``nn.Parameter(...)``
    call made from a value (``call``), the list or comprehension of a ``ParameterList``
    (``items``), or neither (a tensor of a module built and thrown away, which no fix
    rewrites). For a call: the ``.requires_grad_(..)`` calls around it (``wrappers``,
    outermost first), and whether its value draws random numbers (``random``). Where the
    value is given: ``form`` is ``"assign"`` (``self.x = v``), ``"annotated"`` (``self.x: T =
    v``) or ``"register"`` (``self.register_parameter("x", v)``), and ``holder`` the node whose
    ``value`` it is (the statement, or the argument); both None when the statement sets other
    targets too (``self.x = self.y = v``, unpacking) or adds to it (``+=``)."""

    attr: str
    method: MethodFacts
    call: cst.Call | None = None
    items: cst.BaseExpression | None = None
    wrappers: tuple[cst.Call, ...] = ()
    random: bool = False
    form: str | None = None
    holder: cst.CSTNode | None = None


class ParameterFromValue(Rule):
    """
    ## What it does
    Finds an `nn.Parameter` created in `__init__` from a value (`v * torch.ones(dim)`,
    `torch.randn(...)`, `torch.tensor(...)`, `torch.zeros(...)`) that no reset hook of the class,
    or of a base class, re-creates, judged under the protocol of the model roots that contain
    the class ([protocols](../docs/protocols.md)).

    ## Why is this bad on meta?
    Under `with torch.device("meta"):` the value is never computed, and `to_empty()` gives the
    parameter uninitialised memory. Only `reset_parameters()` (or the model's `init_weights()`)
    runs after materialisation: dinov2's `LayerScale.gamma` became garbage this way.

    ## Example
    ```python
    class LayerScale(nn.Module):
        def __init__(self, dim, init_values=1e-5):
            super().__init__()
            self.gamma = nn.Parameter(init_values * torch.ones(dim))
    ```

    Use instead:
    ```python
        def __init__(self, dim, init_values=1e-5):
            super().__init__()
            self.init_values = init_values
            self.gamma = nn.Parameter(torch.empty(dim))
            self.reset_parameters()

        def reset_parameters(self):
            nn.init.constant_(self.gamma, self.init_values)
    ```

    ## Fix safety
    The fix makes the parameter with `torch.empty(shape)` and sets its value in
    `reset_parameters()`, called by `__init__`: safe when the random draws keep their order
    (constants, `randn(s) * k` as `normal_().mul_(k)`); unsafe when the value is drawn after
    other draws or an existing hook `__init__` did not call must now be called.

    ## Options
    `protocol` and `hooks` (a hook you name counts as re-creating), in `[tool.metalint]`.

    ## When to switch it off
    When every model is always loaded whole from a checkpoint that holds the parameter.

    ## Known limits
    - A class from a registry filled at import, or a table of another file, is judged alone.
    - A tensor given to an instance after construction (peft's `DoraLinearLayer.weight`), or a
      `ParameterList` filled by `.append` in a loop, is not reported.
    """

    code = "ML001"
    name = "parameter-from-value"
    summary = "Parameter created from a value in `__init__` that no reset hook re-creates"
    codemod = "metalint.fix.parameter_from_value"
    site_type = ParameterSite

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        for method in construction(cls, enter_hooks=False, hooks=self.ctx.hooks):
            for assign in method.assigns:
                if assign.target.count(".") != 1:
                    continue
                attr = assign.target.split(".")[1]
                given = _given(assign)
                yield from self._check(cls, method, attr, assign.node, assign.value, given)
                yield from self._check_list(cls, method, attr, assign.node, assign.value, given)
            for call in method.calls:
                if call.receiver == "self" and call.method == "register_parameter":
                    args = call.node.args
                    if len(args) >= 2:
                        attr = string_value(args[0].value)
                        if attr:
                            given = {"form": "register", "holder": args[1]}
                            yield from self._check(
                                cls, method, attr, call.node, args[1].value, given
                            )

    def _check_list(self, cls, method, attr, node, value, given) -> Iterable[Finding]:
        """``self.ws = nn.ParameterList([nn.Parameter(torch.randn(d, d)) for _ in range(n)])``
        (titans-pytorch's memory MLPs), or a list of such parameters: each is a value that no
        hook re-creates."""
        if not (
            type(value) is cst.Call
            and self.qualify(value.func) == "torch.nn.ParameterList"
            and value.args
            and value.args[0].keyword is None
        ):
            return
        items = value.args[0].value
        if type(items) is cst.ListComp:
            elements = [items.elt]
        elif type(items) in (cst.List, cst.Tuple):
            elements = [e.value for e in items.elements]
        else:
            return
        for e in elements:
            data = parameter_value(e, self.qualify)
            if data is None or value_kind(data, self.qualify, method) not in ("value", "random"):
                continue
            yield Finding(
                node,
                f"the parameters of `{attr}` (a `ParameterList`) are created from values "
                f"(`{short(data)}`) in `{method.name}`; no reset hook re-creates them, so after "
                "`to_empty()` they are uninitialised memory",
                cls,
                help="Create them with `torch.empty(...)` and set their values in "
                "`reset_parameters()`",
                conditions=(NotRecreated((attr,)),),
                subject=(attr,),
                site=ParameterSite(attr, method, items=items, **given),
            )
            return

    def _check(self, cls, method, attr, node, value, given) -> Iterable[Finding]:
        made = borrowed_tensor(value, method, self.qualify, self.ctx.facts)
        if made is not None:
            yield Finding(
                node,
                f"`{attr}` is `{short(value)}`, a tensor of a `{short(made.func)}` that "
                f"`{method.name}` builds and throws away: its value is that module's init, which "
                f"no reset hook of this class re-creates, so after `to_empty()` it is "
                f"uninitialised memory",
                cls,
                help=f"Keep the module as a child (`self.{value.value.value} = ...`) or create "
                f"`{attr}` with `torch.empty(...)` and initialise it in `reset_parameters()`",
                conditions=(NotRecreated((attr,)),),
                subject=(attr,),
                site=ParameterSite(attr, method, **given),
            )
            return
        if type(value) is cst.IfExp:
            # ``nn.Parameter(v * torch.ones(d)) if v > 0 else None`` (timm ConvNeXt's gamma)
            value = value.body if parameter_value(value.body, self.qualify) else value.orelse
        data = parameter_value(value, self.qualify)
        if data is None:
            return
        kind = value_kind(data, self.qualify, method)
        if kind not in ("value", "random"):
            return
        yield Finding(
            node,
            f"`{attr}` is created from a value (`{short(data)}`) in `{method.name}`; no reset hook "
            f"re-creates it, so after `to_empty()` it is uninitialised memory",
            cls,
            help="Create it with `torch.empty(...)` and set the value in `reset_parameters()`",
            conditions=(NotRecreated((attr,)),),
            subject=(attr,),
            site=_call_site(attr, method, value, kind == "random", given),
        )


def _given(assign: AttrAssign) -> dict:
    """``form`` and ``holder`` of :class:`ParameterSite` for an assignment."""
    if not assign.alone:
        return {}
    form = "assign" if type(assign.node) is cst.Assign else "annotated"
    return {"form": form, "holder": assign.node}


def _call_site(attr: str, method, value: cst.Call, random: bool, given) -> ParameterSite:
    """The site of the ``nn.Parameter(...)`` call of ``value`` (:func:`parameter_value` found
    its data): the call itself, or the one under ``.requires_grad_(..)`` (:func:`same_tensor`),
    with the calls around it."""
    call, wrappers = same_tensor(value), []
    while value is not call:
        wrappers.append(value)
        value = value.func.value
    return ParameterSite(attr, method, call=call, wrappers=tuple(wrappers), random=random, **given)


# the rule's examples: the reported lines end with ``# ERROR``; they run as tests
# (tests/test_rule_examples.py)
ParameterFromValue.VALID = [
    # the timm-1.0 LayerScale: empty + reset_parameters
    """
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.init_values = init_values
        self.gamma = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.constant_(self.gamma, self.init_values)
""",
    # re-created by a base class's hook
    """
import torch
import torch.nn as nn

class Base(nn.Module):
    def reset_parameters(self):
        nn.init.ones_(self.weight)

class Norm(Base):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
""",
    # parameter from an argument: nothing computed here
    """
import torch.nn as nn

class Wrap(nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = nn.Parameter(weight)
""",
    # a root init_weights that re-creates it through a helper
    """
import torch
from torch import nn

class ViT(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.pos_embed = nn.Parameter(torch.randn(1, 4, dim) * .02)

    def init_weights(self):
        self._init_pos()

    def _init_pos(self):
        nn.init.trunc_normal_(self.pos_embed, std=.02)
""",
    # a legacy constructor of sizes (torch-geometric-temporal's GCLSTM): uninitialised
    # memory, eagerly too, as `torch.empty`; the value comes from the init in the helper
    # (ML003's) and the CPU allocation is ML009's
    """
import torch
from torch.nn import Module, Parameter
from torch_geometric.nn.inits import glorot

class GCLSTM(Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.in_channels = in_channels
        self.W_i = Parameter(torch.Tensor(self.in_channels, out_channels))
        self.b_i = Parameter(torch.Tensor(1, out_channels))
        self.bias = Parameter(torch.Tensor(out_channels))
        self._set_parameters()

    def _set_parameters(self):
        glorot(self.W_i)
""",
    # a tensor of a local module that is kept as a child: the child's hook restores it
    """
import torch
from torch import nn

class Head(nn.Module):
    def __init__(self, c, device=None, dtype=None):
        super().__init__()
        conv = nn.Conv1d(c, c, 1, device=device, dtype=dtype)
        self.weight = conv.weight
        self.block = nn.Sequential(conv, nn.GELU())
        self.width = conv.weight.shape[0]
""",
]

ParameterFromValue.INVALID = [
    # torchlibrosa's Scalar: a legacy constructor of data (one argument that is not
    # certainly a size) copies the caller's statistics
    """
import torch
import torch.nn as nn

class Scalar(nn.Module):
    def __init__(self, scalar, freeze_parameters):
        super().__init__()
        self.scalar_mean = nn.Parameter(torch.Tensor(scalar['mean']))  # ERROR
        self.scalar_std = nn.Parameter(torch.Tensor(scalar['std']))  # ERROR
""",
    # a ParameterList of drawn values (titans-pytorch)
    """
import torch
from torch import nn

class MemoryMLP(nn.Module):
    def __init__(self, dim, depth=2):
        super().__init__()
        self.weights = nn.ParameterList([nn.Parameter(torch.randn(dim, dim)) for _ in range(depth)])  # ERROR
""",
    # dinov2's LayerScale
    Invalid(
        """
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))  # ERROR
""",
        fixed="""
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.init_values = init_values
        self.gamma = nn.Parameter(torch.empty(dim))  # ERROR
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.constant_(self.gamma, self.init_values)
""",
    ),
    # timm's tokens: a value re-initialised in place later in __init__
    Invalid(
        """
import torch
from torch import nn

class Tokens(nn.Module):
    def __init__(self, n, dim):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))  # ERROR
        self.head = nn.Linear(dim, dim)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
""",
        fixed="""
import torch
from torch import nn

class Tokens(nn.Module):
    def __init__(self, n, dim):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))  # ERROR
        self.head = nn.Linear(dim, dim)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.trunc_normal_(self.cls_token, std=0.02)
""",
    ),
    # monai's filter sigmas: no shape to derive, the value is computed again in the hook
    Invalid(
        """
import torch
from torch import nn

class Bilateral(nn.Module):
    def __init__(self, spatial_sigma):
        super().__init__()
        self.sigma_x = nn.Parameter(torch.tensor(spatial_sigma[0]))  # ERROR
""",
        fixed="""
import torch
from torch import nn

class Bilateral(nn.Module):
    def __init__(self, spatial_sigma):
        super().__init__()
        self.spatial_sigma = spatial_sigma
        self.sigma_x = nn.Parameter(torch.tensor(spatial_sigma[0]))  # ERROR
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            self.sigma_x.copy_(torch.tensor(self.spatial_sigma[0]))
""",
    ),
    # every spelling of Parameter, through a local variable, and register_parameter
    """
import torch
import torch.nn
from torch.nn import Parameter
from torch.nn.parameter import Parameter as P

class M(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(d))  # ERROR
        self.b = Parameter(torch.tensor([1.0, 2.0]))  # ERROR
        self.c = P(torch.full((d,), 0.5))  # ERROR
        scale = torch.zeros(d) + 1
        self.d = Parameter(scale)  # ERROR
        self.register_parameter("e", Parameter(torch.ones(d) * 2))  # ERROR
        self.g = Parameter(0.1 * torch.ones(d)) if d > 1 else None  # ERROR
        self.f = Parameter(torch.empty(d))
""",
    # a reset hook exists but forgets this tensor
    """
import torch
import torch.nn as nn

class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.empty(d, d))
        self.scale = nn.Parameter(torch.ones(d))  # ERROR

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.w)
""",
    # parameters taken from a convolution built only for its initialisation
    """
import torch
from torch import nn

class DepthwiseFilter(nn.Module):
    def __init__(self, c, k, device=None, dtype=None):
        super().__init__()
        conv = nn.Conv1d(c, c, k, groups=c, device=device, dtype=dtype)
        self.weight = conv.weight  # ERROR
        self.bias = conv.bias  # ERROR

    def forward(self, x):
        return nn.functional.conv1d(x, self.weight, self.bias, groups=x.shape[1])
""",
]
