"""Run each target (or several in turn: :func:`run_targets`) in a child process
(``python -m metalint.probe.worker``) with a timeout.

The child streams one event per item, so when it crashes (segfault, OOM kill) or hangs, only
the item in progress is lost: the parent reports it as ML900, then starts a fresh child that
skips the items already done. The timeout applies per item (and to importing the target).

Each child runs in a process group of its own (setsid), and that whole process group is killed when it times out
and when it is done, so nothing a target forks outlives its probe; of the output of the user's
code only a bounded tail is kept (see :func:`_run_child`).
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import sysconfig
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
    hooks: tuple[str, ...] = ()  # [tool.metalint] hooks: see metalint.probe.materialise.run_init
    python: str = field(default_factory=lambda: sys.executable)
    #: called as each item starts: (label, items done in this target, items in it); a terminal
    #: progress line (never part of the report)
    on_start: Callable[[str, int, int], None] | None = field(default=None, compare=False)


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
    return run_targets([target], opts)[0]


@dataclass
class _Batch:
    """The targets of one :func:`run_targets`: the progress of each and the one the child is
    at (its ``target`` events say when it moves on)."""

    targets: list[Target]
    progress: list[_Progress]
    index: int = 0

    def event(self, ev: dict, opts: Options) -> bool:
        """Record one event of the child; True when it starts a new deadline."""
        if ev.get("event") == "target":
            index = ev.get("index")
            if isinstance(index, int) and self.index <= index < len(self.targets):
                self.index = index
            return True
        return self.progress[self.index].event(ev, self.targets[self.index], opts)


def run_targets(targets: list[Target], opts: Options) -> list[list[Outcome]]:
    """Probe the items of several targets in turn in one child process (one interpreter, one
    torch import): the outcomes of each target. When the child crashes or times out, only the
    item in progress (or the target being imported) is lost: a new child goes on with the
    items and targets left, as :func:`run_target` does for one."""
    batch = _Batch(list(targets), [_Progress(t.path) for t in targets])
    env = _child_env()
    start = 0
    while start < len(targets):
        job = {
            "targets": [
                {"spec": t.spec, "path": t.path, "module": t.module, "attr": t.attr}
                for t in targets
            ],
            "start": start,
            "skip": [p.done for p in batch.progress],
            "device": opts.device,
            "init": opts.init,
            "seed": opts.seed,
            "hooks": list(opts.hooks),
        }
        batch.index = start
        failure, rc, stderr, finished = _run_child(job, env, opts, batch)
        target, progress = batch.targets[batch.index], batch.progress[batch.index]
        if failure is None and progress.items is not None and progress.current is None:
            if finished or (rc == 0 and batch.index == len(targets) - 1):
                break  # done: how it then exited (killed when it lingered) is moot
        if failure is None:
            failure = f"crashed ({_signal_name(rc)})" if rc != 0 else "child exited early"
        progress.outcomes.append(_crash_outcome(failure, stderr, target, progress))
        start = batch.index + 1
        current, items = progress.current, progress.items
        if current is None or items is None:
            continue  # lost while importing or between items: on with the next target
        progress.done.append(current)
        progress.current = None
        if not all(i in progress.done for i in items):
            start = batch.index
    return [p.outcomes for p in batch.progress]


def _run_child(job, env, opts: Options, batch: _Batch):
    """One child over the items not done yet: (failure or None, exit code, the tail of its
    output, whether it reported the end of its items).

    The child runs in a process group of its own (setsid): on a timeout, and after it exits (or lingers past
    :data:`GRACE` s once its items are done: a non-daemon thread), its whole process group is
    killed, so nothing the target forked outlives the probe. Its output goes through a pipe
    into a :class:`_Tail`: only the last :data:`TAIL_BYTES` are kept."""
    # the lifeline: a pipe whose write end only this process holds; when it dies without
    # ending the child (SIGKILL), the child sees the end of the pipe and kills its group
    life_r, life_w = os.pipe()
    try:
        proc = subprocess.Popen(
            [opts.python, "-m", "metalint.probe.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**env, LIFELINE: str(life_r)},
            pass_fds=(life_r,),
            start_new_session=True,
        )
    except BaseException:
        os.close(life_w)
        raise
    finally:
        os.close(life_r)
    child = _Child(proc, opts, batch, life_w)
    try:
        assert proc.stdin
        try:
            proc.stdin.write(json.dumps(job).encode())
            proc.stdin.close()
        except OSError:  # died at once: its exit status says why
            pass
        failure = child.follow(opts.timeout + 30)  # interpreter + torch import
        if failure is None and not child.finished:
            failure = child.linger()
        rc = child.end()
    finally:
        child.close()
    return failure, rc, child.tail.text(), child.finished


#: the environment variable naming the child's end of its lifeline
LIFELINE = "METALINT_PROBE_LIFELINE"
#: seconds a child may take to exit once its items are done (or its output closed)
GRACE = 5.0
#: bytes of a child's output (the user's prints, faulthandler's dumps) kept for the report
TAIL_BYTES = 64 << 10


class _Tail:
    """The last ``size`` bytes written to it."""

    def __init__(self, size: int = TAIL_BYTES) -> None:
        self.size = size
        self.buf = bytearray()

    def add(self, data: bytes) -> None:
        self.buf += data[-self.size :]
        del self.buf[: max(len(self.buf) - self.size, 0)]

    def text(self) -> str:
        return self.buf.decode("utf-8", "replace")


class _Child:
    """A running worker: its protocol (stdout, one JSON event a line) and its output (stderr,
    into a :class:`_Tail`), read without blocking; the events update ``batch``."""

    def __init__(self, proc: subprocess.Popen, opts: Options, batch: _Batch, life: int):
        self.proc, self.opts, self.batch = proc, opts, batch
        self.life = life
        self.tail = _Tail()
        self.finished = False  # the child said it is done with its items
        self.renewed = False  # an event started a new deadline
        self.line = bytearray()
        self.sel = selectors.DefaultSelector()
        for f in (proc.stdout, proc.stderr):
            os.set_blocking(f.fileno(), False)
            self.sel.register(f.fileno(), selectors.EVENT_READ, f)

    @property
    def proto_open(self) -> bool:
        return self.proc.stdout.fileno() in self.sel.get_map()

    def pump(self, timeout: float) -> None:
        """Read what arrives within ``timeout`` s and act on each complete event."""
        for key, _ in self.sel.select(max(timeout, 0.0)):
            try:
                data = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if key.data is self.proc.stderr:
                if data:
                    self.tail.add(data)
                else:
                    self.sel.unregister(key.fd)
                continue
            self.line += data
            if not data:  # end of the protocol: a last line without its newline counts too
                self.sel.unregister(key.fd)
                self.line += b"\n"
            *lines, rest = self.line.split(b"\n")
            self.line = bytearray(rest)
            for line in lines:
                self._event(line)

    def _event(self, line: bytes) -> None:
        try:
            ev = json.loads(line)
        except ValueError:
            return
        if not isinstance(ev, dict) or self.finished:
            return
        if ev.get("event") == "done":
            self.finished = True
        elif self.batch.event(ev, self.opts):
            self.renewed = True

    def exited(self) -> bool:
        """Whether the child has exited, without reaping it: its pid (the process group's id)
        stays taken until :meth:`end`, so killing the group cannot reach another process."""
        try:
            return (
                os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            )
        except ChildProcessError:
            return True

    def follow(self, first: float) -> str | None:
        """Read the child's events until it is done with its items, closes its protocol or
        exits; a timeout (``first`` s for the import, then :attr:`Options.timeout` per item) is
        the failure returned, after a stack dump of the child."""
        deadline = time.monotonic() + first
        while not self.finished and self.proto_open and not self.exited():
            left = deadline - time.monotonic()
            if left <= 0:
                self._dump_stack()
                return f"timed out after {self.opts.timeout:g} s"
            self.pump(min(left, 0.2))
            if self.renewed:
                self.renewed = False
                deadline = time.monotonic() + self.opts.timeout
        return None

    def linger(self) -> str | None:
        """After the protocol closed: give the child :data:`GRACE` s to exit."""
        end = time.monotonic() + GRACE
        while not self.exited():
            if time.monotonic() >= end:
                return f"did not exit within {GRACE:g} s after closing its output"
            self.pump(0.05)
        return None

    def end(self) -> int:
        """Wait :data:`GRACE` s for a child done with its items, then kill its process group
        (the child and all it forked) and reap it; the exit code."""
        if self.finished:
            end = time.monotonic() + GRACE
            while not self.exited() and time.monotonic() < end:
                self.pump(0.05)
        rc = self._kill()
        # what is still in the pipes; bounded, as a process that left the group may keep writing
        end = time.monotonic() + 1.0
        while self.sel.get_map() and time.monotonic() < end:
            self.pump(0.05)
        return rc

    def _dump_stack(self) -> None:
        """faulthandler's dump of the child's stack (its SIGUSR1 handler) into the tail."""
        if not hasattr(signal, "SIGUSR1"):
            return
        try:
            os.kill(self.proc.pid, signal.SIGUSR1)
        except OSError:
            return
        end = time.monotonic() + 1.0
        while not self.exited() and time.monotonic() < end:
            self.pump(0.05)

    def _kill(self) -> int:
        """Kill the child's process group, reap the child: its exit code."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return self.proc.wait()

    def close(self) -> None:
        if self.proc.returncode is None:  # interrupted (Ctrl-C reaches this process only)
            self._kill()
        os.close(self.life)
        self.sel.close()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


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
