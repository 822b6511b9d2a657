"""A model whose meta build raises in its first child (torch-geometric SchNet's shape)."""

import torch
from torch import nn

class RaisesOnMeta(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.tensor(2.0).log().item()


class NeverReachedOnMeta(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.mask = torch.ones(4, 4).tril()
        self.shift = torch.tensor(2.0).log().item()


class ModelRaisingFirst(nn.Module):
    """SchNet's shape: ``GaussianSmearing`` raises on meta before ``ShiftedSoftplus`` is built."""

    def __init__(self) -> None:
        super().__init__()
        self.first = RaisesOnMeta()
        self.later = NeverReachedOnMeta()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.later.fc.bias)
