"""What a person at a terminal gets and a pipe, a file or CI does not: colour and progress.

Colour (text formats only, never in a file written with ``-o``): ``NO_COLOR`` (set and not
empty) turns it off, else ``FORCE_COLOR`` (set and not empty) turns it on, else it is on when
the output is a terminal. Progress (``files analysed / total`` on stderr, one line rewritten
in place) is shown only when stderr is a terminal; the command decides, and the workers that
analyse files report through :func:`advance` while a :func:`progress` block is open.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


def use_color(stream: TextIO, text_format: bool) -> bool:
    """Whether to colour a text report written to ``stream``."""
    if not text_format:
        return False
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return _isatty(stream)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a file
        return False


class Progress:
    """``metalint: analysed 12/40 files`` on ``stream``, rewritten at most every ``interval``
    seconds (and always at the last file, then erased; :meth:`close` erases it too)."""

    def __init__(self, stream: TextIO, interval: float = 0.1) -> None:
        self.stream = stream
        self.interval = interval
        self.last = 0.0
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < self.interval:
            return
        self.last = now
        self.shown = done < total
        # the last count is erased at once: what the command prints next starts a clean line
        end = "\r\x1b[K" if done >= total else ""
        self.stream.write(f"\r\x1b[Kmetalint: analysed {done}/{total} files{end}")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


_current: Progress | None = None


def advance(done: int, total: int) -> None:
    """``done`` of ``total`` files analysed: shown when a :func:`progress` block is open."""
    if _current is not None:
        _current(done, total)


@contextmanager
def progress(enabled: bool, stream: TextIO | None = None) -> Iterator[None]:
    """Show the files analysed on ``stream`` (stderr) while the block runs, if ``enabled``
    and ``stream`` is a terminal."""
    global _current
    stream = stream or sys.stderr
    if not enabled or not _isatty(stream):
        yield
        return
    previous, _current = _current, Progress(stream)
    try:
        yield
    finally:
        _current.close()
        _current = previous
