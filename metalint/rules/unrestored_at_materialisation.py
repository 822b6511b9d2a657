from __future__ import annotations

from collections.abc import Iterable

from metalint.diagnostics import AtMaterialisation
from metalint.rules.missing_reset_hook import _from_argument, _has_value, _size_zero
from metalint.static.composition import affine_norms
from metalint.static.model import ClassFacts, construction
from metalint.static.ownership import owned_tensors
from metalint.static.rule import Finding, Rule
from metalint.static.tensors import initialised_own


class UnrestoredAtMaterialisation(Rule):
    """
    ## What it does
    Finds a tensor that the tree's own materialisation leaves uninitialised: a script that
    builds a model on meta (`with torch.device("meta"):`, `init_empty_weights()`,
    `init_module(empty_init=True)`), calls `to_empty()`, then runs only the root's
    `init_weights()`, `model.apply(fn)` or a checkpoint load. The finding names the call.

    ## Why is this bad on meta?
    A torchtitan-style script calls `model.init_weights()` and nothing else: a norm's weight or
    a RoPE table that only its module's own `reset_parameters()` restores stays garbage. After
    `load_state_dict(sd, assign=True)` a non-persistent buffer stays on meta.

    ## Example
    ```python
    with torch.device("meta"):
        model = Model(16)          # holds an RMSNorm whose weight only its own hook sets
    model.to_empty(device="cuda")
    model.init_weights()           # never calls the modules' reset_parameters()
    ```

    Use instead:
    ```python
        def init_weights(self):
            for module in self.modules():
                if module is not self and hasattr(module, "reset_parameters"):
                    module.reset_parameters()
            nn.init.trunc_normal_(self.proj.weight, std=0.02)
    ```

    ## Fix safety
    At a checkpoint load under accelerate's `init_empty_weights(include_buffers=True)` the fix
    edits the script to `include_buffers=False` (unsafe: every buffer is then computed at
    construction on the default device). Elsewhere ML016's fix makes the entry point call
    every module's hook; a tensor only a checkpoint restores under `torch.device("meta")`
    needs the script to re-create it after the load.

    ## Options
    `protocol = "init_weights-only"` judges every root this way without a script.

    ## When to switch it off
    When a step the rule does not follow (a function the script calls after the load)
    restores what it names.

    ## Known limits
    - A builder that materialises the model itself before returning it is its own site; its
      callers' steps are not added.
    - No script rewrite for a `torch.device("meta")` build followed by a load.
    """

    code = "ML015"
    name = "unrestored-at-materialisation"
    summary = "The tree's materialisation of the model leaves a tensor uninitialised"

    VALID = [
        # the root's entry point runs each module's own reset_parameters() first
        """
import torch
from torch import nn

class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self):
        nn.init.ones_(self.weight)

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = RMSNorm(dim)

    def init_weights(self):
        for module in self.modules():
            if module is not self and hasattr(module, "reset_parameters"):
                module.reset_parameters()

def build():
    with torch.device("meta"):
        model = Model(16)
    model.to_empty(device="cpu")
    model.init_weights()
""",
        # no materialisation site: judged per module (the class has its hook)
        """
import torch
from torch import nn

class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self):
        nn.init.ones_(self.weight)
""",
        # a full checkpoint load restores every persistent tensor
        """
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(0.1 * torch.ones(dim))

def load(sd):
    with torch.device("meta"):
        model = LayerScale(16)
    model.load_state_dict(sd, assign=True)
""",
    ]
    INVALID = [
        """
import torch
from torch import nn

class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))  # ERROR

    def reset_parameters(self):
        nn.init.ones_(self.weight)

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.norm = RMSNorm(dim)

    def init_weights(self):
        nn.init.trunc_normal_(self.proj.weight, std=0.02)

def build():
    with torch.device("meta"):
        model = Model(16)
    model.to_empty(device="cpu")
    model.init_weights()
""",
        # a non-persistent buffer is in no checkpoint
        """
import torch
from torch import nn

class Rope(nn.Module):
    def __init__(self, dim):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # ERROR

    def reset_parameters(self):
        self.inv_freq.copy_(1.0 / (10000 ** (torch.arange(0, self.inv_freq.numel() * 2, 2).float() / (self.inv_freq.numel() * 2))))

def load(sd):
    with torch.device("meta"):
        model = Rope(16)
    model.load_state_dict(sd, assign=True)
""",
    ]

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        if "__init__" not in cls.methods:
            return
        methods = construction(cls)
        owns = list(owned_tensors(methods, self.qualify))
        # most classes own no tensor: no call of theirs is read then
        initialised = initialised_own(methods, self.qualify) if owns else set()
        seen: set[str] = set()
        for owned in owns:
            if owned.attr in seen or _size_zero(owned.value, self.qualify):
                continue
            if not (
                owned.attr in initialised
                or _from_argument(owned)
                or _has_value(owned.value, self.qualify, owned.method)
            ):
                continue  # `torch.empty(...)` nobody initialises: eager has garbage too
            seen.add(owned.attr)
            kind = "buffer" if owned.kind == "buffer" else "parameter"
            yield Finding(
                owned.node,
                f"{kind} `{owned.attr}` of `{cls.name}` has a value after construction",
                cls,
                subject=(owned.attr,),
                help="Make what the script runs re-create it: the root's entry point calling "
                "each module's `reset_parameters()` (ML016's fix), or an init of it there",
                conditions=(AtMaterialisation((owned.attr,)),),
            )
        for a, tensors in affine_norms(cls, self.qualify):
            attr = a.target.split(".")[1]
            names = tuple(f"{attr}.{t}" for t in tensors if f"{attr}.{t}" not in seen)
            if not names:
                continue
            seen.update(names)
            shown = " and ".join(f"`{t}`" for t in tensors)
            yield Finding(
                a.node,
                f"{shown} of `{cls.name}.{attr}` (a torch norm layer) have a value after "
                "construction",
                cls,
                subject=names,
                help=f"Make what the script runs re-create them: `self.{attr}.reset_parameters()` "
                "in the root's entry point, or each module's `reset_parameters()` (ML016's fix)",
                conditions=(AtMaterialisation(names),),
            )
