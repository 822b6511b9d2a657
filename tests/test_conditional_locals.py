"""A tensor read in ``__init__`` whose value comes from a conditional expression (``a if flag
else b``): when both branches are meta tensors the read has no data on meta, whichever branch
is taken; the fix makes the factories of both branches on the CPU."""

from __future__ import annotations

import re

HEAD = """\
import torch
from torch import nn


class Table(nn.Module):
    def __init__(self, n, flag=True):
        super().__init__()
        self.lin = nn.Linear(3, 2)
"""


def ml008(cli, tmp_path, body: str) -> str:
    (tmp_path / "m.py").write_text(HEAD + body)
    return cli("check", "--no-cache", "--output-format", "concise", "m.py").output


def rows(out: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"m\.py:(\d+):\d+: ML008", out)]


def test_a_local_reassigned_through_a_conditional_is_read(cli, tmp_path):
    body = (
        "        c = torch.zeros(n)\n"
        "        c = c if n > 3 else torch.ones(n)\n"
        "        self.k = int(c.sum().item())\n"
    )
    assert rows(ml008(cli, tmp_path, body)) == [11]


def test_a_conditional_of_two_factories_is_read_and_fixed(cli, tmp_path):
    body = (
        "        c = torch.arange(n) if flag else torch.zeros(n)\n"
        "        self.k = int(c.sum().item())\n"
    )
    out = ml008(cli, tmp_path, body)
    assert rows(out) == [10]
    assert "[*]" in out
    fixed = cli("fix", "--no-cache", "--write", "--unsafe-fixes", "m.py")
    assert fixed.exit_code == 0, fixed.output
    text = (tmp_path / "m.py").read_text()
    assert 'c = torch.arange(n, device="cpu") if flag else torch.zeros(n, device="cpu")' in text
    assert rows(cli("check", "--no-cache", "--output-format", "concise", "m.py").output) == []


def test_a_conditional_with_a_number_branch_is_no_tensor(cli, tmp_path):
    body = (
        "        c = torch.arange(n) if flag else float(n)\n        self.k = int(c.sum().item())\n"
    )
    assert rows(ml008(cli, tmp_path, body)) == []


def test_a_conditional_with_a_cpu_branch_is_no_meta_tensor(cli, tmp_path):
    body = (
        "        c = torch.arange(n) if flag else torch.zeros(n, device='cpu')\n"
        "        self.k = int(c.sum().item())\n"
    )
    assert rows(ml008(cli, tmp_path, body)) == []
