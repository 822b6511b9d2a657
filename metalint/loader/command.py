"""``metalint load CHECKPOINT --model TARGET``: stream a checkpoint into a meta-built model.

Exit status: 0 loaded (and, with ``--verify``, identical to an eager load); 1 ``--verify``
found differences; 2 the checkpoint or the model could not be loaded (one line on stderr:
``metalint load: error: <message>``).
"""

from __future__ import annotations

import json
import sys

import click

from metalint.extras import torch_missing
from metalint.loader.errors import CheckpointError
from metalint.probe.target import parse_target, resolve_items
from metalint.vocabulary import LOAD_INIT_MODES, SHARD_LAYOUTS

DTYPE_CHOICES = ("bf16", "fp16", "fp32", "fp64")


def _fail(message: str) -> None:
    click.echo(f"metalint load: error: {message}", err=True)
    sys.exit(2)


def _load(checkpoint, target, guess_args, verify, **options):
    """Load ``checkpoint`` into the model ``target`` builds on meta (``options``: those of
    :func:`~metalint.loader.core.load_checkpoint`), then, with ``verify``, compare it with
    an eager load; the report."""
    from metalint.loader.core import load_checkpoint

    try:
        factory = model_factory(target, guess_args=guess_args)
    except ImportError as exc:
        _fail(f"model target {target!r}: cannot import: {exc}")
    report = load_checkpoint(factory, checkpoint, **options)
    if verify:
        from metalint.loader.verify import verify_against_eager

        verify_against_eager(
            factory,
            checkpoint,
            report.model,
            dtype=options["dtype"],
            keep_in_fp32=options["keep_in_fp32"],
            report=report,
        )
    return report


@click.command("load")
@click.argument("checkpoint", type=click.Path())
@click.option(
    "--model",
    "target",
    required=True,
    metavar="TARGET",
    help="Model factory, 'package.module:factory' or 'path/to/file.py:factory', called with "
    "no arguments under torch.device('meta'); or a class that needs none (see --guess-args). "
    "Resolved as `metalint probe` resolves a TARGET.",
)
@click.option(
    "--guess-args",
    is_flag=True,
    help="Build a --model class that needs constructor arguments with small guessed sizes "
    "(as `metalint probe` does; its checkpoint then rarely fits: prefer a factory).",
)
@click.option(
    "--dtype",
    type=click.Choice(DTYPE_CHOICES),
    default=None,
    help="Cast floating tensors to this dtype (default: keep the module's dtypes).",
)
@click.option("--device", default="cpu", show_default=True, help="Target device.")
@click.option(
    "--keep-in-fp32",
    multiple=True,
    metavar="SEGMENTS",
    help="Keep floating tensors under this module path segment (e.g. 'norm') in fp32. Repeatable.",
)
@click.option(
    "--allow-missing",
    multiple=True,
    metavar="GLOB",
    help="Checkpoint may lack tensors whose name matches this glob; they are "
    "materialised by the init entry point. Repeatable.",
)
@click.option(
    "--strict/--no-strict",
    default=True,
    show_default=True,
    help="Fail on missing, unexpected or shape-mismatched keys.",
)
@click.option(
    "--init",
    "init",
    type=click.Choice(LOAD_INIT_MODES),
    default="auto",
    show_default=True,
    help="Init entry point for tensors the checkpoint lacks.",
)
@click.option(
    "--verify",
    is_flag=True,
    help="Also load the checkpoint eagerly (load_state_dict) and compare every tensor.",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar (default: on a TTY for checkpoints over 256 MiB).",
)
@click.option(
    "--nproc",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Launch this many ranks (torchrun-style; gloo on CPU, NCCL on CUDA).",
)
@click.option(
    "--shard",
    type=click.Choice(SHARD_LAYOUTS),
    default=None,
    help="Shard the meta-built model before loading: FSDP2 fully_shard, tensor parallel, or "
    "both on a (N/2, 2) mesh; each rank then reads only its shards.",
)
@click.option(
    "--timeout",
    type=float,
    default=600.0,
    show_default=True,
    help="Seconds for all ranks (with --nproc/--shard).",
)
@click.option(
    "--output-format", type=click.Choice(("text", "json")), default="text", show_default=True
)
def load_command(
    checkpoint,
    target,
    guess_args,
    dtype,
    device,
    keep_in_fp32,
    allow_missing,
    strict,
    init,
    verify,
    progress,
    nproc,
    shard,
    timeout,
    output_format,
):
    """Load CHECKPOINT into the model TARGET built on meta, one tensor at a time.

    CHECKPOINT: a .safetensors file, a sharded safetensors folder or its
    model.safetensors.index.json, a torch .bin/.pt zip file, or a torch.distributed.checkpoint
    folder.
    """
    needs = torch_missing("metalint load", ("torch", "safetensors"))
    if needs:
        click.echo(needs, err=True)
        sys.exit(2)
    if nproc > 1 or shard is not None:
        if verify:
            _fail("--verify compares against a single-process eager load; not with --nproc/--shard")
        opts = dict(
            checkpoint=checkpoint,
            target=target,
            guess_args=guess_args,
            dtype=dtype,
            device=device,
            keep_in_fp32=list(keep_in_fp32),
            allow_missing=list(allow_missing),
            strict=strict,
            init=init,
            shard=shard or "fsdp",
            **_shard_plan(target),
        )
        _load_sharded(opts, nproc, timeout, output_format)
        return
    try:
        report = _load(
            checkpoint,
            target,
            guess_args,
            verify,
            dtype=dtype,
            device=device,
            keep_in_fp32=keep_in_fp32,
            strict=strict,
            init=init,
            allow_missing=allow_missing,
            progress=progress,
        )
    except CheckpointError as exc:
        _fail(str(exc))
    except (ValueError, TypeError) as exc:
        _fail(str(exc).replace("\n", " "))
    except RuntimeError as exc:  # e.g. a device that is not there
        _fail(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    if not report.loaded:
        _fail(_nothing_loaded(checkpoint, report.unexpected, report.missing))
    if output_format == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(str(report))
    if report.verify is not None and not report.verify.ok:
        sys.exit(1)


def _shard_plan(target: str) -> dict:
    """``fsdp_modules`` and ``tp`` of ``shard_model`` from ``[tool.metalint.probe]`` of the
    pyproject.toml nearest the model's file (a bad one: one line, exit 2)."""
    from metalint.config import ConfigError
    from metalint.loader.distributed import shard_settings

    found = parse_target(target)
    try:
        return shard_settings(found[0].path if found else None)
    except ConfigError as exc:
        _fail(str(exc))
        raise


def _load_sharded(opts: dict, nproc: int, timeout: float, output_format: str) -> None:
    """Run one rank per process (``python -m metalint.loader.distributed``); print rank 0's
    report (with every rank's bytes read), or the first rank's one-line error (exit 2)."""
    import tempfile
    from pathlib import Path

    from metalint.loader.distributed import launch

    with tempfile.TemporaryDirectory(prefix="metalint-load-") as out:
        done = launch("metalint.loader.rank", [json.dumps(opts), out], nproc, timeout)
        results = []
        for rank, proc in enumerate(done):
            f = Path(out) / f"rank{rank}.json"
            if f.is_file():
                results.append(json.loads(f.read_text()))
                continue
            last = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            why = last[-1].strip() if last else f"exit status {proc.returncode}"
            results.append({"ok": False, "error": f"rank {rank} died: {why}"})
    for r in results:
        if not r["ok"]:
            _fail(r["error"])
    rep = results[0]["report"]
    if not rep.get("loaded"):
        _fail(
            _nothing_loaded(opts["checkpoint"], rep.get("unexpected", []), rep.get("missing", []))
        )
    if output_format == "json":
        click.echo(json.dumps(results[0]["report"], indent=2))
    else:
        click.echo(results[0]["text"])


def model_factory(target: str, *, guess_args: bool = False):
    """The zero-argument callable that builds TARGET, resolved as ``metalint probe`` resolves
    a target (:func:`metalint.probe.target.resolve_items`): ``pkg.mod:factory``,
    ``path/to/file.py:factory`` or ``...:Class``. A class that needs constructor arguments
    is built with guessed small ones only with ``guess_args``; otherwise a ValueError says
    how to give them."""
    targets = parse_target(target)
    if len(targets) != 1 or targets[0].attr is None:
        raise ValueError(
            f"model target {target!r} must look like 'module:factory' or 'path/to/file.py:factory'"
        )
    try:
        (item,) = resolve_items(targets[0])
    except AttributeError as exc:
        raise ValueError(f"model target {target!r}: {exc}") from None
    if item.make is None:
        raise ValueError(f"model target {target!r}: {item.skip}")
    if item.args and item.args != "factory" and not guess_args:
        names = ", ".join(a.split("=", 1)[0] for a in item.args.split(", "))
        raise ValueError(
            f"model target {target!r}: {item.qualname} needs constructor arguments ({names}); "
            "give a factory 'module:callable' that builds it with the checkpoint's sizes, or "
            f"--guess-args to build it with guessed small ones ({item.args})"
        )
    return item.make


def _nothing_loaded(checkpoint: str, unexpected: list[str], missing: list[str]) -> str:
    """Why a load that read no tensor is a failure (``--no-strict`` too)."""
    why = "loaded 0 tensors: no tensor name of the checkpoint is a name of the model"
    if unexpected and missing:
        why += f" (checkpoint: {unexpected[0]!r}, model: {missing[0]!r})"
    elif not unexpected:
        why += " (the checkpoint holds no tensor)"
    return f"{checkpoint}: {why}"
