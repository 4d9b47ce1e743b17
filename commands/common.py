"""Options shared by several commands and the settings they feed."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import typer

import commands
from commands.output import OutputFormat
from krea_ops.settings import Settings, load_settings

if TYPE_CHECKING:
    from krea_ops.console import Console
    from krea_ops.fleet import FleetSnapshot

OutputOption = typer.Option(
    OutputFormat.table,
    "--output",
    "-o",
    metavar="FORMAT",
    help="table, wide, json, yaml or csv",
    case_sensitive=False,
)


def settings_from(ctx: typer.Context, **flags: Any) -> Settings:
    """Settings from file and env, then the global flags, then this command's flags."""
    merged: dict[str, Any] = dict(ctx.obj or {}) if isinstance(ctx.obj, dict) else {}
    merged.update({k: v for k, v in flags.items() if v is not None})
    return load_settings(merged)


def console_of(ctx: typer.Context, **flags: Any) -> Console:
    """The command's ``Console`` on the settings (file, env, global flags, ``flags``),
    closed when the command ends. Nothing is contacted until a read asks."""
    from krea_ops.console import Console

    console = Console(settings_from(ctx, **flags))
    ctx.call_on_close(console.close)
    return console


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a one-shot command reads and prints
    the fleet. At 4,096 nodes the read builds about a million objects that all live until
    the command ends, and each full collection walks every one of them: about 0.6 s of a
    ``gpus`` read's 1.5 s of building and printing (docs/benchmarks.md). Reference
    counting still frees everything that is not in a cycle; the collector is back on
    when the command ends (an in-process caller, the tests, keeps its own setting).
    Where the process ends with the command (``ONE_SHOT``), what it built is frozen
    first (``gc.freeze``): the collector would otherwise walk all of it again, every
    object allocated while it was off, at the first allocation after it is back on."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if commands.ONE_SHOT:
            gc.freeze()
        if was:
            gc.enable()


def read_fleet(
    ctx: typer.Context,
    *,
    node: str | None = None,
    selector: str | None = None,
    families: tuple[str, ...] | None = None,
) -> FleetSnapshot:
    """The fleet for ``--node`` / ``--selector``: nodes from the API, telemetry of the
    ``families`` the command shows (None: all), verdicts. A telemetry failure is in the
    snapshot's ``telemetry_error``; the caller decides what it costs."""
    from krea_ops.console import FleetScope

    ctx.with_resource(gc_paused())  # until the command has printed (its context closes)
    scope = FleetScope.of(node=node, selector=selector, families=families)
    return console_of(ctx).fleet(scope)
