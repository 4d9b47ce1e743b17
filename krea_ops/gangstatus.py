"""A training run's status: its progress, its state and the GPUs that stand out.

What ``krea-ops train status``, the dashboard's training screen and node-health's hang
and straggler actions read, one way: the gang (``training.gangs``), rank 0's log
(``training.progress``), the telemetry of the gang's nodes alone and their verdicts
(``fleet.load_fleet``), judged by ``training.stalls.judge``.

A one-off read (the command, the dashboard) reads a long tail of rank 0's log, enough for
a baseline (``STATUS_TAIL`` lines: at torchtitan's one line per 10 steps, thousands of
steps); node-health keeps each run's history across its passes (``progress.remember``) and
reads a short tail each pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from krea_ops.errors import Unavailable
from krea_ops.fleet import judged_error, load_fleet
from krea_ops.health import HealthPolicy
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.times import parse_time
from krea_ops.model import GpuSample, NodeInfo, Verdict
from krea_ops.telemetry.source import TelemetrySource
from krea_ops.training.gangs import Gang
from krea_ops.training.progress import Progress, progress, remember
from krea_ops.training.stalls import RunJudgement, StallConfig, judge, span

STATUS_TAIL = 400  # lines of rank 0's log a one-off read takes
HEAD_BYTES = 16384  # of rank 0's log: where the attempt starts and the step it loaded


@dataclass(frozen=True)
class GangReadings:
    """The telemetry of a gang's nodes: each node's GPUs and verdict. ``error``: why the
    GPUs could not be read (their readings are then absent)."""

    gpus: Mapping[str, tuple[GpuSample, ...]]
    verdicts: Mapping[str, Verdict]
    error: str | None


@dataclass(frozen=True)
class GangStatus:
    namespace: str
    name: str
    restarts: int
    nodes: tuple[str, ...]
    progress: Progress
    judgement: RunJudgement
    telemetry_error: str | None = None
    log_error: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def read_gang_readings(
    cluster: Cluster,
    source: TelemetrySource | None,
    policy: HealthPolicy,
    nodes: Sequence[str],
    infos: Sequence[NodeInfo],
    *,
    source_error: str | None = None,
) -> GangReadings:
    """The telemetry of ``nodes`` (``infos``: the fleet's nodes as listed) alone."""
    wanted = set(nodes)
    mine = [i for i in infos if i.name in wanted]
    if not mine:
        return GangReadings({}, {}, None)
    snap = load_fleet(
        cluster, source, policy, nodes=mine, source_error=source_error, only_nodes=True
    )
    error = judged_error(snap)
    gpus = {
        v.info.name: tuple(v.telemetry.gpus)
        for v in snap.views
        if v.telemetry is not None and error is None
    }
    verdicts = {v.info.name: v.verdict for v in snap.views}
    return GangReadings(gpus, verdicts, error)


def status_of(
    gang: Gang,
    history: Mapping[str, Any] | None,
    readings: GangReadings,
    now: float,
    cfg: StallConfig,
    *,
    log_error: str | None = None,
) -> GangStatus:
    """Pure: the status from what was read (``history`` as ``progress.remember`` keeps
    it)."""
    prog = progress(history, now, recent_s=cfg.recent_s, grace_s=cfg.grace_s)
    gpus = {n: readings.gpus[n] for n in gang.nodes if n in readings.gpus}
    judgement = judge(gang.running, prog, gpus, readings.verdicts, now, cfg, nodes=gang.nodes)
    return GangStatus(
        gang.namespace,
        gang.name,
        gang.restarts,
        gang.nodes,
        prog,
        judgement,
        readings.error,
        log_error,
    )


def pod_started(pod: Mapping[str, Any] | None) -> float | None:
    """When a pod started (``status.startTime``), None if it has not."""
    return parse_time(((pod or {}).get("status") or {}).get("startTime"))


def rank0_history(
    cluster: Cluster,
    gang: Gang,
    *,
    keep_s: float,
    with_head: bool = True,
    tail: Sequence[str] | None = None,
) -> tuple[dict[str, Any] | None, str | None]:
    """Rank 0's log read into the run's history: ``(history, None)``, or ``(None, why)``
    when the log cannot be read (the read goes on without it). ``with_head``: read the
    log's head too, for the line that says when the attempt started (else the pod's start
    stands for it); ``tail``: the log's last ``STATUS_TAIL`` lines, when read already."""
    rank0 = gang.rank0()
    if rank0 is None or not gang.running:
        return None, None
    name = str((rank0.get("metadata") or {}).get("name"))
    try:
        if tail is None:
            tail = cluster.pod_log(gang.namespace, name, tail_lines=STATUS_TAIL)
        head = cluster.pod_log(gang.namespace, name, limit_bytes=HEAD_BYTES) if with_head else None
    except Unavailable as exc:
        return None, str(exc)
    if tail is None:
        return None, f"no log of pod {gang.namespace}/{name} yet"
    history = remember(
        None, gang.uid, gang.restarts, tail, head or (), keep_s=keep_s, began=pod_started(rank0)
    )
    return history, None


def read_statuses(
    cluster: Cluster,
    source: TelemetrySource | None,
    policy: HealthPolicy,
    gangs: Sequence[Gang],
    now: float,
    cfg: StallConfig,
    infos: Sequence[NodeInfo],
    *,
    source_error: str | None = None,
    with_head: bool = True,
    tails: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, GangStatus]:
    """A one-off read of the runs' statuses (``train status``, the dashboard, each pass
    of node-health), by ``namespace/name``: rank 0's log of each running gang (``tails``:
    those already read, by run) and one telemetry read of all their nodes."""
    live = [g for g in gangs if not g.terminal]
    nodes = sorted({n for g in live if g.running for n in g.nodes})
    readings = (
        read_gang_readings(cluster, source, policy, nodes, infos, source_error=source_error)
        if nodes
        else GangReadings({}, {}, None)
    )
    out = {}
    for gang in live:
        tail = (tails or {}).get(gang.key)
        history, log_error = rank0_history(
            cluster, gang, keep_s=cfg.window_s, with_head=with_head, tail=tail
        )
        out[gang.key] = status_of(gang, history, readings, now, cfg, log_error=log_error)
    return out


def summary_lines(status: GangStatus, now: float) -> list[str]:
    """The status as ``train status`` and the training screen say it: the state, the
    progress, the GPUs, why, and what stands out."""
    p, j = status.progress, status.judgement
    gpus = len(j.gpus)
    lines = [
        f"{status.key}: {j.state} (restarts {status.restarts}, {len(status.nodes)} nodes"
        + (f", {gpus} GPUs read)" if gpus else ")")
    ]
    if p.last_step is not None:
        step = f"progress: step {p.last_step:,}, {span(p.age(now) or 0.0)} ago"
        if p.step_time_s is not None:
            step += f"; step time {p.step_time_s:.2f} s"
        if p.baseline_s is not None:
            step += f" (baseline {p.baseline_s:.2f} s)"
        lines.append(step)
    if j.busy is not None:
        lines.append(f"GPUs: {j.busy:.0%} busy, tensor activity {j.tensor or 0:.2f}")
    if status.telemetry_error:
        lines.append(f"GPUs not read: {status.telemetry_error}")
    if status.log_error:
        lines.append(f"rank 0's log not read: {status.log_error}")
    lines.append("why:")
    lines.extend(f"  {r}" for r in j.reasons)
    if j.standouts:
        lines.append("stands out:")
        lines.extend(
            f"  {s.node}" + (f" GPU {s.gpu}" if s.gpu is not None else "") + f": {s.message}"
            for s in j.standouts
        )
    return lines
