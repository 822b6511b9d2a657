"""The probe's verdict on random tensors at small sizes: two draws of one law are the same law
(no false MP002 confirming a check finding), a lost tensor is still caught.

The two real cases: PyG FeaStConv's 16-element N(0, 0.1) bias re-drawn by reset_parameters, and
transformers Qwen3_5GatedDeltaNet.A_log (32 draws of log(uniform_(0.01, 16))) re-drawn by the
root init as ``__init__`` draws it; the seeds are ones where the range test (factor of two from
16 elements) called them lost.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from metalint.probe.build import probe
from metalint.probe.compare import compare, ks_critical, ks_distance, tensor_stats


class FeaStBias(nn.Module):
    def __init__(self, redraw: bool = True):
        super().__init__()
        self.redraw = redraw
        self.bias = nn.Parameter(torch.empty(16))
        nn.init.normal_(self.bias, 0, 0.1)

    def reset_parameters(self):
        if self.redraw:
            nn.init.normal_(self.bias, 0, 0.1)


class GatedDeltaALog(nn.Module):
    def __init__(self):
        super().__init__()
        self.A_log = nn.Parameter(torch.empty(32).uniform_(0.01, 16).log())

    def init_weights(self):
        with torch.no_grad():
            self.A_log.copy_(torch.empty(32).uniform_(0.01, 16).log())


@pytest.mark.parametrize("seed", [50, 0, 1])
def test_small_normal_bias_redrawn_by_reset_parameters_passes(seed):
    r = probe(FeaStBias, init="reset_parameters", seed=seed)
    assert r.status == "passed", [d.message for d in r.findings]


@pytest.mark.parametrize("seed", [7, 37, 0])
def test_log_uniform_redrawn_by_root_init_passes(seed):
    r = probe(GatedDeltaALog, init="init_weights", seed=seed)
    assert r.status == "passed", [d.message for d in r.findings]


def test_small_bias_not_redrawn_is_lost():
    r = probe(lambda: FeaStBias(redraw=False), init="reset_parameters", seed=50)
    assert r.status == "failed" and [d.code for d in r.findings] == ["MP002"]


def _random(t):
    s = tensor_stats(t)
    s.random = True
    return s


def _garbage(n):
    x = torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32).view(torch.float32)
    return torch.where(torch.isfinite(x), x, torch.zeros(()))


@pytest.mark.parametrize("keep_copy", [True, False])
@pytest.mark.parametrize("n", [8, 16])
def test_lost_small_tensor_is_caught(n, keep_copy):
    g = torch.Generator().manual_seed(n)
    eager = tensor_stats(torch.empty(n).normal_(0, 0.1, generator=g), keep_copy=keep_copy)
    eager.random = True
    torch.manual_seed(n)
    for lost in (torch.zeros(n), torch.ones(n), torch.full((n,), 0.05), _garbage(n)):
        d = compare(eager, tensor_stats(lost), lost)
        assert d is not None and d.code == "MP002", lost


LAWS = {
    "normal": lambda n, g: torch.empty(n).normal_(0, 0.1, generator=g),
    "uniform": lambda n, g: torch.empty(n).uniform_(-0.1, 0.1, generator=g),
    "log-uniform": lambda n, g: torch.empty(n).uniform_(0.01, 16, generator=g).log(),
    "trunc_normal": lambda n, g: torch.empty(n).normal_(generator=g).clamp_(-2, 2),
    "constant+noise": lambda n, g: 1 + 0.01 * torch.empty(n).normal_(generator=g),
}


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(
    law=st.sampled_from(sorted(LAWS)),
    n=st.sampled_from([2, 3, 8, 16, 24, 32, 64, 256, 4096]),
    seed=st.integers(0, 2**31),
)
def test_two_draws_of_one_law_are_the_same_law(law, n, seed):
    g = torch.Generator().manual_seed(seed)
    a, b = LAWS[law](n, g), LAWS[law](n, g)
    assert compare(_random(a), _random(b), b) is None


def test_ks_distance_and_level():
    a = torch.tensor([0.0, 1.0, 2.0, 3.0])
    assert ks_distance(a, a.flip(0)) == 0.0
    assert ks_distance(a, a + 10) == 1.0
    assert ks_distance(a, torch.tensor([2.5, 3.5, 4.5, 5.5])) == 0.75
    # two disjoint samples of 16 are rejected; of 8 they are not (they happen by chance 1 in 6435)
    assert ks_critical(16, 16) < 1.0 < ks_critical(8, 8)
