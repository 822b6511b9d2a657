"""The `.pre-commit-hooks.yaml` hook, run by real pre-commit against a scratch repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(),
    reason="needs git and a git checkout",
)


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    for k in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        env[k] = "metalint tests"
    for k in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        env[k] = "tests@example.invalid"
    return env


def _try_repo(repo: Path, env) -> subprocess.CompletedProcess:
    pre_commit = [sys.executable, "-m", "pre_commit"]
    return subprocess.run(
        [*pre_commit, "try-repo", str(ROOT), "metalint-system", "--all-files"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_hook_with_and_without_python_files(tmp_path):
    pytest.importorskip("pre_commit")
    env = _env(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
    (repo / "README.md").write_text("no python here\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True, env=env)
    r = _try_repo(repo, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(no files to check)Skipped" in r.stdout

    (repo / "ls.py").write_text(
        "import torch\nfrom torch import nn\n\n"
        "class LayerScale(nn.Module):\n"
        "    def __init__(self, dim, init_values=1e-5):\n"
        "        super().__init__()\n"
        "        self.gamma = nn.Parameter(init_values * torch.ones(dim))\n"
    )
    subprocess.run(["git", "add", "."], cwd=repo, check=True, env=env)
    r = _try_repo(repo, env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ls.py:7:9: ML001" in r.stdout
