"""Modules and the hooks that materialise them after ``to_empty()``, as data (the one answer:
the static rules, the probe and the loader read these through :mod:`metalint.vocabulary`):
torch.nn's per-module reset, a model root's entry points and protocols, the nn.Module API,
norm layers, and what loads a checkpoint."""

from __future__ import annotations

#: torch.nn's per-module re-initialisation, run on every module that has it, children first
RESET_HOOK = "reset_parameters"
#: functions that re-parametrise a layer's weight from its current value: the new parameters
#: (``original0``/``original1`` = g/v of weight norm, ``weight_g``/``weight_v`` of the old
#: hook-based one, spectral norm's ``original`` and its ``_u``/``_v`` vectors) are computed from
#: the init ``__init__`` gave the weight; the layer's ``reset_parameters()`` writes the computed
#: ``weight`` and never reaches them
WEIGHT_REPARAMETRIZATIONS = frozenset(
    {
        "torch.nn.utils.weight_norm",
        "torch.nn.utils.weight_norm.weight_norm",
        "torch.nn.utils.spectral_norm",
        "torch.nn.utils.spectral_norm.spectral_norm",
        "torch.nn.utils.parametrizations.weight_norm",
        "torch.nn.utils.parametrizations.spectral_norm",
        "torch.nn.utils.parametrizations.orthogonal",
        "torch.nn.utils.parametrize.register_parametrization",
    }
)
#: ``torch.nn.Module``'s method that ``to()``/``to_empty()`` map over tensors; ``to_empty()``
#: passes it ``recurse=`` (torch 2.1 and later)
APPLY_METHOD = "_apply"
#: timm's per-module hook that re-creates non-persistent buffers, run after every reset
BUFFER_HOOK = "init_non_persistent_buffers"
#: private per-module resets a class calls from its own ``__init__`` (``nn.MultiheadAttention``'s
#: ``_reset_parameters``): no init protocol calls them after ``to_empty``, so they do not count
#: as a hook for the rules and the probe; the loader still tries them as a last resort
PRIVATE_RESETS = ("_reset_parameters",)
#: per-module hooks the loader's ``init="auto"`` tries, in this order, on the nearest module
#: that has one
MODULE_HOOKS = (RESET_HOOK, BUFFER_HOOK, *PRIVATE_RESETS)
#: a model root's entry point, run once on the root after every module's own hooks
#: (timm/torchtitan ``init_weights``, torchtitan ``init_states``)
ROOT_ENTRIES = ("init_weights", "init_states")
#: transformers' per-module init, applied to every module by the root (``_init_weights(m)``)
APPLIED_INIT = "_init_weights"
#: the names a class may use to re-create its tensors after ``to_empty``
DEFAULT_HOOKS = (RESET_HOOK, ROOT_ENTRIES[0], APPLIED_INIT, BUFFER_HOOK)
#: public hooks that re-initialise a module after ``to_empty`` (rule ML004 looks for these)
PUBLIC_HOOKS = (RESET_HOOK, ROOT_ENTRIES[0], BUFFER_HOOK)
#: methods whose bodies the collector does not walk: they run after construction
SKIPPED_METHOD_PREFIXES = ("forward", "extra_repr", "__repr__", "_forward")
#: calls an applied function may make and still be only "each module's own reset"
RESET_ONLY_CALLS = frozenset({"reset_parameters", "hasattr", "getattr", "callable", "isinstance"})
#: what ``torch.nn.Module`` itself defines (its methods, ``training`` and the dicts ``__init__``
#: makes): a fix keeping a local on ``self`` never takes these names (torchani's
#: ``ANINetworks(modules)``: ``self.modules = modules`` shadowed ``Module.modules()``)
MODULE_MEMBERS = frozenset(
    """add_module apply bfloat16 buffers call_super_init children compile cpu cuda double
    dump_patches eval extra_repr float forward get_buffer get_extra_state get_parameter
    get_submodule half ipu load_state_dict modules mtia named_buffers named_children
    named_modules named_parameters parameters register_backward_hook register_buffer
    register_forward_hook register_forward_pre_hook register_full_backward_hook
    register_full_backward_pre_hook register_load_state_dict_post_hook
    register_load_state_dict_pre_hook register_module register_parameter
    register_state_dict_post_hook register_state_dict_pre_hook requires_grad_ set_extra_state
    set_submodule share_memory state_dict to to_empty train type xpu zero_grad training
    _parameters _buffers _modules _non_persistent_buffers_set _version""".split()
)
MODULE_API = ("register_buffer", "register_parameter", "register_module", "add_module", "apply")
#: ``nn.Module`` methods that read or write every tensor of the module: a hook ``__init__`` calls
#: after one of them no longer runs where the values were made (peft's
#: ``MultitaskPromptEmbedding`` loads a checkpoint with ``self.load_state_dict(...)`` after
#: drawing its parameters; a hook called at the end would draw over it)
WHOLE_MODULE_METHODS = frozenset(
    {
        "load_state_dict",
        "state_dict",
        "to",
        "to_empty",
        "cuda",
        "cpu",
        "half",
        "float",
        "double",
        "bfloat16",
        "type",
        "apply",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
    }
)
#: torch.nn layers whose own ``reset_parameters()`` sets ``weight`` to ones and ``bias`` to zeros
NORM_LAYERS = frozenset(
    f"torch.nn.{n}"
    for n in (
        "BatchNorm1d",
        "BatchNorm2d",
        "BatchNorm3d",
        "SyncBatchNorm",
        "LayerNorm",
        "GroupNorm",
        "InstanceNorm1d",
        "InstanceNorm2d",
        "InstanceNorm3d",
        "RMSNorm",
        "LazyBatchNorm1d",
        "LazyBatchNorm2d",
        "LazyBatchNorm3d",
    )
)
#: ``isinstance(m, T)`` with one of these covers every BatchNorm
BATCH_NORM_BASES = frozenset(
    {"torch.nn.modules.batchnorm._BatchNorm", "torch.nn.modules.batchnorm._NormBase"}
)
BATCH_NORMS = frozenset(
    {
        *(f"torch.nn.{n}" for n in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")),
        *BATCH_NORM_BASES,
    }
)
IDENTITY_OPERANDS = {"mul_": 1.0, "div_": 1.0, "add_": 0.0, "sub_": 0.0}
#: ``for p in self.parameters()`` visits the children's tensors too
PARAMETER_ITERATORS = frozenset({"parameters", "named_parameters"})
NORM_INIT_FUNCTIONS = ("ones_", "zeros_", "zero_", "constant_", "fill_")
RECURSIVE_TENSOR_ITERATORS = ("parameters", "named_parameters", "buffers", "named_buffers")
#: methods that re-do a tie after materialisation; ``tie_weights`` is what transformers'
#: ``from_pretrained`` and accelerate's ``load_checkpoint_and_dispatch`` call
TIE_HOOKS = ("tie_weights",)
#: bases outside the checked tree known to provide ``tie_weights``
TIE_BASES = ("transformers.PreTrainedModel", "transformers.modeling_utils.PreTrainedModel")
#: ``[tool.metalint] protocol``: how a repo materialises its models (metalint.static.protocol);
#: any other identifier names the repo's own root entry method
#: ``[tool.metalint] protocol``: ``init_weights-only`` is the root's entry point and nothing
#: else after ``to_empty()`` (torchtitan's training scripts), see :mod:`metalint.static.pipeline`
ROOT_ONLY_PROTOCOL = "init_weights-only"
PROTOCOLS = ("auto", "transformers", "init_weights", ROOT_ONLY_PROTOCOL, "reset_parameters")
#: context managers that build a model's parameters (not its buffers, unless
#: ``include_buffers=True``) on the meta device
PARAMS_ONLY_META_CONTEXTS = frozenset(
    {"accelerate.init_empty_weights", "accelerate.big_modeling.init_empty_weights"}
)
#: torch's norm layers -> their parameters, each with the keywords whose False leaves it out
#: (``nn.LayerNorm(d, bias=False)``): values (ones, zeros) only the layer's own hook restores
#: after ``to_empty()`` (see ``metalint.static.pipeline``)
AFFINE_NORMS = {
    "torch.nn.LayerNorm": {
        "weight": ("elementwise_affine",),
        "bias": ("elementwise_affine", "bias"),
    },
    "torch.nn.RMSNorm": {"weight": ("elementwise_affine",)},
    **{
        f"torch.nn.{n}": {"weight": ("affine",), "bias": ("affine",)}
        for n in ("GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")
    },
}
#: torch modules whose own ``reset_parameters()`` (``reset_running_stats()``) sets these
#: buffers, with what it sets: a subclass that registers one again with the same value keeps it
BASE_RESET_BUFFERS = {
    f"torch.nn.{n}": {
        "running_mean": "zeros",
        "running_var": "ones",
        "num_batches_tracked": "zeros",
    }
    for n in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")
}
#: Lightning's ``fabric.init_module(empty_init=True)`` / ``trainer.init_module(...)``
EMPTY_INIT_CONTEXTS = ("init_module",)
#: wrappers that materialise a meta model by each module's ``reset_parameters()`` (or their
#: ``param_init_fn``): FSDP1
SHARDING_WRAPPERS_WITH_INIT = frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    }
)
#: ``nn.Module`` methods a script calls on a model that initialise nothing (a call of any
#: other method of the model may be the library's initialiser: ``model.setup_weights()``)
NOT_INITIALISERS = frozenset(
    {
        "to",
        "cuda",
        "cpu",
        "half",
        "float",
        "double",
        "bfloat16",
        "type",
        "train",
        "eval",
        "requires_grad_",
        "zero_grad",
        "forward",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "modules",
        "named_modules",
        "children",
        "named_children",
        "state_dict",
        "register_buffer",
        "register_parameter",
        "register_module",
        "add_module",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "compile",
        "share_memory",
        "extra_repr",
        "get_submodule",
        "get_parameter",
        "get_buffer",
    }
)
#: the libraries whose functions a script hands a model to (``fully_shard(model)``,
#: ``torch.compile(model)``): none of them is the model's own init
LIBRARY_PREFIXES = (
    "torch.",
    "accelerate.",
    "transformers.",
    "lightning.",
    "pytorch_lightning.",
    "deepspeed.",
    "safetensors.",
    "peft.",
)
#: functions that load a whole checkpoint into the model passed first: every persistent
#: parameter and buffer comes from it
CHECKPOINT_LOADERS = frozenset(
    {
        "accelerate.load_checkpoint_and_dispatch",
        "accelerate.load_checkpoint_in_model",
        "accelerate.utils.load_checkpoint_in_model",
        "safetensors.torch.load_model",
        "torch.distributed.checkpoint.state_dict.set_model_state_dict",
    }
)
#: their last names, matched however they were imported
CHECKPOINT_LOADER_NAMES = frozenset(
    {"load_checkpoint_and_dispatch", "load_checkpoint_in_model", "set_model_state_dict"}
)
#: modules that are code-generation templates, never imported at run time: transformers'
#: ``modular_<model>.py`` (the ``modeling_<model>.py`` generated from it is what runs)
TEMPLATE_MODULE_PREFIXES = ("modular_",)
