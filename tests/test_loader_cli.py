"""`metalint load` and the acceptance case: RoPE persistent=False buffer + tied embeddings."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from loader_models import TinyLM, random_state

from metalint.loader import load_checkpoint, save_safetensors, verify_against_eager

TARGET = f"{Path(__file__).parent / 'loader_models.py'}:TinyLM"


def _ckpt(tmp_path):
    sd = random_state(TinyLM, seed=1)
    sd.pop("head.weight")  # tied: saved once
    path = tmp_path / "model.safetensors"
    save_safetensors(sd, path)
    return path, sd


def test_acceptance_rope_and_tied_embeddings_api(tmp_path):
    path, sd = _ckpt(tmp_path)
    r = load_checkpoint(TinyLM, path, dtype="bf16")
    m = r.model
    assert "rope.inv_freq" not in sd
    assert torch.equal(m.rope.inv_freq, m.rope._inv_freq().to(torch.bfloat16))
    assert m.head.weight is m.embed.weight
    assert m.head.weight.data_ptr() == m.embed.weight.data_ptr()
    v = verify_against_eager(TinyLM, path, m, dtype="bf16", report=r)
    assert v.ok and v.identical == v.compared and not v.skipped
    assert v.compared == len(list(m.named_parameters(remove_duplicate=False))) + len(
        list(m.named_buffers(remove_duplicate=False))
    )


def test_cli_load_verify(cli, tmp_path):
    path, _ = _ckpt(tmp_path)
    res = cli("load", str(path), "--model", TARGET, "--dtype", "bf16", "--verify")
    assert res.exit_code == 0, res.output
    out = res.output
    assert "materialised by init: rope.inv_freq <- RotaryEmbedding.reset_parameters()" in out
    assert "tied: embed.weight = head.weight" in out
    assert "-> identical" in out
    assert "cast float32->bfloat16" in out


def test_cli_json(cli, tmp_path):
    path, sd = _ckpt(tmp_path)
    res = cli("load", str(path), "--model", TARGET, "--output-format", "json", "--verify")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["loaded"] == len(sd) and data["missing"] == [] and data["casts"] == {}
    assert data["verify"]["mismatches"] == []
    assert data["materialized"] == {"rope.inv_freq": "RotaryEmbedding.reset_parameters() on 'rope'"}


def test_cli_error_is_one_line_exit_2(cli, tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{bad}")
    res = cli("load", str(bad), "--model", TARGET)
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("metalint load: error: ")
    assert str(bad) in lines[0] and "Traceback" not in res.output


def test_cli_strict_and_no_strict(cli, tmp_path):
    sd = random_state(TinyLM)
    sd.pop("head.weight")
    sd.pop("layers.1.mlp.bias")
    sd["extra"] = torch.ones(1)
    save_safetensors(sd, tmp_path / "m.safetensors")
    res = cli("load", str(tmp_path / "m.safetensors"), "--model", TARGET)
    assert res.exit_code == 2
    assert "1 missing: layers.1.mlp.bias; 1 unexpected: extra" in res.output
    res = cli("load", str(tmp_path / "m.safetensors"), "--model", TARGET, "--no-strict")
    assert res.exit_code == 0, res.output
    assert "missing (1): layers.1.mlp.bias" in res.output
    assert "materialised by init: layers.1.mlp.bias <- Linear.reset_parameters()" in res.output


def test_cli_bad_target(cli, tmp_path):
    path, _ = _ckpt(tmp_path)
    res = cli("load", str(path), "--model", "no_such_module_xyz:build")
    assert res.exit_code == 2 and "cannot import" in res.output
    res = cli("load", str(path), "--model", "nocolon")
    assert res.exit_code == 2 and "module:factory" in res.output


def test_cli_verify_mismatch_exit_1(cli, tmp_path, monkeypatch):
    path, _ = _ckpt(tmp_path)
    from metalint.loader import verify

    real = verify.eager_load

    def tampered(*a, **k):
        ref = real(*a, **k)
        with torch.no_grad():
            ref.final_norm.bias.add_(1)
        return ref

    monkeypatch.setattr(verify, "eager_load", tampered)
    res = cli("load", str(path), "--model", TARGET, "--verify")
    assert res.exit_code == 1
    assert "differs: final_norm.bias: values differ" in res.output


def test_cli_help_lists_load():
    from click.testing import CliRunner

    from metalint.cli import main

    res = CliRunner().invoke(main, ["load", "--help"])
    assert res.exit_code == 0 and "--keep-in-fp32" in res.output


def test_load_command_module_is_torch_free():
    import subprocess
    import sys

    code = (
        "import sys, metalint.loader.command\n"
        "assert 'torch' not in sys.modules, 'torch imported by metalint.loader.command'\n"
    )
    root = Path(__file__).resolve().parent.parent
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr
