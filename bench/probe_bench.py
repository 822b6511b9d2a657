"""Benchmark the probe's memory: peak anonymous RSS over eager model size, and what the meta
build allocates.

    python bench/probe_bench.py            # ~300 MB model (18 x Linear(2048, 2048), fp32)
    python bench/probe_bench.py --tiny     # smoke test (tests/test_probe_bench_smoke.py)

Memory is ``RssAnon`` from ``/proc/self/status``, sampled every 2 ms from a thread (not
``ru_maxrss``/``VmHWM``, which count file-backed pages and cannot be reset). The measurement
runs in a fresh child process so nothing else inflates it. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_model(layers: int, width: int):
    from torch import nn

    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


def child(layers: int, width: int, device: str) -> dict:
    sys.path.insert(0, ROOT)
    import torch

    from metalint.probe.build import probe
    from metalint.probe.memory import PeakSampler, fixed_mmap_threshold, rss_anon

    fixed_mmap_threshold()  # as the probe's worker process does
    torch.set_num_threads(int(os.environ.get("METALINT_PROBE_THREADS", "1")))  # likewise
    make = lambda: build_model(layers, width)  # noqa: E731
    # warm up (one-time costs: dispatcher, thread pools, the probe's own imports)
    probe(lambda: build_model(2, 64), device=device, label="warmup")
    gc.collect()
    warm_base = rss_anon()
    # eager model size and the eager build's own peak, for reference
    base = rss_anon()
    with PeakSampler() as eager_peak:
        m = make()
        size = sum(t.numel() * t.element_size() for t in list(m.parameters()) + list(m.buffers()))
        del m
        gc.collect()
    eager_delta = eager_peak.peak - base
    base = rss_anon()
    t0 = time.perf_counter()
    with PeakSampler() as peak:
        res = probe(make, device=device, init="auto", label="bench")
    seconds = time.perf_counter() - t0
    return {
        "layers": layers,
        "width": width,
        "device": res.device,
        "model_bytes": size,
        "eager_build_peak_delta_bytes": eager_delta,
        "probe_peak_delta_bytes": peak.peak - base,
        "probe_peak_over_model": round((peak.peak - base) / size, 3),
        "meta_build_rss_delta_bytes": res.meta_alloc_bytes,
        "meta_build_escape_bytes": res.escape_bytes,
        "verdict": res.verdict(),
        "findings": len(res.findings),
        "probe_seconds": round(seconds, 2),
        "rss_anon_after_warmup_bytes": warm_base,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="2 x Linear(64, 64): a smoke test")
    ap.add_argument("--layers", type=int, default=18)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.tiny:
        a.layers, a.width = 2, 64
    if a.child:
        print(json.dumps(child(a.layers, a.width, a.device)))
        return 0
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--layers",
        str(a.layers),
        "--width",
        str(a.width),
        "--device",
        a.device,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        return out.returncode
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
