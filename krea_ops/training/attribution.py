"""Crash attribution: which node, GPU or port a training restart is most likely due to.

A restart of a training gang (the JobSet restarted, a pod failed, the gang was evicted) is
joined to the signals seen on the gang's nodes in a window around it: by default from
``WINDOW_BEFORE_S`` (12 minutes) before to ``WINDOW_AFTER_S`` (5 minutes) after, so that a
fault that stalled a collective until NCCL's 10-minute watchdog timeout is still in view
(NVIDIA's nvidia-resiliency-ext posts the last 12 minutes of each node's kernel log for the
same reason; Kokolis et al. attribute a failure to a cause detected from 10 minutes before
to 5 minutes after it).

Signals are the health policy's findings (``krea_ops.health``: the same BAD and SUSPECT
reasons ``nodes list`` shows) as the node-health controller saw them pass by pass, each
with when it was first and last seen, plus node-health's own evictions. The failed pods
add their termination reason, exit code, message and last log lines.

Scoring, per signal: a weight by what the finding means for a running gang (``WEIGHTS``:
a GPU gone, an uncorrectable memory error, NVLink or InfiniBand link errors, the node
lost count most; a hot GPU a little less; SUSPECT findings less than BAD ones; an
application XID or fabric congestion hardly at all), times how near it was to the restart
(1 within ``NEAR_S`` of it, falling to 0.5 at the window's edge; a finding first seen
after the restart 0.6: it may be a consequence rather than the cause), plus a bonus when a
failed pod of the gang was on that node. A node's score is its best signal's plus a
quarter of the rest (capped at 1.5). The restart goes to the best node, and to the GPU or
port of its best signal, with ``confidence`` = its score's share of the top two, times its
strength ``1 - exp(-3 score)`` (the least score attributed, 0.3, reads about 0.6; a BAD
finding at the restart about 0.95). Said honestly otherwise:

* ``unattributed``: no signal on the gang's nodes in the window, or nothing scoring
  ``MIN_SCORE``: a software bug, a storage stall, a fault the exporters do not see;
* ``systemic``: strong findings on ``systemic_nodes`` or more of the gang's nodes at once
  (default: a quarter of the gang, at least 3, at most 16, as nvidia-resiliency-ext's
  "more than 16 suspect nodes is systemic, avoid none"): a switch, a rack, the exporters
  themselves. No node is blamed and none becomes a lemon.

``lemon_candidates`` counts the attributed restarts per node within a window (28 days by
default, as Meta's lemon detection): two or more make a lemon candidate.

Pure: no clock, no I/O. The node-health controller, ``krea-ops train restarts`` and the
goodput benchmark call the same functions.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from krea_ops.model import Severity

WINDOW_BEFORE_S = 720.0
WINDOW_AFTER_S = 300.0
NEAR_S = 120.0
MIN_SCORE = 0.3
LEMON_WINDOW_S = 28 * 86400.0
LEMON_RESTARTS = 2
SAME_FAULT_S = 3600.0
FALSE_LEMONS = 0.01

# what a finding means for a running gang: (class, weight of a BAD finding)
_CLASSES: Mapping[str, tuple[str, float]] = {
    "gpu_lost": ("gpu-lost", 1.0),
    "xid_bus": ("gpu-lost", 1.0),
    "gpu_no_readings": ("gpu-lost", 0.7),
    "gpu_ecc_uncorrected": ("memory", 1.0),
    "gpu_row_remap_failed": ("memory", 1.0),
    "xid_memory": ("memory", 1.0),
    "xid_other": ("gpu", 0.8),
    "nvlink_down": ("nvlink", 1.0),
    "nvlink_errors": ("nvlink", 0.9),
    "xid_nvlink": ("nvlink", 1.0),
    "ib_port_down": ("infiniband", 1.0),
    "ib_link_downed": ("infiniband", 1.0),
    "node_not_ready": ("not-ready", 1.0),
    "exporter_down": ("node-lost", 0.7),
    "telemetry_stale": ("node-lost", 0.5),
    "evicted": ("evicted", 0.9),
    "gpu_hot": ("thermal", 0.8),
    "gpu_no_margin": ("thermal", 0.7),
    "gpu_hw_thermal": ("thermal", 0.8),
    "gpu_sw_thermal": ("thermal", 0.7),
    "gpu_hot_transient": ("thermal", 0.8),
    "gpu_low_margin": ("thermal", 0.6),
    "gpu_warm": ("thermal", 0.5),
    "gpu_hw_power_brake": ("slowdown", 0.6),
    "gpu_hw_slowdown": ("slowdown", 0.6),
    "xid_application": ("application", 0.15),
    "ib_congestion": ("infiniband", 0.1),
    "ib_counter_saturated": ("infiniband", 0.1),
    "gpu_row_remap_pending": ("memory", 0.5),
}
_SUSPECT_FACTOR = 0.45
_UNKNOWN_FACTOR = 0.8  # exporter down, stale: the node may have gone with the crash
_AFTER_FACTOR = 0.6
_FAILED_POD_BONUS = 0.25
_STRONG = 0.6  # a signal scoring this much counts towards a systemic wave

_GPU_IN_TEXT = re.compile(r"\(gpu (\d+)\)|\bGPU (\d+)\b")
_STEP = re.compile(r"\bstep:\s*(\d+)\b")
_LOADED = re.compile(r"Loading the checkpoint at step (\d+)")
NCCL_TIMEOUT = "Watchdog caught collective operation timeout"
CUDA_ERROR = "CUDA error"


@dataclass(frozen=True)
class Signal:
    """One finding seen on a node: ``code`` is a health ``Reason.code`` (``gpu_hot``,
    ``ib_link_downed``, ``node_not_ready``, ...) or ``evicted`` (node-health evicted the
    node); ``first``/``last`` when it was first and last seen (epoch seconds)."""

    node: str
    code: str
    severity: Severity
    message: str
    first: float
    last: float
    gpu: int | None = None
    port: str | None = None


@dataclass(frozen=True)
class FailedPod:
    """A pod of the gang that failed: what its container's terminated state and its log
    said. ``at``: when it finished (epoch seconds), None if not known."""

    pod: str
    node: str | None
    at: float | None
    reason: str | None
    exit_code: int | None
    message: str | None
    log_tail: tuple[str, ...] = ()


@dataclass(frozen=True)
class Restart:
    """The ``number``-th restart of a run, at ``at``; ``nodes``: the gang's nodes just
    before it; ``gpus``: the gang's GPUs."""

    namespace: str
    run: str
    number: int
    at: float
    nodes: tuple[str, ...]
    failed: tuple[FailedPod, ...] = ()
    gpus: int | None = None


@dataclass(frozen=True)
class Attribution:
    node: str | None
    gpu: int | None
    port: str | None
    cause: str
    confidence: float
    evidence: tuple[str, ...] = field(default=())

    @property
    def attributed(self) -> bool:
        return self.node is not None

    @property
    def target(self) -> str:
        """``gpu-node-007 GPU 3``, ``gpu-node-002 port mlx5_3/1``, ``gpu-node-001``, or
        ``unattributed`` / ``systemic``."""
        if self.node is None:
            return self.cause
        if self.port is not None:
            return f"{self.node} port {self.port}"
        if self.gpu is not None:
            return f"{self.node} GPU {self.gpu}"
        return self.node

    def to_json(self) -> dict[str, object]:
        return {
            "node": self.node,
            "gpu": self.gpu,
            "port": self.port,
            "cause": self.cause,
            "confidence": round(self.confidence, 2),
            "evidence": list(self.evidence),
        }

    @staticmethod
    def from_json(data: Mapping[str, object]) -> Attribution:
        def opt_int(v: object) -> int | None:
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        def opt_str(v: object) -> str | None:
            return str(v) if isinstance(v, str) else None

        evidence = data.get("evidence")
        conf = data.get("confidence")
        return Attribution(
            node=opt_str(data.get("node")),
            gpu=opt_int(data.get("gpu")),
            port=opt_str(data.get("port")),
            cause=str(data.get("cause") or "unattributed"),
            confidence=float(conf) if isinstance(conf, (int, float)) else 0.0,
            evidence=tuple(str(e) for e in evidence) if isinstance(evidence, list) else (),
        )


def finding_class(code: str) -> str:
    if code in _CLASSES:
        return _CLASSES[code][0]
    if code.startswith("ib_"):
        return "infiniband"
    if code.startswith("nvlink"):
        return "nvlink"
    if code.startswith("xid_"):
        return "gpu"
    return "other"


def base_weight(code: str) -> float:
    """What a BAD finding of this code weighs for a running gang (``_CLASSES``)."""
    if code in _CLASSES:
        return _CLASSES[code][1]
    if code.startswith(("ib_", "nvlink")):
        return 0.8
    return 0.3


def systemic_threshold(gang_nodes: int) -> int:
    """How many of a gang's nodes showing strong findings at once is systemic."""
    return max(3, min(16, -(-gang_nodes // 4)))


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t))


def _ago(signal_t: float, at: float) -> str:
    d = at - signal_t
    if abs(d) < 1:
        return "at the restart"
    word = "before" if d > 0 else "after"
    d = abs(d)
    text = f"{d:.0f} s" if d < 120 else f"{d / 60:.0f} min"
    return f"{text} {word} the restart"


def _when(s: Signal, at: float) -> str:
    """``BAD, seen from 6 min before the restart to after it`` and the like."""
    if s.first > at:
        return f"{s.severity}, first seen {_ago(s.first, at)}"
    if s.last >= at:
        return f"{s.severity}, seen from {_ago(s.first, at)} until after it"
    return f"{s.severity}, seen from {_ago(s.first, at)}, last {_ago(s.last, at)}"


@dataclass(frozen=True)
class _Scored:
    signal: Signal
    score: float


def _score(signal: Signal, at: float, before_s: float) -> float:
    weight = base_weight(signal.code)
    if signal.severity is Severity.SUSPECT:
        weight *= _SUSPECT_FACTOR
    elif signal.severity is Severity.UNKNOWN:
        weight *= _UNKNOWN_FACTOR
    elif signal.severity is Severity.OK:
        return 0.0
    if signal.first > at:  # first seen after the restart: maybe a consequence
        return weight * _AFTER_FACTOR
    gap = max(0.0, at - signal.last)  # how long before the restart it was last seen
    if gap <= NEAR_S:
        return weight
    span = max(before_s - NEAR_S, 1.0)
    return weight * (1.0 - 0.5 * min(1.0, (gap - NEAR_S) / span))


def _gpu_of_pod(pod: FailedPod) -> int | None:
    for text in (pod.message or "", *pod.log_tail):
        m = _GPU_IN_TEXT.search(text)
        if m:
            return int(m.group(1) or m.group(2))
    return None


def _pod_line(pod: FailedPod) -> str:
    where = f" on {pod.node}" if pod.node else ""
    if pod.pod.startswith("child Job"):  # known from the JobSet controller's Event only
        return f"the JobSet restarted ({pod.reason}): {pod.pod}{where} failed first"
    what = " ".join(
        x
        for x in (
            pod.reason or "Failed",
            f"exit {pod.exit_code}" if pod.exit_code is not None else "",
        )
        if x
    )
    line = f"pod {pod.pod}{where}: {what}"
    if pod.message:
        line += f": {pod.message.strip()[:160]}"
    tail = [x for x in pod.log_tail if x.strip()]
    if tail:
        line += f"; last log line: {tail[-1].strip()[:200]}"
    return line


def _log_hints(failed: Sequence[FailedPod]) -> list[str]:
    out = []
    timeouts = sum(1 for p in failed if any(NCCL_TIMEOUT in x for x in p.log_tail))
    cuda = [p for p in failed if any(CUDA_ERROR in x for x in p.log_tail)]
    if timeouts:
        out.append(
            f"{timeouts} pod(s) logged an NCCL watchdog timeout (a collective stalled: the "
            "cause is on another rank or the fabric)"
        )
    for p in cuda:
        out.append(f"pod {p.pod}{' on ' + p.node if p.node else ''} logged a CUDA error")
    return out


def unattributed(*evidence: str) -> Attribution:
    return Attribution(None, None, None, "unattributed", 0.0, evidence)


def attribute(
    restart: Restart,
    signals: Iterable[Signal],
    *,
    before_s: float = WINDOW_BEFORE_S,
    after_s: float = WINDOW_AFTER_S,
    systemic_nodes: int | None = None,
) -> Attribution:
    """The node, GPU or port ``restart`` is most likely due to (module docstring)."""
    at = restart.at
    gang = set(restart.nodes) | {p.node for p in restart.failed if p.node}
    lo, hi = at - before_s, at + after_s
    in_window = [
        s for s in signals if s.node in gang and s.last >= lo and s.first <= hi and s.severity
    ]
    failed_nodes = {p.node for p in restart.failed if p.node}
    scored: dict[str, list[_Scored]] = {}
    for s in in_window:
        value = _score(s, at, before_s)
        if value > 0:
            scored.setdefault(s.node, []).append(_Scored(s, value))
    for items in scored.values():
        items.sort(key=lambda x: (-x.score, x.signal.first, x.signal.code))
    pods = [_pod_line(p) for p in restart.failed[:3]] + _log_hints(restart.failed)
    window_text = f"{_clock(lo)} to {_clock(hi)} UTC"

    def node_score(node: str) -> float:
        items = scored[node]
        total = items[0].score + 0.25 * sum(x.score for x in items[1:])
        if node in failed_nodes:
            total += _FAILED_POD_BONUS
        return min(total, 1.5)

    strong = sorted(n for n, items in scored.items() if items[0].score >= _STRONG)
    threshold = systemic_nodes if systemic_nodes is not None else systemic_threshold(len(gang))
    if len(strong) >= threshold:
        classes = sorted({finding_class(scored[n][0].signal.code) for n in strong})
        return Attribution(
            None,
            None,
            None,
            "systemic",
            0.0,
            (
                f"{len(strong)} of the gang's {len(gang)} nodes showed strong findings from "
                f"{window_text} ({', '.join(classes)}): a switch, a rack or the exporters, "
                "not one node; no node is blamed",
                *(f"{n}: {scored[n][0].signal.message}" for n in strong[:5]),
                *pods,
            ),
        )
    if not scored:
        why = f"no BAD or SUSPECT finding on the gang's {len(gang)} node(s) from {window_text}"
        return unattributed(why, *pods)
    ranking = sorted(scored, key=lambda n: (-node_score(n), n))
    best = ranking[0]
    top = node_score(best)
    second = node_score(ranking[1]) if len(ranking) > 1 else 0.0
    if top < MIN_SCORE:
        weak = scored[best][0].signal
        return unattributed(
            f"only weak findings on the gang's nodes from {window_text}; the strongest: "
            f"{weak.node}: {weak.message} ({_ago(weak.last, at)})",
            *pods,
        )
    lead = scored[best][0].signal
    gpu, port = lead.gpu, lead.port
    if gpu is None and port is None:
        for p in restart.failed:
            if p.node == best:
                gpu = _gpu_of_pod(p)
                if gpu is not None:
                    break
    # strength: 0.3 (the least attributed) reads ~0.6, a BAD finding near it ~0.95; times
    # its share against the runner-up node
    confidence = (1.0 - math.exp(-3.0 * top)) * (top / (top + second))
    evidence = [
        f"{x.signal.node}: {x.signal.message} ({_when(x.signal, at)})" for x in scored[best][:3]
    ]
    if len(ranking) > 1:
        other = scored[ranking[1]][0].signal
        evidence.append(f"also: {other.node}: {other.message} (scored lower)")
    return Attribution(
        best,
        gpu,
        port,
        finding_class(lead.code),
        round(confidence, 4),
        tuple(evidence + pods),
    )


def counts_towards_lemon(cause: str) -> bool:
    """Whether a restart of this cause is evidence against the node it is attributed to:
    any attributed one, node-health's own evictions included (it evicted the node for
    a finding of the node's: a BAD one, or a slow burn that lasted)."""
    return cause not in ("unattributed", "systemic")


def poisson_tail(mean: float, k: int) -> float:
    """P(X >= k) for X ~ Poisson(mean)."""
    if k <= 0:
        return 1.0
    term = math.exp(-mean)
    below = term
    for i in range(1, k):
        term *= mean / i
        below += term
    return max(0.0, 1.0 - below)


def chance_threshold(mean: float, nodes: int, false_lemons: float = FALSE_LEMONS) -> int:
    """The fewest restarts a node needs in the window so that no more than
    ``false_lemons`` of ``nodes`` ordinary nodes (restarting ``mean`` times each on
    average) would have as many by chance."""
    k = 1
    while k < 1000 and nodes * poisson_tail(mean, k) > false_lemons:
        k += 1
    return k


def lemon_candidates(
    attributed: Iterable[tuple[str, float]],
    now: float,
    *,
    window_s: float = LEMON_WINDOW_S,
    threshold: int = LEMON_RESTARTS,
    fleet_nodes: int | None = None,
    same_fault_s: float = SAME_FAULT_S,
    chance: float = FALSE_LEMONS,
) -> dict[str, list[float]]:
    """Nodes attributed enough restarts within ``window_s`` before ``now``: node -> the
    restart times counted, oldest first.

    Restarts of one node within ``same_fault_s`` of the one counted before are one fault
    (a node not yet pulled that fails the restarted gang again). Enough is ``threshold``
    (2), or with ``fleet_nodes`` (the nodes the restarts could have landed on) more where
    the fleet's own rate would give that many to an ordinary node by chance: the rate is
    the other nodes' (leave-one-out: a lemon does not raise its own bar), and the bar the
    fewest restarts that fewer than ``chance`` (0.01) ordinary nodes of the fleet would
    reach (Poisson). Two restarts in a week on one of 136 nodes is chance at a restart
    every 6 hours; it is not at one a day."""
    per: dict[str, list[float]] = {}
    for node, at in sorted(attributed, key=lambda x: (x[0], x[1])):
        if not now - window_s <= at <= now:
            continue
        kept = per.setdefault(node, [])
        if not kept or at - kept[-1] >= same_fault_s:
            kept.append(at)
    total = sum(len(ts) for ts in per.values())
    out = {}
    for node, ts in sorted(per.items()):
        need = threshold
        if fleet_nodes is not None and fleet_nodes > 1:
            mean = (total - len(ts)) / (fleet_nodes - 1)
            need = max(threshold, chance_threshold(mean, fleet_nodes, chance))
        if len(ts) >= need:
            out[node] = ts
    return out


# -- what a trainer's log says ------------------------------------------------------------


def last_step(lines: Iterable[str]) -> int | None:
    """The last training step a torchtitan-style metrics line (``step: N  loss: ...``)
    reports, None if none does."""
    step = None
    for line in lines:
        m = _STEP.search(line)
        if m:
            step = int(m.group(1))
    return step


def loaded_step(lines: Iterable[str]) -> int | None:
    """The step a (re)started trainer loaded (``Loading the checkpoint at step N.``), 0
    when it says it starts from scratch (``Training starts at step 1.``), None if the lines
    do not say."""
    for line in lines:
        m = _LOADED.search(line)
        if m:
            return int(m.group(1))
        if "Training starts at step 1." in line:
            return 0
    return None
