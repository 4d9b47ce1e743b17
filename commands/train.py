"""``krea-ops train``: DiT pre-training runs: launch and resume them (plans run by the
runbook's one executor, audited, as ``nodes evict``), their checkpoints on disk and how
often to take them."""

from __future__ import annotations

import io
import os
import re
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import typer

from commands.common import OutputOption, settings_from
from commands.output import OutputFormat, emit, render
from commands.plans import PlanFormat, PlanOutput, run_plan
from krea_ops import units

if TYPE_CHECKING:  # (imported by the commands that use them: start-up of every command)
    from krea_ops.console import Console
    from krea_ops.controllers.restarts import RestartRow, RunRestarts
    from krea_ops.gangstatus import GangStatus
    from krea_ops.runbook.plan import Plan
    from krea_ops.training.advice import Advice, IntervalCost
    from krea_ops.training.checkpoints import Checkpoint

app = typer.Typer(
    no_args_is_help=True,
    help="DiT pre-training runs: launch, resume, checkpoints on disk, checkpoint advice.",
)

CHECKPOINT_COLUMNS = ("path", "step", "modified_at", "size_bytes", "complete", "reason")
CHECKPOINT_WIDE = (
    "path",
    "format",
    "step",
    "modified_at",
    "size_bytes",
    "complete",
    "tracker",
    "reason",
    "note",
)
TABLE_WIDTH = 80


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def checkpoint_row(cp: Checkpoint) -> dict[str, Any]:
    return {
        "path": str(cp.path),
        "format": cp.format,
        "step": cp.step,
        "modified_at": _iso(cp.mtime),
        "modified_unix_s": None if cp.mtime is None else round(cp.mtime, 3),
        "size_bytes": cp.size_bytes,
        "complete": cp.complete,
        "reason": cp.reason,
        "tracker": cp.tracker,
        "note": cp.note,
    }


def _display_name(cp: Checkpoint, root: str) -> str:
    rel = os.path.relpath(cp.path, root)
    return cp.path.name if rel == "." else rel


def _checkpoint_table(found: list[Checkpoint], root: str, now: float) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("CHECKPOINT", overflow="fold", max_width=28)
    table.add_column("STEP", justify="right", no_wrap=True)
    table.add_column("AGE", no_wrap=True)
    table.add_column("SIZE", justify="right", no_wrap=True)
    table.add_column("COMPLETE", no_wrap=True)
    table.add_column("WHY NOT / NOTES", overflow="fold")
    for cp in found:
        notes = [cp.reason] if cp.reason else []
        if cp.tracker:
            notes.append("the Megatron tracker points here")
        if cp.note:
            notes.append(cp.note)
        table.add_row(
            _display_name(cp, root),
            "-" if cp.step is None else str(cp.step),
            units.since(cp.mtime, now),
            units.size(cp.size_bytes),
            "yes" if cp.complete else "no",
            "; ".join(notes) or "",
        )
    console = Console(
        file=io.StringIO(), width=TABLE_WIDTH, force_terminal=False, color_system=None
    )
    console.print(table)
    return str(console.file.getvalue())  # type: ignore[attr-defined]


# -- train checkpoints -----------------------------------------------------------------


@app.command("checkpoints")
def checkpoints(
    ctx: typer.Context,
    path: str = typer.Argument(
        ...,
        help="a checkpoint directory, a run's checkpoint folder, a torchtitan dump folder "
        "or a Megatron --save directory; the pods' path (as the dashboard and train status "
        "show it) is read where training_checkpoint_mount says it is mounted here; a "
        "training run's NAME or NAMESPACE/NAME, its JobSet's checkpoint directory",
    ),
    output: OutputFormat = OutputOption,
) -> None:
    """Checkpoints under PATH, newest first: step, time, size, complete or why not.

    Recognises PyTorch DCP / torchtitan step-N directories (complete when .metadata is
    there and every shard it lists is as long as it says), Megatron iter_NNNNNNN
    directories and their latest_checkpointed_iteration.txt tracker (torch_dist and
    legacy), and a PATH that is itself one checkpoint.
    """
    from krea_ops.training.checkpoints import discover

    path = _here(ctx, path)
    found = discover(path)
    if output is OutputFormat.table:
        now = time.time()
        if not found:
            emit(
                f"No checkpoints under {path} (looked for step-N/ and iter_NNNNNNN/ "
                "directories, .metadata and shard files)\n"
            )
            return
        emit(f"Checkpoints under {path}, newest first:\n")
        emit(_checkpoint_table(found, os.path.expanduser(path), now))
        return
    rows = [checkpoint_row(cp) for cp in found]
    emit(render(rows, output, columns=CHECKPOINT_COLUMNS, wide_columns=CHECKPOINT_WIDE))


def _here(ctx: typer.Context, path: str) -> str:
    """``path`` on this machine: as given when it is here; a pods' path (the one the
    dashboard shows, ``/checkpoints/NS/RUN``) mapped by ``training_checkpoint_mount``;
    else BadInput saying where it would have to be mounted."""
    from krea_ops.errors import BadInput
    from krea_ops.training.manifests import default_checkpoint_dir
    from krea_ops.training.runs import local_path, parse_mount

    if os.path.exists(os.path.expanduser(path)):
        return path
    mount_text = settings_from(ctx).training_checkpoint_mount
    mount = parse_mount(mount_text)
    if RUN_NAME.fullmatch(path):
        path = _run_checkpoints(ctx, path)
    local = local_path(path, mount)
    if local is not None:
        return str(local)
    pods_root = default_checkpoint_dir("NS", "RUN").split("/NS/")[0]  # /checkpoints
    if mount is None and (path == pods_root or path.startswith(pods_root + "/")):
        shown = path.encode("unicode_escape").decode("ascii")
        raise BadInput(
            f"{shown}: no such directory here; it is the pods' checkpoint path: say where "
            "their volume is mounted on this machine with training_checkpoint_mount "
            f"(KREA_OPS_TRAINING_CHECKPOINT_MOUNT={pods_root}=/mnt/checkpoints, say)"
        )
    return path


# a run as the dashboard and train status name it: NAME or NAMESPACE/NAME (DNS labels)
RUN_NAME = re.compile(r"(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _run_checkpoints(ctx: typer.Context, name: str) -> str:
    """The pods' checkpoint path of the training run ``[NAMESPACE/]NAME`` (its JobSet's
    ``krea.ai/checkpoint-dir``), for a PATH that is no directory here but names a run;
    BadInput when no run, or more than one, has that name."""
    from commands.common import console_of
    from krea_ops.errors import BadInput, Unavailable

    namespace, _, run = name.rpartition("/")
    try:
        every = console_of(ctx).training()
    except Unavailable as exc:
        raise BadInput(
            f"{name}: no such directory here, and the training runs could not be read to "
            f"look it up as one ({exc})"
        ) from exc
    runs = [r for r in every if r.name == run and (not namespace or r.namespace == namespace)]
    if not runs:
        raise BadInput(
            f"{name}: no such directory here, and no training run of that name (the "
            "dashboard's training screen and train status list them)"
        )
    if len(runs) > 1:
        spaces = ", ".join(sorted(f"{r.namespace}/{r.name}" for r in runs))
        raise BadInput(f"{name}: more than one training run of that name ({spaces}): say which")
    if runs[0].checkpoint_dir is None:
        raise BadInput(f"{name}: its JobSet names no checkpoint directory (krea.ai/checkpoint-dir)")
    return runs[0].checkpoint_dir


# -- train restarts --------------------------------------------------------------------

RESTART_COLUMNS = (
    "number",
    "at",
    "lost_steps",
    "lost_gpu_hours",
    "attributed_to",
    "cause",
    "confidence",
)
RESTART_WIDE = (*RESTART_COLUMNS, "at_exact", "last_step", "resumed_step", "gpus", "evidence")
RESTART_HEADERS = {
    "number": "#",
    "at": "WHEN (UTC)",
    "lost_steps": "LOST STEPS",
    "lost_gpu_hours": "LOST GPU-H",
    "attributed_to": "ATTRIBUTED TO",
    "confidence": "CONF",
}


def _anatomy(row: RestartRow) -> dict[str, Any]:
    """The restart's phases: when each ended, how long each took, the slowest."""
    from krea_ops.controllers.restarts import phases

    durations, slowest = phases(row.anatomy)
    return {
        **{k: _iso(v) for k, v in row.anatomy.items()},
        "phases_s": {name: None if d is None else round(d, 1) for name, d in durations},
        "slowest": slowest,
    }


def restart_row(row: RestartRow) -> dict[str, Any]:
    from krea_ops.controllers.restarts import anatomy_text

    a = row.attribution
    return {
        "number": row.number,
        "at": _iso(row.at),
        "at_unix_s": round(row.at, 3),
        "at_exact": row.at_exact,
        "lost_steps": row.lost_steps,
        "lost_steps_at_least": row.lost_at_least,
        "lost_gpu_hours": row.lost_gpu_hours,
        "last_step": row.last_step,
        "resumed_step": row.resumed_step,
        "gpus": row.gpus,
        "attributed_to": (
            "pending" if a is None else f"{a.target} (provisional)" if row.provisional else a.target
        ),
        "provisional": row.provisional,
        "node": a.node if a is not None else None,
        "gpu": a.gpu if a is not None else None,
        "port": a.port if a is not None else None,
        "cause": a.cause if a is not None else None,
        "confidence": a.confidence if a is not None else None,
        "evidence": list(a.evidence) if a is not None else [],
        "attributed_at": _iso(row.attributed_at),
        "anatomy": _anatomy(row),
        "anatomy_text": anatomy_text(row.anatomy),
        "failed_pods": [
            {
                "pod": f.pod,
                "node": f.node,
                "reason": f.reason,
                "exit_code": f.exit_code,
                "message": f.message,
                "log_tail": list(f.log_tail),
            }
            for f in row.failed
        ],
    }


def restarts_text(got: RunRestarts, rows: list[dict[str, Any]], table: str) -> str:
    head = f"Restarts of {got.namespace}/{got.name}"
    if got.restarts is None:
        head += " (the JobSet is gone; as recorded)"
    else:
        head += f" (JobSet restarts: {got.restarts}; recorded: {len(got.rows)})"
    lines = [head + ":"]
    if not got.recorded:
        lines.append(
            "  nothing recorded: node-health records restarts and their signals as they "
            "happen (krea-ops controller run node-health); restarts before it ran cannot "
            "be attributed"
        )
    elif got.unrecorded:
        lines.append(
            f"  {got.unrecorded} restart(s) happened before node-health first saw the run: "
            "not attributed"
        )
    if not rows:
        if got.recorded and not got.unrecorded:
            lines.append("  no restart")
        return "\n".join(lines) + "\n"
    out = "\n".join(lines) + "\n" + table
    evidence = []
    for r in rows:
        if r["attributed_to"] == "pending":
            evidence.append(f"#{r['number']}: attributed at {r['attributed_at']} (window open)")
            continue
        if r["provisional"]:
            evidence.append(
                f"#{r['number']}: provisional, from the findings so far; final at "
                f"{r['attributed_at']}, when the window after the restart closes"
            )
        first = r["evidence"][:2]
        evidence.extend(f"#{r['number']}: {e}" for e in first)
        if r["anatomy_text"]:
            evidence.append(f"#{r['number']}: {r['anatomy_text']}")
        if not r["at_exact"]:
            evidence.append(f"#{r['number']}: the time is when a pass saw it (up to a pass late)")
    return out + "Evidence (-o wide or -o json for all):\n" + "".join(f"  {e}\n" for e in evidence)


@app.command("restarts")
def restarts_cmd(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="the training run (its JobSet's name)"),
    namespace: str = typer.Option("training", "--namespace", "-n", help="the run's namespace"),
    output: OutputFormat = OutputOption,
) -> None:
    """Each restart of a run: when, lost work (steps since the checkpoint it resumed from,
    and GPU-hours), the node/GPU/port it is attributed to with a confidence, and the
    evidence: findings on the gang's nodes from 12 min before to 5 min after, the failed
    pods' exit and last log line. Recorded by the node-health controller as they happen."""
    from commands.common import console_of

    got = console_of(ctx).restarts(name, namespace=namespace)
    rows = [restart_row(r) for r in got.rows]
    if output in (OutputFormat.json, OutputFormat.yaml, OutputFormat.csv):
        emit(render(rows, output, columns=RESTART_COLUMNS, wide_columns=RESTART_WIDE))
        return
    table = render(
        rows,
        output,
        columns=RESTART_COLUMNS,
        wide_columns=RESTART_WIDE,
        headers=RESTART_HEADERS,
    )
    emit(restarts_text(got, rows, table))


# -- train status ----------------------------------------------------------------------

STATUS_COLUMNS = ("node", "gpu", "busy", "tensor", "sm_clock_mhz", "temperature_c", "stands_out")
STATUS_WIDE = (*STATUS_COLUMNS, "sm_clock_max_mhz", "clock_events", "evidence")
STATUS_HEADERS = {
    "busy": "BUSY",
    "tensor": "TENSOR",
    "sm_clock_mhz": "SM MHZ",
    "sm_clock_max_mhz": "MAX MHZ",
    "temperature_c": "°C",
    "stands_out": "STANDS OUT",
    "clock_events": "CLOCK EVENTS",
}


def _pct(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0%}"


def _num(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0f}"


STATUS_FORMATS = {
    "busy": _pct,
    "tensor": _pct,
    "sm_clock_mhz": _num,
    "sm_clock_max_mhz": _num,
    "temperature_c": _num,
}


def status_rows(got: GangStatus) -> list[dict[str, Any]]:
    """Every GPU of the gang (``stands_out``: how, for those that do)."""
    marks = {(s.node, s.gpu): s for s in got.judgement.standouts}
    rows = []
    for r in got.judgement.gpus:
        mark = marks.get((r.node, r.index)) or marks.get((r.node, None))
        rows.append(
            {
                "node": r.node,
                "gpu": r.index,
                "busy": r.busy,
                "tensor": r.tensor,
                "sm_clock_mhz": r.sm_clock_mhz,
                "sm_clock_max_mhz": r.sm_clock_max_mhz,
                "temperature_c": r.temperature_c,
                "clock_events": list(r.events),
                "stands_out": mark.kind if mark is not None else None,
                "evidence": mark.message if mark is not None else None,
            }
        )
    return rows


def status_json(got: GangStatus, now: float) -> dict[str, Any]:
    p, j = got.progress, got.judgement
    return {
        "run": got.key,
        "state": j.state,
        "reasons": list(j.reasons),
        "node": j.node,
        "gpu": j.gpu,
        "restarts": got.restarts,
        "nodes": list(got.nodes),
        "last_step": p.last_step,
        "last_step_at": _iso(p.last_step_at),
        "last_step_age_s": None if p.age(now) is None else round(p.age(now) or 0.0, 1),
        "started_at": _iso(p.started_at),
        "step_time_s": None if p.step_time_s is None else round(p.step_time_s, 3),
        "baseline_step_time_s": None if p.baseline_s is None else round(p.baseline_s, 3),
        "busy": None if j.busy is None else round(j.busy, 3),
        "tensor": None if j.tensor is None else round(j.tensor, 3),
        "standouts": [
            {"node": s.node, "gpu": s.gpu, "kind": s.kind, "evidence": s.message}
            for s in j.standouts
        ],
        "telemetry_error": got.telemetry_error,
        "log_error": got.log_error,
        "gpus": status_rows(got),
    }


def status_text(got: GangStatus, now: float, table: str) -> str:
    from krea_ops.gangstatus import summary_lines

    head, *rest = summary_lines(got, now)
    return "\n".join([head, *(f"  {line}" for line in rest)]) + "\n" + table


@app.command("status")
def status_cmd(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="the training run (its JobSet's name)"),
    namespace: str = typer.Option(
        None, "--namespace", "-n", help="the run's namespace (default: any, if one has it)"
    ),
    output: OutputFormat = OutputOption,
) -> None:
    """A run's progress and state: its last step and how long ago, its step time against
    its baseline, its GPUs' busy time and tensor activity, and its state (RUNNING,
    STARTING, SLOW, STRAGGLER, STALLED, HUNG, PENDING, UNKNOWN) with the reasons and the
    nodes and GPUs that stand out. -o wide lists every GPU of the gang."""
    from commands.common import console_of

    got = console_of(ctx).train_status(name, namespace=namespace)
    now = time.time()
    if output in (OutputFormat.json, OutputFormat.yaml):
        emit(render([status_json(got, now)], output))  # one row, as nodes show
        return
    rows = status_rows(got)
    if output is OutputFormat.csv:
        emit(render(rows, output, columns=STATUS_COLUMNS, wide_columns=STATUS_WIDE))
        return
    shown = rows if output is OutputFormat.wide else [r for r in rows if r["stands_out"]]
    table = (
        render(
            shown,
            output,
            columns=STATUS_COLUMNS,
            wide_columns=STATUS_WIDE,
            headers=STATUS_HEADERS,
            formats=STATUS_FORMATS,
        )
        if shown
        else ""
    )
    emit(status_text(got, now, table))


# -- train advise ----------------------------------------------------------------------


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 60.0, 3)


def _ratio(value: float | None) -> float | None:
    return None if value is None else round(value, 5)


def advice_row(advice: Advice) -> dict[str, Any]:
    rec, cur = advice.recommended, advice.current
    return {
        "checkpoint_seconds": advice.checkpoint_s,
        "mtbf_hours": round(advice.mtbf_s / 3600.0, 4),
        "mtbf_source": advice.mtbf_source,
        "nodes": advice.nodes,
        "failures_per_1000_node_days": advice.failures_per_1000_node_days,
        "failures_per_day": round(advice.failures_per_day, 4),
        "restart_minutes": _minutes(advice.restart_s),
        "young_interval_minutes": _minutes(advice.young_interval_s),
        "daly_interval_minutes": _minutes(advice.daly_interval_s),
        "recommended_interval_minutes": _minutes(rec.interval_s),
        "expected_lost_minutes_per_failure": _minutes(rec.lost_s_per_failure),
        "waste_ratio": _ratio(rec.waste_ratio),
        "waste_ratio_daly": _ratio(rec.waste_ratio_daly),
        "current_interval_minutes": _minutes(cur.interval_s) if cur else None,
        "current_expected_lost_minutes_per_failure": (
            _minutes(cur.lost_s_per_failure) if cur else None
        ),
        "current_waste_ratio": _ratio(cur.waste_ratio) if cur else None,
        "current_waste_ratio_daly": _ratio(cur.waste_ratio_daly) if cur else None,
    }


def _cost_line(cost: IntervalCost) -> str:
    waste, daly = units.percent(cost.waste_ratio, 1), units.percent(cost.waste_ratio_daly, 1)
    lost = units.duration(cost.lost_s_per_failure)
    return f"waste {waste} (Daly {daly}), {lost} lost per failure"


def advice_summary(advice: Advice) -> str:
    if advice.mtbf_source == "nodes":
        rate = advice.failures_per_1000_node_days
        source = f"{advice.nodes} nodes at {rate:g} failures/1000 node-days"
    else:
        source = "given"
    d = units.duration
    lines = [
        f"Checkpoint every {d(advice.daly_interval_s)} of compute "
        f"(Daly; Young: {d(advice.young_interval_s)}).",
        f"  checkpoint {d(advice.checkpoint_s)}, MTBF {d(advice.mtbf_s)} ({source}),",
        f"  {advice.failures_per_day:.2f} failures/day, restart {d(advice.restart_s)}",
        f"  at {d(advice.recommended.interval_s)}: {_cost_line(advice.recommended)}",
    ]
    if advice.current is not None:
        current = advice.current
        lines.append(f"  at {d(current.interval_s)} (now): {_cost_line(current)}")
    if advice.checkpoint_s >= 2 * advice.mtbf_s:
        lines.append("  warning: one checkpoint takes longer than two MTBFs; make saves cheaper")
    return "\n".join(lines) + "\n"


@app.command("advise")
def advise_cmd(
    checkpoint_seconds: float = typer.Option(
        ..., "--checkpoint-seconds", help="seconds the training stalls to write one checkpoint"
    ),
    mtbf_hours: float = typer.Option(
        None, "--mtbf-hours", help="mean time between failures of the whole gang, hours"
    ),
    nodes: int = typer.Option(
        None, "--nodes", help="nodes in the gang (MTBF from the per-node failure rate)"
    ),
    failures_per_1000_node_days: float = typer.Option(
        None,
        "--failures-per-1000-node-days",
        help="per-node failure rate, with --nodes (default: 6.5, Meta RSC-1)",
    ),
    restart_minutes: float = typer.Option(
        0.0,
        "--restart-minutes",
        help="detection + rescheduling + loading time per failure",
    ),
    current_interval_minutes: float = typer.Option(
        None, "--current-interval-minutes", help="also cost the interval in use now"
    ),
    output: OutputFormat = OutputOption,
) -> None:
    """Optimal checkpoint interval (Young and Daly), expected lost work and waste.

    Give --mtbf-hours, or --nodes (MTBF = 24,000 h / (nodes x failures per 1,000
    node-days)). Lost work per failure is half an interval plus the checkpoint, plus the
    restart time; waste is the share of wall time spent saving or redoing work.
    """
    from krea_ops.training.advice import advise

    advice = advise(
        checkpoint_seconds,
        mtbf_hours=mtbf_hours,
        nodes=nodes,
        failures_per_1000_node_days=failures_per_1000_node_days,
        restart_s=restart_minutes * 60.0,
        current_interval_s=(
            None if current_interval_minutes is None else current_interval_minutes * 60.0
        ),
    )
    if output is OutputFormat.table:
        emit(advice_summary(advice))
        return
    emit(render([advice_row(advice)], output))


# -- train launch / train resume -------------------------------------------------------


def _object_text(obj: dict[str, Any], output: PlanFormat) -> str:
    """One object as kubectl prints it with -o json|yaml (not a list: ``kubectl apply -f -``
    takes it as it is)."""
    import json

    import yaml

    if output is PlanFormat.json:
        return json.dumps(obj, indent=2) + "\n"
    return str(yaml.safe_dump(obj, sort_keys=False))


def _run_plan(
    console: Console,
    plan: Plan,
    manifest: dict[str, Any],
    *,
    dry_run: bool,
    yes: bool,
    output: PlanFormat,
) -> None:
    """As ``nodes evict``: ``--dry-run`` prints the plan as text, or with ``-o yaml|json``
    the JobSet it would create (what ``kubectl apply --dry-run=server -f -`` takes);
    otherwise ask (``--yes`` skips), run with the one executor, print what ran."""
    run_plan(
        console,
        plan,
        dry_run=dry_run,
        yes=yes,
        output=output,
        dry_data=lambda fmt: _object_text(manifest, fmt),
    )


@app.command("launch")
def launch(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="the training's name (its JobSet's)"),
    nodes: int = typer.Option(..., "--nodes", help="nodes in the gang, one pod each"),
    image: str = typer.Option(..., "--image", help="the trainer's container image"),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs each pod asks for"),
    queue: str = typer.Option("training", "--queue", help="Kueue LocalQueue in the namespace"),
    priority: str = typer.Option("training", "--priority", help="Kueue WorkloadPriorityClass"),
    checkpoint_dir: str = typer.Option(
        None,
        "--checkpoint-dir",
        help="checkpoints, as the pods see the path (default /checkpoints/NS/NAME)",
    ),
    resume_from: str = typer.Option(
        None, "--resume-from", help="a complete checkpoint to start from, or 'latest'"
    ),
    namespace: str = typer.Option("training", "--namespace", "-n", help="the run's namespace"),
    arg: list[str] = typer.Option(None, "--arg", help="an argument for the trainer (repeat)"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="print the plan (-o yaml|json: the JobSet) and create nothing"
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="do not ask; needed when stdin is no terminal"
    ),
    output: PlanFormat = PlanOutput,
) -> None:
    """A gang-scheduled DiT training as a JobSet managed by Kueue: suspended until Kueue
    admits it whole, one pod per node, the gang restarted on a failure (a disruption does
    not count towards maxRestarts). Refused (exit 2, nothing created): a missing queue or
    priority class, a gang larger than the healthy nodes of the queue's flavors, a
    --checkpoint-dir that is not a directory, an incomplete --resume-from. Launching the
    same run again is a no-op."""
    from commands.common import console_of
    from krea_ops.training.manifests import TrainingSpec

    console = console_of(ctx)
    spec = TrainingSpec(
        name=name,
        nodes=nodes,
        image=image,
        namespace=namespace,
        gpus_per_node=gpus_per_node,
        queue=queue,
        priority=priority,
        checkpoint_dir=checkpoint_dir,
        resume_from=resume_from,
        args=tuple(arg or ()),
    )
    plan, manifest = console.plan_launch(spec)
    _run_plan(console, plan, manifest, dry_run=dry_run, yes=yes, output=output)


@app.command("resume")
def resume(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="the training to relaunch"),
    checkpoint: str = typer.Option(
        "latest", "--checkpoint", help="'latest' (newest complete) or a checkpoint's path"
    ),
    namespace: str = typer.Option("training", "--namespace", "-n", help="the run's namespace"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="print the plan (-o yaml|json: the JobSet) and change nothing"
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="do not ask; needed when stdin is no terminal"
    ),
    output: PlanFormat = PlanOutput,
) -> None:
    """Relaunch a Failed or Completed training from its newest complete checkpoint (never
    the step a crash left half-written), or from --checkpoint if it is complete: delete
    the finished JobSet, create it again resuming there. Refused (exit 2) with the reason
    for an incomplete or corrupt checkpoint, and for a run still running."""
    from commands.common import console_of

    console = console_of(ctx)
    plan, manifest = console.plan_resume(name, namespace=namespace, checkpoint=checkpoint)
    _run_plan(console, plan, manifest, dry_run=dry_run, yes=yes, output=output)
