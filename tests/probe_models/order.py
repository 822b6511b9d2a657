"""Hook order: a parent resetting its child through the child's own hook (the same law in any
order, PyG's idiom) beside one that zeroes a child's bias (order-dependent)."""

from torch import nn


class ResetsOwnChild(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()


class ZeroesChildBias(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.proj.bias)


class Both(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = ResetsOwnChild()
        self.b = ZeroesChildBias()
