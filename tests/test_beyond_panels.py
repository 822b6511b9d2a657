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
