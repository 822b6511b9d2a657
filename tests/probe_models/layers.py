"""Tiny models for the probe's acceptance tests (one child process probes this whole file)."""

import math

import torch
from torch import nn


class LayerScaleDinov2(nn.Module):
    """dinov2-style: the value lives only in __init__."""

    def __init__(self, dim: int, init_values: float = 1e-5) -> None:
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))  # GAMMA-LINE

    def forward(self, x):
        return x * self.gamma


class LayerScaleTimm(nn.Module):
    """timm-1.0-style: reset_parameters re-creates the value."""

    def __init__(self, dim: int, init_values: float = 1e-5) -> None:
        super().__init__()
        self.init_values = init_values
        self.gamma = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.gamma, self.init_values)

    def forward(self, x):
        return x * self.gamma


class Rope(nn.Module):
    """RoPE with a non-persistent inv_freq computed in __init__."""

    def __init__(self, dim: int = 16, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # INV-FREQ-LINE


class ParentInit(nn.Module):
    """The parent applies _init_weights to its children; init_weights() replays it."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, dim)
        self.fc2 = nn.Linear(dim, dim)
        self.apply(self._init_weights)

    def _init_weights(self, m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)

    def init_weights(self) -> None:
        self.apply(self._init_weights)


class TiedEmbeddings(nn.Module):
    def __init__(self, vocab_size: int = 32, dim: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.embed.weight  # TIE-LINE


class DataDependent(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        scale = torch.ones(dim).sum().item()  # ITEM-LINE
        self.w = nn.Parameter(torch.empty(dim).fill_(1.0 / scale))


class Escapes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.Tensor(3, 4).zero_())  # ESCAPE-LINE
        self.register_buffer("idx", torch.zeros(4, dtype=torch.long, device="cpu"))


class LegacyParameter(nn.Module):
    """torch-geometric's idiom: a parameter made by the legacy constructor, whose value
    ``reset_parameters()`` sets; on meta the constructor still allocates CPU memory, which the
    new ``Parameter`` object keeps."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.Tensor(dim, dim))  # LEGACY-PARAMETER-LINE
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight)


class PlainAttribute(nn.Module):
    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.mask = torch.ones(dim)  # plain tensor attribute, never registered

    def forward(self, x):
        return self.lin(x) * self.mask


class Safe(nn.Module):
    def __init__(self, in_features: int, out_features: int, num_heads: int) -> None:
        super().__init__()
        assert out_features % num_heads == 0
        self.proj = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def reset_parameters(self) -> None:
        self.steps.zero_()


class NeedsObject(nn.Module):
    def __init__(self, config: object) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)


class ResetsChild(nn.Module):
    """A parent hook that writes a child's weight: correct only children-first."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.fc.weight.fill_(0.5)


class TransientEscape(nn.Module):
    """timm's drop-path rates: a small CPU temporary, freed before the build ends."""

    def __init__(self, depth: int = 4) -> None:
        super().__init__()
        rates = torch.linspace(0, 0.1, depth, device="cpu").tolist()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in rates)


class RejectsGuess(nn.Module):
    """Eager construction fails with the inferred arguments: a skip, not an error."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        if dim % 3:
            raise ValueError("dim must be a multiple of 3")
        self.w = nn.Parameter(torch.ones(dim))


class PatchesChildNorm(nn.Module):
    """timm Block style: a per-module init_weights() that patches a child after its own init."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.init_weights()

    def init_weights(self) -> None:
        nn.init.constant_(self.norm.weight, 1e-5)


class LogScale(nn.Module):
    """reset_parameters() disagrees with __init__ and produces -inf: MP004."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.register_buffer("log_scale", torch.log(torch.arange(1, dim + 1, dtype=torch.float32)))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.log_scale.copy_(torch.log(torch.arange(0, self.log_scale.numel(), dtype=torch.float32)))
