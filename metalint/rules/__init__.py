"""The static rules: one module per rule, discovered here.

``all_rules()`` returns the :class:`~metalint.static.rule.Rule` classes sorted by code;
``describe(code)`` names any code metalint emits (static rules, probe findings, errors).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import TYPE_CHECKING

from metalint.codes import RuleInfo, code_page, describe_code

if TYPE_CHECKING:
    from metalint.static.rule import Rule


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    from metalint.static.rule import Rule

    found: dict[str, type[Rule]] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, Rule)
                and obj is not Rule
                and obj.__module__ == module.__name__
            ):
                if obj.code in found:
                    raise RuntimeError(f"rule code {obj.code} defined twice")
                found[obj.code] = obj
    return tuple(found[c] for c in sorted(found))


@lru_cache(maxsize=1)
def rule_codes() -> tuple[tuple[str, ...], frozenset[str]]:
    """The codes of :func:`all_rules` and those on by default, read from the rule files' text.

    Importing the rules imports libcst (about a second); a run where every file is a cache hit
    needs only the codes (for the cache key and ``--select``). A rule is a class with a string
    ``code = "MLxxx"`` in its body; ``default = False`` makes it opt-in (``Rule.default`` is True).
    ``tests/test_bench_smoke.py`` checks that this agrees with :func:`all_rules`.
    """
    import ast
    from pathlib import Path

    codes: dict[str, bool] = {}
    for info in pkgutil.iter_modules(__path__):
        path = Path(__path__[0]) / f"{info.name}.py"
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            rules = all_rules()  # not a plain .py file: ask the real thing
            return tuple(r.code for r in rules), frozenset(r.code for r in rules if r.default)
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            attrs = {
                t.id: stmt.value
                for stmt in node.body
                if isinstance(stmt, ast.Assign)
                for t in stmt.targets
                if isinstance(t, ast.Name)
            }
            code = attrs.get("code")
            if isinstance(code, ast.Constant) and isinstance(code.value, str):
                default = attrs.get("default")
                codes[code.value] = not (
                    isinstance(default, ast.Constant) and default.value is False
                )
    return tuple(sorted(codes)), frozenset(c for c, on in codes.items() if on)


def rule_by_code(code: str) -> type[Rule] | None:
    for rule in all_rules():
        if rule.code == code:
            return rule
    return None


def describe(code: str) -> RuleInfo | None:
    """Name and summary of any code metalint prints: a static rule, a probe finding, ML900."""
    rule = rule_by_code(code)
    if rule is not None:
        return RuleInfo(rule.code, rule.name, rule.summary)
    return describe_code(code)


def page(code: str) -> str | None:
    """The reference page (markdown) of any code metalint prints, as ``metalint rule`` shows."""
    rule = rule_by_code(code)
    if rule is not None:
        return rule.markdown()
    return code_page(code)
