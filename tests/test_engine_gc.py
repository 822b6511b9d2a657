"""The static engine pauses the cycle collector while it analyses a file; that is only sound if
nothing it builds for the file (libcst tree, facts, rules) outlives the call in a reference
cycle, which reference counting cannot free."""

from __future__ import annotations

import gc
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from metalint.fix.registry import fix_for
from metalint.rules import all_rules
from metalint.static.engine import analyze_source

PIPELINE = {"rules": all_rules(), "fix_for": fix_for}

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "fixtures").rglob("*.py"))]
SOURCES += [
    textwrap.dedent(getattr(src, "source", src)).lstrip("\n")
    for rule in all_rules()
    for examples in (rule.VALID, rule.INVALID)
    for src in examples
]


@pytest.fixture
def saved_garbage():
    """Run with the collector off and every unreachable object kept in ``gc.garbage``. What
    is alive before is frozen: each collection then walks only what the test made, not the
    hundreds of thousands of objects of the modules other tests imported (torch)."""
    gc.collect()
    gc.freeze()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.unfreeze()
        gc.collect()
        if was_enabled:
            gc.enable()


def test_no_syntax_tree_is_left_in_a_reference_cycle(saved_garbage):
    findings = 0
    for i, source in enumerate(SOURCES):
        findings += len(analyze_source(source, f"m{i}.py", f"m{i}", **PIPELINE).diagnostics)
        gc.collect()
        stuck = [o for o in saved_garbage if isinstance(o, cst.CSTNode)]
        assert not stuck, (
            f"source #{i}: {len(stuck)} libcst nodes freed only by the cycle collector"
        )
        # the garbage of this source (other kinds of cycles) is frozen, then let go: the next
        # collections walk only what the next sources make, not every earlier cycle again
        gc.freeze()
        saved_garbage.clear()
    assert findings > 50  # the sources exercise every rule, with their fixes


@pytest.mark.parametrize("enabled", [True, False])
def test_collector_state_is_restored(enabled):
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        analyze_source(SOURCES[0], "m.py", "m", **PIPELINE)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
