from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from metalint.static.model import ClassFacts, construction
from metalint.static.ownership import factory_calls, owned_tensors
from metalint.static.rule import Finding, Rule
from metalint.static.tensors import local_value


def _accepts_device(fn: cst.FunctionDef) -> bool:
    params = fn.params
    names = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]
    return "device" in names


class NoDeviceDtypeKwargs(Rule):
    """
    ## What it does
    Finds a module whose `__init__` creates tensors itself (`nn.Parameter(torch.empty(...))`,
    `register_buffer(name, torch.zeros(...))`) but takes no parameter named `device`.
    `**kwargs` is not enough: `skip_init` looks for `device` in the signature. Opt-in.

    ## Why is this bad on meta?
    `torch.nn.utils.skip_init(Cls, *args)` calls `Cls(*args, device="meta")` and refuses a
    constructor without `device`. Every `torch.nn` layer takes `device=None, dtype=None`, so
    callers place and type tensors at creation instead of copying them afterwards.

    ## Example
    ```python
        def __init__(self, dim, init_values=1e-5):
            super().__init__()
            self.gamma = nn.Parameter(torch.empty(dim))
    ```

    Use instead:
    ```python
        def __init__(self, dim, init_values=1e-5, device=None, dtype=None):
            super().__init__()
            self.gamma = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
    ```

    ## Fix safety
    No automatic fix: adding parameters to a public constructor changes its signature.

    ## Options
    Enable it with `extend-select = ["ML012"]`.

    ## When to switch it off
    For application code that never calls `skip_init` (it is off by default).

    ## Known limits
    - A `device` parameter that is not passed on to the factories is not checked.
    """

    code = "ML012"
    name = "no-device-dtype-kwargs"
    summary = (
        "Module creates tensors but its constructor takes no `device`/`dtype` (no `skip_init`)"
    )
    default = False

    VALID = [
        # the torch.nn convention
        """
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, device=None, dtype=None):
        super().__init__()
        self.init_values = init_values
        self.gamma = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
""",
        # keyword-only device, passed on
        """
import torch
import torch.nn as nn

class Norm(nn.Module):
    def __init__(self, dim, *, device=None, dtype=None):
        super().__init__()
        factory_kwargs = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.ones(dim, **factory_kwargs))
""",
        # creates no tensor itself: only children (their own constructors decide)
        """
import torch.nn as nn

class Mlp(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
""",
    ]
    INVALID = [
        # `**factory_kwargs` hides `device` from the signature that skip_init inspects
        """
import torch
import torch.nn as nn

class Norm(nn.Module):
    def __init__(self, dim, **factory_kwargs):  # ERROR
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, **factory_kwargs))
""",
        """
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5):  # ERROR
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))
""",
        # a buffer made in a helper; dtype alone is not enough for skip_init
        """
import torch
import torch.nn as nn

class RoPE(nn.Module):
    def __init__(self, dim, dtype=None):  # ERROR
        super().__init__()
        self._build(dim)

    def _build(self, dim):
        self.register_buffer("inv_freq", torch.arange(0, dim, 2, dtype=torch.float32), persistent=False)
""",
    ]

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        init = cls.init
        if init is None or _accepts_device(init.node):
            return
        for owned in owned_tensors(construction(cls), self.qualify):
            value = owned.value
            if isinstance(value, cst.Name):
                value = local_value(owned.method, value.value)
            calls = factory_calls(value, self.qualify)
            if calls:
                yield Finding(
                    init.node.name,
                    f"`{cls.name}.__init__` creates `{owned.attr}` with a torch factory but takes "
                    f"no `device`: `torch.nn.utils.skip_init({cls.name}, ...)` cannot build it "
                    f"on meta",
                    cls,
                    help="Add `device=None, dtype=None` and pass them to the factories",
                    subject=(owned.attr,),
                )
                return
