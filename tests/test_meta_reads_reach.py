"""Construction's crashes on meta reached through the functions it runs: a ``partial`` of a
module-level function bound on the module (``self.create_projection = partial(f, ...)``, then
``self.create_projection()``), a function of the file calling another (a device parameter
left at ``None`` makes its tensors on meta), and a function of another file asserting on a
tensor's value (``assert torch.all(...)``), several calls deep. Each is reported where it
raises, with the code of the crash (ML009 for a copy to the host, ML008 for a read); a
chain that ends on the CPU and a ``partial`` of a function that reads nothing are not."""

from __future__ import annotations

import textwrap
from pathlib import Path

from metalint.check import run_check
from metalint.config import Settings

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "check"

# random features drawn through two functions of a helper module (linear attention)
FEATURES = """
import torch


def orthogonal_block(cols, device=None):
    block = torch.randn((cols, cols), device=device)
    q, _ = torch.linalg.qr(block.cpu(), mode="reduced")
    return q.to(device).t()


def random_projection(rows, cols, device=None):
    blocks = [orthogonal_block(cols, device=device) for _ in range(rows // cols)]
    return torch.cat(blocks)


def scaled_eye(n, scale=1.0, device=None):
    return torch.eye(n, device=device) * scale
"""

ATTENTION = """
from functools import partial

import torch
from torch import nn

from lin_t.features import random_projection, scaled_eye


class FastAttention(nn.Module):
    def __init__(self, dim_heads, nb_features):
        super().__init__()
        self.create_projection = partial(random_projection, rows=nb_features, cols=dim_heads)
        self.register_buffer("projection_matrix", self.create_projection())


class DirectFeatures(nn.Module):
    def __init__(self, dim_heads, nb_features):
        super().__init__()
        self.register_buffer("projection_matrix", random_projection(nb_features, dim_heads))


class CpuFeatures(nn.Module):
    def __init__(self, dim_heads, nb_features):
        super().__init__()
        self.create_projection = partial(
            random_projection, rows=nb_features, cols=dim_heads, device="cpu"
        )
        self.projection = self.create_projection()


class IdentityFeatures(nn.Module):
    def __init__(self, dim_heads):
        super().__init__()
        self.create_projection = partial(scaled_eye, dim_heads, scale=0.5)
        self.register_buffer("projection_matrix", self.create_projection())
"""

# rotation matrices of a group, from generators checked with an assert (equivariant networks)
ROTATIONS = """
import math

import torch


def generators(j):
    m = torch.arange(-j, j + 1)
    return torch.stack([torch.diag(m), torch.diag(1j * m)], dim=0)


def real_generators(l):
    X = generators(l)
    assert torch.all(torch.abs(torch.imag(X)) < 1e-5)
    return torch.real(X)


def rotation(l, alpha):
    alpha = alpha[..., None, None] % (2 * math.pi)
    X = real_generators(l)
    return torch.matrix_exp(alpha * X[1])


def cpu_generators(l):
    X = torch.arange(-l, l + 1, device="cpu").float()
    assert torch.all(X.abs() < 100)
    return X


def cpu_rotation(l, alpha):
    X = cpu_generators(l)
    return X.to(alpha) * alpha
"""

GRID = """
import torch
from torch import nn

from rot_t.rotations import cpu_rotation, rotation


def flat_rotation(lmax, alpha):
    return torch.cat([rotation(l, alpha).flatten(-2) for l in range(lmax + 1)], dim=-1)


class Grid(nn.Module):
    def __init__(self, lmax, res):
        super().__init__()
        a = torch.linspace(0, 1, res)
        self.register_buffer("D", flat_rotation(lmax, a), persistent=False)


class CpuGrid(nn.Module):
    def __init__(self, lmax):
        super().__init__()
        self.register_buffer("D", cpu_rotation(lmax, torch.ones(1)), persistent=False)
"""

# a schedule read through a ``partial`` bound on the module (ML008 follows it too)
SCHEDULE = """
from functools import partial

import torch
from torch import nn


def drop_rates(depth, rate):
    return torch.linspace(0, rate, depth).tolist()


def plain_rates(depth, rate):
    return [rate * i / max(depth - 1, 1) for i in range(depth)]


class Stage(nn.Module):
    def __init__(self, depth, rate=0.1):
        super().__init__()
        self.rates = partial(drop_rates, depth)
        self.blocks = nn.ModuleList(nn.Dropout(r) for r in self.rates(rate))


class PlainStage(nn.Module):
    def __init__(self, depth, rate=0.1):
        super().__init__()
        self.rates = partial(plain_rates, depth)
        self.blocks = nn.ModuleList(nn.Dropout(r) for r in self.rates(rate))
"""


def _tree(tmp_path: Path, package: str, files: dict[str, str]) -> Path:
    pkg = tmp_path / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    return pkg


def _findings(paths: list[Path], root: Path, codes=("ML008", "ML009")):
    settings = Settings(root=root, select=list(codes))
    result = run_check(paths, settings, use_cache=False, workers=1)
    return [d for d in result.diagnostics if d.code in codes]


def _rows(found) -> list[tuple]:
    return [
        (d.code, d.symbol, d.start.row, d.via and (Path(d.via[1]).name, d.via[2])) for d in found
    ]


def test_a_partial_bound_on_the_module_reaches_a_copy_two_functions_deep(monkeypatch):
    monkeypatch.chdir(FIXTURE)
    found = _findings([Path("linear_attention_projection.py")], FIXTURE)
    # ``block.cpu()`` in ``orthogonal_block``, reached from FastAttention through the partial
    # and ``random_projection``; CpuFeatures binds ``device="cpu"``, IdentityFeatures' partial
    # runs a function that reads nothing
    assert _rows(found) == [("ML009", "FastAttention", 16, None)]
    assert "`orthogonal_block()` (called from FastAttention's `__init__`)" in found[0].message
    assert "Cannot copy out of meta tensor" in found[0].message


def test_a_partial_of_another_files_function_is_reported_at_the_call(tmp_path):
    pkg = _tree(tmp_path, "lin_t", {"features.py": FEATURES, "attention.py": ATTENTION})
    found = _findings([pkg], tmp_path)
    assert _rows(found) == [
        ("ML009", "FastAttention", 14, ("features.py", 7)),
        ("ML009", "DirectFeatures", 20, ("features.py", 7)),
    ]
    assert found[0].via[0] == "lin_t.features.orthogonal_block"


def test_an_assert_on_a_tensor_in_another_file_is_reported_through_the_chain(tmp_path):
    pkg = _tree(tmp_path, "rot_t", {"rotations.py": ROTATIONS, "grid.py": GRID})
    found = _findings([pkg], tmp_path)
    # Grid -> flat_rotation (same file) -> rotation -> real_generators (another file): the
    # assert at line 14; CpuGrid's chain asserts on a CPU tensor
    assert _rows(found) == [("ML008", "Grid", 9, ("rotations.py", 14))]
    assert found[0].via[0] == "rot_t.rotations.real_generators"


def test_a_partial_reaches_a_read_for_data_dependent_init(tmp_path):
    path = tmp_path / "stage.py"
    path.write_text(textwrap.dedent(SCHEDULE))
    found = _findings([path], tmp_path)
    assert _rows(found) == [("ML008", "Stage", 9, None)]
    assert "`drop_rates()` (called from Stage's `__init__`)" in found[0].message


def test_the_fix_refuses_the_new_findings_with_a_reason(tmp_path, cli):
    (tmp_path / "one").mkdir()
    fixture = FIXTURE / "linear_attention_projection.py"
    (tmp_path / "one" / fixture.name).write_text(fixture.read_text())
    r = cli("fix", "--no-cache", "--diff", "--unsafe-fixes", fixture.name, cwd=tmp_path / "one")
    line = next(ln for ln in r.output.splitlines() if " ML009 " in ln)
    assert line.endswith(
        "[not fixed: the copy is in `orthogonal_block()`, a function of the module that "
        "construction calls: the fix rewrites the class, not that function]"
    )
    _tree(tmp_path / "two", "lin_t", {"features.py": FEATURES, "attention.py": ATTENTION})
    r = cli("fix", "--no-cache", "--diff", "--unsafe-fixes", "lin_t", cwd=tmp_path / "two")
    lines = [ln for ln in r.output.splitlines() if " ML009 " in ln]
    assert len(lines) == 2 and all(
        ln.endswith(
            "[not fixed: the line is in `lin_t.features.orthogonal_block`, a function of "
            "another file that construction calls: the fix rewrites the class, not that "
            "function]"
        )
        for ln in lines
    )
    assert "Traceback" not in r.output and "internal error" not in r.output


# a plan computed on the device a parameter names, "cpu" when the caller passes none
# (transformers' ``plan_out_scales``): its copy to the host is fine on meta
PLAN = """
import torch


def plan_scales(n, device="cpu"):
    sizes = torch.arange(1, n + 1, device=device)
    cost = torch.abs(sizes.unsqueeze(1) - sizes.unsqueeze(0)).float()
    return cost.cpu().argmin(dim=1)
"""

PLANNED = """
from torch import nn

from plan_t.plan import plan_scales


class Planned(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("scales", plan_scales(n), persistent=False)
"""


def test_a_copy_of_a_tensor_made_on_a_default_real_device_is_not_reported(tmp_path):
    pkg = _tree(tmp_path, "plan_t", {"plan.py": PLAN, "model.py": PLANNED})
    assert _findings([pkg], tmp_path) == []
    one = tmp_path / "one.py"
    one.write_text(textwrap.dedent(PLAN) + textwrap.dedent(PLANNED).replace("from plan_t", "#"))
    assert _findings([one], tmp_path) == []


# a random-features block orthogonalised on the CPU, through two functions of the file and
# no partial (torch-geometric's ``PerformerProjection``)
PROJECTION = """
import torch
from torch import nn


def _orthogonal(dim):
    mat = torch.randn((dim, dim))
    q, _ = torch.linalg.qr(mat.cpu(), mode="reduced")
    return q.t()


def orthogonal_matrix(rows, cols):
    return torch.cat([_orthogonal(cols) for _ in range(rows // cols)])


class Projection(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.register_buffer("projection_matrix", orthogonal_matrix(2 * cols, cols))
"""


def test_a_copy_two_functions_deep_without_a_partial(tmp_path):
    path = tmp_path / "projection.py"
    path.write_text(textwrap.dedent(PROJECTION))
    found = _findings([path], tmp_path)
    assert _rows(found) == [("ML009", "Projection", 8, None)]
    assert "`_orthogonal()` (called from Projection's `__init__`)" in found[0].message
