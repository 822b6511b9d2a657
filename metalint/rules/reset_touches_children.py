from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from metalint.diagnostics import ChildrenFirst
from metalint.static.model import ClassFacts, MethodFacts
from metalint.static.names import dotted
from metalint.static.ownership import child_chain, module_children, own_tensor_names, proxies
from metalint.static.rule import Finding, Rule
from metalint.static.syntax import chain
from metalint.static.tensors import inplace_write
from metalint.vocabulary import MODULE_ITERATORS, RECURSIVE_TENSOR_ITERATORS, RESET_METHODS

HOOK = "reset_parameters"


def _text(parts: list[str]) -> str:
    return ".".join(parts).replace(".[]", "[...]")


def _recurse_false(call: cst.Call) -> bool:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "recurse":
            return isinstance(arg.value, cst.Name) and arg.value.value == "False"
    return False


def _needs_arguments(fn: cst.FunctionDef) -> bool:
    """``reset_parameters(self, adapter_name, init_weights)`` (peft's RoadLayer): the
    per-module materialisers call the hook with no argument, so this one never runs there."""
    ps = fn.params
    positional = [*ps.posonly_params, *ps.params][1:]  # self
    return any(p.default is None for p in [*positional, *ps.kwonly_params])


class ResetTouchesChildren(Rule):
    """
    ## What it does
    Finds a `reset_parameters()` (or a function it calls) that re-initialises child modules'
    tensors (`nn.init.zeros_(self.proj.bias)`, `self.apply(...)`, a loop over `self.modules()`
    or `self.parameters()`) instead of only the module's own. Calling a child's own
    `reset_parameters()` is fine.

    ## Why is this bad on meta?
    A per-module materialiser calls every module's hook in an order it chooses: when the child's
    own reset runs after the parent's, the parent's init is silently replaced. The result
    depends on hook order (the probe's MP009).

    ## Example
    ```python
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Linear(dim, dim)
            self.reset_parameters()

        def reset_parameters(self):
            nn.init.zeros_(self.proj.weight)
    ```

    Use instead:
    ```python
    class ZeroLinear(nn.Linear):
        def reset_parameters(self):
            nn.init.zeros_(self.weight)
    ```
    Or keep model-wide init in a root `init_weights()` called once, not per module.

    ## Fix safety
    No automatic fix.

    ## Options
    `protocol`: not reported when every site of the tree that materialises the model runs the
    hooks children first.

    ## When to switch it off
    When your materialiser always runs children's hooks before their parent's.

    ## Known limits
    - The probe proves the order dependence only when the two laws differ visibly at the
      audit's tiny widths (PyG `RECT_L`, DimeNet's `EmbeddingBlock` read as refuted).
    """

    code = "ML006"
    name = "reset-touches-children"
    summary = "`reset_parameters()` re-initialises child modules' tensors, not only its own"

    VALID = [
        # own tensors only, including `.data` and a torch.nn base's reset
        """
import math
import torch
import torch.nn as nn

class ScaledLinear(nn.Linear):
    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.scale = nn.Parameter(torch.empty(d_out))
        self.reset_parameters()

    def reset_parameters(self):
        super().reset_parameters()
        self.weight.data.mul_(0.5)
        nn.init.ones_(self.scale)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
""",
        # a graph convolution (PyG's idiom) resetting its children through their own hooks:
        # the same law in any order
        """
import torch
from torch import nn

class GraphConv(nn.Module):
    def __init__(self, d_in, d_out, hops=2):
        super().__init__()
        self.lin = nn.Linear(d_in, d_out, bias=False)
        self.lins = nn.ModuleList(nn.Linear(d_in, d_out) for _ in range(hops))
        self.bias = nn.Parameter(torch.empty(d_out))
        self.reset_parameters()

    def reset_parameters(self):
        self.lin.reset_parameters()
        for lin in self.lins:
            lin.reset_parameters()
        nn.init.zeros_(self.bias)
""",
        # a root init_weights may initialise the whole tree
        """
import torch.nn as nn

class Net(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def init_weights(self):
        nn.init.zeros_(self.fc.bias)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=.02)
""",
        # a loop over own parameters only
        """
import torch
from torch import nn

class Gates(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w_i = nn.Parameter(torch.empty(d, d))
        self.w_f = nn.Parameter(torch.empty(d, d))
        self.fc = nn.Linear(d, d)

    def reset_parameters(self):
        for p in self.parameters(recurse=False):
            nn.init.xavier_uniform_(p)
""",
        # an adapter layer's `reset_parameters(adapter_name, ...)` takes arguments: no
        # per-module materialiser calls it, so its writes never run under that protocol
        """
import torch
from torch import nn

class RotationAdapterLayer(nn.Module):
    def __init__(self, base_layer):
        super().__init__()
        self.base_layer = base_layer
        self.road_theta = nn.ParameterDict({})
        self.road_alpha = nn.ParameterDict({})

    def reset_parameters(self, adapter_name, init_weights):
        nn.init.zeros_(self.road_theta[adapter_name])
        nn.init.ones_(self.road_alpha[adapter_name])
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
    INVALID = [
        # zero-init of a child's projection
        """
import torch.nn as nn

class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.zeros_(self.proj.weight)  # ERROR
        self.qkv.bias.data.zero_()  # ERROR
        self.qkv.reset_parameters()
""",
        # loops and apply inside the per-module hook, through a helper
        """
import torch
from torch import nn
from torch.nn import init as I

class Encoder(nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))
        self.pos = nn.Parameter(torch.empty(16, dim))

    def reset_parameters(self):
        I.normal_(self.pos, std=0.02)
        self._init_layers()

    def _init_layers(self):
        for layer in self.layers:  # ERROR
            I.zeros_(layer.bias)
        for m in self.modules():  # ERROR
            if isinstance(m, nn.Linear):
                I.zeros_(m.bias)
        self.apply(lambda m: None)  # ERROR
""",
        # nn.Transformer-style: every parameter, children included
        """
import torch.nn as nn

class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, 4)
        self.mlp = nn.Linear(dim, dim)

    def reset_parameters(self):
        self.attn._reset_parameters()  # ERROR
        for p in self.parameters():  # ERROR
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
""",
    ]

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        if HOOK not in cls.methods or _needs_arguments(cls.methods[HOOK].node):
            return
        own = own_tensor_names(cls, self.qualify)
        children = module_children(cls, self.qualify)
        # ``self.state = State(self.weight)``: writes through it are no child's
        proxied = set(proxies(cls, self.qualify, self.ctx.facts))
        seen: set[int] = set()
        for method in cls.reachable(HOOK):
            loops = self._loops(method, children)
            for node, why in self._sites(method, own, loops, proxied):
                if id(node) not in seen:
                    seen.add(id(node))
                    yield self._finding(cls, method, node, why)
            for node, targets, it in method.loops:
                if not isinstance(node, cst.For) or not isinstance(it, cst.Call):
                    continue
                name = dotted(it.func) or ""
                if not name.startswith("self.") or name.count(".") != 1:
                    continue
                attr = name.split(".")[1]
                if attr in RECURSIVE_TENSOR_ITERATORS and not _recurse_false(it):
                    if children and id(node) not in seen:
                        seen.add(id(node))
                        yield self._finding(
                            cls,
                            method,
                            node,
                            f"the loop over `self.{attr}()` also visits the tensors of "
                            f"{', '.join(f'`self.{c}`' for c in sorted(children)[:3])}; use "
                            f"`self.{attr}(recurse=False)`",
                        )

    def _loops(self, method: MethodFacts, children: set[str]) -> dict[cst.CSTNode, tuple[str, str]]:
        """Loops whose variable is a child: ``for m in self.modules()``, ``for l in self.layers``."""
        out: dict[cst.CSTNode, tuple[str, str]] = {}
        for node, targets, it in method.loops:
            if not isinstance(node, cst.For):
                continue
            if isinstance(it, cst.Call):
                name = dotted(it.func) or ""
                if name.startswith("self.") and name.split(".", 1)[1] in MODULE_ITERATORS:
                    out[node] = (name, "modules")
            else:
                parts = chain(it)
                if parts and parts[0] == "self" and len(parts) == 2 and parts[1] in children:
                    out[node] = (_text(parts), "container")
        return out

    def _sites(
        self, method: MethodFacts, own: set[str], loops, proxied: set[str] = frozenset()
    ) -> Iterable[tuple[cst.CSTNode, str]]:
        for call in method.calls:
            node = call.node
            # self.apply(fn)
            if call.receiver == "self" and call.method == "apply":
                yield node, "`self.apply(...)` runs on every child module too"
                continue
            # self.proj.reset_parameters(): the child's own law, the same in any order
            if call.method == HOOK:
                continue
            # self.attn._reset_parameters(), self.proj.init_weights()
            if call.method in RESET_METHODS and isinstance(node.func, cst.Attribute):
                parts = chain(node.func.value)
                if parts and parts[0] == "self" and len(parts) >= 2 and parts[1] not in own:
                    yield node, f"`{_text(parts)}.{call.method}()` re-initialises a child module"
                    continue
            w = inplace_write(call.node, self.qualify)
            parts = list(w.chain) if w else None
            if child_chain(parts, own) and parts[1] not in proxied:
                yield node, f"it writes `{_text(parts)}`, a tensor of a child module"
                continue
            # the variable of a loop over children: ``for m in self.modules(): init(m.weight)``
            target = parts
            if (
                target is None
                and call.method in RESET_METHODS
                and isinstance(node.func, cst.Attribute)
            ):
                target = chain(node.func.value)
            if target:
                yield from _child_loop(call, target, method, loops)

    def _finding(self, cls, method, node, why) -> Finding:
        where = (
            "`reset_parameters()`"
            if method.name == HOOK
            else f"`{method.name}()` (called from `reset_parameters()`)"
        )
        return Finding(
            node,
            f"{where} must re-initialise only this module's own tensors: {why}. Per-module "
            f"materialisers (FSDP, `to_empty()` + reset loops) also call each child's own "
            f"`reset_parameters()`, so the result depends on the order",
            cls,
            help="Move the child's value into the child's class, or into a root `init_weights()`",
            conditions=(ChildrenFirst(),),
        )


def _child_loop(call, target: list[str], method: MethodFacts, loops):
    """The loop over children whose variable the call writes or re-initialises (``for m in
    self.modules(): init(m.weight)``), with why; nothing for another loop."""
    for loop in call.loops:
        if loop not in loops:
            continue
        names = next(t for n, t, _ in method.loops if n is loop)
        if target[0] in names:
            it, kind = loops[loop]
            if kind == "modules" or target[0] != "self":
                yield loop, (f"the loop over `{it}` re-initialises child modules")
            break
