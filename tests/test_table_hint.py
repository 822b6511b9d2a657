"""The hint that a file may hold a module-level dict of classes (``MODELS = {"tiny": Tiny}``)
answers as the regular expression it replaces, reading each character a bounded number of
times: a string of many ``a = {`` lines and no ``}`` made that expression quadratic (a file
of 20,000 such lines ran past its time budget)."""

import re

import pytest

from metalint.static import pipeline

OLD = re.compile(r"^[A-Za-z_]\w*\s*(?::[^=\n]*)?=\s*\{[^}]*?:\s*[A-Z]", re.M)

CASES = {
    "table": 'MODELS = {"tiny": Tiny, "base": Base}\n',
    "table at the start": 'M={"a": A}',
    "annotated": 'MODELS: dict[str, type] = {\n    "tiny": Tiny,\n}\n',
    "lowercase values": 'CFG = {"depth": 12, "act": "gelu"}\n',
    "class after the close": 'CFG = {"a": 1}\nx = {"b": 2}  # : Z\n',
    "indented": 'def f():\n    M = {"a": A}\n',
    "heads in a string": 'X = """\n' + "a = {1 2\n" * 50 + '"""\n',
    "table after heads in a string": 'X = """\n' + "a = {1 2\n" * 50 + '"""\nT = {"a": A}\n',
    "class in a string after a head": 'a = {\n"x: Y"}\n',
    "empty": "",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_hint_answers_as_the_expression_it_replaces(name):
    source = CASES[name]
    assert pipeline._tabled(source) == (OLD.search(source) is not None)


def test_the_hint_reads_each_character_once(monkeypatch):
    source = 'X = """\n' + "a = {1 2 3 4 5 6 7 8 9 0\n" * 2000 + '"""\n'
    read = 0

    class Counted:
        def search(self, text, pos, endpos):
            nonlocal read
            read += endpos - pos
            return pipeline._CLASS_VALUE_PATTERN.search(text, pos, endpos)

    monkeypatch.setattr(pipeline, "_CLASS_VALUE_PATTERN", pipeline._CLASS_VALUE, raising=False)
    monkeypatch.setattr(pipeline, "_CLASS_VALUE", Counted())
    assert pipeline._tabled(source) is False
    assert read <= len(source)
