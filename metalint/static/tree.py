"""The cross-file view of a checked tree (:class:`Hierarchy`, :class:`Protocols`), kept up to
date while one file's result at a time is replaced.

``metalint fix`` analyses a file again after each round of rewrites and judges its findings
across the tree. Building the hierarchy and the protocols afresh each time reads every file's
result: over a tree of N files that is N times the work of one build (the fix of 2000 small
files took 2.7 times as long as that of 1000). A rewrite almost never changes what other
files see of a file (its classes, their bases and children, its exports): then the new
result takes the old one's place in the dictionaries and the answers memoised from the old
one are forgotten, in time proportional to the file. Anything else (a class added, renamed,
or defined twice in the tree, a base or child changed, an export changed) builds both again
from every result, as before: the answers are the same either way.
"""

from __future__ import annotations

from collections import Counter

from metalint.static.hierarchy import Hierarchy
from metalint.static.protocol import Protocols
from metalint.static.results import FileResult


class Tree:
    """:attr:`hierarchy` and :attr:`protocols` of ``results`` (in order; one per path)."""

    def __init__(self, results: list[FileResult], protocol: str = "auto") -> None:
        self.results = {r.path: r for r in results}
        self.protocol = protocol
        #: how many times each view was built from every result (for tests and benchmarks)
        self.rebuilds = 0
        self._build()

    def _build(self) -> None:
        results = list(self.results.values())
        self.hierarchy = Hierarchy(results)
        self.protocols = Protocols(self.hierarchy, self.protocol)
        counts = Counter(c.fullname for r in results for c in r.classes)
        #: class names defined more than once in the tree (the hierarchy merges them)
        self.shared = {name for name, n in counts.items() if n > 1}
        self.rebuilds += 1

    def replace(self, result: FileResult) -> None:
        """Put ``result`` in the place of the result of the same path (added at the end when
        there was none)."""
        old = self.results.get(result.path)
        self.results[result.path] = result
        if old is None or not self._same_shape(old, result):
            self._build()
            return
        h = self.hierarchy
        for c in result.classes:
            h.classes[c.fullname] = c
        for name, summary in result.functions.items():
            h.functions[name] = summary
        if result.module:
            h.exports[result.module] = result.exports
        if old.materialisations or result.materialisations:
            h.sites = [(r.path, s) for r in self.results.values() for s in r.materialisations]
        h.replaced()
        self.protocols.forget()

    def _same_shape(self, old: FileResult, new: FileResult) -> bool:
        """Whether ``new`` leaves every name of the tree resolving as ``old`` did and every
        class contained in and derived from the same classes."""
        h = self.hierarchy
        if old.module != new.module or old.exports != new.exports:
            return False
        if not old.module or h.exports.get(old.module) is not old.exports:
            return False
        if [c.fullname for c in old.classes] != [c.fullname for c in new.classes]:
            return False
        for a, b in zip(old.classes, new.classes):
            if a.fullname in self.shared or h.classes.get(a.fullname) is not a:
                return False
            if a.bases != b.bases or any(
                a.protocol.get(k) != b.protocol.get(k) for k in ("children", "hosted")
            ):
                return False
        if old.functions.keys() != new.functions.keys():
            return False
        return all(h.function_files.get(name) == new.path for name in new.functions)
