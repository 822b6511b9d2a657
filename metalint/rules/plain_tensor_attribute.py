from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst

from metalint.static.construction import TensorFunctions, is_tensor, off_meta, registrations
from metalint.static.model import ClassFacts, MethodFacts, construction
from metalint.static.rule import Finding, Invalid, Rule
from metalint.static.syntax import shares_line, short, string_value
from metalint.vocabulary import TENSOR_INPUT_FUNCTIONS


@dataclass(frozen=True)
class PlainTensorSite:
    """What the rule matched, handed to its fix (:mod:`metalint.fix.plain_tensor_attribute`):
    the attribute, the tensor it is assigned, the method of construction that assigns it
    (the statement is the finding's node), and whether that statement sets the attribute alone
    (``alone``: not ``self.x = self.y = t``, not unpacked) on a line of its own
    (``own_line``: not ``n = 4; self.x = t``)."""

    attr: str
    value: cst.BaseExpression
    method: MethodFacts
    alone: bool = True
    own_line: bool = True


class PlainTensorAttribute(Rule):
    """
    ## What it does
    Finds a tensor stored as a plain attribute in `__init__` (`self.mask = torch.tril(...)`),
    not as a parameter or buffer.

    ## Why is this bad on meta?
    `to_empty()`, `.to()` and `.cuda()` move only parameters and buffers: the plain tensor stays
    on meta (or on the wrong device) and its first use fails or computes garbage.

    ## Example
    ```python
        def __init__(self, block_size):
            super().__init__()
            self.mask = torch.tril(torch.ones(block_size, block_size))
    ```

    Use instead:
    ```python
        def __init__(self, block_size):
            super().__init__()
            self.register_buffer("mask", torch.empty(block_size, block_size), persistent=False)
            self.reset_parameters()

        def reset_parameters(self):
            with torch.no_grad():
                self.mask.copy_(torch.tril(torch.ones_like(self.mask)))
    ```

    ## Fix safety
    The fix registers the tensor as a non-persistent buffer (the same value eagerly, no new
    `state_dict()` key); ML002's fix then moves the value into a hook. Safe when every other
    assignment of the attribute gives a tensor or `None`, unsafe when one may assign anything
    else (a buffer takes only tensors).

    ## Options
    None beyond selecting the rule: a hook that re-creates the attribute does not silence it
    (nothing moves a plain attribute).

    ## When to switch it off
    When the attribute is moved by hand after materialisation (an `_apply` override).

    ## Known limits
    - Only values certainly tensors are reported: a caller's tensor or a Python number is not.
    - Not fixed when the attribute is assigned before the tensor or before
      `super().__init__()`, or the assignment has several targets.
    """

    code = "ML007"
    name = "plain-tensor-attribute"
    summary = "Tensor stored as a plain attribute in `__init__`: never moved off meta"
    codemod = "metalint.fix.plain_tensor_attribute"
    site_type = PlainTensorSite

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        registered = self._registered(cls)
        if not hasattr(self, "_tensor_fns"):
            self._tensor_fns = TensorFunctions(self.ctx.module, self.ctx.qualify, self.ctx.facts)
        fns = self._tensor_fns

        tensors = {r.attr for r in registrations(list(cls.methods.values()), self.qualify)}
        extra = self._vouch(cls, tensors, fns)
        built = construction(cls, enter_hooks=False, hooks=self.ctx.hooks)
        by_use = _tensors_by_use(built, self.qualify) - registered
        reported: set[str] = set()
        for method in built:
            for a in method.assigns:
                if a.target.count(".") != 1 or a.augmented or a.value is None:
                    continue
                attr = a.target.split(".")[1]
                if attr in registered or attr in reported:
                    continue
                if attr not in by_use and not is_tensor(a.value, self.qualify, method, extra=extra):
                    continue
                if off_meta(a.value, self.qualify, method, fns) or self._kept_on_cpu(
                    a.value, method, cls, fns
                ):
                    continue  # a CPU tensor even under meta (a legacy constructor)
                reported.add(attr)
                yield Finding(
                    a.node,
                    f"`{attr}` is a tensor stored as a plain attribute (`self.{attr} = "
                    f"{short(a.value, 50)}`), neither parameter nor buffer: built on meta it stays on `meta`, because "
                    f"`to_empty()` and `.to(device)` move only parameters and buffers",
                    cls,
                    help=f'Register it with `self.register_buffer("{attr}", ..., '
                    "persistent=False)` and compute it in `reset_parameters()`",
                    subject=(attr,),
                    site=PlainTensorSite(
                        attr, a.value, method, a.alone, not shares_line(method.node, a.node)
                    ),
                )

    def _registered(self, cls: ClassFacts) -> set[str]:
        """The attributes any method registers as a tensor or a module."""
        registered = {reg.attr for reg in registrations(list(cls.methods.values()), self.qualify)}
        for m in cls.methods.values():
            for call in m.calls:
                if call.receiver == "self" and call.method in _REGISTERS and call.node.args:
                    name = string_value(call.node.args[0].value)
                    if name:
                        registered.add(name)
        return registered

    def _vouch(self, cls: ClassFacts, tensors: set[str], fns):
        """``extra`` for :func:`is_tensor`: leaves this class knows are tensors."""

        def extra(node: cst.BaseExpression) -> bool:
            # self.original_inv_freq = self.inv_freq: an alias of a registered tensor, which
            # to_empty() replaces while the alias keeps pointing at the meta tensor
            if (
                type(node) is cst.Attribute
                and type(node.value) is cst.Name
                and node.value.value == "self"
                and node.attr.value in tensors
            ):
                return True
            # create_sinusoidal_positions(...) defined in this file with ``-> torch.Tensor``
            if type(node) is cst.Call and type(node.func) is cst.Name:
                return node.func.value in fns
            # a method of the class annotated ``-> torch.Tensor`` (monai regunet AffineHead's
            # ``self.grid = self.get_reference_grid(image_size)``, a static method)
            return type(node) is cst.Call and self._tensor_method(cls, node.func)

        return extra

    def _tensor_method(self, cls: ClassFacts, func: cst.BaseExpression) -> bool:
        if not (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value in ("self", cls.name)
        ):
            return False
        m = cls.methods.get(func.attr.value)
        returns = m.node.returns if m is not None else None
        return returns is not None and self.qualify(returns.annotation) == "torch.Tensor"

    def _kept_on_cpu(self, value, method: MethodFacts, cls: ClassFacts, fns) -> bool:
        """``torch.from_numpy(timesteps).to(device)`` in a method that construction calls without
        ``device`` (default ``None``): monai's and diffusers' ``set_timesteps(n, device=None)``,
        which ``__init__`` calls as ``self.set_timesteps(n)``. ``.to(None)`` keeps the CPU
        tensor where it is, so it is not on meta."""
        if not (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "to"
            and len(value.args) == 1
            and isinstance(value.args[0].value, cst.Name)
            and method.name != "__init__"
        ):
            return False
        name = value.args[0].value.value
        params = list(method.node.params.params)[1:]
        where = next((i for i, p in enumerate(params) if p.name.value == name), None)
        if where is None:
            kw = [p for p in method.node.params.kwonly_params if p.name.value == name]
            if not kw or not _none(kw[0].default):
                return False
        elif not _none(params[where].default):
            return False
        calls = [
            c
            for m in construction(cls, enter_hooks=False, hooks=self.ctx.hooks)
            for c in m.calls
            if c.receiver == "self" and c.method == method.name
        ]
        for c in calls:
            args = c.node.args
            if any(a.star for a in args) or any(
                a.keyword is not None and a.keyword.value == name for a in args
            ):
                return False
            if where is not None and sum(1 for a in args if a.keyword is None) > where:
                return False
        return bool(calls) and off_meta(value.func.value, self.qualify, method, fns)


# the rule's examples: the reported lines end with ``# ERROR``; they run as tests
# (tests/test_rule_examples.py)
PlainTensorAttribute.VALID = [
    # sbi's DivergenceOptimizer: an ABC (no module) holding the posterior's modules
    """
from abc import ABC
import torch
from torch import nn

class DivergenceOptimizer(ABC):
    def __init__(self, q):
        self.modules = nn.ModuleList([q])
        self.losses = torch.ones(2000)
""",
    # a CPU tensor from numpy, moved by a method that __init__ calls without a device:
    # ``.to(None)`` keeps it on the CPU (monai's and diffusers' ``set_timesteps``)
    """
import numpy as np
import torch
from torch import nn

class PNDMScheduler(nn.Module):
    def __init__(self, num_train_timesteps=10):
        super().__init__()
        self.num_train_timesteps = num_train_timesteps
        self.set_timesteps(num_train_timesteps)

    def set_timesteps(self, num_inference_steps, device=None):
        timesteps = np.arange(0, num_inference_steps).astype(np.int64)
        self.timesteps = torch.from_numpy(timesteps).to(device)
""",
    # a buffer, a parameter, numbers, a module, a tensor passed in, None
    """
import math
import torch
from torch import nn

class Attention(nn.Module):
    def __init__(self, dim, heads, table):
        super().__init__()
        self.scale = (dim // heads) ** -0.5
        self.log_scale = math.log(dim)
        self.proj = nn.Linear(dim, dim)
        self.table = table
        self.cache = None
        self.sizes = [dim, heads]
        self.register_buffer("mask", torch.empty(4, 4), persistent=False)
        self.weight = nn.Parameter(torch.empty(dim))
        self.eps = torch.finfo(torch.float32).eps
        self.dtype = torch.get_default_dtype()
        self.proj_weight = self.proj.weight  # a module's parameter: not this class's tensor
        self.sizes2 = make_sizes(dim)

def make_sizes(dim) -> list:
    return [dim]
""",
    # monai's attention blocks: an empty placeholder from the legacy constructor is a CPU
    # tensor even under meta (nothing stays on meta; ML009 reports the constructor)
    """
import torch
import torch.nn as nn

class SelfAttentionBlock(nn.Module):
    def __init__(self, hidden_size, num_heads, save_attn=False):
        super().__init__()
        self.qkv = nn.Linear(hidden_size, hidden_size * 3)
        self.save_attn = save_attn
        self.att_mat = torch.Tensor()
""",
    # VideoMAE's fixed sin-cos table: a helper of the same file that returns a legacy
    # constructor's tensor (through numpy, then .unsqueeze) gives a CPU tensor under meta too
    """
import numpy as np
import torch
from torch import nn

def sincos_table(n_pos, dim):
    angles = np.arange(n_pos)[:, None] / np.power(10000, 2 * (np.arange(dim) // 2) / dim)
    angles[:, 0::2] = np.sin(angles[:, 0::2])
    angles[:, 1::2] = np.cos(angles[:, 1::2])
    table = torch.FloatTensor(angles)
    return table.unsqueeze(0)

def shared_table(n_pos, dim):
    return sincos_table(n_pos, dim)[:, :n_pos]

class VideoEmbeddings(nn.Module):
    def __init__(self, n_pos, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.position_embeddings = sincos_table(n_pos, dim)
        self.decoder_positions = shared_table(n_pos, dim)
""",
    # a helper that may return something else than a tensor is not certain to make one
    """
import torch
from torch import nn

def maybe_mask(n, causal):
    if not causal:
        return None
    return torch.ones(n, n).tril()

def window_sizes(n):
    for w in (n, n // 2):
        yield torch.tensor(w)

class Attention(nn.Module):
    def __init__(self, n, causal=False):
        super().__init__()
        self.mask = maybe_mask(n, causal)
        self.windows = window_sizes(n)
""",
    # numbers computed from each other: nothing uses them as tensors
    """
import math
from torch import nn

class Dropper(nn.Module):
    def __init__(self, rate, table):
        super().__init__()
        self.rate = table[rate]
        self.keep = 1.0 - self.rate
        self.log_keep = math.log(self.keep)
""",
    # assigning to a registered buffer writes the buffer
    """
import torch
import torch.nn as nn

class Cache(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("pos", None, persistent=False)
        self.pos = torch.arange(n)
""",
    # not an nn.Module: a plain helper object may hold tensors
    """
import torch

class Sampler:
    def __init__(self, n):
        self.weights = torch.ones(n)
""",
]

PlainTensorAttribute.INVALID = [
    # monai's schedulers: tensors from a registry of schedule functions (of no known
    # type), used as tensors: ``torch.cumprod`` takes only a tensor, and a number minus
    # the betas is that tensor
    """
import torch
import torch.nn as nn

SCHEDULES = {"linear": lambda n: torch.linspace(1e-4, 2e-2, n)}

class NoiseSchedule(nn.Module):
    def __init__(self, steps=10, kind="linear"):
        super().__init__()
        made = SCHEDULES[kind](steps)
        self.betas = made  # ERROR
        self.alphas = 1.0 - self.betas  # ERROR
        self.alpha_bars = torch.cumprod(self.alphas, dim=0)  # ERROR
""",
    # a method of the class annotated ``-> torch.Tensor`` (monai regunet's AffineHead)
    """
import torch
from torch import nn

class AffineHead(nn.Module):
    def __init__(self, image_size):
        super().__init__()
        self.grid = self.get_reference_grid(image_size)  # ERROR

    @staticmethod
    def get_reference_grid(image_size) -> torch.Tensor:
        mesh_points = [torch.arange(0, dim) for dim in image_size]
        return torch.stack(torch.meshgrid(*mesh_points, indexing="ij"), dim=0).float()
""",
    # nanoGPT-era mask and a scale tensor
    Invalid(
        """
import torch
from torch import nn

class CausalSelfAttention(nn.Module):
    def __init__(self, block_size, dim):
        super().__init__()
        self.mask = torch.tril(torch.ones(block_size, block_size))  # ERROR
        self.scale = torch.tensor(dim ** -0.5)  # ERROR
""",
        fixed="""
import torch
from torch import nn

class CausalSelfAttention(nn.Module):
    def __init__(self, block_size, dim):
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size)), persistent=False)  # ERROR
        self.register_buffer("scale", torch.tensor(dim ** -0.5), persistent=False)  # ERROR
""",
    ),
    # a RoPE cache kept as attributes, through locals; a hook does not make it move
    """
import torch
import torch.nn as nn

class RotaryCache(nn.Module):
    def __init__(self, dim, max_len, base=10000):
        super().__init__()
        self.dim, self.max_len, self.base = dim, max_len, base
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_len).float()
        freqs = torch.outer(t, inv_freq)
        self.cos_cached = freqs.cos()[None, :, :]  # ERROR
        self.sin_cached = freqs.sin()[None, :, :]  # ERROR

    def reset_parameters(self):
        self.cos_cached = torch.ones(1)
""",
    # transformers: an alias of a buffer, and a tensor from a helper annotated -> Tensor
    """
import torch
from torch import nn

def create_sinusoidal_positions(num_pos: int, dim: int) -> torch.Tensor:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2) / dim))
    return torch.outer(torch.arange(num_pos).float(), inv_freq)

class Attention(nn.Module):
    def __init__(self, dim, max_pos):
        super().__init__()
        self.register_buffer("inv_freq", torch.ones(dim // 2), persistent=False)
        self.original_inv_freq = self.inv_freq  # ERROR
        self.embed_positions = create_sinusoidal_positions(max_pos, dim)  # ERROR
""",
    # a helper without annotation whose every return is a tensor
    """
import torch
from torch import nn

def causal_mask(n, window=None):
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    if window is None:
        return mask
    return mask & torch.ones(n, n, dtype=torch.bool).triu(-window)

class Attention(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.mask = causal_mask(n)  # ERROR
""",
]


def _self_attr(e: cst.BaseExpression) -> str | None:
    if type(e) is cst.Attribute and type(e.value) is cst.Name and e.value.value == "self":
        return e.attr.value
    return None


_REGISTERS = ("register_buffer", "register_parameter", "register_module", "add_module")


def _tensors_by_use(methods: list[MethodFacts], qualify) -> set[str]:
    """Attributes of ``self`` that construction uses as tensors, whatever they were assigned
    (monai ``Scheduler``: ``self.betas = noise_sched``, from a registry of schedules):
    the input of a torch function that takes only tensors (``torch.cumprod(self.alphas,
    dim=0)``), and, back through an assignment of such an attribute, the one operand of
    arithmetic with a number (``self.alphas = 1.0 - self.betas``: a number minus a number
    is no tensor, and ``cumprod`` would raise)."""
    found: set[str] = set()
    for m in methods:
        for call in m.calls:
            node = call.node
            if (
                call.qualname in TENSOR_INPUT_FUNCTIONS
                and node.args
                and node.args[0].keyword is None
            ):
                attr = _self_attr(node.args[0].value)
                if attr is not None:
                    found.add(attr)
    changed = True
    while changed:
        changed = False
        for m in methods:
            for a in m.assigns:
                if a.target.count(".") != 1 or a.target[5:] not in found:
                    continue
                operand = _number_operand(a.value)
                if operand is not None and operand not in found:
                    found.add(operand)
                    changed = True
    return found


def _number_operand(v) -> str | None:
    """The own attribute that arithmetic with a number operates on (``1.0 - self.betas``,
    ``-self.x``), if any."""
    if type(v) is cst.BinaryOperation:
        if type(v.left) in (cst.Integer, cst.Float):
            return _self_attr(v.right)
        if type(v.right) in (cst.Integer, cst.Float):
            return _self_attr(v.left)
        return None
    if type(v) is cst.UnaryOperation and type(v.operator) is cst.Minus:
        return _self_attr(v.expression)
    return None


def _none(default) -> bool:
    return isinstance(default, cst.Name) and default.value == "None"
