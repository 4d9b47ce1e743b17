"""Leader election on a Lease of the simulated API server: one leader of two, handover
when the leader dies or lets go, and the fence: a leader whose API calls stall stops
acting before anyone else can take over. Time is simulated (``now``) except where the
threads of ``run`` are the point."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from krea_ops.controllers.base import NAMESPACE
from krea_ops.controllers.leader import (
    ElectionSettings,
    LeaderElector,
    LostLeadership,
    new_identity,
    read_lease,
)
from krea_ops.errors import BadInput
from krea_ops.kube.cluster import Cluster
from tests.conftest import wait_for
from tests.controllers.conftest import T0, Clock, PausableProxy

LEASE = "krea-ops-burst-taint"
STEP_S = 0.5  # how often the simulated replicas try (well under the 2 s retry period)


def elector(cluster: Cluster, identity: str, clock: Clock, **kw: Any) -> LeaderElector:
    return LeaderElector(
        cluster,
        LEASE,
        namespace=NAMESPACE,
        identity=identity,
        clock=clock.mono,
        wall=clock.wall,
        **kw,
    )


@pytest.fixture
def proxied(sim: Any, proxy: PausableProxy) -> Iterator[Cluster]:
    """A client of the same API server through the proxy (a timeout of 2 s per call)."""
    api = sim.api_client()
    api.configuration.host = f"https://127.0.0.1:{proxy.port}"
    try:
        yield Cluster(api, timeout_s=2)
    finally:
        api.close()


def ticks(start: float, end: float, step: float = STEP_S) -> Iterator[float]:
    t = start
    while t <= end:
        yield t
        t += step


def test_of_two_replicas_exactly_one_leads(ops: Cluster) -> None:
    clock = Clock()
    a, b = elector(ops, "a", clock), elector(ops, "b", clock)
    for t in ticks(0, 60):
        clock.t = t
        a.try_acquire_or_renew(t)
        b.try_acquire_or_renew(t)
        assert [e.is_leader(t) for e in (a, b)].count(True) == 1, t
    assert a.is_leader() and not b.is_leader()  # the first keeps it while it renews
    lease = read_lease(ops, NAMESPACE, LEASE)
    assert lease is not None and lease.holder == "a"
    assert lease.renew_time == pytest.approx(T0 + 60, abs=1e-3)
    assert lease.lease_duration_s == 15 and lease.transitions == 0


def test_the_leader_killed_hands_over_within_the_lease_duration(ops: Cluster) -> None:
    clock = Clock()
    a, b = elector(ops, "a", clock), elector(ops, "b", clock)
    assert a.try_acquire_or_renew(0.0)
    assert not b.try_acquire_or_renew(0.0)
    # a dies at t=0: its last renew; b keeps trying every retry period
    took_over = None
    for t in ticks(2, 40, 2.0):
        if b.try_acquire_or_renew(t):
            took_over = t
            break
        assert not b.is_leader(t)
    assert took_over is not None
    assert took_over <= a.settings.lease_duration_s + a.settings.retry_period_s
    lease = read_lease(ops, NAMESPACE, LEASE)
    assert lease is not None and lease.holder == "b" and lease.transitions == 1


def test_a_released_lease_is_taken_at_the_next_try(ops: Cluster) -> None:
    clock = Clock()
    a, b = elector(ops, "a", clock), elector(ops, "b", clock)
    assert a.try_acquire_or_renew(0.0)
    assert not b.try_acquire_or_renew(1.0)
    a.release()
    assert not a.is_leader(1.0)
    assert b.try_acquire_or_renew(2.0)


def test_a_leader_whose_api_calls_stall_stops_acting_before_another_starts(
    ops: Cluster, proxied: Cluster, proxy: PausableProxy
) -> None:
    """The leader reaches the API server through a proxy that stops forwarding: its
    renews hang (and time out); the other replica reaches the server directly."""
    clock = Clock()
    a = elector(proxied, "a", clock)
    b = elector(ops, "b", clock)
    assert a.try_acquire_or_renew(0.0)
    assert not b.try_acquire_or_renew(0.0)
    a.cluster.timeout_s = 1  # each hanging call costs that (short, to keep the test so)
    proxy.pause()
    leading: dict[float, tuple[bool, bool]] = {}
    for t in ticks(0.5, 30):
        clock.t = t
        if t in (2.0, 4.0):  # its renew loop tries (and hangs) at its retry periods
            assert not a.try_acquire_or_renew(t)
        b.try_acquire_or_renew(t)
        leading[t] = (a.is_leader(t), b.is_leader(t))
    assert all(not (x and y) for x, y in leading.values())
    a_stopped = min(t for t, (x, _) in leading.items() if not x)
    b_started = min(t for t, (_, y) in leading.items() if y)
    assert a_stopped <= a.settings.renew_deadline_s
    assert b_started >= a.settings.lease_duration_s  # after a's last renew at 0
    assert a_stopped < b_started
    with pytest.raises(LostLeadership, match="not the leader"):
        a.fence()
    assert "cannot reach the API server" in (a.last_error or "")
    # the partition heals: a sees b's Lease and stays a follower
    proxy.resume()
    clock.t = 31.0
    assert not a.try_acquire_or_renew(31.0)
    assert not a.is_leader(31.0) and b.is_leader(31.0)


def test_two_replicas_running_elect_one_and_hand_over_when_it_stops(ops: Cluster) -> None:
    """The real loops on threads (short timings): one leads; stopping it releases the
    Lease and the other takes over."""
    fast = ElectionSettings(lease_duration_s=3, renew_deadline_s=2, retry_period_s=0.25)
    a = LeaderElector(ops, LEASE, namespace=NAMESPACE, identity="a", settings=fast)
    b = LeaderElector(ops, LEASE, namespace=NAMESPACE, identity="b", settings=fast)
    stops = {"a": threading.Event(), "b": threading.Event()}
    threads = [
        threading.Thread(target=e.run, args=(stops[e.identity],), daemon=True) for e in (a, b)
    ]
    for t in threads:
        t.start()
    try:
        first = wait_for(lambda: [e for e in (a, b) if e.is_leader()], timeout=30)
        (leader,) = first
        other = b if leader is a else a
        stops[leader.identity].set()
        wait_for(lambda: other.is_leader(), timeout=30)
        assert not leader.is_leader()
        lease = read_lease(ops, NAMESPACE, LEASE)
        assert lease is not None and lease.holder == other.identity
    finally:
        for s in stops.values():
            s.set()
        for t in threads:
            t.join(timeout=30)


def test_timings_are_checked_and_identities_are_unique() -> None:
    with pytest.raises(BadInput, match="longer than the renew deadline"):
        ElectionSettings(lease_duration_s=10, renew_deadline_s=10)
    with pytest.raises(BadInput, match=r"1\.2 x the retry period"):
        ElectionSettings(lease_duration_s=15, renew_deadline_s=2, retry_period_s=2)
    one = new_identity({"POD_NAME": "krea-ops-controllers-7d9f-abcde"})
    two = new_identity({"POD_NAME": "krea-ops-controllers-7d9f-abcde"})
    assert one.startswith("krea-ops-controllers-7d9f-abcde_") and one != two
