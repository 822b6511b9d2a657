"""Analyse files in worker processes, where a crash or an overrun costs one file, not the run.

Each file's analysis runs in a forked worker under a CPU-time budget (``RLIMIT_CPU``, set
afresh before each file: the kernel stops a worker that runs past it, even inside libcst's
native parser, where no Python-level timer can) and Python's recursion guard. A worker that
dies on a file gives that file one error, ML901 (``file too complex to analyse``: the budget,
or nesting past the recursion guard) or ML902 (``parser crashed``: any other death, e.g. a
native stack overflow); a fresh worker takes its place and every other file is analysed as if
the bad one were absent. A wall-clock bound (several times the budget) backs the CPU one up.

Workers are forked (Linux): the parent imports the engine and the rules once, before the
fork. Elsewhere files are analysed in this process, without the budget.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait

from metalint.report import CRASH_CODE, TOO_COMPLEX_CODE
from metalint.static.results import FileResult, error_result

#: wall-clock bound on one file: this many times its CPU budget, plus a margin for a busy box
WALL_FACTOR = 4
WALL_MARGIN = 10.0

#: (source, display, module, is_package, hooks)
Job = tuple[str, str, str, bool, tuple[str, ...]]


def analyze_one(job: Job) -> FileResult:
    """Analyse one file in this process; a bug of ours costs this file only."""
    source, display, module, is_package, hooks = job
    from metalint.static.engine import analyze_source

    try:
        return analyze_source(source, display, module, is_package=is_package, hooks=hooks)
    except RecursionError:
        return too_complex(display, "nesting deeper than the recursion guard")
    except MemoryError:
        return too_complex(display, "out of memory")
    except Exception as exc:  # noqa: BLE001
        return error_result(display, f"internal error while checking: {type(exc).__name__}: {exc}")


def too_complex(display: str, why: str) -> FileResult:
    return error_result(display, f"file too complex to analyse ({why})", code=TOO_COMPLEX_CODE)


def crashed(display: str, why: str) -> FileResult:
    return error_result(display, f"parser crashed ({why})", code=CRASH_CODE)


def can_isolate() -> bool:
    return sys.platform == "linux"


def _worker_main(conn: Connection, budget: float) -> None:
    import resource

    # a crash leaves no core file in the user's tree
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles ^C
    import faulthandler

    faulthandler.disable()  # a crash is one ML902 line, not a dump on the user's terminal
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    while True:
        try:
            item = conn.recv()
        except (EOFError, OSError):
            break
        if item is None:
            break
        index, job = item
        used = resource.getrusage(resource.RUSAGE_SELF)
        limit = int(used.ru_utime + used.ru_stime + budget) + 1
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))
        except (ValueError, OSError):
            pass
        result = analyze_one(job)
        conn.send((index, result.to_json()))
    conn.close()
    os._exit(0)


class _Worker:
    def __init__(self, ctx, budget: float) -> None:
        parent, child = ctx.Pipe()
        self.conn = parent
        self.process = ctx.Process(target=_worker_main, args=(child, budget), daemon=True)
        self.process.start()
        child.close()
        self.index: int | None = None
        self.started = 0.0

    def give(self, index: int, job: Job) -> None:
        self.index = index
        self.started = time.monotonic()
        self.conn.send((index, job))

    def stop(self, kill: bool = False) -> None:
        try:
            if kill:
                self.process.kill()
            else:
                self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def _death(display: str, exitcode: int | None, budget: float) -> FileResult:
    if exitcode is not None and -exitcode in (signal.SIGXCPU, signal.SIGKILL):
        return too_complex(display, f"over its {budget:g} s budget")
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return crashed(display, f"the worker died of {name}")
    return crashed(display, f"the worker exited with status {exitcode}")


def analyze_isolated(jobs: list[Job], workers: int, budget: float) -> list[FileResult]:
    """Results of ``jobs``, in order, each analysed in a worker process under ``budget``
    CPU seconds."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    out: list[FileResult | None] = [None] * len(jobs)
    # biggest first, handed out as workers free up, so the workers finish together
    todo = sorted(range(len(jobs)), key=lambda i: -len(jobs[i][0]))
    todo.reverse()  # popped from the end
    pool = [_Worker(ctx, budget) for _ in range(max(1, min(workers, len(jobs))))]
    wall = budget * WALL_FACTOR + WALL_MARGIN

    def feed(w: _Worker) -> None:
        if todo:
            i = todo.pop()
            w.give(i, jobs[i])
        else:
            w.index = None

    def replace(w: _Worker, result: Callable[[str], FileResult]) -> _Worker:
        i = w.index
        assert i is not None
        w.stop(kill=True)
        out[i] = result(jobs[i][1])
        fresh = _Worker(ctx, budget)
        pool[pool.index(w)] = fresh
        feed(fresh)
        return fresh

    try:
        for w in pool:
            feed(w)
        while any(w.index is not None for w in pool):
            busy = {w.conn: w for w in pool if w.index is not None}
            sentinels = {w.process.sentinel: w for w in busy.values()}
            ready = wait([*busy, *sentinels], timeout=1.0)
            for obj in ready:
                w = busy.get(obj) or sentinels.get(obj)  # type: ignore[arg-type]
                if w is None or w.index is None or w not in pool:
                    continue
                if obj is w.conn or w.conn.poll():
                    try:
                        index, data = w.conn.recv()
                    except (EOFError, OSError):
                        pass
                    else:
                        out[index] = FileResult.from_json(jobs[index][1], data)
                        feed(w)
                        continue
                w.process.join(1)
                code = w.process.exitcode
                replace(w, lambda display, code=code: _death(display, code, budget))
            now = time.monotonic()
            for w in list(pool):
                if w.index is not None and now - w.started > wall:
                    replace(
                        w, lambda display: too_complex(display, f"over {wall:g} s of wall time")
                    )
    finally:
        for w in pool:
            w.stop(kill=w.index is not None)
    return [r for r in out if r is not None]
