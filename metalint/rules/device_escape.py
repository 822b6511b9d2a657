from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst

from metalint.diagnostics import HelperReads
from metalint.static.construction import (
    BUFFER_CLASSES,
    is_tensor,
    off_meta,
    real_device,
)
from metalint.static.model import (
    ClassFacts,
    MethodFacts,
    construction,
    construction_calls,
    partial_bindings,
    unset_parameters,
)
from metalint.static.names import dotted
from metalint.static.rule import Finding, Invalid, Rule
from metalint.static.syntax import keyword, self_attr, short, string_value, walk_code
from metalint.static.tensors import is_legacy_sizes, legacy_sizes, parameter_value
from metalint.vocabulary import (
    CPU_CONSTRUCTORS,
    DEVICE_COPY_METHODS,
    DEVICE_FACTORIES,
    INPLACE_METHODS,
    LEGACY_CONSTRUCTOR_DTYPES,
    LEGACY_CONSTRUCTORS,
    TENSOR_METHODS,
)


@dataclass(frozen=True)
class EscapeSite:
    """What the rule matched, handed to its fix (:mod:`metalint.fix.device_escape`): the call
    (a legacy constructor, a torch factory given a real device, or a copy), the method of
    construction holding it, and for a copy its method (``"to"``, ``"cpu"``, ``"cuda"``).
    For a legacy constructor whose arguments are sizes for certain (:func:`legacy_sizes`):
    ``sizes`` is True and ``dtype`` the dtype it allocates (None: the default one)."""

    call: cst.Call
    method: MethodFacts
    copy: str | None = None
    sizes: bool = False
    dtype: str | None = None
    #: for a copy: the torch factory that makes the copied tensor, followed back through
    #: methods that keep it where it is (:func:`copied_factory`); None when it is not one
    factory: cst.Call | None = None


def _contains(tree: cst.CSTNode, node: cst.CSTNode) -> bool:
    return any(n is node for n in walk_code(tree))


def _mentions(tree: cst.CSTNode, name: str) -> bool:
    return any(isinstance(n, cst.Name) and n.value == name for n in walk_code(tree))


def default_device(target, lineage: list[ClassFacts], method: MethodFacts) -> str | None:
    """``device` (default "cpu")`` when ``target`` is a constructor argument whose default is
    a real device (monai DiNTS' ``device: str = "cpu"``), or ``self.<x>`` that the ``__init__``
    of the class or of a base class of the same file (``lineage``) sets to one: ``.to(target)``
    of a tensor built on meta raises with that default. None when the default is ``None`` or
    not a real device (``.to(None)`` keeps the tensor where it is)."""
    for cls in lineage:
        init = cls.init
        if init is None:
            continue
        name = _argument_named(target, init, method)
        if name is _BY_A_BASE:
            continue
        if name is None or name not in init.params:
            return None
        return _real_default(init, name)
    return None


#: :func:`_argument_named`: a base class sets the attribute
_BY_A_BASE = object()


def _argument_named(target, init: MethodFacts, method: MethodFacts):
    """The constructor argument ``target`` is (a name in ``__init__``) or that ``__init__``
    assigns to it (``self.device = device``); None when neither, :data:`_BY_A_BASE` when
    ``__init__`` does not set it."""
    if isinstance(target, cst.Name):
        return target.value if method is init else None
    if isinstance(target, cst.Attribute) and dotted(target) == f"self.{target.attr.value}":
        values = [a.value for a in init.assigns if a.target == f"self.{target.attr.value}"]
        if not values:
            return _BY_A_BASE
        if len(values) == 1 and isinstance(values[0], cst.Name):
            return values[0].value
    return None


def _real_default(init: MethodFacts, name: str) -> str | None:
    """``device` (default "cpu")`` when the argument's default is a real device."""
    for p in (*init.node.params.params, *init.node.params.kwonly_params):
        if p.name.value == name and p.default is not None:
            dev = real_device(p.default, lambda _n: None, None)
            if dev is not None:
                return f'`{name}` (default "{dev}")'
    return None


#: methods between a factory and a copy that keep the tensor where it is
KEEPS_DEVICE = (TENSOR_METHODS | INPLACE_METHODS) - DEVICE_COPY_METHODS - {"type_as", "new_empty"}


def copied_factory(receiver: cst.BaseExpression, qualify) -> cst.Call | None:
    """The torch factory taking ``device=`` that makes ``receiver``, the tensor a copy copies
    (``torch.ones(shape)`` of ``torch.ones(shape).to(self.device)``), through the methods
    between them that keep it where it is (``.normal_(1, 0.01)``); None when there is none."""
    cur = receiver
    while isinstance(cur, cst.Call):
        if (qualify(cur.func) or "") in DEVICE_FACTORIES:
            return cur
        if not (isinstance(cur.func, cst.Attribute) and cur.func.attr.value in KEEPS_DEVICE):
            return None
        cur = cur.func.value
    return None


def _legacy_sizes(q: str, node: cst.Call, method: MethodFacts) -> dict:
    """``sizes``/``dtype`` of :class:`EscapeSite` for the call ``node`` of ``q``: a typed
    legacy constructor given sizes for certain (``torch.Tensor(in_channels, out_channels)``),
    which ``torch.empty`` of the same arguments allocates alike."""
    if q not in LEGACY_CONSTRUCTOR_DTYPES or not node.args or not legacy_sizes(node, method):
        return {}
    return {"sizes": True, "dtype": LEGACY_CONSTRUCTOR_DTYPES[q]}


class DeviceEscape(Rule):
    """
    ## What it does
    Finds tensors `__init__` creates on an explicit real device and keeps
    (`torch.arange(n, device="cpu")`, `nn.Linear(d, d, device="cpu")`, `.cuda()`, `.to("cpu")`)
    and legacy constructors (`torch.Tensor(3, 4)`, `torch.LongTensor([...])`).

    ## Why is this bad on meta?
    These allocate real memory even under `with torch.device("meta"):`: building a large model
    on meta then costs real memory, and the tensor sits on the wrong device after
    `to_empty(device="cuda")`.

    ## Example
    ```python
            self.weight = nn.Parameter(torch.Tensor(num, dim))
            self.register_buffer("ids", torch.arange(num, device="cpu"), persistent=False)
    ```

    Use instead:
    ```python
            self.weight = nn.Parameter(torch.empty(num, dim))
            self.register_buffer("ids", torch.empty(num, dtype=torch.long), persistent=False)
            # and in reset_parameters(): self.ids.copy_(torch.arange(self.ids.numel()))
    ```

    ## Fix safety
    The fix turns a legacy constructor of sizes into `torch.empty(sizes)` (safe: the same
    uninitialised allocation) and makes a new tensor copied to the constructor's device there
    (`torch.ones(s).to(self.device)` → `torch.ones(s, device=self.device)`: unsafe when a draw
    comes between). Real-device factories and `.cpu()` are not rewritten.

    ## Options
    None beyond selecting the rule.

    ## When to switch it off
    When a small CPU tensor is kept on purpose (a lookup table used on the host).

    ## Known limits
    - A temporary real-device tensor (a value copied into a buffer, `.tolist()` of CPU numbers)
      is not reported: computing on CPU is how `__init__` gets real numbers on meta.
    """

    code = "ML009"
    name = "device-escape"
    summary = "Tensor created on an explicit real device (or a legacy constructor) in `__init__`"
    codemod = "metalint.fix.device_escape"
    site_type = EscapeSite

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._reported_helpers: set[int] = set()

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        methods = construction(cls, enter_hooks=False, hooks=self.ctx.hooks)
        bound = partial_bindings(methods, self.qualify)
        for method in methods:
            reported: list[cst.CSTNode] = []
            for call in method.calls:
                node = call.node
                if any(_contains(r, node) for r in reported):
                    continue
                finding = self._escape(cls, method, call) or self._copy_out(cls, method, call)
                if finding is not None:
                    reported.append(node)
                    yield finding
            yield from self._helper_copies(cls, method, bound, reported)

    def _helper_copies(self, cls, method: MethodFacts, bound, reported) -> Iterable[Finding]:
        """The copies in the module-level functions of this file that ``method`` runs
        (directly or through a ``partial`` bound on the module), each line reported once, for
        its first caller; a call of a function of another file is reported at the call, while
        the tree's summary of that function (or of one it calls) holds such a copy
        (``Diagnostic.via`` names it)."""
        for found in construction_calls(method, bound, self.ctx):
            node = found.call.node
            if found.caller is method and any(_contains(r, node) for r in reported):
                continue
            if found.caller is not method and id(node) not in self._reported_helpers:
                where = f"`{found.caller.name}()` (called from {cls.name}'s `{method.name}`)"
                finding = self._copy_out(cls, found.caller, found.call, found.unset, where)
                if finding is not None:
                    self._reported_helpers.add(id(node))
                    yield finding
            if found.target and not _passes_real_device(found.args, self.qualify):
                if self.deferred(found.target):
                    continue
                yield Finding(
                    node,
                    f"`{short(node, 50)}` in `{method.name}` calls a function that copies a "
                    f"tensor it creates to a real device: built on meta it has no data and "
                    f'this raises "Cannot copy out of meta tensor"',
                    cls,
                    help="Create the tensor with `device=device` from the constructor, or "
                    "compute it in `reset_parameters()`",
                    conditions=(HelperReads(found.target),),
                )

    def _copy_target(self, cls, method: MethodFacts, call) -> str | bool | None:
        """Where a copy goes: None for ``.cpu()``/``.cuda()``/``.to(<real device>)``, the
        description of :func:`default_device` for a constructor argument whose default is a
        real device, False for anything else (not a copy this rule judges)."""
        if call.method != "to":
            return None
        target = keyword(call.node, "device")
        if target is None and call.node.args and call.node.args[0].keyword is None:
            target = call.node.args[0].value
        if real_device(target, self.qualify, method) is not None:
            return None
        return default_device(target, self._lineage(cls), method) or False

    def _lineage(self, cls: ClassFacts | None) -> list[ClassFacts]:
        """``cls`` and its base classes of the same file, nearest first."""
        out: list[ClassFacts] = []
        todo = [cls] if cls is not None else []
        while todo:
            c = todo.pop(0)
            if c in out:
                continue
            out.append(c)
            todo += [k for b in c.bases for k in self.ctx.facts.classes if k.fullname == b]
        return out

    def function_reads(self, fn: MethodFacts) -> Iterable[cst.CSTNode]:
        # as construction calls it from another file: what the caller does not pass holds
        # its default (a call passing a real device is not reported, ``_passes_real_device``)
        unset = unset_parameters(fn)
        return (c.node for c in fn.calls if self._copy_out(None, fn, c, unset) is not None)

    # -- a tensor allocated on a real device and kept ------------------------------------------
    def _escape(self, cls, method: MethodFacts, call) -> Finding | None:
        node = call.node
        q = call.qualname or ""
        if q in LEGACY_CONSTRUCTORS:
            how = (
                f'`{short(node, 40)}` allocates CPU memory even under `torch.device("meta")` '
                f"(a legacy constructor)"
            )
            instead = (
                "Use `torch.empty(..., device=device, dtype=dtype)`"
                if is_legacy_sizes(node, method)
                else "Use `torch.empty(...)` and fill it in `reset_parameters()`"
            )
        else:
            dev = real_device(keyword(node, "device"), self.qualify, method)
            if dev is None or not q.startswith("torch."):
                return None
            how = f"`{short(node, 40)}` is created on `{dev}`, not on the meta device"
            instead = "Take `device=None` in the constructor and pass it on"
        attrs = self._kept_in(method, node)
        if not attrs:
            return None
        names = ", ".join(f"`{a}`" for a in attrs)
        return Finding(
            node,
            f"{names}: {how}, so building on meta allocates real memory, and `to_empty()` "
            f"then wipes the value unless a reset hook re-creates it",
            cls,
            help=instead,
            subject=tuple(attrs),
            site=EscapeSite(node, method, **_legacy_sizes(q, node, method)),
        )

    def _keeping(self, method: MethodFacts, pred) -> list[str]:
        """Own attributes assigned or registered a value matching ``pred``."""
        attrs: list[str] = []
        for a in method.assigns:
            if a.value is not None and pred(a.value) and self._keepable(a.value, method):
                attr = self_attr(a.target)
                if attr:
                    attrs.append(attr)
        for call in method.calls:
            if call.receiver == "self" and call.method in ("register_buffer", "register_parameter"):
                args = call.node.args
                if len(args) >= 2 and pred(args[1].value):
                    name = string_value(args[0].value)
                    if name:
                        attrs.append(name)
        return attrs

    # -- .cpu() / .cuda() / .to("cpu") of a tensor created on meta ------------------------------
    def _copy_out(self, cls, method: MethodFacts, call, unset=None, where=None) -> Finding | None:
        """``unset``: for a function of the file, the parameters that hold ``None``
        (:class:`ConstructionCall`), None for a method of the class; ``where``: how the message
        names the function."""
        if call.method not in DEVICE_COPY_METHODS:
            return None
        func = call.node.func
        if not isinstance(func, cst.Attribute):
            return None
        default = self._copy_target(cls, method, call)
        if default is False:
            return None
        receiver = func.value
        if not is_tensor(receiver, self.qualify, method):
            return None
        if default is not None and self._on_the_cpu(receiver, method):
            return None  # ``F.one_hot(torch.from_numpy(a)).to(self.device)``: on the CPU already
        if (
            self._made_off_meta(receiver, method)
            if unset is None
            else _off_meta_in(receiver, method, unset, self.qualify)
        ):
            return None
        site = EscapeSite(
            call.node, method, call.method, factory=copied_factory(receiver, self.qualify)
        )
        if default is not None:
            return Finding(
                call.node,
                f"`{short(call.node, 50)}` copies a tensor created in `{method.name}` to "
                f"{default}: built on meta with that default it has no data and this raises "
                '"Cannot copy out of meta tensor"',
                cls,
                help="Create the tensor on that device (`device=...` of its factory) instead "
                "of copying it there",
                site=site,
            )
        return Finding(
            call.node,
            f"`{short(call.node, 50)}` copies a tensor created in {where or f'`{method.name}`'} to a real "
            f'device: built on meta it has no data and this raises "Cannot copy out of meta '
            f'tensor" (eagerly it allocates on that device)',
            cls,
            help="Create the tensor with `device=device` from the constructor, or compute it "
            "in `reset_parameters()`",
            site=site,
        )

    def _on_the_cpu(self, receiver, method: MethodFacts) -> bool:
        """Is the tensor certainly on the CPU (a legacy constructor, ``torch.from_numpy``)?"""
        return off_meta(receiver, self.qualify, method) or any(
            isinstance(n, cst.Call) and (self.qualify(n.func) or "") in CPU_CONSTRUCTORS
            for n in walk_code(receiver)
        )

    def _made_off_meta(self, receiver, method: MethodFacts) -> bool:
        """Is the tensor already on a real device (``device=``: reported as an escape) or
        from a legacy constructor, itself or the local it is?"""
        for n in walk_code(receiver):
            if isinstance(n, cst.Call) and (
                keyword(n, "device") is not None
                or (self.qualify(n.func) or "") in LEGACY_CONSTRUCTORS
            ):
                return True
        if not isinstance(receiver, cst.Name):
            return False
        return any(
            isinstance(n, cst.Call) and keyword(n, "device") is not None
            for _, v in method.local_values.get(receiver.value, ())
            for n in walk_code(v)
        )

    def _keepable(self, value: cst.BaseExpression | None, method: MethodFacts) -> bool:
        if value is None:
            return False
        if parameter_value(value, self.qualify) is not None:
            return True
        if isinstance(value, cst.Call):
            q = self.qualify(value.func) or ""
            if q in BUFFER_CLASSES or (
                q.startswith("torch.nn.")
                and not q.startswith("torch.nn.functional.")
                and not q.startswith("torch.nn.init.")
            ):
                return True
        return is_tensor(value, self.qualify, method)

    def _kept_in(self, method: MethodFacts, node: cst.CSTNode) -> list[str]:
        """Own attributes that keep ``node``'s tensor (or a tensor computed from it)."""
        attrs: list[str] = []

        def land(pred) -> list[str]:
            """Locals whose value matches ``pred``; record attributes that keep it."""
            attrs.extend(self._keeping(method, pred))
            return [
                local
                for local, values in method.local_values.items()
                for _, value in values
                if pred(value) and is_tensor(value, self.qualify, method)
            ]

        todo = land(lambda v: _contains(v, node))
        seen: set[str] = set()
        while todo:
            local = todo.pop()
            if local in seen:
                continue
            seen.add(local)
            todo += land(lambda v, name=local: _mentions(v, name))
        return sorted(set(attrs))


def _off_meta_in(receiver, fn: MethodFacts, unset, qualify) -> bool:
    """In the function ``fn``: may the tensor be off meta? A call that makes it, or a value
    of a local it is computed from (transitively), takes a ``device=`` other than a
    parameter in ``unset`` (which holds ``None``), or is a legacy constructor (transformers'
    ``plan_out_scales(..., device="cpu")`` computes ``cost_matrix`` from tensors made on
    ``device``: on the CPU when the caller passes none)."""
    todo, seen = [receiver], set()
    while todo:
        for n in walk_code(todo.pop()):
            if type(n) is cst.Call and (
                _device_given(n, fn, unset) or (qualify(n.func) or "") in LEGACY_CONSTRUCTORS
            ):
                return True
            if type(n) is cst.Name and n.value not in seen:
                seen.add(n.value)
                todo += [v for _, v in fn.local_values.get(n.value, ())]
    return False


def _device_given(call: cst.Call, method: MethodFacts, unset) -> bool:
    """Does ``call`` take a ``device=`` other than a parameter of ``method`` in ``unset``?"""
    device = keyword(call, "device")
    if type(device) is cst.Name and device.value in unset:
        return not method.holds_argument(device)
    return device is not None


def _passes_real_device(args, qualify) -> bool:
    """Do the arguments of a call pass a real device (``make_table(n, device="cpu")``)? The
    summary of a function of another file reads it as called with its defaults."""
    return any(real_device(a.value, qualify, None) is not None for a in args)


# the rule's examples: the reported lines end with ``# ERROR``; they run as tests
# (tests/test_rule_examples.py)
DeviceEscape.VALID = [
    # a copy to a device argument whose default is None keeps the tensor where it is
    """
import torch
from torch import nn

class Scheduler(nn.Module):
    def __init__(self, n, device=None):
        super().__init__()
        self.register_buffer("timesteps", torch.arange(n).to(device), persistent=False)
""",
    # device from the constructor; a CPU tensor used only for Python numbers (timm drop-path)
    """
import torch
from torch import nn

class Stage(nn.Module):
    def __init__(self, dim, depth, drop_path_rate, device=None, dtype=None):
        super().__init__()
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth, device="cpu")]
        self.num_blocks = (4 ** torch.arange(depth, device="cpu")).flip(0).tolist()
        self.weight = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.proj = nn.Linear(dim, dim, device=device)
""",
    # a CPU input copied into a meta buffer; a CPU computation inside a reset hook
    """
import torch
import torch.nn as nn

class BlurPool(nn.Module):
    def __init__(self, size, device=None):
        super().__init__()
        self.size = size
        self.register_buffer("filt", torch.empty(size, size, device=device), persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        coeffs = torch.tensor([1.0, 2.0, 1.0], device="cpu")
        self.filt.copy_(coeffs[:, None] * coeffs[None, :])
""",
]

DeviceEscape.INVALID = [
    # the pre-2019 style: torch.Tensor(sizes) + reset_parameters still allocates
    Invalid(
        """
import math
import torch
from torch import nn

class Linear(nn.Module):
    def __init__(self, in_features, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.Tensor(out_features, in_features))  # ERROR
        self.bias = nn.Parameter(torch.FloatTensor(out_features))  # ERROR
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        nn.init.zeros_(self.bias)
""",
        fixed="""
import math
import torch
from torch import nn

class Linear(nn.Module):
    def __init__(self, in_features, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))  # ERROR
        self.bias = nn.Parameter(torch.empty(out_features, dtype=torch.float32))  # ERROR
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        nn.init.zeros_(self.bias)
""",
    ),
    # explicit devices, through locals and into buffers
    """
import torch
import torch.nn as nn

class PosIds(nn.Module):
    def __init__(self, n, dim):
        super().__init__()
        cpu = torch.device("cpu")
        ids = torch.arange(n, device=cpu)  # ERROR
        self.register_buffer("position_ids", ids.expand((1, -1)), persistent=False)
        self.register_buffer("idx", torch.LongTensor([0, 2, 1]))  # ERROR
        self.mask = torch.ones(n, n, device="cuda").triu(1)  # ERROR
        self.proj = nn.Linear(dim, dim, device="cpu")  # ERROR
""",
    # a copy to the constructor's device, whose default is a real one (monai DiNTS)
    Invalid(
        """
import torch
from torch import nn

class TopologyConstruction(nn.Module):
    def __init__(self, num_blocks, num_paths, device: str = "cpu"):
        super().__init__()
        self.device = device
        arch_code_a = torch.ones((num_blocks, num_paths)).to(self.device)  # ERROR
        self.cells = nn.ModuleList(
            nn.Identity() for i in range(num_blocks) if arch_code_a[i, 0] == 1
        )
""",
        fixed="""
import torch
from torch import nn

class TopologyConstruction(nn.Module):
    def __init__(self, num_blocks, num_paths, device: str = "cpu"):
        super().__init__()
        self.device = device
        arch_code_a = torch.ones((num_blocks, num_paths), device=self.device)  # ERROR
        self.cells = nn.ModuleList(
            nn.Identity() for i in range(num_blocks) if arch_code_a[i, 0] == 1
        )
""",
    ),
    # .cpu() / .to("cpu") of a tensor built on meta raises
    """
import torch
from torch import nn

class Table(nn.Module):
    def __init__(self, n):
        super().__init__()
        t = torch.arange(n).float()
        self.register_buffer("table", t.cpu(), persistent=False)  # ERROR
        self.register_buffer("other", torch.ones(n).to("cpu"), persistent=False)  # ERROR
""",
]
