"""Child process: ``python -m metalint.probe.worker`` reads one job (JSON) on stdin, probes the
items of its targets in turn and writes JSON lines (per target ``target``, ``items``, then per
item ``start`` and ``result`` or ``error``; ``done`` at the end) on a private copy of stdout;
user code's prints go to stderr. See :mod:`.isolate`.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import signal
import sys
import threading
import traceback

#: characters of an exception's text sent to the parent
MESSAGE_CHARS = 2000


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # user prints -> stderr
    sys.stdout = sys.stderr
    faulthandler.enable(file=sys.stderr)
    if hasattr(signal, "SIGUSR1"):  # the parent asks for a stack dump before killing a hang
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=False)

    _hold_lifeline()
    owner = os.getpid()

    def emit(**event) -> None:
        if os.getpid() != owner:  # a copy the target forked, back in this loop: not ours
            os._exit(0)
        for key in ("message", "skip", "traceback"):  # the user's exception text: bounded
            if isinstance(event.get(key), str):
                event[key] = (
                    event[key][-MESSAGE_CHARS:]
                    if key == "traceback"
                    else event[key][:MESSAGE_CHARS]
                )
        proto.write(json.dumps(event) + "\n")
        proto.flush()

    job = json.loads(sys.stdin.read())
    from metalint.probe.memory import fixed_mmap_threshold

    fixed_mmap_threshold()
    import torch

    # statistics are memory-bound; on a shared CI box torch's intra-op threads oversubscribe the
    # cores and make them 5x slower (measured), so one thread unless told otherwise
    torch.set_num_threads(int(os.environ.get("METALINT_PROBE_THREADS", "1")))
    from metalint.probe.build import probe
    from metalint.probe.target import Target, resolve_items

    skips = job.get("skip", [])
    for index, spec in enumerate(job["targets"]):
        if index < job.get("start", 0):
            continue
        emit(event="target", index=index)  # a new deadline: the import of this target
        skip = set(skips[index]) if index < len(skips) else set()
        _probe_target(Target(**spec), skip, job, emit, probe, resolve_items)
    return _done(emit, proto)


def _probe_target(target, skip: set, job: dict, emit, probe, resolve_items) -> None:
    """The events of one target: ``items``, then per item ``start`` and ``result`` (or
    ``error``); one ``error`` without a label when it does not import."""
    from metalint.probe.build import LazyModules, ProbeSetupError

    try:
        items = resolve_items(target)
    except BaseException as exc:  # import error, bad attribute
        emit(event="error", label=None, message=_one_line(exc), traceback=traceback.format_exc())
        return
    _warm_up(probe)  # one-time costs must not count against the first item's timeout
    emit(event="items", items=[i.label for i in items], file=items[0].file if items else None)
    for item in items:
        if item.label in skip:
            continue
        if item.skip:
            emit(event="result", label=item.label, skip=item.skip, file=item.file)
            continue
        emit(event="start", label=item.label)
        try:
            res = probe(
                item.make,
                device=job["device"],
                init=job["init"],
                seed=job["seed"],
                label=item.label,
                hooks=job.get("hooks", ()),
            )
        except LazyModules as exc:
            emit(event="result", label=item.label, file=item.file, skip=str(exc))
            continue
        except ProbeSetupError as exc:
            if getattr(exc, "stage", None) == "eager construction" and item.args != "factory":
                # arguments we guessed: not the user's failure, say why and go on
                shown = f"({item.args})" if item.args else "()"
                emit(
                    event="result",
                    label=item.label,
                    file=item.file,
                    skip=f"cannot construct: {item.qualname}{shown}: {exc}",
                    stage="eager construction",
                )
                continue
            emit(event="error", label=item.label, message=str(exc), traceback="", file=item.file)
            continue
        except BaseException as exc:  # a bug of the probe: report, go on
            emit(
                event="error",
                label=item.label,
                message="probe failed: " + _one_line(exc),
                traceback=traceback.format_exc(),
                file=item.file,
            )
            continue
        emit(event="result", label=item.label, result=res.to_json(), args=item.args, file=item.file)


def _hold_lifeline() -> None:
    """When the parent dies without ending this process (SIGKILL), its end of the lifeline
    closes: kill this process group (this worker leads it), with all the target forked."""
    fd = os.environ.pop("METALINT_PROBE_LIFELINE", None)
    if fd is None:
        return
    life = int(fd)
    os.set_inheritable(life, False)

    def watch() -> None:
        try:
            while os.read(life, 1):
                pass
        except OSError:  # closed here (by the target): no word from the parent either way
            return
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="metalint-lifeline", daemon=True).start()


def _done(emit, proto) -> int:
    """The last event: the parent keeps what came back even when the exit then hangs (a
    non-daemon thread of the target) or a forked child keeps the pipe open."""
    emit(event="done")
    proto.close()
    return 0


_warm = False


def _warm_up(probe) -> None:
    """Once a process: a probe of a small model (torch's lazy imports and first calls), then
    what is alive (torch, the target's module) is frozen out of the collections that free the
    models of each build (several an item), which would otherwise walk its 300,000 objects."""
    global _warm
    if _warm:
        return
    _warm = True
    from torch import nn

    try:
        probe(lambda: nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)), label="warm-up")
    except Exception:
        pass
    gc.collect()
    gc.freeze()


def _one_line(exc: BaseException) -> str:
    text = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return text[:500]


if __name__ == "__main__":
    sys.exit(main())
