"""A run on some files of a project (what pre-commit does with the files staged) judges them
among every file of the project: their findings are the full run's, plus the findings
elsewhere that they cause."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LAYERS = """\
import torch
from torch import nn


class LayerScale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(1e-5 * torch.ones(dim))
"""

MODEL_BODY = """\
from torch import nn

from layers import LayerScale


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ls = LayerScale(8)
        self.head = nn.Linear(8, 2)
"""

#: the root's entry point, which re-creates the tensor of layers.py
REINIT = """
    def init_weights(self):
        for m in self.modules():
            if isinstance(m, LayerScale):
                nn.init.constant_(m.gamma, 1e-5)
"""

#: a finding no change of model.py or layers.py has anything to do with
OTHER = """\
import torch
from torch import nn


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = nn.Parameter(torch.ones(3) * 2)
"""

LAYERS_FINDING = "layers.py:8:9: ML001"
OTHER_FINDING = "other.py:8:9: ML001"

FINDING = re.compile(r"^(\S+\.py):(\d+):(\d+): (ML\d+)", re.M)


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "user-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    env["XDG_CACHE_HOME"] = str(tmp_path / "user-cache")
    for k in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        env[k] = "metalint tests"
    for k in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        env[k] = "tests@example.invalid"
    return env


def _git(repo: Path, env, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git repository: layers.py, a model.py whose root re-creates its tensor, other.py."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    env = _env(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, env, "init", "-q")
    (repo / "layers.py").write_text(LAYERS)
    (repo / "model.py").write_text(MODEL_BODY + REINIT)
    (repo / "other.py").write_text(OTHER)
    return repo


def _findings(output: str) -> list[str]:
    return [":".join(m.groups()[:3]) + ": " + m.group(4) for m in FINDING.finditer(output)]


def _json(cli, repo: Path, *paths: str) -> list[dict]:
    r = cli("check", "--output-format", "json", *paths, cwd=repo)
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def _of(items: list[dict], *files: str) -> list[dict]:
    return [d for d in items if d["filename"] in files]


@pytest.mark.parametrize("cache", [True, False], ids=["cache", "no cache"])
def test_a_file_alone_is_judged_as_the_full_run_judges_it(cli, repo, cache):
    extra = () if cache else ("--no-cache",)
    full = _json(cli, repo, *extra, ".")
    assert [d["filename"] for d in full] == ["other.py"]  # model.py re-creates layers.py's
    for _ in range(2):  # cold, then warm
        alone = _json(cli, repo, *extra, "layers.py")
        # before: layers.py alone was judged per module and reported its gamma
        assert alone == _of(full, "layers.py") == []
    assert cli("check", *extra, "layers.py", cwd=repo).exit_code == 0


@pytest.mark.parametrize("cache", [True, False], ids=["cache", "no cache"])
def test_the_finding_a_file_causes_elsewhere_is_reported(cli, repo, cache):
    extra = () if cache else ("--no-cache",)
    cli("check", *extra, ".", cwd=repo)  # a warm cache of the project as it was
    (repo / "model.py").write_text(MODEL_BODY)  # the root's re-initialisation deleted
    full = _json(cli, repo, *extra, ".")
    assert sorted(d["filename"] for d in full) == ["layers.py", "other.py"]
    for _ in range(2):
        alone = _json(cli, repo, *extra, "model.py")
        # model.py's own findings (none) and the one it causes in layers.py, not other.py's
        assert alone == _of(full, "model.py", "layers.py") != []
    r = cli("check", *extra, "model.py", cwd=repo)
    assert r.exit_code == 1 and _findings(r.output) == [LAYERS_FINDING]
    assert "Found 1 error in 1 file checked." in r.output


def test_a_root_that_keeps_its_entry_point_but_drops_the_reinit(cli, repo):
    (repo / "model.py").write_text(
        MODEL_BODY + "\n    def init_weights(self):\n        nn.init.zeros_(self.head.bias)\n"
    )
    full = _json(cli, repo, ".")
    assert _of(full, "layers.py") and _json(cli, repo, "model.py") == _of(full, "layers.py")
    # the protocol the finding names is the root's, as in the full run
    assert _of(full, "layers.py")[0].get("root") == "model.Model"


def test_findings_of_files_the_named_ones_do_not_touch_are_left_out(cli, repo):
    assert _findings(cli("check", "other.py", cwd=repo).output) == [OTHER_FINDING]
    assert _findings(cli("check", "layers.py", "model.py", cwd=repo).output) == []


def test_errors_of_other_files_are_theirs(cli, repo):
    (repo / "broken.py").write_text("import torch\nx = (\n")
    assert cli("check", ".", cwd=repo).exit_code == 2
    r = cli("check", "layers.py", cwd=repo)
    assert (r.exit_code, r.output.strip()) == (0, "All checks passed!")


def test_outside_a_project_only_the_files_named_are_read(cli, repo):
    shutil.rmtree(repo / ".git")  # no git, no [tool.metalint]: no project to judge in
    r = cli("check", "--no-cache", "layers.py", cwd=repo)
    assert _findings(r.output) == [LAYERS_FINDING]


def test_the_project_is_the_config_folder(cli, repo):
    shutil.rmtree(repo / ".git")
    (repo / "pyproject.toml").write_text("[tool.metalint]\n")
    sub = repo / "scripts"
    sub.mkdir()
    r = cli("check", "../layers.py", cwd=sub)
    assert (r.exit_code, r.output.strip()) == (0, "All checks passed!")


def test_force_exclude_applies_exclude_to_named_paths(cli, repo):
    (repo / "pyproject.toml").write_text('[tool.metalint]\nexclude = ["vendored"]\n')
    (repo / "vendored").mkdir()
    (repo / "vendored" / "ls.py").write_text(LAYERS)
    named = cli("check", "vendored/ls.py", "other.py", cwd=repo)
    assert _findings(named.output) == [OTHER_FINDING, "vendored/ls.py:8:9: ML001"]
    forced = cli("check", "--force-exclude", "vendored/ls.py", "other.py", cwd=repo)
    assert _findings(forced.output) == [OTHER_FINDING]
    for args in (["vendored/ls.py"], ["vendored"]):
        r = cli("check", "--force-exclude", *args, cwd=repo)
        assert (r.exit_code, r.output.strip()) == (0, "All checks passed!"), args
    r = cli("fix", "--force-exclude", "vendored/ls.py", cwd=repo)
    assert r.exit_code == 0 and "Would fix 0 errors" in r.output


def test_the_hooks_force_exclude():
    text = (ROOT / ".pre-commit-hooks.yaml").read_text()
    entries = re.findall(r"^\s*entry: (.+)$", text, re.M)
    assert entries and all(e.strip() == "metalint check --force-exclude" for e in entries)


# -- pre-commit, on what is staged -------------------------------------------------------------


def _pre_commit(repo: Path, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "metalint-system"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _full(repo: Path, env) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-m", "metalint", "check", "."],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return _findings(r.stdout)


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout of metalint")
def test_pre_commit_on_staged_subsets(repo, tmp_path):
    pytest.importorskip("pre_commit")
    env = _env(tmp_path)
    (repo / "pyproject.toml").write_text('[tool.metalint]\nexclude = ["vendored"]\n')
    (repo / "vendored").mkdir()
    (repo / "vendored" / "ls.py").write_text(LAYERS)
    _git(repo, env, "add", "model.py", "other.py", "pyproject.toml", "vendored")
    _git(repo, env, "commit", "-q", "--no-verify", "-m", "model")

    # layers.py staged alone: judged with model.py's root, which re-creates its tensor
    _git(repo, env, "add", "layers.py")
    r = _pre_commit(repo, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [f for f in _full(repo, env) if f.startswith("layers.py")] == []
    _git(repo, env, "commit", "-q", "--no-verify", "-m", "layers")

    # the root's re-initialisation deleted, model.py staged alone: the finding it causes
    (repo / "model.py").write_text(MODEL_BODY)
    _git(repo, env, "add", "model.py")
    r = _pre_commit(repo, env)
    assert r.returncode == 1, r.stdout + r.stderr
    staged = _findings(r.stdout)
    full = _full(repo, env)
    assert full == [LAYERS_FINDING, OTHER_FINDING]
    assert staged == [f for f in full if f.startswith(("model.py", "layers.py"))]
    _git(repo, env, "commit", "-q", "--no-verify", "-m", "no reinit")

    # an excluded file staged: --force-exclude keeps it out
    (repo / "vendored" / "ls.py").write_text(LAYERS + "\n")
    _git(repo, env, "add", "vendored/ls.py")
    r = _pre_commit(repo, env)
    assert r.returncode == 0, r.stdout + r.stderr
