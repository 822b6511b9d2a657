"""Sharded loading: an fp32 safetensors checkpoint into a bf16 model sharded with FSDP2.

Usage::

    python bench/sharded_load_bench.py                 # ~200 MB fp32 checkpoint, N = 2 and 4
    python bench/sharded_load_bench.py --tiny          # a tiny model (smoke test)
    python bench/sharded_load_bench.py --out part.md   # also write the markdown section

For each N (gloo ranks on CPU, launched as ``metalint load --nproc N`` launches them), each
method runs in fresh rank processes, interleaved, ``--repeat`` times:

- ``metalint``: the model built on meta in bf16, ``fully_shard`` on every block and the root,
  ``load_checkpoint(model, model.safetensors)`` (the module dtype wins: fp32 -> bf16 cast);
- ``DCP``: the same sharded meta model, ``to_empty(device="cpu")``,
  ``get_model_state_dict`` + ``torch.distributed.checkpoint.load`` from the same checkpoint
  converted to DCP (``dcp.save(..., no_dist=True)`` of the safetensors tensors, as
  ``torch_save_to_dcp`` writes it) + ``set_model_state_dict``.

Per rank: bytes read (metalint's report; for DCP the stored chunks its ``FileSystemReader``
reads: every chunk the shard overlaps, here the whole tensor), peak anonymous RSS
(``RssAnon`` sampled from a thread every 2 ms) above the rank's baseline taken after the model
is built and sharded, divided by the rank's shard (bf16) plus the largest tensor (fp32, as
stored); wall time of the load alone. Then the metalint-loaded model's forward against an
unsharded bf16 copy loaded with ``load_state_dict``, and ``metalint probe --nproc 2 --shard
fsdp`` on a fixture whose init repeats across ranks and on a correct one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _net(d: int, layers: int):
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.up = nn.Linear(d, 4 * d)
            self.down = nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(self.norm(x))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.head = nn.Linear(d, d)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    return Net


# --------------------------------------------------------------------------------------------
# one rank


def _rank(cfg: dict) -> dict:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from metalint.probe.memory import PeakSampler, rss_anon

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    Net = _net(cfg["d"], cfg["layers"])
    with torch.device("meta"):
        model = Net().to(torch.bfloat16)
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    shard = sum(p.to_local().numel() * 2 for p in model.parameters())
    if cfg["method"] == "dcp":  # warm DCP's lazy imports outside the timed region
        import torch.distributed.checkpoint  # noqa: F401
        from torch.distributed.checkpoint.state_dict import get_model_state_dict  # noqa: F401
    else:
        import metalint.loader.core  # noqa: F401
    dist.barrier()
    base = rss_anon()
    with PeakSampler() as peak:
        t0 = time.perf_counter()
        nbytes = _load(cfg, model)
        wall = time.perf_counter() - t0
    out = {
        "rank": rank,
        "world": world,
        "bytes_read": nbytes,
        "peak": peak.peak - base,
        "shard": shard,
        "wall": wall,
    }
    if cfg.get("forward") and cfg["method"] == "metalint":
        out["forward"] = _forward(cfg, model, Net)
    dist.destroy_process_group()
    return out


def _load(cfg: dict, model) -> int:
    if cfg["method"] == "metalint":
        from metalint.loader import load_checkpoint

        return load_checkpoint(model, cfg["st"]).bytes_read
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    model.to_empty(device="cpu")
    sd = get_model_state_dict(model)
    dcp.load(sd, checkpoint_id=cfg["dcp"])
    set_model_state_dict(model, sd)
    # FileSystemReader reads every stored chunk the local shard overlaps, whole: here one
    # chunk per tensor (a converted checkpoint), so every tensor
    return sum(v.numel() * v.element_size() for v in _fp32_meta(cfg).values())


def _fp32_meta(cfg: dict) -> dict:
    import torch
    from safetensors import safe_open

    with safe_open(cfg["st"], framework="pt") as f:
        return {k: torch.empty(f.get_slice(k).get_shape(), device="meta") for k in f.keys()}


def _forward(cfg: dict, model, Net) -> dict:
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file

    torch.manual_seed(0)
    x = torch.randn(4, cfg["d"], dtype=torch.bfloat16)
    with torch.no_grad():
        y = model(x)
    if dist.get_rank() != 0:
        return {}
    ref = Net().to(torch.bfloat16)
    ref.load_state_dict(load_file(cfg["st"]))
    with torch.no_grad():
        want = ref(x)
    return {
        "equal": bool(torch.equal(y, want)),
        "max_abs_diff": float((y.float() - want.float()).abs().max()),
    }


# --------------------------------------------------------------------------------------------
# driver


def _launch(cfg: dict, nproc: int, timeout: float) -> list[dict]:
    from metalint.loader.distributed import free_port

    port = free_port()
    with tempfile.TemporaryDirectory() as out:
        procs = []
        for r in range(nproc):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(nproc))
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
            procs.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--rank", json.dumps(cfg), out],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        errs = []
        for p in procs:
            try:
                _, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            if p.returncode:
                errs.append(err.strip().splitlines()[-1] if err.strip() else str(p.returncode))
        if errs:
            raise RuntimeError(f"{cfg['method']} on {nproc} ranks failed: {errs[0]}")
        return [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(nproc)]


def _write_checkpoints(work: Path, d: int, layers: int) -> tuple[str, str, int, int]:
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file

    from metalint.loader import save_safetensors

    st, dc = work / "model.safetensors", work / "dcp"
    if not st.is_file():
        torch.manual_seed(0)
        save_safetensors(_net(d, layers)().state_dict(), st)
    sd = load_file(st)
    if not (dc / ".metadata").is_file():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save(sd, checkpoint_id=str(dc), no_dist=True)
    total = sum(v.numel() * 4 for v in sd.values())
    largest = max(v.numel() * 4 for v in sd.values())
    return str(st), str(dc), total, largest


def _probe() -> list[str]:
    targets = "tests/dist_models.py:GoodShardedInit,RepeatedShardInit"
    cmd = [sys.executable, "-m", "metalint", "probe", "--nproc", "2", "--shard", "fsdp", targets]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("probe ") or "MP01" in ln]
    if p.returncode not in (0, 1):
        err = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
        lines.append(err[-1] if err else "")
    return [f"`metalint {' '.join(cmd[3:])}` -> exit {p.returncode}", *lines]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", nargs=2, metavar=("CFG", "OUT"))
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--nprocs", default="2,4")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-probe", action="store_true")
    args = ap.parse_args()
    if args.rank:
        cfg, out = json.loads(args.rank[0]), args.rank[1]
        res = _rank(cfg)
        Path(out, f"rank{res['rank']}.json").write_text(json.dumps(res))
        return 0
    d, layers = (64, 2) if args.tiny else (1024, 6)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="sharded-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    st, dc, total, largest = _write_checkpoints(work, d, layers)
    for f in Path(st), *Path(dc).iterdir():  # page cache warm for both methods
        f.read_bytes()
    lines = [
        f"Model: {layers} blocks of LayerNorm + Linear({d}, {4 * d}) + Linear({4 * d}, {d}), "
        f"head Linear({d}, {d}); checkpoint fp32 safetensors {total / 2**20:.1f} MiB "
        f"(largest tensor {largest / 2**20:.1f} MiB), model bf16, FSDP2 on every block + root, "
        f"gloo on CPU, {args.repeat} interleaved runs per method (min wall, max peak).",
        "",
        "| N | method | max bytes read per rank (MiB) | ÷ (1/N ckpt + largest) | "
        "max peak RssAnon per rank (MiB) | ÷ (shard + largest) | wall (s) | wall ÷ DCP |",
        "|---|---|---|---|---|---|---|---|",
    ]
    forward = {}
    for n in [int(x) for x in args.nprocs.split(",")]:
        best: dict[str, dict] = {}
        for rep in range(args.repeat):
            for method in ("metalint", "dcp"):
                cfg = {"method": method, "st": st, "dcp": dc, "d": d, "layers": layers}
                cfg["forward"] = method == "metalint" and rep == 0
                ranks = _launch(cfg, n, 600)
                if cfg["forward"]:
                    forward[n] = ranks[0]["forward"]
                wall = max(r["wall"] for r in ranks)
                peak = max(r["peak"] / (r["shard"] + largest) for r in ranks)
                b = best.setdefault(method, {"wall": wall, "ratio": peak, "ranks": ranks})
                b["wall"], b["ratio"] = min(b["wall"], wall), max(b["ratio"], peak)
                b["peak"] = max(b.get("peak", 0), max(r["peak"] for r in ranks))
        for method, label in (
            ("metalint", "metalint load_checkpoint"),
            ("dcp", "DCP + set_model_state_dict"),
        ):
            b = best[method]
            read = max(r["bytes_read"] for r in b["ranks"])
            lines.append(
                f"| {n} | {label} | {read / 2**20:.1f} | {read / (total / n + largest):.2f} | "
                f"{b['peak'] / 2**20:.1f} | {b['ratio']:.2f} | {b['wall']:.2f} | "
                f"{b['wall'] / best['dcp']['wall']:.2f}x |"
            )
        print("\n".join(lines[-2:]), flush=True)
    for n, f in forward.items():
        lines += [
            "",
            f"Forward (N={n}, rank 0, bf16): metalint-loaded FSDP2 model == unsharded bf16 "
            f"copy (load_state_dict): {f['equal']} (max |diff| {f['max_abs_diff']:.3g})",
        ]
    if not args.no_probe:
        lines += ["", "Probe:", "", *[f"    {ln}" for ln in _probe()]]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
