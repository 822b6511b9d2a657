"""``metalint fix``: codemods that make a module meta-safe, applied safely.

One codemod per rule code lives in this package (``parameter_from_value`` for ML001, ...);
:mod:`metalint.fix.registry` maps codes to codemods and turns a codemod's rewrite of a class into
a :class:`~metalint.diagnostics.Fix` (the engine calls it, so ``check`` shows fixability).
:mod:`metalint.fix.apply` applies fixes to a file until nothing changes, :mod:`metalint.fix.write`
writes atomically, :mod:`metalint.fix.verify` checks the result with the probe, and
:mod:`metalint.fix.command` is the CLI. Nothing here imports torch except ``verify`` (through
the probe, in a child process).

Usage: ``metalint fix [PATHS]... [--write] [--diff] [--unsafe-fixes] [--verify] [--show-fixes]
[--select/--ignore CODES]``. Without ``--write``: a unified diff, nothing written, exit 1 when
something would change. With ``--write``: ``Fixed N errors (M remaining; K unfixable).``, exit 1
while findings remain; unreadable or unparsable files are reported (ML900), left alone, exit 2.

Safety model:
- ``safe``: eager construction under the same seed gives bitwise the same tensors (tested on every
  fixture by ``tests/test_fix.py``); ``unsafe`` (needs ``--unsafe-fixes``): a constructor signature
  changes (``device``/``dtype`` added), random draws move after other draws, an existing hook
  that ``__init__`` did not call is now called, or an attribute assigned elsewhere becomes a buffer.
- Refused (reported with the reason): a shape that cannot be derived statically, a value read or
  overwritten later in ``__init__``, a base class with its own ``reset_parameters()`` or outside
  the checked files, a subclass overriding the hook, code in loops/``with``/``try``, locals
  unpacked from a random draw, ``None``-or-tensor buffers, a root ``init_weights()``
  that ``__init__`` calls with code between that draws random numbers or reads tensors.
- Writes: each round's result must parse (libcst and ``compile``); files are written atomically
  (temp file in the same folder, fsync, mode kept, ``os.replace``) only if their bytes are still
  those that were read. A second ``fix`` on the result changes nothing.
- ``--verify`` probes each rewritten class in a child process; a failing class's file is
  restored and fixed again without that class.
"""
