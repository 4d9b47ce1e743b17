"""node-health's planned swaps: the reads and the plans around ``training.swaps``.

node-health's read takes the training gangs with the restart recorder's inputs
(``controllers.restarts``: one JobSet list, one pod list; a failed list is fail-static,
a cluster without the JobSet API has none); ``swap_evictable`` names the nodes whose
eviction plans that pass must prepare (a node of a gang whose checkpoint request was
answered). ``decide_swaps`` turns
``training.swaps.plan_swaps``' decision into plans under node-health's own rules:

* a request is made only for a node that could then be evicted: not opted out
  (``Skip(why="opt-out")``), not in its cool-down after a manual restore
  (``cooldown``), not cordoned by someone else (``cordoned``), not beyond the blast cap
  counting the swaps already under way (``cap``), and not vetoed: the same kind of slow
  burn (thermal, infiniband, nvlink, memory) first seen on at least the veto threshold's
  number of GPU nodes within ``veto_window_s`` of each other is the room, the fabric or
  an exporter, not the nodes (``veto``; a first pass without state sees every onset at
  once, and errs on the side of doing nothing, as node-health's own veto). A request
  held back is not remembered as made, so a later pass asks again;
* once the trainer answered, the node is evicted with the runbook's plan
  (``build_evict``), counted by the blast cap like any eviction, the same guards
  applying again;
* a request unanswered for ``swap_timeout_s`` is given up (``Skip(why="swap-timeout")``):
  the SUSPECT node stays; once BAD, node-health's ordinary eviction takes it, with its
  windows.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from krea_ops.controllers.base import Skip
from krea_ops.gangstatus import GangStatus
from krea_ops.kube.times import parse_time
from krea_ops.model import Reason, Severity, Verdict
from krea_ops.runbook.nodes import EvictInputs, build_evict
from krea_ops.runbook.plan import Plan
from krea_ops.runbook.training import build_checkpoint_request
from krea_ops.training.gangs import Gang
from krea_ops.training.stalls import STRAGGLER
from krea_ops.training.swaps import (
    CHECKPOINT_REQUESTED_AT,
    HONOURED,
    PENDING,
    SLOW_BURN_CODES,
    STRAGGLER_CODE,
    ActiveSwap,
    GangSwaps,
    SwapConfig,
    honoured,
    plan_swaps,
    withdraw,
)

Obj = dict[str, Any]


def swap_evictable(
    gangs: Sequence[Gang], verdicts: Mapping[str, Verdict], enabled: bool = True
) -> list[str]:
    """The nodes of gangs whose checkpoint request was answered, SUSPECT or BAD: their
    eviction plans are prepared by ``read`` (which then leaves out the opted out, the
    cordoned and the marked, as for any eviction). None while swaps are off."""
    out: set[str] = set()
    for gang in gangs if enabled else ():
        at = parse_time(gang.annotations.get(CHECKPOINT_REQUESTED_AT))
        if at is None or not honoured(gang.annotations, at):
            continue
        for node in gang.nodes:
            verdict = verdicts.get(node)
            if verdict is not None and verdict.severity in (Severity.SUSPECT, Severity.BAD):
                out.add(node)
    return sorted(out)


def with_stragglers(
    verdicts: Mapping[str, Verdict], stalls: Mapping[str, GangStatus]
) -> dict[str, Verdict]:
    """``verdicts`` with a SUSPECT finding ``gang_straggler`` on each node a STRAGGLER
    run names (``training.stalls``): what planned swaps judge by."""
    out = dict(verdicts)
    for status in stalls.values():
        j = status.judgement
        if j.state != STRAGGLER or not j.node:
            continue
        what = j.node + (f" GPU {j.gpu}" if j.gpu is not None else "")
        reason = Reason(
            Severity.SUSPECT,
            STRAGGLER_CODE,
            f"{what} slows {status.key}: " + "; ".join(j.reasons),
            gpu=j.gpu,
        )
        had = out.get(j.node)
        out[j.node] = Verdict.of([*(had.reasons if had is not None else ()), reason])
    return out


def swap_kind(code: str) -> str:
    """What a slow burn is a sign of, for the veto: many nodes showing the same at once
    is a room, a fabric or an exporter."""
    if code.startswith("ib_"):
        return "infiniband"
    if code.startswith("nvlink"):
        return "nvlink"
    if code in ("gpu_row_remap_pending", "xid_memory"):
        return "memory"
    return "thermal"


@dataclass(frozen=True)
class PlannedSwapsState:
    """What planned swaps keep in node-health's state (``swaps``): per gang what
    ``training.swaps.plan_swaps`` keeps (its JSON, read there as ``GangSwaps``), and
    when each node first showed each kind of slow burn (``"<node>|<kind>"`` -> seconds),
    for the veto. JSON: ``{"gangs": {...}, "onsets": {...}}``."""

    gangs: Mapping[str, Any] = field(default_factory=dict)
    onsets: Mapping[str, float] = field(default_factory=dict)

    @staticmethod
    def from_json(data: Any) -> PlannedSwapsState:
        data = data if isinstance(data, Mapping) else {}
        gangs, onsets = data.get("gangs"), data.get("onsets")
        return PlannedSwapsState(
            dict(gangs) if isinstance(gangs, Mapping) else {},
            {
                str(k): float(v)
                for k, v in (onsets.items() if isinstance(onsets, Mapping) else ())
                if isinstance(v, int | float) and not isinstance(v, bool)
            },
        )

    def to_json(self) -> dict[str, Any]:
        return {"gangs": dict(self.gangs), "onsets": dict(sorted(self.onsets.items()))}

    def active(self) -> dict[str, ActiveSwap]:
        """Gang -> its swap under way."""
        return {
            key: gang.active
            for key, raw in self.gangs.items()
            if (gang := GangSwaps.from_json(raw)) is not None and gang.active is not None
        }

    def tried(self) -> set[str]:
        """The findings given up on, in every gang."""
        return {
            k
            for raw in self.gangs.values()
            if (gang := GangSwaps.from_json(raw)) is not None
            for k in gang.tried
        }


@dataclass
class SwapOutcome:
    plans: list[Plan] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    counted: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)


def decide_swaps(
    *,
    gangs: Sequence[Gang],
    verdicts: Mapping[str, Verdict],
    evict: EvictInputs,
    user: str,
    now: float,
    state: Mapping[str, Any],
    cfg: SwapConfig,
    cap: int,
    counted: int,
    veto_threshold: int,
    veto_window_s: float,
    marked: Collection[str],
    opted_out: Collection[str],
    cordoned: Collection[str],
    restored: Mapping[str, float],
    cooldown_s: float,
    evicting: Collection[str],
    drain_timeout_s: float,
) -> SwapOutcome:
    """One pass of planned swaps (module docstring): pure. ``counted``: the nodes the blast
    cap counts so far this pass; ``marked``: nodes carrying eviction marks (anyone's);
    ``evicting``: nodes this pass already evicts."""
    out = SwapOutcome(counted=counted)
    stored = PlannedSwapsState.from_json(state)
    requests, evictions, new_gangs = plan_swaps(gangs, verdicts, stored.gangs, now, cfg)

    # requests the last pass made that this one gave up on
    for key, active in stored.active().items():
        if active.status != PENDING:
            continue
        after = GangSwaps.from_json(new_gangs.get(key)) or GangSwaps(None)
        if active.finding in after.tried and after.active is None:
            out.skipped.append(
                Skip(
                    active.node,
                    "swap-timeout",
                    f"{key} did not answer the checkpoint request of "
                    f"{cfg.timeout_s:g} s ago: planned swap given up, the node stays "
                    f"({active.message})",
                )
            )
    for eviction in evictions:
        name = eviction.node
        if not eviction.planned or name in marked or name in evicting:
            continue  # a BAD node is the ordinary eviction's; one marked is done
        text = eviction.reason
        why = _held(name, text, opted_out, restored, cooldown_s, now, cordoned)
        if why is None and out.counted >= cap:
            why = ("cap", f"blast cap of {cap} quarantined nodes reached: {text}")
        if why is None and name not in evict.objs:
            why = ("unread", f"its pods were not read: {text}")
        if why is not None:
            out.skipped.append(Skip(name, *why))
            continue
        plan = build_evict(
            evict.only([name]), reason=text, user=user, now=now, timeout_s=drain_timeout_s
        )
        if plan.refused:
            out.skipped.append(Skip(name, "refused", plan.refused))
            continue
        out.plans.append(plan)
        out.counted += 1

    # when each node first showed each kind of slow burn, for the veto
    had = stored.onsets
    onsets: dict[str, float] = {}
    for node, verdict in verdicts.items():
        for reason in verdict.reasons:
            if reason.severity is Severity.SUSPECT and reason.code in SLOW_BURN_CODES:
                key = f"{node}|{swap_kind(reason.code)}"
                onsets[key] = had.get(key, now)
    # swaps under way (asked before, not yet evicted) hold a place under the cap
    done = set(marked) | {n for p in out.plans for n in p.nodes}
    asking = {r.gang for r in requests}
    under_way = sum(
        1
        for key, active in PlannedSwapsState(new_gangs).active().items()
        if key not in asking and active.status in (PENDING, HONOURED) and active.node not in done
    )
    by_gang = {f"{g.namespace}/{g.name}": g for g in gangs}
    for request in requests:
        name = request.node
        text = f"planned swap: {request.finding.message}"
        why = _held(name, text, opted_out, restored, cooldown_s, now, cordoned)
        kind = swap_kind(request.finding.code)
        mine = onsets.get(f"{name}|{kind}", now)
        wave = sorted(
            key.split("|", 1)[0]
            for key, at in onsets.items()
            if key.endswith(f"|{kind}") and abs(at - mine) <= veto_window_s
        )
        if why is None and len(wave) >= veto_threshold:
            why = (
                "veto",
                f"{len(wave)} GPU nodes first showed the same {kind} slow burn within "
                f"{veto_window_s:g} s (threshold {veto_threshold}): not the node's; {text}",
            )
        if why is None and out.counted + under_way >= cap:
            why = ("cap", f"blast cap of {cap} quarantined nodes reached: {text}")
        if why is not None:
            out.skipped.append(Skip(name, *why))
            new_gangs = withdraw(new_gangs, request)
            continue
        under_way += 1
        gang = by_gang[request.gang]
        out.plans.append(
            build_checkpoint_request(
                gang.namespace,
                gang.name,
                resource_version=gang.resource_version,
                uid=gang.uid,
                reason=request.reason,
                user=user,
                now=now,
            )
        )

    kept = PlannedSwapsState(new_gangs, onsets)
    statuses = [a.status for a in kept.active().values()]
    out.gauges = {
        "swaps_pending": float(statuses.count(PENDING)),
        "swaps_ready": float(statuses.count(HONOURED)),
    }
    out.state = kept.to_json()
    return out


def _held(
    name: str,
    text: str,
    opted_out: Collection[str],
    restored: Mapping[str, float],
    cooldown_s: float,
    now: float,
    cordoned: Collection[str],
) -> tuple[str, str] | None:
    if name in opted_out:
        return ("opt-out", f"krea.ai/auto-remediate=false: {text}")
    if name in restored:
        left = max(cooldown_s - (now - restored[name]), 0.0)
        return ("cooldown", f"restored by hand; not evicted again for another {left:.0f} s: {text}")
    if name in cordoned:
        return ("cordoned", f"cordoned by someone else, left to them: {text}")
    return None
