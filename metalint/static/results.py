"""What ``metalint check`` keeps of a file: its :class:`FileResult`, and reading its bytes.

Kept free of libcst (and of the rules) so that a run where every file is a cache hit never
imports them: :mod:`metalint.static.engine` computes these results and re-exports the names.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metalint.codes import ERROR_CODE, TOO_COMPLEX_CODE
from metalint.diagnostics import Diagnostic, Position
from metalint.files import MAX_SOURCE_BYTES, TooLarge, read_regular
from metalint.lines import source_encoding

#: ``ClassSummary.hooks`` names an own tensor handed to a helper function as
#: ``@helper#arg=attr`` (``glorot(self.att_src)`` ->
#: ``@torch_geometric.nn.inits.glorot#0=att_src``): whether the helper writes that argument is
#: answered across files from the helper's summary (``FileResult.functions[...]["arg_writes"]``,
#: see :func:`metalint.static.tensors.argument_writes` and
#: :meth:`metalint.static.hierarchy.Hierarchy.hook_tensors`)
HELPER_MARK = "@"


#: the key of ``ClassSummary.refs`` that holds the position of the class's own name
OWN_REF = ""


#: the key of a module's exports that stands for ``from <module> import *`` (no name has it)
STAR = "*"


def star_exports(exports: dict[str, str]) -> list[str]:
    """The modules whose names a module re-exports with ``from <module> import *``."""
    return [m for k, m in exports.items() if k.startswith(STAR)]


@dataclass
class ClassSummary:
    """What other files need to know about a class."""

    fullname: str
    bases: list[str]
    hooks: dict[str, tuple[list[str], bool]]  # hook name -> (re-created tensors, calls super)
    uses_module_api: bool  # registers tensors or modules: an nn.Module whatever its bases
    methods: list[str] = field(default_factory=list)  # names of the methods it defines
    #: what :mod:`metalint.static.protocol` needs across files (children, dispatch, ...)
    protocol: dict[str, Any] = field(default_factory=dict)
    #: where the class names a class of another file: qualified name -> ``[row, column,
    #: end row, end column]`` (1-based) of its first mention (a base, else a call, else any);
    #: ``""``: the class's own name. A finding of an installed class is reported there (see
    #: :mod:`metalint.static.installed`)
    refs: dict[str, list[int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "fullname": self.fullname,
            "bases": self.bases,
            "hooks": {k: [v[0], v[1]] for k, v in self.hooks.items()},
            "uses_module_api": self.uses_module_api,
            "methods": self.methods,
            **({"protocol": self.protocol} if self.protocol else {}),
            **({"refs": self.refs} if self.refs else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ClassSummary":
        return cls(
            d["fullname"],
            d["bases"],
            {k: (v[0], v[1]) for k, v in d["hooks"].items()},
            d["uses_module_api"],
            d.get("methods", []),
            d.get("protocol", {}),
            _refs(d.get("refs", {})),
        )


def _refs(value) -> dict[str, list[int]]:
    if not isinstance(value, dict) or not all(
        type(k) is str and type(v) is list and len(v) == 4 and all(type(x) is int for x in v)
        for k, v in value.items()
    ):
        raise TypeError("a class's references are name -> four numbers")
    return value


@dataclass
class FileResult:
    path: str  # as displayed
    module: str = ""
    diagnostics: list[Diagnostic] = field(default_factory=list)
    classes: list[ClassSummary] = field(default_factory=list)
    exports: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    noqa: dict[int, list[str] | None] = field(default_factory=dict)  # line -> codes (None: all)
    parsed: bool = False
    #: module-level init functions others may apply (see metalint.static.defaults.init_functions)
    functions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: (code, function) of the findings left out until the tree confirms that ``function``
    #: reads a tensor's value (``analyze_source(defer_helper_reads=True)``)
    helper_reads: list[tuple[str, str]] = field(default_factory=list)
    #: where the file materialises a model built on the meta device and what runs on it then
    #: (see :func:`metalint.static.pipeline.materialisations`)
    materialisations: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "diagnostics": [d.to_cache() for d in self.diagnostics],
            "classes": [c.to_json() for c in self.classes],
            "exports": self.exports,
            "noqa": {str(k): v for k, v in self.noqa.items()},
            "parsed": self.parsed,
            "functions": self.functions,
            "helper_reads": [list(pair) for pair in self.helper_reads],
            "materialisations": self.materialisations,
        }

    @classmethod
    def from_json(cls, path: str, d: dict[str, Any]) -> "FileResult":
        return cls(
            path,
            d["module"],
            [Diagnostic.from_cache(x) for x in d["diagnostics"]],
            [ClassSummary.from_json(x) for x in d["classes"]],
            d["exports"],
            {int(k): v for k, v in d["noqa"].items()},
            d["parsed"],
            d.get("functions", {}),
            [_code_and_function(x) for x in d.get("helper_reads", ())],
            _sites(d["materialisations"]),
        )


def _sites(value) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(s, dict) for s in value):
        raise TypeError("materialisations are a list of sites")
    return value


def _code_and_function(pair) -> tuple[str, str]:
    code, function = pair  # anything else is not what this version wrote: a cache miss
    if type(code) is not str or type(function) is not str:
        raise TypeError("a helper read is two strings")
    return code, function


def error_result(
    path: str, reason: str, row: int = 1, column: int = 1, code: str = ERROR_CODE
) -> FileResult:
    pos = Position(row, column)
    return FileResult(path, diagnostics=[Diagnostic(code, reason, path, pos, pos)])


def read_source(path: Path, display: str) -> tuple[bytes | None, FileResult | None]:
    """The file's bytes, or an error result naming why it cannot be read: only a regular file
    is read (a FIFO or a device is ML900), and one over ``MAX_SOURCE_BYTES`` is ML901 unread."""
    try:
        data = read_regular(path, MAX_SOURCE_BYTES)
    except TooLarge as exc:
        why = f"file too complex to analyse (larger than {exc.limit // 2**20} MiB)"
        return None, error_result(display, why, code=TOO_COMPLEX_CODE)
    except FileNotFoundError:
        if path.is_symlink():
            return None, error_result(display, "could not be checked: broken symbolic link")
        return None, error_result(display, "could not be checked: file not found")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == 40:  # ELOOP
            reason = "symbolic link loop"
        return None, error_result(display, f"could not be checked: {reason.lower()}")
    return data, None


def decode(data: bytes, display: str) -> tuple[str | None, FileResult | None]:
    """The file's text, decoded as CPython decodes it, or ML900 with CPython's own message."""
    if b"\0" in data:
        return None, error_result(display, "could not be checked: binary file (contains NUL bytes)")
    encoding = "utf-8"
    try:
        encoding = source_encoding(data)
        return data.decode(encoding), None
    except (SyntaxError, LookupError, UnicodeError, ValueError) as exc:
        # any codec may fail in its own way (``undefined``, ``punycode``): CPython's message
        reason = getattr(exc, "reason", None) or getattr(exc, "msg", None) or str(exc)
        row = 1
        try:
            compile(data, display, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        except SyntaxError as cpython:
            reason, row = cpython.msg or reason, max(cpython.lineno or 1, 1)
        except Exception:  # noqa: BLE001 (keep our own reason)
            pass
        else:
            # CPython reads it: its tokenizer skips bytes of a comment that are not valid in
            # the encoding (3.11); they read as U+FFFD here (``fix`` refuses to rewrite them)
            try:
                return data.decode(encoding, "replace"), None
            except (LookupError, UnicodeError, ValueError):
                pass
        return None, error_result(
            display, f"could not be checked: not valid source text ({reason})", row
        )
