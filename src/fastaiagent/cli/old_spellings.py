"""Old option spellings that still work until :data:`~fastaiagent.agent.deprecation.REMOVED_IN`.

A renamed option (:data:`~fastaiagent.cli.options.RENAMED_OPTIONS`) is not a
parameter at all: before a command parses its arguments, each old spelling is
replaced by the new one, with a note on stderr, so ``--help`` and completion
show only the new one and the command's code sees one value. An old option that
is not a plain rename (``learn --scope-id``) is a hidden
:func:`deprecated_option` the command merges itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from fastaiagent.agent.deprecation import deprecation_note
from fastaiagent.cli.options import RENAMED_OPTIONS


def deprecated_option(old: str, new: str) -> Any:
    """A hidden option ``old`` that still works and prints a note naming ``new``
    when given (the command merges its value into ``new``'s)."""

    def note(value: Any) -> Any:
        if value is not None:
            say_renamed(old, new)
        return value

    return typer.Option(None, old, hidden=True, callback=note)


def say_renamed(old: str, new: str) -> None:
    """The note an old spelling prints on stderr (stdout stays the command's output)."""
    typer.echo(f"note: {deprecation_note(old, new)}", err=True)


def _spellings(params: Sequence[Any]) -> tuple[set[str], set[str]]:
    """Every option string of ``params``, and those that take a value."""
    every: set[str] = set()
    valued: set[str] = set()
    for param in params:
        names = [*param.opts, *getattr(param, "secondary_opts", ())]
        every.update(names)
        if param.param_type_name == "option" and not param.is_flag and not param.count:
            valued.update(param.opts)
    return every, valued


def renamed_args(params: Sequence[Any], args: list[str], *, stop_at_word: bool) -> list[str]:
    """``args`` with each old spelling of :data:`RENAMED_OPTIONS` (``--old`` or
    ``--old=value``) replaced by its new one, where ``params`` have the new one and
    not the old; a note for each on stderr. Values and everything after ``--`` (and,
    for a group, after its sub-command's name) are left as they are."""
    every, valued = _spellings(params)
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or (stop_at_word and not arg.startswith("-")):
            return out + args[i:]
        name, equals, value = arg.partition("=")
        new = RENAMED_OPTIONS.get(name)
        if new is not None and new in every and name not in every:
            say_renamed(name, new)
            name, arg = new, new + equals + value
        out.append(arg)
        if name in valued and not equals and i + 1 < len(args):
            out.append(args[i + 1])
            i += 1
        i += 1
    return out


class RenamingCommand(TyperCommand):
    """A command that takes the old spellings of its options (see :func:`renamed_args`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, renamed_args(self.get_params(ctx), args, stop_at_word=False))


class RenamingGroup(TyperGroup):
    """A group (its own options, before the sub-command) that takes old spellings."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, renamed_args(self.get_params(ctx), args, stop_at_word=True))


def use_renamed_spellings(app: typer.Typer) -> None:
    """Make every command and sub-group of ``app`` accept the old spellings."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):  # typer's default; a command's own class is kept
            info.cls = RenamingCommand
    for group in app.registered_groups:
        group.cls = RenamingGroup
        if group.typer_instance is not None:
            use_renamed_spellings(group.typer_instance)




__all__ = ["RenamingCommand", "RenamingGroup", "deprecated_option", "renamed_args", "say_renamed", "use_renamed_spellings"]
