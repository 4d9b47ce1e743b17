"""The runner every bundled controller plugs into.

``krea-ops controller run NAME|all`` builds one ``Runner`` over the named controllers.
Each controller has its own Lease (``controllers.leader``), renewed on a thread of its
own, so a pass that takes long (evictions) never delays a renew. Every ``interval_s`` a
pass of each controller:

1. leads? (the fence: renewed within the renew deadline) - a follower does nothing;
2. loads the controller's persisted state (ConfigMap ``krea-ops-controller-state``, key
   = the controller's name, JSON);
3. ``read(inputs, now)``; ``krea_ops.errors.Unavailable`` from it is **fail-static**:
   nothing changes this pass, the log line and ``krea_ops_controller_unavailable`` say
   why;
4. ``decide(snapshot, now, state)`` (pure);
5. runs each Plan through the runbook's one executor, audited like every write, with the
   fence checked before every plan, every step and every write the executor makes (a
   ``FencedCluster``: any call that is not a GET asks the fence first), so a replica that
   lost its Lease mid-plan stops before its next write. Independent plans run side by
   side, up to ``PLAN_CONCURRENCY`` at once (``independent_groups``: plans that each
   name nodes, no node and no subject shared); the others keep their order;
6. persists ``Decision.state`` (when it changed) with the ``resourceVersion`` read, and
   the last action under ``<name>.last-action``, for ``controller status``.

``dry_run``: no election, nothing executed or persisted; each plan is logged (and
returned) as data. Metrics (names in docs/metrics.md, "Controllers") are served with
prometheus_client on ``metrics_port`` (loopback by default). Each action, skip and alert
is one JSON line on the log stream (stderr).

Controllers are registered by name as ``"module:Class"`` and imported when asked for,
so a build without one of them still runs the others. A controller is made with
``Class.from_settings(settings)`` when it has one, else ``Class()``.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import quote

import orjson

from krea_ops.controllers.base import NAMESPACE, STATE_CONFIGMAP, Controller, Decision, Inputs
from krea_ops.controllers.leader import (
    ElectionSettings,
    LeaderElector,
    LostLeadership,
    lease_name,
)
from krea_ops.errors import BadInput, KreaError, Unavailable
from krea_ops.kube.cluster import ApiAnswer, Cluster
from krea_ops.kube.times import rfc3339
from krea_ops.kube.writes import Mutate, Target, update
from krea_ops.runbook.audit import AuditLog
from krea_ops.runbook.execute import RunResult, execute
from krea_ops.runbook.plan import Plan
from krea_ops.settings import Settings

REGISTRY: dict[str, str] = {
    "burst-taint": "krea_ops.controllers.burst_taint:BurstTaint",
    "migrate-back": "krea_ops.controllers.migrate_back:MigrateBack",
    "node-health": "krea_ops.controllers.node_health:NodeHealth",
    "quota-sync": "krea_ops.controllers.quota_sync:QuotaSync",
}
ALL = "all"
DEFAULT_INTERVAL_S = 30.0
LAST_ACTION_SUFFIX = ".last-action"
# How many independent plans of one pass run at once. Each node-health eviction is
# mostly waiting (the API server's answers, the drained pods going, fsyncs), so side by
# side a wave of bad nodes is quarantined faster than one after another, even on 2
# cores (docs/benchmarks.md, "Controllers": 200 of 1,500 nodes at a median 30.7 nodes/s
# against 17.1 sequentially; NVSentinel publishes ~2.5 nodes/s, sequential). The cap
# bounds the load one pass puts on the API server: each plan evicts up to
# ``kube.eviction.CONCURRENCY`` pods at once, so 16 plans mean at most 128 evictions in
# flight and 16 audit records waiting on one fsync'd file. 32 gained nothing beyond the
# runs' spread (32.7 nodes/s): by 16 the CPU of the client and of the API server is the
# bound.
PLAN_CONCURRENCY = 16


# -- the registry ---------------------------------------------------------------------------


class NotBuilt(Unavailable):
    """A registered controller whose module is not in this build."""


def controller_class(name: str) -> type:
    """The class registered as ``name``; BadInput for an unknown name, NotBuilt when its
    module is missing. A module that names its class otherwise is searched for the one
    class whose ``name`` is ``name``."""
    if name not in REGISTRY:
        raise BadInput(f"unknown controller {name!r}: choose from {', '.join([*REGISTRY, ALL])}")
    module_name, _, class_name = REGISTRY[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise NotBuilt(
            f"controller {name} is not in this build of krea-ops (no module {module_name})"
        ) from None
    found = getattr(module, class_name, None)
    if isinstance(found, type):
        return found
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and getattr(value, "name", None) == name
            and callable(getattr(value, "read", None))
            and callable(getattr(value, "decide", None))
        ):
            return value
    raise NotBuilt(f"controller {name}: module {module_name} has no class {class_name}")


def make_controller(name: str, settings: Settings) -> Controller[Any]:
    cls = controller_class(name)
    factory = getattr(cls, "from_settings", None)
    made = factory(settings) if callable(factory) else cls()
    return made  # type: ignore[no-any-return]


def resolve(which: str, settings: Settings) -> list[Controller[Any]]:
    """The controllers ``which`` names (``all``: every registered one this build has)."""
    if which != ALL:
        return [make_controller(which, settings)]
    out: list[Controller[Any]] = []
    for name in REGISTRY:
        try:
            out.append(make_controller(name, settings))
        except NotBuilt:
            continue
    if not out:  # pragma: no cover - burst-taint is always built
        raise NotBuilt("no controller is in this build of krea-ops")
    return out


# -- fenced writes ----------------------------------------------------------------------------


class FencedCluster(Cluster):
    """``inner``, with ``fence`` asked before every call that is not a GET: a replica
    that lost its Lease makes no further write, even inside a step (a retried 409, the
    next eviction)."""

    def __init__(self, inner: Cluster, fence: Callable[[], None]) -> None:
        super().__init__(inner.api, timeout_s=inner.timeout_s)
        self.inner = inner
        self.fence = fence

    def request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: dict[str, str | int | None] | None = None,
        raw: bool = False,
    ) -> ApiAnswer:
        if method != "GET":
            self.fence()
        return self.inner.request(
            what, method, path, body=body, content_type=content_type, query=query, raw=raw
        )


# -- persisted state ---------------------------------------------------------------------------


def state_path(namespace: str, name: str = STATE_CONFIGMAP) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/configmaps/{quote(name)}"


@dataclass(frozen=True)
class StoredState:
    """The state ConfigMap as read: each key's JSON decoded (a key that is not JSON is
    left out), its annotations, its resourceVersion ("" when there is none)."""

    data: Mapping[str, Any]
    annotations: Mapping[str, str]
    resource_version: str
    found: bool


def read_state(cluster: Cluster, namespace: str = NAMESPACE) -> StoredState:
    what = f"get configmap {namespace}/{STATE_CONFIGMAP}"
    answer = cluster.request(what, "GET", state_path(namespace))
    if answer.status == 404:
        return StoredState({}, {}, "", False)
    if not answer.ok or answer.body is None:
        raise cluster.refusal(what, answer)
    data: dict[str, Any] = {}
    for key, raw in (answer.body.get("data") or {}).items():
        try:
            data[key] = json.loads(raw)
        except (TypeError, ValueError):
            continue
    meta = answer.body.get("metadata") or {}
    return StoredState(
        data, dict(meta.get("annotations") or {}), str(meta.get("resourceVersion") or ""), True
    )


def _encode(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def write_state(cluster: Cluster, namespace: str, values: Mapping[str, Any]) -> None:
    """Set ``values`` (key -> JSON data) in the state ConfigMap, every other key as it
    is: a read-modify-write carrying the resourceVersion read (409: read again), or a
    create when there is no ConfigMap yet (409: someone made it; update that)."""
    encoded = {k: _encode(v) for k, v in values.items()}
    path = state_path(namespace)
    for _ in range(3):
        got = cluster.request("get state", "GET", path)
        if got.status == 404:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": STATE_CONFIGMAP, "namespace": namespace},
                "data": encoded,
            }
            made = cluster.request(
                f"create configmap {namespace}/{STATE_CONFIGMAP}",
                "POST",
                f"/api/v1/namespaces/{quote(namespace)}/configmaps",
                body=body,
            )
            if made.ok:
                return
            if made.status != 409:
                raise cluster.refusal(f"create configmap {namespace}/{STATE_CONFIGMAP}", made)
            continue
        break

    def merge(obj: dict[str, Any]) -> dict[str, Any] | None:
        data = dict(obj.get("data") or {})
        if all(data.get(k) == v for k, v in encoded.items()):
            return None
        data.update(encoded)
        obj["data"] = data
        return obj

    target = Target("ConfigMap", STATE_CONFIGMAP, path, namespace)
    update(cluster, target, Mutate(merge, "controller state"))


# -- metrics ---------------------------------------------------------------------------------


class ControllerMetrics:
    """The runner's metrics on a registry of its own (docs/metrics.md, "Controllers")."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics

        disable_created_metrics()  # no ``*_created`` series beside each counter
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.passes = Counter(
            "krea_ops_controller_passes",
            "Passes made, by result: ok, follower, unavailable (fail-static), error",
            ["controller", "result"],
            registry=r,
        )
        self.actions = Counter(
            "krea_ops_controller_actions",
            "Plans run, by result: done, blocked, failed; dry-run: planned, not run",
            ["controller", "status"],
            registry=r,
        )
        self.skipped = Counter(
            "krea_ops_controller_skipped",
            "Actions the controller chose not to take, by why",
            ["controller", "why"],
            registry=r,
        )
        self.alerts = Gauge(
            "krea_ops_controller_alerts_active",
            "1 while an alert of this kind holds (cap, veto, stale-input, ...)",
            ["controller", "kind"],
            registry=r,
        )
        self.state = Gauge(
            "krea_ops_controller_state",
            "The controller's own gauges (breaker and veto state, free GPUs, ...)",
            ["controller", "name"],
            registry=r,
        )
        self.leader = Gauge(
            "krea_ops_controller_leader",
            "1 while this replica leads the controller (renewed within the renew deadline)",
            ["controller"],
            registry=r,
        )
        self.unavailable = Gauge(
            "krea_ops_controller_unavailable",
            "1 when the last pass could not read an input and changed nothing",
            ["controller"],
            registry=r,
        )
        self.input_read = Gauge(
            "krea_ops_controller_input_last_read_timestamp_seconds",
            "When each input was last read successfully (Unix seconds)",
            ["controller", "input"],
            registry=r,
        )
        self.last_pass = Gauge(
            "krea_ops_controller_last_pass_timestamp_seconds",
            "When the last pass of the controller ended (Unix seconds)",
            ["controller"],
            registry=r,
        )
        self._alert_kinds: dict[str, set[str]] = {}

    def set_alerts(self, controller: str, kinds: Iterable[str]) -> None:
        now = set(kinds)
        for kind in self._alert_kinds.get(controller, set()) - now:
            self.alerts.labels(controller, kind).set(0)
        for kind in now:
            self.alerts.labels(controller, kind).set(1)
        self._alert_kinds[controller] = now

    def watch_caches(self, watched: Any) -> None:
        """Export ``watched``'s caches (a ``kube.watch.WatchedCluster``), read at each
        scrape: what they asked of the API server, the events applied, the objects kept,
        and whether each watch is open."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        class Caches:
            def collect(self) -> Iterator[Any]:
                labels = ["resource", "namespace"]
                requests = CounterMetricFamily(
                    "krea_ops_controller_watch_requests",
                    "Requests of the watch caches, by request: list (pages, the first "
                    "list's included), relist (pages after it: 410 Gone, a resync, a failed "
                    "attempt), watch (the first), resume (a watch again from the last "
                    "resourceVersion)",
                    labels=[*labels, "request"],
                )
                events = CounterMetricFamily(
                    "krea_ops_controller_watch_events",
                    "Watch events applied to the cache",
                    labels=labels,
                )
                gone = CounterMetricFamily(
                    "krea_ops_controller_watch_gone",
                    "410 Gone answers (the resourceVersion compacted away): each relists",
                    labels=labels,
                )
                objects = GaugeMetricFamily(
                    "krea_ops_controller_watch_objects",
                    "Objects in the cache",
                    labels=labels,
                )
                connected = GaugeMetricFamily(
                    "krea_ops_controller_watch_connected",
                    "1 while the collection's watch is open",
                    labels=labels,
                )
                for r in list(watched.reflectors.values()):
                    where = [r.collection.resource, r.collection.namespace or ""]
                    c = r.counts
                    firsts = c.lists - c.relists
                    for request, n in (
                        ("list", firsts),
                        ("relist", c.relists),
                        ("watch", min(c.watches, 1)),
                        ("resume", c.resumes),
                    ):
                        requests.add_metric([*where, request], n)
                    events.add_metric(where, c.events)
                    gone.add_metric(where, c.gone)
                    objects.add_metric(where, len(r.objects))
                    connected.add_metric(where, 1 if r.connected else 0)
                lists = CounterMetricFamily(
                    "krea_ops_controller_uncached_lists",
                    "Lists the passes sent to the API server themselves: kinds not watched "
                    "(a JobSet's Events after it restarted)",
                    labels=labels,
                )
                for where, n in sorted(dict(watched.uncached).items()):
                    lists.add_metric(list(where), n)
                yield from (requests, events, gone, objects, connected, lists)

        self.registry.register(Caches())

    def serve(self, port: int, address: str = "127.0.0.1") -> Any:
        """Serve ``/metrics`` on ``address:port`` (0: a free port); the server, whose
        ``server_port`` says which, and ``shutdown()`` stops."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        return server

    def text(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()


# -- the log -----------------------------------------------------------------------------------


class JsonLog:
    """One JSON object per line: ``time``, ``controller``, ``event`` (action, plan,
    skip, alert, fail-static, leader, error) and what it is about."""

    def __init__(self, stream: IO[str] | None = None, wall: Callable[[], float] = time.time):
        self.stream = stream
        self.wall = wall
        self._lock = threading.Lock()

    def __call__(self, controller: str, event: str, **fields: Any) -> None:
        record = {"time": rfc3339(self.wall()), "controller": controller, "event": event, **fields}
        line = orjson.dumps(record, default=str).decode()
        stream = self.stream if self.stream is not None else sys.stderr
        with self._lock:
            stream.write(line + "\n")
            stream.flush()


# -- the runner ---------------------------------------------------------------------------------


@dataclass
class PassResult:
    """One pass of one controller: ``outcome`` ok, follower, unavailable or error."""

    controller: str
    outcome: str
    decision: Decision | None = None
    runs: list[RunResult] = field(default_factory=list)
    detail: str | None = None


InputsFactory = Callable[[str], Inputs]


def independent_groups(plans: Sequence[Plan]) -> list[list[Plan]]:
    """``plans`` cut, in order, into groups whose plans may run at the same time.

    Two plans are independent when each names at least one node, they share no node,
    and they are not about the same subject (``Plan.subject``, when set): each then reads
    and writes only its own nodes and their pods (node-health's one plan per node). A
    plan that shares a node or a subject with one of the current group, or that names
    no node (a Kueue object, a training: its effects are not bounded by nodes), starts a
    new group, so it runs only after every plan before it has ended: plans that depend
    on each other keep the order ``decide`` gave them. A controller whose plans depend
    on each other in some other way (a GPU freed by one for the next) puts them in one
    plan, as migrate-back does its moves."""
    groups: list[list[Plan]] = []
    nodes: set[str] = set()
    subjects: set[str] = set()
    alone = True  # the current group must take no other plan
    for plan in plans:
        mine = set(plan.nodes)
        fits = (
            groups
            and not alone
            and mine
            and not (mine & nodes)
            and (plan.subject is None or plan.subject not in subjects)
        )
        if fits:
            groups[-1].append(plan)
        else:
            groups.append([plan])
            nodes, subjects = set(), set()
        nodes |= mine
        if plan.subject is not None:
            subjects.add(plan.subject)
        alone = not mine
    return groups


@dataclass
class _GroupRun:
    """What ``Runner._run_group`` ran (plan, result, action record; in the group's
    order); ``fenced_out``: why a plan did not start (the fence refused it);
    ``stopped``: a run stopped because the Lease was gone."""

    done: list[tuple[Plan, RunResult, dict[str, Any]]] = field(default_factory=list)
    fenced_out: str | None = None
    stopped: bool = False


class Runner:
    """Passes of ``controllers`` (see the module docstring). ``inputs(name)``: what a
    pass of that controller may read; ``cluster``: where the Leases, the state and the
    plans' writes go; ``clock`` monotonic seconds (the Leases), ``wall`` Unix seconds
    (what ``read`` and ``decide`` get as ``now``); ``concurrency``: how many independent
    plans of a pass run at once (1: one after another)."""

    def __init__(
        self,
        cluster: Cluster,
        controllers: Sequence[Controller[Any]],
        inputs: InputsFactory,
        *,
        namespace: str = NAMESPACE,
        identity: str,
        election: ElectionSettings | None = None,
        dry_run: bool = False,
        audit: AuditLog | None = None,
        metrics: ControllerMetrics | None = None,
        log: JsonLog | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        concurrency: int = PLAN_CONCURRENCY,
    ) -> None:
        if concurrency < 1:
            raise BadInput(f"plan concurrency must be 1 or more, got {concurrency}")
        self.cluster = cluster
        self.concurrency = concurrency
        self.controllers = list(controllers)
        self.inputs = inputs
        self.namespace = namespace
        self.identity = identity
        self.dry_run = dry_run
        self.audit = audit
        self.metrics = metrics or ControllerMetrics()
        self.log = log or JsonLog(wall=wall)
        self.clock = clock
        self.wall = wall
        self.electors: dict[str, LeaderElector] = {}
        if not dry_run:
            for c in self.controllers:
                self.electors[c.name] = LeaderElector(
                    cluster,
                    lease_name(c.name),
                    namespace=namespace,
                    identity=identity,
                    settings=election,
                    clock=clock,
                    wall=wall,
                )
        self._leading: dict[str, bool] = {}

    # -- leadership ---------------------------------------------------------------------

    def leads(self, name: str, now: float | None = None) -> bool:
        if self.dry_run:
            return True
        leads = self.electors[name].is_leader(now)
        before = self._leading.get(name)
        self._leading[name] = leads
        if before != leads and (before is not None or leads):  # not "follower" at start
            self.log(
                name,
                "leader",
                leader=leads,
                identity=self.identity,
                holder=self.electors[name].holder,
            )
        self.metrics.leader.labels(name).set(1 if leads else 0)
        return leads

    def _fence(self, name: str) -> Callable[[], None]:
        if self.dry_run:
            return lambda: None
        return self.electors[name].fence

    # -- one pass -----------------------------------------------------------------------

    def pass_once(self, controller: Controller[Any]) -> PassResult:
        """One pass of one controller (see the module docstring)."""
        name = controller.name
        try:
            result = self._pass(controller)
        except KreaError as exc:
            self.log(name, "error", error=str(exc))
            result = PassResult(name, "error", detail=str(exc))
        except Exception as exc:  # a bug in one controller must not stop the others
            detail = f"unexpected {type(exc).__name__}: {exc}"
            self.log(name, "error", error=detail, traceback=traceback.format_exc(limit=8))
            result = PassResult(name, "error", detail=detail)
        self.metrics.passes.labels(name, result.outcome).inc()
        self.metrics.last_pass.labels(name).set(self.wall())
        return result

    def _pass(self, controller: Controller[Any]) -> PassResult:
        name = controller.name
        if not self.leads(name):
            return PassResult(name, "follower")
        now = self.wall()
        try:
            stored = read_state(self.cluster, self.namespace)
            snapshot = controller.read(self.inputs(name), now)
        except Unavailable as exc:
            # fail-static: whatever is out there stays as it is
            self.metrics.unavailable.labels(name).set(1)
            self.log(name, "fail-static", why=str(exc))
            return PassResult(name, "unavailable", detail=str(exc))
        self.metrics.unavailable.labels(name).set(0)
        for input_name, at in (getattr(snapshot, "read_at", None) or {}).items():
            self.metrics.input_read.labels(name, input_name).set(at)
        state = stored.data.get(name)
        decision = controller.decide(snapshot, now, state if isinstance(state, dict) else {})
        self._report(decision)
        result = PassResult(name, "ok", decision)
        if self.dry_run:
            for plan in decision.plans:
                self.metrics.actions.labels(name, "planned").inc()
                self.log(name, "plan", dry_run=True, plan=plan.as_dict())
            return result
        fence = self._fence(name)
        fenced = FencedCluster(self.cluster, fence)
        runnable: list[Plan] = []
        for plan in decision.plans:
            if not plan.steps:
                continue
            if plan.refused:
                self.log(name, "skip", target=plan.subject or " ".join(plan.nodes),
                         why="refused", detail=plan.refused)  # fmt: skip
                continue
            runnable.append(plan)
        last: dict[str, Any] | None = None
        for group in independent_groups(runnable):
            ran = self._run_group(name, group, fenced, fence)
            for _plan, run, record in ran.done:
                result.runs.append(run)
                last = record
            if ran.fenced_out is not None:
                self.log(name, "fail-static", why=ran.fenced_out)
                return result
            if ran.stopped:
                break  # the Lease is gone: the rest is the next leader's
        values: dict[str, Any] = {}
        if decision.state is not None and _encode(decision.state) != _encode(state):
            values[name] = dict(decision.state)
        if last is not None:
            values[name + LAST_ACTION_SUFFIX] = last
        if values:
            try:
                write_state(fenced, self.namespace, values)
            except Unavailable as exc:
                self.log(name, "error", error=f"state not saved: {exc}")
                result.detail = f"state not saved: {exc}"
        return result

    def _run_group(
        self,
        name: str,
        group: Sequence[Plan],
        fenced: Cluster,
        fence: Callable[[], None],
    ) -> _GroupRun:
        """Run ``group`` (independent plans, see ``independent_groups``) with up to
        ``self.concurrency`` at once, started in the group's order. Each plan asks the
        fence before it starts (and the executor asks it before each step and each
        write); once the Lease is lost no further plan starts, and those running stop at
        their next step or write. An error that is not a run's own result (the audit log
        cannot be written) stops further starts and is raised once every plan begun has
        ended, as it would be between two plans run in turn."""
        halt = threading.Event()
        out = _GroupRun()
        done: dict[int, tuple[Plan, RunResult, dict[str, Any]]] = {}

        def one(index: int, plan: Plan) -> None:
            if halt.is_set():
                return
            try:
                fence()
            except LostLeadership as exc:
                halt.set()
                out.fenced_out = out.fenced_out or str(exc)
                return
            try:
                run = execute(fenced, plan, audit=self.audit, wall=self.wall, fence=fence)
            except BaseException:
                halt.set()
                raise
            self.metrics.actions.labels(name, run.status).inc()
            record = self._action_record(plan, run)
            self.log(name, "action", **record)
            done[index] = (plan, run, record)
            if run.stopped and not self.electors[name].is_leader():
                halt.set()  # the Lease is gone: the rest is the next leader's
                out.stopped = True

        workers = min(self.concurrency, len(group))
        if workers <= 1:
            for index, plan in enumerate(group):
                one(index, plan)
                if halt.is_set():
                    break
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix=f"{name}-plan") as pool:
                futures = [pool.submit(one, i, plan) for i, plan in enumerate(group)]
            for future in futures:
                future.result()  # re-raise the first error, in plan order
        out.done = [done[i] for i in sorted(done)]
        return out

    def _report(self, decision: Decision) -> None:
        name = decision.controller
        for skip in decision.skipped:
            self.metrics.skipped.labels(name, skip.why).inc()
            self.log(name, "skip", target=skip.target, why=skip.why, detail=skip.detail)
        for alert in decision.alerts:
            self.log(name, "alert", kind=alert.kind, message=alert.message,
                     objects=list(alert.objects))  # fmt: skip
        self.metrics.set_alerts(name, (a.kind for a in decision.alerts))
        for key, value in decision.gauges.items():
            self.metrics.state.labels(name, key).set(value)

    def _action_record(self, plan: Plan, run: RunResult) -> dict[str, Any]:
        return {
            "at": rfc3339(self.wall()),
            "action": plan.action,
            "subject": plan.subject,
            "nodes": list(plan.nodes),
            "reason": plan.reason,
            "status": run.status,
            "run_id": run.run_id,
            "by": self.identity,
            "stopped": run.stopped,
            "blocked": list(run.blocked),
            "failed": list(run.failed),
        }

    # -- the loop -------------------------------------------------------------------------

    def start_election(self, stop: threading.Event) -> list[threading.Thread]:
        """One thread per Lease, acquiring and renewing until ``stop`` (then released)."""
        threads = []
        for name, elector in self.electors.items():
            t = threading.Thread(
                target=elector.run, args=(stop,), name=f"lease-{name}", daemon=True
            )
            t.start()
            threads.append(t)
        return threads

    def wait_to_lead(self, stop: threading.Event, timeout_s: float) -> list[str]:
        """Wait until every controller leads or ``timeout_s`` passed; those that do not."""
        deadline = self.clock() + timeout_s
        while True:
            missing = [c.name for c in self.controllers if not self.leads(c.name)]
            if not missing or self.clock() >= deadline or stop.is_set():
                return missing
            stop.wait(0.05)

    def run(
        self,
        stop: threading.Event,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        once: bool = False,
    ) -> int:
        """Passes every ``interval_s`` until ``stop`` (``once``: one pass). Returns the
        exit code: 0, or 1 when ``once`` could not lead or a pass failed."""
        threads = [] if self.dry_run else self.start_election(stop)
        code = 0
        try:
            if once and not self.dry_run:
                settings = next(iter(self.electors.values())).settings
                # a Lease left by a replica that died expires within its duration
                wait = settings.lease_duration_s + 2 * settings.retry_period_s
                for name in self.wait_to_lead(stop, wait):
                    holder = self.electors[name].holder
                    error = self.electors[name].last_error
                    self.log(name, "follower", holder=holder)
                    # No holder seen and the Lease could not be read or written (a token
                    # refused, an API server away): that is the reason, not a rival.
                    why = (
                        f"its Lease could not be taken: {error}"
                        if holder is None and error
                        else f"another replica leads (lease held by {holder or 'unknown'})"
                    )
                    print(f"controller {name}: {why}; nothing was done", file=sys.stderr)
                    code = 1
            failed: list[str] = []

            def loop(controller: Controller[Any]) -> None:
                while not stop.is_set():
                    result = self.pass_once(controller)
                    if result.outcome in ("error", "unavailable") or any(
                        r.status != "done" for r in result.runs
                    ):
                        failed.append(controller.name)
                    if once:
                        return
                    stop.wait(interval_s)

            # Each controller passes on a thread of its own: a long plan of one (migrate-back
            # waits for each moved pod's replacement to be Ready) never holds up another's
            # pass (node-health's quarantine). Each has its own Lease and state key.
            loops = [
                threading.Thread(target=loop, args=(c,), name=f"pass-{c.name}", daemon=True)
                for c in self.controllers
            ]
            for t in loops:
                t.start()
            for t in loops:
                while t.is_alive():
                    t.join(timeout=0.5)  # the main thread stays responsive to signals
            if once and failed:
                code = 1
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=15)
            for elector in self.electors.values():
                elector.close()
        return code


# -- live inputs ---------------------------------------------------------------------------------

SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def service_account(token_path: str = SA_TOKEN) -> str | None:
    """``system:serviceaccount:NS:NAME`` from the pod's token (its ``sub`` claim); None
    outside a pod. The token is read, never kept or logged."""
    import base64

    try:
        with open(token_path) as f:
            payload = f.read().strip().split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (OSError, IndexError, ValueError):
        return None
    sub = claims.get("sub") if isinstance(claims, dict) else None
    return str(sub) if sub else None


class LiveInputs:
    """What a live pass reads: the cluster, the telemetry source (opened on first use
    and again after it could not be opened), the health policy of the settings, and who
    acts (the pod's service account, else the kubeconfig's user)."""

    def __init__(self, settings: Settings, cluster: Cluster, namespace: str = NAMESPACE) -> None:
        from krea_ops.health import HealthPolicy
        from krea_ops.runbook.audit import kubeconfig_user

        self.settings = settings
        self.cluster = cluster
        self.namespace = namespace
        self.policy = HealthPolicy.from_settings(settings)
        user = kubeconfig_user(settings.kubeconfig, settings.context)
        if user == "in-cluster service account":
            user = service_account() or user
        self.user = user
        self._source: Any = None
        self._source_lock = threading.Lock()  # the controllers' passes run on threads
        self._error: str | None = None

    def __call__(self, name: str) -> Inputs:
        with self._source_lock:
            if self._source is None:
                from krea_ops.telemetry.source import open_source

                try:
                    self._source = open_source(self.settings, self.cluster, self.policy)
                    self._error = None
                except Unavailable as exc:
                    self._error = str(exc)
        return Inputs(
            cluster=self.cluster,
            source=self._source,
            policy=self.policy,
            user=self.user,
            namespace=self.namespace,
            source_error=self._error,
        )

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
