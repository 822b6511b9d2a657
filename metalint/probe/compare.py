"""Per-tensor statistics, poisoning, and the eager-vs-deferred comparison.

The probe keeps *statistics*, not copies, of the eager model (so its peak memory stays near one
model): shape, dtype, requires_grad, device, count of non-finite values, mean/std/min/max (in
float64, computed in chunks so no full-size temporary is made), a blake2b hash of the bytes,
and a full copy only of small tensors (``<= SMALL`` elements).

Deterministic tensors (no random op contributed to them, see :mod:`.attribute`, and the same
value when eager construction runs again under another seed) are compared exactly: hash equality on the same device type, else ``allclose``
(rtol 1e-5) on the kept copy or on the statistics. Random tensors are compared statistically (see
``_compare_distributions``): mean, std, and the whole law by a two-sample Kolmogorov-Smirnov
test where the eager copy is kept, the range otherwise. A tensor eager construction left
uninitialised (``Stats.uninitialised``: allocated without values, written by nothing) has no
value to compare: only its shape, dtype, requires_grad and device are.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
from dataclasses import dataclass, field

import torch

SMALL = 1 << 16  # elements: keep a full CPU copy of tensors up to this size
CHUNK = 1 << 18  # elements per chunk for statistics (bounded temporaries)
INT_POISON = -0x5A5A5A5A


@dataclass
class Stats:
    shape: tuple[int, ...]
    dtype: str
    requires_grad: bool
    device: str
    numel: int
    nonfinite: int = 0
    nan: int = 0
    mean: float = 0.0
    std: float = 0.0
    min: float = 0.0
    max: float = 0.0
    digest: str = ""
    random: bool | None = None
    #: eager construction allocated it without values and nothing wrote it (``torch.empty``
    #: that no init ran on): garbage eagerly as after ``to_empty()``, no value to lose
    uninitialised: bool = False
    copy: torch.Tensor | None = field(default=None, repr=False)

    @property
    def constant(self) -> bool:
        return self.numel > 0 and self.min == self.max and self.nonfinite == 0

    @property
    def deterministic(self) -> bool:
        # from how the value was made, never from its values: a random 1-element tensor (or a
        # random draw that happens to be constant) has min == max and is still random
        return not self.random


def _is_float(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _hash(t: torch.Tensor) -> str:
    h = hashlib.blake2b(digest_size=16)
    flat = t.detach().reshape(-1)
    for i in range(0, flat.numel(), CHUNK):
        part = flat[i : i + CHUNK]
        if part.device.type != "cpu":
            part = part.cpu()
        part = part.contiguous()
        n = part.numel() * part.element_size()
        if n:
            h.update(memoryview((ctypes.c_char * n).from_address(part.data_ptr())))
    return h.hexdigest()


def tensor_stats(t: torch.Tensor, *, keep_copy: bool = True) -> Stats:
    requires_grad = bool(t.requires_grad)  # of the tensor itself: ``detach()`` clears it
    t = t.detach()
    st = Stats(
        shape=tuple(t.shape),
        dtype=str(t.dtype).replace("torch.", ""),
        requires_grad=requires_grad,
        device=t.device.type,
        numel=t.numel(),
    )
    if t.device.type == "meta" or t.numel() == 0:
        return st
    if t.is_complex():
        t = torch.view_as_real(t)
    flat = t.reshape(-1)
    s = s2 = 0.0
    lo, hi = math.inf, -math.inf
    nonfinite = nan = 0
    finite_n = 0
    for i in range(0, flat.numel(), CHUNK):
        part = flat[i : i + CHUNK]
        if part.dtype == torch.bool:
            part = part.to(torch.uint8)
        if _is_float(part):
            part = part.to(torch.float64)
            fin = torch.isfinite(part)
            nf = int((~fin).sum())
            if nf:
                nonfinite += nf
                nan += int(torch.isnan(part).sum())
                part = part[fin]
        else:
            part = part.to(torch.float64)
        if part.numel():
            finite_n += part.numel()
            s += float(part.sum())
            s2 += float((part * part).sum())
            lo = min(lo, float(part.min()))
            hi = max(hi, float(part.max()))
    st.nonfinite, st.nan = nonfinite, nan
    if finite_n:
        st.mean = s / finite_n
        st.std = math.sqrt(max(s2 / finite_n - st.mean * st.mean, 0.0))
        st.min, st.max = lo, hi
    else:
        st.min = st.max = math.nan
    st.digest = _hash(t)
    if keep_copy and st.numel <= SMALL:
        st.copy = t.to("cpu", copy=True)
    return st


def float_poison(dtype: torch.dtype, eager: Stats | None) -> float:
    """NaN, unless eager construction already holds NaN there (whisper's ``sinusoids(n_ctx,
    2)`` divides by ``channels // 2 - 1 == 0``): then the dtype's largest finite value, so
    that a tensor nothing re-initialises still differs from eager."""
    if eager is not None and eager.nan and not dtype.is_complex:
        return torch.finfo(dtype).max
    return math.nan


def poison_(t: torch.Tensor, eager: Stats | None) -> None:
    """Fill ``t`` so that a tensor that nothing re-initialises is certain to differ from eager."""
    with torch.no_grad():
        if t.numel() == 0 or t.device.type == "meta":
            return
        if _is_float(t):
            t.fill_(float_poison(t.dtype, eager))
        elif t.dtype == torch.bool:
            if eager is not None and eager.copy is not None and tuple(t.shape) == eager.shape:
                t.copy_(~eager.copy.to(torch.bool))
            else:
                t.fill_(not (eager is not None and eager.mean >= 0.5))
        else:
            info = torch.iinfo(t.dtype)
            value = INT_POISON if info.min <= INT_POISON else info.min
            if eager is not None and eager.numel and eager.min == eager.max == value:
                value = info.max
            t.fill_(value)


@dataclass
class Difference:
    code: str  # MP001, MP002, MP004, MP008, MP003
    detail: str
    never_reinit: bool = False


def _inside_stats(t: torch.Tensor, lo: float, hi: float) -> tuple[int, Stats | None]:
    """Count values outside [lo, hi]; the statistics of the values inside (chunked)."""
    flat = t.detach().reshape(-1)
    outside = 0
    s = s2 = 0.0
    n = 0
    mn, mx = math.inf, -math.inf
    for i in range(0, flat.numel(), CHUNK):
        part = flat[i : i + CHUNK].to(torch.float64)
        keep = (part >= lo) & (part <= hi)
        outside += int(part.numel() - keep.sum())
        part = part[keep]
        if part.numel():
            n += part.numel()
            s += float(part.sum())
            s2 += float((part * part).sum())
            mn = min(mn, float(part.min()))
            mx = max(mx, float(part.max()))
    if not n:
        return outside, None
    mean = s / n
    st = Stats(
        (n,),
        "float64",
        False,
        t.device.type,
        n,
        mean=mean,
        std=math.sqrt(max(s2 / n - mean * mean, 0.0)),
        min=mn,
        max=mx,
    )
    return outside, st


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def describe_stats(st: Stats) -> str:
    if st.numel == 0:
        return "empty"
    if st.numel and st.nonfinite == st.numel:
        return "all NaN" if st.nan == st.numel else "all non-finite"
    if st.constant:
        return f"all {_fmt(st.min)}"
    return f"mean {_fmt(st.mean)} std {_fmt(st.std)} range [{_fmt(st.min)}, {_fmt(st.max)}]"


def compare(
    eager: Stats,
    deferred: Stats,
    deferred_tensor: torch.Tensor | None = None,
    poison_hit: bool = False,
) -> Difference | None:
    """``None`` when ``deferred`` matches ``eager``; else what differs."""
    if deferred.device == "meta":
        return Difference("MP003", "still on meta after init")
    meta = []
    if eager.shape != deferred.shape:
        meta.append(f"shape {list(eager.shape)} -> {list(deferred.shape)}")
    if eager.dtype != deferred.dtype:
        meta.append(f"dtype {eager.dtype} -> {deferred.dtype}")
    if eager.requires_grad != deferred.requires_grad:
        meta.append(f"requires_grad {eager.requires_grad} -> {deferred.requires_grad}")
    if meta:
        return Difference("MP008", "; ".join(meta))
    if eager.numel == 0 or eager.uninitialised:
        return None  # nothing to compare: eager holds no value either (uninitialised memory)
    code = "MP001" if eager.deterministic else "MP002"
    if poison_hit:
        return Difference(
            code,
            f"never re-initialised: eager {describe_stats(eager)}, deferred still holds "
            f"the poison ({describe_stats(deferred)})",
            never_reinit=True,
        )
    if eager.nonfinite == 0 and deferred.nonfinite:
        return Difference(
            "MP004",
            f"eager finite ({describe_stats(eager)}), deferred has "
            f"{deferred.nonfinite} non-finite of {deferred.numel}",
        )
    if eager.deterministic:
        return _compare_values(eager, deferred, deferred_tensor)
    return _compare_distributions(eager, deferred, deferred_tensor)


def _compare_values(
    eager: Stats, deferred: Stats, deferred_tensor: torch.Tensor | None
) -> Difference | None:
    """A deterministic tensor: the same values (exact; ``allclose`` on another device)."""
    if eager.digest == deferred.digest:
        return None
    differ = Difference(
        "MP001", f"eager {describe_stats(eager)}, deferred {describe_stats(deferred)}"
    )
    if eager.copy is not None and deferred_tensor is not None:
        a = eager.copy
        b = deferred_tensor.detach().to("cpu")
        if a.dtype == b.dtype and _is_float(a):
            if torch.allclose(b, a, rtol=1e-5, atol=1e-7, equal_nan=True):
                return None
            err = float(
                (b.to(torch.float64) - a.to(torch.float64)).abs().nan_to_num(math.inf).max()
            )
            return Difference(
                "MP001",
                f"eager {describe_stats(eager)}, deferred {describe_stats(deferred)} "
                f"(max |diff| {_fmt(err)})",
            )
        return None if torch.equal(a, b) else differ
    # large deterministic tensor on another device: tight statistics
    if (
        all(
            math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6)
            for x, y in (
                (eager.mean, deferred.mean),
                (eager.std, deferred.std),
                (eager.min, deferred.min),
                (eager.max, deferred.max),
            )
        )
        and eager.device != deferred.device
    ):
        return None
    return differ


RANGE_MIN = 1024  # elements: below, the range of a sample is too noisy to compare
KS_ALPHA = 1e-6  # level of the two-sample Kolmogorov-Smirnov test of a random tensor


def _sorted_finite(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    flat = t.reshape(-1).to("cpu", torch.float64)
    return flat[torch.isfinite(flat)].sort().values


def ks_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = _sorted_finite(a), _sorted_finite(b)
    if not a.numel() or not b.numel():
        return 1.0
    at = torch.cat([a, b])
    fa = torch.searchsorted(a, at, right=True).to(torch.float64) / a.numel()
    fb = torch.searchsorted(b, at, right=True).to(torch.float64) / b.numel()
    return float((fa - fb).abs().max())


def ks_critical(n: int, m: int, alpha: float = KS_ALPHA) -> float:
    """The distance two samples of one law exceed with probability about ``alpha``."""
    return math.sqrt(-0.5 * math.log(alpha / 2)) * math.sqrt((n + m) / (n * m))


def _law_or_range(eager: Stats, deferred: Stats, deferred_tensor, n: int, both: bool) -> list:
    """A two-sample Kolmogorov-Smirnov test when both samples are at hand and small, else
    the range from ``RANGE_MIN`` elements on: what differs, if either does."""
    if both and n <= SMALL:
        d = ks_distance(eager.copy, deferred_tensor)
        if d > ks_critical(n, max(deferred.numel - deferred.nonfinite, 1)):
            return [f"law (KS distance {d:.3g})"]
    elif n >= RANGE_MIN:
        span1, span2 = eager.max - eager.min, deferred.max - deferred.min
        if span1 > 0 and not (0.5 * span1 <= span2 <= 2.0 * span1):
            return ["range"]
    return []


def _compare_distributions(
    eager: Stats, deferred: Stats, deferred_tensor: torch.Tensor | None
) -> Difference | None:
    """A random tensor: the same law, tested so that two draws of one law are called different
    with probability well under 1e-4 at every size (``bench/probe_stats.py`` measures it).

    - mean within 6 standard errors, widened for small ``n`` (the estimated std is noisy);
    - std: ``log(max/min)`` of the two stds within ``6 sqrt(2 / (n - 1)) + 0.02`` (a constant or
      wrongly scaled tensor fails it at any size);
    - the whole law, when both samples are at hand (``n <= SMALL``: the eager copy is kept): a
      two-sample Kolmogorov-Smirnov test at level ``KS_ALPHA``, in place of the range;
    - else, from ``RANGE_MIN`` elements on: the range within a factor of two (stable there).
    """
    n = max(eager.numel - eager.nonfinite, 1)
    if n == 1:
        return None  # one random draw has no distribution to compare: re-written and finite
    outliers = 0
    span = eager.max - eager.min
    if deferred_tensor is not None and span > 0 and n >= 1000:
        # a handful of extreme draws (e.g. trunc_normal_ clamping at +-2) must not decide
        lo, hi = eager.min - 0.25 * span, eager.max + 0.25 * span
        outliers, inner = _inside_stats(deferred_tensor, lo, hi)
        if 0 < outliers <= max(2, n // 10000) and inner is not None:
            deferred = inner
    s1, s2 = eager.std, deferred.std
    why = []
    k = 6 * (1 + 4 / n)
    mean_tol = k * math.sqrt((s1 * s1 + s2 * s2) / n) + 1e-6 * max(abs(eager.mean), 1e-3)
    if abs(eager.mean - deferred.mean) > mean_tol:
        why.append("mean")
    lo_s, hi_s = min(s1, s2), max(s1, s2)
    if hi_s > 1e-12 and (lo_s <= 0 or math.log(hi_s / lo_s) > 6 * math.sqrt(2.0 / (n - 1)) + 0.02):
        why.append("std")
    both = eager.copy is not None and deferred_tensor is not None and outliers == 0
    why += _law_or_range(eager, deferred, deferred_tensor, n, both)
    if why:
        return Difference(
            "MP002",
            f"{'/'.join(why)} differ: eager {describe_stats(eager)}, deferred "
            f"{describe_stats(deferred)}",
        )
    return None
