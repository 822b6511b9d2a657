"""The fix registry renders a rewritten class from the pieces of the original (its kept
statements, at any depth) and its new statements only: the text must be libcst's own."""

from __future__ import annotations

import libcst as cst
import pytest

from metalint.fix.registry import ClassText

SOURCE = '''\
# a comment above
@decorator(1)
class Block(nn.Module):  # trailing
    """Doc."""

    scale = 2

    def __init__(self, dim, bias=True):
        super().__init__()
        # before the weight
        self.weight = nn.Parameter(torch.randn(dim))
        if bias:
            self.bias = nn.Parameter(torch.zeros(dim))
            for i in range(2):
                self.register_buffer(f"b{i}", torch.ones(dim))
        else:
            self.bias = None

    def forward(self, x):
        return x * self.weight
        # a footer comment
'''


def _top(source: str = SOURCE) -> tuple[cst.Module, cst.ClassDef]:
    module = cst.parse_module(source)
    return module, next(s for s in module.body if isinstance(s, cst.ClassDef))


def _init(top: cst.ClassDef) -> cst.FunctionDef:
    return next(s for s in top.body.body if isinstance(s, cst.FunctionDef))


def _with_body(node, body):
    return node.with_changes(body=node.body.with_changes(body=body))


def _rewrites(top: cst.ClassDef):
    init = _init(top)
    stmts = list(init.body.body)
    new_line = cst.parse_statement("self.reset_parameters()\n")
    method = cst.parse_statement(
        "def reset_parameters(self):\n    with torch.no_grad():\n        self.weight.normal_()\n"
    )
    branch = stmts[2]
    deeper = _with_body(branch, [*branch.body.body[:1], new_line, *branch.body.body[1:]])
    yield "unchanged", top
    yield (
        "one statement replaced",
        _with_body(
            top,
            [
                s if s is not init else _with_body(init, [*stmts[:2], new_line])
                for s in top.body.body
            ],
        ),
    )
    yield "method added", _with_body(top, [*top.body.body, method])
    yield (
        "statement inside an if",
        _with_body(
            top,
            [s if s is not init else _with_body(init, [*stmts[:2], deeper]) for s in top.body.body],
        ),
    )
    yield "statement removed", _with_body(top, list(top.body.body)[:-1])
    yield "new header", top.with_changes(name=cst.Name("Other"))
    yield "all new", cst.parse_statement("class Block:\n    x = 1\n")
    yield "empty body", _with_body(top, [])


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("indent", ["    ", "\t"])
def test_rewrite_text_is_libcst_text(newline, indent):
    source = SOURCE.replace("    ", indent).replace("\n", newline)
    module, top = _top(source)
    text = ClassText(module, top)
    assert text.text == module.code_for_node(top)
    seen = 0
    for why, new in _rewrites(top):
        assert text.render(new) == module.code_for_node(new), why
        seen += 1
    assert seen == 8


def test_kept_statements_are_not_rendered_again(monkeypatch):
    module, top = _top()
    text = ClassText(module, top)
    init = _init(top)
    rendered = []
    real = cst.SimpleStatementLine._codegen

    def spy(self, state, **kwargs):
        rendered.append(self)
        return real(self, state, **kwargs)

    monkeypatch.setattr(cst.SimpleStatementLine, "_codegen", spy)
    new_line = cst.parse_statement("self.reset_parameters()\n")
    stmts = list(init.body.body)
    new_init = _with_body(init, [*stmts, new_line])
    new = _with_body(top, [s if s is not init else new_init for s in top.body.body])
    assert text.render(new) == module.code_for_node(new)
    first = len(rendered)
    rendered.clear()
    text.render(new)
    kept = {id(s) for s in stmts}
    assert new_line in rendered and not any(id(s) in kept for s in rendered)
    assert first > 0


TRY_SOURCE = """\
class Block(nn.Module):
    def __init__(self, dim):  # the header's comment
        super().__init__()
        try:
            import apex

            self.norm = apex.Norm(dim)
        except ImportError:  # no apex
            self.norm = None
        # between
        else:
            pass
        finally:
            self.dim = dim
        with torch.no_grad():
            self.w = nn.Parameter(torch.ones(dim))
            # the with's footer

    # the class's footer
"""


def test_an_edited_statements_head_is_cut_from_the_original(monkeypatch):
    """A compound statement whose body alone a rewrite changes (the class, the edited
    method, an edited branch) keeps the original's text around its body's statements: its
    header (decorators, signature), footer and other clauses are not rendered again. Fails
    before: they were rendered around marker statements."""
    module, top = _top(TRY_SOURCE)
    text = ClassText(module, top)
    init = _init(top)
    body = list(init.body.body)
    trial, scope = body[1], body[2]
    line = cst.parse_statement("self.reset_parameters()\n")
    edits = [
        _with_body(init, [*body, line]),
        _with_body(init, [body[0], _with_body(trial, [*trial.body.body, line]), scope]),
        _with_body(init, [*body[:2], _with_body(scope, [line, *scope.body.body])]),
        _with_body(init, [*body[:2], _with_body(scope, [line])]),
    ]
    for new_init in edits:
        new = _with_body(top, [new_init])
        expected = module.code_for_node(new)
        rendered = []
        with monkeypatch.context() as patch:
            for kind in (cst.Parameters, cst.ExceptHandler, cst.Finally, cst.Else, cst.WithItem):

                def spy(self, state, _real=kind._codegen, **kwargs):
                    rendered.append(type(self).__name__)
                    return _real(self, state, **kwargs)

                patch.setattr(kind, "_codegen", spy)
            got = text.render(new)
        assert got == expected
        assert rendered == []
    # a changed header is rendered: the new name
    renamed = init.with_changes(name=cst.Name("build"))
    new = _with_body(top, [renamed])
    assert text.render(new) == module.code_for_node(new)


HOOKS_SOURCE = """\
import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.empty(3))
        self.reset_parameters()
        self.build(self.init_weights())
        if True:
            self.reset_parameters()
        self.init_weights()
        self.reset_parameters()
"""


@pytest.mark.parametrize(
    "hook, expected",
    [
        ("reset_parameters", ([2, 6], True)),  # and once inside the `if`
        ("init_weights", ([5], True)),  # and once inside `self.build(...)`
        ("build", ([3], False)),
        ("_init", ([], False)),
    ],
)
def test_hook_calls_top_level_and_nested(hook, expected):
    """ClassEdit.hook_calls (worked out once per class for every hook): the top-level
    statements that are `self.<hook>()`, and whether a call of it stands anywhere else, also
    inside the top-level call of another method."""
    from metalint.fix.codemod import ClassEdit
    from metalint.static.model import collect
    from metalint.static.rule import RuleContext

    module = cst.parse_module(HOOKS_SOURCE)
    facts = collect(module, "m")
    edit = ClassEdit(RuleContext(facts, module, (), "m.py"), facts.classes[0])
    assert edit.hook_calls(hook) == expected
    assert edit.hook_calls(hook) == expected  # asked again: the same answer
    edit.hook_calls(hook)[0].append(99)  # a caller's list is its own
    assert edit.hook_calls(hook) == expected


CUT_SOURCE = '''\
import torch  # a module comment
# above the first class


@decorator(1)
# between the decorators
@decorator(2)
class Block(nn.Module):  # trailing
    """Doc."""
    scale = 2; shift = 3

    @property
    # a comment in the decorators
    def size(self): return self.scale

    def __init__(self, dim, bias=True):
        super().__init__()
        # before the weight
        self.weight = nn.Parameter(torch.randn(dim))
        if bias:
            self.bias = nn.Parameter(torch.zeros(dim))
            # the if's footer
        # before the elif
        elif dim > 2:
            for i in range(2):
                self.register_buffer(f"b{i}", torch.ones(dim))
            else:
                pass
              # deeper than the block: the else's
        else:
            self.bias = None
    # the method's? the class's
        while False:
            break
        else:
            x = 1
        try:
            import apex
        except (ImportError,
                ValueError) as e:  # two rows
            apex = None

        # before else
        else:
            pass
        finally:  # a comment
            # in finally
            self.dim = dim
        if dim: return
        else:
            self.z = 1
        with torch.no_grad():
            async def inner():
                async with a as b:
                    async for c in b:
                        await c
                # inner's footer

    @torch.no_grad()
    def forward(self, x):
        # left out when elided
        return x * self.weight

    class Nested:
        x = 1
            # deeper
        # the nested class's footer

    # the class's footer
# the next statement's
x = 1


class Last:
    def f(self):
        return 1
        # last footer
    # class footer
# module footer'''


@pytest.mark.parametrize("trailing", ["", "\n"], ids=["no-newline-at-end", "newline-at-end"])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("indent", ["    ", "\t"])
@pytest.mark.parametrize("elided", [False, True])
def test_class_text_cut_from_source_is_the_rendered_one(trailing, newline, indent, elided):
    """A class's text and its statements' spans, cut from the source at CPython's rows with
    libcst's counts of each statement's leading lines and each block's footer, are what
    rendering the class gives, comments at the end of a block at any indentation included."""
    import ast

    from metalint.fix.registry import _cut_from_source
    from metalint.lines import split_lines
    from metalint.static.elide import elide
    from metalint.static.syntax import walk

    source = (CUT_SOURCE + trailing).replace("    ", indent).replace("\n", newline)
    tree = ast.parse(source)
    text = elide(source, tree) if elided else source
    assert ("return x * self.weight" not in text) == elided
    module = cst.parse_module(text)
    seen = 0
    for top in module.body:
        if not isinstance(top, cst.ClassDef):
            continue
        cut = _cut_from_source(module, top, tree, split_lines(text, keepends=True))
        assert cut is not None
        rendered = ClassText(module, top)
        got = ClassText(module, top, cut)
        assert got.text == rendered.text == module.code_for_node(top)
        elifs = {id(n.orelse) for n in walk(top) if isinstance(n, cst.If)}
        assert {k: v for k, v in rendered.spans.items() if k[0] not in elifs} == got.spans
        assert [n for n, _ in got.compound] == [n for n, _ in rendered.compound]
        line = cst.parse_statement("self.reset_parameters()\n")
        for i, stmt in enumerate(top.body.body):
            if isinstance(stmt, cst.FunctionDef) and isinstance(stmt.body, cst.IndentedBlock):
                edited = _with_body(stmt, [*stmt.body.body[:-1], line, stmt.body.body[-1]])
                members = list(top.body.body)
                members[i] = edited
                for new in (_with_body(top, members), _with_body(top, [*members, line])):
                    assert got.render(new) == rendered.render(new) == module.code_for_node(new)
        seen += 1
    assert seen == 2


def test_class_text_is_rendered_where_the_trees_do_not_pair_up():
    import ast

    from metalint.fix.registry import _cut_from_source
    from metalint.lines import split_lines

    source = "class A:\n    def f(self, x):\n        match x:\n            case 1:\n                pass\n"
    module = cst.parse_module(source)
    top = module.body[0]
    assert _cut_from_source(module, top, ast.parse(source), split_lines(source, True)) is None
    other = ast.parse("class A:\n    def f(self, x):\n        pass\n        pass\n")
    assert _cut_from_source(module, top, other, split_lines(source, True)) is None
