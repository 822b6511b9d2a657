"""ML016 root-init-skips-module-hooks: the root's entry point calls each module's own hook.

Where a materialisation of the tree runs only the root's ``init_weights()`` after
``to_empty()``, the modules' own ``reset_parameters()`` never run. The rewrite puts, at the
start of the entry point (after its docstring)::

    for module in self.modules():
        if module is not self and hasattr(module, "reset_parameters"):
            module.reset_parameters()

so every module's own hook runs first and the root's own init then overrides what it
re-initialises: the order the ``init_weights`` protocol assumes. The root's own
``reset_parameters()`` is not called (it may call the entry point). An entry point that
already calls it is left alone.

Unsafe: the model's initial values change.
"""

from __future__ import annotations

import libcst as cst

from metalint.diagnostics import Applicability
from metalint.fix.edits import Rewrite, Unfixable, is_docstring, replaced, stmt
from metalint.static.model import ClassFacts
from metalint.static.rule import Finding, RuleContext
from metalint.static.syntax import walk_code
from metalint.vocabulary import RESET_HOOK


def _free_name(fn: cst.FunctionDef) -> str:
    used = {n.value for n in walk_code(fn) if type(n) is cst.Name}
    name = "module"
    while name in used:
        name = f"_{name}"
    return name


def plan(ctx: RuleContext, cls: ClassFacts, finding: Finding) -> Rewrite:
    entry, fn = finding.hook, finding.site.fn
    params = [*fn.params.posonly_params, *fn.params.params]
    if not params or not isinstance(fn.body, cst.IndentedBlock):
        raise Unfixable(f"`{cls.name}.{entry}()` is not a method with a body")
    me = params[0].name.value
    var = _free_name(fn)
    loop = stmt(
        f"for {var} in {me}.modules():\n"
        f'    if {var} is not {me} and hasattr({var}, "{RESET_HOOK}"):\n'
        f"        {var}.{RESET_HOOK}()\n"
    )
    body = list(fn.body.body)
    at = 1 if body and is_docstring(body[0]) else 0
    new_fn = fn.with_changes(body=fn.body.with_changes(body=[*body[:at], loop, *body[at:]]))
    return Rewrite(
        replaced(cls.node, fn, new_fn),
        Applicability.UNSAFE,
        f"`{cls.name}.{entry}()` calls each module's own `{RESET_HOOK}()` first (unsafe: the "
        "initial values change)",
        hook=entry,
    )
