"""Constructors that crash or hang: the probe must report them and go on."""

import ctypes
import time

import torch
from torch import nn


class FirstOk(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)


class Segfaults(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        ctypes.string_at(0)  # SEGV-LINE


class Hangs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        time.sleep(10**6)  # HANG-LINE


class LastLost(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), 0.5))
