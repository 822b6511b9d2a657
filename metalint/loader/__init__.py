"""The reference streaming loader: checkpoints into a meta-built model at about 1x memory.

``load_checkpoint(model, checkpoint, dtype=..., device=..., keep_in_fp32=..., strict=...,
init=...) -> LoadReport``; see :func:`metalint.loader.core.load_checkpoint`.

The names below are imported lazily, so ``metalint.loader.command`` (which ``metalint --help``
imports to list the ``load`` command) does not import torch; ``load_checkpoint`` and friends
do.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "CheckpointError": "metalint.loader.errors",
    "LoadReport": "metalint.loader.core",
    "VerifyResult": "metalint.loader.core",
    "load_checkpoint": "metalint.loader.core",
    "open_checkpoint": "metalint.loader.formats",
    "save_safetensors": "metalint.loader.formats",
    "Replicate": "metalint.loader.sharding",
    "Shard": "metalint.loader.sharding",
    "ShardPlan": "metalint.loader.sharding",
    "verify_against_eager": "metalint.loader.verify",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from metalint.loader.core import LoadReport as LoadReport
    from metalint.loader.core import VerifyResult as VerifyResult
    from metalint.loader.core import load_checkpoint as load_checkpoint
    from metalint.loader.errors import CheckpointError as CheckpointError
    from metalint.loader.formats import open_checkpoint as open_checkpoint
    from metalint.loader.formats import save_safetensors as save_safetensors
    from metalint.loader.sharding import Replicate as Replicate
    from metalint.loader.sharding import Shard as Shard
    from metalint.loader.sharding import ShardPlan as ShardPlan
    from metalint.loader.verify import verify_against_eager as verify_against_eager


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'metalint.loader' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS))
