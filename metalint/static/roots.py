"""The model roots of a checked tree and the protocol of each (torch-free, libcst-free).

What contains what across files (:meth:`Roots.roots`, :meth:`Roots.model_roots`), the
protocol of a root (:meth:`Roots.protocol_of`) and what the tree's materialisation sites run
on it (:meth:`Roots.sequences_of`, :meth:`Roots.lost_at`); the first layer of
:class:`metalint.static.protocol.Protocols`.
"""

from __future__ import annotations

from metalint.static.pipeline import Sequence, eager_builds, sequences, settled
from metalint.vocabulary import (
    PROTOCOLS,
    RESET_HOOK,
    ROOT_ENTRIES,
    ROOT_ONLY_PROTOCOL,
    TEMPLATE_MODULE_PREFIXES,
    TIE_BASES,
)

TRANSFORMERS = "transformers _init_weights"
ROOT_INIT = "root init_weights"
#: the root's entry point and nothing else after ``to_empty()`` (no module's own hooks): what a
#: materialisation site of the tree runs (:mod:`metalint.static.pipeline`), or
#: ``protocol = "init_weights-only"``
ROOT_ONLY = "root init_weights only"
#: what a materialisation site of the tree runs when it calls no entry point (a checkpoint
#: load, ``model.apply(fn)``, nothing)
SITE = "materialisation site"
RESET = "reset_parameters"
#: the base classes of a transformers model
TRANSFORMERS_BASES = frozenset(TIE_BASES)


def is_template(cls: str) -> bool:
    """Is ``cls`` defined in a code-generation template (``modular_llama.py``)?"""
    return any(part.startswith(TEMPLATE_MODULE_PREFIXES) for part in cls.split(".")[:-1])


class Roots:
    """Roots, their protocols and the sites that materialise them, over every class of a
    checked tree (what replays a protocol is :class:`metalint.static.replay.Replay`)."""

    def __init__(self, hierarchy, protocol: str = "auto", hooks: tuple[str, ...] = ()) -> None:
        self.h = hierarchy
        self.protocol = protocol
        self.hooks = hooks
        self.entries = ROOT_ENTRIES if protocol in PROTOCOLS else (protocol,)
        self.parents: dict[str, set[str]] = {}
        self.subclasses: dict[str, set[str]] = {}
        #: (class, parent): the parent swaps the class into a sub-model it built by a call
        #: that names no class (``replace_batch_norm(load_backbone(config))``)
        self.unknown_host: set[tuple[str, str]] = set()
        for name, c in hierarchy.classes.items():
            # a template's class (transformers' modular files) never runs: it contains and
            # extends only the template's own classes (the generated file has the real ones)
            template = is_template(name)
            hosted = c.protocol.get("hosted", {})
            for child in c.protocol.get("children", ()):
                r = hierarchy.resolve(child)
                if r is None or r == name or (template and not is_template(r)):
                    continue
                host = hierarchy.resolve(hosted.get(child, "")) or name
                self.parents.setdefault(r, set()).add(host)
                if hosted.get(child) == "?":
                    self.unknown_host.add((r, name))
            for base in hierarchy.bases(name):
                if is_template(base) or not template:
                    self.subclasses.setdefault(base, set()).add(name)
        self._roots: dict[str, frozenset[str]] = {}
        self._mro: dict[str, list[str]] = {}
        self._name_tests: list[tuple[str, list]] | None = None
        #: while :meth:`same_law` asks: tensor -> ``(law, guards)`` of every write the
        #: protocol makes to it (law None: a write whose law is unknown)
        self._laws: dict[str, list] | None = None
        #: model root -> what the tree's materialisation sites run on it; a site applying a
        #: function the tree does not summarise (``model.apply(fn)`` of another package) is
        #: not judged: the protocol the root's methods suggest stands
        self.sequences: dict[str, list[Sequence]] = {}
        #: model root -> what the library's builders run on it after an eager build
        #: (:func:`~metalint.static.pipeline.eager_builds`): its own initialisers
        self.learned: dict[str, list[Sequence]] = {}
        self._read_sites(getattr(hierarchy, "sites", []))
        self._children: dict[str, set[str]] | None = None

    def _read_sites(self, sites: list) -> None:
        """:attr:`sequences` and :attr:`learned` from the tree's sites."""
        for root, seqs in sequences(sites, self.h.resolve).items():
            seqs = [self._settled(root, q) for q in seqs]
            known = [q for q in seqs if all(k != "apply" or self._readable(n) for k, n in q.runs)]
            if known:
                self.sequences[root] = known
        for root, seqs in eager_builds(sites, self.h.resolve).items():
            seqs = [q for q in (self._settled(root, q) for q in seqs) if q.runs]
            if seqs:
                self.learned[root] = seqs

    def _settled(self, root: str, seq: Sequence) -> Sequence:
        """What a site runs, read against the tree: a method the root defines, a function of
        the tree (:func:`~metalint.static.pipeline.settled`)."""
        return settled(
            seq,
            lambda name: self.h.defines(root, (name,), set()),
            lambda name: self._readable(name),
        )

    # -- composition --------------------------------------------------------------------
    def roots(self, cls: str) -> frozenset[str]:
        """The classes nobody constructs that contain ``cls`` (``cls`` itself when nobody
        constructs it)."""
        if cls in self._roots:
            return self._roots[cls]
        out: set[str] = set()
        seen = {cls}
        todo = [cls]
        while todo:
            cur = todo.pop()
            ups = self.parents.get(cur, ())
            if not ups:
                out.add(cur)
            for p in ups:
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        self._roots[cls] = frozenset(out)
        return self._roots[cls]

    def family(self, cls: str) -> list[str]:
        """``cls`` and its subclasses in the tree: what an instance holding its tensors is."""
        out = [cls]
        seen = {cls}
        for cur in out:
            for s in sorted(self.subclasses.get(cur, ())):
                if s not in seen and len(out) < 256:
                    seen.add(s)
                    out.append(s)
        return out

    def mro(self, cls: str) -> list[str]:
        if cls not in self._mro:
            out: list[str] = []
            todo = [cls]
            while todo:
                cur = todo.pop(0)
                if cur in out or len(out) > 64:
                    continue
                out.append(cur)
                todo.extend(self.h.bases(cur))
            self._mro[cls] = out
        return self._mro[cls]

    def raw_bases(self, cls: str) -> set[str]:
        out: set[str] = set()
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            if summary is not None:
                out.update(summary.bases)
        return out

    def is_transformers(self, cls: str) -> bool:
        mro = self.mro(cls)
        if any(c in TRANSFORMERS_BASES for c in mro):
            return True
        return bool(self.raw_bases(cls) & TRANSFORMERS_BASES)

    # -- protocols ----------------------------------------------------------------------
    def protocol_of(self, root: str) -> str:
        seqs = self.sequences_of(root)
        if seqs:
            # what the tree runs on it: the per-module protocol only when every site runs
            # each module's own ``reset_parameters()``
            if all(q.per_module for q in seqs):
                return RESET
            return ROOT_ONLY if any(q.runs_entry for q in seqs) else SITE
        if self.protocol == "transformers" or (
            self.protocol == "auto" and self.is_transformers(root)
        ):
            return TRANSFORMERS
        if self.protocol == "reset_parameters":
            return RESET
        if self.h.defines(root, self.entries, set()):
            return ROOT_ONLY if self.protocol == ROOT_ONLY_PROTOCOL else ROOT_INIT
        return RESET

    def _readable(self, function: str) -> bool:
        summary = self._function(function)
        return summary is not None and any(k in summary for k in ("block", "returns", "modules"))

    def sequences_of(self, root: str) -> list[Sequence]:
        """What materialises ``root``: its sites in the tree, else under ``protocol =
        "init_weights-only"`` the root's entry point alone (no site named)."""
        seqs = self.sequences.get(root)
        if seqs:
            return seqs
        if self.protocol == ROOT_ONLY_PROTOCOL and self.h.defines(root, self.entries, set()):
            entry = self._entry(root)
            short = root.rsplit(".", 1)[-1]
            return [
                Sequence(
                    root, ("", 0, f"{short}.{entry}()"), "all", True, (("entry", entry),), False
                )
            ]
        return []

    def site_recreated(self, seq: Sequence, cls: str) -> set[str]:
        """Tensors of a ``cls`` inside ``seq.root`` that what the site runs re-creates."""
        out: set[str] = set()
        for kind, name in seq.runs:
            if kind == "entry":
                out |= self._entry_recreated(seq.root, name, cls)
            elif kind == "apply":
                out |= self._run_function(name, cls, set())
            elif kind == "reset":
                out |= self._called(cls, name, name == RESET_HOOK)
            elif kind == "fn":
                out |= self._handed(name, seq.root, cls)
        return out

    def _handed(self, function: str, root: str, cls: str) -> set[str]:
        """Tensors of a ``cls`` inside ``root`` that ``function(model)`` re-creates: what it
        writes on every module it loops over (``for m in model.modules():``), and on the
        root itself."""
        summary = self._function(function) or {}
        out = self._run(summary.get("modules", []), cls, None, None, {function})
        if cls in self.family(root) or cls == root:
            out |= self._run(summary.get("block", []), cls, None, None, {function})
        return out

    def runs_on_root(self, root: str, method: str) -> bool:
        """Does a site or a builder of the tree run ``root.method()`` after building it?"""
        seqs = [*self.sequences.get(root, ()), *self.learned.get(root, ())]
        return any(("entry", method) in q.runs for q in seqs)

    def learned_recreated(self, root: str, cls: str) -> set[str]:
        """Tensors of a ``cls`` inside ``root`` that the library's own initialisers (what its
        builders run after an eager build) re-create."""
        out: set[str] = set()
        for seq in self.learned.get(root, ()):
            out |= self.site_recreated(seq, cls)
        return out

    def _entry_recreated(self, root: str, entry: str, cls: str) -> set[str]:
        """Tensors of a ``cls`` inside ``root`` that ``root.entry()`` re-creates: what it
        applies to every module, what it writes on the root itself (``self.freqs_cis =
        ...``), and what the children's entry points it calls do (torchtitan's
        ``layer.init_weights()``, ``self.norm.reset_parameters()``), transitively."""
        family = set(self.family(cls))
        out: set[str] = set()
        todo = [(root, entry)]
        seen = set(todo)
        while todo:
            owner, method = todo.pop()
            if owner in family:
                own = self.h.hook_tensors(owner, method)
                out |= own if own is not None else self._called(owner, method, False)
            for item in self._entry_items(owner, method):
                if item[0] != "child":
                    out |= self._applied(item, owner, cls)
                    continue
                if owner in family and item[2] == RESET_HOOK:
                    out.add(item[1])  # ``self.norm.reset_parameters()``: all of that child
                for q in self._child_classes(owner, item[1]):
                    if (q, item[2]) not in seen and len(seen) < 256:
                        seen.add((q, item[2]))
                        todo.append((q, item[2]))
        return out

    def _child_classes(self, owner: str, attr: str) -> set[str]:
        """The tree's classes ``self.attr`` of an ``owner`` is built as or holds; for a
        container whose elements the summary does not name (``nn.ModuleDict({str(i):
        TransformerBlock(i, args) for i in ...})``), every class ``owner`` builds that is no
        other attribute's."""
        got = self._members(owner, attr) | self._held(owner, attr)
        if got:
            return got
        summary = self.h.classes.get(owner)
        if summary is None:
            return set()
        others: set[str] = set()
        for a in summary.protocol.get("members", {}):
            if a != attr:
                others |= self._members(owner, a)
        built = {self.h.resolve(c) for c in summary.protocol.get("children", ())}
        return {c for c in built if c is not None} - others - {owner}

    def lost_at(self, seq: Sequence, cls: str, tensors) -> list[str]:
        """The ``tensors`` of a ``cls`` inside ``seq.root`` that the site leaves as
        ``to_empty()`` (or the meta build) left them: not re-created by what runs, not in the
        checkpoint it loads (non-persistent buffers), not built on the real device (buffers
        under accelerate's ``init_empty_weights()`` when nothing calls ``to_empty()``)."""
        done = self.site_recreated(seq, cls)
        if "*" in done:
            return []
        volatile = self._summary_names(cls, "volatile")
        buffers = self._summary_names(cls, "buffers")
        out = []
        for t in tensors:
            if t in done or (seq.loads and t not in volatile):
                continue
            if seq.meta == "params" and not seq.to_empty and t in buffers:
                continue
            if "." in t and self._child_restored(seq, cls, t, done):
                continue
            out.append(t)
        return out

    def _child_restored(self, seq: Sequence, cls: str, tensor: str, done: set[str]) -> bool:
        """``norm.weight`` of a ``cls`` (a torch layer it holds): restored when the site
        writes that child (``self.norm.reset_parameters()``, ``nn.init.ones_(self.norm.
        weight)`` on the root), runs each module's ``reset_parameters()``, or re-creates the
        tensor on every module of the layer's class (``isinstance(m, nn.LayerNorm)``)."""
        attr, _, leaf = tensor.partition(".")
        if attr in done or any(kind == "reset" and n == RESET_HOOK for kind, n in seq.runs):
            return True
        layers = set()
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            layers.update((summary.protocol.get("members", {}) if summary else {}).get(attr, ()))
        for layer in layers:
            got = self.site_recreated(seq, layer)
            if "*" not in got and leaf not in got:
                return False
        return bool(layers)

    def _summary_names(self, cls: str, key: str) -> set[str]:
        out: set[str] = set()
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            if summary is not None:
                out.update(summary.protocol.get(key, ()))
        return out

    def descendants(self, root: str) -> set[str]:
        """The tree's classes ``root`` contains, itself included."""
        if self._children is None:
            self._children = {}
            for child, parents in self.parents.items():
                for p in parents:
                    self._children.setdefault(p, set()).add(child)
        out = {root}
        todo = [root]
        while todo and len(out) < 4096:
            for c in self._children.get(todo.pop(), ()):
                if c not in out:
                    out.add(c)
                    todo.append(c)
        return out

    def model_roots(self, cls: str) -> list[str]:
        """The model roots containing ``cls`` (:meth:`roots`), then the classes containing
        it (or ``cls`` itself) that a materialisation site of the tree builds although
        another class constructs them too (a script materialising one block)."""
        out = sorted(self.roots(cls))
        if not self.sequences:
            return out
        seen = {cls}
        todo = [cls]
        built = []
        while todo and len(seen) < 4096:
            cur = todo.pop()
            if cur in self.sequences and cur not in out:
                built.append(cur)
            for p in self.parents.get(cur, ()):
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        return out + sorted(built)

    def lost_under(
        self, cls: str, tensors: tuple[str, ...], law: tuple = ()
    ) -> tuple[str, str] | None:
        """(protocol, root) under which one of ``tensors`` of ``cls`` is lost, or None when
        every model root that contains the class re-creates them. ``("", "")``: no model root
        (a root with the transformers or a root ``init_weights`` protocol) contains the class:
        it is judged per module. A parentless plain module (a layer swapped in at run time,
        ``AutoBitLinear``) is not a model root. ``law``: ``(child class, tensor, law)`` of an
        init ``cls`` gives a child's tensor: not lost under a root whose protocol re-draws
        that tensor of the child from the same law (:meth:`same_law`)."""
        pairs = [
            (member, root)
            for member in self.family(cls)
            for root in self.model_roots(member)
            if self.protocol_of(root) != RESET or root in self.learned
        ]
        if not pairs:
            return ("", "")
        for member, root in pairs:
            seqs = self.sequences_of(root)
            if seqs:
                if any(self.lost_at(q, member, tensors) for q in seqs):
                    return (self.protocol_of(root), root)
                continue
            done = self.recreated(member, root, self.protocol_of(root))
            done |= self.learned_recreated(root, member)
            if "*" in done or all(t in done for t in tensors):
                continue
            if law and self.same_law(member, root, *law):
                continue
            return (self.protocol_of(root), root)
        return None

    def _entry_items(self, cls: str, entry: str) -> list:
        """What ``cls.entry()`` does, as its nearest definition in the MRO summarises it."""
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            if summary is not None and entry in summary.methods:
                return summary.protocol.get("applies", {}).get(entry, [])
        return []

    def _members(self, cls: str, attr: str) -> set[str]:
        """The classes in the tree that ``self.attr`` of a ``cls`` is built as."""
        return self._summary_classes(cls, "members", attr)

    def _held(self, cls: str, attr: str) -> set[str]:
        """The classes in the tree that the container ``self.attr`` of a ``cls`` holds."""
        return self._summary_classes(cls, "elements", attr)

    def _summary_classes(self, cls: str, table: str, attr: str) -> set[str]:
        """The tree's classes named under ``attr`` in the protocol summary's ``table`` of
        ``cls`` or any of its bases."""
        out: set[str] = set()
        for c in self.mro(cls):
            summary = self.h.classes.get(c)
            for q in (summary.protocol.get(table, {}) if summary else {}).get(attr, ()):
                r = self.h.resolve(q)
                if r is not None:
                    out.add(r)
        return out

    def _entry(self, root: str) -> str:
        return next((e for e in self.entries if self.h.defines(root, (e,), set())), "init_weights")
