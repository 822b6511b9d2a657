"""Materialise a model the probe built on meta: run its init (per-module hooks, a root's
entry point, the tree's materialisation site) after ``to_empty()``, recording what each hook
writes; and the errors of a probe's setup (lazy modules, a failing stage)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from metalint.probe import attribute, compare
from metalint.probe.snapshot import (
    Snapshot,
    _class_file,
    _name,
    _raise_site,
    snapshot,
)
from metalint.vocabulary import (
    BUFFER_HOOK,
    DEFAULT_HOOKS,
    RESET_HOOK,
    ROOT_ENTRIES,
    ROOT_ONLY_PROTOCOL,
)


def _post_order(model: nn.Module) -> list[tuple[str, nn.Module]]:
    out: list[tuple[str, nn.Module]] = []
    seen: set[int] = set()

    def visit(path: str, m: nn.Module) -> None:
        if id(m) in seen:
            return
        seen.add(id(m))
        for n, c in m.named_children():
            visit(_name(path, n), c)
        out.append((path, m))

    visit("", model)
    return out


def _pre_order(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return list(model.named_modules())


def resolve_callable(spec: str) -> Callable:
    if ":" in spec:
        mod, _, attr = spec.partition(":")
    else:
        mod, _, attr = spec.rpartition(".")
    obj: Any = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class _HookWrites(attribute.Mode):
    """During reset hooks: which module's hook wrote which storage."""

    def __init__(self, owners: dict[int, str]) -> None:
        super().__init__()
        self.owners = owners
        self.current: str | None = None
        self.foreign: list[tuple[str, str]] = []  # (hook module path, written tensor name)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.current is not None:
            for t in attribute._written_args(func, args, kwargs):
                k = attribute._storage_key(t)
                name = self.owners.get(k) if k is not None else None
                if name is not None:
                    owner = name.rpartition(".")[0]
                    if owner != self.current:
                        self.foreign.append((self.current, name))
        return out


def _has(m: nn.Module, name: str) -> bool:
    """``m`` has the hook ``name``, callable with no argument as every materialiser calls it
    (peft's ``RoadLayer.reset_parameters(adapter_name, init_weights)`` is no such hook: the
    per-module protocol cannot run it, and ML006 does not judge it)."""
    fn = getattr(m, name, None)
    if not callable(fn):
        return False
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return all(
        p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params
    )


def run_init(
    model: nn.Module,
    init: str,
    order: str = "post",
    tracker: _HookWrites | None = None,
    hooks: Sequence[str] = (),
    device: str | None = None,
) -> str:
    """Run the init entry point on ``model``; returns a description of what ran.

    - ``reset_parameters``: every module's ``reset_parameters()``, children first (``order``);
    - ``init_weights``: the root's ``init_weights()`` only;
    - ``init_weights-only``: the root's entry point and nothing after it (no per-module
      hooks); ``auto`` is this when a materialisation site of the class's tree runs so
      (:func:`materialisation_site`);
    - ``auto``: every module, children first: its ``reset_parameters()``, then its
      ``init_weights()`` when it defines one. This is timm's protocol (``named_apply(depth_first=True)``
      with ``init_weights_vit_timm``): a per-module ``init_weights()`` patches values on top of
      its children's own init, and a root ``init_weights()`` that re-initialises the whole tree
      runs last, so it wins. The root's entry point is the first of
      :data:`~metalint.vocabulary.ROOT_ENTRIES` it has (torchtitan's ``init_states()`` when it
      has no ``init_weights()``), as ``metalint check`` and ``metalint load`` read it. Without
      any of them this is ``reset_parameters``.
    - ``module:callable``: called with the model.

    Then ``init_non_persistent_buffers()`` on every module that has it (timm), and each of
    ``hooks`` (the configured ``[tool.metalint] hooks``, e.g. torchtune's ``rope_init``) on every
    module that has it, under ``torch.device(device)``. ``metalint check`` counts what these
    re-create as re-created, so the probe runs them too; the built-in hooks and private ones
    (``_init_weights(m)``, applied by a parent) are not called again.
    """
    if init in ("auto", ROOT_ONLY_PROTOCOL):
        used = _root_only(model, init)
        if used is not None:
            return used
    if init == "init_weights":
        if not _has(model, "init_weights"):
            raise ProbeSetupError(f"{type(model).__qualname__} has no init_weights()")
        model.init_weights()
        used = "init_weights()"
    elif init in ("reset_parameters", "auto"):
        ran = _per_module_hooks(model, init, order, tracker)
        where = "children first" if order == "post" else "parents first"
        root = next((h for h in ROOT_ENTRIES if _has(model, h)), None)
        if root is not None and init == "auto":
            used = f"root {root}() after submodules' reset_parameters()/init_weights() {where}"
        elif "init_weights" in ran:
            used = f"reset_parameters() and init_weights() per module, {where}"
        else:
            used = f"reset_parameters() {where}"
    else:
        resolve_callable(init)(model)
        used = f"{init}(model)"
    return used + _buffer_and_configured_hooks(model, hooks, device)


def _per_module_hooks(model: nn.Module, init: str, order: str, tracker) -> set[str]:
    """Run every module's own ``reset_parameters()`` (every protocol runs every module's own
    hooks: ``metalint.static.protocol``); under ``auto`` its ``init_weights()`` (or the
    root's entry) then patches on top of it, as a fix that gives one class both hooks expects
    (pypots' SCINet: its buffer in ``reset_parameters()``, its children's init in
    ``init_weights()``). The hooks that ran."""
    mods = _post_order(model) if order == "post" else _pre_order(model)
    ran: set[str] = set()
    for path, m in mods:
        hooks_here = [RESET_HOOK]
        if init == "auto":
            entries = ROOT_ENTRIES if path == "" else ROOT_ENTRIES[:1]
            hooks_here += [next((h for h in entries if _has(m, h)), entries[0])]
        for hook in hooks_here:
            if _has(m, hook):
                ran.add(hook)
                _run_hook(m, hook, path, tracker)
    return ran


def _run_hook(m: nn.Module, hook: str, path: str, tracker) -> None:
    """``m.<hook>()``, its writes of a reset counted as the module's at ``path``."""
    if tracker is not None and hook == RESET_HOOK:
        tracker.current = path
    try:
        getattr(m, hook)()
    finally:
        if tracker is not None:
            tracker.current = None


def _buffer_and_configured_hooks(model: nn.Module, hooks: Sequence[str], device) -> str:
    """Run ``init_non_persistent_buffers()`` and the configured ``hooks`` on every module
    that has them (see :func:`run_init`); what ran, as `` + hook()`` for each."""
    used = ""
    for hook in (BUFFER_HOOK, *per_module_hooks(hooks)):
        having = [m for m in model.modules() if _has(m, hook)]
        # a configured hook may re-create its tensors (``register_buffer`` anew): torchtune's
        # recipes call ``rope_init()`` under ``with torch.device(device)``, so it runs under the
        # device the model was materialised on
        on_device = hook != BUFFER_HOOK and device is not None
        with torch.device(device) if on_device else contextlib.nullcontext():
            for m in having:
                getattr(m, hook)()
        if having:
            used += f" + {hook}()"
    return used


def _root_only(model: nn.Module, init: str) -> str | None:
    """``init_weights-only``: the root's entry point and nothing else, no module's own hook;
    ``auto`` runs so when the class's tree materialises it so (a training script's
    ``model.init_weights()`` after ``to_empty()``), as ``check`` judged it. None: ``auto``
    on a class no such site builds."""
    if init == ROOT_ONLY_PROTOCOL:
        entry = next((h for h in ROOT_ENTRIES if _has(model, h)), None)
        if entry is None:
            raise ProbeSetupError(f"{type(model).__qualname__} has no {ROOT_ENTRIES[0]}()")
        getattr(model, entry)()
        return f"root {entry}() only"
    site = materialisation_site(type(model))
    if site is None or site.loads:
        return None  # a checkpoint load is replayed whole (:func:`replay_load`)
    for _, entry in site.runs:
        if not _has(model, entry):
            raise ProbeSetupError(f"{type(model).__qualname__} has no {entry}()")
        getattr(model, entry)()
    ran = " + ".join(f"{entry}()" for _, entry in site.runs)
    return f"root {ran} only, as {site.label.replace('`', '')}"


@functools.lru_cache(maxsize=64)
def materialisation_site(cls: type):
    """The materialisation site of the class's tree that ``--init auto`` replays on an
    instance of ``cls`` (:func:`metalint.static.pipeline.probed_site`: one that runs only
    the root's entry point, else a checkpoint load; the answer ``check`` judges the class's
    tensors under), or None."""
    from metalint.static.pipeline import probed_site, sequences, settled, tree_sites

    file = _class_file(cls)
    if not file:
        return None

    def resolve(name: str) -> str | None:
        module, _, attr = name.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module), attr) if module else None
        except Exception:  # noqa: BLE001 (a name the probe cannot import is not this class)
            return None
        return "root" if obj is cls else None

    def defines(name: str) -> bool:
        # the class's own method (or a base's of the library), not one of torch's
        return any(name in vars(k) for k in cls.__mro__ if not k.__module__.startswith("torch"))

    def known_function(name: str) -> bool:
        try:
            return callable(resolve_callable(name))
        except Exception:  # a name the probe cannot import runs nothing
            return False

    seqs = sequences(tree_sites(file), resolve).get("root", [])
    return probed_site([settled(q, defines, known_function) for q in seqs])


def per_module_hooks(hooks: Sequence[str]) -> tuple[str, ...]:
    """The configured hooks the probe calls on every module after the init entry point: those
    beyond the built-in ones, and public (a private hook is applied by a parent)."""
    return tuple(
        h for h in dict.fromkeys(hooks) if h not in DEFAULT_HOOKS and not h.startswith("_")
    )


class ProbeSetupError(Exception):
    """The probe itself cannot run (bad --init, no init_weights, to_empty or the init entry
    point raised): reported as ML900 for the item."""


class LazyModules(ProbeSetupError):
    """The model holds lazy modules (``nn.LazyLinear``): their tensors get a shape only at the
    first forward, so ``to_empty()`` cannot materialise them (it raises "Attempted to use an
    uninitialized parameter"). Nothing to judge: the probe skips it."""


def _lazy_modules(model: nn.Module) -> list[str]:
    return [
        f"`{path or type(model).__name__}`: {type(m).__name__}"
        for path, m in model.named_modules()
        if any(is_lazy(t) for t in (*m._parameters.values(), *m._buffers.values()) if t is not None)
    ]


def _stage_error(stage: str, exc: BaseException) -> ProbeSetupError:
    site, _ = _raise_site(exc)
    where = f" at {site.short()}" if site else ""
    msg = traceback.format_exception_only(type(exc), exc)[-1].strip()[:300]
    err = ProbeSetupError(f"{stage} raised {msg}{where}")
    err.stage = stage
    return err


def _poison(tensors: dict[str, torch.Tensor], eager: Snapshot) -> dict[str, Any]:
    """Poison every tensor ``to_empty()`` left (not plain attributes, not what is still on
    meta); each one's statistics after (small ones only)."""
    poisons: dict[str, Any] = {}
    seen: set[int] = set()
    for name, t in tensors.items():
        e = eager.entries.get(name)
        if id(t) in seen or (e is not None and e.kind == "attribute") or t.device.type == "meta":
            continue
        seen.add(id(t))
        compare.poison_(t, e.stats if e else None)
        poisons[name] = (
            compare.tensor_stats(t, keep_copy=False) if t.numel() <= compare.SMALL else None
        )
    return poisons


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Build parameters on the meta device and everything else where construction puts it:
    what accelerate's ``init_empty_weights()`` (without ``include_buffers``) does, without
    accelerate: each parameter a module registers is replaced by a meta one of its class."""
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param) -> None:
        register(module, name, param)
        p = module._parameters.get(name)
        if p is not None and p.device.type != "meta":
            extra = {**p.__dict__, "requires_grad": p.requires_grad}
            module._parameters[name] = type(p)(p.detach().to("meta"), **extra)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def replay_load(
    make: Callable[[], nn.Module], device: str, site, seed: int, eager: Snapshot
) -> tuple[nn.Module, str]:
    """Replay a checkpoint-load site (:class:`metalint.static.pipeline.Sequence` with
    ``loads``): build eagerly under ``seed`` and keep its ``state_dict()`` (persistent tensors
    only, as a checkpoint holds them), build the way the site does (every tensor on meta, or
    only the parameters: ``site.meta == "params"``), ``to_empty()`` and poison when the site
    calls it, load with ``assign=True``, then run what the site runs after. A non-persistent
    buffer is in no checkpoint: it stays where the build left it (on meta, or poisoned)."""
    torch.manual_seed(seed)
    reference = make()
    checkpoint = {k: v.detach().to(device) for k, v in reference.state_dict().items()}
    del reference
    build = parameters_on_meta() if site.meta == "params" else torch.device("meta")
    with build:
        model = make()
    if site.to_empty:
        model.to_empty(device=device)
        _, tensors = snapshot(model, None, stats=False)
        _poison(tensors, eager)
        del tensors
    model.load_state_dict(checkpoint, assign=True)
    del checkpoint
    for kind, name in site.runs:
        if kind == "entry":
            if not _has(model, name):
                raise ProbeSetupError(f"{type(model).__qualname__} has no {name}()")
            getattr(model, name)()
        elif kind == "reset":
            for _, m in _post_order(model):
                if _has(m, name):
                    getattr(m, name)()
        else:
            model.apply(resolve_callable(name))
    onto = " onto parameters built on meta" if site.meta == "params" else ""
    ran = "".join(f" + {name}()" for _, name in site.runs)
    where = site.label.replace("`", "")
    return model, f"checkpoint load (assign=True){onto}{ran}, as {where}"
