"""Analyse files in worker processes, where a crash or an overrun costs one file, not the run.

Each file's analysis runs in a forked worker under a CPU-time budget (``RLIMIT_CPU``, set
afresh before each file: the kernel stops a worker that runs past it, even inside libcst's
native parser, where no Python-level timer can) and Python's recursion guard. A worker that
dies on a file gives that file one error, ML901 (``file too complex to analyse``: the budget,
or nesting past the recursion guard) or ML902 (``parser crashed``: any other death, e.g. a
native stack overflow); a fresh worker takes its place and every other file is analysed as if
the bad one were absent. A wall-clock bound (several times the budget) backs the CPU one up.

Each worker also runs under a bound on its address space (``RLIMIT_AS``: its size when forked
plus ``WORKER_MEMORY`` bytes): a file whose analysis would take more memory fails there, as
ML901 (``out of memory``), instead of growing the worker to many gigabytes: a ``MemoryError``
in Python, or a native allocation that fails (libcst's parser aborts the worker, which prints
``memory allocation of N bytes failed``: a worker's stderr goes to a file of its own, read
when it dies, never to the user's terminal).

Workers are forked (Linux, plain ``os.fork`` and pipes): the parent imports the engine and
the rules once, before the fork. Elsewhere files are analysed in this process, without the
budget or the isolation.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import sys
import tempfile
import time

from metalint.report import CRASH_CODE, TOO_COMPLEX_CODE
from metalint.static.results import FileResult, error_result
from metalint.terminal import advance

#: wall-clock bound on one file: this many times its CPU budget, plus a margin for a busy box;
#: it only stops a worker that is blocked (a hang uses no CPU, so RLIMIT_CPU cannot stop it)
WALL_FACTOR = 4
WALL_MARGIN = 10.0

#: bytes a worker's address space may grow by past its size when forked (``RLIMIT_AS``): the
#: analysis of a file takes a few hundred times its size, and files over
#: ``files.MAX_SOURCE_BYTES`` (8 MiB) are not analysed
WORKER_MEMORY = 2 * 2**30

#: (source, display, module, is_package, hooks, defer_helper_reads: see analyze_source)
Job = tuple[str, str, str, bool, tuple[str, ...], bool]


def analyze_one(job: Job) -> FileResult:
    """Analyse one file in this process; a bug of ours costs this file only."""
    source, display, module, is_package, hooks, defer_helper_reads = job
    # imported here, not at the top: ``check``'s all-cached path needs neither libcst nor the rules
    from metalint.fix.registry import fix_for
    from metalint.rules import all_rules
    from metalint.static.engine import analyze_source

    try:
        return analyze_source(
            source,
            display,
            module,
            is_package=is_package,
            hooks=hooks,
            rules=all_rules(),
            fix_for=fix_for,
            defer_helper_reads=defer_helper_reads,
        )
    except RecursionError:
        return too_complex(display, "nesting deeper than the recursion guard")
    except MemoryError:
        return too_complex(display, "out of memory")
    except Exception as exc:  # noqa: BLE001
        return error_result(display, f"internal error while checking: {type(exc).__name__}: {exc}")


def preload() -> None:
    """Import what analysing a file needs (the engine, the rules, the fix registry and every
    codemod it may call), once, before workers fork: each would import it again."""
    from metalint.fix.registry import CODEMODS, codemod
    from metalint.rules import all_rules
    from metalint.static.engine import analyze_source  # noqa: F401

    all_rules()
    for code in CODEMODS:
        codemod(code)


def too_complex(display: str, why: str) -> FileResult:
    return error_result(display, f"file too complex to analyse ({why})", code=TOO_COMPLEX_CODE)


def crashed(display: str, why: str) -> FileResult:
    return error_result(display, f"parser crashed ({why})", code=CRASH_CODE)


def can_isolate() -> bool:
    return sys.platform == "linux"


def _send(fd: int, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _recv(fd: int):
    """The next message on ``fd``; EOFError when the writer is gone (or died mid-message)."""
    head = _read_exactly(fd, 8)
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(_read_exactly(fd, n))


def _read_exactly(fd: int, n: int) -> bytes:
    parts, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _worker_main(jobs_fd: int, results_fd: int, budget: float) -> None:
    import faulthandler
    import resource

    faulthandler.disable()  # a crash is one ML902 line, not a dump on the user's terminal
    try:  # a crash leaves no core file in the user's tree
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles ^C
    _bound_memory(resource)
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    while True:
        try:
            item = _recv(jobs_fd)
        except (EOFError, OSError):
            break
        if item is None:
            break
        index, job = item
        try:  # stderr holds what this file's analysis printed, no more
            os.ftruncate(2, 0)
            os.lseek(2, 0, os.SEEK_SET)
        except OSError:
            pass
        used = resource.getrusage(resource.RUSAGE_SELF)
        limit = int(used.ru_utime + used.ru_stime + budget) + 1
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))
        except (ValueError, OSError):
            pass
        _send(results_fd, (index, analyze_one(job).to_json()))


def _address_space() -> int:
    """This process's address space in bytes (0 when unknown)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _bound_memory(resource) -> None:
    """``RLIMIT_AS``: the worker's size now plus ``WORKER_MEMORY`` (a lower hard limit
    stays)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space() + WORKER_MEMORY
    for bound in (soft, hard):
        if bound != resource.RLIM_INFINITY:
            limit = min(limit, bound)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):
        pass


def _runnable(pid: int) -> bool:
    """Whether ``pid`` is running or waiting for a CPU (Linux ``R``): on a busy box a worker
    can wait longer than the wall bound without being stuck, and its CPU budget still bounds
    it. A worker blocked in a sleep or a lock (or whose state cannot be read) is not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"R"


class _Worker:
    """A forked child with a pipe each way (plain ``os.fork``: ``multiprocessing`` costs more
    to import and start than a small check takes)."""

    #: the parent's ends of every live worker's pipes: a new child closes them
    parent_fds: set[int] = set()

    def __init__(self, budget: float) -> None:
        jobs_r, jobs_w = os.pipe()
        results_r, results_w = os.pipe()
        self.stderr = tempfile.TemporaryFile(prefix="metalint-worker-")
        err = self.stderr.fileno()
        pid = os.fork()
        if pid == 0:  # the child
            code = 0
            try:
                os.dup2(err, 2)
                for fd in (jobs_w, results_r, err, *_Worker.parent_fds):
                    os.close(fd)
                _worker_main(jobs_r, results_w, budget)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        os.close(jobs_r)
        os.close(results_w)
        self.pid = pid
        self.jobs = jobs_w
        self.results = results_r
        _Worker.parent_fds |= {jobs_w, results_r, err}
        self.index: int | None = None
        self.started = 0.0
        self.status: int | None = None
        #: whether the worker's stderr says a native allocation failed (read when reaped)
        self.out_of_memory = False

    def give(self, index: int, job: Job) -> bool:
        """Hand ``job`` over; False when the worker is gone."""
        self.index = index
        self.started = time.monotonic()
        try:
            _send(self.jobs, (index, job))
            return True
        except OSError:
            return False

    def reap(self, kill: bool = False) -> int | None:
        """Stop the worker; its exit status (negative: the signal that ended it)."""
        if self.status is None:
            if kill:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except OSError:
                    pass
            else:
                try:
                    _send(self.jobs, None)
                except OSError:
                    pass
            _, status = os.waitpid(self.pid, 0)
            self.status = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            for fd in (self.jobs, self.results):
                _Worker.parent_fds.discard(fd)
                os.close(fd)
            self.out_of_memory = _allocation_failed(self.stderr.fileno())
            _Worker.parent_fds.discard(self.stderr.fileno())
            self.stderr.close()
        return self.status


def _allocation_failed(fd: int) -> bool:
    """Whether a worker's stderr says a native allocation failed (Rust's ``memory allocation
    of N bytes failed``; what it printed for its last file, the first and last 4 KiB)."""
    try:
        size = os.fstat(fd).st_size
        text = os.pread(fd, 4096, 0) + os.pread(fd, 4096, max(0, size - 4096))
    except OSError:
        return False
    return b"memory allocation of" in text


def _death(w: _Worker, display: str, budget: float) -> FileResult:
    exitcode = w.reap(kill=True)
    if w.out_of_memory:
        return too_complex(display, "out of memory")
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
    run = _IsolatedRun(jobs, budget)
    try:
        for _ in range(max(1, min(workers, len(jobs)))):
            run.pool.append(_Worker(budget))
        for w in list(run.pool):
            run.feed(w)
        while run.step():
            pass
    finally:
        for w in run.pool:
            w.reap(kill=w.index is not None)
    return [r for r in run.out if r is not None]


class _IsolatedRun:
    """The workers of :func:`analyze_isolated` and what they have answered."""

    def __init__(self, jobs: list[Job], budget: float) -> None:
        self.jobs = jobs
        self.budget = budget
        self.out: list[FileResult | None] = [None] * len(jobs)
        # biggest first, handed out as workers free up, so the workers finish together
        self.todo = sorted(range(len(jobs)), key=lambda i: len(jobs[i][0]))  # popped from the end
        self.wall = budget * WALL_FACTOR + WALL_MARGIN
        self.pool: list[_Worker] = []

    def feed(self, w: _Worker) -> None:
        """Give ``w`` the next job (a worker that dies taking it is replaced)."""
        while self.todo:
            i = self.todo.pop()
            if w.give(i, self.jobs[i]):
                return
            self.out[i] = _death(w, self.jobs[i][1], self.budget)
            w = self._replace(w)
        w.index = None

    def _replace(self, w: _Worker) -> _Worker:
        fresh = _Worker(self.budget)
        self.pool[self.pool.index(w)] = fresh
        return fresh

    def step(self) -> bool:
        """Read what the busy workers answered within a second; False when none is busy."""
        busy = {w.results: w for w in self.pool if w.index is not None}
        if not busy:
            return False
        ready, _, _ = select.select(list(busy), [], [], 1.0)
        for fd in ready:
            self._answer(busy[fd], fd)
        n = len(self.jobs)
        advance(n - len(self.todo) - sum(w.index is not None for w in self.pool), n)
        self._reap_blocked()
        return True

    def _answer(self, w: _Worker, fd) -> None:
        try:
            index, data = _recv(fd)
        except (EOFError, OSError):  # the worker died on its file
            i = w.index
            self.out[i] = _death(w, self.jobs[i][1], self.budget)
            self.feed(self._replace(w))
            return
        self.out[index] = FileResult.from_json(self.jobs[index][1], data)
        self.feed(w)

    def _reap_blocked(self) -> None:
        """Replace each worker blocked (not runnable) for longer than the wall time."""
        now = time.monotonic()
        for w in list(self.pool):
            if w.index is not None and now - w.started > self.wall and not _runnable(w.pid):
                i = w.index
                w.reap(kill=True)
                self.out[i] = too_complex(
                    self.jobs[i][1], f"blocked for over {self.wall:g} s of wall time"
                )
                self.feed(self._replace(w))
