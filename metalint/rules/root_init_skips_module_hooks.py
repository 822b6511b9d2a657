from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst

from metalint.diagnostics import SkipsModuleHooks
from metalint.static.model import ClassFacts
from metalint.static.rule import Finding, Invalid, Rule
from metalint.vocabulary import ROOT_ENTRIES


@dataclass(frozen=True)
class EntrySite:
    """What the rule matched, handed to its fix (:mod:`metalint.fix.root_init_skips_module_hooks`):
    the root's entry point (``def init_weights(self)``), which the loop over the modules
    goes into."""

    fn: cst.FunctionDef


class RootInitSkipsModuleHooks(Rule):
    """
    ## What it does
    Finds a model root whose entry point (`init_weights()`, `init_states()`) is all the tree's
    materialisation runs (`to_empty()` then `model.init_weights()`, the torchtitan idiom) while a
    module inside it has a `reset_parameters()` restoring a tensor the entry point does not.
    Only where such a script exists, or under `protocol = "init_weights-only"`.

    ## Why is this bad on meta?
    Each module's own hook gives its tensors their values after `to_empty()`; when the root's
    `init_weights()` never calls them, norms, RoPE tables and gains stay uninitialised.

    ## Example
    ```python
        def init_weights(self):  # self.norm = nn.LayerNorm(dim) is never reset
            nn.init.trunc_normal_(self.proj.weight, std=0.02)
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
    The fix puts that loop at the start of the entry point. Unsafe: the model's initial values
    change (garbage gets values, and the hooks' draws shift the root's own).

    ## Options
    `protocol`.

    ## When to switch it off
    When the script restores those tensors itself after `init_weights()`.

    ## Known limits
    - The limits of ML015 on reading the script apply.
    """

    code = "ML016"
    name = "root-init-skips-module-hooks"
    summary = "The root's entry point, all the materialisation runs, skips the modules' hooks"
    codemod = "metalint.fix.root_init_skips_module_hooks"
    site_type = EntrySite

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
            site=EntrySite(cls.methods[entry].node),
        )
