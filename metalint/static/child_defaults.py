"""What a child module does to an init its parent writes in construction (ML004's questions):
whether the child's own default (a norm layer's ones and zeros, a parameter's default) makes
the write a no-op, whether a parent's reset or the child's own ``reset_parameters()``
restores it, and the law a write draws from, named as its caller's keywords."""

from __future__ import annotations

import ast
import re

import libcst as cst

from metalint.static.defaults import applied_function, is_self_apply, unwrap_partial
from metalint.static.model import CallSite, ClassFacts
from metalint.static.names import dotted
from metalint.static.syntax import number, string_value
from metalint.static.tensors import inplace_kind
from metalint.vocabulary import (
    BATCH_NORM_BASES,
    BATCH_NORMS,
    DEVICE_DTYPE_DICTS,
    IDENTITY_OPERANDS,
    NORM_LAYERS,
)


def child_class(
    cls: ClassFacts, methods, attr: str, qualify, through_locals: bool = False
) -> str | None:
    """Qualified class of ``self.<attr> = Cls(...)`` assigned during construction; with
    ``through_locals``, also of ``self.<attr> = local`` where the method builds that local
    with one constructor call (``if token_emb is None: token_emb = TokenEmbedding(...)``)."""
    for m in methods:
        for a in m.assigns:
            if a.target == f"self.{attr}" and isinstance(a.value, cst.Call):
                return qualify(a.value.func)
            if through_locals and a.target == f"self.{attr}" and type(a.value) is cst.Name:
                made = [v for _s, v in m.local_values.get(a.value.value, ()) if type(v) is cst.Call]
                if len(made) == 1:
                    return qualify(made[0].func)
        for call in m.calls:
            # self.add_module("bn", nn.BatchNorm2d(c))
            args = call.node.args
            if (
                call.receiver == "self"
                and call.method in ("add_module", "register_module")
                and len(args) >= 2
                and string_value(args[0].value) == attr
                and isinstance(args[1].value, cst.Call)
            ):
                return qualify(args[1].value.func)
    return None


_NORM_NAME = re.compile(r"(^|_)(bn|norm|ln|gn|batch_norm|layer_norm|group_norm)\d*$")


def restored_by_child(cls, methods, name: str, call: CallSite, qualify) -> bool:
    """``nn.init.constant_(self.bn.bias, 0)``: the norm's own reset gives the same value."""
    parts = name.split(".")
    if len(parts) != 2:
        return False
    child = child_class(cls, methods, parts[0], qualify)
    # a torch norm layer, or a child named like one built from a configurable norm_layer
    if child not in NORM_LAYERS and not (
        (child is None or not child.startswith("torch.")) and _NORM_NAME.search(parts[0])
    ):
        return False
    kind = inplace_kind(call, qualify)
    return (parts[1], kind) in (("weight", "ones"), ("bias", "zeros"))


def norm_default(cls, methods, name: str, qualify) -> float | None:
    """What a norm child's own reset gives this tensor (weight 1, bias 0), if it is one."""
    parts = name.split(".")
    if len(parts) != 2:
        return None
    child = child_class(cls, methods, parts[0], qualify)
    if child not in NORM_LAYERS and not (
        (child is None or not child.startswith("torch.")) and _NORM_NAME.search(parts[0])
    ):
        return None
    return {"weight": 1.0, "bias": 0.0}.get(parts[1])


def _isinstance_of(test: cst.BaseExpression, param: str, qualify) -> set[str] | None:
    """The qualified types of ``isinstance(<param>, T)`` / ``isinstance(<param>, (T1, T2))``;
    None for any other test."""
    if not (
        isinstance(test, cst.Call)
        and dotted(test.func) == "isinstance"
        and len(test.args) == 2
        and isinstance(test.args[0].value, cst.Name)
        and test.args[0].value.value == param
    ):
        return None
    types = test.args[1].value
    elements = [e.value for e in types.elements] if isinstance(types, cst.Tuple) else [types]
    return {qualify(e) or dotted(e) or "" for e in elements}


def _reset_types(fn: cst.FunctionDef, qualify, method: bool) -> set[str]:
    """The module types ``fn(m)`` calls ``m.reset_parameters()`` on whatever its other
    arguments: branches of an ``if``/``elif`` chain of ``isinstance(m, ...)`` tests only
    (EfficientViM's ``elif isinstance(m, (nn.LayerNorm, nn.BatchNorm2d)): m.reset_parameters()``)."""
    params = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)][
        1 if method else 0 :
    ]
    if not params or not isinstance(fn.body, cst.IndentedBlock):
        return set()
    m = params[0]
    reset: set[str] = set()
    for stmt in fn.body.body:
        node, claimed = stmt, set()
        while isinstance(node, cst.If):
            types = _isinstance_of(node.test, m, qualify)
            if types is None:
                break  # a test on something else: where a module goes depends on it
            if any(
                isinstance(line, cst.SimpleStatementLine)
                and isinstance(line.body[0], cst.Expr)
                and isinstance(line.body[0].value, cst.Call)
                and dotted(line.body[0].value.func) == f"{m}.reset_parameters"
                for line in node.body.body
            ):
                reset |= types - claimed
            claimed |= types
            node = node.orelse
    return reset


def reset_while_built(ctx) -> set[str]:
    """The module types some class of the file resets while it is built (``__init__`` and
    the methods it calls) by applying to all its submodules a function that calls their
    ``reset_parameters()`` (``self.apply(self._init_weights)``, maybe through ``partial``).
    That overwrites any init a child's ``__init__`` gave such a module, in an eager build as
    on meta: that init was never the value the model is built with."""
    functions = {s.name.value: s for s in ctx.module.body if isinstance(s, cst.FunctionDef)}
    out: set[str] = set()
    for cls in ctx.facts.classes:
        for m in cls.reachable("__init__"):
            for call in m.calls:
                if not is_self_apply(call):
                    continue
                fn = applied_function(call.node)
                fn = unwrap_partial(fn, ctx.qualify) if fn is not None else None
                if (
                    isinstance(fn, cst.Attribute)
                    and dotted(fn.value) == "self"
                    and fn.attr.value in cls.methods
                ):
                    out |= _reset_types(cls.methods[fn.attr.value].node, ctx.qualify, method=True)
                elif isinstance(fn, cst.Name) and fn.value in functions:
                    out |= _reset_types(functions[fn.value], ctx.qualify, method=False)
    return out


def overwritten_by_parent(child: str | None, reset: set[str]) -> bool:
    """Whether a parent's applied reset of ``reset`` types covers a norm child of class
    ``child`` (None or not from torch: a norm layer passed in, BatchNorm by default)."""
    if child is None or not child.startswith("torch."):
        return bool(reset & BATCH_NORMS)
    return child in reset or (child in BATCH_NORMS and bool(reset & BATCH_NORM_BASES))


def _param_default(cls: ClassFacts, name: str) -> float | None:
    init = cls.init
    if init is None:
        return None
    params = init.node.params
    for p in (*params.params, *params.kwonly_params, *params.posonly_params):
        if p.name.value == name and p.default is not None:
            return number(p.default)
    return None


def _callee(code: str, at: int) -> str | None:
    """The name called by the innermost call whose parentheses hold offset ``at``."""
    depth = 0
    for i in range(at - 1, -1, -1):
        c = code[i]
        if c in ")]}":
            depth += 1
        elif c in "([{":
            if depth == 0:
                if c != "(":
                    return None
                m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*$", code[:i])
                return m.group(1) if m else None
            depth -= 1
    return None


def no_op_by_default(
    cls, call: CallSite, name: str, restored, file_code: str, others=frozenset()
) -> bool:
    """``self.head.fc.weight.mul_(head_init_scale)`` with ``head_init_scale=1.0``, or
    ``constant_(self.bn.weight, bn_weight_init)`` with ``bn_weight_init=1`` on a norm: a no-op
    unless some caller in the file passes that keyword another value. A keyword passed to
    another class of the file (``others``: timm LeViT's ``LinearNorm(..., bn_weight_init=0)``
    beside ``ConvNorm``) is that class's business."""
    args = call.node.args
    if call.method in IDENTITY_OPERANDS and call.qualname is None:
        identity = IDENTITY_OPERANDS[call.method]
        arg = args[0].value if args else None
    elif restored is not None:
        identity = restored
        arg = args[1].value if len(args) > 1 else None
    else:
        return False
    if not isinstance(arg, cst.Name) or _param_default(cls, arg.value) != identity:
        return False
    for m in re.finditer(rf"\b{re.escape(arg.value)}\s*=\s*([^,)\n]+)", file_code):
        if _callee(file_code, m.start()) in others:
            continue
        value = m.group(1).strip()
        try:
            if float(value) != identity:
                return False
        except ValueError:
            if value != arg.value:
                return False  # forwarded from elsewhere: unknown
    return True


def law_names(cls: ClassFacts, method, calls_and_dicts) -> dict[str, str]:
    """How :func:`~metalint.static.tensors.law_text` reads the names of an init's arguments
    in ``method`` of ``cls``: ``config`` (a parameter) and ``self.config`` as the model's
    config; a parameter with a numeric default (timm ``NormLinear(..., std=0.02)``) as that
    default when no call in the file passes it another value (``std=0.5``) or by position
    (``NormLinear(a, b, True, 0.5)``), and a call forwarding ``**kwargs`` names it in no
    literal dict of the file (timm's ``**dd`` of device and dtype)."""
    names = {"self.config": "config"}
    params = method.node.params
    listed = [*params.posonly_params, *params.params]
    for p in (*listed, *params.kwonly_params):
        if p.name.value == "config":
            names["config"] = "config"
        default = number(p.default) if p.default is not None else None
        if default is None:
            continue
        if method.name == "__init__" and _default_kept(
            cls.name, p.name.value, default, calls_and_dicts, listed
        ):
            names[p.name.value] = repr(default)
    return names


def _default_kept(name: str, param: str, default: float, parsed, listed) -> bool:
    """No call in the file (``parsed``: its :func:`file_calls_and_dicts`) gives ``param`` of the class ``name`` another value than
    ``default`` (see :func:`law_names`): the class called, maybe through ``partial``, or
    ``super().__init__(...)`` of a subclass (any ``__init__`` call naming ``param``)."""
    if parsed is None:
        return False
    calls, dicts = parsed
    position = next((i for i, p in enumerate(listed) if p.name.value == param), None)
    for node in calls:
        args = node.args
        callee = _ast_name(node.func)
        if callee == "partial" and args and _ast_name(args[0]) == name:
            callee, args = name, args[1:]  # partial(NormLinear, std=0.5)
        if callee not in (name, "__init__"):  # the class, or a subclass's super().__init__
            continue
        if callee == name and position is not None and len(args) >= position:
            return False  # by position (self is position 0)
        for kw in node.keywords:
            if kw.arg == param and not (
                isinstance(kw.value, ast.Constant) and kw.value.value == default
            ):
                return False
            if kw.arg is None and callee == name and not _names_no(kw.value, param, dicts):
                return False
    return True


def file_calls_and_dicts(tree: ast.AST) -> tuple[list, list]:
    """The calls of ``tree`` and its assignments of a dict or call, in ``ast.walk`` order."""
    nodes = _walk(tree)
    dicts = [
        n for n in nodes if isinstance(n, ast.Assign) and isinstance(n.value, (ast.Dict, ast.Call))
    ]
    return [n for n in nodes if isinstance(n, ast.Call)], dicts


def _walk(tree: ast.AST) -> list[ast.AST]:
    """``list(ast.walk(tree))``, in its order (breadth first), without a generator per node."""
    out, i, node_type = [tree], 0, ast.AST
    while i < len(out):
        node = out[i]
        i += 1
        for name in node._fields:
            v = getattr(node, name, None)
            if isinstance(v, node_type):
                out.append(v)
            elif type(v) is list:
                out.extend([x for x in v if isinstance(x, node_type)])
    return out


def _ast_name(node) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _names_no(value, param: str, dicts) -> bool:
    """``**dd`` where every assignment of ``dd`` in the file is a literal dict (or
    ``dict(...)`` of keywords, or timm's ``get_device_dtype(...)``) without the key
    ``param``."""
    if not isinstance(value, ast.Name):
        return False
    found = False
    for a in dicts:
        if not any(isinstance(t, ast.Name) and t.id == value.id for t in a.targets):
            continue
        found = True
        v = a.value
        if isinstance(v, ast.Dict):
            keys = [k.value if isinstance(k, ast.Constant) else None for k in v.keys]
        elif isinstance(v, ast.Call) and _ast_name(v.func) in DEVICE_DTYPE_DICTS:
            keys = ["device", "dtype"]
        elif isinstance(v, ast.Call) and _ast_name(v.func) == "dict" and not v.args:
            keys = [kw.arg for kw in v.keywords]
        else:
            return False
        if None in keys or param in keys:
            return False
    return found


def tensor_name(target: str) -> str:
    parts = target.split(".")[1:]
    if parts and parts[-1] == "data":
        parts = parts[:-1]
    return ".".join(parts)
