from __future__ import annotations

from collections.abc import Iterable

from metalint.diagnostics import NotRecreated
from metalint.static.construction import (
    Registration,
    computed,
    creation_kind,
    registrations,
)
from metalint.static.model import ClassFacts, MethodFacts, construction
from metalint.static.ownership import proxies
from metalint.static.rule import Finding, Rule
from metalint.static.syntax import is_none
from metalint.static.tensors import (
    initialised_target,
    inplace_kind,
    inplace_write,
    parameter_value,
    recreated,
)
from metalint.vocabulary import TORCH_RESET_EVERY_PARAMETER

HOOK = "reset_parameters"
_WORDS = {
    "ones": "ones",
    "zeros": "zeros",
    "const": "a constant",
    "random": "random values",
    "eye": "an identity",
    "dirac": "a Dirac delta",
}


def _own_name(target: str | None) -> str | None:
    """``w`` for ``self.w`` / ``self.w.data``; None for a child's tensor."""
    if not target or not target.startswith("self."):
        return None
    parts = target.split(".")[1:]
    if parts and parts[-1] == "data":
        parts = parts[:-1]
    return parts[0] if len(parts) == 1 else None


def _order(method: MethodFacts) -> dict[int, int]:
    """Source order of the calls of ``method`` (facts record them in traversal order)."""
    return {id(c.node): i for i, c in enumerate(method.calls)}


class ResetMissesTensor(Rule):
    """
    ## What it does
    For a class that defines `reset_parameters()`, finds a tensor created in `__init__` that the
    hook (with the functions it calls and the `super()` chain, across files) does not re-initialise, or
    sets to another kind of value (`__init__` makes ones, the hook draws).

    ## Why is this bad on meta?
    Per-module materialisers (FSDP, Lightning's `init_module(empty_init=True)`) call only
    `reset_parameters()`: what it misses stays uninitialised, what it sets differently differs
    from an eager build.

    ## Example
    ```python
            self.up = nn.Parameter(torch.empty(d, r))
            self.gate = nn.Parameter(torch.ones(d))
            self.reset_parameters()
            nn.init.zeros_(self.up)

        def reset_parameters(self):
            nn.init.normal_(self.gate)
    ```

    Use instead:
    ```python
            self.gate = nn.Parameter(torch.empty(d))
            self.reset_parameters()

        def reset_parameters(self):
            nn.init.zeros_(self.up)
            nn.init.ones_(self.gate)
    ```

    ## Fix safety
    No automatic fix: which value is intended is the author's call.

    ## Options
    `hooks` (a value another configured hook re-creates is still reported: per-module reset
    loses it).

    ## When to switch it off
    When nothing materialises the model per module.

    ## Known limits
    - A function outside the checked tree, or longer than 40 lines, is not followed: its
      tensors count as missed.
    """

    code = "ML005"
    name = "reset-misses-tensor"
    summary = "`reset_parameters()` misses a tensor the class owns, or sets it differently"

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        if HOOK not in cls.methods:
            return
        built = construction(cls, enter_hooks=False, hooks=self.ctx.hooks)
        if not built:
            return
        hook_methods = cls.reachable(HOOK)
        in_reset = self._recreated(cls, hook_methods)
        if "*" in in_reset:
            return
        other = self._other_hooks(cls)
        init = cls.init
        if init is None:
            return  # built by a base's ``__init__`` (``ClassFacts.inherited``): order unknown
        order = _order(init)
        # the first statement of __init__ that runs reset_parameters (directly or through a
        # helper/hook that calls it): what __init__ wrote before it is overwritten eagerly
        reset_call = min(
            (
                order.get(id(c.node), 1 << 30)
                for c in init.calls
                if c.receiver == "self"
                and c.method
                and any(m.name == HOOK for m in cls.reachable(c.method))
            ),
            default=None,
        )
        writes = self._writes(built)
        seen: set[str] = set()
        for reg in registrations(built, self.qualify):
            if reg.attr in seen:
                continue
            seen.add(reg.attr)
            if reg.kind == "buffer" and (reg.value is None or is_none(reg.value)):
                continue
            if reg.attr in in_reset:
                yield from self._mismatch(
                    cls, reg, writes.get(reg.attr, []), hook_methods, reset_call, order
                )
                continue
            yield from self._missed(cls, reg, writes.get(reg.attr, []), other)

    def _other_hooks(self, cls: ClassFacts) -> dict[str, set[str]]:
        """What each other configured hook of the class re-creates."""
        other: dict[str, set[str]] = {}
        for hook in self.ctx.hooks:
            if hook == HOOK or hook not in cls.methods:
                continue
            names: set[str] = set()
            for m in cls.reachable(hook):
                names |= recreated(m, self.qualify)
            other[hook] = names
        return other

    def _writes(self, built) -> dict[str, list[tuple[MethodFacts, object, str | None]]]:
        """In-place writes of own tensors during construction: attr -> [(method, call,
        kind)]."""
        writes: dict[str, list[tuple[MethodFacts, object, str | None]]] = {}
        for m in built:
            for call in m.calls:
                attr = _own_name(initialised_target(call.node, self.qualify))
                if attr:
                    writes.setdefault(attr, []).append((m, call, inplace_kind(call, self.qualify)))
        return writes

    def _recreated(self, cls: ClassFacts, hook_methods) -> set[str]:
        """What ``reset_parameters()`` re-creates (``"*"``: every parameter, as the hook of an
        ``nn.LSTMCell`` base does, which ``super().reset_parameters()`` runs)."""
        in_reset: set[str] = set()
        kept = proxies(cls, self.qualify, self.ctx.facts)
        for m in hook_methods:
            in_reset |= recreated(m, self.qualify)
            # ``self.state.t.data.normal_()`` with ``self.state = State(self.weight)``
            for call in m.calls:
                w = inplace_write(call.node, self.qualify)
                if w is not None and len(w.chain) >= 3 and w.chain[0] == "self":
                    attr = kept.get(w.chain[1], {}).get(w.chain[2])
                    if attr:
                        in_reset.add(attr)
            if set(cls.bases) & TORCH_RESET_EVERY_PARAMETER and any(
                c.method == HOOK and (c.receiver or "").startswith("super") for c in m.calls
            ):
                in_reset.add("*")
        return in_reset

    # -- missed by reset_parameters ---------------------------------------------------------
    def _missed(self, cls, reg: Registration, writes, other) -> Iterable[Finding]:
        covering = sorted(h for h, names in other.items() if reg.attr in names or "*" in names)
        if (
            reg.kind == "buffer"
            and not reg.persistent
            and "init_non_persistent_buffers" in covering
        ):
            return
        source = computed(reg.value, self.qualify, reg.method)
        has_value = source in ("value", "random") or bool(writes)
        if (
            reg.kind == "parameter"
            and reg.value is not None
            and not has_value
            and source != "empty"
        ):
            return  # from an argument or something unknown: nothing we can say
        if reg.kind == "buffer" and source is None and not writes:
            return
        if has_value:
            if not covering:
                return  # ML001 / ML002 / ML003 report it
            msg = (
                f"`{reg.attr}` is re-created by `{covering[0]}()` but not by `reset_parameters()`: "
                f"resetting each module after `to_empty()` (FSDP, Lightning) leaves it "
                f"uninitialised"
            )
            advice = "Initialise it in `reset_parameters()` too"
        else:
            msg = (
                f"`reset_parameters()` does not initialise {reg.kind} `{reg.attr}` "
                f"(created uninitialised in `{reg.method.name}`): after `to_empty()` and "
                f"`reset_parameters()` it holds garbage"
            )
            advice = "Initialise it in `reset_parameters()`"
        yield Finding(
            reg.node,
            msg,
            cls,
            help=advice,
            conditions=(NotRecreated((reg.attr,), hooks=(HOOK,)),),
            subject=(reg.attr,),
            hook=HOOK,
        )

    # -- re-created differently -------------------------------------------------------------
    def _mismatch(
        self, cls, reg: Registration, writes, hook_methods, reset_call, order
    ) -> Iterable[Finding]:
        eager_node, eager_kind = self._eager(reg, writes, reset_call, order)
        if eager_kind is None or eager_node is None:
            return
        hook_kinds = self._hook_kinds(hook_methods, reg.attr)
        if len(hook_kinds) != 1:
            return
        hook_kind = hook_kinds.pop()
        if hook_kind is None or hook_kind == eager_kind or {hook_kind, eager_kind} <= {"random"}:
            return
        yield Finding(
            eager_node,
            f"`{reg.attr}` is {_WORDS.get(eager_kind, eager_kind)} after `__init__` but "
            f"`reset_parameters()` sets it to {_WORDS.get(hook_kind, hook_kind)}: a model built on "
            f"meta and reset differs from the eager one",
            cls,
            help="Make `reset_parameters()` set the value `__init__` means (and let `__init__` "
            "call it)",
            subject=(reg.attr,),
            hook=HOOK,
        )

    def _eager(self, reg: Registration, writes, reset_call, order):
        """What construction leaves in the tensor (eager), and the node that sets it."""
        after = []
        for m, call, kind in writes:
            pos = order.get(id(call.node)) if m.name == "__init__" else None
            if reset_call is not None and (pos is None or pos < reset_call):
                continue  # overwritten by the hook call in __init__
            after.append((call.node, kind))
        if after:
            return after[-1]
        if reset_call is not None:
            return None, None
        if writes:
            return writes[-1][1].node, writes[-1][2]
        return reg.node, creation_kind(reg.value, self.qualify, reg.method)

    def _hook_kinds(self, hook_methods, attr: str) -> set[str | None]:
        """How the hook's methods set the tensor ``attr``."""
        hook_kinds: set[str | None] = set()
        for m in hook_methods:
            for call in m.calls:
                if _own_name(initialised_target(call.node, self.qualify)) == attr:
                    hook_kinds.add(inplace_kind(call, self.qualify))
            for a in m.assigns:
                if _own_name(a.target) == attr:
                    data = parameter_value(a.value, self.qualify) or a.value
                    hook_kinds.add(creation_kind(data, self.qualify, m))
        return hook_kinds


# the rule's examples: the reported lines end with ``# ERROR``; they run as tests
# (tests/test_rule_examples.py)
ResetMissesTensor.VALID = [
    # torch-geometric's idiom: module-level init helpers (`glorot`, `zeros` through
    # `constant`, with an isinstance dispatch and a loop over `.parameters()`), a view of
    # the tensor, an `out=` tensor, and `register_parameter(name, None)` in a branch; the
    # helpers may live in another file of the package (resolved across files)
    """
import math
import torch
from torch import nn
from torch.nn import Parameter

def glorot(value):
    if isinstance(value, torch.Tensor):
        stdv = math.sqrt(6.0 / (value.size(-2) + value.size(-1)))
        value.data.uniform_(-stdv, stdv)
    else:
        for v in value.parameters():
            glorot(v)

def constant(value, fill_value):
    if isinstance(value, torch.Tensor):
        value.data.fill_(fill_value)

def zeros(value):
    constant(value, 0.0)

class EdgeAttentionConv(nn.Module):
    def __init__(self, d, heads, bias=True, residual=False):
        super().__init__()
        self.heads = heads
        self.lin = nn.Linear(d, heads * d, bias=False)
        self.att_src = Parameter(torch.empty(1, heads, d))
        self.att = Parameter(torch.empty(2 * heads * d))
        self.freq = Parameter(torch.empty(d))
        if bias:
            self.bias = Parameter(torch.empty(heads * d))
        else:
            self.register_parameter("bias", None)
        if residual:
            self.res = nn.Linear(d, heads * d)
        else:
            self.register_parameter("res", None)
        self.reset_parameters()

    def reset_parameters(self):
        self.lin.reset_parameters()
        glorot(self.att_src)
        nn.init.xavier_normal_(self.att.view(2, self.heads, -1))
        with torch.no_grad():
            torch.arange(1, self.freq.numel() + 1, out=self.freq).mul_(math.pi)
        zeros(self.bias)
""",
    # every own tensor re-initialised, through a helper and a no_grad copy
    """
import torch
import torch.nn as nn

class Norm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.register_buffer("running_var", torch.ones(d))
        self.proj = nn.Linear(d, d)

    def reset_parameters(self):
        self._reset_affine()
        with torch.no_grad():
            self.running_var.fill_(1.0)

    def _reset_affine(self):
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)
""",
    # the super() chain re-creates the base's and the subclass's tensors
    """
import torch
from torch import nn

class Base(nn.Module):
    def reset_parameters(self):
        nn.init.normal_(self.weight)

class Scaled(Base):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d, d))
        self.scale = nn.Parameter(torch.empty(d))
        self.reset_parameters()

    def reset_parameters(self):
        super().reset_parameters()
        nn.init.ones_(self.scale)
""",
    # nn.LSTMCell's reset_parameters() draws every parameter, the subclass's too (pypots)
    """
import torch
from torch import nn

class PeepholeLSTMCell(nn.LSTMCell):
    def __init__(self, input_size, hidden_size):
        super().__init__(input_size, hidden_size)
        self.weight_ch = nn.Parameter(torch.empty(3 * hidden_size, hidden_size))
        self.reset_parameters()

    def reset_parameters(self):
        super().reset_parameters()
""",
    # timm: parameters in reset_parameters, non-persistent buffers in their own hook;
    # __init__ sets ones, then calls the hook: eager == hook
    """
import torch
from torch import nn

class Rope(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d))
        self.register_buffer("periods", torch.empty(d // 4), persistent=False)
        self.reset_parameters()
        self.init_non_persistent_buffers()

    def reset_parameters(self):
        nn.init.normal_(self.gamma)

    def init_non_persistent_buffers(self):
        self.periods.copy_(torch.arange(self.periods.numel()))
""",
    # timm's CondConv2d: the hook hands the tensors to local initialisers
    """
import math
from functools import partial
import torch
from torch import nn

class CondConv2d(nn.Module):
    def __init__(self, n, o, i):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, o * i))
        self.bias = nn.Parameter(torch.empty(n, o))
        self.reset_parameters()

    def reset_parameters(self):
        init_weight = get_initializer(partial(nn.init.kaiming_uniform_, a=math.sqrt(5)))
        init_weight(self.weight)
        init_bias = get_initializer(partial(nn.init.uniform_, a=-0.1, b=0.1))
        init_bias(self.bias)
""",
    # an optimiser-style state object the module owns holds its weight: the hook writes
    # the module's own tensor through it, no child module's
    """
import torch
from torch import nn

class FastWeightState:
    def __init__(self, weight, lr=0.1):
        self.weight = weight
        self.lr = lr

class FastWeights(nn.Module):
    def __init__(self, d, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d, d, device=device, dtype=dtype))
        self.state = FastWeightState(self.weight)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.normal_(self.state.weight, std=0.02)
""",
]

ResetMissesTensor.INVALID = [
    # a helper that reads the tensor but writes nothing
    """
import torch
from torch import nn

def describe(value):
    return f"{tuple(value.shape)}"

class GraphNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d))  # ERROR
        self.reset_parameters()

    def reset_parameters(self):
        describe(self.weight)
""",
    # misses a torch.empty bias; __init__ ones vs hook random
    """
import math
import torch
import torch.nn as nn

class Linear(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(o, i))
        self.bias = nn.Parameter(torch.empty(o))  # ERROR
        self.gain = nn.Parameter(torch.ones(o))  # ERROR

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        nn.init.normal_(self.gain)
""",
    # zeros in __init__ after the hook ran (LoRA's B), ones vs zeros, legacy torch.Tensor
    """
import torch
from torch import nn

class LoRA(nn.Module):
    def __init__(self, d, r):
        super().__init__()
        self.A = nn.Parameter(torch.Tensor(r, d))
        self.B = nn.Parameter(torch.Tensor(d, r))
        self.scale = nn.Parameter(torch.ones(1))  # overwritten by the hook call: eager == hook
        self.register_buffer("steps", torch.Tensor(1))  # ERROR
        self.reset_parameters()
        nn.init.zeros_(self.B)  # ERROR

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.A)
        nn.init.kaiming_uniform_(self.B)
        nn.init.zeros_(self.scale)
""",
    # only init_weights (a root hook) re-creates it: per-module reset loses it
    """
import torch
import torch.nn as nn

class Head(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.empty(d, d))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))  # ERROR

    def reset_parameters(self):
        nn.init.xavier_uniform_(self.w)

    def init_weights(self):
        self.reset_parameters()
        nn.init.normal_(self.cls_token, std=1e-6)
""",
]
