"""How much of what ``check`` reports ``fix`` repairs, on real libraries.

    python bench/fix_coverage.py --lib timm=/path/to/site-packages/timm:/venv/bin/python \\
        [--lib NAME=PACKAGE_DIR[:PYTHON]]... [--probe-timeout 120] [--markdown]

For each library (a package folder, copied to a temporary folder: nothing is changed in
place) and each rule with a codemod (ML001, ML002, ML003, ML007, ML008, ML009, ML010; the
**all** row sums the targets' codes, ML001, ML002, ML003, ML007 and ML010):

- findings: what ``check --select <codes>`` reports;
- offered: findings whose diagnostic carries a fix (``--unsafe-fixes`` would apply it);
- safe: findings whose fix is safe (plain ``fix --write`` applies it);
- applied (unsafe run / safe run): fixes ``fix --write [--unsafe-fixes] --show-fixes`` applied;
  fixes compose over rounds, so a fix offered after another one ran counts here too;
- resolved (unsafe run / safe run): findings ``check`` no longer reports after the run (one
  fix can resolve several: an ML003 fix moves all of a class's in-place inits).

Per library, after ``fix --write --unsafe-fixes``: files changed; files that imported before and
no longer import (``PYTHON`` imports every changed module from the copy, before and after);
rewritten classes passing the probe (``metalint.fix.verify``, run with ``PYTHON``: a class the
probe cannot construct is "not constructed", not counted as passing; classes it cannot build
from guessed arguments are built with the arguments of ``ARGUMENTS``, written by hand as the
rule audit's roots are; a failed class whose lost tensors are all ones no finding of ``check``
names is counted apart too: the rewrite did not touch them); files a second
``fix --write --unsafe-fixes`` changes. Without ``:PYTHON`` the import and probe columns are
left empty.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # metalint.fix.verify: the verdicts and their rule
#: the codes the **all** row sums (targets: offered >= 90%, safe >= 70%)
TARGETS = ("ML001", "ML002", "ML003", "ML007", "ML010")
#: every rule with a codemod: ML008 (a constant read during construction), ML009 (legacy
#: constructors) and ML013 (an ``_apply`` override without ``recurse``, which makes
#: ``to_empty()`` raise) are fixed and counted too, in their own rows, outside the targets'
#: total
CODES = ("ML001", "ML002", "ML003", "ML007", "ML008", "ML009", "ML010", "ML013")
FIX_LINE = re.compile(r"^fix (?P<file>[^:]+):(?P<row>\d+): (?P<code>ML\d+) \[(?P<sym>[^\]]*)\]")


def metalint(args, cwd, timeout=3600):
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    return subprocess.run(
        [sys.executable, "-m", "metalint", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def digests(tree: Path) -> dict[str, str]:
    return {
        str(p.relative_to(tree.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(tree.rglob("*.py"))
    }


def applied(output: str) -> list[tuple[str, str, str]]:
    """(file, code, top-level class) of each fix ``--show-fixes`` listed."""
    out = []
    for line in output.splitlines():
        m = FIX_LINE.match(line)
        if m:
            out.append((m["file"], m["code"], m["sym"].split(".")[0]))
    return out


def module_of(rel: str) -> str:
    parts = rel[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


#: one process imports every module; the modules a failed import loaded are dropped again, so
#: a later import of one of them runs it anew, as the probe's fresh process does (schnetpack:
#: its package ``__init__`` fails under torch 2.13, after importing ``schnetpack.nn.cutoff``,
#: which then counted as importable and its probe as a failure of the fix)
IMPORT_SCRIPT = """
import importlib, json, sys
bad = {}
for m in json.loads(sys.argv[1]):
    before = set(sys.modules)
    try:
        importlib.import_module(m)
    except BaseException as e:  # noqa: BLE001 - any failure counts
        bad[m] = f"{type(e).__name__}: {e}"[:200]
        for k in set(sys.modules) - before:
            sys.modules.pop(k, None)
print(json.dumps(bad))
"""


def import_failures(python: str, root: Path, modules: list[str]) -> dict[str, str]:
    if not modules:
        return {}
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{ROOT}")
    r = subprocess.run(
        [python, "-c", IMPORT_SCRIPT, json.dumps(modules)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {m: f"import run failed: {r.stderr[-200:]}" for m in modules}


PROBE_SCRIPT = """
import json, sys
from metalint.fix.verify import verify_classes
path, classes, timeout = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
verdicts = verify_classes(path, classes, timeout=timeout)
print(json.dumps([[v.cls, v.status, v.detail, v.lost, v.eager_raised] for v in verdicts]))
"""


#: keyword arguments for rewritten classes the probe cannot build from guessed arguments
#: (``spatial_dims`` guessed 4, a required sub-module), written by hand as the rule audit's
#: roots are (``bench/audit_models.py``): library -> class -> the call's arguments, evaluated
#: in the namespace of the class's module. Only the arguments change; the probe is the same.
#: Not here: monai ``Transchex``/``MultiModal`` (they download BERT weights: no network).
#: e2cnn's field types, spelled for :func:`write_factories` (evaluated in the class's module)
_E2_G = '__import__("e2cnn.gspaces").gspaces.Rot2dOnR2(4)'
_E2_TYPE = f'(lambda reprs: __import__("e2cnn.nn").nn.FieldType({_E2_G}, reprs))'
_E2_REG = f"(lambda n: {_E2_TYPE}([{_E2_G}.regular_repr] * n))"

#: d3rlpy's encoder, position encoding and activation, spelled for :func:`write_factories`
_D3 = '__import__("d3rlpy.models.torch", fromlist=["x"])'
_D3_ENC = f"{_D3}.VectorEncoder(observation_shape=[4], hidden_units=[8])"
_D3_POS = f"{_D3}.SimplePositionEncoding(8, 16)"
_D3_ACT = '__import__("torch").nn.ReLU()'

ARGUMENTS: dict[str, dict[str, str]] = {
    "e3nn": {
        "BatchNorm": 'irreps="4x0e + 2x1o"',
        "_Layer": "h_in=4, h_out=3, act=None, var_in=1, var_out=1",
        "NormActivation": 'irreps_in="2x0e + 1x1o", scalar_nonlinearity=torch.tanh',
        "Linear": 'irreps_in="2x0e + 1x1o", irreps_out="3x0e + 1x1o"',
        "TensorProduct": 'irreps_in1="1x0e + 1x1o", irreps_in2="1x0e", irreps_out="1x0e + 1x1o", '
        'instructions=[(0, 0, 0, "uvw", True), (1, 0, 1, "uvw", True)]',
        "SO3Grid": "lmax=2, resolution=4",
        "ToS2Grid": "lmax=2, res=(6, 7)",
        "FromS2Grid": "res=(6, 7), lmax=2",
        "LowPassFilter": "scale=2.0",
    },
    "e2cnn": {
        # field types of the rotation group C4 on the plane, built in the class's module
        "R2Conv": f"in_type={_E2_REG}(2), out_type={_E2_REG}(3), kernel_size=3",
        "R2ConvTransposed": f"in_type={_E2_REG}(2), out_type={_E2_REG}(3), kernel_size=3",
        "R2Diffop": f"in_type={_E2_REG}(2), out_type={_E2_REG}(3), kernel_size=3",
        "GatedNonLinearity1": f"in_type={_E2_TYPE}([{_E2_G}.trivial_repr] * 2 + [{_E2_G}"
        ".regular_repr] * 2)",
        "GatedNonLinearity2": f"in_type=({_E2_TYPE}([{_E2_G}.trivial_repr] * 2), {_E2_REG}(2))",
        "NormNonLinearity": f"in_type={_E2_TYPE}([{_E2_G}.irrep(1)] * 2)",
        "PointwiseAvgPoolAntialiased": f"in_type={_E2_REG}(2), sigma=0.6, stride=2",
        "PointwiseMaxPoolAntialiased": f"in_type={_E2_REG}(2), kernel_size=3, stride=2",
        "ReshuffleModule": f"in_type={_E2_REG}(2), permutation=[1, 0]",
    },
    "d3rlpy": {
        # a vector encoder of 4 observations into 8 features, as d3rlpy's factories build it
        "NormalPolicy": f"encoder={_D3_ENC}, hidden_size=8, action_size=2, min_logstd=-20.0, "
        "max_logstd=2.0, use_std_parameter=True",
        "ContinuousDecisionTransformer": f"encoder={_D3_ENC}, embed_size=8, position_encoding="
        f"{_D3_POS}, action_size=2, num_heads=2, context_size=4, num_layers=1, attn_dropout=0.0, "
        f"resid_dropout=0.0, embed_dropout=0.0, activation={_D3_ACT}",
        "DiscreteDecisionTransformer": f"encoder={_D3_ENC}, embed_size=8, position_encoding="
        f"{_D3_POS}, action_size=2, num_heads=2, context_size=4, num_layers=1, attn_dropout=0.0, "
        f"resid_dropout=0.0, embed_dropout=0.0, activation={_D3_ACT}, embed_activation={_D3_ACT}",
    },
    "snntorch": {
        "Alpha": "alpha=0.9, beta=0.8",
        "Lapicque": "beta=0.9",
        "Leaky": "beta=0.9",
        "RLeaky": "beta=0.9, linear_features=4",
        "RSynaptic": "alpha=0.9, beta=0.8, linear_features=4",
        "StateLeaky": "beta=0.9, channels=4",
        "Synaptic": "alpha=0.9, beta=0.8",
    },
    "monai": {
        "AffineHead": "spatial_dims=2, image_size=[16, 16], decode_size=[4, 4], in_channels=4",
        "DiNTS": "dints_space=TopologyInstance(channel_mul=0.25, num_blocks=2, num_depths=2, "
        "spatial_dims=2), in_channels=1, num_classes=2, spatial_dims=2",
        "RetinaNetClassificationHead": "in_channels=16, num_anchors=2, num_classes=2, spatial_dims=2",
        "RetinaNetRegressionHead": "in_channels=16, num_anchors=2, spatial_dims=2",
        "VarNetBlock": "refinement_model=nn.Conv2d(2, 2, 1), spatial_dims=2",
        "CABlock": "spatial_dims=2, dim=16, num_heads=2, bias=False",
        "PatchEmbeddingBlock": "in_channels=1, img_size=(16, 16), patch_size=(4, 4), "
        "hidden_size=16, num_heads=2, spatial_dims=2",
        "TrainableBilateralFilter": "spatial_sigma=(1.0, 1.0, 1.0), color_sigma=0.5",
        "TrainableJointBilateralFilter": "spatial_sigma=(1.0, 1.0, 1.0), color_sigma=0.5",
        "MedianFilter": "radius=1, spatial_dims=2",
        "EMAQuantizer": "spatial_dims=2, num_embeddings=8, embedding_dim=4",
        "VectorQuantizer": "quantizer=EMAQuantizer(spatial_dims=2, num_embeddings=8, embedding_dim=4)",
        "DynUNet": "spatial_dims=2, in_channels=1, out_channels=2, kernel_size=[3, 3, 3], "
        "strides=[1, 2, 2], upsample_kernel_size=[2, 2]",
        "EfficientNet": "blocks_args_str=['r1_k3_s11_e1_i32_o16_se0.25', "
        "'r1_k3_s22_e6_i16_o24_se0.25'], spatial_dims=2, in_channels=1, num_classes=2",
        "NaViT": "image_size=16, patch_size=4, num_classes=2, hidden_size=16, mlp_dim=32, "
        "num_layers=1, num_heads=2, spatial_dims=2",
        "PatchDiscriminator": "spatial_dims=2, channels=4, in_channels=1, num_layers_d=2",
        "SwinTransformer": "in_chans=1, embed_dim=12, window_size=(4, 4), patch_size=(2, 2), "
        "depths=(1, 1, 1, 1), num_heads=(1, 1, 1, 1), spatial_dims=2",
        "ViT": "in_channels=1, img_size=(16, 16), patch_size=(4, 4), hidden_size=16, "
        "mlp_dim=32, num_layers=1, num_heads=2, spatial_dims=2, classification=True",
    },
    # Not here: ``GNN`` (graphgym: its ``cfg`` is None without the optional ``yacs``),
    # ``GITMol``/``GITFormer`` (download SciBERT and a sentence encoder: no network).
    "torch_geometric": {
        # a two-type graph, author -> paper -> author; the caller's edges are real CPU data
        # (the factory runs under ``torch.device("meta")``: a user's graph is built before)
        "MetaPath2Vec": "edge_index_dict={"
        "('author', 'writes', 'paper'): torch.tensor([[0, 1, 1], [0, 0, 1]], device='cpu'), "
        "('paper', 'written_by', 'author'): torch.tensor([[0, 0, 1], [0, 1, 1]], device='cpu')}, "
        "embedding_dim=8, metapath=[('author', 'writes', 'paper'), "
        "('paper', 'written_by', 'author')], walk_length=2, context_size=2",
    },
    # peft's adapters are built by its tuners from a config and the wrapped layer
    "peft": {
        "OFTRotationModule": "r=2, n_elements=6, block_size=4, in_features=8",
        "MultitaskPromptEmbedding": "config=MultitaskPromptTuningConfig(task_type='CAUSAL_LM', "
        "num_virtual_tokens=3, num_tasks=2, num_ranks=1, token_dim=16, "
        "num_transformer_submodules=1), word_embeddings=torch.nn.Embedding(64, 16)",
        "_BaseAdaptedAttention": "model_type='llama', adapter_len=3, "
        "model=__import__('transformers').models.llama.modeling_llama.LlamaAttention("
        "__import__('transformers').LlamaConfig(hidden_size=16, num_attention_heads=2, "
        "num_key_value_heads=2, intermediate_size=32, vocab_size=64), layer_idx=0)",
    },
    # fair-esm builds from an argparse namespace and an alphabet. Not here: ``RobertaLMHead``
    # (its ``weight`` is the caller's tied embedding: built alone, the probe counts it as its
    # own) and ``SinusoidalPositionalEmbedding`` (its ``_float_tensor`` is an uninitialised
    # ``torch.FloatTensor(1)`` device anchor in eager construction too).
    "esm": {
        "ProteinBertModel": "args=__import__('argparse').Namespace(arch='protein_bert_base', "
        "layers=1, embed_dim=16, ffn_embed_dim=32, attention_heads=2, final_bias=True), "
        "alphabet=__import__('esm').data.Alphabet.from_architecture('ESM-1')",
        "MSATransformer": "args=__import__('argparse').Namespace(layers=1, embed_dim=16, "
        "ffn_embed_dim=32, attention_heads=2, dropout=0.0, attention_dropout=0.0, "
        "activation_dropout=0.0, max_tokens=2 ** 14, max_positions=32, "
        "embed_positions_msa=True), "
        "alphabet=__import__('esm').data.Alphabet.from_architecture('MSA Transformer')",
    },
}

#: the module the probe builds those classes from (written into the copy, after the runs)
FACTORIES = "_fixcov_factories"


def write_factories(root: Path, table: dict[str, str], where: dict[str, str]) -> None:
    """One function per class, named as the class (the probe's verdict is matched by name):
    imports the class's module and calls the class with its arguments."""
    lines = ["import importlib", ""]
    for cls, args in sorted(table.items()):
        if cls not in where:
            continue
        lines += [
            "",
            f"def {cls}():",
            f"    m = importlib.import_module({where[cls]!r})",
            f"    return m.{cls}(**eval({('dict(' + args + ')')!r}, vars(m)))",
            "",
        ]
    (root / f"{FACTORIES}.py").write_text("\n".join(lines))


def probe(python: str, root: Path, rel: str, classes: list[str], timeout: float) -> list:
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{ROOT}")
    try:
        r = subprocess.run(
            [python, "-c", PROBE_SCRIPT, rel, json.dumps(classes), str(timeout)],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout * (len(classes) + 2),
        )
        return json.loads(r.stdout.strip().splitlines()[-1])
    except Exception as exc:  # a hung or crashed probe run: every class failed
        return [[c, "failed", f"probe run failed: {exc}"[:200], [], False] for c in classes]


def probe_file(python: str, roots, rel: str, given: dict[str, bool], timeout: float) -> list:
    """Verdicts for the rewritten classes of one file: built from guessed arguments, or
    (``given[cls]``) through the factory of :data:`ARGUMENTS`. ``roots``: the fixed copy and
    the original; a class whose eager construction raised after the rewrite is built from the
    original too, and fails when that one constructed (``fix --verify``'s rule: the rewrite
    broke a working constructor, which "not constructed" would hide)."""
    from metalint.fix.verify import Verdict, broke_construction

    fixed, original = roots

    def verdicts(root: Path, mod: str, classes: list[str]) -> list:
        return [Verdict(*v) for v in probe(python, root, mod, classes, timeout)]

    out = []
    guessed = sorted(c for c, g in given.items() if not g)
    if guessed:
        mod = module_of(rel)
        out += broke_construction(
            verdicts(fixed, mod, guessed), lambda classes: verdicts(original, mod, classes)
        )
    given_args = sorted(c for c, g in given.items() if g)
    if given_args:
        out += verdicts(fixed, FACTORIES, given_args)
    return out


def measure(name: str, src: Path, python: str | None, probe_timeout: float) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"fixcov-{name}-"))
    try:
        return _measure(name, src, python, probe_timeout, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def left(root: Path, pkg: str, select: list[str]) -> Counter:
    """Findings per code that ``check`` still reports on the fixed copy."""
    r = metalint(["check", "--no-cache", *select, "--output-format", "json", pkg], root)
    return Counter(d["code"] for d in json.loads(r.stdout) if d["code"] in CODES)


def probe_rewritten(name, python, a, orig, fixes, named, bad, probe_timeout):
    """Probe every rewritten class of the fixed copy ``a`` (``orig``: the original copy):
    (verdict counts, failures, not constructed). ``bad``: modules that did not import (before,
    after)."""
    bad_before, bad_after = bad
    by_file: dict[str, set[str]] = {}
    for f, _code, cls in fixes:
        by_file.setdefault(f, set()).add(cls)
    verdicts = Counter()
    failures = []
    skipped = []
    table = ARGUMENTS.get(name, {})
    where = {c: module_of(f) for f, cs in by_file.items() for c in cs if c in table}
    write_factories(a, table, where)
    for f, classes in sorted(by_file.items()):
        if module_of(f) in bad_after:
            # the original did not import either (an optional dependency): nothing to probe
            status = "skipped" if module_of(f) in bad_before else "failed"
            verdicts[status] += len(classes)
            (skipped if status == "skipped" else failures).append(
                f"{f}: does not import: {bad_after[module_of(f)]}"[:300]
            )
            continue
        given = {c: c in table for c in classes}
        for v in probe_file(python, (a, orig), f, given, probe_timeout):
            cls, status, detail, lost = v.cls, v.status, v.detail, v.lost
            verdicts[status] += 1
            if status == "failed":
                failures.append(f"{f}:{cls}: {detail}"[:300])
                if lost and not set(lost) & named.get((f, cls), set()):
                    # every tensor lost is one no finding names (check's false negative):
                    # the rewrite did not touch them
                    verdicts["failed_unreported"] += 1
            elif status == "skipped":
                skipped.append(f"{f}:{cls}: {detail}"[:300])
    return verdicts, failures, skipped


def _measure(name, src, python, probe_timeout, work) -> dict:
    pkg = src.name
    select = ["--select", ",".join(CODES)]
    a, b = work / "unsafe", work / "safe"
    for d in (a, b):
        d.mkdir()
        shutil.copytree(src, d / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    t0 = time.monotonic()
    r = metalint(["check", "--no-cache", *select, "--output-format", "json", pkg], a)
    found = [d for d in json.loads(r.stdout) if d["code"] in CODES]
    #: (file, top-level class) -> the tensors findings name there
    named: dict[tuple[str, str], set[str]] = {}
    for d in found:
        key = (d["filename"], (d.get("symbol") or "").split(".")[0])
        named.setdefault(key, set()).update(d.get("subject") or ())
    per = {c: Counter() for c in CODES}
    for d in found:
        per[d["code"]]["findings"] += 1
        if d.get("fix"):
            per[d["code"]]["offered"] += 1
            if d["fix"]["applicability"] == "safe":
                per[d["code"]]["safe"] += 1
    before = digests(a / pkg)
    r = metalint(
        [
            "fix",
            "--no-cache",
            *select,
            "--unsafe-fixes",
            "--write",
            "--show-fixes",
            pkg,
        ],
        a,
    )
    fixes = applied(r.stdout)
    for _f, code, _c in fixes:
        per[code]["applied_unsafe"] += 1
    for code, n in left(a, pkg, select).items():
        per[code]["left_unsafe"] = n
    after = digests(a / pkg)
    changed = sorted(k for k in after if after[k] != before.get(k))
    r2 = metalint(["fix", "--no-cache", *select, "--unsafe-fixes", "--write", pkg], a)
    second = sorted(k for k, v in digests(a / pkg).items() if v != after[k])
    r3 = metalint(["fix", "--no-cache", *select, "--write", "--show-fixes", pkg], b)
    for _f, code, _c in applied(r3.stdout):
        per[code]["applied_safe"] += 1
    for code, n in left(b, pkg, select).items():
        per[code]["left_safe"] = n
    fix_s = time.monotonic() - t0
    out = {
        "library": name,
        "per_code": {c: dict(v) for c, v in per.items()},
        "files_changed": len(changed),
        "second_run_changed": second,
        "fix_wall_s": round(fix_s, 1),
        "exit": [r.returncode, r2.returncode, r3.returncode],
    }
    if python is None:
        return out
    modules = [module_of(f) for f in changed]
    orig = work / "orig"
    orig.mkdir()
    shutil.copytree(src, orig / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    bad_before = import_failures(python, orig, modules)
    bad_after = import_failures(python, a, modules)
    out["stop_importing"] = {m: e for m, e in bad_after.items() if m not in bad_before}
    verdicts, failures, skipped = probe_rewritten(
        name, python, a, orig, fixes, named, (bad_before, bad_after), probe_timeout
    )
    out["import_failed_before"] = bad_before
    out["probe"] = dict(verdicts)
    out["probe_failures"] = failures
    out["probe_not_constructed"] = skipped
    return out


def pct(n: int, d: int) -> str:
    return f"{100 * n / d:.0f}%" if d else "-"


def resolved(c, key: str) -> str:
    """Findings no longer reported after the run (and their share): one fix can resolve
    several (an ML003 fix moves all of a class's in-place inits; ML001's delegate moves
    ML003's statements), so this is what "applied" undercounts."""
    n = c.get("findings", 0) - c.get(key, 0)
    return f"{n} ({pct(n, c.get('findings', 0))})"


def markdown(results: list[dict]) -> str:
    lines = [
        "| library | rule | findings | offered (unsafe-fixes) | safe offered | "
        "applied: --unsafe-fixes run | applied: safe run | resolved: --unsafe-fixes | "
        "resolved: safe |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        tot = Counter()
        for code, c in res["per_code"].items():
            if code in TARGETS:
                tot.update(c)
            if not c.get("findings"):
                continue
            f = c["findings"]
            lines.append(
                f"| {res['library']} | {code} | {f} | {c.get('offered', 0)} ({pct(c.get('offered', 0), f)}) | "
                f"{c.get('safe', 0)} ({pct(c.get('safe', 0), f)}) | {c.get('applied_unsafe', 0)} | "
                f"{c.get('applied_safe', 0)} | {resolved(c, 'left_unsafe')} | "
                f"{resolved(c, 'left_safe')} |"
            )
        f = tot["findings"]
        lines.append(
            f"| {res['library']} | **all** | {f} | {tot['offered']} ({pct(tot['offered'], f)}) | "
            f"{tot['safe']} ({pct(tot['safe'], f)}) | {tot['applied_unsafe']} | {tot['applied_safe']} | "
            f"{resolved(tot, 'left_unsafe')} | {resolved(tot, 'left_safe')} |"
        )
    lines += [
        "",
        "| library | files changed | stop importing | rewritten classes: probe passed / failed / not constructed | pass rate (of probed) | of the failed: only tensors no finding names | files a 2nd run changes |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for res in results:
        p = res.get("probe")
        probed = f"{p.get('passed', 0)} / {p.get('failed', 0)} / {p.get('skipped', 0)}" if p else ""
        rate = pct(p.get("passed", 0), p.get("passed", 0) + p.get("failed", 0)) if p else ""
        stop = len(res["stop_importing"]) if "stop_importing" in res else ""
        lines.append(
            f"| {res['library']} | {res['files_changed']} | {stop} | {probed} | {rate} | "
            f"{p.get('failed_unreported', 0) if p else ''} | {len(res['second_run_changed'])} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", action="append", required=True, help="NAME=PACKAGE_DIR[:PYTHON]")
    ap.add_argument("--probe-timeout", type=float, default=120.0)
    ap.add_argument("--json", type=Path, help="write the raw results here")
    args = ap.parse_args(argv)
    results = []
    for spec in args.lib:
        name, _, rest = spec.partition("=")
        src, _, python = rest.partition(":")
        res = measure(name, Path(src).resolve(), python or None, args.probe_timeout)
        print(json.dumps(res), file=sys.stderr, flush=True)
        results.append(res)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
