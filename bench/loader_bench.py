"""Peak memory and wall time of loading an fp32 checkpoint into a bf16 model, side by side.

Usage::

    python bench/loader_bench.py                      # ~450 MB fp32 checkpoint -> bf16 model
    python bench/loader_bench.py --out bench.md       # also write the markdown table
    python bench/loader_bench.py --tiny               # a tiny model, for the smoke test
    python bench/loader_bench.py --accelerate-path DIR  # where `accelerate` is importable from
    python bench/loader_bench.py --repeat 5           # min wall / max peak of 5 fresh runs each

Methods (each loads the same fp32 checkpoint into the same model in bf16):

- ``metalint``: ``metalint.loader.load_checkpoint(factory, model.safetensors, dtype="bf16")``
  (the model is built on meta by the loader);
- ``eager torch.load``: model built eagerly in bf16, ``torch.load(model.bin)`` +
  ``load_state_dict`` (which casts while copying);
- ``eager safetensors.load_file``: same with ``safetensors.torch.load_file``;
- ``meta + mmap + assign``: model built on meta, ``torch.load(mmap=True, weights_only=True)``,
  ``load_state_dict(assign=True)``, then ``.to(torch.bfloat16)`` (assign takes the
  checkpoint's fp32) and the tie re-made;
- ``accelerate``: ``init_empty_weights()`` + ``accelerate.utils.load_checkpoint_in_model(...,
  device_map={"": "cpu"}, dtype=torch.bfloat16)`` (with ``device_map=None`` accelerate 1.x
  hands a meta model to ``set_model_state_dict``, which needs a process group), if
  ``accelerate`` imports (``--accelerate-path``: a folder made with ``pip install --target DIR
  --no-deps``, so the project's venv is not touched; ``bench/run.py``'s ``accelerate_dir``
  makes it, pinned, with what accelerate imports);
  skipped with a note otherwise.

Measurement: memory is *anonymous* RSS (``RssAnon`` in ``/proc/<pid>/status``), sampled by a
thread every 2 ms, never ``ru_maxrss``/``VmHWM`` (they count the checkpoint's file pages that
mmap-based loaders map) or tracemalloc. One fresh "zygote" subprocess imports torch and
safetensors and warms up lazy imports (building a 2x2 ``Embedding``/``Linear``/``LayerNorm``
on meta pulls in ``torch._dynamo``); it allocates nothing large itself: it ``fork()``-s a child
that writes the checkpoint, then one fresh child per method, in turn. Each child
measures its own baseline (RssAnon right after the fork, plus its method's own imports), runs
the method once, and reports the peak above that baseline, divided by the final model size
(unique parameter and buffer bytes after loading), and the wall time; the wall ratio is
against ``meta + mmap + assign``. The checkpoint files are in the page cache (just written),
so wall time is mostly copy/cast work, not disk.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

METHODS = (
    "metalint",
    "eager torch.load",
    "eager safetensors.load_file",
    "meta + mmap + assign",
    "accelerate",
)
BASE = "meta + mmap + assign"


# ----------------------------------------------------------------------------- the model


def make_factory(tiny: bool):
    import torch
    from torch import nn

    d, vocab, layers = (64, 128, 3) if tiny else (4096, 4096, 6)

    class BenchModel(nn.Module):
        """A 4096x4096 embedding tied to the head, a stack of 4096x4096 Linear layers, a norm."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.embed.weight

    del torch
    return BenchModel


# ----------------------------------------------------------------------------- memory


def rss_anon_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise RuntimeError("no RssAnon in /proc/self/status")


class Sampler(threading.Thread):
    def __init__(self, interval: float = 0.002):
        super().__init__(daemon=True)
        self.interval = interval
        self.peak = rss_anon_kb()
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            v = rss_anon_kb()
            self.peak = max(self.peak, v)
            time.sleep(self.interval)

    def stop(self) -> int:
        self._halt.set()
        self.join()
        v = rss_anon_kb()
        return max(self.peak, v)


# ----------------------------------------------------------------------------- methods


def run_method(method: str, factory, ckpt_dir: str, accelerate_path: str | None):
    import torch

    st_path = os.path.join(ckpt_dir, "model.safetensors")
    bin_path = os.path.join(ckpt_dir, "pytorch_model.bin")
    bf16 = torch.bfloat16

    if method == "accelerate":
        if accelerate_path:
            sys.path.insert(0, accelerate_path)
        try:
            from accelerate import init_empty_weights
            from accelerate.utils import load_checkpoint_in_model
        except Exception as exc:  # not installed / broken
            return None, f"accelerate not importable ({type(exc).__name__}: {exc})"
    if method == "metalint":
        sys.path.insert(0, ROOT)
        from metalint.loader import load_checkpoint
    if method == "eager safetensors.load_file":
        from safetensors.torch import load_file

    base = rss_anon_kb()
    sampler = Sampler()
    sampler.start()
    t0 = time.perf_counter()
    if method == "metalint":
        model = load_checkpoint(factory, st_path, dtype="bf16").model
    elif method == "eager torch.load":
        torch.set_default_dtype(bf16)
        model = factory()
        torch.set_default_dtype(torch.float32)
        sd = torch.load(bin_path, map_location="cpu", weights_only=True)
        model.load_state_dict(sd)
        del sd
    elif method == "eager safetensors.load_file":
        torch.set_default_dtype(bf16)
        model = factory()
        torch.set_default_dtype(torch.float32)
        sd = load_file(st_path)
        model.load_state_dict(sd, strict=False)  # tied head.weight is saved once
        del sd
    elif method == "meta + mmap + assign":
        with torch.device("meta"):
            model = factory()
        sd = torch.load(bin_path, map_location="cpu", mmap=True, weights_only=True)
        model.load_state_dict(sd, assign=True, strict=False)
        del sd
        model.to(bf16)
        model.head.weight = model.embed.weight
    elif method == "accelerate":
        with init_empty_weights():
            model = factory()
        load_checkpoint_in_model(model, st_path, device_map={"": "cpu"}, dtype=bf16)
        model.head.weight = model.embed.weight
    else:
        raise ValueError(method)
    wall = time.perf_counter() - t0
    peak = sampler.stop()

    seen, final, largest = set(), 0, 0
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) in seen:
            continue
        seen.add(id(t))
        assert t.device.type == "cpu", f"{method}: tensor left on {t.device}"
        assert t.dtype == bf16 or not t.is_floating_point(), f"{method}: {t.dtype}"
        n = t.numel() * t.element_size()
        final += n
        largest = max(largest, n)
    assert model.head.weight is model.embed.weight
    # spot check values against the checkpoint
    from safetensors import safe_open

    with safe_open(st_path, framework="pt") as f:
        ref = f.get_tensor("layers.0.weight").to(bf16)
    assert torch.equal(model.layers[0].weight.detach(), ref), f"{method}: wrong values"
    return {
        "peak_kb": peak - base,
        "final_bytes": final,
        "largest_bytes": largest,
        "wall_s": wall,
    }, None


def zygote(args) -> None:
    """Import torch, warm up, then fork one fresh child per method; print JSON lines."""
    import safetensors.torch  # noqa: F401
    import torch
    from torch import nn

    with torch.device("meta"):
        nn.Embedding(2, 2), nn.Linear(2, 2), nn.LayerNorm(2)
    factory = make_factory(args.tiny)
    pid = os.fork()
    if pid == 0:  # the checkpoint is written by a child, so the zygote stays small
        try:
            make_checkpoint(args)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise SystemExit("writing the checkpoint failed")
    for method in [m for _ in range(args.repeat) for m in args.methods]:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            os.close(r)
            try:
                res, note = run_method(method, factory, args.ckpt, args.accelerate_path)
                payload = {"method": method, "result": res, "note": note}
            except Exception as exc:
                payload = {
                    "method": method,
                    "result": None,
                    "note": f"failed: {type(exc).__name__}: {exc}",
                    "trace": traceback.format_exc(),
                }
            os.write(w, json.dumps(payload).encode())
            os.close(w)
            os._exit(0)
        os.close(w)
        chunks = []
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(r)
        os.waitpid(pid, 0)
        data = b"".join(chunks)
        print(
            data.decode()
            if data
            else json.dumps({"method": method, "result": None, "note": "child died"}),
            flush=True,
        )


def make_checkpoint(args) -> None:
    import torch

    sys.path.insert(0, ROOT)
    from metalint.loader import save_safetensors

    torch.manual_seed(0)
    model = make_factory(args.tiny)()
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    torch.save(sd, os.path.join(args.ckpt, "pytorch_model.bin"))
    sd.pop("head.weight")  # tied: safetensors cannot store shared tensors twice
    save_safetensors(sd, os.path.join(args.ckpt, "model.safetensors"), metadata={"format": "pt"})


# ----------------------------------------------------------------------------- driver


def table(results: list[dict], size_note: str) -> str:
    base = next((x["result"] for x in results if x["method"] == BASE and x["result"]), None)
    lines = [
        size_note,
        "",
        "| method | peak RssAnon above baseline (MB) | ÷ final model size | wall (s) "
        "| wall ÷ mmap+assign |",
        "|---|---:|---:|---:|---:|",
    ]
    notes = []
    for x in results:
        r = x["result"]
        if r is None:
            lines.append(f"| {x['method']} | – | – | – | – |")
            notes.append(f"- {x['method']}: {x['note']}")
            continue
        mb = r["peak_kb"] / 1024
        ratio = r["peak_kb"] * 1024 / r["final_bytes"]
        wr = f"{r['wall_s'] / base['wall_s']:.2f}" if base else "–"
        lines.append(f"| {x['method']} | {mb:.1f} | {ratio:.2f}x | {r['wall_s']:.2f} | {wr} |")
    ml = next((x["result"] for x in results if x["method"] == "metalint" and x["result"]), None)
    if ml:
        bound = 1.05 * ml["final_bytes"] + ml["largest_bytes"]
        ok = ml["peak_kb"] * 1024 <= bound
        lines.append("")
        lines.append(
            f"metalint bound 1.05 x final + largest tensor = {bound / 2**20:.1f} MB: "
            f"{'met' if ok else 'NOT met'} ({ml['peak_kb'] / 1024:.1f} MB)"
            + (f"; wall vs mmap+assign: {ml['wall_s'] / base['wall_s']:.2f}x" if base else "")
        )
    if notes:
        lines.append("")
        lines.extend(notes)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny model (smoke test)")
    p.add_argument("--out", help="also write the markdown table here")
    p.add_argument(
        "--methods",
        default=",".join(METHODS),
        help="comma-separated subset of: " + ", ".join(METHODS),
    )
    p.add_argument(
        "--accelerate-path",
        default=os.environ.get("METALINT_BENCH_ACCELERATE"),
        help="folder to put on sys.path for the accelerate method",
    )
    p.add_argument("--workdir", help="where to write the checkpoint (default: a temp dir)")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each method N times (fresh process each, interleaved); report the "
        "max peak and the min wall time (for noisy, shared machines)",
    )
    p.add_argument("--_role", choices=("zygote",), help=argparse.SUPPRESS)
    p.add_argument("--ckpt", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in args.methods:
        if m not in METHODS:
            p.error(f"unknown method {m!r}")
    if args._role == "zygote":
        zygote(args)
        return 0

    with tempfile.TemporaryDirectory(dir=args.workdir) as d:
        common = [sys.executable, os.path.abspath(__file__), "--ckpt", d]
        if args.tiny:
            common.append("--tiny")
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        cmd = common + [
            "--_role",
            "zygote",
            "--methods",
            ",".join(args.methods),
            "--repeat",
            str(args.repeat),
        ]
        if args.accelerate_path:
            cmd += ["--accelerate-path", args.accelerate_path]
        out = subprocess.run(cmd, check=True, env=env, stdout=subprocess.PIPE, text=True).stdout
        size = os.path.getsize(os.path.join(d, "model.safetensors"))
    runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for x in runs:
        if "trace" in x:
            sys.stderr.write(x["trace"])
    results = []
    for method in args.methods:
        mine = [x for x in runs if x["method"] == method]
        ok = [x["result"] for x in mine if x["result"]]
        if len(ok) < len(mine) or not ok:
            results.append(next(x for x in mine if not x["result"]))
            continue
        best = dict(ok[0])
        best["wall_s"] = min(r["wall_s"] for r in ok)
        best["peak_kb"] = max(r["peak_kb"] for r in ok)
        results.append({"method": method, "result": best, "note": None})
    from importlib.metadata import version

    note = (
        f"fp32 safetensors checkpoint of {size / 2**20:.1f} MB -> bf16 model "
        f"({'tiny' if args.tiny else 'full'} bench, torch {version('torch')}, "
        f"safetensors {version('safetensors')}"
        + (
            f"; {args.repeat} runs of each method, each in its own fresh process, "
            "methods interleaved: peak = max, wall = min"
            if args.repeat > 1
            else ""
        )
        + ")"
    )
    text = table(results, note)
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    failed = [x for x in results if x["result"] is None and x["method"] != "accelerate"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
