"""``krea-ops nodes list|show``: nodes with GPUs, schedulability, taints and a verdict;
``nodes evict|restore``: the runbook's node actions.

If telemetry cannot be read (Prometheus down), ``nodes list`` still prints the nodes
from the API, with GPU nodes UNKNOWN, then the one-line error, and exits 1.

The write commands are thin: the console builds the plan (``krea_ops.runbook``) and
``commands.plans.run_plan`` prints it, asks and hands it to the console's one executor,
as for every write command.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import typer

from commands import fmt
from commands.common import OutputOption, console_of, gc_paused, read_fleet
from commands.fabric import FORMATS as FABRIC_FORMATS
from commands.fabric import LEGEND as FABRIC_LEGEND
from commands.fabric import FabricKind, fabric_rows
from commands.fabric import headers as fabric_headers
from commands.gpus import COLUMNS as GPU_COLUMNS
from commands.gpus import HEADERS as GPU_HEADERS
from commands.gpus import MARKED_FORMATS as GPU_FORMATS
from commands.gpus import attention_lines, gpu_rows, marked, source_line
from commands.output import Formatter, OutputFormat, emit, render
from commands.plans import DryRunOption, PlanFormat, PlanOutput, YesOption, run_plan
from krea_ops import units
from krea_ops.errors import BadInput, Unavailable
from krea_ops.fleet import FleetSnapshot
from krea_ops.model import NodeView
from krea_ops.validation import NEEDS_REPAIR_LABEL, PENDING_TAINT_KEY, RESULT_ANNOTATION, Check

if TYPE_CHECKING:
    from collections.abc import Mapping

    from krea_ops.controllers.ledger import NodeHistory
    from krea_ops.controllers.restarts import LemonRow
    from krea_ops.runbook.execute import RunResult
    from krea_ops.validation import Validation
    from krea_ops.validation_status import NodeValidation

app = typer.Typer(no_args_is_help=True, help="Nodes: GPUs, schedulability, taints, health.")

# annotation prefixes worth showing an operator (ours and the simulator's)
OUR_ANNOTATIONS = ("krea.ai/", "burst.krea.ai/", "sim.krea.ai/")

COLUMNS = ["name", "gpu_capacity", "ready", "schedulable", "taints", "verdict"]
WIDE = [
    "name",
    "pool",
    "rack",
    "gpu_capacity",
    "gpu_allocatable",
    "ready",
    "schedulable",
    "cordoned",
    "taints",
    "telemetry_age_s",
    "verdict",
    "reasons",
]
HEADERS = {"gpu_capacity": "GPUS", "gpu_allocatable": "ALLOC", "telemetry_age_s": "DATA-AGE"}


def _yes_no(v: Any) -> str:
    return "yes" if v else "no"


def _taints(v: list[str]) -> str:
    text = ",".join(t.split("=")[0].split(":")[0] for t in v) or "-"
    return text if len(text) <= 30 else text[:29] + "…"


FORMATS: dict[str, Formatter] = {
    "ready": _yes_no,
    "schedulable": _yes_no,
    "cordoned": _yes_no,
    "taints": _taints,
    "telemetry_age_s": units.age,
    "reasons": fmt.first_reason,
}


def node_row(view: NodeView) -> dict[str, Any]:
    info = view.info
    tel = view.telemetry
    return {
        "name": info.name,
        "pool": info.labels.get("krea.ai/pool"),
        "rack": info.labels.get("krea.ai/rack"),
        "virtual": info.virtual,
        "gpu_capacity": info.gpu_capacity,
        "gpu_allocatable": info.gpu_allocatable,
        "ready": info.ready,
        "schedulable": info.schedulable,
        "cordoned": info.unschedulable,
        "taints": [str(t) for t in info.taints],
        "telemetry_age_s": None if tel is None or tel.age_s is None else round(tel.age_s, 1),
        "exporter_up": None if tel is None else tel.exporter_up,
        "verdict": str(view.verdict.severity),
        "reasons": [r.message for r in view.verdict.reasons],
    }


def summary_line(snap: FleetSnapshot) -> str:
    """Under the source line, where the node summaries were used: how many nodes were
    judged from them and how many were read GPU by GPU (docs/operations.md)."""
    tel = snap.telemetry
    if tel is None:
        return ""
    counted = sum(1 for t in tel.nodes.values() if t.gpu_count is not None)
    why = Counter(t.detail_reason for t in tel.nodes.values() if t.detail_reason is not None)
    if not counted and not why:
        return ""
    read = sum(why.values())
    line = f"node summaries: {counted:,} nodes clean by their summary, {read:,} read GPU by GPU"
    if why:
        line += " (" + "; ".join(f"{reason}: {n}" for reason, n in why.most_common(3))
        line += "; ...)" if len(why) > 3 else ")"
    return line + "\n"


@app.command("list")
def list_nodes(
    ctx: typer.Context,
    selector: str = typer.Option(
        None, "--selector", "-l", help="only nodes matching this label selector"
    ),
    output: OutputFormat = OutputOption,
) -> None:
    """Nodes with GPU count, schedulable, taints, verdict and reasons; nodes that need
    attention first."""
    # the list reads what the verdicts need (node summaries where Prometheus records them)
    snap = read_fleet(ctx, selector=selector, families=("verdicts",))
    rows = [node_row(v) for v in snap.views]
    text = render(
        rows,
        output,
        columns=COLUMNS,
        wide_columns=WIDE,
        headers=HEADERS,
        formats=FORMATS,
        styles={"verdict": fmt.verdict_style()},
    )
    if output is OutputFormat.table:
        text = source_line(snap) + summary_line(snap) + text
        text += attention_lines(rows, lambda r: r["name"])
    emit(text)
    if snap.telemetry_error:
        raise Unavailable(snap.telemetry_error)


LEMON_COLUMNS = ["node", "labelled", "candidate", "restarts", "evictions", "last", "history"]
LEMON_HEADERS = {"restarts": "RESTARTS", "evictions": "EVICTIONS", "last": "LAST (UTC)"}


def _utc(t: float | None) -> str | None:
    import time as _time

    return None if t is None else _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime(t))


def lemon_row(row: LemonRow) -> dict[str, Any]:
    times = [t for t, *_ in row.restarts] + list(row.evictions)
    return {
        "node": row.node,
        "labelled": row.labelled,
        "candidate": row.candidate,
        "restarts": len(row.restarts),
        "evictions": len(row.evictions),
        "last": _utc(max(times)) if times else None,
        "history": [f"{run} #{n} ({cause}) {_utc(t)}" for t, run, n, cause in row.restarts]
        + [f"evicted {_utc(t)}" for t in row.evictions],
    }


@app.command("lemons")
def lemons(ctx: typer.Context, output: OutputFormat = OutputOption) -> None:
    """Nodes implicated in repeated training restarts, with their history: the restarts
    attributed to each within the lemon window (28 days), its evictions, and whether it
    is labelled krea.ai/lemon=true (kept out of training placement). A node attributed
    node_health_lemon_restarts (2) restarts is a candidate; node-health labels it."""
    rows = [lemon_row(r) for r in console_of(ctx).lemons()]
    if output is OutputFormat.table and not rows:
        emit("No node attributed a training restart, evicted or labelled a lemon in the window\n")
        return
    emit(
        render(
            rows,
            output,
            columns=LEMON_COLUMNS,
            headers=LEMON_HEADERS,
            formats={"labelled": _yes_no, "candidate": _yes_no, "history": lambda v: "; ".join(v)},
        )
    )


@app.command("show")
def show_node(
    ctx: typer.Context,
    node: str = typer.Argument(..., help="node name"),
    output: OutputFormat = OutputOption,
) -> None:
    """One node in detail: verdict and reasons, its last validation (each check against
    the pool's baseline, needs-repair, pending validation), each GPU, InfiniBand ports and
    NVLink links with errors, pods on the node, taints and our annotations."""
    ctx.with_resource(gc_paused())
    detail = console_of(ctx).node(node)  # one node is cheap to read whole
    snap, view, pods = detail.snapshot, detail.view, detail.pods
    row = node_row(view)
    row["labels"] = dict(view.info.labels)
    row["annotations"] = {
        k: v for k, v in view.info.annotations.items() if k.startswith(OUR_ANNOTATIONS)
    }
    row["gpus"] = gpu_rows(snap)
    fabric = fabric_rows(snap, FabricKind.all)
    row["ib_ports"] = [r for r in fabric if r["kind"] == "ib"]
    row["nvlink_links_down"] = sum(
        1 for r in fabric if r["kind"] == "nvlink" and r["state"] == "DOWN"
    )
    row["nvlink_links_with_errors"] = [
        r for r in fabric if r["kind"] == "nvlink" and r["verdict"] != "OK"
    ]
    row["pods"] = [
        {
            "namespace": p.namespace,
            "name": p.name,
            "phase": p.phase,
            "gpus": p.gpus,
            "workload": p.labels.get("krea.ai/workload"),
            "owner": p.owner,
            "started_at": fmt.iso(p.started_at),
        }
        for p in pods
    ]
    from krea_ops.validation_status import node_validation

    standing = node_validation(view.info)
    row["validation"] = None if standing.last is None else standing.last.as_dict()
    if output is not OutputFormat.table and output is not OutputFormat.wide:
        emit(render([row], output))
    else:
        emit(_describe(row, snap, output, standing))
    if snap.telemetry_error:
        raise Unavailable(snap.telemetry_error)


def _describe(
    row: dict[str, Any], snap: FleetSnapshot, output: OutputFormat, standing: NodeValidation
) -> str:
    policy = snap.policy
    # the validation's JSON has its own section
    shown = {k: v for k, v in row["annotations"].items() if k != RESULT_ANNOTATION}
    out = [
        f"Node:        {row['name']}",
        f"Verdict:     {row['verdict']}",
    ]
    for reason in row["reasons"]:
        out.append(f"  - {reason}")
    out += [
        f"GPUs:        {row['gpu_capacity'] if row['gpu_capacity'] is not None else '-'} "
        f"(allocatable {row['gpu_allocatable'] if row['gpu_allocatable'] is not None else '-'})",
        f"Ready:       {'-' if row['ready'] is None else _yes_no(row['ready'])}",
        f"Schedulable: {_yes_no(row['schedulable'])}" + ("  (cordoned)" if row["cordoned"] else ""),
        f"Taints:      {', '.join(row['taints']) or '-'}",
        f"Pool/rack:   {row['pool'] or '-'} / {row['rack'] or '-'}",
        "Annotations: " + (", ".join(f"{k}={v}" for k, v in shown.items()) or "-"),
        *validation_lines(standing, time.time()),
        source_line(snap).rstrip(),
        "",
    ]
    if row["gpus"]:
        out.append("GPUs:")
        out.append(
            render(
                marked(row["gpus"]),
                output,
                columns=[c for c in GPU_COLUMNS if c != "node"],
                headers=GPU_HEADERS,
                formats=GPU_FORMATS,
                styles={
                    "verdict": fmt.verdict_style(),
                    "temperature_c": fmt.temperature_style(policy.hot_c, policy.warm_c),
                },
            )
        )
        out.extend(f"  ? {g['doubt']}" for g in row["gpus"] if g["doubt"])
    if row["ib_ports"]:
        out.append("InfiniBand:")
        out.append(
            render(
                row["ib_ports"],
                output,
                columns=[
                    "port",
                    "state",
                    "rate_bytes_per_s",
                    "rx_bytes_per_s",
                    "tx_bytes_per_s",
                    "errors_in_window",
                    "xmit_wait_ratio",
                    "verdict",
                ],
                headers=fabric_headers(policy.window_s),
                formats=FABRIC_FORMATS,
                styles={"verdict": fmt.verdict_style()},
            )
            + FABRIC_LEGEND
            + "\n"
        )
    bad_links = row["nvlink_links_with_errors"]
    out.append(f"NVLink: {row['nvlink_links_down']} links down, {len(bad_links)} links with errors")
    for link in bad_links[:20]:
        out.append(f"  {link['port']}: {'; '.join(link['reasons'])}")
    out.append("")
    out.append(f"Pods ({len(row['pods'])}):")
    if row["pods"]:
        out.append(
            render(
                row["pods"],
                output,
                columns=["namespace", "name", "phase", "gpus", "workload"],
            )
        )
    return "\n".join(out) + "\n"


def check_figure(c: Check) -> str | None:
    """``472.1 GB/s against 476.0 (pool median of 4)``; None for a check with no figure."""
    if c.figure is None:
        return None
    text = f"{c.figure:.1f} {c.unit or ''}".rstrip()
    if c.baseline is not None:
        text += f" against {c.baseline:.1f} ({c.baseline_from or 'baseline'})"
    return text


def validation_lines(standing: NodeValidation, now: float) -> list[str]:
    """The ``Validation:`` section of ``nodes show``: the last result, a line per check
    (failing first, with its detail), the needs-repair label, the pending-validation
    taint, and whether an evicted node was validated since."""
    v = standing.last
    node = standing.node
    if v is None:
        what = f"unreadable ({RESULT_ANNOTATION} does not parse)" if standing.unreadable else "none"
        out = [f"Validation:  {what}"]
    else:
        when = f"{fmt.iso(v.at)} ({units.since(v.at, now)} ago)"
        out = [
            f"Validation:  {'pass' if v.passed else 'FAIL'} ({v.level}) at {when}"
            f" by {v.by or '?'}, Job {v.job or '-'}"
        ]
        width = max(len(c.name) for c in v.checks) if v.checks else 0
        for c in sorted(v.checks, key=lambda c: c.passed):
            figure = check_figure(c)
            if c.passed:
                words = figure or c.detail
            else:
                words = f"{figure}: {c.detail}" if figure else c.detail
            out.append(f"  {c.name:<{width}}  {'pass' if c.passed else 'FAIL'}  {words}")
    if standing.needs_repair is not None:
        out.append(f"  needs repair: {NEEDS_REPAIR_LABEL}={standing.needs_repair}")
    if standing.pending:
        out.append(f"  pending validation: tainted {PENDING_TAINT_KEY} until it passes")
    if standing.evicted_at is not None:
        at = fmt.iso(standing.evicted_at)
        if standing.since_eviction:
            out.append(f"  evicted at {at}; validated since")
        else:
            out.append(
                f"  evicted at {at}; none since its eviction: krea-ops nodes validate {node}"
            )
    return out


# -- the runbook's node actions -------------------------------------------------------------


def parse_share(text: str | None) -> float | None:
    """``--max-share``: ``0.2`` or ``20%``; a share of the fleet in (0, 1]."""
    if text is None:
        return None
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BadInput(f"--max-share {text!r}: give a share such as 0.2 or 20%") from None
    if not 0 < value <= 1:
        raise BadInput(f"--max-share {text!r}: the share must be above 0 and at most 1 (100%)")
    return value


def _evict_blocked(result: RunResult) -> str:
    """What a blocked ``nodes evict`` leaves: the nodes cordoned and tainted."""
    plan = result.plan
    nodes = ", ".join(n for n in plan.nodes if plan.pods.get(n))
    return (
        f"{plan.action} blocked after --timeout {plan.options.get('timeout_s', 0):g}s: "
        f"{'; '.join(result.blocked)}; node {nodes} left cordoned and tainted with the "
        "reason (run the command again to retry, krea-ops nodes restore to undo)"
    )


@app.command("evict")
def evict_nodes(
    ctx: typer.Context,
    nodes: list[str] = typer.Argument(..., metavar="NODE", help="the nodes to take out of service"),
    reason: str = typer.Option(
        ..., "--reason", help="why (on the node's taint, annotation, Event)"
    ),
    timeout: float = typer.Option(
        300.0, "--timeout", help="seconds to keep retrying evictions a budget refuses"
    ),
    grace_period: int = typer.Option(
        None, "--grace-period", help="seconds each pod gets to stop (default: the pod's own)"
    ),
    force: bool = typer.Option(
        False, "--force", help="delete the pods instead of evicting them (budgets not consulted)"
    ),
    max_share: str = typer.Option(
        None, "--max-share", help="share of the fleet one action may take offline (0.1 or 10%)"
    ),
    dry_run: bool = DryRunOption,
    yes: bool = YesOption,
    output: PlanFormat = PlanOutput,
) -> None:
    """Cordon, taint krea.ai/unhealthy=<reason-slug>:NoSchedule, annotate who/why/when,
    then drain through the Eviction API (PodDisruptionBudgets respected; DaemonSet and
    mirror pods stay). Exit 3 when a budget still holds a pod at --timeout: the node stays
    cordoned with the reason."""
    console = console_of(ctx, max_share=parse_share(max_share))
    plan = console.plan_evict(
        nodes, reason=reason, timeout_s=timeout, grace_period_s=grace_period, force=force
    )
    run_plan(console, plan, dry_run=dry_run, yes=yes, output=output, blocked=_evict_blocked)


@app.command("restore")
def restore_nodes(
    ctx: typer.Context,
    nodes: list[str] = typer.Argument(..., metavar="NODE", help="the nodes to put back in service"),
    force: bool = typer.Option(
        False, "--force", help="also uncordon a node krea-ops did not evict"
    ),
    reason: str = typer.Option(None, "--reason", help="why (on the node's Event and the audit)"),
    dry_run: bool = DryRunOption,
    yes: bool = YesOption,
    output: PlanFormat = PlanOutput,
) -> None:
    """Undo evict: remove our taint and annotations, uncordon; every other taint, label and
    annotation stays. A node krea-ops did not evict is refused unless --force."""
    console = console_of(ctx)
    plan = console.plan_restore(nodes, force=force, reason=reason)
    run_plan(console, plan, dry_run=dry_run, yes=yes, output=output)


VALIDATION_COLUMNS = ["node", "level", "result", "check", "figure", "baseline", "detail"]


def validation_rows(results: Mapping[str, Validation]) -> list[dict[str, Any]]:
    """One row per check of each node's validation, the failing checks first."""
    rows = []
    for node, v in results.items():
        for c in sorted(v.checks, key=lambda c: c.passed):
            rows.append(
                {
                    "node": node,
                    "level": v.level,
                    "result": "pass" if c.passed else "FAIL",
                    "check": c.name,
                    "figure": f"{c.figure:.1f} {c.unit}" if c.figure is not None else "-",
                    "baseline": (
                        f"{c.baseline:.1f} ({c.baseline_from})" if c.baseline is not None else "-"
                    ),
                    "detail": c.detail,
                }
            )
    return rows


@app.command("validate")
def validate_nodes(
    ctx: typer.Context,
    nodes: list[str] = typer.Argument(..., metavar="NODE", help="the nodes to validate"),
    level: str = typer.Option(
        "quick",
        "--level",
        help="quick (dcgmi diag -r 2, NCCL all-reduce) or full (-r 3, and "
        "InfiniBand bandwidth per port)",
    ),
    reason: str = typer.Option(None, "--reason", help="why (on the Job, the Event, the audit)"),
    timeout: float = typer.Option(
        None, "--timeout", help="seconds to wait for the results (default: validation_timeout_s)"
    ),
    dry_run: bool = DryRunOption,
    yes: bool = YesOption,
    output: PlanFormat = PlanOutput,
) -> None:
    """A validation Job on each node (DCGM diagnostics, NCCL all-reduce across its GPUs,
    InfiniBand bandwidth per port for full), pinned to it, tolerating the quarantine taints,
    at a priority that never preempts. Waits for each, then records pass/fail per check with
    the figures against the pool's baseline on the node (annotation krea.ai/validation,
    label krea.ai/needs-repair on a failure, an Event) and prints them. Refused on a node
    holding a training's pods or whose GPUs are in use. Exit 1 when a node fails, 3 when a
    validation is still running at --timeout (run the command again to wait for it)."""
    from krea_ops.errors import EXIT_BLOCKED, KreaError
    from krea_ops.validation import check_level

    check_level(level)
    if timeout is not None and not timeout > 0:
        raise BadInput(f"--timeout {timeout:g}: give a number of seconds above 0")
    console = console_of(ctx)
    wait_s = timeout if timeout is not None else console.settings.validation_timeout_s
    plan = console.plan_validate(nodes, level=level, reason=reason)
    data = output is not PlanFormat.table

    def wait(result: RunResult) -> tuple[dict[str, Any], str, KreaError | None]:
        jobs = dict(result.plan.options.get("jobs") or {})
        progress = None if data else (lambda line: emit(line + "\n"))
        if progress is not None:
            progress(f"Waiting for {len(jobs)} validation(s), up to {wait_s:g}s ...")
        done, running = console.validation_wait(jobs, timeout_s=wait_s, progress=progress)
        rows = validation_rows(done)
        text = render(rows, OutputFormat.table, columns=VALIDATION_COLUMNS) if rows else ""
        failed = [n for n, v in done.items() if not v.passed]
        error: KreaError | None = None
        if running:
            still = ", ".join(f"{n} ({what})" for n, what in sorted(running.items()))
            error = KreaError(
                f"nodes validate: still running at --timeout {wait_s:g}s on {still}; run "
                "the command again to wait for it",
                exit_code=EXIT_BLOCKED,
            )
        elif failed:
            words = "; ".join(f"{n}: {', '.join(done[n].failed())}" for n in sorted(failed))
            error = KreaError(
                f"{len(failed)} of {len(done)} node(s) failed validation ({words}); they are "
                "labelled krea.ai/needs-repair"
            )
        fields = {
            "validations": [v.as_dict() for v in done.values()],
            "running": running,
        }
        return fields, text, error

    run_plan(console, plan, dry_run=dry_run, yes=yes, output=output, after=wait)


# -- a node's history -----------------------------------------------------------------------

HISTORY_COLUMNS = ["at", "kind", "detail", "by"]
HISTORY_HEADERS = {"at": "AT (UTC)", "kind": "WHAT"}


def history_json(got: NodeHistory) -> dict[str, Any]:
    """``nodes history -o json``: the node, its entries newest first, its figures."""
    s = got.summary
    return {
        "node": got.node,
        "entries": [
            {
                "at": fmt.iso(r.at),
                "at_unix_s": r.at,
                "kind": r.kind,
                "detail": r.detail or None,
                "by": r.by,
            }
            for r in got.rows
        ],
        "summary": {
            "window_s": got.window_s,
            "incidents": s.incidents,
            "mtbi_s": s.mtbi_s,
            "repairs": len(s.repairs),
            "time_to_repair_mean_s": s.time_to_repair_mean_s,
            "time_to_repair_p90_s": s.time_to_repair_p90_s,
            "validations_passed": s.validations_passed,
            "validations_failed": s.validations_failed,
            "escalations": s.escalations,
            "quarantined_now": s.quarantined_now,
            "quarantined_since": fmt.iso(s.quarantined_since),
            "waiting_repair": s.waiting_repair,
            "last_incident_at": fmt.iso(s.last_incident_at),
            "recorded": got.recorded,
        },
    }


def history_summary(got: NodeHistory) -> str:
    """The line under the table: the node's time-to-repair figures."""
    s = got.summary
    parts = [f"{units.counted(s.incidents, 'incident')} in {units.age(got.window_s)}"]
    if s.mtbi_s is not None:
        parts[0] += f" (MTBI {units.duration(s.mtbi_s)})"
    if s.repairs:
        parts.append(
            f"time to repair mean {units.duration(s.time_to_repair_mean_s)}, "
            f"p90 {units.duration(s.time_to_repair_p90_s)} "
            f"({units.counted(len(s.repairs), 'repair')})"
        )
    parts.append(f"validations {s.validations_passed} passed, {s.validations_failed} failed")
    if s.quarantined_now:
        since = fmt.iso(s.quarantined_since)
        parts.append("quarantined now" + (f" since {since}" if since else ""))
    if s.waiting_repair:
        parts.append("waits for repair (krea.ai/needs-repair)")
    if s.escalations:
        parts.append(f"escalated {s.escalations}x")
    line = f"{got.node}: " + "; ".join(parts)
    if not got.recorded:
        line += " (node-health keeps no ledger here: what the node says now, and restarts)"
    return line + "\n"


@app.command("history")
def node_history(
    ctx: typer.Context,
    node: str = typer.Argument(..., help="node name"),
    output: OutputFormat = OutputOption,
) -> None:
    """Every quarantine, validation, restore and attributed restart of the node, newest
    first, from node-health's ledger (90 days) and restart recorder and the node's own
    annotations; then its time-to-repair figures: incidents, mean time between them,
    time from quarantine to restore (mean, p90), validations passed and failed, whether
    it waits for repair."""
    got = console_of(ctx).node_history(node)
    if output in (OutputFormat.json, OutputFormat.yaml):
        emit(render([history_json(got)], output))  # one row, as nodes show
        return
    rows = [{"node": got.node, **e} for e in history_json(got)["entries"]]
    if output is OutputFormat.csv:
        emit(render(rows, output, columns=["node", *HISTORY_COLUMNS, "at_unix_s"]))
        return
    if not rows:
        emit(
            f"Nothing on record for node {got.node}: no quarantine, validation, restore or "
            f"attributed restart in the last {units.age(got.window_s)}\n"
        )
        return
    emit(render(rows, output, columns=HISTORY_COLUMNS, headers=HISTORY_HEADERS))
    emit(history_summary(got))
