from __future__ import annotations

from collections.abc import Iterable

from metalint.diagnostics import NoMethod
from metalint.static.model import ClassFacts, construction
from metalint.static.ownership import owned_tensors
from metalint.static.rule import Finding, Rule
from metalint.static.syntax import chain
from metalint.vocabulary import TENSOR_LEAVES, TIE_BASES, TIE_HOOKS


def _text(parts: list[str]) -> str:
    return ".".join(parts).replace(".[]", "[...]")


class TieByAssignment(Rule):
    """
    ## What it does
    Finds weight tying written as an assignment during construction (`self.lm_head.weight =
    self.wte.weight`) in a class with no `tie_weights()` method (own or inherited) and no reset
    hook that repeats the assignment.

    ## Why is this bad on meta?
    `to_empty()` replaces the parameters module by module, so the two get separate tensors: a
    checkpoint storing the tied tensor once fills only one, and training updates them apart.

    ## Example
    ```python
            self.wte = nn.Embedding(vocab, dim)
            self.lm_head = nn.Linear(dim, vocab, bias=False)
            self.lm_head.weight = self.wte.weight
    ```

    Use instead:
    ```python
            self.tie_weights()

        def tie_weights(self):  # call again after to_empty() or loading a checkpoint
            self.lm_head.weight = self.wte.weight
    ```

    ## Fix safety
    No automatic fix.

    ## Options
    `hooks` (a configured hook that ties them counts).

    ## When to switch it off
    When your loader re-ties the weights itself after materialisation.

    ## Known limits
    - A `tie_weights()` method counts whether or not your materialiser calls it (transformers'
      `from_pretrained` and accelerate's `load_checkpoint_and_dispatch` do).
    """

    code = "ML011"
    name = "tie-by-assignment"
    summary = "Weights tied by assignment in `__init__`; `to_empty()` breaks the tie"

    VALID = [
        # transformers' convention: the tie lives in tie_weights()
        """
import torch.nn as nn

class GPT(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.tie_weights()

    def tie_weights(self):
        self.lm_head.weight = self.wte.weight
""",
        # tie_weights inherited from a base class
        """
import torch.nn as nn

class TiedBase(nn.Module):
    def tie_weights(self):
        self.head.weight = self.embed.weight

class LM(TiedBase):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight
""",
        # sharing a whole submodule is safe: to_empty keeps one module object
        """
from torch import nn

class Encoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.final_norm = self.norm
        self.block = nn.Linear(dim, dim)
        self.block.act = nn.GELU()
""",
        # the root init hook repeats the tie (torchtitan-style init_weights)
        """
import torch.nn as nn

class Transformer(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.output.weight = self.tok_embeddings.weight

    def init_weights(self):
        nn.init.normal_(self.tok_embeddings.weight)
        self.output.weight = self.tok_embeddings.weight
""",
    ]
    INVALID = [
        # nanoGPT
        """
import torch.nn as nn

class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # ERROR
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
""",
        # conditional tie, from a helper called by __init__, and a bias tie (BERT prediction head)
        """
import torch
from torch import nn

class LMHead(nn.Module):
    def __init__(self, dim, vocab, tie=True):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.decoder = nn.Linear(dim, vocab, bias=False)
        self.bias = nn.Parameter(torch.zeros(vocab))
        self.decoder.bias = self.bias  # ERROR
        if tie:
            self._tie()

    def _tie(self):
        self.decoder.weight = self.embed.weight  # ERROR
""",
        # a private _tie_weights is not what anyone calls after to_empty
        """
import torch.nn as nn

class Seq2Seq(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.shared = nn.Embedding(vocab, dim)
        self.encoder_embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self._tie_weights()

    def _tie_weights(self):
        self.encoder_embed.weight = self.shared.weight  # ERROR
        self.head.weight = self.shared.weight  # ERROR
""",
    ]

    def check_class(self, cls: ClassFacts) -> Iterable[Finding]:
        if any(h in cls.methods for h in TIE_HOOKS):
            return
        if any(b in TIE_BASES for b in cls.bases):
            return
        methods = construction(cls)
        own_params = {o.attr for o in owned_tensors(methods, self.qualify) if o.kind == "parameter"}
        # ties a hook repeats after materialisation
        redone: set[tuple[str, ...]] = set()
        for hook in self.ctx.hooks:
            for m in cls.reachable(hook) if hook in cls.methods else ():
                for a in m.assigns:
                    redone.add(tuple(a.target.split(".")))
        hook_methods = {
            m.name for h in self.ctx.hooks if h in cls.methods for m in cls.reachable(h)
        }
        for method in methods:
            if method.name in hook_methods:
                continue
            for a in method.assigns:
                tie = _tie(a, own_params)
                if tie is None or tuple(tie[0]) in redone:
                    continue
                target, value = tie
                yield Finding(
                    a.node,
                    f"`{_text(target)} = {_text(value)}` ties two parameters by assignment in "
                    f"`{method.name}`; `to_empty()` gives each module its own new tensor, so "
                    f"after materialisation they are independent and a checkpoint fills only "
                    f"one",
                    cls,
                    help="Repeat this assignment in a `tie_weights()` method and call it after "
                    "`to_empty()`",
                    conditions=(NoMethod(TIE_HOOKS),),
                )


def _tie(a, own_params: set[str]) -> tuple[list[str], list[str]] | None:
    """(target, value) of ``self.head.weight = self.embed.weight``: an assignment of a
    tensor of the module to another attribute of it (``.data`` of both dropped); None for
    anything else (re-assigning an own parameter is no tie)."""
    if a.augmented or a.value is None:
        return None
    target = a.target.split(".")
    value = chain(a.value)
    if not value or value[0] != "self" or len(value) < 2 or value == target:
        return None
    if target[-1] == "data" and value[-1] == "data":
        target, value = target[:-1], value[:-1]
    tensor_value = (len(value) >= 3 and value[-1] in TENSOR_LEAVES) or (
        len(value) == 2 and value[1] in own_params
    )
    if not tensor_value or len(target) < 2:
        return None
    if len(target) == 2 and target[1] in own_params:
        return None
    return target, value
