"""Findings judged under the protocol of the model roots that contain a class, across files
(metalint.static.protocol): transformers' ``_init_weights``, a root ``init_weights()``,
per-module ``reset_parameters()``."""

from __future__ import annotations

import json
import textwrap

import pytest

from metalint.check import run_check
from metalint.config import ConfigError, Settings, load_settings

LAYERS = """
import torch
from torch import nn

class ToyRMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

class ToyScale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(1e-5 * torch.ones(dim))

class ToyRotaryEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("original_inv_freq", inv_freq.clone(), persistent=False)
"""
HF_MODEL = """
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from pkg.layers import ToyRMSNorm, ToyRotaryEmbedding, ToyScale

class ToyPreTrainedModel(PreTrainedModel):
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, {scale_class}):
            init.constant_(module.gamma, 1e-5)

class ToyModel(ToyPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.norm = ToyRMSNorm(config.hidden_size)
        self.rope = ToyRotaryEmbedding(config.head_dim)
        self.scale = ToyScale(config.hidden_size)
"""
PLAIN_MODEL = """
from torch import nn
from pkg.layers import ToyRMSNorm, ToyScale

class PlainModel(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = ToyRMSNorm(dim)
        self.scale = ToyScale(dim)
"""


def _tree(tmp_path, scale_handled: bool, plain: bool = False):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "layers.py").write_text(textwrap.dedent(LAYERS))
    (pkg / "hf.py").write_text(
        textwrap.dedent(HF_MODEL).format(scale_class="ToyScale" if scale_handled else "nn.Linear")
    )
    if plain:
        (pkg / "plain.py").write_text(textwrap.dedent(PLAIN_MODEL))
    return pkg


def _found(pkg, protocol="auto"):
    settings = Settings(root=pkg.parent, select=["ML001", "ML002"], protocol=protocol)
    return run_check([pkg], settings, use_cache=False, workers=1).diagnostics


def test_transformers_base_dispatch_restores_what_the_classes_do_not(tmp_path):
    pkg = _tree(tmp_path, scale_handled=True)
    assert [(d.code, d.symbol) for d in _found(pkg)] == []
    # judged per module (the protocol every module's own hooks make) they are all lost
    per_module = sorted((d.code, d.symbol, d.protocol, d.root) for d in _found(pkg, RESET))
    assert per_module == [
        ("ML001", "ToyRMSNorm", "reset_parameters", None),
        ("ML001", "ToyScale", "reset_parameters", None),
        ("ML002", "ToyRotaryEmbedding", "reset_parameters", None),
        ("ML002", "ToyRotaryEmbedding", "reset_parameters", None),
    ]


RESET = "reset_parameters"


def test_a_tensor_the_dispatch_misses_names_root_and_protocol(tmp_path):
    pkg = _tree(tmp_path, scale_handled=False)
    found = _found(pkg)
    assert [(d.code, d.symbol) for d in found] == [("ML001", "ToyScale")]
    d = found[0]
    assert (d.protocol, d.root) == ("transformers _init_weights", "pkg.hf.ToyModel")
    assert "lost under `ToyModel.init_weights()`" in d.message
    out = d.to_json()
    assert (out["protocol"], out["root"]) == ("transformers _init_weights", "pkg.hf.ToyModel")


def test_lost_under_one_root_is_enough(tmp_path):
    # ToyScale restored under the transformers root, but a plain model (no protocol of its
    # own: per module) holds it too; RMSNorm likewise
    pkg = _tree(tmp_path, scale_handled=True, plain=True)
    got = sorted((d.symbol, d.protocol, d.root) for d in _found(pkg))
    assert got == []  # a plain parentless model is not a model root: per module is not asked
    # ... unless the repo says it materialises per module
    assert len(_found(pkg, RESET)) == 4


def test_root_init_weights_applies_to_children(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "layers.py").write_text(textwrap.dedent(LAYERS))
    (pkg / "vit.py").write_text(
        textwrap.dedent(
            """
            from torch import nn
            from pkg.layers import ToyRMSNorm, ToyScale

            def init_norms(module, name=""):
                if "RMSNorm" in type(module).__name__:
                    nn.init.ones_(module.weight)

            class ViT(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.norm = ToyRMSNorm(dim)
                    self.scale = ToyScale(dim)

                def init_weights(self):
                    self.apply(init_norms)
            """
        )
    )
    # the rotary embedding is in no model: judged per module
    found = [d for d in _found(pkg) if d.symbol != "ToyRotaryEmbedding"]
    assert [(d.symbol, d.protocol, d.root) for d in found] == [
        ("ToyScale", "root init_weights", "pkg.vit.ViT")
    ]
    assert "lost under `ViT.init_weights()`" in found[0].message


def test_protocol_setting(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.metalint]\nprotocol = "materialize"\n')
    assert load_settings(tmp_path).protocol == "materialize"
    (tmp_path / "pyproject.toml").write_text('[tool.metalint]\nprotocol = "not a name"\n')
    with pytest.raises(ConfigError, match="protocol must be one of auto"):
        load_settings(tmp_path)


def test_json_report_carries_the_fields(tmp_path):
    from metalint.report import render

    pkg = _tree(tmp_path, scale_handled=False)
    out = json.loads(render(_found(pkg), "json"))
    assert [(x["symbol"], x["protocol"], x["root"]) for x in out] == [
        ("ToyScale", "transformers _init_weights", "pkg.hf.ToyModel")
    ]


def test_base_dispatch_called_by_name_and_deleted_override(tmp_path):
    # ``PreTrainedModel._init_weights(self, module)`` runs the base dispatch; a modular file's
    # ``def _init_weights(self, module): raise AttributeError()`` deletes an override, so the
    # base's applies
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "layers.py").write_text(textwrap.dedent(LAYERS))
    (pkg / "models.py").write_text(
        textwrap.dedent(
            """
            from transformers import PreTrainedModel
            from pkg.layers import ToyRMSNorm, ToyRotaryEmbedding

            class NamedPreTrainedModel(PreTrainedModel):
                def _init_weights(self, module):
                    PreTrainedModel._init_weights(self, module)

            class NamedModel(NamedPreTrainedModel):
                def __init__(self, config):
                    super().__init__(config)
                    self.norm = ToyRMSNorm(config.hidden_size)

            class Broken(PreTrainedModel):
                def _init_weights(self, module):
                    pass

            class DeletingPreTrainedModel(Broken):
                def _init_weights(self, module):
                    raise AttributeError()

            class DeletingModel(DeletingPreTrainedModel):
                def __init__(self, config):
                    super().__init__(config)
                    self.rope = ToyRotaryEmbedding(config.head_dim)
            """
        )
    )
    # the deleted override falls back to Broken's, which restores nothing: still lost
    got = sorted((d.symbol, d.root) for d in _found(pkg) if d.symbol != "ToyScale")
    assert got == [
        ("ToyRotaryEmbedding", "pkg.models.DeletingModel"),
        ("ToyRotaryEmbedding", "pkg.models.DeletingModel"),
    ]


ENCODER = """
from functools import partial
from torch import nn

def init_linear(module, name=""):
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)

class Encoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.init_weights()

    def init_weights(self):
        self.apply(partial(init_linear))
"""
WRAPPERS = """
from torch import nn
from pkg.encoder import Encoder

class Classifier(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.encoder = Encoder(dim)
        self.head = nn.Linear(dim, 2)

    def init_weights(self):
        self.encoder.init_weights()

class Captioner(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.encoder = Encoder(dim)
        self.decoder = nn.Linear(dim, dim)
"""


def _ml010(pkg, protocol="auto"):
    settings = Settings(root=pkg.parent, select=["ML010"], protocol=protocol)
    found = run_check([pkg], settings, use_cache=False, workers=1).diagnostics
    return sorted((d.symbol, d.protocol, d.root) for d in found)


def test_parent_applied_init_under_the_root_protocol(tmp_path):
    # timm: the applied init inside a model root's own init_weights() is the re-init under
    # that root's protocol; a wrapper whose init_weights() calls the encoder's replays it too
    # (timm's Qwen3VitClassifier); a model that never calls it loses it
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "encoder.py").write_text(textwrap.dedent(ENCODER))
    assert _ml010(pkg) == []
    (pkg / "wrappers.py").write_text(
        textwrap.dedent(WRAPPERS).split("class Captioner")[0].rstrip() + "\n"
    )
    assert _ml010(pkg) == []
    (pkg / "wrappers.py").write_text(textwrap.dedent(WRAPPERS))
    assert _ml010(pkg) == [("Encoder", "reset_parameters", "pkg.wrappers.Captioner")]
    # a repo that materialises per module (FSDP's reset loop) gets the finding back
    assert _ml010(pkg, RESET) == [("Encoder", "reset_parameters", None)]


def test_templates_optional_imports_and_getattr_targets(tmp_path):
    # transformers' modular files are code-generation templates: a template class built from
    # (or extending) a real class is no root of it; a class defined in the `else:` of an
    # optional import is the one the file's models build; `init.copy_(getattr(module, "x"))`
    # writes module.x
    models = tmp_path / "pkg" / "models"
    (models / "toy").mkdir(parents=True)
    for d in (tmp_path / "pkg", models, models / "toy"):
        (d / "__init__.py").write_text("")
    (models / "toy" / "modeling_toy.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn
            from transformers import PreTrainedModel
            from transformers import initialization as init

            if is_fast_norm_available():
                from fast_norm import Norm as ToyNorm
            else:
                class ToyNorm(nn.Module):
                    def __init__(self, dim):
                        super().__init__()
                        self.gamma = nn.Parameter(torch.ones(dim))

            class ToyEmbeddings(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.cls_token = nn.Parameter(torch.randn(1, dim))
                    self.register_buffer("inv_freq", torch.arange(dim).float())

            class ToyPreTrainedModel(PreTrainedModel):
                def _init_weights(self, module):
                    super()._init_weights(module)
                    if isinstance(module, ToyEmbeddings):
                        init.trunc_normal_(module.cls_token, std=0.02)
                        init.copy_(getattr(module, "inv_freq"), torch.arange(4).float())
                    if isinstance(module, ToyNorm):
                        init.ones_(module.gamma)

            class ToyModel(ToyPreTrainedModel):
                def __init__(self, config):
                    super().__init__(config)
                    self.embeddings = ToyEmbeddings(config.hidden_size)
                    self.norm = ToyNorm(config.hidden_size)
            """
        )
    )
    (models / "toy" / "modular_other.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn
            from transformers import PreTrainedModel
            from ..toy.modeling_toy import ToyEmbeddings

            class OtherEmbeddings(ToyEmbeddings):
                def __init__(self, dim):
                    super().__init__(dim)
                    self.extra = nn.Parameter(torch.ones(dim))

            class OtherPreTrainedModel(PreTrainedModel):
                def _init_weights(self, module):
                    super()._init_weights(module)

            class OtherModel(OtherPreTrainedModel):
                def __init__(self, config):
                    super().__init__(config)
                    self.embeddings = ToyEmbeddings(config.hidden_size)
                    self.more = OtherEmbeddings(config.hidden_size)
            """
        )
    )
    found = _found(tmp_path / "pkg")
    got = [(d.filename.rsplit("/", 1)[-1], d.symbol, d.subject, d.root) for d in found]
    # the template's own tensor, lost under the template's own root; nothing on the real classes
    assert got == [
        (
            "modular_other.py",
            "OtherEmbeddings",
            ("extra",),
            "pkg.models.toy.modular_other.OtherModel",
        )
    ]


def test_dispatch_on_a_parent_recreates_its_childs_tensors(tmp_path):
    # transformers' MoE blocks: the dispatch on the block re-creates its router's weight
    # (`init.normal_(module.gate.weight)`); a router the dispatch misses stays reported (ML001
    # for its weight, ML004 for the hook it lacks)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "moe.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn
            from transformers import PreTrainedModel
            from transformers import initialization as init

            class TopKRouter(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.weight = nn.Parameter(torch.zeros(4, dim))

            class GatedLayer(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.dt_bias = nn.Parameter(torch.empty(dim))
                    nn.init.ones_(self.dt_bias)

            class SparseMoeBlock(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.gate = TopKRouter(dim)
                    self.mixer = GatedLayer(dim)

            class MoePreTrainedModel(PreTrainedModel):
                def _init_weights(self, module):
                    super()._init_weights(module)
                    if isinstance(module, SparseMoeBlock):
                        init.normal_(module.gate.weight, std=0.02)
                    if isinstance(module, {handled}):
                        init.ones_(module.dt_bias)

            class MoeModel(MoePreTrainedModel):
                def __init__(self, config):
                    super().__init__(config)
                    self.block = SparseMoeBlock(config.hidden_size)
            """
        )
    )
    src = (pkg / "moe.py").read_text()

    def found(handled):
        (pkg / "moe.py").write_text(src.replace("{handled}", handled))
        settings = Settings(root=tmp_path, select=["ML001", "ML004"])
        diags = run_check([pkg], settings, use_cache=False, workers=1).diagnostics
        return sorted((d.code, d.symbol) for d in diags)

    assert found("GatedLayer") == []
    assert found("nn.Linear") == [("ML004", "GatedLayer")]


def test_parent_applied_init_through_a_helper_in_another_file(tmp_path):
    # timm EfficientNet / MobileNetV3: `efficientnet_init_weights(self)` in __init__, defined
    # in another file, loops over every module; a helper that only reads is not reported
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "builder.py").write_text(
        textwrap.dedent(
            """
            from torch import nn

            def _init_weight_goog(m, n=""):
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight)

            def efficientnet_init_weights(model, init_fn=None):
                init_fn = init_fn or _init_weight_goog
                for n, m in model.named_modules():
                    init_fn(m, n)

            def describe(model):
                for m in model.modules():
                    print(type(m).__name__)
            """
        )
    )
    (pkg / "nets.py").write_text(
        textwrap.dedent(
            """
            from torch import nn
            from pkg.builder import describe, efficientnet_init_weights

            class EfficientNet(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv_stem = nn.Conv2d(3, 8, 3)
                    efficientnet_init_weights(self)

            class Quiet(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv_stem = nn.Conv2d(3, 8, 3)
                    describe(self)
            """
        )
    )
    assert _ml010(pkg) == [("EfficientNet", None, None)]


def test_optional_dependency_fallback_classes_are_children(tmp_path):
    # transformers' xLSTM: `if is_xlstm_available(): from xlstm import RMSNorm as xLSTMRMSNorm;
    # class xLSTMBlock(...): pass` / `else: class xLSTMRMSNorm ...; class xLSTMBlock ...`: the
    # fallback classes (lower-case names, one defined twice) are built inside the model, whose
    # _init_weights restores the norm by class name
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "modeling_x.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn
            from transformers import PreTrainedModel

            if is_fast_available():
                from fast import RMSNorm as xRMSNorm

                class xBlock(nn.Module):
                    pass
            else:
                class xRMSNorm(nn.Module):
                    def __init__(self, dim):
                        super().__init__()
                        self.weight = nn.Parameter(torch.ones(dim))

                class xBlock(nn.Module):
                    def __init__(self, dim):
                        super().__init__()
                        self.norm = xRMSNorm(dim)

            class xPreTrainedModel(PreTrainedModel):
                pass

            class xModel(xPreTrainedModel):
                def __init__(self, config):
                    super().__init__(config)
                    self.block = xBlock(config.hidden_size)
            """
        )
    )
    assert [(d.symbol, d.subject) for d in _found(pkg)] == []
    assert [(d.symbol, d.subject) for d in _found(pkg, RESET)] == [("xRMSNorm", ("weight",))]


SWAPPED = """
import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init

class FrozenBatchNorm2d(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.running_var = nn.Buffer(torch.ones(n))

def freeze(model):
    for name, module in model.named_children():
        if isinstance(module, nn.BatchNorm2d):
            new = FrozenBatchNorm2d(module.num_features)
            model.add_module(name, new)
        freeze(module)

class BackbonePreTrainedModel(PreTrainedModel):
    def _init_weights(self, module):
        super()._init_weights(module)
        if {test}:
            init.ones_(module.running_var)

class Backbone(BackbonePreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.bn = nn.BatchNorm2d(4)

class Encoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        {build}
        freeze({into})
        self.model = backbone

class DetrPreTrainedModel(PreTrainedModel):
    pass

class Detr(DetrPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.encoder = Encoder(config)
"""


@pytest.mark.parametrize(
    ("test", "build", "into", "lost_under"),
    [
        # swapped into a backbone of a known class: its _init_weights is the dispatch
        (
            '"BatchNorm" in module.__class__.__name__',
            "backbone = Backbone(config)",
            "backbone",
            None,
        ),
        ("isinstance(module, nn.Linear)", "backbone = Backbone(config)", "backbone", "Detr"),
        # a backbone from a call that names no class: the dispatch written for swapped-in
        # classes by name, when the tree has one that matches
        ('"BatchNorm" in module.__class__.__name__', "backbone = make(config)", "backbone", None),
        ('"Frozen" == module.__class__.__name__', "backbone = make(config)", "backbone", "Detr"),
        # swapped into the class itself: a plain child, the detector's dispatch
        ('"BatchNorm" in module.__class__.__name__', "backbone = None", "self", "Detr"),
    ],
)
def test_class_swapped_in_by_a_module_level_function(tmp_path, test, build, into, lost_under):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    source = SWAPPED.format(test=test, build=build, into=into)
    (pkg / "detr.py").write_text(textwrap.dedent(source))
    got = [(d.symbol, d.subject, d.root) for d in _found(pkg)]
    expected = (
        []
        if lost_under is None
        else [("FrozenBatchNorm2d", ("running_var",), f"pkg.detr.{lost_under}")]
    )
    assert got == expected
    # judged per module it is lost whatever the dispatch
    assert [d.symbol for d in _found(pkg, RESET)] == ["FrozenBatchNorm2d"]


DISPATCH_IDIOMS = """
import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init

class RelativeAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q = nn.Parameter(torch.ones(dim, dim))
        self.r_bias = nn.Parameter(torch.ones(dim))

class Mixer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.A_log = nn.Parameter(torch.empty(dim))
        self.init_mixer_weights()

    @torch.no_grad()
    def init_mixer_weights(self):
        init.copy_(self.A_log, torch.log(torch.arange(1, self.A_log.shape[0] + 1.0)))
        init.zeros_(self.proj.bias)

class ToyPreTrainedModel(PreTrainedModel):
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, RelativeAttention):
            for param in [{listed}]:
                init.normal_(param, std=0.02)
        elif isinstance(module, Mixer):
            {mixer}

class ToyModel(ToyPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.attn = RelativeAttention(config.hidden_size)
        self.mixer = Mixer(config.hidden_size)
"""


@pytest.mark.parametrize(
    ("listed", "mixer", "lost"),
    [
        # transformers' XLNet: a loop over a list of the module's tensors; Mamba: the
        # dispatch calls the module's own init method
        ("module.q, module.r_bias", "module.init_mixer_weights()", []),
        ("module.q", "module.init_mixer_weights()", [("ML001", "RelativeAttention")]),
        # A_log is lost; proj.bias is re-drawn by the base dispatch with the same zeros_
        ("module.q, module.r_bias", "pass", [("ML003", "Mixer")]),
    ],
)
def test_dispatch_through_a_list_of_tensors_and_the_modules_init_method(
    tmp_path, listed, mixer, lost
):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    source = DISPATCH_IDIOMS.format(listed=listed, mixer=mixer)
    (pkg / "toy.py").write_text(textwrap.dedent(source))
    settings = Settings(root=tmp_path, select=["ML001", "ML003"])
    found = run_check([pkg], settings, use_cache=False, workers=1).diagnostics
    assert sorted((d.code, d.symbol) for d in found) == lost


TABLED = """
import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init

class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.rel_pos = nn.Parameter(torch.zeros(2 * config.size - 1, config.head_dim))

class SdpaAttention(Attention):
    pass

ATTENTION_CLASSES = {{"eager": Attention, "sdpa": SdpaAttention}}

class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = {pick}(config)

class ToyPreTrainedModel(PreTrainedModel):
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, Attention):
            init.zeros_(module.rel_pos)

class ToyModel(ToyPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.layers = nn.ModuleList([Layer(config) for _ in range(config.layers)])
"""


@pytest.mark.parametrize(
    "pick",
    [
        "ATTENTION_CLASSES[config._attn_implementation]",
        'ATTENTION_CLASSES.get(config._attn_implementation, "eager")',
    ],
)
def test_a_class_picked_from_a_module_level_table_is_a_child(tmp_path, pick):
    # transformers' SAM: `self.attn = SAM_VISION_ATTENTION_CLASSES[config._attn_implementation]
    # (config, window_size)`: every class of the table is built inside the model, whose
    # _init_weights zeroes rel_pos; a long table keeps its lines through the elision too
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    source = TABLED.format(pick=pick).replace(
        '{"eager": Attention, "sdpa": SdpaAttention}',
        '{\n    "eager": Attention,\n    "sdpa": SdpaAttention,\n}',
    )
    (pkg / "sam.py").write_text(textwrap.dedent(source))
    assert [(d.symbol, d.subject) for d in _found(pkg)] == []
    per_module = sorted((d.symbol, d.subject) for d in _found(pkg, RESET))
    assert per_module == [("Attention", ("rel_pos",))]


LEVELS = """
import torch
from torch import nn
from torch.nn.init import trunc_normal_

class Level(nn.Module):
    def __init__(self, blocks, dim):
        super().__init__()
        self.pos_embed = nn.Parameter(torch.zeros(1, blocks, dim))
        self.proj = nn.Linear(dim, dim)

class Hierarchical(nn.Module):
    def __init__(self, dims=(8, 16)):
        super().__init__()
        {build}
        self.init_weights()

    def init_weights(self):
        for level in self.levels:
            trunc_normal_(level.{written}, std=0.02, a=-2, b=2)
"""
APPENDED = """levels = []
        for dim in dims:
            levels.append(Level(4, dim))
        self.levels = nn.Sequential(*levels)"""


@pytest.mark.parametrize(
    "build",
    [APPENDED, "self.levels = nn.ModuleList([Level(4, d) for d in dims])"],
)
@pytest.mark.parametrize("written, lost", [("pos_embed", []), ("proj.weight", ["Level"])])
def test_a_root_init_looping_over_a_container_child(tmp_path, build, written, lost):
    # timm Nest: `for level in self.levels: trunc_normal_(level.pos_embed, ...)` in the root's
    # init_weights() re-creates the zeros each Level's __init__ gave pos_embed
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    source = textwrap.dedent(LEVELS).format(build=build, written=written)
    (pkg / "nest.py").write_text(source)
    assert [d.symbol for d in _found(pkg)] == lost
    assert [d.symbol for d in _found(pkg, RESET)] == ["Level"]


SEPARABLE = """
import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init

class SeparableConv(nn.Module):
    def __init__(self, config, channels, kernel_size):
        super().__init__()
        self.depthwise = nn.Conv1d(channels, channels, kernel_size, groups=channels, bias=False)
        self.pointwise = nn.Conv1d(channels, channels, 1, bias=False)
        self.bias = nn.Parameter(torch.zeros(channels, 1))
        self.depthwise.weight.data.normal_(mean=0.0, std=config.initializer_range)
        {pointwise}

class ToyPreTrainedModel(PreTrainedModel):
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, SeparableConv):
            init.zeros_(module.bias)

class ToyModel(ToyPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.conv = SeparableConv(config, config.hidden_size, 3)
"""
#: a base dispatch in the tree, in transformers 5's spelling (the summary of the library's
#: base is used when it is not in the tree)
BASE = """
from torch import nn
from . import initialization as init

class PreTrainedModel(nn.Module):
    def _init_weights(self, module):
        if hasattr(self.config, "initializer_range"):
            std = self.config.initializer_range or 0.02
        elif hasattr(self.config, "init_std"):
            std = self.config.init_std
        else:
            std = 0.02
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            if getattr(module, "weight", None) is not None:
                init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
"""


@pytest.mark.parametrize("base_in_tree", [False, True])
@pytest.mark.parametrize(
    "pointwise, lost",
    [
        # the same law as the base dispatch's re-draw, spelled another way: nothing is lost
        ("init.normal_(self.pointwise.weight, 0.0, config.initializer_range)", []),
        ("nn.init.normal_(self.pointwise.weight, std=config.initializer_range)", []),
        # another std, mean, function or configuration field: the eager build's
        # `post_init()` re-draws them with the dispatch's law after `__init__` too
        ("self.pointwise.weight.data.normal_(mean=0.0, std=2 * config.initializer_range)", []),
        ("self.pointwise.weight.data.normal_(mean=1.0, std=config.initializer_range)", []),
        ("self.pointwise.weight.data.uniform_(0.0, config.initializer_range)", []),
        ("self.pointwise.weight.data.normal_(std=config.init_std)", []),
    ],
)
def test_a_childs_tensor_redrawn_from_the_same_law(tmp_path, base_in_tree, pointwise, lost):
    # transformers ConvBert: SeparableConv1D's __init__ draws its convolutions' weights with
    # normal_(mean=0.0, std=config.initializer_range), which the base _init_weights re-draws
    # for every nn.Conv1d with the same law
    pkg = tmp_path / ("transformers" if base_in_tree else "pkg")
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    source = textwrap.dedent(SEPARABLE).format(pointwise=pointwise)
    if base_in_tree:
        (pkg / "modeling_utils.py").write_text(textwrap.dedent(BASE))
        source = source.replace("from transformers import PreTrainedModel", "")
        source = "from transformers.modeling_utils import PreTrainedModel\n" + source
    (pkg / "modeling_toy.py").write_text(source)
    settings = Settings(root=tmp_path, select=["ML003"])
    found = run_check([pkg], settings, use_cache=False, workers=1).diagnostics
    got = [(d.symbol, d.subject) for d in found]
    assert got == ([("SeparableConv", ("pointwise.weight",))] if lost else [])
    per_module = Settings(root=tmp_path, select=["ML003"], protocol=RESET)
    assert len(run_check([pkg], per_module, use_cache=False, workers=1).diagnostics) == 2


NORM_LINEAR = """
from functools import partial
import torch
from torch import nn
from timm.layers import trunc_normal_

class NormLinear(nn.Sequential):
    def __init__(self, in_features, out_features, bias=True, std=0.02, device=None, dtype=None):
        dd = {{"device": device, "dtype": dtype}}
        super().__init__()
        self.add_module("bn", nn.BatchNorm1d(in_features, **dd))
        self.add_module("l", nn.Linear(in_features, out_features, bias=bias, **dd))
        trunc_normal_(self.l.weight, std=std)
        if bias:
            nn.init.constant_(self.l.bias, 0)

class Net(nn.Module):
    def __init__(self, dim, classes, device=None, dtype=None):
        super().__init__()
        dd = {{"device": device, "dtype": dtype}}
        self.head = NormLinear(dim, classes, {head}**dd)
        self.init_weights(needs_reset=False)

    def init_weights(self, needs_reset=True):
        self.apply(partial(self._init_weights, needs_reset=needs_reset))

    def _init_weights(self, m, needs_reset=True):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            trunc_normal_(m.weight, std={root_std})
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif needs_reset and hasattr(m, "reset_parameters"):
            m.reset_parameters()
"""


@pytest.mark.parametrize(
    "head, root_std, lost",
    [
        ("", "0.02", []),  # timm iformer: the root re-draws the Linear as NormLinear did
        ("", ".02", []),
        ("", "0.01", ["l.weight"]),  # another std
        ("std=0.5, ", "0.02", ["l.weight"]),  # a caller gives NormLinear another std
        ("True, 0.5, ", "0.02", ["l.weight"]),  # by position
    ],
)
def test_add_module_children_redrawn_by_the_root(tmp_path, head, root_std, lost):
    # timm iformer's NormLinear registers its children with self.add_module("l", ...)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    source = textwrap.dedent(NORM_LINEAR).format(head=head, root_std=root_std)
    (pkg / "iformer.py").write_text(source)
    settings = Settings(root=tmp_path, select=["ML003"])
    found = run_check([pkg], settings, use_cache=False, workers=1).diagnostics
    assert [s for d in found for s in d.subject] == lost


LIST_FILLS = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, depth, act=lambda: levels.append(Odd())):
        super().__init__()
        levels = [Stem()]
        for i in range(depth):
            levels.append(Level(i))
            def extra():
                levels.extend([Helper()])
        levels += [Head()]
        blocks, other = [], None
        self.levels = nn.Sequential(*levels)

    def forward(self, x):
        levels.append(Never())

class WithLocal(nn.Module):
    def __init__(self):
        super().__init__()
        levels = []
        class Local:
            def make(self):
                levels.insert(0, Hidden())
        self.levels = nn.Sequential(*levels)
"""


def _walked_fills(method):
    """:func:`_list_fills` as a walk of the method's body reads it (before the collector
    recorded what it needs): name -> ids of the values."""
    import libcst as cst

    from metalint.static.names import dotted
    from metalint.static.syntax import walk_code

    out: dict = {}
    for node in walk_code(method.node.body):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value in ("append", "extend", "insert") and node.args:
                out.setdefault(dotted(node.func.value), set()).add(id(node.args[-1].value))
        elif isinstance(node, (cst.Assign, cst.AugAssign)):
            targets = node.targets if isinstance(node, cst.Assign) else [node]
            for name in {dotted(t.target) for t in targets}:
                out.setdefault(name, set()).add(id(node.value))
    return out


@pytest.mark.parametrize("elided", [True, False])
def test_list_fills_are_what_a_walk_of_the_body_finds(elided):
    """The collector's record of a method's calls and assignments gives the same list fills
    as a walk of its body: not a call in a parameter's default, and (by a walk) what a class
    nested in the body or a method the collector skips holds."""
    import ast as pyast

    from metalint.static.composition import _list_fills
    from metalint.static.elide import elide
    from metalint.static.model import collect
    from metalint.static.rule import RuleContext
    from metalint.static.syntax import parse_valid_module

    source = elide(LIST_FILLS, pyast.parse(LIST_FILLS), ()) if elided else LIST_FILLS
    module = parse_valid_module(source)
    facts = collect(module, "pkg.net")
    ctx = RuleContext(facts, module, (), "net.py", LIST_FILLS)
    for cls in facts.classes[:2]:
        for method in cls.methods.values():
            got = {k: {id(v) for v in vs} for k, vs in _list_fills(method, ctx).items()}
            assert got == _walked_fills(method), (cls.name, method.name)
    net, local = facts.classes[0].methods["__init__"], facts.classes[1].methods["__init__"]
    assert net.body_calls is not None and not net.nested_class  # read from the collector
    assert len(_list_fills(net, ctx)["levels"]) == 4  # Stem, Level, Helper, Head; not Odd
    assert local.nested_class and len(_list_fills(local, ctx)["levels"]) == 2  # [], Hidden


# -- a module-level partial of a class constructs that class (x-transformers' LinearNoBias) --
PARTIAL_LAYERS = """
from functools import partial
import torch
from torch import nn

class Scale(nn.Module):
    def __init__(self, dim, init_value=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(init_value * torch.ones(dim))

SmallScale = partial(Scale, init_value=1e-6)
"""
# no torch word: CPython's tree reads this file's exports (the libcst parse is skipped)
PARTIAL_REEXPORT = """
import functools as ft
from pkg.layers import Scale
TinyScale = ft.partial(Scale, init_value=1e-7)
PinnedScale = ft.partial(Scale, 8)
"""
PARTIAL_MODEL = """
from torch import nn
from pkg.layers import SmallScale
from pkg.aliases import TinyScale, PinnedScale

class {name}(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = {alias}(dim)
        self.head = nn.Linear(dim, dim)

    def init_weights(self):
        nn.init.zeros_(self.head.weight)
"""


@pytest.mark.parametrize(
    "alias, root",
    [
        ("SmallScale", "pkg.model.Net"),  # a partial in the file that defines the class
        ("TinyScale", "pkg.model.Net"),  # `functools.partial` under an alias, another file
        ("PinnedScale", None),  # a positional argument: not known to build the class
    ],
)
def test_a_partial_of_a_class_is_a_child_of_the_class_that_calls_it(tmp_path, alias, root):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "layers.py").write_text(textwrap.dedent(PARTIAL_LAYERS))
    (pkg / "aliases.py").write_text(textwrap.dedent(PARTIAL_REEXPORT))
    (pkg / "model.py").write_text(textwrap.dedent(PARTIAL_MODEL).format(name="Net", alias=alias))
    got = [(d.symbol, d.protocol, d.root) for d in _found(pkg) if d.symbol == "Scale"]
    # judged under the root that builds it (whose `init_weights()` does not re-create the
    # gamma); a class no root is known to build is judged on its own
    assert got == [("Scale", "root init_weights" if root else RESET, root)]


STRUCTURE = """
import math
import torch
from torch import nn
"""


@pytest.mark.parametrize(
    "test, structure",
    [
        ("isinstance(self.conv_proj, nn.Conv2d)", True),
        (
            "self.conv_proj.conv_last is not None and isinstance(self.conv_proj.conv_last, nn.Conv2d)",
            True,
        ),
        ("self.conv_proj.bias is None", True),
        (
            'hasattr(self.heads, "pre_logits") and not isinstance(self.heads.pre_logits, nn.Linear)',
            True,
        ),
        ('getattr(self.heads, "head", None) is not None', True),
        ('"Norm" in self.norm.__class__.__name__', True),
        ("self.use_bias", False),  # the truth of a value (a tensor's, maybe)
        ("self.proj.weight.sum() > 0", False),
        ("self.scale > 0", False),
        ("isinstance(x, nn.Conv2d)", False),  # not the module's structure
    ],
)
def test_structure_test_is_the_hook_conditions_answer(test, structure):
    """torchvision VisionTransformer: the tests its __init__ puts around its children's init
    are read as the init hooks' conditions are (`_condition`); a test of a value is not."""
    import libcst as cst

    from metalint.static.model import collect
    from metalint.static.protocol import structure_test
    from metalint.static.rule import RuleContext
    from metalint.static.syntax import parse_valid_module

    module = parse_valid_module(STRUCTURE)
    ctx = RuleContext(collect(module, "pkg.vit"), module, (), "vit.py", STRUCTURE)
    assert structure_test(cst.parse_expression(test), ctx) is structure


@pytest.mark.parametrize(
    "value, structure",
    [
        (
            "self.conv_proj.in_channels * self.conv_proj.kernel_size[0] * self.conv_proj.kernel_size[1]",
            True,
        ),
        ("math.sqrt(2.0 / self.conv_proj.conv_last.out_channels)", True),
        ("self.heads.pre_logits.in_features", True),
        ("self.proj.weight.abs().max()", False),
        ("self.proj.bias", False),
        ("self.proj.weight.data", False),
        ("self.hidden_dim", False),  # an attribute of the module itself: a plain tensor, maybe
        ("torch.tensor(3.0)", False),
    ],
)
def test_structure_value_reads_only_the_childrens_configuration(value, structure):
    import libcst as cst

    from metalint.static.model import collect
    from metalint.static.protocol import structure_value
    from metalint.static.rule import RuleContext
    from metalint.static.syntax import parse_valid_module

    module = parse_valid_module(STRUCTURE)
    ctx = RuleContext(collect(module, "pkg.vit"), module, (), "vit.py", STRUCTURE)
    assert structure_value(cst.parse_expression(value), ctx) is structure
