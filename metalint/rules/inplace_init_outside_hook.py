from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from metalint.static.construction import hook_free_construction, short
from metalint.static.model import CallSite, ClassFacts
from metalint.static.names import dotted
from metalint.static.rule import Finding, Rule
from metalint.static.tensors import INPLACE_METHODS

#: in-place methods that set a tensor's values when called on an own tensor in ``__init__``
_SETTERS = INPLACE_METHODS - {"set_"}


def init_target(call: CallSite, qualify) -> str | None:
    """The ``self....`` tensor an in-place init call writes: ``self.w``, ``self.head.weight``."""
    if call.method in _SETTERS and call.receiver and call.receiver.startswith("self."):
        return call.receiver
    node = call.node
    if not node.args:
        return None
    func = call.qualname or dotted(node.func) or ""
    last = func.rsplit(".", 1)[-1]
    if not last.endswith("_") or last.startswith("_") or last.endswith("__"):
        return None
    if not (
        func.startswith("torch.nn.init.")
        or any(w in last for w in ("init", "normal", "uniform", "constant", "zeros", "ones", "orthogonal", "fill"))
    ):
        return None
    target = dotted(node.args[0].value)
    if target and target.startswith("self.") and target != "self":
        return target
    return None


def _tensor_name(target: str) -> str:
    parts = target.split(".")[1:]
    if parts and parts[-1] == "data":
        parts = parts[:-1]
    return ".".join(parts)


class InplaceInitOutsideHook(Rule):
    """
    ## What it does
    Finds in-place initialisation of the module's tensors in `__init__` (or a helper it calls)
    outside any reset hook: `nn.init.trunc_normal_(self.pos_embed, std=.02)`,
    `self.weight.data.fill_(1.0)`, `self.w.normal_()`, `self.head.weight.data.mul_(0.1)`,
    `with torch.no_grad(): self.weight.copy_(...)`, timm's `trunc_normal_(self.cls_token)`.
    It is quiet when a reset hook of the class or of a base class
    (`reset_parameters`, `init_weights`, `_init_weights`, `init_non_persistent_buffers`, or a
    configured hook) re-creates that tensor, and for writes inside those hooks — calling
    `self.reset_parameters()` from `__init__` is the right pattern.

    Writes to a child's tensor (`self.head.weight`) are reported too: the child's own
    `reset_parameters()` restores its default init, and only a hook of this class (run after
    the children's) can replay the parent's choice.

    ## Why is this bad on meta?
    Under `with torch.device("meta"):` the init runs on tensors without data and does
    nothing; `module.to_empty()` then gives them uninitialised memory. Only the reset hooks run
    after materialisation, so an init written directly in `__init__` is silently lost
    (llm-foundry #1745: an RMSNorm whose `ones` init was lost produced NaN).

    ## Example
    ```python
    class VisionTransformer(nn.Module):
        def __init__(self, dim, num_patches):
            super().__init__()
            self.pos_embed = nn.Parameter(torch.empty(1, num_patches, dim))
            self.head = nn.Linear(dim, 1000)
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
            self.head.weight.data.mul_(0.001)
    ```

    ## Use instead
    ```python
    class VisionTransformer(nn.Module):
        def __init__(self, dim, num_patches):
            super().__init__()
            self.pos_embed = nn.Parameter(torch.empty(1, num_patches, dim))
            self.head = nn.Linear(dim, 1000)
            self.init_weights()

        def init_weights(self):  # run after materialisation, after the children's resets
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
            with torch.no_grad():
                self.head.weight.mul_(0.001)
    ```

    ## Fix safety
    No automatic fix yet: moving the statements into a hook changes the order of random draws
    in eager construction (same distribution, other values).
    """

    code = "ML003"
    name = "inplace-init-outside-hook"
    summary = "In-place init of the module's tensors in `__init__`, outside any reset hook"

    VALID = [
        # the init lives in reset_parameters, called from __init__
        """
import torch
import torch.nn as nn

class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.ones_(self.weight)
""",
        # timm-style: init_weights() called from __init__, helpers of the hook are hook code
        """
import torch
from torch import nn
from torch.nn.init import trunc_normal_

class VisionTransformer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.cls_token = nn.Parameter(torch.empty(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.empty(1, 197, dim))
        self.init_weights()

    def init_weights(self):
        self._init_tokens()
        trunc_normal_(self.pos_embed, std=.02)

    def _init_tokens(self):
        nn.init.normal_(self.cls_token, std=1e-6)
""",
        # a base class in the same tree re-initialises it; writes on a local are not own tensors
        """
import torch
from torch.nn import init as I
import torch.nn as nn

class Base(nn.Module):
    def reset_parameters(self):
        I.xavier_uniform_(self.proj)

class Proj(Base):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Parameter(torch.empty(d, d))
        I.xavier_uniform_(self.proj)
        w = torch.empty(d)
        nn.init.normal_(w)
""",
    ]
    INVALID = [
        # llm-foundry style RMSNorm, every spelling of nn.init
        """
import torch
from torch import nn
from torch.nn import init as I
from torch.nn.init import trunc_normal_

class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.bias = nn.Parameter(torch.empty(dim))
        self.pos = nn.Parameter(torch.empty(4, dim))
        self.scale = nn.Parameter(torch.empty(dim))
        self.weight.data.fill_(1.0)  # ERROR
        I.zeros_(self.bias)  # ERROR
        trunc_normal_(self.pos, std=.02)  # ERROR
        torch.nn.init.constant_(self.scale, 0.1)  # ERROR
""",
        # no_grad copy and a child's tensor (ConvNeXt head_init_scale)
        """
import torch
import torch.nn as nn

class ConvNeXt(nn.Module):
    def __init__(self, dim, classes, head_init_scale=1.0):
        super().__init__()
        self.head = nn.Linear(dim, classes)
        self.table = nn.Parameter(torch.empty(16, dim))
        with torch.no_grad():
            self.table.copy_(torch.randn(16, dim) * 0.02)  # ERROR
        self.head.weight.data.mul_(head_init_scale)  # ERROR
        self.head.bias.data.mul_(head_init_scale)  # ERROR
""",
        # MultiheadAttention-style private hook: not a reset hook, so the init is lost
        """
import torch
from torch import nn

class MHA(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * dim))
        self._reset_parameters()

    def _reset_parameters(self):
        nn.init.xavier_uniform_(self.in_proj_weight)  # ERROR
        self.in_proj_bias.data.zero_()  # ERROR
""",
    ]

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        for method in hook_free_construction(cls, self.ctx.hooks):
            for call in method.calls:
                target = init_target(call, self.qualify)
                if target is None:
                    continue
                name = _tensor_name(target)
                if not name:
                    continue
                attr = name.split(".")[0]
                child = "." in name
                what = f"`{name}` (a tensor of the child `{attr}`)" if child else f"`{name}`"
                where = (
                    "the child's own `reset_parameters()` restores its default init and "
                    if child
                    else ""
                )
                yield Finding(
                    call.node,
                    f"{what} is initialised in place (`{short(call.node)}`) in `{method.name}`, "
                    f"outside any reset hook: on meta this does nothing and after `to_empty()` "
                    f"{where}the value is lost. Move this init into `reset_parameters()` "
                    f"(own tensors) or the model's `init_weights()`, and call that hook from "
                    f"`__init__`",
                    cls,
                    unless_recreated=(attr,),
                )

