"""A medical-imaging attention block (monai's ``SABlock`` shape): the causal mask is a buffer
only when ``causal=True``; otherwise the attribute of that name is a plain empty tensor."""

import torch
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden_size: int = 8, causal: bool = False, sequence_length: int = 4):
        super().__init__()
        self.qkv = nn.Linear(hidden_size, hidden_size * 3)
        if causal:
            mask = torch.tril(torch.ones(sequence_length, sequence_length))
            self.register_buffer("causal_mask", mask.view(1, 1, sequence_length, sequence_length))
        else:
            self.causal_mask = torch.Tensor()


class TwoBuilds(nn.Module):
    """One block of each kind: the mask is a buffer in one, a plain attribute in the other."""

    def __init__(self) -> None:
        super().__init__()
        self.plain = CausalSelfAttention(causal=False)
        self.causal = CausalSelfAttention(causal=True)
