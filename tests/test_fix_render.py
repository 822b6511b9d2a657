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
