"""Planning a fix does less work per finding and gives the same answers: a rewrite is
checked to parse through its new statements only, transformers rebuild only what they
change, and the few lines codemods parse again and again are parsed once."""

from __future__ import annotations

import ast

import libcst as cst
import pytest
from test_fix_render import SOURCE, _init, _rewrites, _top, _with_body

from metalint.fix.codemod import extending_hook
from metalint.fix.edits import (
    OWN_RESET,
    ReplaceStatements,
    SwapCall,
    base_guard_comment,
    expr,
    stmt,
    substitute,
    transformed,
)
from metalint.fix.registry import ClassText, _must_parse
from metalint.static.syntax import walk_code


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("indent", ["    ", "\t"])
def test_probe_renders_the_same_text_and_parses(newline, indent):
    source = SOURCE.replace("    ", indent).replace("\n", newline)
    module, top = _top(source)
    texts = ClassText(module, top)
    for why, new in _rewrites(top):
        text, probe = texts.render_and_probe(new)
        assert text == texts.render(new) == module.code_for_node(new), why
        ast.parse(probe)
        assert len(probe) <= len(text), why


def test_probe_leaves_out_kept_statements():
    module, top = _top()
    texts = ClassText(module, top)
    init = _init(top)
    stmts = list(init.body.body)
    new_line = cst.parse_statement("self.reset_parameters()\n")
    new = _with_body(
        top, [s if s is not init else _with_body(init, [*stmts, new_line]) for s in top.body.body]
    )
    text, probe = texts.render_and_probe(new)
    assert "def forward" in text and "self.bias = None" in text
    # ``forward`` is kept, and so is every statement of ``__init__``: the first stands as a
    # ``pass`` at its indentation
    assert "def forward" not in probe and "self.bias = None" not in probe
    assert "super().__init__()" not in probe and "\n        pass\n" in probe
    assert "self.reset_parameters()" in probe
    ast.parse(probe)


def test_a_rewrite_that_does_not_parse_raises_the_whole_texts_error():
    module, top = _top()
    texts = ClassText(module, top)
    init = _init(top)
    stmts = list(init.body.body)
    broken = cst.SimpleStatementLine([cst.Expr(cst.Name("class"))])
    new = _with_body(
        top, [s if s is not init else _with_body(init, [*stmts, broken]) for s in top.body.body]
    )
    text, probe = texts.render_and_probe(new)
    with pytest.raises(SyntaxError) as whole:
        ast.parse(text)
    with pytest.raises(SyntaxError) as got:
        _must_parse(text, probe)
    assert (got.value.msg, got.value.lineno) == (whole.value.msg, whole.value.lineno)


def test_transformed_is_libcsts_visit_keeping_what_it_does_not_change():
    module, top = _top()
    init = _init(top)
    stmts = list(init.body.body)
    branch = stmts[2]
    inner = branch.body.body[0]
    replace = {id(inner): (inner, [stmt("self.a = 1"), inner]), id(stmts[1]): (stmts[1], [])}
    want = init.visit(ReplaceStatements(replace))
    got = transformed(init, ReplaceStatements(replace))
    assert module.code_for_node(got) == module.code_for_node(want)
    assert got.body.body[0] is stmts[0]  # untouched: the same object
    assert got.body.body[1].body.body[-1] is branch.body.body[-1]

    call = cst.parse_statement("def f(self):\n    self.g()\n    h(self.g())\n    self.k()\n")
    want_swap, got_swap = SwapCall("g", "_own"), SwapCall("g", "_own")
    want = call.visit(want_swap)
    got = transformed(call, got_swap)
    assert module.code_for_node(got) == module.code_for_node(want)
    assert got_swap.swapped == want_swap.swapped == 2
    assert got.body.body[2] is call.body.body[2]


def test_substitute_replaces_the_names_it_is_given():
    line = stmt("y = x + f(x)")
    names = [n for n in walk_code(line) if type(n) is cst.Name and n.value == "x"]
    new = substitute(line, {id(names[1]): expr("self.x")})
    assert cst.Module([new]).code == "y = x + f(self.x)\n"


def test_parsed_lines_are_new_trees_each_time():
    first, second = stmt("self.reset_parameters()"), stmt("self.reset_parameters()\n")
    assert cst.Module([first]).code == cst.Module([second]).code == "self.reset_parameters()\n"
    code = [n for n in walk_code(first)]
    assert not any(a is b for a in code for b in walk_code(second))
    assert first.deep_equals(cst.parse_statement("self.reset_parameters()\n"))
    assert expr("self.w.device") is not expr("self.w.device")
    with pytest.raises(cst.ParserSyntaxError):
        stmt("def (")


@pytest.mark.parametrize("returns", ["", " -> None"])
@pytest.mark.parametrize("base", ["torch.nn.Linear", "pkg.layers.Base"])
def test_extending_hook_is_the_parse_of_its_text(returns, base):
    comment = base_guard_comment(base)
    text = (
        f"def reset_parameters(self){returns}:\n"
        "    super().reset_parameters()\n"
        f'    if hasattr(self, "proj_weight"):  {comment}\n'
        f"        self.{OWN_RESET}()\n"
    )
    got = extending_hook(returns, "proj_weight", comment)
    assert got.deep_equals(cst.parse_statement(text))
    assert cst.Module([got]).code == text


def test_transformed_leaves_a_removed_elif_to_libcst():
    top = stmt("if a:\n    x = 1\nelif b:\n    y = 2\n")
    elif_ = top.orelse
    replace = {id(elif_): (elif_, [])}
    want = top.visit(ReplaceStatements(replace))
    got = transformed(top, ReplaceStatements(replace))
    assert cst.Module([got]).code == cst.Module([want]).code == "if a:\n    x = 1\n"
