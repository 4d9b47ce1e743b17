"""Evictions against the simulated API server: the outcomes and the words a real API server
gives (pkg/registry/core/pod/storage/eviction.go), and the retry loop's pace."""

from __future__ import annotations

import random
import threading
import time

import pytest

from krea_ops.kube.cluster import Cluster
from krea_ops.kube.eviction import (
    Outcome,
    backoff,
    evict,
    evict_all,
    evict_until,
)
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import EMBEDDED_ONLY, wait_for
from tests.kube.conftest import create, running_pod

PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget."


def budget(cluster: Cluster, name: str, app: str, **spec: object) -> None:
    create(
        cluster,
        PDBS,
        {"metadata": {"name": name}, "spec": {**spec, "selector": {"matchLabels": {"app": app}}}},
    )


def settled(cluster: Cluster, name: str, expected: int) -> None:
    """Wait for the disruption controller to have counted the budget's pods."""
    wait_for(
        lambda: (
            (cluster.get("pdb", f"{PDBS}/{name}").get("status") or {}).get("expectedPods")
            == expected
        )
    )


def pods(cluster: Cluster) -> list[str]:
    body = cluster.get("pods", "/api/v1/namespaces/default/pods")
    return sorted(p["metadata"]["name"] for p in body["items"])


class FakeTime:
    """A clock the retry loop's sleeps advance; the API calls are real."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_a_budget_allowing_no_disruption_blocks_and_names_itself(cluster: Cluster) -> None:
    for i in range(2):
        running_pod(cluster, f"inf-{i}", {"app": "inference"})
    budget(cluster, "inference", "inference", minAvailable=2)
    settled(cluster, "inference", 2)

    result = evict(cluster, "default", "inf-0")

    assert result.outcome is Outcome.BLOCKED and not result.done
    assert result.budget == "inference"
    assert result.http_status == 429 and result.retry_after_s is None
    assert result.message == (
        f"{REFUSAL} The disruption budget inference needs 2 healthy pods and has 2 currently"
    )
    assert result.summary() == (
        "pod default/inf-0 blocked by PodDisruptionBudget inference: " + result.message
    )
    assert pods(cluster) == ["inf-0", "inf-1"]


def test_evicted_then_gone(cluster: Cluster) -> None:
    running_pod(cluster, "web-0", {"app": "web"})
    first = evict(cluster, "default", "web-0")
    again = evict(cluster, "default", "web-0")
    assert first.outcome is Outcome.EVICTED and first.http_status == 201
    assert again.outcome is Outcome.GONE and again.done
    assert again.message == 'pods "web-0" not found'
    assert pods(cluster) == []


def test_a_uid_precondition_spares_the_pod_that_took_the_name(cluster: Cluster) -> None:
    old = running_pod(cluster, "train-0", {"app": "train"})
    assert evict(cluster, "default", "train-0").outcome is Outcome.EVICTED
    new = running_pod(cluster, "train-0", {"app": "train"})  # the gang restarted it

    result = evict(cluster, "default", "train-0", uid=old["metadata"]["uid"])

    assert result.outcome is Outcome.GONE
    # pkg/registry/core/pod/storage/eviction.go, addConditionAndDeletePod: the server checks
    # the precondition against the pod it reads before it adds DisruptionTarget
    assert (
        f"the UID in the precondition ({old['metadata']['uid']}) does not match the UID in "
        f"record ({new['metadata']['uid']}). The object might have been deleted and then "
        "recreated"
    ) in result.message
    assert pods(cluster) == ["train-0"]


def test_an_unready_pod_goes_while_the_application_is_healthy(cluster: Cluster) -> None:
    # IfHealthyBudget (the default): an unready pod is not counted healthy, so evicting it
    # takes nothing from a budget whose application has its healthy pods
    running_pod(cluster, "inf-0", {"app": "inference"})
    running_pod(cluster, "inf-1", {"app": "inference"})
    running_pod(cluster, "inf-2", {"app": "inference"}, ready=False)
    budget(cluster, "inference", "inference", minAvailable=2)
    settled(cluster, "inference", 3)

    assert evict(cluster, "default", "inf-0").outcome is Outcome.BLOCKED
    assert evict(cluster, "default", "inf-2").outcome is Outcome.EVICTED
    assert pods(cluster) == ["inf-0", "inf-1"]


def test_more_than_one_budget_is_a_failure_with_the_servers_words(cluster: Cluster) -> None:
    running_pod(cluster, "inf-0", {"app": "inference"})
    budget(cluster, "one", "inference", maxUnavailable=1)
    budget(cluster, "two", "inference", maxUnavailable=1)
    result = evict(cluster, "default", "inf-0")
    assert result.outcome is Outcome.FAILED and result.http_status == 500
    assert result.message == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource "
        "does not support."
    )


def test_retries_back_off_from_1s_doubling_to_30s_until_the_deadline(cluster: Cluster) -> None:
    running_pod(cluster, "inf-0", {"app": "inference"})
    budget(cluster, "inference", "inference", minAvailable=1)
    settled(cluster, "inference", 1)
    fake = FakeTime()

    result = evict_until(
        cluster,
        "default",
        "inf-0",
        deadline=120.0,
        clock=fake.clock,
        sleep=fake.sleep,
        rng=random.Random(7),
    )

    assert result.outcome is Outcome.BLOCKED and result.budget == "inference"
    assert result.attempts == len(fake.sleeps) + 1
    nominal = [1, 2, 4, 8, 16, 30, 30, 30, 30, 30]
    *waits, last = fake.sleeps
    for slept, base in zip(waits, nominal, strict=False):
        assert base * 0.8 <= slept <= min(30, base * 1.2)
    assert last <= min(30, nominal[len(waits)] * 1.2)  # cut short by the deadline
    assert sum(fake.sleeps) == pytest.approx(120.0)


def test_jitter_spreads_retries_and_never_exceeds_the_cap() -> None:
    rng = random.Random(1)
    waits = [backoff(3, rng) for _ in range(200)]
    assert 3.2 <= min(waits) < 3.5 and 4.5 < max(waits) <= 4.8
    assert all(backoff(20, rng) <= 30 for _ in range(50))


@EMBEDDED_ONLY  # stops the embedded server's in-process disruption controller (sim.api)
def test_retry_after_is_waited_out_while_the_budget_is_being_processed(
    sim: LocalApiServer, cluster: Cluster
) -> None:
    running_pod(cluster, "inf-0", {"app": "inference"})
    sim.api.controllers.stop()  # the disruption controller has not seen the budget yet
    budget(cluster, "inference", "inference", maxUnavailable=1)
    fake = FakeTime()

    result = evict_until(
        cluster, "default", "inf-0", deadline=60.0, clock=fake.clock, sleep=fake.sleep
    )

    assert result.outcome is Outcome.BLOCKED and result.budget == "inference"
    assert result.retry_after_s == 10
    assert result.message == (
        f"{REFUSAL} The disruption budget inference is still being processed by the server."
    )
    assert fake.sleeps[:-1] and all(s >= 10 for s in fake.sleeps[:-1])
    assert pods(cluster) == ["inf-0"]


def test_a_blocked_eviction_goes_through_once_the_budget_allows_it(cluster: Cluster) -> None:
    running_pod(cluster, "inf-0", {"app": "inference"})
    running_pod(cluster, "inf-1", {"app": "inference"})
    budget(cluster, "inference", "inference", minAvailable=2)
    settled(cluster, "inference", 2)
    # a third replica becomes ready while the eviction waits
    later = threading.Timer(0.3, lambda: running_pod(cluster, "inf-2", {"app": "inference"}))
    later.start()
    try:
        result = evict_until(cluster, "default", "inf-0", deadline=time.monotonic() + 60)
    finally:
        later.join()

    assert result.outcome is Outcome.EVICTED and result.attempts >= 2
    assert pods(cluster) == ["inf-1", "inf-2"]


def test_concurrent_evictions_never_take_more_than_the_budget_allows(cluster: Cluster) -> None:
    names = [f"inf-{i}" for i in range(6)]
    for name in names:
        running_pod(cluster, name, {"app": "inference"})
    budget(cluster, "inference", "inference", minAvailable=5)
    settled(cluster, "inference", 6)
    cancel = threading.Event()  # the operator gives up on the blocked ones
    timer = threading.Timer(2.5, cancel.set)
    timer.start()
    try:
        results = evict_all(
            cluster,
            [("default", name, None) for name in names],
            deadline=time.monotonic() + 60,
            concurrency=6,
            cancel=cancel,
        )
    finally:
        timer.cancel()

    assert [r.name for r in results] == names  # in the order asked
    evicted = [r for r in results if r.outcome is Outcome.EVICTED]
    blocked = [r for r in results if r.outcome is Outcome.BLOCKED]
    assert len(evicted) == 1 and len(blocked) == 5
    assert all(r.budget == "inference" for r in blocked)
    assert len(pods(cluster)) == 5
