"""Planned swaps: a predicted failure turned into a planned restart (pure).

When a node of a running training gang turns SUSPECT with a slow-burning finding (a GPU
creeping towards its hot threshold, InfiniBand or NVLink errors rising under the BAD
count, a row remap pending), the node will most likely fail the gang later, at a moment
nobody chose, losing the work since the last periodic checkpoint. A planned swap asks the
trainer for a checkpoint now and evicts the node right after that checkpoint is
committed: the gang restarts from it, without the node, having lost seconds of work.

The request is a JobSet annotation the trainer's launcher watches (docs/operations.md,
"Planned swaps"): the console writes ``krea.ai/checkpoint-requested-at`` (RFC 3339, with
``-requested-by`` and ``-reason``); the launcher, once the checkpoint's ``.metadata`` is
committed, answers ``krea.ai/checkpoint-completed-at`` and
``krea.ai/checkpoint-completed-step``. A request is honoured once the completed-at is at
or after the requested-at.

``plan_swaps`` decides, pass by pass, from the gangs, the nodes' verdicts and its own
state: a request for a gang one of whose nodes has shown a slow burn for ``after_s`` (one
request per finding, and one at a time per gang); nothing while it is pending; the node's eviction
once it is honoured; and after ``timeout_s`` without an answer it gives up on that
finding: the node is then evicted only if it is BAD (what node-health would do anyway),
never a SUSPECT node without its checkpoint. What may be evicted (the blast cap, opt-out,
veto, cool-down) is the caller's to judge: node-health builds the plans.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from krea_ops.kube.times import parse_time
from krea_ops.model import Reason, Severity, Verdict

CHECKPOINT_REQUESTED_AT = "krea.ai/checkpoint-requested-at"
CHECKPOINT_REQUESTED_BY = "krea.ai/checkpoint-requested-by"
CHECKPOINT_REQUESTED_REASON = "krea.ai/checkpoint-requested-reason"
CHECKPOINT_COMPLETED_AT = "krea.ai/checkpoint-completed-at"
CHECKPOINT_COMPLETED_STEP = "krea.ai/checkpoint-completed-step"

# 2 x a 4-minute checkpoint write + 2 minutes: a launcher that has not answered by then
# is not going to (it does not implement the protocol, or the gang is stuck)
DEFAULT_TIMEOUT_S = 600.0
# A swap restarts the whole gang (minutes of its time: the restart, a checkpoint write),
# so it is made for a finding that has lasted: 15 minutes of it. A slow burner lasts
# hours; a finding that comes and goes within minutes (a warm reading under a load spike,
# a few symbol errors from a cable being touched) is not one, and swapping on it costs
# more than it saves. Except a GPU above its hot threshold: it turns BAD (and is evicted
# unplanned) once it has been there for the health policy's window, so it is asked about
# after a minute.
DEFAULT_AFTER_S = 900.0
HOT_TRANSIENT_AFTER_S = 60.0

# The SUSPECT findings that predict a failure minutes to hours ahead, and why:
SLOW_BURN_CODES: Mapping[str, str] = {
    # at or above health_warm_c, under health_hot_c: a GPU creeping towards the
    # temperature at which node-health evicts it (gpu_hot), usually a failing fan or
    # clogged cold plate that only gets worse under load
    "gpu_warm": "a GPU creeping towards its hot threshold",
    # above health_hot_c but not for the whole window yet: gpu_hot (BAD) follows within
    # the window if it holds, with an unplanned eviction
    "gpu_hot_transient": "a GPU above its hot threshold, not yet for the whole window",
    # within health_slowdown_margin_c of the GPU's own slowdown temperature: clocks are
    # about to be held down, which slows every rank of the gang
    "gpu_low_margin": "a GPU close to its thermal slowdown temperature",
    # InfiniBand link errors under health_ib_symbol_errors_bad (the code names the
    # counter that counts most): a degrading cable or transceiver, which ends in a
    # link flap and an NCCL timeout of the whole gang
    "ib_symbol_error": "InfiniBand symbol errors rising",
    "ib_port_rcv_errors": "InfiniBand receive errors rising",
    "ib_link_error_recovery": "InfiniBand link error recoveries rising",
    "ib_port_rcv_remote_physical_errors": "InfiniBand remote physical errors rising",
    "ib_local_link_integrity_errors": "InfiniBand link integrity errors rising",
    "ib_excessive_buffer_overrun_errors": "InfiniBand buffer overruns rising",
    # NVLink recovery/CRC errors under health_nvlink_errors_bad: the same story inside the
    # node (XID 74 follows)
    "nvlink_errors": "NVLink errors rising",
    # a row remap pending (takes effect at the next GPU reset) or recorded (XID 63): the
    # HBM is wearing out; the reset it needs cannot happen under a running gang, and an
    # uncorrectable error (XID 48/95) is what typically comes next
    "gpu_row_remap_pending": "a GPU memory row remap pending",
    "xid_memory": "GPU memory errors being corrected",
}
# Swapped whatever their severity, at once: a GPU whose clocks are held down (a power
# brake, a hardware slowdown) slows every rank of its gang but does not crash it, and a
# node a STRAGGLER judgement names (``training.stalls``: the gang's step time up, that GPU
# standing out) does the same: a checkpoint first loses nothing, an unplanned eviction
# loses the work since the last one. (Without a running gang, node-health evicts a BAD
# node as ever.)
STRAGGLER_CODE = "gang_straggler"
SWAP_NOW_CODES: Mapping[str, str] = {
    "gpu_hw_power_brake": "a GPU held down by a power brake, slowing its gang",
    "gpu_hw_slowdown": "a GPU held down by a hardware slowdown, slowing its gang",
    STRAGGLER_CODE: "a GPU or node slowing its whole gang (a straggler)",
}
# Not slow burners: application XIDs (the job's fault, not the node's), congestion (the
# fabric's, not the node's), saturated counters (the counter's), findings that say we
# cannot see the node (UNKNOWN is not bad), and anything BAD (node-health evicts it now).

PENDING, HONOURED, GAVE_UP = "pending", "honoured", "gave-up"


class GangView(Protocol):
    """What a planned swap reads of a training gang (``krea_ops.training.gangs.Gang``)."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def nodes(self) -> tuple[str, ...]: ...
    @property
    def running(self) -> bool: ...
    @property
    def annotations(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class SwapConfig:
    """``timeout_s``: how long a request may go unanswered before the swap is given up.
    ``after_s``: how long a slow burn must have been showing (pass after pass) before a
    checkpoint is asked for it: one transient reading is not a slow burn, and a swap is a
    restart of the whole gang."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    after_s: float = DEFAULT_AFTER_S


@dataclass(frozen=True)
class SwapRequest:
    """Ask ``gang`` (``namespace/name``) for a checkpoint now, for ``node``'s finding."""

    namespace: str
    name: str
    node: str
    finding: Reason

    @property
    def gang(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def reason(self) -> str:
        """The request's reason, as the annotation and the audit log carry it."""
        return f"planned swap of {self.node}: {self.finding.message}"


@dataclass(frozen=True)
class SwapEviction:
    """Evict ``node``: ``step`` is the checkpoint the gang resumes from (None: a BAD node
    evicted after the request went unanswered, ``planned`` False)."""

    node: str
    namespace: str
    name: str
    message: str
    step: int | None
    planned: bool = True

    @property
    def gang(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def reason(self) -> str:
        """The eviction's reason (the node's evicted-reason, the audit log's)."""
        if self.planned:
            return (
                f"planned swap: {self.message}; checkpoint step {self.step} of {self.gang} "
                "is complete"
            )
        return f"{self.message}; planned swap given up ({self.gang} did not checkpoint)"


def slow_burn(reasons: Sequence[Reason]) -> Reason | None:
    """The first SUSPECT finding among ``reasons`` that is a slow burner
    (``SLOW_BURN_CODES``); None if none is."""
    for reason in reasons:
        if reason.severity is Severity.SUSPECT and reason.code in SLOW_BURN_CODES:
            return reason
    return None


def finding_key(node: str, reason: Reason) -> str:
    """What "the same finding" is: the node, the code and what it is about."""
    return f"{node}|{reason.code}|{'' if reason.gpu is None else reason.gpu}|{reason.port or ''}"


def request_state(annotations: Mapping[str, str]) -> tuple[float | None, float | None, int | None]:
    """``(requested_at, completed_at, step)`` from a JobSet's annotations (Unix seconds,
    the completed checkpoint's step); a missing or malformed value is None."""
    requested = parse_time(annotations.get(CHECKPOINT_REQUESTED_AT))
    completed = parse_time(annotations.get(CHECKPOINT_COMPLETED_AT))
    raw = annotations.get(CHECKPOINT_COMPLETED_STEP)
    step: int | None = None
    if isinstance(raw, str) and raw.strip().isdigit():
        step = int(raw.strip())
    return requested, completed, step


def honoured(annotations: Mapping[str, str], requested_at: float) -> bool:
    """Whether the launcher answered a request made at ``requested_at``."""
    _, completed, _ = request_state(annotations)
    return completed is not None and completed >= requested_at


def swappable(reason: Reason) -> bool:
    """A finding a planned swap is made for (a slow burn, or a slowed gang's)."""
    if reason.code in SWAP_NOW_CODES:
        return reason.severity in (Severity.SUSPECT, Severity.BAD)
    return reason.severity is Severity.SUSPECT and reason.code in SLOW_BURN_CODES


def _slow_burns(node: str, verdict: Verdict | None) -> dict[str, Reason]:
    if verdict is None:
        return {}
    return {finding_key(node, r): r for r in verdict.reasons if swappable(r)}


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ActiveSwap:
    """A gang's swap under way: the node and finding it is for (``finding_key``), the
    finding's message, when the checkpoint was requested (whole seconds, as the
    annotation says), its status (``pending``, ``honoured``, ``gave-up``) and the
    checkpoint's step once honoured."""

    node: str
    finding: str
    message: str
    requested_at: float
    status: str
    step: int | None = None

    @staticmethod
    def from_json(data: Any) -> ActiveSwap | None:
        """None for anything that is not such a swap (it is forgotten)."""
        if not isinstance(data, Mapping):
            return None
        requested_at, step = _seconds(data.get("requested_at")), data.get("step")
        if data.get("node") is None or requested_at is None:
            return None
        return ActiveSwap(
            node=str(data["node"]),
            finding=str(data.get("finding")),
            message=str(data.get("message")),
            requested_at=requested_at,
            status=str(data.get("status")),
            step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "finding": self.finding,
            "message": self.message,
            "requested_at": self.requested_at,
            "status": self.status,
            "step": self.step,
        }


@dataclass(frozen=True)
class GangSwaps:
    """What ``plan_swaps`` keeps of one gang (``uid``) between passes: when each slow
    burn showing was first seen (``seen``), the ``active`` swap, and the findings
    ``tried`` already. JSON: ``{"uid", "active", "tried", "seen"}``."""

    uid: str | None
    active: ActiveSwap | None = None
    tried: tuple[str, ...] = ()
    seen: Mapping[str, float] = field(default_factory=dict)

    @staticmethod
    def from_json(data: Any) -> GangSwaps | None:
        if not isinstance(data, Mapping):
            return None
        uid, tried, seen = data.get("uid"), data.get("tried"), data.get("seen")
        return GangSwaps(
            uid=None if uid is None else str(uid),
            active=ActiveSwap.from_json(data.get("active")),
            tried=tuple(str(k) for k in tried) if isinstance(tried, list | tuple) else (),
            seen={
                str(k): t
                for k, v in (seen.items() if isinstance(seen, Mapping) else ())
                if (t := _seconds(v)) is not None
            },
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "active": None if self.active is None else self.active.to_json(),
            "tried": sorted(self.tried),
            "seen": dict(self.seen),
        }


def plan_swaps(
    gangs: Iterable[GangView],
    verdicts: Mapping[str, Verdict],
    state: Mapping[str, Any],
    now: float,
    cfg: SwapConfig | None = None,
) -> tuple[list[SwapRequest], list[SwapEviction], dict[str, Any]]:
    """One pass: ``(requests, evictions, new_state)``; pure (module docstring).

    ``state`` (JSON, as the last pass returned it): per gang ``namespace/name``, its
    ``uid``, when each slow burn showing was first seen (``seen``), the ``active``
    swap (node, finding key and message, when requested, status
    ``pending``/``honoured``/``gave-up``, the checkpoint's step) and the findings
    ``tried`` already. A swap that was honoured is returned as an eviction on every pass
    until its node leaves the gang (the caller skips a node already quarantined, and
    one the blast cap holds back goes once it may); a finding given up on is not asked
    about again while it lasts; whatever concerns a node that left the gang, or a gang
    that is gone, is forgotten."""
    cfg = cfg or SwapConfig()
    requested_at = float(math.floor(now))  # what the annotation's whole seconds say
    requests: list[SwapRequest] = []
    evictions: list[SwapEviction] = []
    out: dict[str, Any] = {}
    for gang in sorted(gangs, key=lambda g: (g.namespace, g.name)):
        key = f"{gang.namespace}/{gang.name}"
        prev = GangSwaps.from_json(state.get(key))
        if prev is None or prev.uid != gang.uid:
            prev = GangSwaps(gang.uid)
        members = set(gang.nodes)
        showing = {
            k: r for n in sorted(members) for k, r in _slow_burns(n, verdicts.get(n)).items()
        }
        tried = [k for k in prev.tried if k in showing]
        seen = {k: prev.seen.get(k, now) for k in showing}
        active = prev.active
        if active is not None and active.node not in members:
            active = None  # the node left the gang: swapped, or the gang moved on
        if active is not None:
            node = active.node
            verdict = verdicts.get(node)
            severity = verdict.severity if verdict is not None else Severity.UNKNOWN
            if active.status == PENDING:
                if honoured(gang.annotations, active.requested_at):
                    _, _, step = request_state(gang.annotations)
                    active = replace(active, status=HONOURED, step=step)
                elif now - active.requested_at >= cfg.timeout_s:
                    active = replace(active, status=GAVE_UP)
                    if active.finding not in tried:
                        tried.append(active.finding)
                    if severity is Severity.BAD:
                        evictions.append(
                            SwapEviction(
                                node, gang.namespace, gang.name, active.message, None,
                                planned=False,
                            )
                        )  # fmt: skip
            if active.status == HONOURED:
                if severity in (Severity.SUSPECT, Severity.BAD):
                    evictions.append(
                        SwapEviction(node, gang.namespace, gang.name, active.message, active.step)
                    )
                elif severity is Severity.OK:
                    active = None  # the finding cleared before it could be acted on
            if active is not None and active.status == GAVE_UP:
                active = None  # remembered in ``tried`` while the finding lasts
        if active is None and gang.running:
            for finding, reason in showing.items():
                node = finding.split("|", 1)[0]
                verdict = verdicts[node]
                now_code = reason.code in SWAP_NOW_CODES
                if finding in tried or (verdict.severity is not Severity.SUSPECT and not now_code):
                    continue  # a BAD node is node-health's to evict now
                wait = 0.0 if now_code else cfg.after_s
                if reason.code == "gpu_hot_transient":
                    wait = min(wait, HOT_TRANSIENT_AFTER_S)
                if now - seen[finding] < wait:
                    continue  # not yet a slow burn: it may come and go
                requests.append(SwapRequest(gang.namespace, gang.name, node, reason))
                active = ActiveSwap(node, finding, reason.message, requested_at, PENDING)
                break
        if active is not None or tried or seen:
            out[key] = GangSwaps(gang.uid, active, tuple(tried), seen).to_json()
    return requests, evictions, out


def withdraw(state: Mapping[str, Any], request: SwapRequest) -> dict[str, Any]:
    """``state`` without ``request``'s swap: for a request its caller did not make (the
    blast cap, an opt-out), so that the next pass may ask again."""
    out = {k: v for k, v in state.items()}
    entry = out.get(request.gang)
    if isinstance(entry, Mapping):
        active = entry.get("active")
        if isinstance(active, Mapping) and active.get("node") == request.node:
            entry = {**entry, "active": None}
            out[request.gang] = entry
            if not entry.get("tried"):
                del out[request.gang]
    return out


__all__ = [
    "CHECKPOINT_COMPLETED_AT",
    "CHECKPOINT_COMPLETED_STEP",
    "CHECKPOINT_REQUESTED_AT",
    "CHECKPOINT_REQUESTED_BY",
    "CHECKPOINT_REQUESTED_REASON",
    "DEFAULT_TIMEOUT_S",
    "SLOW_BURN_CODES",
    "ActiveSwap",
    "GangSwaps",
    "GangView",
    "SwapConfig",
    "SwapEviction",
    "SwapRequest",
    "finding_key",
    "honoured",
    "plan_swaps",
    "request_state",
    "slow_burn",
    "withdraw",
]
