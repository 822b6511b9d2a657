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
