"""Models of the shapes people shard, for ``tests/test_shard_shapes.py``
(``tests/shard_models.py:Name``): a transformers Llama built tiny from its config, a
torchtitan-style llama, a timm-style ViT, and small blocks that pin down MP010 on CPU."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# --------------------------------------------------------------------------------------------
# transformers: LlamaForCausalLM from a tiny config (its own _tp_plan and _no_split_modules)


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg)


# --------------------------------------------------------------------------------------------
# torchtitan's llama idiom: layers a ModuleDict of TransformerBlock, a complex RoPE buffer
# re-created by the root's init_weights()


@dataclass
class ModelArgs:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 128
    multiple_of: int = 32
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 32
    depth_init: bool = True


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def reset_parameters(self):
        torch.nn.init.ones_(self.weight)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.n_kv_heads = args.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def init_weights(self, init_std: float):
        for linear in (self.wq, self.wk, self.wv):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=init_std)

    def forward(self, x, freqs_cis):
        return self.wo(self.wq(x))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, multiple_of: int):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def init_weights(self, init_std: float):
        nn.init.trunc_normal_(self.w1.weight, mean=0.0, std=0.02)
        for linear in (self.w2, self.w3):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=init_std)


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, 4 * args.dim, args.multiple_of)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)
        if args.depth_init:
            self.weight_init_std = 0.02 / (2 * (layer_id + 1)) ** 0.5
        else:
            self.weight_init_std = 0.02 / (2 * args.n_layers) ** 0.5

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))

    def init_weights(self):
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        self.feed_forward.init_weights(self.weight_init_std)


class Transformer(nn.Module):
    def __init__(self, model_args: ModelArgs | None = None):
        super().__init__()
        model_args = model_args or ModelArgs()
        self.model_args = model_args
        self.tok_embeddings = nn.Embedding(model_args.vocab_size, model_args.dim)
        self.register_buffer("freqs_cis", self._precompute_freqs_cis(), persistent=True)
        self.layers = torch.nn.ModuleDict()
        for layer_id in range(model_args.n_layers):
            self.layers[str(layer_id)] = TransformerBlock(layer_id, model_args)
        self.norm = RMSNorm(model_args.dim, eps=model_args.norm_eps)
        self.output = nn.Linear(model_args.dim, model_args.vocab_size, bias=False)
        self.init_weights()

    def init_weights(self, buffer_device: torch.device | None = None):
        buffer_device = buffer_device or self.freqs_cis.device
        with torch.device(buffer_device):
            self.freqs_cis = self._precompute_freqs_cis()
        if self.tok_embeddings is not None:
            nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers.values():
            if layer is not None:
                layer.init_weights()
        if self.norm is not None:
            self.norm.reset_parameters()
        final_out_std = self.model_args.dim**-0.5
        cutoff_factor = 3
        if self.output is not None:
            nn.init.trunc_normal_(
                self.output.weight,
                mean=0.0,
                std=final_out_std,
                a=-cutoff_factor * final_out_std,
                b=cutoff_factor * final_out_std,
            )

    def _precompute_freqs_cis(self) -> torch.Tensor:
        return precompute_freqs_cis(
            self.model_args.dim // self.model_args.n_heads,
            self.model_args.max_seq_len * 2,
            self.model_args.rope_theta,
        )

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, self.freqs_cis)
        return self.output(self.norm(h))


# --------------------------------------------------------------------------------------------
# timm's VisionTransformer idiom: blocks an nn.Sequential of Block; LayerScale as timm wrote it
# before it had reset_parameters() (its gamma is lost on meta: the probe must say so)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    return nn.init.trunc_normal_(tensor, mean, std, a, b)


class PatchEmbed(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, embed_dim=64):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.norm = nn.Identity()

    def forward(self, x):
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))


class VitAttention(nn.Module):
    def __init__(self, dim, num_heads=4, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)

    def forward(self, x):
        return self.proj_drop(self.proj(self.qkv(x)[..., : x.shape[-1]]))


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x.mul_(self.gamma) if self.inplace else x * self.gamma


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, act_layer=nn.GELU):
        super().__init__()
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.drop1 = nn.Dropout(0.0)
        self.norm = nn.Identity()
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop2 = nn.Dropout(0.0)

    def forward(self, x):
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1(x))))))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0, init_values=None):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = VitAttention(dim, num_heads=num_heads)
        self.ls1 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()
        self.drop_path1 = nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio))
        self.ls2 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()
        self.drop_path2 = nn.Identity()

    def forward(self, x):
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


def init_weights_vit_timm(module: nn.Module, name: str = "") -> None:
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif hasattr(module, "init_weights"):
        module.init_weights()


def named_apply(fn, module: nn.Module, name="", depth_first=True, include_root=False):
    if not depth_first and include_root:
        fn(module=module, name=name)
    for child_name, child_module in module.named_children():
        child_name = ".".join((name, child_name)) if name else child_name
        named_apply(fn, child_module, child_name, depth_first, include_root=True)
    if depth_first and include_root:
        fn(module=module, name=name)
    return module


class VisionTransformer(nn.Module):
    def __init__(
        self,
        img_size=16,
        patch_size=4,
        num_classes=10,
        embed_dim=64,
        depth=2,
        num_heads=4,
        init_values=1e-5,
        weight_init="",
    ):
        super().__init__()
        self.patch_embed = PatchEmbed(img_size, patch_size, 3, embed_dim)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, embed_dim) * 0.02)
        self.pos_drop = nn.Dropout(0.0)
        self.blocks = nn.Sequential(
            *[Block(embed_dim, num_heads, init_values=init_values) for _ in range(depth)]
        )
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)
        if weight_init != "skip":
            self.init_weights(weight_init)

    def init_weights(self, mode=""):
        trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        named_apply(init_weights_vit_timm, self)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = self.norm(self.blocks(self.pos_drop(x + self.pos_embed)))
        return self.head(x[:, 0])


# --------------------------------------------------------------------------------------------
# the four-line block: meta-safe (DTensor random init, a hooked scale); and the same block
# drawing each rank's local shard with plain torch ops


class HookedBlock(nn.Module):
    def __init__(self, dim: int = 64):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.scale = nn.Parameter(torch.full((dim,), 0.1))

    def reset_parameters(self):
        with torch.no_grad():
            self.scale.fill_(0.1)


class LocalDrawBlock(HookedBlock):
    """Draws ``fc1.weight`` shard by shard on each rank's local tensor: every shard repeats."""

    def __init__(self, dim: int = 64):
        super().__init__(dim)
        self.init_weights()

    def init_weights(self):
        w = self.fc1.weight
        local = w.to_local() if hasattr(w, "to_local") else w
        with torch.no_grad():
            local.normal_(0.0, 1.0 / math.sqrt(w.shape[1]))


# --------------------------------------------------------------------------------------------
# one process group per world size runs every distributed check (tests/test_shard_shapes.py);
# each rank writes what it saw as JSON

#: name -> factory, for the probe and the loader
MODELS = {
    "tiny_llama": tiny_llama,
    "Transformer": Transformer,
    "VisionTransformer": VisionTransformer,
    "HookedBlock": HookedBlock,
    "LocalDrawBlock": LocalDrawBlock,
}
#: what the loader checks load
LOADED = ("tiny_llama", "Transformer", "VisionTransformer")


def _have_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def _probe(shards: tuple[str, ...]) -> dict:
    from metalint.probe.distributed import probe_sharded
    from metalint.vocabulary import DEFAULT_HOOKS

    out: dict = {}
    for shard in shards:
        for name, make in MODELS.items():
            if name == "tiny_llama" and not _have_transformers():
                continue
            res = probe_sharded(
                make,
                shard=shard,
                device="cpu",
                init="auto",
                seed=0,
                label=name,
                hooks=DEFAULT_HOOKS,
            )
            out[f"{shard}:{name}"] = {
                "status": res.status,
                "lost": res.lost,
                "codes": sorted({d.code for d in res.findings}),
                "messages": [d.message for d in res.findings],
                "seconds": round(res.seconds, 2),
            }
    return out


def _user_plans() -> dict:
    """The user's FSDP2 units and TP plan, as [tool.metalint.probe] would give them."""
    from torch.distributed.fsdp import FSDPModule

    from metalint.loader.distributed import is_dtensor, shard_model

    with torch.device("meta"):
        fsdp = Transformer()
    shard_model(fsdp, "fsdp", fsdp_modules=["TransformerBlock", "tok_embeddings"])
    with torch.device("meta"):
        tp = Transformer()
    shard_model(tp, "tp", tp={"layers.*.attention.wq": "colwise", "output": "rowwise"})
    return {
        "fsdp": sorted(n for n, m in fsdp.named_modules() if isinstance(m, FSDPModule)),
        "tp": {n: str(p.placements) for n, p in tp.named_parameters() if is_dtensor(p)},
    }


def save_index(sd: dict, folder) -> None:
    """``sd`` as two safetensors files and ``model.safetensors.index.json``."""
    import json
    import os

    from metalint.loader import save_safetensors

    names = list(sd)
    half = len(names) // 2
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:])):
        file = f"model-{i + 1:05d}-of-00002.safetensors"
        save_safetensors({n: sd[n].contiguous() for n in part}, os.path.join(folder, file))
        weight_map.update({n: file for n in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def _load(tmp: str, rank: int) -> dict:
    import os

    import torch.distributed as dist

    from metalint.loader import load_checkpoint
    from metalint.loader.distributed import shard_model

    out = {}
    for name in LOADED:
        if name == "tiny_llama" and not _have_transformers():
            continue
        folder = os.path.join(tmp, name)
        torch.manual_seed(0)
        sd = MODELS[name]().state_dict()
        if rank == 0:
            os.makedirs(folder, exist_ok=True)
            save_index(sd, folder)
        dist.barrier()
        with torch.device("meta"):
            model = MODELS[name]()
        shard_model(model, "fsdp")
        rep = load_checkpoint(model, os.path.join(folder, "model.safetensors.index.json"))
        state = model.state_dict()
        equal, whole = {}, 0
        for n, want in sd.items():
            got = state[n]
            if hasattr(got, "full_tensor"):
                got = got.full_tensor()
            else:  # a buffer FSDP2 leaves whole: every rank reads it
                whole += want.numel() * want.element_size()
            equal[n] = bool(torch.equal(got, want))
        out[name] = {
            "equal": equal,
            "bytes_read": rep.bytes_read,
            "per_rank": rep.bytes_read_per_rank,
            "total": sum(t.numel() * t.element_size() for t in sd.values()),
            "whole": whole,
            "largest": max(t.numel() * t.element_size() for t in sd.values()),
        }
    return out


def _rng() -> dict:
    """DTensor random ops on the CPU mesh, with and without the probe's tracker: every rank's
    local values (gathered) and its generator's next draw afterwards."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from metalint.probe.distributed import dtensor_rng

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    out = {}
    for tracked in (False, True):
        torch.manual_seed(7)
        sharded = distribute_tensor(torch.empty(8, 4), mesh, [Shard(0)])
        replica = distribute_tensor(torch.empty(3), mesh, [Replicate()])
        with dtensor_rng("cpu") if tracked else contextlib.nullcontext():
            nn.init.normal_(sharded)
            nn.init.uniform_(replica)
        after = torch.rand(1)
        gathered = []
        for t in (sharded.to_local(), replica.to_local(), after):
            parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
            dist.all_gather(parts, t.contiguous())
            gathered.append([p.tolist() for p in parts])
        out["tracked" if tracked else "plain"] = dict(
            zip(("sharded", "replica", "after"), gathered)
        )
    return out


def shard_worker(rank: int, world: int, port: int, tmp: str, shards: tuple[str, ...]) -> None:
    """One rank of tests/test_shard_shapes.py (started by torch.multiprocessing)."""
    import json

    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        res = {
            "rng": _rng(),
            "probe": _probe(shards),
            "plans": _user_plans(),
            "load": _load(tmp, rank),
        }
        with open(f"{tmp}/rank{rank}.json", "w") as f:
            json.dump(res, f)
    finally:
        dist.destroy_process_group()
