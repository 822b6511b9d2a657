from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import libcst as cst

from metalint.diagnostics import HelperReads, ReturnsMeta
from metalint.static.distributions import validating_inits
from metalint.static.model import (
    ClassFacts,
    MethodFacts,
    calls_into_tree,
    construction,
    construction_calls,
    partial_bindings,
)
from metalint.static.names import dotted
from metalint.static.origins import Origin, value_origin
from metalint.static.ownership import (
    ValueRead,
    call_arguments,
    meta_arguments,
    own_tensor_names,
    value_reads,
)
from metalint.static.rule import Finding, Invalid, Rule
from metalint.static.syntax import expression_line, short, walk_code
from metalint.static.tensors import meta_guarded
from metalint.vocabulary import DISTRIBUTIONS_ALWAYS_VALIDATED

#: module methods that return the module itself, converted (``self.half().cuda()``)
MODULE_CASTS = frozenset({"half", "float", "double", "bfloat16", "to", "train", "eval"})


@dataclass(frozen=True)
class ReadSite:
    """What the rule matched, handed to its fix (:mod:`metalint.fix.data_dependent_init`): the
    method (or function of the file) of construction holding the finding's node, the read of
    a tensor's value there (None: the module moving itself to a device, ``self.to(device)``),
    the names the method's parameters and calls were taken to hold meta tensors by
    (``assumed``), and the tensors of every read the rule found in ``__init__``
    (``init_reads``: the fix has each read of a local that is also kept read its CPU twin)."""

    method: MethodFacts
    read: ValueRead | None = None
    assumed: frozenset[str] = frozenset()
    init_reads: tuple[cst.BaseExpression, ...] = ()
    #: the class's own tensors (:func:`own_tensor_names`), whose values no fix moves
    own: frozenset[str] = frozenset()
    #: where the value read comes from in ``__init__`` (:func:`value_origin`): of the read's
    #: tensor for a read in ``__init__``, of the arguments ``__init__`` hands the method
    #: (``handed``) for a read of its parameters (``params``) in a method of the class
    origin: Origin | None = None
    params: frozenset[str] = frozenset()
    handed: tuple[cst.BaseExpression, ...] = ()
    #: for the module moving itself: the line that is the move alone (None: the move is part
    #: of a larger statement), and whether it is chained to a cast (``self.half().cuda()``)
    statement: cst.SimpleStatementLine | None = None
    cast: bool = False
    #: the read is a ``torch.distributions`` constructor run on the module, validating its
    #: arguments (:func:`metalint.static.distributions.validating_inits`): the class it names
    distribution: str | None = None


class DataDependentInit(Rule):
    """
    ## What it does
    Finds construction code that reads a tensor's value: `.item()`, `.tolist()`, `float(t)`,
    `if t.any():`, a tensor used as a size, an op whose output shape depends on values
    (`t.nonzero()`), or `self.to(device)`. Module-level functions it calls are followed across
    the checked tree. The constructor of a `torch.distributions` distribution reads values
    too: it checks its arguments unless `validate_args=False` is passed (a flow's base
    `Normal(torch.zeros(d), torch.ones(d))`, or a module that is also a distribution).

    ## Why is this bad on meta?
    A meta tensor has no data: the read raises, so the model cannot be built on meta at all.

    ## Example
    ```python
        def __init__(self, depth, drop_path_rate=0.1):
            super().__init__()
            dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]
            self.blocks = nn.ModuleList(Block(drop_path=dpr[i]) for i in range(depth))
    ```

    Use instead:
    ```python
            dpr = torch.linspace(0, drop_path_rate, depth, device="cpu").tolist()
    ```

    ## Fix safety
    The fix makes a constant that construction reads with `device="cpu"` (a kept buffer gets a
    CPU twin that the reads use): safe, the same values. A random draw read during construction
    is not fixed.

    ## Options
    None beyond selecting the rule.

    ## When to switch it off
    When the model is never built on meta.

    ## Known limits
    - A function outside the checked tree is not followed.
    - Only expressions known to be tensors are reported.
    """

    code = "ML008"
    name = "data-dependent-init"
    codemod = "metalint.fix.data_dependent_init"
    site_type = ReadSite
    summary = "Construction reads a tensor's value (`.item()`, `.tolist()`, `if t:`), which crashes on meta"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._reported_helpers: set[int] = set()

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        if "__init__" not in cls.methods:
            return
        methods = construction(cls)
        own = own_tensor_names(cls, self.qualify)
        init = cls.methods["__init__"]
        init_sites = self._read_sites(init, own)
        init_reads = init_sites[0].init_reads if init_sites else ()
        bound = partial_bindings(methods, self.qualify)
        for method in methods:
            assumed = (
                meta_arguments(method, methods, self.qualify, own)
                if method.name != "__init__"
                else frozenset()
            )
            sites = (
                init_sites if method is init else self._read_sites(method, own, assumed, init_reads)
            )
            yield from self._reads(cls, method, sites)
            yield from self._validations(cls, method)
            yield from self._imported_reads(cls, method, own, assumed, init_reads, sites)
            yield from self._helper_reads(cls, method, init_reads, bound)

    def _helper_reads(self, cls, method, init_reads, bound) -> Iterable[Finding]:
        """The reads in the module-level helpers of this file that ``method`` runs (timm 0.9's
        ``create_byob_stages``), each line reported once, for its first caller; a call of a
        function of another file (``utils.make_window(n)``) is reported at the call, while
        the tree's summary of that function (or of one it calls) holds a read
        (``Diagnostic.via`` names its line)."""
        for found in construction_calls(method, bound, self.ctx):
            helper = found.helper
            if helper is not None and id(helper.node) not in self._reported_helpers:
                self._reported_helpers.add(id(helper.node))
                sites = self._read_sites(helper, set(), init_reads=init_reads)
                yield from self._reads(cls, helper, sites, method)
            elif helper is None and found.target and not self.deferred(found.target):
                node = found.call.node
                yield Finding(
                    node,
                    f"`{short(node, 50)}` in {self._where(cls, method, None)} calls a "
                    f"function that reads the value of a tensor it creates; under "
                    f'`torch.device("meta")` it has no data and this raises, so the module '
                    f"cannot be built on meta",
                    cls,
                    help='Compute it with Python numbers, or create that tensor with `device="cpu"`',
                    conditions=(HelperReads(found.target),),
                )

    def _imported_reads(self, cls, method, own, assumed, init_reads, sites) -> Iterable[Finding]:
        """``steps(n).tolist()``, ``steps`` imported from another file of the tree: a read
        when that function returns a meta tensor, which the tree answers
        (``ReturnsMeta``). ``sites``: the reads of ``method`` without it."""
        names = {
            call.node.func.value: call.qualname
            for call in method.calls
            if type(call.node.func) is cst.Name and calls_into_tree(call)
        }
        if not names:
            return
        base = {id(s.read.node) for s in sites}
        for name, qualname in sorted(names.items()):
            for site in self._read_sites(method, own, assumed | {f"{name}()"}, init_reads):
                if id(site.read.node) in base:
                    continue
                base.add(id(site.read.node))
                finding = self._finding(cls, site)
                finding.conditions += (ReturnsMeta(qualname),)
                yield finding

    def _validations(self, cls, method) -> Iterable[Finding]:
        """The module is a ``torch.distributions`` distribution and runs its constructor with
        argument validation on (``Normal.__init__(self, loc, scale)``)."""
        for node, name in validating_inits(cls, method, self.qualify):
            inner = name in DISTRIBUTIONS_ALWAYS_VALIDATED
            how = (
                "builds a distribution that validates its arguments whatever `validate_args` says"
                if inner
                else "validates its arguments (`validate_args` is on unless `False` is passed)"
            )
            yield Finding(
                node,
                f"`{short(node, 50)}` in {self._where(cls, method, None)} runs the constructor "
                f"of `{name}`, which {how} and makes tensors of numbers on the default device; "
                f'under `torch.device("meta")` they have no data and the check raises, so the '
                f"module cannot be built on meta",
                cls,
                help=_validation_help(node, inner),
                site=ReadSite(method, distribution=name),
            )

    def function_reads(self, fn: MethodFacts) -> Iterable[cst.CSTNode]:
        return (site.read.node for site in self._read_sites(fn, set()))

    def _reads(self, cls, method, sites: list[ReadSite], caller=None) -> Iterable[Finding]:
        """The findings of ``method``: the module moving itself, then the reads (``sites``)."""
        guarded: set[int] | None = None
        for call in method.calls:
            node = call.node
            if caller is None and self._moves_self(call):
                if guarded is None:
                    guarded = meta_guarded(method)
                if id(node) in guarded:
                    continue  # ``if not any(t.is_meta for t in ...): self.to(device)``
                yield Finding(
                    node,
                    f"`{short(node, 50)}` in {self._where(cls, method, None)} copies the "
                    f'module\'s tensors to a real device; built under `torch.device("meta")` '
                    f"they have no data and the copy raises (`Cannot copy out of meta tensor`), "
                    f"so the module cannot be built on meta",
                    cls,
                    help="Leave the placement to the caller: `model.to_empty(device=...)` after a "
                    "meta build, or `model.to(device)` after an eager one",
                    site=ReadSite(
                        method,
                        statement=expression_line(method.node, node),
                        cast=dotted(node.func.value) != "self",
                    ),
                )
                continue
        for site in sites:
            yield self._finding(cls, site, caller)

    def _read_sites(self, method, own, assumed=frozenset(), init_reads=None) -> list[ReadSite]:
        """The reads of a tensor's value in ``method``, each as its site (``assumed``: its
        parameters known to hold meta tensors; ``init_reads``: the tensors ``__init__``'s reads
        read, None when ``method`` is ``__init__``)."""
        assumed = assumed | self.ctx.meta_returning
        reads = list(value_reads(method, self.qualify, own, assumed))
        if init_reads is None:
            init_reads = tuple(r.tensor for r in reads)
        own = frozenset(own)
        return [ReadSite(method, r, assumed, init_reads, own) for r in reads]

    def _with_origin(self, cls, site: ReadSite) -> ReadSite:
        """``site`` with where the value it reads comes from in ``__init__``: the read's tensor
        for a read in ``__init__``; for a read in a method of the class of parameters assumed
        to hold meta tensors, the arguments ``__init__`` passes them."""
        read, init = site.read, cls.methods["__init__"]
        if read.kind in ("shape", "mask"):
            return site
        if site.method is init:
            origin = value_origin([read.tensor], read.node, init, self.qualify, site.own)
            return replace(site, origin=origin)
        if cls.methods.get(site.method.name) is not site.method:
            return site
        params = (
            frozenset(n.value for n in walk_code(read.tensor) if type(n) is cst.Name) & site.assumed
        )
        handed = tuple(
            a.value
            for c in init.calls
            if c.receiver == "self" and c.method == site.method.name
            for name, a in call_arguments(site.method, c)
            if name in params
        )
        if not handed:
            return replace(site, params=params)
        origin = value_origin(list(handed), handed[0], init, self.qualify, site.own)
        return replace(site, params=params, handed=handed, origin=origin)

    def _moves_self(self, call) -> bool:
        """``self.to(device)``, ``self.to(device=d)``, ``self.cuda()``, ``self.cpu()``, also at
        the end of a chain on ``self`` (``self.half().cuda()``); not ``self.to(torch.float16)``
        (a dtype alone converts meta tensors fine)."""
        func = call.node.func
        if not type(func) is cst.Attribute or func.attr.value not in ("to", "cuda", "cpu"):
            return False
        inner = func.value
        while (
            type(inner) is cst.Call
            and type(inner.func) is cst.Attribute
            and inner.func.attr.value in MODULE_CASTS
        ):
            inner = inner.func.value
        if not (type(inner) is cst.Name and inner.value == "self"):
            return False
        if func.attr.value != "to":
            return True
        args = call.node.args
        if not args:
            return False
        first = args[0]
        if first.keyword is not None:
            return first.keyword.value == "device" or any(
                a.keyword is not None and a.keyword.value == "device" for a in args
            )
        q = self.qualify(first.value) or ""
        return not q.startswith("torch.") or q == "torch.device"

    def _where(self, cls, method, caller) -> str:
        if caller is not None:
            via = "`__init__`" if caller.name == "__init__" else f"`{caller.name}()`"
            return f"`{method.name}()` (called from {cls.name}'s {via})"
        if method.name == "__init__":
            return "`__init__`"
        return f"`{method.name}()` (called from `__init__`)"

    def _finding(self, cls, site: ReadSite, caller=None) -> Finding:
        where = self._where(cls, site.method, caller)
        site = self._with_origin(cls, site)
        return Finding(
            site.read.node,
            f'{_named(site.read)} in {where} reads the value of a tensor; under `torch.device("meta")` it '
            f"has no data and this raises, so the module cannot be built on meta",
            cls,
            help='Compute it with Python numbers, or create that tensor with `device="cpu"`',
            site=site,
        )


def _named(read: ValueRead) -> str:
    """How the message names the read."""
    node = read.node
    if read.kind in ("host", "cast"):
        return f"`{short(node, 50)}`"
    if read.kind == "size":
        return f"`{short(node, 30)}`, a size of `{short(read.site, 40)}`,"
    if read.kind == "shape":
        return (
            f"`{short(read.site, 50)}` (an op whose output's shape depends on the values "
            f"of `{short(node, 30)}`; it has no meta kernel)"
        )
    if read.kind == "mask":
        return f"indexing by the boolean mask `{short(node, 40)}` (`nonzero`)"
    return f"the condition `{short(node, 50)}` (a tensor's truth value)"


# the rule's examples: the reported lines end with ``# ERROR``; they run as tests
# (tests/test_rule_examples.py)
DataDependentInit.VALID = [
    # an adapter placing itself on its base layer's device, unless it is built on meta
    """
import torch
from torch import nn

class Adapter(nn.Module):
    def __init__(self, width, device=None):
        super().__init__()
        self.device = device if device is not None else "cpu"
        self.scale = nn.Parameter(torch.ones(width))
        if not any(t.is_meta for t in (*self.parameters(), *self.buffers())):
            self.to(self.device)
        meta = torch.device("meta")
        if not any(p.device == meta for p in self.parameters()):
            self.cuda()
""",
    # peft BaseTuner: names that only feed each other through locals (a nested function
    # strips a suffix from its string parameter) are no tensors
    """
import torch
from torch import nn

class Tuner(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.lora = torch.nn.Parameter(torch.zeros(4))

        def strip(name):
            part = ".base"
            while part in name:
                prefix, _, suffix = name.rpartition(part)
                name = prefix + suffix
            return name

        for name, _module in model.named_modules():
            if strip(name) == "":
                continue
""",
    # the same clamp of a local made on the CPU: its reads are fine under meta
    """
import torch
import torch.nn as nn

class BalancedLoss(nn.Module):
    def __init__(self, class_counts, num_samples: int):
        super().__init__()
        counts = torch.as_tensor(class_counts, dtype=torch.float32, device="cpu")
        counts = counts.clamp(1.0, num_samples - 1.0)
        if (counts < 0).any():
            raise ValueError("class_counts must be in [0, num_samples]")
""",
    # Python numbers, and an explicit CPU tensor for a schedule
    """
import torch
from torch import nn

class ViT(nn.Module):
    def __init__(self, depth, drop_path_rate=0.1):
        super().__init__()
        dpr = [drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]
        cpu_dpr = torch.linspace(0, drop_path_rate, depth, device="cpu").tolist()
        self.blocks = nn.ModuleList(nn.Dropout(p) for p in dpr)
""",
    # value-shaped ops on CPU tensors, integer indices, a repeat count that is an int,
    # ``output_size`` given, ``torch.where`` with three arguments: all fine on meta
    """
import torch
from torch import nn

class Lattice(nn.Module):
    def __init__(self, size, idx):
        super().__init__()
        r = torch.linspace(-1, 1, size, device="cpu")
        kept = r[r.abs() <= 1].nonzero()
        t = torch.linspace(-1, 1, size)
        a = t[torch.arange(2)]
        b = t.repeat_interleave(2)
        c = t[:2].repeat_interleave(torch.tensor([1, 2]), output_size=3)
        d = torch.where(t > 0, t, 0.0)
        e = t[idx]
        self.register_buffer("grid", a.sum() + b.sum() + c.sum() + d + e.sum())
""",
    # shape queries work on meta; a tensor argument's value is unknown (not reported)
    """
import torch
import torch.nn as nn

class Embed(nn.Module):
    def __init__(self, weight, n):
        super().__init__()
        table = torch.zeros(n, 4)
        if table.shape[0] > 2 and table.numel() and table.size(1) == 4:
            self.n = int(table.shape[0])
        self.scale = float(weight.sum())
        self.mask = None
        if self.mask is None:
            self.register_buffer("table", table)
""",
    # a function imported from outside the checked tree is not followed
    """
import torch
from torch import nn
from audiolib.dsp import make_window

class MelFrontend(nn.Module):
    def __init__(self, n_fft):
        super().__init__()
        self.norm = make_window(n_fft)
        self.proj = nn.Linear(n_fft, n_fft)
""",
    # legacy constructors allocate on the CPU even under meta
    """
import torch
from torch import nn

class Anchors(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        t = torch.LongTensor(sizes)
        self.n = int(t.max())
""",
    # an audio codec's conv reads its argument before making a tensor of it: the caller's
    # int
    """
import torch
from torch import nn

class CausalConv(nn.Module):
    def __init__(self, kernel_size, stride=1, dilation=1):
        super().__init__()
        if stride > 1 and dilation > 1:
            raise ValueError("stride and dilation")
        stride = torch.tensor(stride, dtype=torch.int64)
        self.register_buffer("stride", stride, persistent=False)
""",
]

DataDependentInit.INVALID = [
    # a validation in a staticmethod handed a tensor __init__ made (spikingjelly's
    # ActivationAwareIFNode)
    """
import torch
import torch.nn as nn

class ThresholdNode(nn.Module):
    def __init__(self, v_threshold=1.0):
        super().__init__()
        threshold = torch.as_tensor(v_threshold)
        self._check_threshold(threshold)
        self.register_buffer("v_threshold", threshold.clone())

    @staticmethod
    def _check_threshold(v_threshold):
        if not torch.isfinite(v_threshold).all():  # ERROR
            raise ValueError("v_threshold must be finite")
""",
    # monai's median filter: a tensor used as a size is turned into an int (a read)
    Invalid(
        """
import torch
import torch.nn as nn

class MedianBlur(nn.Module):
    def __init__(self, window=(3, 3)):
        super().__init__()
        sizes = torch.as_tensor(window)
        numel = torch.prod(sizes)
        kernel = torch.ones(numel)  # ERROR
        self.kernel = kernel.view(numel, 1, *window)  # ERROR
""",
        fixed="""
import torch
import torch.nn as nn

class MedianBlur(nn.Module):
    def __init__(self, window=(3, 3)):
        super().__init__()
        sizes = torch.as_tensor(window, device="cpu")
        numel = torch.prod(sizes)
        kernel = torch.ones(numel)  # ERROR
        self.kernel = kernel.view(numel, 1, *window)  # ERROR
""",
    ),
    # timm DistributionBalancedLoss: a check of counts that are then clamped in place of
    # themselves (``counts = counts.clamp(...)`` reads the local: it is still meta)
    """
import torch
import torch.nn as nn

class BalancedLoss(nn.Module):
    def __init__(self, class_counts, num_samples: int):
        super().__init__()
        counts = torch.as_tensor(class_counts, dtype=torch.float32)
        if num_samples < 2 or (counts < 0).any():  # ERROR
            raise ValueError("class_counts must be in [0, num_samples]")
        counts = counts.clamp(1.0, num_samples - 1.0)
        self.register_buffer("freq_inv", 1.0 / counts)
""",
    # timm 0.9 ByobNet/CspNet: the schedule is computed by a module-level helper
    """
import torch
import torch.nn as nn

def create_stages(depths, drop_path_rate):
    dpr = [x.tolist() for x in torch.linspace(0, drop_path_rate, sum(depths)).split(depths)]  # ERROR
    return nn.Sequential(*[nn.Dropout(p[0]) for p in dpr])

class Net(nn.Module):
    def __init__(self, depths=(1, 2), drop_path_rate=0.1):
        super().__init__()
        self.stages = create_stages(depths, drop_path_rate)

class OtherNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = create_stages((2, 2), 0.2)
""",
    # timm 0.9 / dinov2 stochastic depth
    Invalid(
        """
import torch
from torch import nn

class ViT(nn.Module):
    def __init__(self, depth, drop_path_rate=0.1):
        super().__init__()
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]  # ERROR
        rates = torch.linspace(0, drop_path_rate, depth).tolist()  # ERROR
        self.blocks = nn.ModuleList(nn.Dropout(p) for p in dpr)
""",
        fixed="""
import torch
from torch import nn

class ViT(nn.Module):
    def __init__(self, depth, drop_path_rate=0.1):
        super().__init__()
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth, device="cpu")]  # ERROR
        rates = torch.linspace(0, drop_path_rate, depth, device="cpu").tolist()  # ERROR
        self.blocks = nn.ModuleList(nn.Dropout(p) for p in dpr)
""",
    ),
    # casts and conditions on tensors, through a helper and an own buffer
    """
import torch
import torch.nn as nn

class RoPE(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.max_freq = float(inv_freq.max())  # ERROR
        self._check()

    def _check(self):
        assert (self.inv_freq > 0).all()  # ERROR
        if torch.isnan(self.inv_freq).any():  # ERROR
            raise ValueError("nan")
""",
    # a computed mask used in a condition, and numpy
    """
import torch
from torch import nn

class WindowAttention(nn.Module):
    def __init__(self, window, shift):
        super().__init__()
        mask = torch.zeros(window, window)
        mask[:shift] = 1
        if mask.sum() > 0:  # ERROR
            self.register_buffer("attn_mask", mask)
        self.np_mask = mask.numpy()  # ERROR
        for r in torch.linspace(0, 1, window):
            self.rates = int(r)  # ERROR
""",
    # e3nn LowPassFilter: a lattice cut by a boolean mask, and other ops whose output's
    # shape depends on the values (no meta kernel: ``aten::nonzero``, ``aten::_unique2``)
    """
import torch
from torch import nn

class LowPassFilter(nn.Module):
    def __init__(self, size, steps=(1, 1, 1), counts=(1, 2)):
        super().__init__()
        r = torch.linspace(-1, 1, size)
        x = r * steps[0] / min(steps)
        x = x[x.abs() <= 1]  # ERROR
        keep = (r > 0) & ~torch.isnan(r)
        y = r[keep]  # ERROR
        index = ((r < 1) & (r > 0)).nonzero().T  # ERROR
        levels = torch.unique(torch.round(r * 4))  # ERROR
        rep = r[:2].repeat_interleave(torch.tensor(counts))  # ERROR
        where = torch.where(r > 0)  # ERROR
        self.register_buffer("kernel", torch.exp(-x.pow(2)))
""",
    # a normalizing flow's affine layer validates its arguments after making them
    # tensors (the argument is assigned again on every path before it is read)
    """
import torch
from torch import nn

class AffineTransform(nn.Module):
    def __init__(self, shift=0.0, scale=1.0):
        super().__init__()
        shift, scale = map(torch.as_tensor, (shift, scale))
        if not (scale > 0.0).all():  # ERROR
            raise ValueError("Scale must be strictly positive.")
        self.register_buffer("_shift", shift)
        self.register_buffer("_scale", scale)
""",
    # a vision transformer's attention bias table, built by a static method through a
    # chain of locals; torch.unique has no meta kernel
    """
import torch
from torch import nn

class Attention(nn.Module):
    def __init__(self, heads=2, resolution=(4, 4)):
        super().__init__()
        indices, n = self.build_attention_bias(resolution)
        self.attention_biases = nn.Parameter(torch.zeros(heads, n))
        self.register_buffer("attention_bias_idxs", indices, persistent=False)

    @staticmethod
    def build_attention_bias(resolution):
        H, W = resolution
        rows = torch.arange(H)
        rr = rows.repeat_interleave(W)
        dr = (rr[:, None] - rr[None, :]).abs()
        keys = dr * W + dr
        unique_keys, inverse = torch.unique(keys, return_inverse=True)  # ERROR
        return inverse.view(H * W, H * W), unique_keys.numel()
""",
    # a coupling layer's mask, made on both branches, then counted
    """
import torch
from torch import nn

class Coupling(nn.Module):
    def __init__(self, features, mask=None):
        super().__init__()
        if mask is None:
            mask = torch.arange(features) % 2 == 1
        else:
            mask = torch.as_tensor(mask, dtype=bool)
        n = mask.sum().item()  # ERROR
        self.register_buffer("mask", mask)
        self.net = nn.Linear(n, features - n)
""",
    # an audio encoder that moves itself at the end of __init__
    """
import torch
from torch import nn

class SpeechEncoder(nn.Module):
    def __init__(self, n_mels, dim, device="cpu"):
        super().__init__()
        self.conv = nn.Conv1d(n_mels, dim, 3, padding=1)
        self.proj = nn.Linear(dim, dim)
        self.to(device)  # ERROR
        self.half().cuda()  # ERROR
""",
]


def _validation_help(node: cst.Call, inner: bool) -> str:
    """What to do about a validating distribution constructor in construction: one run on the
    module itself (``Normal.__init__(self, ...)``) or one building a distribution, which also
    keeps its tensors out of the module's (``to_empty()`` never reaches them)."""
    if type(node.func) is not cst.Attribute or node.func.attr.value != "__init__":
        return (
            "Register its parameters as buffers and build the distribution where it is used "
            "(`Normal(self.loc, self.scale)` in `forward` or a property), or build it from "
            'tensors made with `device="cpu"`'
        )
    if inner:
        return 'Hand the constructor tensors made with `device="cpu"`'
    return (
        "Pass `validate_args=False` (validate outside construction), or hand the "
        'constructor tensors made with `device="cpu"`'
    )
