"""Where a checked tree materialises its models, and what runs on them then.

A model root is judged under the protocol that materialises it (:mod:`.protocol`). Most
trees never say which: the protocol is then the one the root's methods suggest. A training
script that builds a model on the meta device says exactly which, and that is what the model
will train on: torchtitan's ``with torch.device("meta"): model = Transformer(args)``,
``fully_shard(...)``, ``model.to_empty(device=...)``, ``model.init_weights()`` runs the
root's entry point and nothing else (no module's own ``reset_parameters()``).

Per file (CPython's ``ast``, no libcst, no torch: :func:`materialisations`), each *site* is
summarised as plain data, cached with the file:

``{"build": [names the constructor call may be], "line": row, "call": "Transformer(args)",
"meta": "all" | "params", "steps": [step, ...]}``

where ``meta`` says what the build puts on the meta device (``"params"``: accelerate's
``init_empty_weights()``, which builds buffers on the real device unless
``include_buffers=True``) and each step is ``{"kind": ..., "line": row, "call": text}`` with
kind one of

- ``to_empty``: ``model.to_empty(device=...)``: every parameter and buffer is uninitialised;
- ``entry`` (``name``): the root's entry point, ``model.init_weights(buffer_device=...)``;
- ``apply`` (``function``): ``model.apply(init_fn)``;
- ``reset`` (``name``, ``order``): every module's own hook, ``for m in model.modules():
  m.reset_parameters()`` (``order`` ``"children"`` for ``reversed(list(model.modules()))``), FSDP1's materialisation (``FSDP(model, param_init_fn=...)``) and
  Lightning's ``init_module(empty_init=True)`` (whose strategies reset each module);
- ``load``: a checkpoint load (``load_state_dict(sd, assign=True)``, accelerate's
  ``load_checkpoint_and_dispatch``, ``set_model_state_dict``, ``dcp.load``): every
  persistent tensor comes from the checkpoint; ``maybe`` when it runs only on one branch
  (``if args.resume:``), where it restores nothing for certain.

- ``call`` (``name``): another method called on the model (``model.setup_weights()``): the
  root's entry point when its class defines it (:func:`settled`);
- ``fn`` (``function``): ``init_model(model)``, a function handed the whole model (kept when
  the tree summarises it).

An eager build of a class (``model = Model(cfg)``, no meta) followed by ``entry``, ``call``,
``apply`` or ``fn`` steps is kept too: the library's own initialisers
(:func:`eager_builds`), which re-create what a materialiser following the library runs.

A site is kept only when something materialises the model (``to_empty``, a load, a per-module
reset): a model built on meta to count its parameters is no site.

Across files (:class:`Sequence`, :func:`sequences`) the built name is resolved to a class of
the tree; :mod:`.protocol` judges the roots built there under the sequence.

The class built may be named through a local (``cls = Transformer``) or a module-level dict of
classes (``MODELS[name](args)``, of this file or another: every class of the dict is judged). A
top-level function that returns a model it built on meta (``def build(cfg): with
torch.device("meta"): return Model(cfg)``) is a *builder* (``{"builder": name, ...}``); the site
is then its caller's sequence (``model = build(cfg)``, ``model.to_empty(...)``, ...):
:func:`sequences` reads the builder's build in place of the call.

Known limits: a builder that materialises the model itself before returning it is its own site
(its callers' steps are not added); methods are no builders; the device must be a literal
``"meta"``; a branch's entry point or reset counts as run (it is the protocol the script names).
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass, replace
from typing import Any

from metalint.diagnostics import AtMaterialisation, NotRecreated
from metalint.vocabulary import (
    CHECKPOINT_LOADER_NAMES,
    CHECKPOINT_LOADERS,
    EMPTY_INIT_CONTEXTS,
    LIBRARY_PREFIXES,
    MODULE_HOOKS,
    NOT_INITIALISERS,
    PARAMS_ONLY_META_CONTEXTS,
    ROOT_ENTRIES,
    SHARDING_WRAPPERS_WITH_INIT,
)

#: a file that mentions none of these has no site (no ``ast`` walk); ``"meta"``: a builder
#: that returns the meta model to its caller (searched as plain text: a regular expression
#: of alternatives scans a file several times slower than ``in``)
SITE_WORDS = (
    "to_empty",
    "load_state_dict",
    "init_empty_weights",
    "init_module",
    "param_init_fn",
    *(f"{a}meta{b}" for a in "'\"" for b in "'\""),
)


def _may_hold_site(source: str) -> bool:
    """Whether ``source`` says one of :data:`SITE_WORDS`."""
    return any(word in source for word in SITE_WORDS[:5]) or (
        "meta" in source and any(word in source for word in SITE_WORDS[5:])
    )


def _at_line_start(body: str) -> tuple[re.Pattern, re.Pattern]:
    """``^body`` of a multi-line pattern as a search for a line break then ``body`` (the
    break a literal the search skips to, where ``^`` is tried at every character) and a
    match of ``body`` at the start."""
    return re.compile("\n" + body), re.compile(body)


def _found(patterns: tuple[re.Pattern, re.Pattern], source: str) -> bool:
    after_break, first = patterns
    return after_break.search(source) is not None or first.match(source) is not None


#: a name bound to a call of a class (``model = Model(cfg)``) at the start of a line: maybe
#: an eager build whose builder runs the library's initialisers on it
_EAGER_HINT = _at_line_start(r"[ \t]+\w+\s*=\s*(?:\w+\.)*[A-Z]\w*\(")
#: the head of a module-level dict (``MODELS = {``)
_TABLE_HEAD = _at_line_start(r"[A-Za-z_]\w*\s*(?::[^=\n]*)?=\s*\{")
#: a value that is a class name (``"tiny": Tiny``)
_CLASS_VALUE = re.compile(r":\s*[A-Z]")


def _tabled(source: str) -> bool:
    """Whether ``source`` may hold a module-level dict of classes: a dict head with a class
    name for a value before the first ``}`` after it (``MODELS = {"tiny": Tiny, ...}``).
    Linear in the length of ``source``: a head inside the text a failed scan has read (a
    string of many ``a = {`` lines and no ``}``) is not scanned again, since its own scan
    would read part of the same text."""
    after_break, first = _TABLE_HEAD
    heads = after_break.finditer(source)
    at_start = first.match(source)
    scanned = -1  # a failed scan read up to here
    for head in (at_start, *heads) if at_start else heads:
        if head.end() <= scanned:
            continue
        close = source.find("}", head.end())
        close = len(source) if close < 0 else close
        if _CLASS_VALUE.search(source, head.end(), close):
            return True
        scanned = close
    return False


#: ``pkg.models.MODELS[]``: a build name that is an element of a module-level dict of classes
TABLE = "[]"


# -- per file (ast) -------------------------------------------------------------------------
def materialisations(
    tree: ast.Module, source: str, module: str, is_package: bool
) -> list[dict[str, Any]]:
    """The materialisation sites of a file (see the module docstring), in source order, and
    its builders and module-level dicts of classes (``{"table": name, "build": classes}``)."""
    tabled = _tabled(source)
    walked = _may_hold_site(source) or _found(_EAGER_HINT, source)
    if not (tabled or walked):
        return []
    from metalint.static.names import _ast_imports

    aliases: dict[str, str] = {}
    local: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            _ast_imports(node, aliases, module, is_package)
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            local.add(node.name)
    top = _Scope(aliases, local, module, is_package)
    tables = _class_tables(tree, top) if tabled else {}
    out: list[dict[str, Any]] = [
        {"table": f"{module}.{name}", "build": classes, "line": 0, "steps": []}
        for name, classes in tables.items()
        if module
    ]
    if not walked:
        return out
    scopes: list[tuple[list[ast.stmt], str]] = [(tree.body, "")]
    top_level = {id(n) for n in tree.body}
    scopes += [
        (n.body, f"{module}.{n.name}" if id(n) in top_level and module else "")
        for n in functions(tree)
    ]
    for body, function in scopes:
        walker = _Scope(aliases, local, module, is_package, tables, function)
        walker.block(body, conditional=False)
        out += _kept_sites(walker.sites)
    out.sort(key=lambda s: s["line"])
    return out


#: node type -> its fields that hold statements (or ``except``/``case`` clauses holding them),
#: in ``ast``'s order; no other node holds one
_BLOCKS: dict[type, tuple[str, ...]] = {
    ast.Module: ("body",),
    ast.FunctionDef: ("body",),
    ast.AsyncFunctionDef: ("body",),
    ast.ClassDef: ("body",),
    ast.For: ("body", "orelse"),
    ast.AsyncFor: ("body", "orelse"),
    ast.While: ("body", "orelse"),
    ast.If: ("body", "orelse"),
    ast.With: ("body",),
    ast.AsyncWith: ("body",),
    ast.Try: ("body", "handlers", "orelse", "finalbody"),
    ast.ExceptHandler: ("body",),
    ast.Match: ("cases",),
    ast.match_case: ("body",),
}
if hasattr(ast, "TryStar"):  # Python 3.11
    _BLOCKS[ast.TryStar] = _BLOCKS[ast.Try]
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function of ``tree``, in the order of ``ast.walk`` (breadth first), found among
    the statements only: a function is a statement, and expressions (most of the nodes)
    hold none."""
    out = []
    level: list[ast.AST] = [tree]
    blocks = _BLOCKS
    while level:
        below: list[ast.AST] = []
        for node in level:
            kind = type(node)
            if kind in _FUNCTIONS:
                out.append(node)
            for field in blocks.get(kind, ()):
                below += getattr(node, field)
        level = below
    return out


def _kept_sites(sites: list[dict]) -> list[dict]:
    """The sites :func:`_kept`, with the text of their calls and of their steps' (left as
    ``ast.Call`` while walking: a name bound to a call is a site until the scope ends)."""
    out = [s for s in sites if _kept(s)]
    for site in out:
        for held in (site, *site["steps"]):
            if type(held.get("call")) is ast.Call:
                held["call"] = _short_call(held["call"])
    return out


def _kept(site: dict) -> bool:
    """A site that materialises its model, a builder, or an eager build of a class (``model
    = Model(cfg)``) that then runs something of the library's on it (``model.setup_weights()``,
    ``model.apply(init_fn)``, ``init_fn(model)``): the library's own initialisers."""
    if not site["steps"]:  # most: a name bound to a call, then left alone
        return bool(site.get("builder"))
    if _materialised(site) or site.get("builder"):
        return True
    if site.get("meta") or not _class_like(site.get("via", "")):
        return False
    return any(s["kind"] in _LEARNED for s in site["steps"])


_BUILTINS = frozenset(dir(builtins))

#: steps that run something of the library's on a model it built eagerly
_LEARNED = ("entry", "call", "apply", "fn")


def _class_like(name: str) -> bool:
    return name.rsplit(".", 1)[-1][:1].isupper()


def _class_tables(tree: ast.Module, scope: "_Scope") -> dict[str, list[str]]:
    """Module-level dicts of classes (``MODELS = {"llama": Transformer, ...}``): name -> the
    qualified names of its values."""
    out: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not (isinstance(target, ast.Name) and isinstance(value, ast.Dict) and value.values):
            continue
        names = [scope.qualify(v) for v in value.values]
        if all(names):
            out[target.id] = list(dict.fromkeys(names))
    return out


def _materialised(site: dict) -> bool:
    return any(s["kind"] in ("to_empty", "load", "reset") for s in site["steps"])


def _text(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short_call(call: ast.Call) -> str:
    """``model.init_weights()``, ``model.load_state_dict(..., assign=True)``."""
    func = _text(call.func)
    if any(k.arg == "assign" for k in call.keywords):
        return f"{func}(..., assign=True)"
    if func.endswith(".apply") and len(call.args) == 1:
        return f"{func}({_text(call.args[0], 30)})"
    return f"{func}()"


def _is_meta(expr: ast.AST | None) -> bool:
    """``"meta"``, ``torch.device("meta")``."""
    if isinstance(expr, ast.Constant):
        return expr.value == "meta"
    if isinstance(expr, ast.Call) and _dotted(expr.func).endswith("device") and expr.args:
        return _is_meta(expr.args[0])
    return False


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _true(expr: ast.AST | None) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is True


class _Scope:
    """One function body (or the module's), walked in source order."""

    def __init__(
        self,
        aliases: dict[str, str],
        local: set[str],
        module: str,
        is_package: bool,
        tables: dict[str, list[str]] | None = None,
        function: str = "",
    ):
        #: the module's imports, copied once the scope imports something of its own
        self.aliases = aliases
        self.own_aliases = False
        self.local = local
        self.module = module
        self.is_package = is_package
        #: module-level dicts of classes (:func:`_class_tables`)
        self.tables = tables or {}
        #: the qualified name of the top-level function walked ("": another scope)
        self.function = function
        #: a local name -> the classes it holds (``cls = Transformer``, ``cls = MODELS[k]``)
        self.classes: dict[str, list[str]] = {}
        self.sites: list[dict[str, Any]] = []
        #: the expression text (``model``, ``self.model``) -> its site
        self.tracked: dict[str, dict[str, Any]] = {}
        #: the ``with`` expression of the innermost meta context
        self.context: ast.expr | None = None

    def qualify(self, node: ast.AST) -> str:
        name = _dotted(node)
        if not name:
            return ""
        head, _, rest = name.partition(".")
        if head in self.aliases:
            return f"{self.aliases[head]}.{rest}" if rest else self.aliases[head]
        if head in self.local and self.module:
            return f"{self.module}.{name}"
        return name

    # -- statements ---------------------------------------------------------------------
    def block(self, body: list[ast.stmt], conditional: bool, meta: str = "") -> None:
        for stmt in body:
            self.statement(stmt, conditional, meta)

    def statement(self, stmt: ast.stmt, conditional: bool, meta: str) -> None:
        walk = _STATEMENTS.get(type(stmt))
        if walk is not None:
            walk(self, stmt, conditional, meta)

    def imported(self, stmt: ast.Import | ast.ImportFrom, conditional: bool, meta: str) -> None:
        if not self.own_aliases:
            self.aliases, self.own_aliases = dict(self.aliases), True
        _ast_imports_into(stmt, self.aliases, self.module, self.is_package)

    def returns(self, stmt: ast.Return, conditional: bool, meta: str) -> None:
        if stmt.value is not None:
            self.returned(stmt.value, meta)

    def expression(self, stmt: ast.Expr, conditional: bool, meta: str) -> None:
        if type(stmt.value) is ast.Call:
            self.call(stmt.value, conditional)

    def for_block(self, stmt: ast.For | ast.AsyncFor, conditional: bool, meta: str) -> None:
        self.loop(stmt, conditional)
        self.branches(stmt, conditional, meta)

    def branches(self, stmt: ast.If | ast.While | ast.For, conditional: bool, meta: str) -> None:
        self.block(stmt.body, True, meta)
        self.block(stmt.orelse, True, meta)

    def with_block(self, stmt: ast.With | ast.AsyncWith, conditional: bool, meta: str) -> None:
        """A ``with``: its body under the meta context it enters, if any."""
        kind = meta
        for item in stmt.items:
            found = self.meta_context(item.context_expr)
            if found:
                kind, self.context = found, item.context_expr
        self.block(stmt.body, conditional, kind)

    def try_block(self, stmt: ast.Try, conditional: bool, meta: str) -> None:
        """A ``try``: its body and ``finally`` as the statement runs, the handlers and
        ``else`` conditionally."""
        self.block(stmt.body, conditional, meta)
        for handler in stmt.handlers:
            self.block(handler.body, True, meta)
        self.block(stmt.orelse, True, meta)
        self.block(stmt.finalbody, conditional, meta)

    def meta_context(self, expr: ast.AST) -> str:
        """``"all"``, ``"params"`` or ``""``: what a ``with`` puts on the meta device."""
        if not isinstance(expr, ast.Call):
            return ""
        q = self.qualify(expr.func)
        if q == "torch.device" and expr.args and _is_meta(expr.args[0]):
            return "all"
        if q in PARAMS_ONLY_META_CONTEXTS:
            buffers = _keyword(expr, "include_buffers")
            if buffers is None and expr.args:
                buffers = expr.args[0]
            return "all" if _true(buffers) else "params"
        if q.rsplit(".", 1)[-1] in EMPTY_INIT_CONTEXTS and _true(_keyword(expr, "empty_init")):
            return "lightning"
        return ""

    def assign(self, stmt: ast.Assign | ast.AnnAssign, conditional: bool, meta: str) -> None:
        targets = stmt.targets if type(stmt) is ast.Assign else [stmt.target]
        value = stmt.value
        if type(value) is not ast.Call:  # none is a call: no site
            if len(targets) == 1 and type(targets[0]) is ast.Name and value is not None:
                held = self.held_classes(value)
                if held:
                    self.classes[targets[0].id] = held  # ``cls = Transformer``
            return
        if len(targets) != 1:
            self.call(value, conditional)
            return
        target = _dotted(targets[0])
        site = self.built(value, meta)
        if site is not None and target:
            self.sites.append(site)
            self.tracked[target] = site
            return
        first = value.args[0] if value.args else None
        wrapped = self.tracked.get(_dotted(first)) if first is not None else None
        if wrapped is not None and target:
            # ``model = FSDP(model, ...)``, ``model = torch.compile(model)``: the same model
            self.wrapper(value, wrapped)
            self.tracked[target] = wrapped
            return
        self.call(value, conditional)
        via = self.qualify(value.func)
        if target and via and not meta:
            # ``model = build(cfg)``: a site when a builder of the tree returns a meta model
            # (:func:`sequences` resolves it)
            pending = {"build": [], "via": via, "line": value.lineno, "meta": "", "steps": []}
            pending["call"] = value  # its text once kept (:func:`_kept_sites`)
            self.sites.append(pending)
            self.tracked[target] = pending

    def held_classes(self, value: ast.expr) -> list[str]:
        """The classes an expression names: ``Transformer``, a local holding one, an element
        of a module-level dict of classes (``MODELS[name]``)."""
        if isinstance(value, ast.Name) and value.id in self.classes:
            return self.classes[value.id]
        if isinstance(value, ast.Subscript) and isinstance(value.value, (ast.Name, ast.Attribute)):
            if isinstance(value.value, ast.Name) and value.value.id in self.tables:
                return self.tables[value.value.id]
            # a dict of another file: :func:`sequences` reads its classes (``TABLE``)
            table = self.qualify(value.value)
            return [f"{table}{TABLE}"] if table else []
        if isinstance(value, (ast.Name, ast.Attribute)):
            name = self.qualify(value)
            return [name] if name and name.rsplit(".", 1)[-1][:1].isupper() else []
        return []

    def returned(self, value: ast.expr, meta: str) -> None:
        """``return Model(cfg)`` under a meta context, or ``return model`` of a model built on
        meta here: the function is a builder (its callers' sequences are the sites)."""
        if not self.function:
            return
        site = self.built(value, meta) if isinstance(value, ast.Call) else None
        if site is None:
            site = self.tracked.get(_dotted(value))
            if site is None or not site.get("meta") or _materialised(site):
                return  # a model materialised here is this function's own site
        self.sites.append({**site, "builder": self.function, "steps": list(site["steps"])})

    def built(self, call: ast.Call, meta: str) -> dict[str, Any] | None:
        """The site a constructor call starts: under a meta context, or ``device="meta"``."""
        in_context = bool(meta)
        if not (meta or call.keywords):
            return None
        if not meta and _is_meta(_keyword(call, "device")):
            meta = "all"
        if not meta:
            return None
        held = [] if isinstance(call.func, ast.Attribute) else self.held_classes(call.func)
        names = held[:1] if len(held) == 1 else [] if held else [self.qualify(call.func)]
        if isinstance(call.func, ast.Attribute):
            # ``Transformer.from_model_args(args)``: a class's factory
            names.append(self.qualify(call.func.value))
        names = [n for n in names if n]
        if len(held) > 1:
            names = held  # ``MODELS[name](args)``: each class of the table may be built
        if not names:
            return None
        steps: list[dict[str, Any]] = []
        site: dict[str, Any] = {}
        buffers = self.included_buffers() if in_context else None
        if buffers is not None:
            site["context"] = buffers
        if meta == "lightning" and isinstance(self.context, ast.Call):
            # Lightning's strategies materialise the meta model by each module's own hook
            step = self.step("reset", self.context, name="reset_parameters")
            step["call"] = f"{_text(self.context.func)}(empty_init=True)"
            steps.append(step)
            meta = "all"
        if len(held) > 1 or any(n.endswith(TABLE) for n in held):
            site["each"] = True
        return {
            "build": names,
            "line": call.lineno,
            "call": _short_call(call).replace("()", "(...)") if call.args else _short_call(call),
            "meta": meta,
            "steps": steps,
            **site,
        }

    def included_buffers(self) -> dict[str, Any] | None:
        """Where the meta context puts buffers on meta by choice (accelerate's
        ``init_empty_weights(include_buffers=True)``): the span of that ``True``, for the fix
        that turns it off (``{"line", "col", "end_line", "end_col", "call"}``, 1-based rows,
        0-based columns as ``ast`` gives them)."""
        ctx = self.context
        if not isinstance(ctx, ast.Call) or self.qualify(ctx.func) not in PARAMS_ONLY_META_CONTEXTS:
            return None
        value = _keyword(ctx, "include_buffers")
        if value is None and ctx.args:
            value = ctx.args[0]
        if not _true(value) or value.end_lineno is None or value.end_col_offset is None:
            return None
        return {
            "line": value.lineno,
            "col": value.col_offset,
            "end_line": value.end_lineno,
            "end_col": value.end_col_offset,
            "call": _text(ctx),
        }

    def step(self, kind: str, call: ast.Call, **extra: Any) -> dict[str, Any]:
        # the call's text once its site is kept (:func:`_kept_sites`): most are not
        return {"kind": kind, "line": call.lineno, "call": call, **extra}

    def wrapper(self, call: ast.Call, site: dict[str, Any]) -> None:
        """FSDP1 materialises a meta model: ``param_init_fn`` on each module, by default each
        module's ``reset_parameters()``."""
        q = self.qualify(call.func)
        if q in SHARDING_WRAPPERS_WITH_INIT:
            site["steps"].append(self.step("reset", call, name="reset_parameters"))

    def call(self, call: ast.Call, conditional: bool) -> None:
        func = call.func
        if isinstance(func, ast.Attribute):
            site = self.tracked.get(_dotted(func.value))
            if site is not None:
                self.method(site, func.attr, call, conditional)
                return
        first = call.args[0] if call.args else None
        site = self.tracked.get(_dotted(first)) if first is not None else None
        if site is None:
            return
        q = self.qualify(func)
        if q in CHECKPOINT_LOADERS or q.rsplit(".", 1)[-1] in CHECKPOINT_LOADER_NAMES:
            site["steps"].append(self.step("load", call, maybe=conditional))
        elif q in SHARDING_WRAPPERS_WITH_INIT:
            self.wrapper(call, site)
        elif (
            q
            and isinstance(func, ast.Name)
            and len(call.args) == 1
            and not call.keywords
            and func.id not in _BUILTINS
            and not q.startswith(LIBRARY_PREFIXES)
        ):
            # ``init_model(model)``: maybe a function of the tree handed the whole model
            site["steps"].append(self.step("fn", call, function=q))

    def method(self, site: dict, name: str, call: ast.Call, conditional: bool) -> None:
        steps = site["steps"]
        if name == "to_empty":
            steps.append(self.step("to_empty", call))
        elif name in ROOT_ENTRIES:
            steps.append(self.step("entry", call, name=name))
        elif name == "apply" and call.args:
            steps.append(self.step("apply", call, function=self.qualify(call.args[0])))
        elif name == "load_state_dict":
            loaded = _true(_keyword(call, "assign")) or any(s["kind"] == "to_empty" for s in steps)
            if loaded:
                steps.append(self.step("load", call, maybe=conditional))
        elif not name.startswith("__") and name not in NOT_INITIALISERS:
            # ``model.setup_weights()``: the model's own method, an initialiser of the
            # library's when the class defines it and it re-creates tensors (the cross-file
            # step decides: :class:`~metalint.static.protocol.Protocols`)
            steps.append(self.step("call", call, name=name))

    def loop(self, stmt: ast.For | ast.AsyncFor, conditional: bool) -> None:
        """``for m in model.modules(): m.reset_parameters()``: every module's own hook, parents
        first; ``for m in reversed(list(model.modules()))``: children first (``order``)."""
        it = stmt.iter
        order = {}
        if (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id == "reversed"
            and len(it.args) == 1
        ):
            it = it.args[0]
            if (
                isinstance(it, ast.Call)
                and isinstance(it.func, ast.Name)
                and it.func.id in ("list", "tuple")
                and len(it.args) == 1
            ):
                it = it.args[0]
            order = {"order": "children"}
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute)):
            return
        site = self.tracked.get(_dotted(it.func.value))
        if site is None or it.func.attr not in ("modules", "named_modules", "children"):
            return
        var = stmt.target
        if isinstance(var, ast.Tuple) and var.elts:
            var = var.elts[-1]
        if not isinstance(var, ast.Name):
            return
        for node in ast.walk(stmt):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == var.id
                and node.func.attr in MODULE_HOOKS
            ):
                site["steps"].append(self.step("reset", node, name=node.func.attr, **order))


#: statement type -> how :meth:`_Scope.statement` walks it (any other: not at all)
_STATEMENTS = {
    ast.Import: _Scope.imported,
    ast.ImportFrom: _Scope.imported,
    ast.With: _Scope.with_block,
    ast.AsyncWith: _Scope.with_block,
    ast.Assign: _Scope.assign,
    ast.AnnAssign: _Scope.assign,
    ast.Return: _Scope.returns,
    ast.Expr: _Scope.expression,
    ast.For: _Scope.for_block,
    ast.AsyncFor: _Scope.for_block,
    ast.If: _Scope.branches,
    ast.While: _Scope.branches,
    ast.Try: _Scope.try_block,
}


def _ast_imports_into(node, aliases: dict[str, str], module: str, is_package: bool) -> None:
    from metalint.static.names import _ast_imports

    _ast_imports(node, aliases, module, is_package)


# -- across files ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Sequence:
    """What materialises a model root at one site, as the cross-file step reads it."""

    root: str
    #: ``(file, line, text)`` of the call the finding names: the entry point, or the
    #: materialisation itself when nothing runs after it
    where: tuple[str, int, str]
    meta: str  # "all" or "params"
    to_empty: bool
    #: ``(kind, name)`` of what runs on the model: ``("entry", "init_weights")``,
    #: ``("apply", "pkg.init_fn")``, ``("reset", "reset_parameters")``
    runs: tuple[tuple[str, str], ...]
    #: a checkpoint load that always runs restores every persistent tensor
    loads: bool
    #: every per-module reset of the site runs the children's hooks before their parent's
    #: (``for m in reversed(list(model.modules()))``): a parent's hook has the last word
    children_first: bool = False

    @property
    def per_module(self) -> bool:
        """Every module's own ``reset_parameters()`` runs: today's per-module protocol."""
        return ("reset", "reset_parameters") in self.runs

    @property
    def label(self) -> str:
        file, line, text = self.where
        if not file:
            return f'`{text}` alone (`protocol = "init_weights-only"`)'
        return f"`{text}` at {file}:{line}"

    @property
    def call(self) -> tuple[str, str, int]:
        """``(call, file, line)``: ``Diagnostic.materialised``."""
        file, line, text = self.where
        return text, file, line

    def describe(self, root: str) -> str:
        """What the site runs on the model ``root`` (its short name), in words."""
        ran = [
            f"`{root}.{name}()`"
            if kind == "entry"
            else f"`apply({name.rsplit('.', 1)[-1]})`"
            if kind == "apply"
            else f"every module's `{name}()`"
            for kind, name in self.runs
        ]
        if self.loads:
            ran.append("a checkpoint load, which holds no non-persistent buffer")
        if not ran:
            return "nothing re-initialises the model after it is built on meta"
        own = "" if self.per_module else ", and no module's own `reset_parameters()`"
        return f"it runs {' and '.join(ran)}{own}"

    @property
    def runs_entry(self) -> bool:
        return any(kind == "entry" for kind, _ in self.runs)


def sequences(sites: list[tuple[str, dict]], resolve) -> dict[str, list[Sequence]]:
    """Model root (a class of the tree) -> the sequences that materialise it, from the sites
    of every file (``(display path, site)``). ``resolve(name)``: the tree's class of that name
    or None. A site whose built name is no class of the tree (a factory function) is left
    out."""
    out: dict[str, list[Sequence]] = {}
    builders = {s["builder"]: s for _, s in sites if s.get("builder")}
    tables = {s["table"]: s["build"] for _, s in sites if s.get("table")}
    for path, site in sites:
        site = _through_builder(site, builders)
        if site is None or site.get("table"):
            continue
        names = [
            c
            for n in site.get("build", ())
            for c in (tables.get(n[: -len(TABLE)], ()) if n.endswith(TABLE) else (n,))
        ]
        resolved = [r for n in names if (r := resolve(n))]
        for root in dict.fromkeys(resolved if site.get("each") else resolved[:1]):
            out.setdefault(root, []).append(_sequence(root, path, site))
    return out


def eager_builds(sites: list[tuple[str, dict]], resolve) -> dict[str, list[Sequence]]:
    """Model root -> what the library's builders run on it after an eager build (``model =
    Model(cfg)``, then ``model.setup_weights()``, ``model.apply(init_fn)``, ``init_fn(model)``):
    the library's own initialisers, learned from the code that builds the model. No site
    (nothing is built on meta there), but the protocol a materialiser of the model follows:
    what they re-create is not lost. Read with :func:`settled`."""
    out: dict[str, list[Sequence]] = {}
    for path, site in sites:
        if site.get("meta") or site.get("builder") or site.get("table"):
            continue
        root = resolve(site.get("via", ""))
        steps = [s for s in site.get("steps", ()) if s["kind"] in _LEARNED]
        if root is None or not steps:
            continue
        seq = _sequence(root, path, {**site, "steps": steps})
        out.setdefault(root, []).append(replace(seq, meta="", to_empty=False))
    return out


def _through_builder(site: dict, builders: dict[str, dict]) -> dict | None:
    """The site as the caller of a builder materialises it (``model = build(cfg)``: what the
    builder builds on meta, then its steps and the caller's); None for a builder itself, or a
    call of a function that builds no meta model."""
    if site.get("builder"):
        return None
    if site.get("meta") or site.get("table"):
        return site
    builder = builders.get(site.get("via", ""))
    if builder is None:
        return None
    return {
        **site,
        "build": builder.get("build", []),
        "meta": builder.get("meta", "all"),
        "each": builder.get("each", False),
        "steps": [*builder.get("steps", []), *site.get("steps", [])],
    }


def _sequence(root: str, path: str, site: dict) -> Sequence:
    """The :class:`Sequence` of one site that builds ``root``."""
    steps = site.get("steps", [])
    runs = tuple(
        (s["kind"], s.get("name") or s.get("function") or "")
        for s in steps
        if s["kind"] in ("entry", "apply", "reset", "call", "fn")
    )
    shown = [s for s in steps if s["kind"] in ("entry", "apply", "call", "fn")]
    for kinds in (("load", "to_empty"), ("reset",)):
        shown = shown or [s for s in steps if s["kind"] in kinds][-1:]
    last = shown[-1] if shown else {"line": site["line"], "call": site["call"]}
    return Sequence(
        root,
        (path, last["line"], last["call"]),
        site.get("meta", "all"),
        any(s["kind"] == "to_empty" for s in steps),
        runs,
        any(s["kind"] == "load" and not s.get("maybe") for s in steps),
        any(s["kind"] == "reset" for s in steps)
        and all(s.get("order") == "children" for s in steps if s["kind"] == "reset"),
    )


def drop_repeated(diagnostics: list) -> list:
    """The findings of one file less those judged at a materialisation site
    (``AtMaterialisation``) about a tensor whose lost value another finding of its
    class already names (ML001's ``gamma``): one finding per lost tensor, the one whose fix restores it."""
    named: dict[str, set[str]] = {}
    for d in diagnostics:
        cond = d.condition
        if cond is not None and cond.get(NotRecreated) and d.subject:
            # a finding about a lost value (ML001, ML002, ML004), not one about the same
            # tensor for another reason (ML012's factory without `device`)
            named.setdefault(cond.cls, set()).update(d.subject)
    out = []
    for d in diagnostics:
        cond = d.condition
        if cond is not None and cond.get(AtMaterialisation) and d.subject:
            if all(t in named.get(cond.cls, ()) for t in d.subject):
                continue
        out.append(d)
    return out


def settled(seq: Sequence, defines, known_function) -> Sequence:
    """``seq`` with what its script calls on the model read: ``("call", name)`` is the root's
    entry point when ``defines(name)`` (the root's class, of the tree, defines that method),
    ``("fn", name)`` stays when ``known_function(name)`` (a function of the tree); anything
    else (``model.generate()``, ``wandb.watch(model)``) runs nothing of the model's init."""
    runs: list[tuple[str, str]] = []
    for kind, name in seq.runs:
        if kind == "call":
            if defines(name):
                runs.append(("entry", name))
        elif kind != "fn" or known_function(name):
            runs.append((kind, name))
    return seq if tuple(runs) == seq.runs else replace(seq, runs=tuple(runs))


def root_only(seqs: list[Sequence]) -> Sequence | None:
    """The first of ``seqs`` that runs the root's entry point and nothing per module (no
    ``apply``, no reset, no checkpoint load): the probe's ``init_weights-only`` mode."""
    for seq in seqs:
        if seq.runs and all(kind == "entry" for kind, _ in seq.runs) and not seq.loads:
            return seq
    return None


def probed_site(seqs: list[Sequence]) -> Sequence | None:
    """The site the probe replays under ``--init auto``: the first that runs only the root's
    entry point (:func:`root_only`), else the first whose checkpoint load always runs (the
    probe then loads the model's own persistent tensors with ``assign=True``)."""
    return root_only(seqs) or next((q for q in seqs if q.loads), None)


def tree_sites(start: str, limit: int = 5_000) -> list[tuple[str, dict]]:
    """The materialisation sites of the tree a file belongs to: the files of its project (the
    folder of the nearest ``[tool.metalint]`` config above it, else its git work tree; the
    file alone outside both), as ``check`` discovers them, at most ``limit``; none for an
    installed package (``site-packages``). Only ``ast`` (no libcst): the probe asks this of the class it builds
    (``--init auto``)."""
    from pathlib import Path

    from metalint.config import ConfigError, load_settings, project_root
    from metalint.files import Discovery, display_path
    from metalint.static.names import module_name_for

    folder = Path(start).resolve().parent
    if {"site-packages", "dist-packages"} & set(folder.parts):
        return []
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    try:
        settings = load_settings(folder)
    except ConfigError:
        return []
    # the project check would judge the file in; outside any (a file in /tmp) the file alone
    project = project_root(settings, Path(start))
    where = [project] if project is not None else [Path(start)]
    out: list[tuple[str, dict]] = []
    for n, path in enumerate(Discovery(settings.root, settings.exclude).files(where)):
        if n >= limit:
            break
        try:
            source = path.read_text(encoding="utf-8")
            if not (_may_hold_site(source) or _tabled(source)):
                continue
            tree = ast.parse(source)
        except (OSError, UnicodeError, SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        module = module_name_for(path.absolute())
        sites = materialisations(tree, source, module, path.name == "__init__.py")
        out += [(display_path(path), site) for site in sites]
    return out
