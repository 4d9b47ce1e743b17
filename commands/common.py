"""Options shared by several commands and the settings they feed."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

import typer

from commands.output import OutputFormat
from krea_ops.settings import Settings, load_settings

OutputOption = typer.Option(
    OutputFormat.table,
    "--output",
    "-o",
    help="table, wide, json, yaml or csv",
    case_sensitive=False,
)


def settings_from(ctx: typer.Context, **flags: Any) -> Settings:
    """Settings from file and env, then the global flags, then this command's flags."""
    merged: dict[str, Any] = dict(ctx.obj or {}) if isinstance(ctx.obj, dict) else {}
    merged.update({k: v for k, v in flags.items() if v is not None})
    return load_settings(merged)


def cluster_from(settings: Settings) -> Any:
    """The ``Cluster`` reader for the configured kubeconfig/context (not yet contacted)."""
    from krea_ops.kube.cluster import connect

    return connect(settings.kubeconfig, settings.context)


def open_telemetry(settings: Settings, cluster: Any) -> tuple[Any | None, str | None]:
    """The telemetry source, or (None, the one-line reason there is none)."""
    from krea_ops.errors import Unavailable
    from krea_ops.telemetry import open_source

    try:
        return open_source(settings, cluster), None
    except Unavailable as exc:
        return None, str(exc)


def health_policy(settings: Settings) -> Any:
    from krea_ops.health import HealthPolicy

    return HealthPolicy.from_settings(settings)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a one-shot command reads and prints
    the fleet. At 4,096 nodes the read builds about a million objects that all live until
    the command ends, and each full collection walks every one of them: about 0.6 s of a
    ``gpus`` read's 1.5 s of building and printing (docs/benchmarks.md). Reference
    counting still frees everything that is not in a cycle; the collector is back on
    when the command ends (an in-process caller, the tests, keeps its own setting)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_fleet(
    ctx: typer.Context,
    *,
    node: str | None = None,
    selector: str | None = None,
    families: tuple[str, ...] | None = None,
) -> tuple[Any, Any]:
    """(FleetSnapshot, Cluster) for ``--node`` / ``--selector``: nodes from the API,
    telemetry of the ``families`` the command shows (None: all), verdicts. A telemetry
    failure is in the snapshot's ``telemetry_error``; the caller decides what it costs."""
    from krea_ops.fleet import collect_ahead, load_fleet

    ctx.with_resource(gc_paused())  # until the command has printed (its context closes)
    settings = settings_from(ctx)
    ahead = None
    source, error = None, None
    if settings.prometheus_url:
        # a Prometheus named by flag, env or settings needs no cluster to find it: the
        # telemetry read starts before the Kubernetes client is imported and configured
        source, error = open_telemetry(settings, None)
        ahead = collect_ahead(source, node=node, selector=selector, families=families)
    try:
        cluster = cluster_from(settings)
        if source is None and error is None:
            source, error = open_telemetry(settings, cluster)
        snapshot = load_fleet(
            cluster,
            source,
            health_policy(settings),
            node=node,
            selector=selector,
            source_error=error,
            families=families,
            ahead=ahead,
        )
    finally:
        if source is not None:
            source.close()
    return snapshot, cluster
