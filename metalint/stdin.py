"""``metalint check -`` (or ``--stdin-filename NAME`` without paths): check the source read
from stdin as if it were the file NAME (default ``-``). NAME is what the report shows and
what ``per-file-ignores`` match; the file itself is never read. Cross-file questions are
answered within this one file.
"""

from __future__ import annotations

import sys
from pathlib import Path

from metalint.config import Settings
from metalint.jobs import Job
from metalint.static.results import FileResult, decode

#: the path that stands for stdin, and the name its source is shown under by default
STDIN = "-"


def read_stdin() -> bytes:
    """stdin's bytes: the source's coding cookie says how to read them, as for a file."""
    stream = sys.stdin
    if hasattr(stream, "buffer"):
        return stream.buffer.read()
    return stream.read().encode("utf-8")


def stdin_job(
    filename: str, settings: Settings, data: bytes
) -> tuple[Job | None, FileResult | None, str]:
    """The analysis job of ``data`` as the file ``filename`` (or, when it cannot be decoded,
    the error result instead), and its text."""
    source, error = decode(data, filename)
    if error is not None:
        return None, error, ""
    # imports libcst: only when there is something to analyse
    from metalint.static.names import module_name_for

    path = Path(filename)
    module = module_name_for(path.absolute())
    return (
        (source, filename, module, path.name == "__init__.py", settings.hooks, False),
        None,
        source,
    )
