"""Every code metalint prints that is not a static rule: the probe's ``MP0xx`` findings and
``ML9xx`` (input that could not be checked), with the one-line facts reporters need
(:class:`RuleInfo`) and the reference page ``metalint rule CODE`` prints. The bottom layer:
imports nothing of metalint, never torch.
"""

from __future__ import annotations

from dataclasses import dataclass

#: code of a diagnostic that says a file (or probe target) could not be checked at all
ERROR_CODE = "ML900"
ERROR_NAME = "unreadable-input"
ERROR_SUMMARY = (
    "A file or probe target could not be checked at all (for a file CPython cannot "
    "decode or parse: CPython's own message and line; a FIFO or a device is not opened)"
)
ERROR_DOC = (
    "`metalint check` could not read, decode or parse a file (only regular files are read: a "
    "FIFO, a device or a link to one is reported without being opened), or `metalint probe` "
    "could not import or build a target (the message says which and why). Nothing was checked there, so "
    "the run exits with status 2 whatever else it found. Fix the input (encoding, syntax, an "
    "import error) or exclude the path."
)
#: a file whose analysis ran past its time budget or nested past the recursion guard
TOO_COMPLEX_CODE = "ML901"
#: a file on which the analysing worker process died (the parser crashed)
CRASH_CODE = "ML902"
#: every code that says input could not be checked: exit code 2
ERROR_CODES = frozenset({ERROR_CODE, TOO_COMPLEX_CODE, CRASH_CODE})
#: ``ML9xx``: (name, summary, page)
INPUT_CODES: dict[str, tuple[str, str, str]] = {
    ERROR_CODE: (ERROR_NAME, ERROR_SUMMARY, ERROR_DOC),
    TOO_COMPLEX_CODE: (
        "too-complex",
        "File too complex to analyse: its analysis ran past the CPU-time budget "
        "(`--file-time-budget`, `file-time-budget` in `[tool.metalint]`, default 5 s), the "
        "worker's memory bound or the recursion guard, or the file is over 8 MiB; the other "
        "files are checked as if it were absent",
        "The file was not checked: its analysis ran past the per-file CPU time budget or the "
        "worker's memory bound (2 GiB over its size), its code nests deeper than the recursion "
        "guard allows (generated or hostile input), or it is larger than 8 MiB (then it is not "
        "read at all). The run exits with status 2. Raise the budget in the configuration, "
        "split the file, or exclude it.",
    ),
    CRASH_CODE: (
        "parser-crashed",
        "The worker process analysing a file died on it (e.g. a native parser's stack "
        "overflow); the other files are checked as if it were absent",
        "The worker process that analysed the file died (the parser crashed on it); the other "
        "files were checked and the run exits with status 2. Report the file if it is valid "
        "Python.",
    ),
}


def is_error(code: str) -> bool:
    """Whether ``code`` says some input could not be checked (ML9xx: exit code 2)."""
    return code in ERROR_CODES


#: the reference page of a code (``rules/<code>.md`` of the repository)
DOCS_URL = "https://github.com/metalint/metalint/blob/main/rules/{code}.md"


@dataclass(frozen=True)
class RuleInfo:
    code: str
    name: str
    summary: str


#: ``PROBE_CODES[code] = (name, one-line summary, long doc)``
PROBE_CODES: dict[str, tuple[str, str, str]] = {
    "MP001": (
        "deterministic-value-lost",
        "A deterministic tensor differs from eager after meta build + init.",
        "The tensor's value in eager construction does not depend on the random generator "
        "(a constant, `arange`, a computed buffer, ...). After building on `meta`, `to_empty` and "
        "the init entry point, its value differs from eager (exact comparison; `allclose` with "
        "rtol 1e-5 on another device). A tensor that no hook re-initialised still holds the "
        "probe's poison (NaN for floats, a sentinel for integers, the negation for bools) and "
        "is reported here as *never re-initialised*. A tensor eager construction allocates "
        "without values (`torch.empty`) and never writes has no value to lose: eagerly it is "
        "uninitialised memory, as after `to_empty()`, so only its shape, dtype and "
        "requires_grad are compared. The diagnostic is located at the source "
        "line that last wrote the tensor during eager construction.",
    ),
    "MP002": (
        "random-distribution-differs",
        "A randomly initialised tensor's distribution differs from eager.",
        "The tensor is random in eager construction (some random op wrote it, directly or "
        "through the values it was computed from). After meta build + init its mean, standard "
        "deviation or range differs from eager beyond a tolerance scaled by `1/sqrt(numel)` "
        "(6 standard errors), or it was never re-initialised (still poisoned).",
    ),
    "MP003": (
        "left-on-meta",
        "A tensor is still on the meta device after init.",
        "A parameter, buffer or plain tensor attribute is on `meta` after `to_empty` and the "
        "init entry point. Plain tensor attributes (not registered with `register_buffer`) are "
        "not moved by `to_empty`, so they stay on meta and crash the first forward.",
    ),
    "MP004": (
        "non-finite-after-init",
        "A tensor has NaN/inf after deferred init where eager was finite.",
        "The init entry point ran over the tensor but left non-finite values in it (inf "
        "anywhere, or NaN in only part of it). A tensor that is NaN everywhere after init was "
        "never re-initialised (it still holds the NaN poison): that is reported as MP001/MP002 "
        "(value lost), not here.",
    ),
    "MP005": (
        "tie-broken",
        "Tied parameters are no longer the same object after meta build + init.",
        "In eager construction two module attributes hold the same `Parameter` object "
        "(`self.head.weight = self.embed.weight`). After `to_empty` and the init entry point "
        "they are different objects: `to_empty` re-creates each module's parameters separately, "
        "so the tie must be re-established (e.g. by a `tie_weights()` hook).",
    ),
    "MP006": (
        "meta-construct-raised",
        "Constructing the module on the meta device raised.",
        "`__init__` depends on tensor data (`.item()`, `.tolist()`, `float(t)`, a tensor in an "
        "`if`), which meta tensors do not have. The diagnostic is located at the line of user "
        "code that raised. The probe then judges the model on an eager build that `to_empty` "
        "wipes in its place, so the other tensors it loses are reported too.",
    ),
    "MP007": (
        "device-escape",
        "Real memory was allocated while building on the meta device.",
        "An operation in `__init__` created a tensor on a real device while the module was "
        "built under `torch.device('meta')` (`torch.Tensor(3, 4)`, `torch.LongTensor(list)`, "
        "`device='cpu'`, `.cpu()`, `.to(dev)`): it allocates memory that the meta build is meant "
        "to avoid, and its value is wiped by `to_empty` unless a hook re-creates it.",
    ),
    "MP008": (
        "metadata-differs",
        "Shape, dtype or requires_grad differs from eager.",
        "After meta build + init a parameter or buffer has another shape, dtype or "
        "`requires_grad` than in eager construction, or it is missing/extra.",
    ),
    "MP009": (
        "hook-order-dependent",
        "The verdict depends on the order in which reset hooks run.",
        "Some `reset_parameters()` writes tensors of a child module. Run children-first "
        "(post-order, the probe's default, like timm's `named_apply(depth_first=True)`) and "
        "parent-first (pre-order), the results differ: frameworks that reset in the other order "
        "get different values.",
    ),
    "MP010": (
        "shards-repeat-across-ranks",
        "Ranks holding different shards of a random tensor hold the same values.",
        "Probed with `--nproc N --shard fsdp|tp`: after `to_empty` and the init entry point, two "
        "ranks that hold *different* shards of a randomly initialised parameter (FSDP2 "
        "`fully_shard`, tensor parallel) hold byte-identical local shards. Every rank is seeded "
        "alike, so an init that draws on the local shard (`p.to_local().normal_()`, "
        "`torch.randn(local_shape)` copied in) repeats one block N times: the sharded model is "
        "not the model. DTensor's own random ops (`nn.init.normal_(p)` on the DTensor) give "
        "each shard its own part of one global stream on CUDA-like meshes (its "
        "`OffsetBasedRNGTracker`). torch has no such tracker for a CPU mesh, where they would "
        "draw locally and repeat; the probe's CPU ranks install one that draws each shard from "
        "its own seed, so a CPU run judges the module's init, not the mesh. Draw through "
        "DTensor random ops, or draw the whole tensor and keep the local shard. Found by a "
        "digest of each rank's shard, all-gathered.",
    ),
    "MP011": (
        "sharded-init-differs",
        "Sharded init differs from the single-device init.",
        "Probed with `--nproc N --shard fsdp|tp`: the tensor after a meta build, sharding, "
        "`to_empty` and the init entry point differs from the single-device eager build: a "
        "deterministic tensor is not bit-identical (compared gathered), or a random tensor's "
        "mean, standard deviation or range differs (statistics all-reduced over the ranks: "
        "count, sum, sum of squares, min, max). Typical causes: fan-in or bounds computed from "
        "the local shard's shape, a root `init_weights()` that indexes the full tensor, a "
        "buffer computed from a rank-local size.",
    ),
}


def _other(code: str) -> tuple[str, str, str] | None:
    return INPUT_CODES.get(code) or PROBE_CODES.get(code)


def describe_code(code: str) -> RuleInfo | None:
    """Name and summary of a code that is not a static rule (None: unknown)."""
    found = _other(code)
    return RuleInfo(code, found[0], found[1]) if found else None


def code_page(code: str) -> str | None:
    """The reference page of a code that is not a static rule (None: unknown)."""
    found = _other(code)
    if found is None:
        return None
    name, summary, doc = found
    where = (
        ""
        if code == ERROR_CODE
        else "Reported by `metalint probe` and `metalint check --probe`.\n\n"
    )
    return f"# {name} ({code})\n\n{summary}\n\n{where}## What it means\n\n{doc}\n"
