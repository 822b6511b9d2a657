"""The least a checker written in Python must do: CPython's own parser on every file.

    python bench/parse_floor.py TREE [--walk | --libcst {whole,read}] [--jobs N]

Parses every ``*.py`` file under TREE with ``ast.parse`` (C code: the fastest parser a Python
program has), in ``N`` worker processes forked like ``metalint check``'s (default: every CPU),
the biggest files first, the cycle collector paused as in metalint's workers. ``--walk`` also
visits every node once with ``ast.walk``, the least a pass of rules over the tree costs. No rule
runs and nothing is reported: the time is a floor under any Python-hosted static check of the
tree, and ``bench/run.py`` sets it beside ruff and metalint.

``--libcst whole`` parses every file with libcst instead (what a format-preserving tool pays
to read the tree: TorchFix, Fixit). ``--libcst read`` does what ``metalint check`` does to
read a file before any rule runs: CPython's parse, then libcst's parse of what the rules read
(:mod:`metalint.static.elide`; files that name nothing of torch are not parsed by libcst).
"""

from __future__ import annotations

import argparse
import ast
import gc
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor


def _parse(job: tuple[list[str], bool, str | None]) -> tuple[int, int]:
    paths, walk, libcst = job
    gc.disable()
    read = _READERS[libcst] if libcst else _read_ast
    errors: tuple = (SyntaxError, ValueError, OSError, RecursionError)
    if libcst:
        from libcst import ParserSyntaxError

        errors = (*errors, ParserSyntaxError)
    nodes = failed = 0
    for path in paths:
        try:
            with open(path, "rb") as f:
                tree = read(f.read(), path)
        except errors:
            failed += 1
            continue
        if walk:
            for _ in ast.walk(tree):
                nodes += 1
    return nodes, failed


def _read_ast(data: bytes, path: str) -> ast.Module:
    return ast.parse(data, path)


def _read_libcst(data: bytes, path: str):
    import libcst

    return libcst.parse_module(data)


def _read_as_metalint(data: bytes, path: str):
    from metalint.hooks import DEFAULT_HOOKS
    from metalint.static.elide import elide
    from metalint.static.engine import PREFILTER
    from metalint.static.syntax import parse_valid_module

    tree = ast.parse(data, path)
    if PREFILTER.search(data):
        parse_valid_module(elide(data.decode("utf-8"), tree, DEFAULT_HOOKS))
    return tree


_READERS = {"whole": _read_libcst, "read": _read_as_metalint}


def python_files(tree: str) -> list[str]:
    return [os.path.join(d, n) for d, _, names in os.walk(tree) for n in names if n.endswith(".py")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree")
    ap.add_argument("--walk", action="store_true", help="also visit every node")
    ap.add_argument("--libcst", choices=sorted(_READERS), help="parse with libcst (see above)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args(argv)
    paths = sorted(python_files(a.tree), key=os.path.getsize, reverse=True)
    jobs = max(1, min(a.jobs, len(paths)))
    # dealt round-robin from the biggest down: shares of about equal size
    shares = [(paths[i::jobs], a.walk, a.libcst) for i in range(jobs)]
    if jobs == 1:
        results = [_parse(shares[0])]
    else:
        ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            results = list(pool.map(_parse, shares))
    nodes = sum(n for n, _ in results)
    failed = sum(f for _, f in results)
    walked = f", {nodes} nodes visited" if a.walk else ""
    print(f"Parsed {len(paths) - failed} of {len(paths)} files{walked}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
