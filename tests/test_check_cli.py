"""`metalint check` as a user and a CI job see it: output formats, exit codes, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LAYERSCALE = """
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))
"""
LAYERSCALE_TIMM = """
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False, device=None, dtype=None):
        super().__init__()
        self.init_values = init_values
        self.inplace = inplace
        self.gamma = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.constant_(self.gamma, self.init_values)
"""


def test_layerscale_dinov2_exit_1_one_diagnostic_on_gamma(cli, write):
    write("ls.py", LAYERSCALE)
    r = cli("check", "ls.py")
    assert r.exit_code == 1
    lines = [l for l in r.output.splitlines() if ": ML" in l]
    assert len(lines) == 1
    assert lines[0].startswith("ls.py:8:9: ML001 `gamma`")
    assert "Found 1 error" in r.output


def test_layerscale_timm_exit_0(cli, write):
    write("ls.py", LAYERSCALE_TIMM)
    r = cli("check", "ls.py")
    assert r.exit_code == 0, r.output
    assert "All checks passed!" in r.output


def test_default_path_is_cwd_and_exit_zero(cli, write):
    write("pkg/ls.py", LAYERSCALE)
    r = cli("check")
    assert r.exit_code == 1 and "pkg/ls.py:8:9" in r.output
    assert cli("check", "--exit-zero").exit_code == 0


def test_json_output(cli, write):
    write("ls.py", LAYERSCALE)
    r = cli("check", "--output-format", "json", "ls.py")
    data = json.loads(r.output)
    assert r.exit_code == 1
    assert len(data) == 1
    d = data[0]
    assert d["code"] == "ML001" and d["filename"] == "ls.py" and d["symbol"] == "LayerScale"
    assert d["location"] == {"row": 8, "column": 9}
    assert d["end_location"]["row"] == 8 and d["end_location"]["column"] > 9
    assert "fix" in d and (d["fix"] is None or d["fix"]["applicability"] in ("safe", "unsafe"))


def test_github_output(cli, write):
    write("ls.py", LAYERSCALE)
    r = cli("check", "--output-format", "github", "ls.py")
    assert r.output.startswith("::error title=metalint ML001,file=ls.py,line=8,col=9,endLine=8,")
    assert "::ML001 `gamma`" in r.output


def test_sarif_validates_against_2_1_0_schema(cli, write, sarif_schema):
    import jsonschema

    schema = sarif_schema
    assert schema["id"].endswith("sarif-2.1.0-rtm.5.json")
    write("ls.py", LAYERSCALE)
    write("ok.py", LAYERSCALE_TIMM)
    r = cli("check", "--output-format", "sarif", ".")
    assert r.exit_code == 1
    data = json.loads(r.output)
    jsonschema.validate(data, schema)
    run = data["runs"][0]
    assert data["version"] == "2.1.0"
    assert [x["ruleId"] for x in run["results"]] == ["ML001"]
    assert run["tool"]["driver"]["rules"][0]["id"] == "ML001"
    loc = run["results"][0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "ls.py" and loc["region"]["startLine"] == 8


def test_sarif_structure_without_schema(cli, write):
    write("ls.py", LAYERSCALE)
    data = json.loads(cli("check", "--output-format", "sarif", "ls.py").output)
    assert data["version"] == "2.1.0" and data["$schema"].endswith("sarif-2.1.0.json")
    result = data["runs"][0]["results"][0]
    assert result["ruleIndex"] == 0 and result["level"] == "error"
    assert result["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == "LayerScale"


def test_bad_inputs_are_each_reported_once_and_the_rest_is_checked(cli, write, tmp_path):
    write("bad_module.py", LAYERSCALE)
    write("syntax.py", "class A(:\n    pass\n")
    (tmp_path / "binary.py").write_bytes(b"\x00\x01\x02ELF\x00torch")
    # latin-1 in a string (CPython 3.11 skips such bytes in a comment)
    (tmp_path / "latin.py").write_bytes(b"import torch\nS = 'caf\xe9'\n")
    os.symlink("loop.py", tmp_path / "loop.py")
    os.symlink("missing_target.py", tmp_path / "dangling.py")
    os.symlink(".", tmp_path / "subdir_loop")  # a folder loop is not followed
    r = cli("check", ".")
    assert r.exit_code == 2
    assert "Traceback" not in r.output
    out = r.output.splitlines()
    assert any(l.startswith("bad_module.py:8:9: ML001") for l in out)
    for name, reason in [
        ("syntax.py", "syntax error"),
        ("binary.py", "binary file"),
        ("latin.py", "not valid source text"),
        ("loop.py", "symbolic link loop"),
        ("dangling.py", "broken symbolic link"),
    ]:
        hits = [l for l in out if l.startswith(f"{name}:")]
        assert len(hits) == 1, (name, r.output)
        assert "ML900" in hits[0] and reason in hits[0], hits[0]
    assert "5 files could not be checked." in r.output


def test_missing_explicit_path_is_exit_2(cli):
    r = cli("check", "nope.py")
    assert (
        r.exit_code == 2 and "nope.py:1:1: ML900 could not be checked: file not found" in r.output
    )


def test_unreadable_file(cli, write, monkeypatch):
    write("secret.py", LAYERSCALE)
    write("fine.py", LAYERSCALE)
    import metalint.static.results as results

    real = results.read_regular

    def read_regular(path, limit):
        if Path(path).name == "secret.py":
            raise PermissionError(13, "Permission denied")
        return real(path, limit)

    monkeypatch.setattr(results, "read_regular", read_regular)
    r = cli("check", ".")
    assert r.exit_code == 2
    assert "secret.py:1:1: ML900 could not be checked: permission denied" in r.output
    assert "fine.py:8:9: ML001" in r.output


def test_select_ignore_and_noqa(cli, write):
    src = LAYERSCALE.replace("torch.ones(dim))", "torch.ones(dim))  # noqa: ML001")
    write("ls.py", src)
    assert cli("check", "ls.py").exit_code == 0
    write("ls.py", LAYERSCALE.replace("torch.ones(dim))", "torch.ones(dim))  # noqa"))
    assert cli("check", "ls.py").exit_code == 0
    write("ls.py", LAYERSCALE.replace("torch.ones(dim))", "torch.ones(dim))  # noqa: ML002"))
    assert cli("check", "ls.py").exit_code == 1
    write("ls.py", LAYERSCALE)
    assert cli("check", "--ignore", "ML001", "ls.py").exit_code == 0
    assert cli("check", "--ignore", "ML", "ls.py").exit_code == 0
    assert cli("check", "--select", "ML001", "ls.py").exit_code == 1
    # ML012 (opt-in, in ALL) reports that this LayerScale takes no `device`
    assert cli("check", "--select", "ALL", "--ignore", "ML00,ML012", "ls.py").exit_code == 0


def test_unknown_selector_is_a_usage_error(cli, write):
    write("ls.py", LAYERSCALE)
    r = cli("check", "--select", "XY123", "ls.py")
    assert r.exit_code == 2 and "unknown rule selector 'XY123'" in r.output


def test_unused_noqa_is_reported_when_enabled(cli, write):
    write(
        "ok.py",
        LAYERSCALE_TIMM.replace("self.inplace = inplace", "self.inplace = inplace  # noqa: ML001"),
    )
    assert cli("check", "ok.py").exit_code == 0
    r = cli("check", "--extend-select", "ML100", "ok.py")
    assert r.exit_code == 1
    assert "ok.py:8:1: ML100 unused `# noqa` for ML001" in r.output


def test_statistics(cli, write):
    write("a.py", LAYERSCALE)
    write("b.py", LAYERSCALE)
    r = cli("check", "--statistics", ".")
    assert "    2  ML001  parameter-from-value" in r.output


def test_pyproject_config(cli, write, tmp_path):
    write("src/ls.py", LAYERSCALE)
    write("third_party/ls.py", LAYERSCALE)
    write("tests/test_ls.py", LAYERSCALE)
    write(
        "pyproject.toml",
        """
        [tool.metalint]
        exclude = ["third_party"]

        [tool.metalint.per-file-ignores]
        "tests/*" = ["ML001"]
        """,
    )
    r = cli("check")
    assert r.exit_code == 1
    assert "src/ls.py:8:9: ML001" in r.output
    assert "third_party" not in r.output and "tests/" not in r.output
    # an explicit file or folder is always checked, even when excluded
    assert "third_party/ls.py:8:9" in cli("check", "third_party/ls.py").output
    assert "third_party/ls.py:8:9" in cli("check", "third_party").output
    assert "third_party/ls.py:8:9" in cli("check", "third_party/", cwd=tmp_path).output
    # config found from a sub-folder
    assert cli("check", ".", cwd=tmp_path / "src").exit_code == 1
    write("pyproject.toml", "[tool.metalint]\nselect = ['ML100']\n")
    assert cli("check", "src").exit_code == 0
    write("pyproject.toml", "[tool.metalint]\nselct = ['ML001']\n")
    r = cli("check", "src")
    assert r.exit_code == 2 and "unknown key in [tool.metalint]: selct" in r.output


def test_gitignore_is_honoured(cli, write, tmp_path):
    (tmp_path / ".git").mkdir()
    write(".gitignore", "generated/\n*_gen.py\n")
    write("generated/ls.py", LAYERSCALE)
    write("x_gen.py", LAYERSCALE)
    write("pkg/.gitignore", "local.py\n")
    write("pkg/local.py", LAYERSCALE)
    write("pkg/kept.py", LAYERSCALE)
    r = cli("check", "--output-format", "json")
    assert [d["filename"] for d in json.loads(r.output)] == ["pkg/kept.py"]


def test_class_hierarchy_across_files(cli, write):
    write("pkg/__init__.py", "from .base import Base\n")
    write(
        "pkg/base.py",
        """
        import torch
        from torch import nn

        class Base(nn.Module):
            def reset_parameters(self):
                nn.init.ones_(self.weight)
        """,
    )
    write(
        "pkg/norm.py",
        """
        import torch
        from torch.nn import Parameter
        from pkg import Base

        class Norm(Base):
            def __init__(self, d):
                super().__init__()
                self.weight = Parameter(torch.ones(d))
                self.bias = Parameter(torch.zeros(d))
        """,
    )
    r = cli("check", "--output-format", "json", ".")
    data = json.loads(r.output)
    assert [(d["filename"], d["location"]["row"]) for d in data] == [("pkg/norm.py", 9)]
    assert "`bias`" in data[0]["message"]


def test_non_module_classes_are_not_reported(cli, write):
    write(
        "cfg.py",
        """
        import torch

        class Config:
            def __init__(self):
                self.scale = torch.nn.Parameter(torch.ones(3))
        """,
    )
    # Parameter assignment implies a module: reported; a plain class without torch.nn is not
    assert cli("check", "cfg.py").exit_code == 1
    write(
        "cfg.py",
        """
        import torch

        class Stats:
            def __init__(self):
                self.mean = torch.ones(3)
        """,
    )
    assert cli("check", "--select", "ALL", "cfg.py").exit_code == 0


def test_cache_hit_gives_the_same_result(cli, write, tmp_path):
    write("ls.py", LAYERSCALE)
    first = cli("check", "--output-format", "json", ".").output
    cache = tmp_path / ".metalint_cache"
    assert (cache / ".gitignore").read_text().strip().endswith("*")
    assert list(cache.glob("*.json"))
    second = cli("check", "--output-format", "json", ".").output
    assert first == second
    write("ls.py", LAYERSCALE_TIMM)  # content change invalidates
    assert json.loads(cli("check", "--output-format", "json", ".").output) == []
    write("ls2.py", LAYERSCALE)
    cli("check", "--no-cache", ".")


def test_cache_key_follows_metalint_own_code(tmp_path):
    # an editable install changed without a new version must not read results cached by its
    # old code: the key covers the size and time of each of metalint's files
    import os

    import metalint.rules.parameter_from_value as rule
    from metalint.cache import Cache, code_stamp

    # the stamp is read once per process (a run): clear it as a new run would start afresh
    code_stamp.cache_clear()
    before = Cache.key(["ML001"], ("reset_parameters",))
    assert Cache.key(["ML001"], ("reset_parameters",)) == before
    st = os.stat(rule.__file__)
    try:
        os.utime(rule.__file__, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        code_stamp.cache_clear()
        assert Cache.key(["ML001"], ("reset_parameters",)) != before
    finally:
        os.utime(rule.__file__, ns=(st.st_atime_ns, st.st_mtime_ns))
        code_stamp.cache_clear()
    assert Cache.key(["ML001"], ("reset_parameters",)) == before


def test_parallel_equals_serial(tmp_path):
    from metalint.check import run_check
    from metalint.config import Settings

    for i in range(30):
        (tmp_path / f"m{i}.py").write_text(LAYERSCALE if i % 3 == 0 else LAYERSCALE_TIMM)
    s = Settings(root=tmp_path)
    serial = run_check([tmp_path], s, use_cache=False, workers=1).diagnostics
    parallel = run_check([tmp_path], s, use_cache=False, workers=2).diagnostics
    assert serial == parallel and len(serial) == 10


def test_static_path_does_not_import_torch(tmp_path):
    (tmp_path / "ls.py").write_text(LAYERSCALE)
    code = (
        "import sys\n"
        "from metalint.cli import main\n"
        "try:\n"
        "    main(['check', '--no-cache', '--output-format', 'sarif', 'ls.py'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 1, e.code\n"
        "assert 'torch' not in sys.modules, 'torch imported on the static path'\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ok")


def test_console_script_and_module_entry(tmp_path):
    (tmp_path / "ls.py").write_text(LAYERSCALE)
    r = subprocess.run(
        [sys.executable, "-m", "metalint", "check", "ls.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "ML001" in r.stdout


def test_check_probe_marks_findings_confirmed(cli, write):
    write("ls.py", LAYERSCALE)
    r = cli("check", "--probe", "--no-cache", "ls.py")
    assert r.exit_code == 1
    line = next(l for l in r.output.splitlines() if l.startswith("ls.py:8:9: ML001"))
    assert line.endswith("(confirmed by probe)")
    data = json.loads(
        cli("check", "--probe", "--no-cache", "--output-format", "json", "ls.py").output
    )
    assert [d["verdict"] for d in data if d["code"] == "ML001"] == ["confirmed"]


def test_check_probe_does_not_repeat_a_confirmed_lost_tensor(cli, write):
    """check reports ``theta`` where it is registered, the probe where it was computed (the
    line before): one finding, the static one, confirmed."""
    model = Path(__file__).parent / "probe_models" / "configured_hook.py"
    path = write("rope.py", model.read_text())
    data = json.loads(
        cli("check", "--probe", "--no-cache", "--output-format", "json", "rope.py").output
    )
    about_theta = [
        (d["code"], d["location"]["row"], d.get("verdict"))
        for d in data
        if "theta" in d.get("subject", ())
    ]
    registered = next(
        i for i, line in enumerate(path.read_text().splitlines(), 1) if "register_buffer" in line
    )
    assert about_theta == [("ML002", registered, "confirmed")]


ROOTED = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, cfg: object):
        super().__init__()
        self.fc = nn.Linear(cfg.dim, cfg.dim)
        self.gamma = nn.Parameter(cfg.init * torch.ones(cfg.dim))


class Cfg:
    dim = 8
    init = 1e-5


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block(Cfg()) for _ in range(2))

    def init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                m.reset_parameters()
"""


def test_check_probe_builds_the_root_that_contains_the_class(cli, write):
    """``Block`` cannot be built alone (its ``cfg`` cannot be guessed); the finding is judged
    under ``Net.init_weights()``, so ``check --probe`` builds ``Net`` and proves it there."""
    write("net.py", ROOTED)
    data = json.loads(
        cli("check", "--probe", "--no-cache", "--output-format", "json", "net.py").output
    )
    (gamma,) = [d for d in data if d["code"] == "ML001"]
    assert gamma["root"] == "net.Net" and gamma["verdict"] == "confirmed"
    assert not [d for d in data if d["code"].startswith("MP")]


CONFIGURED = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim, init):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.gamma = nn.Parameter(init * torch.ones(dim))


class Net(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.blocks = nn.ModuleList(Block(cfg["dim"], cfg["init"]) for _ in range(2))

    def init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                m.reset_parameters()
"""


@pytest.mark.parametrize("configured", [True, False])
def test_check_probe_builds_a_root_through_its_configured_factory(cli, write, configured):
    """``Net(cfg)`` takes a dict the probe cannot guess: with ``[tool.metalint.probe]
    factories = {"net.Net" = "build.py:tiny_net"}`` ``check --probe`` builds the root the
    finding names through that factory and proves it; without, the finding stays unproven."""
    write("net.py", CONFIGURED)
    write(
        "build.py",
        "from net import Net\n\ndef tiny_net():\n    return Net({'dim': 8, 'init': 1e-5})\n",
    )
    table = '{"net.Net" = "build.py:tiny_net"}' if configured else '["build.py:tiny_net"]'
    write("pyproject.toml", f"[tool.metalint]\n\n[tool.metalint.probe]\nfactories = {table}\n")
    data = json.loads(
        cli("check", "--probe", "--no-cache", "--output-format", "json", "net.py").output
    )
    (gamma,) = [d for d in data if d["code"] == "ML001"]
    assert gamma["root"] == "net.Net"
    assert gamma.get("verdict") == ("confirmed" if configured else None)


@pytest.mark.parametrize(
    "table", ['{"net.Net" = "tiny_net"}', '{"net.Net" = 3}', '{"not a class" = "build:f"}']
)
def test_a_bad_factories_table_is_a_one_line_config_error(cli, write, table):
    write("net.py", CONFIGURED)
    write("pyproject.toml", f"[tool.metalint]\n\n[tool.metalint.probe]\nfactories = {table}\n")
    r = cli("check", "--no-cache", "net.py")
    assert r.exit_code == 2
    (line,) = [ln for ln in r.output.splitlines() if "factories" in ln]
    assert "pyproject.toml" in line and "pkg.mod.Class" in line
