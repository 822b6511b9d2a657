"""``# noqa`` read from the lines that say it (CPython's tree tells the strings) gives what
tokenizing the whole file gives."""

import ast

import pytest

from metalint.static import engine
from metalint.static.engine import _noqa_comments, noqa_directives

CASES = {
    "trailing": "x = 1  # noqa: ML001\ny = 2  # NOQA:ml002, ml003\nz = 3  #noqa\n",
    "in a string": 'x = "# noqa: ML001"\ny = "a"  # noqa: ML002\n',
    "in a docstring": 'def f():\n    """Text\n    # noqa: ML001\n    """\n    return 1  # noqa\n',
    "joined strings": 'x = ("a"  # noqa: ML001\n     "b")\n',
    "f-string": 'x = f"{1}#noqa: ML001"  # noqa: ML002\n',
    "decorator": '@dec("#")  # noqa: ML001\ndef f():\n    pass\n',
    "not ascii": 's = "é✓"  # noqa: ML004\n',
    "carriage returns": "x = 1  # noqa: ML001\r\ny = '''\r# noqa: ML002\r'''\rz = 2  # noqa\r",
    "no comment": 'noqa = "noqa"\n',
    "later hash": 'x = "#"  # noqa: ML005\n',
    "hash in a long string": 'x = """a\n#" """  # noqa: ML006\n',
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_noqa_from_the_tree_is_what_tokenize_reads(name):
    source = CASES[name]
    assert noqa_directives(source, ast.parse(source)) == noqa_directives(source)


def test_noqa_rows_and_codes():
    source = CASES["trailing"] + CASES["in a docstring"]
    assert noqa_directives(source, ast.parse(source)) == {
        1: ["ML001"],
        2: ["ML002", "ML003"],
        3: None,
        8: None,
    }


def test_a_hash_that_may_be_in_a_string_is_left_to_tokenize():
    for name in ("joined strings", "in a docstring", "carriage returns", "hash in a long string"):
        source = CASES[name]
        assert _noqa_comments(source, ast.parse(source)) is None, name
    for name in ("trailing", "decorator", "not ascii", "f-string", "later hash", "in a string"):
        source = CASES[name]
        assert _noqa_comments(source, ast.parse(source)) is not None, name


def test_many_noqa_lines_in_one_function_are_read_in_one_descent(monkeypatch):
    """A function of 2,000 lines each saying ``noqa``: the tree is descended once for all
    of them (each row descending from the top again made such a file quadratic: 20,000
    lines took longer than a file's time budget)."""
    n = 2000
    source = "def f():\n" + "".join(f"    x{i} = 's#'  # noqa: ML001\n" for i in range(n))
    tree = ast.parse(source)
    calls = 0  # nodes looked at
    iter_child_nodes = ast.iter_child_nodes

    def counted(node):
        nonlocal calls
        for child in iter_child_nodes(node):
            calls += 1
            yield child

    monkeypatch.setattr(ast, "iter_child_nodes", counted)
    found = noqa_directives(source, tree)
    assert found == {row: ["ML001"] for row in range(2, n + 2)}
    assert calls < 10 * n, calls


def test_a_string_of_many_hashes_is_stepped_over_at_once(monkeypatch):
    """``x = "####...#"  # noqa``: the comment is found past the string in one step, not by
    trying each ``#`` in it (each try measured the line up to it: quadratic in the line)."""
    source = 'x = "' + "#" * 5000 + '"  # noqa: ML001\n'
    tree = ast.parse(source)
    tried = 0
    real = engine._string_spans

    def counted(tree, rows):
        spans = real(tree, rows)
        return {row: _Counting(s) for row, s in spans.items()}

    class _Counting(list):
        def __iter__(self):
            nonlocal tried
            tried += 1
            return super().__iter__()

    monkeypatch.setattr(engine, "_string_spans", counted)
    assert noqa_directives(source, tree) == {1: ["ML001"]}
    assert tried <= 2, tried
