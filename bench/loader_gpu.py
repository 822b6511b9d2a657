"""The streaming loader onto a CUDA device: peak device memory and wall time, side by side with
what a user would otherwise write.

    python bench/loader_gpu.py             # ~230 MB fp32 model (needs CUDA)
    python bench/loader_gpu.py --layers 2  # smaller

Methods, each from the same files, each on a model built on meta, ties kept:
- ``metalint safetensors`` / ``metalint torch zip``: ``load_checkpoint(Model, file,
  device="cuda")``, fp32 and with ``dtype="bf16"``; the torch zip is ``torch.save(
  model.state_dict())`` (an ``OrderedDict`` with ``_metadata``, as training scripts save it);
- ``load_file(cuda) + assign``: ``safetensors.torch.load_file(device="cuda")``, then
  ``load_state_dict(assign=True)`` and the tie re-made by hand.

Peak is ``torch.cuda.max_memory_allocated()`` over the model's own bytes; wall is the best of
``--repeat`` runs (the first CUDA call is made before timing). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_model_class(layers: int, width: int, vocab: int):
    from torch import nn

    class TiedLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, width)
            self.layers = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
            self.head = nn.Linear(width, vocab, bias=False)
            self.head.weight = self.emb.weight

    return TiedLM


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    sys.path.insert(0, ROOT)
    import torch
    from safetensors.torch import load_file, save_file

    from metalint.loader import load_checkpoint

    if not torch.cuda.is_available():
        print("needs CUDA: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    Model = make_model_class(a.layers, a.width, a.vocab)
    torch.zeros(1, device="cuda")  # the CUDA context, outside every timing
    torch.manual_seed(0)
    ref = Model()
    sd = ref.state_dict()
    tmp = tempfile.mkdtemp()
    st_path, pt_path = f"{tmp}/m.safetensors", f"{tmp}/m.pt"
    save_file({k: v.contiguous() for k, v in sd.items() if k != "head.weight"}, st_path)
    torch.save(ref.state_dict(), pt_path)

    def baseline(dtype):
        with torch.device("meta"):
            m = Model()
        state = load_file(st_path, device="cuda")
        if dtype is not None:
            state = {k: v.to(dtype) for k, v in state.items()}
        state["head.weight"] = state["emb.weight"]
        m.load_state_dict(state, assign=True)
        m.head.weight = m.emb.weight
        return m

    def metalint(path, dtype):
        kw = {"dtype": "bf16"} if dtype is not None else {}
        return load_checkpoint(Model, path, device="cuda", **kw).model

    methods = [
        ("load_file(cuda) + assign", lambda: baseline(None), None),
        ("metalint safetensors", lambda: metalint(st_path, None), None),
        ("metalint torch zip", lambda: metalint(pt_path, None), None),
        ("load_file(cuda) + assign, bf16", lambda: baseline(torch.bfloat16), torch.bfloat16),
        ("metalint safetensors, bf16", lambda: metalint(st_path, torch.bfloat16), torch.bfloat16),
        ("metalint torch zip, bf16", lambda: metalint(pt_path, torch.bfloat16), torch.bfloat16),
    ]
    rows = []
    for name, run, dtype in methods:
        best, peak = float("inf"), 0.0
        for _ in range(a.repeat):
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            m = run()
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
            size = sum(t.numel() * t.element_size() for t in m.parameters())
            peak = max(peak, torch.cuda.max_memory_allocated() / size)
            got = m.state_dict()
            assert m.head.weight is m.emb.weight, name
            assert all(t.device.type == "cuda" for t in got.values()), name
            for k, v in sd.items():
                assert torch.equal(got[k].cpu(), v.to(dtype or v.dtype)), (name, k)
            del m, got
        rows.append((name, best, peak))
    base = {None: rows[0][1], torch.bfloat16: rows[3][1]}
    print(
        f"Device: {torch.cuda.get_device_name()}, torch {torch.__version__}; model "
        f"{sum(v.numel() * v.element_size() for k, v in sd.items() if k != 'head.weight') / 1e6:.0f} MB fp32, "
        f"best of {a.repeat}\n"
    )
    print("| method | wall | wall / load_file(cuda) + assign | peak CUDA memory / model |")
    print("|---|---:|---:|---:|")
    for (name, best, peak), (_, _, dtype) in zip(rows, methods):
        print(f"| {name} | {best:.3f} s | {best / base[dtype]:.2f} | {peak:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
