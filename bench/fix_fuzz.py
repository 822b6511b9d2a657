"""Generated models: do check, fix and the probe agree?

    python bench/fix_fuzz.py [--examples N] [--seed S]

Each input is a model file hypothesis draws from the construction idioms the rules are about,
in random order and number: children (``nn.Linear``, ``nn.ModuleList``), parameters made from
values (constants, random draws, conditional, ``nn.ParameterList`` in a comprehension,
legacy ``torch.Tensor(d)``), computed buffers (through locals, persistent or not, RoPE
tables), plain tensor attributes, in-place inits of children (``nn.init.*_``,
``.data.fill_``, loops over a ``ModuleList``), ``self.apply(self._init_weights)``,
``for m in self.modules()`` loops, a scalar read with ``.item()``, a private builder that
makes a child and initialises it (called once, sometimes under an ``if``); sometimes a class that
already has a ``reset_parameters()``, and an outer model holding it (which may apply its own
``_init_weights`` over everything). Per input, with the probe run in this process
(``metalint.probe.build.probe``, ``init="auto"``):

- **truth**: a class the probe finds losing a value after ``to_empty()`` is named by some
  finding of ``check`` (the outer model counts the inner one's findings);
- **safe**: after plain ``fix --write``, every class built eagerly under a seed gives the
  tensors the original gives (same names, bit for bit);
- **unsafe**: after ``fix --write --unsafe-fixes`` the file compiles and imports, every class
  has the original's tensors (names, shapes, dtypes; values may differ where a fix is
  unsafe), a second run changes nothing, and a class with no finding left passes the probe.

Not drawn: an init whose tensor is a conditional expression (``zeros_(self.fc.bias if ...
else self.fc.weight)``), which check does not follow (a known miss).

Prints a table of outcomes; ``tests/test_fix_fuzz.py`` runs the same properties with a few
derandomized examples each (the CI profile), and every input that broke one is kept there as
a regression test.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
HEAD = "import torch\nfrom torch import nn\n"

INIT_WEIGHTS = """
    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
"""


def _child(draw, i, v, names):
    names["children"].append(f"fc{i}")
    bias = draw(st.sampled_from(["", ", bias=False"]))
    return [f"self.fc{i} = nn.Linear(d, d{bias})"]


def _list(draw, i, v, names):
    names["lists"].append(f"blocks{i}")
    return [f"self.blocks{i} = nn.ModuleList([nn.Linear(d, d) for _ in range(2)])"]


def _param(draw, i, v, names):
    forms = [
        f"nn.Parameter({v} * torch.ones(d))",
        f"nn.Parameter(torch.full((d,), {v}))",
        "nn.Parameter(torch.zeros(1, 1, d))",
        f"nn.Parameter(torch.ones(d) * {v}, requires_grad=False)",
    ]
    return [f"self.p{i} = {draw(st.sampled_from(forms))}"]


def _param_rand(draw, i, v, names):
    forms = [
        "nn.Parameter(torch.randn(1, d) * 0.02)",
        "nn.Parameter(torch.rand(d))",
        "nn.Parameter(torch.empty(d).uniform_(-0.1, 0.1))",
    ]
    return [f"self.r{i} = {draw(st.sampled_from(forms))}"]


def _buffer(draw, i, v, names):
    persistent = draw(st.sampled_from(["", ", persistent=False"]))
    values = [
        "torch.arange(d).float() / d",
        "torch.tril(torch.ones(d, d))",
        "torch.eye(d) * 2",
        "torch.tensor(0.5)",
    ]
    return [f'self.register_buffer("b{i}", {draw(st.sampled_from(values))}{persistent})']


def _buffer_local(draw, i, v, names):
    lines = [f"t{i} = torch.linspace(0.0, 1.0, d)"]
    if draw(st.booleans()):
        lines.append(f"t{i} = t{i} * 2 + 1")
    persistent = draw(st.sampled_from(["", ", persistent=False"]))
    return [*lines, f'self.register_buffer("bl{i}", t{i}.exp(){persistent})']


def _init_child(draw, i, v, names):
    child = draw(st.sampled_from(names["children"]))
    forms = [
        f"nn.init.zeros_(self.{child}.weight)",
        f"nn.init.normal_(self.{child}.weight, std=0.02)",
        f"self.{child}.weight.data.fill_({v})",
        f"nn.init.constant_(self.{child}.weight, {v})",
        f"nn.init.orthogonal_(self.{child}.weight)",
    ]
    return [draw(st.sampled_from(forms))]


def _init_list(draw, i, v, names):
    blocks = draw(st.sampled_from(names["lists"]))
    return [f"for m in self.{blocks}:", "    nn.init.zeros_(m.weight)"]


def _builder(draw, i, v, names):
    """A private builder that makes a child and initialises it (torch-geometric-temporal's
    ``_init_attention_layers()``), called once, sometimes under an ``if``."""
    form = draw(
        st.sampled_from(
            ["nn.init.zeros_({w})", "nn.init.normal_({w}, std=0.02)", "nn.init.constant_({w}, 0.5)"]
        )
    )
    names["methods"].append(
        f"\n    def _build{i}(self):\n"
        f"        self.b{i} = nn.Linear(4, 4)\n"
        f"        {form.format(w=f'self.b{i}.weight')}\n"
    )
    names["children"].append(f"b{i}")
    if draw(st.booleans()):
        return ["if v is not None:", f"    self._build{i}()"]
    return [f"self._build{i}()"]


#: the idioms: kind -> its lines (a function of the draw, its number, a value and the names
#: made so far)
IDIOMS = {
    "child": _child,
    "list": _list,
    "param": _param,
    "param_rand": _param_rand,
    "buffer": _buffer,
    "buffer_local": _buffer_local,
    "plain": lambda draw, i, v, names: [f"self.c{i} = torch.ones(d) * 3"],
    "init_child": _init_child,
    "init_list": _init_list,
    "modules_loop": lambda draw, i, v, names: [
        "for m in self.modules():",
        "    if isinstance(m, nn.Linear):",
        "        nn.init.normal_(m.weight, std=0.01)",
    ],
    "param_cond": lambda draw, i, v, names: [
        f"self.g{i} = nn.Parameter(v * torch.ones(d)) if v is not None else None"
    ],
    "param_list": lambda draw, i, v, names: [
        f"self.pl{i} = nn.ParameterList([nn.Parameter(torch.zeros(d) + k) for k in range(2)])"
    ],
    "legacy": lambda draw, i, v, names: [
        f"self.w{i} = nn.Parameter(torch.Tensor(d, d))",
        f"nn.init.uniform_(self.w{i}, -0.1, 0.1)",
    ],
    "rope": lambda draw, i, v, names: [
        f"inv{i} = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))",
        f'self.register_buffer("inv{i}", inv{i}, persistent=False)',
    ],
    "item": lambda draw, i, v, names: [f"self.n{i} = int(torch.arange(d).sum().item())"],
    "apply": lambda draw, i, v, names: ["self.apply(self._init_weights)"],
    "builder": _builder,
}


@st.composite
def statement(draw, i: int, names: dict[str, list[str]]):
    """One idiom of ``__init__`` (lines at 8 spaces), numbered ``i``: (kind, lines)."""
    kinds = ["child", "child", "list", "param", "param_rand", "buffer", "buffer_local", "plain"]
    if names["children"]:
        kinds += ["init_child", "init_child", "modules_loop"]
    if names["lists"]:
        kinds += ["init_list"]
    kinds += ["param_cond", "param_list", "legacy", "rope", "item", "apply", "builder"]
    kind = draw(st.sampled_from(kinds))
    v = draw(st.sampled_from(["0.5", "1e-5", "2.0", "v"]))
    return kind, IDIOMS[kind](draw, i, v, names)


@st.composite
def model_source(draw) -> str:
    """A file with a class ``M`` (and sometimes an outer model ``Outer`` holding it)."""
    names: dict[str, list[str]] = {"children": [], "lists": [], "methods": []}
    children = names["children"]
    body: list[str] = []
    kinds: list[str] = []
    for i in range(draw(st.integers(1, 6))):
        kind, lines = draw(statement(i, names))
        kinds.append(kind)
        body += lines
    methods = "".join(names["methods"])
    if "apply" in kinds:
        methods += INIT_WEIGHTS
    if children and draw(st.booleans()):
        # a hook the library wrote for part of its own tensors
        methods += (
            "\n    def reset_parameters(self):\n"
            f"        nn.init.zeros_(self.{children[0]}.weight)\n"
        )
        if draw(st.booleans()):
            body.append("self.reset_parameters()")
    text = HEAD + "\n\nclass M(nn.Module):\n    def __init__(self, d=4, v=0.5):\n"
    text += "        super().__init__()\n"
    text += "".join(f"        {line}\n" for line in body) + methods
    if draw(st.booleans()):
        outer = [
            "self.inner = M(d)",
            "self.head = nn.Linear(d, 2)",
        ]
        if draw(st.booleans()):
            outer.append("self.apply(self._init_weights)")
        text += "\n\nclass Outer(nn.Module):\n    def __init__(self, d=4):\n"
        text += "        super().__init__()\n" + "".join(f"        {x}\n" for x in outer)
        if "self.apply(self._init_weights)" in outer:
            text += INIT_WEIGHTS
    return text


# -- running metalint and the probe in this process ---------------------------------------------

_counter = itertools.count()


def _cli(folder: Path, *args: str):
    from click.testing import CliRunner

    from metalint.cli import main

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        r = CliRunner().invoke(main, list(args), catch_exceptions=True)
    finally:
        os.chdir(cwd)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r


def findings(folder: Path) -> list[dict]:
    r = _cli(folder, "check", "--no-cache", "--output-format", "json", "m.py")
    return json.loads(r.output)


def _classes(path: Path) -> dict:
    """Import ``path`` under a fresh name; its classes ``M`` and ``Outer``."""
    name = f"_metalint_fix_fuzz_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return {c: getattr(module, c) for c in ("M", "Outer") if hasattr(module, c)}


def _eager(cls, seed: int = 0) -> dict:
    """The tensors of ``cls()`` built under ``seed``: parameters, and buffers or plain tensor
    attributes alike (ML007's fix turns the one into the other), with the state_dict's keys."""
    import torch

    torch.manual_seed(seed)
    m = cls()
    out = {f"param {k}": v.detach().clone() for k, v in m.named_parameters()}
    out.update((f"tensor {k}", v.clone()) for k, v in m.named_buffers())
    for path, sub in m.named_modules():
        for k, v in vars(sub).items():
            if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter):
                out[f"tensor {path + '.' if path else ''}{k}"] = v.clone()
    out["state_dict keys"] = sorted(m.state_dict())
    return out


def _same(a: dict, b: dict, *, values: bool) -> str | None:
    import torch

    if a.keys() != b.keys():
        return f"tensors {sorted(a.keys() ^ b.keys())}"
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, list):
            if x != y:
                return f"{k}: {sorted(set(x) ^ set(y))}"
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"{k}: {tuple(x.shape)} {x.dtype} -> {tuple(y.shape)} {y.dtype}"
        if values and not (
            torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(), y.nan_to_num())
        ):
            return f"{k}: values differ"
    return None


def _built_like(original: dict, cls, *, values: bool) -> str | None:
    """What differs between ``original`` (:func:`_eager`'s tensors) and ``cls`` built the same
    way; a construction that raises is a difference."""
    try:
        return _same(original, _eager(cls), values=values)
    except Exception as exc:  # noqa: BLE001
        return f"construction raises {type(exc).__name__}: {exc}"


def _probe(cls):
    from metalint.probe.build import probe

    return probe(cls, init="auto", label=cls.__name__, check_order=False)


def _named_classes(diags: list[dict]) -> set[str]:
    return {(d.get("symbol") or "").split(".")[0] for d in diags}


def outcome(text: str) -> list[str]:
    """What went wrong with ``text`` (empty when every property holds)."""
    import warnings

    bad: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        base, safe, unsafe = (Path(tmp, x) for x in ("orig", "safe", "unsafe"))
        for d in (base, safe, unsafe):
            d.mkdir()
            (d / "m.py").write_text(text)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            original = _classes(base / "m.py")
            eager = {c: _eager(k) for c, k in original.items()}
            before = findings(base)
            named = _named_classes(before)
            for c, k in original.items():
                res = _probe(k)
                lost = res.status != "passed"
                mentioned = c in named or (c == "Outer" and "M" in named)
                if lost and not mentioned:
                    bad.append(f"truth: {c} loses values, check reports nothing")
            # plain fix --write: bit-identical eager tensors
            _cli(safe, "fix", "--no-cache", "--write", "m.py")
            try:
                fixed = _classes(safe / "m.py")
            except Exception as exc:  # noqa: BLE001
                return [*bad, f"safe: the fixed file does not import: {type(exc).__name__}: {exc}"]
            for c, k in fixed.items():
                why = _built_like(eager[c], k, values=True)
                if why:
                    bad.append(f"safe: {c}: {why}")
            # fix --write --unsafe-fixes: same tensors; the probe passes where nothing is left
            _cli(unsafe, "fix", "--no-cache", "--unsafe-fixes", "--write", "m.py")
            once = (unsafe / "m.py").read_text()
            try:
                fixed = _classes(unsafe / "m.py")
            except Exception as exc:  # noqa: BLE001
                return [
                    *bad,
                    f"unsafe: the fixed file does not import: {type(exc).__name__}: {exc}",
                ]
            left = _named_classes(findings(unsafe))
            for c, k in fixed.items():
                why = _built_like(eager[c], k, values=False)
                if why:
                    bad.append(f"unsafe: {c}: {why}")
                    continue
                if once == text or c in left or (c == "Outer" and "M" in left):
                    continue
                res = _probe(k)
                if res.status != "passed":
                    lost = sorted({n for f in res.findings for n in (f.subject or ())})
                    bad.append(
                        f"unsafe: {c} fixed, the probe fails: {lost or res.findings[0].message}"
                    )
            _cli(unsafe, "fix", "--no-cache", "--unsafe-fixes", "--write", "m.py")
            if (unsafe / "m.py").read_text() != once:
                bad.append("unsafe: a second run changes the file")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    from fuzz import collect

    t0 = time.monotonic()
    counts: Counter = Counter()
    for text in collect(model_source(), a.examples, a.seed):
        bad = outcome(text)
        counts["inputs"] += 1
        for b in bad or ["ok"]:
            counts[b.split(":")[0] if b != "ok" else "ok"] += 1
        if bad:
            print(f"--- {bad}\n{text}", file=sys.stderr)
    print(f"## fix fuzz: {counts.pop('inputs')} inputs, {time.monotonic() - t0:.0f} s")
    for k, n in counts.most_common():
        print(f"- {k}: {n}")
    return 1 if set(counts) - {"ok"} else 0


if __name__ == "__main__":
    sys.exit(main())
