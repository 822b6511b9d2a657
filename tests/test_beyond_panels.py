"""Classes that lose a tensor on meta in idioms of real libraries, across files of a tree.

The single-file idioms are fixtures (``fixtures/check/``) and rule examples; these need a tree.
"""

from __future__ import annotations

from pathlib import Path

from metalint.check import run_check
from metalint.config import Settings


def _check(tmp_path: Path, files: dict[str, str], select=("ALL",)):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    for name, text in files.items():
        (pkg / name).write_text(text, encoding="utf-8")
    settings = Settings(root=tmp_path, select=list(select))
    result = run_check([pkg], settings, use_cache=False, workers=1)
    return [(Path(d.filename).name, d.start.row, d.code) for d in result.diagnostics]


SCHEDULES = """
import torch


def steps(n):
    return torch.linspace(0, 1, n)


def stage_sizes(n):
    return [int(x) for x in steps(n).tolist()]


def cpu_sizes(n):
    return torch.linspace(0, 1, n, device="cpu").tolist()
"""

STAGES = """
from torch import nn

from . import schedules
from .schedules import cpu_sizes


class Stages(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.sizes = schedules.stage_sizes(n)
        self.proj = nn.Linear(n, n)


class CpuStages(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.sizes = cpu_sizes(n)
        self.proj = nn.Linear(n, n)
"""


def test_a_helper_of_another_file_reads_what_a_function_of_its_file_returns(tmp_path):
    # ``stage_sizes`` reads ``steps(n)``, a meta tensor made by another function of its file
    got = _check(tmp_path, {"schedules.py": SCHEDULES, "stages.py": STAGES}, ["ML008"])
    assert got == [("stages.py", 11, "ML008")]


ATTENTION = """
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.zeros_(self.proj.weight)


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attn = Attention(dim)
"""

TRAIN = """
import torch

from .model import Model


def build(dim):
    with torch.device("meta"):
        model = Model(dim)
    model.to_empty(device="cpu")
    for m in {modules}:
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    return model
"""


def test_a_parent_hook_run_after_its_children_keeps_what_it_writes(tmp_path):
    # the site resets children first: the parent's write into ``proj.weight`` is the last word
    train = TRAIN.format(modules="reversed(list(model.modules()))")
    assert _check(tmp_path, {"model.py": ATTENTION, "train.py": train}, ["ML006"]) == []


def test_a_parent_hook_run_before_its_children_is_order_dependent(tmp_path):
    train = TRAIN.format(modules="model.modules()")
    got = _check(tmp_path, {"model.py": ATTENTION, "train.py": train}, ["ML006"])
    assert got == [("model.py", 14, "ML006")]


def test_an_order_finding_stands_without_a_site(tmp_path):
    assert _check(tmp_path, {"model.py": ATTENTION}, ["ML006"]) == [("model.py", 14, "ML006")]


UTIL = """
import torch


def steps(n):
    return torch.linspace(0, 1, n)


def cpu_steps(n):
    return torch.linspace(0, 1, n, device="cpu")
"""

BLOCKS = """
from torch import nn

from .util import cpu_steps, steps


class Blocks(nn.Module):
    def __init__(self, n):
        super().__init__()
        rates = steps(n).tolist()
        kept = cpu_steps(n).tolist()
        self.blocks = nn.ModuleList(nn.Dropout(p) for p in rates + kept)
"""


def test_a_read_of_what_a_function_of_another_file_returns(tmp_path):
    # ``steps`` returns a meta tensor, ``cpu_steps`` a CPU one: only the first read raises
    got = _check(tmp_path, {"util.py": UTIL, "blocks.py": BLOCKS}, ["ML008"])
    assert got == [("blocks.py", 10, "ML008")]


def test_a_function_outside_the_tree_is_not_taken_to_return_a_meta_tensor(tmp_path):
    assert _check(tmp_path, {"blocks.py": BLOCKS}, ["ML008"]) == []
