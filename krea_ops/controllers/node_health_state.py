"""node-health's persisted state (its key of the state ConfigMap) as frozen types.

The JSON is the one earlier versions wrote, read back as it was: a value that is not of
its type reads as absent (a corrupt entry is forgotten, never a failed pass), and
``to_json`` writes the same keys and shapes (``evicting``'s ``[resourceVersion, at]``
pairs among them). The parts another module owns stay that module's JSON, passed to it
as read and typed there: ``recorder`` (``restarts.record``: ``restarts.RecorderState``),
``swaps`` (``planned_swaps``: ``PlannedSwapsState``), ``validation`` (``ladder.climb``:
``ValidationMemo``) and ``ledger`` (``ledger.observe``: ``Ledger``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def _time(value: Any) -> float | None:
    """A finite JSON number as seconds, else None (``true`` is not a time)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _names(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


@dataclass(frozen=True)
class Evicting:
    """A node the last pass planned to evict: the ``resourceVersion`` it read (a node
    still at it was never evicted) and the evicted-at its plan wrote. JSON:
    ``[version, at]``."""

    version: str
    at: float

    @staticmethod
    def from_json(data: Any) -> Evicting | None:
        if not isinstance(data, list | tuple) or len(data) != 2:
            return None
        at = _time(data[1])
        return None if at is None else Evicting(str(data[0]), at)

    def to_json(self) -> list[Any]:
        return [self.version, self.at]


@dataclass(frozen=True)
class LemonMark:
    """A node labelled a lemon: its newest eviction (or restart) when labelled, and
    whether the label has been seen on it since (an operator then clearing it forgives
    the evictions up to ``at``)."""

    at: float
    seen: bool

    @staticmethod
    def from_json(data: Any) -> LemonMark | None:
        if not isinstance(data, Mapping):
            return None
        return LemonMark(_time(data.get("at")) or 0.0, bool(data.get("seen")))

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "seen": self.seen}


@dataclass(frozen=True)
class GangWatch:
    """A running gang as the last pass judged it (``training.stalls``): its state and
    since when it has held for this gang (``uid``) and attempt, the node and GPU the
    judgement names, its reasons, rank 0's last step, and whether its HUNG restart was
    acted on (once per attempt)."""

    state: str | None
    since: float | None
    uid: str | None = None
    attempt: int | None = None
    node: str | None = None
    gpu: int | None = None
    reasons: tuple[str, ...] = ()
    last_step_at: float | None = None
    acted: bool = False

    @staticmethod
    def from_json(data: Any) -> GangWatch | None:
        if not isinstance(data, Mapping):
            return None
        state, uid, node = data.get("state"), data.get("uid"), data.get("node")
        attempt, gpu = data.get("attempt"), data.get("gpu")
        return GangWatch(
            state=state if isinstance(state, str) else None,
            since=_time(data.get("since")),
            uid=uid if isinstance(uid, str) else None,
            attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
            node=node if isinstance(node, str) else None,
            gpu=gpu if isinstance(gpu, int) and not isinstance(gpu, bool) else None,
            reasons=_names(data.get("reasons")),
            last_step_at=_time(data.get("last_step_at")),
            acted=bool(data.get("acted")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "since": self.since,
            "uid": self.uid,
            "attempt": self.attempt,
            "node": self.node,
            "gpu": self.gpu,
            "reasons": list(self.reasons),
            "last_step_at": self.last_step_at,
            "acted": self.acted,
        }


@dataclass(frozen=True)
class CapState:
    """The blast cap as the last pass left it (what ``controller status`` shows): the
    nodes it counts (quarantined since the last acknowledgement), those out by an
    operator's evict (not counted), the limit, whether it is reached, and when it was
    last acknowledged (RFC 3339)."""

    quarantined_unacked: int
    operators: int
    limit: int
    reached: bool
    acked_at: str | None

    @staticmethod
    def from_json(data: Any) -> CapState | None:
        if not isinstance(data, Mapping):
            return None
        acked = data.get("acked_at")

        def count(key: str) -> int:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        return CapState(
            count("quarantined_unacked"),
            count("operators"),
            count("limit"),
            bool(data.get("reached")),
            acked if isinstance(acked, str) else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "quarantined_unacked": self.quarantined_unacked,
            "operators": self.operators,
            "limit": self.limit,
            "reached": self.reached,
            "acked_at": self.acked_at,
        }


@dataclass(frozen=True)
class VetoState:
    """The veto as the last pass left it: whether it holds, and per finding class the
    nodes of the wave that raised it."""

    active: bool
    classes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @staticmethod
    def from_json(data: Any) -> VetoState | None:
        if not isinstance(data, Mapping):
            return None
        classes = _mapping(data.get("classes"))
        return VetoState(bool(data.get("active")), {str(k): _names(v) for k, v in classes.items()})

    def to_json(self) -> dict[str, Any]:
        return {
            "active": self.active,
            "classes": {k: list(v) for k, v in sorted(self.classes.items())},
        }


@dataclass(frozen=True)
class NodeHealthState:
    """Everything node-health remembers between passes. Its own parts: ``onsets``
    (node -> finding class -> first seen BAD), ``healthy`` (node we quarantined -> OK
    since), ``remediations`` (node -> its evictions within the lemon window),
    ``lemons``, ``restored`` (node restored by someone else -> when, while its cool-down
    lasts), ``marked`` and ``restoring`` (the nodes out, and those we restore, last
    pass), ``evicting``, ``stalls`` (the running gangs' judgements), and ``cap`` and
    ``veto`` (written for ``controller status``; a pass does not read them back). The
    others' parts, as JSON: ``recorder``, ``swaps``, ``validation``, ``ledger`` (None:
    none yet)."""

    onsets: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    healthy: Mapping[str, float] = field(default_factory=dict)
    remediations: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    lemons: Mapping[str, LemonMark] = field(default_factory=dict)
    restored: Mapping[str, float] = field(default_factory=dict)
    marked: tuple[str, ...] = ()
    restoring: tuple[str, ...] = ()
    evicting: Mapping[str, Evicting] = field(default_factory=dict)
    stalls: Mapping[str, GangWatch] = field(default_factory=dict)
    cap: CapState | None = None
    veto: VetoState | None = None
    recorder: Mapping[str, Any] = field(default_factory=dict)
    swaps: Mapping[str, Any] = field(default_factory=dict)
    validation: Mapping[str, Any] = field(default_factory=dict)
    ledger: Mapping[str, Any] | None = None

    @staticmethod
    def from_json(data: Any) -> NodeHealthState:
        data = _mapping(data)

        def times(value: Any) -> dict[str, float]:
            return {str(k): t for k, v in _mapping(value).items() if (t := _time(v)) is not None}

        def each(value: Any, parse: Any) -> dict[str, Any]:
            return {
                str(k): item for k, v in _mapping(value).items() if (item := parse(v)) is not None
            }

        ledger = data.get("ledger")
        return NodeHealthState(
            onsets={str(n): times(v) for n, v in _mapping(data.get("onsets")).items()},
            healthy=times(data.get("healthy")),
            remediations={
                str(n): tuple(t for t in map(_time, v) if t is not None)
                for n, v in _mapping(data.get("remediations")).items()
                if isinstance(v, list | tuple)
            },
            lemons=each(data.get("lemons"), LemonMark.from_json),
            restored=times(data.get("restored")),
            marked=_names(data.get("marked")),
            restoring=_names(data.get("restoring")),
            evicting=each(data.get("evicting"), Evicting.from_json),
            stalls=each(data.get("stalls"), GangWatch.from_json),
            cap=CapState.from_json(data.get("cap")),
            veto=VetoState.from_json(data.get("veto")),
            recorder=dict(_mapping(data.get("recorder"))),
            swaps=dict(_mapping(data.get("swaps"))),
            validation=dict(_mapping(data.get("validation"))),
            ledger=dict(ledger) if isinstance(ledger, Mapping) else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "onsets": {n: dict(v) for n, v in self.onsets.items()},
            "healthy": dict(self.healthy),
            "remediations": {n: list(v) for n, v in self.remediations.items()},
            "lemons": {n: v.to_json() for n, v in self.lemons.items()},
            "restored": dict(self.restored),
            "marked": list(self.marked),
            "restoring": list(self.restoring),
            "recorder": dict(self.recorder),
            "cap": None if self.cap is None else self.cap.to_json(),
            "veto": None if self.veto is None else self.veto.to_json(),
            "evicting": {n: v.to_json() for n, v in self.evicting.items()},
            "swaps": dict(self.swaps),
            "stalls": {k: v.to_json() for k, v in self.stalls.items()},
            "validation": dict(self.validation),
            "ledger": None if self.ledger is None else dict(self.ledger),
        }
