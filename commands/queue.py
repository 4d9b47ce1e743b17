"""``krea-ops queue``: Kueue's queues, workloads, and why a workload waits."""

from __future__ import annotations

import shutil
import textwrap
import time
from typing import Any

import typer

from commands.common import OutputOption, console_of
from commands.output import OutputFormat, emit, render
from krea_ops import units
from krea_ops.errors import BadInput

app = typer.Typer(
    no_args_is_help=True,
    help="Kueue queues: quota vs healthy capacity, workloads, why one is pending.",
)

NamespaceOption = typer.Option(
    None, "--namespace", "-n", help="only this namespace (default: all namespaces)"
)


def _warn_without_health(error: str | None) -> None:
    """Node health could not be read: the command still works, judging nodes by Ready,
    cordon and taints, and says so on stderr."""
    if error:
        typer.echo(f"warning: no node health ({error}); drift counts Ready nodes", err=True)


# -- queue list ------------------------------------------------------------------------


def _capacity_json(cap: Any) -> dict[str, Any]:
    return {
        "flavor": cap.flavor,
        "node_labels": dict(cap.node_labels),
        "nodes": cap.nodes,
        "healthy_nodes": cap.healthy_nodes,
        "healthy_gpus": cap.healthy_gpus,
        "unknown_nodes": cap.unknown_nodes,
        "unknown_gpus": cap.unknown_gpus,
        "unavailable_nodes": cap.unavailable_nodes,
        "unavailable_gpus": cap.unavailable_gpus,
        "nominal_gpus": cap.nominal_gpus,
        "drift_gpus": cap.drift_gpus,
        "not_healthy": [
            {"node": n.node, "gpus": n.gpus, "state": n.state, "detail": n.detail}
            for n in cap.not_healthy
        ],
    }


def _queue_json(snap: Any) -> list[dict[str, Any]]:
    from krea_ops.queue import GPU

    out = []
    for cq in snap.cluster_queues:
        flavors = []
        for q in cq.quotas:
            cap = snap.flavors.get(q.flavor) if q.resource == GPU else None
            flavors.append(
                {
                    "flavor": q.flavor,
                    "resource": q.resource,
                    "nominal": q.nominal,
                    "borrowing_limit": q.borrowing_limit,
                    "lending_limit": q.lending_limit,
                    "reserved": q.reserved,
                    "used": q.used,
                    "borrowed": q.borrowed,
                    "free": q.free,
                    "capacity": _capacity_json(cap) if cap is not None else None,
                }
            )
        out.append(
            {
                "name": cq.name,
                "cohort": cq.cohort,
                "queueing_strategy": cq.queueing_strategy,
                "stop_policy": cq.stop_policy,
                "active": cq.active,
                "active_reason": cq.active_reason,
                "active_message": cq.active_message,
                "pending_workloads": cq.pending_workloads,
                "reserving_workloads": cq.reserving_workloads,
                "admitted_workloads": cq.admitted_workloads,
                "preemption": dict(cq.preemption),
                "flavors": flavors,
                "local_queues": [_lq_json(lq) for lq in cq.local_queues],
            }
        )
    return out


def _lq_json(lq: Any) -> dict[str, Any]:
    return {
        "namespace": lq.namespace,
        "name": lq.name,
        "cluster_queue": lq.cluster_queue,
        "pending_workloads": lq.pending_workloads,
        "reserving_workloads": lq.reserving_workloads,
        "admitted_workloads": lq.admitted_workloads,
        "active": lq.active,
        "reserved_gpus": lq.reserved_gpus,
        "used_gpus": lq.used_gpus,
    }


def _queue_rows(snap: Any) -> list[dict[str, Any]]:
    """One row per ClusterQueue and GPU flavor (a ClusterQueue without GPU quota: one
    row with no flavor)."""
    rows = []
    for cq in snap.cluster_queues:
        base = {
            "cluster_queue": cq.name,
            "cohort": cq.cohort,
            "strategy": cq.queueing_strategy,
            "active": cq.active,
            "pending_workloads": cq.pending_workloads,
            "reserving_workloads": cq.reserving_workloads,
            "admitted_workloads": cq.admitted_workloads,
            "local_queues": [f"{q.namespace}/{q.name}" for q in cq.local_queues],
        }
        for q in cq.gpu_quotas or (None,):
            cap = snap.flavors.get(q.flavor) if q is not None else None
            rows.append(
                {
                    **base,
                    "flavor": q.flavor if q else None,
                    "nominal_gpus": q.nominal if q else None,
                    "reserved_gpus": q.reserved if q else None,
                    "used_gpus": q.used if q else None,
                    "borrowed_gpus": q.borrowed if q else None,
                    "free_gpus": q.free if q else None,
                    "borrowing_limit_gpus": q.borrowing_limit if q else None,
                    "lending_limit_gpus": q.lending_limit if q else None,
                    "healthy_gpus": cap.healthy_gpus if cap else None,
                    "unknown_gpus": cap.unknown_gpus if cap else None,
                    "unavailable_gpus": cap.unavailable_gpus if cap else None,
                    "flavor_nominal_gpus": cap.nominal_gpus if cap else None,
                    "drift_gpus": cap.drift_gpus if cap else None,
                }
            )
    return rows


LIST_COLUMNS = [
    "cluster_queue", "cohort", "flavor", "nominal_gpus", "reserved_gpus", "used_gpus",
    "borrowed_gpus", "pending_workloads", "admitted_workloads", "drift_gpus",
]  # fmt: skip
LIST_WIDE = [
    "cluster_queue", "cohort", "strategy", "active", "flavor", "nominal_gpus",
    "borrowing_limit_gpus", "lending_limit_gpus", "reserved_gpus", "used_gpus",
    "borrowed_gpus", "free_gpus", "pending_workloads", "reserving_workloads",
    "admitted_workloads", "healthy_gpus", "unknown_gpus", "unavailable_gpus",
    "flavor_nominal_gpus", "drift_gpus", "local_queues",
]  # fmt: skip
LQ_COLUMNS = [
    "namespace", "name", "cluster_queue", "pending_workloads", "reserving_workloads",
    "admitted_workloads",
]  # fmt: skip
LIST_HEADERS = {
    "cluster_queue": "CLUSTERQUEUE",
    "nominal_gpus": "QUOTA",
    "reserved_gpus": "RESV",
    "used_gpus": "USED",
    "borrowed_gpus": "BORROW",
    "pending_workloads": "PEND",
    "reserving_workloads": "RESERVING",
    "admitted_workloads": "ADMIT",
    "drift_gpus": "DRIFT",
    "borrowing_limit_gpus": "BORROW-LIMIT",
    "lending_limit_gpus": "LEND-LIMIT",
    "free_gpus": "FREE",
    "healthy_gpus": "HEALTHY",
    "unknown_gpus": "UNKNOWN",
    "unavailable_gpus": "UNAVAILABLE",
    "flavor_nominal_gpus": "FLAVOR-QUOTA",
    "local_queues": "LOCALQUEUES",
}


def _signed(value: Any) -> str:
    return f"{value:+g}" if value else "0"


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _flavor_lines(snap: Any) -> list[str]:
    lines = []
    for cap in snap.flavors.values():
        if cap.nominal_gpus is None:
            continue
        line = (
            f"flavor {cap.flavor}: {cap.healthy_gpus} healthy GPUs on {cap.healthy_nodes} of "
            f"{cap.nodes} nodes, quota {_num(cap.nominal_gpus)}, drift "
            f"{_signed(cap.drift_gpus)}"
        )
        if cap.unknown_gpus:
            line += f"; {cap.unknown_gpus} GPUs of unknown health"
        if cap.unavailable_gpus:
            line += f"; {cap.unavailable_gpus} GPUs unavailable"
            shown = [n for n in cap.not_healthy if n.state != "unknown"][:4]
            line += " (" + ", ".join(f"{n.node} {n.state.replace('_', ' ')}" for n in shown)
            more = cap.unavailable_nodes - len(shown)
            line += f", {more} more)" if more > 0 else ")"
        lines.append(line)
    if not snap.health_judged and lines:
        lines.append("node health not judged: capacity counts Ready, uncordoned, untainted nodes")
    return lines


@app.command("list")
def list_queues(ctx: typer.Context, output: OutputFormat = OutputOption) -> None:
    """ClusterQueues and LocalQueues: GPU quota, usage, counts, drift vs healthy nodes.

    Per ClusterQueue and flavor: nominal GPU quota, reserved, used, borrowed, pending and
    admitted workloads, and drift: the healthy GPUs on the flavor's nodes minus the quota
    promised on that flavor (negative: Kueue admits work no node can run)."""
    snap = console_of(ctx).queues()
    _warn_without_health(snap.health_error)
    if output in (OutputFormat.json, OutputFormat.yaml):
        emit(render(_queue_json(snap), output))
        return
    rows = _queue_rows(snap)
    if output is OutputFormat.csv:
        emit(render(rows, output))
        return
    formats = {"drift_gpus": _signed}
    text = render(rows, output, columns=LIST_COLUMNS, wide_columns=LIST_WIDE,
                  headers=LIST_HEADERS, formats=formats)  # fmt: skip
    if not rows:
        text = "no ClusterQueues\n"
    lqs = [_lq_json(lq) for lq in snap.local_queues]
    if lqs:
        text += "\n" + render(
            lqs,
            output,
            columns=LQ_COLUMNS,
            headers={"name": "LOCALQUEUE", **LIST_HEADERS},
        )
    lines = _flavor_lines(snap)
    if lines:
        wrapped = [
            textwrap.fill(line, width=80, subsequent_indent="  ", break_on_hyphens=False)
            for line in lines
        ]
        text += "\n" + "\n".join(wrapped) + "\n"
    emit(text)


# -- queue workloads -------------------------------------------------------------------


def _workload_json(wl: Any) -> dict[str, Any]:
    return {
        "namespace": wl.namespace,
        "name": wl.name,
        "owner": wl.owner,
        "local_queue": wl.local_queue,
        "cluster_queue": wl.cluster_queue,
        "state": wl.state,
        "active": wl.active,
        "priority": wl.priority,
        "priority_class": wl.priority_class,
        "pods": wl.pods,
        "gpus_per_pod": wl.gpus_per_pod,
        "total_gpus": wl.total_gpus,
        "pod_sets": [
            {
                "name": ps.name,
                "count": ps.count,
                "gpus_per_pod": ps.gpus_per_pod,
                "total_gpus": ps.total_gpus,
                "flavor": ps.flavor,
            }
            for ps in wl.pod_sets
        ],
        "flavors": list(wl.flavors),
        "position": wl.position,
        "position_estimated": wl.position_estimated,
        "pending_reason": wl.pending_reason,
        "pending_message": wl.pending_message,
        "evicted_reason": wl.evicted_reason,
        "evicted_message": wl.evicted_message,
        "preempted_reason": wl.preempted_reason,
        "finished_reason": wl.finished_reason,
        "evicted_holding_quota": wl.evicted_holding_quota,
        "requeue_count": wl.requeue_count,
        "requeue_at": wl.requeue_at,
        "evictions": wl.evictions,
        "created_at": wl.created_at,
        "admitted_at": wl.admitted_at,
        "finished_at": wl.finished_at,
    }


def _workload_display(wl: Any, now: float) -> dict[str, Any]:
    return {
        **_workload_json(wl),
        "state": wl.state + ("!" if wl.evicted_holding_quota else ""),
        "queue": wl.local_queue,
        "gpus": wl.gang,
        "position": wl.position_text,
        "reason": wl.reason,
        "age": units.since(wl.created_at, now),
        "message": wl.message,
    }


WL_COLUMNS = ["namespace", "name", "queue", "state", "gpus", "position", "reason"]
WL_WIDE = [
    "namespace", "name", "owner", "queue", "cluster_queue", "state", "priority_class",
    "priority", "gpus", "position", "evictions", "requeue_count", "age", "reason", "message",
]  # fmt: skip
WL_HEADERS = {"position": "POS", "cluster_queue": "CLUSTERQUEUE", "priority_class": "CLASS",
              "requeue_count": "REQUEUES", "gpus": "PODSxGPU"}  # fmt: skip


@app.command("workloads")
def workloads(
    ctx: typer.Context,
    queue: str = typer.Option(
        None, "--queue", "-q", help="only this LocalQueue or ClusterQueue (default: all)"
    ),
    namespace: str = NamespaceOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Kueue workloads: state, gang size, queue position, Kueue's reason.

    The position counts from 0 (next to be admitted); a leading ~ marks an estimate
    (priority, then creation) made when Kueue's visibility API is not served."""
    wls = console_of(ctx).workloads(namespace=namespace, queue=queue)
    if output in (OutputFormat.json, OutputFormat.yaml):
        emit(render([_workload_json(w) for w in wls], output))
        return
    if output is OutputFormat.csv:
        rows = [_workload_json(w) for w in wls]
        for row in rows:
            row["pod_sets"] = [
                f"{ps['name']}:{ps['count']}x{ps['gpus_per_pod']}" for ps in row["pod_sets"]
            ]
        emit(render(rows, output))
        return
    if not wls:
        scope = " ".join(
            x for x in (f"in queue {queue}" if queue else "",
                        f"in namespace {namespace}" if namespace else "") if x
        )  # fmt: skip
        emit(f"no workloads{' ' + scope if scope else ''}\n")
        return
    now = time.time()
    rows = [_workload_display(w, now) for w in wls]
    text = render(rows, output, columns=WL_COLUMNS, wide_columns=WL_WIDE, headers=WL_HEADERS)
    if any(w.evicted_holding_quota for w in wls):
        text += (
            "! Evicted=True while the admission is still set (Kueue bug #14811): it holds\n"
            "  quota with no pods; set spec.active false, then true, to release it\n"
        )
    emit(text)


# -- queue why -------------------------------------------------------------------------


def _why_row(report: Any) -> dict[str, Any]:
    from krea_ops.queue import as_json

    facts = as_json(report)
    facts["workload"] = _workload_json(report.workload)
    cq = report.cluster_queue
    facts["cluster_queue"] = None if cq is None else _queue_json_one(cq)
    return facts


def _queue_json_one(cq: Any) -> dict[str, Any]:
    return {
        "name": cq.name,
        "cohort": cq.cohort,
        "active": cq.active,
        "active_reason": cq.active_reason,
        "pending_workloads": cq.pending_workloads,
        "admitted_workloads": cq.admitted_workloads,
        "preemption": dict(cq.preemption),
    }


def split_workload(text: str, namespace: str | None) -> tuple[str | None, str]:
    """(namespace, name) of ``NAME`` or ``NAMESPACE/NAME``. Neither part of a Kubernetes
    name can hold a ``/``, so the first one splits them; a namespace that disagrees with
    ``--namespace`` is bad input rather than a silent pick of one."""
    if "/" not in text:
        return namespace, text
    ns, _, name = text.partition("/")
    if not ns or not name or "/" in name:
        raise BadInput(f"workload {text!r}: give NAME or NAMESPACE/NAME")
    if namespace is not None and namespace != ns:
        raise BadInput(f"workload {text} is in namespace {ns}, not --namespace {namespace}")
    return ns, name


@app.command("why")
def why(
    ctx: typer.Context,
    workload: str = typer.Argument(
        ...,
        help="the Workload, or the JobSet/Job it runs: NAME, or NAMESPACE/NAME as the "
        "dashboard and queue workloads show it",
    ),
    namespace: str = NamespaceOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Why a workload is pending, in one paragraph.

    Gang size, quota and borrowing in the cohort, free GPUs on healthy nodes of the
    flavor, cordoned, tainted or unhealthy nodes, and Kueue's own reason verbatim."""
    scope, name = split_workload(workload, namespace)
    report = console_of(ctx).why(name, scope)
    _warn_without_health(report.health_error)
    if output in (OutputFormat.json, OutputFormat.yaml):
        emit(render([_why_row(report)], output))
        return
    if output is OutputFormat.csv:
        wl = report.workload
        row = {
            "namespace": wl.namespace,
            "name": wl.name,
            "state": wl.state,
            "blockers": list(report.blockers),
            "kueue_reason": report.kueue_reason,
            "kueue_message": report.kueue_message,
            "summary": report.summary,
        }
        emit(render([row], output))
        return
    width = min(shutil.get_terminal_size((80, 24)).columns, 100)
    text = textwrap.fill(report.summary, width=max(width - 1, 40), break_on_hyphens=False)
    emit(text + "\n")
    if output is OutputFormat.wide:
        for fit in report.flavors:
            rows = [
                {"node": f.node, "flavor": fit.flavor, "state": "healthy",
                 "gpus": f.allocatable_gpus, "requested": f.requested_gpus,
                 "free": f.free_gpus, "detail": None}
                for f in fit.free_by_node
            ] + [
                {"node": n.node, "flavor": fit.flavor, "state": n.state, "gpus": n.gpus,
                 "requested": None, "free": None, "detail": n.detail}
                for n in fit.not_healthy
            ]  # fmt: skip
            if rows:
                emit("\n" + render(rows, OutputFormat.table))
