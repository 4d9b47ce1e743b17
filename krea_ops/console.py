"""The console's application seam: every read the CLI and the dashboard make goes through
one ``Console``, so both show the same thing from the same code.

One method per kind of snapshot: ``fleet`` (scoped by node, label selector and telemetry
families), ``node`` (one node read whole, with its pods), ``queues``/``workloads``/``queue``,
``why``, ``burst``, ``training``. Each returns the core's frozen snapshots or raises a
``KreaError`` with the one line to show. The runbook and the controllers add their
``plan_*`` methods and ``execute(plan)`` here (issues 15 and 16): the dashboard's dialog
and the CLI's ``--dry-run`` then show the same plan object.

A console is cheap to make and holds its connections: a one-shot command makes one and
closes it (``with Console(settings) as console``); the dashboard keeps one, with a short
GPU history for the node screen's sparklines (``history_points``). Reads may run on
several threads at once; the telemetry source is opened once, and again after it could
not be opened (the Prometheus address may appear in the cluster's ConfigMap later, as in
the demo). Nothing here knows about Typer, Textual or the simulator.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from krea_ops.errors import KreaError, Unavailable
from krea_ops.fleet import FleetSnapshot, TelemetryAhead, collect_ahead, load_fleet
from krea_ops.health import HealthPolicy, severities
from krea_ops.history import FleetHistory, GpuHistory
from krea_ops.model import NodeInfo, NodeView, PodInfo, Severity, Verdict
from krea_ops.settings import Settings

if TYPE_CHECKING:
    from krea_ops.burst.status import BurstStatus
    from krea_ops.controllers.ledger import NodeHistory
    from krea_ops.controllers.restarts import LemonRow, RunRestarts
    from krea_ops.gangstatus import GangStatus
    from krea_ops.kube.cluster import Cluster
    from krea_ops.queue import QueueSnapshot, WhyReport, WorkloadInfo
    from krea_ops.runbook.execute import RunResult
    from krea_ops.runbook.plan import Plan
    from krea_ops.telemetry.source import TelemetrySource
    from krea_ops.training.gangs import Gang
    from krea_ops.training.manifests import TrainingSpec
    from krea_ops.training.runs import TrainingRun
    from krea_ops.validation import Validation, ValidationSpec


@dataclass(frozen=True)
class FleetScope:
    """Which part of the fleet a read covers. ``families``: the telemetry groups to read
    (``telemetry.dialects.GROUPS``, and ``VERDICTS``: what the health rules need); None
    reads every family (``fabric``, ``nodes show``)."""

    node: str | None = None
    selector: str | None = None
    families: frozenset[str] | None = None

    @staticmethod
    def of(
        *,
        node: str | None = None,
        selector: str | None = None,
        families: Collection[str] | None = None,
    ) -> FleetScope:
        return FleetScope(node, selector, None if families is None else frozenset(families))

    @property
    def whole(self) -> bool:
        """Every node (no node, no selector)."""
        return self.node is None and self.selector is None

    def covers(self, families: Collection[str] | None) -> bool:
        """A read of this scope's families holds what a read of ``families`` would."""
        if self.families is None:
            return True
        return families is not None and set(families) <= self.families


EVERYTHING = FleetScope()
VERDICTS_ONLY = FleetScope.of(families=("verdicts",))


@dataclass(frozen=True)
class ConsoleInfo:
    cluster: str  # the API server's URL
    context: str | None
    telemetry: str  # "prometheus http://..." / "scrape of 64 exporters" / "none: why"


@dataclass(frozen=True)
class NodeDetail:
    """One node read whole (every telemetry family) and the pods bound to it."""

    snapshot: FleetSnapshot
    view: NodeView
    pods: tuple[PodInfo, ...]


@dataclass(frozen=True)
class QueueReading:
    """Kueue's queues and every workload, read together (the dashboard's queue screen)."""

    queues: QueueSnapshot
    workloads: tuple[WorkloadInfo, ...]


@dataclass(frozen=True)
class HealthReading:
    """Node name -> severity for the queue's drift and ``why``; None (with the reason in
    ``error``) when telemetry could not be read: nodes are then judged by Ready, cordon and
    taints only."""

    severity: Mapping[str, Severity] | None
    error: str | None = None
    verdicts: Mapping[str, Verdict] | None = None  # with the reasons, when read


class ConsoleReads(Protocol):
    """The reads both UI layers make: a ``Console``, or a recorded stand-in in the
    dashboard's tests."""

    def info(self) -> ConsoleInfo: ...

    def fleet(self, scope: FleetScope = EVERYTHING) -> FleetSnapshot: ...

    def node(self, name: str) -> NodeDetail: ...

    def queue(self) -> QueueReading: ...

    def why(self, name: str, namespace: str | None = None) -> WhyReport: ...

    def burst(self) -> BurstStatus: ...

    def training(self) -> tuple[TrainingRun, ...]: ...

    def history(self, node: str) -> GpuHistory | None: ...

    def close(self) -> None: ...


@runtime_checkable
class ConsoleActions(Protocol):
    """The runbook's writes both UI layers make: plans first, then the one executor. A
    ``Console`` has them; a recorded stand-in of the reads does not, and the dashboard
    then offers no actions."""

    def plan_evict(
        self,
        nodes: Collection[str],
        *,
        reason: str,
        timeout_s: float = 300.0,
        grace_period_s: int | None = None,
        force: bool = False,
    ) -> Plan: ...

    def plan_restore(
        self, nodes: Collection[str], *, force: bool = False, reason: str | None = None
    ) -> Plan: ...

    def plan_launch_again(
        self, name: str, *, namespace: str, new_name: str
    ) -> tuple[Plan, dict[str, object]]: ...

    def plan_resume(
        self, name: str, *, namespace: str, checkpoint: str = "latest"
    ) -> tuple[Plan, dict[str, object]]: ...

    def plan_burst_pause(self, *, reason: str) -> Plan: ...

    def plan_burst_unpause(self) -> Plan: ...

    def plan_burst_migrate(
        self,
        *,
        direction: str,
        max_pods: int | None = None,
        selector: str | None = None,
        timeout_s: float = 600.0,
    ) -> Plan: ...

    def validation_spec(self) -> ValidationSpec: ...

    def plan_validate(
        self, nodes: Collection[str], *, level: str, reason: str | None = None
    ) -> Plan: ...

    def validation_wait(
        self,
        jobs: Mapping[str, str],
        *,
        timeout_s: float,
        poll_s: float = 2.0,
        progress: Callable[[str], None] | None = None,
    ) -> tuple[dict[str, Validation], dict[str, str]]: ...

    def execute(self, plan: Plan) -> RunResult: ...


class Console:
    """The reads (and, with the runbook, the writes) of one operator's session."""

    def __init__(
        self,
        settings: Settings,
        *,
        cluster: Cluster | None = None,
        source: TelemetrySource | None = None,
        history_points: int = 0,
    ) -> None:
        self.settings = settings
        self.policy = HealthPolicy.from_settings(settings)
        self._cluster = cluster
        self._cluster_lock = threading.Lock()
        self._source = source
        self._source_error: str | None = None
        self._source_lock = threading.Lock()
        self._history = FleetHistory(history_points) if history_points > 0 else None
        self.last_fleet: FleetSnapshot | None = None  # the last whole-fleet read

    # -- connections ------------------------------------------------------------------

    @property
    def cluster(self) -> Cluster:
        """The API client of the configured kubeconfig/context, made on first use
        (importing the Kubernetes client costs ~0.2 s that a telemetry read need not
        wait for)."""
        with self._cluster_lock:
            if self._cluster is None:
                from krea_ops.kube.cluster import connect

                self._cluster = connect(self.settings.kubeconfig, self.settings.context)
            return self._cluster

    def _telemetry(self, *, early: bool = False) -> tuple[TelemetrySource | None, str | None]:
        """The source, opened on first use and again after it could not be opened.
        ``early``: only if no cluster is needed to find it (a Prometheus named by flag,
        env or settings); (None, None) otherwise, to be asked again once connected."""
        with self._source_lock:
            if self._source is None:
                named = bool(self.settings.prometheus_url)
                if early and not named and self._cluster is None:
                    return None, None
                from krea_ops.telemetry.source import open_source

                try:
                    cluster = None if named else self.cluster
                    self._source = open_source(self.settings, cluster, self.policy)
                    self._source_error = None
                except Unavailable as exc:
                    self._source_error = str(exc)
            return self._source, self._source_error

    def info(self) -> ConsoleInfo:
        source, error = self._source, self._source_error
        telemetry = source.describe() if source is not None else f"none: {error or 'not yet'}"
        return ConsoleInfo(self.cluster.host, self.settings.context, telemetry)

    def close(self) -> None:
        with self._source_lock:
            if self._source is not None:
                with contextlib.suppress(KreaError):  # best effort: the session is ending
                    self._source.close()
                self._source = None
        with self._cluster_lock:
            if self._cluster is not None:
                self._cluster.close()
                self._cluster = None

    def __enter__(self) -> Console:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the fleet --------------------------------------------------------------------

    def fleet(self, scope: FleetScope = EVERYTHING) -> FleetSnapshot:
        """Nodes from the API, the telemetry ``scope`` asks for, verdicts. A telemetry
        failure does not fail the read: it is in the snapshot's ``telemetry_error`` (GPU
        nodes UNKNOWN), and the caller decides what it costs.

        Where the telemetry read does not need the node list (no selector) it starts on a
        thread before the nodes are listed, and where Prometheus is named without the
        cluster's help, before the Kubernetes client is even imported: both servers work
        at once."""
        families = scope.families
        source, error = self._telemetry(early=True)
        ahead = collect_ahead(source, node=scope.node, selector=scope.selector, families=families)
        cluster = self.cluster
        if source is None and error is None:
            source, error = self._telemetry()
        snapshot = load_fleet(
            cluster,
            source,
            self.policy,
            node=scope.node,
            selector=scope.selector,
            source_error=error,
            families=families,
            ahead=ahead,
        )
        if scope.whole:
            self.last_fleet = snapshot
            if self._history is not None and (families is None or "gpu" in families):
                self._history.record(snapshot)
        return snapshot

    def node(self, name: str) -> NodeDetail:
        """One node read whole (every GPU, port and link) and the pods on it; BadInput
        when there is no such node."""
        snapshot = self.fleet(FleetScope(node=name))
        view = snapshot.view(name)
        if view is None:  # pragma: no cover - a read of an unknown node raises BadInput
            raise Unavailable(f"node {name} was not read")
        pods = sorted(self.cluster.pods_on_node(name), key=lambda p: (p.namespace, p.name))
        return NodeDetail(snapshot, view, tuple(pods))

    def history(self, node: str) -> GpuHistory | None:
        return self._history.of(node) if self._history is not None else None

    def node_health(
        self, *, nodes: list[NodeInfo] | None = None, ahead: TelemetryAhead | None = None
    ) -> HealthReading:
        """Every node's severity: from the last whole-fleet read when it could judge (the
        dashboard reads the fleet anyway), else from a verdicts-only read (node summaries
        where Prometheus records them). ``nodes``: the caller has listed them;
        ``ahead``: the verdicts' telemetry read it started (``_verdicts_ahead``)."""
        last = self._judged_fleet()
        if last is not None:
            return HealthReading(severities(last.views), verdicts=_verdicts(last.views))
        source, error = self._telemetry()
        if source is None:
            return HealthReading(None, error)
        if nodes is None:
            snapshot = self.fleet(VERDICTS_ONLY)
        else:
            snapshot = load_fleet(
                self.cluster,
                source,
                self.policy,
                nodes=nodes,
                families=VERDICTS_ONLY.families,
                ahead=ahead,
            )
        if snapshot.telemetry_error:
            return HealthReading(None, snapshot.telemetry_error)
        return HealthReading(severities(snapshot.views), verdicts=_verdicts(snapshot.views))

    # -- Kueue ------------------------------------------------------------------------

    def queues(self) -> QueueSnapshot:
        """ClusterQueues, LocalQueues and flavor capacity, with drift against the healthy
        nodes (``health_error`` says why node health is missing, when it is)."""
        from krea_ops.queue import read_queues

        health: list[HealthReading] = []
        # the verdicts' telemetry is read while Kueue's objects and the nodes are listed,
        # and judged against that node list (not a second one)
        ahead = self._verdicts_ahead()
        snapshot = read_queues(self.cluster, lambda nodes: self._judge(health, nodes, ahead))
        error = health[-1].error if health else None
        return dataclasses.replace(snapshot, health_error=error) if error else snapshot

    def workloads(
        self, *, queue: str | None = None, namespace: str | None = None
    ) -> tuple[WorkloadInfo, ...]:
        from krea_ops.queue import read_workloads

        return read_workloads(self.cluster, namespace=namespace, queue=queue)

    def queue(self) -> QueueReading:
        return QueueReading(self.queues(), self.workloads())

    def why(self, name: str, namespace: str | None = None) -> WhyReport:
        """Why a workload (or the JobSet/Job it belongs to) waits; node health is read only
        once the workload is found (a bad name is one line, not a telemetry read)."""
        from krea_ops.queue import why

        health: list[HealthReading] = []
        report = why(self.cluster, name, namespace, lambda: self._judge(health))
        error = health[-1].error if health else None
        return dataclasses.replace(report, health_error=error) if error else report

    def _judge(
        self,
        into: list[HealthReading],
        nodes: list[NodeInfo] | None = None,
        ahead: TelemetryAhead | None = None,
    ) -> Mapping[str, Severity] | None:
        into.append(self.node_health(nodes=nodes, ahead=ahead))
        return into[-1].severity

    def _judged_fleet(self) -> FleetSnapshot | None:
        """The last whole-fleet read, where it could judge the nodes."""
        last = self.last_fleet
        return last if last is not None and not last.telemetry_error else None

    def _verdicts_ahead(self) -> TelemetryAhead | None:
        """The verdicts-only telemetry read ``node_health`` will want, started now on a
        thread, unless the last whole-fleet read will do."""
        if self._judged_fleet() is not None:
            return None
        source, _ = self._telemetry()
        return collect_ahead(source, families=VERDICTS_ONLY.families)

    # -- inference bursting and training ----------------------------------------------

    def burst(self) -> BurstStatus:
        from krea_ops.burst.status import burst_status

        return burst_status(self.cluster)

    def training(self) -> tuple[TrainingRun, ...]:
        from krea_ops.training.runs import parse_mount, read_runs

        return tuple(
            read_runs(
                self.cluster,
                mount=parse_mount(self.settings.training_checkpoint_mount),
                checkpoint_seconds=self.settings.training_checkpoint_seconds,
                failures_per_1000_node_days=self.settings.training_failures_per_1000_node_days,
            )
        )

    def train_status(self, name: str, namespace: str | None = None) -> GangStatus:
        """One run's progress, state and standing-out GPUs (``train status``): its gang,
        rank 0's log, the telemetry of its nodes alone. BadInput when there is no such
        run (or, without ``namespace``, more than one of that name)."""
        from krea_ops.errors import BadInput
        from krea_ops.kube.cluster import MissingCrd
        from krea_ops.training.gangs import read_gangs

        try:
            gangs = read_gangs(self.cluster)
        except MissingCrd:
            gangs = []
        found = [g for g in gangs if g.name == name and namespace in (None, g.namespace)]
        if not found:
            where = f" in namespace {namespace}" if namespace else ""
            raise BadInput(
                f"no training run {name}{where} (krea-ops train restarts and the dashboard's "
                "training screen list the runs)"
            )
        if len(found) > 1:
            spaces = ", ".join(sorted(g.key for g in found))
            raise BadInput(f"{name}: more than one training run of that name ({spaces}): say which")
        return self._statuses(found)[found[0].key]

    def run_statuses(self) -> dict[str, GangStatus]:
        """Every training run's status (the training screen), by ``namespace/name``."""
        from krea_ops.kube.cluster import MissingCrd
        from krea_ops.training.gangs import read_gangs

        try:
            gangs = read_gangs(self.cluster)
        except MissingCrd:
            return {}
        return self._statuses(gangs)

    def _statuses(self, gangs: list[Gang]) -> dict[str, GangStatus]:
        from krea_ops.gangstatus import read_statuses
        from krea_ops.training.stalls import StallConfig

        source, error = self._telemetry()
        return read_statuses(
            self.cluster,
            source,
            self.policy,
            gangs,
            time.time(),
            StallConfig.from_settings(self.settings),
            list(self.cluster.nodes()) if any(g.running for g in gangs) else [],
            source_error=error,
        )

    def restarts(self, name: str, namespace: str = "training") -> RunRestarts:
        """A run's restarts as node-health recorded them, attributed (``train
        restarts``). BadInput when there is neither such a JobSet nor a record of it."""
        from krea_ops.controllers.base import NAMESPACE
        from krea_ops.controllers.loop import read_state
        from krea_ops.controllers.restarts import run_restarts
        from krea_ops.errors import BadInput
        from krea_ops.kube.cluster import MissingCrd
        from krea_ops.training.runs import JOBSET

        restarts: int | None = None
        found = False
        try:
            version = self.cluster.custom_version(JOBSET[0], JOBSET[1], JOBSET[2])
            path = f"/apis/{JOBSET[0]}/{version}/namespaces/{namespace}/{JOBSET[1]}/{name}"
            answer = self.cluster.request(f"get jobset {namespace}/{name}", "GET", path)
            if answer.ok and answer.body is not None:
                found = True
                restarts = int((answer.body.get("status") or {}).get("restarts") or 0)
            elif answer.status != 404:
                raise self.cluster.refusal(f"get jobset {namespace}/{name}", answer)
        except MissingCrd:
            pass
        state = read_state(self.cluster, NAMESPACE).data.get("node-health")
        recorder = state.get("recorder") if isinstance(state, dict) else None
        got = run_restarts(
            recorder if isinstance(recorder, dict) else None,
            namespace,
            name,
            restarts,
            after_s=self.settings.attribution_after_s,
            before_s=self.settings.attribution_before_s,
        )
        if not found and not got.rows:
            raise BadInput(
                f"no training {name} in namespace {namespace}, and no restart of it on "
                "record (krea-ops train checkpoints and the dashboard's training screen "
                "list the runs)"
            )
        return got

    def restart_history(self, runs: Iterable[TrainingRun]) -> dict[str, RunRestarts]:
        """Each run's restarts as node-health recorded them (one read of its state), by
        ``namespace/name``: what the training screen shows under the selected run."""
        from krea_ops.controllers.base import NAMESPACE
        from krea_ops.controllers.loop import read_state
        from krea_ops.controllers.restarts import run_restarts

        state = read_state(self.cluster, NAMESPACE).data.get("node-health")
        recorder = state.get("recorder") if isinstance(state, dict) else None
        return {
            f"{r.namespace}/{r.name}": run_restarts(
                recorder if isinstance(recorder, dict) else None,
                r.namespace,
                r.name,
                r.restarts,
                after_s=self.settings.attribution_after_s,
                before_s=self.settings.attribution_before_s,
            )
            for r in runs
        }

    def lemons(self) -> list[LemonRow]:
        """Nodes implicated in repeated training restarts, labelled lemons, or evicted
        within the lemon window (``nodes lemons``), worst first."""
        from krea_ops.controllers.base import NAMESPACE
        from krea_ops.controllers.loop import read_state
        from krea_ops.controllers.restarts import lemon_rows
        from krea_ops.training.manifests import LEMON_LABEL

        state = read_state(self.cluster, NAMESPACE).data.get("node-health")
        nodes = self.cluster.nodes()
        labelled = [n.name for n in nodes if n.labels.get(LEMON_LABEL) == "true"]
        gpu_nodes = sum(1 for n in nodes if not n.virtual and (n.gpu_capacity or 0) > 0)
        return lemon_rows(
            state if isinstance(state, dict) else None,
            labelled,
            time.time(),
            window_s=self.settings.node_health_lemon_window_s,
            threshold=self.settings.node_health_lemon_restarts,
            fleet_nodes=gpu_nodes,
            same_fault_s=self.settings.node_health_lemon_same_fault_s,
            chance=self.settings.node_health_lemon_chance,
        )

    def node_history(self, name: str) -> NodeHistory:
        """Every quarantine, validation, restore and attributed restart of a node, newest
        first, with its time-to-repair figures (``nodes history``): node-health's ledger
        and restart recorder, and what the node's own annotations say now (for a cluster
        where node-health does not run). BadInput when there is no such node."""
        from krea_ops.controllers.base import NAMESPACE
        from krea_ops.controllers.ledger import node_history
        from krea_ops.controllers.loop import read_state

        current = self.cluster.node(name)
        data = read_state(self.cluster, NAMESPACE).data
        state = data.get("node-health")
        state = state if isinstance(state, dict) else {}
        ledger = state.get("ledger", data.get("ledger"))
        recorder = state.get("recorder")
        return node_history(
            ledger if isinstance(ledger, dict) else None,
            recorder if isinstance(recorder, dict) else None,
            current,
            time.time(),
        )

    # -- the runbook: write actions as plans, run by one executor ----------------------

    def user(self) -> str:
        """Who acts: the kubeconfig's user of the context in use (for audit)."""
        from krea_ops.runbook.audit import kubeconfig_user

        return kubeconfig_user(self.settings.kubeconfig, self.settings.context)

    def controllers(self) -> list[dict[str, object]]:
        """The bundled controllers as ``krea-ops controller status -o json`` shows them:
        which run (a Lease renewed within its duration), who leads, node-health's blast
        cap and veto, the last action of each."""
        from krea_ops.controllers.base import NAMESPACE
        from krea_ops.controllers.status import controller_status

        rows, _ = controller_status(self.cluster, NAMESPACE, time.time())
        return rows

    def plan_evict(
        self,
        nodes: Collection[str],
        *,
        reason: str,
        timeout_s: float = 300.0,
        grace_period_s: int | None = None,
        force: bool = False,
    ) -> Plan:
        """The plan of ``nodes evict``, built from the cluster as it is now (nothing is
        written); BadInput for an unknown node or an empty reason."""
        from krea_ops.runbook.nodes import plan_evict
        from krea_ops.training.runs import parse_mount

        return plan_evict(
            self.cluster,
            list(nodes),
            reason=reason,
            user=self.user(),
            timeout_s=timeout_s,
            grace_period_s=grace_period_s,
            force=force,
            max_share=self.settings.max_share,
            mount=parse_mount(self.settings.training_checkpoint_mount),
        )

    def plan_restore(
        self, nodes: Collection[str], *, force: bool = False, reason: str | None = None
    ) -> Plan:
        """The plan of ``nodes restore``; BadInput for an unknown node, a node krea-ops
        did not evict, or one it evicted that has not passed a validation since (each
        unless ``force``)."""
        from krea_ops.runbook.nodes import plan_restore

        health = self.node_health()
        return plan_restore(
            self.cluster, list(nodes), user=self.user(), force=force, reason=reason,
            verdicts=health.verdicts, health_error=health.error,
        )  # fmt: skip

    def validation_spec(self) -> ValidationSpec:
        from krea_ops.validation import ValidationSpec

        return ValidationSpec.from_settings(self.settings)

    def plan_validate(
        self, nodes: Collection[str], *, level: str, reason: str | None = None
    ) -> Plan:
        """The plan of ``nodes validate``: a validation Job on each node; BadInput for an
        unknown node, one without GPUs, one holding a training's pods or whose GPUs are
        in use, or a cluster without the validation PriorityClass."""
        from krea_ops.runbook.validate import build_validate, read_validate

        spec = self.validation_spec()
        names = list(dict.fromkeys(nodes))
        inputs = read_validate(self.cluster, names, spec)
        return build_validate(
            inputs, names, level, spec, user=self.user(), reason=reason, now=time.time()
        )

    def validation_wait(
        self,
        jobs: Mapping[str, str],
        *,
        timeout_s: float,
        poll_s: float = 2.0,
        progress: Callable[[str], None] | None = None,
    ) -> tuple[dict[str, Validation], dict[str, str]]:
        """Wait for the validation Jobs ``jobs`` (node -> namespace/name) to finish, up to
        ``timeout_s``; record each result on its node as it comes (``build_record``, run
        by the executor, audited). Returns the results by node and what the Jobs still
        running are doing."""
        from krea_ops.runbook.validate import read_finished

        spec = self.validation_spec()
        deadline = time.monotonic() + timeout_s
        done: dict[str, Validation] = {}
        left = dict(jobs)
        running: dict[str, str] = {}
        while left:
            seen = read_finished(self.cluster, spec, left, time.time())
            for node, validation in seen.done.items():
                self.record_validation(validation)
                done[node] = validation
                left.pop(node)
                if progress is not None:
                    progress(f"node {node}: {validation.summary()}")
            running = seen.running
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
        return done, running

    def record_validation(self, validation: Validation) -> RunResult:
        """Record a validation's result on its node (annotation, needs-repair label, the
        pending-validation taint removed on a pass, an Event), audited."""
        from krea_ops.runbook.nodes import read_nodes
        from krea_ops.runbook.validate import build_record

        obj = read_nodes(self.cluster, [validation.node])[validation.node]
        return self.execute(build_record(obj, validation, user=self.user()))

    def plan_launch(self, spec: TrainingSpec) -> tuple[Plan, dict[str, object]]:
        """The plan of ``train launch`` and the JobSet it creates; BadInput (nothing
        created) for a missing queue or priority class, a gang larger than the healthy
        nodes of the queue's flavors, a missing checkpoint directory."""
        from krea_ops.runbook.training import plan_launch
        from krea_ops.training.runs import parse_mount

        health = self.node_health()
        return plan_launch(
            self.cluster,
            spec,
            user=self.user(),
            node_severity=health.severity,
            mount=parse_mount(self.settings.training_checkpoint_mount),
        )

    def plan_launch_again(
        self, name: str, *, namespace: str, new_name: str
    ) -> tuple[Plan, dict[str, object]]:
        """The plan of launching run ``namespace/name`` again as ``new_name``: the same
        nodes, image, queue, priority, trainer and arguments (read from the JobSet, as
        ``train resume`` reads them), starting fresh in the new run's own checkpoint
        directory; BadInput for a run that is not ours or a name already taken."""
        import dataclasses

        from krea_ops.runbook.training import read_spec

        spec = read_spec(self.cluster, name, namespace=namespace)
        fresh = dataclasses.replace(
            spec, name=new_name.strip(), checkpoint_dir=None, resume_from=None
        )
        return self.plan_launch(fresh)

    def plan_resume(
        self, name: str, *, namespace: str, checkpoint: str = "latest"
    ) -> tuple[Plan, dict[str, object]]:
        """The plan of ``train resume``: the finished run relaunched from the newest
        complete checkpoint (or the one named, if complete); BadInput otherwise."""
        from pathlib import Path

        from krea_ops.runbook.audit import default_path
        from krea_ops.runbook.training import plan_resume
        from krea_ops.training.runs import parse_mount

        return plan_resume(
            self.cluster,
            name,
            namespace=namespace,
            checkpoint=checkpoint,
            user=self.user(),
            mount=parse_mount(self.settings.training_checkpoint_mount),
            audit_log=Path(self.settings.audit_log) if self.settings.audit_log else default_path(),
        )

    def plan_burst_pause(self, *, reason: str) -> Plan:
        """The plan of ``burst pause``: our taint and who/why/since on every virtual node;
        BadInput for an empty reason or a cluster without virtual nodes."""
        from krea_ops.runbook.burst import plan_pause

        return plan_pause(self.cluster, self._virtual_nodes(), reason=reason, user=self.user())

    def plan_burst_unpause(self) -> Plan:
        """The plan of ``burst unpause``: our taint and annotations off, nothing else."""
        from krea_ops.runbook.burst import plan_unpause

        return plan_unpause(self.cluster, self._virtual_nodes(), user=self.user())

    def _virtual_nodes(self) -> list[str]:
        """The virtual-kubelet nodes, found as ``burst status`` finds them."""
        from krea_ops.burst.status import find_virtual_nodes

        return [info.name for info, _ in find_virtual_nodes(self.cluster)]

    def plan_burst_migrate(
        self,
        *,
        direction: str,
        max_pods: int | None = None,
        selector: str | None = None,
        timeout_s: float = 600.0,
    ) -> Plan:
        """The plan of ``burst migrate --back|--out``; BadInput (nothing written) when no
        GPU is free on the other side or there is nothing to move."""
        from pathlib import Path

        from krea_ops.runbook.audit import default_path
        from krea_ops.runbook.burst import plan_migrate

        # pods come home only to nodes the health verdicts call healthy, as queue list
        # counts them; without telemetry, Ready and not cordoned (said so in the plan)
        health = self.node_health() if direction == "back" else None
        plan = plan_migrate(
            self.cluster,
            self._virtual_nodes(),
            direction=direction,
            user=self.user(),
            max_pods=max_pods,
            selector=selector,
            timeout_s=timeout_s,
            audit_log=Path(self.settings.audit_log) if self.settings.audit_log else default_path(),
            node_severity=health.severity if health is not None else None,
        )
        if health is not None and health.severity is None:
            from krea_ops.runbook.plan import Finding
            from krea_ops.runbook.plan import FindingSeverity as PlanSeverity

            unjudged = Finding(
                "health", PlanSeverity.WARNING,
                f"the nodes' health is not known ({health.error}): in-cluster nodes count as "
                "healthy when Ready and not cordoned",
            )  # fmt: skip
            plan = dataclasses.replace(plan, findings=(*plan.findings, unjudged))
        return plan

    def execute(self, plan: Plan) -> RunResult:
        """Run a plan with the one executor, audited to the ``audit_log`` file."""
        from pathlib import Path

        from krea_ops.kube.events import client_secrets
        from krea_ops.runbook.audit import AuditLog, default_path
        from krea_ops.runbook.execute import execute

        path = Path(self.settings.audit_log) if self.settings.audit_log else default_path()
        audit = AuditLog(path, secrets=client_secrets(self.cluster))
        return execute(self.cluster, plan, audit=audit)


def _verdicts(views: Iterable[NodeView]) -> dict[str, Verdict]:
    return {v.info.name: v.verdict for v in views}
