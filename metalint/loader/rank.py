"""One rank of ``metalint load --nproc N --shard ...``, started by
:func:`metalint.loader.distributed.launch` as ``python -m metalint.loader.rank``.

It sits above the loader (it builds the model from the command's target, shards it and calls
:func:`~metalint.loader.core.load_checkpoint`), so nothing in the loader imports it.
"""

from __future__ import annotations

import os
import sys

import torch

from metalint.loader.command import model_factory
from metalint.loader.core import load_checkpoint
from metalint.loader.distributed import init_from_env, shard_model
from metalint.loader.errors import CheckpointError


def _load_rank(opts: dict) -> dict:
    factory = model_factory(opts["target"], guess_args=opts.get("guess_args", False))
    with torch.device("meta"):
        model = factory()
    shard_model(
        model,
        opts["shard"],
        torch.device(opts["device"]).type,
        fsdp_modules=opts.get("fsdp_modules", ()),
        tp=opts.get("tp"),
    )
    report = load_checkpoint(
        model,
        opts["checkpoint"],
        dtype=opts["dtype"],
        device=opts["device"],
        keep_in_fp32=opts["keep_in_fp32"],
        strict=opts["strict"],
        init=opts["init"],
        allow_missing=opts["allow_missing"],
        progress=False,
    )
    return {"report": report.to_json(), "text": str(report)}


def _worker_main(argv: list[str]) -> int:
    """``python -m metalint.loader.rank OPTIONS_JSON OUT_DIR``: one rank; writes
    ``OUT_DIR/rank<r>.json`` with the report or the one-line error."""
    import json

    opts, out_dir = json.loads(argv[0]), argv[1]
    rank = int(os.environ.get("RANK", "0"))
    try:
        rank, _ = init_from_env(opts["device"])
        result = {"ok": True, **_load_rank(opts)}
    except Exception as exc:  # one line, whatever failed
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""

        if not isinstance(exc, (CheckpointError, ValueError, TypeError)):
            msg = f"{type(exc).__name__}: {msg}"
        result = {"ok": False, "error": msg}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    return 0 if result["ok"] else 2


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
