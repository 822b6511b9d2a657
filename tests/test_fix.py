"""``metalint fix``: snapshots, eager equivalence of safe fixes, idempotence, CLI, safety.

``fixtures/fix/<CODE>/NAME.in.py`` -> ``NAME.out.py`` pairs (filed under their main rule) are
discovered automatically; they are fixed with ``--unsafe-fixes``. Run with ``METALINT_UPDATE_FIXTURES=1`` to rewrite the ``.out.py``
files after a deliberate change (and review the diff).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import stat
import sys
import time
import types
from pathlib import Path

import pytest

from metalint.config import Settings
from metalint.fix.command import run_fix
from metalint.fix.registry import CODEMODS

ROOT = Path(__file__).resolve().parent.parent
PAIRS = sorted((ROOT / "fixtures" / "fix").glob("*/*.in.py"))


def _fixture(name: str) -> Path:
    """``fixtures/fix/<its rule>/NAME.in.py``."""
    (path,) = (ROOT / "fixtures" / "fix").glob(f"*/{name}.in.py")
    return path


def _fix(folder: Path, *, write=True, unsafe=True, verify=False, paths=None):
    out: list[str] = []
    rc = run_fix(
        paths or [folder],
        Settings(root=folder, select=["ALL"]),
        write=write,
        show_diff=False,
        unsafe=unsafe,
        verify=verify,
        use_cache=False,
        workers=1,
        echo=lambda s="", nl=True: out.append(s),
    )
    return rc, "\n".join(out)


def _check_codes(folder: Path) -> list:
    from metalint.check import run_check

    return run_check(
        [folder], Settings(root=folder, select=["ALL"]), use_cache=False, workers=1
    ).diagnostics


@pytest.mark.parametrize("path", PAIRS, ids=lambda p: p.name[: -len(".in.py")])
def test_fix_snapshot(path, tmp_path, monkeypatch):
    """The ``.out.py`` of a pair is final: it compiles, ``fix --write --unsafe-fixes`` leaves it
    as it is, and ``check`` offers no fix on it. That ``fix`` makes it of the ``.in.py``:
    ``test_every_rewritten_fixture_class_passes_the_probe`` (``--write``, every pair) and
    tests/test_fix_snapshots.py (``--diff``, each pair alone)."""
    name = path.name[: -len(".in.py")]
    target = tmp_path / f"{name}.py"
    expected = path.with_name(f"{name}.out.py")
    monkeypatch.chdir(tmp_path)
    if os.environ.get("METALINT_UPDATE_FIXTURES"):
        shutil.copy(path, target)
        _fix(tmp_path)
        expected.write_text(target.read_text(encoding="utf-8"), encoding="utf-8")
    got = expected.read_text(encoding="utf-8")
    target.write_text(got, encoding="utf-8")
    compile(got, str(target), "exec")
    # a second run changes nothing
    rc, _ = _fix(tmp_path)
    assert target.read_text(encoding="utf-8") == got
    # what remains has no fix that could still be applied
    for d in _check_codes(tmp_path):
        assert d.fix is None, d


def test_there_are_fix_fixtures():
    assert len(PAIRS) >= 5
    for p in PAIRS:
        assert p.with_name(p.name.replace(".in.py", ".out.py")).exists(), p


# -- eager equivalence: every safe fix keeps eager construction identical ----------------------
def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _module_classes(mod):
    import torch

    for name, obj in list(vars(mod).items()):  # a warning adds __warningregistry__
        if (
            isinstance(obj, type)
            and issubclass(obj, torch.nn.Module)
            and obj.__module__ == mod.__name__
        ):
            yield name, obj


def _tensors(model) -> dict:
    out = dict(model.state_dict(keep_vars=True))
    out.update({f"buffer:{k}": v for k, v in model.named_buffers()})
    return out


def _assert_same_eager(before: Path, after: Path, *, exact: bool = True) -> int:
    """Construct every class of both files under the same seed and compare every tensor."""
    import torch

    from metalint.probe.target import CannotConstruct, infer_arguments

    a = _import(before, f"_before_{before.stem.replace('.', '_')}")
    b = _import(after, f"_after_{after.stem.replace('.', '_')}")
    compared = 0
    for name, cls_a in _module_classes(a):
        cls_b = getattr(b, name)
        try:
            kwargs = infer_arguments(cls_a)
        except CannotConstruct:
            import inspect

            params = list(inspect.signature(cls_a.__init__).parameters.values())[1:]
            kwargs = {
                p.name: 4
                for p in params
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            }
        torch.manual_seed(0)
        m_a = cls_a(**kwargs)
        torch.manual_seed(0)
        m_b = cls_b(**kwargs)
        ta, tb = _tensors(m_a), _tensors(m_b)
        assert ta.keys() <= tb.keys(), (name, set(ta) - set(tb))
        for k, v in ta.items():
            w = tb[k]
            assert v.shape == w.shape and v.dtype == w.dtype, (name, k)
            if exact:
                assert torch.equal(v.detach(), w.detach()), (name, k)
            assert type(v) is type(w), (name, k)
        compared += 1
    return compared


@pytest.mark.parametrize("path", PAIRS, ids=lambda p: p.name[: -len(".in.py")])
def test_safe_fixes_keep_eager_values(path, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    name = path.name[: -len(".in.py")]
    target = tmp_path / f"{name}.py"
    shutil.copy(path, target)
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path, unsafe=False)
    assert _assert_same_eager(path, target) >= 1


@pytest.mark.parametrize("path", PAIRS, ids=lambda p: p.name[: -len(".in.py")])
def test_unsafe_fixes_keep_shapes_and_constants(path, tmp_path):
    """With --unsafe-fixes (the snapshots) shapes and dtypes stay; values stay too here
    except for random ones that moved after other draws."""
    pytest.importorskip("torch")
    out = path.with_name(path.name.replace(".in.py", ".out.py"))
    exact = not any(k in path.name for k in ("layer_scales", "inplace")) and (
        "eager values differ under --unsafe-fixes" not in path.read_text()
    )
    assert _assert_same_eager(path, out, exact=exact) >= 1


def test_randn_scale_rewrite_is_bitwise_identical():
    """``randn(s) * k`` vs the hook's ``empty(s).normal_().mul_(k)``; ``nn.init.normal_(std=k)``
    is not bitwise identical for small tensors (which is why the codemod does not use it)."""
    torch = pytest.importorskip("torch")
    for shape in [(3,), (5,), (3, 4), (16,), (1, 197, 64)]:
        torch.manual_seed(1)
        a = torch.randn(*shape) * 0.02
        torch.manual_seed(1)
        b = torch.empty(*shape).normal_().mul_(0.02)
        assert torch.equal(a, b)
        torch.manual_seed(1)
        c = 0.02 * torch.rand(*shape)
        torch.manual_seed(1)
        d = torch.empty(*shape).uniform_().mul_(0.02)
        assert torch.equal(c, d)


def test_parent_init_under_an_if_keeps_the_condition_in_the_hook(tmp_path, monkeypatch):
    """timm Hiera's ``if weight_init != 'skip': init_fn = ...; named_apply(init_fn, self)``:
    the hook used to read ``self._init_fn``, set only in that branch, so ``init_weights()`` on a
    model built with ``weight_init='skip'`` (after ``to_empty()``) raised AttributeError."""
    torch = pytest.importorskip("torch")
    target = tmp_path / "hiera.py"
    shutil.copy(_fixture("init_in_if"), target)
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path, unsafe=False)
    mod = _import(target, "_fixed_init_in_if")
    with torch.device("meta"):
        model = mod.TinyHiera(weight_init="skip")
    model.to_empty(device="cpu")
    model.init_weights()  # the same condition: nothing applied, nothing raised
    for scheme in ("", "jax"):
        torch.manual_seed(0)
        eager = mod.TinyHiera(weight_init=scheme)
        with torch.device("meta"):
            model = mod.TinyHiera(weight_init=scheme)
        model.to_empty(device="cpu")
        torch.manual_seed(0)
        for m in model.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
        model.init_weights()
        assert torch.equal(model.head.weight, eager.head.weight)  # zeros under vit's law
        assert torch.equal(model.head.bias, eager.head.bias)


# -- acceptance: dinov2 LayerScale -------------------------------------------------------------
def test_dinov2_layerscale_becomes_timm_shape(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    src = ROOT / "fixtures" / "check" / "dinov2_layerscale.py"
    target = tmp_path / "layer_scale.py"
    shutil.copy(src, target)
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path, unsafe=False)  # plain `fix --write`: the fix is safe
    assert "Fixed 1 error" in out, out
    text = target.read_text()
    assert "self.gamma = nn.Parameter(torch.empty(dim))" in text
    assert "device" not in text and "dtype" not in text  # no signature change (ML012's fix)
    assert "nn.init.constant_(self.gamma, self.init_values)" in text
    assert text.count("self.reset_parameters()") == 1
    mod = _import(target, "_fixed_layer_scale")
    orig = _import(src, "_orig_layer_scale")
    torch.manual_seed(0)
    a = orig.LayerScale(8, init_values=0.3)
    torch.manual_seed(0)
    b = mod.LayerScale(8, init_values=0.3)
    assert torch.equal(a.gamma, b.gamma)
    # built on meta, materialised, reset: the value is back
    with torch.device("meta"):
        m = mod.LayerScale(8, init_values=0.3)
    m.to_empty(device="cpu")
    m.reset_parameters()
    assert torch.equal(m.gamma, a.gamma)
    assert [d.code for d in _check_codes(tmp_path) if d.code in CODEMODS] == []


def test_the_summary_counts_parent_init_fixes(tmp_path, monkeypatch):
    """ML010's fix moves the apply into a root init_weights(), which check then judges under
    the model's protocol: the finding is gone and ``Fixed N`` counts it."""
    shutil.copy(_fixture("parent_init"), tmp_path / "p.py")
    monkeypatch.chdir(tmp_path)
    before = [d for d in _check_codes(tmp_path) if d.code == "ML010"]
    assert before
    rc, out = _fix(tmp_path, unsafe=False)
    assert f"Fixed {len(before)} errors (0 remaining; 0 unfixable)." in out, out
    assert out.count("ML010") == len(before), out


TIMM_TOKENS = """
import torch
from torch import nn
from torch.nn.init import trunc_normal_


class Cait(nn.Module):
    def __init__(self, dim=8, n=4):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n, dim))
        self.head = nn.Linear(dim, 3)
        trunc_normal_(self.pos_embed, std=.02)
        trunc_normal_(self.cls_token, std=.02)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=.02)
            nn.init.zeros_(m.bias)
"""


def test_tokens_and_parent_init_compose_into_one_root_init_weights(tmp_path, monkeypatch):
    """timm's Cait: the tokens' in-place init goes to reset_parameters(), called where it ran;
    the apply then makes a root init_weights() that calls it first (under timm's protocol a
    module with an init_weights() is initialised by it alone). Plain fix --write does it all
    (safe), eager tensors stay bit-identical, and the probe passes."""
    pytest.importorskip("torch")
    before = tmp_path / "orig" / "cait_before.py"
    before.parent.mkdir()
    before.write_text(TIMM_TOKENS)
    target = tmp_path / "cait.py"
    target.write_text(TIMM_TOKENS)
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path, unsafe=False, verify=True, paths=[target])
    text = target.read_text()
    assert "def init_weights(self):\n        self.reset_parameters()\n" in text, text
    assert text.count("self.init_weights()") == 1 and text.count("self.reset_parameters()") == 1
    assert "probe passed" in out and "restored" not in out, out
    remaining = [line for line in out.splitlines() if line.startswith("cait.py:") and " ML" in line]
    assert [line.split()[1] for line in remaining if "fixed" not in line] == ["ML012"], out
    assert _assert_same_eager(before, target) == 1


def test_verify_runs_the_probe(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    target = tmp_path / "layer_scale.py"
    shutil.copy(ROOT / "fixtures" / "check" / "dinov2_layerscale.py", target)
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path, verify=True)
    assert "verified layer_scale.py:LayerScale: probe passed" in out, out
    assert "layer_scale.py:19: ML001 [LayerScale] fixed and proven (probe passed)" in out, out
    # what remains is ML012's (no device argument), not ML001's
    assert not [line for line in out.splitlines() if "ML001" in line and "fixed" not in line]
    assert "reset_parameters" in target.read_text()


def test_verify_restores_the_original_when_the_probe_fails(tmp_path, monkeypatch):
    from metalint.fix import verify

    target = tmp_path / "layer_scale.py"
    shutil.copy(ROOT / "fixtures" / "check" / "dinov2_layerscale.py", target)
    before = target.read_bytes()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        verify,
        "verify_classes",
        lambda path, classes, **kw: [verify.Verdict(c, "failed", "gamma lost") for c in classes],
    )
    rc, out = _fix(tmp_path, verify=True)
    assert "restored layer_scale.py: the probe failed on LayerScale" in out
    assert target.read_bytes() == before
    assert "the probe failed after the rewrite" in out
    assert rc == 1


def test_verify_fails_a_rewrite_that_breaks_eager_construction(tmp_path, monkeypatch):
    # timm BinaryCrossEntropy(pos_weight=None): a rewrite whose hook copied into a buffer that
    # is None raised at construction; the probe only said "cannot construct", and the broken
    # rewrite was kept as "not verified". The original, built from the same arguments, is
    # probed: it constructed, so the rewrite failed and the file is restored.
    from metalint.fix import verify

    target = tmp_path / "layer_scale.py"
    shutil.copy(ROOT / "fixtures" / "check" / "dinov2_layerscale.py", target)
    before = target.read_bytes()
    monkeypatch.chdir(tmp_path)
    seen = []

    def probe(path, classes, **kw):
        rewritten = "def reset_parameters" in Path(path).read_text()
        seen.append(rewritten)
        if rewritten:  # the rewrite made construction raise
            why = "cannot construct: LayerScale(dim=16): eager construction raised TypeError"
            return [verify.Verdict(c, "skipped", why, eager_raised=True) for c in classes]
        return [verify.Verdict(c, "failed", "gamma lost", ("gamma",)) for c in classes]

    monkeypatch.setattr(verify, "verify_classes", probe)
    rc, out = _fix(tmp_path, verify=True)
    assert seen[:2] == [True, False], seen  # the rewrite, then the original
    assert "the rewrite broke eager construction" in out, out
    assert "restored layer_scale.py" in out, out
    assert target.read_bytes() == before
    assert rc == 1


def test_verify_keeps_a_rewrite_whose_original_did_not_construct_either(tmp_path, monkeypatch):
    from metalint.fix import verify

    target = tmp_path / "layer_scale.py"
    shutil.copy(ROOT / "fixtures" / "check" / "dinov2_layerscale.py", target)
    monkeypatch.chdir(tmp_path)
    why = "cannot construct: LayerScale(dim=16): eager construction raised AssertionError"
    monkeypatch.setattr(
        verify,
        "verify_classes",
        lambda path, classes, **kw: [
            verify.Verdict(c, "skipped", why, eager_raised=True) for c in classes
        ],
    )
    rc, out = _fix(tmp_path, verify=True)
    assert "not verified layer_scale.py:LayerScale" in out and "restored" not in out, out
    assert "def reset_parameters" in target.read_text()


def test_probe_says_when_eager_construction_raised(tmp_path):
    pytest.importorskip("torch")
    from metalint.fix.verify import verify_classes

    (tmp_path / "m.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Raises(nn.Module):\n"
        "    def __init__(self, d: int, w=None):\n"
        "        super().__init__()\n"
        "        self.register_buffer('w', w)\n"
        "        self.w.copy_(torch.ones(d))\n\n\n"
        "class Builds(nn.Module):\n"
        "    def __init__(self, d: int):\n"
        "        super().__init__()\n"
        "        self.p = nn.Parameter(torch.ones(d))\n"
    )
    got = {v.cls: v for v in verify_classes(str(tmp_path / "m.py"), ["Raises", "Builds"])}
    assert got["Raises"].status == "skipped" and got["Raises"].eager_raised, got
    assert got["Builds"].status == "failed" and not got["Builds"].eager_raised, got


# -- CLI ---------------------------------------------------------------------------------------
def test_diff_without_write_changes_nothing(cli, tmp_path):
    target = tmp_path / "m.py"
    shutil.copy(_fixture("plain_attribute"), target)
    before = target.read_bytes()
    r = cli("fix", "--no-cache", "m.py")
    assert r.exit_code == 1
    assert "--- a/m.py" in r.output and "+++ b/m.py" in r.output
    assert 'register_buffer("mask"' in r.output
    assert target.read_bytes() == before
    r = cli("fix", "--no-cache", "--diff", "m.py")
    assert r.exit_code == 1 and target.read_bytes() == before
    r = cli("fix", "--no-cache", "--write", "m.py")
    assert r.exit_code == 0, r.output
    assert "Fixed 1 error (0 remaining; 0 unfixable)." in r.output
    r = cli("fix", "--no-cache", "m.py")
    assert r.exit_code == 0 and "---" not in r.output


def test_unsafe_fixes_need_the_flag(cli, tmp_path):
    # the random value would be drawn in the `reset_parameters()` that `__init__` already
    # calls after nn.Linear's draws: other eager values, same law (kept in `__init__`, the
    # call would draw it twice)
    (tmp_path / "m.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Emb(nn.Module):\n"
        "    def __init__(self, d):\n"
        "        super().__init__()\n"
        "        self.pos = nn.Parameter(torch.randn(d) * 0.02)\n"
        "        self.proj = nn.Linear(d, d)\n"
        "        self.reset_parameters()\n\n"
        "    def reset_parameters(self):\n"
        "        nn.init.zeros_(self.proj.bias)\n"
    )
    r = cli("check", "--no-cache", "--select", "ML001", "m.py")
    assert "[unsafe fix]" in r.output
    r = cli("fix", "--no-cache", "--select", "ML001", "--write", "m.py")
    assert "fixable with --unsafe-fixes" in r.output
    assert "normal_" not in (tmp_path / "m.py").read_text()
    r = cli("fix", "--no-cache", "--select", "ML001", "--write", "--unsafe-fixes", "m.py")
    assert "normal_" in (tmp_path / "m.py").read_text()


def test_a_draw_before_drawing_children_is_kept_and_recreated_by_the_hook(cli, tmp_path):
    """denoising-diffusion-pytorch's ``LinearAttention``: ``mem_kv`` drawn before the
    convolutions. Moved into a hook called at the end of ``__init__`` it was drawn after
    their draws (unsafe, fails before); kept where it is with a ``reset_parameters()`` that
    ``__init__`` does not call, eager construction is unchanged (safe) and ``check`` reports
    nothing: the protocol re-creates it."""
    (tmp_path / "m.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Emb(nn.Module):\n"
        "    def __init__(self, d):\n"
        "        super().__init__()\n"
        "        self.pos = nn.Parameter(torch.randn(d) * 0.02)\n"
        "        self.proj = nn.Linear(d, d)\n"
    )
    r = cli("check", "--no-cache", "--select", "ML001", "m.py")
    assert "[*]" in r.output and "[unsafe fix]" not in r.output, r.output
    r = cli("fix", "--no-cache", "--select", "ML001", "--write", "m.py")
    text = (tmp_path / "m.py").read_text()
    assert "torch.randn(d) * 0.02" in text and "self.reset_parameters()" not in text, text
    assert "def reset_parameters(self):" in text, text
    r = cli("check", "--no-cache", "m.py")
    assert "ML001" not in r.output, r.output


def test_dinov2_layerscale_is_a_safe_fix(cli, tmp_path):
    shutil.copy(ROOT / "fixtures" / "check" / "dinov2_layerscale.py", tmp_path / "ls.py")
    r = cli("check", "--no-cache", "--select", "ML001", "ls.py")
    assert "[*]" in r.output and "[unsafe fix]" not in r.output, r.output
    r = cli("fix", "--no-cache", "--write", "ls.py")
    assert r.exit_code == 0, r.output
    assert "reset_parameters" in (tmp_path / "ls.py").read_text()


def test_check_marks_safe_fixes(cli, tmp_path):
    shutil.copy(_fixture("plain_attribute"), tmp_path / "m.py")
    r = cli("check", "--no-cache", "--select", "ML007", "--output-format", "json", "m.py")
    import json

    (d,) = json.loads(r.output)
    assert d["fix"]["applicability"] == "safe"
    assert d["fix"]["edits"]
    r = cli("check", "--no-cache", "--select", "ML007", "m.py")
    assert "[*]" in r.output


def test_select_and_ignore(cli, tmp_path):
    shutil.copy(_fixture("inplace_init"), tmp_path / "m.py")
    before = (tmp_path / "m.py").read_bytes()
    cli("fix", "--no-cache", "--write", "--ignore", "ML003", "m.py")
    assert (tmp_path / "m.py").read_bytes() == before
    cli("fix", "--no-cache", "--write", "--select", "ML003", "m.py")
    assert (tmp_path / "m.py").read_bytes() != before


def test_files_that_do_not_parse_are_reported_and_untouched(cli, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass A(torch.nn.Module:\n    pass\n")
    good = tmp_path / "good.py"
    shutil.copy(_fixture("plain_attribute"), good)
    before = bad.read_bytes()
    r = cli("fix", "--no-cache", "--write", ".")
    assert r.exit_code == 2
    assert "ML900" in r.output
    assert bad.read_bytes() == before
    assert "register_buffer" in good.read_text()


def test_write_keeps_mode_and_encoding(cli, tmp_path):
    target = tmp_path / "m.py"
    text = (_fixture("plain_attribute")).read_text()
    target.write_bytes(("# -*- coding: latin-1 -*-\n# caf\xe9\n" + text).encode("latin-1"))
    os.chmod(target, 0o640)
    r = cli("fix", "--no-cache", "--write", "m.py")
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    data = target.read_bytes()
    assert b"caf\xe9" in data and b"register_buffer" in data
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".metalint-tmp")]


def test_file_changed_since_read_is_not_written(cli, tmp_path, monkeypatch):
    target = tmp_path / "m.py"
    shutil.copy(_fixture("plain_attribute"), target)
    from metalint.fix import write

    # someone else edits the file in the window between metalint's read and its rename: the
    # test pause is where that window is, so the edit lands there (no timing, no thread)
    monkeypatch.setenv("METALINT_FIX_TEST_PAUSE", "1")
    edited = target.read_text() + "\n# edited by someone else\n"
    clock = types.SimpleNamespace(**vars(time))
    clock.sleep = lambda seconds: target.write_text(edited)
    monkeypatch.setattr(write, "time", clock)
    r = cli("fix", "--no-cache", "--write", "m.py")
    assert r.exit_code == 2
    assert "changed since it was read" in r.output
    assert target.read_text() == edited


def test_a_buffer_waits_for_the_hook_its_subclass_gets_in_the_same_run(tmp_path, monkeypatch):
    # monai DiNTS exactly: ``TopologySearch``'s own ``reset_parameters()`` is made by the fix
    # of its architecture weights, in the run that would register ``arch_code_a``. ML007's
    # fix yields to it (kin classes) and is then refused. Fails before: both fixes went in
    # one round, and ML002's fix was then refused (the probe failed DiNTS)
    (tmp_path / "m.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Topology(nn.Module):\n"
        "    def __init__(self, num_blocks=2, num_depths=2):\n"
        "        super().__init__()\n"
        "        self.code2out = [m for m in range(num_depths) for _ in range(3)][1:-1]\n"
        "        arch_code_a = torch.ones((num_blocks, len(self.code2out)), device='cpu')\n"
        "        self.arch_code_a = arch_code_a\n\n\n"
        "class Search(Topology):\n"
        "    def __init__(self, num_blocks=2, num_depths=2):\n"
        "        super().__init__(num_blocks, num_depths)\n"
        "        self.log_alpha_a = nn.Parameter(\n"
        "            torch.zeros(num_blocks, len(self.code2out)).normal_(0, 0.01)\n"
        "        )\n"
    )
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path)
    text = (tmp_path / "m.py").read_text()
    assert "self.arch_code_a = arch_code_a" in text and "register_buffer" not in text, text
    assert "    def reset_parameters(self):\n        with torch.no_grad():\n" in text, text
    assert "subclass `m.Search` defines its own `reset_parameters()`]" in out, out


def test_the_tree_refuses_a_hook_with_one_typed_answer():
    # ML007's fix and the fixes that put code in a hook ask ``hook_refusal``: its kinds
    from metalint.fix.apply import HookRefusal

    why = HookRefusal("subclass_hook", "m.Search", "reset_parameters")
    assert str(why) == "subclass `m.Search` defines its own `reset_parameters()`"
    assert why.follow_up().endswith("which is refused: " + str(why))
    assert str(HookRefusal("base_unknown", "x.Base", "reset_parameters")) == (
        "base class `x.Base` is not among the checked files"
    )


def test_a_rewrite_that_does_not_parse_is_never_kept(tmp_path, monkeypatch):
    from metalint.fix import registry

    target = tmp_path / "m.py"
    shutil.copy(_fixture("plain_attribute"), target)
    before = target.read_bytes()
    real = registry.apply_edits
    monkeypatch.setattr(
        "metalint.fix.apply.apply_edits", lambda text, edits: real(text, edits) + "\ndef broken(:\n"
    )
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path)
    assert target.read_bytes() == before
    assert "the rewrite did not parse" in out


def test_a_base_and_its_subclass_never_get_hooks_in_one_round(tmp_path, monkeypatch):
    """torch-geometric's LinkPredMetric / LinkPredNDCG: both compute buffers in ``__init__``.
    Given hooks in the same round, the base's ``__init__`` ended by calling
    ``self.reset_parameters()``, the subclass's, which read ``self.discount`` before the
    subclass registered it: eager construction raised AttributeError. The base is fixed
    whole first; the next round the subclass gets a hook that extends the base's, its own
    code in a private method guarded by its buffer (it was refused: "base class ... has its
    own `reset_parameters()`"), and both build, eagerly and on meta."""
    torch = pytest.importorskip("torch")
    import importlib.util

    (tmp_path / "m.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class LinkPredMetric(nn.Module):\n"
        "    def __init__(self, k: int = 3):\n"
        "        super().__init__()\n"
        "        self.k = k\n"
        '        self.register_buffer("accum", torch.tensor(0.0), persistent=False)\n'
        '        self.register_buffer("total", torch.tensor(0), persistent=False)\n\n\n'
        "class LinkPredNDCG(LinkPredMetric):\n"
        "    def __init__(self, k: int = 3):\n"
        "        super().__init__(k)\n"
        "        discount = torch.arange(2, k + 2).log2()\n"
        '        self.register_buffer("discount", discount, persistent=False)\n'
    )
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path)
    text = (tmp_path / "m.py").read_text()
    assert "self.total.copy_(" in text, text
    assert (
        "        super().reset_parameters()\n"
        '        if hasattr(self, "discount"):  # not yet when LinkPredMetric.__init__() calls it\n'
        "            self.__reset_own_tensors()\n"
    ) in text, text
    assert "base class `m.LinkPredMetric` has its own `reset_parameters()`" not in out, out
    spec = importlib.util.spec_from_file_location("m_fixed", tmp_path / "m.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sub = mod.LinkPredNDCG()  # raised AttributeError: no attribute 'discount'
    assert torch.equal(sub.discount, torch.arange(2, 5).log2())
    with torch.device("meta"):
        base = mod.LinkPredMetric()
    base.to_empty(device="cpu")
    base.reset_parameters()
    assert base.total.item() == 0 and base.accum.item() == 0.0
    with torch.device("meta"):
        sub = mod.LinkPredNDCG()
    sub.to_empty(device="cpu")
    sub.reset_parameters()
    assert torch.equal(sub.discount, torch.arange(2, 5).log2())
    assert sub.total.item() == 0 and sub.accum.item() == 0.0


def test_the_callers_tensor_comes_back_after_to_empty(tmp_path, monkeypatch):
    """torch-geometric's ``LinkPredDiversity(k, category)``: built on meta with the caller's
    CPU tensor, ``to_empty()`` made ``category`` garbage. After the fix ``reset_parameters()``
    copies the kept tensor back; a caller's tensor that is itself on meta has no data, and the
    hook raises rather than leave garbage."""
    torch = pytest.importorskip("torch")
    import importlib.util

    (tmp_path / "m.py").write_text(
        "import torch\nfrom torch import Tensor\nfrom torch.nn import Module\n\n\n"
        "class LinkPredDiversity(Module):\n"
        "    def __init__(self, k: int, category: Tensor) -> None:\n"
        "        super().__init__()\n"
        "        self.k = k\n"
        "        self.register_buffer('category', category, persistent=False)\n"
    )
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path, unsafe=False)
    spec = importlib.util.spec_from_file_location("m_arg", tmp_path / "m.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    category = torch.tensor([0, 1, 1, 2])
    eager = mod.LinkPredDiversity(2, category)
    assert eager.category is category  # eagerly still the caller's tensor itself
    with torch.device("meta"):
        m = mod.LinkPredDiversity(2, category)
    m.to_empty(device="cpu")
    m.reset_parameters()
    assert torch.equal(m.category, category)
    with torch.device("meta"):
        on_meta = mod.LinkPredDiversity(2, torch.tensor([0, 1, 1, 2]))
    on_meta.to_empty(device="cpu")
    with pytest.raises(NotImplementedError, match="meta"):
        on_meta.reset_parameters()


def test_a_buffer_a_helper_draws_is_an_unsafe_fix(tmp_path, monkeypatch):
    """``self.register_buffer("f", gaussian_matrix(n))`` with ``gaussian_matrix`` drawing
    ``torch.randn``: the hook draws it a second time, so eager values differ. It was a safe
    fix (plain ``fix --write`` applied it); now it needs ``--unsafe-fixes``."""
    src = (
        "import torch\nfrom torch import nn\n\n\n"
        "def gaussian_matrix(n: int) -> torch.Tensor:\n"
        "    return torch.randn(3, n) * 0.5\n\n\n"
        "class RandomFeatures(nn.Module):\n"
        "    def __init__(self, n: int = 4):\n"
        "        super().__init__()\n"
        "        self.n = n\n"
        '        self.register_buffer("features", gaussian_matrix(n))\n'
    )
    (tmp_path / "m.py").write_text(src)
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path, unsafe=False)
    assert (tmp_path / "m.py").read_text() == src
    rc, out = _fix(tmp_path, unsafe=True)
    assert "self.features.copy_(gaussian_matrix(self.n))" in (tmp_path / "m.py").read_text()


def test_code_later_in_the_same_block_counts_as_later(tmp_path, monkeypatch):
    """A buffer registered inside an ``else`` block followed, in that block, by a module
    (whose init draws) and a write of the buffer (monai's text encoder loading pretrained
    values): drawing it at the end of ``__init__`` would change the draws' order and overwrite
    the loaded values, so the first is unsafe and the second is not fixed."""
    (tmp_path / "m.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Drawn(nn.Module):\n"
        "    def __init__(self, n=4, learned=False):\n"
        "        super().__init__()\n"
        "        if learned:\n"
        "            self.table = nn.Embedding(n, n)\n"
        "        else:\n"
        "            self.register_buffer('table', torch.randn(n, n))\n"
        "            self.proj = nn.Linear(n, n)\n\n\n"
        "class Loaded(nn.Module):\n"
        "    def __init__(self, n=4, values=None):\n"
        "        super().__init__()\n"
        "        if values is None:\n"
        "            self.table = None\n"
        "        else:\n"
        "            self.register_buffer('table', torch.randn(n, n))\n"
        "            self.table.data = torch.as_tensor(values)\n\n\n"
        "class RelPos(nn.Module):\n"
        "    def __init__(self, n=4, rel=True):\n"
        "        super().__init__()\n"
        "        if rel:\n"
        "            self.rel_h = nn.Parameter(torch.zeros(2 * n - 1, n))\n"
        "            nn.init.trunc_normal_(self.rel_h, std=0.02)\n"
    )
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path, unsafe=False)
    assert (tmp_path / "m.py").read_text().count("torch.randn(n, n)") == 2
    assert "unsafe fix" in out and "`self.table` is written later in its block" in out, out
    rc, out = _fix(tmp_path, unsafe=True)
    text = (tmp_path / "m.py").read_text()
    assert "self.register_buffer('table', torch.empty(n, n))" in text
    assert "self.register_buffer('table', torch.randn(n, n))" in text  # Loaded keeps it
    # re-initialised all at once further down its block: that init moves into the hook (the
    # dead value stays), it is not refused, and the value is no longer zeroed after it
    hook = text.split("def reset_parameters")[-1]
    assert "self.rel_h = nn.Parameter(torch.zeros(2 * n - 1, n))" in text, text
    assert "trunc_normal_(self.rel_h, std=0.02)" in hook and "zeros_" not in hook, text


def test_a_child_read_after_its_init_in_a_block_keeps_the_others_moving(tmp_path, monkeypatch):
    """A block that reads a child after initialising it (a copy of the zeroed weight) keeps
    that init where it is, with the reason; the class's other child init still moves into
    ``init_weights()``, as it did before block runs moved at all."""
    (tmp_path / "m.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Gate(nn.Module):\n"
        "    def __init__(self, dim=8, gated=True):\n"
        "        super().__init__()\n"
        "        self.out = nn.Linear(dim, dim)\n"
        "        nn.init.zeros_(self.out.bias)\n"
        "        if gated:\n"
        "            self.gate = nn.Linear(dim, dim)\n"
        "            nn.init.zeros_(self.gate.weight)\n"
        "            self.gate.weight.requires_grad_(False)\n"
        "        self.scale = 2.0\n"
    )
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path, unsafe=True)
    text = (tmp_path / "m.py").read_text()
    hook = text.split("def init_weights")[-1]
    assert "nn.init.zeros_(self.out.bias)" in hook, text
    assert "zeros_(self.gate.weight)" not in hook and "zeros_(self.gate.weight)" in text, text
    assert "`self.gate` is used between its in-place inits" in out, out


# -- killing the process mid-write ---------------------------------------------------------------
def _big_file(n: int) -> str:
    parts = ["import torch\nfrom torch import nn\n"]
    for i in range(n):
        parts.append(
            f"\n\nclass Mask{i}(nn.Module):\n"
            f"    def __init__(self, n):\n"
            f"        super().__init__()\n"
            f"        self.mask = torch.ones(n, {i + 1})\n"
            f"        self.pad = [{', '.join(str(j) for j in range(40))}]\n"
        )
    return "".join(parts)


def test_killing_mid_write_never_truncates(tmp_path):
    import ast
    import random
    import signal
    import subprocess

    target = tmp_path / "big.py"
    old = _big_file(60)
    target.write_text(old)
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    cmd = [
        sys.executable,
        "-m",
        "metalint",
        "fix",
        "--no-cache",
        "--select",
        "ML007",
        "--write",
        "big.py",
    ]
    # the new content, for comparison
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "big.py").write_text(old)
    subprocess.run(cmd, cwd=ref, env=env, capture_output=True, timeout=300)
    new = (ref / "big.py").read_text()
    assert new != old
    # 1. killed while the temporary file is written and not yet renamed: the old file stays
    p = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=dict(env, METALINT_FIX_TEST_PAUSE="60"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    tmp: list = []
    while time.monotonic() < deadline:
        tmp = list(tmp_path.glob(".big.py.*.metalint-tmp"))
        if tmp and tmp[0].read_text() == new:  # fully written: now in the pause
            break
        time.sleep(0.05)
    assert tmp and tmp[0].read_text() == new, "the temporary file was never completed"
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert target.read_text() == old
    for t in tmp:
        t.unlink()
    # 2. killed at random moments: always fully old or fully new, and it parses
    rng = random.Random(5)
    seen = set()
    for _ in range(4):
        target.write_text(old)
        p = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(rng.uniform(0.5, 4.0))
        p.send_signal(signal.SIGKILL)
        p.wait()
        text = target.read_text()
        assert text in (old, new)
        ast.parse(text)
        seen.add(text == new)


@pytest.fixture(scope="session")
def verified_pairs(request, tmp_path_factory):
    """One ``fix --write --unsafe-fixes --verify`` over the pairs this session tests (one probe
    child for all the files): the folder and the output lines. A pair's own snapshot, fixed
    alone, is :func:`test_fix_snapshot`'s."""
    test = test_every_rewritten_fixture_class_passes_the_probe.__name__
    paths = sorted(
        {
            item.callspec.params["path"]
            for item in request.session.items
            if getattr(item, "originalname", None) == test and hasattr(item, "callspec")
        }
    )
    folder = tmp_path_factory.mktemp("verified")
    for path in paths:
        shutil.copy(path, folder / (path.name[: -len(".in.py")] + ".py"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        _, out = _fix(folder, verify=True)
    return folder, out.splitlines()


# under xdist all on one worker (conftest.SHARED_RUN): the run they share is made once
@pytest.mark.parametrize("path", PAIRS, ids=lambda p: p.name[: -len(".in.py")])
def test_every_rewritten_fixture_class_passes_the_probe(path, verified_pairs):
    """``fix --write --unsafe-fixes --verify`` on each pair: every rewritten class is built on
    meta, materialised and initialised by the probe, nothing is restored, and the result is
    the snapshot."""
    pytest.importorskip("torch")
    folder, lines = verified_pairs
    name = path.name[: -len(".in.py")]
    mine = re.compile(rf"(^|\s){re.escape(name)}\.py:")
    pairs = [p.name[: -len(".in.py")] for p in PAIRS]
    anyone = re.compile(rf"(^|\s)({'|'.join(map(re.escape, pairs))})\.py:")
    out = "\n".join(line for line in lines if mine.search(line) or not anyone.search(line))
    assert "restored" not in out and "failed" not in out, out
    expected = path.with_name(f"{name}.out.py").read_text(encoding="utf-8")
    assert (folder / f"{name}.py").read_text(encoding="utf-8") == expected
    if expected != path.read_text(encoding="utf-8"):
        assert "probe passed" in out, out


def test_a_hook_never_reads_a_plain_tensor_attribute(tmp_path, monkeypatch):
    """monai's ``Scheduler``: ``alphas_cumprod`` (ML007) is computed from ``self.alphas``, a
    plain tensor attribute that ``to_empty()`` leaves on meta: a hook copying from it would
    raise. The three tensors the ``if`` computes together become buffers at once and the hook
    recomputes them from locals (it used to refuse, and the class failed the probe with all
    three left on meta); on either branch (the betas alone, or a triple) the tensors come back
    after ``to_empty()`` as eager construction made them."""
    torch = pytest.importorskip("torch")
    import importlib.util

    (tmp_path / "sched.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\n"
        "def ramp(n: int, lo: float = 1e-4, hi: float = 2e-2):\n"
        "    return torch.linspace(lo, hi, n, dtype=torch.float32)\n\n\n"
        "def triple(n: int, lo: float = 1e-4, hi: float = 2e-2):\n"
        "    b = torch.linspace(lo, hi, n) ** 2\n"
        "    return b, 1.0 - b, torch.cumprod(1.0 - b, dim=0)\n\n\n"
        'TABLE = {"ramp": ramp, "triple": triple}\n\n\n'
        "class Scheduler(nn.Module):\n"
        '    def __init__(self, n: int = 10, kind: str = "ramp", **kw) -> None:\n'
        "        super().__init__()\n"
        '        kw["n"] = n\n'
        "        got = TABLE[kind](**kw)\n"
        "        if isinstance(got, tuple):\n"
        "            self.b, self.a, self.a_bar = got\n"
        "        else:\n"
        "            self.b = got\n"
        "            self.a = 1.0 - self.b\n"
        "            self.a_bar = torch.cumprod(self.a, dim=0)\n"
        "        self.n = n\n"
        "        self.one = torch.tensor(1.0)\n"
    )
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path, unsafe=True)
    text = (tmp_path / "sched.py").read_text()
    hook = text[text.index("def reset_parameters") :]
    assert "self.a.copy_(a)" in hook and "cumprod(a, dim=0)" in hook, text
    assert "self.one.copy_(" in hook, text
    spec = importlib.util.spec_from_file_location("sched_fixed", tmp_path / "sched.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for kind in ("ramp", "triple"):
        eager = mod.Scheduler(kind=kind)
        with torch.device("meta"):
            m = mod.Scheduler(kind=kind)
        m.to_empty(device="cpu")
        m.reset_parameters()  # copied from a meta tensor before: "Cannot copy out of meta tensor"
        for name in ("b", "a", "a_bar", "one"):
            assert torch.equal(getattr(m, name), getattr(eager, name)), (kind, name)
        assert {"b", "a", "a_bar"} <= dict(m.named_buffers()).keys()


def test_a_root_init_weights_alone_recreates_a_moved_value(tmp_path, monkeypatch):
    """timm ``RotAttentionPool2d``: ``cls_token``'s zeros move into a new
    ``reset_parameters()``; the class's own ``init_weights()``, which ``__init__`` does not call
    and timm's root init runs per module, calls it first, so materialising with
    ``init_weights()`` alone gives the token back (it stayed garbage before)."""
    torch = pytest.importorskip("torch")
    import importlib.util

    src = _fixture("token_with_root_init")
    shutil.copy(src, tmp_path / "pool.py")
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path, unsafe=False)
    spec = importlib.util.spec_from_file_location("pool_fixed", tmp_path / "pool.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with torch.device("meta"):
        m = mod.TokenAttentionPool()
    m.to_empty(device="cpu")
    with torch.no_grad():
        m.cls_token.fill_(float("nan"))
    m.init_weights()
    assert torch.equal(m.cls_token, torch.zeros_like(m.cls_token))


def test_an_init_in_one_branch_keeps_the_other_branches_values(tmp_path, monkeypatch):
    """monai ``PatchEmbeddingBlock``: ``trunc_normal_(self.position_embeddings, ..)`` runs only
    in the ``"learnable"`` branch; the ``"sincos"`` branch replaces the parameter with a fixed
    table. The hook re-runs the init under the branch's condition: guarded by the tensor being
    there, it overwrote the table with random values in every eager ``"sincos"`` build (fails
    before, with ``--unsafe-fixes``); monai ``ViT``'s ``cls_token`` is drawn only when
    ``classification`` (an argument, kept on ``self`` for the hook). Every branch builds the
    same tensors before and after, and the fix is safe now (plain ``fix --write`` applies it:
    fails before too)."""
    torch = pytest.importorskip("torch")
    src = _fixture("branch_init")
    a = _import(src, "_branch_before")
    for unsafe in (False, True):
        folder = tmp_path / f"unsafe{unsafe}"
        folder.mkdir()
        target = folder / "branch_init.py"
        shutil.copy(src, target)
        monkeypatch.chdir(folder)
        _fix(folder, unsafe=unsafe)
        hook = '    def reset_parameters(self):\n        if self.pos_embed_type == "learnable":\n'
        assert hook in target.read_text(), unsafe
        b = _import(target, f"_branch_after_{unsafe}")
        builds = [
            ("PatchEmbeddingBlock", {"pos_embed_type": k}) for k in ("none", "learnable", "sincos")
        ]
        builds += [("ViT", {"classification": c}) for c in (True, False)]
        for cls, kind in builds:
            torch.manual_seed(0)
            ta = _tensors(getattr(a, cls)(**kind))
            torch.manual_seed(0)
            tb = _tensors(getattr(b, cls)(**kind))
            assert ta.keys() == tb.keys(), kind
            for k, v in ta.items():
                assert torch.equal(v.detach(), tb[k].detach()), (unsafe, kind, k)


#: pairs whose every fix is safe: plain ``fix --write`` (no ``--unsafe-fixes``) gives the whole
#: ``.out.py``, and ``test_safe_fixes_keep_eager_values`` proves it bit-identical eagerly
ALL_SAFE = (
    "adapter_prompts",
    "module_moves_itself",
    "abstract_base_hook",
    "indices_in_block",
    "parameter_or_number",
    "helper_window",
    "flows_initialize_args",
    "flows_base_hook",
    "chem_base_hook",
    "disco_base_hook",
    "vit_sincos_unpacked",
    "value_then_branch_init",
    "kernels_filled_in_helper",
    "filter_list_locals",
)


@pytest.mark.parametrize("name", ALL_SAFE)
def test_every_fix_of_these_pairs_is_safe(name, tmp_path, monkeypatch):
    src = _fixture(name)
    target = tmp_path / f"{name}.py"
    shutil.copy(src, target)
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path, unsafe=False)
    assert target.read_text(encoding="utf-8") == src.with_name(f"{name}.out.py").read_text(
        encoding="utf-8"
    )


def test_a_value_shaped_op_is_reported(tmp_path, monkeypatch):
    """e3nn's ``LowPassFilter`` cuts a lattice with a boolean mask (``x[x.abs() <= 1]``, which
    is ``nonzero``: no meta kernel, the meta build raises). ML008 reports it; its fix is refused
    (fixtures/fix/ML008/refused/value_shaped_op.py)."""
    src = (
        "import torch\nfrom torch import nn\n\n\n"
        "class LowPassFilter(nn.Module):\n"
        "    def __init__(self, size: int = 5):\n"
        "        super().__init__()\n"
        "        r = torch.linspace(-1, 1, size)\n"
        "        x = r[r.abs() <= 1]\n"
        '        self.register_buffer("kernel", torch.exp(-x.pow(2)))\n'
    )
    (tmp_path / "m.py").write_text(src)
    monkeypatch.chdir(tmp_path)
    found = [d for d in _check_codes(tmp_path) if d.code == "ML008"]
    assert [(d.start.row, d.code) for d in found] == [(9, "ML008")], found
    assert "boolean mask `r.abs() <= 1`" in found[0].message
    import torch

    with pytest.raises(NotImplementedError):
        with torch.device("meta"):
            _import(tmp_path / "m.py", "lowpass").LowPassFilter()


@pytest.mark.parametrize(
    "code, free",
    [
        # e3nn's mask: the pairs are read from outside, ``mul``, ``l``, ``p`` are its own
        ("torch.cat([torch.ones(mul * (2 * l + 1)) for mul, (l, p) in irreps])", ["irreps"]),
        ("{k: v * scale for k, v in pairs if k != skip}", ["scale", "pairs", "skip"]),
        ("[y * n for x in rows for y in x]", ["rows", "n"]),
        ("sum(a for a in [b for b in bs]) + a", ["bs", "a"]),
    ],
)
def test_a_comprehension_reads_only_its_free_names(code, free):
    # fails before: every comprehension was refused ("the value uses a lambda, comprehension")
    import libcst as cst

    from metalint.fix.edits import names_in

    got = [n.value for n in names_in(cst.parse_expression(code))]
    assert sorted(set(got) - {"torch", "sum"}) == sorted(free)


@pytest.mark.parametrize(
    "code", ["[x for x in x]", "[(y := v) for v in vs]", "[f for f in (lambda: 1,)]"]
)
def test_a_comprehension_with_one_name_two_meanings_is_refused(code):
    import libcst as cst

    from metalint.fix.edits import Unfixable, names_in

    with pytest.raises(Unfixable):
        list(names_in(cst.parse_expression(code)))


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("def pair(t):\n    return t if isinstance(t, tuple) else (t, t)\n", True),
        ("def pair(t):\n    return [t, t]\n", True),
        ("def pair(t):\n    t = torch.tensor(t)\n    return t, t\n", False),
        ("def pair(t):\n    return torch.tensor(t), t\n", False),
        ("def pair(t):\n    return (*t,)\n", False),
        ("def pair(t):\n    yield t\n", False),
        ("def pair(t):\n    return\n", False),
    ],
)
def test_a_helper_that_hands_back_its_arguments(code, expected):
    """``pair(image_size)`` is a tensor only where its argument is one (vit-pytorch)."""
    import libcst as cst

    from metalint.static.construction import repackages_arguments

    assert repackages_arguments(cst.parse_module(code), "pair") is expected


@pytest.mark.parametrize(
    "draw",
    ["np.random.randn(n_modes, dim)", "[[random.gauss(0, 1)] * dim for _ in range(n_modes)]"],
)
def test_a_numpy_or_python_draw_is_no_safe_fix(tmp_path, monkeypatch, draw):
    """normflows ``GaussianMixture``: ``loc = np.random.randn(n_modes, dim)`` when no ``loc``
    is given, then a buffer from it. A hook that computes it again draws from numpy's (or
    Python's) generator a second time, so eager values differ under the same seed: plain
    ``fix --write`` applied it as safe before."""
    src = (
        "import random\n\nimport numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class GaussianMixture(nn.Module):\n"
        "    def __init__(self, n_modes=2, dim=3, loc=None):\n"
        "        super().__init__()\n"
        "        if loc is None:\n"
        f"            loc = {draw}\n"
        '        self.register_buffer("loc", torch.tensor(loc))\n'
    )
    (tmp_path / "m.py").write_text(src)
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path, unsafe=False)
    assert (tmp_path / "m.py").read_text() == src


def test_a_local_the_value_calls_a_tensor_method_on_is_not_kept_on_self(tmp_path, monkeypatch):
    """kornia ``ExplicitSpacialEncoding``: ``emb = spatial_kernel_embedding(kind, grid)`` (a
    function of another module), ``if do_gmask: emb = emb * self.gmask``, then
    ``register_buffer("emb", emb.unsqueeze(0))``. The fix kept
    ``emb`` as ``self._emb`` for the hook: built on meta that plain attribute is a meta tensor
    ``to_empty()`` does not touch, and the hook's copy raised ("Cannot copy out of meta
    tensor"). ``emb.unsqueeze(0)`` says ``emb`` is a tensor: it is not kept; the hook computes
    it again from the statements that made it, an unsafe fix (the function of another module
    may draw random numbers)."""
    src = (
        "import torch\nfrom torch import nn\n\nfrom kernels import spatial_kernel_embedding\n\n\n"
        "class ExplicitSpacialEncoding(nn.Module):\n"
        "    def __init__(self, kernel_type: str = 'cart', fmap_size: int = 4, gmask=True):\n"
        "        super().__init__()\n"
        "        emb = spatial_kernel_embedding(kernel_type, fmap_size)\n"
        "        if gmask:\n"
        "            emb = emb * 2.0\n"
        '        self.register_buffer("emb", emb.unsqueeze(0))\n'
    )
    (tmp_path / "m.py").write_text(src)
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path, paths=[tmp_path / "m.py"], unsafe=False)
    assert (tmp_path / "m.py").read_text() == src, out
    rc, out = _fix(tmp_path, paths=[tmp_path / "m.py"])
    text = (tmp_path / "m.py").read_text()
    assert "self._emb" not in text, text
    hook = text.split("def reset_parameters(self):", 1)[1]
    assert "emb = spatial_kernel_embedding(self.kernel_type, self.fmap_size)" in hook, text
    assert "self.emb.copy_(emb.unsqueeze(0))" in hook, text


def test_generic_and_abstract_bases_are_resolved(tmp_path, monkeypatch):
    """pykeen: ``class Regularizer(nn.Module, ABC)`` and ``class QuatEInteraction(
    Interaction[FloatTensor, FloatTensor, FloatTensor])``. ``abc.ABC`` defines no hook, so the
    first is fixed (it was refused: "base class `abc.ABC` is not among the checked files");
    the generic base is the class it subscripts (it was "base class `?`"), whose own
    ``reset_parameters()`` the subclass's new hook extends."""
    src = (
        "from abc import ABC\nfrom typing import Generic, TypeVar\n\nimport torch\n"
        "from torch import nn\n\nT = TypeVar('T')\n\n\n"
        "class Regularizer(nn.Module, ABC):\n"
        "    def __init__(self, weight: float = 1.0):\n"
        "        super().__init__()\n"
        '        self.register_buffer("weight", torch.as_tensor(weight))\n\n\n'
        "class Interaction(nn.Module, Generic[T]):\n"
        "    def reset_parameters(self):\n"
        "        pass\n\n\n"
        "class QuatEInteraction(Interaction[torch.Tensor]):\n"
        "    def __init__(self, dim: int = 4):\n"
        "        super().__init__()\n"
        '        self.register_buffer("table", torch.eye(dim))\n'
    )
    (tmp_path / "m.py").write_text(src)
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path)
    text = (tmp_path / "m.py").read_text()
    assert "self.weight.copy_(torch.as_tensor(self._weight))" in text, text
    assert (
        '        if hasattr(self, "table"):  # not yet when Interaction.__init__() calls it\n'
    ) in text, text
    assert "`?`" not in out and "abc.ABC" not in out, out


def test_drawn_locals_followed_by_other_draws_are_an_unsafe_fix(cli, tmp_path):
    # normflows' Glow matrix, then a child that draws its own init: the hook's draw of `Q`
    # now comes after the child's, so eager values differ (same law); numpy's draws are not
    # put back by `fork_rng()`: refused
    src = (
        "import torch\nfrom torch import nn\n\n\n"
        "class Mix(nn.Module):\n"
        "    def __init__(self, n: int = 4):\n"
        "        super().__init__()\n"
        "        Q, _ = torch.linalg.qr(torch.randn(n, n))\n"
        "        self.W = nn.Parameter(Q)\n"
        "        self.proj = nn.Linear(n, n)\n"
    )
    (tmp_path / "m.py").write_text(src)
    r = cli("fix", "--no-cache", "--select", "ML001", "--write", "m.py")
    assert "fixable with --unsafe-fixes" in r.output, r.output
    r = cli("fix", "--no-cache", "--select", "ML001", "--write", "--unsafe-fixes", "m.py")
    out = (tmp_path / "m.py").read_text()
    assert "with torch.random.fork_rng():" in out and "self.W.copy_(Q)" in out, out

    (tmp_path / "n.py").write_text(
        src.replace("torch.randn(n, n)", "torch.as_tensor(np.random.randn(n, n))")
        .replace("self.proj = nn.Linear(n, n)\n", "")
        .replace("import torch\n", "import numpy as np\nimport torch\n")
    )
    r = cli("fix", "--no-cache", "--select", "ML001", "--diff", "--unsafe-fixes", "n.py")
    assert "fork_rng" not in r.output and "not fixed" in r.output, r.output


def test_a_block_reading_a_tensors_values_stays_and_says_why(tmp_path, monkeypatch):
    """The whole `if` around a child's init moves into the root init_weights() only when its
    tests and locals read the children's structure (torchvision VisionTransformer's conv
    stem); a local computed from a weight's values stays, and the refusal names it."""
    target = tmp_path / "vit.py"
    shutil.copy(_fixture("structure_branch"), target)
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path, write=False)
    assert "the block computes `scale` from more than the configuration of the children" in out
    assert "+    def init_weights(self) -> None:" in out, out
    assert "`fan_in`, computed in a block that moves into the hook, is read later" in out, out
    assert "Would fix 8 errors (2 remaining; 2 unfixable)" in out, out


def test_the_fix_extending_a_base_hook_survives_the_cache(tmp_path):
    """``Fix.over_base_hook`` (the rewrite applied when the tree shows that a base class has
    its own ``reset_parameters()``) goes through the cache's JSON and comes back the same: a
    cached run offers the same fixes as a fresh one."""
    from metalint.diagnostics import Fix

    src = (_fixture("flows_base_hook")).read_text(encoding="utf-8")
    (tmp_path / "m.py").write_text(src, encoding="utf-8")
    fixes = [d.fix for d in _check_codes(tmp_path) if d.symbol == "LULinear" and d.fix]
    assert fixes and all(f.over_base_hook is not None for f in fixes), fixes
    for f in fixes:
        assert "super().reset_parameters()" in "".join(e.content for e in f.over_base_hook.edits)
        assert Fix.from_json(f.to_json()) == f


def test_early_return_hook_runs_on_every_path(tmp_path, monkeypatch):
    """vector-quantize-pytorch's ``Codebook`` (``if not affine_param: return`` before its
    affine buffers) was refused ("`__init__` returns early"). Now the hook is called before
    the early return and at the end; the buffers after the return are set only where they
    exist. Built on meta, moved with ``to_empty()`` and reset, both paths give the eager
    values (fails before: no ``reset_parameters()`` was written)."""
    torch = pytest.importorskip("torch")
    target = tmp_path / "early.py"
    shutil.copy(_fixture("early_return"), target)
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path, unsafe=False)
    mod = _import(target, "_fixed_early_return")
    for cls, kwargs in (
        (mod.Codebook, {"affine_param": False, "kmeans_init": True}),
        (mod.Codebook, {"affine_param": True}),
        (mod.ResidualVQ, {"shared_codebook": False}),
        (
            mod.ResidualVQ,
            {"shared_codebook": True, "beam_score_quantizer_weights": [0.5, 2.0, 3.0]},
        ),
    ):
        eager = cls(**kwargs)
        with torch.device("meta"):
            model = cls(**kwargs)
        model.to_empty(device="cpu")
        model.reset_parameters()
        for name, b in eager.named_buffers():
            assert torch.equal(b, model.get_buffer(name)), (cls.__name__, kwargs, name)


def test_recomputed_loops_reraise_and_kept_locals(tmp_path, monkeypatch):
    """Refused before ("the local `conv_tensor` is changed in place", "the local `_levels` is
    assigned more than once", "the value uses a lambda or `:=`"): torchani's ``_ChemModule``
    (``for i, znum in enumerate(atomic_numbers): conv_tensor[znum] = i``), vector-quantize-
    pytorch's ``LatentQuantize`` (``try: _levels = _levels.repeat(d)`` / ``except
    RuntimeError as e: raise e``) and ``LFQ`` (locals kept on ``self``, one computed through a
    lambda). After ``to_empty()`` the hook gives every buffer its eager value (fails before:
    no hook)."""
    torch = pytest.importorskip("torch")
    for name in ("recompute_loops_and_reraise", "kept_locals"):
        shutil.copy(_fixture(name), tmp_path / f"{name}.py")
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path, unsafe=False)
    loops = _import(tmp_path / "recompute_loops_and_reraise.py", "_fixed_loops_reraise")
    kept = _import(tmp_path / "kept_locals.py", "_fixed_kept_locals")
    for cls, kwargs in (
        (loops.ChemModule, {"symbols": ("O", "H")}),
        (loops.ChemModuleOverTensor, {}),
        (loops.LatentQuantize, {"levels": 5, "codebook_dim": 3}),
        (kept.LFQ, {"codebook_size": 8}),
        (kept.LFQ, {"dim": 3, "codebook_size": None}),
    ):
        eager = cls(**kwargs)
        with torch.device("meta"):
            model = cls(**kwargs)
        model.to_empty(device="cpu")
        model.reset_parameters()
        for b, v in eager.named_buffers():
            assert torch.equal(v, model.get_buffer(b)), (cls.__name__, kwargs, b)
    # torchani's loop over a tensor with symbols given: eager construction, as before
    eager = loops.ChemModuleOverTensor(symbols=("C", "N"))
    assert eager._conv_tensor[6].item() == 0 and eager._conv_tensor[7].item() == 1
    eager._conv_tensor.zero_()
    eager.reset_parameters()
    assert eager._conv_tensor[6].item() == 0 and eager._conv_tensor[7].item() == 1


def test_a_kept_argument_never_takes_a_name_of_a_base_or_of_module(tmp_path, monkeypatch):
    """torchani: ``AtomicOneHot(symbols)`` and ``SingleNN(symbols)`` kept their argument as
    ``self.symbols``, a read-only property of their base (eager construction raised
    AttributeError: can't set attribute), and ``ANINetworks(modules)`` as ``self.modules``,
    which shadowed ``nn.Module.modules()``. ``symbols`` is kept as ``_symbols``; ``modules``
    and ``_modules`` are both ``nn.Module``'s, so ``modules`` is kept as ``_init_modules``
    (fails before)."""
    pytest.importorskip("torch")
    import importlib.util

    (tmp_path / "m.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Container(nn.Module):\n"
        "    @property\n"
        "    def symbols(self):\n"
        "        return ('H', 'C')\n\n\n"
        "class SingleNN(Container):\n"
        "    def __init__(self, symbols=('H', 'C')):\n"
        "        super().__init__()\n"
        "        numbers = torch.tensor([len(e) for e in symbols], dtype=torch.long)\n"
        '        self.register_buffer("atomic_numbers", numbers, persistent=False)\n\n\n'
        "class Networks(nn.Module):\n"
        "    def __init__(self, modules=('H', 'C')):\n"
        "        super().__init__()\n"
        "        numbers = torch.tensor([len(e) for e in modules], dtype=torch.long)\n"
        '        self.register_buffer("atomic_numbers", numbers, persistent=False)\n'
    )
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path)
    text = (tmp_path / "m.py").read_text()
    assert "self._init_modules = modules" in text, out
    assert "self.symbols = symbols" not in text and "self.modules = modules" not in text, text
    assert "self._symbols = symbols" in text and "self._modules " not in text, text
    spec = importlib.util.spec_from_file_location("m_kept", tmp_path / "m.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.SingleNN().atomic_numbers.tolist() == [1, 1]
    assert len(list(mod.Networks().modules())) == 1


#: what torch says when a hook mixes a tensor of the module with one made elsewhere
_DEVICE_MIX = ("not on the expected device", "Expected all tensors to be on the same device")


@pytest.mark.parametrize("path", PAIRS, ids=lambda p: p.name[: -len(".in.py")])
def test_every_hook_makes_its_tensors_where_the_module_is(path):
    """Each rewritten class built eagerly, moved with ``to_empty(device="meta")`` (a device
    other than the default one, as ``to_empty(device="cuda")`` is) and re-initialised by its
    hooks: a hook that mixes the module's tensors with new ones made without ``device=``
    (vector-quantize-pytorch's ``LFQ``: ``torch.arange(n)[..., None] & self.mask``) raises
    there, as it does on a GPU. Other errors of a hook on meta (a value read) are not this
    test's business."""
    torch = pytest.importorskip("torch")
    out = path.with_name(path.name[: -len(".in.py")] + ".out.py")
    mod = _import(out, f"_device_{out.stem.replace('.', '_')}")
    for name, cls in _module_classes(mod):
        try:
            model = cls()
        except Exception:
            continue  # needs arguments: the probe test builds it with its own
        model.to_empty(device="meta")
        hooks = [m.reset_parameters for m in model.modules() if hasattr(m, "reset_parameters")]
        if callable(getattr(model, "init_weights", None)):
            hooks.append(model.init_weights)
        for hook in hooks:
            try:
                with torch.no_grad():
                    hook()
            except Exception as e:  # noqa: BLE001 - only a device mix is a failure here
                assert not any(m in str(e) for m in _DEVICE_MIX), (
                    f"{name}: {hook.__qualname__}: {e}"
                )


def test_a_sibling_buffer_converted_by_its_own_line_is_not_copied_raw(tmp_path, monkeypatch):
    """nnAudio's ``iSTFT``: ``kernel_sin, kernel_cos, .. = fourier_kernels(..)`` (numpy
    arrays), each converted by its own ``kernel_x = torch.tensor(kernel_x, ..)``, both
    registered in one ``else``. The hook for ``kernel_sin`` used to copy ``kernel_cos`` as a
    sibling from the unpacked local (a numpy array: ``copy_`` raised, eager construction
    broke). Now a sibling is copied only from a local ``__init__`` binds once; whatever the
    hook does, eager construction and the hook give the values ``__init__`` made."""
    pytest.importorskip("torch")
    (tmp_path / "istft.py").write_text(
        "import math\n\nimport torch\nfrom torch import nn\n\n\n"
        "def fourier_kernels(n_fft):  # host lists, as numpy arrays would be\n"
        "    k = [[i * j / n_fft for j in range(n_fft)] for i in range(n_fft)]\n"
        "    sin = [[math.sin(2 * math.pi * x) for x in row] for row in k]\n"
        "    cos = [[math.cos(2 * math.pi * x) for x in row] for row in k]\n"
        "    return sin, cos, None, None, [1.0] * n_fft\n\n\n"
        "class InverseSTFT(nn.Module):\n"
        "    def __init__(self, n_fft=8, trainable_kernels=False):\n"
        "        super().__init__()\n"
        "        self.n_fft = n_fft\n"
        "        kernel_sin, kernel_cos, _, _, window_mask = fourier_kernels(n_fft)\n"
        "        kernel_sin = torch.tensor(kernel_sin, dtype=torch.float).unsqueeze(-1)\n"
        "        kernel_cos = torch.tensor(kernel_cos, dtype=torch.float).unsqueeze(-1)\n"
        "        if trainable_kernels:\n"
        "            kernel_sin = nn.Parameter(kernel_sin)\n"
        "            kernel_cos = nn.Parameter(kernel_cos)\n"
        '            self.register_parameter("kernel_sin", kernel_sin)\n'
        '            self.register_parameter("kernel_cos", kernel_cos)\n'
        "        else:\n"
        '            self.register_buffer("kernel_sin", kernel_sin)\n'
        '            self.register_buffer("kernel_cos", kernel_cos)\n'
    )
    before = _import(tmp_path / "istft.py", "istft_before")
    eager = {k: v.clone() for k, v in before.InverseSTFT().state_dict().items()}
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path, unsafe=True)
    text = (tmp_path / "istft.py").read_text()
    assert "reset_parameters" in text, text
    after = _import(tmp_path / "istft.py", "istft_after")
    m = after.InverseSTFT()
    for k, v in m.state_dict().items():
        assert v.equal(eager[k]), k
    m.reset_parameters()
    for k, v in m.state_dict().items():
        assert v.equal(eager[k]), k
    if "self.kernel_cos.copy_" in text:
        hook = text[text.index("def reset_parameters") :]
        assert "kernel_cos = torch.tensor(kernel_cos" in hook, text


def test_a_new_root_init_weights_never_leaves_reset_parameters_behind(tmp_path, monkeypatch):
    """x-transformers' ``TPREncoder``: ``binding``'s zeros move into a ``reset_parameters()``
    called last; the embeddings' ``normal_`` come before child modules that draw. A new
    ``init_weights()`` for them could neither open nor end with ``reset_parameters()``, and
    under the root protocol (``init_weights()`` alone initialises the module) ``binding``
    became garbage. That move is refused now; every class of the result that has an
    ``init_weights()`` has it call ``reset_parameters()``."""
    pytest.importorskip("torch")
    (tmp_path / "tpr.py").write_text(
        "import torch\nfrom torch import nn\nfrom torch.nn import Parameter\n\n\n"
        "class RoleEncoder(nn.Module):\n"
        "    def __init__(self, dim=4, num_fillers=4, filler_dim=3, role_dim=5, mlp_dim=8):\n"
        "        super().__init__()\n"
        "        self.filler_emb = nn.Embedding(num_fillers, filler_dim)\n"
        "        self.role_emb = nn.Embedding(2, role_dim)\n"
        "        self.binding = Parameter(torch.zeros(dim, filler_dim, role_dim))\n"
        "        self.bias = Parameter(torch.zeros(dim))\n\n"
        "        torch.nn.init.normal_(self.filler_emb.weight, std=0.05)\n"
        "        torch.nn.init.normal_(self.role_emb.weight, std=0.05)\n\n"
        "        self.mlp = None\n"
        "        if mlp_dim is not None:\n"
        "            self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.Linear(mlp_dim, dim))\n"
    )
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path, unsafe=True)
    text = (tmp_path / "tpr.py").read_text()
    assert "torch.empty(dim, filler_dim, role_dim)" in text, text
    if "def init_weights" in text:
        hook = text[text.index("def init_weights") :]
        assert "self.reset_parameters()" in hook, text
    else:
        assert "ML003" in out and "would be lost under the root protocol" in out, out


def test_an_attribute_built_by_a_class_of_another_module_is_not_a_tensor(tmp_path, monkeypatch):
    """e3nn's ``BatchNorm``: ``self.irreps = o3.Irreps(irreps)`` (a class of another module,
    a tuple of irreducible representations) and ``running_mean = torch.zeros(num_scalar)``
    with ``num_scalar`` counted from ``self.irreps``. Any unknown call used to count as "may
    return a tensor", so the buffer was refused ("a plain attribute that may be a tensor");
    a call spelled as a class builds an instance of that class. The hook reads
    ``self.irreps`` and gives back the eager values."""
    pytest.importorskip("torch")
    (tmp_path / "eq").mkdir()
    (tmp_path / "eq" / "__init__.py").write_text("")
    (tmp_path / "eq" / "o3.py").write_text(
        "class Irreps(tuple):\n"
        "    def __new__(cls, spec):\n"
        "        return super().__new__(cls, [(int(m), int(l)) for m, l in spec])\n\n"
        "    @property\n"
        "    def dim(self):\n"
        "        return sum(m * (2 * l + 1) for m, l in self)\n"
    )
    (tmp_path / "norm.py").write_text(
        "import torch\nfrom torch import nn\n\nfrom eq import o3\n\n\n"
        "class EquivariantNorm(nn.Module):\n"
        "    def __init__(self, irreps=((4, 0), (2, 1))):\n"
        "        super().__init__()\n"
        "        self.irreps = o3.Irreps(irreps)\n"
        "        num_scalar = sum(mul for mul, l in self.irreps if l == 0)\n"
        '        self.register_buffer("running_mean", torch.zeros(num_scalar))\n'
        '        self.register_buffer("running_var", torch.ones(self.irreps.dim))\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc, out = _fix(tmp_path, unsafe=True)
    assert "may be a tensor" not in out, out
    text = (tmp_path / "norm.py").read_text()
    assert "def reset_parameters" in text and "self.running_mean" in text, text
    after = _import(tmp_path / "norm.py", "norm_after")
    m = after.EquivariantNorm()
    m.running_mean.fill_(7.0)
    m.running_var.fill_(7.0)
    m.reset_parameters()
    assert m.running_mean.eq(0).all() and m.running_mean.shape == (4,)
    assert m.running_var.eq(1).all() and m.running_var.shape == (10,)


@pytest.mark.parametrize(
    "code, bound",
    [
        ("kernels.append(kernel)", {"kernels"}),
        ("groups[0].extend(xs)", {"groups"}),
        ("taps.insert(0, t)", {"taps"}),
        ("bank += [h]", {"bank"}),
        ("bank[i] = h", {"bank"}),
        ("del bank[0]", {"bank"}),
        ("sizes.sort()", {"sizes"}),
        ("vals, idx = x.sort()", {"vals", "idx"}),
        ("self.filters.append(h)", {"self"}),
    ],
)
def test_binds_sees_a_container_changed_in_place(code, bound):
    # julius's ``ResampleFrac``: ``kernels.append(kernel)`` in a loop was no write of
    # ``kernels``, so the hook inlined ``torch.stack([])``. Fails before for the method calls
    # and ``del``.
    import libcst as cst

    from metalint.static.tensor_kind import binds

    assert binds(cst.parse_statement(code), lambda _: None) == bound


_FILLED_IN_HELPER = (
    "import torch\nfrom torch import nn\n\n\n"
    "class Phases(nn.Module):\n"
    "    def __init__(self, n=3, same=False):\n"
    "        super().__init__()\n"
    "        self.n = n\n"
    "        self.same = same\n"
    "        self._init_phases()\n\n"
    "    def _init_phases(self):\n"
    "        if self.same:\n"
    "            return\n"
    "        phases = []\n"
    "        for p in range(self.n):\n"
    "            phases.append(torch.linspace(0, 1, 5) * (p + 1))\n"
    '        self.register_buffer("phases", torch.stack(phases))\n'
)


def test_a_list_filled_in_a_helper_is_computed_again_under_the_early_return(tmp_path, monkeypatch):
    # julius's ``ResampleFrac``: the hook stacked an empty list (the loop filling it was not
    # copied), and read a ``self.kernel`` that the method's early return never registered:
    # eager construction raised for equal rates. Fails before on both counts.
    torch = pytest.importorskip("torch")
    (tmp_path / "m.py").write_text(_FILLED_IN_HELPER)
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path)
    got = (tmp_path / "m.py").read_text()
    assert "torch.stack([])" not in got and "phases.append(" in got.split("def reset_parameters")[1]
    assert "if self._buffers.get('phases') is not None:" in got
    mod = _import(tmp_path / "m.py", "_filled_in_helper")
    assert "phases" not in dict(mod.Phases(same=True).named_buffers())
    (tmp_path / "orig.py").write_text(_FILLED_IN_HELPER)
    before = _import(tmp_path / "orig.py", "_filled_in_helper_orig")
    assert torch.equal(mod.Phases().phases, before.Phases().phases)
    m = mod.Phases()
    m.to_empty(device="cpu")
    m.reset_parameters()
    assert torch.equal(m.phases, before.Phases().phases)


@pytest.mark.parametrize(
    "fill",
    [
        "bank.append(torch.full((2,), float(c)))",
        "bank += [torch.full((2,), float(c))]",
        "bank.extend([torch.full((2,), float(c))])",
    ],
)
def test_a_local_list_of_tensors_is_never_kept_on_self(fill, tmp_path, monkeypatch):
    # julius's ``LowPassFilters``: ``self._filters = filters`` kept the list for the hook; on
    # meta its tensors stayed there, and the hook raised "Cannot copy out of meta tensor".
    # Fails before: the list was kept on self.
    torch = pytest.importorskip("torch")
    src = (
        "import torch\nfrom torch import nn\n\n\n"
        "class Bank(nn.Module):\n"
        "    def __init__(self, cutoffs=(1, 2, 3)):\n"
        "        super().__init__()\n"
        "        bank = []\n"
        "        for c in cutoffs:\n"
        f"            {fill}\n"
        '        self.register_buffer("bank", torch.stack(bank))\n'
    )
    (tmp_path / "m.py").write_text(src)
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path)
    got = (tmp_path / "m.py").read_text()
    assert "= bank\n" not in got and "self._bank" not in got, got
    mod = _import(tmp_path / "m.py", f"_bank_{abs(hash(fill))}")
    with torch.device("meta"):
        m = mod.Bank()
    m.to_empty(device="cpu")
    m.reset_parameters()
    assert torch.equal(m.bank, torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]))


@pytest.mark.parametrize(
    "value, tensor",
    [
        ("[torch.hann_window(n) for n in (3, 5)]", True),
        ("[1 + 2 * r for r in range(3)]", False),
        ("(torch.ones(2), 3)", True),
        ("[3, 4]", False),
    ],
)
def test_a_container_of_tensors_may_be_a_tensor(value, tensor):
    # a list of factory calls kept as a plain attribute stays on meta as a tensor does;
    # before, every container literal was taken for a list of sizes
    import libcst as cst

    from metalint.fix.codemod import ClassEdit
    from metalint.static.model import collect
    from metalint.static.rule import RuleContext

    src = (
        "import torch\nfrom torch import nn\n\n\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        f"        self.held = {value}\n"
    )
    module = cst.parse_module(src)
    facts = collect(module, "m")
    edit = ClassEdit(RuleContext(facts, module, (), "m.py"), facts.classes[0])
    assert edit.plain_tensor("held") is tensor


def test_a_number_argument_kept_on_self_never_becomes_a_buffer(tmp_path, monkeypatch):
    """compressai's ``GaussianConditional(scale_table, scale_bound: float = 0.11)``: ML002's
    fix keeps ``scale_bound`` on ``self`` for its hook; ``__init__`` replaces it by
    ``self.scale_table[0]`` on one path, so ML007 then saw a plain attribute that may be a
    tensor and registered it as a buffer: with the default (a float) ``register_buffer``
    raised and eager construction broke. An argument the signature declares a number is
    refused by ML007's fix."""
    pytest.importorskip("torch")
    (tmp_path / "cond.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Conditional(nn.Module):\n"
        "    def __init__(self, scale_table=None, scale_bound: float = 0.11):\n"
        "        super().__init__()\n"
        "        if scale_bound is None and scale_table:\n"
        "            scale_bound = self.scale_table[0]\n"
        '        self.register_buffer("scale_table", torch.tensor(scale_table or [1.0]))\n'
        '        self.register_buffer("scale_bound", torch.tensor([float(scale_bound)]))\n'
    )
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path, unsafe=True)
    text = (tmp_path / "cond.py").read_text()
    assert 'register_buffer("_scale_bound"' not in text, text
    after = _import(tmp_path / "cond.py", "cond_after")
    m = after.Conditional()
    assert m.scale_bound.item() == pytest.approx(0.11)


def test_an_init_weights_that_takes_arguments_is_no_hook(tmp_path, monkeypatch):
    """titans-pytorch's ``NeuralMemory.init_weights(self, batch)`` returns the memory's starting
    weights: no protocol calls it without arguments, so a new ``reset_parameters()`` is made
    as in any class, and that method is left as it is."""
    pytest.importorskip("torch")
    source = (
        "import torch\nfrom torch import nn\n\n\n"
        "class Memory(nn.Module):\n"
        "    def __init__(self, dim: int = 4, gated: bool = True):\n"
        "        super().__init__()\n"
        "        self.weights = nn.Parameter(torch.empty(dim, dim))\n"
        "        self.gate = nn.Parameter(torch.tensor(-5.0)) if gated else None\n\n"
        "    def init_weights(self, batch):\n"
        "        if batch > 1:\n"
        "            return self.weights.expand(batch, -1, -1)\n"
        "        return self.weights\n"
    )
    (tmp_path / "m.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    rc, out = _fix(tmp_path, write=True)
    text = (tmp_path / "m.py").read_text()
    assert "def reset_parameters(self):" in text and "self.gate.copy_(" in text, out
    assert text.count("def init_weights(self, batch):") == 1
    assert "    def init_weights(self, batch):\n        if batch > 1:\n" in text
    mod = _import(tmp_path / "m.py", "memory_init_weights_args")
    m = mod.Memory()
    assert float(m.gate) == -5.0


# torch-geometric-temporal's recurrent graph convolutions: legacy ``Parameter(torch.Tensor(...))``
# made in helper methods (two deep) and initialised by PyG's ``glorot``/``zeros`` in another
GATES = """import torch
from torch.nn import Parameter
from torch_geometric.nn.inits import glorot, zeros


class GConvGate(torch.nn.Module):
    def __init__(self, in_channels: int = 3, out_channels: int = 4):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self._create_parameters_and_layers()
        self._set_parameters()

    def _create_update_gate_parameters_and_layers(self):
        self.lin_z = torch.nn.Linear(self.out_channels, self.out_channels)
        self.W_z = Parameter(torch.Tensor(self.in_channels, self.out_channels))
        self.b_z = Parameter(torch.Tensor(1, self.out_channels))

    def _create_parameters_and_layers(self):
        self._create_update_gate_parameters_and_layers()

    def _set_parameters(self):
        glorot(self.W_z)
        zeros(self.b_z)
"""


def _stub_pyg_inits(monkeypatch):
    """``torch_geometric.nn.inits`` as PyG writes it (its ``glorot`` and ``zeros``), for a
    machine without PyG."""
    import math

    import torch

    inits = types.ModuleType("torch_geometric.nn.inits")

    def glorot(value):
        stdv = math.sqrt(6.0 / (value.size(-2) + value.size(-1)))
        value.data.uniform_(-stdv, stdv)

    def zeros(value):
        value.data.fill_(0)

    inits.glorot, inits.zeros = glorot, zeros
    for name in ("torch_geometric", "torch_geometric.nn"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "torch_geometric.nn.inits", inits)
    return torch


def test_pyg_inits_in_helper_methods_are_seen_and_fixed(tmp_path, monkeypatch):
    src = tmp_path / "gates.py"
    src.write_text(GATES)
    found = sorted((d.code, d.start.row) for d in _check_codes(tmp_path))
    # glorot/zeros write in place (vocabulary.LIBRARY_INITS), without PyG in the tree
    assert ("ML003", 23) in found and ("ML003", 24) in found
    assert ("ML009", 16) in found and ("ML009", 17) in found
    rc, _ = _fix(tmp_path, unsafe=False)
    fixed = src.read_text()
    assert "Parameter(torch.empty(self.in_channels, self.out_channels))" in fixed
    assert "Parameter(torch.empty(1, self.out_channels))" in fixed
    assert "        self.reset_parameters()\n\n    def reset_parameters(self):\n" in fixed
    assert "        self._set_parameters()\n" in fixed
    # left: ML012 (no ``device`` keyword), which is not about a lost value
    assert [d.code for d in _check_codes(tmp_path)] == ["ML012"]
    # eager construction unchanged, and the probe passes where the original lost both
    torch = _stub_pyg_inits(monkeypatch)
    from metalint.probe.build import probe

    (tmp_path / "orig.py").write_text(GATES)
    a = _import(tmp_path / "orig.py", "_gates_orig").GConvGate
    b = _import(src, "_gates_fixed").GConvGate
    torch.manual_seed(0)
    ta = _tensors(a())
    torch.manual_seed(0)
    tb = _tensors(b())
    assert ta.keys() == tb.keys()
    assert all(torch.equal(ta[k].detach(), tb[k].detach()) for k in ta)
    assert probe(a, check_order=False).status == "failed"
    assert probe(b, check_order=False).status == "passed"


# torch-geometric-temporal's DConv: a PyG ``MessagePassing`` layer (PyG not in the tree)
DCONV = """import torch
from torch_geometric.nn.conv import MessagePassing


class DConv(MessagePassing):
    def __init__(self, in_channels, out_channels, K, bias=True):
        super(DConv, self).__init__(aggr="add", flow="source_to_target")
        self.weight = torch.nn.Parameter(torch.Tensor(2, K, in_channels, out_channels))
        if bias:
            self.bias = torch.nn.Parameter(torch.zeros(out_channels))
        else:
            self.register_parameter("bias", None)
        self.__reset_parameters()

    def __reset_parameters(self):
        torch.nn.init.xavier_uniform_(self.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)
"""


def test_a_pyg_message_passing_layer_gets_a_hook_extending_the_base(tmp_path, monkeypatch):
    src = tmp_path / "dconv.py"
    src.write_text(DCONV)
    rc, out = _fix(tmp_path, unsafe=True)
    fixed = src.read_text()
    # MessagePassing has its own reset_parameters() (vocabulary.EXTERNAL_RESET_BASES): the
    # new hook extends it instead of overriding it
    assert (
        "    def reset_parameters(self):\n        super().reset_parameters()\n"
        '        if hasattr(self, "weight"):  # not yet if MessagePassing.__init__() calls it\n'
        "            self.__reset_parameters()\n"
    ) in fixed, fixed
    assert "torch.nn.Parameter(torch.empty(2, K, in_channels, out_channels))" in fixed
    torch = pytest.importorskip("torch")
    conv = types.ModuleType("torch_geometric.nn.conv")

    resets = []

    class MessagePassing(torch.nn.Module):
        def __init__(self, aggr="add", flow="source_to_target"):
            super().__init__()

        def reset_parameters(self):
            resets.append(type(self).__name__)

    conv.MessagePassing = MessagePassing
    for name in ("torch_geometric", "torch_geometric.nn"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "torch_geometric.nn.conv", conv)
    from metalint.probe.build import probe

    (tmp_path / "orig.py").write_text(DCONV)
    a = _import(tmp_path / "orig.py", "_dconv_orig").DConv
    b = _import(src, "_dconv_fixed").DConv
    torch.manual_seed(0)
    ta = _tensors(a(3, 4, 2))
    torch.manual_seed(0)
    tb = _tensors(b(3, 4, 2))
    assert all(torch.equal(ta[k].detach(), tb[k].detach()) for k in ta)
    assert probe(lambda: a(3, 4, 2), check_order=False).status == "failed"
    resets.clear()
    assert probe(lambda: b(3, 4, 2), check_order=False).status == "passed"
    assert "DConv" in resets  # the base's own reset still runs


# cellpose's segformer.py: a model defined in a ``try:`` that imports an optional dependency
TRY_BLOCK = """import torch
from torch import nn

try:
    from torch.nn import Identity as Backbone

    class Transformer(nn.Module):
        def __init__(self, diam_mean=30.0):
            super().__init__()
            self.net = Backbone()
            self.diam_mean = nn.Parameter(data=torch.ones(1) * diam_mean,
                                          requires_grad=False)
            self.diam_labels = nn.Parameter(data=torch.ones(1) * diam_mean,
                                            requires_grad=False)

except ImportError:
    pass

for _n in (1,):

    class InLoop(nn.Module):
        def __init__(self):
            super().__init__()
            self.gamma = nn.Parameter(1e-5 * torch.ones(4))
"""


def test_a_class_defined_in_a_try_block_is_fixed_and_one_in_a_loop_says_why(tmp_path):
    src = tmp_path / "segformer.py"
    src.write_text(TRY_BLOCK)
    # check offers the fix too (its class text is rendered, not cut from the source)
    offered = {(d.code, d.symbol): d.fix is not None for d in _check_codes(tmp_path)}
    assert offered[("ML001", "Transformer")] and not offered[("ML001", "InLoop")]
    rc, out = _fix(tmp_path, unsafe=False)
    fixed = src.read_text()
    assert (
        "            self.diam_mean = nn.Parameter(data=torch.empty(1),\n"
        "                                          requires_grad=False)\n"
    ) in fixed, fixed
    assert "\n        def reset_parameters(self):\n" in fixed
    assert "not fixed: `InLoop` is defined in a loop or a function" in out
    left = [(d.code, d.symbol) for d in _check_codes(tmp_path) if d.code != "ML012"]
    assert left == [("ML001", "InLoop")]
    # eager values unchanged; the probe fails before and passes after
    (tmp_path / "orig.py").write_text(TRY_BLOCK)
    assert _assert_same_eager(tmp_path / "orig.py", src) >= 2
    from metalint.probe.build import probe

    a = _import(tmp_path / "orig.py", "_try_orig").Transformer
    b = _import(src, "_try_fixed").Transformer
    assert probe(a, check_order=False).status == "failed"
    assert probe(b, check_order=False).status == "passed"
    _fix(tmp_path, unsafe=True)
    again = src.read_text()
    _fix(tmp_path, unsafe=True)
    assert src.read_text() == again


# timm 1.0.31's Levit: the model's init_weights() applies _init_weights, which calls each
# module's reset_parameters(); ConvNorm initialises its child's BN weight in __init__
LEVIT = """from functools import partial

import torch.nn as nn


class ConvNorm(nn.Module):
    def __init__(self, cin: int = 4, cout: int = 4, bn_weight_init: float = 1.0):
        super().__init__()
        self.linear = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        nn.init.constant_(self.bn.weight, bn_weight_init)


class Levit(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = ConvNorm(3, 4)
        self.proj = ConvNorm(4, 4, bn_weight_init=0.0)
        self.init_weights(needs_reset=False)

    def init_weights(self, needs_reset: bool = True):
        self.apply(partial(self._init_weights, needs_reset=needs_reset))

    def _init_weights(self, m: nn.Module, needs_reset: bool = True) -> None:
        if needs_reset and hasattr(m, "reset_parameters"):
            m.reset_parameters()
"""


def test_a_child_init_is_moved_into_an_init_weights_the_model_calls(tmp_path):
    # LEVIT's root calls each module's reset_parameters() and never its init_weights(), so
    # the fix is refused (fixtures/fix/ML003/refused/root_init_never_calls_child_init.py); a
    # ViT-style root whose init applies each module's init_weights(): the fix is made
    src = tmp_path / "levit.py"
    vit = LEVIT.replace('hasattr(m, "reset_parameters")', 'hasattr(m, "init_weights")')
    vit = vit.replace("m.reset_parameters()", "m.init_weights()")
    src.write_text(vit)
    rc, out = _fix(tmp_path, unsafe=True)
    fixed = src.read_text()
    assert (
        "    def init_weights(self):\n        nn.init.constant_(self.bn.weight, self._bn" in fixed
    )
    assert [d.code for d in _check_codes(tmp_path) if d.code.startswith("ML00")] == []


def test_the_loop_after_apply_that_calls_local_init_moves_with_it(tmp_path, monkeypatch):
    """timm ConVit: ``self.apply(self._init_weights)`` then ``for n, m in
    self.named_modules(): if hasattr(m, "local_init"): m.local_init()``. The loop goes on with
    the parent's init (GPSA's ``v.weight`` becomes the identity over the law just applied):
    left in ``__init__``, the model's ``init_weights()`` applied the law and never the
    identity, and the probe of the model lost ``v.weight`` (the verify of ConVit, which
    judges a class by its own tensors, did not see it)."""
    torch = pytest.importorskip("torch")
    from metalint.probe.build import probe

    src = _fixture("apply_then_local_init")
    target = tmp_path / "convit.py"
    shutil.copy(src, target)
    monkeypatch.chdir(tmp_path)
    _fix(tmp_path, unsafe=False)
    fixed = target.read_text()
    assert (
        "    def init_weights(self):\n        self.apply(self._init_weights)\n        for n, m"
        in fixed
    )
    before = _import(src, "_convit_before").ConVit
    after = _import(target, "_convit_after").ConVit
    assert probe(before, check_order=False).status == "failed"
    assert probe(after, check_order=False).status == "passed"
    torch.manual_seed(0)
    assert torch.equal(after().blocks[0].v.weight, torch.eye(8))


def test_a_class_its_try_block_left_undefined_is_not_verified_rather_than_failed(tmp_path):
    """cellpose without segmentation_models_pytorch: the import in the ``try`` fails, so the
    module defines no ``Transformer``: the probe cannot build it (skipped), which is not a
    failure of the rewrite."""
    pytest.importorskip("torch")
    from metalint.fix.verify import verify_classes

    src = tmp_path / "segformer.py"
    src.write_text(TRY_BLOCK.replace("from torch.nn import Identity", "from no_such_lib import X"))
    _fix(tmp_path, unsafe=False)
    (v,) = verify_classes(str(src), ["Transformer"])
    assert v.status == "skipped" and "not defined once the module is imported" in v.detail
