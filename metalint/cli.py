"""The ``metalint`` command line.

Sub-commands live next to the code they drive and are imported only when invoked, so
``metalint check`` starts without importing torch.
"""

from __future__ import annotations

import importlib

import click

from metalint import __version__

# name -> "module:attribute" of a click command
COMMANDS = {
    "check": "metalint.check:check_command",
    "rule": "metalint.docs:rule_command",
    "probe": "metalint.probe.command:probe_command",
    "fix": "metalint.fix.command:fix_command",
    "load": "metalint.loader.command:load_command",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


def apply_fixes(*args, **kwargs):
    """``check --fix``: the fix command's machinery, handed to ``check`` (which ``fix`` is
    built on, so it cannot import it)."""
    from metalint.fix.command import apply_fixes

    return apply_fixes(*args, **kwargs)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="metalint")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Find, prove and fix PyTorch modules that break when built on the meta device."""
    import warnings

    ctx.obj = {"apply_fixes": apply_fixes}

    # torch warns on import when numpy is absent; metalint never needs numpy
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
