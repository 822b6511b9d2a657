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


def run_target(target: Target, opts: Options) -> list[Outcome]:  # noqa: C901 (issue 20: split it)
    outcomes: list[Outcome] = []
    done: list[str] = []
    items: list[str] | None = None
    file = target.path
    env = dict(os.environ)
    env.setdefault("PYTHONFAULTHANDLER", "1")
    env["PYTHONUNBUFFERED"] = "1"
    # the child must import this metalint even when it is not installed
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    while True:
        job = {
            "target": {
                "spec": target.spec,
                "path": target.path,
                "module": target.module,
                "attr": target.attr,
            },
            "skip": done,
            "device": opts.device,
            "init": opts.init,
            "seed": opts.seed,
            "hooks": list(opts.hooks),
        }
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
            current: str | None = None
            deadline = time.monotonic() + opts.timeout + 30  # interpreter + torch import
            failure: str | None = None
            while True:
                try:
                    line = q.get(timeout=max(deadline - time.monotonic(), 0.01))
                except queue.Empty:
                    failure = f"timed out after {opts.timeout:g} s"
                    if hasattr(signal, "SIGUSR1"):
                        try:
                            proc.send_signal(signal.SIGUSR1)  # faulthandler dumps the stack
                            proc.wait(timeout=1.0)
                        except (subprocess.TimeoutExpired, OSError):
                            pass
                    proc.kill()
                    break
                if line is None:
                    break
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue
                kind = ev.get("event")
                file = ev.get("file") or file
                if kind == "items":
                    items = ev["items"]
                    deadline = time.monotonic() + opts.timeout
                elif kind == "start":
                    current = ev["label"]
                    if opts.on_start is not None:
                        opts.on_start(current, len(done), len(items or ()))
                    deadline = time.monotonic() + opts.timeout
                elif kind == "result":
                    current = None
                    done.append(ev["label"])
                    if ev.get("skip"):
                        outcomes.append(Outcome(ev["label"], "skip", file, message=ev["skip"]))
                    else:
                        outcomes.append(
                            Outcome(
                                ev["label"], "result", file, ev["result"], args=ev.get("args", "")
                            )
                        )
                elif kind == "error":
                    label = ev.get("label")
                    if label is None:
                        outcomes.append(Outcome(target.spec, "error", file, message=ev["message"]))
                        items = []
                    else:
                        current = None
                        done.append(label)
                        outcomes.append(Outcome(label, "error", file, message=ev["message"]))
            rc = proc.wait()
            err.seek(0)
            stderr = err.read()
        if failure is None and items is not None and (current is None) and rc == 0:
            return outcomes
        if failure is None:
            failure = f"crashed ({_signal_name(rc)})" if rc != 0 else "child exited early"
        tail = _last_error_line(stderr)
        site = _crash_site(stderr)
        label = current or (target.spec if items is None else None)
        if label is None:  # died between items: nothing lost, but do not loop forever
            label = target.spec
        msg = failure + (f": {tail}" if tail and "timed out" not in failure else "")
        if site:
            msg += f" (in {os.path.basename(site[0])}:{site[1]})"
        outcomes.append(Outcome(label, "error", file, message=msg, site=site))
        if current is None or items is None:
            return outcomes
        done.append(current)
        if all(i in done for i in items):
            return outcomes


def _last_error_line(stderr: str) -> str:
    lines = [l.strip() for l in stderr.strip().splitlines() if l.strip()]
    for l in reversed(lines):
        if (
            l.startswith(("Fatal Python error", "MemoryError", "Killed"))
            or "Error" in l.split(":")[0]
        ):
            return l[:300]
    return ""
