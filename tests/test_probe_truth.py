"""The probe decides whether a value is random from how it was made, never from its values."""

from __future__ import annotations

import random

import torch
from torch import nn

from metalint.probe.build import probe


class RandomScalar(nn.Module):
    """A random 1-element parameter (min == max), re-drawn by its reset hook."""

    def __init__(self):
        super().__init__()
        self.alpha = nn.Parameter(torch.empty(1))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.normal_(self.alpha)


class PythonRandom(nn.Module):
    """Random through Python's ``random`` (no torch op the recorder sees), re-drawn the same way."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.empty(64))
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            self.w.copy_(torch.tensor([random.gauss(0.0, 1.0) for _ in range(64)]))


class ConstantScalarLost(nn.Module):
    """A deterministic 1-element value nothing re-creates: still lost."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.full((1,), 2.5))
        self.fc = nn.Linear(2, 2)


def test_random_one_element_tensor_is_not_deterministic():
    res = probe(RandomScalar, device="cpu")
    assert res.findings == [], res.findings


def test_randomness_outside_torch_is_seen_from_two_seeds():
    random.seed(0)
    res = probe(PythonRandom, device="cpu")
    assert res.findings == [], res.findings


def test_constant_scalar_still_lost():
    res = probe(ConstantScalarLost, device="cpu")
    assert [(f.code, f.message.split("`")[1]) for f in res.findings] == [("MP001", "scale")]
