"""``metalint probe``: prove meta-safety by building each module on the meta device.

Modules: :mod:`.codes` (MP001-MP009, torch-free), :mod:`.target` (TARGET parsing, argument
inference, ``[tool.metalint.probe]``), :mod:`.isolate` / :mod:`.worker` (one child process per
target, or one for the files ``fix --verify`` rewrote; per-item timeout, crash recovery), :mod:`.build` (eager build -> meta build ->
``to_empty`` -> poison -> init -> compare), :mod:`.attribute` (dispatch modes recording the
source line and randomness of every write, device escapes), :mod:`.compare` (statistics,
exact and statistical comparison), :mod:`.merge` (static verdicts), :mod:`.command` (CLI).
Importing this package does not import torch; :mod:`.build` and the worker do.
"""
