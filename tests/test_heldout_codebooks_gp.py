"""Idioms of two libraries measured held out (codebooks and Gaussian processes): a projection
drawn into a local made with ``torch.empty`` by an in-place init, then registered or wrapped
(vector-quantize-pytorch's ``RandomProjectionQuantizer``), and a constraint whose bounds are
cast with ``.to(dtype)`` before construction asks whether they are empty (gpytorch's
``Interval``, which every kernel and likelihood holds). The fixtures are
``fixtures/check/codebook_projection_init.py`` and ``fixtures/check/bounds_dtype_cast.py``."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from fixture_runs import check_all, fix_all, load_module

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "fixtures" / "check"
PROJECTION = "codebook_projection_init.py"
BOUNDS = "bounds_dtype_cast.py"


def _diagnostics(tmp_path: Path, name: str, copy: bool = True):
    if copy:
        shutil.copy(CHECK / name, tmp_path / name)
    # ML012 (opt-in: no ``device``/``dtype`` arguments) is about every class here alike
    return [d for d in check_all([tmp_path / name], tmp_path) if d.code != "ML012"]


def _fix(tmp_path: Path, name: str, source: Path | None = None) -> str:
    shutil.copy(source or CHECK / name, tmp_path / name)
    fix_all([tmp_path / name], tmp_path)
    return (tmp_path / name).read_text()


def test_local_drawn_in_place_then_registered_is_reported(tmp_path):
    # before: "All checks passed!" while the probe loses ``rand_projs`` (MP002)
    got = [(d.code, d.symbol, d.start.row, d.subject) for d in _diagnostics(tmp_path, PROJECTION)]
    assert got == [
        ("ML002", "RandomProjection", 16, ("rand_projs",)),
        ("ML001", "DrawnWeight", 24, ("weight",)),
        ("ML002", "FilledScale", 32, ("scale",)),
    ]
    message = _diagnostics(tmp_path, PROJECTION, copy=False)[0].message
    assert "`rand_projs = torch.empty(num_codebooks, dim, codebook_dim)`, then written" in message


def test_local_written_in_place_feeds_value_kinds():
    import libcst as cst

    from metalint.static.model import collect, function_facts
    from metalint.static.tensors import local_writes

    src = (
        "def f(n):\n"
        "    a = torch.empty(n)\n"
        "    nn.init.xavier_normal_(a)\n"
        "    b = torch.empty(n)\n"
        "    b.fill_(1.0)\n"
        "    c = torch.empty(n)\n"
        "    n.zero_()\n"
    )
    module = cst.parse_module(src)
    fn = function_facts(module.body[0], collect(module, "m"))

    def qualify(node):
        return None

    assert local_writes("a", qualify, fn) == {"random"}
    assert local_writes("b", qualify, fn) == {"value"}
    assert local_writes("c", qualify, fn) == frozenset()
    assert local_writes("n", qualify, fn) == frozenset()  # an argument: the caller's tensor


def test_fix_moves_the_draw_into_the_hook_and_leaves_the_wrapped_local(tmp_path):
    fixed = _fix(tmp_path, PROJECTION)
    assert "    def reset_parameters(self):\n        nn.init.xavier_normal_(self.rand_projs)\n" in (
        fixed
    )
    assert "    def reset_parameters(self):\n        self.scale.fill_(self.value)\n" in fixed
    # the parameter wrapped from the written local is left, with its reason: the hook would
    # have to replay the init on ``self.weight``
    assert "        nn.init.kaiming_uniform_(w)\n        self.weight = nn.Parameter(w)\n" in fixed
    left = [(d.code, d.symbol) for d in _diagnostics(tmp_path, PROJECTION, copy=False)]
    assert left == [("ML001", "DrawnWeight")]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_fixed_projection_passes_the_probe(tmp_path):
    import sys

    from metalint.testing import assert_meta_init_parity

    _fix(tmp_path, PROJECTION)
    sys.path.insert(0, str(tmp_path))
    try:
        mod = load_module(tmp_path / PROJECTION, "fixed_projection")
    finally:
        sys.path.remove(str(tmp_path))
    assert_meta_init_parity(mod.RandomProjection, init="reset_parameters", device="cpu")
    assert_meta_init_parity(mod.FilledScale, init="reset_parameters", device="cpu")


def test_bounds_cast_with_to_dtype_are_read_on_meta(tmp_path):
    # before: "All checks passed!" while building any gpytorch kernel on meta raises MP006
    got = [(d.code, d.symbol, d.start.row) for d in _diagnostics(tmp_path, BOUNDS)]
    assert got == [("ML008", "Interval", 16), ("ML008", "Interval", 19), ("ML008", "Interval", 20)]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_bounds_fixture_raises_on_meta():
    import torch

    mod = load_module(CHECK / BOUNDS, "bounds")
    with torch.device("meta"):
        mod.HostInterval(0.0, 1.0)
        with pytest.raises(RuntimeError, match="meta"):
            mod.Interval(0.0, 1.0)


REFUSED = ROOT / "fixtures" / "fix" / "ML002" / "refused" / "loop_builds_layers_too.py"


def test_a_loop_that_also_builds_layers_is_not_replayed(tmp_path):
    # before: the hook replayed the loop (new layers appended to ``self.layers`` on every
    # reset) and stored ``self`` on itself, so building the model recursed without end
    fixed = _fix(tmp_path, "m.py", REFUSED)
    assert fixed == REFUSED.read_text()
    assert "self = self.self" not in fixed


SECOND_INIT = ROOT / "fixtures" / "fix" / "ML007" / "refused" / "buffer_before_second_base_init.py"


def test_no_buffer_is_registered_before_a_second_base_init(tmp_path):
    # before: ML007's fix registered ``n`` between ``nn.Module.__init__(self)`` and the
    # distribution's ``super().__init__()``, which emptied ``_buffers``: building the fixed
    # class raised AttributeError (gpytorch's ``WishartPrior``)
    fixed = _fix(tmp_path, "m.py", SECOND_INIT)
    assert fixed == SECOND_INIT.read_text()
