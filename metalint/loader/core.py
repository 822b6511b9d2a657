"""The streaming loader: a checkpoint into a meta-built model at about 1x memory."""

from __future__ import annotations

import fnmatch
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from metalint.loader import distributed as dist_mod
from metalint.loader.dtype_policy import DtypePolicy
from metalint.loader.errors import CheckpointError
from metalint.loader.formats import Source, open_checkpoint
from metalint.loader.sharding import ShardPlan
from metalint.vocabulary import LOAD_INIT_MODES, MODULE_HOOKS, ROOT_ENTRIES

# --------------------------------------------------------------------------------------------
# report


#: how many names a summarised list of checkpoint keys shows
SHOWN_KEYS = 10


def summarise_keys(names: list[str]) -> str:
    """``names`` as one short phrase: all of them when few, else the first :data:`SHOWN_KEYS`,
    how many more, and the dotted prefix they share."""
    if len(names) <= SHOWN_KEYS:
        return ", ".join(names)
    common = os.path.commonprefix([n.split(".") for n in names])
    prefix = f" (all under '{'.'.join(common)}.')" if common else ""
    return f"{', '.join(names[:SHOWN_KEYS])} and {len(names) - SHOWN_KEYS} more{prefix}"


@dataclass
class VerifyResult:
    compared: int = 0
    identical: int = 0
    mismatches: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # random init: shape/dtype checked only

    @property
    def ok(self) -> bool:
        return not self.mismatches


@dataclass
class LoadReport:
    """What :func:`load_checkpoint` did. ``str(report)`` is the text the CLI prints."""

    checkpoint: str = ""
    format: str = ""
    device: str = "cpu"
    dtype: str | None = None
    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    allowed_missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    #: (name, checkpoint shape, model shape)
    shape_mismatches: list[tuple[str, tuple, tuple]] = field(default_factory=list)
    #: "float32->bfloat16" -> [count, bytes read]
    casts: dict[str, list[int]] = field(default_factory=dict)
    #: tensor name -> the entry point that materialised it, e.g. "RoPE.reset_parameters on 'rope'"
    materialized: dict[str, str] = field(default_factory=dict)
    #: tensors the checkpoint lacks that no init entry point re-created (left on meta)
    unmaterialized: list[str] = field(default_factory=list)
    #: groups of names that are one tensor (ties), checked intact after loading
    tied: list[tuple[str, ...]] = field(default_factory=list)
    #: rank-local shards: name -> (dim, start, stop) for a shard plan; for a DTensor, per dim
    #: the [start, stop] of global indices the local shard holds (a list of runs when strided)
    sharded: dict[str, Any] = field(default_factory=dict)
    bytes_read: int = 0
    #: in a process group with DTensors: this rank, the world size, every rank's bytes_read
    rank: int | None = None
    world_size: int | None = None
    bytes_read_per_rank: list[int] = field(default_factory=list)
    seconds: float = 0.0
    verify: VerifyResult | None = None
    model: nn.Module | None = field(default=None, repr=False)

    def problems(self) -> str:
        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} missing: {summarise_keys(self.missing)}")
        if self.unexpected:
            parts.append(f"{len(self.unexpected)} unexpected: {summarise_keys(self.unexpected)}")
        if self.shape_mismatches:
            mm = ", ".join(
                f"{n} (checkpoint {list(c)} vs model {list(m)})"
                for n, c, m in self.shape_mismatches
            )
            parts.append(f"{len(self.shape_mismatches)} shape mismatch: {mm}")
        if self.unmaterialized:
            parts.append(
                f"{len(self.unmaterialized)} not in the checkpoint and not re-created by any init "
                f"entry point: {summarise_keys(self.unmaterialized)}"
            )
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        out = {
            "checkpoint": self.checkpoint,
            "format": self.format,
            "device": self.device,
            "dtype": self.dtype,
            "loaded": len(self.loaded),
            "missing": self.missing,
            "allowed_missing": self.allowed_missing,
            "unexpected": self.unexpected,
            "shape_mismatches": [[n, list(c), list(m)] for n, c, m in self.shape_mismatches],
            "casts": {k: {"count": v[0], "bytes": v[1]} for k, v in self.casts.items()},
            "materialized": self.materialized,
            "unmaterialized": self.unmaterialized,
            "tied": [list(t) for t in self.tied],
            "bytes_read": self.bytes_read,
            "seconds": round(self.seconds, 4),
        }
        if self.sharded:
            out["sharded"] = {k: list(v) for k, v in self.sharded.items()}
        if self.world_size is not None:
            out["rank"] = self.rank
            out["world_size"] = self.world_size
            out["bytes_read_per_rank"] = self.bytes_read_per_rank
        if self.verify is not None:
            out["verify"] = {
                "compared": self.verify.compared,
                "identical": self.verify.identical,
                "mismatches": self.verify.mismatches,
                "skipped": self.verify.skipped,
            }
        return out

    def _materialised_lines(self) -> list[str]:
        """Shape mismatches, and what the init materialised and did not."""
        lines = [
            f"  shape mismatch: {n}: checkpoint {list(c)} vs model {list(m)}"
            for n, c, m in self.shape_mismatches
        ]
        lines += [f"  materialised by init: {n} <- {how}" for n, how in self.materialized.items()]
        if self.unmaterialized:
            lines.append(
                f"  NOT materialised (no init entry point re-creates them; left on meta): "
                f"{', '.join(self.unmaterialized)}"
            )
        return lines

    def __str__(self) -> str:
        mb = self.bytes_read / 2**20
        lines = [
            f"Loaded {len(self.loaded)} tensors from {self.checkpoint} ({self.format}) "
            f"onto {self.device}: {mb:.1f} MiB read in {self.seconds:.2f}s"
            + (f", dtype {self.dtype}" if self.dtype else ", module dtypes kept"),
        ]
        for k, (n, b) in sorted(self.casts.items()):
            lines.append(f"  cast {k}: {n} tensors, {b / 2**20:.1f} MiB")
        for title, items in (
            ("missing", self.missing),
            ("missing (allowed)", self.allowed_missing),
            ("unexpected", self.unexpected),
        ):
            if items:
                lines.append(f"  {title} ({len(items)}): {', '.join(items)}")
        lines += self._materialised_lines()
        for t in self.tied:
            lines.append(f"  tied: {' = '.join(t)}")
        if self.sharded:
            lines.append(f"  rank-local shards: {len(self.sharded)} tensors")
        if self.bytes_read_per_rank:
            per = ", ".join(f"rank {r}: {b} bytes" for r, b in enumerate(self.bytes_read_per_rank))
            lines.append(f"  bytes read per rank ({self.world_size} ranks): {per}")
        if self.verify is not None:
            lines += _verify_lines(self.verify)
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# model inventory


@dataclass
class _Slot:
    module: nn.Module
    kind: str  # "param" | "buffer"
    attr: str
    name: str
    persistent: bool


@dataclass
class _Group:
    """One tensor object of the model and all the names (ties) it has."""

    tensor: torch.Tensor
    slots: list[_Slot]
    owner_path: str  # module path of the first slot

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.slots]

    @property
    def persistent(self) -> bool:
        return any(s.persistent for s in self.slots)

    @property
    def is_param(self) -> bool:
        return isinstance(self.tensor, nn.Parameter)


def _inventory(model: nn.Module) -> list[_Group]:
    groups: dict[int, _Group] = {}
    for path, mod in model.named_modules(remove_duplicate=False):
        prefix = path + "." if path else ""
        for attr, t in mod._parameters.items():
            if t is None:
                continue
            slot = _Slot(mod, "param", attr, prefix + attr, True)
            groups.setdefault(id(t), _Group(t, [], path)).slots.append(slot)
        for attr, t in mod._buffers.items():
            if t is None:
                continue
            persistent = attr not in mod._non_persistent_buffers_set
            slot = _Slot(mod, "buffer", attr, prefix + attr, persistent)
            groups.setdefault(id(t), _Group(t, [], path)).slots.append(slot)
    return list(groups.values())


# --------------------------------------------------------------------------------------------
# installing tensors, with undo


class _Transaction:
    """Every change to the model goes through here, so a failure can put it back as it was."""

    def __init__(self):
        self._log: list[tuple] = []

    def install(self, group: _Group, value: torch.Tensor) -> None:
        """Make every slot of ``group`` hold ``value`` (keeping Parameter class/requires_grad)."""
        old = group.tensor
        if dist_mod.is_dtensor(old):
            # a new DTensor of the same spec (FSDP2 keeps the object: swap_tensors below)
            new = dist_mod.like(old, value)
        elif isinstance(old, nn.Parameter):
            new = torch.Tensor._make_subclass(type(old), value.detach(), old.requires_grad)
        else:
            new = value.detach() if type(value) is torch.Tensor else value
        if type(new) is not type(old):
            try:
                new.__class__ = type(old)
            except TypeError:
                pass
        try:
            new.__dict__.update(old.__dict__)
        except (AttributeError, TypeError):
            pass
        try:
            torch.utils.swap_tensors(old, new)
        except Exception:
            # Fall back to replacing the object in every slot (identity changes, ties kept).
            for s in group.slots:
                d = s.module._parameters if s.kind == "param" else s.module._buffers
                self._log.append(("dict", d, s.attr, d[s.attr]))
                d[s.attr] = new
            group.tensor = new
            return
        self._log.append(("swap", old, new))

    def set_slot(self, slot: _Slot, value) -> None:
        d = slot.module._parameters if slot.kind == "param" else slot.module._buffers
        self._log.append(("dict", d, slot.attr, d[slot.attr]))
        d[slot.attr] = value

    def rollback(self) -> None:
        for entry in reversed(self._log):
            if entry[0] == "swap":
                torch.utils.swap_tensors(entry[1], entry[2])
            else:
                _, d, key, old = entry
                d[key] = old
        self._log.clear()


# --------------------------------------------------------------------------------------------
# progress


class _Progress:
    def __init__(self, total: int, enabled: bool | None):
        if enabled is None:
            enabled = total >= 256 * 2**20 and sys.stderr.isatty()
        self.enabled = enabled
        self.total = total
        self.done = 0
        self._bar = None
        self._last = 0.0
        if not enabled:
            return
        try:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc="metalint load",
                file=sys.stderr,
                leave=False,
            )
        except ImportError:
            self._bar = None

    def update(self, n: int) -> None:
        if not self.enabled:
            return
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last > 0.2 or self.done >= self.total:
            self._last = now
            pct = 100.0 * self.done / max(self.total, 1)
            sys.stderr.write(
                f"\rmetalint load: {self.done / 2**20:8.1f} / {self.total / 2**20:.1f} MiB "
                f"({pct:5.1f}%)"
            )
            sys.stderr.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
        else:
            sys.stderr.write("\n")
            sys.stderr.flush()


# --------------------------------------------------------------------------------------------
# host -> accelerator


class _Staging:
    """Copies to an accelerator through one reusable pinned host buffer.

    Each tensor is cast on the host straight into the pinned buffer (so the cast is the only
    host-side work and nothing is allocated per tensor), copied to the device, and the buffer
    is reused once the copy has finished. The buffer grows to the largest tensor (in the
    target dtype). Where pinning is not possible it falls back to a plain ``.to(device)``.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._buf: torch.Tensor | None = None
        self._pinned = device.type != "cpu"

    def to_device(self, raw: torch.Tensor, dtype: torch.dtype, device: torch.device):
        nbytes = raw.numel() * torch.empty((), dtype=dtype).element_size()
        if self._pinned and nbytes:
            try:
                if self._buf is None or self._buf.numel() < nbytes:
                    self._buf = None
                    self._buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
                host = self._buf[:nbytes].view(dtype).view(raw.shape)
                host.copy_(raw)
                out = torch.empty(raw.shape, dtype=dtype, device=device)
                out.copy_(host, non_blocking=True)
                if device.type == "cuda":
                    torch.cuda.current_stream(device).synchronize()
                else:
                    torch.accelerator.synchronize()  # pragma: no cover
                return out
            except (RuntimeError, AttributeError):
                self._pinned = False
                self._buf = None
        host = raw if raw.dtype == dtype else raw.to(dtype)
        return host.to(device)

    def release(self) -> None:
        self._buf = None


# --------------------------------------------------------------------------------------------
# init step


def _poison(t: torch.Tensor) -> Any:
    if t.is_floating_point() or t.is_complex():
        t.fill_(float("nan"))
        return "nan"
    if t.dtype == torch.bool:
        return None
    info = torch.iinfo(t.dtype)
    sentinel = info.max if info.min == 0 else info.min
    t.fill_(sentinel)
    return sentinel


def _written(t: torch.Tensor, poison) -> bool:
    if t.device.type == "meta":
        return False
    t = dist_mod.local(t)  # a DTensor: this rank's shard, no collective
    if poison is None:
        return True
    if t.numel() == 0:
        return True
    if poison == "nan":
        return not bool(torch.isnan(t).any())
    return not bool((t == poison).any())


def _hooks_for(module: nn.Module, is_root: bool, init) -> list[str]:
    if callable(init) and not isinstance(init, str):
        return ["<callable>"] if is_root else []
    if init == "none":
        return []
    if init == "auto":
        names = list(MODULE_HOOKS) + (list(ROOT_ENTRIES) if is_root else [])
    elif init == "init_weights":
        names = ["init_weights"] if is_root else []
    else:
        names = [init]
    return [n for n in names if callable(getattr(module, n, None))]


def _runner_for(group: _Group, modules: dict[str, nn.Module], init) -> str | None:
    """The nearest module (owner, then ancestors) that has an init entry point."""
    path = group.owner_path
    while True:
        if _hooks_for(modules[path], path == "", init):
            return path
        if path == "":
            return None
        path = path.rsplit(".", 1)[0] if "." in path else ""


def _subtree_groups(groups: list[_Group], path: str) -> list[_Group]:
    if path == "":
        return groups
    pre = path + "."
    return [g for g in groups if any(s.name.startswith(pre) for s in g.slots)]


def _materialize(
    tx: _Transaction,
    groups: list[_Group],
    targets: list[_Group],
    modules: dict[str, nn.Module],
    runners: dict[int, str],
    init,
    device: torch.device,
    policy: DtypePolicy,
    report: LoadReport,
) -> list[_Group]:
    """Run init entry points for ``targets``; return the groups none of them re-created.

    A target that is a DTensor is allocated as a DTensor of the same spec (its local shard on
    ``device``), so the hook initialises it under the model's sharding."""
    by_runner: dict[str, list[_Group]] = {}
    for g in targets:
        by_runner.setdefault(runners[id(g)], []).append(g)
    order = {p: i for i, (p, _) in enumerate(modules.items())}
    # post-order: deeper modules first, children before parents
    failed: list[_Group] = []
    for path in sorted(by_runner, key=lambda p: (-(p.count(".") + (p != "")), -order[p])):
        mine = by_runner[path]
        poisons = {}
        for g in mine:
            value = torch.empty_like(g.tensor, device=device)
            poisons[id(g)] = _poison(value)
            tx.install(g, value)
        hidden = _hide_subtree(groups, path, mine)
        try:
            _run_hooks(tx, modules[path], path, mine, poisons, init, device, report)
        finally:
            for s, obj in reversed(hidden):
                _slot_dict(s)[s.attr] = obj
        for g in mine:
            if g.names[0] not in report.materialized:
                failed.append(g)
                continue
            target = policy.target(g.names[0], g.tensor.dtype)
            if g.tensor.dtype != target:
                tx.install(g, g.tensor.detach().to(target))
    return failed


def _slot_dict(s: _Slot) -> dict:
    return s.module._parameters if s.kind == "param" else s.module._buffers


def _hide_subtree(groups: list[_Group], path: str, mine: list[_Group]) -> list[tuple[_Slot, Any]]:
    """Hide every other tensor of the runner's subtree behind a meta placeholder, so the hook
    cannot overwrite loaded (or already materialised) values; returns what to put back."""
    mine_ids = {id(g) for g in mine}
    hidden: list[tuple[_Slot, Any]] = []
    for g in _subtree_groups(groups, path):
        if id(g) in mine_ids:
            continue
        ph = torch.empty_like(g.tensor, device="meta")
        if isinstance(g.tensor, nn.Parameter):
            ph = nn.Parameter(ph, requires_grad=g.tensor.requires_grad)
        for s in g.slots:
            d = _slot_dict(s)
            hidden.append((s, d[s.attr]))
            d[s.attr] = ph
    return hidden


def _run_hooks(tx, runner, path, mine, poisons, init, device, report) -> None:
    """Run the runner's hooks, in order, until every tensor of ``mine`` is written."""
    label = type(runner).__name__
    where = f"'{path}'" if path else "the root"
    try:
        for hook in _hooks_for(runner, path == "", init):
            with torch.no_grad(), torch.device(device):
                if hook == "<callable>":
                    init(runner)
                    used = f"{getattr(init, '__name__', 'init')}() on the root"
                else:
                    getattr(runner, hook)()
                    used = f"{label}.{hook}() on {where}"
            _adopt_new_objects(tx, mine, poisons, device)
            for g in mine:
                if g.names[0] not in report.materialized and _written(g.tensor, poisons[id(g)]):
                    for n in g.names:
                        report.materialized[n] = used
            if all(g.names[0] in report.materialized for g in mine):
                break
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"init entry point {label} on {where} failed: {type(exc).__name__}: {exc}"
        ) from exc


def _adopt_new_objects(tx, mine, poisons, device) -> None:
    """A hook may register new objects (``register_buffer`` anew): install their values into
    the model's own tensors, so ties and the undo log stay right."""
    for g in mine:
        s = g.slots[0]
        cur = _slot_dict(s).get(s.attr)
        if cur is not None and cur is not g.tensor:
            val = cur.detach().to(device=device, dtype=g.tensor.dtype)
            for s2 in g.slots:
                _slot_dict(s2)[s2.attr] = g.tensor
            tx.install(g, val)
            poisons[id(g)] = None


# --------------------------------------------------------------------------------------------
# the loader


def _build_on_meta(factory: Callable[[], nn.Module]) -> nn.Module:
    with torch.device("meta"):
        model = factory()
    if not isinstance(model, nn.Module):
        raise TypeError(f"the model factory returned {type(model).__name__}, not an nn.Module")
    return model


def load_checkpoint(
    model: nn.Module | Callable[[], nn.Module],
    checkpoint,
    *,
    dtype=None,
    device="cpu",
    keep_in_fp32: Iterable[str] | str = (),
    strict: bool = True,
    init="auto",
    allow_missing: Iterable[str] = (),
    shard_plan=None,
    rank: int | None = None,
    world_size: int | None = None,
    progress: bool | None = None,
) -> LoadReport:
    """Stream ``checkpoint`` into ``model`` one tensor at a time; return a :class:`LoadReport`.

    ``model`` is an ``nn.Module`` (typically built under ``torch.device("meta")``) or a zero-arg
    factory, which is then called under ``torch.device("meta")``; the model is
    ``report.model`` either way. ``checkpoint`` is any format :func:`open_checkpoint` reads.

    Steps: open and validate every header of the checkpoint; match its keys against the model
    (ties: a tensor with several names is loaded once, from the last of its names the
    checkpoint holds, as sequential ``load_state_dict`` copies would leave it; it counts as
    missing only if none of its names is there); with ``strict=True`` raise on any missing,
    unexpected or shape-mismatched key, all of them listed. Then, for each tensor: read exactly
    its bytes (or its shard's), cast per the dtype policy straight into a fresh tensor on
    ``device``, release the source. Only when every tensor has been read are they installed
    into the model (``torch.utils.swap_tensors``: the ``Parameter`` objects, their subclass,
    ``requires_grad``, attributes and ties are kept). Last, tensors the checkpoint lacks are
    materialised through the init entry point, and nothing may be left on meta.

    Dtype policy (:mod:`metalint.loader.dtype_policy`): ``dtype=None`` keeps each module
    tensor's dtype (as ``load_state_dict``, not ``assign=True``); a dtype casts floating
    tensors only; ``keep_in_fp32`` patterns match module path segments; int/bool never cast.

    Init step (``init``): for every tensor still on meta after loading (missing keys allowed by
    ``allow_missing`` or ``strict=False``, non-persistent buffers, shape mismatches with
    ``strict=False``), find the nearest module -- its owner, then its ancestors -- that has an
    entry point: with ``"auto"``, ``reset_parameters``, timm's
    ``init_non_persistent_buffers``, ``_reset_parameters`` (``nn.MultiheadAttention``), and on
    the root also its entry point, ``init_weights`` then ``init_states`` (torchtitan), the
    same ones ``metalint check`` reads (:data:`metalint.vocabulary.ROOT_ENTRIES`);
    ``"reset_parameters"``/``"init_non_persistent_buffers"``: only that one; ``"init_weights"``: only the root's; a callable: called on the root;
    ``"none"``: nothing. Runners go children first. While a runner's hook runs, every *other*
    tensor of its subtree (loaded ones, and ones materialised by a deeper hook) is swapped out
    for a meta placeholder and put back afterwards, so an init step never overwrites a loaded
    tensor, at no extra memory. The tensors it must create are allocated on ``device`` in the
    module's dtype and poisoned (NaN / an int sentinel); a hook counts as having materialised
    a tensor only if no poison is left, then the dtype policy is applied (a RoPE buffer is
    computed in fp32, then cast, as an eager model cast with ``.to(dtype)`` would be). Tensors
    no entry point re-creates (e.g. a non-persistent buffer computed in ``__init__`` of a module
    without hooks) are listed in ``report.unmaterialized``; with ``strict=True`` that is an
    error, with ``strict=False`` they stay on meta.

    No partially loaded model: every check that can fail is done before the model is touched;
    a read error mid-way drops the tensors read so far and leaves the model as it was; a
    failure in the init step (or the final checks) swaps every installed tensor back. Either
    way :class:`CheckpointError` is raised and the caller's model is unchanged.

    Memory: the loader holds one source tensor (usually a view of the page cache, so no
    anonymous memory) and the tensors read so far, i.e. the final model size. A model passed
    in already materialised (not on meta) keeps its old tensors alive until the new ones are
    installed, so it peaks at about twice its size; build it on meta (or pass a factory).

    Not replayed: a module's ``_load_from_state_dict`` override and load_state_dict pre/post
    hooks (key renames, fused-weight splits); checkpoints must use the model's state-dict keys.

    Sharded models (FSDP2 ``fully_shard``, ``parallelize_module``, any DTensor): a parameter or
    buffer that is a DTensor (1-D or 2-D mesh, ``Shard(d)``/``Replicate()``, uneven or strided
    shards) is read as its local shard only (safetensors ``get_slice``, a view of the mmap-ed
    torch zip, DCP reading into a DTensor of the same spec), cast by the dtype policy, and
    installed as a DTensor of the same mesh and placements, keeping ``requires_grad`` and the
    object FSDP2 holds (:mod:`metalint.loader.distributed`). Missing tensors are allocated as
    DTensors of their spec before their init entry point runs. The ranks exchange errors
    after reading and at the end: one rank's failure is a one-line error on every rank, and
    every rank's model is left unchanged. ``report.bytes_read_per_rank`` lists what each rank
    read.

    ``shard_plan`` (see :mod:`metalint.loader.sharding`) with ``rank`` and ``world_size``
    (default: from the initialised process group) is the older form for plain tensors: each
    rank reads and holds only its slice of the split tensors, without a process group.
    """
    t0 = time.perf_counter()
    policy = DtypePolicy.make(dtype, keep_in_fp32)
    device = torch.device(device)
    if init not in LOAD_INIT_MODES and not callable(init):
        raise ValueError(f"init must be one of {', '.join(LOAD_INIT_MODES)} or a callable")
    if not isinstance(model, nn.Module):
        if not callable(model):
            raise TypeError("model must be an nn.Module or a zero-argument factory")
        model = _build_on_meta(model)
    shards = None
    if shard_plan is not None:
        if rank is None or world_size is None:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                rank = dist.get_rank() if rank is None else rank
                world_size = dist.get_world_size() if world_size is None else world_size
            else:
                rank, world_size = rank or 0, world_size or 1
        shards = ShardPlan.make(shard_plan, rank, world_size)
    allow = tuple(allow_missing)

    report = LoadReport(
        checkpoint=str(checkpoint),
        device=str(device),
        model=model,
        dtype=str(policy.dtype).removeprefix("torch.") if policy.dtype else None,
    )
    _load(model, checkpoint, policy, device, strict, init, allow, shards, progress, report)
    report.seconds = time.perf_counter() - t0
    return report


@dataclass
class _Plan:
    """What the loader will do, decided from the checkpoint's headers before any read."""

    groups: list[_Group]
    modules: dict[str, nn.Module]
    to_load: list[tuple[_Group, str]] = field(default_factory=list)  # (group, checkpoint name)
    to_init: list[_Group] = field(default_factory=list)  # on meta, not in the checkpoint
    keep: list[_Group] = field(default_factory=list)  # already materialised, not in it
    runners: dict[int, str] = field(default_factory=dict)  # id(group) -> module path
    unrecoverable: list[str] = field(default_factory=list)


def _plan(model, src, init, allow, strict, report) -> _Plan:
    """Match the checkpoint's keys against the model; raise (strict) before touching it."""
    plan = _Plan(_inventory(model), dict(model.named_modules(remove_duplicate=False)))
    entries = src.entries
    known: set[str] = set()
    for g in plan.groups:
        # non-persistent buffers are not state-dict keys: a checkpoint entry with such a name
        # is unexpected, as for load_state_dict
        keys = [s.name for s in g.slots if s.persistent]
        known.update(keys)
        present = [n for n in keys if n in entries]
        bad = [
            (n, entries[n].shape, tuple(g.tensor.shape))
            for n in present
            if tuple(entries[n].shape) != tuple(g.tensor.shape)
        ]
        report.shape_mismatches.extend(bad)
        if present and not bad:
            plan.to_load.append((g, present[-1]))
            continue
        if not present and g.persistent:
            names = [n for n, s in zip(g.names, g.slots) if s.persistent]
            if any(fnmatch.fnmatchcase(n, p) for n in g.names for p in allow):
                report.allowed_missing.extend(names)
            else:
                report.missing.extend(names)
        (plan.to_init if g.tensor.device.type == "meta" else plan.keep).append(g)
    report.unexpected = [n for n in entries if n not in known]
    report.unexpected += list(getattr(src, "non_tensors", []))
    report.tied = [tuple(g.names) for g in plan.groups if len(g.slots) > 1]
    for g in plan.to_init:
        r = _runner_for(g, plan.modules, init)
        if r is None:
            plan.unrecoverable.extend(g.names)
        else:
            plan.runners[id(g)] = r
    if strict:
        pre = LoadReport(
            missing=report.missing,
            unexpected=report.unexpected,
            shape_mismatches=report.shape_mismatches,
            unmaterialized=plan.unrecoverable,
        )
        if pre.problems():
            raise CheckpointError(pre.problems(), file=src.path)
    return plan


def _read_one(src, name, g, shards, report):
    """The bytes of checkpoint entry ``name`` this rank needs for ``g``: its DTensor's local
    shard, the shard plan's slice, or the whole tensor. Returns ``(raw, nbytes)``."""
    if dist_mod.is_dtensor(g.tensor):
        raw, nbytes, runs = dist_mod.read_local(src, name, g.tensor)
        report.sharded[name] = dist_mod.describe_runs(runs)
        return raw, nbytes
    sl = shards.local_slice(name, src.entries[name].shape) if shards is not None else None
    raw = src.read(name, *sl) if sl else src.read(name)
    if sl:
        report.sharded[name] = sl
    return raw, raw.numel() * raw.element_size()


def _stream(plan, src, policy, device, shards, progress, report) -> dict[int, torch.Tensor]:
    """Read, cast and keep every tensor to load (its local shard for a DTensor); the model is
    not touched. Returns id(group) -> the new (local) tensor."""
    entries = src.entries
    ordered = sorted(plan.to_load, key=lambda gs: (entries[gs[1]].file, entries[gs[1]].begin or 0))
    bar = _Progress(sum(entries[name].nbytes for _, name in ordered), progress)
    stage = _Staging(device)
    values: dict[int, torch.Tensor] = {}
    try:
        for g, name in ordered:
            e = entries[name]
            raw, nbytes = _read_one(src, name, g, shards, report)
            target = policy.target(name, g.tensor.dtype)
            try:
                if device.type == "cpu":
                    t = raw.to(dtype=target, copy=not src.owned_reads)
                else:
                    t = stage.to_device(raw, target, device)
                if not t.is_contiguous():
                    t = t.contiguous()
            except Exception as exc:
                raise CheckpointError(
                    f"read failed: {type(exc).__name__}: {exc}", file=e.file, tensor=name
                ) from exc
            report.bytes_read += nbytes
            if raw.dtype != target:
                key = f"{_dtype_name(raw.dtype)}->{_dtype_name(target)}"
                c = report.casts.setdefault(key, [0, 0])
                c[0] += 1
                c[1] += nbytes
            del raw
            values[id(g)] = t
            report.loaded.append(name)
            bar.update(e.nbytes)
    finally:
        bar.close()
        stage.release()
    return values


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _install(model, plan, values, tx, policy, device, init, strict, report, path) -> None:
    """Install what was read, then materialise the rest through the init entry point."""
    for g, _ in plan.to_load:
        tx.install(g, values.pop(id(g)))
    for g in plan.keep:
        target = policy.target(g.names[0], g.tensor.dtype)
        if g.tensor.dtype != target or g.tensor.device != device:
            tx.install(g, g.tensor.detach().to(device=device, dtype=target))
    recoverable = [g for g in plan.to_init if id(g) in plan.runners]
    failed = _materialize(
        tx, plan.groups, recoverable, plan.modules, plan.runners, init, device, policy, report
    )
    unrecoverable = list(plan.unrecoverable)
    for g in failed:
        unrecoverable.extend(g.names)
        tx.install(g, torch.empty_like(g.tensor, device="meta"))
    report.unmaterialized = unrecoverable
    if strict and unrecoverable:
        raise CheckpointError(
            f"{len(unrecoverable)} not in the checkpoint and not re-created by any init entry "
            f"point: {', '.join(unrecoverable)}",
            file=path,
        )
    _check_installed(model, plan.groups, unrecoverable, path)


def _check_installed(model, groups, unrecoverable, path) -> None:
    left = [
        n
        for n, t in list(model.named_parameters(remove_duplicate=False))
        + list(model.named_buffers(remove_duplicate=False))
        if t.device.type == "meta" and n not in unrecoverable
    ]
    if left:
        raise CheckpointError(f"still on meta after loading: {', '.join(left)}", file=path)
    for g in groups:
        if len(g.slots) > 1:
            objs = {id(_slot_dict(s)[s.attr]) for s in g.slots}
            if len(objs) != 1:
                raise CheckpointError(f"tie broken: {' = '.join(g.names)}", file=path)


def _load(model, checkpoint, policy, device, strict, init, allow, shards, progress, report):
    """open -> plan -> stream -> install. With DTensors in a process group the ranks agree
    after the reads and again at the end (every rank takes part in both, failed or not): when
    one rank fails, every rank raises (one line) and every rank's model is left as it was."""
    collective = dist_mod.process_group() is not None and any(
        dist_mod.is_dtensor(g.tensor) for g in _inventory(model)
    )
    error: Exception | None = None
    src: Source | None = None
    tx = _Transaction()
    try:
        try:
            src = open_checkpoint(checkpoint)
            report.format = src.kind
            plan = _plan(model, src, init, allow, strict, report)
            values = _stream(plan, src, policy, device, shards, progress, report)
        except CheckpointError as exc:
            error = exc
        if collective:
            error = dist_mod.agree(error)
        if error is None:
            try:
                _install(model, plan, values, tx, policy, device, init, strict, report, src.path)
            except CheckpointError as exc:
                error = exc
    except BaseException:
        tx.rollback()
        raise
    finally:
        if src is not None:
            src.close()
    if collective:
        error = dist_mod.agree(error)
        report.rank, report.world_size = dist_mod.process_group()
        report.bytes_read_per_rank = dist_mod.gather_int(report.bytes_read) if not error else []
    if error is not None:
        tx.rollback()
        raise error


def _verify_lines(v) -> list[str]:
    """The report's lines of ``--verify``: how many tensors are identical to an eager load,
    each that differs, those only checked for shape and dtype."""
    verdict = "identical" if v.ok else f"{len(v.mismatches)} DIFFER"
    lines = [
        f"  verify against eager load_state_dict: {v.identical}/{v.compared} compared "
        f"tensors identical -> {verdict}"
    ]
    lines += [f"    differs: {m}" for m in v.mismatches]
    if v.skipped:
        lines.append(f"    randomly initialised, shape/dtype checked only: {', '.join(v.skipped)}")
    return lines
