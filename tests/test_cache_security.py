"""The cache only this user's metalint could have written, written only where it may be, and a
cache hit that prints paths as the run was asked."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from metalint.cache import CACHE_MAGIC, KEY_NAME, Cache, seal, secret
from metalint.check import all_codes
from metalint.config import DEFAULT_HOOKS
from metalint.static.results import FileResult

BAD = """\
import torch
from torch import nn


class LayerScale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(1e-5 * torch.ones(dim))
"""


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch) -> Path:
    """A user cache folder of the test's own (where the key is made)."""
    home = tmp_path / "user-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "bad.py").write_text(BAD)
    return root


def _settings_key() -> str:
    codes, _ = all_codes()
    return Cache.key(codes, DEFAULT_HOOKS)


def _clean_entries(root: Path, key_of) -> dict:
    """Entries saying that ``bad.py`` (its bytes as they are) has no finding."""
    data = (root / "bad.py").read_bytes()
    clean = FileResult("bad.py", "bad", parsed=True).to_json()
    return {key_of(root / "bad.py"): {"hash": Cache.digest(data), "result": clean}}


def _cache_name(root: Path, key: bytes) -> str:
    return Cache(root / ".metalint_cache", _settings_key(), root, key).name


def _unkeyed(name: str, body: bytes) -> bytes:
    """A cache file of the old scheme: an unkeyed digest anyone can compute."""
    digest = hashlib.blake2b(body, digest_size=16).hexdigest()
    return b" ".join((CACHE_MAGIC, name.encode(), digest.encode())) + b"\n" + body


def _forge(root: Path, files: dict[str, bytes]) -> None:
    folder = root / ".metalint_cache"
    folder.mkdir(exist_ok=True)
    for name, data in files.items():
        (folder / f"{name}.json").write_bytes(data)


def _check_reports_bad(cli, root: Path) -> None:
    for _ in range(2):  # the run that reads the forged cache, and the one after it
        r = cli("check", "bad.py", cwd=root)
        assert r.exit_code == 1, r.output
        assert "bad.py:8:9: ML001" in r.output


def test_a_cache_of_the_old_unkeyed_scheme_is_not_trusted(cli, project):
    key = _settings_key()
    absolute = _clean_entries(project, lambda p: os.path.normpath(str(p)))
    relative = _clean_entries(project, lambda p: p.name)
    name = _cache_name(project, secret())
    # where the old scheme kept it (named by the public key) and where this user's cache is
    _forge(
        project,
        {
            key: _unkeyed(key, json.dumps(absolute).encode()),
            name: _unkeyed(name, json.dumps(relative).encode()),
        },
    )
    _check_reports_bad(cli, project)


def test_a_cache_sealed_with_another_key_is_not_trusted(cli, project):
    other = os.urandom(32)
    entries = json.dumps(_clean_entries(project, lambda p: p.name)).encode()
    # under the other key's own name, and under this user's name
    _forge(
        project,
        {
            _cache_name(project, other): seal(_cache_name(project, other), entries, other),
            _cache_name(project, secret()): seal(_cache_name(project, secret()), entries, other),
        },
    )
    _check_reports_bad(cli, project)


def test_the_forged_entry_is_one_the_users_own_key_would_have_trusted(cli, project):
    # the control of the two tests above: the same entries sealed with this user's key are
    # read (so what those tests refuse is the seal, not the shape of the entries)
    name = _cache_name(project, secret())
    entries = json.dumps(_clean_entries(project, lambda p: p.name)).encode()
    _forge(project, {name: seal(name, entries, secret())})
    r = cli("check", "bad.py", cwd=project)
    assert (r.exit_code, r.output.strip()) == (0, "All checks passed!")


def test_the_key_is_private_and_made_once(user_cache):
    first = secret()
    path = user_cache / "metalint" / KEY_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(first) == 32
    assert secret() == first and path.read_bytes() == first
    assert not [n for n in os.listdir(path.parent) if n != KEY_NAME]  # no temporary left


def _no_traceback_and_as_without_cache(project: Path, env: dict) -> None:
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "metalint", "check", *args, "bad.py"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **env},
        )

    want = run("--no-cache")
    for _ in range(2):
        r = run()
        assert (r.returncode, r.stdout) == (want.returncode, want.stdout) == (1, want.stdout)
        assert "Traceback" not in r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("metalint: warning: cache not used"), lines
    assert not (project / ".metalint_cache").exists()


def test_no_key_can_be_made_runs_without_cache(project, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    _no_traceback_and_as_without_cache(project, {"XDG_CACHE_HOME": str(blocker)})


def test_a_key_others_may_read_is_not_used(project, user_cache):
    folder = user_cache / "metalint"
    folder.mkdir(parents=True)
    (folder / KEY_NAME).write_bytes(b"k" * 32)
    (folder / KEY_NAME).chmod(0o644)
    _no_traceback_and_as_without_cache(project, {"XDG_CACHE_HOME": str(user_cache)})


def test_a_key_that_is_a_link_is_not_followed(project, user_cache, tmp_path):
    elsewhere = tmp_path / "their-key"
    elsewhere.write_bytes(b"k" * 32)
    elsewhere.chmod(0o600)
    folder = user_cache / "metalint"
    folder.mkdir(parents=True)
    (folder / KEY_NAME).symlink_to(elsewhere)
    _no_traceback_and_as_without_cache(project, {"XDG_CACHE_HOME": str(user_cache)})


# -- never written outside the project or the user's cache folder ------------------------------


def _outside(tmp_path: Path) -> list[str]:
    return sorted(n for n in os.listdir(tmp_path) if n not in ("proj", "user-cache"))


def test_a_dangling_gitignore_link_in_the_cache_folder_is_not_followed(cli, project, tmp_path):
    folder = project / ".metalint_cache"
    folder.mkdir()
    target = tmp_path / "planted"
    (folder / ".gitignore").symlink_to(target)
    want = cli("check", "--no-cache", "bad.py", cwd=project)
    for _ in range(2):
        r = cli("check", "bad.py", cwd=project)
        assert (r.exit_code, r.output) == (want.exit_code, want.output)
    assert not os.path.lexists(target) and _outside(tmp_path) == []
    assert os.path.islink(folder / ".gitignore")  # left as it was
    assert [p.suffix for p in folder.iterdir() if not p.name.startswith(".")] == [".json"]


@pytest.mark.parametrize("exists", [False, True], ids=["dangling", "a folder"])
def test_a_cache_folder_link_leading_outside_is_not_used(cli, project, tmp_path, exists):
    elsewhere = tmp_path / "elsewhere"
    if exists:
        elsewhere.mkdir()
    (project / ".metalint_cache").symlink_to(elsewhere)
    want = cli("check", "--no-cache", "bad.py", cwd=project)
    r = cli("check", "bad.py", cwd=project)
    assert (r.exit_code, r.stdout) == (want.exit_code, want.stdout)
    assert "metalint: warning: cache not used" in r.stderr
    assert _outside(tmp_path) == (["elsewhere"] if exists else [])
    assert not exists or list(elsewhere.iterdir()) == []


def test_cache_dir_outside_the_project_is_refused(cli, project, tmp_path):
    (project / "pyproject.toml").write_text('[tool.metalint]\ncache-dir = "../x"\n')
    r = cli("check", "bad.py", cwd=project)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("metalint: error: ")
    assert "pyproject.toml" in lines[0] and "cache-dir" in lines[0] and "outside" in lines[0]
    assert _outside(tmp_path) == []


def test_cache_dir_under_the_users_cache_folder_is_used(cli, project, user_cache):
    folder = user_cache / "metalint" / "proj"
    (project / "pyproject.toml").write_text(f'[tool.metalint]\ncache-dir = "{folder}"\n')
    want = cli("check", "--no-cache", "bad.py", cwd=project)
    assert cli("check", "bad.py", cwd=project).output == want.output
    assert list(folder.glob("*.json"))
    assert cli("check", "bad.py", cwd=project).output == want.output


# -- a cache hit prints paths as the run was asked ----------------------------------------------

FORMATS = ["text", "json", "github", "sarif"]


@pytest.mark.parametrize("config", [False, True], ids=["no config", "pyproject"])
def test_a_hit_prints_the_paths_of_this_run(cli, tmp_path, config):
    repo = tmp_path / "proj"
    (repo / "pkg").mkdir(parents=True)
    (repo / "scripts").mkdir()
    (repo / "pkg" / "rope.py").write_text(BAD)
    if config:
        (repo / "pyproject.toml").write_text("[tool.metalint]\n")
    asked = {repo: "pkg/rope.py", repo / "scripts": "../pkg/rope.py"}

    def run(cwd: Path, fmt: str, *extra: str) -> tuple[int, str]:
        r = cli("check", "--output-format", fmt, *extra, asked[cwd], cwd=cwd)
        return r.exit_code, r.output

    want = {(cwd, fmt): run(cwd, fmt, "--no-cache") for cwd in asked for fmt in FORMATS}
    assert "../pkg/rope.py" in want[repo / "scripts", "text"][1]
    for first, then in ((repo, repo / "scripts"), (repo / "scripts", repo)):
        for fmt in FORMATS:
            for folder in repo.rglob(".metalint_cache"):
                for f in folder.glob("*.json"):
                    f.unlink()
            assert run(first, fmt) == want[first, fmt]  # cold: a miss
            (written,) = [f for d in repo.rglob(".metalint_cache") for f in d.glob("*.json")]
            before = written.read_bytes()
            assert run(then, fmt) == want[then, fmt]  # warm: a hit written from elsewhere
            assert run(first, fmt) == want[first, fmt]
            assert written.read_bytes() == before  # both were hits: nothing rewritten
