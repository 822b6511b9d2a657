"""The static rules: one module per rule, discovered here.

``all_rules()`` returns the :class:`~metalint.static.rule.Rule` classes sorted by code;
``describe(code)`` names any code metalint emits (static rules, probe findings, errors).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from metalint.static.rule import Rule


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
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


def rule_by_code(code: str) -> type[Rule] | None:
    for rule in all_rules():
        if rule.code == code:
            return rule
    return None


#: codes that are not rules of their own
SPECIAL_CODES = {
    "ML900": ("unreadable-input", "A file or probe target could not be checked at all"),
}


def describe(code: str):
    from metalint.report import RuleInfo

    rule = rule_by_code(code)
    if rule is not None:
        return RuleInfo(rule.code, rule.name, rule.summary)
    if code in SPECIAL_CODES:
        return RuleInfo(code, *SPECIAL_CODES[code])
    try:
        from metalint.probe.codes import PROBE_CODES
    except ImportError:
        return None
    if code in PROBE_CODES:
        name, summary = PROBE_CODES[code][:2]
        return RuleInfo(code, name, summary)
    return None
