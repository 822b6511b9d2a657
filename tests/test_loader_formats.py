"""Each checkpoint format streams into a meta-built model and equals the saved tensors."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from loader_models import Plain, TinyLM, WithSubclassParam, random_state

from metalint.loader import (
    CheckpointError,
    load_checkpoint,
    open_checkpoint,
    save_safetensors,
)


def _check(model, sd):
    state = model.state_dict()
    for k, v in sd.items():
        assert torch.equal(state[k], v), k
    for n, t in list(model.named_parameters()) + list(model.named_buffers()):
        assert t.device.type == "cpu", n
    assert model.head.weight is model.embed.weight
    assert torch.equal(model.rope.inv_freq, model.rope._inv_freq())


@pytest.fixture
def sd():
    s = random_state(TinyLM)
    s.pop("head.weight")  # saved once, as transformers does for tied weights
    return s


def test_single_safetensors(tmp_path, sd):
    save_safetensors(sd, tmp_path / "model.safetensors")
    r = load_checkpoint(TinyLM, tmp_path / "model.safetensors")
    assert r.format == "safetensors" and not r.missing and not r.unexpected
    _check(r.model, sd)
    assert r.bytes_read == sum(v.numel() * v.element_size() for v in sd.values())
    assert r.materialized == {"rope.inv_freq": "RotaryEmbedding.reset_parameters() on 'rope'"}
    assert ("embed.weight", "head.weight") in r.tied


def _shard(sd, tmp_path, n=3):
    names = list(sd)
    wm = {}
    for i in range(n):
        part = {k: sd[k] for k in names[i::n]}
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        save_safetensors(part, tmp_path / fname)
        wm.update({k: fname for k in part})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": wm})
    )


def test_sharded_folder_and_index_file(tmp_path, sd):
    _shard(sd, tmp_path)
    for ckpt in (tmp_path, tmp_path / "model.safetensors.index.json"):
        with torch.device("meta"):
            model = TinyLM()
        r = load_checkpoint(model, ckpt)
        assert r.model is model
        _check(model, sd)


def test_folder_of_shards_without_index(tmp_path, sd):
    names = list(sd)
    save_safetensors({k: sd[k] for k in names[:3]}, tmp_path / "a.safetensors")
    save_safetensors({k: sd[k] for k in names[3:]}, tmp_path / "b.safetensors")
    _check(load_checkpoint(TinyLM, tmp_path).model, sd)


def test_index_pointing_at_wrong_shard(tmp_path, sd):
    _shard(sd, tmp_path)
    idx = tmp_path / "model.safetensors.index.json"
    data = json.loads(idx.read_text())
    k = next(iter(data["weight_map"]))
    other = sorted(set(data["weight_map"].values()) - {data["weight_map"][k]})[0]
    data["weight_map"][k] = other
    idx.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="does not hold it"):
        load_checkpoint(TinyLM, tmp_path)


@pytest.mark.parametrize("suffix", [".bin", ".pt"])
def test_torch_zip(tmp_path, sd, suffix):
    path = tmp_path / f"pytorch_model{suffix}"
    torch.save(sd, path)
    r = load_checkpoint(TinyLM, path)
    assert r.format == "torch"
    _check(r.model, sd)


def test_torch_zip_of_a_modules_state_dict(tmp_path):
    # what every training script saves: module.state_dict(), an OrderedDict carrying
    # ``_metadata`` (pickled as state, a BUILD opcode) -- the record check must read it
    torch.manual_seed(0)
    src = TinyLM()
    path = tmp_path / "model.pt"
    torch.save(src.state_dict(), path)
    r = load_checkpoint(TinyLM, path)
    assert r.format == "torch"
    sd = src.state_dict()
    sd.pop("head.weight")
    _check(r.model, sd)


def test_torch_zip_refuses_pickled_objects(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(1), "x": Evil()}, path)
    with pytest.raises(CheckpointError, match=r"evil\.pt: torch\.load\(mmap=True, weights_only"):
        load_checkpoint(Plain, path)


def test_torch_zip_not_a_state_dict(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"w": torch.ones(1), "epoch": 3}, path)
    with pytest.raises(CheckpointError, match="not a flat state dict: key 'epoch'"):
        load_checkpoint(Plain, path)


def test_dcp_folder(tmp_path, sd):
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(sd, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    r = load_checkpoint(TinyLM, tmp_path / "dcp")
    assert r.format == "dcp"
    _check(r.model, sd)


def test_entries_known_before_reading(tmp_path, sd):
    save_safetensors(sd, tmp_path / "m.safetensors")
    with open_checkpoint(tmp_path / "m.safetensors") as src:
        e = src.entries["embed.weight"]
        assert e.shape == (32, 8) and e.dtype == torch.float32 and e.nbytes == 32 * 8 * 4


def test_parameter_subclass_and_requires_grad_kept(tmp_path):
    with torch.device("meta"):
        m = WithSubclassParam()
    w_obj = m.w
    save_safetensors(
        {"w": torch.full((3, 3), 2.0), "frozen": torch.ones(3)}, tmp_path / "m.safetensors"
    )
    load_checkpoint(m, tmp_path / "m.safetensors", dtype="bf16")
    assert m.w is w_obj and type(m.w).__name__ == "MyParam" and m.w.tag == "keep-me"
    assert m.w.requires_grad and not m.frozen.requires_grad
    assert m.w.dtype == torch.bfloat16 and torch.equal(m.w.float(), torch.full((3, 3), 2.0))
    assert m.w.is_leaf


def test_unknown_checkpoint_path(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(Plain, tmp_path / "nope.safetensors")


def test_progress_line_without_tqdm(tmp_path, sd, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tqdm(name, *a, **k):
        if name == "tqdm":
            raise ImportError("no tqdm")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    save_safetensors(sd, tmp_path / "m.safetensors")
    load_checkpoint(TinyLM, tmp_path / "m.safetensors", progress=True)
    err = capsys.readouterr().err
    assert "metalint load:" in err and "(100.0%)" in err
    load_checkpoint(TinyLM, tmp_path / "m.safetensors")  # default: not a TTY, quiet
    assert capsys.readouterr().err == ""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_target(tmp_path, sd):
    save_safetensors(sd, tmp_path / "m.safetensors")
    r = load_checkpoint(TinyLM, tmp_path / "m.safetensors", device="cuda", dtype="bf16")
    m = r.model
    assert all(t.device.type == "cuda" for t in m.parameters())
    assert m.rope.inv_freq.device.type == "cuda"
    assert torch.equal(m.embed.weight.cpu(), sd["embed.weight"].to(torch.bfloat16))
    assert m.head.weight is m.embed.weight
