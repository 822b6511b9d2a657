"""ML015 unrestored-at-materialisation at a checkpoint load: the script keeps buffers off meta.

The finding is in a class; its cause is in the script that materialises the model
(:mod:`metalint.static.pipeline`): accelerate's ``with init_empty_weights(include_buffers=True):``
puts every buffer on the meta device, then ``model.load_state_dict(sd, assign=True)`` gives the
persistent tensors the checkpoint's values, and the non-persistent buffers (a RoPE table: no
checkpoint holds it) stay on meta. The rewrite edits the script, not the class::

    with init_empty_weights(include_buffers=False):

so that accelerate builds the buffers on the real device, as eager construction computes them,
and only the parameters come from the checkpoint. ``False`` is written out, not the keyword
dropped: without it accelerate reads ``ACCELERATE_INIT_INCLUDE_BUFFERS`` from the environment.

Why this and not a call after the load: re-creating the buffers after ``load_state_dict`` needs a
hook that writes them and nothing the checkpoint loaded (a ``reset_parameters()`` also re-draws
the loaded weights), which most models do not have; the flag restores exactly what construction
computes, for every class of the model at once.

Unsafe: every buffer is computed at construction on the default device (time and memory for
the persistent ones the checkpoint then replaces), and the non-persistent buffers stay there
(CPU) where a dispatched model's parameters go to an accelerator: a script that relied on the
whole model following ``map_location``/``device_map`` must move them (``model.to(device)``).
A site that calls ``to_empty()`` (every tensor uninitialised: the flag changes nothing) or
loads on one branch only is not rewritten, and neither is one built under
``torch.device("meta")`` (no flag to turn off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metalint.diagnostics import Applicability
from metalint.fix.codemod import Unfixable
from metalint.lines import split_lines

#: what the rewrite writes in place of the ``True``
KEEP_BUFFERS_REAL = "False"


@dataclass(frozen=True)
class SiteRewrite:
    """The new text of the script holding a site, and what the rewrite did."""

    path: str
    text: str
    applicability: Applicability
    message: str


def site_at(sites: list[tuple[str, dict]], materialised: tuple[str, str, int]) -> dict | None:
    """The site whose call a finding names (``Diagnostic.materialised``), from the tree's sites
    (``(display path, site)``, :attr:`Hierarchy.sites`)."""
    _call, file, line = materialised
    for path, site in sites:
        if path != file:
            continue
        if site.get("line") == line or any(s.get("line") == line for s in site.get("steps", ())):
            return site
    return None


def plan_site(path: str, source: str, site: dict[str, Any]) -> SiteRewrite:
    """Rewrite the script ``path`` (its text ``source``) at ``site``; raises
    :class:`Unfixable` with the reason when the site is not one this fix reaches."""
    steps = site.get("steps", ())
    context = site.get("context")
    if context is None:
        raise Unfixable(
            "the model is built on meta by no flag the script can turn off: re-create its "
            "non-persistent buffers after the load by hand"
        )
    if any(s.get("kind") == "to_empty" for s in steps):
        raise Unfixable("the script calls `to_empty()`: every tensor is uninitialised there")
    if not any(s.get("kind") == "load" and not s.get("maybe") for s in steps):
        raise Unfixable(
            "the checkpoint load runs on one branch only: nothing is restored for certain"
        )
    text = _replace(source, context)
    if text is None:
        raise Unfixable(f"`{context.get('call', '')}` is no longer where the site said")
    return SiteRewrite(
        path,
        text,
        Applicability.UNSAFE,
        f"`{context.get('call', '')}` keeps buffers on the real device (unsafe: they are "
        "computed at construction, on the default device)",
    )


def _replace(source: str, context: dict[str, Any]) -> str | None:
    """``source`` with the ``True`` at ``context``'s span (rows 1-based, UTF-8 byte columns
    as ``ast`` gives them) replaced by ``False``; None when the span holds no ``True``."""
    row, col = context.get("line"), context.get("col")
    end_row, end_col = context.get("end_line"), context.get("end_col")
    lines = split_lines(source, keepends=True)
    if not (isinstance(row, int) and row == end_row and 1 <= row <= len(lines)):
        return None
    if not (isinstance(col, int) and isinstance(end_col, int)):
        return None
    raw = lines[row - 1].encode("utf-8")
    if raw[col:end_col] != b"True":
        return None
    lines[row - 1] = (raw[:col] + KEEP_BUFFERS_REAL.encode() + raw[end_col:]).decode("utf-8")
    return "".join(lines)
