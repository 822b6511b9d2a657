"""What a root's protocol re-creates: its per-module init dispatch replayed across files.

:class:`Replay` runs the blocks of :mod:`metalint.static.init_dispatch` (a root's
``_init_weights``, what its entry point applies, transformers' base dispatch) on a class of
the tree and answers which of its tensors they write, and from which law.
"""

from __future__ import annotations

from metalint.static.init_dispatch import (
    TRANSFORMERS_INIT_WEIGHTS,
    _name_tests,
    _reads,
)
from metalint.static.roots import (
    ROOT_INIT,
    ROOT_ONLY,
    SITE,
    TRANSFORMERS,
    TRANSFORMERS_BASES,
    Roots,
    is_template,
)
from metalint.vocabulary import TORCH_WITHOUT_RESET


class Replay(Roots):
    """The roots of a tree and what their protocols re-create of each class."""

    def same_law(self, cls: str, root: str, child: str, tensor: str, law: str) -> bool:
        """Does ``root``'s protocol re-draw ``tensor`` of a child of class ``child`` held by
        a ``cls`` from ``law``, in every write it makes to it (transformers ConvBert's
        ``self.depthwise.weight.data.normal_(mean=0.0, std=config.initializer_range)`` and
        the base ``_init_weights``' ``init.normal_(module.weight, mean=0.0, std=std)`` with
        ``std = self.config.initializer_range or 0.02``)? The eager build's values and the
        protocol's then come from one law: nothing is lost. Under the transformers protocol
        any re-draw does (``law`` "": a value the rule cannot read): the eager build's
        ``post_init()`` runs the same ``_init_weights`` after ``__init__``, so what
        ``__init__`` wrote into that tensor is overwritten there too (VisualBert's
        ``self.visual_position_embeddings.weight.data = ...clone()``), unless the child is a
        sub-model (a ``PreTrainedModel``) whose own ``post_init()`` ran before the write."""
        protocol = self.protocol_of(root)
        child = self.h.resolve(child) or child
        self._laws = {}
        try:
            if protocol == TRANSFORMERS:
                done: set[str] = set()
                for owner in self._dispatchers(cls, root):
                    done |= self._run_method(owner, "_init_weights", child, set())
            else:
                done = self.recreated(child, root, protocol)
            writes = self._laws.get(tensor, []) + self._laws.get("*", [])
        finally:
            self._laws = None
        if protocol == TRANSFORMERS and not self.is_transformers(child):
            # a sub-model ran its own `post_init()` before the write, which then stays
            return tensor in done or "*" in done
        return (
            tensor in done
            and bool(law)
            and bool(writes)
            and all(got == law and all(_reads(law, g) for g in guards) for got, guards in writes)
        )

    def recreated(self, cls: str, root: str, protocol: str) -> set[str]:
        """Tensors of an instance of ``cls`` inside ``root`` that the root's protocol
        re-creates beyond the class's own hooks."""
        if protocol == TRANSFORMERS:
            out: set[str] | None = None
            for owner in self._dispatchers(cls, root):
                got = self._run_method(owner, "_init_weights", cls, set())
                out = got if out is None else out & got
            return (out or set()) | self._written_by_parents(cls, root)
        if protocol in (ROOT_ONLY, SITE):
            out = set()
            for seq in self.sequences_of(root):
                out |= self.site_recreated(seq, cls)
            return out
        if protocol == ROOT_INIT:
            out = set()
            for owner in self.mro(root):
                summary = self.h.classes.get(owner)
                if summary is None:
                    continue
                entry = next((e for e in self.entries if e in summary.methods), None)
                if entry is not None:
                    for item in summary.protocol.get("applies", {}).get(entry, ()):
                        out |= self._applied(item, root, cls)
                    break
            return out
        return set()

    def _written_by_parents(self, cls: str, root: str) -> set[str]:
        """Tensors of ``cls`` that the dispatch re-creates through every parent holding it in
        ``root``: ``if isinstance(module, SparseMoeBlock): init.normal_(module.gate.weight)``
        (transformers' top-k routers)."""
        out: set[str] | None = None
        for parent in sorted(self.parents.get(cls, ())):
            if parent != root and root not in self.roots(parent):
                continue
            attrs = self._member_attrs(parent, cls)
            got: set[str] | None = None
            for owner in self._dispatchers(parent, root):
                done = self._run_method(owner, "_init_weights", parent, set())
                got = done if got is None else got & done
            writes = {w[len(a) + 1 :] for w in (got or ()) for a in attrs if w.startswith(a + ".")}
            out = writes if out is None else out & writes
        return out or set()

    def _member_attrs(self, parent: str, cls: str) -> list[str]:
        """The attributes of ``parent`` built as ``cls`` (``self.gate = TopKRouter(...)``)."""
        out = []
        for c in self.mro(parent):
            summary = self.h.classes.get(c)
            for attr in summary.protocol.get("members", {}) if summary else {}:
                if attr not in out and cls in self._members(parent, attr):
                    out.append(attr)
        return out

    def _dispatchers(self, cls: str, root: str) -> list[str]:
        """The nearest ``PreTrainedModel`` classes above ``cls`` inside ``root`` (whose
        ``_init_weights`` ``smart_apply`` hands the module to)."""
        out: list[str] = []
        seen = {cls}
        todo = [cls]
        while todo:
            cur = todo.pop()
            if self.is_transformers(cur) or cur == root:
                if root in self.roots(cur) or cur == root:
                    out.append(cur)
                continue
            for p in self.parents.get(cur, ()):
                if (cur, p) in self.unknown_host and self._by_name(cur):
                    # in a sub-model of a class the check cannot name (``load_backbone``):
                    # dispatched by that model's ``_init_weights``, one of those written for
                    # the classes swapped in (``"BatchNorm" in module.__class__.__name__``)
                    out += [o for o in self._by_name(cur) if o not in out]
                elif p not in seen:
                    seen.add(p)
                    todo.append(p)
        return out or [root]

    def _by_name(self, cls: str) -> list[str]:
        """The transformers classes of the tree whose own ``_init_weights`` tests a module's
        class name and matches ``cls`` by it."""
        if self._name_tests is None:
            self._name_tests = []
            for name, c in sorted(self.h.classes.items()):
                block = c.protocol.get("dispatch", {}).get("_init_weights")
                tests = _name_tests(block or [])
                if tests and not is_template(name) and self.is_transformers(name):
                    self._name_tests.append((name, tests))
        return [o for o, tests in self._name_tests if any(self.test(t, cls) for t in tests)]

    def _applied(self, item: list, root: str, cls: str) -> set[str]:
        kind = item[0]
        if kind == "method":
            return self._run_method(root, item[1], cls, set())
        if kind == "function":
            return self._run_function(item[1], cls, set())
        if kind == "factory":
            summary = self._function(item[1])
            out: set[str] = set()
            for q in (summary or {}).get("returns", ()):
                out |= self._run_function(q, cls, set())
            return out
        if kind == "block":
            return self._run(item[1], cls, root, None, set())
        if kind == "each" and cls in self._held(root, item[1]):
            return self._run(item[2], cls, root, None, set())
        if kind == "within" and any(
            cls in self.descendants(c) for c in self._child_classes(root, item[1])
        ):
            # ``for m in self.decoder.modules():``: every module inside that child
            return self._run(item[2], cls, root, None, set())
        return set()

    def _called(self, cls: str, method: str, reset: bool) -> set[str]:
        """What ``module.<method>()`` re-creates on a module of class ``cls``: a reset hook's
        tensors (all of them for a torch built-in's ``reset_parameters()``), else what its
        nearest definition in the MRO writes (a configured hook's summary when it is one)."""
        if reset:
            done = self.h.hook_tensors(cls, method)
            if done is not None:
                return done
            if cls not in self.h.classes and cls.startswith("torch.nn."):
                # torch's own layer (a norm a site's loop resets): all of its tensors
                return set() if cls in TORCH_WITHOUT_RESET else {"*"}
            return {"*"} if self.h._torch_reset_base(cls, set()) else set()
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            if summary is None or method not in summary.methods:
                continue
            if method in summary.hooks:
                return self.h.hook_tensors(c, method) or set()
            return set(summary.protocol.get("inits", {}).get(method, ()))
        return set()

    def _function(self, name: str) -> dict | None:
        full = self.h.resolve(name, table=self.h.functions)
        return self.h.functions.get(full) if full else None

    def _run_function(self, name: str, cls: str, stack: set) -> set[str]:
        summary = self._function(name)
        if summary is None or "block" not in summary or name in stack:
            return set()
        return self._run(summary["block"], cls, None, None, stack | {name})

    def _run_method(self, owner: str, method: str, cls: str, stack: set, after: str = "") -> set:
        """Run ``owner.method(module)`` for a module of class ``cls`` (``after``: start the
        method lookup after this class, as ``super()`` does)."""
        mro = self.mro(owner)
        if after:
            mro = mro[mro.index(after) + 1 :] if after in mro else []
        for c in mro:
            summary = self.h.classes.get(c)
            if summary is None:
                continue
            if method in summary.protocol.get("deleted", ()):
                continue
            block = summary.protocol.get("dispatch", {}).get(method)
            if block is not None:
                key = (c, method)
                if key in stack:
                    return set()
                return self._run(block, cls, owner, c, stack | {key})
            if method in summary.methods:
                return set()  # defined but not a per-module dispatch we could read
        # the library's base class, outside the checked tree
        searched = [after, *mro] if after else mro
        bases = {b for c in searched if c in self.h.classes for b in self.h.classes[c].bases}
        if method == "_init_weights" and bases & TRANSFORMERS_BASES:
            return self._run(TRANSFORMERS_INIT_WEIGHTS, cls, owner, None, stack)
        return set()

    def _run_base(self, base: str, method: str, cls: str, owner: str | None, stack) -> set:
        """``Base.method(self, module)``: the method as the class ``base`` defines it."""
        full = self.h.resolve(base)
        if full is not None:
            return self._run_method(full, method, cls, stack)
        if base in TRANSFORMERS_BASES and method == "_init_weights":
            return self._run(TRANSFORMERS_INIT_WEIGHTS, cls, owner, None, stack)
        return set()

    def _run(self, block: list, cls: str, owner: str | None, defined: str | None, stack) -> set:
        """The tensors of a module of class ``cls`` a dispatch block writes (``"*"``: every
        one), recording the law of each write while :meth:`same_law` asks."""
        out: set[str] = set()
        for item in block:
            step = self._STEPS.get(item[0])
            if step is not None:
                out |= step(self, item, cls, owner, defined, stack)
        return out

    def _step_write(self, item, cls, owner, defined, stack) -> set:
        return set(item[1:])

    def _step_law(self, item, cls, owner, defined, stack) -> set:
        self._record([item[1]], item[2], item[3])
        return set()

    def _step_all(self, item, cls, owner, defined, stack) -> set:
        self._record(["*"])
        return {"*"}

    def _step_call(self, item, cls, owner, defined, stack) -> set:
        got = self._called(cls, item[1], item[0] == "reset")
        self._record(got)
        return got

    def _step_super(self, item, cls, owner, defined, stack) -> set:
        if owner and defined:
            return self._run_method(owner, item[1], cls, stack, after=defined)
        return set()

    def _step_self(self, item, cls, owner, defined, stack) -> set:
        return self._run_method(owner, item[1], cls, stack) if owner else set()

    def _step_base(self, item, cls, owner, defined, stack) -> set:
        return self._run_base(item[1], item[2], cls, owner, stack)

    def _step_function(self, item, cls, owner, defined, stack) -> set:
        if self._function(item[1]) is None:
            # ``PreTrainedModel._init_weights(module)``: a class's method, not a function
            head, _, method = item[1].rpartition(".")
            return self._run_base(head, method, cls, owner, stack)
        return self._run_function(item[1], cls, stack)

    def _step_if(self, item, cls, owner, defined, stack) -> set:
        out: set[str] = set()
        value = self.test(item[1], cls)
        if value is not False:
            out |= self._run(item[2], cls, owner, defined, stack)
        if value is not True:
            out |= self._run(item[3], cls, owner, defined, stack)
        return out

    #: what each kind of item of a dispatch block runs (see ``init_dispatch._block``)
    _STEPS = {
        "w": _step_write,
        "law": _step_law,
        "all": _step_all,
        "call": _step_call,
        "reset": _step_call,
        "super": _step_super,
        "self": _step_self,
        "base": _step_base,
        "fn": _step_function,
        "if": _step_if,
    }

    def _record(self, tensors, law: str | None = None, guards: list | tuple = ()) -> None:
        """While :meth:`same_law` asks, note a write of ``tensors`` from ``law`` (None: a
        write whose law is unknown, a module's own hook)."""
        if self._laws is not None:
            for t in tensors:
                self._laws.setdefault(t, []).append((law, list(guards)))

    def test(self, cond: list, cls: str) -> bool | None:
        """A dispatch condition on a module of class ``cls``: True, False or None (unknown)."""
        judge = self._TESTS.get(cond[0])
        return None if judge is None else judge(self, cond, cls)

    def _test_and(self, cond: list, cls: str) -> bool | None:
        a, b = self.test(cond[1], cls), self.test(cond[2], cls)
        return False if a is False or b is False else (True if a and b else None)

    def _test_or(self, cond: list, cls: str) -> bool | None:
        a, b = self.test(cond[1], cls), self.test(cond[2], cls)
        return True if a or b else (False if a is False and b is False else None)

    def _test_not(self, cond: list, cls: str) -> bool | None:
        a = self.test(cond[1], cls)
        return None if a is None else not a

    def _test_name_in(self, cond: list, cls: str) -> bool:
        return cond[1] in cls.rsplit(".", 1)[-1]

    def _test_name_eq(self, cond: list, cls: str) -> bool:
        return cond[1] == cls.rsplit(".", 1)[-1]

    def _test_name_one_of(self, cond: list, cls: str) -> bool:
        return cls.rsplit(".", 1)[-1] in cond[1]

    def _test_isinstance(self, cond: list, cls: str) -> bool:
        mro = self.mro(cls)
        raw = self.raw_bases(cls)
        shorts = {c.rsplit(".", 1)[-1] for c in mro} | {b.rsplit(".", 1)[-1] for b in raw}
        for name in cond[1]:
            full = self.h.resolve(name)
            if name in mro or full in mro or name in raw:
                return True
            if full is None and not name.startswith("torch.") and name.rsplit(".")[-1] in shorts:
                return True
        return False

    def _test_has(self, cond: list, cls: str) -> bool | None:
        known = False
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            if summary is None:
                continue
            known = True
            # ``hasattr(m, "reset_parameters")``: a method is an attribute too
            if cond[1] in summary.protocol.get("attributes", ()) or cond[1] in summary.methods:
                return True
        # a torch built-in base (nn.Linear) has attributes the tree does not show
        torch_base = any(
            b.startswith("torch.nn.") and b != "torch.nn.Module" for b in self.raw_bases(cls)
        )
        return False if known and not torch_base else None

    #: how each kind of dispatch condition is judged (see ``init_dispatch._condition``)
    _TESTS = {
        "and": _test_and,
        "or": _test_or,
        "not": _test_not,
        "name_in": _test_name_in,
        "name_eq": _test_name_eq,
        "name_one_of": _test_name_one_of,
        "isinstance": _test_isinstance,
        "has": _test_has,
    }
