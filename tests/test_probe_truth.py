"""The probe decides whether a value is random from how it was made, never from its values."""

from __future__ import annotations

import random
from typing import Literal, Optional, Tuple, Union

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


def test_argument_guesses_for_typed_and_forwarded_parameters():
    from metalint.probe.target import CannotConstruct, infer_arguments

    class Typed(nn.Module):
        def __init__(
            self,
            img_size: Union[int, Tuple[int, int]],
            window: Tuple[int, int],
            mode: Literal["bilinear", "nearest"],
            act: Optional[nn.Module],
            pool: tuple[int, ...],
        ):
            super().__init__()

    assert infer_arguments(Typed) == {
        "img_size": 16,
        "window": (4, 4),
        "mode": "bilinear",
        "act": None,
        "pool": (4, 4),
    }

    class Forwarded(nn.Module):  # c1/c2 mean nothing by name; Conv2d says what they are
        def __init__(self, c1, c2, k, padding_mode):
            super().__init__()
            self.conv = nn.Conv2d(c1, c2, kernel_size=k, padding_mode=padding_mode)

    kwargs = infer_arguments(Forwarded)
    assert kwargs == {"c1": 16, "c2": 16, "k": 3, "padding_mode": "zeros"}
    Forwarded(**kwargs)  # the guesses build

    class Opaque(nn.Module):
        def __init__(self, thing):
            super().__init__()
            self.thing = thing

    try:
        infer_arguments(Opaque)
    except CannotConstruct as exc:
        assert "`thing`" in str(exc)
    else:
        raise AssertionError("an argument used nowhere got a guess")
