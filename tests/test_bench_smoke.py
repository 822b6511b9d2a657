"""Smoke test of ``bench/run.py``: the static comparison on a tiny generated tree.

No downloads: the tree is written here and checked in place; ruff and TorchFix columns
appear only when they are installed (``--no-torchfix`` keeps the test to a few seconds).
The probe and loader benches have smoke tests of their own.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LAYER = """import torch
from torch import nn


class LayerScale{i}(nn.Module):
    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma
"""


def _load_bench(script: str, name: str):
    """A script of ``bench/`` as a module, registered under ``name`` (what a worker process
    is handed of it is pickled by that name)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _load_run():
    return _load_bench("run.py", "bench_run")


def test_static_bench_on_tiny_tree(tmp_path, monkeypatch):
    tree = tmp_path / "tiny"
    tree.mkdir()
    for i in range(3):
        (tree / f"layer{i}.py").write_text(LAYER.format(i=i))
    (tree / "util.py").write_text("def f(x):\n    return x + 1\n")
    run = _load_run()
    # ruff from this environment when there is one; nothing installed from the network
    ruff = shutil.which("ruff")
    monkeypatch.setattr(
        run,
        "tool_venv",
        lambda work, name: Path(ruff) if name == "ruff" and ruff else None,
    )
    out = tmp_path / "RESULTS.md"
    work = tmp_path / "work"
    rc = run.main(
        [
            "--tree",
            f"tiny={tree}",
            "--workdir",
            str(work),
            "--results",
            str(tmp_path / "results"),
            "--only",
            "speed,profile",
            "--reps",
            "1",
            "--no-torchfix",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    text = out.read_text()
    assert "| tree | tool | wall s | CPU s | files/s | runs | last line of output |" in text
    rows = {
        line.split("|")[2].strip(): line
        for line in text.splitlines()
        if line.startswith("| tiny (4 files, ")
    }
    assert {"metalint cold", "metalint warm"} <= set(rows)
    assert "Found 3 errors in 4 files checked." in rows["metalint cold"]
    assert "Found 3 errors in 4 files checked." in rows["metalint warm"]
    if ruff:
        assert {"ruff (no cache)", "ruff (cache)"} <= set(rows)
        assert "| tiny | metalint cold / ruff (no cache) |" in text
    assert "TorchFix" not in rows
    # the floor: CPython's parser alone on the same files
    assert "Parsed 4 of 4 files." in rows["floor: ast.parse"]
    assert "Parsed 4 of 4 files, " in rows["floor: ast.parse + ast.walk"]
    assert "| tiny | metalint cold / floor: ast.parse |" in text
    assert "## Where a cold check's time goes" in text
    assert "| parse (libcst) | 3 |" in text
    for key in ("x86_64" if "x86" in text else "CPUs", "Python", "torch", "libcst", "commit"):
        assert key in text
    # the tree given is copied: no cache written into it
    assert not (tree / ".metalint_cache").exists()


@pytest.mark.slow  # a bench profile: every section of bench/run.py
def test_quick_bench_runs_every_section(tmp_path, monkeypatch):
    """``--quick`` past the static part: probe, real models, loader (accelerate's folder is
    asked for, not downloaded here) and GPU sections, on a local tree."""
    tree = tmp_path / "tiny"
    tree.mkdir()
    (tree / "layer.py").write_text(LAYER.format(i=0))
    run = _load_run()
    monkeypatch.setattr(run, "tool_venv", lambda work, name: None)
    asked = []
    monkeypatch.setattr(run, "accelerate_dir", lambda work: asked.append(work))
    out = tmp_path / "RESULTS.md"
    rc = run.main(
        [
            "--quick",
            "--only",
            "probe,loader,gpu",
            "--tree",
            f"tiny={tree}",
            "--workdir",
            str(tmp_path / "work"),
            "--results",
            str(tmp_path / "results"),
            "--probe-python",
            sys.executable,
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    assert asked == [tmp_path / "work"]
    text = out.read_text()
    for section in ("## Probe", "## Loader", "## GPU"):
        assert section in text
    loader = text.split("## Loader", 1)[1].split("## Sharded", 1)[0]
    assert "`python bench/run.py --quick --only probe,loader,gpu" in loader
    assert "| metalint |" in loader and "| accelerate |" in loader
    assert "2 x Linear(64, 64)" in text
    if importlib.util.find_spec("timm") is not None:
        assert "| timm `vit_tiny_patch16_224` |" in text


def test_parse_floor_counts_what_it_parsed(tmp_path, capsys):
    floor = _load_bench("parse_floor.py", "bench_parse_floor")
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "b.py").write_text("def f(:\n")  # not Python: not parsed
    (tmp_path / "pkg" / "notes.txt").write_text("x = 1\n")
    assert floor.main([str(tmp_path), "--walk", "--jobs", "2"]) == 0
    # Module, Assign, Name, Store, Constant
    assert capsys.readouterr().out.strip() == "Parsed 1 of 2 files, 5 nodes visited."
    assert floor.main([str(tmp_path), "--jobs", "1"]) == 0
    assert capsys.readouterr().out.strip() == "Parsed 1 of 2 files."


def test_ratio_with_timed_out_denominator():
    run = _load_run()
    a = {"median_s": 2.0, "timed_out": False, "timeout_s": 100.0}
    b = {"median_s": None, "timed_out": True, "timeout_s": 100.0}
    assert run.ratio(a, b)[0] == "<0.020"
    assert run.ratio(b, a) == ("n/a", None)
    assert run.ratio(a, {"median_s": 4.0})[0] == "0.500"


def test_rule_codes_read_from_text_match_the_imported_rules():
    from metalint.rules import all_rules, rule_codes

    codes, defaults = rule_codes()
    rules = all_rules()
    assert codes == tuple(r.code for r in rules)
    assert defaults == frozenset(r.code for r in rules if r.default)


WARM = """
import sys
from metalint.cli import main
try:
    main(["check", "--exit-zero", sys.argv[1]])
except SystemExit:
    pass
print("LIBCST" if "libcst" in sys.modules else "NO-LIBCST")
"""


def test_warm_check_does_not_import_libcst(tmp_path):
    import subprocess

    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(2):
        (tree / f"layer{i}.py").write_text(LAYER.format(i=i))
    cold = subprocess.run(
        [sys.executable, "-c", WARM, str(tree)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert cold.stdout.strip().endswith("LIBCST")  # it parsed the files
    assert "Found 2 errors in 2 files checked." in cold.stdout
    warm = subprocess.run(
        [sys.executable, "-c", WARM, str(tree)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Found 2 errors in 2 files checked." in warm.stdout
    assert warm.stdout.strip().endswith("NO-LIBCST")


def test_parse_floor_reads_with_libcst_as_metalint_does(tmp_path, capsys):
    floor = _load_bench("parse_floor.py", "bench_parse_floor")
    (tmp_path / "model.py").write_text(
        "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    )
    (tmp_path / "plain.py").write_text("x = 1\n")  # names nothing of torch: CPython's parse only
    (tmp_path / "bad.py").write_text("def f(:\n")
    for mode in ("whole", "read"):
        assert floor.main([str(tmp_path), "--libcst", mode, "--jobs", "1"]) == 0
        assert capsys.readouterr().out.strip() == "Parsed 2 of 3 files."
    read = floor._READERS["read"]
    assert isinstance(read(b"import torch\n", "m.py"), floor.ast.Module)


def test_speed_rows_set_metalint_beside_pyflakes_and_libcst(tmp_path):
    run = _load_run()
    tools = run.speed_tools(tmp_path, None, None, tmp_path / "pyflakes")
    names = [t.name for t in tools]
    assert "pyflakes" in names
    assert names[-2:] == [run.LIBCST_WHOLE, run.LIBCST_READ]
    assert tools[-1].cmd[-2:] == ["--libcst", "read"]
    proc = run.subprocess.CompletedProcess([], 1, "a.py:1:1: x\nb.py:2:1: y\n", "")
    flakes = next(t for t in tools if t.name == "pyflakes")
    flakes.times, flakes.cpu, flakes.last = [2.0], [2.0], proc
    assert run.tool_row(flakes, 10.0)["summary"] == "2 messages."
    rows = [
        {"tool": n, "median_s": s, "cpu_s": s, "runs": 1, "summary": ""}
        for n, s in (("metalint cold", 9.0), ("pyflakes", 3.0), (run.FLOOR, 1.0))
    ]
    data = {
        "trees": [{"tree": "t", "files": 1, "lines": 1, "rows": rows}],
        "reps": 1,
        "single_above": 120,
        "versions": {},
    }
    text = "\n".join(run.render_speed({"data": data}))
    assert "| t | pyflakes / floor: ast.parse | 3.00 | 3.00 |" in text
    assert "| t | metalint cold / pyflakes | 3.00 | 3.00 |" in text
