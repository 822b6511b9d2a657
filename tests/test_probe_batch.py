"""Several probe targets in one worker process (``isolate.run_targets``), as ``fix --verify``
probes the files it rewrote: one interpreter and one torch import for them all, and still a
crash costs only the item in progress (or the target being imported)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from metalint.fix import verify
from metalint.probe import isolate
from metalint.probe.target import parse_target

pytest.importorskip("torch")

GOOD = """
import torch
from torch import nn


class {name}(nn.Module):
    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.scale)
"""

CRASH = """
import ctypes

from torch import nn


class Crashes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        ctypes.string_at(0)


class AfterCrash(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
"""


def _put(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.fixture
def children(monkeypatch):
    """The probe worker processes started."""
    started: list[list[str]] = []
    real = subprocess.Popen

    def popen(args, *a, **kw):
        if "metalint.probe.worker" in list(args):
            started.append(list(args))
        return real(args, *a, **kw)

    monkeypatch.setattr(isolate.subprocess, "Popen", popen)
    return started


def _kinds(outcomes) -> list[tuple[str, str]]:
    return [(o.label.rpartition(":")[2], o.kind) for o in outcomes]


def test_the_targets_of_a_batch_share_one_child(tmp_path, children):
    a = _put(tmp_path, "a.py", GOOD.format(name="Alpha"))
    b = _put(tmp_path, "b.py", GOOD.format(name="Beta"))
    targets = [parse_target(str(a))[0], parse_target(str(b))[0]]
    out = isolate.run_targets(targets, isolate.Options(timeout=60))
    assert [_kinds(o) for o in out] == [[("Alpha", "result")], [("Beta", "result")]]
    assert [o.file for o in out[0]] == [str(a.resolve())]
    assert [o.file for o in out[1]] == [str(b.resolve())]
    assert all(o.result["status"] == "passed" for o in out[0] + out[1])
    assert len(children) == 1


def test_a_crash_costs_only_the_item_in_progress(tmp_path, children):
    """A segfault in the first file: that class is an error, a new child goes on with the
    class after it and with the next file; a file that does not import is an error of its own
    and the file after it is probed too."""
    crash = _put(tmp_path, "crash.py", CRASH)
    broken = _put(tmp_path, "broken.py", "import torch\nraise RuntimeError('no import')\n")
    good = _put(tmp_path, "good.py", GOOD.format(name="Gamma"))
    targets = [parse_target(str(p))[0] for p in (crash, broken, good)]
    out = isolate.run_targets(targets, isolate.Options(timeout=60))
    assert _kinds(out[0]) == [("Crashes", "error"), ("AfterCrash", "result")]
    assert "crashed (SIGSEGV)" in out[0][0].message
    assert [o.kind for o in out[1]] == ["error"] and "no import" in out[1][0].message
    assert _kinds(out[2]) == [("Gamma", "result")]
    assert len(children) == 2  # the first child died in crash.py; the second did the rest


def test_a_hang_in_one_target_times_out_and_the_next_target_runs(tmp_path, children):
    hang = _put(
        tmp_path,
        "hang.py",
        "import time\nfrom torch import nn\n\n\nclass Hangs(nn.Module):\n"
        "    def __init__(self) -> None:\n        super().__init__()\n        time.sleep(600)\n",
    )
    good = _put(tmp_path, "good.py", GOOD.format(name="Delta"))
    targets = [parse_target(str(p))[0] for p in (hang, good)]
    out = isolate.run_targets(targets, isolate.Options(timeout=5))
    assert _kinds(out[0]) == [("Hangs", "error")]
    assert "timed out after 5 s" in out[0][0].message
    assert _kinds(out[1]) == [("Delta", "result")]


def test_fix_verify_probes_every_rewritten_file_in_one_child(tmp_path, cli, children):
    src = Path(__file__).resolve().parent.parent / "fixtures" / "check" / "dinov2_layerscale.py"
    text = src.read_text(encoding="utf-8")
    for name in ("one.py", "two.py", "three.py"):
        (tmp_path / name).write_text(text, encoding="utf-8")
    res = cli("fix", "--write", "--verify", "--no-cache", ".")
    for name in ("one.py", "two.py", "three.py"):
        assert f"verified {name}:LayerScale: probe passed" in res.output, res.output
        assert "def reset_parameters" in (tmp_path / name).read_text(encoding="utf-8")
    assert len(children) == 1, children


def test_files_after_a_restored_one_are_probed_again(tmp_path, cli, monkeypatch):
    """The shared probe ran with every rewrite in place; once a file is restored, each file
    after it is probed again on its own (it may import the restored one), those before not."""
    src = Path(__file__).resolve().parent.parent / "fixtures" / "check" / "dinov2_layerscale.py"
    text = src.read_text(encoding="utf-8")
    for name in ("a.py", "b.py", "c.py"):
        (tmp_path / name).write_text(text, encoding="utf-8")

    def shared(files, timeout, hooks):
        assert [Path(p).name for p, _ in files] == ["a.py", "b.py", "c.py"]
        fails = {"b.py"}
        return [
            [
                verify.Verdict(c, "failed" if Path(p).name in fails else "passed", "gamma lost")
                for c in classes
            ]
            for p, classes in files
        ]

    alone: list[str] = []

    def verify_classes(path, classes, **kw):
        alone.append(Path(path).name)
        return [verify.Verdict(c, "passed", "") for c in classes]

    monkeypatch.setattr(verify, "_probe_files", shared)
    monkeypatch.setattr(verify, "verify_classes", verify_classes)
    res = cli("fix", "--write", "--verify", "--no-cache", ".")
    assert "restored b.py: the probe failed on LayerScale" in res.output, res.output
    assert alone == ["c.py"], alone
    assert (tmp_path / "b.py").read_text(encoding="utf-8") == text
    assert "def reset_parameters" in (tmp_path / "a.py").read_text(encoding="utf-8")
    assert "def reset_parameters" in (tmp_path / "c.py").read_text(encoding="utf-8")


def test_the_probe_modes_do_not_import_dynamo(tmp_path):
    """torch wraps a dispatch mode's ``__torch_dispatch__`` so that its first call imports
    ``torch._dynamo`` (about as long as importing torch): the probe's modes opt out."""
    code = textwrap.dedent(
        """
        import sys
        import torch
        from metalint.probe.attribute import EscapeDetector, WriteRecorder
        with WriteRecorder():
            torch.nn.Linear(4, 4)
        with torch.device("meta"), EscapeDetector():
            torch.nn.Linear(4, 4)
        print("torch._dynamo" in sys.modules)
        """
    )
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False", r.stdout


def test_the_worker_freezes_what_it_imported_before_the_first_item(tmp_path):
    """After the warm-up the worker freezes the objects alive (torch's), so the collections
    between builds walk only what the builds made."""
    code = textwrap.dedent(
        """
        import gc
        from metalint.probe import worker
        from metalint.probe.build import probe
        worker._warm_up(probe)
        print(gc.get_freeze_count() > 100_000)
        """
    )
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True", r.stdout
