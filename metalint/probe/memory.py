"""Anonymous resident memory (``RssAnon``), read from ``/proc/<pid>/status``.

``ru_maxrss``/``VmHWM`` count file-backed pages (mapped libraries, safetensors mmaps) and
cannot be reset; ``tracemalloc`` does not see torch's allocator. We sample ``RssAnon``.
"""

from __future__ import annotations

import os
import threading


def rss_anon(pid: int | str = "self") -> int:
    """Bytes of anonymous resident memory of ``pid``; 0 where /proc is unavailable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PeakSampler:
    """Samples ``RssAnon`` of ``pid`` from a thread every ``interval`` seconds; ``peak`` in bytes."""

    def __init__(self, pid: int | str = "self", interval: float = 0.002) -> None:
        self.pid = pid if pid != "self" else os.getpid()
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_anon(self.pid))
            self._stop.wait(self.interval)

    def reset(self) -> None:
        self.peak = rss_anon(self.pid)

    def __enter__(self) -> "PeakSampler":
        self.peak = rss_anon(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_anon(self.pid))


def fixed_mmap_threshold(nbytes: int = 1 << 20) -> bool:
    """Make glibc serve allocations >= ``nbytes`` (1 MiB) with mmap and give them back on free.

    By default glibc raises its mmap threshold after the first large free, after which freed
    tensors stay in the heap: the eager model's memory would not be returned before the
    deferred build, and the probe's peak would be two models. Returns whether it applied.
    """
    try:
        import ctypes

        return bool(ctypes.CDLL("libc.so.6").mallopt(-3, int(nbytes)))  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False
