"""Record, while a module is constructed, which source line last wrote each tensor.

:class:`WriteRecorder` is a ``TorchDispatchMode`` used during eager construction. For every
aten op it finds the storages the op wrote (the mutated arguments of an in-place op, or the
fresh outputs of a functional/factory op; views write nothing) and records, per storage:

- the innermost Python frame outside torch and metalint (``file``, ``line``, ``function``);
- whether the value is *random*: a random op wrote it, or it was computed from a random value
  (taint propagation; ops that overwrite their destination - ``fill_``, ``zero_``, ``copy_``,
  the random ops - do not inherit the destination's taint);
- whether nothing wrote it since an op that allocates without values made it (``torch.empty``,
  ``new_empty``, the legacy ``torch.Tensor(3, 4)``): *uninitialised* memory, which eager
  construction leaves as garbage just as ``to_empty()`` does (open_clip's
  ``MultimodalTransformer.text_projection``, whose ``init_parameters()`` nothing calls).

The probe uses the taint to decide whether a tensor is compared exactly (deterministic) or
statistically (random). :class:`EscapeDetector` is used during the meta build and records
every fresh tensor whose device is not ``meta`` (a device escape).
"""

from __future__ import annotations

import os
import sys
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from metalint.vocabulary import OVERWRITE_ATEN_OPS, RANDOM_ATEN_OPS, UNINITIALISED_ATEN_OPS

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_PROBE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: files whose frames only wrap the caller's call
_WRAPPERS = tuple(os.sep + f for f in ("contextlib.py", "typing_extensions.py", "warnings.py"))
_METALINT_TESTING = os.path.join(os.path.dirname(_PROBE_DIR.rstrip(os.sep)), "testing.py")


@dataclass
class Site:
    file: str
    line: int
    function: str
    owner: str | None = None  # qualname of the nn.Module whose method this frame runs

    def short(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"


def user_frame(skip_dirs: tuple[str, ...] = ()) -> Site | None:
    """The innermost frame that is not torch, metalint's probe, the stdlib's contextlib or a
    ``@deprecated`` wrapper (typing_extensions', the stdlib's: torch's hook-based
    ``nn.utils.weight_norm`` is wrapped in one, which named typing_extensions.py as the line
    that set the tensor)."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not (
            fn.startswith(_TORCH_DIR)
            or fn.startswith(_PROBE_DIR)
            or fn == _METALINT_TESTING
            or fn.startswith("<")
            or fn.endswith(_WRAPPERS)
            or any(fn.startswith(d) for d in skip_dirs)
        ):
            owner = None
            if "self" in f.f_code.co_varnames[:1]:
                obj = f.f_locals.get("self")
                if isinstance(obj, torch.nn.Module):
                    owner = type(obj).__qualname__
            return Site(fn, f.f_lineno, f.f_code.co_name, owner)
        f = f.f_back
    return None


def _storage_key(t: torch.Tensor) -> int | None:
    try:
        if t.device.type == "meta":
            return None
        ptr = t.untyped_storage().data_ptr()
    except Exception:  # sparse, nested, functional wrappers...
        return None
    return ptr or None


def _covers_storage(t: torch.Tensor) -> bool:
    try:
        return t.numel() * t.element_size() >= t.untyped_storage().nbytes()
    except Exception:
        return True


def _op_name(func) -> str:
    # aten.normal_.default -> "normal_"
    return func._schema.name.split("::")[-1]


def _written_args(func, args, kwargs) -> list[torch.Tensor]:
    out = []
    schema = func._schema
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            val = args[i] if i < len(args) else kwargs.get(a.name)
            flat, _ = tree_flatten(val)
            out.extend(x for x in flat if isinstance(x, torch.Tensor))
    return out


def _is_view(func) -> bool:
    return any(r.alias_info is not None for r in func._schema.returns)


class Mode(TorchDispatchMode):
    """A dispatch mode of the probe. torch wraps each mode's ``__torch_dispatch__`` in
    ``torch._disable_dynamo``, whose first call imports ``torch._dynamo`` (about as long as
    importing torch itself); the probe never compiles, so its modes opt out of the wrapper."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


class WriteRecorder(Mode):
    """Per storage: the last user source line that wrote it, whether it is random, and
    whether it is uninitialised (allocated without values, written by nothing since)."""

    def __init__(self) -> None:
        super().__init__()
        self.site: dict[int, Site | None] = {}
        self.random: dict[int, bool] = {}
        self.uninitialised: dict[int, bool] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            self._record(func, args, kwargs, out)
        except Exception:  # recording must never break construction
            pass
        return out

    def _record(self, func, args, kwargs, out) -> None:
        name = _op_name(func)
        written = _written_args(func, args, kwargs)
        if written:
            targets = written
        elif _is_view(func) and name != "lift_fresh":
            return
        else:
            flat_out, _ = tree_flatten(out)
            targets = [x for x in flat_out if isinstance(x, torch.Tensor)]
        if not targets:
            return
        keys = [k for k in (_storage_key(t) for t in targets) if k is not None]
        if not keys:
            return
        rand = name in RANDOM_ATEN_OPS or name.startswith("rand") or "dropout" in name
        if not rand:
            rand = self._reads_random(name, keys, args, kwargs)
        site = user_frame()
        for t in targets:
            k = _storage_key(t)
            if k is None:
                continue
            self.site[k] = site
            # any write, even of a slice, gives it values: only a fresh allocation is garbage
            self.uninitialised[k] = not written and name in UNINITIALISED_ATEN_OPS
            if written and not rand and not _covers_storage(t):
                # a partial overwrite (embedding padding row, a slice) keeps the rest's taint
                self.random[k] = self.random.get(k, False)
            else:
                self.random[k] = rand

    def _reads_random(self, name: str, keys: list, args, kwargs) -> bool:
        """Does the op read a tensor that holds random values (not one it overwrites
        whole)?"""
        flat_in, _ = tree_flatten((args, kwargs))
        skip = set(keys) if name in OVERWRITE_ATEN_OPS else set()
        for x in flat_in:
            if isinstance(x, torch.Tensor):
                k = _storage_key(x)
                if k is not None and k not in skip and self.random.get(k, False):
                    return True
        return False

    def lookup(self, t: torch.Tensor) -> tuple[Site | None, bool | None]:
        k = _storage_key(t)
        if k is None or k not in self.site:
            return None, None
        return self.site[k], self.random[k]

    def never_written(self, t: torch.Tensor) -> bool:
        """Was ``t`` allocated without values and written by nothing since (uninitialised)?"""
        k = _storage_key(t)
        return k is not None and self.uninitialised.get(k, False)


@dataclass
class Escape:
    op: str
    device: str
    nbytes: int
    site: Site | None
    ref: Any = None  # weakref to the tensor: alive at the end of the build = retained
    storage: int = 0  # address of its storage (0: none)
    #: its storage is held by the built model: ``nn.Parameter(torch.Tensor(n))`` wraps the
    #: escaped tensor in a new object, so the weakref dies while the memory stays
    in_model: bool = False

    @property
    def retained(self) -> bool:
        return self.in_model or self.ref is None or self.ref() is not None


class EscapeDetector(Mode):
    """Records every fresh tensor created on a non-meta device (during a meta build)."""

    def __init__(self) -> None:
        super().__init__()
        self.escapes: list[Escape] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            if not _written_args(func, args, kwargs) and (
                not _is_view(func) or _op_name(func) == "lift_fresh"
            ):
                flat, _ = tree_flatten(out)
                for x in flat:
                    if isinstance(x, torch.Tensor) and x.device.type != "meta":
                        nbytes = x.untyped_storage().nbytes() if x.numel() else 0
                        try:
                            ref = weakref.ref(x)
                        except TypeError:
                            ref = None
                        self.escapes.append(
                            Escape(
                                _op_name(func),
                                str(x.device),
                                nbytes,
                                user_frame(),
                                ref,
                                x.untyped_storage().data_ptr() if nbytes else 0,
                            )
                        )
        except Exception:
            pass
        return out

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.escapes)

    def mark_kept(self, model: torch.nn.Module) -> None:
        """Mark the escapes whose storage the built ``model`` holds (a parameter, a buffer or
        a plain tensor attribute), whatever Python object now wraps it."""
        held: set[int] = set()
        for m in model.modules():
            for t in (*m._parameters.values(), *m._buffers.values(), *vars(m).values()):
                if isinstance(t, torch.Tensor) and t.device.type != "meta":
                    try:
                        held.add(t.untyped_storage().data_ptr())
                    except Exception:  # noqa: BLE001 (a tensor subclass without storage)
                        pass
        for e in self.escapes:
            if e.storage and e.storage in held:
                e.in_model = True
