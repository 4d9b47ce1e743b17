"""Every real node's kubelet.

:class:`Kubelet`, one actor for every real node (nodes labelled ``type=virtual-kubelet``
belong to the virtual kubelet): renews Leases, heartbeats node status, runs bound pods
through their phases, finishes graceful deletions and plays a node's failure and repair
(annotation ``sim.krea.ai/failed``: the kubelet stops renewing and posting status; what
the node lifecycle controller then does, ``Ready=Unknown`` and the ``unreachable`` taints,
is the real one's on the upstream control plane and ``standins/nodelifecycle.py`` on the
embedded one).

Times. Every stamp the kubelet writes (conditions, start and finish times, Lease
``renewTime``, node heartbeats, Events) and every stamp it compares (``startTime``,
``deletionTimestamp``) is wall time, like the API server's; what the pods' processes
take (image pulls, container start, the annotations below, shutting down) is simulated
time, ``speed`` times faster.

Pods the simulation should complete carry annotations the kubelet reads:

``sim.krea.ai/run-seconds``
    simulated seconds the containers run (from their start) before they exit, for pods
    whose ``restartPolicy`` is ``Never`` or ``OnFailure`` (``Always`` pods run until
    deleted);
``sim.krea.ai/exit-code``
    the exit code then (default 0: ``Succeeded``/``Completed``; otherwise ``Failed`` with
    container reason ``Error``, also for ``OnFailure``: the simulated kubelet does not
    restart containers);
``sim.krea.ai/ready-seconds``
    simulated seconds a started container stays unready (a model loading, say).

A pod's processes can also end by themselves: the simulated trainers (``training.py``)
tell the kubelet through ``world.services["container-exits"]`` (``ContainerExits``, an
in-process channel the product cannot see, as a real kubelet learns of an exit from its
container runtime) that a pod's containers exited with a code; the next tick reports
them ``terminated`` with it (reason ``Error``, phase ``Failed``, for a non-zero code).

A pod on a failed node that had started is marked ``phase: Failed``, ``reason:
NodeFailure``, message ``Node <node> failed (<cause>): the kubelet stopped and the pod's
containers were lost``, with a ``DisruptionTarget`` condition (reason
``TerminationByKubelet``) and its containers ``terminated`` with reason
``ContainerStatusUnknown``, exit code 137 (what Kubernetes writes for containers lost
with their node, so ``kubectl get pods`` shows ``ContainerStatusUnknown``). Pods bound
to a failed node that had not started stay ``Pending`` until it is repaired.

Deletion: the containers of a pod with ``deletionTimestamp`` that had started take
their whole ``deletionGracePeriodSeconds`` to stop from when the kubelet sees the
deletion, in simulated seconds (never longer than the grace period on the wall clock,
when the kubelet would kill them): then they
are reported ``terminated`` (exit 143, phase ``Failed``) and the pod is deleted with
grace 0; one that never started goes at once. A pod held by finalizers is left terminal
for their owner to release.

Periods and traffic of the cluster's actors (this kubelet, ``standins/scheduler.py``,
``standins/workloads.py``). Periods are simulated seconds, stretched so that no actor ticks more
than twice a wall second: kubelet ``max(2, speed/2)``, scheduler ``max(1, speed/2)``,
controllers ``max(2, speed/2)``. The actors share one list of pods and one of nodes
(``api.ClusterView``, ``world.services["cluster-view"]``, relisted at most every half
wall second or after the reader's own writes); the controllers add one list each of
DaemonSets, Deployments and ReplicaSets a tick, the scheduler lists nothing more and
writes nothing while no pod waits. Writes are strategic merge patches of what changed:
two per pod start, one per completion or failure, one or two per deletion, a binding and
an Event per scheduled pod. Lease renewals, the bulk of the steady-state writes, come
every ``max(10, nodes / LEASE_WRITES_PER_WALL_S)`` wall seconds per node whatever the
speed, spread over the nodes, with ``leaseDurationSeconds`` four times that (at least
40, as a real kubelet's); node status heartbeats every ``max(300, 5 x renewal)`` wall
seconds. At 64 nodes that is 6.4 Lease and 0.2 node-status writes a wall second.

The scale mode (``WorldConfig.telemetry_nodes``): the shared view is a watch
(``api.WatchedClusterView``), Leases and node status are written on ``kubelet_workers``
threads of their own (default 8) while as many others share a tick's pods by node, as a
fleet's kubelets run side by side; at 5,000 nodes that is 32 Lease and 6.4 node-status
writes a second, Leases of 625 s.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from kubernetes.client.rest import ApiException

from krea_ops.kube.times import micro_time, rfc3339
from krea_ops.sim.common.actor import World, WorldConfig
from krea_ops.sim.common.api import Api, ClusterView, Events, ViewActor
from krea_ops.sim.common.objects import (
    FAILED_ANNOTATION,
    NODE_CONDITIONS,
    annotations_of,
    as_dict,
    condition_of,
    is_terminal,
    meta_of,
    node_ready,
    pod_condition,
    pod_ready,
    sha256_hex,
    spec_of,
    status_of,
    time_or,
    whole_conditions,
)
from krea_ops.sim.machines.nodes import (
    HEALTHY_CONDITIONS,
    healthy_node_conditions,
    is_virtual,
    lease_body,
)

RUN_SECONDS_ANNOTATION = "sim.krea.ai/run-seconds"
EXIT_CODE_ANNOTATION = "sim.krea.ai/exit-code"
READY_SECONDS_ANNOTATION = "sim.krea.ai/ready-seconds"

# A real kubelet renews its Lease every 10 s (leaseDurationSeconds 40). Renewals are the
# bulk of the steady-state writes: with more nodes than this many per wall second they
# come less often, so the rate stays there (4,096 nodes: every 128 s, duration 512).
LEASE_RENEW_S = 10.0
LEASE_WRITES_PER_WALL_S = 32.0
# Without a change to report, a real kubelet writes its node status every 5 minutes.
NODE_STATUS_REPORT_S = 300.0
_T = TypeVar("_T")
# Threads that sync the nodes and their pods in the scale mode (``extra["kubelet_workers"]``).
SCALE_WORKERS = 8
# A pod whose container start was not planned by this kubelet (a restart of the world)
# starts this many simulated seconds after its startTime.
DEFAULT_START_S = 4.0


_BIG_IMAGES = ("pytorch", "nemo", "vllm", "cuda", "tensorrt", "triton", "sglang")
EXITS_SERVICE = "container-exits"


class ContainerExits:
    """Exits of pods' processes, reported to the kubelet (``world.services
    ["container-exits"]``): pod uid -> the containers' exit code. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._codes: dict[str, int] = {}

    def exited(self, pod_uid: str, code: int) -> None:
        """The containers of pod ``pod_uid`` exited with ``code`` (the first code stays)."""
        with self._lock:
            self._codes.setdefault(pod_uid, code)

    def take(self, pod_uid: str) -> int | None:
        with self._lock:
            return self._codes.pop(pod_uid, None)

    def keep_only(self, pod_uids: set[str]) -> None:
        """Forget the exits of pods that are gone."""
        with self._lock:
            for uid in [u for u in self._codes if u not in pod_uids]:
                del self._codes[uid]


class Kubelet(ViewActor):
    """Every real node's kubelet."""

    name = "kubelet"

    def __init__(self, world: World, view: ClusterView, api: Api) -> None:
        super().__init__(world, view, api)
        speed = world.config.speed
        self.events = Events(api, world, "kubelet")
        self.period_s = max(2.0, 0.5 * speed)
        # Lease and node status are the API's business: wall seconds, whatever the speed
        # (``lease_renew_s`` in ``WorldConfig.extra`` overrides the renewal: tests).
        self.renew_s = self.renew_for(world.config)
        self.lease_duration_s = self.lease_duration_for(world.config)
        self.status_s = max(NODE_STATUS_REPORT_S, 5 * self.renew_s)
        # All times kept here are wall times, like the API stamps they are compared with.
        self._next_renew: dict[str, float] = {}
        self._next_status: dict[str, float] = {}
        self._due: dict[str, float] = {}  # pod uid -> when its containers start
        self._ready_at: dict[str, float] = {}  # pod uid -> when its containers turn ready
        self._images: dict[str, set[str]] = defaultdict(set)  # node -> pulled images
        self._ip_next: dict[str, int] = defaultdict(lambda: 2)
        # API stamps have whole seconds, more than a pod's processes last at high speed:
        # when this kubelet started a pod's containers and when it began stopping them
        # (the stamps stand in after a restart of the world).
        self._started: dict[str, float] = {}
        self._killing: dict[str, float] = {}
        self.exits: ContainerExits = world.services.setdefault(EXITS_SERVICE, ContainerExits())
        workers = SCALE_WORKERS if world.config.scale_mode else 1
        self.workers = int(world.config.extra.get("kubelet_workers", workers))
        self._pool: ThreadPoolExecutor | None = None
        self._lease_pool: ThreadPoolExecutor | None = None
        self._lease_round: list[Future[None]] = []
        if self.workers > 1:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sim-kubelet")
            self._lease_pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sim-lease")

    def _in_parallel(self, fn: Callable[[list[_T]], None], work: list[_T]) -> None:
        """``fn(work)``; in the scale mode ``fn`` of a share of ``work`` on each of the
        pool's threads (a fleet's kubelets are that many processes: one thread's round
        trips, each a Lease renewal or a pod's status, took minutes at 5,000 nodes and more
        when the API server was slow to answer)."""
        if self._pool is None or len(work) < 2 * self.workers:
            fn(work)
            return
        for _ in self._pool.map(fn, [work[k :: self.workers] for k in range(self.workers)]):
            pass

    def join(self, timeout: float = 5.0) -> None:
        super().join(timeout)
        for pool in (self._pool, self._lease_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def renew_for(config: WorldConfig) -> float:
        """Wall seconds between a node's Lease renewals."""
        return float(config.extra.get("lease_renew_s", 0) or 0) or max(
            LEASE_RENEW_S, max(1, config.nodes) / LEASE_WRITES_PER_WALL_S
        )

    @classmethod
    def lease_duration_for(cls, config: WorldConfig) -> int:
        """The nodes' ``leaseDurationSeconds``: four renewals, at least 40 s (a real
        kubelet's); the node lifecycle controller's grace period must not be shorter."""
        return int(max(40, math.ceil(4 * cls.renew_for(config))))

    # -- the loop -----------------------------------------------------------------------

    def tick(self) -> None:
        now = self.clock.wall()
        nodes = self.view.nodes(self._wrote)
        pods = self.view.pods(self._wrote)
        mine = {meta_of(n)["name"]: n for n in nodes if not is_virtual(n)}
        failed: set[str] = set()
        ordered = list(enumerate(sorted(mine.items())))

        def sync_nodes(batch: list[tuple[int, tuple[str, dict[str, Any]]]]) -> None:
            for i, (name, node) in batch:
                at = now if self._lease_pool is None else self.clock.wall()  # a round is long
                if self._sync_node(node, at, i, len(mine)):
                    failed.add(name)

        if self._lease_pool is None:
            self._in_parallel(sync_nodes, ordered)
        else:
            # the scale mode: Leases and node status on threads of their own, as a real
            # kubelet's lease controller runs beside its pod workers; done in line, a
            # slow API server's backlog of renewals kept every pod from starting
            failed.update(
                name for name, node in mine.items() if FAILED_ANNOTATION in annotations_of(node)
            )
            if all(f.done() for f in self._lease_round):
                chunks = [ordered[k :: self.workers] for k in range(self.workers)]
                self._lease_round = [self._lease_pool.submit(sync_nodes, c) for c in chunks]
        by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            node_name_ = str(spec_of(pod).get("nodeName") or "")
            if node_name_ in mine:
                by_node[node_name_].append(pod)
        live: set[str] = set()

        def sync(batch: list[tuple[str, list[dict[str, Any]]]]) -> None:
            for name, node_pods in batch:
                node = mine[name]
                if name in failed:
                    cause = annotations_of(node).get(FAILED_ANNOTATION, "")
                    for pod in node_pods:
                        self._fail_pod(pod, name, cause, now)
                    continue
                used_ips = {
                    status_of(p).get("podIP") for p in node_pods if status_of(p).get("podIP")
                }
                for pod in node_pods:
                    live.add(str(meta_of(pod).get("uid")))
                    self._sync_pod(pod, node, now, used_ips)

        self._in_parallel(sync, list(by_node.items()))
        for memo in (self._due, self._ready_at, self._started, self._killing):
            for uid in [u for u in memo if u not in live]:
                del memo[uid]
        self.exits.keep_only(live)

    # -- nodes --------------------------------------------------------------------------

    def _sync_node(self, node: dict[str, Any], now: float, index: int, count: int) -> bool:
        """Lease, heartbeat, failure and repair of one node; True while it is failed."""
        name = meta_of(node)["name"]
        cause = annotations_of(node).get(FAILED_ANNOTATION)
        ready = condition_of(node, "Ready") or {}
        if cause is not None:  # stopped: no Lease renewed, no status posted
            self._next_renew.pop(name, None)
            return True
        if ready.get("status") != "True":
            self._mark_ready(node, now)
            self._renew(node, now)
            return False
        if name not in self._next_renew:
            # Spread the renewals of all nodes over one period.
            self._next_renew[name] = now + self.renew_s * index / max(count, 1)
            self._next_status.setdefault(name, now + self.status_s * (index + 0.5) / count)
        if now >= self._next_renew[name]:
            self._renew(node, now)
        if now >= self._next_status.get(name, now):
            self._heartbeat(node, now)
        return False

    def _renew(self, node: dict[str, Any], now: float) -> None:
        name = meta_of(node)["name"]
        self._next_renew[name] = now + self.renew_s
        body = {
            "spec": {
                "holderIdentity": name,
                "renewTime": micro_time(now),
                "leaseDurationSeconds": self.lease_duration_s,
            }
        }
        self.writes += 1
        try:
            self.api.call(
                self.api.coord.patch_namespaced_lease,
                name,
                "kube-node-lease",
                body,
                _content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.api.quiet(
                self.api.coord.create_namespaced_lease,
                "kube-node-lease",
                lease_body(name, meta_of(node).get("uid"), now, self.lease_duration_s),
                ok=(409,),
            )

    def _heartbeat(self, node: dict[str, Any], now: float) -> None:
        name = meta_of(node)["name"]
        self._next_status[name] = now + self.status_s
        conditions = []
        for kind in NODE_CONDITIONS:
            current = condition_of(node, kind)
            status, reason, message = HEALTHY_CONDITIONS[kind]
            conditions.append(
                {
                    "type": kind,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": rfc3339(now),
                    "lastTransitionTime": (current or {}).get("lastTransitionTime") or rfc3339(now),
                }
            )
        self.writes += 1
        self.api.quiet(
            self.api.core.patch_node_status, name, {"status": {"conditions": conditions}}
        )

    def _mark_ready(self, node: dict[str, Any], now: float) -> None:
        name = meta_of(node)["name"]
        if not node_ready(node):
            self._write(
                self.api.core.patch_node_status,
                name,
                {"status": {"conditions": healthy_node_conditions(now)}},
            )
            self.events.emit(
                node,
                "Node",
                "Normal",
                "NodeReady",
                f"Node {name} status is now: NodeReady",
                host=name,
            )
            self._next_status[name] = now + self.status_s

    # -- pods ---------------------------------------------------------------------------

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        meta = meta_of(pod)
        if "conditions" in status:
            status = {**status, "conditions": whole_conditions(status["conditions"])}
        self._write(
            self.api.core.patch_namespaced_pod_status,
            meta["name"],
            meta["namespace"],
            {"status": status},
        )

    def _sync_pod(
        self, pod: dict[str, Any], node: dict[str, Any], now: float, used_ips: set[Any]
    ) -> None:
        meta, status = meta_of(pod), status_of(pod)
        uid = str(meta.get("uid"))
        phase = status.get("phase") or "Pending"
        if meta.get("deletionTimestamp"):
            self._terminate(pod, node, now)
            return
        if phase in ("Succeeded", "Failed"):
            return
        if phase == "Pending":
            if not status.get("containerStatuses"):
                self._create_containers(pod, node, now)
            elif now >= self._due.get(
                uid, time_or(status.get("startTime"), now) + self.clock.to_wall(DEFAULT_START_S)
            ):
                self._start_containers(pod, node, now, used_ips)
            return
        # Running
        exit_code = self.exits.take(uid)
        if exit_code is not None:
            self._finish(pod, now, exit_code)
            return
        annotations = annotations_of(pod)
        started = self._started_at(pod, now)
        ready_after = self._ready_at.get(uid)
        if ready_after is None and READY_SECONDS_ANNOTATION in annotations:
            ready_after = started + self.clock.to_wall(
                _float(annotations[READY_SECONDS_ANNOTATION])
            )
        if ready_after is not None and not pod_ready(pod) and now >= ready_after:
            self._set_ready(pod, now)
        runs = spec_of(pod).get("restartPolicy", "Always") != "Always" and (
            RUN_SECONDS_ANNOTATION in annotations
        )
        run_s = _float(annotations.get(RUN_SECONDS_ANNOTATION))
        if runs and now >= started + self.clock.to_wall(run_s):
            code = int(_float(annotations.get(EXIT_CODE_ANNOTATION, "0")))
            self._finish(pod, now, code)

    def _started_at(self, pod: dict[str, Any], default: float) -> float:
        known = self._started.get(str(meta_of(pod).get("uid")))
        if known is not None:
            return known
        for cs in status_of(pod).get("containerStatuses") or []:
            running = as_dict(as_dict(as_dict(cs).get("state")).get("running"))
            if running.get("startedAt"):
                return time_or(running["startedAt"], default)
        return time_or(status_of(pod).get("startTime"), default)

    @staticmethod
    def _host_ip(node: dict[str, Any]) -> str:
        for a in status_of(node).get("addresses") or []:
            if as_dict(a).get("type") == "InternalIP":
                return str(a.get("address"))
        return ""

    @staticmethod
    def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
        return [as_dict(c) for c in spec_of(pod).get("containers") or []]

    def _create_containers(self, pod: dict[str, Any], node: dict[str, Any], now: float) -> None:
        uid = str(meta_of(pod).get("uid"))
        node_name_ = meta_of(node)["name"]
        pulled = self._images[node_name_]
        delay = 0.0
        for c in self._containers(pod) + [
            as_dict(c) for c in spec_of(pod).get("initContainers") or []
        ]:
            image = str(c.get("image", ""))
            if image in pulled:
                delay = max(delay, self.rng.uniform(1.0, 3.0))
            elif any(b in image for b in _BIG_IMAGES):
                delay = max(delay, self.rng.uniform(20.0, 90.0))
            else:
                delay = max(delay, self.rng.uniform(2.0, 8.0))
        self._due[uid] = now + self.clock.to_wall(delay)  # the pulls take simulated time
        stamp = rfc3339(now)
        names = [str(c.get("name")) for c in self._containers(pod)]
        inits = [as_dict(c) for c in spec_of(pod).get("initContainers") or []]
        conditions: list[dict[str, Any]] = [
            pod_condition("PodReadyToStartContainers", "False", stamp),
            pod_condition(
                "Ready",
                "False",
                stamp,
                "ContainersNotReady",
                f"containers with unready status: [{' '.join(names)}]",
            ),
            pod_condition(
                "ContainersReady",
                "False",
                stamp,
                "ContainersNotReady",
                f"containers with unready status: [{' '.join(names)}]",
            ),
        ]
        if inits:
            init_names = " ".join(str(c.get("name")) for c in inits)
            conditions.append(
                pod_condition(
                    "Initialized",
                    "False",
                    stamp,
                    "ContainersNotInitialized",
                    f"containers with incomplete status: [{init_names}]",
                )
            )
        else:
            conditions.append(pod_condition("Initialized", "True", stamp))
        if condition_of(pod, "PodScheduled") is None:
            conditions.append(pod_condition("PodScheduled", "True", stamp))
        host_ip = self._host_ip(node)
        status: dict[str, Any] = {
            "phase": "Pending",
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "startTime": stamp,
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": str(c.get("name")),
                    "image": str(c.get("image")),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "lastState": {},
                    "state": {
                        "waiting": {"reason": "PodInitializing" if inits else "ContainerCreating"}
                    },
                }
                for c in self._containers(pod)
            ],
        }
        if inits:
            status["initContainerStatuses"] = [
                {
                    "name": str(c.get("name")),
                    "image": str(c.get("image")),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "lastState": {},
                    "state": {"waiting": {"reason": "PodInitializing"}},
                }
                for c in inits
            ]
        self._patch_status(pod, status)

    def _pod_ip(self, pod: dict[str, Any], node: dict[str, Any], used: set[Any]) -> str:
        if spec_of(pod).get("hostNetwork"):
            return self._host_ip(node)
        cidr = str(spec_of(node).get("podCIDR") or "")
        prefix = cidr.rsplit(".", 1)[0] if cidr.count(".") == 3 else "10.244.0"
        name = meta_of(node)["name"]
        for _ in range(253):
            octet = self._ip_next[name]
            self._ip_next[name] = octet + 1 if octet < 254 else 2
            ip = f"{prefix}.{octet}"
            if ip not in used:
                used.add(ip)
                return ip
        return f"{prefix}.{self.rng.randrange(2, 255)}"

    def _image_id(self, image: str) -> str:
        repo = image.split("@", 1)[0]
        tag_sep = repo.rfind(":")
        if tag_sep > repo.rfind("/"):
            repo = repo[:tag_sep]
        return f"{repo}@sha256:{sha256_hex('image', image)}"

    def _start_containers(
        self, pod: dict[str, Any], node: dict[str, Any], now: float, used_ips: set[Any]
    ) -> None:
        meta = meta_of(pod)
        uid = str(meta.get("uid"))
        node_name_ = meta_of(node)["name"]
        stamp = rfc3339(now)
        annotations = annotations_of(pod)
        ready_delay = _float(annotations.get(READY_SECONDS_ANNOTATION, "0"))
        ready = ready_delay <= 0
        if not ready:
            self._ready_at[uid] = now + self.clock.to_wall(ready_delay)
        names = [str(c.get("name")) for c in self._containers(pod)]
        ip = status_of(pod).get("podIP") or self._pod_ip(pod, node, used_ips)
        statuses = []
        for c in self._containers(pod):
            image = str(c.get("image"))
            self._images[node_name_].add(image)
            statuses.append(
                {
                    "name": str(c.get("name")),
                    "image": image,
                    "imageID": self._image_id(image),
                    "containerID": "containerd://"
                    + sha256_hex("container", uid, str(c.get("name"))),
                    "ready": ready,
                    "restartCount": 0,
                    "started": True,
                    "lastState": {},
                    "state": {"running": {"startedAt": stamp}},
                }
            )
        unready = (
            "ContainersNotReady",
            f"containers with unready status: [{' '.join(names)}]",
        )
        conditions = [
            pod_condition("PodReadyToStartContainers", "True", stamp),
            pod_condition("Initialized", "True", stamp),
            pod_condition(
                "ContainersReady", "True" if ready else "False", stamp, *(() if ready else unready)
            ),
            pod_condition(
                "Ready", "True" if ready else "False", stamp, *(() if ready else unready)
            ),
        ]
        status: dict[str, Any] = {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": conditions,
            "containerStatuses": statuses,
        }
        inits = [as_dict(c) for c in spec_of(pod).get("initContainers") or []]
        if inits:
            status["initContainerStatuses"] = [
                {
                    "name": str(c.get("name")),
                    "image": str(c.get("image")),
                    "imageID": self._image_id(str(c.get("image"))),
                    "containerID": "containerd://" + sha256_hex("init", uid, str(c.get("name"))),
                    "ready": True,
                    "restartCount": 0,
                    "started": False,
                    "lastState": {},
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": status_of(pod).get("startTime") or stamp,
                            "finishedAt": stamp,
                        }
                    },
                }
                for c in inits
            ]
        self._patch_status(pod, status)
        self._due.pop(uid, None)
        self._started[uid] = now
        self.events.emit(
            pod,
            "Pod",
            "Normal",
            "Started",
            f"Started container {', '.join(names)}",
            host=node_name_,
        )

    def _set_ready(self, pod: dict[str, Any], now: float) -> None:
        stamp = rfc3339(now)
        statuses = []
        for cs in status_of(pod).get("containerStatuses") or []:
            cs = dict(as_dict(cs))
            cs["ready"] = True
            statuses.append(cs)
        self._patch_status(
            pod,
            {
                "conditions": [
                    pod_condition("ContainersReady", "True", stamp),
                    pod_condition("Ready", "True", stamp),
                ],
                "containerStatuses": statuses,
            },
        )
        self._ready_at.pop(str(meta_of(pod).get("uid")), None)

    def _terminated_statuses(
        self, pod: dict[str, Any], now: float, code: int, reason: str, message: str | None = None
    ) -> list[dict[str, Any]]:
        stamp = rfc3339(now)
        out = []
        for cs in status_of(pod).get("containerStatuses") or []:
            cs = dict(as_dict(cs))
            running = as_dict(as_dict(cs.get("state")).get("running"))
            terminated: dict[str, Any] = {
                "exitCode": code,
                "reason": reason,
                "startedAt": running.get("startedAt"),
                "finishedAt": stamp,
            }
            if cs.get("containerID"):
                terminated["containerID"] = cs["containerID"]
            if message:
                terminated["message"] = message
            cs.update({"ready": False, "started": False, "state": {"terminated": terminated}})
            out.append(cs)
        return out

    def _finish(self, pod: dict[str, Any], now: float, code: int) -> None:
        """The containers exited by themselves (``sim.krea.ai/run-seconds``, or their
        processes said so through ``ContainerExits``)."""
        stamp = rfc3339(now)
        ok = code == 0
        reason = "PodCompleted" if ok else "PodFailed"
        self._patch_status(
            pod,
            {
                "phase": "Succeeded" if ok else "Failed",
                "conditions": [
                    pod_condition("Ready", "False", stamp, reason),
                    pod_condition("ContainersReady", "False", stamp, reason),
                    pod_condition("PodReadyToStartContainers", "False", stamp),
                ],
                "containerStatuses": self._terminated_statuses(
                    pod, now, code, "Completed" if ok else "Error"
                ),
            },
        )

    def _terminate(self, pod: dict[str, Any], node: dict[str, Any], now: float) -> None:
        """Graceful deletion: stop the containers once the grace period is over, report the
        pod terminal (containers exit 143 after SIGTERM) where finalizers will keep it
        around or it had started, then delete it with grace 0."""
        meta, status = meta_of(pod), status_of(pod)
        uid = str(meta.get("uid"))
        grace = meta.get("deletionGracePeriodSeconds")
        finalizers = bool(meta.get("finalizers"))
        started = status.get("phase") == "Running"
        if started and uid not in self._killing:
            self._killing[uid] = now  # SIGTERM: the grace period runs from here
            names = [str(c.get("name")) for c in self._containers(pod)]
            self.events.emit(
                pod,
                "Pod",
                "Normal",
                "Killing",
                f"Stopping container {', '.join(names)}",
                host=meta_of(node)["name"],
            )
        # The containers take their whole grace period to stop, in simulated seconds; the
        # kill at the end of the grace period on the wall clock comes first below speed 1.
        grace_s = float(grace or 0)
        deadline = self._killing.get(uid, now) + min(grace_s, self.clock.to_wall(grace_s))
        if started and now < deadline:
            return
        if not is_terminal(pod) and (started or finalizers):
            stamp = rfc3339(now)
            self._patch_status(
                pod,
                {
                    "phase": "Failed",
                    "conditions": [
                        pod_condition("Ready", "False", stamp, "PodFailed"),
                        pod_condition("ContainersReady", "False", stamp, "PodFailed"),
                        pod_condition("PodReadyToStartContainers", "False", stamp),
                    ],
                    "containerStatuses": self._terminated_statuses(pod, now, 143, "Error"),
                },
            )
        if grace == 0 and finalizers:
            return  # the final delete was asked for; the finalizers hold the pod
        self._write(
            self.api.core.delete_namespaced_pod,
            meta["name"],
            meta["namespace"],
            # In the body: the API server reads DeleteOptions from the body when there is
            # one and ignores the query string then (what the real kubelet sends).
            body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
        )

    def _fail_pod(self, pod: dict[str, Any], node_name_: str, cause: str, now: float) -> None:
        """The node died under a pod that had started."""
        status = status_of(pod)
        if is_terminal(pod):
            return
        if status.get("phase") != "Running" and not status.get("containerStatuses"):
            return  # never started: it waits for the node to come back
        stamp = rfc3339(now)
        message = (
            f"Node {node_name_} failed ({cause}): the kubelet stopped and the pod's "
            "containers were lost"
        )
        self._patch_status(
            pod,
            {
                "phase": "Failed",
                "reason": "NodeFailure",
                "message": message,
                "conditions": [
                    pod_condition(
                        "DisruptionTarget", "True", stamp, "TerminationByKubelet", message
                    ),
                    pod_condition("Ready", "False", stamp, "PodFailed"),
                    pod_condition("ContainersReady", "False", stamp, "PodFailed"),
                    pod_condition("PodReadyToStartContainers", "False", stamp),
                ],
                "containerStatuses": self._terminated_statuses(
                    pod,
                    now,
                    137,
                    "ContainerStatusUnknown",
                    "The container could not be located when the pod was terminated",
                ),
            },
        )


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0
