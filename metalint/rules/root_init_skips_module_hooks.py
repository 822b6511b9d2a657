from __future__ import annotations

from collections.abc import Iterable

from metalint.diagnostics import SkipsModuleHooks
from metalint.static.model import ClassFacts
from metalint.static.rule import Finding, Invalid, Rule
from metalint.vocabulary import ROOT_ENTRIES


class RootInitSkipsModuleHooks(Rule):
    """
    ## What it does
    Finds a model root whose entry point (`init_weights()`, `init_states()`) is all that the
    tree's materialisation runs (a training script: `with torch.device("meta"):`, then
    `model.to_empty(...)` and `model.init_weights()` only, in the torchtitan idiom), while
    some module inside it has a `reset_parameters()` that restores a tensor the entry point
    does not. Reported only where the checked tree has such a script (see ML015), or under
    `protocol = "init_weights-only"`.

    ## Why is this bad on meta?
    Every module's own `reset_parameters()` is the code that gives its tensors their values
    after `to_empty()`. When the script calls only the root's `init_weights()` and that
    method never calls them, the norms' weights, RoPE tables and gains stay uninitialised
    memory and the model trains on garbage.

    ## Example
    ```python
    class Model(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Linear(dim, dim)
            self.norm = nn.LayerNorm(dim)

        def init_weights(self):
            nn.init.trunc_normal_(self.proj.weight, std=0.02)
    ```

    ## Use instead
    ```python
    class Model(nn.Module):
        ...

        def init_weights(self):
            for module in self.modules():
                if module is not self and hasattr(module, "reset_parameters"):
                    module.reset_parameters()
            nn.init.trunc_normal_(self.proj.weight, std=0.02)
    ```

    ## Fix safety
    The fix puts that loop at the start of the entry point: every module's own hook runs
    first, then the root's own init overrides what it re-initialises (the order the
    `init_weights` protocol assumes). Unsafe: the model's initial values change (tensors
    that were garbage get their values, and the random draws of the hooks shift the root's
    own ones).
    """

    code = "ML016"
    name = "root-init-skips-module-hooks"
    summary = "The root's entry point, all the materialisation runs, skips the modules' hooks"
    codemod = "metalint.fix.root_init_skips_module_hooks"

    VALID = [
        """
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def init_weights(self):
        nn.init.trunc_normal_(self.proj.weight, std=0.02)

def build():
    with torch.device("meta"):
        model = Model(16)
    model.to_empty(device="cpu")
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    model.init_weights()
""",
    ]
    INVALID = [
        Invalid(
            """
import torch
from torch import nn

class Norm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self):
        nn.init.ones_(self.weight)

class Model(nn.Module):  # ERROR
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.norm = Norm(dim)

    def init_weights(self):
        \"\"\"The model's own init.\"\"\"
        nn.init.trunc_normal_(self.proj.weight, std=0.02)

def build():
    with torch.device("meta"):
        model = Model(16)
    model.to_empty(device="cpu")
    model.init_weights()
""",
            fixed="""
import torch
from torch import nn

class Norm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self):
        nn.init.ones_(self.weight)

class Model(nn.Module):  # ERROR
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.norm = Norm(dim)

    def init_weights(self):
        \"\"\"The model's own init.\"\"\"
        for module in self.modules():
            if module is not self and hasattr(module, "reset_parameters"):
                module.reset_parameters()
        nn.init.trunc_normal_(self.proj.weight, std=0.02)

def build():
    with torch.device("meta"):
        model = Model(16)
    model.to_empty(device="cpu")
    model.init_weights()
""",
            unsafe=True,
        ),
    ]

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        entries = [*ROOT_ENTRIES, *(h for h in self.ctx.hooks if h not in ROOT_ENTRIES)]
        entry = next((e for e in entries if e in cls.methods and e in ROOT_ENTRIES), None)
        if entry is None:
            return
        yield Finding(
            cls.node.name,
            f"`{cls.name}.{entry}()` does not call each module's own `reset_parameters()`",
            cls,
            hook=entry,
            help=f"Call every module's `reset_parameters()` at the start of "
            f"`{cls.name}.{entry}()` (the fix does), or re-create their tensors there",
            conditions=(SkipsModuleHooks(),),
        )
