"""Leader election under faults, over many seeded runs: three replicas of a controller
elect through a Lease of the simulated API server and do work through the fence; the
leader is killed, partitioned, refused or stalled on its Lease, the whole API server
stops answering, or one replica's wall clock jumps 30 s. Never two replicas believing
they lead, never one work item written twice, and the longest time without work done.

Time is simulated: each replica's elector gets its own monotonic clock (a different
boot time) and wall clock (which a jump moves), and the loop steps them in 0.5 s ticks;
only the API requests are real (the simulated API server over loopback HTTPS). A replica
renews every retry period (2 s) and, as a follower, tries every 2-2.4 s (client-go's
jitter, seeded).

The work: each tick, a replica that leads (``is_leader``) and has nothing in hand reads
the work ConfigMap and picks the first item not done; one second later it writes that
item done through a ``FencedCluster`` (the runner's: the fence is asked before every
write, and a replica that lost its Lease writes nothing). A replica that stopped leading
in between still tries its write, as a real pass would: only the fence stops it. So a
split brain (two replicas acting at once) would show as an item written twice.

Faults (one per run, on the replica leading at 8-16 s):

* ``killed``: the process dies (no release); a new replica (a new identity) starts
  5-30 s later.
* ``partitioned``: every request of that replica is dropped by the API server's fault
  switch (a connection closed with no answer) for 5-25 s, then heals.
* ``lease refused``: its Lease writes are refused (503, 500, 429 or 409, drawn) for 5-25 s
  while its other writes go through: only the fence keeps it from acting.
* ``lease stalled``: for 5-25 s each of its Lease requests is answered 3-14 s after it
  was sent (the call is made then, with the time it was sent as its start: what the
  fence counts); its other writes go through. One that takes 10 s or more (the client's
  timeout, the renew deadline) counts for nothing, and the leader steps aside.
* ``api stalled``: the API server answers no one for 5-25 s.
* ``clock jump``: the leader's wall clock jumps +30 s or -30 s, and a follower's the other
  way 0-5 s later. Followers time the Lease from when *they* saw it change, by their own
  monotonic clock (as client-go does: ``observedTime``), and the fence is the leader's
  monotonic clock, so the stamps written (``renewTime`` 30 s off) change nothing: no
  handover at all. A replica that timed expiry from ``renewTime`` would take over at once
  when the leader's clock jumped back.
"""

from __future__ import annotations

import itertools
import random
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from krea_ops.controllers.base import NAMESPACE
from krea_ops.controllers.leader import LeaderElector, LostLeadership, read_lease
from krea_ops.controllers.loop import FencedCluster
from krea_ops.errors import Unavailable
from krea_ops.kube.cluster import Cluster
from krea_ops.runbook.execute import RecordingCluster
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.controllers.conftest import T0
from tests.kube.conftest import create

KINDS = ("killed", "partitioned", "lease refused", "lease stalled", "api stalled", "clock jump")
REPLICAS = 3
TICK_S = 0.5
RUN_S = 50.0
ACT_AFTER_S = 1.0  # from deciding on an item to writing it
ITEMS = 80
RENEW_TIMEOUT_S = 10.0  # the elector's client timeout: the renew deadline


@dataclass
class Replica:
    identity: str
    boot: float  # its monotonic clock reads t + boot
    started: float = 0.0
    wall_skew: float = 0.0
    alive: bool = True
    next_try: float = 0.0
    in_hand: tuple[str, float] | None = None  # (item, when decided)
    stalled: tuple[float, float] | None = None  # a Lease call (sent, answered at)
    elector: LeaderElector = field(init=False)
    work: Cluster = field(init=False)
    recorder: RecordingCluster = field(init=False)


@dataclass
class Outcome:
    kind: str
    seed: int
    both_leading: int  # ticks at which two replicas believed they led
    duplicates: int  # items written more than once
    items_done: int
    recover_s: float  # the longest time without an item written, from the fault on
    handovers: int  # Lease transitions
    leader_ticks: int
    last_write_s: float  # when the last item was written (the run lasts RUN_S)


class Scenario:
    """One run: ``REPLICAS`` replicas, one fault of ``kind``, seeded."""

    def __init__(self, cluster: Cluster, sim: LocalApiServer, kind: str, seed: int) -> None:
        self.cluster, self.sim, self.kind, self.seed = cluster, sim, kind, seed
        self.rng = random.Random(seed)
        self.t = 0.0
        self.lease = f"krea-ops-fault-{seed}"
        self.work_path = f"/api/v1/namespaces/{NAMESPACE}/configmaps/work-{seed}"
        create(cluster, f"/api/v1/namespaces/{NAMESPACE}/configmaps",
               {"metadata": {"name": f"work-{seed}"}, "data": {}})  # fmt: skip
        self.replicas: list[Replica] = []
        self.written: list[tuple[str, str, float]] = []  # (item, replica, t)
        self.fault_at = self.rng.uniform(8, 16)
        self.fault_for = self.rng.uniform(5, 25)  # over by 41 s: the run sees the end
        self.victim: Replica | None = None
        self.refusal = self.rng.choice((503, 500, 429, 409))
        self._armed: list[dict[str, Any]] | None = None
        for _ in range(REPLICAS):
            self.add_replica()

    # -- replicas ----------------------------------------------------------------------

    def add_replica(self) -> Replica:
        r = Replica(f"replica-{len(self.replicas)}-{self.seed}", boot=self.rng.uniform(0, 1e5))
        r.started = self.t
        r.next_try = self.t + self.rng.uniform(0, 1)
        r.elector = LeaderElector(
            self.cluster,
            self.lease,
            namespace=NAMESPACE,
            identity=r.identity,
            clock=lambda: self.t + r.boot,
            wall=lambda: T0 + self.t + r.wall_skew,
        )
        r.recorder = RecordingCluster(self.cluster)
        r.work = FencedCluster(r.recorder, r.elector.fence)
        self.replicas.append(r)
        return r

    def mono(self, r: Replica) -> float:
        return self.t + r.boot

    def leaders(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive and r.elector.is_leader(self.mono(r))]

    # -- the fault switch, per replica -----------------------------------------------------

    def faulting(self) -> bool:
        return self.fault_at <= self.t < self.fault_at + self.fault_for

    def arm_for(self, r: Replica, lease_call: bool) -> None:
        """The API server's fault rules in force for ``r``'s next requests."""
        rules: list[dict[str, Any]] = []
        if self.faulting():
            if self.kind == "api stalled" or (self.kind == "partitioned" and r is self.victim):
                rules = [{"verbs": ["*"], "resources": ["*"], "drop": True}]
            elif self.kind == "lease refused" and r is self.victim and lease_call:
                rules = [{"verbs": ["update"], "resources": ["leases"], "status": self.refusal}]
        if rules != self._armed:
            self.sim.api.faults.set(rules)
            self._armed = rules

    # -- one tick ----------------------------------------------------------------------

    def tick(self) -> None:
        if self.victim is None and self.t >= self.fault_at:
            self.inject()
        for r in list(self.replicas):
            if r.alive:
                self.elect(r)
        for r in list(self.replicas):
            if r.alive:
                self.act(r)

    def inject(self) -> None:
        leading = self.leaders()  # the fault hits the leader
        if not leading:
            self.fault_at = self.t + TICK_S  # not elected yet: a tick later
            return
        (leader,) = leading
        self.victim = leader
        if self.kind == "killed":
            leader.alive = False
            self.restart_at = self.t + self.rng.uniform(5, 30)
        elif self.kind == "clock jump":
            jump = -30.0 if (self.seed // len(KINDS)) % 2 else 30.0  # both ways, in turn
            leader.wall_skew = jump
            self.jump_follower = (self.t + self.rng.uniform(0, 5), -jump)

    def elect(self, r: Replica) -> None:
        if r.stalled is not None:
            sent, answered = r.stalled
            if self.t < answered:
                return
            r.stalled = None
            self.arm_for(r, lease_call=True)
            r.elector.try_acquire_or_renew(self.mono(r) - (self.t - sent))
            # a call past the client's timeout was given up on: its answer counts for
            # nothing (its start is ≥ the renew deadline ago: the fence refuses anyway)
            self.schedule(r)
            return
        if self.t < r.next_try:
            return
        if self.kind == "lease stalled" and r is self.victim and self.faulting():
            stall = self.rng.uniform(3, 14)
            r.stalled = (self.t, self.t + min(stall, RENEW_TIMEOUT_S))
            return
        self.arm_for(r, lease_call=True)
        r.elector.try_acquire_or_renew(self.mono(r))
        self.schedule(r)

    def schedule(self, r: Replica) -> None:
        retry = r.elector.settings.retry_period_s
        if not r.elector.is_leader(self.mono(r)):
            retry *= 1 + 0.2 * self.rng.random()
        r.next_try = self.t + retry

    def act(self, r: Replica) -> None:
        self.arm_for(r, lease_call=False)
        if r.in_hand is None:
            if not r.elector.is_leader(self.mono(r)):
                return
            try:
                answer = self.cluster.request("get work", "GET", self.work_path)
            except Unavailable:
                return
            if not answer.ok:
                return
            done = (answer.body or {}).get("data") or {}
            todo = [f"item-{i:03d}" for i in range(ITEMS) if f"item-{i:03d}" not in done]
            if todo:
                r.in_hand = (todo[0], self.t)
            return
        item, decided = r.in_hand
        if self.t - decided < ACT_AFTER_S:
            return
        r.in_hand = None  # whatever happens, the pass ends here
        try:
            answer = r.work.request(
                f"mark {item}",
                "PATCH",
                self.work_path,
                body={"data": {item: r.identity}},
                content_type="application/merge-patch+json",
            )
        except (LostLeadership, Unavailable):
            return
        if answer.ok:
            self.written.append((item, r.identity, self.t))

    def run(self) -> Outcome:
        both = leader_ticks = 0
        while self.t <= RUN_S:
            if self.kind == "killed" and self.victim is not None and not self.victim.alive \
                    and self.t >= self.restart_at and len(self.replicas) == REPLICAS:  # fmt: skip
                self.add_replica()
            if self.kind == "clock jump" and self.victim is not None:
                at, jump = self.jump_follower
                followers = [r for r in self.replicas if r is not self.victim]
                if self.t >= at and followers[0].wall_skew == 0:
                    followers[0].wall_skew = jump
            self.tick()
            leading = self.leaders()
            both += len(leading) > 1
            leader_ticks += len(leading) == 1
            self.t += TICK_S
        self.sim.api.faults.set([])
        self._armed = None
        counts = Counter(item for item, _, _ in self.written)
        # the longest time without an item written, from the fault on: the outage
        after = [self.fault_at, *sorted(t for _, _, t in self.written if t >= self.fault_at)]
        outage = max((b - a for a, b in itertools.pairwise(after)), default=float("inf"))
        lease = read_lease(self.cluster, NAMESPACE, self.lease)
        # the recorders saw every write that was sent: one per item marked, no more
        sent = sum(
            1 for r in self.replicas for c in r.recorder.made if c.method == "PATCH" and c.status
        )
        assert sent >= len(self.written)
        return Outcome(
            kind=self.kind,
            seed=self.seed,
            both_leading=both,
            duplicates=sum(n - 1 for n in counts.values() if n > 1),
            items_done=len(counts),
            recover_s=outage,
            handovers=lease.transitions if lease else 0,
            leader_ticks=leader_ticks,
            last_write_s=max((t for _, _, t in self.written), default=0.0),
        )


def run_scenarios(
    cluster: Cluster, sim: LocalApiServer, runs: int, seed: int = 0,
    progress: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:  # fmt: skip
    """``runs`` runs, the fault kinds in turn, seeded from ``seed``."""
    out = []
    for i in range(runs):
        outcome = Scenario(cluster, sim, KINDS[i % len(KINDS)], seed * 100_000 + i).run()
        out.append(outcome)
        if progress is not None:
            progress(outcome)
    return out


def summary(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    """Per fault kind: runs, ticks with two leaders, duplicates, recovery median/max."""
    table: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        these = [o for o in outcomes if o.kind == kind]
        if not these:
            continue
        recover = [o.recover_s for o in these]
        table[kind] = {
            "runs": len(these),
            "both_leading": sum(o.both_leading for o in these),
            "duplicates": sum(o.duplicates for o in these),
            "items": sum(o.items_done for o in these),
            "handovers": sum(o.handovers for o in these),
            "recover_median_s": statistics.median(recover),
            "recover_max_s": max(recover),
        }
    return table


@pytest.fixture
def ops(cluster: Cluster) -> Cluster:
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    return cluster


def test_many_runs_never_two_leaders_acting_and_no_item_done_twice(
    ops: Cluster, sim: LocalApiServer
) -> None:
    outcomes = run_scenarios(ops, sim, runs=4 * len(KINDS), seed=1)
    table = summary(outcomes)
    for kind, row in table.items():
        assert row["both_leading"] == 0, (kind, row)
        assert row["duplicates"] == 0, (kind, row)
        assert row["items"] > 0, (kind, row)
    for o in outcomes:
        assert o.recover_s != float("inf"), o  # work went on after every fault
        assert o.last_write_s >= RUN_S - 5, o  # and was going on at the end
    # a clock jump hands nothing over; a killed leader always is replaced
    assert all(o.handovers == 0 for o in outcomes if o.kind == "clock jump")
    assert all(o.handovers >= 1 for o in outcomes if o.kind == "killed")
    # the fence held a refused or stalled leader back while others took over
    assert any(o.handovers >= 1 for o in outcomes if o.kind == "lease refused")
    # a leader whose renews come back too late steps aside for one that is answered
    assert any(o.handovers >= 1 for o in outcomes if o.kind == "lease stalled")


def test_a_leader_whose_renews_are_answered_too_late_steps_aside(ops: Cluster) -> None:
    """From t=2 on, every Lease call of the leader is answered 12 s after it was sent
    (past the renew deadline; made then, with its send time as start). Its late renews
    would keep the Lease its own for ever while its fence never lets it act; instead it
    steps aside (releases, rests a lease duration) and the other replica takes over."""
    t = 0.0
    a, b = (
        LeaderElector(
            ops,
            "krea-ops-slow",
            namespace=NAMESPACE,
            identity=name,
            clock=lambda: t,
            wall=lambda: T0 + t,
        )
        for name in ("a", "b")
    )
    assert a.try_acquire_or_renew(0.0) and not b.try_acquire_or_renew(0.0)
    sent = 2.0
    b_leads_from = None
    while t <= 60:
        if t >= sent + 12:  # a's call sent at `sent` is answered now
            a.try_acquire_or_renew(sent)
            sent = t + a.settings.retry_period_s
        if b.try_acquire_or_renew(t) and b_leads_from is None:
            b_leads_from = t
        assert not (a.is_leader(t) and b.is_leader(t)), t
        t += TICK_S
    assert not a.is_leader(t)
    assert b_leads_from is not None and b_leads_from <= 20  # a's first late answer: 14 s
    assert "stepped aside" in (a.last_error or "")
    lease = read_lease(ops, NAMESPACE, "krea-ops-slow")
    assert lease is not None and lease.holder == "b"
