"""``check`` reads installed packages as source: a class of the tree that builds or extends a
class of another package gets that class's findings (fixtures/third_party)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import metalint.checking as check_module
from metalint.sitepackages import MAX_INSTALLED_BYTES, Environment, search_folders

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "fixtures" / "third_party"
SITE = FIXTURE / "site-packages"


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A copy of the fixture (project and site-packages), with its own cache key."""
    shutil.copytree(FIXTURE, tmp_path / "third_party")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    return tmp_path / "third_party" / "project"


def run(cli, project: Path, *args: str) -> tuple[int, list[dict], str]:
    r = cli("check", "--output-format", "json", *args, cwd=project)
    return r.exit_code, json.loads(r.stdout), r.stderr


def by_code(found: list[dict]) -> dict[str, dict]:
    return {d["code"]: d for d in found}


def test_construction_crash_in_an_installed_class_is_reported_where_the_tree_builds_it(
    cli, project
):
    rc, found, _ = run(cli, project, "--no-cache")
    assert rc == 1
    d = by_code(found)["ML008"]
    # on the user's file, at the call that builds it
    assert (d["filename"], d["symbol"]) == ("models.py", "AudioModel")
    assert (d["location"]["row"], d["location"]["column"]) == (16, 25)
    assert (d["end_location"]["row"], d["end_location"]["column"]) == (16, 38)
    # naming the installed class, its distribution and the line that raises
    assert "`featlib.layers.MelFilterbank` (installed: featlib 1.0)" in d["message"]
    assert "`freqs.max().item()`" in d["message"]
    layers = project.parent / "site-packages" / "featlib" / "layers.py"
    assert d["via"] == {
        "function": "featlib.layers.MelFilterbank",
        "filename": str(layers.resolve()),
        "line": 13,
    }
    assert "freqs.max().item()" in layers.read_text().splitlines()[12]
    # nothing is reported on the installed files themselves
    assert {x["filename"] for x in found} == {"models.py"}
    assert "featlib" not in sys.modules and "visionlib" not in sys.modules


def test_init_inherited_from_an_installed_base_is_reported_on_the_subclass(cli, project):
    rc, found, _ = run(cli, project, "--no-cache")
    d = by_code(found)["ML010"]
    assert (d["filename"], d["symbol"]) == ("models.py", "Encoder")
    # at the base in ``class Encoder(ResNet):``
    assert (d["location"]["row"], d["location"]["column"]) == (7, 15)
    assert (
        "`Encoder` extends `visionlib.models.resnet.ResNet` (installed: visionlib 2.1)"
        in (d["message"])
    )
    assert "per-module `reset_parameters()`" in d["message"]
    resnet = project.parent / "site-packages" / "visionlib" / "models" / "resnet.py"
    assert d["via"]["filename"] == str(resnet.resolve())
    assert "for m in self.modules():" in resnet.read_text().splitlines()[d["via"]["line"] - 1]
    assert "reset_parameters()" in d["help"] and "Encoder" in d["help"]


def test_the_same_classes_in_the_tree_are_flagged_by_the_same_rules(cli, project, tmp_path):
    """Parity: with the packages copied into the tree, check flags the same lines (on the
    packages' own files): the installed case reports what the tree case does."""
    tree = tmp_path / "tree"
    shutil.copytree(project.parent / "site-packages" / "featlib", tree / "featlib")
    shutil.copytree(project.parent / "site-packages" / "visionlib", tree / "visionlib")
    shutil.copy(project / "models.py", tree / "models.py")
    (tree / "pyproject.toml").write_text("[tool.metalint]\nsite-packages = []\n")
    rc, found, _ = run(cli, tree, "--no-cache")
    assert {(d["code"], d["filename"], d["location"]["row"]) for d in found} == {
        ("ML008", "featlib/layers.py", 13),
        ("ML010", "visionlib/models/resnet.py", 14),
    }


def test_no_installed_file_is_imported(project, tmp_path):
    """Every module of the fake packages starts with ``raise SystemExit``: a run that imported
    one would stop there (or lose the finding, in a worker)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "XDG_CACHE_HOME": str(tmp_path / "user-cache"),
    }
    env.pop("VIRTUAL_ENV", None)
    for _ in range(2):  # cold, then from the cache
        r = subprocess.run(
            [sys.executable, "-m", "metalint", "check", "--output-format", "json", "."],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert "was imported" not in r.stdout + r.stderr
        assert r.returncode == 1, r.stderr
        assert {d["code"] for d in json.loads(r.stdout)} == {"ML008", "ML010"}
        assert "Traceback" not in r.stderr


class Spy:
    """The installed files a run reads and analyses."""

    def __init__(self, monkeypatch):
        self.read: list[str] = []
        self.analysed: list[str] = []
        read = Environment.read
        analyze = check_module.analyze_files

        def spy_read(env, module):
            self.read.append(os.path.basename(module.path))
            return read(env, module)

        def spy_analyze(jobs, *args, **kwargs):
            self.analysed += [os.path.basename(j[1]) for j in jobs if "site-packages" in j[1]]
            return analyze(jobs, *args, **kwargs)

        monkeypatch.setattr(Environment, "read", spy_read)
        monkeypatch.setattr(check_module, "analyze_files", spy_analyze)

    def reset(self):
        self.read, self.analysed = [], []


def test_summaries_are_cached_per_version(cli, project, monkeypatch):
    spy = Spy(monkeypatch)
    rc, first, _ = run(cli, project)
    assert sorted(spy.analysed) == ["layers.py", "resnet.py"]
    # the re-exporting modules are read for their names only
    assert sorted(spy.read) == ["__init__.py", "__init__.py", "layers.py", "resnet.py"]
    spy.reset()
    rc, second, _ = run(cli, project)
    assert (spy.read, spy.analysed) == ([], [])
    assert second == first
    # another version of featlib: its files are a miss, visionlib's are not
    meta = project.parent / "site-packages" / "featlib-1.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 1.0", "Version: 1.1", 1))
    spy.reset()
    rc, third, _ = run(cli, project)
    assert sorted(spy.analysed) == ["layers.py"]
    assert sorted(spy.read) == ["__init__.py", "layers.py"]
    assert "(installed: featlib 1.1)" in by_code(third)["ML008"]["message"]


def test_a_tampered_cache_of_installed_summaries_is_a_miss(cli, project, monkeypatch):
    spy = Spy(monkeypatch)
    run(cli, project)
    cache = project / ".metalint_cache"
    files = sorted(cache.glob("*.json"))
    installed = [f for f in files if b"freqs.max().item()" in f.read_bytes()]
    assert len(installed) == 1 and len(files) == 2  # its own file beside the tree's
    data = installed[0].read_bytes().replace(b"freqs.max().item()", b"freqs.max().itex()")
    installed[0].write_bytes(data)
    spy.reset()
    rc, found, _ = run(cli, project)
    assert sorted(spy.analysed) == ["layers.py", "resnet.py"]  # the MAC did not verify
    assert "`freqs.max().item()`" in by_code(found)["ML008"]["message"]


def test_the_users_noqa_and_selection_apply(cli, project):
    models = project / "models.py"
    text = models.read_text().replace(
        "MelFilterbank(n_mels=40)", "MelFilterbank(n_mels=40)  # noqa: ML008"
    )
    models.write_text(text)
    rc, found, _ = run(cli, project, "--no-cache")
    assert {d["code"] for d in found} == {"ML010"}
    rc, found, _ = run(cli, project, "--no-cache", "--ignore", "ML010")
    assert found == [] and rc == 0


def test_a_subclass_hook_that_recreates_the_tensor_is_judged_for_the_subclass(
    cli, project, tmp_path
):
    """A buffer the installed base computes in ``__init__`` is lost; the tree's subclass
    re-creating it in its own ``reset_parameters()`` is not."""
    site = project.parent / "site-packages"
    (site / "featlib" / "window.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Window(nn.Module):\n"
        "    def __init__(self, n):\n"
        "        super().__init__()\n"
        '        self.register_buffer("w", torch.hann_window(n))\n'
    )
    (project / "models.py").write_text(
        "import torch\nfrom featlib.window import Window\n\n\n"
        "class Lost(Window):\n"
        "    pass\n\n\n"
        "class Kept(Window):\n"
        "    def reset_parameters(self):\n"
        "        self.w.copy_(torch.hann_window(self.w.shape[0]))\n"
    )
    rc, found, _ = run(cli, project, "--no-cache")
    assert [(d["code"], d["symbol"]) for d in found] == [("ML002", "Lost")]
    assert found[0]["subject"] == ["w"]


def test_torch_is_never_read_from_disk(cli, project, monkeypatch):
    """torch.nn's classes are metalint's own vocabulary: a ``torch`` package in the
    environment is not read, even one that says otherwise."""
    site = project.parent / "site-packages"
    (site / "torch" / "nn").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch" / "nn" / "__init__.py").write_text(
        "class Linear:\n    def __init__(self):\n        import torch\n"
        "        self.x = torch.zeros(1).item()\n"
    )
    spy = Spy(monkeypatch)
    assert Environment(search_folders([str(site)])).find("torch.nn") is None
    rc, found, _ = run(cli, project, "--no-cache")
    assert not any("torch" in p for p in spy.read)
    assert {d["code"] for d in found} == {"ML008", "ML010"}


def test_malformed_huge_and_linked_out_files_give_a_note_at_most(cli, project, tmp_path):
    site = project.parent / "site-packages"
    (site / "brokenlib").mkdir()
    (site / "brokenlib" / "__init__.py").write_text("class Broken(nn.Module:\n")
    (site / "hugelib").mkdir()
    (site / "hugelib" / "__init__.py").write_text(
        "from torch import nn\n\n\nclass Huge(nn.Module):\n    pass\n"
        + "#" * (MAX_INSTALLED_BYTES + 10)
        + "\n"
    )
    outside = tmp_path / "elsewhere.py"
    outside.write_text(
        "import torch\nfrom torch import nn\n\n\nclass Far(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.n = torch.zeros(2).sum().item()\n"
    )
    (site / "linklib").mkdir()
    (site / "linklib" / "__init__.py").write_text("")
    (site / "linklib" / "far.py").symlink_to(outside)
    (project / "more.py").write_text(
        "from torch import nn\nimport brokenlib\nimport hugelib\nfrom linklib.far import Far\n\n\n"
        "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.a = brokenlib.Broken()\n        self.b = hugelib.Huge()\n"
        "        self.c = Far()\n"
    )
    rc, found, err = run(cli, project, "--no-cache")
    assert rc == 1 and "Traceback" not in err
    assert {(d["code"], d["filename"]) for d in found} == {
        ("ML008", "models.py"),
        ("ML010", "models.py"),
    }
    notes = [line for line in err.splitlines() if line.startswith("metalint: note:")]
    assert any("brokenlib" in n and "SyntaxError" in n for n in notes), err
    assert any("hugelib" in n and "larger than" in n for n in notes), err
    assert not any("linklib" in n or "elsewhere" in n for n in notes)
    assert Environment(search_folders([str(site)])).find("linklib.far") is None


def test_files_read_per_run_are_capped(cli, project, monkeypatch):
    """A chain of re-exports longer than the cap: the run stops reading, says so once."""
    site = project.parent / "site-packages"
    chain = site / "chainlib"
    chain.mkdir()
    for i in range(6):
        (chain / f"m{i}.py").write_text(f"from chainlib.m{i + 1} import *\n")
    (chain / "__init__.py").write_text("from chainlib.m0 import *\n")
    (chain / "m6.py").write_text(
        "import torch\nfrom torch import nn\n\n\nclass Deep(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.n = torch.zeros(2).sum().item()\n"
    )
    (project / "deep.py").write_text(
        "from torch import nn\nfrom chainlib import Deep\n\n\nclass D(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.d = Deep()\n"
    )
    rc, found, _ = run(cli, project, "--no-cache")
    assert ("ML008", "deep.py") in {(d["code"], d["filename"]) for d in found}
    monkeypatch.setattr("metalint.static.installed.MAX_FILES", 4)
    spy = Spy(monkeypatch)
    rc, found, err = run(cli, project, "--no-cache")
    assert len(spy.read) <= 4
    assert ("ML008", "deep.py") not in {(d["code"], d["filename"]) for d in found}
    assert err.count("the most for one run") == 1


def test_which_environment_is_read(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    extra = tmp_path / "src"
    (site).mkdir(parents=True)
    extra.mkdir()
    ran = tmp_path / "ran"
    (site / "paths.pth").write_text(
        f"# a comment\n{extra}\nimport os; open({str(ran)!r}, 'w')\n../../../../missing\n"
    )
    # $VIRTUAL_ENV: the active environment's folders, then those its .pth files list;
    # an import line is code: neither run nor taken for a folder
    assert search_folders(None, {"VIRTUAL_ENV": str(venv)}) == [str(site), str(extra)]
    assert not ran.exists()
    # configured folders win; an empty list reads none
    assert search_folders([str(extra)], {"VIRTUAL_ENV": str(venv)}) == [str(extra)]
    assert search_folders([], {"VIRTUAL_ENV": str(venv)}) == []
    # else the interpreter's own
    purelib = os.path.realpath(sysconfig.get_paths()["purelib"])
    assert search_folders(None, {})[0] == purelib


def test_site_packages_empty_turns_reading_off(cli, project):
    (project / "pyproject.toml").write_text("[tool.metalint]\nsite-packages = []\n")
    rc, found, _ = run(cli, project, "--no-cache")
    assert (rc, found) == (0, [])


def test_site_packages_config_errors_are_one_line(cli, project):
    (project / "pyproject.toml").write_text("[tool.metalint]\nsite-packages = [3]\n")
    r = cli("check", ".", cwd=project)
    assert r.exit_code == 2
    assert "site-packages must be a folder name" in r.stderr and "Traceback" not in r.stderr


def test_distribution_version_comes_from_the_metadata_headers(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(SITE, site)
    env = Environment(search_folders([str(site)]))
    featlib = env.find("featlib.layers")
    assert (featlib.dist, featlib.version, featlib.is_package) == ("featlib", "1.0", False)
    # a dist-info named otherwise, found through its top_level.txt
    (site / "featlib-1.0.dist-info").rename(site / "audio_features-1.0.dist-info")
    env = Environment(search_folders([str(site)]))
    assert env.find("featlib").dist == "featlib"
    (site / "audio_features-1.0.dist-info" / "METADATA").write_text(
        "Name: audio-features\nVersion: 1.0.post1\n"
    )
    env = Environment(search_folders([str(site)]))
    assert (env.find("featlib").dist, env.find("featlib").version) == (
        "audio-features",
        "1.0.post1",
    )


def test_reference_columns_count_characters(cli, tmp_path, project):
    """A class line holding non-ASCII text before the installed base: the column is the
    character's, as every other finding's."""
    text = (project / "models.py").read_text()
    text = text.replace("class Encoder(ResNet):", "class Énc(ResNet):  # ResNet")
    (project / "models.py").write_text(text, encoding="utf-8")
    rc, found, _ = run(cli, project, "--no-cache")
    d = by_code(found)["ML010"]
    assert (d["symbol"], d["location"]["column"], d["end_location"]["column"]) == ("Énc", 11, 17)


def _real_torchvision() -> list[str] | None:
    """A Python (with the command prefix to run metalint) whose environment has
    torchvision installed: this one, else the timm environment of the workplace."""
    if Environment(search_folders(None, {})).find("torchvision.models.resnet") is not None:
        return [sys.executable]
    other = Path("/tmp/timmvenv/bin/python")
    if other.exists() and list(
        Path("/tmp/timmvenv/lib").glob("python3*/site-packages/torchvision")
    ):
        return [str(other)]
    return None


@pytest.mark.skipif(_real_torchvision() is None, reason="torchvision is not installed")
def test_a_really_installed_torchvision_resnet(tmp_path):
    (tmp_path / "enc.py").write_text(
        "import torch.nn as nn\n"
        "from torchvision.models import ResNet\n"
        "from torchvision.models.resnet import BasicBlock\n\n\n"
        "class Encoder(ResNet):\n"
        "    def __init__(self):\n"
        "        super().__init__(BasicBlock, [2, 2, 2, 2])\n"
        "        self.fc = nn.Identity()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "c")}
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run(
        [*_real_torchvision(), "-m", "metalint", "check", "--no-cache", "--output-format",
         "json", "enc.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    [d] = json.loads(r.stdout)
    assert (d["code"], d["symbol"], d["location"]["row"]) == ("ML010", "Encoder", 6)
    assert d["via"]["function"] == "torchvision.models.resnet.ResNet"
    assert d["via"]["filename"].endswith("torchvision/models/resnet.py")
    assert "(installed: torchvision " in d["message"]


def test_source_on_stdin_is_judged_with_the_installed_packages(project, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "c")}
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run(
        [sys.executable, "-m", "metalint", "check", "--output-format", "json",
         "--stdin-filename", "models.py", "-"],
        cwd=project,
        env=env,
        input=(project / "models.py").read_text(),
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert {(d["code"], d["filename"]) for d in json.loads(r.stdout)} == {
        ("ML008", "models.py"),
        ("ML010", "models.py"),
    }
    assert not (project / ".metalint_cache").exists()


WARM = """
import sys
from metalint.cli import main
try:
    main(["check", "--exit-zero", "-q", "."])
except SystemExit:
    pass
print("LIBCST" if "libcst" in sys.modules else "NO-LIBCST")
"""


def test_a_warm_run_reads_installed_summaries_without_libcst(project, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "c")}
    env.pop("VIRTUAL_ENV", None)
    outs = []
    for _ in range(2):
        r = subprocess.run(
            [sys.executable, "-c", WARM],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        outs.append(r.stdout)
    assert "featlib.layers.MelFilterbank" in outs[0]
    assert [o.splitlines()[-1] for o in outs] == ["LIBCST", "NO-LIBCST"]
    assert outs[1].splitlines()[:-1] == outs[0].splitlines()[:-1]


def test_an_installed_base_makes_the_tree_class_a_module(cli, project):
    """The tree's own finding that needs its class to be an ``nn.Module`` stands when the
    module base is installed (it was unknown, and the finding dropped)."""
    (project / "models.py").write_text(
        "import torch\nfrom visionlib.models import ResNet\n\n\n"
        "class Stem(ResNet):\n"
        "    def __init__(self):\n"
        "        super().__init__(width=8)\n"
        "        self.mean = torch.zeros(3)\n"
    )
    rc, found, _ = run(cli, project, "--no-cache")
    assert {(d["code"], d["location"]["row"]) for d in found} == {("ML007", 8), ("ML010", 5)}
    (project / "pyproject.toml").write_text("[tool.metalint]\nsite-packages = []\n")
    rc, found, _ = run(cli, project, "--no-cache")
    assert found == []


def test_a_class_defined_under_try_in_an_installed_module(cli, project):
    site = project.parent / "site-packages"
    (site / "trylib").mkdir()
    (site / "trylib" / "__init__.py").write_text(
        "try:\n    from fastlayers import Layer\n"
        "except ImportError:\n"
        "    import torch\n    from torch import nn\n\n"
        "    class Layer(nn.Module):\n"
        "        def __init__(self):\n            super().__init__()\n"
        "            self.n = torch.zeros(2).sum().item()\n"
    )
    (project / "models.py").write_text(
        "from torch import nn\nimport trylib\n\n\n"
        "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.layer = trylib.Layer()\n"
    )
    rc, found, _ = run(cli, project, "--no-cache")
    [d] = found
    assert (d["code"], d["location"]["row"], d["via"]["line"]) == ("ML008", 8, 10)
