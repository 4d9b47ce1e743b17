"""The CLI's conventions, applied once to the assembled command tree (``commands.main``).

- Global options (``--kubeconfig``, ``--context``, ``--prometheus``, ``--debug``) are
  accepted before and after the subcommand, as kubectl's are. Each command gets a copy of
  them that writes into the same ``ctx.obj`` the top-level callback fills; options are
  processed left to right, level by level, so the later one on the command line wins
  (kubectl's flags are one flat set parsed in order: the last value wins there too).
- Help shows types the way click does (``TEXT``, ``INTEGER``, ``FLOAT``, ``PATH``, the
  choice list ``[a|b]``; nothing for a flag) rather than Typer's rich ``<str>``,
  ``<int range>``; arguments read ``NODE`` in the usage line; prose help is reflowed to the
  terminal instead of keeping the source's line breaks; the option tables leave one
  space between columns instead of two, so the longest flag of the contract
  (``--failures-per-1000-node-days``) is not cut at 80 columns.

Typer builds the click objects itself, with no hook for their classes, so the arguments
and commands are given subclasses here (``__class__``) that override only how they are
shown; options take click's public ``metavar``.
"""

from __future__ import annotations

import copy
import inspect
from enum import Enum
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

GLOBAL_PANEL = "Global options"
# global option name -> the key of ctx.obj (and of Settings) it sets
GLOBAL_OPTIONS = {
    "kubeconfig": "kubeconfig",
    "context": "context",
    "prometheus": "prometheus_url",
    "debug": "debug",
}
# click's names for the types our options take, where the type's own name differs
_CLICK_NAMES = {"str": "text", "int": "integer", "bool": "boolean"}


def apply(root: Any) -> Any:
    """Apply the conventions to ``root`` (the click command built from the Typer app)."""
    shared = [p for p in root.params if p.name in GLOBAL_OPTIONS]
    for param in shared:
        param.rich_help_panel = GLOBAL_PANEL
    for command in _walk(root):
        if command is not root:
            command.params.extend(_global_copy(p) for p in shared)
        command.help = reflow(command.help)
        _click_style(command)
        if type(command) is TyperGroup:
            command.__class__ = _CompactHelpGroup
        elif type(command) is TyperCommand:
            command.__class__ = _CompactHelpCommand
    return root


def _walk(command: Any) -> Any:
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from _walk(sub)


def _global_copy(param: Any) -> Any:
    """``param`` as an option of a subcommand: it sets the value the top-level callback
    stored, and its own value is not passed to the command function."""
    twin = copy.copy(param)
    twin.expose_value = False
    twin.callback = _store_global
    return twin


def _store_global(ctx: typer.Context, param: Any, value: Any) -> Any:
    if value is None or value is False:  # not given here: keep what came before
        return value
    if not isinstance(ctx.obj, dict):
        ctx.obj = {}
    ctx.obj[GLOBAL_OPTIONS[param.name]] = value
    return value


def reflow(text: str | None) -> str | None:
    """Paragraphs of ``text`` on one line each, so the help formatter wraps them to the
    terminal (click does this; Typer's rich mode keeps the docstring's line breaks, which
    at 80 columns leaves a two-word line after every source line). A paragraph that
    starts with ``\\b`` keeps its lines, as in click."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n")) for p in paragraphs)


def _click_style(command: Any) -> None:
    context = typer.Context(command, info_name=command.name)
    help_option = command.get_help_option(context)  # created once and kept by the command
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if isinstance(param, TyperArgument):
            param.__class__ = _ClickStyleArgument
            param.type = _shown_as(param.type, click_metavar(param.type))
        elif param.metavar is None:
            is_flag = getattr(param, "is_flag", False) or getattr(param, "count", False)
            param.metavar = "" if is_flag else click_metavar(param.type)


def _shown_as(ptype: Any, metavar: str) -> Any:
    """A copy of a parameter type that names itself ``metavar`` in help (the rich help
    asks an argument's type for its metavar); converting is the type's own."""
    shown = copy.copy(ptype)
    shown.__class__ = type(
        f"Shown{type(ptype).__name__}",
        (type(ptype),),
        {"get_metavar": lambda self, param, ctx=None: metavar},
    )
    return shown


def click_metavar(ptype: Any) -> str:
    """What click shows for a value of this type: ``TEXT``, ``INTEGER RANGE``,
    ``[table|wide]``, ``PATH``..."""
    choices = getattr(ptype, "choices", None)
    if choices is not None:
        shown = [str(c.value) if isinstance(c, Enum) else str(c) for c in choices]
        if not getattr(ptype, "case_sensitive", True):
            shown = [c.casefold() for c in shown]
        return "[" + "|".join(shown) + "]"
    if hasattr(ptype, "file_okay") and hasattr(ptype, "dir_okay"):  # a path
        if ptype.file_okay and not ptype.dir_okay:
            return "FILE"
        if ptype.dir_okay and not ptype.file_okay:
            return "DIRECTORY"
        return "PATH"
    first, _, rest = str(ptype.name).partition(" ")  # "int range" -> INTEGER RANGE
    return " ".join(w for w in (_CLICK_NAMES.get(first, first), rest) if w).upper()


class _ClickStyleArgument(TyperArgument):
    """An argument shown as click shows one: ``NODE`` in the usage line (``[NODE]`` when
    optional, ``NODE...`` when it repeats) and its type, ``TEXT``, in the help table."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return click_metavar(self.type)

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        return [self._usage_display_name()]

    def _usage_display_name(self) -> str:
        name = self.metavar or (self.name or "").upper()
        if self.nargs != 1:
            name += "..."
        return name if self.required else f"[{name}]"


def _compact_tables() -> None:
    # Typer's rich help reads its table style from module constants when it formats;
    # imported here, not at start-up (rich costs ~0.14 s that no other path needs).
    from typer import rich_utils

    # rich's Padding takes (top, right, bottom, left); Typer declares the constant as a pair
    rich_utils.STYLE_OPTIONS_TABLE_PADDING = (0, 1, 0, 0)  # type: ignore[assignment]


class _CompactHelpCommand(TyperCommand):
    def format_help(self, ctx: Any, formatter: Any) -> None:
        _compact_tables()
        super().format_help(ctx, formatter)


class _CompactHelpGroup(TyperGroup):
    def format_help(self, ctx: Any, formatter: Any) -> None:
        _compact_tables()
        super().format_help(ctx, formatter)
