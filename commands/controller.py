"""``krea-ops controller``: run the bundled controllers (``run``), see who leads them and
what they did last (``status``), and lift the node-health blast cap or veto after an
operator has looked (``ack``, audited like every write)."""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import typer

from commands.common import OutputOption, console_of
from commands.output import OutputFormat, emit, render
from commands.plans import DryRunOption, PlanFormat, PlanOutput, YesOption, run_plan
from krea_ops.errors import BadInput

if TYPE_CHECKING:
    pass

app = typer.Typer(
    no_args_is_help=True,
    help="The bundled controllers: burst taint, migrate-back, node health, quota sync.",
)


NamespaceOption = typer.Option(
    "krea-ops", "--namespace", "-n", help="where the Leases and the state ConfigMap live"
)
STATUS_COLUMNS = ("controller", "leader", "renewed", "last_action", "last_status", "last_at")
STATUS_WIDE_COLUMNS = (*STATUS_COLUMNS, "lease", "acquired", "transitions", "last_reason")


# -- run ---------------------------------------------------------------------------------


@app.command("run")
def run(
    ctx: typer.Context,
    which: str = typer.Argument(
        ..., metavar="NAME", help="burst-taint, migrate-back, node-health, quota-sync or all"
    ),
    once: bool = typer.Option(False, "--once", help="one pass, then exit"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="decide and log the plans; change nothing, take no lease"
    ),
    interval: float = typer.Option(30.0, "--interval", metavar="S", help="seconds between passes"),
    metrics_port: int = typer.Option(
        None, "--metrics-port", metavar="P", help="serve /metrics on this port (0: any free one)"
    ),
    metrics_address: str = typer.Option(
        "127.0.0.1", "--metrics-address", help="address to serve /metrics on"
    ),
    namespace: str = NamespaceOption,
) -> None:
    """Run controllers: leader-elected through one Lease each (15 s lease, 10 s renew
    deadline, 2 s retry; a replica acts only while renewed within the deadline), one
    pass every --interval. NAME is burst-taint, migrate-back, node-health, quota-sync
    or all. Each action, skip and alert is one JSON line on stderr; an input that
    cannot be read changes nothing (fail-static). --once exits 1 when another replica
    leads or the pass failed."""
    from pathlib import Path

    from krea_ops.controllers.leader import new_identity
    from krea_ops.controllers.loop import ControllerMetrics, LiveInputs, Runner, resolve
    from krea_ops.kube.events import client_secrets
    from krea_ops.runbook.audit import AuditLog, default_path

    if interval <= 0:
        raise BadInput("--interval must be more than 0 seconds")
    console = console_of(ctx)
    settings = console.settings
    controllers = resolve(which, settings)
    if which == "all":
        from krea_ops.controllers.loop import REGISTRY

        running = {c.name for c in controllers}
        absent = [n for n in REGISTRY if n not in running]
        if absent:
            print(f"not in this build, not run: {', '.join(absent)}", file=sys.stderr)
    cluster = console.cluster
    watched = None
    if settings.controller_watch and not once:
        from krea_ops.kube.watch import WatchedCluster

        if settings.controller_watch_resync_s < 0:
            raise BadInput("controller_watch_resync_s must be 0 (never) or more seconds")
        # One set of watch caches for every controller of this process: their passes
        # read nodes, pods and the rest from memory; the runner's writes go through it
        # too, so a pass never reads a cache that has not seen this process's own writes.
        watched = WatchedCluster(cluster, resync_s=settings.controller_watch_resync_s)
        ctx.call_on_close(watched.close)
        cluster = watched
    inputs = LiveInputs(settings, cluster, namespace)
    ctx.call_on_close(inputs.close)
    path = Path(settings.audit_log) if settings.audit_log else default_path()
    metrics = ControllerMetrics()
    if metrics_port is not None:
        server = metrics.serve(metrics_port, metrics_address)
        ctx.call_on_close(server.shutdown)
        print(f"metrics on http://{metrics_address}:{server.server_port}/metrics", file=sys.stderr)
    if watched is not None:
        metrics.watch_caches(watched)
    runner = Runner(
        cluster,
        controllers,
        inputs,
        namespace=namespace,
        identity=new_identity(),
        dry_run=dry_run,
        audit=AuditLog(path, secrets=client_secrets(cluster)),
        metrics=metrics,
    )
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (a pod stopped): finish the pass, release the Leases, exit 0
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
        ctx.call_on_close(lambda: signal.signal(signal.SIGTERM, previous))
    try:
        code = runner.run(stop, interval_s=interval, once=once)
    except KeyboardInterrupt:
        stop.set()
        code = 0
    if code:
        raise typer.Exit(code)


# -- status --------------------------------------------------------------------------------


def _brief(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def status_text(rows: list[dict[str, Any]], fmt: OutputFormat) -> str:
    table = [
        {
            "controller": r["controller"],
            "leader": r["leader"] or ("-" if not r["last_holder"] else "none (expired)"),
            "renewed": r["renewed_at"],
            "last_action": (r["last_action"] or {}).get("action"),
            "last_status": (r["last_action"] or {}).get("status"),
            "last_at": (r["last_action"] or {}).get("at"),
            "lease": r["lease"],
            "acquired": r["acquired_at"],
            "transitions": r["transitions"],
            "last_reason": (r["last_action"] or {}).get("reason"),
        }
        for r in rows
    ]
    out = render(table, fmt, columns=STATUS_COLUMNS, wide_columns=STATUS_WIDE_COLUMNS)
    notes = []
    for r in rows:
        if r["blast_cap"] is not None:
            notes.append(f"node-health blast cap: {_brief(r['blast_cap'])}")
        if r["veto"] is not None:
            notes.append(f"node-health veto: {_brief(r['veto'])}")
        for state, runs in (r.get("runs") or {}).items():
            notes.append(
                f"node-health judges {state}: {', '.join(runs)} (krea-ops train status NAME)"
            )
        repairs = r.get("repairs") or {}
        if repairs.get("escalated"):
            notes.append(
                f"node-health: failed validation repeatedly, needs repair: "
                f"{', '.join(repairs['escalated'])} (krea-ops nodes history NODE)"
            )
        if repairs.get("ready"):
            notes.append(
                f"node-health: passed validation, ready to restore: "
                f"{', '.join(repairs['ready'])} (krea-ops nodes restore NODE)"
            )
    ack = rows[0]["ack"] if rows else None
    if ack:
        notes.append(
            f"acknowledged at {ack['at'] or '?'} by {ack['by'] or '?'}: {ack['reason'] or ''}"
        )
    if not any(r["running"] for r in rows):
        notes.append("no controller leads now (krea-ops controller run NAME|all starts them)")
    return out + ("\n".join(notes) + "\n" if notes else "")


@app.command("status")
def status(
    ctx: typer.Context, output: OutputFormat = OutputOption, namespace: str = NamespaceOption
) -> None:
    """Which controllers run (a Lease renewed within its duration), who leads each, the
    node-health blast cap and veto state, the last acknowledgement, and the last action
    of each. json and yaml: one object per controller (shape in docs/cli.md)."""
    from krea_ops.controllers.status import controller_status

    cluster = console_of(ctx).cluster
    rows, _ = controller_status(cluster, namespace, time.time())
    if output in (OutputFormat.json, OutputFormat.yaml):
        emit(render(rows, output))
        return
    if output is OutputFormat.csv:
        emit(render(rows, output, columns=("controller", "running", "leader", "renewed_at")))
        return
    emit(status_text(rows, output))


# -- ack -------------------------------------------------------------------------------------


@app.command("ack")
def ack(
    ctx: typer.Context,
    reason: str = typer.Option(..., "--reason", help="what was looked at (on the annotation)"),
    dry_run: bool = DryRunOption,
    yes: bool = YesOption,
    output: PlanFormat = PlanOutput,
    namespace: str = NamespaceOption,
) -> None:
    """Lift the node-health blast cap or veto after an operator has looked: annotate
    the state ConfigMap krea-ops-controller-state with krea.ai/ack-at, -by and -reason.
    Audited like every write."""
    from krea_ops.controllers.status import plan_ack

    console = console_of(ctx)
    plan = plan_ack(console.cluster, namespace, reason=reason, user=console.user(), now=time.time())
    run_plan(console, plan, dry_run=dry_run, yes=yes, output=output)
