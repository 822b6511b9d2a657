"""ML002 buffer-from-value: compute the buffer in a hook that ``__init__`` calls.

``self.register_buffer("inv_freq", inv_freq, persistent=False)`` after
``inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))`` gets::

    self.base = base                      # what the computation reads, kept on self
    self.dim = dim
    self.register_buffer("inv_freq", inv_freq, persistent=False)   # unchanged
    ...
    self.reset_parameters()               # last statement of __init__

    def reset_parameters(self):
        with torch.no_grad():
            self.inv_freq.copy_(1.0 / (self.base ** (torch.arange(0, self.dim, 2).float() / self.dim)))

The registration keeps its computation (on meta it costs nothing), so no shape has to be
derived; the hook re-computes the same value on the default device and copies it into the
buffer, wherever ``to_empty()`` put it. The hook is the class's ``init_non_persistent_buffers``
when it has one, else ``reset_parameters``. Deterministic values are recomputed exactly (safe);
a random value would be drawn twice (unsafe).
"""

from __future__ import annotations

from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import Rewrite, Unfixable
from metalint.fix.recompute_hook import located
from metalint.static.rule import Finding, RuleContext


def plan(ctx: RuleContext, cls, finding: Finding) -> Rewrite:
    site = finding.site
    if site.call is None:
        raise Unfixable("not a `register_buffer(name, value)` call")
    return located(ClassEdit(ctx, cls), site.call, site.attr, site.value, site.method)
