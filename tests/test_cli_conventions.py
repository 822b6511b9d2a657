"""metalint as a linter people already know: ruff's flags and formats, CI integration (SARIF,
GitLab, the GitHub Action), packaging (torch as an extra, LICENSE, py.typed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import zipfile
from pathlib import Path

import pytest

from metalint import __version__

ROOT = Path(__file__).resolve().parent.parent

LAYERSCALE = """
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))
"""
CLEAN = """
import torch
from torch import nn

class Fine(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.zeros_(self.w)
"""
#: ML013: only an unsafe fix (a signature change)
APPLY = """
import torch
import torch.nn as nn

class MemoryModule(nn.Module):
    def _apply(self, fn):
        for key, value in self._memories.items():
            if isinstance(value, torch.Tensor):
                self._memories[key] = fn(value)
        return super()._apply(fn)
"""
PROJECT = '[tool.metalint]\nexclude = ["vendored"]\n'


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


@pytest.fixture(autouse=True)
def _no_colour_from_the_environment(monkeypatch):
    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)


def _run(args: list[str], cwd: Path, *, env: dict | None = None, stdin: str | None = None):
    return subprocess.run(
        [sys.executable, "-m", "metalint", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


# --- 1. torch is an extra ------------------------------------------------------------------


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # pragma: no cover
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


def test_torch_and_safetensors_are_the_torch_extra():
    project = _pyproject()["project"]
    assert not _names(project["dependencies"]) & {"torch", "safetensors"}
    extras = project["optional-dependencies"]
    assert _names(extras["torch"]) == {"torch", "safetensors"}
    assert "metalint[torch]" in extras["test"]  # the tests need torch


def test_pre_commit_hook_installs_no_torch():
    import yaml

    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    hook = hooks["metalint"]
    assert hook["language"] == "python" and hook["entry"] == "metalint check --force-exclude"
    # language: python installs the package's own dependencies, and only those
    assert not any("torch" in d for d in hook.get("additional_dependencies", []))
    assert not _names(_pyproject()["project"]["dependencies"]) & {"torch", "safetensors"}


def test_ci_checks_the_install_without_torch():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "torch<0" in ci and "-c " in ci
    assert 'metalint" check' in ci and 'metalint" probe' in ci


#: run metalint's command line in a process where torch (and safetensors) cannot be imported
BLOCKED = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "safetensors"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoTorch())
from metalint.cli import main
try:
    main(sys.argv[1:])
finally:
    assert "torch" not in sys.modules
"""


def _without_torch(args: list[str], cwd: Path):
    return subprocess.run(
        [sys.executable, "-c", BLOCKED, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "args, what",
    [
        (["probe", "ls.py"], "metalint probe"),
        (["check", "--probe", "--no-cache", "ls.py"], "metalint check --probe"),
        (["fix", "--write", "--verify", "--no-cache", "ls.py"], "metalint fix --verify"),
        (["load", "ckpt.safetensors", "--model", "ls.py:LayerScale"], "metalint load"),
    ],
)
def test_torch_commands_without_torch_say_what_to_install(tmp_path, args, what):
    (tmp_path / "ls.py").write_text(_src(LAYERSCALE))
    r = _without_torch(args, tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    missing = "torch and safetensors" if what == "metalint load" else "torch"
    assert r.stderr == f"metalint: error: `{what}` needs {missing}: pip install 'metalint[torch]'\n"
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert (tmp_path / "ls.py").read_text() == _src(LAYERSCALE)  # fix --verify wrote nothing


def test_check_and_fix_work_without_torch(tmp_path):
    (tmp_path / "ls.py").write_text(_src(LAYERSCALE))
    r = _without_torch(["check", "--no-cache", "ls.py"], tmp_path)
    assert r.returncode == 1 and "ls.py:8:9: ML001" in r.stdout, r.stderr
    r = _without_torch(["fix", "--write", "--no-cache", "ls.py"], tmp_path)
    assert r.returncode == 0 and "Fixed 1 error" in r.stdout, r.stderr
    assert "def reset_parameters" in (tmp_path / "ls.py").read_text()


# --- 2. ruff's flags ---------------------------------------------------------------------

CHECK_FLAGS = [
    "--quiet",
    "-q",
    "--show-settings",
    "--show-files",
    "--stdin-filename",
    "--output-format",
    "--extend-exclude",
    "--add-noqa",
    "--fix",
    "--unsafe-fixes",
    "--show-fixes",
    "--exit-non-zero-on-fix",
]


def test_every_flag_is_in_help(cli):
    r = cli("check", "--help")
    assert r.exit_code == 0
    for flag in CHECK_FLAGS:
        assert re.search(rf"(^|[\s,]){re.escape(flag)}\b", r.output), flag
    for fmt in ("concise", "full", "grouped", "json-lines", "gitlab", "sarif"):
        assert fmt in r.output


def test_quiet_prints_the_findings_only(cli, write):
    write("ls.py", LAYERSCALE)
    for flag in ("-q", "--quiet"):
        r = cli("check", flag, "ls.py")
        assert r.exit_code == 1
        assert r.output.startswith("ls.py:8:9: ML001")
        assert "Found" not in r.output and "fixable" not in r.output
    write("ls.py", CLEAN)
    r = cli("check", "-q", "ls.py")
    assert r.exit_code == 0 and r.output == ""


def test_show_settings(cli, write, tmp_path):
    write("pyproject.toml", '[tool.metalint]\nignore = ["ML003"]\nhooks = ["rope_init"]\n')
    write("ls.py", LAYERSCALE)
    r = cli("check", "--show-settings", "--extend-select", "ML012", "ls.py")
    assert r.exit_code == 0, r.output  # nothing is checked
    assert r.output.startswith('Resolved settings for: "ls.py"\n')
    assert f"Settings path: {json.dumps(str(tmp_path / 'pyproject.toml'))}" in r.output
    enabled = json.loads(re.search(r"^enabled = (.*)$", r.output, re.M).group(1))
    assert "ML012" in enabled and "ML003" not in enabled and "ML001" in enabled
    assert re.search(r'^hooks = \[.*"rope_init"\]$', r.output, re.M)
    assert "ML001" not in r.output.split("enabled")[0]


def test_show_files_and_extend_exclude(cli, write):
    write("pyproject.toml", PROJECT)
    write("a.py", CLEAN)
    write("pkg/b.py", CLEAN)
    write("gen/c_pb2.py", CLEAN)
    write("vendored/d.py", LAYERSCALE)
    write("other/e.py", LAYERSCALE)
    r = cli("check", "--show-files")
    assert r.exit_code == 0
    assert r.output.splitlines() == ["a.py", "gen/c_pb2.py", "other/e.py", "pkg/b.py"]
    r = cli("check", "--show-files", "--extend-exclude", "*_pb2.py,other")
    assert r.output.splitlines() == ["a.py", "pkg/b.py"]
    r = cli("check", "--extend-exclude", "gen", "--extend-exclude", "other")
    assert r.exit_code == 0 and "All checks passed!" in r.output
    assert cli("check").exit_code == 1  # other/e.py without --extend-exclude


def test_stdin_with_a_filename(cli, write, monkeypatch):
    from click.testing import CliRunner

    from metalint.cli import main

    write("pyproject.toml", '[tool.metalint.per-file-ignores]\n"tests/*" = ["ML001"]\n')
    monkeypatch.chdir(write("x.py", "").parent)
    runner = CliRunner()
    r = runner.invoke(main, ["check", "--stdin-filename", "x.py", "-"], input=_src(LAYERSCALE))
    assert r.exit_code == 1, r.output
    assert r.output.startswith("x.py:8:9: ML001") and "1 file checked" in r.output
    assert (Path("x.py").read_text()) == ""  # the file itself is not read
    r = runner.invoke(main, ["check", "-"], input=_src(LAYERSCALE))
    assert r.exit_code == 1 and r.output.startswith("-:8:9: ML001"), r.output
    # ruff: --stdin-filename alone reads stdin too; per-file-ignores match the name
    r = runner.invoke(main, ["check", "--stdin-filename", "tests/t.py"], input=_src(LAYERSCALE))
    assert r.exit_code == 0 and "All checks passed!" in r.output, r.output
    r = runner.invoke(main, ["check", "-", "--output-format", "json"], input="class A(:\n")
    assert r.exit_code == 2 and json.loads(r.output)[0]["code"] == "ML900"


def test_stdin_through_a_pipe(tmp_path):
    r = _run(["check", "--stdin-filename", "x.py", "-"], tmp_path, stdin=_src(LAYERSCALE))
    assert r.returncode == 1 and r.stdout.startswith("x.py:8:9: ML001"), r.stderr


def test_stdin_misuse_is_a_one_line_error(cli, write):
    write("ls.py", LAYERSCALE)
    for args in (["-", "ls.py"], ["--fix", "-"], ["--add-noqa", "--stdin-filename", "x.py"]):
        r = cli("check", *args)
        assert r.exit_code == 2, args
        assert r.output.startswith("metalint: error: ") and r.output.count("\n") == 1


def test_output_formats(cli, write):
    write("ls.py", LAYERSCALE)
    write("b.py", LAYERSCALE.replace("LayerScale", "Other"))
    text = cli("check", "ls.py", "b.py").output
    assert cli("check", "--output-format", "full", "ls.py", "b.py").output == text
    assert "  = help: " in text
    concise = cli("check", "--output-format", "concise", "ls.py", "b.py").output
    assert concise == "\n".join(line for line in text.splitlines() if "= help:" not in line) + "\n"
    grouped = cli("check", "--output-format", "grouped", "ls.py", "b.py")
    assert grouped.exit_code == 1
    lines = grouped.output.splitlines()
    assert lines[:4] == ["b.py:", lines[1], "", "ls.py:"]
    assert lines[1].startswith("  8:9 ML001 `gamma`") and lines[4].startswith("  8:9 ML001")
    assert "Found 2 errors in 2 files checked." in grouped.output
    as_json = json.loads(cli("check", "--output-format", "json", "ls.py", "b.py").output)
    r = cli("check", "--output-format", "json-lines", "ls.py", "b.py")
    assert r.exit_code == 1
    assert [json.loads(line) for line in r.output.splitlines()] == as_json


def test_gitlab_code_quality(cli, write):
    write("ls.py", LAYERSCALE)
    r = cli("check", "--output-format", "gitlab", "ls.py")
    assert r.exit_code == 1
    [issue] = json.loads(r.output)
    assert issue["check_name"] == "ML001" and issue["severity"] == "major"
    assert issue["description"].startswith("ML001: `gamma`")
    assert issue["location"]["path"] == "ls.py"
    assert issue["location"]["positions"]["begin"] == {"line": 8, "column": 9}
    sarif = json.loads(cli("check", "--output-format", "sarif", "ls.py").output)
    [result] = sarif["runs"][0]["results"]
    assert issue["fingerprint"] == result["partialFingerprints"]["metalintFingerprint/v1"]


def test_add_noqa(cli, write, tmp_path):
    write("ls.py", LAYERSCALE)
    source = _src(LAYERSCALE).replace(
        "super().__init__()",
        "super().__init__()\n        self.bias = nn.Parameter(torch.zeros(dim))  # keep",
    )
    (tmp_path / "two.py").write_bytes(
        source.replace(
            "self.gamma = nn.Parameter(init_values * torch.ones(dim))",
            "self.gamma = nn.Parameter(init_values * torch.ones(dim))  # noqa:F401",
        )
        .replace("\n", "\r\n")
        .encode()
    )
    r = cli("check", "--add-noqa", "ls.py", "two.py")
    assert r.exit_code == 0, r.output
    assert "Added 3 noqa directives." in r.output
    assert (tmp_path / "ls.py").read_text() == _src(LAYERSCALE).replace(
        "torch.ones(dim))\n", "torch.ones(dim))  # noqa: ML001\n"
    )
    two = (tmp_path / "two.py").read_bytes().decode()
    assert "\r\n" in two and "\n" not in two.replace("\r\n", "")  # line endings kept
    assert "torch.zeros(dim))  # keep  # noqa: ML001\r\n" in two
    assert "torch.ones(dim))  # noqa:F401, ML001\r\n" in two
    r = cli("check", "ls.py", "two.py")
    assert r.exit_code == 0 and "All checks passed!" in r.output, r.output
    # again: nothing to add
    r = cli("check", "--add-noqa", "ls.py", "two.py")
    assert r.exit_code == 0 and "Added 0 noqa directives." in r.output


def test_add_noqa_leaves_a_continued_line_alone(cli, write, tmp_path):
    broken = _src(LAYERSCALE).replace(
        "nn.Parameter(init_values * torch.ones(dim))",
        "nn.Parameter(init_values * \\\n            torch.ones(dim))",
    )
    write("ls.py", broken)
    r = cli("check", "--add-noqa", "ls.py")
    assert r.exit_code == 1
    assert "metalint: warning: ls.py:8: no `# noqa` added" in r.output
    assert (tmp_path / "ls.py").read_text() == broken


def test_add_noqa_never_writes_a_file_it_did_not_check(cli, write, tmp_path):
    """A finding whose path is not one of this run's files (a cache entry written from
    another working folder names the file as that run saw it) gets no comment anywhere."""
    write("proj/pyproject.toml", PROJECT)
    write("proj/pkg/ls.py", LAYERSCALE)
    write("proj/sub/keep.txt", "")
    decoy = write("pkg/ls.py", LAYERSCALE)  # what proj/sub's "../pkg/ls.py" is from proj
    assert cli("check", "../pkg/ls.py", cwd=tmp_path / "proj/sub").exit_code == 1
    r = cli("check", "--add-noqa", "pkg/ls.py", cwd=tmp_path / "proj")
    assert decoy.read_text() == _src(LAYERSCALE)
    done = (tmp_path / "proj/pkg/ls.py").read_text()
    assert r.exit_code in (0, 1) and (r.exit_code == 1) == ("# noqa" not in done)


def test_fix_flags(cli, write, tmp_path):
    write("ls.py", LAYERSCALE)
    r = cli("check", "--fix", "ls.py")
    assert r.exit_code == 0, r.output
    assert "Found 1 error (1 fixed, 0 remaining) in 1 file checked." in r.output
    assert "def reset_parameters(self):" in (tmp_path / "ls.py").read_text()
    assert "Fixed 1 error:" not in r.output

    write("ls.py", LAYERSCALE)
    r = cli("check", "--fix", "--show-fixes", "--exit-non-zero-on-fix", "ls.py")
    assert r.exit_code == 1, r.output
    assert "Fixed 1 error:\n- ls.py:\n    1 × ML001 (parameter-from-value)\n" in r.output
    r = cli("check", "--fix", "--exit-non-zero-on-fix", "ls.py")  # nothing left to fix
    assert r.exit_code == 0 and "All checks passed!" in r.output

    write("apply.py", APPLY)
    r = cli("check", "--fix", "apply.py")
    assert r.exit_code == 1 and "ML013" in r.output and "(0 fixed, 1 remaining)" in r.output
    assert "recurse" not in (tmp_path / "apply.py").read_text()
    r = cli("check", "--fix", "--unsafe-fixes", "apply.py")
    assert r.exit_code == 0, r.output
    assert "def _apply(self, fn, recurse=True):" in (tmp_path / "apply.py").read_text()


def test_fix_with_a_machine_format_prints_only_the_report(cli, write):
    write("ls.py", LAYERSCALE)
    write("apply.py", APPLY)
    r = cli("check", "--fix", "--show-fixes", "--output-format", "json", ".")
    assert r.exit_code == 1
    assert [d["code"] for d in json.loads(r.output)] == ["ML013"]


def test_colour(cli, write, monkeypatch, tmp_path):
    write("ls.py", LAYERSCALE)
    plain = cli("check", "ls.py").output
    assert "\x1b[" not in plain  # not a terminal
    monkeypatch.setenv("FORCE_COLOR", "1")
    coloured = cli("check", "ls.py").output
    assert "\x1b[1mls.py\x1b[0m:8:9: \x1b[1;31mML001\x1b[0m" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain
    for fmt in ("json", "json-lines", "sarif", "github", "gitlab"):
        assert "\x1b[" not in cli("check", "--output-format", fmt, "ls.py").output, fmt
    cli("check", "-o", "report.txt", "ls.py")
    assert (tmp_path / "report.txt").read_text() == plain
    monkeypatch.setenv("NO_COLOR", "1")  # wins over FORCE_COLOR
    assert cli("check", "ls.py").output == plain


def _on_a_terminal(args: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run metalint with stderr on a pseudo-terminal; (exit code, stdout, what the terminal
    got)."""
    import pty

    master, slave = pty.openpty()
    got: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            got.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        r = subprocess.run(
            [sys.executable, "-m", "metalint", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=slave,
            text=True,
            timeout=300,
        )
    finally:
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
    return r.returncode, r.stdout, b"".join(got).decode(errors="replace")


@pytest.mark.skipif(sys.platform != "linux", reason="files are analysed in workers on Linux")
def test_progress_on_a_terminal_only(tmp_path):
    for i in range(3):
        (tmp_path / f"m{i}.py").write_text(_src(LAYERSCALE if i == 0 else CLEAN))
    rc, out, tty = _on_a_terminal(["check", "--no-cache", "."], tmp_path)
    assert rc == 1 and "Found 1 error" in out
    assert "\rmetalint: analysed 3/3 files" in tty.replace("\x1b[K", "")
    assert tty.endswith("\r\x1b[K")  # erased when done
    assert "analysed" not in out
    for quiet in (["--output-format", "json"], ["--output-format", "sarif"], ["-q"]):
        rc, out, tty = _on_a_terminal(["check", "--no-cache", *quiet, "."], tmp_path)
        assert rc == 1 and "analysed" not in tty, quiet
    r = _run(["check", "--no-cache", "."], tmp_path)  # stderr a pipe
    assert r.returncode == 1 and "analysed" not in r.stderr
    rc, out, tty = _on_a_terminal(["fix", "--no-cache", "."], tmp_path)  # a diff, no write
    assert rc == 1 and out.startswith("--- a/m0.py")
    assert "\rmetalint: analysed 3/3 files\r" in tty.replace("\x1b[K", "")


def test_progress_is_rewritten_in_place_and_erased():
    import io

    from metalint import terminal

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty = Terminal()
    with terminal.progress(True, tty):
        terminal._current.interval = 0.0
        for done in range(4):
            terminal.advance(done, 3)
    assert (
        tty.getvalue()
        == "".join(f"\r\x1b[Kmetalint: analysed {n}/3 files" for n in range(4)) + "\r\x1b[K"
    )
    quiet = io.StringIO()  # not a terminal
    with terminal.progress(True, quiet):
        terminal.advance(1, 3)
    with terminal.progress(False, tty):
        terminal.advance(1, 3)
    assert quiet.getvalue() == "" and tty.getvalue().endswith("3/3 files\r\x1b[K")


# --- 3. CI integration --------------------------------------------------------------------


def _sarif(cli, *args, cwd=None) -> dict:
    r = cli("check", "--output-format", "sarif", *args, cwd=cwd)
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.output)


def _fingerprint(result: dict) -> str:
    return result["partialFingerprints"]["metalintFingerprint/v1"]


def test_sarif_validates_with_fingerprints_base_ids_and_help(cli, write, sarif_schema, tmp_path):
    import jsonschema

    write("pyproject.toml", PROJECT)
    write("pkg/ls.py", LAYERSCALE)
    data = _sarif(cli, "pkg/ls.py")
    jsonschema.validate(data, sarif_schema)
    run = data["runs"][0]
    assert run["originalUriBaseIds"] == {"%SRCROOT%": {"uri": tmp_path.resolve().as_uri() + "/"}}
    [result] = run["results"]
    location = result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": "pkg/ls.py", "uriBaseId": "%SRCROOT%"}
    assert re.fullmatch(r"[0-9a-f]{32}", _fingerprint(result))
    [rule] = run["tool"]["driver"]["rules"]
    assert rule["help"]["markdown"].startswith("# parameter-from-value (ML001)")
    assert "## Why is this bad on meta?" in rule["help"]["markdown"]
    assert rule["help"]["text"] == rule["help"]["markdown"]
    assert rule["fullDescription"]["text"].startswith("Finds an `nn.Parameter` created in")
    assert rule["fullDescription"]["text"] != rule["shortDescription"]["text"]


def test_sarif_paths_are_relative_to_the_project_root(cli, write, tmp_path, sarif_schema):
    import jsonschema

    write("proj/pyproject.toml", PROJECT)
    write("proj/pkg/ls.py", LAYERSCALE)
    write("proj/sub/keep.txt", "")
    write("outside/x.py", LAYERSCALE)
    data = _sarif(
        cli,
        "--no-cache",
        "../pkg/ls.py",
        "--config",
        "../pyproject.toml",
        cwd=tmp_path / "proj/sub",
    )
    jsonschema.validate(data, sarif_schema)
    location = data["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "pkg/ls.py", "uriBaseId": "%SRCROOT%"}
    data = _sarif(cli, "--no-cache", "pkg/ls.py", "../outside/x.py", cwd=tmp_path / "proj")
    jsonschema.validate(data, sarif_schema)
    uris = [
        r["locations"][0]["physicalLocation"]["artifactLocation"]
        for r in data["runs"][0]["results"]
    ]
    outside = (tmp_path / "outside" / "x.py").resolve().as_uri()
    assert uris == [{"uri": outside}, {"uri": "pkg/ls.py", "uriBaseId": "%SRCROOT%"}]
    assert not any(u["uri"].startswith("..") for u in uris)


def test_sarif_fingerprints_ignore_line_numbers(cli, write):
    write("ls.py", LAYERSCALE)
    [before] = _sarif(cli, "ls.py")["runs"][0]["results"]
    moved = _src(LAYERSCALE).replace("self.gamma = nn", "self.gamma  =  nn")
    write("ls.py", "# a comment\n\n\n" + moved)
    [after] = _sarif(cli, "ls.py")["runs"][0]["results"]
    assert after["locations"][0]["physicalLocation"]["region"]["startLine"] == 11
    assert _fingerprint(after) == _fingerprint(before)
    write(
        "ls.py",
        LAYERSCALE.replace("init_values * torch.ones(dim)", "torch.ones(dim) * init_values"),
    )
    [changed] = _sarif(cli, "ls.py")["runs"][0]["results"]
    assert _fingerprint(changed) != _fingerprint(before)
    # two identical findings in one file keep distinct fingerprints
    write("two.py", LAYERSCALE + LAYERSCALE.replace("import torch\nfrom torch import nn\n", ""))
    results = _sarif(cli, "two.py")["runs"][0]["results"]
    assert len({_fingerprint(r) for r in results}) == len(results) == 2


def test_sarif_of_stdin_has_a_fingerprint_of_its_text(tmp_path):
    r = _run(
        ["check", "--output-format", "sarif", "--stdin-filename", "x.py", "-"],
        tmp_path,
        stdin=_src(LAYERSCALE),
    )
    (tmp_path / "x.py").write_text(_src(LAYERSCALE))
    on_disk = _run(["check", "--no-cache", "--output-format", "sarif", "x.py"], tmp_path)
    [a] = json.loads(r.stdout)["runs"][0]["results"]
    [b] = json.loads(on_disk.stdout)["runs"][0]["results"]
    assert _fingerprint(a) == _fingerprint(b)


def _action() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "action.yml").read_text())


def test_action_is_a_composite_that_uploads_sarif():
    action = _action()
    assert set(action["inputs"]) >= {"args", "version", "sarif"}
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    assert steps[0]["uses"].startswith("actions/setup-python@")
    install = next(s for s in steps if s.get("name") == "Install metalint")
    assert "${{ github.action_path }}" in install["env"].values()
    assert "pip install" in install["run"]
    check = next(s for s in steps if s.get("id") == "check")
    assert "metalint check --output-format sarif" in check["run"]
    upload = next(s for s in steps if "upload-sarif" in s.get("uses", ""))
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert "inputs.sarif == 'true'" in upload["if"]
    assert steps[-1]["if"] == "${{ steps.check.outputs.exit-code != '0' }}"
    assert "|| true" not in (ROOT / "action.yml").read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("sarif", ["true", "false"])
def test_action_check_step_runs(tmp_path, write, sarif):
    """The action's check step, run here as GitHub runs it (bash, its env, GITHUB_OUTPUT)."""
    step = next(s for s in _action()["runs"]["steps"] if s.get("id") == "check")
    write("src/ls.py", LAYERSCALE)
    output = tmp_path / "github_output"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_OUTPUT": str(output),
        "METALINT_ARGS": "--no-cache src/",
        "METALINT_SARIF": sarif,
        "METALINT_SARIF_FILE": "metalint.sarif",
    }
    r = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr  # the step records the exit code; a later step fails
    assert output.read_text() == "exit-code=1\n"
    if sarif == "true":
        data = json.loads((tmp_path / "metalint.sarif").read_text())
        assert data["runs"][0]["results"][0]["ruleId"] == "ML001"
    else:
        assert r.stdout.startswith("::error title=metalint ML001,file=src/ls.py,line=8")


def test_readme_ci_workflow_installs_and_never_hides_the_exit_code():
    page = (ROOT / "docs" / "ci.md").read_text()
    ci = page[page.index("## GitHub Actions") :]
    assert "|| true" not in ci
    assert "- run: pip install metalint" in ci
    assert f"uses: metalint/metalint@v{__version__}" in ci
    assert "actions/checkout@" in ci and "security-events: write" in ci


# --- 4. the pre-commit rev -----------------------------------------------------------------


def test_pre_commit_rev_follows_the_version():
    page = (ROOT / "docs" / "ci.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for section in (
        page[page.index("## pre-commit") : page.index("## GitHub Actions")],
        readme[readme.index("## pre-commit and CI") :],
    ):
        revs = re.findall(r"^\s*rev: (\S+)(.*)$", section, re.M)
        assert [r[0] for r in revs] == [f"v{__version__}"]
        assert "tags follow the version" in revs[0][1]
    if shutil.which("git") and (ROOT / ".git").exists():
        tags = subprocess.run(
            ["git", "tag", "--list", "v*"], cwd=ROOT, capture_output=True, text=True
        ).stdout.split()
        # a tag that exists must follow the scheme too
        assert all(re.fullmatch(r"v\d+\.\d+\.\d+\S*", t) for t in tags)


# --- 5. packaging ---------------------------------------------------------------------------


def test_license_and_py_typed_files():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License")
    assert "metalint developers" in text
    assert (ROOT / "metalint" / "py.typed").is_file()
    project = _pyproject()["project"]
    assert project["license"] == "BSD-3-Clause" and project["license-files"] == ["LICENSE"]
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # PEP 639
    assert "Typing :: Typed" in project["classifiers"]
    assert _pyproject()["tool"]["setuptools"]["package-data"]["metalint"] == ["py.typed"]


def test_wheel_holds_license_and_py_typed_and_no_torch(tmp_path):
    pytest.importorskip("setuptools", minversion="77")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "metalint", src / "metalint", ignore=shutil.ignore_patterns("__pycache__")
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    [wheel] = (tmp_path / "dist").glob("metalint-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "metalint/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: BSD-3-Clause" in meta
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    torch = [line for line in requires if re.match(r"Requires-Dist: (torch|safetensors)\b", line)]
    assert torch and all('extra == "torch"' in line for line in torch)
