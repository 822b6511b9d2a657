"""The user's pipeline through the CLI: a script's checkpoint load fixed in the script and
replayed by the probe; builders returning the meta model, classes held in variables, one file
of a project fixed in its project; framework root initialisers learned from the code that
builds the model."""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent.parent / "fixtures" / "pipeline"
ACCEL = FIXTURES / "accelerate_repo"
TITAN = FIXTURES / "torchtitan_repo"
FINDING = re.compile(r"^(\S+\.py):(\d+):\d+: (M[LP]\d+) (.*)$", re.M)


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "user-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


def copy(tmp_path: Path, src: Path) -> Path:
    dest = tmp_path / src.name
    shutil.copytree(src, dest)
    return dest


def findings(output: str) -> list[tuple[str, int, str, str]]:
    return [(f, int(row), code, msg) for f, row, code, msg in FINDING.findall(output)]


def subjects(output: str) -> set[str]:
    """The tensor each finding names (the first back-quoted name of its message)."""
    return {msg.split("`")[1] for *_, msg in findings(output)}


# -- 1. accelerate: init_empty_weights(include_buffers=True) + load_state_dict(assign=True) ---
def test_accelerate_script_is_fixed_and_the_probe_replays_its_load(cli, tmp_path):
    pytest.importorskip("torch")
    root = copy(tmp_path, ACCEL)
    script = root / "scripts" / "infer.py"
    before = cli("check", "--no-cache", cwd=root)
    assert before.exit_code == 1, before.output
    assert subjects(before.output) == {"inv_freq"}  # LayerScale's gamma is in the checkpoint
    assert "lost under `model.load_state_dict(..., assign=True)` at scripts/infer.py:13" in (
        before.output
    )
    probed = cli("probe", "tinylm.model:TinyLM", cwd=root)
    assert probed.exit_code == 1, probed.output
    assert "checkpoint load (assign=True), as model.load_state_dict(..., assign=True) at " in (
        probed.output
    )
    assert subjects(probed.output) == {"inv_freq"}, probed.output
    fixed = cli("fix", "--no-cache", "--write", "--unsafe-fixes", cwd=root)
    assert fixed.exit_code == 0, fixed.output
    assert "Fixed 1 error (0 remaining; 0 unfixable)." in fixed.output
    text = script.read_text()
    assert "with init_empty_weights(include_buffers=False):" in text
    # the script alone was rewritten: a hook the script never calls would change nothing
    assert (root / "tinylm" / "model.py").read_text() == (ACCEL / "tinylm" / "model.py").read_text()
    after = cli("probe", "tinylm.model:TinyLM", cwd=root)
    assert after.exit_code == 0, after.output
    assert "onto parameters built on meta" in after.output and "passed" in after.output
    assert cli("check", "--no-cache", cwd=root).output.strip() == "All checks passed!"


def test_accelerate_script_fix_is_unsafe(cli, tmp_path):
    root = copy(tmp_path, ACCEL)
    script = root / "scripts" / "infer.py"
    diff = cli("fix", "--no-cache", "--diff", "--unsafe-fixes", cwd=root)
    assert "-    with init_empty_weights(include_buffers=True):" in diff.output
    assert "+    with init_empty_weights(include_buffers=False):" in diff.output
    assert "Would fix 1 error (0 remaining; 0 unfixable)." in diff.output
    safe = cli("fix", "--no-cache", "--write", cwd=root)
    assert "include_buffers=True" in script.read_text()
    assert "ML015" in safe.output and "[not fixed: unsafe fix: use --unsafe-fixes]" in safe.output
    assert "1 fixable with --unsafe-fixes" in safe.output


def test_positional_flag_and_the_class_in_the_script(cli, tmp_path):
    """``init_empty_weights(True)`` in the file that defines the model: the script's rewrite
    and the class's file are one file."""
    (tmp_path / "pyproject.toml").write_text("[tool.metalint]\n")
    (tmp_path / "infer.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn
            from accelerate import init_empty_weights


            class Rope(nn.Module):
                def __init__(self, dim=8):
                    super().__init__()
                    self.proj = nn.Linear(dim, dim)
                    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
                    self.register_buffer("inv_freq", inv, persistent=False)


            def load(sd):
                with init_empty_weights(True):
                    model = Rope()
                model.load_state_dict(sd, assign=True)
                return model
            """
        )
    )
    assert cli("check", "--no-cache").exit_code == 1
    fixed = cli("fix", "--no-cache", "--write", "--unsafe-fixes")
    assert fixed.exit_code == 0, fixed.output
    text = (tmp_path / "infer.py").read_text()
    assert "with init_empty_weights(False):" in text and "reset_parameters" not in text
    assert cli("check", "--no-cache").output.strip() == "All checks passed!"


META_LOAD = """
import torch
from torch import nn


class Rope(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.scale = nn.Parameter(0.5 * torch.ones(dim))
        inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv, persistent={persistent})


def load(sd):
    with torch.device("meta"):
        model = Rope()
    model.load_state_dict(sd, assign=True)
    return model
"""


def test_a_meta_device_load_is_not_rewritten_and_says_why(cli, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.metalint]\n")
    (tmp_path / "model.py").write_text(META_LOAD.format(persistent=False))
    out = cli("fix", "--no-cache", "--write", "--unsafe-fixes", "--select", "ML015")
    assert out.exit_code == 1
    assert "[not fixed: the model is built on meta by no flag the script can turn off" in (
        out.output
    )
    assert (tmp_path / "model.py").read_text() == META_LOAD.format(persistent=False)


@pytest.mark.parametrize("persistent", [False, True])
def test_probe_replays_a_meta_device_load(cli, tmp_path, persistent):
    """A persistent tensor comes back from the checkpoint; a non-persistent buffer does not."""
    pytest.importorskip("torch")
    (tmp_path / "pyproject.toml").write_text("[tool.metalint]\n")
    (tmp_path / "model.py").write_text(META_LOAD.format(persistent=persistent))
    out = cli("probe", "model.py:Rope")
    assert "checkpoint load (assign=True), as model.load_state_dict(..., assign=True)" in (
        out.output
    )
    if persistent:
        assert out.exit_code == 0, out.output
    else:
        assert out.exit_code == 1 and subjects(out.output) == {"inv_freq"}, out.output


def test_torchtitan_flow_still_passes(cli, tmp_path):
    pytest.importorskip("torch")
    root = copy(tmp_path, TITAN)
    before = cli("check", "--no-cache", cwd=root)
    assert before.exit_code == 1
    assert subjects(before.output) >= {"weight", "inv_freq", "cos_cached", "gamma"}
    assert cli("probe", "tinytitan.model:tiny_model", cwd=root).exit_code == 1
    fixed = cli("fix", "--no-cache", "--write", "--unsafe-fixes", cwd=root)
    assert fixed.exit_code == 0, fixed.output
    assert (root / "scripts" / "train.py").read_text() == (
        TITAN / "scripts" / "train.py"
    ).read_text()
    after = cli("probe", "tinytitan.model:tiny_model", cwd=root)
    assert after.exit_code == 0 and "root init_weights() only" in after.output, after.output
    assert cli("check", "--no-cache", cwd=root).output.strip() == "All checks passed!"


# -- 2. one file of a project, fixed in its project -----------------------------------------
def test_fix_of_one_file_matches_the_full_run(cli, tmp_path):
    """``fix tinytitan/model.py`` judges it with the script that materialises its model: the
    root's entry point gets the modules' hooks (ML016), as a run on the whole project does."""
    root = copy(tmp_path, TITAN)
    one = cli("fix", "--no-cache", "--diff", "--unsafe-fixes", "tinytitan/model.py", cwd=root)
    full = cli("fix", "--no-cache", "--diff", "--unsafe-fixes", cwd=root)
    assert 'if module is not self and hasattr(module, "reset_parameters"):' in one.output
    assert one.output == full.output
    checked = cli("check", "--no-cache", "tinytitan/model.py", cwd=root)
    assert {c for *_, c, _ in findings(checked.output)} >= {"ML015", "ML016"}


def test_fix_of_one_file_leaves_the_script_it_did_not_name(cli, tmp_path):
    root = copy(tmp_path, ACCEL)
    out = cli("fix", "--no-cache", "--write", "--unsafe-fixes", "tinylm/model.py", cwd=root)
    assert "[not fixed: the fix edits scripts/infer.py, which is not among the files named]" in (
        out.output
    )
    assert (root / "scripts" / "infer.py").read_text() == (
        ACCEL / "scripts" / "infer.py"
    ).read_text()


# -- 2. a builder returning the meta model, a class held in a variable or a dict -------------
BUILDER = FIXTURES / "builder_repo"


def only_script(tmp_path: Path, script: str) -> Path:
    root = copy(tmp_path, BUILDER)
    for f in (root / "scripts").glob("*.py"):
        if f.name != script:
            f.unlink()
    return root


@pytest.mark.parametrize(
    ("script", "line", "roots"),
    [
        ("train.py", 9, {"Decoder"}),  # model = build_decoder(): the builder's meta model
        ("eval_variable.py", 13, {"Encoder"}),  # cls = Encoder; cls(16)
        ("serve_registry.py", 11, {"Decoder", "Encoder"}),  # MODELS[name](16), another file
    ],
)
def test_the_callers_sequence_is_the_site(cli, tmp_path, script, line, roots):
    root = only_script(tmp_path, script)
    out = cli("check", "--no-cache", cwd=root).output
    got = findings(out)
    assert {(c, m.split("`")[1]) for _, _, c, m in got if c == "ML015"} == {("ML015", "weight")}
    assert {m.split("`")[1].split(".")[0] for _, _, c, m in got if c == "ML016"} == roots
    assert all(f"at scripts/{script}:{line}" in m for *_, m in got), out
    fixed = cli("fix", "--no-cache", "--write", "--unsafe-fixes", cwd=root)
    assert fixed.exit_code == 0, fixed.output
    assert cli("check", "--no-cache", cwd=root).output.strip() == "All checks passed!"


def test_the_builders_caller_is_what_the_probe_replays(cli, tmp_path):
    pytest.importorskip("torch")
    root = only_script(tmp_path, "train.py")
    out = cli("probe", "tinybuild.model:Decoder", cwd=root)
    assert out.exit_code == 1, out.output
    assert "root init_weights() only, as model.init_weights() at scripts/train.py:9" in out.output
    assert subjects(out.output) == {"weight"}


def test_a_dict_of_classes_in_the_scripts_own_file(cli, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.metalint]\n")
    (tmp_path / "train.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn


            class Norm(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(dim))

                def reset_parameters(self):
                    nn.init.ones_(self.weight)


            class Model(nn.Module):
                def __init__(self, dim=8):
                    super().__init__()
                    self.norm = Norm(dim)
                    self.proj = nn.Linear(dim, dim)

                def init_weights(self):
                    nn.init.zeros_(self.proj.bias)


            MODELS = {"small": Model}


            def main(name):
                with torch.device("meta"):
                    model = MODELS[name]()
                model.to_empty(device="cpu")
                model.init_weights()
            """
        )
    )
    got = findings(cli("check", "--no-cache").output)
    assert {(c, m.split("`")[1]) for _, _, c, m in got} == {
        ("ML015", "weight"),
        ("ML016", "Model.init_weights()"),
    }


# -- 3. framework root initialisers, learned from the code that builds the model -------------
FRAMEWORK = FIXTURES / "framework_repo"


def test_the_librarys_initialisers_are_its_protocol(cli, tmp_path):
    """Each root's own initialiser (a method of the root, a function applied to or handed the
    model) that the library's builder runs after construction re-creates the gains: no
    finding; the builder whose initialiser misses the gain (``Tagger.setup_head()``) keeps
    it, naming that call."""
    root = copy(tmp_path, FRAMEWORK)
    out = cli("check", "--no-cache", cwd=root).output
    got = findings(out)
    assert [(f, row, code) for f, row, code, _ in got] == [("tinyfw/tagger.py", 9, "ML001")], out
    assert "lost under `model.setup_head()` at tinyfw/registry.py:14" in got[0][3]


@pytest.mark.parametrize(
    ("builder", "call", "file", "row"),
    [
        # a root's own method initialising its decoder and head
        ("seq2seq.py", "    model.prepare_decoder_and_head()\n", "tinyfw/seq2seq.py", 10),
        # a module-level function applied to the whole model
        ("vision.py", "    model.apply(_small_gains)\n", "tinyfw/vision.py", 10),
        # a module-level function handed the model
        ("vision.py", "    _half_gains(model)\n", "tinyfw/vision.py", 23),
        # a root method with a name of the library's own, called by a builder in another file
        ("registry.py", "    model.setup_weights()\n", "tinyfw/mixer.py", 10),
    ],
)
def test_without_the_builders_call_the_finding_is_back(cli, tmp_path, builder, call, file, row):
    root = copy(tmp_path, FRAMEWORK)
    path = root / "tinyfw" / builder
    assert call in path.read_text()
    path.write_text(path.read_text().replace(call, ""))
    got = findings(cli("check", "--no-cache", cwd=root).output)
    assert (file, row, "ML001") in [(f, r, c) for f, r, c, _ in got]


def test_a_meta_site_running_the_librarys_initialiser(cli, tmp_path):
    """``to_empty()`` then the root's own initialiser of another name: check and the probe
    both run it (it reaches every tensor: nothing is lost), not ``model.train()``."""
    pytest.importorskip("torch")
    (tmp_path / "pyproject.toml").write_text("[tool.metalint]\n")
    (tmp_path / "net.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn


            class Gain(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.gamma = nn.Parameter(0.2 * torch.ones(dim))


            class Net(nn.Module):
                def __init__(self, dim=8):
                    super().__init__()
                    self.mix = nn.Linear(dim, dim)
                    self.gain = Gain(dim)
                    self.setup_weights()

                def setup_weights(self):
                    for m in self.modules():
                        if isinstance(m, nn.Linear):
                            nn.init.trunc_normal_(m.weight, std=0.02)
                            nn.init.zeros_(m.bias)
                        elif isinstance(m, Gain):
                            nn.init.constant_(m.gamma, 0.2)


            def main():
                with torch.device("meta"):
                    model = Net()
                model.to_empty(device="cpu")
                model.setup_weights()
                model.train()
            """
        )
    )
    assert cli("check", "--no-cache").output.strip() == "All checks passed!"
    out = cli("probe", "net.py:Net")
    assert out.exit_code == 0, out.output
    assert "root setup_weights() only, as model.setup_weights() at net.py:32" in out.output
