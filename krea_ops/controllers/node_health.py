"""node-health: evict the nodes the health policy finds BAD, with a blast cap and a veto.

What one pass does (``decide``; level-based: it looks at every GPU node as it is now,
and keeps in its state only what the cluster cannot say):

* **Evict.** A GPU node whose verdict is BAD for longer than its finding's window
  (``NodeHealthConfig.bad_for_s``, by finding class, below) is evicted with the
  runbook's own plan (``runbook.nodes.build_evict``: cordon, taint
  ``krea.ai/unhealthy=<reason>``, annotate evicted-by/why/when, drain through the
  Eviction API), the finding's text as the reason and the controller's user as
  evicted-by. One plan per node, oldest finding first. Windows: the health policy
  already waits out its own window for the findings it judges over time (a GPU at or
  above ``hot_c`` for the whole ``window_s``, NVLink and InfiniBand error counts over
  ``window_s``), so those classes act at once (0 s); the classes that are a state seen
  at one moment wait: ``not-ready`` 300 s (the node lifecycle controller's own default
  toleration of a NotReady node, measured from the Ready condition's
  ``lastTransitionTime``), ``infiniband`` 120 s (a port that is down, not one that
  retrains), anything else the policy's ``window_s``. Classes: ``not-ready``,
  ``gpu-lost`` (NVML lost the GPU, XID 79), ``thermal``, ``slowdown`` (power brake,
  hardware slowdown), ``memory`` (uncorrectable ECC, failed row remap, XID 48/64/95),
  ``nvlink``, ``infiniband``, ``other``.
* **Unknown is not bad.** A node we cannot see (exporter down, no telemetry, stale
  samples, Prometheus down, slow or erroring) is UNKNOWN: it is counted in a gauge and
  never grounds for a cordon, nor, once quarantined, for a restore. A telemetry read in
  which some queries failed counts as no read (their readings are missing on every node:
  a hot GPU whose temperature query failed would look OK); while the telemetry cannot be
  read a ``stale-input`` alert says why. Its findings' first-seen times are kept while
  it is blind, so a node that was hot before its exporter died and is hot again after
  is not given a new window.
* **Blast cap.** Automation never holds more than ``cap`` GPU nodes quarantined without
  an operator's acknowledgement: ``cap = max(cap_min_nodes, floor(cap_share × GPU
  nodes))`` (default max(1, 2 %); GPU nodes: those with ``nvidia.com/gpu`` capacity,
  virtual ones aside). Counted from the cluster each pass, however slowly the
  nodes came: nodes carrying our marks with ``krea.ai/evicted-by`` = the controller's
  user and ``krea.ai/evicted-at`` after the last acknowledgement (``krea.ai/ack-at`` on
  the ConfigMap ``krea-ops-controller-state``, written by ``krea-ops controller ack``),
  plus the evictions this pass plans. Beyond it: ``Skip(why="cap")`` per node and one
  ``Alert(kind="cap")``. The acknowledgement lifts it: what was quarantined before it
  no longer counts.
* **Systemic veto.** The same finding class appearing on several nodes at once is an
  exporter, a rack or a fabric problem, not N bad nodes: when at least
  ``max(2, min(veto_nodes, ceil(veto_share × GPU nodes)))`` nodes (default: 3 nodes or
  1 %, whichever is fewer, never one node) first showed it within ``veto_window_s``
  (60 s) of each other, nothing is evicted for that class while it holds
  (``Skip(why="veto")``) and one ``Alert(kind="veto")`` names the nodes. It holds while
  that many of those nodes still show it, or until an acknowledgement newer than the
  wave: after it, the nodes are judged one by one again (and counted by the cap). A
  finding's onset is the pass that first saw it (NotReady: the Ready condition's
  transition time), so on a first pass without state, nodes already BAD with the same
  finding look simultaneous: the veto then errs on the side of doing nothing, and says so.
  Nodes already quarantined still count towards a wave (they are evidence of it).
* **Tripping never blocks recovery.** Cap and veto only hold back new evictions.
  Restores flow, cap or veto or not, and a manual ``krea-ops nodes restore`` is never
  undone (next item). A node this controller quarantined earns its way back through the
  repair ladder (``controllers.ladder``, ``validate``, on by default): validated after a
  cool-down, restored with the runbook's plan (``build_restore``) on a pass while its
  verdict is OK, labelled ``krea.ai/needs-repair`` and retried on a failure, escalated
  after ``escalate_after`` failures; nodes that join with the pending-validation taint are
  validated before they take pods. With ``validate`` off, a node OK for
  ``restore_after_s`` (default 1 h; None turns automatic restores off) is restored.
* **Manual restore.** A node whose eviction marks disappear without this controller
  restoring it (``nodes restore``, or ``kubectl uncordon`` plus the taint removed) was
  restored by an operator: it is not evicted again for ``cooldown_s`` (6 h) after the
  pass that saw it (``Skip(why="cooldown")``). Detected from the controller's own state
  (which nodes carried the marks last pass or were evicted by it, which it restored
  itself), so it needs no extra annotation on the node (``nodes restore`` leaves every
  annotation but ours as it was); a node evicted by the last pass that is unmarked now
  and still at the resourceVersion that pass read was never evicted (its plan failed),
  not restored. A restore made while no controller ran is not seen.
* **Opt-out.** Nodes labelled ``krea.ai/auto-remediate=false`` are reported only:
  ``Skip(why="opt-out")`` for each action it would have taken.
* **Someone else's cordon.** A BAD node cordoned by someone else (no marks of ours) is
  theirs to handle: ``Skip(why="cordoned")``.
* **Lemons.** Every eviction seen on a node (its ``krea.ai/evicted-at``, whoever
  evicted it) is remembered for ``lemon_window_s`` (28 days). A node remediated
  ``lemon_remediations`` (2) times within that is labelled ``krea.ai/lemon=true`` (an
  UPDATE plan, with an Event); training JobSets require nodes without that label
  (``training.manifests``), so a lemon still serves inference but no gang. An operator
  clears it by removing the label; the evictions before that are then forgotten.
* **Not acted on either:** a BAD node whose eviction inputs were not read
  (``Skip(why="unread")``, only when the snapshot was made without them) or whose plan
  the runbook refuses (``Skip(why="refused")``, with the runbook's words).
* **Unfinished drains.** A node we quarantined whose pods were not all moved (a budget
  held them) is drained again each pass, with the same reason.
* **Planned swaps** (``planned_swaps``, on by default; ``controllers.planned_swaps``,
  ``training.swaps``). A node of a running training gang SUSPECT with a slow-burning
  finding (a GPU warm or near slowdown, InfiniBand or NVLink errors rising, a row remap
  pending) gets its gang a checkpoint request (a PATCH of the JobSet's
  ``krea.ai/checkpoint-requested-at``), and is evicted, like a BAD node, right after the
  trainer answers that the checkpoint is committed; under the same cap, opt-out, veto and
  cool-down. A request unanswered for ``swap_timeout_s`` is given up: the SUSPECT node
  stays.

* **Hung and straggling runs** (``training.stalls``, read through ``gangstatus``: rank
  0's log and the telemetry of the running gangs' nodes). A run HUNG (no step for
  several times its step time, its GPUs busy with no tensor work) for
  ``stalls.hang_restart_after_s`` is restarted once per attempt, well before NCCL's
  watchdog would end it: its likely node (a finding on one of the gang's nodes) is
  evicted with the runbook's plan, under the cap, opt-out and cool-down like any
  eviction; otherwise (no node named, or that node held back) rank 0's pod is evicted
  through the Eviction API (``runbook.training.build_gang_restart``) so that the JobSet's
  own failure policy restarts the gang; a JobSet that would only replace the pod is not
  restarted that way (``Skip(why="refused")``). The restart is recorded with cause
  ``hang``. A run STRAGGLER names a node (one GPU's clocks held down, hotter than the
  rest, or fabric errors, while the gang's step time is up): that node goes through a
  planned swap, as does a node of a running gang whose only BAD findings are clocks held
  down (a power brake, a hardware slowdown): such a GPU slows the gang but does not crash
  it, so it is swapped after a checkpoint (``Skip(why="planned-swap")`` meanwhile), not
  evicted at once. Off with ``hang_restarts`` / ``straggler_swaps``.

State (JSON, persisted by the runner): per node, when each finding class was first seen
(``onsets``), since when a quarantined node is OK (``healthy``), the eviction times seen
(``remediations``), lemons labelled (``lemons``), manual restores seen (``restored``),
which nodes carried our marks (``marked``), which the last pass evicted (``evicting``,
with the resourceVersion its plan was made from) and which it restored (``restoring``),
the planned swaps under way per gang (``swaps``), each running gang's state since when
(``stalls``), the ladder's failures per node (``validation``) and each node's history
(``ledger``, ``controllers.ledger``: ``nodes history``).

Gauges: ``quarantined`` (nodes carrying our marks by this controller), ``quarantined_unacked``
(those counted by the cap, with this pass's), ``cap``, ``cap_reached`` (0/1),
``veto_active`` (0/1), ``bad_nodes``, ``unknown_nodes``, ``lemons``, ``swaps_pending``
(checkpoint requests unanswered), ``swaps_ready`` (answered, the node not yet evicted),
``runs_hung``, ``runs_straggler``, ``runs_slow``, ``runs_stalled``; the ladder's
``validations_running``, ``nodes_needs_repair``, ``nodes_escalated``,
``nodes_pending_validation``, ``nodes_ready_to_restore``; the ledger's ``repair_*``."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import quote

from krea_ops.controllers import planned_swaps
from krea_ops.controllers.base import (
    ACK_AT,
    ACK_BY,
    STATE_CONFIGMAP,
    Alert,
    Decision,
    Inputs,
    Skip,
)
from krea_ops.controllers.ladder import LadderConfig, LadderInputs, climb, pending
from krea_ops.controllers.ledger import observe, repair_stats
from krea_ops.controllers.node_health_state import (
    CapState,
    Evicting,
    GangWatch,
    LemonMark,
    NodeHealthState,
    VetoState,
)
from krea_ops.controllers.planned_swaps import PlannedSwapsState, with_stragglers
from krea_ops.controllers.restarts import (
    RecorderConfig,
    RestartInputs,
    attributed_of,
    attributed_restarts,
    read_restart_inputs,
    record,
)
from krea_ops.errors import BadInput, Unavailable
from krea_ops.fleet import judged_error, load_fleet
from krea_ops.gangstatus import GangStatus, read_statuses
from krea_ops.health import HealthPolicy, fleet_views
from krea_ops.kube.cluster import node_info
from krea_ops.kube.times import parse_time, rfc3339
from krea_ops.kube.writes import SetLabels
from krea_ops.model import NodeInfo, Reason, Severity, Verdict
from krea_ops.runbook.nodes import (
    EVICTED_AT,
    EVICTED_BY,
    EVICTED_REASON,
    EvictInputs,
    build_evict,
    build_restore,
    evicted_again_by,
    evicted_by_us,
    node_event,
    read_evict,
    update_step,
)
from krea_ops.runbook.plan import Plan
from krea_ops.runbook.training import build_gang_restart
from krea_ops.runbook.validate import (
    job_finished,
    job_key,
    job_node,
    list_validation_jobs,
    priority_class_exists,
    read_finished,
    running_validations,
)
from krea_ops.settings import Settings
from krea_ops.training.attribution import chance_threshold, lemon_candidates
from krea_ops.training.gangs import Gang
from krea_ops.training.manifests import LEMON_LABEL
from krea_ops.training.stalls import (
    HUNG,
    PROGRESSING,
    SLOW,
    STALLED,
    STRAGGLER,
    StallConfig,
)
from krea_ops.training.swaps import (
    DEFAULT_AFTER_S,
    DEFAULT_TIMEOUT_S,
    SWAP_NOW_CODES,
    SwapConfig,
    finding_key,
)
from krea_ops.validation import (
    LEVELS,
    RESULT_ANNOTATION,
    Validation,
    ValidationSpec,
)

NAME = "node-health"
OPT_OUT_LABEL = "krea.ai/auto-remediate"

# findings that say we cannot see the node: while any holds, what was seen before stays
BLIND_CODES = frozenset({"exporter_down", "no_telemetry", "telemetry_stale", "gpu_no_readings"})

CLASSES = (
    "not-ready",
    "gpu-lost",
    "thermal",
    "slowdown",
    "memory",
    "nvlink",
    "infiniband",
    "other",
)
_CLASS_OF_CODE = {
    "node_not_ready": "not-ready",
    "gpu_lost": "gpu-lost",
    "xid_bus": "gpu-lost",
    "gpu_hot": "thermal",
    "gpu_no_margin": "thermal",
    "gpu_hw_thermal": "thermal",
    "gpu_sw_thermal": "thermal",
    "gpu_hw_power_brake": "slowdown",
    "gpu_hw_slowdown": "slowdown",
    "gpu_ecc_uncorrected": "memory",
    "gpu_row_remap_failed": "memory",
    "xid_memory": "memory",
    "nvlink_errors": "nvlink",
    "nvlink_down": "nvlink",
    "xid_nvlink": "nvlink",
}
# None: the policy's window_s
DEFAULT_BAD_FOR_S: Mapping[str, float | None] = {
    "not-ready": 300.0,
    "gpu-lost": 0.0,
    "thermal": 0.0,
    "slowdown": 0.0,
    "memory": 0.0,
    "nvlink": 0.0,
    "infiniband": 120.0,
    "other": None,
}

Obj = dict[str, Any]


def finding_class(code: str) -> str:
    """The class of a BAD reason's code: what the windows and the veto group by."""
    if code in _CLASS_OF_CODE:
        return _CLASS_OF_CODE[code]
    if code.startswith("ib_"):
        return "infiniband"
    return "other"


def _number(key: str, value: Any, *, minimum: float = 0.0) -> float:
    if isinstance(value, bool):
        raise BadInput(f"node-health setting {key}: expected a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"node-health setting {key}: expected a number, got {value!r}") from None
    if not math.isfinite(out) or out < minimum:
        raise BadInput(f"node-health setting {key}: must be {minimum:g} or more, got {value!r}")
    return out


@dataclass(frozen=True)
class NodeHealthConfig:
    """node-health's settings (the ``node-health`` section of the controllers' settings).

    ``cap_share``, ``cap_min_nodes``: the blast cap, max(cap_min_nodes, floor(cap_share ×
    GPU nodes)) nodes quarantined by automation without an acknowledgement.
    ``veto_nodes``, ``veto_share``, ``veto_window_s``: the same finding class first seen
    on max(2, min(veto_nodes, ceil(veto_share × GPU nodes))) nodes within veto_window_s
    vetoes evictions for it. ``bad_for_s``: per finding class, how long a node must be
    BAD with it before it is evicted (seconds; None: the health policy's window_s).
    ``restore_after_s``: a node we quarantined that is OK this long is restored (None:
    never automatically). ``cooldown_s``: after a manual restore, the node is not
    evicted again for this long. ``lemon_window_s``, ``lemon_remediations``: that many
    evictions within the window make a lemon; ``lemon_restarts``: so do that many
    training restarts attributed to the node within it (restarts within
    ``lemon_same_fault_s`` of each other counted once; more where the fleet's own rate
    would give that many to ``lemon_chance`` ordinary nodes by chance, for evictions
    too: ``attribution.lemon_candidates``). ``attribution_before_s``,
    ``attribution_after_s``: the window around a restart its signals are taken from
    (``controllers.restarts``). ``drain_timeout_s``: the plans' eviction timeout.
    ``planned_swaps``: evict a running gang's SUSPECT node with a slow burn right after
    a checkpoint asked of its trainer, once the slow burn has shown for ``swap_after_s``;
    ``swap_timeout_s``: how long such a request may
    go unanswered. ``stalls``: the HUNG and STRAGGLER thresholds
    (``training.stalls.StallConfig``); ``hang_restarts``: restart a gang HUNG for
    ``stalls.hang_restart_after_s``; ``straggler_swaps``: the node a STRAGGLER run names
    goes through a planned swap."""

    cap_share: float = 0.02
    cap_min_nodes: int = 1
    veto_nodes: int = 3
    veto_share: float = 0.01
    veto_window_s: float = 60.0
    bad_for_s: Mapping[str, float | None] = field(default_factory=lambda: dict(DEFAULT_BAD_FOR_S))
    restore_after_s: float | None = 3600.0
    cooldown_s: float = 6 * 3600.0
    lemon_window_s: float = 28 * 86400.0
    lemon_remediations: int = 2
    lemon_restarts: int = 2
    lemon_same_fault_s: float = 3600.0
    lemon_chance: float = 0.01
    attribution_before_s: float = 720.0
    attribution_after_s: float = 300.0
    drain_timeout_s: float = 300.0
    planned_swaps: bool = True
    swap_timeout_s: float = DEFAULT_TIMEOUT_S
    swap_after_s: float = DEFAULT_AFTER_S
    hang_restarts: bool = True
    straggler_swaps: bool = True
    stalls: StallConfig = field(default_factory=StallConfig)
    validate: bool = True
    validate_after_s: float = 600.0
    validate_retry_s: float = 1800.0
    validate_level: str = "full"
    escalate_after: int = 3
    auto_restore: bool = True
    validate_new_nodes: bool = True
    validation: ValidationSpec = field(
        default_factory=lambda: ValidationSpec.from_settings(Settings())
    )

    @staticmethod
    def from_mapping(values: Mapping[str, Any] | None) -> NodeHealthConfig:
        """From a settings section; keys are the field names (``-`` or ``_``). An
        unknown key or a bad value is BadInput naming it. ``bad_for_s`` entries
        override the defaults class by class."""
        known = {f.name for f in fields(NodeHealthConfig)}
        out: dict[str, Any] = {}
        for raw_key, value in (values or {}).items():
            key = str(raw_key).replace("-", "_")
            if key not in known:
                raise BadInput(
                    f"node-health setting {raw_key}: unknown (known: {', '.join(sorted(known))})"
                )
            if key == "bad_for_s":
                if not isinstance(value, Mapping):
                    raise BadInput(
                        "node-health setting bad_for_s: expected a mapping of finding class "
                        "to seconds"
                    )
                windows: dict[str, float | None] = dict(DEFAULT_BAD_FOR_S)
                for cls, seconds in value.items():
                    if cls not in DEFAULT_BAD_FOR_S:
                        raise BadInput(
                            f"node-health setting bad_for_s: unknown finding class {cls!r} "
                            f"(known: {', '.join(CLASSES)})"
                        )
                    windows[cls] = None if seconds is None else _number(f"bad_for_s.{cls}", seconds)
                out[key] = windows
            elif key == "stalls":
                if isinstance(value, StallConfig):
                    out[key] = value
                    continue
                if not isinstance(value, Mapping):
                    raise BadInput("node-health setting stalls: expected a mapping")
                try:
                    out[key] = StallConfig.from_mapping(value)
                except ValueError as exc:
                    raise BadInput(f"node-health setting stalls: {exc}") from None
            elif key == "validation":
                if not isinstance(value, ValidationSpec):
                    raise BadInput("node-health setting validation: set the validation_* settings")
                out[key] = value
            elif key == "validate_level":
                if value not in LEVELS:
                    raise BadInput(f"node-health setting validate_level {value!r}: quick or full")
                out[key] = value
            elif key in (
                "planned_swaps",
                "hang_restarts",
                "straggler_swaps",
                "validate",
                "auto_restore",
                "validate_new_nodes",
            ):
                if not isinstance(value, bool):
                    raise BadInput(f"node-health setting {raw_key}: expected true or false")
                out[key] = value
            elif key == "restore_after_s":
                out[key] = None if value is None else _number(key, value)
            elif key in (
                "cap_min_nodes",
                "veto_nodes",
                "lemon_remediations",
                "lemon_restarts",
                "escalate_after",
            ):
                number = _number(key, value, minimum=1)
                if number != int(number):
                    raise BadInput(f"node-health setting {key}: expected a whole number")
                out[key] = int(number)
            else:
                out[key] = _number(key, value)
        if "cap_share" in out and out["cap_share"] > 1:
            raise BadInput("node-health setting cap_share: a share of the fleet, 0 to 1")
        if "veto_share" in out and out["veto_share"] > 1:
            raise BadInput("node-health setting veto_share: a share of the fleet, 0 to 1")
        return NodeHealthConfig(**out)

    @staticmethod
    def from_settings(settings: Settings) -> NodeHealthConfig:
        """From the ``node_health_*`` settings (the ``bad_for_s`` windows keep their
        defaults)."""
        restore = settings.node_health_restore_after_s
        return NodeHealthConfig.from_mapping(
            {
                "cap_share": settings.node_health_cap_share,
                "cap_min_nodes": settings.node_health_cap_min_nodes,
                "veto_nodes": settings.node_health_veto_nodes,
                "veto_share": settings.node_health_veto_share,
                "veto_window_s": settings.node_health_veto_window_s,
                "restore_after_s": restore if restore > 0 else None,
                "cooldown_s": settings.node_health_cooldown_s,
                "lemon_window_s": settings.node_health_lemon_window_s,
                "lemon_remediations": settings.node_health_lemon_remediations,
                "lemon_restarts": settings.node_health_lemon_restarts,
                "lemon_same_fault_s": settings.node_health_lemon_same_fault_s,
                "lemon_chance": settings.node_health_lemon_chance,
                "attribution_before_s": settings.attribution_before_s,
                "attribution_after_s": settings.attribution_after_s,
                "drain_timeout_s": settings.node_health_drain_timeout_s,
                "planned_swaps": settings.node_health_planned_swaps,
                "swap_timeout_s": settings.node_health_swap_timeout_s,
                "swap_after_s": settings.node_health_swap_after_s,
                "hang_restarts": settings.node_health_hang_restarts,
                "straggler_swaps": settings.node_health_straggler_swaps,
                "stalls": StallConfig.from_settings(settings),
                "validate": settings.node_health_validate,
                "validate_after_s": settings.node_health_validate_after_s,
                "validate_retry_s": settings.node_health_validate_retry_s,
                "validate_level": settings.node_health_validate_level,
                "escalate_after": settings.node_health_escalate_after,
                "auto_restore": settings.node_health_auto_restore,
                "validate_new_nodes": settings.node_health_validate_new_nodes,
                "validation": ValidationSpec.from_settings(settings),
            }
        )

    def ladder(self) -> LadderConfig:
        return LadderConfig(
            validate_after_s=self.validate_after_s,
            validate_retry_s=self.validate_retry_s,
            level=self.validate_level,
            escalate_after=self.escalate_after,
            auto_restore=self.auto_restore,
            new_nodes=self.validate_new_nodes,
        )

    def recorder(self) -> RecorderConfig:
        return RecorderConfig(
            before_s=self.attribution_before_s,
            after_s=self.attribution_after_s,
            lemon_window_s=self.lemon_window_s,
            lemon_restarts=self.lemon_restarts,
        )

    def cap(self, gpu_nodes: int) -> int:
        return max(self.cap_min_nodes, math.floor(gpu_nodes * self.cap_share + 1e-9))

    def veto_threshold(self, gpu_nodes: int) -> int:
        share = math.ceil(gpu_nodes * self.veto_share - 1e-9)
        return max(2, min(self.veto_nodes, share))

    def window(self, cls: str, policy: HealthPolicy) -> float:
        seconds = self.bad_for_s.get(cls, self.bad_for_s.get("other"))
        return policy.window_s if seconds is None else seconds


@dataclass(frozen=True)
class NodeHealthSnapshot:
    """One pass's reading. ``nodes``: every node object as listed (by name);
    ``verdicts``: the health policy's verdict of each; ``evict``: what the eviction
    plans of the nodes it may evict are built from (each node read again, its pods, the
    budgets); ``ack_at``/``ack_by``: the last acknowledgement of the cap or veto."""

    nodes: Mapping[str, Obj]
    verdicts: Mapping[str, Verdict]
    evict: EvictInputs
    user: str
    policy: HealthPolicy = field(default_factory=HealthPolicy)
    ack_at: float | None = None
    ack_by: str | None = None
    telemetry_error: str | None = None
    read_at: Mapping[str, float] = field(default_factory=dict)  # input -> when read
    restarts: RestartInputs = field(default_factory=RestartInputs)  # the training gangs
    # the running gangs' statuses (``gangstatus``), by namespace/name
    stalls: Mapping[str, GangStatus] = field(default_factory=dict)
    ladder: LadderInputs | None = None  # what the repair ladder needs (None: not read)


def no_evict_inputs() -> EvictInputs:
    return EvictInputs(nodes=(), objs={}, fleet=0, pods={})


def _is_gpu_node(info: NodeInfo) -> bool:
    return not info.virtual and (info.gpu_capacity or 0) > 0


def _marked_by(obj: Obj) -> str | None:
    """Who holds the node out: its evicted-by, or the last other user who evicted it again
    since (an operator's evict of a node this controller quarantined makes it the
    operator's: it is not restored automatically); "" when only our taint says so, None
    when it carries no marks of ours."""
    if not evicted_by_us(obj):
        return None
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    first = str(annotations.get(EVICTED_BY) or "")
    return next((by for by in reversed(evicted_again_by(annotations)) if by != first), first)


def _annotation(obj: Obj, key: str) -> str | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    return None if value is None else str(value)


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _opted_out(info: NodeInfo) -> bool:
    return str(info.labels.get(OPT_OUT_LABEL, "")).lower() == "false"


def _bad_reasons(verdict: Verdict) -> list[Reason]:
    return [r for r in verdict.reasons if r.severity is Severity.BAD]


def _blind(verdict: Verdict) -> bool:
    return any(r.code in BLIND_CODES for r in verdict.reasons)


def _for(seconds: float) -> str:
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 120:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _waves(onsets: Mapping[str, float], window_s: float, threshold: int) -> list[list[str]]:
    """Groups of at least ``threshold`` nodes whose onsets lie within ``window_s`` of the
    group's first (the largest such group starting at each onset; overlapping groups
    merged)."""
    ordered = sorted(onsets.items(), key=lambda kv: (kv[1], kv[0]))
    merged: list[list[str]] = []
    for i, (_, start) in enumerate(ordered):
        group = [n for n, t in ordered[i:] if t - start <= window_s]
        if len(group) < threshold:
            continue
        if merged and set(group) & set(merged[-1]):
            merged[-1] = sorted(set(merged[-1]) | set(group))
        else:
            merged.append(sorted(group))
    return merged


def evictable(
    objs: Mapping[str, Obj],
    verdicts: Mapping[str, Verdict],
    user: str,
    swaps: Collection[str] = (),
) -> list[str]:
    """The GPU nodes whose eviction plans ``read`` prepares: BAD ones (and ``swaps``, the
    nodes a planned swap may evict) without marks, not opted out and not cordoned by
    someone else, and those ``user`` quarantined (an unfinished drain is driven on)."""
    out: list[str] = []
    for name, obj in sorted(objs.items()):
        info = node_info(obj)
        if not _is_gpu_node(info):
            continue
        marked = _marked_by(obj)
        verdict = verdicts.get(name)
        if marked == user or (
            marked is None
            and verdict is not None
            and (verdict.severity is Severity.BAD or name in swaps)
            and not _opted_out(info)
            and not info.unschedulable
        ):
            out.append(name)
    return out


def also_prepared(
    gangs: Sequence[Gang],
    verdicts: Mapping[str, Verdict],
    stalls: Mapping[str, GangStatus],
    config: NodeHealthConfig,
) -> list[str]:
    """Nodes, beyond the BAD ones, whose eviction plans ``read`` prepares: those a planned
    swap may evict now (a STRAGGLER's named node counting as a swap's), and the likely
    nodes of HUNG runs."""
    swaps = planned_swaps.swap_evictable(
        gangs,
        with_stragglers(verdicts, stalls) if config.straggler_swaps else verdicts,
        config.planned_swaps,
    )
    hung = [
        s.judgement.node
        for s in stalls.values()
        if config.hang_restarts and s.judgement.state == HUNG and s.judgement.node
    ]
    return sorted({*swaps, *(n for n in hung if n)})


class NodeHealth:
    """The node-health controller (module docstring)."""

    name = NAME

    @staticmethod
    def from_settings(settings: Settings) -> NodeHealth:
        return NodeHealth(NodeHealthConfig.from_settings(settings))

    def __init__(self, config: NodeHealthConfig | None = None) -> None:
        self.config = config or NodeHealthConfig()

    # -- read ---------------------------------------------------------------------

    def read(self, inputs: Inputs, now: float) -> NodeHealthSnapshot:
        """Lists the nodes (one paginated list), reads their verdicts through
        ``load_fleet`` (verdicts only), the acknowledgement on the state ConfigMap, the
        training gangs (the restart recorder's and planned swaps': one JobSet list, one
        pod list), and for the nodes it may evict (BAD, not opted out, not cordoned by
        someone else, or quarantined by this controller, and those a planned swap may
        evict now) what their eviction plans need."""
        cluster = inputs.cluster
        raw = cluster.list_all("list nodes", "/api/v1/nodes")
        objs = {str((o.get("metadata") or {}).get("name")): o for o in raw}
        infos = [node_info(o) for o in raw]
        fleet = load_fleet(
            cluster,
            inputs.source,
            inputs.policy,
            nodes=infos,
            source_error=inputs.source_error,
            families=("verdicts",),
        )
        verdicts = {v.info.name: v.verdict for v in fleet.views}
        error = judged_error(fleet)
        if error is not None and fleet.telemetry_error is None:
            # a read with queries that failed lacks those readings on every node (the
            # GPU temperatures, say): a node without them would pass for OK. Judged as
            # with no telemetry: every GPU node UNKNOWN, NotReady still from the API
            views = fleet_views(infos, None, inputs.policy, telemetry_error=error, now=now)
            verdicts = {v.info.name: v.verdict for v in views}
        ack_at, ack_by = self._read_ack(inputs)
        restarts = read_restart_inputs(cluster, now)
        stalls = self._read_stalls(inputs, restarts, infos, now)
        actable = evictable(
            objs,
            verdicts,
            inputs.user,
            also_prepared(restarts.gangs, verdicts, stalls, self.config),
        )
        try:
            evict = read_evict(cluster, actable) if actable else no_evict_inputs()
        except BadInput as exc:  # a node deleted since the list: the next pass sees it gone
            raise Unavailable(f"{NAME}: nodes changed while read ({exc})") from exc
        ladder = self._read_ladder(inputs, objs, infos, now) if self.config.validate else None
        return NodeHealthSnapshot(
            nodes=objs,
            verdicts=verdicts,
            evict=evict,
            restarts=restarts,
            stalls=stalls,
            ladder=ladder,
            user=inputs.user,
            policy=inputs.policy,
            ack_at=ack_at,
            ack_by=ack_by,
            telemetry_error=error,
            read_at={
                "nodes": now,
                **({"telemetry": fleet.collected_at} if error is None else {}),
            },
        )

    def _read_stalls(
        self, inputs: Inputs, restarts: RestartInputs, infos: list[NodeInfo], now: float
    ) -> dict[str, GangStatus]:
        """The running gangs' statuses: rank 0's log of each (the tail the recorder read,
        long enough for a baseline) and one telemetry read of their nodes alone."""
        running = [g for g in restarts.gangs if g.running and not g.terminal]
        if not running:
            return {}
        return read_statuses(
            inputs.cluster,
            inputs.source,
            inputs.policy,
            running,
            now,
            self.config.stalls,
            infos,
            source_error=inputs.source_error,
            with_head=False,
            tails=restarts.rank0_tails(),
        )

    def _read_ladder(
        self, inputs: Inputs, objs: Mapping[str, Obj], infos: Sequence[NodeInfo], now: float
    ) -> LadderInputs:
        """The validation Jobs (one list); the newest finished Job of each node whose
        result is not on the node yet, judged from its pod's log; the pods of the nodes
        the ladder may validate (ours, and those pending validation, with no Job running);
        whether the PriorityClass exists."""
        cluster, spec = inputs.cluster, self.config.validation
        jobs = list_validation_jobs(cluster, spec.namespace)
        newest: dict[str, Obj] = {}
        for job in sorted(
            jobs, key=lambda j: str((j.get("metadata") or {}).get("creationTimestamp"))
        ):
            node = job_node(job)
            if node is not None and node in objs:
                newest[node] = job
        wanted: dict[str, str] = {}
        for node, job in newest.items():
            if job_finished(job) is None:
                continue
            recorded = Validation.from_annotation(node, _annotation(objs[node], RESULT_ANNOTATION))
            if recorded is None or recorded.job != job_key(job):
                wanted[node] = job_key(job)
        results = (
            read_finished(cluster, spec, wanted, now, jobs_read=jobs, nodes_read=infos).done
            if wanted
            else {}
        )
        running = running_validations(jobs)
        candidates = [
            n
            for n, o in objs.items()
            if n not in running
            and (_marked_by(o) == inputs.user or (self.config.validate_new_nodes and pending(o)))
        ]
        pods = {
            n: cluster.list_all(
                f"pods on node {n}", "/api/v1/pods", fieldSelector=f"spec.nodeName={n}"
            )
            for n in candidates
        }
        return LadderInputs(spec, tuple(jobs), results, pods, priority_class_exists(cluster))

    @staticmethod
    def _read_ack(inputs: Inputs) -> tuple[float | None, str | None]:
        path = f"/api/v1/namespaces/{quote(inputs.namespace)}/configmaps/{quote(STATE_CONFIGMAP)}"
        what = f"get configmap {inputs.namespace}/{STATE_CONFIGMAP}"
        answer = inputs.cluster.request(what, "GET", path)
        if answer.status == 404:
            return None, None
        if not answer.ok or answer.body is None:
            raise inputs.cluster.refusal(what, answer)
        notes = (answer.body.get("metadata") or {}).get("annotations") or {}
        return parse_time(notes.get(ACK_AT)), notes.get(ACK_BY)

    # -- decide -------------------------------------------------------------------

    def decide(
        self, snapshot: NodeHealthSnapshot, now: float, state: Mapping[str, Any]
    ) -> Decision:
        return _Pass(self.config, snapshot, now, state).run()


class _Pass:
    """One ``decide``: pure, over the snapshot, the time and the state it is given."""

    def __init__(
        self,
        config: NodeHealthConfig,
        snap: NodeHealthSnapshot,
        now: float,
        state: Mapping[str, Any],
    ) -> None:
        self.cfg, self.snap, self.now = config, snap, now
        self.prev = NodeHealthState.from_json(state)
        self.plans: list[Plan] = []
        self.skipped: list[Skip] = []
        self.alerts: list[Alert] = []
        self.infos = {
            name: info
            for name, obj in sorted(snap.nodes.items())
            if _is_gpu_node(info := node_info(obj))
        }
        self.verdicts = {n: snap.verdicts.get(n, Verdict(Severity.UNKNOWN)) for n in self.infos}
        # what planned swaps judge by: the verdicts, and the nodes STRAGGLER runs name
        self.swap_verdicts = (
            with_stragglers(self.verdicts, snap.stalls) if config.straggler_swaps else self.verdicts
        )

    def run(self) -> Decision:
        snap, user = self.snap, self.snap.user
        marks = {n: _marked_by(snap.nodes[n]) for n in self.infos}
        marked = {n for n, by in marks.items() if by is not None}
        ours = {n for n, by in marks.items() if by == user}

        restored = self._manual_restores(marked)
        remediations = self._remediations(marked)
        onsets = self._onsets()
        healthy = self._healthy(ours)

        if self.cfg.validate and snap.ladder is not None:
            ladder = climb(
                self.cfg.ladder(),
                snap.ladder,
                {n: snap.nodes[n] for n in self.infos},
                self.verdicts,
                ours,
                {n for n, i in self.infos.items() if _opted_out(i)},
                user=user,
                now=self.now,
                prev=dict(self.prev.validation),
            )
            self.plans.extend(ladder.plans)
            self.skipped.extend(ladder.skipped)
            self.alerts.extend(ladder.alerts)
            restoring = ladder.restoring
        else:
            ladder = None
            restoring = self._restores(ours, healthy)
        lemons = self._lemons(remediations)
        quarantined, vetoed = self._evictions(marks, ours, onsets, restored)
        self._redrain(ours)
        hangs, quarantined = self._hangs(marks, quarantined, restored)
        swaps = self._swaps(marks, quarantined, restored)
        quarantined = swaps.counted

        if snap.telemetry_error:
            self.alerts.append(
                Alert(
                    "stale-input",
                    f"{NAME} cannot see the GPUs ({snap.telemetry_error}): every GPU node is "
                    "UNKNOWN, so none is evicted or restored on its telemetry until it "
                    "answers (NotReady is still judged from the API)",
                )
            )
        new = {n for p in self.plans if p.action == "nodes evict" and p.steps for n in p.nodes}
        recorder, recorded = record(
            snap.restarts,
            None if snap.telemetry_error else self.verdicts,
            [
                (n, p.reason or "")
                for p in self.plans
                if p.action == "nodes evict"
                for n in p.nodes
                if n in new and n not in ours
            ],
            self.now,
            dict(self.prev.recorder),
            self.cfg.recorder(),
            hung={k: h.to_json() for k, h in hangs.items() if h.state == HUNG},
            progressing={k for k, h in hangs.items() if h.state in PROGRESSING},
        )
        lemons = self._restart_lemons(recorder, lemons)
        # every node as listed (a node gone from the list is written deleted)
        ledger = observe(
            self.prev.ledger,
            snap.nodes,
            self.now,
            user=user,
            restoring=restoring,
            escalated=ladder.escalated if ladder is not None else (),
        )
        stamp = float(math.floor(self.now))  # the evicted-at its plans write (whole seconds)
        gpu_nodes = len(self.infos)
        cap = self.cfg.cap(gpu_nodes)
        gauges = {
            "quarantined": float(len((ours - restoring) | new)),
            "quarantined_unacked": float(quarantined),
            "cap": float(cap),
            "cap_reached": 1.0 if quarantined >= cap else 0.0,
            "veto_active": 1.0 if vetoed else 0.0,
            "bad_nodes": float(
                sum(1 for v in self.verdicts.values() if v.severity is Severity.BAD)
            ),
            "unknown_nodes": float(
                sum(1 for v in self.verdicts.values() if v.severity is Severity.UNKNOWN)
            ),
            "lemons": float(
                sum(1 for i in self.infos.values() if i.labels.get(LEMON_LABEL) == "true")
            ),
            **recorded,
            **swaps.gauges,
            **(ladder.gauges if ladder is not None else {}),
            **repair_stats(ledger, self.now).gauges(),
            **{
                f"runs_{state.lower()}": float(
                    sum(1 for st in snap.stalls.values() if st.judgement.state == state)
                )
                for state in (HUNG, STRAGGLER, SLOW, STALLED)
            },
        }
        new_state = NodeHealthState(
            onsets=onsets,
            healthy=healthy,
            remediations={n: tuple(ts) for n, ts in remediations.items()},
            lemons=lemons,
            restored=restored,
            marked=tuple(sorted(marked)),
            restoring=tuple(sorted(restoring)),
            recorder=recorder,
            # what `krea-ops controller status` shows
            cap=CapState(
                quarantined_unacked=quarantined,
                # out by an operator's evict (the cap does not count them)
                operators=len(marked - ours),
                limit=cap,
                reached=quarantined >= cap,
                acked_at=rfc3339(snap.ack_at) if snap.ack_at is not None else None,
            ),
            veto=VetoState(bool(vetoed), {k: tuple(v) for k, v in sorted(vetoed.items())}),
            evicting={
                n: Evicting(_version(self.snap.evict.objs.get(n) or self.snap.nodes[n]), stamp)
                for n in sorted(new - ours)
            },
            swaps=swaps.state,
            stalls=hangs,
            validation=ladder.state if ladder is not None else {},
            ledger=ledger,
        )
        return Decision(
            controller=NAME,
            plans=tuple(p for p in self.plans if p.steps),
            skipped=tuple(self.skipped),
            alerts=tuple(self.alerts),
            gauges=gauges,
            state=new_state.to_json(),
        )

    # -- what the state remembers ---------------------------------------------------

    def _manual_restores(self, marked: set[str]) -> dict[str, float]:
        """Node -> when a restore not ours was seen, while its cool-down lasts."""
        restored = {
            n: t
            for n, t in self.prev.restored.items()
            if n in self.infos and self.now - t < self.cfg.cooldown_s
        }
        before = set(self.prev.marked)
        ours = set(self.prev.restoring)
        # evicted last pass, never seen marked: restored since, unless the eviction
        # never happened (the node is still the object the plan was made from)
        for name in self._evicted_since():
            before.add(name)
        for name in sorted((before & set(self.infos)) - marked - ours):
            restored[name] = self.now
        for name in marked:
            restored.pop(name, None)  # evicted again (by hand): its cool-down is over
        return restored

    def _evicted_since(self) -> dict[str, float]:
        """Nodes the last pass evicted that have been written since (the eviction ran):
        node -> the evicted-at it wrote. One still at the resourceVersion that pass read
        was never evicted (its plan failed)."""
        out: dict[str, float] = {}
        for name, entry in self.prev.evicting.items():
            if name in self.infos and _version(self.snap.nodes[name]) != entry.version:
                out[name] = entry.at
        return out

    def _remediations(self, marked: set[str]) -> dict[str, list[float]]:
        """Node -> the eviction times seen (its evicted-at, or the time the last pass
        evicted it at), within the lemon window."""
        horizon = self.now - self.cfg.lemon_window_s
        out: dict[str, list[float]] = {}
        for name, times in self.prev.remediations.items():
            kept = sorted({t for t in times if t > horizon})
            if kept and name in self.infos:
                out[name] = kept
        seen_at = dict(self._evicted_since())
        for name in sorted(marked):
            at = parse_time(_annotation(self.snap.nodes[name], EVICTED_AT))
            if at is not None:
                seen_at[name] = at
        for name, at in sorted(seen_at.items()):
            if at <= horizon:
                continue
            seen = out.setdefault(name, [])
            if at not in seen:
                seen.append(at)
                seen.sort()
        return out

    def _onsets(self) -> dict[str, dict[str, float]]:
        """Node -> finding class -> when it was first seen BAD. A node we cannot see
        keeps what it had; a node seen without the finding loses it."""
        prev = self.prev.onsets
        out: dict[str, dict[str, float]] = {}
        for name, info in self.infos.items():
            verdict = self.verdicts[name]
            had = dict(prev.get(name) or {})
            now_bad: dict[str, float] = {}
            for reason in _bad_reasons(verdict):
                cls = finding_class(reason.code)
                if cls in now_bad:
                    continue
                start = had.get(cls, self.now)
                if cls == "not-ready" and info.ready_since is not None:
                    start = min(info.ready_since, self.now)  # the API says since when
                now_bad[cls] = start
            if _blind(verdict):
                now_bad = {**had, **now_bad}
            if now_bad:
                out[name] = now_bad
        return out

    def _healthy(self, ours: set[str]) -> dict[str, float]:
        """Node we quarantined -> since when it is OK."""
        prev = self.prev.healthy
        return {
            n: prev.get(n, self.now)
            for n in sorted(ours)
            if self.verdicts[n].severity is Severity.OK
        }

    # -- actions --------------------------------------------------------------------

    def _restores(self, ours: set[str], healthy: Mapping[str, float]) -> set[str]:
        after = self.cfg.restore_after_s
        restoring: set[str] = set()
        if after is None:
            return restoring
        for name in sorted(ours):
            since = healthy.get(name)
            if since is None or self.now - since < after:
                continue
            if _opted_out(self.infos[name]):
                self.skipped.append(
                    Skip(name, "opt-out", f"healthy for {_for(self.now - since)}: not restored")
                )
                continue
            plan = build_restore(
                {name: self.snap.nodes[name]},
                [name],
                user=self.snap.user,
                reason=f"{NAME}: healthy (OK) for {_for(self.now - since)}",
                require_validation=False,  # restoring without validation is configured
            )
            self.plans.append(plan)
            restoring.add(name)
        return restoring

    def _lemons(self, remediations: Mapping[str, list[float]]) -> dict[str, LemonMark]:
        """Label the nodes remediated too often; remember each labelled lemon (``at``:
        its newest eviction then; ``seen``: the label was seen on it since)."""
        out: dict[str, LemonMark] = {}
        prev = self.prev.lemons
        total = sum(len(ts or ()) for ts in remediations.values())
        fleet = len(self.infos)
        for name, info in self.infos.items():
            times = remediations.get(name) or []
            labelled = info.labels.get(LEMON_LABEL) == "true"
            had = prev.get(name)
            if had is not None and not labelled and had.seen:
                # an operator cleared it: the evictions up to then are forgiven
                cutoff = had.at
                times[:] = [t for t in times if t > cutoff]
                had = None
            if labelled:
                at = had.at if had else (times[-1] if times else self.now)
                out[name] = LemonMark(at, True)
                continue
            # as for restarts (attribution.lemon_candidates): where the fleet's nodes are
            # evicted often, two evictions of one node in the window can be chance
            mean = (total - len(times)) / (fleet - 1) if fleet > 1 else 0.0
            need = max(
                self.cfg.lemon_remediations, chance_threshold(mean, fleet, self.cfg.lemon_chance)
            )
            if len(times) < need:
                continue
            window = (
                _for(self.cfg.lemon_window_s)
                if self.cfg.lemon_window_s < 2 * 86400
                else (f"{self.cfg.lemon_window_s / 86400:g} days")
            )
            why = f"remediated {len(times)} times within {window}"
            if _opted_out(info):
                self.skipped.append(Skip(name, "opt-out", f"{why}: not labelled a lemon"))
                continue
            self.plans.append(self._lemon_plan(name, why))
            out[name] = LemonMark(times[-1], False)
        return out

    def _restart_lemons(
        self, recorder: Mapping[str, Any], lemons: dict[str, LemonMark]
    ) -> dict[str, LemonMark]:
        """Label the nodes attributed ``lemon_restarts`` training restarts within the
        lemon window (``attribution.lemon_candidates``), as many as the blast cap allows
        beside the lemons labelled since the last acknowledgement (a lying exporter could
        otherwise keep the whole fleet out of training)."""
        candidates = lemon_candidates(
            attributed_restarts(recorder),
            self.now,
            window_s=self.cfg.lemon_window_s,
            threshold=self.cfg.lemon_restarts,
            fleet_nodes=len(self.infos),
            same_fault_s=self.cfg.lemon_same_fault_s,
            chance=self.cfg.lemon_chance,
        )
        ack = self.snap.ack_at
        cap = self.cfg.cap(len(self.infos))
        counted = sum(1 for entry in lemons.values() if ack is None or entry.at > ack)
        window = (
            _for(self.cfg.lemon_window_s)
            if self.cfg.lemon_window_s < 2 * 86400
            else f"{self.cfg.lemon_window_s / 86400:g} days"
        )
        runs = {(a.node, a.at): f"{a.run} #{a.number} ({a.cause})" for a in attributed_of(recorder)}
        for name, times in candidates.items():
            info = self.infos.get(name)
            if info is None or name in lemons or info.labels.get(LEMON_LABEL) == "true":
                continue
            which = ", ".join(runs.get((name, t), "?") for t in times)
            why = f"{len(times)} training restarts attributed to it within {window}: {which}"
            # (restarts within an hour of each other are one fault; on a fleet restarting
            # often, it takes more than lemon_restarts: attribution.lemon_candidates)
            if _opted_out(info):
                self.skipped.append(Skip(name, "opt-out", f"{why}: not labelled a lemon"))
                continue
            if counted >= cap:
                self.skipped.append(
                    Skip(name, "cap", f"blast cap of {cap} reached: not labelled a lemon: {why}")
                )
                continue
            self.plans.append(self._lemon_plan(name, why))
            lemons[name] = LemonMark(times[-1], False)
            counted += 1
        return lemons

    def _lemon_plan(self, name: str, why: str) -> Plan:
        obj = self.snap.nodes[name]
        step = update_step(
            name, obj, (SetLabels({LEMON_LABEL: "true"}),), "keep a repeat offender out of training"
        )
        note = f"labelled {LEMON_LABEL}=true by {self.snap.user}: {why}"
        steps = (step, node_event(name, obj, "Label", "Lemon", note)) if step else ()
        return Plan(
            action="nodes label-lemon",
            nodes=(name,),
            reason=why,
            user=self.snap.user,
            steps=steps,
        )

    def _evictions(
        self,
        marks: Mapping[str, str | None],
        ours: set[str],
        onsets: Mapping[str, Mapping[str, float]],
        restored: Mapping[str, float],
    ) -> tuple[int, dict[str, list[str]]]:
        """Plan the evictions; return (nodes counted by the cap after them, the vetoed
        finding classes and their nodes)."""
        snap, now, cfg = self.snap, self.now, self.cfg
        gpu_nodes = len(self.infos)
        ack = snap.ack_at
        counted = 0
        for name in ours:
            at = parse_time(_annotation(snap.nodes[name], EVICTED_AT))
            if ack is None or at is None or at > ack:
                counted += 1

        # the veto: per class, waves of onsets among the nodes showing it now
        threshold = cfg.veto_threshold(gpu_nodes)
        showing: dict[str, dict[str, float]] = {}
        for name, verdict in self.verdicts.items():
            for reason in _bad_reasons(verdict):
                cls = finding_class(reason.code)
                showing.setdefault(cls, {})[name] = onsets[name][cls]
        vetoed: dict[str, list[str]] = {}
        for cls, nodes in sorted(showing.items()):
            for wave in _waves(nodes, cfg.veto_window_s, threshold):
                latest = max(nodes[n] for n in wave)
                if ack is not None and latest <= ack:
                    continue  # acknowledged: judged one by one again
                vetoed.setdefault(cls, [])
                vetoed[cls] = sorted(set(vetoed[cls]) | set(wave))
        for cls, held_nodes in vetoed.items():
            self.alerts.append(
                Alert(
                    "veto",
                    f"{len(held_nodes)} nodes showed the same {cls} finding within "
                    f"{_for(cfg.veto_window_s)} (threshold {threshold} of {gpu_nodes} GPU "
                    "nodes): an exporter, rack or fabric problem, not bad nodes; nothing is "
                    "evicted for it until it clears or krea-ops controller ack",
                    tuple(held_nodes),
                )
            )

        # candidates: BAD past their window, oldest finding first
        ripe: list[tuple[float, str, list[Reason]]] = []
        deferred = self._to_swap()
        for name, verdict in self.verdicts.items():
            if marks[name] is not None:
                continue
            if name in deferred:
                self.skipped.append(
                    Skip(
                        name,
                        "planned-swap",
                        f"{deferred[name]} still makes progress: a planned swap takes the "
                        f"node after a checkpoint: {verdict.reasons[0].message}",
                    )
                )
                continue
            reasons: list[Reason] = []
            first: float | None = None
            held: list[str] = []
            for reason in _bad_reasons(verdict):
                cls = finding_class(reason.code)
                start = onsets[name][cls]
                if now - start < cfg.window(cls, snap.policy):
                    continue
                if cls in vetoed:
                    held.append(cls)
                    continue
                reasons.append(reason)
                first = start if first is None else min(first, start)
            if held and not reasons:
                self.skipped.append(
                    Skip(
                        name,
                        "veto",
                        f"{', '.join(held)} finding vetoed as systemic: "
                        f"{verdict.reasons[0].message}",
                    )
                )
            if reasons and first is not None:
                ripe.append((first, name, reasons))
        ripe.sort()

        cap = cfg.cap(gpu_nodes)
        capped: list[str] = []
        for _, name, reasons in ripe:
            text = "; ".join(r.message for r in reasons)
            why_not = self._held(name, counted, restored)
            if why_not is not None:
                if why_not[0] == "cap":
                    capped.append(name)
                self.skipped.append(Skip(name, why_not[0], f"{why_not[1]}: {text}"))
                continue
            if name not in snap.evict.objs:
                self.skipped.append(Skip(name, "unread", f"its pods were not read: {text}"))
                continue
            plan = self._evict(name, text)
            if plan.refused:
                self.skipped.append(Skip(name, "refused", plan.refused))
                continue
            self.plans.append(plan)
            counted += 1
        if capped:
            since = f" since {snap.ack_by}'s acknowledgement" if ack is not None else ""
            self.alerts.append(
                Alert(
                    "cap",
                    f"blast cap reached: {counted} of {cap} GPU nodes quarantined by "
                    f"{NAME}{since}; {len(capped)} more BAD nodes held back until an operator "
                    "acknowledges (krea-ops controller ack)",
                    tuple(capped),
                )
            )
        return counted, vetoed

    def _to_swap(self) -> dict[str, str]:
        """BAD nodes a planned swap takes instead of an eviction now (node -> its gang):
        every BAD finding of theirs one a swap is made for at once (clocks held down), on
        a running gang that is not HUNG, while planned swaps are on and that swap was not
        given up."""
        cfg, snap = self.cfg, self.snap
        if not cfg.planned_swaps:
            return {}
        # the findings given up on, in every gang (``swaps`` holds ``gangs`` and ``onsets``)
        tried = PlannedSwapsState.from_json(self.prev.swaps).tried()
        out: dict[str, str] = {}
        for gang in snap.restarts.gangs:
            status = snap.stalls.get(gang.key)
            if not gang.running or (status is not None and status.judgement.state == HUNG):
                continue
            for node in gang.nodes:
                verdict = self.verdicts.get(node)
                bad = _bad_reasons(verdict) if verdict is not None else []
                if (
                    bad
                    and all(r.code in SWAP_NOW_CODES for r in bad)
                    and not any(finding_key(node, r) in tried for r in bad)
                ):
                    out[node] = gang.key
        return out

    def _hangs(
        self, marks: Mapping[str, str | None], counted: int, restored: Mapping[str, float]
    ) -> tuple[dict[str, GangWatch], int]:
        """The running gangs' states, remembered (``namespace/name`` -> ``state``,
        ``since``, ``uid``, ``attempt``, ``node``, ``gpu``, ``reasons``, ``acted``), and the
        restart of a gang HUNG for ``stalls.hang_restart_after_s``: its likely node evicted
        (under the cap, as any eviction) where one is named and may be, else rank 0's pod
        evicted so that the JobSet's failure policy restarts the gang. Once per attempt.
        Returns the state and the nodes counted by the cap after it."""
        cfg, snap, now = self.cfg, self.snap, self.now
        prev = self.prev.stalls
        out: dict[str, GangWatch] = {}
        gangs = {g.key: g for g in snap.restarts.gangs}
        evicting = {n for p in self.plans if p.action == "nodes evict" for n in p.nodes}
        for key, status in sorted(snap.stalls.items()):
            gang = gangs.get(key)
            j = status.judgement
            if gang is None:
                continue
            old = prev.get(key)
            same = old is not None and old.uid == gang.uid and old.attempt == gang.restarts
            kept = old.since if old is not None and same and old.state == j.state else None
            since = kept if kept is not None else now
            acted = old.acted if old is not None and same else False
            out[key] = GangWatch(
                state=j.state,
                since=since,
                uid=gang.uid,
                attempt=gang.restarts,
                node=j.node,
                gpu=j.gpu,
                reasons=tuple(j.reasons),
                last_step_at=status.progress.last_step_at,
                acted=acted,
            )
            if j.state != HUNG or acted or not cfg.hang_restarts:
                continue
            if now - since < cfg.stalls.hang_restart_after_s:
                continue
            why = f"{key} HUNG: " + "; ".join(j.reasons)
            node = j.node
            if node is not None and (marks.get(node) is not None or node in evicting):
                # already going: its eviction restarts the gang
                out[key] = replace(out[key], acted=True)
                continue
            if node is not None and node in self.infos:
                held = self._held(node, counted, restored)
                if held is None and node in snap.evict.objs:
                    plan = self._evict(node, why)
                    if not plan.refused:
                        self.plans.append(plan)
                        counted += 1
                        out[key] = replace(out[key], acted=True)
                        continue
                    held = ("refused", plan.refused)
                if held is not None:
                    self.skipped.append(Skip(node, held[0], f"{held[1]}: {why}"))
            rank0 = gang.rank0()
            if rank0 is None:
                continue
            restart = build_gang_restart(
                gang.namespace,
                gang.name,
                uid=gang.uid,
                spec=gang.spec,
                pod=rank0,
                reason=why,
                user=snap.user,
                timeout_s=cfg.drain_timeout_s,
            )
            if restart.refused:
                self.skipped.append(Skip(key, "refused", restart.refused))
                continue
            self.plans.append(restart)
            out[key] = replace(out[key], acted=True)
        return out, counted

    def _evict(self, node: str, reason: str) -> Plan:
        """The runbook's eviction plan of ``node`` (read by this pass), by this controller."""
        return build_evict(
            self.snap.evict.only([node]),
            reason=reason,
            user=self.snap.user,
            now=self.now,
            timeout_s=self.cfg.drain_timeout_s,
        )

    def _held(
        self, node: str, counted: int, restored: Mapping[str, float]
    ) -> tuple[str, str] | None:
        """Why an eviction of ``node`` may not be planned now (the skip's ``why`` and
        words), or None: opted out, in its cool-down after a manual restore, cordoned by
        someone else, or the blast cap reached with ``counted`` nodes."""
        info = self.infos[node]
        if _opted_out(info):
            return "opt-out", f"{OPT_OUT_LABEL}=false"
        if node in restored:
            left = self.cfg.cooldown_s - (self.now - restored[node])
            return "cooldown", f"restored by hand; not evicted again for another {_for(left)}"
        if info.unschedulable:
            return "cordoned", "cordoned by someone else, left to them"
        cap = self.cfg.cap(len(self.infos))
        if counted >= cap:
            return "cap", f"blast cap of {cap} quarantined nodes reached"
        return None

    def _swaps(
        self, marks: Mapping[str, str | None], counted: int, restored: Mapping[str, float]
    ) -> planned_swaps.SwapOutcome:
        """Planned swaps (``controllers.planned_swaps``), after the evictions of BAD nodes,
        under the same cap."""
        cfg, snap = self.cfg, self.snap
        if not cfg.planned_swaps:
            return planned_swaps.SwapOutcome(counted=counted)
        outcome = planned_swaps.decide_swaps(
            gangs=snap.restarts.gangs,
            verdicts=self.swap_verdicts,
            evict=snap.evict,
            user=snap.user,
            now=self.now,
            state=dict(self.prev.swaps),
            cfg=SwapConfig(timeout_s=cfg.swap_timeout_s, after_s=cfg.swap_after_s),
            cap=cfg.cap(len(self.infos)),
            counted=counted,
            veto_threshold=cfg.veto_threshold(len(self.infos)),
            veto_window_s=cfg.veto_window_s,
            marked={n for n, by in marks.items() if by is not None},
            opted_out={n for n, i in self.infos.items() if _opted_out(i)},
            cordoned={n for n, i in self.infos.items() if i.unschedulable and marks[n] is None},
            restored=restored,
            cooldown_s=cfg.cooldown_s,
            evicting={n for p in self.plans if p.action == "nodes evict" for n in p.nodes},
            drain_timeout_s=cfg.drain_timeout_s,
        )
        self.plans.extend(outcome.plans)
        self.skipped.extend(outcome.skipped)
        return outcome

    def _redrain(self, ours: set[str]) -> None:
        """Nodes we quarantined whose pods were not all moved: drain them again."""
        restoring = {n for p in self.plans if p.action == "nodes restore" for n in p.nodes}
        for name in sorted(ours - restoring):
            if name not in self.snap.evict.objs or not self.snap.evict.pods.get(name):
                continue
            reason = _annotation(self.snap.evict.objs[name], EVICTED_REASON) or NAME
            plan = self._evict(name, reason)
            if not plan.refused:
                self.plans.append(plan)
