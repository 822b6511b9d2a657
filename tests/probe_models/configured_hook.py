"""A rotary embedding re-initialised the torchtune way: after ``to_empty`` the training script
calls ``rope_init()`` on every module that has one; there is no ``reset_parameters()``.
Safe exactly when ``rope_init`` is a configured hook (``[tool.metalint] hooks``)."""

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    def __init__(self, dim: int, base: int = 10_000) -> None:
        super().__init__()
        self.dim = dim
        self.base = base
        self.rope_init()

    def rope_init(self) -> None:
        theta = 1.0 / (self.base ** (torch.arange(0, self.dim, 2).float() / self.dim))  # THETA-LINE
        self.register_buffer("theta", theta, persistent=False)


class Attention(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.rope = RotaryEmbedding(dim)


def make() -> nn.Module:
    return Attention()
