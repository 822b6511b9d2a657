"""A value read in ``__init__`` (``.item()``, ``.tolist()``) of a tensor computed through a
chain of locals, each from the one before (a RoPE table: frequencies, positions, their outer
product, a concatenation, a scale...): it has no data on meta however long the chain."""

from __future__ import annotations

import re
import textwrap

import pytest

HEAD = """\
import torch
from torch import nn


class Table(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        x0 = torch.arange(n)
"""


def chain(length: int, step: str = "x{p} * 2") -> str:
    body = "".join(
        f"        x{i} = {step.format(p=i - 1, q=max(i - 2, 0))}\n" for i in range(1, length)
    )
    return HEAD + body + f"        self.k = int(x{length - 1}.sum().item())\n"


def ml008_rows(cli, tmp_path, source: str) -> list[int]:
    (tmp_path / "m.py").write_text(source)
    out = cli("check", "--no-cache", "--output-format", "concise", "m.py").output
    return [int(m.group(1)) for m in re.finditer(r"m\.py:(\d+):\d+: ML008", out)]


@pytest.mark.parametrize("length", [1, 4, 6, 9, 12, 16])
def test_a_read_at_the_end_of_a_chain_of_locals_is_reported(cli, tmp_path, length):
    rows = ml008_rows(cli, tmp_path, chain(length))
    assert rows == [9 + length], rows


def test_a_chain_where_each_local_reads_the_two_before_it_is_reported(cli, tmp_path):
    rows = ml008_rows(cli, tmp_path, chain(14, "x{p} * x{q} + x{p}"))
    assert rows == [23], rows


def test_a_chain_ending_in_a_number_is_not_a_tensor(cli, tmp_path):
    source = chain(8).replace("x0 = torch.arange(n)", "x0 = float(n)")
    assert ml008_rows(cli, tmp_path, source) == []


def test_rope_tables_through_five_locals(cli, tmp_path):
    source = HEAD.replace("        x0 = torch.arange(n)\n", "") + textwrap.indent(
        textwrap.dedent(
            """\
            inv = 1.0 / (10000 ** (torch.arange(0, n, 2).float() / n))
            t = torch.arange(64).float()
            freqs = torch.outer(t, inv)
            emb = torch.cat((freqs, freqs), dim=-1)
            scaled = emb * 0.5
            self.top = scaled.max().item()
            """
        ),
        " " * 8,
    )
    assert ml008_rows(cli, tmp_path, source) == [14]


def test_a_very_long_chain_ends_quickly_without_a_finding(cli, tmp_path):
    """Past the depth the walk follows (400 locals, each from the two before it: a walk of
    every path would never end), the read is not reported: the walk stops, it does not hang."""
    assert ml008_rows(cli, tmp_path, chain(400, "x{p} * x{q} + x{p}")) == []
