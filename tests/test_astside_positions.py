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


def _positions(monkeypatch, pick, tree=True, source=SOURCE, which=0):
    module = cst.parse_module(source)
    facts = collect(module, "pkg.mod")
    cls = facts.classes[which]
    nodes = pick(cls)
    rendered = []

    def recording(pieces, indent, newline):
        rendered.append("".join(node_text(n, indent, newline, at) for n, at in pieces))
        return code_ranges_of(pieces, indent, newline)

    monkeypatch.setattr(engine, "code_ranges_of", recording)
    got = engine._positions(
        module, source, [(cls, n) for n in nodes], facts, ast.parse(source) if tree else None
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


INHERITED = textwrap.dedent(
    """
    import torch
    import torch.nn as nn


    class Base(nn.Module):
        def _init_weights(self, module):
            module.weight.data.normal_()
            self.scale = nn.Parameter(torch.ones(1))


    def unrelated():
        return 1


    class Child(Base):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))
    """
)


def _calls(node):
    return [n for n in walk_code(node) if isinstance(n, cst.Call)]


def _inherited(cls):
    """The class's name, a call of a method it inherits, a call of its own: each where
    the facts say (and so placed without a walk)."""
    base = cls.from_bases["_init_weights"].node
    init = cls.methods["__init__"].node
    return [cls.node.name, _calls(base)[0], _calls(init)[-1]]


def test_a_finding_in_an_inherited_method_and_on_the_class_name(monkeypatch):
    rendered = _positions(monkeypatch, _inherited, source=INHERITED, which=1)
    assert "unrelated" not in "".join(rendered)


def test_facts_that_misplace_a_finding_only_cost_a_walk(monkeypatch):
    """Where the facts place a finding is a hint: one in another method than they say is
    still found, at the same position."""

    def misplaced(found):
        return {id(node): cls.methods["__init__"].node for cls, node in found}

    monkeypatch.setattr(engine, "_where", misplaced)
    _positions(monkeypatch, _inherited, source=INHERITED, which=1)


def test_where_the_facts_place_findings():
    module = cst.parse_module(INHERITED)
    facts = collect(module, "pkg.mod")
    child = facts.classes[1]
    name, normal, ones = _inherited(child)
    where = engine._where([(child, name), (child, normal), (child, ones)])
    assert where[id(name)] is child.node
    assert where[id(normal)] is child.from_bases["_init_weights"].node
    assert where[id(ones)] is child.methods["__init__"].node
