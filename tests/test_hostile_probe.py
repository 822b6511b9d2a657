"""``metalint probe`` against targets that fight their worker process: a non-daemon thread left
running, forks that outlive the worker, a flood of prints, a hang with children.

Each probe runs as ``python -m metalint probe`` in its own session under a wall-clock limit, so a
regression fails here instead of hanging the suite; whatever the run leaves behind is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL = """
import torch
from torch import nn
"""


_SESSIONS: list[int] = []


@pytest.fixture(autouse=True)
def _end_sessions():
    """After the test's own checks: kill whatever a probe left in its session."""
    yield
    while _SESSIONS:
        try:
            os.killpg(_SESSIONS.pop(), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.pop("CI", None)
    return env


def _run(args: list[str], limit: float, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``args`` in a new session; on ``limit`` kill the session and fail."""
    start = time.monotonic()
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_address_space_bound,
    )
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{args[3:]} still running after {limit:g} s\n{out}\n{err[-2000:]}")
    _SESSIONS.append(proc.pid)
    done = subprocess.CompletedProcess(args, proc.returncode, out, err)
    return done, time.monotonic() - start


def _address_space_bound() -> None:
    """Each case runs as a CI operator would bound it: 4 GiB of address space."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _probe(
    target: Path, *extra: str, limit: float = 150
) -> tuple[subprocess.CompletedProcess, float]:
    cmd = [sys.executable, "-m", "metalint", "probe", str(target), "--device", "cpu", *extra]
    return _run(cmd, limit, target.parent)


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an orphan's zombie waits for its reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _gone(pids: list[int], wait: float = 3.0) -> list[int]:
    """The pids still alive after ``wait`` s (a killed process takes a moment to go)."""
    end = time.monotonic() + wait
    while True:
        left = [p for p in pids if _alive(p)]
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)


def _kill(pids: list[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_non_daemon_thread_keeps_its_verdict(tmp_path):
    """``__init__`` starts a thread that never ends: the worker cannot exit, the results are
    in. The probe ends the worker after a short grace and reports what came back."""
    target = tmp_path / "threaded.py"
    target.write_text(
        MODEL
        + textwrap.dedent(
            """
            import threading

            class Threaded(nn.Module):
                def __init__(self) -> None:
                    super().__init__()
                    self.lin = nn.Linear(4, 4)
                    threading.Thread(target=threading.Event().wait).start()
            """
        )
    )
    res, took = _probe(target, "--timeout", "60")
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    assert "probe threaded.py:Threaded on cpu via reset_parameters() children first: passed" in (
        res.stdout
    )
    assert "timed out" not in res.stdout + res.stderr
    assert took < 60, took  # the grace, not the item's timeout


def test_forks_leave_no_process_and_no_false_timeout(tmp_path):
    """Children forked by ``__init__`` sleep on (holding the worker's pipes) or return into the
    worker's loop: each item is reported once, with its verdict, and none of them survives."""
    pids = tmp_path / "pids"
    target = tmp_path / "forks.py"
    target.write_text(
        MODEL
        + textwrap.dedent(
            f"""
            import os, time

            def fork(sleep):
                pid = os.fork()
                if pid == 0:
                    if sleep:
                        time.sleep(10**6)
                        os._exit(0)
                    return
                with open({str(pids)!r}, "a") as f:
                    f.write(f"{{pid}}\\n")

            class Forks(nn.Module):
                def __init__(self) -> None:
                    super().__init__()
                    fork(sleep=True)
                    fork(sleep=False)  # a child that goes back into the probe
                    self.scale = nn.Parameter(torch.ones(4))

            class After(nn.Module):
                def __init__(self) -> None:
                    super().__init__()
                    self.lin = nn.Linear(2, 2)
            """
        )
    )
    try:
        res, took = _probe(target, "--timeout", "40")
        out = res.stdout + res.stderr
        assert "timed out" not in out, out[-3000:]
        assert "crashed" not in out, out[-3000:]
        forks = [ln for ln in res.stdout.splitlines() if ln.startswith("probe forks.py:Forks ")]
        after = [ln for ln in res.stdout.splitlines() if ln.startswith("probe forks.py:After ")]
        assert len(forks) == 1 and len(after) == 1, res.stdout
        assert "1 of 1 tensors lost" in forks[0], forks
        assert ": passed" in after[0], after
        assert len(_pids(pids)) >= 2  # the target did fork
        assert _gone(_pids(pids)) == []
        assert took < 40, took
    finally:
        _kill(_pids(pids))


def test_flood_of_prints_keeps_parent_memory_bounded(tmp_path):
    """80 MiB of long error-like lines, then the worker dies: the parent keeps a bounded tail
    of the worker's output (its peak RSS grows by far less than the output) and shows the last
    error line, cut short."""
    size = 80 << 20
    target = tmp_path / "loud.py"
    target.write_text(
        MODEL
        + textwrap.dedent(
            f"""
            import os, sys

            class Loud(nn.Module):
                def __init__(self) -> None:
                    super().__init__()
                    line = "RuntimeError: " + "x" * 1010 + "\\n"
                    block = line * 1024
                    for _ in range({size} // len(block)):
                        sys.stdout.write(block)
                    sys.stdout.flush()
                    os._exit(3)
            """
        )
    )
    wrapper = tmp_path / "peak.py"
    wrapper.write_text(
        textwrap.dedent(
            """
            import sys, threading, time

            def rss(field):
                for line in open("/proc/self/status"):
                    if line.startswith(field + ":"):
                        return int(line.split()[1]) * 1024
                return 0

            from metalint.cli import main  # everything the command imports, before the baseline

            base = rss("VmHWM")
            peak = [rss("RssAnon")]
            start = peak[0]

            def sample():
                while True:
                    peak[0] = max(peak[0], rss("RssAnon"))
                    time.sleep(0.005)

            threading.Thread(target=sample, daemon=True).start()
            try:
                main(sys.argv[1:])
            except SystemExit as exc:
                code = exc.code
            else:
                code = 0
            peak[0] = max(peak[0], rss("RssAnon"))
            print(f"HWM-GROWTH {rss('VmHWM') - base} ANON-GROWTH {peak[0] - start}", file=sys.stderr)
            sys.exit(code)
            """
        )
    )
    cmd = [sys.executable, str(wrapper), "probe", str(target), "--device", "cpu"]
    res, _ = _run(cmd, 150, tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr[-2000:]
    (stats,) = [ln for ln in res.stderr.splitlines() if ln.startswith("HWM-GROWTH")]
    hwm, anon = int(stats.split()[1]), int(stats.split()[3])
    assert hwm < size // 8 and anon < size // 8, (hwm, anon)
    (err,) = [ln for ln in res.stdout.splitlines() if ln.startswith("error loud.py:Loud")]
    assert "crashed (exit status 3): RuntimeError: xxx" in err, err[:200]
    assert len(err) < 600, len(err)


def test_hang_is_killed_at_its_timeout_with_its_children(tmp_path):
    """A target that forks a child and then sleeps forever: at the timeout the whole process
    group goes, the worker and the child alike, and the next item still runs."""
    pids = tmp_path / "pids"
    target = tmp_path / "sleeper.py"
    target.write_text(
        MODEL
        + textwrap.dedent(
            f"""
            import os, subprocess, sys, time

            class Sleeps(nn.Module):
                def __init__(self) -> None:
                    super().__init__()
                    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10**6)"])
                    with open({str(pids)!r}, "a") as f:
                        f.write(f"{{os.getpid()}}\\n{{child.pid}}\\n")
                    time.sleep(10**6)

            class Next(nn.Module):
                def __init__(self) -> None:
                    super().__init__()
                    self.lin = nn.Linear(2, 2)
            """
        )
    )
    try:
        res, took = _probe(target, "--timeout", "8")
        assert res.returncode == 2, res.stdout + res.stderr[-2000:]
        assert "error sleeper.py:Sleeps: timed out after 8 s" in res.stdout, res.stdout
        assert "probe sleeper.py:Next on cpu" in res.stdout and ": passed" in res.stdout
        assert len(_pids(pids)) == 2
        assert _gone(_pids(pids)) == []
        assert took < 90, took
    finally:
        _kill(_pids(pids))


def test_killed_parent_takes_the_worker_and_its_children(tmp_path):
    """The worker leads a session of its own, out of reach of a signal to the probe's group:
    when the probe is killed outright, the worker kills its group (the target's children too)."""
    pids = tmp_path / "pids"
    target = tmp_path / "stuck.py"
    target.write_text(
        MODEL
        + textwrap.dedent(
            f"""
            import os, subprocess, sys, time

            class Stuck(nn.Module):
                def __init__(self) -> None:
                    super().__init__()
                    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10**6)"])
                    with open({str(pids)!r}, "a") as f:
                        f.write(f"{{os.getpid()}}\\n{{child.pid}}\\n")
                    time.sleep(10**6)
            """
        )
    )
    cmd = [sys.executable, "-m", "metalint", "probe", str(target), "--device", "cpu"]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _SESSIONS.append(proc.pid)
    try:
        end = time.monotonic() + 120
        while len(_pids(pids)) < 2:
            assert proc.poll() is None and time.monotonic() < end, "the target never started"
            time.sleep(0.1)
        proc.kill()  # the probe alone, as `kill -9 PID` does
        proc.wait()
        assert _gone(_pids(pids), wait=10) == []
    finally:
        _kill(_pids(pids))
