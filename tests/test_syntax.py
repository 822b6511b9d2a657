"""``syntax.children`` is libcst's ``node.children`` (same nodes, same order), without a visitor;
``syntax.code_children`` the same less :data:`TRIVIA`, without reading the fields that can only
hold trivia; ``syntax.code_ranges`` is libcst's ``PositionProvider`` (same nodes, same ranges)."""

from __future__ import annotations

import inspect
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from metalint.static.syntax import (
    TRIVIA,
    children,
    code_children,
    code_ranges,
    node_text,
    parse_valid_module,
    walk,
    walk_code,
)

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "fixtures").rglob("*.py")) + sorted((ROOT / "metalint").rglob("*.py"))

# constructs the fixtures do not hold, one per line: every statement and expression kind
ODDITIES = """\
async def f(a, /, b=1, *c, d: int = 2, **e) -> None:
    async with x as (y, z), w:
        async for i in aiter():
            await g(*a, **e)
    global q
    nonlocal r
    try:
        pass
    except* ValueError as err:
        raise E from err
    else:
        del a[1:2, ::3], b
    finally:
        assert x, "m"
    match p:
        case [1, *rest] | {"k": v, **kw} if v:
            pass
        case Point(x=0, y=_) as pt:
            pass
    lambda *, k=1: (yield k)
    print(f"{a!r:>{w}}", b"x" b"y", "s" "t", ...)
    a @= b if c else d
    with (open(p) as fh, open(q)):
        x: int
    return [i async for i in y if i], {k: v for k, v in z}, {s for s in t}, (g for g in h)
type Alias[T] = list[T]
class C[T](Base, metaclass=M): ...
@dec
def h(x=(y := 1)): ...
"""


def _same_everywhere(module: cst.Module) -> int:
    n = 0
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        expected = list(node.children)
        got = list(children(node))
        assert len(got) == len(expected) and all(a is b for a, b in zip(got, expected)), type(
            node
        ).__name__
        code = [c for c in expected if type(c) not in TRIVIA]
        got = code_children(node)
        assert len(got) == len(code) and all(a is b for a, b in zip(got, code)), type(node).__name__
        stack.extend(expected)
        n += 1
    return n


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_children_match_libcst_on_project_sources(path: Path) -> None:
    assert _same_everywhere(cst.parse_module(path.read_text(encoding="utf-8"))) > 0


def test_children_match_libcst_on_every_construct() -> None:
    assert _same_everywhere(cst.parse_module(ODDITIES)) > 100


def test_walk_is_preorder_in_source_order() -> None:
    module = cst.parse_module("x = f(a, g(b)) if c else d\n")
    names = [n.value for n in walk(module) if isinstance(n, cst.Name)]
    assert names == ["x", "f", "a", "g", "b", "c", "d"]


@pytest.mark.parametrize("source", [ODDITIES, "x = (  # c\n    a + -b,  # d\n)[0]\n"])
def test_walk_code_is_walk_less_trivia(source: str) -> None:
    module = cst.parse_module(source)
    expected = [n for n in walk(module) if type(n) not in TRIVIA]
    got = list(walk_code(module))
    assert len(got) == len(expected) > 10 and all(a is b for a, b in zip(got, expected))


@pytest.mark.parametrize("path", SOURCES[:40], ids=lambda p: p.name)
def test_parse_valid_module_builds_the_same_tree(path):
    source = path.read_text(encoding="utf-8")
    fast, ref = parse_valid_module(source), cst.parse_module(source)
    assert fast.code == source
    assert fast.deep_equals(ref)


def _node_classes() -> list[type]:
    todo, seen = [cst.CSTNode], []
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.append(sub)
                todo.append(sub)
    return seen


def test_every_node_class_gets_an_init_like_its_dataclass_one():
    parse_valid_module("x = 1\n")  # installs them
    public = [
        t
        for t in vars(cst).values()
        if isinstance(t, type) and issubclass(t, cst.CSTNode) and not inspect.isabstract(t)
    ]
    quick = [c for c in _node_classes() if hasattr(c.__dict__.get("__init__"), "__wrapped__")]
    assert len(public) > 150 and set(public) <= set(quick)
    for cls in quick:
        ours, theirs = cls.__init__, cls.__init__.__wrapped__
        assert inspect.signature(ours, follow_wrapped=False) == inspect.signature(theirs), cls
    # a default factory makes a fresh value per node, as the dataclass's does
    a, b = cst.Call(cst.Name("f")), cst.Call(cst.Name("f"))
    ref = cst.Call.__init__.__wrapped__
    c = object.__new__(cst.Call)
    ref(c, cst.Name("f"))
    assert a.deep_equals(c) and a.whitespace_after_func.deep_equals(cst.SimpleWhitespace(""))
    assert a.whitespace_after_func is not b.whitespace_after_func


@pytest.mark.parametrize("source", [ODDITIES, (ROOT / "metalint/static/protocol.py").read_text()])
def test_quick_inits_build_the_tree_the_dataclass_inits_build(source):
    quick = {c: c.__init__ for c in _node_classes() if hasattr(c.__init__, "__wrapped__")}
    fast = parse_valid_module(source)
    try:
        for cls, init in quick.items():
            cls.__init__ = init.__wrapped__
        ref = cst.parse_module(source)
    finally:
        for cls, init in quick.items():
            cls.__init__ = init
    assert fast.code == ref.code == source
    assert fast.deep_equals(ref)
    kinds = {type(n) for n in walk(ref)}
    assert len(kinds) > 60 and all(k in quick for k in kinds)


def test_nodes_built_after_a_trusted_parse_are_validated():
    parse_valid_module(ODDITIES)
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")
    with pytest.raises(cst.CSTValidationError):  # also when the parse fails
        try:
            parse_valid_module("def (:\n")
        except cst.ParserSyntaxError:
            pass
        cst.Name("1x")


def _same_ranges(module: cst.Module) -> int:
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    got = code_ranges(module)
    assert set(got) == set(expected.keys())
    for node in expected.keys():
        assert got[node] == expected[node], (type(node).__name__, got[node], expected[node])
    return len(got)


@pytest.mark.parametrize("path", SOURCES[:40], ids=lambda p: p.name)
def test_code_ranges_match_libcst_on_project_sources(path):
    assert _same_ranges(cst.parse_module(path.read_text(encoding="utf-8"))) > 0


@pytest.mark.parametrize(
    "source",
    [
        ODDITIES,
        ODDITIES.replace("\n", "\r\n"),
        ODDITIES.replace("\n", "\r"),
        "x = (  # c\n    f(a)\n)\n\n# trailing comment, no newline at the end",
        "class A:\n    def f(self):\n        return ((1))\n\n\n\n",
        "",
    ],
    ids=["every-construct", "crlf", "cr", "no-trailing-newline", "blank-tail", "empty"],
)
def test_code_ranges_match_libcst_on_odd_text(source):
    _same_ranges(cst.parse_module(source))


@pytest.mark.parametrize(
    "source",
    [ODDITIES, ODDITIES.replace("\n", "\r\n").replace("    ", "\t")],
    ids=["every-construct", "crlf-tabs"],
)
def test_node_text_is_libcst_text(source):
    """node_text renders every node as libcst's code_for_node does, at any indentation."""
    from libcst._nodes.base import CSTCodegenError
    from libcst._nodes.internal import CodegenState

    module = cst.parse_module(source)
    assert node_text(module, module.default_indent, module.default_newline) == source
    plain = cst.Module([])
    seen = 0
    for node in walk(module):
        try:
            expected = plain.code_for_node(node)
        except CSTCodegenError:  # a node libcst cannot render alone (an annotation)
            with pytest.raises(CSTCodegenError):
                node_text(node)
            continue
        assert node_text(node) == expected, type(node).__name__
        seen += 1
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            state = CodegenState("  ", "\r\n")
            state.indent_tokens = ["\t", "  "]
            node._codegen(state)
            assert node_text(node, "  ", "\r\n", ("\t", "  ")) == "".join(state.tokens)
    assert seen > 300


@pytest.mark.parametrize("path", SOURCES[:40], ids=lambda p: p.name)
def test_node_text_on_project_sources(path):
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    assert node_text(module, module.default_indent, module.default_newline) == module.code


def test_type_tests_name_only_leaf_node_classes():
    """The hot paths test a node's class with ``type(x) is cst.C`` / ``type(x) in (cst.A, ...)``
    (libcst's node classes are ABCs: each isinstance is a Python-level
    ``ABCMeta.__instancecheck__``, ten times slower). That equals isinstance only for a class
    with no subclasses: every class so named must be one (an abstract base, say
    ``cst.BaseExpression``, must stay an isinstance)."""
    import ast
    import inspect

    def named(node):
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        for item in items:
            if (
                isinstance(item, ast.Attribute)
                and isinstance(item.value, ast.Name)
                and item.value.id == "cst"
            ):
                yield item.attr

    seen = 0
    for path in sorted((ROOT / "metalint").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Call)
                and isinstance(node.left.func, ast.Name)
                and node.left.func.id == "type"
            ):
                continue
            for op, right in zip(node.ops, node.comparators):
                if not isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
                    continue
                for name in named(right):
                    kind = getattr(cst, name)
                    where = f"{path.name}:{node.lineno}: cst.{name}"
                    assert not inspect.isabstract(kind), where
                    assert kind.__subclasses__() == [], where
                    seen += 1
    assert seen > 100
