"""Factories for CLI / helper tests."""

import torch
from torch import nn


class Scale(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.gamma = nn.Parameter(1e-5 * torch.ones(dim))  # SCALE-LINE


class Block(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.ls = Scale(dim)


def make_safe() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Embedding(10, 8))


def make_unsafe() -> nn.Module:
    return nn.Sequential(*[Block(8) for _ in range(3)])


def make_mha() -> nn.Module:
    return nn.MultiheadAttention(8, 2)


def not_a_module():
    return 42
