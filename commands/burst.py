"""``krea-ops burst``: inference that burst to external GPU providers through
virtual-kubelet nodes: where it runs, what it costs so far (``status``); and the runbook's
burst actions (``pause``, ``unpause``, ``migrate``), plans printed, confirmed and run as
``nodes evict`` runs its own."""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import typer

from commands.common import OutputOption, console_of
from commands.output import OutputFormat, emit, render
from commands.plans import DryRunOption, PlanFormat, PlanOutput, YesOption, run_plan
from krea_ops import units
from krea_ops.errors import BadInput

if TYPE_CHECKING:  # (imported by the command that uses it: start-up of every command)
    from krea_ops.burst.status import BurstPod, BurstStatus, VirtualNode
    from krea_ops.runbook.execute import RunResult

app = typer.Typer(
    no_args_is_help=True,
    help="Inference burst to external GPU providers (virtual-kubelet nodes).",
)

NO_VIRTUAL_NODES = "no virtual-kubelet nodes in the cluster (bursting is not set up)"

NODE_COLUMNS = ("node", "status", "provider", "gpus", "pods", "paused")
NODE_WIDE_COLUMNS = (*NODE_COLUMNS, "allocatable", "taints", "detected_by", "usage_updated")
PROVIDER_COLUMNS = ("provider", "pods", "gpus", "gpu-h", "usd", "usd/gpu-h")
PROVIDER_WIDE_COLUMNS = ("node", *PROVIDER_COLUMNS, "capacity", "source")
POD_COLUMNS = ("pod", "phase", "gpus", "provider", "age", "gpu-h", "usd")
POD_WIDE_COLUMNS = (
    "namespace",
    "pod",
    "owner",
    "node",
    "phase",
    "gpus",
    "provider",
    "usd/gpu-h",
    "placed",
    "age",
    "gpu-h",
    "usd",
)
# csv: one row per pod on a virtual node (nested lists do not fit in columns).
POD_CSV_KEYS = (
    "node",
    "namespace",
    "name",
    "owner",
    "phase",
    "gpus",
    "provider",
    "usd_per_gpu_hour",
    "placed_at",
    "ended_at",
    "gpu_hours",
    "cost_usd",
    "age_s",
)


# -- machine shapes ---------------------------------------------------------------------


def iso(t: float | None) -> str | None:
    """Unix seconds as ISO-8601 UTC (``2026-11-29T21:00:00Z``)."""
    if t is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _round(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


def pod_row(pod: BurstPod) -> dict[str, Any]:
    return {
        "namespace": pod.namespace,
        "name": pod.name,
        "owner": pod.owner,
        "phase": pod.phase,
        "gpus": pod.gpus,
        "provider": pod.provider,
        "usd_per_gpu_hour": pod.usd_per_gpu_hour,
        "placed_at": iso(pod.placed_at),
        "ended_at": iso(pod.ended_at),
        "gpu_hours": _round(pod.gpu_hours, 4),
        "cost_usd": _round(pod.cost_usd, 4),
        "age_s": int(pod.age_s) if pod.age_s is not None else None,
    }


def node_row(node: VirtualNode, report: BurstStatus) -> dict[str, Any]:
    return {
        "node": node.name,
        "detected_by": node.detected_by,
        "provider": node.provider,
        "ready": node.ready,
        "ready_reason": node.ready_reason,
        "cordoned": node.cordoned,
        "gpu_capacity": node.gpu_capacity,
        "gpu_allocatable": node.gpu_allocatable,
        "paused": node.paused,
        "pause_reason": node.pause_reason,
        "paused_by": node.paused_by,
        "paused_at": iso(node.paused_at),
        "taints": [
            {"key": t.key, "value": t.value, "effect": t.effect, "owner": t.owner}
            for t in node.taints
        ],
        "providers": [
            {
                "provider": p.provider,
                "pods": p.pods,
                "gpus_in_use": p.gpus_in_use,
                "gpu_hours": _round(p.gpu_hours, 4),
                "cost_usd": _round(p.cost_usd, 4),
                "usd_per_gpu_hour": p.usd_per_gpu_hour,
                "capacity_gpus": p.capacity_gpus,
                "source": p.source,
            }
            for p in node.providers
        ],
        "pods": [pod_row(p) for p in node.pods],
        "usage_updated_at": iso(node.usage_updated_at),
        "pending_inference_pods": report.pending_inference_pods,
        "collected_at": iso(report.collected_at),
    }


def status_rows(report: BurstStatus) -> list[dict[str, Any]]:
    """The ``-o json``/``yaml`` shape: one object per virtual node (docs/cli.md)."""
    return [node_row(n, report) for n in report.nodes]


# -- tables -------------------------------------------------------------------------------


def _node_status(node: VirtualNode) -> str:
    text = {True: "Ready", False: "NotReady", None: "Unknown"}[node.ready]
    return f"{text},SchedulingDisabled" if node.cordoned else text


def _table(
    title: str,
    rows: Sequence[dict[str, Any]],
    fmt: OutputFormat,
    columns: Sequence[str],
    wide_columns: Sequence[str],
) -> str:
    return f"{title}\n" + render(rows, fmt, columns=columns, wide_columns=wide_columns)


def status_tables(report: BurstStatus, fmt: OutputFormat) -> str:
    many = len(report.nodes) > 1
    node_rows = [
        {
            "node": n.name,
            "status": _node_status(n),
            "provider": n.provider,
            "gpus": n.gpu_capacity,
            "pods": sum(1 for p in n.pods if p.active),
            "paused": "yes" if n.paused else "no",
            "allocatable": n.gpu_allocatable,
            "taints": ",".join(
                f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
                for t in n.taints
            )
            or None,
            "detected_by": n.detected_by,
            "usage_updated": iso(n.usage_updated_at),
        }
        for n in report.nodes
    ]
    provider_rows = [
        {
            "node": n.name,
            "provider": p.provider,
            "pods": p.pods,
            "gpus": p.gpus_in_use,
            "gpu-h": units.number(p.gpu_hours, 2),
            "usd": units.usd(p.cost_usd),
            "usd/gpu-h": units.usd(p.usd_per_gpu_hour),
            "capacity": p.capacity_gpus,
            "source": p.source,
        }
        for n in report.nodes
        for p in n.providers
    ]
    pod_rows = [
        {
            "namespace": p.namespace,
            "pod": p.name,
            "owner": p.owner,
            "node": n.name,
            "phase": p.phase,
            "gpus": p.gpus,
            "provider": p.provider,
            "usd/gpu-h": units.usd(p.usd_per_gpu_hour),
            "placed": iso(p.placed_at),
            "age": units.age(p.age_s),
            "gpu-h": units.number(p.gpu_hours, 2),
            "usd": units.usd(p.cost_usd),
        }
        for n in report.nodes
        for p in n.pods
    ]
    provider_columns = ("node", *PROVIDER_COLUMNS) if many else PROVIDER_COLUMNS
    pod_columns = ("node", *POD_COLUMNS) if many else POD_COLUMNS
    parts = [_table("VIRTUAL NODES", node_rows, fmt, NODE_COLUMNS, NODE_WIDE_COLUMNS)]
    if provider_rows:
        parts.append(
            _table("PROVIDERS", provider_rows, fmt, provider_columns, PROVIDER_WIDE_COLUMNS)
        )
    if pod_rows:
        parts.append(_table("PODS", pod_rows, fmt, pod_columns, POD_WIDE_COLUMNS))
    else:
        parts.append("PODS\nno pods on virtual nodes\n")
    notes: list[str] = []
    for n in report.nodes:
        if n.paused:
            who = f" by {n.paused_by}" if n.paused_by else ""
            since = f" since {iso(n.paused_at)}" if n.paused_at is not None else ""
            notes.append(
                f"bursting is PAUSED on {n.name}{who}{since}: "
                f"{n.pause_reason or 'no reason given'} "
                "(no new placements; running pods stay; krea-ops burst unpause lifts it)"
            )
    from krea_ops.burst.status import cost_notes

    notes.extend(
        textwrap.fill(n, 80, subsequent_indent="  ", break_long_words=False)
        for n in cost_notes(report)
    )
    notes.append(f"inference pods pending with no node: {report.pending_inference_pods}")
    return "\n".join(parts) + "\n" + "\n".join(notes) + "\n"


# -- the command --------------------------------------------------------------------------


@app.command("status")
def status(ctx: typer.Context, output: OutputFormat = OutputOption) -> None:
    """Virtual nodes, their taints, the pods on them, provider and cost so far.

    The table shows the virtual nodes, one summary line per provider
    and the pods; wide adds taints, owners and placement times.
    json and yaml: one object per virtual node with its taints,
    providers and pods (shape in docs/cli.md). csv: one row per pod.
    """
    report = console_of(ctx).burst()
    if output in (OutputFormat.json, OutputFormat.yaml):
        emit(render(status_rows(report), output))
        return
    if output is OutputFormat.csv:
        rows = [{"node": n.name, **pod_row(p)} for n in report.nodes for p in n.pods]
        emit(render(rows, output, columns=POD_CSV_KEYS))
        return
    if not report.nodes:
        print(NO_VIRTUAL_NODES, file=sys.stderr)
        return
    emit(status_tables(report, output))


# -- the runbook's burst actions -------------------------------------------------------------


def _migrate_blocked(result: RunResult) -> str:
    """What a blocked ``burst migrate`` leaves: the steering its first steps set."""
    left = (
        "; the virtual nodes stay as the plan's first steps left them "
        "(krea-ops burst status shows them)"
        if result.plan.options.get("direction")
        else ""
    )
    return (
        f"{result.plan.action} blocked: {'; '.join(result.blocked)}{left} "
        "(run the command again to go on)"
    )


@app.command("pause")
def pause(
    ctx: typer.Context,
    reason: str = typer.Option(..., "--reason", help="why (on the nodes' annotation and Event)"),
    dry_run: bool = DryRunOption,
    yes: bool = YesOption,
    output: PlanFormat = PlanOutput,
) -> None:
    """Stop new placements on every virtual node with our own taint
    (krea.ai/burst-paused=true:NoSchedule) and annotations saying who, why and since
    when. Pods running offsite keep running; the provider's own taints stay."""
    console = console_of(ctx)
    plan = console.plan_burst_pause(reason=reason)
    run_plan(console, plan, dry_run=dry_run, yes=yes, output=output)


@app.command("unpause")
def unpause(
    ctx: typer.Context,
    dry_run: bool = DryRunOption,
    yes: bool = YesOption,
    output: PlanFormat = PlanOutput,
) -> None:
    """Lift the pause: remove krea.ai/burst-paused and our annotations from every virtual
    node, nothing else."""
    console = console_of(ctx)
    plan = console.plan_burst_unpause()
    run_plan(console, plan, dry_run=dry_run, yes=yes, output=output)


@app.command("migrate")
def migrate(
    ctx: typer.Context,
    back: bool = typer.Option(
        False, "--back", help="move inference pods from virtual nodes to in-cluster GPUs"
    ),
    out: bool = typer.Option(
        False, "--out", help="move inference pods off in-cluster GPUs onto virtual nodes"
    ),
    max_pods: int = typer.Option(
        None, "--max", help="move at most N pods in this run (default: all the free GPUs hold)"
    ),
    selector: str = typer.Option(
        None, "--selector", "-l", help="which pods (default krea.ai/workload=inference)"
    ),
    timeout: float = typer.Option(
        600.0, "--timeout", help="seconds each move may wait (budget, replacement Ready)"
    ),
    dry_run: bool = DryRunOption,
    yes: bool = YesOption,
    output: PlanFormat = PlanOutput,
) -> None:
    """Move inference pods one at a time, each evicted (budgets respected) only while a GPU
    is free on the other side, waiting for its replacement Ready there before the next; a
    workload never has fewer Ready pods than before minus one. --back pauses the virtual
    nodes for the duration; --out taints the nodes the pods leave. Exit 2 when no GPU is
    free on the other side; exit 3 when a move could not finish."""
    if back == out:
        raise BadInput("give one of --back or --out")
    console = console_of(ctx)
    plan = console.plan_burst_migrate(
        direction="back" if back else "out",
        max_pods=max_pods,
        selector=selector,
        timeout_s=timeout,
    )
    run_plan(console, plan, dry_run=dry_run, yes=yes, output=output, blocked=_migrate_blocked)
