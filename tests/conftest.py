from __future__ import annotations

import gc
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from metalint.cli import main

#: tests that share one costly run (a session or module fixture): a parametrized test (its
#: cases) or a test module (its tests). Under xdist (``pytest -n``) each goes to one worker,
#: which makes the run once (tests/test_probe_distributed.py: torchrun on 2 ranks); split
#: over two workers, each worker made it (test_shard_shapes.py's process groups: twice each)
SHARED_RUN = (
    "tests/test_fix.py::test_every_rewritten_fixture_class_passes_the_probe",
    "tests/test_probe_distributed.py",
    "tests/test_shard_shapes.py",  # one process group per world size
    "tests/test_loader_dtensor.py",  # the same
    "tests/test_probe.py",  # layers_report: one probe child over tests/probe_models/layers.py
)


def pytest_xdist_make_scheduler(config, log):
    """``-n`` (``--dist load``): load scheduling, except that each :data:`SHARED_RUN` entry is
    one unit of work (as ``--dist loadgroup`` would have it, had pytest 9.2 kept the group
    suffix xdist adds to the node ids)."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedRunScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            for key in (nodeid.partition("[")[0], nodeid.partition("::")[0]):
                if key in SHARED_RUN:
                    return key
            return nodeid

    return SharedRunScheduling(config, log)


@pytest.fixture(autouse=True, scope="module")
def _frozen_heap():
    """What is alive when a test module starts (torch, the modules and fixtures of the tests
    before it) is moved out of the cycle collector's reach (``gc.freeze``): a full collection
    then walks only what the module's tests make. The probe collects after each build
    (``release_memory``); in a worker holding a few hundred thousand objects each collection
    took over a second, which made an in-process probe several times slower than in its own
    child. Garbage is collected first, so only objects alive at that moment are kept; a test
    that freezes and unfreezes the heap itself (tests/test_engine_gc.py) may."""
    gc.collect()
    gc.freeze()
    yield


@pytest.fixture
def cli(monkeypatch, tmp_path):
    """Run the metalint CLI in-process from a working directory (default: tmp_path)."""

    def run(*args: str, cwd: Path | None = None):
        monkeypatch.chdir(cwd or tmp_path)
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    return run


@pytest.fixture
def write(tmp_path):
    """Write a dedented source file under tmp_path and return its path."""

    def put(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return put


SARIF_NPM_PACKAGE = "@microsoft/jest-sarif@1.0.0-beta.0"  # ships sarif-2.1.0-rtm.5.json
SARIF_MEMBER = "package/lib/schemas/sarif-2.1.0-rtm.5.json"


@pytest.fixture(scope="session")
def sarif_schema() -> dict:
    """The OASIS SARIF 2.1.0 JSON schema, fetched once from the npm registry and cached."""
    import json
    import os
    import shutil
    import subprocess
    import tarfile
    import tempfile

    env = os.environ.get("METALINT_SARIF_SCHEMA")
    cache = (
        Path(env) if env else Path.home() / ".cache" / "metalint-tests" / "sarif-2.1.0-rtm.5.json"
    )
    if not cache.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed: cannot fetch the SARIF 2.1.0 schema")
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run(
                [npm, "pack", SARIF_NPM_PACKAGE],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=180,
            )
            if r.returncode != 0:
                pytest.skip(f"npm pack {SARIF_NPM_PACKAGE} failed: {r.stderr.strip()[-200:]}")
            tgz = next(Path(tmp).glob("*.tgz"))
            with tarfile.open(tgz) as tar:
                data = tar.extractfile(SARIF_MEMBER).read()
        cache.parent.mkdir(parents=True, exist_ok=True)
        # atomic: another xdist worker may be reading it
        part = cache.with_name(f"{cache.name}.{os.getpid()}.part")
        part.write_bytes(data)
        os.replace(part, cache)
    return json.loads(cache.read_text(encoding="utf-8"))
