"""The reference streaming loader: checkpoints into a meta-built model at about 1x memory.

``load_checkpoint(model, checkpoint, dtype=..., device=..., keep_in_fp32=..., strict=...,
init=...) -> LoadReport``; see :func:`metalint.loader.core.load_checkpoint`. Importing this
package imports torch (``metalint`` and ``metalint.cli`` do not).
"""

from metalint.loader.core import LoadReport, VerifyResult, load_checkpoint
from metalint.loader.errors import CheckpointError
from metalint.loader.formats import open_checkpoint, save_safetensors
from metalint.loader.sharding import Replicate, Shard, ShardPlan
from metalint.loader.verify import verify_against_eager

__all__ = [
    "CheckpointError",
    "LoadReport",
    "Replicate",
    "Shard",
    "ShardPlan",
    "VerifyResult",
    "load_checkpoint",
    "open_checkpoint",
    "save_safetensors",
    "verify_against_eager",
]
