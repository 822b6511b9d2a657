"""Run each target in a child process (``python -m metalint.probe.worker``) with a timeout.

The child streams one event per item, so when it crashes (segfault, OOM kill) or hangs, only
the item in progress is lost: the parent reports it as ML900, then starts a fresh child that
skips the items already done. The timeout applies per item (and to importing the target).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from metalint.probe.target import Target


@dataclass
class Outcome:
    label: str
    kind: str  # result | skip | error
    file: str | None = None
    result: dict[str, Any] | None = None  # ProbeResult.to_json()
    message: str = ""
    site: tuple[str, int] | None = None  # where a crash happened, when known
    args: str = ""
    #: for a skip: the stage that stopped the item ("eager construction": the class raised
    #: when built from the arguments the probe guessed; empty when it was never built)
    stage: str = ""

    def __post_init__(self) -> None:
        # one line, whatever the user's code raised (torchtune's ImportError spans several)
        self.message = " ".join(self.message.split())


@dataclass
class Options:
    device: str = "cpu"
    init: str = "auto"
    seed: int = 0
    timeout: float = 120.0
    hooks: tuple[str, ...] = ()  # [tool.metalint] hooks: see metalint.probe.build.run_init
    python: str = field(default_factory=lambda: sys.executable)
    #: called as each item starts: (label, items done in this target, items in it); a terminal
    #: progress line (never part of the report)
    on_start: Callable[[str, int, int], None] | None = field(default=None, compare=False)


def _reader(stream, q: queue.Queue) -> None:
    for line in stream:
        q.put(line)
    q.put(None)


def _crash_site(stderr: str) -> tuple[str, int] | None:
    """First user frame of a faulthandler dump (most recent call first)."""
    if "Fatal Python error" not in stderr and "most recent call first" not in stderr:
        return None
    torch_marker = os.sep + "torch" + os.sep
    stdlib = sysconfig.get_paths()["stdlib"] + os.sep
    dump = re.split(r"Fatal Python error|most recent call first", stderr)[-1]
    for m in re.finditer(r'File "([^"]+)", line (\d+)', dump):
        fn = m.group(1)
        if (
            torch_marker in fn
            or os.sep + "metalint" + os.sep + "probe" + os.sep in fn
            or fn.startswith("<")
            or fn.startswith(stdlib)
            or "site-packages" + os.sep + "torch" in fn
        ):
            continue
        return fn, int(m.group(2))
    return None


def _signal_name(rc: int) -> str:
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


@dataclass
class _Progress:
    """What the child reported so far about the items of one target."""

    file: str | None
    outcomes: list[Outcome] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    items: list[str] | None = None
    current: str | None = None

    def event(self, ev: dict, target: Target, opts: Options) -> bool:
        """Record one event of the child; True when it starts a new deadline."""
        kind = ev.get("event")
        self.file = ev.get("file") or self.file
        if kind == "items":
            self.items = ev["items"]
            return True
        if kind == "start":
            self.current = ev["label"]
            if opts.on_start is not None:
                opts.on_start(self.current, len(self.done), len(self.items or ()))
            return True
        if kind == "result":
            self.current = None
            self.done.append(ev["label"])
            if ev.get("skip"):
                self.outcomes.append(
                    Outcome(
                        ev["label"],
                        "skip",
                        self.file,
                        message=ev["skip"],
                        stage=ev.get("stage", ""),
                    )
                )
            else:
                self.outcomes.append(
                    Outcome(ev["label"], "result", self.file, ev["result"], args=ev.get("args", ""))
                )
        elif kind == "error":
            label = ev.get("label")
            if label is None:
                self.outcomes.append(
                    Outcome(target.spec, "error", self.file, message=ev["message"])
                )
                self.items = []
            else:
                self.current = None
                self.done.append(label)
                self.outcomes.append(Outcome(label, "error", self.file, message=ev["message"]))
        return False


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONFAULTHANDLER", "1")
    env["PYTHONUNBUFFERED"] = "1"
    # the child must import this metalint even when it is not installed
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def run_target(target: Target, opts: Options) -> list[Outcome]:
    """Probe every item of ``target`` in child processes: one child runs the items in turn;
    when it crashes or times out on one, that item is an error and a new child goes on with
    the items left."""
    progress = _Progress(target.path)
    env = _child_env()
    while True:
        job = {
            "target": {
                "spec": target.spec,
                "path": target.path,
                "module": target.module,
                "attr": target.attr,
            },
            "skip": progress.done,
            "device": opts.device,
            "init": opts.init,
            "seed": opts.seed,
            "hooks": list(opts.hooks),
        }
        failure, rc, stderr = _run_child(job, env, target, opts, progress)
        if failure is None and progress.items is not None and progress.current is None and rc == 0:
            return progress.outcomes
        if failure is None:
            failure = f"crashed ({_signal_name(rc)})" if rc != 0 else "child exited early"
        progress.outcomes.append(_crash_outcome(failure, stderr, target, progress))
        current, items = progress.current, progress.items
        if current is None or items is None:
            return progress.outcomes
        progress.done.append(current)
        progress.current = None
        if all(i in progress.done for i in items):
            return progress.outcomes


def _run_child(job, env, target: Target, opts: Options, progress: _Progress):
    """One child over the items not done yet: (failure or None, exit code, stderr)."""
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(
            [opts.python, "-m", "metalint.probe.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
        assert proc.stdin and proc.stdout
        proc.stdin.write(json.dumps(job))
        proc.stdin.close()
        q: queue.Queue = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, q), daemon=True).start()
        deadline = time.monotonic() + opts.timeout + 30  # interpreter + torch import
        failure: str | None = None
        while True:
            try:
                line = q.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                failure = f"timed out after {opts.timeout:g} s"
                _stop(proc)
                break
            if line is None:
                break
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            if progress.event(ev, target, opts):
                deadline = time.monotonic() + opts.timeout
        rc = proc.wait()
        err.seek(0)
        return failure, rc, err.read()


def _stop(proc: subprocess.Popen) -> None:
    if hasattr(signal, "SIGUSR1"):
        try:
            proc.send_signal(signal.SIGUSR1)  # faulthandler dumps the stack
            proc.wait(timeout=1.0)
        except (subprocess.TimeoutExpired, OSError):
            pass
    proc.kill()


def _crash_outcome(failure: str, stderr: str, target: Target, progress: _Progress) -> Outcome:
    tail = _last_error_line(stderr)
    site = _crash_site(stderr)
    label = progress.current or (target.spec if progress.items is None else None)
    if label is None:  # died between items: nothing lost, but do not loop forever
        label = target.spec
    msg = failure + (f": {tail}" if tail and "timed out" not in failure else "")
    if site:
        msg += f" (in {os.path.basename(site[0])}:{site[1]})"
    return Outcome(label, "error", progress.file, message=msg, site=site)


def _last_error_line(stderr: str) -> str:
    lines = [l.strip() for l in stderr.strip().splitlines() if l.strip()]
    for l in reversed(lines):
        if (
            l.startswith(("Fatal Python error", "MemoryError", "Killed"))
            or "Error" in l.split(":")[0]
        ):
            return l[:300]
    return ""
