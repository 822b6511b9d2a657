"""Code-generation templates judged as the code generated from them.

transformers writes a model's ``modular_<model>.py`` (a template: its classes subclass the
classes of other models' modeling files) and generates ``modeling_<model>.py`` from it (the
code that runs: every class written out in full). A template's classes never run, so the
roots and protocols their own inheritance makes are no model's. When the generated file sits
beside its template in the checked tree, a class defined in both is judged once, in the
generated file, and the template reports exactly that judgement: a finding of the template's
class stands only while the generated class has the same finding (same rule and tensors)
after judgement, and it takes that judgement's protocol, root and words. It stays on the
template's own line (where a contributor edits and where its fix applies); the generated
file keeps its finding too (the code users run and the wheel ships). A template without its
generated file (a model not generated yet) is judged as before: its classes contain and
extend only the template's own classes (:class:`metalint.static.protocol.Protocols`).

Torch-free and libcst-free: this runs on the results of every file of the tree.
"""

from __future__ import annotations

from collections.abc import Iterable

from metalint.vocabulary import TEMPLATE_MODULE_PREFIXES

#: the prefix of the module a template generates, by the template's prefix
GENERATED_PREFIX = {"modular_": "modeling_"}


def generated_name(cls: str) -> str | None:
    """``pkg.llama.modular_llama.LlamaMLP`` -> ``pkg.llama.modeling_llama.LlamaMLP`` (the
    class the generator writes of a template's class); None when ``cls`` is no template's."""
    parts = cls.split(".")
    for i, part in enumerate(parts[:-1]):
        prefix = next((p for p in TEMPLATE_MODULE_PREFIXES if part.startswith(p)), None)
        if prefix is not None and prefix in GENERATED_PREFIX:
            parts[i] = GENERATED_PREFIX[prefix] + part[len(prefix) :]
            return ".".join(parts)
    return None


def twins(classes: Iterable[str]) -> dict[str, str]:
    """Template class -> its generated class, for each template class whose generated class
    is among ``classes`` too."""
    known = set(classes)
    out = {}
    for name in known:
        generated = generated_name(name)
        if generated is not None and generated in known:
            out[name] = generated
    return out


def class_of(d, module: str) -> str:
    """The full name of the class a finding of a file of ``module`` is about."""
    if d.condition is not None:
        return d.condition.cls
    return f"{module}.{d.symbol}" if module and d.symbol else ""


def as_generated(judged: list[list], modules: list[str], original: dict, pairs: dict) -> None:
    """Replace, in place, each template file's findings (``judged[i]``, the findings of the
    file of ``modules[i]`` after judgement) on a class with a generated twin (``pairs``) by
    the generated class's judgement: kept only while the generated class has a finding of the
    same rule and tensors, with its protocol, root and what judgement added to its message.
    ``original``: ``id`` of a judged finding -> the message it had before judgement."""
    generated: dict[tuple, object] = {}
    for findings, module in zip(judged, modules):
        for d in findings:
            generated.setdefault((class_of(d, module), d.code, d.subject), d)
    for i, (findings, module) in enumerate(zip(judged, modules)):
        kept = []
        for d in findings:
            twin = pairs.get(class_of(d, module))
            if twin is None:
                kept.append(d)
                continue
            g = generated.get((twin, d.code, d.subject))
            if g is not None:
                kept.append(_adopt(d, g, original))
        judged[i] = kept


def _adopt(d, g, original: dict):
    """The template's finding ``d`` with the judgement of its generated twin ``g``."""
    mine = original.get(id(d), d.message)
    before = original.get(id(g), g.message)
    added = g.message[len(before) :] if g.message.startswith(before) else ""
    return d.with_(
        message=mine + added,
        protocol=g.protocol,
        root=g.root,
        materialised=g.materialised,
    )
