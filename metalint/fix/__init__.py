"""``metalint fix``: codemods that make a module meta-safe, applied safely.

One codemod per rule code lives in this package (``parameter_from_value`` for ML001, ...);
:mod:`metalint.fix.registry` maps codes to codemods and turns a codemod's rewrite of a class into
a :class:`~metalint.diagnostics.Fix` (the engine calls it, so ``check`` shows fixability).
:mod:`metalint.fix.apply` applies fixes to a file until nothing changes, :mod:`metalint.fix.write`
writes atomically, :mod:`metalint.fix.verify` checks the result with the probe, and
:mod:`metalint.fix.command` is the CLI. Nothing here imports torch except ``verify`` (through
the probe, in a child process).
"""
