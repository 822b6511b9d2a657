from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst

from metalint.diagnostics import HelperRegisters, NotRecreated
from metalint.static.construction import (
    Registration,
    argument_of,
    computed,
    registrations,
    restored_by_torch_base,
)
from metalint.static.model import NOT_THE_TREE, ClassFacts, MethodFacts, construction
from metalint.static.rule import Finding, Invalid, Rule
from metalint.static.syntax import short
from metalint.static.tensors import handed_names, local_value, local_writes


@dataclass(frozen=True)
class BufferSite:
    """What the rule matched, handed to its fix (:mod:`metalint.fix.buffer_from_value`): the
    buffer, the value it is registered from, and the ``self.register_buffer(...)`` call that
    registers it (None for ``self.b = nn.Buffer(...)`` or an assignment to a registered
    buffer, which the fix leaves alone), in ``method``, a method of construction."""

    attr: str
    value: cst.BaseExpression
    call: cst.Call | None
    method: MethodFacts


def _site(reg: Registration) -> BufferSite:
    call = reg.node if type(reg.node) is cst.Call else None
    return BufferSite(reg.attr, reg.value, call, reg.method)


class BufferFromValue(Rule):
    """
    ## What it does
    Finds a buffer registered during construction from a computed value (`torch.tril(
    torch.ones(n, n))`, a position index) that no reset hook re-creates, and a non-persistent
    buffer holding a tensor the caller passed to `__init__`.

    ## Why is this bad on meta?
    `to_empty()` gives the buffer uninitialised memory. A non-persistent one is in no checkpoint:
    RoPE's `inv_freq` stays garbage even after `load_state_dict` (torchtitan saw loss 3.6
    against 11 from this); a persistent one, in a model initialised from scratch.

    ## Example
    ```python
    class RotaryEmbedding(nn.Module):
        def __init__(self, dim, base=10000.0):
            super().__init__()
            inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)
    ```

    Use instead:
    ```python
        def __init__(self, dim, base=10000.0):
            super().__init__()
            self.dim, self.base = dim, base
            self.register_buffer("inv_freq", torch.empty(dim // 2), persistent=False)
            self.reset_parameters()

        def reset_parameters(self):
            t = torch.arange(0, self.dim, 2, device=self.inv_freq.device).float()
            self.inv_freq.copy_(1.0 / (self.base ** (t / self.dim)))
    ```

    ## Fix safety
    The fix keeps the registration and recomputes the value in a hook `__init__` calls last
    (`init_non_persistent_buffers()` when the class has one, else `reset_parameters()`):
    deterministic values are exact (safe); a value drawn at random again is unsafe.

    ## Options
    `protocol`, `hooks`.

    ## When to switch it off
    When the model is always loaded from a checkpoint holding every buffer and none is
    non-persistent.

    ## Known limits
    - A buffer written later in `__init__` (pretrained values), or computed by copying a tensor
      to the host, is reported but not fixed. ML001's limits on model roots apply.
    """

    code = "ML002"
    name = "buffer-from-value"
    summary = "Buffer registered from a computed value in `__init__` that no reset hook re-creates"
    codemod = "metalint.fix.buffer_from_value"
    site_type = BufferSite

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        methods = construction(cls, enter_hooks=False, hooks=self.ctx.hooks)
        yield from self._helper_registrations(cls, methods)
        for reg in registrations(methods, self.qualify):
            if reg.kind != "buffer":
                continue
            kind = computed(reg.value, self.qualify, reg.method)
            if kind not in ("value", "random"):
                yield from self._from_argument(cls, reg)
                continue
            if restored_by_torch_base(cls.bases, reg.attr, reg.value, self.qualify):
                continue  # ``reset_running_stats()`` of a BatchNorm base gives the same
            if reg.persistent:
                lost = (
                    "a checkpoint restores it, but a model initialised from scratch (no "
                    "checkpoint) keeps that garbage"
                )
            else:
                lost = (
                    "it is `persistent=False`, so no checkpoint restores it either: it stays "
                    "garbage even after `load_state_dict`"
                )
            shown = f"`{short(reg.value)}`"
            if isinstance(reg.value, cst.Name):
                # the assignment that computes it (not ``attn_mask = None`` in the other branch)
                shown = self._assignment(reg.method, reg.value.value) or shown
            yield Finding(
                reg.node,
                f"buffer `{reg.attr}` is computed ({shown}) in `{reg.method.name}` and "
                f"no reset hook re-creates it: after `to_empty()` it is uninitialised memory; "
                f"{lost}",
                cls,
                help="Register it with `torch.empty(...)` and compute it in "
                "`reset_parameters()` (or `init_non_persistent_buffers()`)",
                conditions=(NotRecreated((reg.attr,)),),
                subject=(reg.attr,),
                site=_site(reg),
            )

    def _helper_registrations(self, cls: ClassFacts, methods) -> Iterable[Finding]:
        """``bufferize(self, ("loc", "scale"))``: a function of the tree that registers buffers
        on the module under the names it is handed (answered across files, ``HelperRegisters``)
        from the attributes of those names, which construction computed (a base's constructor,
        ``Normal.__init__(self, loc, scale)``). A name the class sets from what
        :func:`computed` does not take for a computed value (the caller's tensor) is left."""
        for method in methods:
            for call in method.calls:
                function = self._tree_function(call)
                handed = handed_names(call.node) if function else None
                if handed is None:
                    continue
                module, names, attrs = handed
                for attr in attrs:
                    if self._set_otherwise(methods, attr):
                        continue
                    yield Finding(
                        call.node,
                        f"buffer `{attr}` is registered by `{short(call.node, 50)}` (a function "
                        f"that registers buffers under the names it is given) from `self.{attr}`, "
                        f"computed in `{method.name}`, and no reset hook re-creates it: after "
                        f"`to_empty()` it is uninitialised memory; a checkpoint restores it, but "
                        f"a model initialised from scratch (no checkpoint) keeps that garbage",
                        cls,
                        help=f"Compute `self.{attr}` again in `reset_parameters()`",
                        conditions=(
                            HelperRegisters(function, module, names),
                            NotRecreated((attr,)),
                        ),
                        subject=(attr,),
                        site=BufferSite(attr, call.node, None, method),
                    )

    def _tree_function(self, call) -> str | None:
        """The qualified name of the function of the checked tree ``call`` calls, if it may
        be one (another file's, or this file's)."""
        func = call.node.func
        if call.qualname is not None:
            return None if call.qualname.startswith(NOT_THE_TREE) else call.qualname
        if type(func) is cst.Name:
            return self.ctx.facts.local_functions.get(func.value)
        return None

    def _set_otherwise(self, methods, attr: str) -> bool:
        """Does construction set ``self.<attr>`` from what is not a computed value?"""
        return any(
            a.target == f"self.{attr}"
            and a.value is not None
            and computed(a.value, self.qualify, m) not in ("value", "random")
            for m in methods
            for a in m.assigns
        )

    def _assignment(self, method: MethodFacts, name: str) -> str | None:
        """The assignment of local ``name`` that computes it (not ``attn_mask = None`` in the
        other branch); for a local made empty and written in place, that it is."""
        values = [
            v
            for _s, v in method.local_values.get(name, ())
            if computed(v, self.qualify, method) in ("value", "random")
        ]
        filled = not values and local_writes(name, self.qualify, method)
        value = values[-1] if values else local_value(method, name)
        if value is None:
            return None
        return f"`{name} = {short(value, 50)}`" + (", then written in place" if filled else "")

    def _from_argument(self, cls: ClassFacts, reg: Registration) -> Iterable[Finding]:
        """A non-persistent buffer registered in ``__init__`` from a tensor the caller passed
        (torch-geometric ``LinkPredDiversity``: ``self.register_buffer('category', category,
        persistent=False)``): ``to_empty()`` replaces the caller's data with uninitialised
        memory and no checkpoint holds it. A persistent one is left alone (a checkpoint
        restores it: timm's ``BinaryCrossEntropy.pos_weight``, PyG ``SchNet.initial_atomref``;
        ML004 names it when the class has no hook at all)."""
        if reg.persistent or reg.method.name != "__init__":
            return
        arg = argument_of(reg.value, reg.method)
        if arg is None:
            return
        yield Finding(
            reg.node,
            f"buffer `{reg.attr}` is registered from the argument `{arg}` (the caller's "
            f"tensor) with `persistent=False`, and no reset hook re-creates it: after "
            f"`to_empty()` it is uninitialised memory, and no checkpoint restores it: the "
            f"caller's data is lost",
            cls,
            help=f"Keep the caller's tensor on `self` and copy it into `self.{reg.attr}` in "
            "`reset_parameters()`",
            conditions=(NotRecreated((reg.attr,)),),
            subject=(reg.attr,),
            site=_site(reg),
        )


# the rule's examples: the reported lines end with ``# ERROR``; they run as tests
# (tests/test_rule_examples.py)
BufferFromValue.VALID = [
    # timm 1.0: empty buffer + init_non_persistent_buffers
    """
import torch
from torch import nn

def gen_relative_position_index(h, w):
    return torch.arange(h * w).view(h, w)

class Attention(nn.Module):
    def __init__(self, window, device=None):
        super().__init__()
        self.window = window
        self.register_buffer(
            "relative_position_index",
            torch.empty(window * window, device=device, dtype=torch.long),
            persistent=False,
        )
        self.init_non_persistent_buffers()

    def init_non_persistent_buffers(self):
        self.relative_position_index.copy_(gen_relative_position_index(self.window, self.window).view(-1))
""",
    # a hook that re-computes through a helper
    """
import torch
import torch.nn as nn

class Rope(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        self.dim, self.base = dim, base
        self.register_buffer("inv_freq", self._compute_inv_freq(), persistent=False)

    def _compute_inv_freq(self):
        return 1.0 / (self.base ** (torch.arange(0, self.dim, 2).float() / self.dim))

    def reset_parameters(self):
        self.inv_freq = self._compute_inv_freq()
""",
    # a base class in the same tree re-registers it
    """
import torch
from torch import nn

class BaseNorm(nn.Module):
    def reset_parameters(self):
        self.running_mean.zero_()
        self.running_var.fill_(1)

class Norm(BaseNorm):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(n))
        self.register_buffer("running_var", torch.ones(n))
""",
    # nothing computed: an empty buffer, a buffer passed in, None
    """
import torch
from torch import nn

class Holder(nn.Module):
    def __init__(self, table, n):
        super().__init__()
        self.register_buffer("scratch", torch.empty(n), persistent=False)
        self.register_buffer("table", table)
        self.register_buffer("mask", None)
""",
    # a BatchNorm subclass registering its statistics again: the base's own
    # ``reset_running_stats()`` gives them the same values
    """
import torch
from torch import nn

class SyncStatsBatchNorm(nn.BatchNorm2d):
    def __init__(self, c, eps=1e-5, device=None):
        super().__init__(c, eps=eps, device=device)
        self.register_buffer("running_mean", torch.zeros(c, device=device))
        self.register_buffer("running_var", torch.ones(c, device=device))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device))
""",
]

BufferFromValue.INVALID = [
    # a count table through a local assigned twice: its statements are copied into the hook
    Invalid(
        """
import torch
from torch import nn

class BalancedLoss(nn.Module):
    def __init__(self, class_counts, num_samples):
        super().__init__()
        counts = torch.as_tensor(class_counts, dtype=torch.float32)
        counts = counts.clamp(1.0, num_samples - 1.0)
        self.register_buffer("freq_inv", 1.0 / counts)  # ERROR
""",
        fixed="""
import torch
from torch import nn

class BalancedLoss(nn.Module):
    def __init__(self, class_counts, num_samples):
        super().__init__()
        self.num_samples = num_samples
        self.class_counts = class_counts
        counts = torch.as_tensor(class_counts, dtype=torch.float32)
        counts = counts.clamp(1.0, num_samples - 1.0)
        self.register_buffer("freq_inv", 1.0 / counts)  # ERROR
        self.reset_parameters()

    def reset_parameters(self):
        counts = torch.as_tensor(self.class_counts, dtype=torch.float32)
        counts = counts.clamp(1.0, self.num_samples - 1.0)
        with torch.no_grad():
            self.freq_inv.copy_(1.0 / counts)
""",
    ),
    # the classic RoPE (Llama-style, transformers 4.x)
    Invalid(
        """
import torch
from torch import nn

class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=2048, base=10000, device=None):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float().to(device) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # ERROR
""",
        fixed="""
import torch
from torch import nn

class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=2048, base=10000, device=None):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float().to(device) / dim))
        self.base = base
        self.dim = dim
        self.device = device
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # ERROR
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            self.inv_freq.copy_(1.0 / (self.base ** (torch.arange(0, self.dim, 2).float().to(self.inv_freq.device) / self.dim)))
""",
    ),
    # transformers 4.4x: the value comes from a function returning a tuple
    """
import torch
import torch.nn as nn

class RotaryEmbedding(nn.Module):
    def __init__(self, config, device=None):
        super().__init__()
        self.rope_init_fn = ROPE_INIT_FUNCTIONS[config.rope_type]
        inv_freq, self.attention_scaling = self.rope_init_fn(config, device)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # ERROR
        self.original_inv_freq = self.inv_freq
""",
    # causal mask and position ids (GPT-2 / BERT style), persistent and not
    """
import torch
from torch import nn

class SelfAttention(nn.Module):
    def __init__(self, n_positions):
        super().__init__()
        self.register_buffer(  # ERROR
            "bias",
            torch.tril(torch.ones((n_positions, n_positions), dtype=torch.bool)).view(1, 1, n_positions, n_positions),
            persistent=False,
        )
        self.register_buffer("position_ids", torch.arange(n_positions).expand((1, -1)))  # ERROR
        self.register_buffer("counter", torch.zeros(1, dtype=torch.long))  # ERROR
""",
    # a local re-assigned from itself, and a mask that is None in one branch (timm 0.9)
    """
import torch
from torch import nn

class Attention(nn.Module):
    def __init__(self, resolution, shift_size=0):
        super().__init__()
        pos = torch.stack(torch.meshgrid(torch.arange(resolution), torch.arange(resolution))).flatten(1)
        rel_pos = (pos[..., :, None] - pos[..., None, :]).abs()
        rel_pos = (rel_pos[0] * resolution) + rel_pos[1]
        self.register_buffer("attention_bias_idxs", rel_pos, persistent=False)  # ERROR
        if shift_size > 0:
            attn_mask = torch.zeros(resolution, resolution)
            attn_mask = attn_mask.masked_fill(attn_mask != 0, float(-100.0))
        else:
            attn_mask = None
        self.register_buffer("attn_mask", attn_mask, persistent=False)  # ERROR
""",
    # torch-geometric's link-prediction metrics: a non-persistent buffer from the caller's
    # tensor; the fix keeps it and copies it back in the hook
    Invalid(
        """
import torch
from torch import Tensor
from torch.nn import Module

class LinkPredAveragePopularity(Module):
    def __init__(self, k: int, popularity: Tensor) -> None:
        super().__init__()
        self.k = k
        self.popularity: Tensor
        self.register_buffer('popularity', popularity, persistent=False)  # ERROR
""",
        fixed="""
import torch
from torch import Tensor
from torch.nn import Module

class LinkPredAveragePopularity(Module):
    def __init__(self, k: int, popularity: Tensor) -> None:
        super().__init__()
        self.k = k
        self.popularity: Tensor
        self._popularity = popularity
        self.register_buffer('popularity', popularity, persistent=False)  # ERROR
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.popularity.copy_(self._popularity)
""",
    ),
    # a hook exists but re-creates something else; a helper registers the buffer
    """
import torch
from torch import nn

class WindowAttention(nn.Module):
    def __init__(self, window):
        super().__init__()
        self.table = nn.Parameter(torch.empty((2 * window - 1) ** 2, 4))
        self._make_index(window)

    def _make_index(self, window):
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij"))
        self.register_buffer("relative_position_index", coords.flatten(1).sum(0), persistent=False)  # ERROR

    def reset_parameters(self):
        nn.init.trunc_normal_(self.table, std=0.02)
""",
    # a value the BatchNorm base's reset does not give back
    """
import torch
from torch import nn

class WarmStatsBatchNorm(nn.BatchNorm2d):
    def __init__(self, c, device=None):
        super().__init__(c, device=device)
        self.register_buffer("running_var", torch.zeros(c, device=device))  # ERROR
""",
]
