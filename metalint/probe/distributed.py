"""``metalint probe --nproc N --shard fsdp|tp TARGET``: prove the init under sharding.

On every rank: build eagerly on one device under the seed and keep statistics (as the
single-process probe does, :func:`metalint.probe.snapshot.snapshot` with the write recorder, so
findings point at the same source lines); build on ``meta``, shard (FSDP2 ``fully_shard`` or
tensor parallel, :func:`metalint.loader.distributed.shard_model`), ``to_empty``, poison, seed
every rank alike (as a training script does) and run the init entry point
(:func:`metalint.probe.materialise.run_init`). Then, per tensor:

- all-reduced statistics of the sharded tensor (count, sum, sum of squares, non-finite and NaN
  counts, min, max; replicas counted once) make a :class:`~metalint.probe.compare.Stats` that
  :func:`metalint.probe.compare.compare` judges against the eager one; a deterministic tensor
  is gathered (``full_tensor()``) and compared exactly (digest, then ``allclose``). A
  difference is MP011 (*sharded init differs from single-device init*);
- a per-shard fingerprint (a digest of each rank's local shard, all-gathered): two ranks that
  hold *different* shards of a random tensor with the same bytes is MP010 (*shards repeat
  across ranks*: the init drew every shard from the same generator state).

Every rank computes the same verdict; rank 0 writes it. The parent process
(:func:`run_sharded`) launches the ranks with :func:`metalint.loader.distributed.launch` and
turns rank 0's results into the same outcomes the single-process probe reports.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from metalint.config import ConfigError
from metalint.loader.distributed import (
    comm_device,
    gather_text,
    init_from_env,
    is_dtensor,
    launch,
    local,
    shard_model,
    shard_settings,
)
from metalint.probe import build, compare, materialise
from metalint.probe.build import Finding, pick_device
from metalint.probe.compare import Stats, tensor_stats
from metalint.probe.isolate import Options, Outcome
from metalint.probe.snapshot import _walk_tensors
from metalint.probe.target import Target, parse_target, resolve_items


def run_sharded(
    target: Target, opts: Options, nproc: int, shard: str, plan: dict | None = None
) -> list[Outcome]:
    """Probe ``target`` on ``nproc`` ranks sharded with ``shard``; outcomes as
    :func:`metalint.probe.isolate.run_target` returns them. ``plan``: the ``fsdp_modules`` and
    ``tp`` of :func:`~metalint.loader.distributed.shard_model` (default: ``[tool.metalint.probe]``
    of the pyproject.toml nearest the target)."""

    if plan is None:
        try:
            plan = shard_settings(target.path)
        except ConfigError as exc:
            return [Outcome(target.display, "error", target.path, message=str(exc))]
    job = {
        "spec": target.spec,
        "device": opts.device,
        "init": opts.init,
        "seed": opts.seed,
        "hooks": list(opts.hooks),
        "shard": shard,
        **plan,
    }
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, old) if p)
    try:
        with tempfile.TemporaryDirectory(prefix="metalint-probe-") as out:
            done = launch(
                "metalint.probe.distributed", [json.dumps(job), out], nproc, opts.timeout + 60
            )
            f = Path(out) / "rank0.json"
            data = json.loads(f.read_text()) if f.is_file() else None
            errors = [json.loads(p.read_text()) for p in sorted(Path(out).glob("error*.json"))]
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    if errors:
        e = errors[0]
        return [Outcome(e["label"], "error", target.path, message=e["message"])]
    if data is None:
        last = [ln for p in done for ln in p.stderr.splitlines() if ln.strip()]
        why = last[-1] if last else f"exit status {done[0].returncode}"
        return [Outcome(target.display, "error", target.path, message=f"a rank died: {why}")]
    return [Outcome(**o) for o in data]


# --------------------------------------------------------------------------------------------
# on each rank


def _owns(t) -> bool:
    """Whether this rank's local shard of ``t`` counts in a sum over ranks: replicas (a
    ``Replicate()`` mesh dim, or a plain tensor held whole by every rank) count once."""

    if not is_dtensor(t):
        return dist.get_rank() == 0
    coord = t.device_mesh.get_coordinate() or ()
    return all(c == 0 for c, p in zip(coord, t.placements) if not p.is_shard())


def _partial_stats(local, owns: bool) -> tuple[list[float], float, float]:

    x = local.detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    x = x.reshape(-1).to(torch.float64)
    if not owns or x.numel() == 0:
        return [0.0, 0.0, 0.0, 0.0, 0.0], math.inf, -math.inf
    fin = torch.isfinite(x)
    nonfinite = float((~fin).sum())
    nan = float(torch.isnan(x).sum())
    f = x[fin]
    if f.numel() == 0:
        return [0.0, 0.0, 0.0, nonfinite, nan], math.inf, -math.inf
    return (
        [float(f.numel()), float(f.sum()), float((f * f).sum()), nonfinite, nan],
        float(f.min()),
        float(f.max()),
    )


def reduced_stats(named: list[tuple[str, object]]) -> dict[str, object]:
    """Per tensor, a :class:`~metalint.probe.compare.Stats` of the whole (sharded) tensor from
    all-reduced count, sum, sum of squares, non-finite, NaN, min and max: three collectives
    for all tensors together."""

    sums, lows, highs = [], [], []
    for _, t in named:
        s, lo, hi = _partial_stats(local(t), _owns(t))
        sums.append(s)
        lows.append(lo)
        highs.append(hi)
    dev = comm_device()
    s = torch.tensor(sums, dtype=torch.float64, device=dev).reshape(-1, 5)
    lo = torch.tensor(lows, dtype=torch.float64, device=dev)
    hi = torch.tensor(highs, dtype=torch.float64, device=dev)
    dist.all_reduce(s)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    s, lo, hi = s.cpu(), lo.cpu(), hi.cpu()
    out = {}
    for i, (name, t) in enumerate(named):
        n, total, sq, nonfinite, nan = s[i].tolist()
        st = Stats(
            shape=tuple(t.shape),
            dtype=str(t.dtype).replace("torch.", ""),
            requires_grad=bool(t.requires_grad),  # as compare.tensor_stats records it
            device=t.device.type,
            numel=t.numel(),
            nonfinite=int(nonfinite),
            nan=int(nan),
        )
        if n:
            st.mean = total / n
            st.std = math.sqrt(max(sq / n - st.mean * st.mean, 0.0))
            st.min, st.max = lo[i].item(), hi[i].item()
        else:
            st.min = st.max = math.nan
        out[name] = st
    return out


def repeated_shards(named: list[tuple[str, object]]) -> dict[str, list[int]]:
    """Tensors whose local shards are byte-identical on ranks that hold *different* shards:
    name -> the ranks that share one shard's bytes. One all-gather for all tensors."""

    mine = []
    for name, t in named:
        loc = t.to_local()
        st = tensor_stats(loc, keep_copy=False)
        coord = t.device_mesh.get_coordinate() or ()
        key = ".".join(str(c) for c, p in zip(coord, t.placements) if p.is_shard())
        varied = loc.numel() > 1 and not st.constant
        mine.append(f"{key}:{st.digest if varied else ''}")
    everyone = gather_text("\n".join(mine))
    out: dict[str, list[int]] = {}
    for i, (name, _) in enumerate(named):
        by_digest: dict[str, dict[str, int]] = {}
        for rank in range(dist.get_world_size()):
            key, _, digest = (everyone[rank] or "").split("\n")[i].partition(":")
            if digest:
                by_digest.setdefault(digest, {}).setdefault(key, rank)
        for shards in by_digest.values():
            if len(shards) > 1:
                out[name] = sorted(shards.values())
                break
    return out


def _sharded_tensors(model, eager) -> list[tuple[str, object]]:
    """(name, tensor) of every parameter and buffer the eager build has, first name of each."""

    seen: set[int] = set()
    out = []
    for kind, path, attr, _, t in _walk_tensors(model):
        name = f"{path}.{attr}" if path else attr
        if kind == "attribute" or id(t) in seen or name not in eager.entries:
            continue
        seen.add(id(t))
        out.append((name, t))
    return out


def _compare(eager, named, shard: str, world: int, tracked: bool = True):
    """Findings MP010 (repeated shards) and MP011 (differs from the single-device build).
    ``tracked``: DTensor random ops drew distinct shards (CUDA, or :func:`dtensor_rng`)."""

    findings = []
    reduced = reduced_stats(named)
    random_dt = [
        (n, t)
        for n, t in named
        if is_dtensor(t) and eager.entries[n].stats and not eager.entries[n].stats.deterministic
    ]
    repeats = repeated_shards(random_dt)
    for name, t in named:
        e = eager.entries[name]
        st, full = reduced[name], None
        if e.stats.deterministic and t.device.type != "meta":
            full = t.full_tensor() if is_dtensor(t) else t
            st = compare.tensor_stats(full, keep_copy=False)
            st.requires_grad = reduced[name].requires_grad  # the parameter's, not the gather's
        diff = compare.compare(e.stats, st, full)
        if diff is not None:
            code = "MP011" if diff.code in ("MP001", "MP002", "MP004") else diff.code
            detail = f"{name} under --shard {shard} over {world} ranks: {diff.detail}"
            findings.append(Finding(code, e.cls, e.cls_file, e.attr, [name], detail, e.site))
        if name in repeats:
            ranks = repeats[name]
            detail = (
                f"ranks {', '.join(map(str, ranks))} hold different shards of {name} "
                f"({', '.join(map(str, t.placements))}) with identical values: the init drew "
                f"every shard from the same random state ("
                + (
                    "each rank drew its local shard alike, e.g. a plain torch op on "
                    "to_local(), not a DTensor random op)"
                    if tracked
                    else "a local shard initialised, or a DTensor random op on a CPU mesh, "
                    "for which this torch has no RNG tracker)"
                )
            )
            findings.append(Finding("MP010", e.cls, e.cls_file, e.attr, [name], detail, e.site))
    return findings


def _cpu_rng_tracker():
    """DTensor's RNG tracker for a CPU mesh (torch's ``OffsetBasedRNGTracker`` refuses the CPU:
    its offsets are Philox offsets, and the CPU generator is a Mersenne twister).

    Inside a DTensor random op it does what the offset tracker does on CUDA: every rank draws
    one base value from the shared generator (so all ranks advance it alike), then draws its
    local shard from a generator seeded by that base and the shard's linear index
    (``_calc_shard_info``, ``_calc_shard_linear_idx``: replicas of one shard share it), and the
    shared generator is put back as it was after the base draw. Shards of one tensor are then
    distinct draws of the same distribution, replicas equal, as on a GPU mesh; the values are
    not those of a single-device draw, which the probe compares by distribution. A draw on a
    plain tensor (a local shard through ``to_local()``) is untouched: it still repeats."""
    from torch.distributed.tensor import _random

    class CpuShardRNGTracker(_random._RNGStateTracker):
        def __init__(self):
            super().__init__(torch.device("cpu"))

        @contextlib.contextmanager
        def _distribute_region(self, spec, generator=None):
            if not self.distribute_region_enabled:
                yield
                return
            shared = torch.default_generator
            base = int(torch.randint(0, 2**62, (1,), generator=generator or shared))
            synced = shared.get_state()
            idx, counts = _random._calc_shard_info(spec.mesh.get_coordinate(), spec)
            shard = int(_random._calc_shard_linear_idx(idx, counts))
            shared.manual_seed((base + shard * 0x9E3779B97F4A7C15) % 2**64)
            try:
                yield
            finally:
                shared.set_state(synced)

    return _random, CpuShardRNGTracker()


@contextlib.contextmanager
def dtensor_rng(device: str):
    """While the init runs on a CPU mesh: :func:`_cpu_rng_tracker` as DTensor's tracker. Yields
    whether DTensor random ops draw distinct shards (False: a torch without the private API it
    uses; DTensor then draws every shard alike, and MP010 says that it may be the mesh)."""
    if torch.device(device).type != "cpu":
        yield True
        return
    try:
        module, tracker = _cpu_rng_tracker()
    except (ImportError, AttributeError, TypeError, RuntimeError):
        yield False
        return
    old = module._rng_tracker
    module._rng_tracker = tracker
    try:
        yield True
    finally:
        module._rng_tracker = old


def probe_sharded(
    make,
    *,
    shard: str,
    device: str,
    init: str,
    seed: int,
    label: str,
    hooks,
    plan: dict | None = None,
):
    """One rank's share of the sharded probe; returns the :class:`ProbeResult` (the same on
    every rank). ``plan``: :func:`~metalint.loader.distributed.shard_model`'s ``fsdp_modules``
    and ``tp``."""

    t0 = time.perf_counter()
    res = build.ProbeResult(label=label, device=device)
    # the single-device probe's eager stage: the same nn.Module check, and randomness decided
    # from how each value was made (a second build under another seed), not from min == max
    eager, fallback_file = build._eager_stage(make, seed, label, res)
    try:
        with torch.device("meta"):
            model = make()
        shard_model(model, shard, torch.device(device).type, **(plan or {}))
        model.to_empty(device=device)
        named = _sharded_tensors(model, eager)
        for name, t in named:
            compare.poison_(local(t), eager.entries[name].stats)
        torch.manual_seed(seed + 1)  # every rank alike, as a training script seeds them
        with dtensor_rng(device) as tracked:
            used = materialise.run_init(model, init, "post", hooks=hooks, device=device)
    except build.ProbeSetupError:
        raise
    except Exception as exc:
        raise materialise._stage_error(
            f"meta build + --shard {shard} + init {init!r}", exc
        ) from exc
    world = dist.get_world_size()
    res.init_used = f"{used}, sharded with {shard} over {world} ranks"
    findings = _compare(eager, _sharded_tensors(model, eager), shard, world, tracked)
    res.lost = len({n for f in findings for n in f.names})
    res.findings = build._findings_to_diags(findings, used, fallback_file)
    res.status = "failed" if res.findings else "passed"
    res.classes = build._class_summary(eager, findings, None)
    res.seconds = time.perf_counter() - t0
    return res


def _worker_main(argv: list[str]) -> int:
    """``python -m metalint.probe.distributed JOB_JSON OUT_DIR``: one rank."""
    from dataclasses import asdict

    job, out_dir = json.loads(argv[0]), argv[1]
    rank = int(os.environ.get("RANK", "0"))
    outcomes = []
    label = job["spec"]
    try:
        device = pick_device(job["device"], ranks=int(os.environ.get("WORLD_SIZE", "1")))
        rank, _ = init_from_env(device)
        for target in parse_target(job["spec"]):
            for item in resolve_items(target):
                label = item.label
                if item.make is None:
                    outcomes.append(Outcome(item.label, "skip", item.file, message=item.skip))
                    continue
                res = probe_sharded(
                    item.make,
                    shard=job["shard"],
                    device=device,
                    init=job["init"],
                    seed=job["seed"],
                    label=item.label,
                    hooks=tuple(job["hooks"]),
                    plan={"fsdp_modules": job.get("fsdp_modules", ()), "tp": job.get("tp")},
                )
                outcomes.append(
                    Outcome(item.label, "result", item.file, res.to_json(), args=item.args)
                )
    except Exception as exc:
        msg = " ".join(str(exc).split()) or type(exc).__name__
        with open(os.path.join(out_dir, f"error{rank}.json"), "w") as f:
            json.dump({"label": label, "message": f"rank {rank}: {msg}"}, f)
        return 2
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if rank == 0:
        with open(os.path.join(out_dir, "rank0.json"), "w") as f:
            json.dump([asdict(o) for o in outcomes], f)
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
