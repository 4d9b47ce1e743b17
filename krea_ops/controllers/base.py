"""The shape every bundled controller has: read a snapshot, decide, let the runbook act.

A controller is two functions. ``read`` does the I/O of one pass: it lists what the
controller looks at (nodes, pods, Kueue objects, Prometheus readings) into a frozen
snapshot, and notes when each input was last read successfully. ``decide`` is a pure
function of that snapshot, the time and the controller's persisted state: it returns a
``Decision`` holding the Plans to run (built with the runbook's planners, so
``--dry-run`` prints the same plan the executor runs), what it chose not to do and why,
the alerts to raise, gauges to export, and the state to persist. ``decide`` never reads a
clock or the network, so the same code runs live, in tests and in the goodput
simulation. Each pass is level-based: it looks at the whole current state, never at
"the last event".

The runner (``controllers.loop``) owns everything else: leader election, fencing, the
executor, metrics, one JSON log line per action, and the state's persistence (a
ConfigMap written with its ``resourceVersion``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, TypeVar

from krea_ops.errors import BadInput
from krea_ops.health import HealthPolicy
from krea_ops.kube.cluster import Cluster
from krea_ops.runbook.plan import Plan
from krea_ops.telemetry.source import TelemetrySource

# The state ConfigMap (namespace: the controller's own) holds one JSON document per
# controller under its name, and the operator's acknowledgement of the node-health blast
# cap or veto (``krea-ops controller ack``) as annotations.
STATE_CONFIGMAP = "krea-ops-controller-state"
NAMESPACE = "krea-ops"
ACK_AT = "krea.ai/ack-at"
ACK_BY = "krea.ai/ack-by"
ACK_REASON = "krea.ai/ack-reason"

Snapshot = TypeVar("Snapshot")


@dataclass(frozen=True)
class Inputs:
    """What ``read`` may use. ``source``: the telemetry source (Prometheus, or a scrape
    of the exporters), None when none could be opened (``source_error`` says why);
    ``user``: who the controller acts as in plans, Events and audit records (in a pod,
    ``system:serviceaccount:krea-ops:<name>``); ``namespace``: the controller's own
    (where the state ConfigMap and the Lease live)."""

    cluster: Cluster
    source: TelemetrySource | None
    policy: HealthPolicy
    user: str
    namespace: str = NAMESPACE
    source_error: str | None = None


@dataclass(frozen=True)
class Skip:
    """Something the controller would have done and did not: ``why`` is a short stable
    word (a metric label: cap, veto, opt-out, cooldown, stale, budget, pace, no-room,
    hold), ``detail`` one line for the log and ``controller status``."""

    target: str
    why: str
    detail: str


@dataclass(frozen=True)
class Alert:
    """A condition an operator must see (blast cap reached, veto raised, fail-static):
    exported as a gauge and logged once per pass while it holds."""

    kind: str  # cap, veto, stale-input, ...
    message: str
    objects: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    """What one pass decided. ``plans`` run in order through the runbook's executor,
    except that plans on disjoint nodes (and different subjects) may run side by side
    (``loop.independent_groups``); none means nothing to change. ``state``: the
    controller's new persisted state (JSON data), None to keep the stored one."""

    controller: str
    plans: tuple[Plan, ...] = ()
    skipped: tuple[Skip, ...] = ()
    alerts: tuple[Alert, ...] = ()
    gauges: Mapping[str, float] = field(default_factory=dict)
    state: Mapping[str, Any] | None = None

    @property
    def acts(self) -> bool:
        return any(p.steps for p in self.plans)


class Controller(Protocol[Snapshot]):
    """One bundled controller. ``config``: its section of the controllers' settings."""

    name: str  # burst-taint, migrate-back, node-health, quota-sync

    def read(self, inputs: Inputs, now: float) -> Snapshot:
        """One pass's I/O. Raises ``krea_ops.errors.Unavailable`` when an input it cannot
        do without is unreachable (the runner then changes nothing this pass)."""
        ...

    def decide(self, snapshot: Snapshot, now: float, state: Mapping[str, Any]) -> Decision:
        """Pure: no clock, no network, no randomness beyond what the snapshot holds."""
        ...


class ReadTimes(Protocol):
    """What the runner looks for on a snapshot, when it is there: ``read_at`` maps each
    input a pass read (``nodes``, ``pods``, ``telemetry`` ...) to when it was last read
    successfully (Unix seconds); the runner exports it as
    ``krea_ops_controller_input_last_read_timestamp_seconds``. An input that failed is
    left out (its gauge keeps the last good time).

    The runner makes a controller with ``Class.from_settings(settings)`` when the class
    has that static method, else with ``Class()``."""

    read_at: Mapping[str, float]


def section_values(controller: str, config: type, data: Any) -> dict[str, Any]:
    """A controller's settings section as ``{field: value}`` (``-`` in keys read as
    ``_``), checked against the fields of its ``config`` dataclass: BadInput (one line)
    for a section that is not a mapping or a key that is not one of them."""
    if not isinstance(data, Mapping):
        raise BadInput(f"{controller}: its settings must be a mapping")
    values = {str(k).replace("-", "_"): v for k, v in data.items()}
    known = [f.name for f in fields(config)]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise BadInput(f"{controller}: unknown setting {unknown[0]!r} (known: {', '.join(known)})")
    return values
