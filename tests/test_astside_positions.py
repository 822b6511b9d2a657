"""Positions of reported nodes from pieces rendered alone (a method's header, a statement at
its indentation) are those of the whole module."""

import ast
import textwrap

import libcst as cst
import pytest

from metalint.static import engine
from metalint.static.model import collect
from metalint.static.syntax import code_ranges, code_ranges_of, node_text, walk_code

SOURCE = textwrap.dedent(
    """
    import torch
    import torch.nn as nn


    def helper(m):
        return m


    class Model(nn.Module):
      # two spaces for the class, three or four (the module's) for its methods
      @property
      def size(self):
         return 3

      async def _init_weights(self, module):
          if module is None:
             return
          self.b = nn.Parameter(torch.zeros(2))
          module.weight.data.normal_()

      def __init__(self):
         super().__init__()
         self.w = nn.Parameter(torch.ones(2)); self.v = torch.ones(3)
    """
)


def _names(node, value):
    return [n for n in walk_code(node) if isinstance(n, cst.Name) and n.value == value]


def _positions(monkeypatch, pick, tree=True):
    module = cst.parse_module(SOURCE)
    facts = collect(module, "pkg.mod")
    cls = facts.classes[0]
    nodes = pick(cls)
    rendered = []

    def recording(pieces, indent, newline):
        rendered.append("".join(node_text(n, indent, newline, at) for n, at in pieces))
        return code_ranges_of(pieces, indent, newline)

    monkeypatch.setattr(engine, "code_ranges_of", recording)
    got = engine._positions(
        module, SOURCE, [(cls, n) for n in nodes], facts, ast.parse(SOURCE) if tree else None
    )
    whole = code_ranges(module)
    assert [got[n] for n in nodes] == [whole[n] for n in nodes]
    return rendered


@pytest.mark.parametrize("tree", [True, False])
def test_a_method_name_renders_its_header_not_its_body(monkeypatch, tree):
    def pick(cls):
        return [cls.methods["_init_weights"].node.name]

    rendered = _positions(monkeypatch, pick, tree)
    assert len(rendered) == 1
    assert "async def _init_weights(self, module):" in rendered[0]
    assert "normal_" not in rendered[0] and "__init__" not in rendered[0]


@pytest.mark.parametrize("tree", [True, False])
def test_a_method_name_and_statements_of_its_body(monkeypatch, tree):
    def pick(cls):
        method = cls.methods["_init_weights"].node
        return [method.name, *_names(method, "zeros"), *_names(method, "normal_")]

    rendered = _positions(monkeypatch, pick, tree)
    assert len(rendered) == 1
    assert "size" not in rendered[0] and "__init__" not in rendered[0]
    if tree:  # only the statements holding one
        assert "is None" not in rendered[0]


def test_a_statement_alone_at_its_indentation(monkeypatch):
    def pick(cls):
        return _names(cls.methods["_init_weights"].node, "zeros")

    rendered = _positions(monkeypatch, pick)
    assert rendered == ["      self.b = nn.Parameter(torch.zeros(2))\n"]


def test_a_method_whose_statements_ast_counts_otherwise(monkeypatch):
    """``a; b`` is one statement of libcst's and two of CPython's: the method is rendered up
    to the statement, anchored by its name."""

    def pick(cls):
        init = cls.methods["__init__"].node
        sized = cls.methods["size"].node
        return [*_names(init, "ones"), *_names(sized, "size"), *_names(init, "v")]

    rendered = _positions(monkeypatch, pick)
    assert len(rendered) == 1
    assert "\n  @property\n  def size(self):\n" in rendered[0]
    assert "  def __init__(self):\n     super().__init__()\n     self.w" in rendered[0]
    assert "_init_weights" not in rendered[0]
