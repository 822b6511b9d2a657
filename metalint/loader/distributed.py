"""Loading into DTensors (FSDP2 ``fully_shard``, tensor parallel), and the rank launcher.

Sharding is what the model says it is: a parameter or buffer that is a ``DTensor`` carries its
device mesh and placements (``Shard(d)``, ``Replicate()``, FSDP2's ``_StridedShard`` under TP),
and the loader reads exactly the elements of the rank's local shard:

- :func:`local_runs` computes, per dimension, which global indices the local shard holds, by
  letting DTensor itself split a 1-D ``arange`` of that dimension with the placements that shard
  it (``distribute_tensor(..., src_data_rank=None)``: local, no communication). Uneven shards,
  empty shards and nested (strided) shards come out as DTensor lays them out;
- :func:`read_local` reads those index ranges (one box when they are contiguous, as for
  ``Shard(d)``: safetensors ``get_slice``, a view of the mmap-ed torch zip file), or, for a DCP
  folder, lets ``torch.distributed.checkpoint`` read (and reshard) into a DTensor of the same
  spec;
- :func:`like` wraps a local tensor as a DTensor with the spec of the tensor it replaces (and
  as a ``Parameter`` with its ``requires_grad``); the loader swaps it in with
  ``torch.utils.swap_tensors``, so the object FSDP2 holds is the one in the module and FSDP2
  re-pads it at its lazy init;
- :func:`agree` turns one rank's error into the same one-line error on every rank, so all of
  them roll back.

:func:`launch` runs ``python -m <module> ...`` on N ranks torchrun-style (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), and :func:`shard_model`
applies ``--shard fsdp|tp|fsdp+tp``; ``metalint load`` and ``metalint probe`` use both.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

import torch
from torch import nn

from metalint.loader.errors import CheckpointError
from metalint.vocabulary import SHARD_LAYOUTS


def is_dtensor(t) -> bool:
    # no DTensor can exist before torch.distributed.tensor is imported: keep the plain path cheap
    if "torch.distributed.tensor" not in sys.modules:
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def process_group() -> tuple[int, int] | None:
    """``(rank, world_size)`` of the initialised default process group, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


# --------------------------------------------------------------------------------------------
# which elements a rank holds


def _dim_indices(t, dim: int) -> list[int]:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard

    placements = []
    for p in t.placements:
        if isinstance(p, _StridedShard) and p.dim == dim:
            placements.append(_StridedShard(0, split_factor=p.split_factor))
        elif p.is_shard() and p.dim == dim:
            placements.append(Shard(0))
        else:
            placements.append(Replicate())
    full = torch.arange(t.shape[dim])
    if all(not p.is_shard() for p in placements):
        return full.tolist()
    local = distribute_tensor(full, t.device_mesh, placements, src_data_rank=None)
    return local.to_local().tolist()


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i in indices:
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def local_runs(t) -> list[list[tuple[int, int]]]:
    """Per dimension of the DTensor ``t``, the ``[start, stop)`` runs of global indices that
    this rank's local shard holds, in local order."""
    return [_runs(_dim_indices(t, d)) for d in range(t.ndim)]


def local_shape(runs: list[list[tuple[int, int]]]) -> tuple[int, ...]:
    return tuple(sum(b - a for a, b in r) for r in runs)


def describe_runs(runs: list[list[tuple[int, int]]]) -> list:
    """JSON-able: per dim ``[start, stop]`` (one run) or a list of runs."""
    return [list(r[0]) if len(r) == 1 else [list(x) for x in r] for r in runs]


# --------------------------------------------------------------------------------------------
# reading a local shard


def _assemble(read, runs, dim: int = 0, box: tuple = ()) -> torch.Tensor:
    if dim == len(runs):
        return read(box)
    parts = [_assemble(read, runs, dim + 1, box + (slice(a, b),)) for a, b in runs[dim]]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim)


def read_local(src, name: str, t) -> tuple[torch.Tensor, int, list]:
    """Read the local shard of checkpoint entry ``name`` for the DTensor ``t``.

    Returns ``(tensor in the stored dtype, bytes read, runs)``. Only the shard's elements are
    read; a replicated dimension is read whole."""
    e = src.entries[name]
    runs = local_runs(t)
    shape = local_shape(runs)
    if src.kind == "dcp":
        return _read_dcp(src, name, t, runs), _dcp_bytes(src, name, runs), runs
    if 0 in shape:
        return torch.empty(shape, dtype=e.dtype), 0, runs
    if shape == tuple(e.shape):
        raw = src.read(name)
    else:
        raw = _assemble(lambda box: src.read_box(name, box), runs)
    return raw, raw.numel() * raw.element_size(), runs


def _read_dcp(src, name: str, t, runs) -> torch.Tensor:
    """DCP reads (and reshards) into a DTensor of ``t``'s spec: the local shard only."""
    from torch.distributed.tensor import DTensor

    e = src.entries[name]
    local = torch.empty(local_shape(runs), dtype=e.dtype)
    dt = DTensor.from_local(
        local, t.device_mesh, t.placements, run_check=False, shape=t.shape, stride=t.stride()
    )
    src.load_into({name: dt})
    return dt.to_local()


def _dcp_bytes(src, name: str, runs) -> int:
    """Bytes of the stored DCP chunks that overlap the local shard: what ``FileSystemReader``
    reads (it reads a stored chunk whole, then narrows it)."""
    e = src.entries[name]
    total = 0
    for c in getattr(src, "chunks", {}).get(name, ()):
        overlap = all(
            any(a < off + size and off < b for a, b in r)
            for r, off, size in zip(runs, c.offsets, c.sizes)
        )
        if overlap:
            n = 1
            for s in c.sizes:
                n *= s
            total += n * e.itemsize
    return total


# --------------------------------------------------------------------------------------------
# installing a local shard


def like(old, value: torch.Tensor):
    """``value`` (a local shard, or a DTensor) as a DTensor with ``old``'s mesh, placements and
    global shape, and a ``Parameter`` with ``old.requires_grad`` when ``old`` is one."""
    from torch.distributed.tensor import DTensor

    if not isinstance(value, DTensor):
        value = DTensor.from_local(
            value.detach(),
            old.device_mesh,
            old.placements,
            run_check=False,
            shape=old.shape,
            stride=old.stride(),
        )
    else:
        value = value.detach()
    if isinstance(old, nn.Parameter):
        return nn.Parameter(value, requires_grad=old.requires_grad)
    return value


def local(t) -> torch.Tensor:
    return t.to_local() if is_dtensor(t) else t


# --------------------------------------------------------------------------------------------
# every rank gives the same answer


def agree(error: Exception | None) -> Exception | None:
    """Exchange errors between the ranks: None when no rank failed, else this rank's own error,
    or a one-line error naming the first rank that failed."""

    mine = None if error is None else str(error).replace("\n", " ")
    everyone = gather_text(mine)
    if error is not None:
        return error
    for r, msg in enumerate(everyone):
        if msg is not None:
            return CheckpointError(f"rank {r} failed, nothing installed on any rank: {msg}")
    return None


def comm_device() -> torch.device:
    """Where collective buffers live: the current CUDA device under NCCL, else the CPU."""
    import torch.distributed as dist

    if dist.get_backend() == "nccl":  # pragma: no cover - needs a GPU
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gather_text(text: str | None) -> list[str | None]:
    """Every rank's ``text`` (tensors only: ``all_gather_object`` needs numpy)."""
    import torch.distributed as dist

    data = b"" if text is None else b"\x01" + text.encode("utf-8", "replace")
    sizes = gather_int(len(data))
    buf = torch.zeros(max(max(sizes), 1), dtype=torch.uint8)
    if data:
        buf[: len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    buf = buf.to(comm_device())
    out = [torch.empty_like(buf) for _ in sizes]
    dist.all_gather(out, buf)
    return [
        bytes(o[1:n].cpu().tolist()).decode("utf-8", "replace") if n else None
        for o, n in zip(out, sizes)
    ]


def gather_int(n: int) -> list[int]:
    import torch.distributed as dist

    out = torch.zeros(dist.get_world_size(), dtype=torch.int64, device=comm_device())
    out[dist.get_rank()] = n
    dist.all_reduce(out)
    return out.cpu().tolist()


# --------------------------------------------------------------------------------------------
# sharding a model for `--shard`

#: the attention and MLP projections of a llama (torchtitan: ``wq``/``wk``/``wv``/``wo``,
#: ``w1``/``w3``/``w2``; transformers: ``q_proj``/``k_proj``/``v_proj``/``o_proj``,
#: ``gate_proj``/``up_proj``/``down_proj``) and of a timm ViT (``qkv``/``proj``,
#: ``fc1``/``fc2``): column-wise in, row-wise out, as Megatron pairs them
COLWISE_NAMES = frozenset(
    ("wq", "wk", "wv", "w1", "w3", "q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
    + ("qkv", "fc1")
)
ROWWISE_NAMES = frozenset(("wo", "w2", "o_proj", "down_proj", "proj", "fc2"))


def _match(pattern: str, name: str) -> bool:
    """``pattern`` matches the dotted ``name`` segment by segment (``layers.*`` matches
    ``layers.0``, not ``layers.0.attention``), as ``parallelize_module`` and transformers' tensor
    parallel plans read their keys."""
    import fnmatch

    pat, parts = pattern.split("."), name.split(".")
    return len(pat) == len(parts) and all(fnmatch.fnmatchcase(n, p) for p, n in zip(pat, parts))


def _no_forward(m: nn.Module) -> bool:
    """A container FSDP2 refuses: a ``ModuleList``/``ModuleDict`` without its own ``forward``."""
    return isinstance(m, (nn.ModuleList, nn.ModuleDict)) and type(m).forward is nn.Module.forward


def _has_params(m: nn.Module) -> bool:
    return any(True for _ in m.parameters())


def _blocks(model: nn.Module) -> list[str]:
    """The repeated blocks of ``model``: the modules of the classes its ``_no_split_modules``
    names (transformers; what accelerate's FSDP2 auto-wrap shards), else the children of every
    layer container (``ModuleList``, ``ModuleDict``, ``Sequential``) that are themselves made of
    modules (torchtitan's ``model.layers`` values, timm's ``blocks``); a container inside a
    container is walked through, a block is not."""
    no_split: set[str] = set()
    for m in model.modules():
        names = getattr(m, "_no_split_modules", None)
        if isinstance(names, (list, tuple, set, frozenset)):
            no_split |= {n for n in names if isinstance(n, str)}
    found = [n for n, m in model.named_modules() if n and type(m).__name__ in no_split]
    if found:
        return found

    def walk(prefix: str, parent: nn.Module) -> None:
        container = isinstance(parent, (nn.ModuleList, nn.ModuleDict, nn.Sequential))
        for c, m in parent.named_children():
            name = prefix + c
            if container and not isinstance(m, (nn.ModuleList, nn.ModuleDict, nn.Sequential)):
                if _has_params(m) and any(True for _ in m.children()):
                    found.append(name)
                    continue
            walk(name + ".", m)

    walk("", model)
    return found


def _expand(model: nn.Module, name: str) -> list[str]:
    """``name``, or for a container without ``forward`` its children (recursively)."""
    m = model.get_submodule(name)
    if not _no_forward(m):
        return [name] if _has_params(m) else []
    return [u for c, _ in m.named_children() for u in _expand(model, f"{name}.{c}")]


def fsdp_units(model: nn.Module, modules: Sequence[str] = ()) -> list[str]:
    """The submodules ``--shard fsdp`` applies ``fully_shard`` to before the root, deepest
    first; never a container without ``forward`` (FSDP2 refuses them: a ``ModuleList`` stands
    for its children).

    ``modules`` (``[tool.metalint.probe] fsdp-modules``): module-name globs (per dotted segment)
    or class names, each of which must match. Without it: the model's repeated blocks
    (:func:`_blocks`), then the root's children that hold parameters outside them (torchtitan shards
    ``tok_embeddings`` and ``output`` apart from the root too), leaving to the root any module
    whose parameters are shared with a module outside it (tied embeddings)."""
    if modules:
        names = []
        for pattern in modules:
            hits = [
                n
                for n, m in model.named_modules()
                if n and (_match(pattern, n) or type(m).__name__ == pattern)
            ]
            if not hits:
                raise ValueError(
                    f"[tool.metalint.probe] fsdp-modules: {pattern!r} matches no module "
                    f"of {type(model).__name__}"
                )
            names += hits
    else:
        names = _blocks(model)
        inside = {id(p) for n in names for p in model.get_submodule(n).parameters()}
        names += [
            n for n, m in model.named_children() if any(id(p) not in inside for p in m.parameters())
        ]
    owners: dict[int, list[str]] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        owners.setdefault(id(p), []).append(n)

    def self_contained(unit: str) -> bool:
        return all(
            o.startswith(unit + ".")
            for p in model.get_submodule(unit).parameters()
            for o in owners[id(p)]
        )

    units = dict.fromkeys(u for n in names for u in _expand(model, n))
    keep = [u for u in units if modules or self_contained(u)]
    return sorted(keep, key=lambda u: -u.count("."))


def tp_plan(model: nn.Module, plan: dict[str, str] | None = None) -> dict[str, str]:
    """Module name -> ``"colwise"`` | ``"rowwise"`` for ``--shard tp``.

    ``plan`` (``[tool.metalint.probe] tp-plan``: module-name globs, each of which must match),
    else the model's own ``tp_plan``/``_tp_plan`` (transformers: ``colwise_gather_output`` is
    column-wise, ``embedding_rowwise`` row-wise; styles that are not a split of the weights are
    left out), else, in every block, the llama and ViT projections by name
    (:data:`COLWISE_NAMES`, :data:`ROWWISE_NAMES`), any other ``Linear`` column-wise and every
    ``Embedding`` row-wise."""
    names = [n for n, _ in model.named_modules() if n]
    own = getattr(model, "tp_plan", None) or getattr(model, "_tp_plan", None)
    source = plan or (own if isinstance(own, dict) else None)
    out: dict[str, str] = {}
    if source:
        for pattern, style in source.items():
            kind = next((k for k in ("colwise", "rowwise") if k in str(style)), None)
            hits = [n for n in names if _match(pattern, n)]
            if plan and not hits:
                raise ValueError(
                    f"[tool.metalint.probe] tp-plan: {pattern!r} matches no module "
                    f"of {type(model).__name__}"
                )
            for n in hits:
                if kind is not None:
                    out.setdefault(n, kind)
        return out
    for name, m in model.named_modules():
        leaf = name.rpartition(".")[2]
        if name and isinstance(m, nn.Linear):
            out[name] = "rowwise" if leaf in ROWWISE_NAMES else "colwise"
        elif name and isinstance(m, nn.Embedding):
            out[name] = "rowwise"
    return out


def shard_model(
    model: nn.Module,
    shard: str,
    device_type: str = "cpu",
    *,
    fsdp_modules: Sequence[str] = (),
    tp: dict[str, str] | None = None,
) -> nn.Module:
    """Shard ``model`` (built on meta) over the default process group: ``fsdp``: FSDP2
    ``fully_shard`` on each of :func:`fsdp_units`, then the root (1-D mesh); ``tp``:
    ``parallelize_module`` on each module of :func:`tp_plan` (1-D mesh); ``fsdp+tp``: a 2-D
    mesh ``(world / 2, 2)``, tensor parallel on the inner dimension, FSDP2 on the outer.
    ``fsdp_modules`` and ``tp`` are the user's plans (``[tool.metalint.probe]``)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if shard not in SHARD_LAYOUTS:
        raise ValueError(f"--shard must be one of {', '.join(SHARD_LAYOUTS)}")
    if shard == "fsdp+tp":
        if world % 2:
            raise ValueError(f"--shard fsdp+tp needs an even number of ranks, not {world}")
        mesh = init_device_mesh(device_type, (world // 2, 2), mesh_dim_names=("dp", "tp"))
        dp, tp_mesh = mesh["dp"], mesh["tp"]
    else:
        mesh = init_device_mesh(device_type, (world,))
        dp = tp_mesh = mesh
    if shard in ("tp", "fsdp+tp"):
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
        for name, kind in tp_plan(model, tp).items():
            parallelize_module(model.get_submodule(name), tp_mesh, styles[kind]())
    if shard in ("fsdp", "fsdp+tp"):
        from torch.distributed.fsdp import fully_shard

        for name in fsdp_units(model, fsdp_modules):
            fully_shard(model.get_submodule(name), mesh=dp)
        fully_shard(model, mesh=dp)
    return model


def shard_settings(target_path: str | None) -> dict:
    """``fsdp_modules`` and ``tp`` of :func:`shard_model` from ``[tool.metalint.probe]`` of the
    nearest ``pyproject.toml`` above ``target_path`` (else the working directory)."""
    from pathlib import Path

    from metalint.config import load_settings

    s = load_settings(Path(target_path) if target_path else None)
    return {"fsdp_modules": list(s.fsdp_modules), "tp": dict(s.tp_plan) or None}


# --------------------------------------------------------------------------------------------
# launching ranks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_from_env(device: str = "cpu") -> tuple[int, int]:
    """Join the process group the launcher set up: gloo on CPU, NCCL on CUDA."""
    import datetime

    import torch.distributed as dist

    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":  # pragma: no cover - needs a GPU
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = datetime.timedelta(seconds=float(os.environ.get("METALINT_DIST_TIMEOUT", "300")))
    dist.init_process_group(backend, timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def launch(
    module: str, args: Sequence[str], nproc: int, timeout: float = 600.0
) -> list[subprocess.CompletedProcess]:
    """Run ``python -m module *args`` on ``nproc`` ranks, torchrun-style; wait for all of them.

    When one rank fails, the others are given a few seconds, then terminated, so a rank stuck
    in a collective cannot hang the run. Returns one ``CompletedProcess`` per rank (stdout and
    stderr captured)."""
    if nproc < 1:
        raise ValueError("--nproc must be at least 1")
    port = free_port()
    procs = []
    for rank in range(nproc):
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(nproc),
            LOCAL_WORLD_SIZE=str(nproc),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", module, *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return _wait_all(procs, timeout)


def _wait_or_terminate(procs, deadline: float) -> None:
    """Wait for the ranks until the deadline, or 10 s after one of them failed; then
    terminate those still running."""
    grace = None
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if grace is None and any(p.poll() not in (None, 0) for p in procs):
            grace = now + 10.0
        if now > deadline or (grace is not None and now > grace):
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            return
        time.sleep(0.05)


def _wait_all(procs, timeout: float) -> list[subprocess.CompletedProcess]:
    import threading

    outs: dict[int, tuple[str, str]] = {}

    def drain(i, p):
        outs[i] = p.communicate()

    threads = [
        threading.Thread(target=drain, args=(i, p), daemon=True) for i, p in enumerate(procs)
    ]
    for th in threads:
        th.start()
    _wait_or_terminate(procs, time.monotonic() + timeout)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for th in threads:
        th.join(timeout=10)
    return [
        subprocess.CompletedProcess(p.args, p.returncode, *outs.get(i, ("", "")))
        for i, p in enumerate(procs)
    ]
