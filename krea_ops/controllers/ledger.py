"""The node ledger: each node's quarantines, validations, restores and repairs, and the
time-to-repair figures made from them. Pure: no I/O.

Kubernetes keeps none of this: a node's annotations say only its latest eviction
(``krea.ai/evicted-at``) and its latest validation (``krea.ai/validation``), a restore
removes the eviction marks, and Events last an hour. So node-health, which lists every
node each pass anyway, hands the list to ``observe``, which compares it with what the
previous ledger knew and appends what changed:

* ``joined``: the pending-validation taint (``krea.ai/validation=pending``) newly seen;
  at the node's creation when that is after the last pass, else the pass; by None.
* ``quarantined``: a new ``krea.ai/evicted-at``; at evicted-at, by evicted-by, detail
  evicted-reason.
* ``evicted-again``: a new entry in ``krea.ai/evicted-again`` (an eviction of a node
  already out: not an incident); its own at, by and reason.
* ``validation-passed`` / ``validation-failed``: a new result in ``krea.ai/validation``;
  at the result's ``at``, by its ``by``, detail ``Validation.summary()``.
* ``needs-repair``: the ``krea.ai/needs-repair`` label appeared (detail its value);
  ``repaired``: it went (detail the value it had; by who validated the node, if a
  passing validation did it). Times below.
* ``restored``: the node carried our marks last pass and does not now; by ``user`` when
  node-health restored it, else ``OPERATOR``.
* ``escalated``: node-health escalates it this pass; by ``user``, detail the failed
  validations since its quarantine.
* ``deleted``: a node with a record is no longer listed; by None.

A change seen between two passes happened in between: the label's entries take the
validation's ``at`` when it falls in that interval (node-health writes the label with the
result), else the pass's time. ``restored``: a node node-health restores this pass
(``restoring``) is still marked in this pass's list; the next pass sees it unmarked and
writes the entry with this pass's time and ``user`` as by.

What is new is decided against the node's own entries (a quarantine whose evicted-at is
already there is not new) and a small memo per node kept only while there is something to
remember (``seen``: ``m`` it carried our marks, ``p`` the pending taint, ``r`` the
needs-repair label's value, ``R`` when node-health restored it). A controller that starts
without a ledger (``prev`` None) records what the nodes say of themselves (their latest
eviction and validation, with their own times) and cannot see restores made before.

The persisted ledger (JSON; node-health's state ConfigMap, which it shares with the other
controllers, 1 MiB), read and written as a frozen ``Ledger`` of ``LedgerEntry`` and
``NodeMemo``::

    {"at": 1767225600,                       # the pass that wrote it
     "nodes": {"gpu-node-007": [[1767200000, "quarantined", "XID 79", "system:..."], ...]},
     "seen": {"gpu-node-007": {"m": 1}},
     "observed": [[1767139200, 5529600.0], ...]}   # per UTC day: GPU-node-seconds watched

Entries are ``[t, kind, detail, by]`` (whole seconds; detail cut at ``DETAIL_CHARS``),
oldest first, within ``window_s`` (90 days), at most ``per_node`` (50) per node and
``total`` (3,000, ~400 KB at worst) in all, the oldest dropped first; a node without
entries is left out.

The figures (``repair_stats``, ``node_repair``), over the window:

* **incidents**: quarantines (``quarantined`` entries; ``evicted-again`` is not one).
* **MTBI** per node: the mean gap between a node's consecutive incidents (nodes with at
  least 2); the fleet's ``mtbi_s`` pools those gaps over every such node. The fleet's
  ``fleet_mtbi_s`` = GPU-node-seconds observed ÷ incidents, where observed time is what
  node-health watched: each pass adds the GPU nodes listed (``nvidia.com/gpu`` capacity,
  virtual nodes aside) × the time since the last pass (at most ``MAX_GAP_S``: a
  controller that was down did not watch), kept per UTC day for the window.
* **time to repair**: quarantine to the first ``restored`` after it (before the next
  quarantine; a node deleted first has no repair): mean and p90 (nearest rank: the
  ⌈0.9·n⌉-th smallest) over the repairs completed, by quarantines in the window.
* **validations** passed and failed.
* **waiting for repair**: the node's last entry among ``needs-repair``,
  ``validation-failed``, ``validation-passed``, ``repaired``, ``restored`` and ``deleted``
  is ``needs-repair`` or ``validation-failed``.
* **quarantined now**: its last entry among ``quarantined``, ``restored`` and ``deleted``
  is ``quarantined``.

``history`` merges a node's entries with the training restarts the restart recorder
attributed to it (``krea-ops nodes history``), and ``node_history`` with what the node
itself says now (for a cluster where node-health does not run).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from krea_ops.controllers.restarts import attributed_of
from krea_ops.kube.cluster import node_info
from krea_ops.kube.times import parse_time
from krea_ops.model import NodeInfo
from krea_ops.runbook.nodes import (
    EVICTED_AGAIN,
    EVICTED_AT,
    EVICTED_BY,
    EVICTED_REASON,
    TAINT_KEY,
)
from krea_ops.validation import (
    NEEDS_REPAIR_LABEL,
    PENDING_TAINT_KEY,
    RESULT_ANNOTATION,
    Validation,
)

WINDOW_S = 90 * 86400.0
PER_NODE = 50
TOTAL = 3000
DETAIL_CHARS = 160
MAX_GAP_S = 3600.0
DAY_S = 86400
OPERATOR = "an operator (nodes restore / uncordon)"

JOINED = "joined"
QUARANTINED = "quarantined"
EVICTED_AGAIN_KIND = "evicted-again"
VALIDATION_PASSED = "validation-passed"
VALIDATION_FAILED = "validation-failed"
NEEDS_REPAIR = "needs-repair"
REPAIRED = "repaired"
RESTORED = "restored"
ESCALATED = "escalated"
DELETED = "deleted"
RESTART = "restart"  # from the restart recorder, never stored here
KINDS = (
    JOINED,
    QUARANTINED,
    EVICTED_AGAIN_KIND,
    VALIDATION_PASSED,
    VALIDATION_FAILED,
    NEEDS_REPAIR,
    REPAIRED,
    RESTORED,
    ESCALATED,
    DELETED,
)
_REPAIR_STATE = frozenset(
    (NEEDS_REPAIR, VALIDATION_FAILED, VALIDATION_PASSED, REPAIRED, RESTORED, DELETED)
)
_OUT_STATE = frozenset((QUARANTINED, RESTORED, DELETED))


@dataclass(frozen=True)
class HistoryRow:
    """One thing that happened to a node: ``at`` Unix seconds, ``kind`` one of ``KINDS`` or
    ``restart``, ``by`` who did it (None: nobody in particular, or not known)."""

    at: float
    kind: str
    detail: str
    by: str | None = None


# -- reading a ledger (whatever is in the ConfigMap) ---------------------------------------


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _number(v: Any) -> float | None:
    return float(v) if _num(v) else None


@dataclass(frozen=True)
class LedgerEntry:
    """One thing that happened to a node, as the ledger keeps it: ``at`` whole Unix
    seconds, ``kind`` one of ``KINDS``. JSON: ``[at, kind, detail, by]``."""

    at: int
    kind: str
    detail: str
    by: str | None = None

    @staticmethod
    def from_json(raw: Any) -> LedgerEntry | None:
        """None for anything that is not such an entry (it is dropped)."""
        if (
            isinstance(raw, list)
            and len(raw) == 4
            and _num(raw[0])
            and raw[1] in KINDS
            and isinstance(raw[2], str)
            and (raw[3] is None or isinstance(raw[3], str))
        ):
            return LedgerEntry(int(raw[0]), raw[1], raw[2], raw[3])
        return None

    def to_json(self) -> list[Any]:
        return [self.at, self.kind, self.detail, self.by]

    def row(self) -> HistoryRow:
        return HistoryRow(float(self.at), self.kind, self.detail, self.by)


@dataclass(frozen=True)
class NodeMemo:
    """What the last pass saw of a node, kept only while there is something to
    remember: it carried our marks (``m``), the pending taint (``p``), the needs-repair
    label's value (``r``), when node-health restored it (``R``). JSON:
    ``{"m": 1, "p": 1, "r": value, "R": t}``, each key only when so."""

    marked: bool = False
    pending: bool = False
    repair_label: str | None = None
    restored_at: float | None = None

    @staticmethod
    def from_json(raw: Any) -> NodeMemo | None:
        if not isinstance(raw, Mapping):
            return None
        label, restored = raw.get("r"), raw.get("R")
        return NodeMemo(
            marked=bool(raw.get("m")),
            pending=bool(raw.get("p")),
            repair_label=None if label is None else str(label),
            restored_at=_number(restored),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.marked:
            out["m"] = 1
            if self.restored_at is not None:
                out["R"] = round(self.restored_at)
        if self.pending:
            out["p"] = 1
        if self.repair_label is not None:
            out["r"] = self.repair_label
        return out


@dataclass(frozen=True)
class Ledger:
    """The persisted ledger (the module docstring's JSON): when the pass that wrote it
    ran (None: no ledger yet), each node's entries oldest first, the memos, and the
    GPU-node-seconds observed per UTC day."""

    at: float | None = None
    nodes: Mapping[str, tuple[LedgerEntry, ...]] = field(default_factory=dict)
    seen: Mapping[str, NodeMemo] = field(default_factory=dict)
    observed: Mapping[int, float] = field(default_factory=dict)

    @staticmethod
    def from_json(ledger: Any) -> Ledger:
        """Whatever is in the ConfigMap: an entry, memo or day that is not of its type is
        left out; a node with no entry left is too."""
        data: Mapping[str, Any] = ledger if isinstance(ledger, Mapping) else {}
        nodes, seen, observed = data.get("nodes"), data.get("seen"), data.get("observed")
        entries: dict[str, tuple[LedgerEntry, ...]] = {}
        for name, raw in nodes.items() if isinstance(nodes, Mapping) else ():
            kept = tuple(
                e
                for e in map(LedgerEntry.from_json, raw if isinstance(raw, list) else ())
                if e is not None
            )
            if kept:
                entries[str(name)] = kept
        return Ledger(
            at=_number(data.get("at")),
            nodes=entries,
            seen={
                str(n): memo
                for n, m in (seen.items() if isinstance(seen, Mapping) else ())
                if (memo := NodeMemo.from_json(m)) is not None
            },
            observed={
                int(d[0]): float(d[1])
                for d in (observed if isinstance(observed, list) else ())
                if isinstance(d, list) and len(d) == 2 and _num(d[0]) and _num(d[1])
            },
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "at": None if self.at is None else round(self.at),
            "nodes": {n: [e.to_json() for e in es] for n, es in self.nodes.items()},
            "seen": {n: m.to_json() for n, m in self.seen.items()},
            "observed": [[d, s] for d, s in sorted(self.observed.items())],
        }


def _entries(ledger: Mapping[str, Any] | None) -> Mapping[str, tuple[LedgerEntry, ...]]:
    return Ledger.from_json(ledger).nodes


def _rows(entries: Iterable[LedgerEntry]) -> list[HistoryRow]:
    return [e.row() for e in entries]


# -- what a node says of itself ------------------------------------------------------------


def _marked(info: NodeInfo) -> bool:
    """It carries our eviction marks (``runbook.nodes.evicted_by_us``)."""
    return EVICTED_BY in info.annotations or any(t.key == TAINT_KEY for t in info.taints)


def _pending(info: NodeInfo) -> bool:
    return any(t.key == PENDING_TAINT_KEY for t in info.taints)


def _validation(info: NodeInfo) -> Validation | None:
    return Validation.from_annotation(info.name, info.annotations.get(RESULT_ANNOTATION))


def node_says(info: NodeInfo) -> list[HistoryRow]:
    """What a node's own annotations record, with their own times: the eviction that took
    it out (``krea.ai/evicted-at``), those made while it was out (``evicted-again``), its
    latest validation."""
    ann = info.annotations
    rows: list[HistoryRow] = []
    at = parse_time(ann.get(EVICTED_AT))
    if at is not None:
        rows.append(
            HistoryRow(
                float(round(at)), QUARANTINED, ann.get(EVICTED_REASON, ""), ann.get(EVICTED_BY)
            )
        )
    try:
        again = json.loads(ann.get(EVICTED_AGAIN) or "[]")
    except ValueError:
        again = []
    for e in again if isinstance(again, list) else ():
        t = parse_time(e.get("at")) if isinstance(e, dict) else None
        if t is not None:
            by = e.get("by")
            rows.append(
                HistoryRow(
                    float(round(t)),
                    EVICTED_AGAIN_KIND,
                    str(e.get("reason") or ""),
                    str(by) if by else None,
                )
            )
    v = _validation(info)
    if v is not None and _num(v.at):
        kind = VALIDATION_PASSED if v.passed else VALIDATION_FAILED
        rows.append(HistoryRow(float(round(v.at)), kind, v.summary(), v.by))
    return rows


# -- one pass ------------------------------------------------------------------------------


def observe(
    prev: Mapping[str, Any] | None,
    nodes: Mapping[str, dict[str, Any]],
    now: float,
    *,
    user: str,
    restoring: Collection[str],
    escalated: Collection[str] = (),
    window_s: float = WINDOW_S,
    per_node: int = PER_NODE,
    total: int = TOTAL,
) -> dict[str, Any]:
    """The ledger after this pass. ``nodes``: every node as listed, by name (the API's
    objects; a node with a record that is not there is taken as deleted), ``user``: who
    node-health acts as, ``restoring``: the nodes it restores this pass, ``escalated``:
    those it escalates this pass (written once: not again while the node's last entry is
    that escalation)."""
    horizon = now - window_s
    before = Ledger.from_json(prev)
    last_pass = before.at
    since = last_pass if last_pass is not None else -math.inf
    entries = {n: list(es) for n, es in before.nodes.items()}
    memos = before.seen
    restoring = set(restoring)
    escalated = set(escalated)
    seen: dict[str, NodeMemo] = {}
    gpu_nodes = 0

    for name, obj in nodes.items():
        info = node_info(obj)
        if (info.gpu_capacity or 0) > 0 and not info.virtual:
            gpu_nodes += 1
        memo = memos.get(name, NodeMemo())
        mine = entries.setdefault(name, [])
        known = {(e.kind, e.at) for e in mine}
        new: list[LedgerEntry] = []
        marked, pending = _marked(info), _pending(info)
        repair_label = info.labels.get(NEEDS_REPAIR_LABEL)
        v = _validation(info)
        if pending and not memo.pending:
            created = info.created_at
            _add(
                new,
                created if created is not None and created > since else now,
                JOINED,
                "pending validation",
                None,
            )
        for row in node_says(info):
            if row.at >= horizon and (row.kind, int(row.at)) not in known:
                _add(new, row.at, row.kind, row.detail, row.by)
        if repair_label is not None and memo.repair_label is None:
            t = v.at if v is not None and not v.passed and since < v.at <= now else now
            _add(new, t, NEEDS_REPAIR, repair_label, None)
        elif repair_label is None and memo.repair_label is not None:
            fresh = v is not None and v.passed and since < v.at <= now  # it lifted the label
            t = v.at if fresh and v is not None else now
            _add(new, t, REPAIRED, memo.repair_label, v.by if fresh and v is not None else None)
        if memo.marked and not marked:
            ours = name in restoring or memo.restored_at is not None
            t = now if name in restoring or memo.restored_at is None else memo.restored_at
            _add(new, t, RESTORED, "", user if ours else OPERATOR)
        if name in escalated:
            last = new[-1] if new else (mine[-1] if mine else None)
            if last is None or last.kind != ESCALATED:
                failed = _failures_since_quarantine([*mine, *new])
                _add(new, now, ESCALATED, f"after {failed} failed validations", user)
        mine.extend(new)

        memo_now = NodeMemo(
            marked=marked,
            pending=pending,
            repair_label=repair_label,
            restored_at=float(round(now)) if marked and name in restoring else None,
        )
        if memo_now.to_json():
            seen[name] = memo_now

    for name in (set(entries) | set(memos)) - set(nodes):
        mine = entries.setdefault(name, [])
        if not mine or mine[-1].kind != DELETED:
            mine.append(LedgerEntry(round(now), DELETED, "", None))

    observed = dict(before.observed)
    if last_pass is not None and now > last_pass:
        day = int(now // DAY_S * DAY_S)
        observed[day] = observed.get(day, 0.0) + gpu_nodes * min(now - last_pass, MAX_GAP_S)
    return Ledger(
        at=float(round(now)),
        nodes=_bounded(entries, horizon, per_node, total),
        seen=seen,
        observed={d: round(s, 1) for d, s in observed.items() if d + DAY_S > horizon},
    ).to_json()


def _add(new: list[LedgerEntry], t: float, kind: str, detail: str, by: str | None) -> None:
    new.append(LedgerEntry(round(t), kind, detail[:DETAIL_CHARS], by))


def ledger_at(ledger: Mapping[str, Any] | None) -> float | None:
    """When the pass that wrote the ledger ran (None: no ledger)."""
    at: Any = ledger.get("at") if isinstance(ledger, Mapping) else None
    return float(at) if _num(at) else None


def _failures_since_quarantine(entries: Sequence[LedgerEntry]) -> int:
    n = 0
    for e in reversed(entries):
        if e.kind == QUARANTINED:
            break
        n += e.kind == VALIDATION_FAILED
    return n


def _bounded(
    entries: Mapping[str, list[LedgerEntry]], horizon: float, per_node: int, total: int
) -> dict[str, tuple[LedgerEntry, ...]]:
    """Within the window, the newest ``per_node`` of each node and ``total`` in all; the
    entries one pass wrote at one time stay in the order it wrote them."""
    kept: list[tuple[int, int, str, LedgerEntry]] = []
    seq = 0
    for name, mine in entries.items():
        inside = sorted((e for e in mine if e.at >= horizon), key=lambda e: e.at)
        for e in inside[-per_node:] if per_node > 0 else ():
            kept.append((e.at, seq, name, e))
            seq += 1
    kept.sort(key=lambda k: (k[0], k[1]))
    out: dict[str, list[LedgerEntry]] = {}
    for _, _, name, e in kept[-total:] if total > 0 else ():
        out.setdefault(name, []).append(e)
    return {n: tuple(es) for n, es in out.items()}


# -- a node's history ----------------------------------------------------------------------


def history(
    ledger: Mapping[str, Any] | None,
    recorder: Mapping[str, Any] | None,
    node: str,
    now: float,
    *,
    window_s: float = WINDOW_S,
    current: NodeInfo | None = None,
) -> list[HistoryRow]:
    """Every entry of ``node`` within the window, the training restarts the restart
    recorder attributed to it (its ``attributed`` entries ``[node, t, run, restart,
    cause]``), and with ``current`` (the node as read now) what it says of itself that the
    ledger lacks (same kind and time: the same event), newest first."""
    horizon = now - window_s
    rows = [r for r in _rows(_entries(ledger).get(node, ())) if r.at >= horizon]
    if current is not None:
        known = {(r.kind, int(r.at)) for r in rows}
        rows += [r for r in node_says(current) if (r.kind, int(r.at)) not in known]
    for a in attributed_of(recorder):
        if a.node == node:
            rows.append(HistoryRow(a.at, RESTART, f"{a.run} restart #{a.number} ({a.cause})", None))
    order = {id(r): i for i, r in enumerate(rows)}
    rows.sort(key=lambda r: (r.at, order[id(r)]), reverse=True)
    return rows


# -- time to repair ------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeRepair:
    """One node's figures over the window (the module docstring defines them); a figure
    with nothing to make it from is None."""

    node: str
    incidents: int
    mtbi_s: float | None
    repairs: tuple[float, ...]  # each completed repair's time, quarantine to restore (s)
    time_to_repair_mean_s: float | None
    time_to_repair_p90_s: float | None
    validations_passed: int
    validations_failed: int
    escalations: int
    waiting_repair: bool
    quarantined_now: bool
    quarantined_since: float | None  # the quarantine it is in now
    last_incident_at: float | None
    gaps: tuple[float, ...] = ()  # between consecutive incidents (s)


@dataclass(frozen=True)
class RepairStats:
    """The fleet's figures over the window; ``nodes``: every node with an entry in it."""

    window_s: float
    node_days: float  # GPU-node-days node-health watched
    incidents: int
    mtbi_s: float | None  # pooled gaps of nodes with >= 2 incidents
    fleet_mtbi_s: float | None  # node_days × 86400 / incidents
    repairs: int
    time_to_repair_mean_s: float | None
    time_to_repair_p90_s: float | None
    validations_passed: int
    validations_failed: int
    escalations: int
    waiting_repair: tuple[str, ...]
    quarantined_now: tuple[str, ...]
    nodes: tuple[NodeRepair, ...]

    def gauges(self) -> dict[str, float]:
        """As gauges (``repair_*``); a figure that is None is left out."""
        values: dict[str, float | None] = {
            "repair_incidents": self.incidents,
            "repair_node_days": self.node_days,
            "repair_mtbi_s": self.mtbi_s,
            "repair_fleet_mtbi_s": self.fleet_mtbi_s,
            "repair_repairs": self.repairs,
            "repair_time_to_repair_mean_s": self.time_to_repair_mean_s,
            "repair_time_to_repair_p90_s": self.time_to_repair_p90_s,
            "repair_validations_passed": self.validations_passed,
            "repair_validations_failed": self.validations_failed,
            "repair_escalations": self.escalations,
            "repair_waiting": len(self.waiting_repair),
            "repair_quarantined": len(self.quarantined_now),
        }
        return {k: float(v) for k, v in values.items() if v is not None}


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def p90(values: Sequence[float]) -> float | None:
    """Nearest rank: the ⌈0.9·n⌉-th smallest."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def node_repair(
    node: str, rows: Iterable[HistoryRow], now: float, *, window_s: float = WINDOW_S
) -> NodeRepair:
    """A node's figures from its rows (any order; ``restart`` rows are not counted)."""
    horizon = now - window_s
    order = sorted(
        (r for r in rows if r.kind in KINDS and r.at >= horizon), key=lambda r: r.at
    )  # stable: rows at one time keep their order
    incidents = [r.at for r in order if r.kind == QUARANTINED]
    gaps = tuple(b - a for a, b in itertools.pairwise(incidents))
    repairs: list[float] = []
    open_at: float | None = None
    for r in order:
        if r.kind == QUARANTINED:
            open_at = r.at
        elif r.kind == RESTORED and open_at is not None:
            repairs.append(r.at - open_at)
            open_at = None
        elif r.kind == DELETED:
            open_at = None
    repair_state = [r.kind for r in order if r.kind in _REPAIR_STATE]
    out_state = [r for r in order if r.kind in _OUT_STATE]
    quarantined_now = bool(out_state) and out_state[-1].kind == QUARANTINED
    return NodeRepair(
        node=node,
        incidents=len(incidents),
        mtbi_s=_mean(gaps),
        repairs=tuple(repairs),
        time_to_repair_mean_s=_mean(repairs),
        time_to_repair_p90_s=p90(repairs),
        validations_passed=sum(1 for r in order if r.kind == VALIDATION_PASSED),
        validations_failed=sum(1 for r in order if r.kind == VALIDATION_FAILED),
        escalations=sum(1 for r in order if r.kind == ESCALATED),
        waiting_repair=bool(repair_state) and repair_state[-1] in (NEEDS_REPAIR, VALIDATION_FAILED),
        quarantined_now=quarantined_now,
        quarantined_since=out_state[-1].at if quarantined_now else None,
        last_incident_at=incidents[-1] if incidents else None,
        gaps=gaps,
    )


def repair_stats(
    ledger: Mapping[str, Any] | None, now: float, *, window_s: float = WINDOW_S
) -> RepairStats:
    """The fleet's time-to-repair figures from the ledger (the module docstring defines
    them)."""
    horizon = now - window_s
    nodes = tuple(
        node_repair(n, _rows(es), now, window_s=window_s)
        for n, es in sorted(_entries(ledger).items())
        if any(e.at >= horizon for e in es)
    )
    observed = Ledger.from_json(ledger).observed
    node_days = sum(s for d, s in observed.items() if d + DAY_S > horizon) / DAY_S
    incidents = sum(n.incidents for n in nodes)
    repairs = [t for n in nodes for t in n.repairs]
    return RepairStats(
        window_s=window_s,
        node_days=node_days,
        incidents=incidents,
        mtbi_s=_mean([g for n in nodes for g in n.gaps]),
        fleet_mtbi_s=node_days * DAY_S / incidents if incidents and node_days > 0 else None,
        repairs=len(repairs),
        time_to_repair_mean_s=_mean(repairs),
        time_to_repair_p90_s=p90(repairs),
        validations_passed=sum(n.validations_passed for n in nodes),
        validations_failed=sum(n.validations_failed for n in nodes),
        escalations=sum(n.escalations for n in nodes),
        waiting_repair=tuple(n.node for n in nodes if n.waiting_repair),
        quarantined_now=tuple(n.node for n in nodes if n.quarantined_now),
        nodes=nodes,
    )


# -- what `krea-ops nodes history` shows ---------------------------------------------------


@dataclass(frozen=True)
class NodeHistory:
    """A node's history, newest first, and its figures; ``recorded``: node-health has kept
    a ledger here (False: the rows are only what the node and the restart recorder say)."""

    node: str
    rows: tuple[HistoryRow, ...]
    summary: NodeRepair
    recorded: bool
    window_s: float


def node_history(
    ledger: Mapping[str, Any] | None,
    recorder: Mapping[str, Any] | None,
    current: NodeInfo,
    now: float,
    *,
    window_s: float = WINDOW_S,
) -> NodeHistory:
    """``history`` of the node as read now, with its figures; whether it is quarantined
    and waits for repair is what the node says now (our marks; the needs-repair label or
    a failed latest validation)."""
    rows = history(ledger, recorder, current.name, now, window_s=window_s, current=current)
    summary = node_repair(current.name, rows, now, window_s=window_s)
    marked = _marked(current)
    since = parse_time(current.annotations.get(EVICTED_AT)) if marked else None
    v = _validation(current)
    waiting = NEEDS_REPAIR_LABEL in current.labels or (v is not None and not v.passed)
    if since is None and marked:
        since = summary.quarantined_since
    summary = dataclasses.replace(
        summary, quarantined_now=marked, quarantined_since=since, waiting_repair=waiting
    )
    return NodeHistory(current.name, tuple(rows), summary, ledger_at(ledger) is not None, window_s)
