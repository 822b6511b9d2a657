"""The data model shared by ``check``, ``probe`` and ``fix``.

A :class:`Diagnostic` is one finding: a rule code, a message, where it is (file, start and end
line/column, 1-based lines and columns), the class it belongs to, and optionally a :class:`Fix`.
A fix is a list of text :class:`Edit` s with an :class:`Applicability`. Everything here is plain
data that pickles (process-parallel checking), serialises to JSON (cache, ``--output-format
json``) and never imports torch.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Any, TypeVar

_C = TypeVar("_C")


class Applicability(str, enum.Enum):
    """How safe a fix is, as in ruff: ``safe`` fixes keep eager behaviour identical."""

    SAFE = "safe"
    UNSAFE = "unsafe"


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, order=True)
class Position:
    """A 1-based line and 1-based column."""

    row: int
    column: int


@dataclass(frozen=True)
class Edit:
    """Replace the text between ``start`` and ``end`` (end exclusive) with ``content``."""

    start: Position
    end: Position
    content: str

    def to_json(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "location": asdict(self.start),
            "end_location": asdict(self.end),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Edit":
        return cls(Position(**data["location"]), Position(**data["end_location"]), data["content"])


@dataclass(frozen=True)
class Fix:
    """A rewrite that resolves a diagnostic.

    ``edits`` describe the change for reporters (json/sarif); ``fix`` re-derives the edits from
    the syntax tree when it applies them, so edits never go stale.
    """

    applicability: Applicability
    message: str
    edits: tuple[Edit, ...] = ()
    #: the init hook the fix puts code in (``reset_parameters``), if any
    hook: str | None = None
    #: the init hook the fix that must follow it puts code in: ML007's fix registers a buffer
    #: whose value ML002's fix then re-creates there, the next round
    then_hook: str | None = None
    #: the fix to apply instead when a base class has its own ``reset_parameters()`` (which
    #: only the whole tree tells): its new hook calls the base's first
    over_base_hook: Fix | None = None
    #: the value stays where ``__init__`` makes it and a hook ``__init__`` does not call
    #: re-creates it: another fix of the class goes first (it may move the value instead)
    kept: bool = False

    def to_json(self) -> dict[str, Any]:
        out = {
            "applicability": self.applicability.value,
            "message": self.message,
            "edits": [e.to_json() for e in self.edits],
        }
        if self.hook is not None:
            out["hook"] = self.hook
        if self.then_hook is not None:
            out["then_hook"] = self.then_hook
        if self.over_base_hook is not None:
            out["over_base_hook"] = self.over_base_hook.to_json()
        if self.kept:
            out["kept"] = True
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "Fix | None":
        if data is None:
            return None
        return cls(
            Applicability(data["applicability"]),
            data.get("message", ""),
            tuple(Edit.from_json(e) for e in data.get("edits", ())),
            data.get("hook"),
            data.get("then_hook"),
            cls.from_json(data.get("over_base_hook")),
            bool(data.get("kept", False)),
        )


@dataclass(frozen=True)
class Diagnostic:
    """One finding of a static rule, of the probe, or an error reading a file."""

    code: str
    message: str
    filename: str
    start: Position
    end: Position
    symbol: str | None = None  # qualified class name inside the module, e.g. "Block.LayerScale"
    fix: Fix | None = None
    severity: Severity = Severity.ERROR
    # Static findings that depend on classes in other files (is the class an ``nn.Module``?
    # does a base class re-create the value in its hook?) carry the question here; the
    # checker answers it once every file of the tree is indexed. Not serialised in reports.
    condition: "Condition | None" = field(default=None, compare=False)
    # The probe's verdict on a static finding: "confirmed", "refuted" or None (not probed).
    verdict: str | None = field(default=None, compare=False)
    #: the tensors or attributes of ``symbol`` the finding is about, as written on ``self``
    #: (``("gamma",)``, ``("bn.weight",)`` for a child's tensor); empty for a finding about
    #: the class as a whole. Read this, never the message.
    subject: tuple[str, ...] = ()
    #: the init hook the finding is about (``reset_parameters``), if it names one
    hook: str | None = None
    #: what to do about it, printed on its own line (``= help: ...``) by the text reporter
    help: str | None = None
    #: the protocol under which the tensor is lost ("transformers _init_weights", "root
    #: init_weights", "reset_parameters") and the model root it was judged in; None: judged per
    #: module (no root contains the class), see :mod:`metalint.static.protocol`
    protocol: str | None = None
    root: str | None = None
    #: a finding at a call during construction whose cause lies in the function it calls, in
    #: another file: ``(function, filename, line)`` of the offending line (ML008 through
    #: ``utils.make_window(n)``, which calls ``.item()``)
    via: tuple[str, str, int] | None = None
    #: the call of the tree that materialises the model the finding was judged in:
    #: ``(call, filename, line)`` (``("model.init_weights()", "scripts/train.py", 17)``; an
    #: empty filename: the configured ``protocol`` names it), see
    #: :mod:`metalint.static.pipeline`
    materialised: tuple[str, str, int] | None = None
    #: the probed classes (or factories) whose build showed this finding, when more than one
    #: did (a tensor of a class that several probed models contain is reported once)
    seen_in: tuple[str, ...] = ()

    @property
    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.filename, self.start.row, self.start.column, self.code)

    def with_(self, **changes: Any) -> "Diagnostic":
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "filename": self.filename,
            "location": asdict(self.start),
            "end_location": asdict(self.end),
            "symbol": self.symbol,
            "severity": self.severity.value,
            "fix": self.fix.to_json() if self.fix else None,
        }
        if self.verdict is not None:
            out["verdict"] = self.verdict
        if self.subject:
            out["subject"] = list(self.subject)
        if self.hook is not None:
            out["hook"] = self.hook
        if self.help is not None:
            out["help"] = self.help
        if self.protocol is not None:
            out["protocol"] = self.protocol
            out["root"] = self.root
        if self.via is not None:
            function, filename, line = self.via
            out["via"] = {"function": function, "filename": filename, "line": line}
        if self.materialised is not None:
            call, filename, line = self.materialised
            out["materialised"] = {"call": call, "filename": filename, "line": line}
        if self.seen_in:
            out["seen_in"] = list(self.seen_in)
        return out

    def to_cache(self) -> dict[str, Any]:
        out = self.to_json()
        out["condition"] = self.condition.to_json() if self.condition else None
        return out

    @classmethod
    def from_cache(cls, data: dict[str, Any]) -> "Diagnostic":
        cond = data.get("condition")
        return cls(
            code=data["code"],
            message=data["message"],
            filename=data["filename"],
            start=Position(**data["location"]),
            end=Position(**data["end_location"]),
            symbol=data.get("symbol"),
            fix=Fix.from_json(data.get("fix")),
            severity=Severity(data.get("severity", "error")),
            condition=Condition.from_json(cond) if cond else None,
            verdict=data.get("verdict"),
            subject=tuple(data.get("subject", ())),
            hook=data.get("hook"),
            help=data.get("help"),
            protocol=data.get("protocol"),
            root=data.get("root"),
            via=_via(data.get("via")),
            materialised=_materialised(data.get("materialised")),
            seen_in=tuple(data.get("seen_in", ())),
        )


# -- the conditions a static finding stands under -------------------------------------------
# Each kind is one frozen dataclass of plain fields (strings, bools, tuples of them): the rule
# builds it, the engine carries it in a :class:`Condition`, the cache writes it as its fields
# and its class name, and reads back only the classes of :data:`CLAUSES`. Adding a condition
# is adding one class here (and answering it in ``Hierarchy.holds`` or ``Protocols.judge``).


@dataclass(frozen=True)
class NotRecreated:
    """The finding stands only while no reset hook of the class (or of a base it inherits the
    hook from) re-creates one of these tensors; ``hooks``: only those hooks (empty: every
    configured hook)."""

    tensors: tuple[str, ...]
    hooks: tuple[str, ...] = ()


@dataclass(frozen=True)
class NoHook:
    """The finding stands only while neither the class nor a base has a public init hook."""


@dataclass(frozen=True)
class NoMethod:
    """The finding stands only while neither the class nor a base defines one of these
    methods."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class NotOnlyReset:
    """The finding stands unless the module-level ``function`` applied to the children (or
    what the factory call ``function(**args)`` returns, ``args``: its constant arguments as
    ``((argument, constant), ...)``) only calls each module's own ``reset_parameters()``;
    ``args`` None: the function itself is applied."""

    function: str
    args: tuple | None = None


@dataclass(frozen=True)
class RootReplays:
    """The finding stands unless the class is a model root whose entry point (this ``hook``,
    e.g. ``init_weights``) replays it: under that protocol the call is the
    re-initialisation."""

    hook: str


@dataclass(frozen=True)
class AppliesInit:
    """The finding stands only while this module-level ``function`` (resolved across files)
    hands every module of its argument to an init (``efficientnet_init_weights(self)``)."""

    function: str


@dataclass(frozen=True)
class HelperReads:
    """The finding stands only while this module-level ``function`` (resolved across files)
    does what the finding's rule reports (reads a tensor's value: ML008; copies one to a real
    device: ML009), itself or through the functions it calls."""

    function: str


@dataclass(frozen=True)
class HelperRegisters:
    """The finding stands only while this module-level ``function`` (resolved across files)
    registers buffers on its argument ``module`` under the names it is given as its argument
    ``names`` (each a position or a keyword; see
    :func:`metalint.static.tensors.argument_registrations`)."""

    function: str
    module: str
    names: str


@dataclass(frozen=True)
class SameLaw:
    """The finding (an init of a child's ``tensor``, drawn from ``law`` as
    :func:`metalint.static.tensors.init_law` gives it; "" when the rule cannot read it)
    stands only while a root's protocol does not re-draw that tensor of the ``child`` class
    from the same law; under the transformers protocol, while it does not re-draw it at all
    (the eager build's ``post_init()`` re-draws it too)."""

    child: str
    tensor: str
    law: str


@dataclass(frozen=True)
class AtMaterialisation:
    """Tensors of the class that carry a value after construction: the finding stands only
    while a materialisation site of the tree (or ``protocol = "init_weights-only"``) that
    builds a root containing the class loses one of them (see
    :mod:`metalint.static.pipeline`)."""

    tensors: tuple[str, ...]


@dataclass(frozen=True)
class SkipsModuleHooks:
    """The class is a root whose entry point may be all its materialisation runs: the finding
    stands only while a site runs that entry point alone and a module's own
    ``reset_parameters()`` would restore a tensor it loses."""


@dataclass(frozen=True)
class ChildrenFirst:
    """The finding (an order dependence between a parent's hook and its children's) stands
    unless every site materialising a root containing the class runs the children's hooks
    first (see ``Sequence.children_first``)."""


@dataclass(frozen=True)
class ReturnsMeta:
    """The finding (a read of the value of what this module-level ``function`` of the tree
    returns) stands only while that function returns a meta tensor (resolved across
    files)."""

    function: str


@dataclass(frozen=True)
class NotRun:
    """The finding (an init in this ``method`` of the class, which construction calls) stands
    unless the tree runs the method on the class as a model root after building it (a
    materialisation site or a builder of the library: its own initialiser)."""

    method: str


Clause = (
    NotRecreated
    | NoHook
    | NoMethod
    | NotOnlyReset
    | RootReplays
    | AppliesInit
    | HelperReads
    | HelperRegisters
    | SameLaw
    | AtMaterialisation
    | SkipsModuleHooks
    | ChildrenFirst
    | ReturnsMeta
    | NotRun
)

#: every kind of condition by its class name: the only classes the cache reads back
CLAUSES: dict[str, type] = {
    c.__name__: c
    for c in (
        NotRecreated,
        NoHook,
        NoMethod,
        NotOnlyReset,
        RootReplays,
        AppliesInit,
        HelperReads,
        HelperRegisters,
        SameLaw,
        AtMaterialisation,
        SkipsModuleHooks,
        ChildrenFirst,
        ReturnsMeta,
        NotRun,
    )
}


def clause_of(clauses: tuple, kind: type[_C]) -> _C | None:
    """The clause of ``kind`` among ``clauses``, if any."""
    return next((c for c in clauses if type(c) is kind), None)


def clause_to_json(clause: Any) -> dict[str, Any]:
    return {"kind": type(clause).__name__, **asdict(clause)}


def clause_from_json(data: Any) -> Any:
    """The clause written by :func:`clause_to_json`; ValueError for a kind that is not one
    of :data:`CLAUSES` (nothing else is ever constructed) or fields that are not its own."""
    if type(data) is not dict:
        raise ValueError("a condition is not an object")
    fields = dict(data)
    name = fields.pop("kind", None)
    kind = CLAUSES.get(name) if type(name) is str else None
    if kind is None:
        raise ValueError("unknown kind of condition")
    names = {f.name for f in dataclass_fields(kind)}
    if not set(fields) <= names:
        raise ValueError(f"unknown fields of {kind.__name__}")
    return kind(**{k: _frozen(v) for k, v in fields.items()})


def _frozen(value: Any) -> Any:
    """JSON's lists back as the tuples they were written from."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


@dataclass(frozen=True)
class Condition:
    """What must hold across the class hierarchy for a static finding to stand: every one of
    ``clauses`` (the kinds above), about the class ``cls`` (fully qualified,
    ``pkg.mod.Block``), which must be an ``nn.Module`` subclass when ``module``."""

    cls: str
    module: bool = True
    clauses: tuple[Clause, ...] = ()

    def get(self, kind: type[_C]) -> _C | None:
        """The clause of ``kind``, if the finding stands under one."""
        return clause_of(self.clauses, kind)

    def to_json(self) -> dict[str, Any]:
        return {
            "cls": self.cls,
            "module": self.module,
            "clauses": [clause_to_json(c) for c in self.clauses],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Condition":
        clauses = data["clauses"]
        if type(clauses) is not list:
            raise ValueError("the clauses of a condition are not a list")
        return cls(data["cls"], bool(data["module"]), tuple(clause_from_json(c) for c in clauses))


def _materialised(value: Any) -> tuple[str, str, int] | None:
    return None if not value else (value["call"], value["filename"], value["line"])


def _via(value: Any) -> tuple[str, str, int] | None:
    return None if not value else (value["function"], value["filename"], value["line"])
