"""The restart recorder: node-health's record of every training restart, attributed.

Kubernetes keeps no history of a training's restarts: a JobSet counts them
(``status.restarts``), its Events last an hour, and the failed pods go with the restart. So
node-health, which reads the verdicts of every GPU node each pass anyway, also keeps:

* **signals** (``KeptSignal``, by node): each BAD, SUSPECT or UNKNOWN finding of each GPU
  node with when it was first and last seen, and its own evictions (code ``evicted``), for
  the attribution window (``before_s`` + ``after_s``) and a margin. A pass whose telemetry
  could not be read adds nothing (blind is not OK, and not BAD either).
* **gangs** (``GangMemo``, by ``namespace/name``): per training JobSet
  (``training.gangs``): its uid, restart count, the nodes and GPUs of the current attempt,
  the steps its rank 0 logged (``step: N``, from the last ``LOG_TAIL`` lines each pass:
  when a step was reached), the failed pods seen with the last lines of their logs, the
  node of each child Job, its hang (``Hang``) while judged HUNG, and the step the attempt
  loaded.
* **pending** (``PendingRestart``): a restart seen (``status.restarts`` went up) whose
  window has not closed, with its anatomy (``Anatomy``) as the new attempt comes up;
  ``after_s`` after it, it is attributed (``training.attribution.attribute``) and moved to
  the **log** (``RecordedRestart``, by run; per run the newest ``keep_per_run``,
  ``keep_total`` in all: the state shares one ConfigMap, 1 MiB, with the other
  controllers'), with the work it lost (``LostWork``): the last step the previous attempt
  logged minus the step the new attempt loaded (``Loading the checkpoint at step N``), and
  the GPU-hours from when that step was first logged to the restart. A restart whose new
  attempt has not said what it loaded yet is logged with the lost work unknown and filled
  in when it does.
* **attributed** (``AttributedRestart``): (node, time, run, restart, cause) of each
  attributed restart within the lemon window: ``attribution.lemon_candidates`` over it
  gives the lemon candidates that node-health labels and ``krea-ops nodes lemons`` lists.

The state is node-health's ``recorder`` JSON, read into ``RecorderState`` (frozen; the
types above its parts): anyone with access may have edited it, so an entry without the
shape it is written in is dropped and a value not of its type reads as absent (never a
failed pass), and ``to_json`` writes what earlier versions wrote.

The restart time is when the first failed pod of the attempt finished, if a pass saw it;
otherwise the pass that saw the count go up (up to one pass late: the record says so).
Restarts that happened before the recorder first saw the run are counted as unrecorded.

``read_restart_inputs`` does the I/O (one JobSet list, one pod list, a log tail per
running gang and per failed pod, the head of a new attempt's rank-0 log); ``record`` is
pure (the state in and out as JSON).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from krea_ops.errors import Unavailable
from krea_ops.gangstatus import HEAD_BYTES, STATUS_TAIL
from krea_ops.kube.cluster import Cluster, MissingCrd
from krea_ops.kube.rules import is_deleting
from krea_ops.kube.times import parse_time, rfc3339
from krea_ops.model import Severity, Verdict
from krea_ops.training.attribution import (
    FALSE_LEMONS,
    LEMON_RESTARTS,
    LEMON_WINDOW_S,
    SAME_FAULT_S,
    WINDOW_AFTER_S,
    WINDOW_BEFORE_S,
    Attribution,
    FailedPod,
    Restart,
    Signal,
    attribute,
    base_weight,
    counts_towards_lemon,
    last_step,
    lemon_candidates,
    loaded_step,
)
from krea_ops.training.gangs import Gang, failed_pod, read_gangs
from krea_ops.training.progress import points as progress_points
from krea_ops.training.stalls import span

# lines of rank 0's log read each pass: the last step for the recorder, and enough steps
# (torchtitan logs every 10) for the run's progress and baseline (``gangstatus``)
LOG_TAIL = STATUS_TAIL
FAILED_TAIL = 12  # lines kept of a failed pod's log
HEAD_WINDOW_S = 1800.0  # read the head of rank 0's log while its pod is this young
STEPS_KEPT = 120
CHILD_JOB = "child Job "  # a FailedPod known only from the JobSet's Event
FIRST_FAILED = re.compile(r"first failed job: ([^)\s]+)")
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
MIN_WEIGHT = 0.2  # findings that weigh less are not kept (attribution.base_weight)
MESSAGE_CHARS = 200
MAX_SIGNALS = 1500  # ~0.3 MB of state at most; in practice a few dozen nodes show findings
SIGNAL_CODES_SKIPPED = frozenset({"node_ready_unknown", "no_telemetry"})
_SEVERITIES = {s.name: s for s in Severity}


@dataclass(frozen=True)
class RecorderConfig:
    before_s: float = WINDOW_BEFORE_S
    after_s: float = WINDOW_AFTER_S
    keep_per_run: int = 20
    keep_runs: int = 20
    keep_total: int = 100  # ~2 KB a record: the log stays under ~200 KB of the ConfigMap
    lemon_window_s: float = LEMON_WINDOW_S
    lemon_restarts: int = LEMON_RESTARTS


@dataclass(frozen=True)
class RestartInputs:
    """What one pass read for the recorder. ``tails``/``heads``: ``ns/pod`` -> the last
    lines / the first lines of its log. A list that fails fails node-health's whole pass
    (fail-static: a failed list is not a cluster without trainings); a log that cannot be
    read is only evidence missing."""

    gangs: tuple[Gang, ...] = ()
    tails: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    heads: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # run ("ns/name") -> (when, reason, message) of the JobSet controller's restart Events
    events: Mapping[str, tuple[tuple[float, str, str], ...]] = field(default_factory=dict)

    def rank0_tails(self) -> dict[str, tuple[str, ...]]:
        """Each running gang's rank 0 log tail read this pass, by ``namespace/name``."""
        out = {}
        for gang in self.gangs:
            rank0 = gang.rank0()
            tail = self.tails.get(_pod_key(gang.namespace, rank0)) if rank0 else None
            if gang.running and tail is not None:
                out[gang.key] = tail
        return out


Obj = dict[str, Any]


def _pod_key(namespace: str, pod: Obj) -> str:
    return f"{namespace}/{(pod.get('metadata') or {}).get('name')}"


def _log(cluster: Cluster, ns: str, pod: Obj, **kw: int) -> tuple[str, ...] | None:
    name = str((pod.get("metadata") or {}).get("name"))
    try:
        lines = cluster.pod_log(ns, name, **kw)
    except Unavailable:
        return None  # a log is evidence, not a precondition: the pass goes on without it
    return None if lines is None else tuple(lines)


def read_restart_inputs(cluster: Cluster, now: float) -> RestartInputs:
    try:
        gangs = read_gangs(cluster)
    except MissingCrd:
        return RestartInputs()  # no JobSet API: no trainings to record
    tails: dict[str, tuple[str, ...]] = {}
    heads: dict[str, tuple[str, ...]] = {}
    events: dict[str, tuple[tuple[float, str, str], ...]] = {}
    for gang in gangs:
        if gang.terminal:
            continue
        if gang.restarts > 0 and _young(gang, now):
            events[gang.key] = _restart_events(cluster, gang)
        rank0 = gang.rank0()
        if rank0 is not None and gang.running:
            key = _pod_key(gang.namespace, rank0)
            if (tail := _log(cluster, gang.namespace, rank0, tail_lines=LOG_TAIL)) is not None:
                tails[key] = tail
            started = parse_time((rank0.get("status") or {}).get("startTime"))
            if gang.restarts > 0 and started is not None and now - started < HEAD_WINDOW_S:
                head = _log(cluster, gang.namespace, rank0, limit_bytes=HEAD_BYTES)
                if head is not None:
                    heads[key] = head
        for pod in (*gang.pods, *gang.previous):
            if failed_pod(pod) is not None:
                tail = _log(cluster, gang.namespace, pod, tail_lines=FAILED_TAIL)
                if tail is not None:
                    tails[_pod_key(gang.namespace, pod)] = tail
    return RestartInputs(tuple(gangs), tails, heads, events)


def _young(gang: Gang, now: float) -> bool:
    """The current attempt began within ``HEAD_WINDOW_S`` (or has no pod yet)."""
    made = [parse_time((p.get("metadata") or {}).get("creationTimestamp")) for p in gang.pods]
    return not made or any(t is None or now - t < HEAD_WINDOW_S for t in made)


def _restart_events(cluster: Cluster, gang: Gang) -> tuple[tuple[float, str, str], ...]:
    """The JobSet controller's Events about restarting the gang (``applying
    RestartJobSet failure policy action (first failed job: NAME)``): when, and which
    child Job failed first. Events last an hour; the failed pods often much less."""
    selector = f"involvedObject.kind=JobSet,involvedObject.name={gang.name}"
    path = f"/api/v1/namespaces/{gang.namespace}/events"
    items = cluster.list_all(f"list events of jobset {gang.key}", path, fieldSelector=selector)
    out = []
    for e in items:
        message = str(e.get("message") or "")
        if FIRST_FAILED.search(message) is None:
            continue
        at = (
            parse_time(e.get("lastTimestamp"))
            or parse_time(e.get("eventTime"))
            or parse_time((e.get("metadata") or {}).get("creationTimestamp"))
        )
        if at is not None:
            out.append((at, str(e.get("reason") or ""), message))
    return tuple(sorted(out))


# -- the persisted state, as read back (anyone with access may have edited it) -----------
#
# Each part reads with ``from_json`` what earlier versions wrote, a piece without the shape
# it is written in dropped (or, for a value, defaulted) so that a pass works on what is
# left and never raises, and writes it back with ``to_json`` as it was read.


def _num(v: Any) -> bool:
    """A JSON number that is one as a float (not ``true``, NaN or an int past a float)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return abs(v) <= sys.float_info.max if isinstance(v, int) else v == v


def _float_or_none(v: Any) -> float | None:
    return float(v) if _num(v) else None


def _int_or_none(v: Any) -> int | None:
    return int(v) if _num(v) and float(v).is_integer() else None


def _strs(v: Any) -> tuple[str, ...]:
    return tuple(v) if isinstance(v, list) and all(isinstance(x, str) for x in v) else ()


Step = tuple[float, int]  # (when a pass first read the step in rank 0's log, the step)


def _steps(v: Any) -> tuple[Step, ...]:
    out = []
    for x in v if isinstance(v, list) else ():
        if isinstance(x, list) and len(x) == 2 and _num(x[0]):
            step = _int_or_none(x[1])
            if step is not None:
                out.append((float(x[0]), step))
    return tuple(out)


def _steps_json(steps: Iterable[Step]) -> list[list[Any]]:
    return [[t, step] for t, step in steps]


def _short(lines: Iterable[str], most: int, chars: int = 300) -> list[str]:
    return [line[:chars] for line in list(lines)[:most]]


def _failed_json(p: FailedPod) -> dict[str, Any]:
    return {
        "pod": p.pod,
        "node": p.node,
        "at": p.at,
        "reason": p.reason,
        "exit_code": p.exit_code,
        "message": p.message,
        "log_tail": list(p.log_tail),
    }


def _failed_of(data: Any) -> FailedPod | None:
    if not isinstance(data, Mapping):
        return None
    at, code, tail = data.get("at"), data.get("exit_code"), data.get("log_tail")
    return FailedPod(
        pod=str(data.get("pod")),
        node=data.get("node") if isinstance(data.get("node"), str) else None,
        at=float(at) if isinstance(at, (int, float)) else None,
        reason=data.get("reason") if isinstance(data.get("reason"), str) else None,
        exit_code=int(code) if isinstance(code, int) else None,
        message=data.get("message") if isinstance(data.get("message"), str) else None,
        log_tail=tuple(str(x) for x in tail) if isinstance(tail, list) else (),
    )


def _failed_list(v: Any) -> tuple[FailedPod, ...]:
    return tuple(f for f in map(_failed_of, v if isinstance(v, list) else ()) if f)


def _kept(f: FailedPod) -> FailedPod:
    """A failed pod as a record keeps it: its last 5 log lines, each cut at 300 chars."""
    return dataclasses.replace(
        f, log_tail=tuple(_short(f.log_tail[-5:], 5)), message=(f.message or "")[:300] or None
    )


@dataclass(frozen=True)
class KeptSignal:
    """A finding of a node (its ``code``, worst ``severity``, GPU or port, latest
    ``message``) as the recorder keeps it: when a pass first and last saw it. JSON:
    ``[code, severity, gpu, port, first, last, message]``, severity by name."""

    code: str
    severity: Severity
    gpu: int | None
    port: str | None
    first: float
    last: float
    message: str

    @staticmethod
    def from_json(e: Any) -> KeptSignal | None:
        """None for anything that is not such an entry (it is dropped)."""
        if (
            isinstance(e, list)
            and len(e) == 7
            and isinstance(e[0], str)
            and isinstance(e[1], str)
            and e[1] in _SEVERITIES
            and (e[2] is None or _int_or_none(e[2]) is not None)
            and (e[3] is None or isinstance(e[3], str))
            and _num(e[4])
            and _num(e[5])
            and isinstance(e[6], str)
        ):
            gpu = None if e[2] is None else _int_or_none(e[2])
            return KeptSignal(e[0], _SEVERITIES[e[1]], gpu, e[3], e[4], e[5], e[6])
        return None

    def to_json(self) -> list[Any]:
        return [
            self.code,
            self.severity.name,
            self.gpu,
            self.port,
            self.first,
            self.last,
            self.message,
        ]

    def signal(self, node: str) -> Signal:
        return Signal(
            node,
            self.code,
            self.severity,
            self.message,
            float(self.first),
            float(self.last),
            self.gpu,
            self.port,
        )


@dataclass(frozen=True)
class Hang:
    """An attempt judged HUNG (``training.stalls``): since when, the last step logged
    before it, the node and GPU it was likely due to, and the judgement's reasons."""

    since: float
    last_step_at: float | None = None
    node: str | None = None
    gpu: int | None = None
    reasons: tuple[str, ...] = ()

    @staticmethod
    def from_json(value: Any) -> Hang | None:
        """None unless a mapping with a ``since``; any other key of it not of its type
        reads as absent (the stall judgement's own keys, ``state`` ``uid`` ``attempt``
        ``acted``, are not kept)."""
        if not isinstance(value, Mapping) or not _num(value.get("since")):
            return None
        node, last = value.get("node"), value.get("last_step_at")
        return Hang(
            since=float(value["since"]),
            last_step_at=_float_or_none(last),
            node=node if isinstance(node, str) else None,
            gpu=_int_or_none(value.get("gpu")),
            reasons=_strs(value.get("reasons")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "last_step_at": self.last_step_at,
            "node": self.node,
            "gpu": self.gpu,
            "reasons": list(self.reasons),
        }


# A restart's phases, in order: (key of the moment it ends, name, what it is)
PHASES = (
    ("detected_at", "detection", "from the failure to the restart being set off"),
    ("pods_gone_at", "teardown", "the old attempt's pods going"),
    ("scheduled_at", "scheduling", "the new attempt's pods admitted and bound"),
    ("running_at", "start", "their containers started and Ready"),
    ("first_step_at", "first step", "loading the checkpoint, compiling, the first step"),
)


@dataclass(frozen=True)
class Anatomy:
    """When each phase of a restart ended (Unix s; None: not known yet), ``failed_at``
    first, then the ends of ``PHASES`` (``anatomy`` says how each is read)."""

    failed_at: float | None = None
    detected_at: float | None = None
    pods_gone_at: float | None = None
    scheduled_at: float | None = None
    running_at: float | None = None
    first_step_at: float | None = None

    @staticmethod
    def from_json(value: Any) -> Anatomy | None:
        """None unless a mapping; a moment that is not a number reads as not known."""
        if not isinstance(value, Mapping):
            return None

        def at(key: str) -> float | None:
            return _float_or_none(value.get(key))

        return Anatomy(
            at("failed_at"),
            at("detected_at"),
            at("pods_gone_at"),
            at("scheduled_at"),
            at("running_at"),
            at("first_step_at"),
        )

    def to_json(self) -> dict[str, float | None]:
        return {
            "failed_at": self.failed_at,
            "detected_at": self.detected_at,
            "pods_gone_at": self.pods_gone_at,
            "scheduled_at": self.scheduled_at,
            "running_at": self.running_at,
            "first_step_at": self.first_step_at,
        }


@dataclass(frozen=True)
class GangMemo:
    """What the recorder remembers of a training JobSet between passes: its ``uid`` and
    restart count, the restarts made before it first saw the run (``unrecorded``), the
    nodes and GPUs of the current attempt, the steps rank 0 logged (``Step``), the failed
    pods seen (by pod name) and the node of each single-node child Job, when a pass first
    saw the attempt (``attempt_seen``), its hang if judged HUNG, and the step the attempt
    loaded (``resumed_step``) once its log said."""

    uid: str
    restarts: int
    unrecorded: int = 0
    nodes: tuple[str, ...] = ()
    gpus: int = 0
    steps: tuple[Step, ...] = ()
    failed: Mapping[str, FailedPod] = field(default_factory=dict)
    jobs: Mapping[str, str] = field(default_factory=dict)
    attempt_seen: float = 0.0
    hung: Hang | None = None
    resumed_step: int | None = None

    @staticmethod
    def from_json(g: Any) -> GangMemo | None:
        """None without a whole ``restarts`` (the gang is forgotten: its next pass counts
        its restarts as unrecorded)."""
        if not isinstance(g, Mapping):
            return None
        restarts = _int_or_none(g.get("restarts"))
        if restarts is None:
            return None
        failed, jobs = g.get("failed"), g.get("jobs")
        return GangMemo(
            uid=str(g.get("uid") or ""),
            restarts=restarts,
            unrecorded=_int_or_none(g.get("unrecorded")) or 0,
            nodes=_strs(g.get("nodes")),
            gpus=_int_or_none(g.get("gpus")) or 0,
            steps=_steps(g.get("steps")),
            failed={
                str(k): f
                for k, v in (failed.items() if isinstance(failed, Mapping) else ())
                if (f := _failed_of(v)) is not None
            },
            jobs={
                str(k): v
                for k, v in (jobs.items() if isinstance(jobs, Mapping) else ())
                if isinstance(v, str)
            },
            attempt_seen=float(g["attempt_seen"]) if _num(g.get("attempt_seen")) else 0.0,
            hung=Hang.from_json(g.get("hung")),
            resumed_step=_int_or_none(g.get("resumed_step")),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "uid": self.uid,
            "restarts": self.restarts,
            "unrecorded": self.unrecorded,
            "nodes": list(self.nodes),
            "gpus": self.gpus,
            "steps": _steps_json(self.steps),
            "failed": {k: _failed_json(f) for k, f in self.failed.items()},
            "jobs": dict(self.jobs),
            "attempt_seen": self.attempt_seen,
        }
        if self.hung is not None:
            out["hung"] = self.hung.to_json()
        if self.resumed_step is not None:
            out["resumed_step"] = self.resumed_step
        return out


@dataclass(frozen=True)
class PendingRestart:
    """A restart seen whose attribution window has not closed: the run
    (``namespace/name``), the restart's number, when it happened (``at_exact``: from a
    failed pod or the JobSet's Event, else the pass that saw the count go up), and what
    the attempt it ended left: its nodes and GPUs, failed pods, steps and hang; and the
    restart's anatomy as its new attempt comes up."""

    run: str
    number: int
    at: float
    at_exact: bool = False
    nodes: tuple[str, ...] = ()
    gpus: int | None = None
    failed: tuple[FailedPod, ...] = ()
    steps: tuple[Step, ...] = ()
    hung: Hang | None = None
    anatomy: Anatomy | None = None

    @staticmethod
    def from_json(p: Any) -> PendingRestart | None:
        """None without a run named ``namespace/name``, a whole number and a time."""
        if not isinstance(p, Mapping):
            return None
        run, number = p.get("run"), _int_or_none(p.get("number"))
        if not isinstance(run, str) or "/" not in run or number is None or not _num(p.get("at")):
            return None
        return PendingRestart(
            run=run,
            number=number,
            at=float(p["at"]),
            at_exact=bool(p.get("at_exact")),
            nodes=_strs(p.get("nodes")),
            gpus=_int_or_none(p.get("gpus")),
            failed=_failed_list(p.get("failed")),
            steps=_steps(p.get("steps")),
            hung=Hang.from_json(p.get("hung")),
            anatomy=Anatomy.from_json(p.get("anatomy")),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run": self.run,
            "number": self.number,
            "at": self.at,
            "at_exact": self.at_exact,
            "nodes": list(self.nodes),
            "gpus": self.gpus,
            "failed": [_failed_json(f) for f in self.failed],
            "steps": _steps_json(self.steps),
        }
        if self.hung is not None:
            out["hung"] = self.hung.to_json()
        if self.anatomy is not None:
            out["anatomy"] = self.anatomy.to_json()
        return out

    def restart(self) -> Restart:
        namespace, _, name = self.run.partition("/")
        return Restart(
            namespace=namespace,
            run=name,
            number=self.number,
            at=float(self.at),
            nodes=self.nodes,
            failed=self.failed,
            gpus=self.gpus,
        )


@dataclass(frozen=True)
class LostWork:
    """The work a restart lost: the last step the attempt it ended logged, the step the
    new attempt loaded, the steps between (``at_least``: the attempt logged past the last
    step read, so a floor) and the GPU-hours from when the loaded step was first logged to
    the restart (None: not known). JSON: part of its record (``lost_at_least`` only when
    true)."""

    last_step: int | None = None
    resumed_step: int | None = None
    lost_steps: int | None = None
    lost_gpu_hours: float | None = None
    at_least: bool = False

    @staticmethod
    def from_json(r: Mapping[str, Any]) -> LostWork:
        return LostWork(
            last_step=_int_or_none(r.get("last_step")),
            resumed_step=_int_or_none(r.get("resumed_step")),
            lost_steps=_int_or_none(r.get("lost_steps")),
            lost_gpu_hours=_float_or_none(r.get("lost_gpu_hours")),
            at_least=bool(r.get("lost_at_least")),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"last_step": self.last_step, "resumed_step": self.resumed_step}
        if self.at_least:
            out["lost_at_least"] = True
        out["lost_steps"] = self.lost_steps
        out["lost_gpu_hours"] = self.lost_gpu_hours
        return out


@dataclass(frozen=True)
class RecordedRestart:
    """A restart in the log, its window closed: its number, when, the GPUs and how many
    nodes the attempt it ended had, its attribution (at most 8 lines of evidence), the
    first two failed pods (``_kept``), the work it lost, its anatomy and hang, and the
    steps of the attempt it ended while the new attempt has not said what it loaded
    (``steps``; None once it has, or never will)."""

    number: int
    at: float
    at_exact: bool
    gpus: int | None
    nodes: int | None
    attribution: Attribution
    failed: tuple[FailedPod, ...] = ()
    lost: LostWork = LostWork()
    anatomy: Anatomy | None = None
    hung: Hang | None = None
    steps: tuple[Step, ...] | None = None

    @staticmethod
    def from_json(r: Any) -> RecordedRestart | None:
        """None without a whole number and a time."""
        if not isinstance(r, Mapping) or not _num(r.get("at")):
            return None
        number = _int_or_none(r.get("number"))
        if number is None:
            return None
        attribution = r.get("attribution")
        got = Attribution.from_json(attribution if isinstance(attribution, Mapping) else {})
        return RecordedRestart(
            number=number,
            at=r["at"],
            at_exact=bool(r.get("at_exact")),
            gpus=_int_or_none(r.get("gpus")),
            nodes=_int_or_none(r.get("nodes")),
            attribution=dataclasses.replace(got, evidence=tuple(_short(got.evidence, 8))),
            failed=tuple(_kept(f) for f in _failed_list(r.get("failed"))[:2]),
            lost=LostWork.from_json(r),
            anatomy=Anatomy.from_json(r.get("anatomy")),
            hung=Hang.from_json(r.get("hung")),
            steps=_steps(r["steps"]) if "steps" in r else None,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "number": self.number,
            "at": self.at,
            "at_exact": self.at_exact,
            "gpus": self.gpus,
            "nodes": self.nodes,
            "attribution": self.attribution.to_json(),
            "failed": [_failed_json(f) for f in self.failed],
            **self.lost.to_json(),
        }
        if self.anatomy is not None:
            out["anatomy"] = self.anatomy.to_json()
        if self.hung is not None:
            out["hung"] = self.hung.to_json()
        if self.steps is not None:
            out["steps"] = _steps_json(self.steps)
        return out


@dataclass(frozen=True)
class AttributedRestart:
    """A training restart the recorder attributed to a node: the node, when the restart
    happened, the run (``namespace/name``), the restart's number and its cause. JSON:
    ``[node, at, run, number, cause]``, as the recorder's ``attributed`` keeps it."""

    node: str
    at: float
    run: str
    number: int
    cause: str

    @staticmethod
    def from_json(a: Any) -> AttributedRestart | None:
        """None for anything that is not such an entry (it is dropped)."""
        if (
            isinstance(a, list)
            and len(a) == 5
            and isinstance(a[0], str)
            and _num(a[1])
            and isinstance(a[2], str)
            and (number := _int_or_none(a[3])) is not None
            and isinstance(a[4], str)
        ):
            return AttributedRestart(a[0], float(a[1]), a[2], number, a[4])
        return None

    def to_json(self) -> list[Any]:
        return [self.node, self.at, self.run, self.number, self.cause]


def _attributed(raw: Any) -> tuple[AttributedRestart, ...]:
    items = raw if isinstance(raw, list) else ()
    return tuple(a for a in map(AttributedRestart.from_json, items) if a is not None)


def attributed_of(recorder: Any) -> list[AttributedRestart]:
    """The recorder's ``attributed`` entries that can be read, oldest first."""
    return list(_attributed(recorder.get("attributed") if isinstance(recorder, Mapping) else None))


@dataclass(frozen=True)
class RecorderState:
    """The recorder's state (the module docstring): ``signals`` by node, ``gangs`` by
    run, ``pending`` restarts, the ``log`` of recorded restarts by run (oldest first) and
    the ``attributed`` restarts within the lemon window."""

    signals: Mapping[str, tuple[KeptSignal, ...]] = field(default_factory=dict)
    gangs: Mapping[str, GangMemo] = field(default_factory=dict)
    pending: tuple[PendingRestart, ...] = ()
    log: Mapping[str, tuple[RecordedRestart, ...]] = field(default_factory=dict)
    attributed: tuple[AttributedRestart, ...] = ()

    @staticmethod
    def from_json(prev: Any) -> RecorderState:
        """Every entry that does not have the shape it is written in dropped (a node or
        run left with none is dropped too): a pass (and ``train restarts``) works on what
        is left, never raises."""
        prev = prev if isinstance(prev, Mapping) else {}
        signals: dict[str, list[KeptSignal]] = {}
        raw = prev.get("signals")
        for node, items in raw.items() if isinstance(raw, Mapping) else ():
            for s in map(KeptSignal.from_json, items if isinstance(items, list) else ()):
                if s is not None:
                    signals.setdefault(str(node), []).append(s)
        raw = prev.get("gangs")
        gangs = {
            str(key): g
            for key, v in (raw.items() if isinstance(raw, Mapping) else ())
            if (g := GangMemo.from_json(v)) is not None
        }
        raw = prev.get("pending")
        pending = map(PendingRestart.from_json, raw if isinstance(raw, list) else ())
        log: dict[str, tuple[RecordedRestart, ...]] = {}
        raw = prev.get("log")
        for run, recs in raw.items() if isinstance(raw, Mapping) else ():
            items = recs if isinstance(recs, list) else ()
            kept = tuple(r for r in map(RecordedRestart.from_json, items) if r is not None)
            if kept:
                log[str(run)] = kept
        return RecorderState(
            signals={node: tuple(items) for node, items in signals.items()},
            gangs=gangs,
            pending=tuple(p for p in pending if p is not None),
            log=log,
            attributed=_attributed(prev.get("attributed")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "signals": {n: [s.to_json() for s in items] for n, items in self.signals.items()},
            "gangs": {k: g.to_json() for k, g in self.gangs.items()},
            "pending": [p.to_json() for p in self.pending],
            "log": {run: [r.to_json() for r in recs] for run, recs in self.log.items()},
            "attributed": [a.to_json() for a in self.attributed],
        }

    def signal_list(self) -> list[Signal]:
        """The findings kept, as the attribution reads them."""
        return [s.signal(node) for node, items in self.signals.items() for s in items]


# -- pure ---------------------------------------------------------------------------------


def _update_signals(
    prev: Mapping[str, Sequence[KeptSignal]],
    verdicts: Mapping[str, Verdict] | None,
    evicted: Iterable[tuple[str, str]],
    now: float,
    horizon: float,
) -> dict[str, tuple[KeptSignal, ...]]:
    out: dict[str, list[KeptSignal]] = {}
    by_key: dict[tuple[str, str, int | None, str | None], tuple[str, int]] = {}
    for node, items in prev.items():
        for entry in items:
            if entry.last < horizon:
                continue
            mine = out.setdefault(node, [])
            by_key[(node, entry.code, entry.gpu, entry.port)] = (node, len(mine))
            mine.append(entry)

    def seen(
        node: str, code: str, sev: Severity, gpu: int | None, port: str | None, message: str
    ) -> None:
        where = by_key.get((node, code, gpu, port))
        if where is None:
            mine = out.setdefault(node, [])
            by_key[(node, code, gpu, port)] = (node, len(mine))
            mine.append(KeptSignal(code, sev, gpu, port, now, now, message))
            return
        mine = out[where[0]]
        entry = mine[where[1]]
        # the worst severity seen, the latest words
        worst = sev if entry.severity < sev else entry.severity
        mine[where[1]] = dataclasses.replace(entry, severity=worst, last=now, message=message)

    if verdicts is not None:
        for node, verdict in sorted(verdicts.items()):
            for r in verdict.reasons:
                if r.severity is Severity.OK or r.code in SIGNAL_CODES_SKIPPED:
                    continue
                if base_weight(r.code) < MIN_WEIGHT:
                    continue  # congestion, application XIDs: often fleet-wide, never a cause
                seen(node, r.code, r.severity, r.gpu, r.port, r.message[:MESSAGE_CHARS])
    for node, why in evicted:
        seen(node, "evicted", Severity.BAD, None, None, f"evicted by node-health: {why}"[:200])
    kept = sorted((e.last, node, i) for node, items in out.items() for i, e in enumerate(items))
    if len(kept) > MAX_SIGNALS:  # the state must fit its ConfigMap: the newest are kept
        drop = {(node, i) for _, node, i in kept[: len(kept) - MAX_SIGNALS]}
        out = {
            node: [e for i, e in enumerate(items) if (node, i) not in drop]
            for node, items in out.items()
        }
    return {node: tuple(items) for node, items in out.items() if items}


def _jobs_of(gang: Gang) -> dict[str, str]:
    """Child Job -> the node its pods run on, for the current attempt's Jobs whose pods
    all run on one node (a Job spread over nodes names none of them)."""
    nodes: dict[str, set[str]] = {}
    for pod in gang.pods:
        job = ((pod.get("metadata") or {}).get("labels") or {}).get(JOB_NAME_LABEL)
        node = (pod.get("spec") or {}).get("nodeName")
        if job and node:
            nodes.setdefault(str(job), set()).add(str(node))
    return {job: next(iter(on)) for job, on in nodes.items() if len(on) == 1}


def _steps_at(steps: Sequence[Step], step: int) -> float | None:
    """When ``step`` (or the first step after it) was first logged."""
    for t, s in steps:
        if s >= step:
            return t
    return None


def _lost(steps: Sequence[Step], gpus: int | None, at: float, resumed: int | None) -> LostWork:
    """The work lost by a restart at ``at`` of an attempt on ``gpus`` GPUs that logged
    ``steps``, the new attempt having loaded step ``resumed`` (None: not said yet)."""
    last = steps[-1][1] if steps else None
    if resumed is None or last is None:
        return LostWork(last_step=last, resumed_step=resumed)
    at_least = False
    if last < resumed:
        # the checkpoint the new attempt loaded was written by this one, which so logged
        # steps after the last pass read its log: it reached the resumed step at least,
        # and how far past it is not known, so the loss is a floor
        last = resumed
        at_least = True
    # when the resumed step was first logged (from scratch: when the attempt began)
    reached = _steps_at(steps, resumed) if resumed > 0 else steps[0][0]
    hours = None
    if reached is not None and gpus is not None and gpus > 0:
        hours = round(max(0.0, float(at) - reached) * gpus / 3600.0, 2)
    return LostWork(last, resumed, last - resumed, hours, at_least)


def _hang(hung: Hang, signals: Attribution) -> Attribution:
    """A restart of an attempt that was HUNG: the hang is the cause, on the node the hang
    was likely due to (else on the node the findings point to, else none), with what the
    hang showed first among the evidence."""
    node, gpu, port = hung.node, hung.gpu, None
    if node is None and signals.attributed:
        node, gpu, port = signals.node, signals.gpu, signals.port
    said = [f"HUNG since {rfc3339(hung.since)}", *hung.reasons]
    confidence = 0.9 if hung.node else (signals.confidence if node else 0.5)
    return Attribution(node, gpu, port, "hang", confidence, (*said, *signals.evidence))


def _attribution(
    restart: Restart,
    hung: Hang | None,
    signals: Iterable[Signal],
    before_s: float,
    after_s: float,
) -> Attribution:
    got = attribute(restart, signals, before_s=before_s, after_s=after_s)
    return _hang(hung, got) if hung is not None else got


def _condition_at(pod: Obj, kind: str) -> float | None:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == kind and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def anatomy(
    at: float,
    hung: Hang | None,
    gang: Gang,
    head: Sequence[str],
    events: Sequence[tuple[float, str, str]],
    prev: Anatomy | None = None,
) -> Anatomy:
    """When each phase of a restart at ``at`` ended (Unix s; None: not known yet):
    ``failed_at`` (the first failed pod, or for a hang the last step logged before it),
    ``detected_at`` (a hang: when it was first judged HUNG; else the JobSet controller's
    restart Event), ``pods_gone_at`` (the new attempt's first pod made: JobSet makes the
    new child Jobs once the old ones are gone), ``scheduled_at`` (the last new pod bound:
    its PodScheduled condition), ``running_at`` (the last new pod Ready) and
    ``first_step_at`` (rank 0's first metrics line in the new attempt). What a pass saw
    before stays (``prev``)."""
    known = prev or Anatomy()
    failed_at = known.failed_at
    if failed_at is None:
        last = hung.last_step_at if hung else None
        failed_at = last if last is not None else float(at)
    detected_at = known.detected_at
    if detected_at is None:
        if hung is not None:
            detected_at = hung.since
        else:
            told = [t for t, _, _ in events if t >= at - 1.0]
            detected_at = min(told) if told else None
    pods = [p for p in gang.pods if not is_deleting(p)]
    whole = bool(pods) and len(pods) >= gang.expected
    made = [parse_time((p.get("metadata") or {}).get("creationTimestamp")) for p in pods]
    pods_gone_at = known.pods_gone_at
    if pods_gone_at is None and made and all(t is not None for t in made):
        pods_gone_at = min(t for t in made if t is not None)

    def last_of(kind: str) -> float | None:
        times = [_condition_at(p, kind) for p in pods]
        return max(t for t in times if t is not None) if None not in times else None

    scheduled_at = known.scheduled_at
    if scheduled_at is None and whole:
        scheduled_at = last_of("PodScheduled")
    running_at = known.running_at
    if running_at is None and whole:
        running_at = last_of("Ready")
    first_step_at = known.first_step_at
    if first_step_at is None:
        steps = progress_points(head)
        if steps:
            first_step_at = steps[0][0]
    return Anatomy(failed_at, detected_at, pods_gone_at, scheduled_at, running_at, first_step_at)


def phases(known: Mapping[str, Any]) -> tuple[list[tuple[str, float | None]], str | None]:
    """Each phase's duration in seconds (None: not known), and the slowest known one.
    ``known``: an ``Anatomy``'s JSON (``RestartRow.anatomy``)."""
    out: list[tuple[str, float | None]] = []
    start = known.get("failed_at")
    for key, name, _ in PHASES:
        end = known.get(key)
        if isinstance(start, (int, float)) and isinstance(end, (int, float)):
            out.append((name, max(float(end) - float(start), 0.0)))
        else:
            out.append((name, None))
        if isinstance(end, (int, float)):
            start = end
    timed = [(d, n) for n, d in out if d is not None]
    return out, (max(timed)[1] if timed else None)


def anatomy_text(known: Mapping[str, Any]) -> str | None:
    """``failed 13:00:05, detection 4 min, teardown 12 s, ... ; slowest: detection``, or
    None while nothing is known past the failure."""
    durations, slowest = phases(known)
    if slowest is None:
        return None
    failed = known.get("failed_at")
    head = (
        f"failed {dt.datetime.fromtimestamp(float(failed), dt.UTC):%H:%M:%S}"
        if isinstance(failed, (int, float))
        else "failed ?"
    )
    parts = [f"{name} {span(d) if d is not None else '?'}" for name, d in durations]
    return f"{head}, " + ", ".join(parts) + f"; slowest: {slowest}"


def _count(gang: GangMemo | None) -> int:
    """The restart count a pass wrote for the gang (-1: none, or none yet)."""
    return (gang.restarts or -1) if gang is not None else -1


def _anatomy_of(known: Anatomy | None) -> dict[str, float | None]:
    return {} if known is None else known.to_json()


def record(
    inputs: RestartInputs,
    verdicts: Mapping[str, Verdict] | None,
    evicted: Iterable[tuple[str, str]],
    now: float,
    prev: Mapping[str, Any],
    cfg: RecorderConfig = RecorderConfig(),
    hung: Mapping[str, Mapping[str, Any]] | None = None,
    progressing: Collection[str] = (),
) -> tuple[dict[str, Any], dict[str, float]]:
    """One pass of the recorder: the new state (module docstring; ``prev`` and the new
    one as JSON, ``RecorderState``) and its gauges. ``verdicts``: this pass's verdicts,
    None when the telemetry could not be read; ``evicted``: (node, why) of the evictions
    this pass plans; ``hung``: the runs judged HUNG this pass (``namespace/name`` -> the
    judgement as JSON, read as a ``Hang``): a restart that ends a hung attempt is
    attributed to the hang (cause ``hang``), to the likely node where one was named;
    ``progressing``: the runs judged making progress this pass (a hang they had is
    over)."""
    hung = hung or {}
    before = RecorderState.from_json(prev)
    horizon = now - (cfg.before_s + cfg.after_s + 600.0)
    signals = _update_signals(before.signals, verdicts, evicted, now, horizon)
    pending = list(before.pending)
    log = {run: list(recs) for run, recs in before.log.items()}
    attributed = list(before.attributed)
    gangs: dict[str, GangMemo] = {}
    heads_by_run: dict[str, int] = {}
    for gang in inputs.gangs:
        key = gang.key
        old = before.gangs.get(key)
        if old is not None and old.uid != gang.uid:
            old = None  # deleted and launched again under the same name: a new run
        same = old if old is not None and old.restarts == gang.restarts else None
        steps = list(same.steps)[-STEPS_KEPT:] if same is not None else []
        failed = dict(same.failed) if same is not None else {}
        hang = None
        if key in hung:
            hang = Hang.from_json(hung[key])
        elif same is not None and key not in progressing:  # (stopped, or going down)
            hang = same.hung
        resumed_step = None
        rank0 = gang.rank0()
        if rank0 is not None:
            rkey = _pod_key(gang.namespace, rank0)
            step = last_step(inputs.tails.get(rkey, ()))
            if step is not None and (not steps or steps[-1][1] < step):
                steps.append((now, step))
            loaded = loaded_step(inputs.heads.get(rkey, ()))
            if loaded is not None:
                heads_by_run[key] = loaded
                resumed_step = loaded
            elif same is not None:
                resumed_step = same.resumed_step
        for pod in gang.pods:
            now_failed = failed_pod(pod)
            if now_failed is None:
                continue
            had = failed.get(now_failed.pod)
            tail = inputs.tails.get(_pod_key(gang.namespace, pod)) or (had.log_tail if had else ())
            failed[now_failed.pod] = dataclasses.replace(
                now_failed, log_tail=tuple(tail[-FAILED_TAIL:])
            )
        if old is not None and gang.restarts > old.restarts:
            failed_before = list(old.failed.values())
            known = {f.pod for f in failed_before}
            for pod in gang.previous:  # failed pods of the attempt that just ended, if still here
                late = failed_pod(pod)
                if late is not None and late.pod not in known:
                    tail = inputs.tails.get(_pod_key(gang.namespace, pod), ())
                    failed_before.append(
                        dataclasses.replace(late, log_tail=tuple(tail[-FAILED_TAIL:]))
                    )
            first = old.restarts + 1
            # not the Event of the restart that began the attempt that just ended: that
            # came before its pods were made, so before a pass first saw them (the Event
            # is stamped by the JobSet controller's clock, the pass by ours: clocks kept
            # in step by NTP, as the Lease elections assume)
            said = [e for e in inputs.events.get(key, ()) if e[0] > old.attempt_seen]
            if not failed_before and said:
                # the pods went with the restart: the JobSet controller's Event says when
                # and which child Job failed first; the last pass saw where it ran
                at, reason, message = said[0]
                job = FIRST_FAILED.search(message)
                failed_before.append(
                    FailedPod(
                        pod=f"{CHILD_JOB}{job.group(1)}" if job else CHILD_JOB.strip(),
                        node=old.jobs.get(job.group(1)) if job else None,
                        at=at,
                        reason=reason,
                        exit_code=None,
                        message=message,
                    )
                )
            times = [f.at for f in failed_before if f.at is not None]
            for number in range(first, gang.restarts + 1):
                exact = bool(times) and number == first
                pending.append(
                    PendingRestart(
                        run=key,
                        number=number,
                        at=min(times) if exact else now,
                        at_exact=exact,
                        nodes=old.nodes,
                        gpus=old.gpus or None,
                        failed=tuple(failed_before) if exact else (),
                        steps=old.steps if number == first else (),
                        hung=old.hung if number == first else None,
                    )
                )
        gangs[key] = GangMemo(
            uid=gang.uid,
            restarts=gang.restarts,
            unrecorded=gang.restarts if old is None else old.unrecorded,
            nodes=tuple(gang.nodes) or (old.nodes if old is not None else ()),
            gpus=gang.gpus or (old.gpus if old is not None else 0),
            steps=tuple(steps),
            failed=failed,
            jobs=_jobs_of(gang) or (dict(old.jobs) if old is not None else {}),
            attempt_seen=float(same.attempt_seen or now) if same is not None else now,
            hung=hang,
            resumed_step=resumed_step,
        )

    # close the windows that have passed
    all_signals = RecorderState(signals=signals).signal_list()
    still: list[PendingRestart] = []
    for p in pending:
        at = float(p.at)
        if now < at + cfg.after_s:
            still.append(p)
            continue
        restart = p.restart()
        got = _attribution(restart, p.hung, all_signals, cfg.before_s, cfg.after_s)
        resumed = heads_by_run.get(p.run) if _count(gangs.get(p.run)) == restart.number else None
        log.setdefault(p.run, []).append(
            RecordedRestart(
                number=restart.number,
                at=at,
                at_exact=p.at_exact,
                gpus=restart.gpus,
                nodes=len(restart.nodes),
                attribution=dataclasses.replace(
                    got,
                    confidence=round(got.confidence, 2),
                    evidence=tuple(_short(got.evidence, 8)),
                ),
                failed=tuple(_kept(f) for f in restart.failed[:2]),
                lost=_lost(p.steps, restart.gpus, at, resumed),
                anatomy=p.anatomy,
                hung=p.hung,
                steps=p.steps if resumed is None else None,  # kept until the new attempt says
            )
        )
        if got.attributed and got.node is not None:
            attributed.append(AttributedRestart(got.node, at, p.run, restart.number, got.cause))

    # lost work the new attempt told us about since
    for run, records in log.items():
        for i, rec in enumerate(records):
            if rec.lost.resumed_step is not None or rec.steps is None:
                continue
            entry = gangs.get(run)
            if _count(entry) != rec.number:
                if _count(entry) > rec.number or entry is None:
                    records[i] = dataclasses.replace(rec, steps=None)  # it will not say more
                continue
            resumed = entry.resumed_step if entry is not None else None
            if resumed is not None:
                lost = _lost(rec.steps, rec.gpus, rec.at, resumed)
                if rec.lost.at_least:
                    lost = dataclasses.replace(lost, at_least=True)
                records[i] = dataclasses.replace(rec, lost=lost, steps=None)

    # the anatomy of each gang's latest restart, as its new attempt comes up
    for gang in inputs.gangs:
        if gang.restarts <= 0 or gang.terminal:
            continue
        key = gang.key
        rank0 = gang.rank0()
        head = inputs.heads.get(_pod_key(gang.namespace, rank0), ()) if rank0 else ()
        events = inputs.events.get(key, ())
        for i, p in enumerate(still):
            if p.run == key and p.number == gang.restarts:
                phased = anatomy(p.at, p.hung, gang, head, events, p.anatomy)
                still[i] = dataclasses.replace(p, anatomy=phased)
        records = log.get(key, [])
        for i, rec in enumerate(records):
            if rec.number == gang.restarts:
                phased = anatomy(rec.at, rec.hung, gang, head, events, rec.anatomy)
                records[i] = dataclasses.replace(rec, anatomy=phased)

    lemon_horizon = now - cfg.lemon_window_s
    attributed = [a for a in attributed if a.at >= lemon_horizon]
    for run in list(log):
        log[run] = log[run][-cfg.keep_per_run :]
    if len(log) > cfg.keep_runs:
        newest = sorted(log, key=lambda r: max(float(x.at) for x in log[r]), reverse=True)
        log = {r: log[r] for r in newest[: cfg.keep_runs]}
    everything = sorted((float(r.at), run, i) for run, rs in log.items() for i, r in enumerate(rs))
    if len(everything) > cfg.keep_total:  # the state must fit its ConfigMap: newest kept
        keep = {(run, i) for _, run, i in everything[-cfg.keep_total :]}
        log = {run: [r for i, r in enumerate(rs) if (run, i) in keep] for run, rs in log.items()}
        log = {run: rs for run, rs in log.items() if rs}
    state = RecorderState(
        signals=signals,
        gangs=gangs,
        pending=tuple(still),
        log={run: tuple(rs) for run, rs in log.items()},
        attributed=tuple(attributed),
    )
    gauges = {
        "restarts_pending": float(len(still)),
        "restarts_recorded": float(sum(len(v) for v in log.values())),
    }
    return state.to_json(), gauges


def attributed_restarts(state: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(node, time) of each attributed restart the recorder remembers (``state``: its
    JSON) that counts towards a lemon (``attribution.counts_towards_lemon``: not the
    restarts node-health's own evictions made)."""
    return _lemon_evidence(attributed_of(state))


def _lemon_evidence(attributed: Iterable[AttributedRestart]) -> list[tuple[str, float]]:
    return [(a.node, a.at) for a in attributed if counts_towards_lemon(a.cause)]


# -- what `krea-ops train restarts` and `krea-ops nodes lemons` show ----------------------


@dataclass(frozen=True)
class RestartRow:
    """One restart of a run as recorded. ``provisional``: its window has not closed yet
    (``attributed_at`` says when it will), and ``attribution`` is what the findings seen
    so far attribute it to; the final one may differ."""

    number: int
    at: float
    at_exact: bool
    attribution: Attribution | None
    lost_steps: int | None = None
    lost_gpu_hours: float | None = None
    last_step: int | None = None
    resumed_step: int | None = None
    gpus: int | None = None
    failed: tuple[FailedPod, ...] = ()
    attributed_at: float | None = None  # when the window closes, for a pending one
    provisional: bool = False
    lost_at_least: bool = False  # the last step logged is not known: ``lost_steps`` is a floor
    # when each phase of the restart ended (its ``Anatomy`` as JSON; empty: none recorded)
    anatomy: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class RunRestarts:
    """A run's restarts. ``restarts``: the JobSet's count (None: the JobSet is gone);
    ``unrecorded``: restarts made before the recorder first saw the run; ``recorded``:
    whether node-health has recorded anything at all (False: it has not run here)."""

    namespace: str
    name: str
    restarts: int | None
    rows: tuple[RestartRow, ...]
    unrecorded: int
    recorded: bool


def _row(rec: RecordedRestart) -> RestartRow:
    return RestartRow(
        number=rec.number,
        at=float(rec.at),
        at_exact=rec.at_exact,
        attribution=rec.attribution,
        lost_steps=rec.lost.lost_steps,
        lost_gpu_hours=rec.lost.lost_gpu_hours,
        last_step=rec.lost.last_step,
        resumed_step=rec.lost.resumed_step,
        gpus=rec.gpus,
        failed=rec.failed,
        lost_at_least=rec.lost.at_least,
        anatomy=_anatomy_of(rec.anatomy),
    )


def run_restarts(
    recorder: Mapping[str, Any] | None,
    namespace: str,
    name: str,
    restarts: int | None,
    after_s: float = WINDOW_AFTER_S,
    before_s: float = WINDOW_BEFORE_S,
) -> RunRestarts:
    """``recorder``: node-health's ``recorder`` state as JSON (None: never written);
    ``restarts``: the JobSet's ``status.restarts`` (None: no such JobSet). A restart
    whose window is still open is attributed provisionally, by the same rule over the
    findings recorded so far."""
    key = f"{namespace}/{name}"
    state = RecorderState.from_json(recorder)
    rows = [_row(r) for r in state.log.get(key, ())]
    signals = state.signal_list()
    for p in state.pending:
        if p.run != key:
            continue
        restart = Restart(
            namespace=namespace,
            run=name,
            number=p.number,
            at=p.at,
            nodes=p.nodes,
            failed=p.failed,
            gpus=p.gpus,
        )
        rows.append(
            RestartRow(
                number=p.number,
                at=p.at,
                at_exact=p.at_exact,
                attribution=_attribution(restart, p.hung, signals, before_s, after_s),
                gpus=p.gpus,
                failed=p.failed,
                attributed_at=p.at + after_s,
                provisional=True,
                anatomy=_anatomy_of(p.anatomy),
            )
        )
    rows.sort(key=lambda r: r.number)
    gang = state.gangs.get(key)
    unrecorded = gang.unrecorded if gang is not None else 0
    if gang is None and restarts:
        unrecorded = max(0, restarts - len(rows))
    return RunRestarts(namespace, name, restarts, tuple(rows), unrecorded, recorder is not None)


@dataclass(frozen=True)
class LemonRow:
    """A node implicated in repeated training restarts (or labelled a lemon)."""

    node: str
    labelled: bool
    candidate: bool  # attributed ``threshold`` restarts within the window
    restarts: tuple[tuple[float, str, int, str], ...]  # (at, run, restart number, cause)
    evictions: tuple[float, ...]


def lemon_rows(
    node_health_state: Mapping[str, Any] | None,
    labelled: Iterable[str],
    now: float,
    *,
    window_s: float = LEMON_WINDOW_S,
    threshold: int = LEMON_RESTARTS,
    fleet_nodes: int | None = None,
    same_fault_s: float = SAME_FAULT_S,
    chance: float = FALSE_LEMONS,
) -> list[LemonRow]:
    """Every node labelled a lemon, attributed a restart, or evicted within the window,
    worst first (most restarts, then most evictions)."""
    state = node_health_state if isinstance(node_health_state, Mapping) else {}
    attributed = attributed_of(state.get("recorder"))
    horizon = now - window_s
    restarts: dict[str, list[tuple[float, str, int, str]]] = {}
    for a in attributed:
        if a.at >= horizon:
            restarts.setdefault(a.node, []).append((a.at, a.run, a.number, a.cause))
    remediations = state.get("remediations")
    evictions = {
        str(n): tuple(sorted(float(t) for t in ts if _num(t) and float(t) >= horizon))
        for n, ts in (remediations.items() if isinstance(remediations, Mapping) else ())
        if isinstance(ts, list)
    }
    candidates = lemon_candidates(
        _lemon_evidence(attributed),
        now,
        window_s=window_s,
        threshold=threshold,
        fleet_nodes=fleet_nodes,
        same_fault_s=same_fault_s,
        chance=chance,
    )
    marked = set(labelled)
    names = marked | set(restarts) | {n for n, ts in evictions.items() if ts}
    rows = [
        LemonRow(
            node=n,
            labelled=n in marked,
            candidate=n in candidates,
            restarts=tuple(sorted(restarts.get(n, ()))),
            evictions=evictions.get(n, ()),
        )
        for n in names
    ]
    rows.sort(key=lambda r: (-len(r.restarts), -len(r.evictions), r.node))
    return rows
