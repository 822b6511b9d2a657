"""Values a hook recomputes from the locals ``__init__`` computed them through: the statements
that compute those locals, copied in order (ML002's buffers, ML003's child inits that read a
local tensor). Shared by the codemods; imports only :mod:`metalint.fix.codemod`."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import libcst as cst

from metalint.fix.codemod import ClassEdit
from metalint.fix.edits import (
    BUILTIN_NAMES,
    Unfixable,
    fill,
    names_in,
    path_to,
    render,
    stmt,
    torch_spelling,
)
from metalint.fix.flow import uses
from metalint.static.construction import tensor_registrations
from metalint.static.draws import Draws, draws
from metalint.static.model import construction
from metalint.static.names import dotted
from metalint.static.ownership import own_tensor_names, value_reads
from metalint.static.syntax import walk_code
from metalint.static.tensor_kind import binds
from metalint.vocabulary import FACTORY_DRAWS, FILL_FACTORIES


def _raises_only(s: cst.CSTNode) -> bool:
    """``if bad(x): raise ValueError(...)``: a check that changes nothing."""
    return (
        isinstance(s, cst.If)
        and s.orelse is None
        and isinstance(s.body, cst.IndentedBlock)
        and all(
            isinstance(b, cst.SimpleStatementLine) and all(isinstance(x, cst.Raise) for x in b.body)
            for b in s.body.body
        )
    )


def _reraises(s: cst.CSTNode) -> bool:
    """``try: ... except E as e: raise e`` with no ``else`` or ``finally``: each handler only
    raises again (vector-quantize-pytorch's ``LatentQuantize``: ``try: _levels =
    _levels.repeat(codebook_dim)`` / ``except RuntimeError as e: raise e``). Where its body
    does not raise it is its body; where it does, ``__init__`` raises too."""
    return (
        isinstance(s, cst.Try)
        and s.orelse is None
        and s.finalbody is None
        and isinstance(s.body, cst.IndentedBlock)
        and bool(s.handlers)
        and all(
            isinstance(h.body, cst.IndentedBlock)
            and all(
                isinstance(b, cst.SimpleStatementLine)
                and all(isinstance(x, cst.Raise) for x in b.body)
                for b in h.body.body
            )
            for h in s.handlers
        )
    )


def _writes_seen(s: cst.CSTNode) -> bool:
    """Does :func:`binds` see every local ``s`` may bind? A simple statement, or an ``if``
    of them (``if "padding" not in kwargs: kwargs["padding"] = tuple(s // 2 for s in
    lattice.shape[:3])``, e3nn's ``Convolution``: reads ``lattice``, binds only ``kwargs``);
    a loop, ``with``, ``try`` or nested function binds names it cannot see."""
    if isinstance(s, cst.SimpleStatementLine) or _raises_only(s):
        return True
    if _reraises(s):
        return all(_writes_seen(b) for b in s.body.body)
    if isinstance(s, cst.If):
        body = s.body.body if isinstance(s.body, cst.IndentedBlock) else ()
        if not body or not all(_writes_seen(b) for b in body):
            return False
        return s.orelse is None or _writes_seen(s.orelse)
    if isinstance(s, cst.Else):
        body = s.body.body if isinstance(s.body, cst.IndentedBlock) else ()
        return bool(body) and all(_writes_seen(b) for b in body)
    return False


def _loop_of_seen_writes(s: cst.CSTNode, need: set[str]) -> bool:
    """A ``for`` loop over names none of ``need`` (the loop's names stay bound after it), of
    statements whose writes :func:`binds` sees (nequip's ``ChemicalSpeciesToAtomTypeMapper``:
    ``for chem_symbol, atom_type_name in ...: if ... not in type_name_to_index: raise``, a
    check that reads the table's locals and binds none of them)."""
    targets = loop_targets(s) if isinstance(s, cst.For) else None
    body = s.body.body if targets is not None and isinstance(s.body, cst.IndentedBlock) else ()
    return (
        bool(body)
        and s.orelse is None
        and s.asynchronous is None
        and not targets & need
        and all(_writes_seen(b) for b in body)
    )


def local_only(s: cst.CSTNode, edit: ClassEdit, random: bool = False) -> bool:
    """A statement (or an ``if`` or a ``for`` loop over one name, of them) that only computes
    locals: no ``self`` written, no method of ``self`` called, no random draw (``random``:
    draws allowed, torch's own only), no other loop or nested function."""

    if isinstance(s, cst.If):
        parts = [*s.body.body] if isinstance(s.body, cst.IndentedBlock) else []
        rest = s.orelse
        if rest is not None:
            parts.append(rest if isinstance(rest, cst.If) else None)
            if isinstance(rest, cst.Else):
                parts[-1:] = (
                    list(rest.body.body) if isinstance(rest.body, cst.IndentedBlock) else [None]
                )
        if not parts or not all(p is not None and local_only(p, edit, random) for p in parts):
            return False
        return not _draws(s.test, edit, random)
    if _reraises(s):
        return all(local_only(b, edit, random) for b in s.body.body)
    if isinstance(s, cst.For):
        # ``for i in range(self.ndim): inv_perm_[perm_[i]] = i`` (normflows' ``Uniform
        # Gaussian``, ``PeriodicFeaturesCat``: an inverse permutation written in place);
        # torchani's ``_ChemModule``: ``for i, znum in enumerate(atomic_numbers):
        # conv_tensor[znum] = i``
        body = s.body.body if isinstance(s.body, cst.IndentedBlock) else ()
        return (
            loop_targets(s) is not None
            and s.orelse is None
            and s.asynchronous is None
            and bool(body)
            and all(local_only(b, edit, random) for b in body)
            and not any(isinstance(n, (cst.Break, cst.Continue)) for n in walk_code(s))
            and not _draws(s.iter, edit, random)
        )
    if isinstance(s, cst.FunctionDef):
        # nflows' ``HouseholderSequence``: ``def tile(a, dim, n_tile): ...`` in ``__init__``,
        # then ``qv = tile(torch.eye(n // 2, features), 0, 2)``: a function of its arguments
        return (
            not s.decorators
            and "self" not in {n.value for n in names_in(s)}
            and not any(isinstance(n, (cst.Global, cst.Nonlocal)) for n in walk_code(s))
            and not _draws(s, edit, random)
        )
    if not isinstance(s, cst.SimpleStatementLine):
        return False
    written, _read, calls = uses(s, edit.memo())
    return (
        not written
        # ``self.layers.append(fsq)`` changes the module in place (vector-quantize's
        # ``ResidualFSQ`` builds a layer and a scale per quantizer in one loop)
        and "self" not in binds(s, edit.ctx.qualify)
        and all(computes_only(edit, c, random=random) for c in calls)
        and not _draws(s, edit, random)
    )


def _imports(s: cst.CSTNode) -> bool:
    """``import numpy as np`` as a statement of ``__init__``."""
    return isinstance(s, cst.SimpleStatementLine) and all(
        isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body
    )


def _binds(s: cst.CSTNode, edit: ClassEdit) -> set[str]:
    """:func:`binds`, and the names a nested ``def`` or an ``import`` in ``__init__`` binds
    (a ``def`` binds its name only: what it assigns is its own)."""
    if isinstance(s, cst.FunctionDef):
        return {s.name.value}
    out = binds(s, edit.ctx.qualify)
    for n in walk_code(s):
        if isinstance(n, (cst.Import, cst.ImportFrom)) and not isinstance(n.names, cst.ImportStar):
            for a in n.names:
                name = a.asname.name if a.asname is not None else a.name
                while isinstance(name, cst.Attribute):
                    name = name.value
                if isinstance(name, cst.Name):
                    out.add(name.value)
    return out


def _reads(s: cst.CSTNode, edit: ClassEdit, local, imported: set[str]) -> set[str]:
    """The locals ``s`` reads that earlier statements may compute: ``local(s)``, the names an
    ``import`` in ``__init__`` binds, less what ``s`` binds for itself (a loop's name; a
    nested ``def``'s arguments and its own locals)."""
    out = local(s) | ({n.value for n in names_in(s)} & imported)
    return out - _own(s, edit)


def _own(s: cst.CSTNode, edit: ClassEdit) -> set[str]:
    """The names ``s`` binds for itself: a loop's name; a nested ``def``'s name, arguments
    and locals."""
    if not isinstance(s, cst.FunctionDef):
        own = {
            name for n in walk_code(s) if isinstance(n, cst.For) for name in loop_targets(n) or ()
        }
        # ``except RuntimeError as e: raise e``: ``e`` is the handler's own
        for n in walk_code(s):
            if isinstance(n, cst.ExceptHandler) and n.name is not None:
                own |= {x.value for x in walk_code(n.name.name) if isinstance(x, cst.Name)}
        return own
    own = {p.name.value for p in walk_code(s.params) if isinstance(p, cst.Param)}
    own |= binds(s.body, edit.ctx.qualify) | {s.name.value}
    own |= {
        t.value
        for n in walk_code(s)
        if isinstance(n, (cst.CompFor, cst.For))
        for t in walk_code(n.target)
        if isinstance(t, cst.Name)
    }
    return own


def loop_targets(s: cst.For) -> set[str] | None:
    """The names a ``for`` loop binds: one name, or a tuple of names (``for i, znum in
    enumerate(atomic_numbers)``); None for other targets (an attribute, a subscript)."""
    t = s.target
    if isinstance(t, cst.Name):
        return {t.value}
    if isinstance(t, (cst.Tuple, cst.List)) and all(
        isinstance(e.value, cst.Name) for e in t.elements
    ):
        return {e.value.value for e in t.elements}
    return None


def _draws(node: cst.CSTNode, edit: ClassEdit, random: bool) -> bool:
    """``draws`` where no draw is allowed; where torch's draws are (``random``), does the
    code draw from numpy's or Python's generators, or build a module?"""
    return draws_or_builds(node, edit, host_only=random)


def computes_only(edit: ClassEdit, name: str, depth: int = 0, random: bool = False) -> bool:
    """Is ``self.<name>(...)`` a method of the class that only computes and returns values:
    it writes nothing on ``self``, draws nothing (``random``: torch's draws allowed), and calls
    only such methods? kornia's ``TinyViT`` attention: ``indices, offsets =
    self.build_attention_bias(resolution)`` (a ``@staticmethod``); a hook can call it again
    and get the same values."""
    method = edit.cls.methods.get(name)
    if method is None or depth > 3 or name.startswith("__"):
        return False
    body = method.node.body
    written, _read, calls = uses(body, edit.memo())
    if written or _draws(body, edit, random):
        return False
    if any(isinstance(n, (cst.Global, cst.Nonlocal)) for n in walk_code(body)):
        return False
    return all(c != name and computes_only(edit, c, depth + 1, random) for c in calls)


def registered(cls, qualify, attr: str, kind: str) -> str:
    """The guard of a hook's write into a tensor that construction may not make: it is there,
    registered as a ``kind`` ("buffer" or "parameter"), or as either when construction makes
    it both ways (normflows ``GaussianMixture``: ``if trainable: self.loc = nn.Parameter(t)``,
    ``else: self.register_buffer("loc", t)``; the buffer-only guard left the parameter, the
    default, to `to_empty()`'s garbage, and `check` counted it re-created).
    ``getattr(self, name, None) is not None`` also holds for a plain value the other branch
    sets (monai ``SABlock``: ``else: self.causal_mask = torch.Tensor()``; x-transformers'
    ``self.q_scale = 1``), and the write then raised on it."""
    kinds = {kind}
    if cls is not None:
        kinds |= {
            r.kind for r in tensor_registrations(construction(cls), qualify) if r.attr == attr
        }
    return " or ".join(
        f"self._{k}s.get({attr!r}) is not None" for k in ("buffer", "parameter") if k in kinds
    )


def one_value(cls, qualify, attr: str, node: cst.CSTNode) -> bool:
    """Raise :class:`Unfixable` when construction also makes tensor ``attr`` from another
    value than the one ``node`` makes it from (``if ones: self.register_buffer("b",
    torch.ones(n))``, ``else: self.register_buffer("b", torch.zeros(n))``): the hook's
    write, guarded by the tensor being there, would run on the other path too and give it
    this path's value. The same value spelled alike (a local both branches register),
    ``None`` on the other path, or a value of the same law in another shape
    (:func:`_same_law`) are no obstacle: True for the last (a random one is drawn there a
    second time by the hook, so eager values differ on that path)."""
    mine = None
    others = []
    for r in tensor_registrations(construction(cls), qualify):
        if r.attr != attr:
            continue
        if r.node is node or any(n is node for n in walk_code(r.node)):
            mine = r
        else:
            others.append(r)
    if mine is None or mine.value is None:
        return False
    ours = render(mine.value).strip()
    shared = False
    for r in others:
        if r.value is None:
            continue
        if _same_law(mine.value, r.value, qualify) and render(r.value).strip() != ours:
            shared = True
            continue
        if render(r.value).strip() not in (ours, "None"):
            raise Unfixable(
                f"`self.{attr}` is also made from another value "
                f"(`{render(r.value).strip()[:40]}`): one hook would give it this one on every path"
            )
    return shared


def _same_law(a, b, qualify) -> bool:
    """Are ``a`` and ``b`` calls of the same factory that sets every element by one law, with
    the same keywords, of any shape (stanza's ``reduce_key``: ``torch.randn(n, h, d)`` on one
    path, ``torch.randn(h, d)`` on the other)? A hook's shape-free init (``normal_``,
    ``zeros_``) then gives either its value."""
    if not (type(a) is cst.Call and type(b) is cst.Call):
        return False
    q = qualify(a.func)
    if q != qualify(b.func) or not (
        q in FACTORY_DRAWS or FILL_FACTORIES.get(q or "") in ("zeros", "ones")
    ):
        return False

    def keywords(c):
        return sorted((k.keyword.value, render(k.value).strip()) for k in c.args if k.keyword)

    return keywords(a) == keywords(b)


def draws_or_builds(node: cst.CSTNode, edit: ClassEdit, host_only: bool = False) -> bool:
    """Does the code certainly draw random numbers (:func:`draws` says ``ALWAYS``) or build a
    ``torch.nn`` module (whose init may draw)? What :func:`value_kind` calls random, as ML002
    judges a buffer's value. ``host_only``: only draws that torch's generator state does not
    hold (numpy's, Python's), and modules."""
    return draws(node, edit.ctx, host_only) is Draws.ALWAYS or any(
        type(n) is cst.Call
        and (q := edit.ctx.qualify(n.func) or "").startswith("torch.nn.")
        and q.rsplit(".", 1)[-1][:1].isupper()
        for n in walk_code(node)
    )


def _local_names(edit: ClassEdit, method=None):
    """``local(node)``: the names ``node`` reads that may be locals or arguments of
    ``__init__`` (of ``method``, where given) (not ``self``, and not an imported module, a
    builtin or a class of the file that it never assigns)."""
    init = edit.init if method is None else method

    def local(node: cst.CSTNode) -> set[str]:
        out = set()
        for name in names_in(node):
            n = name.value
            if n == "self":
                continue
            if n not in init.arguments and n not in init.local_values:
                if (
                    n in BUILTIN_NAMES
                    or n in edit.ctx.facts.local_classes
                    or edit.ctx.qualify(name) is not None
                ):
                    continue
            out.add(n)
        return out

    return local


def may_change(s: cst.CSTNode, names: set[str], edit: ClassEdit) -> bool:
    """Does ``s`` use one of ``names`` in a way that may change it? Indexing an argument that
    ``__init__`` never assigns (``window_size[0]``, read to size a parameter) does not."""
    init = edit.init
    read_only = {
        id(n.value)
        for n in walk_code(s)
        if isinstance(n, cst.Subscript)
        and isinstance(n.value, cst.Name)
        and n.value.value in init.params
        and n.value.value not in init.local_values
    }
    return any(n.value in names and id(n) not in read_only for n in names_in(s))


def is_pass(s: cst.CSTNode) -> bool:
    return isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, cst.Pass) for x in s.body)


class _Slice:
    """An ``if`` with, in each branch, only the statements that compute the locals a value
    needs (and the locals those read). It cannot be told apart when a statement left out
    mentions one of those locals (a call may change it), or one kept reads an attribute of
    ``self`` that one left out writes."""

    def __init__(self, edit: ClassEdit, local) -> None:
        self.edit = edit
        self.local = local
        self.dropped_writes: set[str] = set()
        self.kept_reads: set[str] = set()

    def __call__(self, s: cst.If, need: set[str]) -> cst.If | None:
        new = self.branch(s, need)
        if not new or self.dropped_writes & self.kept_reads:
            return None
        return new

    def block(self, stmts: Sequence[cst.BaseStatement], need: set[str]) -> list | None:
        edit = self.edit
        want = set(need)
        out: list[cst.BaseStatement] = []
        for st in reversed(stmts):
            if binds(st, edit.ctx.qualify) & want:
                if isinstance(st, cst.If) and not local_only(st, edit):
                    st = self.branch(st, want)
                    if not st:
                        return None
                out.append(st)
                want |= self.local(st)
                self.kept_reads.update(uses(st, edit.memo())[1])
            elif may_change(st, want, edit):
                return None
            else:
                self.dropped_writes.update(uses(st, edit.memo())[0])
        out.reverse()
        return out or [cst.SimpleStatementLine([cst.Pass()])]

    def branch(self, node, need: set[str]):
        """The sliced ``if``/``else`` (False: an ``else`` with nothing to copy; None: cannot)."""
        if not isinstance(node.body, cst.IndentedBlock):
            return None
        body = self.block(node.body.body, need)
        if body is None:
            return None
        if isinstance(node, cst.Else):
            if all(is_pass(b) for b in body):
                return False  # ``else: raise ValueError(..)``: nothing to copy
            return node.with_changes(body=node.body.with_changes(body=body))
        rest = self.branch(node.orelse, need) if node.orelse is not None else False
        if rest is None:
            return None
        self.kept_reads.update(uses(node.test, self.edit.memo())[1])
        return node.with_changes(
            body=node.body.with_changes(body=body), orelse=rest if rest is not False else None
        )


def _local_targets(s: cst.CSTNode, edit: ClassEdit) -> cst.SimpleStatementLine | None:
    """``self.patch_size = patch_height, patch_width = pair(patch_size)`` (vit-pytorch's
    ``SimpleViT``): one value bound to attributes of ``self`` and to locals. The hook needs the
    locals only: the statement without its ``self.<attr>`` targets (the value is computed once
    either way, and ``__init__`` has set the attributes). An unpacking with attributes of
    ``self`` among its names (nnAudio's ``cqt_kernels, self.kernel_width, lenghts, freqs =
    create_cqt_kernels(...)``) binds ``_`` in their place, when ``__init__`` never reads
    ``_``. None for other statements."""
    if type(s) is not cst.SimpleStatementLine or len(s.body) != 1:
        return None
    a = s.body[0]
    if type(a) is not cst.Assign:
        return None
    kept = [t for t in a.targets if not (dotted(t.target) or "").startswith("self.")]
    if not kept:
        return None
    unpacked = [t.with_changes(target=_unpacked_locals(t.target)) for t in kept]
    if len(kept) == len(a.targets) and all(
        u.target is t.target for u, t in zip(unpacked, kept, strict=True)
    ):
        return None
    if any(u.target is not t.target for u, t in zip(unpacked, kept, strict=True)) and _reads_dummy(
        edit
    ):
        return None
    return s.with_changes(body=[a.with_changes(targets=unpacked)])


def _unpacked_locals(t: cst.BaseAssignTargetExpression) -> cst.BaseAssignTargetExpression:
    """An unpacking target with each ``self.<attr>`` in it (nested, starred) replaced by ``_``;
    ``t`` itself when it has none."""
    if type(t) not in (cst.Tuple, cst.List):
        return t
    elements = []
    for el in t.elements:
        v = el.value
        if (dotted(v) or "").startswith("self."):
            v = cst.Name("_")
        else:
            v = _unpacked_locals(v)
        elements.append(el if v is el.value else el.with_changes(value=v))
    if all(e is o for e, o in zip(elements, t.elements, strict=True)):
        return t
    return t.with_changes(elements=elements)


def _reads_dummy(edit: ClassEdit) -> bool:
    """Does ``__init__`` read ``_`` (other than as a target it binds)?"""
    targets = set()
    for n in walk_code(edit.init.node):
        if type(n) is cst.Assign:
            targets |= {id(x) for t in n.targets for x in walk_code(t.target)}
    return any(
        type(n) is cst.Name and n.value == "_" and id(n) not in targets
        for n in walk_code(edit.init.node)
    )


def _narrowed(edit: ClassEdit, local, s: cst.CSTNode, need: set[str], method):
    """``s`` cut down to what computes the locals ``need`` (an ``if`` sliced, not in a
    ``method``; a statement without its ``self`` targets), or None."""
    if isinstance(s, cst.If):
        return None if method else _Slice(edit, local)(s, need)
    return _local_targets(s, edit)


def preceding(
    edit: ClassEdit, path: list[cst.CSTNode], index: int, helper: bool = False
) -> list[tuple[int, cst.CSTNode]]:
    """The statements that ran before the statement at the end of ``path`` (a path from
    top-level statement ``index`` of ``__init__`` down to it), in order, each with the index
    of its top-level statement: the top-level statements before ``index``, then, in each block
    ``path`` enters, the statements before the one it goes on into (peft's ``OrthLayer``:
    ``if orth:`` makes ``rows, cols = torch.triu_indices(size, size, 1)`` and registers both).
    ``helper``: ``path`` goes down from the body of that method, which ``__init__`` calls at
    top-level statement ``index``: the statements of it that ran before."""
    out = [] if helper else [(i, s) for i, s in enumerate(edit.init_body[:index])]
    for k in range(len(path) - 1):
        block, child = path[k], path[k + 1]
        if isinstance(block, cst.IndentedBlock):
            for s in block.body:
                if s is child:
                    break
                out.append((index, s))
    return out


def recompute_locals(
    edit: ClassEdit,
    value,
    index: int,
    hook: str,
    why: str,
    before=None,
    also=frozenset(),
    method=None,
) -> list:
    """The statements of ``__init__`` that compute the locals ``value`` reads (swin's relative
    position index: ``relative_coords = ..``, ``relative_coords[:, :, 0] += ..``, an ``if``
    choosing the mesh), copied in order for the hook, and, last, ``value`` for the hook. The
    constructor arguments they read are kept on ``self``; an argument the copied code assigns
    anew is read back from ``self`` first. Raises :class:`Unfixable` (``why``) when a statement
    that changes one of those locals does more than compute locals. ``also``: other locals the
    copied statements compute too (those other buffers of the same block are registered
    from). ``method``: ``value`` and the statements ``before`` it are of that private method,
    which ``__init__`` calls (julius's ``ResampleFrac._init_kernels()``: ``kernels = []``
    filled in a loop); the copies may read none of its arguments."""
    if before is None:
        before = [(i, s) for i, s in enumerate(edit.init_body[:index])]
    local = _local_names(edit, method)
    body = edit.init_body if method is None else method.node.body.body
    imported = set().union(*(_binds(s, edit) for s in body if _imports(s)))
    need = _reads(value, edit, local, imported) | set(also)
    picked: list[int] = []
    copies: dict[int, cst.BaseStatement] = {}
    for i in range(len(before) - 1, -1, -1):
        s = before[i][1]
        hit = _binds(s, edit) & need
        if not hit:
            _refuse_unseen_change(s, need, why)
            continue
        # swin's ``if len(window_size) == 3:`` creates the bias table parameter and computes
        # the index's locals, regunet's computes the sizes of a layer and the bias it gets:
        # only the statements computing the locals needed are copied
        sliced = _narrowed(edit, local, s, need, method)
        if sliced is not None and local_only(sliced, edit):
            s = sliced
        elif not local_only(s, edit):
            _refuse_copy(edit, before[i], method, why)
        picked.append(i)
        copies[i] = s
        need |= _reads(s, edit, local, imported)
    if not picked:
        raise Unfixable(why)
    picked.reverse()
    _no_value_read(edit, [copies[i] for i in picked], method, why)
    bound: set[str] = set()
    for i in picked:
        bound |= _binds(copies[i], edit) | _own(copies[i], edit)
    if method is None:
        out = _copies(edit, picked, copies, value, bound, before)
    else:
        out = [copies[i].with_changes(leading_lines=()) for i in picked] + [value]
        names = (set(method.arguments) | set(method.local_values)) - bound

        reads = partial(_reads, edit=edit, local=local, imported=imported)
        _reads_only_own(edit, out, lambda c: reads(c) & names, why, method)
        _no_argument_read(edit, out, reads, why, method)
    if hook in edit.cls.methods:
        return _after_the_hooks_locals(edit, hook, out, bound, why)
    return out


def _refuse_unseen_change(s: cst.BaseStatement, need: set[str], why: str) -> None:
    """Raise :class:`Unfixable` (``why``) when statement ``s``, which binds none of the
    locals ``need``ed, reads one and may change it in a way :func:`binds` does not see."""
    if (
        need & {n.value for n in names_in(s)}
        and not _writes_seen(s)
        and not _loop_of_seen_writes(s, need)
    ):
        raise Unfixable(why)


def _refuse_copy(edit: ClassEdit, item: tuple, method, why: str) -> None:
    """Raise for a statement (``item``: its top-level index and itself) that computes a
    needed local but does more: :class:`Drawn` when a top-level statement of ``__init__``
    only draws beyond that (the caller may keep the value), else :class:`Unfixable`."""
    top, s = item
    if not method and top < len(edit.init_body) and s is edit.init_body[top]:
        if local_only(s, edit, random=True):
            raise Drawn(why, top)
    raise Unfixable(why)


def _after_the_hooks_locals(edit: ClassEdit, hook: str, out: list, bound: set[str], why: str):
    """:func:`recompute_locals`'s copies ``out`` for the existing ``hook``, less those it
    computes already. The locals of the hook: ``self.atomic_numbers.copy_(..)`` binds no
    ``atomic_numbers`` (torchani's ``_ChemModule``: its ``conv_tensor`` is computed from the
    local ``atomic_numbers``, also a buffer the hook already copies into)."""
    body = edit.cls.methods[hook].node.body
    attrs = {id(n.attr) for n in walk_code(body) if isinstance(n, cst.Attribute)}
    mine = {n.value for n in walk_code(body) if isinstance(n, cst.Name) and id(n) not in attrs}
    if not mine & bound:
        return out
    done = _already_computed(edit, hook, out[:-1], bound)
    if done:
        # a second buffer of the same locals (timm DistributionBalancedLoss: freq_inv
        # and logit_bias from one ``counts``; RoPE's cos and sin of one ``freqs``):
        # the hook computes them already, as __init__ does; the value reads them there.
        # When it computes only the first of them (e3nn's voxel ``Convolution``: the
        # ``lattice`` buffer's locals, then ``emb = soft_one_hot_linspace(lattice...)``
        # for the ``emb`` buffer), the rest follow them, at the end of the hook
        return out[done:]
    raise Unfixable(why)


def _no_value_read(edit: ClassEdit, stmts: list, method, why: str) -> None:
    """Raise :class:`Unfixable` when a statement to copy reads a meta tensor's value (ML008:
    e3nn's ``LowPassFilter``, ``x = x[x.abs() <= 1]``): construction already raises there under
    meta, and a hook that ``__init__`` calls would read it a second time; ML008's fix first."""
    source = method or edit.init
    own = own_tensor_names(edit.cls, edit.ctx.qualify)
    for read in value_reads(source, edit.ctx.qualify, own):
        if any(path_to(s, read.node) is not None for s in stmts):
            raise Unfixable(
                f"{why}: the statements computing it read the value of `{render(read.tensor)}`, "
                "which raises under meta (ML008: fix that first)"
            )


def _no_argument_read(edit: ClassEdit, out: list, reads, why: str, method) -> None:
    """Raise :class:`Unfixable` when the copies ``out`` of ``method``'s statements read an
    argument of it before assigning it (snntorch's ``_threshold_buffer(threshold, ...)``: ``if
    not isinstance(threshold, torch.Tensor): threshold = torch.as_tensor(threshold)``): the
    value is the caller's there, and the hook has no caller."""
    given: set[str] = set()
    for c in out:
        read = (reads(c) & set(method.arguments)) - given
        if read:
            raise Unfixable(f"{why}: the value reads `{min(read)}`, a name of `{method.name}()`")
        if _unconditional_assign(c):
            given |= _binds(c, edit)


def _unconditional_assign(node) -> bool:
    """Is ``node`` a plain assignment statement (``x = ...``), run whenever it is reached?"""
    return (
        isinstance(node, cst.SimpleStatementLine)
        and len(node.body) == 1
        and isinstance(node.body[0], (cst.Assign, cst.AnnAssign))
    )


def _reads_only_own(edit: ClassEdit, code: list, free, why: str, method) -> None:
    """Raise :class:`Unfixable` when the copies of the statements of ``method`` read a name of
    it they do not compute (``free(c)``: an argument; a function of the module is still there
    in the hook), or a plain attribute that may be a tensor."""
    for c in code:
        read = free(c)
        if read:
            raise Unfixable(f"{why}: the value reads `{min(read)}`, a name of `{method.name}()`")
        edit.refuse_plain_reads(c)


def _copies(
    edit: ClassEdit, picked: list[int], copies: dict, value, bound: set[str], before
) -> list:
    """The hook's statements: the arguments the copied code assigns anew, read back from
    ``self`` (kept before the first copied line), the copied statements, and last the value."""
    top, first = before[picked[0]]
    init = edit.init
    prelude = []
    for n in sorted(bound & init.arguments):
        # an argument the copied code assigns anew: kept as it is before the first copied line
        attr, new = edit.attr_for(n, top)
        if new:
            edit.check_after_super(top)
            old = edit.replace.get(id(first))
            current = old[1] if old else [first]
            edit.replace[id(first)] = (first, [stmt(f"self.{attr} = {n}"), *current])
        prelude.append(stmt(f"{n} = self.{attr}"))
    out = [*prelude]
    for i in picked:
        new = edit.store_names(copies[i], first, top, bound=bound)
        # a nested ``def`` keeps a blank line before it
        lines = (cst.EmptyLine(indent=False),) if isinstance(new, cst.FunctionDef) else ()
        out.append(new.with_changes(leading_lines=lines))
    out.append(edit.store_names(value, first, top, bound=bound))
    return out


def _already_computed(edit: ClassEdit, hook: str, stmts: list, bound: set[str]) -> int:
    """How many of ``stmts``, from the first, ``hook`` already holds (the same code, one after
    the other), with no later statement of it binding one of the locals ``bound`` again (0:
    none, or some are bound again). Those locals then hold, at the end of the hook, what
    ``__init__`` computed, and the rest of ``stmts`` can follow there."""
    have = list(edit.cls.methods[hook].node.body.body)

    def text(s: cst.CSTNode) -> str:
        return render(s.with_changes(leading_lines=()), edit.ctx.module).strip()

    want = [text(s) for s in stmts]
    got = [text(s) for s in have]
    best = 0
    for j in range(len(got)):
        n = 0
        while n < len(want) and j + n < len(got) and got[j + n] == want[n]:
            n += 1
        if n > best and not any(binds(s, edit.ctx.qualify) & bound for s in have[j + n :]):
            best = n
    return best


class Drawn(Unfixable):
    """:func:`recompute_locals` met top-level statement ``index`` of ``__init__``, which
    computes a local the value needs by drawing random numbers from torch's generators: a hook
    computing it again gets other values, unless it is the only place that draws them
    (:func:`drawn_tail`)."""

    def __init__(self, why: str, index: int) -> None:
        super().__init__(why)
        self.index = index


def drawn_tail(edit: ClassEdit, start: int, hook: str, why: str) -> str:
    """The tensors ``__init__`` registers, from top-level statement ``start`` (it draws the
    locals they are computed from) to its end, computed again in ``hook`` in the same order,
    from one draw: normflows' Glow ``Invertible1x1Conv``: ``Q, _ = torch.linalg.qr(
    torch.randn(n, n))``, then ``P, L, U = torch.lu_unpack(*Q.lu())`` under ``if use_lu:``,
    the buffer ``P``, the parameters ``L``, ``log_S`` and ``U`` made from them, else
    ``W = nn.Parameter(Q)``. Each tensor recomputed on its own would draw ``Q`` once per
    tensor (``P`` and ``L`` from different matrices). The hook holds the copied statements
    (locals computed as ``__init__`` computes them, an ``if`` on the same condition) with each
    registration of a tensor made from those locals turned into a copy into it. ``__init__``
    keeps its statements (they give each tensor its shape and dtype; on meta they cost
    nothing), its drawing statements under ``torch.random.fork_rng()``: they give back the
    generator's state, and the hook, called at the end of ``__init__``, draws from the state
    they drew from, so eager tensors are bit-identical when nothing else in between draws.
    Registrations that read none of those locals are left to their own fix; other statements
    that touch none of them stay in ``__init__`` alone (the fix is unsafe when one may draw).
    Returns what the
    rewrite says it does; raises :class:`Unfixable` (``why``) when a statement of the tail
    is neither a registration, nor computes only locals, nor leaves them alone."""
    tail = _Tail(edit, start, why)
    hook_body = tail.block(edit.init_body[start:], True)
    if not tail.made or not tail.forked:
        raise Unfixable(why)
    first = edit.init_body[start]
    out = [edit.store_names(s, first, start, bound=tail.bound) for s in hook_body]
    for s in tail.forked:
        old = edit.replace.get(id(s))
        current = old[1] if old else [s]
        wrapped = stmt(f"with {tail.torch}.random.fork_rng():\n    pass")
        wrapped = wrapped.with_changes(
            body=wrapped.body.with_changes(body=[s.with_changes(leading_lines=())]),
            leading_lines=s.leading_lines,
        )
        edit.replace[id(s)] = (s, [wrapped if c is s else c for c in current])
    # the copied statements and values draw nothing (``draws``, as for any recomputed local);
    # the others may
    if not all(draws(s, edit.ctx) is Draws.NEVER for s in tail.staying):
        edit.unsafe.append(
            "other random draws follow the drawn locals in `__init__`: the hook draws them "
            "after those, so eager values differ under the same seed (same distribution)"
        )
    existing = edit.cls.methods.get(hook)
    if any(draws(s, edit.ctx) is not Draws.NEVER for s in edit.hook_append.get(hook, [])) or (
        existing is not None and draws(existing.node.body, edit.ctx) is not Draws.NEVER
    ):
        edit.unsafe.append(
            f"`{hook}()` draws other random numbers before the drawn locals: eager values "
            "differ under the same seed (same distribution)"
        )
    edit.use_hook(hook, len(edit.init_body) - 1, out, random=True)
    names = ", ".join(f"`{a}`" for a in tail.made)
    return (
        f"Compute {names} again in `{hook}()` from one draw of the locals they are made "
        f"from (drawn in `__init__` under `{tail.torch}.random.fork_rng()`), called at the "
        "end of `__init__`"
    )


class _Tail:
    """The hook's copy of the statements of :func:`drawn_tail`: ``made`` (the tensors copied
    into), ``forked`` (the drawing statements), ``staying`` (the statements left alone)."""

    def __init__(self, edit: ClassEdit, start: int, why: str) -> None:
        self.edit = edit
        self.why = why
        self.torch = torch_spelling(edit.ctx)[0]
        self.bound: set[str] = set()
        for s in edit.init_body[start:]:
            self.bound |= binds(s, edit.ctx.qualify)
        self.bound.discard("self")  # ``self.W = ...``: an attribute, not a local
        self.local = _local_names(edit)
        self.regs = {
            id(r.node): r for r in tensor_registrations(construction(edit.cls), edit.ctx.qualify)
        }
        self.forked: list[cst.BaseStatement] = []
        self.staying: list[cst.BaseStatement] = []
        self.made: list[str] = []
        self._copies: set[int] = set()

    def registration(self, s: cst.SimpleStatementLine):
        return next((self.regs[id(n)] for n in walk_code(s) if id(n) in self.regs), None)

    def block(self, stmts, top: bool) -> list:
        out: list[cst.BaseStatement] = []
        for s in stmts:
            if isinstance(s, cst.If):
                if _draws(s.test, self.edit, False):
                    raise Unfixable(self.why)
                new = self.branch(s)
                if new is not None:
                    out.append(new)
            elif not isinstance(s, cst.SimpleStatementLine):
                raise Unfixable(self.why)
            elif self.registration(s) is not None:
                self.copy(s, out)
            else:
                self.other(s, top, out)
        return out

    def other(self, s: cst.SimpleStatementLine, top: bool, out: list) -> None:
        edit = self.edit
        if local_only(s, edit):
            out.append(s)
        elif top and local_only(s, edit, random=True):
            out.append(s)
            self.forked.append(s)
        elif (binds(s, edit.ctx.qualify) | self.local(s)) & self.bound:
            raise Unfixable(self.why)
        else:
            self.staying.append(s)  # ``self.act = nn.ReLU()``: it stays in ``__init__`` alone

    def copy(self, s: cst.SimpleStatementLine, out: list) -> None:
        """A registration: a copy into its tensor when it reads the drawn locals."""
        r = self.registration(s)
        if len(s.body) != 1 or not self.local(r.value or s) & self.bound:
            # reads none of the drawn locals: its own fix, if any
            if r.value is None or draws_or_builds(r.value, self.edit):
                self.staying.append(s)
            return
        if r.value is None or _draws(r.value, self.edit, False):
            raise Unfixable(self.why)
        copy = fill(f"self.{r.attr}.copy_(__v__)", v=r.value)
        if out and id(out[-1]) in self._copies:
            # the copies of one block under one ``no_grad()``
            w = out.pop()
            copy = w.with_changes(body=w.body.with_changes(body=[*w.body.body, copy]))
        else:
            w = stmt(f"with {self.torch}.no_grad():\n    pass")
            copy = w.with_changes(
                body=w.body.with_changes(body=[copy]), leading_lines=s.leading_lines
            )
        self._copies.add(id(copy))
        out.append(copy)
        self.made.append(r.attr)

    def branch(self, node):
        """The ``if`` (or ``else``) with its blocks copied; None: nothing in it to copy."""
        if not isinstance(node.body, cst.IndentedBlock):
            raise Unfixable(self.why)
        body = self.block(node.body.body, False)
        rest = None
        if isinstance(node, cst.If) and node.orelse is not None:
            rest = self.branch(node.orelse)
        if not body and rest is None:
            return None
        body = body or [cst.SimpleStatementLine([cst.Pass()])]
        new = node.with_changes(body=node.body.with_changes(body=body))
        if isinstance(node, cst.If):
            new = new.with_changes(orelse=rest)
        return new
