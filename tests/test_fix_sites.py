"""A rule hands its fix what it matched (a typed site on the finding); the fix reads it and
never detects the pattern again."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from metalint.diagnostics import Diagnostic
from metalint.fix import registry
from metalint.fix.edits import Rewrite, Unfixable
from metalint.rules import all_rules
from metalint.rules.buffer_from_value import BufferFromValue
from metalint.rules.data_dependent_init import DataDependentInit
from metalint.rules.device_escape import DeviceEscape
from metalint.rules.inplace_init_outside_hook import InplaceInitOutsideHook
from metalint.rules.parameter_from_value import ParameterFromValue, ParameterSite
from metalint.static.engine import analyze_source
from metalint.static.model import collect
from metalint.static.results import FileResult
from metalint.static.rule import RuleContext

SOURCE = """\
import torch
from torch import nn


class M(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d)).requires_grad_(False)
        self.ws = nn.ParameterList([nn.Parameter(torch.randn(d, d)) for _ in range(3)])
        conv = nn.Conv1d(d, d, 3)
        self.weight = conv.weight
"""


def _findings():
    module = cst.parse_module(SOURCE)
    facts = collect(module, "m")
    ctx = RuleContext(facts, module, ("reset_parameters", "init_weights"), "m.py")
    cls = facts.classes[0]
    return ctx, cls, {f.site.attr: f for f in ParameterFromValue(ctx).check_class(cls)}


def test_the_rule_hands_its_fix_a_typed_site():
    _, _, found = _findings()
    assert set(found) == {"scale", "ws", "weight"}
    assert all(isinstance(f.site, ParameterSite) for f in found.values())
    scale = found["scale"].site
    # the `nn.Parameter(...)` call itself, under `.requires_grad_(False)`
    assert cst.Module([]).code_for_node(scale.call) == "nn.Parameter(torch.ones(d))"
    assert scale.items is None
    assert type(found["ws"].site.items) is cst.ListComp and found["ws"].site.call is None
    # a tensor borrowed from a module built and thrown away: nothing to rewrite
    assert found["weight"].site.call is found["weight"].site.items is None


def test_the_fix_reads_the_site_and_does_not_detect_again():
    from metalint.fix import parameter_from_value

    ctx, cls, found = _findings()
    rewrite = parameter_from_value.plan(ctx, cls, found["scale"])
    assert "torch.empty(d)" in cst.Module([]).code_for_node(rewrite.new_class)
    # the same statement, handed without its call: the fix does not look for one itself
    bare = dataclasses.replace(
        found["scale"], site=dataclasses.replace(found["scale"].site, call=None)
    )
    with pytest.raises(Unfixable, match="no `nn.Parameter"):
        parameter_from_value.plan(ctx, cls, bare)
    # the list, handed as a single parameter: not rewritten as a list
    as_one = dataclasses.replace(
        found["ws"], site=dataclasses.replace(found["ws"].site, items=None)
    )
    with pytest.raises(Unfixable):
        parameter_from_value.plan(ctx, cls, as_one)
    assert parameter_from_value.plan(ctx, cls, found["ws"]).message.startswith(
        "Create the parameters of `ws`"
    )


# -- every rule with a codemod ---------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "fix"
FIXED_RULES = [r for r in all_rules() if r.codemod]


def test_every_rule_with_a_codemod_declares_a_frozen_site_of_its_module():
    assert len(FIXED_RULES) >= 9
    for rule in FIXED_RULES:
        site = rule.site_type
        assert site is not None, f"{rule.code} declares no site_type"
        assert dataclasses.is_dataclass(site) and site.__dataclass_params__.frozen, rule.code
        assert site.__module__ == rule.__module__, rule.code
    assert [r.code for r in all_rules() if not r.codemod and r.site_type] == []


def _sources(rule) -> list[str]:
    """The rule's INVALID examples and the fix fixtures filed under its code."""
    out = [textwrap.dedent(getattr(e, "source", e)).lstrip("\n") for e in rule.INVALID]
    paths = sorted((FIXTURES / rule.code).glob("*.in.py"))
    paths += sorted((FIXTURES / rule.code).glob("refused/*.py"))
    return out + [p.read_text(encoding="utf-8") for p in paths]


@pytest.mark.parametrize("rule", FIXED_RULES, ids=lambda r: r.code)
def test_the_fix_is_handed_the_rules_site_and_rewrites_only_from_it(rule):
    """Every finding the engine hands the codemod carries a site of the rule's ``site_type``;
    and where the codemod rewrites a finding, the same finding without its site is not
    rewritten: the codemod builds the rewrite from the site, it does not find the pattern
    again from the node."""
    handed, rewritten = [], 0

    def fix_for(code, ctx, finding, row, source):
        nonlocal rewritten
        if code == rule.code:
            handed.append(finding.site)
            if isinstance(registry.plan(code, ctx, finding), Rewrite):
                rewritten += 1
                bare = dataclasses.replace(finding, site=None)
                assert not isinstance(registry.plan(code, ctx, bare), Rewrite)
        return registry.fix_for(code, ctx, finding, row, source)

    for source in _sources(rule):
        analyze_source(source, "m.py", "m", rules=[rule], fix_for=fix_for, elide_unread=False)
    assert handed and rewritten, rule.code
    wrong = [type(s).__name__ for s in handed if not isinstance(s, rule.site_type)]
    assert wrong == [], f"{rule.code} hands its fix {wrong}, not {rule.site_type.__name__}"


#: modules of ``metalint.static`` that hold syntax and the rule's types, not analyses
PLAIN = {"metalint.static.syntax", "metalint.static.names", "metalint.static.rule"}
#: the facts a codemod reads: the class, its methods, what runs while it is built
FACTS = {"ClassFacts", "MethodFacts", "FileFacts", "construction"}


def _tree(path) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"))


def _module_tree(module: str) -> ast.Module:
    return _tree(ROOT / (module.replace(".", "/") + ".py"))


def _imports(tree: ast.Module, prefix: str) -> dict[str, tuple[str, str]]:
    """``name -> (module, name)`` of what ``tree`` imports from modules under ``prefix``."""
    return {
        a.asname or a.name: (node.module, a.name)
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefix)
        for a in node.names
    }


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The functions of ``tree``, and the methods of its classes, by name."""
    return {
        n.name: n
        for top in tree.body
        for n in ([top] if isinstance(top, ast.FunctionDef) else getattr(top, "body", []))
        if isinstance(n, ast.FunctionDef)
    }


def _called(fn: ast.FunctionDef) -> set[str]:
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}


def _matchers(rule) -> set[str]:
    """What the rule's module finds its pattern with: the analyses it imports from
    ``metalint.static``, the public functions of ``metalint.static`` they call (``value_reads``
    -> ``meta_tensor``, ``is_legacy_sizes`` -> ``legacy_sizes``), and the functions it
    defines."""
    tree = _tree(inspect.getsourcefile(rule))
    out = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for name, (module, real) in _imports(tree, "metalint.static.").items():
        if module in PLAIN:
            continue
        out.add(name)
        source = _module_tree(module)
        fn = _functions(source).get(real)
        if fn is None:
            continue
        local = {
            n.name
            for n in source.body
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
        }
        imported = {
            n for n, (m, _r) in _imports(source, "metalint.static.").items() if m not in PLAIN
        }
        out |= _called(fn) & (local | imported)
    return out - FACTS


def _fix_trees(rule) -> tuple[ast.Module, list[ast.FunctionDef]]:
    """The codemod's module, and the functions it imports from other ``metalint.fix``
    modules (``store.legacy_empty``)."""
    tree = _module_tree(rule.codemod)
    helpers = [
        _functions(_module_tree(module)).get(real)
        for _name, (module, real) in _imports(tree, "metalint.fix.").items()
    ]
    return tree, [h for h in helpers if h is not None]


def _names(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.ImportFrom):
            out |= {a.asname or a.name for a in n.names}
    return out


def _used(tree: ast.AST) -> set[str]:
    """The functions a tree calls by name, and the names it imports."""
    out = {
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    return out | {
        a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names
    }


def test_no_codemod_calls_what_its_rule_matches_with():
    """A codemod, and the helpers of other fix modules it imports, name none of its rule's
    matchers nor what they are built from (``value_reads``/``meta_tensor`` for ML008,
    ``assigned_writes`` for ML003, ``legacy_sizes`` for ML009, ``module_children`` for ML003
    and ML010, ...): what the rule found reaches it in the site. And it reads the site."""
    found, blind = [], []
    for rule in FIXED_RULES:
        tree, helpers = _fix_trees(rule)
        names = _used(tree).union(*(_used(h) for h in helpers))
        found += [f"{rule.codemod}: {name}" for name in sorted(_matchers(rule) & names)]
        if "site" not in _names(tree):
            blind.append(rule.codemod)
    assert found == [] and blind == [], found + blind


#: the fields of a site that hold the node the rule matched (``EscapeSite.call``)
SITE_NODES = frozenset({"call"})
#: what asks an expression what it is: its type, its dotted name, what it names
ASKING = frozenset({"isinstance", "type", "dotted", "qualify"})


def _callee(call: ast.Call) -> str | None:
    return getattr(call.func, "id", None) or getattr(call.func, "attr", None)


class _Aliases:
    """Which parameters and locals of the codemod's functions hold the finding, its site, or
    what the rule matched: the finding's node (``finding.node``), the site's call, a part of
    them (``node.func.value``) or the line holding them (``edit.locate(node)``); followed
    through the calls between them."""

    def __init__(self, functions: dict[str, ast.FunctionDef]):
        self.functions = functions
        self.finding = {name: {"finding"} for name in functions}
        self.site: dict[str, set[str]] = {name: set() for name in functions}
        self.node: dict[str, set[str]] = {name: set() for name in functions}

    def is_site(self, fn: str, e: ast.AST) -> bool:
        if isinstance(e, ast.Attribute) and e.attr == "site":
            return isinstance(e.value, ast.Name) and e.value.id in self.finding[fn]
        return isinstance(e, ast.Name) and e.id in self.site[fn]

    def is_node(self, fn: str, e: ast.AST) -> bool:
        """Is ``e``, in function ``fn``, what the rule matched or a part of it?"""
        while isinstance(e, (ast.Attribute, ast.Subscript)):
            if isinstance(e, ast.Attribute) and (
                (
                    e.attr == "node"
                    and isinstance(e.value, ast.Name)
                    and e.value.id in self.finding[fn]
                )
                or (e.attr in SITE_NODES and self.is_site(fn, e.value))
            ):
                return True
            e = e.value
        return isinstance(e, ast.Name) and e.id in self.node[fn]

    def _add(self, held: dict[str, set[str]], fn: str, name: str) -> bool:
        if name in held[fn]:
            return False
        held[fn].add(name)
        return True

    def _bind(self, fn: str, target: ast.AST, value: ast.AST) -> bool:
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            return any(self._bind(fn, t, v) for t, v in zip(target.elts, value.elts))
        if (
            isinstance(target, ast.Tuple)
            and len(target.elts) == 3
            and isinstance(value, ast.Call)
            and _callee(value) == "locate"
            and value.args
            and self.is_node(fn, value.args[0])
        ):
            return self._bind_name(fn, self.node, target.elts[1])  # the line holding it
        if self.is_site(fn, value):
            return self._bind_name(fn, self.site, target)
        if self.is_node(fn, value):
            return self._bind_name(fn, self.node, target)
        return False

    def _bind_name(self, fn: str, held: dict[str, set[str]], target: ast.AST) -> bool:
        return isinstance(target, ast.Name) and self._add(held, fn, target.id)

    def _pass(self, fn: str, call: ast.Call) -> bool:
        callee = self.functions.get(getattr(call.func, "id", None))
        if callee is None:
            return False
        params = [a.arg for a in callee.args.args]
        given = list(zip(params, call.args)) + [(k.arg, k.value) for k in call.keywords]
        changed = False
        for param, arg in given:
            if self.is_node(fn, arg):
                changed |= self._add(self.node, callee.name, param)
            elif self.is_site(fn, arg):
                changed |= self._add(self.site, callee.name, param)
            elif isinstance(arg, ast.Name) and arg.id in self.finding[fn]:
                changed |= self._add(self.finding, callee.name, param)
        return changed

    def follow(self) -> None:
        changed = True
        while changed:
            changed = False
            for name, fn in self.functions.items():
                for n in ast.walk(fn):
                    if isinstance(n, ast.Assign):
                        changed |= any(self._bind(name, t, n.value) for t in n.targets)
                    elif isinstance(n, ast.Call):
                        changed |= self._pass(name, n)

    def shape_tests(self) -> list[str]:
        """``isinstance(node, ...)``, ``type(node.value)``, ``dotted(node.func.value)``,
        ``ctx.qualify(node.func)``, ``line.body``: what the rule matched, or the line holding
        it, asked what statement or expression it is."""
        out = []
        for name, fn in self.functions.items():
            for n in ast.walk(fn):
                asked = None
                if isinstance(n, ast.Call) and _callee(n) in ASKING and n.args:
                    asked = n.args[0]
                elif isinstance(n, ast.Attribute) and n.attr in ("targets", "target", "body"):
                    asked = n.value
                if asked is not None and self.is_node(name, asked):
                    out.append(f"{name}: {ast.unparse(n)}")
        return out


def test_no_codemod_asks_the_finding_node_what_it_is():
    """Whether the statement sets one attribute alone on its line (ML001, ML003, ML007), is a
    loop or a line holding a call (ML010), is an assignment or a call (ML001), is the move
    ``self.to(...)`` alone or chained to a cast (ML008), which factory makes the tensor a copy
    copies (ML009): the rule answers it once, in the site; no codemod tests the type, the
    name or the targets of the finding's node, of a part of it or of its line again."""
    asked = []
    for rule in FIXED_RULES:
        tree, helpers = _fix_trees(rule)
        functions = {**{h.name: h for h in helpers}, **_functions(tree)}
        aliases = _Aliases(functions)
        aliases.follow()
        asked += [f"{rule.codemod}: {where}" for where in aliases.shape_tests()]
    assert asked == [], asked


def test_no_fix_module_searches_the_class_for_the_method_of_a_node():
    """The method holding what a rule matched comes in its site; the searches of every method
    of the class for the node (``helper_of``, ``holding_method``) are gone."""
    fix = ROOT / "metalint" / "fix"
    names = set().union(*(_names(_tree(p)) for p in fix.glob("*.py")))
    assert names & {"helper_of", "holding_method", "initialising_method"} == set()


# -- what reading the site changed ------------------------------------------------------------


def _reasons(source: str, rule) -> dict[int, str]:
    registry.REASONS.clear()
    analyze_source(source, "m.py", "m", rules=[rule], fix_for=registry.fix_for, elide_unread=False)
    return {row: why for (path, code, row), why in registry.REASONS.items() if code == rule.code}


def test_a_buffer_registered_with_keywords_is_recomputed_from_its_tensor():
    """``register_buffer("inv_freq", persistent=False, tensor=inv_freq)``: the fix computes
    the value the rule matched (the ``tensor=`` argument), not the call's second argument
    (it wrote ``self.inv_freq.copy_(False)``)."""
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn


        class Rope(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.dim = dim
                inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
                self.register_buffer("inv_freq", persistent=False, tensor=inv_freq)
        """
    )
    result = analyze_source(
        source, "m.py", "m", rules=[BufferFromValue], fix_for=registry.fix_for, elide_unread=False
    )
    (diag,) = result.diagnostics
    text = "".join(e.content for e in diag.fix.edits)
    assert "self.inv_freq.copy_(1.0 / (10000 ** (torch.arange(0, self.dim, 2)" in text
    assert "copy_(False)" not in text


def test_a_read_of_what_a_function_of_the_file_returns_is_refused_for_its_chain():
    """``steps(n).tolist()``, ``steps`` a function of the file returning a meta tensor: the
    fix follows the read the rule matched and refuses at the function (it answered "not a
    read of a tensor created in `__init__`", having looked for the read again without the
    functions the rule knows return meta tensors)."""
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn


        def steps(n):
            return torch.linspace(0, 1, n)


        class Net(nn.Module):
            def __init__(self, n):
                super().__init__()
                rates = steps(n).tolist()
                self.fc = nn.Linear(n, n)
                self.rates = rates
        """
    )
    assert _reasons(source, DataDependentInit) == {12: "the value comes from `steps(...)`"}


def test_sites_stay_in_the_worker():
    """A site holds libcst nodes: the diagnostic made from a finding does not carry it, so
    what a worker sends and the cache stores (``FileResult.to_json``) is plain JSON."""
    assert "site" not in {f.name for f in dataclasses.fields(Diagnostic)}
    for rule in FIXED_RULES:
        source = textwrap.dedent(getattr(rule.INVALID[0], "source", rule.INVALID[0]))
        result = analyze_source(source, "m.py", "m", rules=[rule], fix_for=registry.fix_for)
        assert result.diagnostics, rule.code
        data = json.loads(json.dumps(result.to_json()))
        assert FileResult.from_json("m.py", data).diagnostics == result.diagnostics


# -- the facts the sites now carry ------------------------------------------------------------


def _found(rule, source: str):
    module = cst.parse_module(textwrap.dedent(source))
    facts = collect(module, "m")
    ctx = RuleContext(facts, module, ("reset_parameters", "init_weights"), "m.py")
    return ctx, [f for cls in facts.classes for f in rule(ctx).check_class(cls)]


def _with(finding, **changes):
    return dataclasses.replace(finding, site=dataclasses.replace(finding.site, **changes))


def _message(code: str, ctx, finding) -> str:
    """The rewrite's message, or ``refused: <reason>``."""
    planned = registry.plan(code, ctx, finding)
    return planned.message if isinstance(planned, Rewrite) else f"refused: {planned}"


def test_a_move_of_the_module_comes_with_its_line_and_whether_it_casts():
    """ML008: the line that is ``self.to(...)`` alone, and whether the move is chained to a
    cast, come in the site; the fix guards that line or refuses from them."""
    ctx, (alone, larger, cast) = _found(
        DataDependentInit,
        """\
        import torch
        from torch import nn


        class A(nn.Module):
            def __init__(self, d, device="cpu"):
                super().__init__()
                self.w = nn.Parameter(torch.ones(d))
                self.to(device)


        class B(nn.Module):
            def __init__(self, d, device="cpu"):
                super().__init__()
                self.w = nn.Parameter(torch.ones(d))
                moved = self.to(device)


        class C(nn.Module):
            def __init__(self, d, device="cpu"):
                super().__init__()
                self.w = nn.Parameter(torch.ones(d))
                self.half().to(device)
        """,
    )
    assert cst.Module([]).code_for_node(alone.site.statement).strip() == "self.to(device)"
    assert not alone.site.cast and larger.site.statement is None and cast.site.cast
    assert _message("ML008", ctx, alone).startswith("Run `self.to(device)` only when")
    assert _message("ML008", ctx, larger) == "refused: the move is part of a larger statement"
    assert _message("ML008", ctx, cast).startswith("refused: the move is chained to a cast")
    # the fix reads the site, not the statement
    assert _message("ML008", ctx, _with(alone, statement=None)) == _message("ML008", ctx, larger)
    assert _message("ML008", ctx, _with(alone, cast=True)) == _message("ML008", ctx, cast)


def test_a_copy_comes_with_the_factory_of_the_tensor_it_copies():
    """ML009: the torch factory that makes the copied tensor, through the methods that keep it
    where it is (``.normal_(...)``), comes in the site; the fix gives that call the device."""
    ctx, found = _found(
        DeviceEscape,
        """\
        import torch
        from torch import nn


        class Topology(nn.Module):
            def __init__(self, n: int = 3, device: str = "cpu"):
                super().__init__()
                self.device = device
                self.a = torch.ones((n, n)).to(self.device)
                self.b = nn.Parameter(torch.zeros(n).normal_(0, 0.01).to(self.device))
                self.c = torch.cat([torch.ones(n)]).to(self.device)
        """,
    )
    factories = [
        None if f.site.factory is None else cst.Module([]).code_for_node(f.site.factory)
        for f in found
    ]
    assert factories == ["torch.ones((n, n))", "torch.zeros(n)", None]
    ones, drawn, cat = found
    assert _message("ML009", ctx, ones).startswith("Create it with `torch.ones(..., device=")
    assert _message("ML009", ctx, drawn).startswith("Create it with `torch.zeros(..., device=")
    refused = "refused: the copied tensor is not made by a torch factory that takes `device=`"
    assert _message("ML009", ctx, cat) == refused
    assert _message("ML009", ctx, _with(ones, factory=None)) == refused


def test_an_init_comes_with_the_children_of_its_class():
    """ML003: whether the class has child modules comes in the site: a method of the class
    that loops over ``self.parameters()`` of a class without any initialises only its own
    tensors and is called from ``reset_parameters()``; with children it is the parent's init
    of them."""
    ctx, (loop,) = _found(
        InplaceInitOutsideHook,
        """\
        import torch
        from torch import nn


        class Attention(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.w = nn.Parameter(torch.empty(d, d))
                self._reset()

            def _reset(self):
                for p in self.parameters():
                    nn.init.xavier_uniform_(p)
        """,
    )
    assert loop.site.children == frozenset()
    assert _message("ML003", ctx, loop).startswith("Call `_reset()` from `reset_parameters()`")
    with_children = _with(loop, children=frozenset({"proj"}))
    assert _message("ML003", ctx, with_children).startswith(
        "Call `_reset()` from a root `init_weights()`"
    )
