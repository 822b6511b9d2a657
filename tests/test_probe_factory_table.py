"""``probe module:Class`` of a class the project's factory table builds: probed through that
factory, as ``check --probe`` builds it (the class alone takes arguments no guess can give)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

TITAN = Path(__file__).parent.parent / "fixtures" / "pipeline" / "torchtitan_repo"


@pytest.fixture
def titan(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    return Path(shutil.copytree(TITAN, tmp_path / "repo"))


def test_a_class_in_the_factory_table_is_built_by_its_factory(cli, titan):
    pytest.importorskip("torch")
    before = cli("probe", "tinytitan.model:Transformer", cwd=titan)
    assert before.exit_code == 1, before.output
    assert "cannot construct" not in before.output
    assert "tinytitan.model:tiny_model" in before.output
    assert cli("fix", "--no-cache", "--write", "--unsafe-fixes", cwd=titan).exit_code == 0
    after = cli("probe", "tinytitan.model:Transformer", cwd=titan)
    assert after.exit_code == 0, after.output


def test_a_class_outside_the_table_is_probed_as_named(cli, titan):
    pytest.importorskip("torch")
    out = cli("probe", "tinytitan.model:RotaryEmbedding", cwd=titan)
    assert "tiny_model" not in out.output, out.output
