"""Fuzz metalint with hostile input: check, fix and the loader.

    python bench/fuzz.py [--examples N] [--parts check,fix,loader,cache] [--seed S]

Four parts, each driven by hypothesis (and hypothesmith for generated Python source):

- **check**: N sources (hypothesmith's grammar-generated files, and model classes mutated
  with hostile text: unbalanced and deep brackets, odd line separators, NUL, coding cookies,
  long expressions, bytes in other encodings) written to one folder and checked in one
  ``metalint check -j 2`` run. Counted: a run that dies (traceback or signal), files past the
  budget (ML901), worker crashes (ML902), and files whose ML900 disagrees with CPython (a
  file CPython compiles is never ML900; one it rejects always is).
- **fix**: N model files with a fixable finding, hostile text around the class (odd line
  separators in strings and comments, any newline style). ``fix --unsafe-fixes --write``
  must leave a file that compiles, change only lines of the fixed class, keep the rest
  byte for byte, and change nothing on a second run (idempotent).
- **loader**: N mutated checkpoints (safetensors headers: edited JSON values, truncation,
  random bytes; torch zips: compressed, cut, grown or swapped records, flipped bytes).
  ``open_checkpoint`` + reading every tensor must either raise ``CheckpointError`` (one line
  naming the file) or return exactly what the reference reader returns
  (``safetensors.safe_open``; ``torch.load(weights_only=True)`` without mmap); accepting a file
  the reference refuses counts as malformed accepted.
- **cache**: N/5 rounds over a folder of four files (findings, one across files, a clean file,
  a file CPython rejects), each a list of steps: edits of the files, faults in the cache file
  (truncated, a flipped bit, garbage, JSON of any shape plain or signed with a valid MAC, a
  forgery clearing every finding under the old unkeyed digest or a guessed key, an
  entry with a value of another type or a key dropped, another settings key, a stale copy from
  before an edit, deleted, a folder where the file was, a file where the folder was), and 2-3
  concurrent runs with one SIGKILLed at a random moment. Every run that completes must print
  what ``check --no-cache`` prints (same exit code), with no traceback and at most one warning;
  the cache file is never torn; temporaries a killed run left are removed once stale.

Prints one table of outcomes per part; every input that ever broke metalint is kept as a
regression test in ``tests/test_hostile_input.py``. ``tests/test_fuzz.py`` runs the same
properties with a few examples each (the CI profile).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent

# -- sources -----------------------------------------------------------------------------------

SEEDS = [
    """import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))
""",
    """import torch
import torch.nn as nn

class Rope(nn.Module):
    def __init__(self, dim: int, base: float = 10000.0):
        super().__init__()
        inv = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv, persistent=False)
        self.scale = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x * self.inv_freq[: x.shape[-1]]
""",
    """import torch
from torch import nn

class Embed(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, n, d) * 0.02)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.proj = nn.Linear(d, d)
""",
]

#: text that broke (or could break) a parser, a row count or a decoder
HOSTILE = [
    "(",
    ")",
    "[",
    "]",
    "{",
    "\\",
    "\r",
    "\n",
    "\r\n",
    "\u2028",
    "\u2029",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x1d",
    "\x1e",
    "\x85",
    "\x00",
    "\t",
    "\ufeff",
    '"""',
    "'",
    "#",
    ":",
    "    ",
    "\U0001f600",
    "é",
    "# noqa",
    "# coding: undefined\n",
    "# coding: punycode\n",
    "# coding: latin-1\n",
    "# -*- coding: utf-16 -*-\n",
    "lambda: ",
    "yield ",
    "async ",
    "x = " + "(" * 200 + "1" + ")" * 200 + "\n",
    "x = " + "(" * 2000 + "1" + ")" * 2000 + "\n",
    "x = " + "+".join(["1"] * 3000) + "\n",
    "x = a" + "[0]" * 3000 + "\n",
    "x = " + "[" * 120 + "]" * 120 + "\n",
    "f(" + "x," * 5000 + ")\n",
]


@st.composite
def mutated_source(draw) -> bytes:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        piece = draw(st.sampled_from(HOSTILE) | st.text(max_size=6))
        text = text[:at] + piece * draw(st.integers(1, 3)) + text[at:]
    if draw(st.booleans()):
        text = text.replace("\n", draw(st.sampled_from(["\r\n", "\r", "\n"])))
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "latin-1", "utf-16", "cp1252"]))
    data = text.encode(encoding, errors="replace")
    if draw(st.integers(0, 9)) == 0:  # a half-written file
        data = data[: draw(st.integers(0, len(data)))]
    return data


def generated_source():
    import hypothesmith

    return st.one_of(
        hypothesmith.from_grammar().map(lambda s: ("import torch\n" + s).encode("utf-8")),
        hypothesmith.from_node().map(lambda s: ("import torch\n" + s).encode("utf-8")),
    )


def check_sources():
    """Three mutated model files for one generated by hypothesmith (the slower to draw)."""
    try:
        generated = generated_source()
    except ImportError:  # hypothesmith is optional: the mutated files alone
        return mutated_source()
    return st.one_of(mutated_source(), mutated_source(), mutated_source(), generated)


def cpython_accepts(data: bytes) -> bool:
    # generated sources are full of `x is 1`: CPython's SyntaxWarning for each would drown the table
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(data, "f.py", "exec", 1024, dont_inherit=True)  # ast.PyCF_ONLY_AST
            return True
        except Exception:  # noqa: BLE001
            return False


def run_check_folder(sources: list[bytes], budget: float = 5.0, jobs: int = 2) -> Counter:
    """Check every source in one run; count what happened."""
    out: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, data in enumerate(sources):
            Path(tmp, f"f{i:05d}.py").write_bytes(data)
        t0 = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-m", "metalint", "check", "--no-cache", "--output-format", "json"]
            + ["-j", str(jobs), "--file-time-budget", str(budget), "."],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=60 + len(sources) * (budget + 1),
        )
        out["seconds"] = round(time.monotonic() - t0)
    out["inputs"] = len(sources)
    if r.returncode not in (0, 1, 2) or "Traceback" in r.stderr:
        out["run died"] += 1
        sys.stderr.write(r.stderr[-2000:])
        return out
    items = json.loads(r.stdout)
    by_file: dict[str, dict[str, str]] = {}
    for d in items:
        by_file.setdefault(d["filename"], {})[d["code"]] = d["message"]
    for i, data in enumerate(sources):
        codes = by_file.get(f"f{i:05d}.py", {})
        accepted = cpython_accepts(data)
        if "ML902" in codes:
            outcome = "crash (ML902)"
        elif "ML901" in codes:
            outcome = "past budget (ML901)"
        elif accepted and "ML900" in codes:
            outcome = "ML900 on a file CPython compiles"
        elif not accepted and "ML900" not in codes:
            outcome = "no ML900 on a file CPython rejects"
        else:
            outcome = "ML900 (CPython rejects)" if not accepted else "checked"
            out[outcome] += 1
            continue
        out[outcome] += 1
        message = next((m for c, m in codes.items() if c.startswith("ML9")), "")
        print(f"check: {outcome} ({message}): {data!r}", file=sys.stderr)  # a regression test
    return out


# -- fix ---------------------------------------------------------------------------------------

FIX_SEED = """import torch
from torch import nn
{before}
class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace  {comment}
        self.gamma = nn.Parameter(init_values * torch.ones(dim))
{after}"""

ODD = ["\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "é", "\t", "x"]


@st.composite
def fix_source(draw) -> tuple[str, str]:
    """A file with a fixable LayerScale, hostile text in strings and comments around it."""

    def junk() -> str:
        chars = draw(st.lists(st.sampled_from(ODD), max_size=4))
        kind = draw(st.sampled_from(["str", "comment", "doc", "blank", "stmt"]))
        body = "".join(chars)
        return {
            "str": f'S{len(chars)} = "{body}"\n',
            "comment": f"# {body}\n",
            "doc": f'"""{body}\n{body}"""\n',
            "blank": "\n" * len(chars),
            "stmt": f"y = {len(chars)}; z = [\n  1,\n]\n",
        }[kind]

    before = "".join(junk() for _ in range(draw(st.integers(0, 4))))
    after = "".join(junk() for _ in range(draw(st.integers(0, 3))))
    comment = f"# {''.join(draw(st.lists(st.sampled_from(ODD), max_size=3)))}"
    text = FIX_SEED.format(before=before, after=after, comment=comment)
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    return text.replace("\n", newline), newline


def fix_once(folder: Path) -> int:
    from click.testing import CliRunner

    from metalint.cli import main

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        r = CliRunner().invoke(
            main, ["fix", "--no-cache", "--unsafe-fixes", "--write", "m.py"], catch_exceptions=True
        )
    finally:
        os.chdir(cwd)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code


def fix_outcome(text: str) -> str:
    """'ok', or what went wrong."""
    from metalint.lines import split_lines

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "m.py")
        path.write_bytes(text.encode("utf-8"))
        try:
            fix_once(Path(tmp))
        except Exception as exc:  # noqa: BLE001
            return f"crash: {type(exc).__name__}: {exc}"
        new = path.read_bytes().decode("utf-8")
        if not cpython_accepts(new.encode("utf-8")):
            return "wrong edit: does not compile"
        old_lines, new_lines = split_lines(text, True), split_lines(new, True)
        first = next(i for i, line in enumerate(old_lines) if line.startswith("class LayerScale"))
        last = next(i for i, line in enumerate(old_lines) if "self.gamma" in line)
        # every line before the class and every line after it (from the first that is not
        # blank: a new method may go before the blank lines that end the class) is kept
        tail = old_lines[last + 1 :]
        while tail and not tail[0].strip():
            tail.pop(0)
        if new_lines[:first] != old_lines[:first] or (
            tail and new_lines[len(new_lines) - len(tail) :] != tail
        ):
            return "wrong edit: a line outside the class changed"
        if new == text:
            return "not fixed"
        if "self.inplace = inplace" not in new:
            return "wrong edit: a kept line was lost"
        try:
            fix_once(Path(tmp))
        except Exception as exc:  # noqa: BLE001
            return f"crash on the second run: {type(exc).__name__}"
        if path.read_bytes().decode("utf-8") != new:
            return "not idempotent"
        namespace: dict = {}
        try:
            exec(compile(new, "m.py", "exec"), namespace)
            m = namespace["LayerScale"](3)
            if m.inplace is not False or tuple(m.gamma.shape) != (3,):
                return "wrong edit: the module changed"
        except Exception as exc:  # noqa: BLE001
            return f"wrong edit: {type(exc).__name__}: {exc}"
    return "ok"


# -- loader ------------------------------------------------------------------------------------


def _state():
    """A ``module.state_dict()`` as training scripts save it: an ``OrderedDict`` carrying
    ``_metadata`` (pickled as state), with tensors of several dtypes."""
    from collections import OrderedDict

    import torch

    g = torch.Generator().manual_seed(0)
    sd = OrderedDict(
        a=torch.zeros(4, dtype=torch.int64),
        b=torch.randn(2, 3, generator=g),
        c=torch.arange(6, dtype=torch.int16),
        d=torch.ones(3, dtype=torch.bfloat16),
    )
    sd._metadata = OrderedDict({"": {"version": 1}})
    return sd


def pristine(kind: str) -> bytes:
    """The file every mutation of ``kind`` starts from (it must load, equal to the reference)."""
    import torch

    from metalint.loader.formats import save_safetensors

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "m")
        if kind == "safetensors":
            save_safetensors(_state(), path)
        else:
            torch.save(_state(), path)
        return path.read_bytes()


@st.composite
def mutated_safetensors(draw) -> bytes:

    data = pristine("safetensors")
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    kind = draw(st.sampled_from(["value", "value", "drop", "bytes", "truncate", "length"]))
    if kind in ("value", "drop"):
        name = draw(st.sampled_from(sorted(header)))
        if kind == "drop":
            del header[name]
        else:
            key = draw(st.sampled_from(["dtype", "shape", "data_offsets"]))
            header[name][key] = draw(
                st.sampled_from(["F32", "I64", "F4", "BOOL", "X", None, -1, 2**64, [], [0]])
                | st.lists(st.integers(-2, 2**65), max_size=3)
            )
        raw = json.dumps(header).encode()
        return struct.pack("<Q", len(raw)) + raw + body
    if kind == "bytes":
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    if kind == "truncate":
        return data[: draw(st.integers(0, len(data) - 1))]
    return struct.pack("<Q", draw(st.integers(0, 2**64 - 1))) + data[8:]


@st.composite
def mutated_torch_zip(draw) -> bytes:
    data = pristine("torch")
    kind = draw(st.sampled_from(["record", "record", "record", "bytes"]))
    if kind == "bytes":
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
        return bytes(out)
    with zipfile.ZipFile(io.BytesIO(data)) as zi:
        infos = zi.infolist()
        contents = {i.filename: zi.read(i) for i in infos}
    target = draw(st.sampled_from([i.filename for i in infos]))
    how = draw(st.sampled_from(["deflate", "cut", "grow", "swap", "drop", "empty"]))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zo:
        for i in infos:
            content, method = contents[i.filename], zipfile.ZIP_STORED
            if i.filename == target:
                if how == "deflate":
                    method = zipfile.ZIP_DEFLATED
                elif how == "cut":
                    content = content[: draw(st.integers(0, max(len(content) - 1, 0)))]
                elif how == "grow":
                    content = content + b"\x01" * draw(st.integers(1, 16))
                elif how == "swap":
                    other = draw(st.sampled_from([j.filename for j in infos]))
                    content = contents[other]
                elif how == "drop":
                    continue
                else:
                    content = b""
            zo.writestr(i.filename, content, compress_type=method)
    return out.getvalue()


def _reference(path: Path, kind: str):
    import torch

    if kind == "safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k).clone() for k in f.keys()}
    obj = torch.load(path, weights_only=True)
    if not isinstance(obj, dict):
        raise ValueError("not a dict")
    return obj


REFUSED_READABLE = "refused (the reference reads it)"
LOADER_FINE = ("refused", REFUSED_READABLE, "loaded (= reference)")


def loader_outcome(data: bytes, kind: str) -> str:
    import torch

    from metalint.loader import CheckpointError, open_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "m.safetensors" if kind == "safetensors" else "m.pt")
        path.write_bytes(data)
        try:
            with open_checkpoint(path) as src:
                got = {k: src.read(k).clone() for k in src.entries}
        except CheckpointError as exc:
            msg = str(exc)
            if "\n" in msg or str(path) not in msg:
                return "error not one line naming the file"
            try:  # refusing what the reference reads is allowed (a compressed record), and
                _reference(path, kind)  # counted apart: a loader refusing every file shows here
            except Exception:  # noqa: BLE001
                return "refused"
            return REFUSED_READABLE
        except Exception as exc:  # noqa: BLE001
            return f"crash: {type(exc).__name__}: {str(exc)[:80]}"
        try:
            want = _reference(path, kind)
        except Exception:  # noqa: BLE001
            return "malformed accepted (the reference reader refuses it)"
        if set(got) != set(want):
            return "garbage load: other tensors than the reference"
        for k, t in got.items():
            w = want[k]
            if t.dtype != w.dtype or t.shape != w.shape:
                return "garbage load: dtype/shape differ from the reference"
            if not torch.equal(t.view(-1).view(torch.uint8), w.reshape(-1).view(torch.uint8)):
                return "garbage load: values differ from the reference"
    return "loaded (= reference)"


# -- cache -------------------------------------------------------------------------------------

#: the files a cache round checks, each in a few versions ``edit`` steps switch between: findings
#: (one across files: ``b.py`` subclasses ``a.py``'s class), a clean file, a file CPython rejects
CACHE_FILES = {
    "a.py": [
        SEEDS[0],
        SEEDS[0].replace("init_values * torch.ones(dim)", "torch.empty(dim)"),
        SEEDS[0] + "x = (\n",
    ],
    "b.py": [
        "from a import LayerScale\n\nclass Big(LayerScale):\n    pass\n",
        "import torch\nfrom a import LayerScale\n\n\nclass Big(LayerScale):\n"
        "    def __init__(self, dim):\n        super().__init__(dim)\n"
        "        self.extra = torch.nn.Parameter(torch.ones(dim))\n",
    ],
    "c.py": [SEEDS[1], SEEDS[1].replace("torch.zeros(dim)", "torch.zeros(dim) + 1"), ""],
    "d.py": [SEEDS[2], "def f(:\n", "import torch\n# caf\xe9\n"],
}

_SPOILS = [
    "truncate",
    "flip",
    "garbage",
    "plain json",
    "signed json",
    "signed: a value of another type",
    "signed: a key dropped",
    "signed: another key",
    "forged: cleared, old digest",
    "forged: cleared, guessed key",
    "stale",
    "deleted",
    "file as folder",
    "folder as file",
]


@st.composite
def cache_step(draw) -> tuple:
    kind = draw(st.sampled_from(["run", "edit", "edit", "spoil", "spoil", "spoil", "concurrent"]))
    if kind == "edit":
        name = draw(st.sampled_from(sorted(CACHE_FILES)))
        return ("edit", name, draw(st.integers(0, len(CACHE_FILES[name]) - 1)))
    if kind == "spoil":
        # one seed picks the fault and makes its choices: a printed round replays as it ran
        # (hypothesis's sampled_from favours the first entries: flip and stale were never drawn)
        seed = draw(st.integers(0, 2**32 - 1))
        return ("spoil", _SPOILS[seed % len(_SPOILS)], seed)
    if kind == "concurrent":
        kill = draw(st.none() | st.floats(0.0, 1.5))
        return ("concurrent", draw(st.integers(2, 3)), kill)
    return ("run",)


def cache_rounds():
    """One round: a folder's files, then steps (edits, cache faults, concurrent and killed runs);
    every run that completes must report what ``--no-cache`` reports."""
    return st.lists(cache_step(), min_size=2, max_size=8)


def _retype(value, rnd):
    """A JSON value of another type than ``value`` (int and float, bool and int: one type)."""
    kinds = {
        "str": "x",
        "int": 7,
        "list": [],
        "dict": {},
        "null": None,
    }
    mine = (
        "null"
        if value is None
        else "int"
        if isinstance(value, (bool, int, float))
        else "str"
        if isinstance(value, str)
        else "list"
        if isinstance(value, list)
        else "dict"
    )
    return kinds[rnd.choice(sorted(k for k in kinds if k != mine))]


def _nodes(value, path=()):
    """Every (path, value) of a JSON tree, ``None`` leaves left out (an optional field)."""
    if value is None:
        return
    yield path, value
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for k, v in items:
        yield from _nodes(v, (*path, k))


def _spoil(folder: Path, how: str, rnd, snapshots: list[bytes]) -> None:
    """Do fault ``how`` to the cache (``rnd`` makes its choices)."""
    cache_dir = folder / ".metalint_cache"
    files = _cache_files(folder)
    if how == "folder as file":
        if cache_dir.is_dir():
            shutil.rmtree(cache_dir)
        cache_dir.write_text("not a folder")
    elif files and how in ("deleted", "file as folder"):
        files[0].unlink()
        if how == "file as folder":
            files[0].mkdir()
    elif files:
        out = _spoiled(files[0].read_bytes(), files[0].stem, how, rnd, snapshots)
        if out is not None:
            files[0].write_bytes(out)


def _signed(obj, key: str) -> bytes:
    """A cache file holding ``obj`` whose first line is right for it (a valid MAC under this
    user's key)."""
    from metalint.cache import seal, secret

    return seal(key, json.dumps(obj).encode(), secret())


def _spoiled(data: bytes, key: str, how: str, rnd, snapshots: list[bytes]) -> bytes | None:
    """The bytes of cache file ``data`` after fault ``how`` (None: the fault does not apply)."""
    body = data.partition(b"\n")[2]
    if how == "truncate":
        return data[: rnd.randrange(len(data))]
    if how == "flip":
        at = rnd.randrange(len(data))
        return data[:at] + bytes([data[at] ^ (1 << rnd.randrange(8))]) + data[at + 1 :]
    if how == "garbage":
        return rnd.randbytes(rnd.randrange(64))
    if how == "plain json":
        return json.dumps(_random_json(rnd)).encode()
    if how == "signed json":
        return _signed(_random_json(rnd), key)
    if how == "signed: another key":
        return _signed(json.loads(body), "0" * len(key))
    if how == "stale":
        return rnd.choice(snapshots) if snapshots else None
    if how.startswith("forged"):
        return _forged(body, key, how, rnd)
    # a signed body whose entries differ from what this version writes
    entries = json.loads(body)
    nodes = [(p, v) for p, v in _nodes(entries) if len(p) >= 2]
    if how == "signed: a key dropped":
        nodes = [(p, v) for p, v in nodes if isinstance(p[-1], str)]
    if not nodes:
        return None
    path, value = rnd.choice(nodes)
    parent = entries
    for k in path[:-1]:
        parent = parent[k]
    if how == "signed: a key dropped":
        del parent[path[-1]]
    else:
        parent[path[-1]] = _retype(value, rnd)
    return _signed(entries, key)


def _forged(body: bytes, key: str, how: str, rnd) -> bytes:
    """What a repository could ship: this cache with every finding removed, under the old
    unkeyed digest or a key the forger guessed (never this user's)."""
    from metalint.cache import seal

    entries = json.loads(body)
    for entry in entries.values() if isinstance(entries, dict) else ():
        if isinstance(entry, dict) and isinstance(entry.get("result"), dict):
            entry["result"]["diagnostics"] = []
    raw = json.dumps(entries).encode()
    if how.endswith("old digest"):
        digest = hashlib.blake2b(raw, digest_size=16).hexdigest().encode()
        return b" ".join((b"metalint-cache", key.encode(), digest)) + b"\n" + raw
    return seal(key, raw, rnd.randbytes(32))


def _random_json(rnd, depth=0):
    kind = rnd.randrange(7 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rnd.choice([True, False])
    if kind == 2:
        return rnd.randrange(-3, 4)
    if kind == 3:
        return rnd.choice(["", "x", "a.py", "hash", "result"])
    if kind == 4:
        return rnd.random()
    if kind == 5:
        return [_random_json(rnd, depth + 1) for _ in range(rnd.randrange(3))]
    return {
        rnd.choice(["hash", "result", "x", "diagnostics"]): _random_json(rnd, depth + 1)
        for _ in range(rnd.randrange(3))
    }


def _cache_files(folder: Path) -> list[Path]:
    """The cache files a run wrote (temporaries left out)."""
    cache_dir = folder / ".metalint_cache"
    if not cache_dir.is_dir():
        return []
    return [
        f
        for f in sorted(cache_dir.glob("*.json"))
        if f.is_file() and not f.name.startswith(".tmp-")
    ]


def _intact(cache: Path) -> bool:
    """The file is whole: its first line holds the MAC of the rest (never half-written)."""
    from metalint.cache import opened, secret

    return opened(cache.stem, cache.read_bytes(), secret()) is not None


def _check_cmd(*extra: str) -> list[str]:
    return [sys.executable, "-m", "metalint", "check", "-j", "2", *extra, "."]


def _run_check(folder: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    return subprocess.run(
        _check_cmd(*extra), cwd=folder, capture_output=True, text=True, timeout=120, env=env
    )


def _judge(r, want) -> str | None:
    """What is wrong with a completed run, or None."""
    if r.returncode not in (0, 1, 2) or "Traceback" in r.stderr:
        return f"crash (exit {r.returncode}): {r.stderr.strip().splitlines()[-1:]}"
    if (r.returncode, r.stdout) != (want.returncode, want.stdout):
        return "results differ from --no-cache"
    lines = r.stderr.strip().splitlines()
    if len(lines) > 1 or any(not line.startswith("metalint: warning: cache not") for line in lines):
        return f"more than one warning: {lines}"
    return None


def _concurrent(folder: Path, n: int, kill: float | None, want) -> str | None:
    """``n`` runs at once, the first SIGKILLed after ``kill`` seconds: what went wrong, or None."""
    import signal

    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    procs = [
        subprocess.Popen(
            _check_cmd(),
            cwd=folder,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(n)
    ]
    if kill is not None:
        time.sleep(kill)
        procs[0].send_signal(signal.SIGKILL)
    problem = None
    for i, p in enumerate(procs):
        stdout, stderr = p.communicate(timeout=120)
        if i == 0 and kill is not None and p.returncode == -signal.SIGKILL:
            continue
        done = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
        problem = problem or _judge(done, want)
    if not all(_intact(f) for f in _cache_files(folder)):
        problem = problem or "torn cache file"
    return problem


def _age_temporaries(folder: Path, want) -> tuple[str | None, int]:
    """Temporaries killed runs left, made older than a live run's: the next run removes them.
    What went wrong (or None), and how many there were."""
    cache_dir = folder / ".metalint_cache"
    tmps = list(cache_dir.glob(".tmp-*.json")) if cache_dir.is_dir() else []
    old = time.time() - 3600
    for f in tmps:
        os.utime(f, (old, old))
    problem = _judge(_run_check(folder), want)
    if not problem and any(f.exists() for f in tmps):
        problem = "stray temporary left"
    return problem, len(tmps)


def cache_round_outcomes(steps: list[tuple]) -> Counter:
    """Run one round; count each step's outcome (failures are any outcome but 'ok: ...')."""
    import random

    out: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, versions in CACHE_FILES.items():
            Path(folder, name).write_text(versions[0])
        snapshots: list[bytes] = []  # cache files of before an edit: stale ones to put back
        _run_check(folder)  # a cache to spoil
        want = _run_check(folder, "--no-cache")
        for step in [*steps, ("age temporaries",), ("run",)]:
            label = step[0]
            if step[0] == "edit":
                snapshots.extend(f.read_bytes() for f in _cache_files(folder))
                Path(folder, step[1]).write_text(CACHE_FILES[step[1]][step[2]])
                want = _run_check(folder, "--no-cache")
                continue
            if step[0] == "concurrent":
                _, n, kill = step
                problem = _concurrent(folder, n, kill, want)
                label = f"concurrent ({n} runs{', one killed' if kill is not None else ''})"
            elif step[0] == "age temporaries":
                problem, left = _age_temporaries(folder, want)
                label = "a killed run's temporaries removed once stale" if left else "run"
            else:
                if step[0] == "spoil":
                    _spoil(folder, step[1], random.Random(step[2]), snapshots)
                    label = f"spoil ({step[1]})"
                problem = _judge(_run_check(folder), want)
            if problem:
                print(f"cache: {problem}: {label}: {steps!r}", file=sys.stderr)
            out[problem or f"ok: {label}"] += 1
    return out


# -- driver ------------------------------------------------------------------------------------


def collect(strategy, n: int, seed: int) -> list:
    """``n`` examples of ``strategy`` drawn by hypothesis (deterministic for ``seed``)."""
    out: list = []

    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def draw(x):
        out.append(x)

    from hypothesis import seed as hseed

    hseed(seed)(draw)()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=1000, help="inputs per part")
    ap.add_argument("--parts", default="check,fix,loader,cache")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=5.0, help="check's --file-time-budget")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    parts = a.parts.split(",")
    print(f"# fuzz: {a.examples} inputs per part, seed {a.seed}\n")
    failed = False
    if "check" in parts:
        t0 = time.monotonic()
        sources = collect(check_sources(), a.examples, a.seed)
        counts = run_check_folder(sources, budget=a.budget)
        failed |= _table("check", counts, {"checked", "ML900 (CPython rejects)"}, t0)
    if "fix" in parts:
        t0 = time.monotonic()
        counts = Counter()
        for text, _ in collect(fix_source(), a.examples, a.seed):
            outcome = fix_outcome(text)
            counts[outcome] += 1
            if outcome != "ok":  # to keep as a regression test
                print(f"fix: {outcome}: {text!r}", file=sys.stderr)
        failed |= _table("fix", counts, {"ok"}, t0)
    if "loader" in parts:
        t0 = time.monotonic()
        counts: Counter = Counter()
        half = a.examples // 2
        for kind, strategy, n in (
            ("safetensors", mutated_safetensors(), half),
            ("torch", mutated_torch_zip(), a.examples - half),
        ):
            for data in collect(strategy, n, a.seed):
                outcome = loader_outcome(data, kind)
                counts[f"{'torch zip' if kind == 'torch' else kind}: {outcome}"] += 1
                if outcome not in LOADER_FINE:
                    print(f"loader {kind}: {outcome}: {data!r}", file=sys.stderr)
        ok = {f"{k}: {v}" for k in ("safetensors", "torch zip") for v in LOADER_FINE}
        failed |= _table("loader", counts, ok, t0)
    if "cache" in parts:
        t0 = time.monotonic()
        counts = Counter()
        for steps in collect(cache_rounds(), max(1, a.examples // 5), a.seed):
            counts.update(cache_round_outcomes(steps))
        failed |= _table("cache", counts, {k for k in counts if k.startswith("ok: ")}, t0)
    return 1 if failed else 0


def _table(part: str, counts: Counter, fine: set[str], t0: float) -> bool:
    info = {k: counts.pop(k) for k in ("inputs", "seconds") if k in counts}
    total = sum(counts.values())
    bad = sum(n for k, n in counts.items() if k not in fine)
    print(f"## {part}: {total} inputs, {bad} failures, {time.monotonic() - t0:.0f} s")
    if info:
        print(f"(one check run over all of them: {info.get('seconds', '?')} s)")
    print("\n| outcome | inputs |\n|---|---:|")
    for k, n in counts.most_common():
        print(f"| {k}{'' if k in fine else ' **(failure)**'} | {n} |")
    print()
    return bad > 0


if __name__ == "__main__":
    sys.exit(main())
