from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst

from metalint.diagnostics import AppliesInit, NotOnlyReset, NotRun, RootReplays
from metalint.static import constants
from metalint.static.construction import top_function
from metalint.static.defaults import (
    applied_function,
    calls_only_reset,
    default_env,
    is_self_apply,
    reached_by_default,
    unwrap_partial,
    value_of,
)
from metalint.static.model import ClassFacts, MethodFacts, base_helpers, construction
from metalint.static.names import dotted
from metalint.static.ownership import module_children
from metalint.static.rule import Finding, Invalid, Rule
from metalint.static.syntax import expression_line, node_text, short, walk_code
from metalint.static.tensors import inplace_write
from metalint.vocabulary import (
    MODULE_ITERATORS,
    NORM_INIT_FUNCTIONS,
    PARAMETER_ITERATORS,
    RESET_METHODS,
)


@dataclass(frozen=True)
class AppliedInitSite:
    """What the rule matched, handed to its fix (:mod:`metalint.fix.parent_init`): the method
    of construction that applies the init (the finding's node: the call or the loop), or for
    ``self._finish()`` the name of the method of a base class that it runs (``base``). The
    statement that applies it (``statement``: the ``for`` loop, or the line holding the call
    alone; None when the call is part of a larger statement), and the attributes of the class
    that hold child modules (``children``: :func:`module_children`)."""

    method: MethodFacts
    base: str | None = None
    statement: cst.BaseStatement | None = None
    children: frozenset[str] = frozenset()


def _statement(method: MethodFacts, node: cst.CSTNode) -> cst.BaseStatement | None:
    """The statement that ``node`` (a loop, or a call) of ``method`` is: the loop itself, or
    the line holding the call alone (``self.apply(self._init_weights)``)."""
    if type(node) is cst.For:
        return node
    return expression_line(method.node, node)


def module_loops(
    method: MethodFacts, with_params: bool = False
) -> dict[cst.CSTNode, tuple[tuple[str, ...], bool]]:
    """``for m in self.modules():`` (named_modules/children; ``self.parameters()`` when
    ``with_params``) -> (loop names, loops over tensors)."""
    out: dict[cst.CSTNode, tuple[tuple[str, ...], bool]] = {}
    for node, targets, it in method.loops:
        if not isinstance(node, cst.For) or not isinstance(it, cst.Call):
            continue
        name = dotted(it.func)
        if not name or not name.startswith("self.") or name.count(".") != 1:
            continue
        attr = name.split(".", 1)[1]
        if attr in MODULE_ITERATORS:
            out[node] = (targets, False)
        elif (
            with_params
            and attr in PARAMETER_ITERATORS
            and not any(a.keyword is not None and a.keyword.value == "recurse" for a in it.args)
        ):
            out[node] = (targets, True)
    return out


def _writes_argument(module: cst.Module | None, call: cst.Call, qualify) -> list[str] | None:
    """``init_head(m, n)`` with ``init_head`` a function of the file that writes a tensor of
    its first parameter in place (``m.conv.bias.data.zero_()``): the handed names, as a write
    chain of the call's first argument; None for any other call."""
    func = call.func
    if module is None or type(func) is not cst.Name or not call.args or call.args[0].keyword:
        return None
    fn = top_function(module, func.value)
    arg = dotted(call.args[0].value)
    params = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)] if fn else []
    if not params or not arg:
        return None
    for node in walk_code(fn.body):
        if type(node) is cst.Call:
            w = inplace_write(node, qualify)
            if w is not None and len(w.chain) >= 2 and w.chain[0] == params[0]:
                return [*arg.split("."), *w.chain[1:]]
    return None


def loop_inits(
    method: MethodFacts, qualify, with_params: bool = False, module: cst.Module | None = None
) -> list[cst.CSTNode]:
    """Module loops whose body initialises a tensor of the loop variable (``m.weight``, or
    ``p`` itself in a loop over ``self.named_parameters()``), itself or through a function of
    the file (``module``) handed the loop variable (``for n, m in self.named_modules():
    _init_weight(m, n)``)."""
    loops = module_loops(method, with_params)
    found: list[cst.CSTNode] = []
    for call in method.calls:
        if call.method in RESET_METHODS or not any(loop in loops for loop in call.loops):
            continue  # m.reset_parameters(): the module's own hook, replayed per module
        w = inplace_write(call.node, qualify)
        parts = list(w.chain) if w else _writes_argument(module, call.node, qualify)
        if not parts:
            continue
        for loop in call.loops:
            if loop not in loops:
                continue
            names, over_tensors = loops[loop]
            if parts[0] in names and (len(parts) >= 2 or over_tensors):
                if loop not in found:
                    found.append(loop)
    return found


def parent_inits(
    method: MethodFacts, qualify, with_params: bool = False, module: cst.Module | None = None
) -> list[tuple[cst.CSTNode, str]]:
    """Every parent-applied init in ``method``: (node, how it reads)."""
    out: list[tuple[cst.CSTNode, str]] = []
    for call in method.calls:
        if is_self_apply(call):
            out.append((call.node, f"`{short(call.node, 50)}`"))
    for loop in loop_inits(method, qualify, with_params, module):
        assert isinstance(loop, cst.For)
        out.append((loop, f"the loop `for ... in {short(loop.iter, 50)}`"))
    return out


class ParentAppliedInit(Rule):
    """
    ## What it does
    Finds init a parent applies to its children during construction: `self.apply(
    self._init_weights)`, timm's `named_apply(init_fn, self)`, loops over `self.modules()` or
    `self.named_parameters()` (also one handing each module to a function of the file that
    initialises it: `for n, m in self.named_modules(): _init_weight(m, n)`), or a function
    handed the module that does so.

    ## Why is this bad on meta?
    The applied init runs on meta tensors; after `to_empty()` each child's own
    `reset_parameters()` restores the child's default init, not the parent's law.

    ## Example
    ```python
            self.fc = nn.Linear(dim, dim)
            self.apply(self._init_weights)
    ```

    Use instead:
    ```python
            self.fc = nn.Linear(dim, dim)
            self.init_weights()

        def init_weights(self):  # the root hook: run again after to_empty()
            self.apply(self._init_weights)
    ```

    ## Fix safety
    The fix moves the applied init into a root `init_weights()` called where it ran (or
    appends it to the existing one): eager construction draws the same numbers in the same
    order (safe). Refused when a child created after it would be reached, or the statement is
    inside a loop, `with` or `try`.

    ## Options
    `protocol`: not reported for a model root whose `init_weights()` replays the init (timm,
    torchtitan); `protocol = "reset_parameters"` (per-module materialisation) reports it.

    ## When to switch it off
    When your models are always materialised by their root `init_weights()`.

    ## Known limits
    - A root built by a class outside the checked tree is taken for a root.
    - `init_weights(scheme=...)` with an argument is taken to act as its defaults.
    """

    code = "ML010"
    name = "parent-applied-init"
    summary = "Init applied by a parent (`self.apply`, `named_apply`) that per-module resets do not replay"
    codemod = "metalint.fix.parent_init"
    site_type = AppliedInitSite

    def _default_equivalent(self, cls: ClassFacts, node: cst.CSTNode) -> bool:
        """The applied function gives each child only what its own hooks give: a nested or
        same-file ``def _reset(m): m.reset_parameters()``, a ``self._init_weights`` that only
        calls each module's own hook (timm MaxxVit's ``module.init_weights(scheme=...)``) or
        only sets norm layers to weight 1 / bias 0 (timm PiT)."""
        if not isinstance(node, cst.Call):
            return False
        fn = applied_function(node)
        if fn is None:
            return False
        fn = unwrap_partial(fn, self.qualify)
        if isinstance(fn, cst.Name):
            return self._local_function_resets(cls, node, fn.value)
        name = dotted(fn) or ""
        if not name.startswith("self.") or name.split(".", 1)[1] not in cls.methods:
            return False
        method = cls.methods[name.split(".", 1)[1]]
        return _norm_defaults_only(method) or calls_only_reset(method.node, self._own_hooks())

    def _own_hooks(self) -> tuple[str, ...]:
        """The hooks every module's own materialisation runs (per-module protocol)."""
        return tuple(h for h in self.ctx.hooks if not h.startswith("_"))

    def _local_function_resets(self, cls: ClassFacts, node: cst.CSTNode, local: str) -> bool:
        """The function ``local`` (nested in the method holding ``node``, or of the file)
        only calls each module's ``reset_parameters()``."""
        for m in cls.methods.values():
            if not any(n is node for n in walk_code(m.node)):
                continue
            for n in walk_code(m.node):
                if type(n) is cst.FunctionDef and n.name.value == local and n is not m.node:
                    return calls_only_reset(n, self._own_hooks())
        for stmt in self.ctx.module.body:
            if type(stmt) is cst.FunctionDef and stmt.name.value == local:
                return calls_only_reset(stmt, self._own_hooks())
        return False

    def _function_name(self, fn: cst.BaseExpression) -> str | None:
        name = self.qualify(fn)
        if (
            name is None
            and isinstance(fn, cst.Name)
            and any(
                isinstance(s, cst.FunctionDef) and s.name.value == fn.value
                for s in self.ctx.module.body
            )
        ):
            name = f"{self.ctx.facts.module}.{fn.value}"
        return name

    def _imported_init(self, node: cst.CSTNode, env: dict) -> tuple[NotOnlyReset, ...]:
        """``named_apply(get_init_weights_vit(mode, ...), self)`` or ``self.apply(f)`` with a
        module-level ``f`` (maybe in another file): (qualified name, constant arguments of the
        factory call or None), for the cross-file step to judge (none: nothing to ask)."""
        fn = applied_function(node) if isinstance(node, cst.Call) else None
        if fn is None:
            return ()
        fn = unwrap_partial(fn, self.qualify)
        if isinstance(fn, cst.Call):
            name = self._function_name(fn.func)
            if not name:
                return ()
            args = {}
            for i, arg in enumerate(fn.args):
                if arg.star:
                    break
                value = value_of(arg.value, env)
                if constants.is_constant(value):
                    args[arg.keyword.value if arg.keyword is not None else str(i)] = value
            return (NotOnlyReset(name, tuple(sorted(args.items()))),)
        name = self._function_name(fn) if isinstance(fn, (cst.Name, cst.Attribute)) else None
        return (NotOnlyReset(name, None),) if name and not name.startswith("self.") else ()

    def _helper_inits(self, method: MethodFacts) -> list[tuple[cst.CSTNode, str, str]]:
        """``efficientnet_init_weights(self)``: a module-level function handed the module in
        construction, judged across files (reported only when it hands every module of its
        argument to an init)."""
        out = []
        for call in method.calls:
            args = call.node.args
            recv = call.receiver or ""
            if (
                recv == "self"
                or recv.startswith(("self.", "super"))
                or is_self_apply(call)
                or not args
                or args[0].keyword is not None
                or dotted(args[0].value) != "self"
                or not isinstance(call.node.func, (cst.Name, cst.Attribute))
            ):
                continue
            name = self._function_name(call.node.func)
            if name and name.rsplit(".", 1)[-1][:1].islower() and not name.startswith("torch."):
                out.append((call.node, f"`{short(call.node, 50)}`", name))
        return out

    def _replays(self, cls: ClassFacts) -> list[tuple[str, MethodFacts]]:
        """Public root hooks of the class (not ``reset_parameters``) that apply init too."""
        out = []
        for hook in self.ctx.hooks:
            if hook.startswith("_") or hook == "reset_parameters" or hook not in cls.methods:
                continue
            # ``efficientnet_init_weights(self)`` in ``init_weights()`` replays as ``apply`` does
            if any(
                parent_inits(m, self.qualify, True, self.ctx.module) or self._helper_inits(m)
                for m in cls.reachable(hook)
            ):
                out.append((hook, cls.methods[hook]))
        return out

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        if "__init__" not in cls.methods:
            return
        replays = None
        # inside the per-module hook it is ML006's finding (reset-touches-children)
        in_reset = {m.name for m in cls.reachable("reset_parameters")}
        has_children = None
        for method in construction(cls):
            if method.name in in_reset:
                continue
            if has_children is None and any(isinstance(n, cst.For) for n, _t, _i in method.loops):
                has_children = bool(module_children(cls, self.qualify))
            inits = [
                (n, w, "")
                for n, w in parent_inits(method, self.qualify, bool(has_children), self.ctx.module)
            ]
            inits += self._helper_inits(method)
            env = default_env(cls, method) if inits else {}
            for node, what, helper in inits:
                if not reached_by_default(method, node, env) or self._default_equivalent(cls, node):
                    continue
                if replays is None:
                    replays = self._replays(cls)
                if replays:
                    hook, _ = replays[0]
                    tail = f"it is replayed by the root hook `{cls.name}.{hook}()`"
                    advice = f"Materialise with `to_empty()` then `model.{hook}()`"
                else:
                    tail = "no root hook of this class replays it"
                    advice = "Move it into `init_weights()` and call that after `to_empty()`"
                advice += ", or give each child a `reset_parameters()` that sets these values"
                where = (
                    "`__init__`"
                    if method.name == "__init__"
                    else f"`{method.name}()` (called from `__init__`)"
                )
                yield Finding(
                    node,
                    f"{what} in {where} initialises the children from the parent; per-module "
                    f"`reset_parameters()` after `to_empty()` does not replay it, so the children "
                    f"get their default init instead; {tail}",
                    cls,
                    help=advice,
                    conditions=_conditions(
                        self._imported_init(node, env),
                        replays,
                        helper,
                        "" if method.name == "__init__" else method.name,
                    ),
                    site=self._site(cls, method, node),
                )
        yield from self._base_inits(cls, in_reset)

    #: (class, its children) of the class last asked: :meth:`_site`
    _children_of: tuple[ClassFacts, frozenset[str]] | None = None

    def _site(self, cls: ClassFacts, method: MethodFacts, node: cst.CSTNode) -> AppliedInitSite:
        if self._children_of is None or self._children_of[0] is not cls:
            self._children_of = (cls, frozenset(module_children(cls, self.qualify)))
        return AppliedInitSite(
            method, statement=_statement(method, node), children=self._children_of[1]
        )

    def _base_inits(self, cls: ClassFacts, in_reset: set[str]) -> Iterable[Finding]:
        """``self._finish()`` in construction, ``_finish`` a method of a base of the same file
        that applies an init to every layer (``self.apply(partial(init_fn))``): reported at the
        call, once per call."""
        for caller, call, run in base_helpers(cls):
            if caller.name in in_reset or call.method in self.ctx.hooks:
                continue  # a base's hook (``init_weights()``) is the protocol's to judge
            for method in run:
                inits = [
                    (n, w, "") for n, w in parent_inits(method, self.qualify, True, self.ctx.module)
                ]
                inits += self._helper_inits(method)
                env = default_env(cls, method) if inits else {}
                found = next(
                    (
                        (node, what, helper)
                        for node, what, helper in inits
                        if reached_by_default(method, node, env)
                        and not self._default_equivalent(cls, node)
                    ),
                    None,
                )
                if found is None:
                    continue
                node, what, helper = found
                # a root hook that makes the call replays it (``init_weights()`` -> ``_finish()``)
                replays = (
                    [(caller.name, caller)] if caller.name in self.ctx.hooks else self._replays(cls)
                )
                tail = (
                    f"it is replayed by the root hook `{cls.name}.{replays[0][0]}()`"
                    if replays
                    else "no root hook of this class replays it"
                )
                yield Finding(
                    call.node,
                    f"`{short(call.node, 40)}` in `__init__` runs `{method.name}()` of a base "
                    f"class, whose {what} initialises the children from the parent; per-module "
                    f"`reset_parameters()` after `to_empty()` does not replay it, so the children "
                    f"get their default init instead; {tail}",
                    cls,
                    help="Move it into `init_weights()` and call that after `to_empty()`, or "
                    "give each child a `reset_parameters()` that sets these values",
                    conditions=_conditions(self._imported_init(node, env), replays, helper),
                    site=AppliedInitSite(caller, base=call.method),
                )
                break


# the rule's examples: the reported lines end with ``# ERROR``; they run as tests
# (tests/test_rule_examples.py)
ParentAppliedInit.VALID = [
    # timm's EfficientNet after `fix`: the root hook hands the model to a function of the
    # file that initialises every module, and the protocol calls that hook
    """
import torch.nn as nn

def efficientnet_init_weights(model):
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight)

class EfficientNet(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv = nn.Conv2d(dim, dim, 3)
        self.init_weights()

    def init_weights(self):
        efficientnet_init_weights(self)
""",
    # the children reset themselves; the loop only calls their own hook
    """
import torch.nn as nn

class Net(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()
""",
    # a root hook that construction never runs: eager and meta builds agree
    """
from torch import nn

class Net(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def init_weights(self):
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.bias)
""",
    # timm PiT: the applied init gives norm layers exactly their own default values
    """
import torch.nn as nn

class PiT(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)
""",
    # timm GCViT: only applied when asked for (`weight_init=''` by default)
    """
from functools import partial
import torch.nn as nn
from timm.layers import named_apply

class GCViT(nn.Module):
    def __init__(self, dim, weight_init=''):
        super().__init__()
        self.head = nn.Linear(dim, 10)
        if weight_init:
            named_apply(partial(self._init_weights, scheme=weight_init), self)

    def _init_weights(self, module, name, scheme='vit'):
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
""",
    # timm SwinV2Cr: the default mode takes the branch that applies nothing
    """
from functools import partial
import torch.nn as nn
from timm.layers import named_apply

def init_weights_swin(module, name=""):
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=.02)

class SwinV2Cr(nn.Module):
    def __init__(self, dim, weight_init='reset'):
        super().__init__()
        self.head = nn.Linear(dim, 10)
        self.weight_init_mode = 'reset' if weight_init == 'skip' else weight_init
        if weight_init != 'skip':
            self.init_weights(needs_reset=False)

    def init_weights(self, needs_reset=True):
        if self.weight_init_mode == 'reset':
            if needs_reset:
                for m in self.modules():
                    m.reset_parameters()
        else:
            named_apply(partial(init_weights_swin, needs_reset=needs_reset), self)
""",
    # timm ViT-RelPos: the init factory returns "each module's own reset" for the default
    # mode (the factory may live in another file of the checked tree)
    """
from functools import partial
import torch.nn as nn
from timm.layers import named_apply, trunc_normal_

def init_weights_vit_timm(module, name=""):
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=.02)

def init_weights_reset_parameters(module, name="", needs_reset=True):
    if needs_reset and hasattr(module, "reset_parameters"):
        module.reset_parameters()

def get_init_weights_vit(mode="jax", needs_reset=True):
    if mode == "reset":
        return partial(init_weights_reset_parameters, needs_reset=needs_reset)
    else:
        return partial(init_weights_vit_timm, needs_reset=needs_reset)

class VisionTransformerRelPos(nn.Module):
    def __init__(self, dim, weight_init="reset"):
        super().__init__()
        self.head = nn.Linear(dim, 10)
        self.weight_init_mode = "reset" if weight_init == "skip" else weight_init
        if weight_init != "skip":
            self.init_weights(needs_reset=False)

    def init_weights(self, mode="", needs_reset=True):
        mode = mode or self.weight_init_mode
        named_apply(get_init_weights_vit(mode, needs_reset=needs_reset), self)
""",
    # a helper handed the module that only reads it
    """
import torch.nn as nn

def count_linear(model):
    return sum(isinstance(m, nn.Linear) for m in model.modules())

class Net(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.n_linear = count_linear(self)
""",
    # a loop over modules that only reads
    """
import torch.nn as nn

class Net(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.n_linear = 0
        for m in self.modules():
            if isinstance(m, nn.Linear):
                self.n_linear += 1
""",
    # timm: named_apply inside the model root's init_weights(), called from __init__: under
    # the root's protocol (`to_empty()`, then `model.init_weights()`) it is the re-init
    """
from functools import partial
import torch
import torch.nn as nn
from timm.layers import trunc_normal_
from timm.models._manipulate import named_apply

def init_weights_vit(module, name=""):
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=.02)

class VisionTransformer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.blocks = nn.Sequential(nn.Linear(dim, dim))
        self.init_weights()

    def init_weights(self, mode=""):
        named_apply(partial(init_weights_vit), self)
""",
    # the same through an init factory whose default mode ("") applies timm's init
    """
from functools import partial
import torch.nn as nn
from timm.layers import named_apply, trunc_normal_

def init_weights_vit_timm(module, name=""):
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=.02)

def init_weights_reset_parameters(module, name=""):
    module.reset_parameters()

def get_init_weights_vit(mode="jax"):
    if mode == "reset":
        return init_weights_reset_parameters
    return partial(init_weights_vit_timm)

class VisionTransformer(nn.Module):
    def __init__(self, dim, weight_init=""):
        super().__init__()
        self.head = nn.Linear(dim, 10)
        self.init_weights(weight_init)

    def init_weights(self, mode=""):
        named_apply(get_init_weights_vit(mode), self)
""",
    # apply in __init__, replayed by a root init_weights (a model root: its protocol replays it)
    """
import torch.nn as nn
from torch.nn import init as I

class Net(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.apply(_init)

    def init_weights(self):
        self.apply(_init)

def _init(m):
    if isinstance(m, nn.Linear):
        I.zeros_(m.bias)
""",
    # timm MaxxVit: the applied method only calls each module's own init_weights()
    """
from functools import partial
import torch.nn as nn
from timm.layers import named_apply

class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def init_weights(self, scheme=""):
        nn.init.zeros_(self.fc.bias)

class MaxxVit(nn.Module):
    def __init__(self, dim, weight_init="vit_eff"):
        super().__init__()
        self.block = Block(dim)
        named_apply(partial(self._init_weights, scheme=weight_init), self)

    def _init_weights(self, module, name, scheme=""):
        if hasattr(module, "init_weights"):
            try:
                module.init_weights(scheme=scheme)
            except TypeError:
                module.init_weights()
""",
]

ParentAppliedInit.INVALID = [
    # an init_weights() for the own tensors, called just before: the apply joins it
    Invalid(
        """
import torch
import torch.nn as nn

class Cait(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.cls_token = nn.Parameter(torch.empty(1, 1, dim))
        self.head = nn.Linear(dim, dim)
        self.reset_parameters()
        self.apply(self._init_weights)  # ERROR

    def reset_parameters(self):
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
""",
        fixed="""
import torch
import torch.nn as nn

class Cait(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.cls_token = nn.Parameter(torch.empty(1, 1, dim))
        self.head = nn.Linear(dim, dim)
        self.init_weights()

    def init_weights(self):
        self.reset_parameters()
        self.apply(self._init_weights)  # ERROR

    def reset_parameters(self):
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
""",
    ),
    # nanoGPT / many transformers re-implementations
    Invalid(
        """
import torch.nn as nn

class GPT(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.apply(self._init_weights)  # ERROR
        for pn, p in self.named_parameters():  # ERROR
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / 4)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
""",
        fixed="""
import torch.nn as nn

class GPT(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.init_weights()
        for pn, p in self.named_parameters():  # ERROR
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / 4)

    def init_weights(self):
        self.apply(self._init_weights)  # ERROR

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
""",
    ),
    # timm EfficientNet: a helper (maybe in another file) loops over every module
    """
import torch.nn as nn

def _init_weight_goog(m, n=""):
    if isinstance(m, nn.Conv2d):
        nn.init.kaiming_normal_(m.weight)

def efficientnet_init_weights(model, init_fn=None):
    init_fn = init_fn or _init_weight_goog
    for n, m in model.named_modules():
        init_fn(m, n)

class EfficientNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_stem = nn.Conv2d(3, 8, 3)
        efficientnet_init_weights(self)  # ERROR
""",
    # torchvision ResNet: a loop over self.modules() in __init__
    """
from torch import nn

class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7)
        self.bn1 = nn.BatchNorm2d(64)
        for m in self.modules():  # ERROR
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
""",
    # a detector's loop hands each module to a function of the file that initialises it
    """
import torch.nn as nn

def _init_weight(m, n=""):
    if isinstance(m, nn.Conv2d) and "head" in n:
        m.weight.data.normal_(std=0.01)
        m.bias.data.zero_()

class Detector(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.head = nn.Conv2d(dim, 4, 3)
        for n, m in self.named_modules():  # ERROR
            _init_weight(m, n)
""",
    # a model root's init, but the root is built inside a model that does not replay its
    # init_weights(): lost under the outer model's protocol
    """
from functools import partial
import torch.nn as nn
from timm.layers import named_apply, trunc_normal_

def init_weights_vit(module, name=""):
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=.02)

class VisionTransformer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.blocks = nn.Sequential(nn.Linear(dim, dim))
        self.init_weights()

    def init_weights(self):
        named_apply(partial(init_weights_vit), self)  # ERROR

class Captioner(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.encoder = VisionTransformer(dim)
        self.decoder = nn.Linear(dim, dim)
""",
]


def _norm_defaults_only(m: MethodFacts) -> bool:
    """``m`` only tests ``isinstance(module, <a norm layer>)`` and sets weight 1 / bias 0 (the
    norm layers' own defaults) with in-place init functions, and sets something."""
    kinds = set()
    for call in m.calls:
        name = (call.qualname or dotted(call.node.func) or "").rsplit(".", 1)[-1]
        if name == "isinstance" and len(call.node.args) == 2:
            types = [
                (dotted(n) or "").rsplit(".", 1)[-1]
                for n in walk_code(call.node.args[1].value)
                if isinstance(n, (cst.Name, cst.Attribute)) and dotted(n)
            ]
            if not all("Norm" in t or t in ("nn", "torch") for t in types):
                return False
        elif name.endswith("_"):
            if name not in NORM_INIT_FUNCTIONS:
                return False
            args = call.node.args
            value = (
                args[1].value
                if name in ("constant_",) and len(args) > 1
                else (args[0].value if name == "fill_" and args else None)
            )
            if value is not None and node_text(value).strip() not in (
                "0",
                "1",
                "0.",
                "1.",
                "0.0",
                "1.0",
            ):
                return False
            kinds.add(name)
    return bool(kinds)


def _conditions(reset_init: tuple, replays: list, helper: str, run: str = "") -> tuple:
    """What a parent's init of its children stands under: the applied function does more than
    reset each module (``reset_init``), no root hook replays it (the first of ``replays``),
    ``helper`` (if any) applies an init to every module, and the tree does not run the
    method ``run`` (if any) on the class as a model root after building it."""
    out = list(reset_init)
    if replays:
        out.append(RootReplays(replays[0][0]))
    if helper:
        out.append(AppliesInit(helper))
    if run:
        out.append(NotRun(run))
    return tuple(out)
