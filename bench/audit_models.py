"""Model roots for the model-level rule audit (``bench/rule_audit.py``).

A class is materialised inside the models that contain it, under those models' protocol; the
audit therefore builds *roots* (whole models, at tiny size) and lets the probe map each lost
tensor back to the class that owns it. This module runs in the library's interpreter (the one
given to ``rule_audit.py --python``), never in metalint's: it imports the library only when a
root is listed or built.

    python bench/audit_models.py list LIBRARY [--every N] [--limit N]   # one JSON line per root
    python bench/audit_models.py resolve LIBRARY < classes.json       # root ids per class
    build(LIBRARY, ROOT_ID)                                          # called by the probe

Libraries: ``transformers`` (every family of the auto mappings at tiny size: the family's
default config with every size field shrunk, sub-configs too, and every model class of the
family), ``timm`` (small ``timm.create_model`` models), ``open_clip`` (CLIP, CoCa, ResNet
towers at tiny width), ``diffusers`` (UNets, VAEs, transformers from tiny configs),
``torch_geometric`` (``torch_geometric.nn.models`` at tiny width), ``monai`` (medical
imaging networks), ``peft`` (LoRA/IA3/... adapters on a tiny transformers model), and
``tiny`` (fixtures/audit/tinylib, the smoke test).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# ----------------------------------------------------------------------------- transformers

#: size fields of a transformers config and the tiny value the audit gives them
_TINY_INT = {
    "hidden_size": 32,
    "d_model": 32,
    "n_embd": 32,
    "embed_dim": 32,
    "dim": 32,
    "word_embed_proj_dim": 32,
    "projection_dim": 32,
    "text_embed_dim": 32,
    "vision_embed_dim": 32,
    "intermediate_size": 37,
    "ffn_dim": 37,
    "encoder_ffn_dim": 37,
    "decoder_ffn_dim": 37,
    "d_ff": 37,
    "n_inner": 37,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 16,
    "num_hidden_layers": 2,
    "num_layers": 2,
    "n_layer": 2,
    "n_layers": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "num_decoder_layers": 2,
    "num_encoder_layers": 2,
    "num_attention_heads": 4,
    "n_head": 4,
    "n_heads": 4,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "num_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "vocab_size": 99,
    "max_position_embeddings": 64,
    "n_positions": 64,
    "image_size": 32,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 8,
}


#: a root bigger than this at "tiny" size is not probed (a size field the shrinking missed)
MAX_PARAMS = 20_000_000


def shrink_config(cfg, depth: int = 0) -> None:
    """Shrink every size field of a transformers config (and its sub-configs) in place."""
    from transformers import PretrainedConfig

    for key, value in list(vars(cfg).items()):
        if isinstance(value, PretrainedConfig):
            if depth < 3:
                shrink_config(value, depth + 1)
        else:
            _shrink_field(cfg, key, value)
    for alias, real in getattr(cfg, "attribute_map", {}).items():
        _shrink_field(cfg, real, vars(cfg).get(real), alias)
    _fit_ids(cfg)


def _shrink_field(cfg, key: str, value, alias: str | None = None) -> None:
    tiny = _TINY_INT.get(alias or key)
    if tiny is not None and isinstance(value, int) and not isinstance(value, bool):
        if value > tiny:
            setattr(cfg, key, tiny)
    elif key == "patch_size" and isinstance(value, int) and value > 4:
        setattr(cfg, key, 4)
    elif key in ("hidden_sizes", "embed_dims", "dims") and isinstance(value, list):
        setattr(cfg, key, [8 * (i + 1) for i in range(len(value))])
    elif key in ("depths", "num_layers_per_stage") and isinstance(value, list):
        setattr(cfg, key, [1] * len(value))
    elif key == "layer_types" and isinstance(value, list) and value:
        n = getattr(cfg, "num_hidden_layers", None)
        if isinstance(n, int) and len(value) > n:
            setattr(cfg, key, value[:n])


def _fit_ids(cfg) -> None:
    """Token ids inside the shrunk vocabulary; no more key/value heads than heads."""
    vocab = getattr(cfg, "vocab_size", None)
    if isinstance(vocab, int):
        for key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            v = getattr(cfg, key, None)
            if isinstance(v, int) and v >= vocab:
                setattr(cfg, key, vocab - 1)
    heads, kv = getattr(cfg, "num_attention_heads", None), getattr(cfg, "num_key_value_heads", None)
    if isinstance(heads, int) and isinstance(kv, int) and kv > heads:
        cfg.num_key_value_heads = heads


def transformers_families() -> dict[str, list[str]]:
    """model_type -> every model class name of the auto mappings (task heads included)."""
    from transformers.models.auto import modeling_auto as ma

    fam: dict[str, set[str]] = {}
    for name in dir(ma):
        if name.startswith("MODEL") and name.endswith("MAPPING_NAMES"):
            for model_type, classes in getattr(ma, name).items():
                classes = classes if isinstance(classes, (tuple, list)) else [classes]
                fam.setdefault(model_type, set()).update(classes)
    return {k: sorted(v) for k, v in sorted(fam.items())}


def _transformers_build(root: str):
    import transformers
    from transformers import AutoConfig

    model_type, _, cls_name = root.partition("/")
    cfg = AutoConfig.for_model(model_type)
    shrink_config(cfg)
    cls = getattr(transformers, cls_name)
    model = cls(cfg)
    n = sum(p.numel() for p in model.parameters())
    if n > MAX_PARAMS:  # a size field the shrinking does not know: too slow to probe
        raise ValueError(f"{n} parameters at tiny size (more than {MAX_PARAMS})")
    return model


# ----------------------------------------------------------------------------- timm

#: small timm models, one or two per architecture family (what a user fine-tunes)
TIMM_MODELS = [
    "resnet18",
    "resnet26d",
    "seresnext26d_32x4d",
    "regnetx_002",
    "efficientnet_b0",
    "mobilenetv3_small_050",
    "mobilenetv4_conv_small",
    "ghostnetv2_100",
    "convnext_atto",
    "convnextv2_atto",
    "vit_tiny_patch16_224",
    "vit_small_patch16_224",
    "deit_tiny_patch16_224",
    "deit3_small_patch16_224",
    "beit_base_patch16_224",
    "eva02_tiny_patch14_224",
    "swin_tiny_patch4_window7_224",
    "swinv2_cr_tiny_224",
    "cait_xxs24_224",
    "coat_tiny",
    "crossvit_tiny_240",
    "levit_128s",
    "levit_conv_128s",  # ConvNorm with bn_weight_init=0 (levit_128s builds LinearNorm there)
    "mobilevit_xxs",
    "mobilevitv2_050",
    "efficientformer_l1",
    "efficientformerv2_s0",
    "poolformer_s12",
    "pvt_v2_b0",
    "twins_svt_small",
    "xcit_nano_12_p16_224",
    "tiny_vit_5m_224",
    "fastvit_t8",
    "edgenext_xx_small",
    "maxvit_pico_rw_256",
    "coatnet_nano_rw_224",
    "nfnet_l0",
    "dla34",
    "hrnet_w18_small",
    "repvit_m1",
    "hiera_tiny_224",
    "davit_tiny",
    "mambaout_femto",
    "gcvit_xxtiny",
    "sequencer2d_s",
    "mixer_s32_224",
    "resmlp_12_224",
    "volo_d1_224",
    "inception_next_atto",
    "vitamin_small_224",
    "starnet_s050",
]


def _timm_build(root: str):
    import timm

    model = timm.create_model(root, pretrained=False, num_classes=10)
    n = sum(p.numel() for p in model.parameters())
    if n > TIMM_MAX_PARAMS:  # a large variant (a root the findings name): too slow to probe
        raise ValueError(f"{n} parameters (more than {TIMM_MAX_PARAMS})")
    return model


#: the largest timm model the audit probes (beit_base_patch16_224 of the sample: 86M)
TIMM_MAX_PARAMS = 100_000_000


# ----------------------------------------------------------------------------- open_clip

_CLIP_VISION = dict(layers=2, width=32, head_width=16, patch_size=8, image_size=32)
_CLIP_TEXT = dict(context_length=8, vocab_size=64, width=32, heads=2, layers=1)
_OPEN_CLIP = {
    "clip_vit": dict(embed_dim=16, vision_cfg=_CLIP_VISION, text_cfg=dict(_CLIP_TEXT, layers=2)),
    "clip_resnet": dict(
        embed_dim=16,
        vision_cfg=dict(layers=[1, 1, 1, 1], width=8, head_width=8, image_size=32),
        text_cfg=_CLIP_TEXT,
    ),
    "clip_vit_attnpool": dict(
        embed_dim=16,
        vision_cfg=dict(_CLIP_VISION, attentional_pool=True, attn_pooler_queries=4),
        text_cfg=_CLIP_TEXT,
    ),
    "clip_siglip_style": dict(
        embed_dim=16,
        init_logit_bias=-10,
        vision_cfg=dict(_CLIP_VISION, no_ln_pre=True),
        text_cfg=dict(_CLIP_TEXT, no_causal_mask=True, pool_type="last"),
    ),
    "coca": dict(
        embed_dim=16,
        vision_cfg=dict(_CLIP_VISION, attentional_pool=True, attn_pooler_heads=2),
        text_cfg=dict(_CLIP_TEXT, embed_cls=True),
        multimodal_cfg=_CLIP_TEXT,
    ),
}


def _open_clip_build(root: str):
    import open_clip

    kwargs = dict(_OPEN_CLIP[root])
    if root == "coca":
        return open_clip.CoCa(**kwargs)
    return open_clip.CLIP(**kwargs)


# ----------------------------------------------------------------------------- diffusers

_UNET = dict(
    block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4, attention_head_dim=4
)
_CROSS_UNET = dict(
    _UNET, cross_attention_dim=16, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D")
)
_VAE = dict(
    block_out_channels=(8, 16),
    norm_num_groups=4,
    latent_channels=4,
    down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
    up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
)
_DIT = dict(
    num_attention_heads=2,
    attention_head_dim=8,
    in_channels=4,
    num_layers=1,
    sample_size=8,
    patch_size=2,
)
_DIFFUSERS = {
    "UNet2DModel": dict(
        _UNET,
        sample_size=16,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    ),
    "UNet2DConditionModel": dict(
        _CROSS_UNET, sample_size=16, up_block_types=("UpBlock2D", "CrossAttnUpBlock2D")
    ),
    "AutoencoderKL": dict(_VAE),
    "VQModel": dict(_VAE, num_vq_embeddings=16),
    "DiTTransformer2DModel": dict(_DIT, num_embeds_ada_norm=10),
    "SD3Transformer2DModel": dict(
        _DIT,
        joint_attention_dim=16,
        caption_projection_dim=16,
        pooled_projection_dim=16,
        out_channels=4,
        pos_embed_max_size=16,
    ),
    "FluxTransformer2DModel": dict(
        patch_size=1,
        in_channels=4,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=16,
        pooled_projection_dim=16,
        axes_dims_rope=(2, 2, 4),
    ),
    "UNet1DModel": dict(
        block_out_channels=(8, 16),
        in_channels=2,
        out_channels=2,
        down_block_types=("DownBlock1D", "AttnDownBlock1D"),
        up_block_types=("AttnUpBlock1D", "UpBlock1D"),
        mid_block_type="UNetMidBlock1D",
        extra_in_channels=16,
    ),
    "PixArtTransformer2DModel": dict(
        _DIT, out_channels=8, cross_attention_dim=16, caption_channels=16
    ),
    "ControlNetModel": dict(_CROSS_UNET, conditioning_embedding_out_channels=(4, 8)),
}


def _diffusers_build(root: str):
    import diffusers

    return getattr(diffusers, root)(**_DIFFUSERS[root])


# ----------------------------------------------------------------------------- torch_geometric


def _tgn_memory(m):
    from torch_geometric.nn.models.tgn import IdentityMessage, LastAggregator

    return m.TGNMemory(
        10, 4, 8, 8, message_module=IdentityMessage(4, 8, 8), aggregator_module=LastAggregator()
    )


def _kge(name: str):
    import torch_geometric.nn.kge as kge

    return getattr(kge, name)(num_nodes=100, num_relations=10, hidden_channels=16)


_PYG = {
    "GCN": lambda m: m.GCN(8, 16, 2, out_channels=4),
    "GAT": lambda m: m.GAT(8, 16, 2, out_channels=4, heads=2),
    "GAT_v2": lambda m: m.GAT(8, 16, 2, out_channels=4, v2=True),
    "GraphSAGE": lambda m: m.GraphSAGE(8, 16, 2, out_channels=4),
    "GIN": lambda m: m.GIN(8, 16, 2, out_channels=4),
    "EdgeCNN": lambda m: m.EdgeCNN(8, 16, 2, out_channels=4),
    "PNA": lambda m: m.PNA(
        8,
        16,
        2,
        out_channels=4,
        aggregators=["mean", "max"],
        scalers=["identity"],
        deg=__import__("torch").tensor([1, 2, 3]),
    ),
    "MLP": lambda m: m.MLP([8, 16, 4]),
    "GraphUNet": lambda m: m.GraphUNet(8, 16, 4, depth=2),
    "AttentiveFP": lambda m: m.AttentiveFP(8, 16, 4, edge_dim=3, num_layers=2, num_timesteps=2),
    "SchNet": lambda m: m.SchNet(hidden_channels=16, num_filters=16, num_interactions=2),
    "GAE": lambda m: m.GAE(m.GCN(8, 16, 2)),
    "VGAE": lambda m: m.VGAE(m.GCN(8, 16, 2)),
    "DeepGraphInfomax": lambda m: m.DeepGraphInfomax(
        16, encoder=m.GCN(8, 16, 1), summary=lambda z, *a, **k: z.mean(0), corruption=lambda x: x
    ),
    "LightGCN": lambda m: m.LightGCN(10, 8, 2),
    "RECT_L": lambda m: m.RECT_L(8, 16),
    "LINKX": lambda m: m.LINKX(10, 8, 16, 4, num_layers=1),
    "MetaPath2Vec": lambda m: m.MetaPath2Vec(
        {  # the graph is data, on the CPU as a user's is (the factory runs under meta)
            ("a", "to", "b"): __import__("torch").tensor([[0], [0]], device="cpu"),
            ("b", "to", "a"): __import__("torch").tensor([[0], [0]], device="cpu"),
        },
        embedding_dim=8,
        metapath=[("a", "to", "b"), ("b", "to", "a")],
        walk_length=2,
        context_size=2,
    ),
    "TGNMemory": lambda m: _tgn_memory(m),
    "MultiAggregation_attn": lambda m: __import__(
        "torch_geometric.nn.aggr", fromlist=["MultiAggregation"]
    ).MultiAggregation(
        ["mean", "max"],
        mode="attn",
        mode_kwargs=dict(in_channels=16, out_channels=16, num_heads=2),
    ),
    # knowledge-graph embeddings at a usable size (2 nodes of 16 channels cannot tell xavier
    # from a child's normal(0, 1) re-draw)
    "ComplEx": lambda m: _kge("ComplEx"),
    "DistMult": lambda m: _kge("DistMult"),
    "GPSConv_model": lambda m: __import__("torch_geometric.nn", fromlist=["GPSConv"]).GPSConv(
        16, __import__("torch_geometric.nn", fromlist=["GINConv"]).GINConv(m.MLP([16, 16])), heads=2
    ),
}


def _pyg_build(root: str):
    import torch_geometric.nn.models as m

    return _PYG[root](m)


# ----------------------------------------------------------------------------- monai

_MONAI = {
    "UNet": lambda n: n.UNet(2, 1, 2, channels=(4, 8, 16), strides=(2, 2), num_res_units=1),
    "BasicUNet": lambda n: n.BasicUNet(2, 1, 2, features=(4, 4, 8, 8, 16, 4)),
    "AttentionUnet": lambda n: n.AttentionUnet(2, 1, 2, channels=(4, 8, 16), strides=(2, 2)),
    "SegResNet": lambda n: n.SegResNet(
        2, init_filters=4, in_channels=1, out_channels=2, norm=("group", {"num_groups": 2})
    ),
    "UNETR": lambda n: n.UNETR(
        1,
        2,
        img_size=(16, 16),
        feature_size=4,
        hidden_size=32,
        mlp_dim=64,
        num_heads=2,
        spatial_dims=2,
    ),
    "SwinUNETR": lambda n: n.SwinUNETR(
        in_channels=1,
        out_channels=2,
        feature_size=12,
        depths=(1, 1, 1, 1),
        num_heads=(1, 1, 1, 1),
        spatial_dims=2,
    ),
    "ViT": lambda n: n.ViT(
        1,
        img_size=(16, 16),
        patch_size=(4, 4),
        hidden_size=32,
        mlp_dim=64,
        num_layers=2,
        num_heads=2,
        spatial_dims=2,
        classification=True,
    ),
    "DenseNet121": lambda n: n.DenseNet121(spatial_dims=2, in_channels=1, out_channels=2),
    "ResNet": lambda n: n.resnet10(spatial_dims=2, n_input_channels=1, num_classes=2),
    "EfficientNetBN": lambda n: n.EfficientNetBN(
        "efficientnet-b0", pretrained=False, spatial_dims=2, in_channels=1, num_classes=2
    ),
    "AutoEncoder": lambda n: n.AutoEncoder(2, 1, 1, channels=(4, 8), strides=(2, 2)),
    "VarAutoEncoder": lambda n: n.VarAutoEncoder(
        2, (1, 16, 16), 1, 4, channels=(4, 8), strides=(2, 2)
    ),
    "DynUNet": lambda n: n.DynUNet(
        2, 1, 2, kernel_size=[3, 3, 3], strides=[1, 2, 2], upsample_kernel_size=[2, 2]
    ),
    "SegResNetVAE": lambda n: n.SegResNetVAE(
        input_image_size=(16, 16),
        spatial_dims=2,
        init_filters=4,
        in_channels=1,
        out_channels=2,
        norm=("group", {"num_groups": 2}),
    ),
    "HighResNet": lambda n: n.HighResNet(spatial_dims=2, in_channels=1, out_channels=2),
    "Generator": lambda n: n.Generator((16,), (8, 8), (4, 1), (2, 1)),
}


def _monai_build(root: str):
    import monai.networks.nets as n

    return _MONAI[root](n)


# ----------------------------------------------------------------------------- peft

_PEFT = {
    "lora": lambda p: p.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
    "lora_dora": lambda p: p.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], use_dora=True),
    "lora_embedding": lambda p: p.LoraConfig(r=4, target_modules=["embed_tokens", "down_proj"]),
    "ia3": lambda p: p.IA3Config(
        target_modules=["k_proj", "down_proj"], feedforward_modules=["down_proj"]
    ),
    "loha": lambda p: p.LoHaConfig(r=4, target_modules=["q_proj"]),
    "lokr": lambda p: p.LoKrConfig(r=4, target_modules=["q_proj"]),
    "adalora": lambda p: p.AdaLoraConfig(r=4, target_modules=["q_proj"], total_step=10),
    "boft": lambda p: p.BOFTConfig(boft_block_size=4, target_modules=["q_proj"]),
    "oft": lambda p: p.OFTConfig(r=0, oft_block_size=4, target_modules=["q_proj"]),
    "vera": lambda p: p.VeraConfig(r=4, target_modules=["q_proj", "v_proj"]),
    "prefix": lambda p: p.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4),
    "prompt": lambda p: p.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4),
    "fourierft": lambda p: p.FourierFTConfig(n_frequency=8, target_modules=["q_proj"]),
    "ln_tuning": lambda p: p.LNTuningConfig(target_modules=["input_layernorm"]),
    "hra": lambda p: p.HRAConfig(r=4, target_modules=["q_proj"]),
    "adaption_prompt": lambda p: p.AdaptionPromptConfig(
        adapter_len=4, adapter_layers=1, task_type="CAUSAL_LM"
    ),
    "multitask_prompt": lambda p: p.MultitaskPromptTuningConfig(
        task_type="CAUSAL_LM", num_virtual_tokens=4, num_tasks=2
    ),
}


def _peft_build(root: str):
    import peft
    from transformers import AutoConfig, LlamaForCausalLM

    cfg = AutoConfig.for_model("llama")
    shrink_config(cfg)
    return peft.get_peft_model(LlamaForCausalLM(cfg), _PEFT[root](peft))


# ----------------------------------------------------------------------------- torchvision

#: torchvision models as a user builds them (``get_model(name, weights=None)``), each family
#: once, small ones where a family has sizes: classification, video, detection, segmentation,
#: optical flow; they initialise themselves in ``__init__`` (no protocol of their own)
_TORCHVISION = {
    name: {"weights": None, **extra}
    for name, extra in [
        ("resnet18", {}),
        ("mobilenet_v3_small", {}),
        ("efficientnet_b0", {}),
        ("efficientnet_v2_s", {}),
        ("convnext_tiny", {}),
        ("regnet_y_400mf", {}),
        ("densenet121", {}),
        ("googlenet", {"init_weights": True}),
        ("inception_v3", {"init_weights": True}),
        ("shufflenet_v2_x0_5", {}),
        ("squeezenet1_1", {}),
        ("mnasnet0_5", {}),
        ("vgg11", {}),
        ("alexnet", {}),
        ("vit_b_32", {}),
        ("swin_t", {}),
        ("swin_v2_t", {}),
        ("maxvit_t", {}),
        ("r3d_18", {}),
        ("s3d", {}),
        ("mvit_v2_s", {}),
        ("swin3d_t", {}),
        ("fasterrcnn_mobilenet_v3_large_320_fpn", {"weights_backbone": None}),
        ("maskrcnn_resnet50_fpn", {"weights_backbone": None}),
        ("keypointrcnn_resnet50_fpn", {"weights_backbone": None}),
        ("retinanet_resnet50_fpn", {"weights_backbone": None}),
        ("fcos_resnet50_fpn", {"weights_backbone": None}),
        ("ssdlite320_mobilenet_v3_large", {"weights_backbone": None}),
        ("deeplabv3_mobilenet_v3_large", {"weights_backbone": None}),
        ("lraspp_mobilenet_v3_large", {"weights_backbone": None}),
        ("raft_small", {}),
    ]
}


def _torchvision_build(root: str):
    import torchvision.models as m

    return m.get_model(root, **_TORCHVISION[root])


# ----------------------------------------------------------------------------- tiny (smoke)


def _tiny_build(root: str):
    sys.path.insert(0, str(ROOT / "fixtures" / "audit"))
    import tinylib

    return getattr(tinylib, root)()


TINY_ROOTS = ["TinyTransformerModel", "TinyVisionModel"]

# ----------------------------------------------------------------------------- registry

#: library -> (import name of the package to check, builder)
BUILDERS: dict[str, tuple[str, Callable[[str], object]]] = {
    "transformers": ("transformers", _transformers_build),
    "timm": ("timm", _timm_build),
    "open_clip": ("open_clip", _open_clip_build),
    "diffusers": ("diffusers", _diffusers_build),
    "torch_geometric": ("torch_geometric", _pyg_build),
    "monai": ("monai", _monai_build),
    "peft": ("peft", _peft_build),
    "torchvision": ("torchvision", _torchvision_build),
    "tiny": ("tinylib", _tiny_build),
}


def list_roots(library: str, every: int = 1, limit: int | None = None) -> dict:
    """``{"package": folder to check, "roots": [[root id, group], ...], "groups": n}``."""
    if library == "transformers":
        import transformers

        fams = transformers_families()
        chosen = [t for i, t in enumerate(fams) if i % every == 0]
        roots = [[f"{t}/{c}", t] for t in chosen for c in fams[t]]
        folder = Path(transformers.__file__).parent
        return {"package": str(folder), "roots": roots, "groups": len(chosen), "of": len(fams)}
    names = {
        "timm": TIMM_MODELS,
        "open_clip": list(_OPEN_CLIP),
        "diffusers": list(_DIFFUSERS),
        "torch_geometric": list(_PYG),
        "monai": list(_MONAI),
        "peft": list(_PEFT),
        "torchvision": list(_TORCHVISION),
        "tiny": TINY_ROOTS,
    }[library]
    names = names[::every][:limit]
    if library == "tiny":
        folder = ROOT / "fixtures" / "audit" / "tinylib"
    else:
        pkg = __import__(BUILDERS[library][0])
        folder = Path(pkg.__file__).parent
    return {"package": str(folder), "roots": [[n, n] for n in names], "groups": len(names)}


def build(library: str, root: str):
    return BUILDERS[library][1](root)


def resolve(library: str, classes: list[str]) -> dict[str, list[str]]:
    """Root ids that build each class (full names, ``pkg.mod.Class``): the model roots
    ``metalint check`` judged a finding under that the sample did not build. transformers:
    ``model_type/Class`` (a family of the auto mappings listing the class, else one of the
    family of its module); timm: the smallest-named models of the class's module whose
    entry point names the class (itself or through the ``_create_*`` function it calls);
    tiny: a class ``tinylib`` exports. Other libraries: none."""
    if library == "transformers":
        return _transformers_resolve(classes)
    if library == "timm":
        return {c: _timm_resolve(c) for c in classes}
    if library == "tiny":
        sys.path.insert(0, str(ROOT / "fixtures" / "audit"))
        import tinylib

        return {
            c: [c.rpartition(".")[2]] for c in classes if hasattr(tinylib, c.rpartition(".")[2])
        }
    return {}


def _transformers_resolve(classes: list[str]) -> dict[str, list[str]]:
    import transformers

    fams = transformers_families()
    of_class = {c: t for t, names in fams.items() for c in names}
    of_module: dict[str, str] = {}
    for t, names in fams.items():
        for name in names:
            cls = getattr(transformers, name, None)
            if cls is not None:
                of_module.setdefault(cls.__module__, t)
    out = {}
    for full in classes:
        module, _, name = full.rpartition(".")
        model_type = of_class.get(name) or of_module.get(module)
        if model_type and hasattr(transformers, name):
            out[full] = [f"{model_type}/{name}"]
    return out


#: words of timm model names, smallest first (the audit builds the smallest variant it finds)
_TIMM_SIZES = (
    "atto",
    "femto",
    "pico",
    "nano",
    "xxtiny",
    "xxs",
    "tiny",
    "xs",
    "mini",
    "small",
    "_s",
    "_t",
    "18",
    "b0",
    "base",
)


def _timm_resolve(full: str) -> list[str]:
    import inspect

    import timm
    from timm.models import _registry

    module, _, name = full.rpartition(".")
    if not module.startswith("timm.models."):
        return []
    mod = sys.modules.get(module) or __import__(module, fromlist=["_"])
    candidates = timm.list_models(module=module.rpartition(".")[2])

    def size(model: str) -> tuple:
        ranks = [i for i, w in enumerate(_TIMM_SIZES) if w in model]
        return (min(ranks) if ranks else len(_TIMM_SIZES), len(model), model)

    for model in sorted(candidates, key=size):
        try:
            text = inspect.getsource(_registry._model_entrypoints[model])
        except (KeyError, OSError, TypeError):
            continue
        texts = [text]
        for called in re.findall(r"\b(_create_\w+|_gen_\w+)\(", text):
            fn = getattr(mod, called, None)
            if fn is not None:
                try:
                    texts.append(inspect.getsource(fn))
                except (OSError, TypeError):
                    pass
        if any(re.search(rf"\b{re.escape(name)}\b", t) for t in texts):
            return [model]
    return []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("verb", choices=["list", "resolve"])
    ap.add_argument("library", choices=sorted(BUILDERS))
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--limit", type=int)
    args = ap.parse_args(argv)
    if args.verb == "resolve":  # class full names as a JSON list on stdin
        print(json.dumps(resolve(args.library, json.loads(sys.stdin.read()))))
    else:
        print(json.dumps(list_roots(args.library, args.every, args.limit)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
