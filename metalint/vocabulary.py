"""The torch vocabulary metalint knows, as data: factories, in-place init functions and
methods, norm layers, devices, reset hooks. Every rule, codemod and probe reads its names
here; nothing here imports torch or libcst."""

from __future__ import annotations

# modules and the hooks that materialise them live in metalint/hooks.py; read them here
from metalint.hooks import AFFINE_NORMS as AFFINE_NORMS
from metalint.hooks import APPLIED_INIT as APPLIED_INIT
from metalint.hooks import APPLY_METHOD as APPLY_METHOD
from metalint.hooks import BASE_RESET_BUFFERS as BASE_RESET_BUFFERS
from metalint.hooks import BATCH_NORM_BASES as BATCH_NORM_BASES
from metalint.hooks import BATCH_NORMS as BATCH_NORMS
from metalint.hooks import BUFFER_HOOK as BUFFER_HOOK
from metalint.hooks import CHECKPOINT_LOADER_NAMES as CHECKPOINT_LOADER_NAMES
from metalint.hooks import CHECKPOINT_LOADERS as CHECKPOINT_LOADERS
from metalint.hooks import DEFAULT_HOOKS as DEFAULT_HOOKS
from metalint.hooks import EMPTY_INIT_CONTEXTS as EMPTY_INIT_CONTEXTS
from metalint.hooks import IDENTITY_OPERANDS as IDENTITY_OPERANDS
from metalint.hooks import LIBRARY_PREFIXES as LIBRARY_PREFIXES
from metalint.hooks import MODULE_API as MODULE_API
from metalint.hooks import MODULE_HOOKS as MODULE_HOOKS
from metalint.hooks import MODULE_MEMBERS as MODULE_MEMBERS
from metalint.hooks import NORM_INIT_FUNCTIONS as NORM_INIT_FUNCTIONS
from metalint.hooks import NORM_LAYERS as NORM_LAYERS
from metalint.hooks import NOT_INITIALISERS as NOT_INITIALISERS
from metalint.hooks import PARAMETER_ITERATORS as PARAMETER_ITERATORS
from metalint.hooks import PARAMS_ONLY_META_CONTEXTS as PARAMS_ONLY_META_CONTEXTS
from metalint.hooks import PRIVATE_RESETS as PRIVATE_RESETS
from metalint.hooks import PROTOCOLS as PROTOCOLS
from metalint.hooks import PUBLIC_HOOKS as PUBLIC_HOOKS
from metalint.hooks import RECURSIVE_TENSOR_ITERATORS as RECURSIVE_TENSOR_ITERATORS
from metalint.hooks import RESET_HOOK as RESET_HOOK
from metalint.hooks import RESET_ONLY_CALLS as RESET_ONLY_CALLS
from metalint.hooks import ROOT_ENTRIES as ROOT_ENTRIES
from metalint.hooks import ROOT_ONLY_PROTOCOL as ROOT_ONLY_PROTOCOL
from metalint.hooks import SHARDING_WRAPPERS_WITH_INIT as SHARDING_WRAPPERS_WITH_INIT
from metalint.hooks import SKIPPED_METHOD_PREFIXES as SKIPPED_METHOD_PREFIXES
from metalint.hooks import TEMPLATE_MODULE_PREFIXES as TEMPLATE_MODULE_PREFIXES
from metalint.hooks import TIE_BASES as TIE_BASES
from metalint.hooks import TIE_HOOKS as TIE_HOOKS
from metalint.hooks import WEIGHT_REPARAMETRIZATIONS as WEIGHT_REPARAMETRIZATIONS
from metalint.hooks import WHOLE_MODULE_METHODS as WHOLE_MODULE_METHODS

EMPTY_FACTORIES = frozenset({"torch.empty", "torch.empty_like", "torch.empty_strided"})
RANDOM_FACTORIES = frozenset(
    {
        "torch.rand",
        "torch.randn",
        "torch.randint",
        "torch.randperm",
        "torch.normal",
        "torch.rand_like",
        "torch.randn_like",
        "torch.randint_like",
        "torch.bernoulli",
        "torch.multinomial",
    }
)
#: modules whose functions draw from a host random generator (numpy's global one, Python's):
#: code that calls one again draws other numbers, as a torch draw would
HOST_RANDOM_MODULES = ("numpy.random.", "random.")
#: window functions: ``torch.hann_window(n)`` and ``torch.signal.windows.hann(n)``
WINDOW_FACTORIES = (
    "torch.hann_window",
    "torch.hamming_window",
    "torch.blackman_window",
    "torch.bartlett_window",
    "torch.kaiser_window",
    *(
        f"torch.signal.windows.{w}"
        for w in (
            "bartlett",
            "blackman",
            "cosine",
            "exponential",
            "gaussian",
            "general_cosine",
            "general_hamming",
            "hamming",
            "hann",
            "kaiser",
            "nuttall",
        )
    ),
)
#: factories of a constant that take ``device=`` (no random draw, no uninitialised memory):
#: a constant read during construction can be made with ``device="cpu"`` (ML008's fix)
CONSTANT_FACTORIES = frozenset(
    {
        "torch.zeros",
        "torch.ones",
        "torch.full",
        "torch.zeros_like",
        "torch.ones_like",
        "torch.full_like",
        "torch.tensor",
        "torch.as_tensor",
        "torch.arange",
        "torch.range",
        "torch.linspace",
        "torch.logspace",
        "torch.eye",
        # constant windows and index tables (an audio front end's STFT window, attention
        # position indices): values, never random
        *WINDOW_FACTORIES,
        "torch.tril_indices",
        "torch.triu_indices",
    }
)
#: calls whose result is a value computed from their arguments: the constants above, and
#: tensors made from other data (numpy, legacy constructors, other tensors)
VALUE_FACTORIES = CONSTANT_FACTORIES | {
    "torch.from_numpy",
    "torch.tril",
    "torch.triu",
    "torch.Tensor",
    "torch.FloatTensor",
    "torch.LongTensor",
    "torch.IntTensor",
    "torch.BoolTensor",
    "torch.HalfTensor",
    "torch.DoubleTensor",
    "torch.ByteTensor",
    "torch.polar",
    "torch.complex",
    "torch.meshgrid",
    "torch.outer",
    "torch.stack",
    "torch.cat",
    "torch.scalar_tensor",
    "torch.asarray",
}
#: factories that take ``device=`` and make a new tensor from sizes or data (not ``*_like``)
DEVICE_FACTORIES = frozenset(
    q for q in CONSTANT_FACTORIES | RANDOM_FACTORIES | EMPTY_FACTORIES if not q.endswith("_like")
)
#: random factories that sample a tensor's values (``torch.normal(mean, std)``): the new
#: tensor is where the tensor read is
SAMPLERS = frozenset({"torch.normal", "torch.bernoulli", "torch.multinomial"})
#: every torch factory that makes a new tensor whatever it reads (on meta under the device
#: context unless given a real device)
TENSOR_FACTORIES = EMPTY_FACTORIES | VALUE_FACTORIES | RANDOM_FACTORIES
#: methods of a Python list, dict or set that change it in place (``kernels.append(k)``): the
#: local they are called on is written, as ``x[0] = ..`` writes it (``sort``: only as a bare
#: statement, its value dropped; a tensor's ``x.sort()`` makes a new one)
CONTAINER_MUTATORS = frozenset(
    {"append", "extend", "insert", "remove", "pop", "clear", "reverse", "update", "setdefault"}
    | {"popitem", "discard"}
)
#: in-place tensor methods that set values
INPLACE_METHODS = frozenset(
    {
        "normal_",
        "uniform_",
        "fill_",
        "zero_",
        "copy_",
        "constant_",
        "trunc_normal_",
        "bernoulli_",
        "exponential_",
        "random_",
        "geometric_",
        "cauchy_",
        "log_normal_",
        "fill_diagonal_",
        "clamp_",
        "mul_",
        "add_",
        "div_",
        "sub_",
        "renorm_",
        "abs_",
        "neg_",
        "exp_",
        "log_",
        "pow_",
        "sqrt_",
        "clamp_min_",
        "clamp_max_",
        "masked_fill_",
        "index_fill_",
        "scatter_",
        "set_",
    }
)
#: legacy constructors: ``torch.Tensor(3, 4)`` allocates CPU memory even under ``meta``
LEGACY_CONSTRUCTORS = frozenset(
    {
        "torch.Tensor",
        "torch.FloatTensor",
        "torch.DoubleTensor",
        "torch.HalfTensor",
        "torch.BFloat16Tensor",
        "torch.LongTensor",
        "torch.IntTensor",
        "torch.ShortTensor",
        "torch.CharTensor",
        "torch.ByteTensor",
        "torch.BoolTensor",
        "torch.cuda.FloatTensor",
        "torch.cuda.LongTensor",
        "torch.cuda.HalfTensor",
    }
)
#: ``nn.Buffer(t)`` (torch >= 2.5) registers a buffer when assigned to a module attribute
BUFFER_CLASSES = frozenset({"torch.nn.Buffer"})
PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.UninitializedParameter"})
#: ``LinearNoBias = partial(nn.Linear, bias=False)`` at module level: a call of the name
#: constructs the class (x-transformers), when the partial binds only keywords
PARTIAL_FUNCTIONS = frozenset({"functools.partial"})
#: keywords a partial may bind and still construct "that class" as a call site reads it:
#: one binding these (``partial(nn.Linear, device="cpu")``) hides where the module is made
PARTIAL_HIDDEN_KEYWORDS = frozenset({"device", "dtype"})
#: torch functions that return a tensor computed from tensors (for "is this clearly a tensor")
TENSOR_FUNCTIONS = frozenset(
    {
        "torch.exp",
        "torch.log",
        "torch.sin",
        "torch.cos",
        "torch.sqrt",
        "torch.rsqrt",
        "torch.pow",
        "torch.cumsum",
        "torch.cumprod",
        "torch.einsum",
        "torch.matmul",
        "torch.mm",
        "torch.bmm",
        "torch.where",
        "torch.flatten",
        "torch.reshape",
        "torch.view_as_real",
        "torch.view_as_complex",
        "torch.clamp",
        "torch.abs",
        "torch.sigmoid",
        "torch.tanh",
        "torch.softmax",
        "torch.ones_like",
        "torch.zeros_like",
        "torch.repeat_interleave",
        "torch.roll",
        "torch.flip",
        "torch.diag",
        "torch.triu_indices",
        "torch.tril_indices",
        "torch.bucketize",
        "torch.nn.functional.pad",
        "torch.nn.functional.normalize",
        "torch.nn.functional.one_hot",
    }
)
#: torch functions whose input (first argument) must be a tensor: a number raises TypeError
TENSOR_INPUT_FUNCTIONS = frozenset(
    {
        "torch.exp",
        "torch.log",
        "torch.sin",
        "torch.cos",
        "torch.sqrt",
        "torch.rsqrt",
        "torch.cumsum",
        "torch.cumprod",
        "torch.flatten",
        "torch.clamp",
        "torch.abs",
        "torch.sigmoid",
        "torch.tanh",
        "torch.flip",
        "torch.diag",
        "torch.ones_like",
        "torch.zeros_like",
    }
)
#: methods that convert a tensor (dtype, device, layout, autograd) and keep its value:
#: value-neutral for "is it computed?"
CONVERSION_METHODS = frozenset(
    {
        "to",
        "float",
        "double",
        "half",
        "bfloat16",
        "long",
        "int",
        "bool",
        "type",
        "type_as",
        "contiguous",
        "detach",
        "requires_grad_",
        "cpu",
        "cuda",
    }
)
#: methods that keep "this is a tensor" (``t.float()``, ``t.to(dtype)``, ``t[None]``...)
TENSOR_METHODS = CONVERSION_METHODS | frozenset(
    {
        "clone",
        "view",
        "reshape",
        "unsqueeze",
        "squeeze",
        "expand",
        "repeat",
        "flatten",
        "permute",
        "transpose",
        "t",
        "sum",
        "mean",
        "exp",
        "log",
        "sin",
        "cos",
        "pow",
        "sqrt",
        "cumsum",
        "masked_fill",
        "fill_",
        "zero_",
        "normal_",
        "uniform_",
        "triu",
        "tril",
        "neg",
        "abs",
        "outer",
        "matmul",
        "reciprocal",
        "stack",
    }
)
#: real devices, as written in source
REAL_DEVICES = ("cpu", "cuda", "mps", "xpu", "npu", "hpu")
#: tensor methods that copy a tensor to a device: of a tensor built on meta they raise
DEVICE_COPY_METHODS = frozenset({"cpu", "cuda", "to"})
#: in-place draws from a distribution: ``normal_``, ``uniform_`` and the ones whose names end
#: in them (``log_normal_``, ``trunc_normal_``)
RANDOM_DRAWS = ("normal_", "uniform_")
#: in-place inits that set every element of a new tensor (``torch.empty(n).normal_()``)
CHAINED_INITS = (*RANDOM_DRAWS, "zero_", "fill_")
#: the in-place draw that gives a random factory's values under the same seed
FACTORY_DRAWS = {"torch.randn": "normal_", "torch.rand": "uniform_"}
#: factories that set every element to one value: ``"const"`` is ``torch.full``'s fill value
FILL_FACTORIES = {
    "torch.ones": "ones",
    "torch.ones_like": "ones",
    "torch.zeros": "zeros",
    "torch.zeros_like": "zeros",
    "torch.full": "const",
    "torch.full_like": "const",
}
#: the law of ``torch.nn.init.zeros_(t)`` (and ``t.zero_()``) as ``init_law`` writes it
ZEROS_LAW = "torch.nn.init.zeros_()"
#: calls joining tensors end to end: every element comes from one of their inputs
CONCATENATIONS = ("torch.cat", "torch.concat", "torch.concatenate")
#: factories whose first argument is the size (``torch.tensor``: the data), so that ``0`` or
#: ``[]`` there reads as a tensor with no elements (ML004)
SIZE_FIRST_FACTORIES = ("torch.empty", "torch.zeros", "torch.ones", "torch.tensor")
INIT_KIND = {
    "ones_": "ones",
    "zeros_": "zeros",
    "zero_": "zeros",
    "constant_": "const",
    "fill_": "const",
    "eye_": "eye",
    "dirac_": "dirac",
    "orthogonal_": "random",
    "normal_": "random",
    "uniform_": "random",
    "trunc_normal_": "random",
    "trunc_normal_tf_": "random",
    "xavier_uniform_": "random",
    "xavier_normal_": "random",
    "kaiming_uniform_": "random",
    "kaiming_normal_": "random",
    "sparse_": "random",
    "lecun_normal_": "random",
    "variance_scaling_": "random",
}
#: init functions of other libraries that write a tensor argument in place without the
#: trailing underscore: qualified name -> (position of the written tensor, of the fill value
#: or None, what the values become). PyG's ``torch_geometric.nn.inits`` (``glorot(self.weight)``,
#: ``zeros(self.bias)``), used by every library built on PyG: checked without PyG in the tree
#: (a user's model repository), what these calls write is otherwise unknown
LIBRARY_INITS = {
    "torch_geometric.nn.inits.glorot": (0, None, "random"),
    "torch_geometric.nn.inits.glorot_orthogonal": (0, None, "random"),
    "torch_geometric.nn.inits.kaiming_uniform": (0, None, "random"),
    "torch_geometric.nn.inits.uniform": (1, None, "random"),
    "torch_geometric.nn.inits.normal": (0, None, "random"),
    "torch_geometric.nn.inits.zeros": (0, None, "zeros"),
    "torch_geometric.nn.inits.ones": (0, None, "ones"),
    "torch_geometric.nn.inits.constant": (0, 1, "const"),
}
#: the parameters after the tensor of ``torch.nn.init``'s in-place inits and the tensor
#: methods that draw the same law (``t.normal_(mean, std)`` is ``nn.init.normal_(t, mean,
#: std)``; ``t.fill_(v)`` is ``constant_``; ``t.zero_()`` is ``zeros_``), with their defaults
#: (None: required): how two spellings of one init are compared argument by argument
INIT_SIGNATURES = {
    "normal_": (("mean", 0.0), ("std", 1.0)),
    "uniform_": (("a", 0.0), ("b", 1.0)),
    "trunc_normal_": (("mean", 0.0), ("std", 1.0), ("a", -2.0), ("b", 2.0)),
    "constant_": (("val", None),),
    "ones_": (),
    "zeros_": (),
    "xavier_uniform_": (("gain", 1.0),),
    "xavier_normal_": (("gain", 1.0),),
}
#: tensor methods spelled as the ``torch.nn.init`` function drawing the same values
INIT_METHOD_ALIASES = {"fill_": "constant_", "zero_": "zeros_", "normal_": "normal_"}
#: modules whose init functions call ``torch.nn.init``'s of the same name with the same
#: arguments (transformers 5's ``initialization``: the same functions, skipped for a tensor
#: already loaded)
INIT_WRAPPERS = ("torch.nn.init", "transformers.initialization")
#: helpers returning only ``{"device": ..., "dtype": ...}`` (timm's factory keywords ``dd``)
DEVICE_DTYPE_DICTS = ("get_device_dtype",)
#: the dtype of each typed legacy constructor (``torch.Tensor`` takes the default dtype)
LEGACY_CONSTRUCTOR_DTYPES = {
    "torch.Tensor": None,
    "torch.FloatTensor": "float32",
    "torch.DoubleTensor": "float64",
    "torch.HalfTensor": "float16",
    "torch.BFloat16Tensor": "bfloat16",
    "torch.LongTensor": "int64",
    "torch.IntTensor": "int32",
    "torch.ShortTensor": "int16",
    "torch.CharTensor": "int8",
    "torch.ByteTensor": "uint8",
    "torch.BoolTensor": "bool",
}
#: legacy typed constructors allocate CPU memory even under ``with torch.device("meta")``
CPU_CONSTRUCTORS = (LEGACY_CONSTRUCTORS - {n for n in LEGACY_CONSTRUCTORS if ".cuda." in n}) | {
    "torch.from_numpy"
}
#: torch functions that never return a tensor (or return a tuple of them)
NOT_TENSOR_FUNCTIONS = frozenset(
    {
        "torch.is_tensor",
        "torch.numel",
        "torch.is_floating_point",
        "torch.is_complex",
        "torch.device",
        "torch.Size",
        "torch.finfo",
        "torch.iinfo",
        "torch.get_default_dtype",
        "torch.get_default_device",
        "torch.meshgrid",
        "torch.split",
        "torch.chunk",
        "torch.unbind",
        "torch.tensor_split",
        "torch.broadcast_shapes",
        "torch.broadcast_tensors",
        "torch.no_grad",
        "torch.manual_seed",
        "torch.initial_seed",
        "torch.set_grad_enabled",
        "torch.is_grad_enabled",
        "torch.promote_types",
        "torch.result_type",
        "torch.can_cast",
    }
)
#: tensor methods whose result is not a tensor (or is a tuple): shape queries work on meta
NOT_TENSOR_METHODS = frozenset(
    {
        "size",
        "dim",
        "numel",
        "nelement",
        "ndimension",
        "element_size",
        "stride",
        "storage_offset",
        "data_ptr",
        "get_device",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "is_signed",
        "item",
        "tolist",
        "numpy",
        "split",
        "chunk",
        "unbind",
        "__len__",
        "register_hook",
        "untyped_storage",
        "storage",
    }
)
#: tensor attributes that are tensors too (``x.data``, ``x.T``)
TENSOR_ATTRIBUTES = frozenset({"data", "T", "mT", "H", "mH", "real", "imag", "grad"})
#: containers of parameters: a parent that initialises their tensors is their only hook
PARAMETER_CONTAINERS = frozenset({"torch.nn.ParameterList", "torch.nn.ParameterDict"})
#: method names that re-initialise a module (a child's reset called from a parent's)
RESET_METHODS = frozenset(
    {"reset_parameters", "_reset_parameters", "init_weights", "_init_weights"}
)
MODULE_ITERATORS = frozenset({"modules", "named_modules", "children", "named_children"})
#: tensor methods that return a view of the same storage: an in-place init of
#: ``self.att.view(2, h, d)`` writes ``self.att``
VIEW_METHODS = frozenset(
    {
        "view",
        "view_as",
        "unsqueeze",
        "squeeze",
        "transpose",
        "t",
        "permute",
        "narrow",
        "select",
        "unflatten",
        "expand",
        "as_strided",
        "diagonal",
        "detach",
    }
)
#: factories whose positional arguments are sizes (or the ends of a range): a tensor there is
#: turned into a Python int, a read of its value (``torch.ones(torch.prod(win))``)
SIZE_FACTORIES = frozenset(
    {
        "torch.empty",
        "torch.zeros",
        "torch.ones",
        "torch.full",
        "torch.rand",
        "torch.randn",
        "torch.randint",
        "torch.arange",
        "torch.eye",
    }
)
#: tensor methods whose positional arguments are sizes (``t.view(n, 1)``, ``t.new_zeros(n)``)
SIZE_METHODS = frozenset(
    {"view", "reshape", "expand", "repeat", "new_empty", "new_zeros", "new_ones", "new_full"}
)
#: ops whose output's shape depends on the values of their input: they have no meta kernel
#: (``NotImplementedError`` for ``aten::nonzero``, ``aten::_unique2``, ...), so running one on a
#: meta tensor during construction stops the meta build. ``torch.where`` with one argument is
#: ``nonzero``; ``repeat_interleave`` is one only when its repeats are a tensor and no
#: ``output_size`` is given (e3nn ``LowPassFilter``'s ``x[x.abs() <= 1]`` is ``nonzero`` too)
VALUE_SHAPED_FUNCTIONS = frozenset(
    {
        "torch.nonzero",
        "torch.argwhere",
        "torch.masked_select",
        "torch.unique",
        "torch.unique_consecutive",
        "torch.bincount",
    }
)
VALUE_SHAPED_METHODS = frozenset(
    {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount"}
)
#: calls that make a boolean tensor from tensors (a mask: ``t[mask]`` is ``nonzero``)
BOOLEAN_FUNCTIONS = frozenset(
    {
        "torch.isnan",
        "torch.isinf",
        "torch.isfinite",
        "torch.isclose",
        "torch.logical_and",
        "torch.logical_or",
        "torch.logical_not",
        "torch.logical_xor",
        "torch.eq",
        "torch.ne",
        "torch.lt",
        "torch.le",
        "torch.gt",
        "torch.ge",
    }
)
BOOLEAN_METHODS = frozenset(
    {
        "bool",
        "isnan",
        "isinf",
        "isfinite",
        "logical_and",
        "logical_or",
        "logical_not",
        "logical_xor",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
    }
)
#: what a tensor tells without its values (``t.shape``, ``t.size(0)``): the same on ``meta``
#: and for any values, so code that reads only these sees no difference when the values are
#: set later, by a hook
METADATA_ATTRIBUTES = frozenset({"shape", "dtype", "device", "ndim", "is_meta", "layout"})
METADATA_METHODS = frozenset({"size", "dim", "ndimension", "numel", "nelement", "element_size"})
#: bases from outside torch that define no reset hook and no tensors (``class
#: Regularizer(nn.Module, ABC)``): a fix may add a hook to a class deriving from them
HOOKLESS_BASES = frozenset(
    {"abc.ABC", "typing.Generic", "typing.Protocol", "typing_extensions.Protocol", "object"}
)
#: base classes of other libraries known to define their own ``reset_parameters()``: a
#: subclass checked without that library in the tree (a PyG user's ``MessagePassing`` layer)
#: gets a hook that extends the base's, as for a base of the tree that has one
EXTERNAL_RESET_BASES = frozenset(
    {
        "torch_geometric.nn.MessagePassing",
        "torch_geometric.nn.conv.MessagePassing",
        "torch_geometric.nn.conv.message_passing.MessagePassing",
    }
)
#: calls that return a tuple of tensors: iterating or indexing it gives tensors
SEQUENCE_METHODS = frozenset({"split", "chunk", "unbind", "tensor_split"})
SEQUENCE_FUNCTIONS = frozenset(
    {"torch.split", "torch.chunk", "torch.unbind", "torch.tensor_split", "torch.meshgrid"}
)
#: torch.nn classes whose ``reset_parameters()`` initialises every parameter of the module,
#: a subclass's own included (``for weight in self.parameters(): init.uniform_(weight, ...)``)
TORCH_RESET_EVERY_PARAMETER = frozenset(
    {f"torch.nn.{c}" for c in ("RNNCell", "LSTMCell", "GRUCell", "RNN", "LSTM", "GRU")}
)
#: torch.nn layers that hold no tensor: no init can reach them
PARAMETER_FREE_LAYERS = frozenset(
    f"torch.nn.{c}"
    for c in (
        "Identity",
        "Dropout",
        "Dropout1d",
        "Dropout2d",
        "Dropout3d",
        "AlphaDropout",
        "GELU",
        "ReLU",
        "ReLU6",
        "SiLU",
        "Tanh",
        "Sigmoid",
        "Softmax",
        "LogSoftmax",
        "ELU",
        "LeakyReLU",
        "Mish",
        "Hardswish",
        "Hardsigmoid",
        "Softplus",
        "Flatten",
        "Unflatten",
        "MaxPool1d",
        "MaxPool2d",
        "MaxPool3d",
        "AvgPool1d",
        "AvgPool2d",
        "AvgPool3d",
        "AdaptiveAvgPool1d",
        "AdaptiveAvgPool2d",
        "AdaptiveAvgPool3d",
        "AdaptiveMaxPool1d",
        "AdaptiveMaxPool2d",
        "AdaptiveMaxPool3d",
        "Upsample",
        "PixelShuffle",
        "PixelUnshuffle",
    )  # fmt: skip
)
#: torch.nn classes whose subclasses do NOT inherit a public ``reset_parameters``
TORCH_WITHOUT_RESET = frozenset(
    {
        "torch.nn.Module",
        "torch.nn.ModuleList",
        "torch.nn.ModuleDict",
        "torch.nn.Sequential",
        "torch.nn.ParameterList",
        "torch.nn.ParameterDict",
        "torch.nn.MultiheadAttention",  # only the private _reset_parameters
        "torch.nn.Transformer",
        "torch.nn.TransformerEncoderLayer",
        "torch.nn.TransformerDecoderLayer",
        "torch.nn.TransformerEncoder",
        "torch.nn.TransformerDecoder",
        "torch.nn._Loss",  # the base of the losses: no reset_parameters()
        "torch.nn._WeightedLoss",
        "torch.nn.modules.loss._Loss",
        "torch.nn.modules.loss._WeightedLoss",
    }
)
TENSOR_LEAVES = ("weight", "bias")
HOST_READS = {"item": "`.item()`", "tolist": "`.tolist()`", "numpy": "`.numpy()`"}
SCALAR_CASTS = ("float", "int", "bool", "complex")
SHAPED_FACTORIES = {
    "torch.ones",
    "torch.zeros",
    "torch.randn",
    "torch.rand",
    "torch.empty",
    "torch.full",
}
FACTORY_KEYWORDS_KEPT = {"dtype", "device"}
FACTORY_KEYWORDS_DROPPED = {"requires_grad", "layout", "pin_memory", "memory_format", "out"}
#: calls that draw no random numbers (their constructors are deterministic)
RNG_FREE_TORCH = frozenset(
    {
        *LEGACY_CONSTRUCTORS,  # ``torch.Tensor()``: memory or a copy of data, never a draw
        "torch.empty",
        "torch.zeros",
        "torch.ones",
        "torch.full",
        "torch.arange",
        "torch.tensor",
        "torch.as_tensor",
        "torch.linspace",
        "torch.eye",
        *WINDOW_FACTORIES,
        "torch.tril_indices",
        "torch.triu_indices",
        "torch.zeros_like",
        "torch.ones_like",
        "torch.empty_like",
        "torch.full_like",
        "torch.nn.Parameter",
        "torch.nn.Identity",
        "torch.nn.Dropout",
        "torch.nn.Dropout1d",
        "torch.nn.Dropout2d",
        "torch.nn.DropPath",
        "torch.nn.GELU",
        "torch.nn.ReLU",
        "torch.nn.SiLU",
        "torch.nn.Tanh",
        "torch.nn.Sigmoid",
        "torch.nn.Softmax",
        "torch.nn.LayerNorm",
        "torch.nn.GroupNorm",
        "torch.nn.RMSNorm",
        "torch.nn.BatchNorm1d",
        "torch.nn.BatchNorm2d",
        "torch.nn.BatchNorm3d",
        "torch.nn.Flatten",
        "torch.nn.ModuleList",
        "torch.nn.Sequential",
        "torch.nn.ModuleDict",
        "torch.nn.init.constant_",
        "torch.nn.init.ones_",
        "torch.nn.init.zeros_",
        "torch.nn.init.eye_",
        "torch.nn.init.dirac_",
    }
)
RNG_FREE_BUILTINS = frozenset(
    {
        "super",
        "int",
        "float",
        "len",
        "tuple",
        "list",
        "range",
        "isinstance",
        "max",
        "min",
        "bool",
        "str",
        "dict",
        "getattr",
        "hasattr",
        "setattr",
        "round",
        "abs",
        "sum",
        "any",
        "all",
    }
)
#: tensor methods that draw no random numbers
DETERMINISTIC_METHODS = frozenset(
    {
        "fill_",
        "zero_",
        "mul_",
        "add_",
        "div_",
        "sub_",
        "clamp_",
        "copy_",
        "masked_fill_",
        "index_fill_",
        "fill_diagonal_",
        "tril",
        "triu",
        "tril_",
        "triu_",
        "float",
        "double",
        "half",
        "bfloat16",
        "long",
        "int",
        "bool",
        "to",
        "view",
        "reshape",
        "expand",
        "unsqueeze",
        "squeeze",
        "flatten",
        "permute",
        "transpose",
        "t",
        "contiguous",
        "repeat",
        "sum",
        "mean",
        "cos",
        "sin",
        "exp",
        "log",
        "sqrt",
        "cumsum",
        "clone",
        "detach",
        "requires_grad_",
        "append",
        "extend",
        "register_buffer",
        "register_parameter",
        "__init__",
        "size",
        "dim",
        "numel",
    }
)
#: the module methods that register a tensor by name
REGISTER_METHODS = ("register_buffer", "register_parameter")
#: torch calls whose result is not a tensor value: ``computed()`` passes over them
NOT_VALUE_FUNCTIONS = frozenset(
    {"torch.device", "torch.Size", "torch.get_default_dtype", "torch.finfo", "torch.iinfo"}
)
#: builtins that make no tensor value: ``computed()`` passes over them
NOT_VALUE_BUILTINS = frozenset(
    {"int", "float", "len", "max", "min", "range", "list", "tuple", "getattr", "isinstance"}
)
#: aten ops (``torch.ops.aten``, overload dropped) that draw random numbers: the probe marks
#: what they write as random (compared statistically)
RANDOM_ATEN_OPS = frozenset(
    {
        "normal",
        "normal_",
        "uniform",
        "uniform_",
        "bernoulli",
        "bernoulli_",
        "exponential_",
        "geometric_",
        "log_normal_",
        "cauchy_",
        "random_",
        "rand",
        "rand_like",
        "randn",
        "randn_like",
        "randint",
        "randint_like",
        "randperm",
        "multinomial",
        "poisson",
        "rrelu_with_noise",
        "native_dropout",
    }
)
#: in-place aten ops whose result does not depend on the destination's previous value
OVERWRITE_ATEN_OPS = frozenset({"fill_", "zero_", "copy_", "set_", "detach_", "resize_"}) | {
    op for op in RANDOM_ATEN_OPS if op.endswith("_")
}
#: aten ops that allocate a tensor without giving it values (``torch.empty``, ``empty_like``,
#: ``new_empty``, the legacy ``torch.Tensor(3, 4)``): what nothing writes after them is
#: uninitialised memory, eagerly as after ``to_empty()``
UNINITIALISED_ATEN_OPS = frozenset(
    {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"}
)
#: context managers under which writes are not recorded by autograd
NO_GRAD_CONTEXTS = frozenset({"torch.no_grad", "torch.inference_mode"})
#: ``metalint load --init``: how tensors a checkpoint lacks get their values
LOAD_INIT_MODES = (
    "auto",
    "reset_parameters",
    "init_non_persistent_buffers",
    "init_weights",
    "none",
)
#: ``--shard``: FSDP2 ``fully_shard``, tensor parallel, or both on a 2-D mesh
SHARD_LAYOUTS = ("fsdp", "tp", "fsdp+tp")

#: ``torch.distributions`` classes whose constructor checks no value of its own:
#: ``arg_constraints`` is empty or not defined (``Distribution.__init__`` then validates
#: nothing), so ``validate_args`` left on reads no tensor
DISTRIBUTIONS_UNCHECKED = frozenset(
    {
        "Distribution",
        "ExponentialFamily",
        "Independent",
        "MixtureSameFamily",
        "TransformedDistribution",
    }
)
#: ``torch.distributions`` classes whose constructor builds another distribution with
#: validation on, whatever ``validate_args`` says (``LKJCholesky``: ``Beta(c1, c0)``)
DISTRIBUTIONS_ALWAYS_VALIDATED = frozenset(
    {
        "FisherSnedecor",
        "LKJCholesky",
        "Multinomial",
        "OneHotCategorical",
        "RelaxedBernoulli",
        "RelaxedOneHotCategorical",
    }
)
