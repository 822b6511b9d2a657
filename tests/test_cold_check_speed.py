"""The shortcuts a cold ``metalint check`` takes give what the long ways gave."""

from __future__ import annotations

import ast
import textwrap

import libcst as cst

from metalint.fix.edits import replaced
from metalint.static.pipeline import functions
from metalint.static.syntax import walk_code

NESTED = textwrap.dedent(
    """
    def top(a):
        def inner():
            async def deeper():
                pass
        return lambda: [x for x in a]

    class Model:
        def __init__(self):
            try:
                def in_try():
                    pass
            except ValueError:
                def in_handler():
                    pass
            else:
                def in_else():
                    pass
            finally:
                def in_finally():
                    pass

        class Inner:
            def method(self):
                if self:
                    def in_if():
                        pass
                elif self:
                    def in_elif():
                        pass
                for _ in ():
                    def in_for():
                        pass
                while False:
                    def in_while():
                        pass
                with open(__file__):
                    def in_with():
                        pass

    match 1:
        case 1:
            def in_case():
                pass
        case _:
            pass

    async def later():
        async with a:
            def in_async_with():
                pass
    """
)


def test_functions_are_those_of_ast_walk_in_its_order():
    tree = ast.parse(NESTED)
    expected = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    found = functions(tree)
    assert [f.name for f in found] == [f.name for f in expected]
    assert all(a is b for a, b in zip(found, expected))
    assert len(found) == 17


CLASS = textwrap.dedent(
    """
    class Model(nn.Module):
        x = 1  # a comment

        def __init__(self):
            super().__init__()
            if True:
                self.w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x
    """
)


def test_replaced_is_deep_replace_keeping_the_other_nodes():
    module = cst.parse_module(CLASS)
    cls = module.body[0]
    target = next(n for n in walk_code(cls) if isinstance(n, cst.Name) and n.value == "ones")
    new = cst.Name("zeros")
    ours = replaced(cls, target, new)
    theirs = cls.deep_replace(target, new)
    assert module.code_for_node(ours) == module.code_for_node(theirs)
    assert "torch.zeros(3)" in module.code_for_node(ours)
    # the statements off the path are the same objects (deep_replace copies them)
    assert ours.body.body[0] is cls.body.body[0]
    assert ours.body.body[2] is cls.body.body[2]
    assert ours.body.body[1] is not cls.body.body[1]
    init = ours.body.body[1].body.body
    assert init[0] is cls.body.body[1].body.body[0]


def test_replaced_of_a_direct_child_and_of_a_missing_node():
    module = cst.parse_module(CLASS)
    cls = module.body[0]
    forward = cls.body.body[2]
    new = forward.with_changes(name=cst.Name("run"))
    ours = replaced(cls, forward, new)
    assert ours.body.body[2] is new
    assert module.code_for_node(ours) == module.code_for_node(cls.deep_replace(forward, new))
    stranger = cst.Name("elsewhere")
    assert replaced(cls, stranger, new) is cls


POSITIONED = textwrap.dedent(
    """
    import torch
    import torch.nn as nn


    def helper(m):
        m.w.data.fill_(1)


    @decorate(3)
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))
            helper(self)

        def forward(self, x):
            return x
    """
)


def _positioned(monkeypatch, pick):
    """Positions of the nodes ``pick(module, class facts)`` gives, from the engine's renders
    of parts, and the texts it rendered."""
    from metalint.static import engine
    from metalint.static.model import collect
    from metalint.static.syntax import code_ranges, code_ranges_of, node_text

    module = cst.parse_module(POSITIONED)
    facts = collect(module, "pkg.mod")
    cls = facts.classes[0]
    nodes = pick(module, cls)
    rendered = []

    def recording(m):
        rendered.append(m.code)
        return code_ranges(m)

    def recording_pieces(pieces, indent, newline):
        rendered.append("".join(node_text(n, indent, newline, at) for n, at in pieces))
        return code_ranges_of(pieces, indent, newline)

    monkeypatch.setattr(engine, "code_ranges", recording)
    monkeypatch.setattr(engine, "code_ranges_of", recording_pieces)
    got = engine._positions(
        module, POSITIONED, [(cls, n) for n in nodes], facts, ast.parse(POSITIONED)
    )
    whole = code_ranges(module)
    assert [got[n] for n in nodes] == [whole[n] for n in nodes]
    return rendered


def test_a_finding_in_the_class_header_renders_no_statement_of_its_body(monkeypatch):
    def pick(module, cls):
        decorator = cls.node.decorators[0].decorator
        return [cls.node.name, decorator]

    rendered = _positioned(monkeypatch, pick)
    assert len(rendered) == 1
    assert "@decorate(3)\nclass Model(nn.Module):" in rendered[0]
    assert "super()" not in rendered[0] and "forward" not in rendered[0]


def test_a_finding_in_a_helper_renders_the_helper_not_the_class(monkeypatch):
    def pick(module, cls):
        helper = module.body[2]
        return [next(n for n in walk_code(helper) if isinstance(n, cst.Call))]

    rendered = _positioned(monkeypatch, pick)
    assert len(rendered) == 1
    assert rendered[0].lstrip().startswith("def helper(m):")


def test_findings_in_a_method_and_in_the_header_together(monkeypatch):
    def pick(module, cls):
        init = cls.methods["__init__"].node
        call = next(n for n in walk_code(init) if isinstance(n, cst.Name) and n.value == "ones")
        return [call, cls.node.name]

    _positioned(monkeypatch, pick)


def test_a_rewrite_by_path_renders_only_what_it_changed(monkeypatch):
    """The fix registry's class text re-renders only the statements a rewrite made; with
    ``replaced`` the other methods are kept pieces, cut from the text as they were."""
    from metalint.fix import registry

    module = cst.parse_module(CLASS)
    cls = module.body[0]
    init = cls.body.body[1]
    first = init.body.body[0]
    new_init = init.with_changes(body=init.body.with_changes(body=[first, first]))
    new_class = replaced(cls, init, new_init)
    texts = registry.ClassText(module, cls)
    rendered = []
    real = registry.node_text

    def recording(node, *args):
        rendered.append(real(node, *args))
        return rendered[-1]

    monkeypatch.setattr(registry, "node_text", recording)
    assert texts.render(new_class) == module.code_for_node(new_class)
    assert texts.render(cls.deep_replace(init, new_init)) == module.code_for_node(new_class)
    assert rendered  # the copy of deep_replace is rendered afresh
    rendered.clear()
    texts.render(new_class)
    assert not any("forward" in text or "x = 1" in text for text in rendered)
