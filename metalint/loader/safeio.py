"""Open only regular files, and read no more than a limit.

A checkpoint path may name a FIFO (an open for reading waits for a writer that never comes), a
device (``/dev/zero`` reads forever) or a link to one. :func:`require_regular` checks the path
with ``os.stat`` before anything opens it; :func:`open_regular` also opens with ``O_NONBLOCK``
and checks the open file again, so a file swapped for a FIFO in between cannot block the open.
Every failure is a :class:`~metalint.loader.errors.CheckpointError` naming the file.
"""

from __future__ import annotations

import os

from metalint.files import not_regular
from metalint.loader.errors import CheckpointError


def _refuse(path, kind: str, what: str):
    raise CheckpointError(f"{what}is {kind}, not a regular file; refused", file=str(path))


def require_regular(path, what: str = "") -> os.stat_result:
    """``os.stat(path)`` (links followed) when it is a regular file, else a CheckpointError."""
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"{what}cannot be read: {getattr(exc, 'strerror', None) or exc}", file=str(path)
        ) from None
    kind = not_regular(st.st_mode)
    if kind:
        _refuse(path, kind, what)
    return st


def open_regular(path, what: str = ""):
    """Open the regular file ``path`` for binary reading (never blocks on a FIFO)."""
    require_regular(path, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"{what}cannot be read: {getattr(exc, 'strerror', None) or exc}", file=str(path)
        ) from None
    try:
        kind = not_regular(os.fstat(fd).st_mode)
        if kind:
            _refuse(path, kind, what)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_limited(path, limit: int, what: str = "") -> bytes:
    """The whole regular file ``path``, refused when it is over ``limit`` bytes."""
    with open_regular(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise CheckpointError(
                f"{what}is {size} bytes, over the {limit}-byte limit", file=str(path)
            )
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise CheckpointError(
                f"{what}cannot be read: {exc.strerror or exc}", file=str(path)
            ) from None
    if len(data) > limit:
        raise CheckpointError(f"{what}grew over the {limit}-byte limit", file=str(path))
    return data
