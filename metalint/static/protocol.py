"""Which protocol materialises a class, under which roots.

A class is rarely materialised alone: it lives inside model roots, and the root's protocol is
what runs after ``to_empty()``. This module answers that one question for rules, codemods and
the probe, in two halves:

- per file (libcst, :func:`~metalint.static.composition.summarize_class`,
  :func:`~metalint.static.composition.summarize_functions`, the init functions as data of
  :mod:`metalint.static.init_dispatch`): what a class
  constructs (its *children*, also through a module-level function of its file:
  ``replace_batch_norm(backbone)`` swapping frozen norms into a sub-model), the attributes it
  sets, the per-module init functions it
  defines (``_init_weights(self, module)``: an ``if``/``elif`` dispatch by ``isinstance``,
  class-name tests, ``hasattr``/``getattr``, helpers and ``super()``, loops over a list of
  the module's tensors, the module's own init methods: ``module.init_mamba_weights()``) and the functions its
  root entry point (``init_weights()``) applies to every module (``self.apply(fn)``,
  ``named_apply(fn, self)``, ``for m in self.modules():``) or to each module of a container
  child (``for level in self.levels: trunc_normal_(level.pos_embed)``, timm's Nest);
- across files (torch-free, libcst-free, :class:`Protocols`): the roots that contain each
  class, the protocol of each root, and which tensors of a class that protocol re-creates.

The protocols (``[tool.metalint] protocol``, ``"auto"`` by default):

- ``transformers``: a ``PreTrainedModel`` subclass. ``init_weights()`` applies
  ``_init_weights`` (own or inherited; the library's base dispatch of transformers 5.x when
  the base is not in the checked tree) to every module, the nearest ``PreTrainedModel`` of a
  module dispatching for it (``smart_apply``).
- ``init_weights``: a root ``init_weights()`` (timm, torchtitan's
  ``init_weights(buffer_device=...)``, ``init_states()``) run after every module's own hooks;
  what it applies to every module is the re-initialisation.
- ``init_weights-only``: the root's entry point and nothing else (no module's own hook).
- ``reset_parameters``: every module's own hooks, children first (PyTorch, FSDP, Lightning,
  PyG): nothing beyond the class's own hooks.

A root that a materialisation site of the tree builds (:mod:`metalint.static.pipeline`: a
training script's meta build, ``to_empty()``, ``model.init_weights()``) is judged under what
that site runs instead (:meth:`Protocols.sequences_of`, :meth:`Protocols.lost_at`).

A tensor is lost when it is lost under at least one root that contains its class; a class no
root contains is judged per module.

Known limits: the composition is what construction names statically (a class picked from a
module-level literal table of its file, ``ALL_LAYERS[config.kind](...)`` or through a local,
``layer_class = ALL_LAYERS[kind]``, or from a dict literal indexed in place, is a child, as is
every class of that table; one from a registry filled at import or a table of another file has
no parent); a code-generation template's class whose generated class is in the tree is judged
there (:mod:`metalint.static.templates`); a condition the dispatch cannot
decide (a config value) counts both branches as run; under the transformers protocol a
module's own ``reset_parameters()`` is still counted although ``_init_weights`` does not call
it; a class swapped into a sub-model built by a call that names no class
(``replace_batch_norm(load_backbone(config))``) is dispatched by the ``_init_weights`` of the
tree that test a module's class name and match it (``"BatchNorm" in
module.__class__.__name__``: what transformers' backbones write for those classes), so a
backbone without such a test (``TimmBackbone``, DETR's default) is not seen.
"""

from __future__ import annotations

from metalint.diagnostics import (
    AtMaterialisation,
    ChildrenFirst,
    NotRecreated,
    NotRun,
    RootReplays,
    SameLaw,
    SkipsModuleHooks,
)

# what the fixer asks of a dispatch's tests (``metalint.fix.inplace_init``), answered there
from metalint.static.init_dispatch import structure_test as structure_test
from metalint.static.init_dispatch import structure_value as structure_value
from metalint.static.pipeline import Sequence
from metalint.static.replay import Replay
from metalint.static.roots import RESET, ROOT_ONLY, TRANSFORMERS

# the protocol names the fixer reads (``metalint.fix.apply``)
from metalint.static.roots import ROOT_INIT as ROOT_INIT
from metalint.vocabulary import RESET_HOOK


class Protocols(Replay):
    """Roots, their protocols and what they re-create, over every class of a checked tree:
    the findings judged under them."""

    def forget(self) -> None:
        """Drop every answer memoised from the hierarchy's summaries, after one file's
        summaries were replaced by others of the same classes, bases and children
        (:class:`metalint.static.tree.Tree`): what was derived from those stands."""
        self._roots.clear()
        self._mro.clear()
        self._name_tests = None
        self._laws = None
        self._children = None
        self.sequences = {}
        self.learned = {}
        self._read_sites(getattr(self.h, "sites", []))

    def first_loss(self, cls: str, tensors) -> tuple[Sequence, list[str]] | None:
        """The first site (of a root containing ``cls`` or a subclass) that loses some of
        ``tensors``, with those it loses."""
        for member in self.family(cls):
            for root in self.model_roots(member):
                for seq in self.sequences_of(root):
                    lost = self.lost_at(seq, member, tensors)
                    if lost:
                        return seq, lost
        return None

    def skipped_hooks(self, root: str, entry: str = "") -> tuple[Sequence, list[str]] | None:
        """A site that runs only ``root``'s entry point (``entry`` when given; no module's own
        ``reset_parameters()``), with the modules inside it whose own hook would restore
        a tensor the site loses (a class's short name, ``Block.norm`` for a torch norm
        layer it holds); None when there is none."""
        if not self.h.defines(root, self.entries, set()) or RESET_HOOK in self.module_hooks(root):
            return None
        for seq in self.sequences_of(root):
            if seq.per_module or not seq.runs_entry:
                continue
            if entry and ("entry", entry) not in seq.runs:
                continue  # the site calls another entry point than the one the fix edits
            classes = []
            for c in sorted(self.descendants(root)):
                # the root's own hook is no module's the fix may call (it may call the entry)
                own = self.h.hook_tensors(c, RESET_HOOK) if c != root else None
                short = c.rsplit(".", 1)[-1]
                if own and self.lost_at(seq, c, sorted(own)):
                    classes.append(short)
                norms = sorted(self._summary_names(c, "norms"))
                lost = {t.partition(".")[0] for t in self.lost_at(seq, c, norms)}
                classes += [f"{short}.{attr}" for attr in sorted(lost)]
            if classes:
                return seq, classes
        return None

    def module_hooks(self, root: str) -> set[str]:
        """The methods ``root``'s entry point calls on the modules it applies to: Levit's
        ``init_weights()`` applies ``_init_weights``, which calls ``m.reset_parameters()``;
        timm's ``init_weights_vit_timm`` calls ``module.init_weights()``."""
        out: set[str] = set()
        seen: set[tuple[str, str]] = set()
        todo: list = [self._entry_items(root, self._entry(root))]
        while todo and len(seen) < 64:
            node = todo.pop()
            if not isinstance(node, list):
                continue
            head = node[0] if node else None
            if head in ("reset", "call") and len(node) == 2 and isinstance(node[1], str):
                out.add(node[1])
                continue
            if head == "method" and len(node) == 2 and ("m", node[1]) not in seen:
                seen.add(("m", node[1]))
                for c in self.mro(root):
                    summary = self.h.classes.get(c)
                    block = summary.protocol.get("dispatch", {}).get(node[1]) if summary else None
                    if block is not None:
                        todo.append(block)
                        break
                continue
            if head in ("function", "factory") and len(node) == 2 and ("f", node[1]) not in seen:
                seen.add(("f", node[1]))
                summary = self._function(node[1]) or {}
                todo.append(summary.get("block", []))
                todo.extend([["function", q] for q in summary.get("returns", ())])
                continue
            todo.extend(x for x in node if isinstance(x, list))
        return out

    # -- findings -----------------------------------------------------------------------
    def judge(self, d):
        """A static finding judged under the protocols of the roots containing its class:
        None when every root re-creates what it says is lost (or replays what it says is
        not replayed), else the finding naming the protocol and root it is lost under."""
        cond = d.condition
        run = cond.get(NotRun)
        if run is not None and self.runs_on_root(cond.cls, run.method):
            return None
        if cond.get(RootReplays):
            return self._judge_replayed(d)
        if cond.get(AtMaterialisation):
            return self._judge_site(d)
        if cond.get(SkipsModuleHooks):
            return self._judge_skipped(d)
        if cond.get(ChildrenFirst):
            return None if self._children_first(cond.cls) else d
        recreated = cond.get(NotRecreated)
        if recreated is None:
            return d
        law = cond.get(SameLaw)
        lost = self.lost_under(
            cond.cls, recreated.tensors, (law.child, law.tensor, law.law) if law else ()
        )
        if lost is None:
            return None
        protocol, root = lost
        if not protocol:
            # judged per module: name the site that materialises a root of it so, if any
            seq = next(
                (
                    q
                    for m in self.family(cond.cls)
                    for r in self.model_roots(m)
                    for q in self.sequences_of(r)
                    if q.per_module
                ),
                None,
            )
            if seq is None:
                return d.with_(protocol=RESET)
            return d.with_(
                message=f"{d.message}; lost under {seq.label}",
                protocol=RESET,
                materialised=seq.call,
            )
        return self._named_loss(d, protocol, root)

    def _named_loss(self, d, protocol: str, root: str):
        """A finding lost under ``root``'s ``protocol``, naming what loses it: the site, the
        library's own initialiser, or the root's entry point."""
        cond = d.condition
        tensors = cond.get(NotRecreated).tensors
        seq = next(
            (
                q
                for q in self.sequences_of(root)
                if any(self.lost_at(q, m, tensors) for m in self.family(cond.cls))
            ),
            None,
        )
        if seq is not None:
            return d.with_(
                message=f"{d.message}; lost under {seq.label}",
                protocol=protocol,
                root=root,
                materialised=seq.call,
            )
        learned = self.learned.get(root)
        if learned:
            return d.with_(
                message=f"{d.message}; lost under {learned[0].label}, what the library runs "
                "on the model after building it",
                protocol=protocol,
                root=root,
            )
        short = root.rsplit(".", 1)[-1]
        where = (
            f"`{short}.init_weights()` (transformers `_init_weights`)"
            if protocol == TRANSFORMERS
            else f"`{short}.{self._entry(root)}()`"
        )
        return d.with_(message=f"{d.message}; lost under {where}", protocol=protocol, root=root)

    def _children_first(self, cls: str) -> bool:
        """Does every site that materialises a model root containing ``cls`` run each
        module's own hooks children first (a parent's ``reset_parameters()`` last, so what it
        writes into a child stays)? False when no site builds one."""
        seqs = [
            q for m in self.family(cls) for r in self.model_roots(m) for q in self.sequences_of(r)
        ]
        return bool(seqs) and all(q.per_module and q.children_first for q in seqs)

    def _judge_site(self, d):
        """The tensors of a class its ``AtMaterialisation`` names, judged under the sites that
        build a root containing it: None when every site restores them, else the finding
        naming the site and the tensors lost there."""
        cond = d.condition
        found = self.first_loss(cond.cls, cond.get(AtMaterialisation).tensors)
        if found is None:
            return None
        seq, lost = found
        short = seq.root.rsplit(".", 1)[-1]
        help = d.help
        if not seq.runs_entry:
            help = (
                f"Re-create it where {seq.label.split(' at ')[0]} runs: call its module's "
                "hook there, or make it a tensor the checkpoint holds"
            )
        return d.with_(
            message=f"{d.message}: lost under {seq.label} ({seq.describe(short)})",
            help=help,
            subject=tuple(lost),
            protocol=self.protocol_of(seq.root),
            root=seq.root,
            materialised=seq.call,
        )

    def _judge_skipped(self, d):
        """A root whose entry point is all a site runs: the finding names the site and the
        classes whose own ``reset_parameters()`` it never calls."""
        cond = d.condition
        found = self.skipped_hooks(cond.cls, d.hook or "")
        if found is None:
            return None
        seq, classes = found
        names = ", ".join(f"`{c}`" for c in classes[:4])
        more = f" and {len(classes) - 4} more" if len(classes) > 4 else ""
        return d.with_(
            message=f"{d.message}; {seq.label} runs it alone after `to_empty()`, so the "
            f"own `reset_parameters()` of {names}{more} never runs",
            protocol=ROOT_ONLY,
            root=cond.cls,
            materialised=seq.call,
        )

    def _judge_replayed(self, d):
        """ML010: init applied by a parent that its hook (``RootReplays``) replays.
        Under a model root's ``init_weights()`` protocol that hook is the re-initialisation
        when the class is the root itself; inside another root (or per module) the finding
        stands, naming the first root that does not replay it."""
        cond = d.condition
        hook = cond.get(RootReplays).hook
        if self.protocol == RESET:
            return d.with_(protocol=RESET)
        roots = sorted(self.roots(cond.cls))
        seqs = self.sequences_of(cond.cls) if roots == [cond.cls] else []
        if seqs:
            # the tree materialises it: replayed only where the site calls that hook
            missed = next((q for q in seqs if ("entry", hook) not in q.runs), None)
            if missed is None:
                return None
            return d.with_(
                message=f"{d.message}; {missed.label} never calls it",
                protocol=self.protocol_of(cond.cls),
                root=cond.cls,
                materialised=missed.call,
            )
        if roots == [cond.cls]:
            protocol = self.protocol_of(cond.cls)
            if protocol in (ROOT_INIT, ROOT_ONLY) and hook in self.entries:
                return None
            return d.with_(protocol=protocol, root=cond.cls if protocol != RESET else None)
        lost = [r for r in roots if not self._replays_child(r, cond.cls, hook)]
        if not lost:
            return None
        root = lost[0]
        return d.with_(
            message=f"{d.message}; `{root.rsplit('.', 1)[-1]}`, the model it is built in, does "
            f"not call `{cond.cls.rsplit('.', 1)[-1]}.{hook}()`",
            protocol=self.protocol_of(root),
            root=root,
        )

    def _replays_child(self, root: str, cls: str, hook: str) -> bool:
        """Does ``root``'s entry point run ``hook`` on its instance of ``cls``, through its
        children's entry points (``self.encoder.init_weights()``, timm's classifier
        wrappers)?"""
        if hook not in self.entries or self.protocol_of(root) not in (ROOT_INIT, ROOT_ONLY):
            return False
        family = set(self.family(cls))
        todo = [(root, self._entry(root))]
        seen = set(todo)
        while todo:
            owner, entry = todo.pop()
            for item in self._entry_items(owner, entry):
                if item[0] != "child":
                    continue
                for q in self._members(owner, item[1]):
                    if q in family and item[2] == hook:
                        return True
                    if (q, item[2]) not in seen and len(seen) < 64:
                        seen.add((q, item[2]))
                        todo.append((q, item[2]))
        return False
