"""Leader election through a ``coordination.k8s.io/v1`` Lease, fenced.

One Lease per controller (``krea-ops-<controller>`` in the controllers' namespace), so a
replica may lead one controller and follow another. The record is the one client-go and
controller-runtime write (``holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``,
``renewTime`` as MicroTime, ``leaseTransitions``), so ``kubectl get lease`` and other
tools read it as usual, and every write carries the ``resourceVersion`` read: of two
replicas that try to take a Lease at once, one gets 409 and stays a follower.

Settings (controller-runtime's defaults, ``pkg/manager/internal.go``):

* ``lease_duration_s`` 15: how long a follower waits, from the moment *it* first saw the
  current record unchanged, before it may take the Lease over (its own clock: clock skew
  between replicas does not matter, only their rates);
* ``renew_deadline_s`` 10: how long the leader keeps acting after its last successful
  renew. **The fence:** ``is_leader(now)`` is true only while the last successful renew
  began less than this long ago, so a leader whose renews stall (API server partitioned
  away, CPU starved, a request hanging) stops acting at least
  ``lease_duration_s - renew_deadline_s`` (5 s) before any other replica can acquire;
* ``retry_period_s`` 2: how often the leader renews and a follower tries to acquire.

They must satisfy lease duration > renew deadline > 1.2 x retry period (client-go's
check). A renew's start time, not its end, is what counts: a request that took long
still proves only that the Lease was ours when it was sent. A renew answered only after
the renew deadline makes the replica step aside (release the Lease, try again after a
lease duration): its late renews would otherwise keep the Lease its own while its fence
never lets it act, and no replica answered in time could take over.

Why not ``kubernetes.leaderelection`` (``LeaseLock``) of the official client: its
``LeaderElection.run()`` blocks for ever in ``acquire()`` and then in ``renew_loop()``,
and when renewing fails it calls ``onstopped_leading`` but leaves the
``onstarted_leading`` thread running: nothing tells the work that it must stop (the
split brain of kubernetes #23731). It exposes no "I am leader and renewed within the
renew deadline" to check before each write, its API calls carry no timeout (a hanging
renew blocks the loop past the deadline), its ``LeaseLock`` talks through the client's
global default configuration instead of a given ``ApiClient`` (two replicas in one
process, or a kubeconfig context, cannot be told apart), it times with the wall clock,
and it cannot be stepped with a simulated time. This module keeps its algorithm and its
Lease record on the same API and adds the fence, timeouts, a given client and clock,
and release on shutdown (client-go's ``ReleaseOnCancel``: the next replica need not
wait a whole lease duration).
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from krea_ops.errors import BadInput, Unavailable
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.times import micro_time, parse_time

log = logging.getLogger("krea_ops.controllers.leader")

LEASE_DURATION_S = 15.0
RENEW_DEADLINE_S = 10.0
RETRY_PERIOD_S = 2.0
JITTER_FACTOR = 1.2  # client-go: followers wait retry x [1, 1.2)
LEASE_PREFIX = "krea-ops-"


@dataclass(frozen=True)
class ElectionSettings:
    """The three timings above, checked as client-go checks them."""

    lease_duration_s: float = LEASE_DURATION_S
    renew_deadline_s: float = RENEW_DEADLINE_S
    retry_period_s: float = RETRY_PERIOD_S

    def __post_init__(self) -> None:
        if min(self.lease_duration_s, self.renew_deadline_s, self.retry_period_s) <= 0:
            raise BadInput("leader election timings must be positive")
        if self.lease_duration_s <= self.renew_deadline_s:
            raise BadInput("the lease duration must be longer than the renew deadline")
        if self.renew_deadline_s <= JITTER_FACTOR * self.retry_period_s:
            raise BadInput("the renew deadline must be longer than 1.2 x the retry period")


def lease_name(controller: str) -> str:
    """The Lease of one controller: ``krea-ops-burst-taint``."""
    return f"{LEASE_PREFIX}{controller}"


def new_identity(env: Mapping[str, str] | None = None) -> str:
    """Who this replica is in the Lease: the pod's name (``POD_NAME``, set from the
    downward API; else ``HOSTNAME``, which a pod's is; else the host name) and a random
    suffix, so a restarted pod of the same name is a new holder."""
    env = os.environ if env is None else env
    base = env.get("POD_NAME") or env.get("HOSTNAME") or socket.gethostname() or "krea-ops"
    return f"{base}_{secrets.token_hex(4)}"


class LostLeadership(Unavailable):
    """Raised by ``fence()``: this replica may not act (never led, or its last renew is
    older than the renew deadline). An ``Unavailable``: whatever was about to write
    (an eviction on a worker thread, the state) fails as if the API were unreachable."""


@dataclass(frozen=True)
class LeaseRecord:
    """The election record a Lease holds. Times are Unix seconds (as written by the
    holder's wall clock: for people to read, never to decide by)."""

    holder: str | None
    lease_duration_s: float | None
    acquire_time: float | None
    renew_time: float | None
    transitions: int
    resource_version: str

    @staticmethod
    def of(obj: Mapping[str, Any]) -> LeaseRecord:
        spec = obj.get("spec") or {}
        meta = obj.get("metadata") or {}
        duration = spec.get("leaseDurationSeconds")
        return LeaseRecord(
            holder=spec.get("holderIdentity") or None,
            lease_duration_s=float(duration) if duration else None,
            acquire_time=parse_time(spec.get("acquireTime")),
            renew_time=parse_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str(meta.get("resourceVersion") or ""),
        )

    def same_as(self, other: LeaseRecord | None) -> bool:
        """The same record, what a follower watches for change: any write to the Lease
        (a new ``resourceVersion``) counts as one, so a holder whose wall clock stands
        still still proves it is alive by renewing."""
        return other is not None and (
            self.holder,
            self.lease_duration_s,
            self.acquire_time,
            self.renew_time,
            self.transitions,
            self.resource_version,
        ) == (
            other.holder,
            other.lease_duration_s,
            other.acquire_time,
            other.renew_time,
            other.transitions,
            other.resource_version,
        )


def lease_path(namespace: str, name: str = "") -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace)}/leases"
    return f"{base}/{quote(name)}" if name else base


def read_lease(cluster: Cluster, namespace: str, name: str) -> LeaseRecord | None:
    """The record of one Lease; None when there is none. Unavailable when it cannot be
    read."""
    what = f"get lease {namespace}/{name}"
    answer = cluster.request(what, "GET", lease_path(namespace, name))
    if answer.status == 404:
        return None
    if not answer.ok or answer.body is None:
        raise cluster.refusal(what, answer)
    return LeaseRecord.of(answer.body)


def _without_retries(api: Any) -> Any:
    """An ``ApiClient`` of the same configuration whose requests are made once."""
    import copy

    from kubernetes import client

    config = copy.deepcopy(api.configuration)
    config.retries = False
    return client.ApiClient(config)


class LeaderElector:
    """One replica's candidacy for one Lease.

    ``try_acquire_or_renew(now)`` makes one attempt (a GET, then a create or a PUT with
    the ``resourceVersion`` read); ``run(stop)`` repeats it every retry period on the
    calling thread until ``stop`` is set, then releases the Lease. ``is_leader(now)`` and
    ``fence()`` are the fence, safe to call from any thread. ``clock`` is monotonic
    seconds (the fence's and the follower's time), ``wall`` Unix seconds (only written
    into the record); a test passes both and calls ``try_acquire_or_renew`` with a
    simulated ``now``.
    """

    def __init__(
        self,
        cluster: Cluster,
        name: str,
        *,
        namespace: str,
        identity: str,
        settings: ElectionSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings or ElectionSettings()
        # a renew that has not answered within the renew deadline is worth nothing: give
        # up on it then, and never retry it behind our back (urllib3 retries a timed-out
        # read three times by default: 40 s for one renew)
        timeout = min(cluster.timeout_s, self.settings.renew_deadline_s)
        self.cluster = Cluster(_without_retries(cluster.api), timeout_s=timeout)
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.clock = clock
        self.wall = wall
        self._lock = threading.Lock()
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None  # start of the last successful renew/acquire
        self._resting_until: float | None = None  # stepped aside after a too slow renew
        self.last_error: str | None = None

    # -- the fence ----------------------------------------------------------------------

    def is_leader(self, now: float | None = None) -> bool:
        """True while the last successful renew began within the renew deadline."""
        now = self.clock() if now is None else now
        with self._lock:
            renewed = self._renewed_at
        return renewed is not None and now - renewed < self.settings.renew_deadline_s

    def fence(self) -> None:
        """Raise ``LostLeadership`` unless this replica leads now."""
        if not self.is_leader():
            raise LostLeadership(
                f"not the leader of lease {self.namespace}/{self.name} any more "
                f"(no renew within {self.settings.renew_deadline_s:g}s); stopped acting"
            )

    @property
    def holder(self) -> str | None:
        """The holder this replica last saw in the Lease (itself when it leads)."""
        with self._lock:
            return self._observed.holder if self._observed is not None else None

    # -- one attempt ----------------------------------------------------------------------

    def try_acquire_or_renew(self, now: float | None = None) -> bool:
        """One attempt to take the Lease or to renew it; True when this replica holds it
        now. A failure (unreachable, 409, held by another) is False, never an error."""
        started = self.clock() if now is None else now
        if self._resting_until is not None and started < self._resting_until:
            return False
        self._resting_until = None
        try:
            took = self._attempt(started)
        except Unavailable as exc:
            self.last_error = str(exc)
            log.info("lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        if took and self.clock() - started >= self.settings.renew_deadline_s:
            self._step_aside(started)
            return False
        return took

    def _step_aside(self, started: float) -> None:
        """A renew (or acquire) answered only after the renew deadline: it proves nothing
        for the fence, and renewing so keeps the Lease ours while we may never act (the
        others see it renewed and never take over). Like a client-go replica whose renew
        deadline passed, give it up: release it (best effort: if that is slow too, it
        expires) and try again only after a lease duration, so a replica whose calls are
        answered in time takes over."""
        took = self.clock() - started
        self.last_error = (
            f"lease {self.namespace}/{self.name}: renewed, but the answer took {took:.1f}s "
            f"(renew deadline {self.settings.renew_deadline_s:g}s); stepped aside"
        )
        log.warning("%s", self.last_error)
        with self._lock:
            self._renewed_at = started  # so release() sees it held (not a leader: too old)
        self.release()
        self._resting_until = self.clock() + self.settings.lease_duration_s

    def _attempt(self, started: float) -> bool:
        path = lease_path(self.namespace, self.name)
        what = f"lease {self.namespace}/{self.name}"
        answer = self.cluster.request(f"get {what}", "GET", path)
        wall = micro_time(self.wall())
        if answer.status == 404:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(wall, wall, 0),
            }
            created = self.cluster.request(
                f"create {what}", "POST", lease_path(self.namespace), body=body
            )
            if not created.ok or created.body is None:
                self.last_error = f"create {what}: HTTP {created.status} {created.message}"
                return False
            return self._took(LeaseRecord.of(created.body), started)
        if not answer.ok or answer.body is None:
            raise self.cluster.refusal(f"get {what}", answer)
        current = answer.body
        record = LeaseRecord.of(current)
        with self._lock:
            if not record.same_as(self._observed):
                self._observed, self._observed_at = record, started
            observed_at = self._observed_at
        ours = record.holder == self.identity
        duration = record.lease_duration_s or self.settings.lease_duration_s
        if record.holder and not ours and observed_at + duration > started:
            return False  # held by another and not expired as we have watched it
        acquire = (
            micro_time(record.acquire_time) if ours and record.acquire_time is not None else wall
        )
        transitions = record.transitions + (0 if ours else 1)
        body = dict(current)
        body["spec"] = {**(current.get("spec") or {}), **self._spec(acquire, wall, transitions)}
        # a PUT carries the resourceVersion read: whoever wrote in between wins
        replaced = self.cluster.request(f"update {what}", "PUT", path, body=body)
        if not replaced.ok or replaced.body is None:
            self.last_error = f"update {what}: HTTP {replaced.status} {replaced.message}"
            return False
        if not ours:
            log.info("lease %s/%s acquired by %s", self.namespace, self.name, self.identity)
        return self._took(LeaseRecord.of(replaced.body), started)

    def _spec(self, acquire: str, renew: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": round(self.settings.lease_duration_s),
            "acquireTime": acquire,
            "renewTime": renew,
            "leaseTransitions": transitions,
        }

    def _took(self, record: LeaseRecord, started: float) -> bool:
        with self._lock:
            self._observed, self._observed_at = record, started
            self._renewed_at = started
        self.last_error = None
        return True

    # -- the loop -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Acquire, then renew, every retry period until ``stop`` is set (a follower's
        wait is jittered, as client-go's); then release the Lease if held."""
        try:
            while not stop.is_set():
                held = self.try_acquire_or_renew()
                wait = self.settings.retry_period_s
                if not held:
                    wait *= 1 + (JITTER_FACTOR - 1) * random.random()
                stop.wait(wait)
        finally:
            self.release()

    def close(self) -> None:
        """Close this elector's connections (after ``release``)."""
        self.cluster.close()

    def release(self) -> None:
        """Give the Lease up if this replica holds it (holder cleared, duration 1 s), so
        the next replica takes over at its next try instead of after a lease duration.
        Best effort: a release that fails leaves the Lease to expire."""
        with self._lock:
            was = self._renewed_at is not None
            self._renewed_at = None
        if not was:
            return
        path = lease_path(self.namespace, self.name)
        try:
            answer = self.cluster.request("get lease", "GET", path)
            if not answer.ok or answer.body is None:
                return
            if LeaseRecord.of(answer.body).holder != self.identity:
                return
            body = dict(answer.body)
            now = micro_time(self.wall())
            spec = {k: v for k, v in (answer.body.get("spec") or {}).items()}
            spec.pop("holderIdentity", None)
            body["spec"] = {**spec, "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now}
            self.cluster.request("release lease", "PUT", path, body=body)
        except Unavailable as exc:
            log.info("lease %s/%s not released: %s", self.namespace, self.name, exc)
