"""False "differ" verdicts and power of the probe's random-tensor comparison, by size.

For each law and size n, draws ``--pairs`` pairs of tensors from the same law and counts how many
the comparison calls different (false MP002: a false confirmation of a check finding); then pairs
(law, other law) a user would care about and counts how many are caught. Before (the verdict up
to this commit, kept below verbatim as ``_before``) and after (``compare._compare_distributions``)
side by side, in one run; "after, no copy" is the verdict when the eager copy is not kept
(``keep_copy=False``: moments, and the range from ``RANGE_MIN`` elements on).

    python bench/probe_stats.py [--pairs 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from metalint.probe import compare as C

SIZES = (8, 16, 32, 64, 256, 4096)


def _before(eager, deferred, deferred_tensor):
    """The verdict before this change (mean 6 SE, std 6 sqrt(2/n), range factor 2 from n=16)."""
    n = max(eager.numel - eager.nonfinite, 1)
    if n == 1:
        return None
    span = eager.max - eager.min
    if deferred_tensor is not None and span > 0 and n >= 1000:
        lo, hi = eager.min - 0.25 * span, eager.max + 0.25 * span
        outliers, inner = C._inside_stats(deferred_tensor, lo, hi)
        if 0 < outliers <= max(2, n // 10000) and inner is not None:
            deferred = inner
    s1, s2 = eager.std, deferred.std
    why = []
    mean_tol = 6 * math.sqrt((s1 * s1 + s2 * s2) / n) + 1e-6 * max(abs(eager.mean), 1e-3)
    if abs(eager.mean - deferred.mean) > mean_tol:
        why.append("mean")
    std_tol = max(s1, s2) * (6 * math.sqrt(2.0 / n) + 0.02) + 1e-12
    if abs(s1 - s2) > std_tol:
        why.append("std")
    span1, span2 = eager.max - eager.min, deferred.max - deferred.min
    if n >= 16 and span1 > 0 and not (0.5 * span1 <= span2 <= 2.0 * span1):
        why.append("range")
    return why or None


LAWS = {
    "normal N(0, 0.1)": lambda n: torch.empty(n).normal_(0, 0.1),
    "uniform(-0.1, 0.1)": lambda n: torch.empty(n).uniform_(-0.1, 0.1),
    "trunc_normal_(0, 1, -2, 2)": lambda n: torch.nn.init.trunc_normal_(
        torch.empty(n), 0, 1, -2, 2
    ),
    "log(uniform_(0.01, 16))": lambda n: torch.empty(n).uniform_(0.01, 16).log(),
    "1 + N(0, 0.01)": lambda n: 1 + 0.01 * torch.randn(n),
}


def _garbage(n):
    # finite float32 bit patterns, as uninitialised memory may hold
    x = torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32).view(torch.float32)
    return torch.where(torch.isfinite(x), x, torch.zeros(()))


BASE = LAWS["normal N(0, 0.1)"]
OTHERS = {
    "std x2": lambda n: torch.empty(n).normal_(0, 0.2),
    "std x0.5": lambda n: torch.empty(n).normal_(0, 0.05),
    "mean + 1 std": lambda n: torch.empty(n).normal_(0.1, 0.1),
    "uniform, equal std": lambda n: torch.empty(n).uniform_(-0.1 * 3**0.5, 0.1 * 3**0.5),
    "all zeros": lambda n: torch.zeros(n),
    "all ones": lambda n: torch.ones(n),
    "garbage bits": _garbage,
}


def _verdicts(a, b):
    ea, ea_nc, eb = C.tensor_stats(a), C.tensor_stats(a, keep_copy=False), C.tensor_stats(b)
    for st in (ea, ea_nc, eb):
        st.random = True
    return (
        _before(ea, eb, b) is not None,
        C.compare(ea, eb, b) is not None,
        C.compare(ea_nc, eb, b) is not None,
    )


def _count(make_a, make_b, n, pairs):
    hits = [0, 0, 0]
    for _ in range(pairs):
        for i, v in enumerate(_verdicts(make_a(n), make_b(n))):
            hits[i] += v
    return hits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    p = args.pairs
    print(f"{p} pairs per cell; cell = before / after / after, no copy\n")
    head = "| " + " | ".join(f"n={n}" for n in SIZES) + " |"
    print("False 'differ' on two draws of the same law (lower is better):\n")
    print("| law " + head)
    print("|---" + "|---:" * len(SIZES) + "|")
    for name, law in LAWS.items():
        cells = ["{} / {} / {}".format(*_count(law, law, n, p)) for n in SIZES]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nCaught: N(0, 0.1) vs another law (higher is better):\n")
    print("| other " + head)
    print("|---" + "|---:" * len(SIZES) + "|")
    for name, other in OTHERS.items():
        cells = ["{} / {} / {}".format(*_count(BASE, other, n, p)) for n in SIZES]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\n{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
