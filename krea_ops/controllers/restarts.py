"""The restart recorder: node-health's record of every training restart, attributed.

Kubernetes keeps no history of a training's restarts: a JobSet counts them
(``status.restarts``), its Events last an hour, and the failed pods go with the restart. So
node-health, which reads the verdicts of every GPU node each pass anyway, also keeps:

* **signals**: each BAD, SUSPECT or UNKNOWN finding of each GPU node with when it was first
  and last seen, and its own evictions (code ``evicted``), for the attribution window
  (``before_s`` + ``after_s``) and a margin. A pass whose telemetry could not be read adds
  nothing (blind is not OK, and not BAD either).
* **gangs**: per training JobSet (``training.gangs``): its uid, restart count, the nodes and
  GPUs of the current attempt, the steps its rank 0 logged (``step: N``, from the last
  ``LOG_TAIL`` lines each pass: when a step was reached) and the failed pods seen with the
  last lines of their logs.
* **pending**: a restart seen (``status.restarts`` went up) whose window has not closed;
  ``after_s`` after it, it is attributed (``training.attribution.attribute``) and moved to
  the **log** (per run the newest ``keep_per_run``, ``keep_total`` in all: the state
  shares one ConfigMap, 1 MiB, with the other controllers'), with the work it lost: the last step
  the previous attempt logged minus the step the new attempt loaded (``Loading the
  checkpoint at step N``), and the GPU-hours from when that step was first logged to the
  restart. A restart whose new attempt has not said what it loaded yet is logged with the
  lost work unknown and filled in when it does.
* **attributed**: (node, time, run, restart, cause) of each attributed restart within the
  lemon window: ``attribution.lemon_candidates`` over it gives the lemon candidates that
  node-health labels and ``krea-ops nodes lemons`` lists.

The restart time is when the first failed pod of the attempt finished, if a pass saw it;
otherwise the pass that saw the count go up (up to one pass late: the record says so).
Restarts that happened before the recorder first saw the run are counted as unrecorded.

``read_restart_inputs`` does the I/O (one JobSet list, one pod list, a log tail per
running gang and per failed pod, the head of a new attempt's rank-0 log); ``record`` is
pure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
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


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def _int_or_none(v: Any) -> int | None:
    return int(v) if _num(v) and float(v).is_integer() else None


def _strs(v: Any) -> list[str]:
    return [str(x) for x in v] if isinstance(v, list) and all(isinstance(x, str) for x in v) else []


def _steps(v: Any) -> list[list[float]]:
    out = []
    for x in v if isinstance(v, list) else ():
        if isinstance(x, list) and len(x) == 2 and _num(x[0]) and _int_or_none(x[1]) is not None:
            out.append([float(x[0]), int(x[1])])
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


def attributed_of(recorder: Any) -> list[AttributedRestart]:
    """The recorder's ``attributed`` entries that can be read, oldest first."""
    raw = recorder.get("attributed") if isinstance(recorder, Mapping) else None
    return [a for a in map(AttributedRestart.from_json, raw if isinstance(raw, list) else ()) if a]


def _failed_list(v: Any) -> list[dict[str, Any]]:
    return [_failed_json(f) for f in map(_failed_of, v if isinstance(v, list) else ()) if f]


def _hung_json(value: Any) -> dict[str, Any]:
    """``{"hung": ...}`` for a well-formed hang record (since, node, gpu, reasons), else
    nothing."""
    if not isinstance(value, Mapping) or not _num(value.get("since")):
        return {}
    node, gpu = value.get("node"), value.get("gpu")
    last = value.get("last_step_at")
    return {
        "hung": {
            "since": float(value["since"]),
            "last_step_at": float(last) if isinstance(last, (int, float)) and _num(last) else None,
            "node": node if isinstance(node, str) else None,
            "gpu": _int_or_none(gpu),
            "reasons": _strs(value.get("reasons")),
        }
    }


def _anatomy_json(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        return {}
    return {
        "anatomy": {
            str(k): float(v) if _num(v) else None
            for k, v in value.items()
            if k in ("failed_at", *(key for key, _, _ in PHASES))
        }
    }


def sane_state(prev: Any) -> dict[str, Any]:
    """The recorder's state with every entry that does not have the shape it writes
    dropped: a pass (and ``train restarts``) works on what is left, never raises."""
    prev = prev if isinstance(prev, Mapping) else {}
    signals: dict[str, list[list[Any]]] = {}
    raw = prev.get("signals")
    for node, items in raw.items() if isinstance(raw, Mapping) else ():
        for e in items if isinstance(items, list) else ():
            if (
                isinstance(e, list)
                and len(e) == 7
                and isinstance(e[0], str)
                and e[1] in _SEVERITIES
                and (e[2] is None or _int_or_none(e[2]) is not None)
                and (e[3] is None or isinstance(e[3], str))
                and _num(e[4])
                and _num(e[5])
                and isinstance(e[6], str)
            ):
                signals.setdefault(str(node), []).append(list(e))
    gangs: dict[str, dict[str, Any]] = {}
    raw = prev.get("gangs")
    for key, g in raw.items() if isinstance(raw, Mapping) else ():
        if not isinstance(g, Mapping) or _int_or_none(g.get("restarts")) is None:
            continue
        failed = g.get("failed")
        jobs = g.get("jobs")
        gangs[str(key)] = {
            "uid": str(g.get("uid") or ""),
            "restarts": _int_or_none(g.get("restarts")),
            "unrecorded": _int_or_none(g.get("unrecorded")) or 0,
            "nodes": _strs(g.get("nodes")),
            "gpus": _int_or_none(g.get("gpus")) or 0,
            "steps": _steps(g.get("steps")),
            "failed": {
                str(k): _failed_json(f)
                for k, v in (failed.items() if isinstance(failed, Mapping) else ())
                if (f := _failed_of(v)) is not None
            },
            "jobs": {
                str(k): v
                for k, v in (jobs.items() if isinstance(jobs, Mapping) else ())
                if isinstance(v, str)
            },
            "attempt_seen": float(g["attempt_seen"]) if _num(g.get("attempt_seen")) else 0.0,
            **(
                {"resumed_step": _int_or_none(g.get("resumed_step"))}
                if _int_or_none(g.get("resumed_step")) is not None
                else {}
            ),
            **_hung_json(g.get("hung")),
        }
    pending = []
    for p in prev.get("pending") if isinstance(prev.get("pending"), list) else ():
        if (
            isinstance(p, Mapping)
            and isinstance(p.get("run"), str)
            and "/" in p["run"]
            and _int_or_none(p.get("number")) is not None
            and _num(p.get("at"))
        ):
            pending.append(
                {
                    "run": p["run"],
                    "number": _int_or_none(p.get("number")),
                    "at": float(p["at"]),
                    "at_exact": bool(p.get("at_exact")),
                    "nodes": _strs(p.get("nodes")),
                    "gpus": _int_or_none(p.get("gpus")),
                    "failed": _failed_list(p.get("failed")),
                    "steps": _steps(p.get("steps")),
                    **_hung_json(p.get("hung")),
                    **_anatomy_json(p.get("anatomy")),
                }
            )
    log: dict[str, list[dict[str, Any]]] = {}
    raw = prev.get("log")
    for run, recs in raw.items() if isinstance(raw, Mapping) else ():
        kept = [
            dict(r)
            for r in (recs if isinstance(recs, list) else ())
            if isinstance(r, Mapping)
            and _int_or_none(r.get("number")) is not None
            and _num(r.get("at"))
        ]
        for r in kept:
            if "steps" in r:
                r["steps"] = _steps(r["steps"])
            for k in ("lost_steps", "last_step", "resumed_step", "gpus"):
                if k in r:
                    r[k] = _int_or_none(r[k])
            attribution = r.get("attribution")
            if not isinstance(attribution, Mapping):
                attribution = {}
            evidence = attribution.get("evidence")
            r["attribution"] = {
                **attribution,
                "evidence": _short(map(str, evidence), 8) if isinstance(evidence, list) else [],
            }
            raw_failed = r.get("failed")
            pods: list[Any] = raw_failed if isinstance(raw_failed, list) else []
            r["failed"] = [_kept(f) for f in map(_failed_of, pods) if f][:2]
        if kept:
            log[str(run)] = kept
    attributed = [list(a) for a in prev.get("attributed") or () if AttributedRestart.from_json(a)]
    return {
        "signals": signals,
        "gangs": gangs,
        "pending": pending,
        "log": log,
        "attributed": attributed,
    }


# -- pure ---------------------------------------------------------------------------------


def _signal_json(s: Signal) -> list[Any]:
    return [s.code, s.severity.name, s.gpu, s.port, s.first, s.last, s.message]


def signals_of(state: Mapping[str, Any]) -> list[Signal]:
    out = []
    for node, items in (state.get("signals") or {}).items():
        for item in items or ():
            try:
                code, sev, gpu, port, first, last, message = item
                out.append(
                    Signal(
                        str(node),
                        str(code),
                        _SEVERITIES[str(sev)],
                        str(message),
                        float(first),
                        float(last),
                        None if gpu is None else int(gpu),
                        None if port is None else str(port),
                    )
                )
            except (KeyError, TypeError, ValueError):
                continue  # an entry this version cannot read: dropped, not fatal
    return out


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


def _short(lines: Iterable[str], most: int, chars: int = 300) -> list[str]:
    return [line[:chars] for line in list(lines)[:most]]


def _kept(f: FailedPod) -> dict[str, Any]:
    """A failed pod as a record keeps it: its last 5 log lines, each cut at 300 chars."""
    out = _failed_json(f)
    out["log_tail"] = _short(f.log_tail[-5:], 5)
    out["message"] = (f.message or "")[:300] or None
    return out


def _failed_of(data: Any) -> FailedPod | None:
    if not isinstance(data, Mapping):
        return None
    at, code = data.get("at"), data.get("exit_code")
    return FailedPod(
        pod=str(data.get("pod")),
        node=data.get("node") if isinstance(data.get("node"), str) else None,
        at=float(at) if isinstance(at, (int, float)) else None,
        reason=data.get("reason") if isinstance(data.get("reason"), str) else None,
        exit_code=int(code) if isinstance(code, int) else None,
        message=data.get("message") if isinstance(data.get("message"), str) else None,
        log_tail=tuple(str(x) for x in data.get("log_tail") or ()),
    )


def _update_signals(
    prev: Mapping[str, Any],
    verdicts: Mapping[str, Verdict] | None,
    evicted: Iterable[tuple[str, str]],
    now: float,
    horizon: float,
) -> dict[str, list[list[Any]]]:
    out: dict[str, list[list[Any]]] = {}
    by_key: dict[tuple[str, str, Any, Any], list[Any]] = {}
    for node, items in (prev.get("signals") or {}).items():
        for item in items or ():
            if not isinstance(item, list) or len(item) != 7:
                continue
            try:
                if float(item[5]) < horizon:
                    continue
            except (TypeError, ValueError):
                continue
            entry = list(item)
            out.setdefault(str(node), []).append(entry)
            by_key[(str(node), str(entry[0]), entry[2], entry[3])] = entry

    def seen(node: str, code: str, sev: Severity, gpu: Any, port: Any, message: str) -> None:
        entry = by_key.get((node, code, gpu, port))
        if entry is None:
            entry = [code, sev.name, gpu, port, now, now, message]
            by_key[(node, code, gpu, port)] = entry
            out.setdefault(node, []).append(entry)
            return
        entry[5] = now
        if _SEVERITIES.get(str(entry[1]), Severity.OK) < sev:
            entry[1] = sev.name  # worst severity seen, latest words
        entry[6] = message

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
    kept = sorted((e[5], node, i) for node, items in out.items() for i, e in enumerate(items))
    if len(kept) > MAX_SIGNALS:  # the state must fit its ConfigMap: the newest are kept
        drop = {(node, i) for _, node, i in kept[: len(kept) - MAX_SIGNALS]}
        out = {
            node: [e for i, e in enumerate(items) if (node, i) not in drop]
            for node, items in out.items()
        }
        out = {node: items for node, items in out.items() if items}
    return out


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


def _since(old: Mapping[str, Any]) -> float:
    """When a pass first saw the attempt that just ended, so the Event of the restart
    that began it is not taken for this one: that Event came before the attempt's pods
    were made, so before any pass saw them (the Event is stamped by the JobSet
    controller's clock, the pass by ours: clocks kept in step by NTP, as the Lease
    elections assume)."""
    try:
        return float(old.get("attempt_seen") or 0.0)
    except (TypeError, ValueError):
        return 0.0


def _steps_at(steps: list[list[float]], step: int) -> float | None:
    """When ``step`` (or the first step after it) was first logged."""
    for t, s in steps:
        if s >= step:
            return t
    return None


def _lost(entry: Mapping[str, Any], resumed: int | None) -> dict[str, Any]:
    steps = [list(x) for x in entry.get("steps") or () if isinstance(x, list) and len(x) == 2]
    last = int(steps[-1][1]) if steps else None
    out: dict[str, Any] = {"last_step": last, "resumed_step": resumed}
    if resumed is None or last is None:
        out.update(lost_steps=None, lost_gpu_hours=None)
        return out
    if last < resumed:
        # the checkpoint the new attempt loaded was written by this one, which so logged
        # steps after the last pass read its log: it reached the resumed step at least,
        # and how far past it is not known, so the loss is a floor
        last = resumed
        out.update(last_step=last, lost_at_least=True)
    out["lost_steps"] = last - resumed
    # when the resumed step was first logged (from scratch: when the attempt began)
    reached = _steps_at(steps, resumed) if resumed > 0 else (steps[0][0] if steps else None)
    gpus = entry.get("gpus")
    at = float(entry["at"])
    if reached is not None and isinstance(gpus, int) and gpus > 0:
        out["lost_gpu_hours"] = round(max(0.0, at - reached) * gpus / 3600.0, 2)
    else:
        out["lost_gpu_hours"] = None
    return out


def _hang(hung: Mapping[str, Any], signals: Attribution) -> Attribution:
    """A restart of an attempt that was HUNG: the hang is the cause, on the node the hang
    was likely due to (else on the node the findings point to, else none), with what the
    hang showed first among the evidence."""
    node = hung.get("node") if isinstance(hung.get("node"), str) else None
    gpu = hung.get("gpu") if isinstance(hung.get("gpu"), int) else None
    port = None
    if node is None and signals.attributed:
        node, gpu, port = signals.node, signals.gpu, signals.port
    since = hung.get("since")
    said = [str(r) for r in hung.get("reasons") or () if isinstance(r, str)]
    if isinstance(since, (int, float)):
        said.insert(0, f"HUNG since {rfc3339(float(since))}")
    confidence = 0.9 if hung.get("node") else (signals.confidence if node else 0.5)
    return Attribution(node, gpu, port, "hang", confidence, (*said, *signals.evidence))


def _attribution(
    pending: Mapping[str, Any],
    restart: Restart,
    signals: Iterable[Signal],
    before_s: float,
    after_s: float,
) -> Attribution:
    got = attribute(restart, signals, before_s=before_s, after_s=after_s)
    hung = pending.get("hung")
    return _hang(hung, got) if isinstance(hung, Mapping) else got


# A restart's phases, in order: (key of the moment it ends, name, what it is)
PHASES = (
    ("detected_at", "detection", "from the failure to the restart being set off"),
    ("pods_gone_at", "teardown", "the old attempt's pods going"),
    ("scheduled_at", "scheduling", "the new attempt's pods admitted and bound"),
    ("running_at", "start", "their containers started and Ready"),
    ("first_step_at", "first step", "loading the checkpoint, compiling, the first step"),
)


def _condition_at(pod: Obj, kind: str) -> float | None:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == kind and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def anatomy(
    rec: Mapping[str, Any],
    gang: Gang,
    head: Sequence[str],
    events: Sequence[tuple[float, str, str]],
    prev: Any = None,
) -> dict[str, float | None]:
    """When each phase of a restart ended (Unix s; None: not known yet): ``failed_at``
    (the first failed pod, or for a hang the last step logged before it), ``detected_at``
    (a hang: when it was first judged HUNG; else the JobSet controller's restart Event),
    ``pods_gone_at`` (the new attempt's first pod made: JobSet makes the new child Jobs
    once the old ones are gone), ``scheduled_at`` (the last new pod bound: its
    PodScheduled condition), ``running_at`` (the last new pod Ready) and
    ``first_step_at`` (rank 0's first metrics line in the new attempt). What a pass saw
    before stays (``prev``)."""
    known: dict[str, float | None] = dict.fromkeys(("failed_at", *(k for k, _, _ in PHASES)))
    if isinstance(prev, Mapping):
        for k in known:
            v = prev.get(k)
            known[k] = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    hung = rec.get("hung") if isinstance(rec.get("hung"), Mapping) else None
    at = float(rec.get("at") or 0.0)
    if known["failed_at"] is None:
        last = hung.get("last_step_at") if hung else None
        known["failed_at"] = float(last) if isinstance(last, (int, float)) else at
    if known["detected_at"] is None:
        since = hung.get("since") if hung else None
        if isinstance(since, (int, float)):
            known["detected_at"] = float(since)
        else:
            told = [t for t, _, _ in events if t >= at - 1.0]
            known["detected_at"] = min(told) if told else None
    pods = [p for p in gang.pods if not is_deleting(p)]
    whole = bool(pods) and len(pods) >= gang.expected
    made = [parse_time((p.get("metadata") or {}).get("creationTimestamp")) for p in pods]
    if known["pods_gone_at"] is None and made and all(t is not None for t in made):
        known["pods_gone_at"] = min(t for t in made if t is not None)
    for key, kind in (("scheduled_at", "PodScheduled"), ("running_at", "Ready")):
        if known[key] is None and whole:
            times = [_condition_at(p, kind) for p in pods]
            if all(t is not None for t in times):
                known[key] = max(t for t in times if t is not None)
    if known["first_step_at"] is None:
        steps = progress_points(head)
        if steps:
            known["first_step_at"] = steps[0][0]
    return known


def phases(known: Mapping[str, Any]) -> tuple[list[tuple[str, float | None]], str | None]:
    """Each phase's duration in seconds (None: not known), and the slowest known one."""
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
    """One pass of the recorder: the new state (module docstring) and its gauges.
    ``verdicts``: this pass's verdicts, None when the telemetry could not be read;
    ``evicted``: (node, why) of the evictions this pass plans; ``hung``: the runs judged
    HUNG this pass (``namespace/name`` -> ``since``, ``node``, ``gpu``, ``reasons``): a
    restart that ends a hung attempt is attributed to the hang (cause ``hang``), to the
    likely node where one was named; ``progressing``: the runs judged making progress
    this pass (a hang they had is over)."""
    hung = hung or {}
    prev = sane_state(prev)
    horizon = now - (cfg.before_s + cfg.after_s + 600.0)
    signals = _update_signals(prev, verdicts, evicted, now, horizon)
    gangs_prev: Mapping[str, Any] = prev.get("gangs") or {}
    pending: list[dict[str, Any]] = [dict(p) for p in prev.get("pending") or () if p]
    log: dict[str, list[dict[str, Any]]] = {
        k: [dict(r) for r in v] for k, v in (prev.get("log") or {}).items()
    }
    attributed = attributed_of(prev)
    gangs: dict[str, Any] = {}
    heads_by_run: dict[str, int] = {}
    for gang in inputs.gangs:
        key = gang.key
        old = gangs_prev.get(key) if isinstance(gangs_prev.get(key), Mapping) else None
        if old is not None and old.get("uid") != gang.uid:
            old = None  # deleted and launched again under the same name: a new run
        entry: dict[str, Any] = {
            "uid": gang.uid,
            "restarts": gang.restarts,
            "unrecorded": gang.restarts if old is None else int(old.get("unrecorded") or 0),
            "nodes": list(gang.nodes) or list((old or {}).get("nodes") or ()),
            "gpus": gang.gpus or int((old or {}).get("gpus") or 0),
            "steps": [],
            "failed": {},
            "jobs": _jobs_of(gang) or dict((old or {}).get("jobs") or {}),
        }
        same_attempt = old is not None and int(old.get("restarts") or 0) == gang.restarts
        entry["attempt_seen"] = (
            float(old.get("attempt_seen") or now) if same_attempt and old is not None else now
        )
        if same_attempt and old is not None:
            entry["steps"] = [list(x) for x in old.get("steps") or ()][-STEPS_KEPT:]
            entry["failed"] = dict(old.get("failed") or {})
        if key in hung:
            entry["hung"] = dict(hung[key])
        elif (
            same_attempt
            and old is not None
            and isinstance(old.get("hung"), Mapping)
            and key not in progressing  # (stopped, or going down: the hang stands)
        ):
            entry["hung"] = dict(old["hung"])
        rank0 = gang.rank0()
        if rank0 is not None:
            rkey = _pod_key(gang.namespace, rank0)
            step = last_step(inputs.tails.get(rkey, ()))
            steps = entry["steps"]
            if step is not None and (not steps or steps[-1][1] < step):
                steps.append([now, step])
            loaded = loaded_step(inputs.heads.get(rkey, ()))
            if loaded is not None:
                heads_by_run[key] = loaded
                entry["resumed_step"] = loaded
            elif same_attempt and old is not None and old.get("resumed_step") is not None:
                entry["resumed_step"] = old.get("resumed_step")
        for pod in gang.pods:
            failed = failed_pod(pod)
            if failed is None:
                continue
            pkey = _pod_key(gang.namespace, pod)
            had = _failed_of(entry["failed"].get(failed.pod))
            tail = inputs.tails.get(pkey) or (had.log_tail if had else ())
            entry["failed"][failed.pod] = _failed_json(
                FailedPod(
                    failed.pod,
                    failed.node,
                    failed.at,
                    failed.reason,
                    failed.exit_code,
                    failed.message,
                    tuple(tail[-FAILED_TAIL:]),
                )
            )
        if old is not None and gang.restarts > int(old.get("restarts") or 0):
            failed_before = [f for f in map(_failed_of, (old.get("failed") or {}).values()) if f]
            known = {f.pod for f in failed_before}
            for pod in gang.previous:  # failed pods of the attempt that just ended, if still here
                late = failed_pod(pod)
                if late is not None and late.pod not in known:
                    tail = inputs.tails.get(_pod_key(gang.namespace, pod), ())
                    failed_before.append(
                        dataclasses.replace(late, log_tail=tuple(tail[-FAILED_TAIL:]))
                    )
            first = int(old.get("restarts") or 0) + 1
            said = [e for e in inputs.events.get(key, ()) if e[0] > _since(old)]
            if not failed_before and said:
                # the pods went with the restart: the JobSet controller's Event says when
                # and which child Job failed first; the last pass saw where it ran
                at, reason, message = said[0]
                job = FIRST_FAILED.search(message)
                jobs = old.get("jobs") or {}
                node = jobs.get(job.group(1)) if job else None
                failed_before.append(
                    FailedPod(
                        pod=f"{CHILD_JOB}{job.group(1)}" if job else CHILD_JOB.strip(),
                        node=node if isinstance(node, str) else None,
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
                    {
                        "run": key,
                        "number": number,
                        "at": min(times) if exact else now,
                        "at_exact": exact,
                        "nodes": list(old.get("nodes") or ()),
                        "gpus": int(old.get("gpus") or 0) or None,
                        "failed": [_failed_json(f) for f in failed_before] if exact else [],
                        "steps": (
                            [list(x) for x in old.get("steps") or ()] if number == first else []
                        ),
                        **(
                            {"hung": old["hung"]}
                            if number == first and isinstance(old.get("hung"), Mapping)
                            else {}
                        ),
                    }
                )
        gangs[key] = entry

    # close the windows that have passed
    all_signals = signals_of({"signals": signals})
    still: list[dict[str, Any]] = []
    for p in pending:
        at = float(p["at"])
        if now < at + cfg.after_s:
            still.append(p)
            continue
        restart = Restart(
            namespace=str(p["run"]).split("/", 1)[0],
            run=str(p["run"]).split("/", 1)[-1],
            number=int(p["number"]),
            at=at,
            nodes=tuple(p.get("nodes") or ()),
            failed=tuple(f for f in map(_failed_of, p.get("failed") or ()) if f),
            gpus=p.get("gpus"),
        )
        got = _attribution(p, restart, all_signals, cfg.before_s, cfg.after_s)
        current = gangs.get(str(p["run"])) or {}
        resumed = (
            heads_by_run.get(str(p["run"]))
            if int(current.get("restarts") or -1) == restart.number
            else None
        )
        rec = {
            "number": restart.number,
            "at": at,
            "at_exact": bool(p.get("at_exact")),
            "gpus": restart.gpus,
            "nodes": len(restart.nodes),
            "attribution": {**got.to_json(), "evidence": _short(got.evidence, 8)},
            "failed": [_kept(f) for f in restart.failed[:2]],
            **_lost({**p, "gpus": restart.gpus}, resumed),
        }
        if isinstance(p.get("anatomy"), Mapping):
            rec["anatomy"] = dict(p["anatomy"])
        if isinstance(p.get("hung"), Mapping):
            rec["hung"] = dict(p["hung"])
        if resumed is None:
            rec["steps"] = p.get("steps") or []  # kept until the new attempt says
        log.setdefault(str(p["run"]), []).append(rec)
        if got.attributed and got.node is not None:
            attributed.append(
                AttributedRestart(got.node, float(at), str(p["run"]), restart.number, got.cause)
            )

    # lost work the new attempt told us about since
    for run, records in log.items():
        for rec in records:
            if rec.get("resumed_step") is not None or "steps" not in rec:
                continue
            entry = gangs.get(run) or {}
            if int(entry.get("restarts") or -1) != int(rec["number"]):
                if int(entry.get("restarts") or -1) > int(rec["number"]) or not entry:
                    rec.pop("steps", None)  # moved on: it will not say any more
                continue
            resumed = entry.get("resumed_step")
            if resumed is not None:
                rec.update(_lost({**rec, "steps": rec["steps"]}, int(resumed)))
                rec.pop("steps", None)

    # the anatomy of each gang's latest restart, as its new attempt comes up
    for gang in inputs.gangs:
        if gang.restarts <= 0 or gang.terminal:
            continue
        key = gang.key
        rank0 = gang.rank0()
        head = inputs.heads.get(_pod_key(gang.namespace, rank0), ()) if rank0 else ()
        for rec in [*still, *log.get(key, ())]:
            if rec.get("run", key) == key and int(rec.get("number") or 0) == gang.restarts:
                rec["anatomy"] = anatomy(
                    rec, gang, head, inputs.events.get(key, ()), rec.get("anatomy")
                )

    lemon_horizon = now - cfg.lemon_window_s
    attributed = [a for a in attributed if a.at >= lemon_horizon]
    for run in list(log):
        log[run] = log[run][-cfg.keep_per_run :]
    if len(log) > cfg.keep_runs:
        newest = sorted(log, key=lambda r: max(float(x["at"]) for x in log[r]), reverse=True)
        log = {r: log[r] for r in newest[: cfg.keep_runs]}
    everything = sorted(
        (float(r["at"]), run, i) for run, rs in log.items() for i, r in enumerate(rs)
    )
    if len(everything) > cfg.keep_total:  # the state must fit its ConfigMap: newest kept
        keep = {(run, i) for _, run, i in everything[-cfg.keep_total :]}
        log = {run: [r for i, r in enumerate(rs) if (run, i) in keep] for run, rs in log.items()}
        log = {run: rs for run, rs in log.items() if rs}
    state = {
        "signals": signals,
        "gangs": gangs,
        "pending": still,
        "log": log,
        "attributed": [a.to_json() for a in attributed],
    }
    gauges = {
        "restarts_pending": float(len(still)),
        "restarts_recorded": float(sum(len(v) for v in log.values())),
    }
    return state, gauges


def attributed_restarts(state: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(node, time) of each attributed restart the recorder remembers that counts towards
    a lemon (``attribution.counts_towards_lemon``: not the restarts node-health's own
    evictions made)."""
    return [(a.node, a.at) for a in attributed_of(state) if counts_towards_lemon(a.cause)]


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
    # when each phase of the restart ended (``PHASES``; ``failed_at`` first)
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


def _row(rec: Mapping[str, Any]) -> RestartRow:
    def opt_int(key: str) -> int | None:
        v = rec.get(key)
        return int(v) if isinstance(v, int) and not isinstance(v, bool) else None

    hours = rec.get("lost_gpu_hours")
    return RestartRow(
        number=int(rec.get("number") or 0),
        at=float(rec.get("at") or 0.0),
        at_exact=bool(rec.get("at_exact")),
        attribution=Attribution.from_json(rec.get("attribution") or {}),
        lost_steps=opt_int("lost_steps"),
        lost_gpu_hours=float(hours) if isinstance(hours, (int, float)) else None,
        last_step=opt_int("last_step"),
        resumed_step=opt_int("resumed_step"),
        gpus=opt_int("gpus"),
        failed=tuple(f for f in map(_failed_of, rec.get("failed") or ()) if f),
        lost_at_least=bool(rec.get("lost_at_least")),
        anatomy=dict(_anatomy_json(rec.get("anatomy")).get("anatomy") or {}),
    )


def run_restarts(
    recorder: Mapping[str, Any] | None,
    namespace: str,
    name: str,
    restarts: int | None,
    after_s: float = WINDOW_AFTER_S,
    before_s: float = WINDOW_BEFORE_S,
) -> RunRestarts:
    """``recorder``: node-health's ``recorder`` state (None: never written);
    ``restarts``: the JobSet's ``status.restarts`` (None: no such JobSet). A restart
    whose window is still open is attributed provisionally, by the same rule over the
    findings recorded so far."""
    key = f"{namespace}/{name}"
    rec = sane_state(recorder) if recorder is not None else {}
    rows = [_row(r) for r in (rec.get("log") or {}).get(key) or () if isinstance(r, Mapping)]
    signals = signals_of(rec)
    for p in rec.get("pending") or ():
        if isinstance(p, Mapping) and p.get("run") == key:
            at = float(p.get("at") or 0.0)
            restart = Restart(
                namespace=namespace,
                run=name,
                number=int(p.get("number") or 0),
                at=at,
                nodes=tuple(p.get("nodes") or ()),
                failed=tuple(f for f in map(_failed_of, p.get("failed") or ()) if f),
                gpus=p.get("gpus") if isinstance(p.get("gpus"), int) else None,
            )
            rows.append(
                RestartRow(
                    number=restart.number,
                    at=at,
                    at_exact=bool(p.get("at_exact")),
                    attribution=_attribution(p, restart, signals, before_s, after_s),
                    gpus=restart.gpus,
                    failed=restart.failed,
                    attributed_at=at + after_s,
                    provisional=True,
                    anatomy=dict(_anatomy_json(p.get("anatomy")).get("anatomy") or {}),
                )
            )
    rows.sort(key=lambda r: r.number)
    gang = (rec.get("gangs") or {}).get(key)
    unrecorded = int(gang.get("unrecorded") or 0) if isinstance(gang, Mapping) else 0
    if not isinstance(gang, Mapping) and restarts:
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
    recorder = sane_state(state.get("recorder"))
    horizon = now - window_s
    restarts: dict[str, list[tuple[float, str, int, str]]] = {}
    for a in attributed_of(recorder):
        if a.at >= horizon:
            restarts.setdefault(a.node, []).append((a.at, a.run, a.number, a.cause))
    remediations = state.get("remediations")
    evictions = {
        str(n): tuple(sorted(float(t) for t in ts if _num(t) and float(t) >= horizon))
        for n, ts in (remediations.items() if isinstance(remediations, Mapping) else ())
        if isinstance(ts, list)
    }
    candidates = lemon_candidates(
        attributed_restarts(recorder),
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
