"""The inference autoscaler and the burst virtual kubelet, through the official client.

Pods are bound to ``burst-vk`` through the binding subresource here (the cluster's
scheduler is not needed for the virtual kubelet's own behaviour); the last test runs with
the cluster part of the world.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from krea_ops.sim.common.actor import Provider, WorldConfig
from krea_ops.sim.machines import burst
from krea_ops.sim.world import SimWorld

NS = "burst-test"
CHEAP = Provider("cheap", 1.0, 2, 0.0)
MID = Provider("mid", 2.0, 4, 0.0)
PRICEY = Provider("pricey", 3.0, 8, 0.0)
NO_DEPLOYMENTS = {"inference_services": ()}


def wait_for(check: Callable[[], Any], timeout: float = 10.0, every: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")


def start(tmp_path: Path, **config: Any) -> SimWorld:
    config.setdefault("nodes", 4)
    config.setdefault("speed", 600)
    config.setdefault("providers", (CHEAP, MID, PRICEY))
    world = SimWorld(WorldConfig(**config), tmp_path, parts=("burst",))
    core = client.CoreV1Api(world.client)
    core.create_namespace(body({"metadata": {"name": NS}}), _preload_content=False)
    return world


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimWorld]:
    with start(tmp_path, extra=NO_DEPLOYMENTS) as world:
        yield world


def core_api(world: SimWorld) -> client.CoreV1Api:
    return client.CoreV1Api(world.client)


def body(obj: dict[str, Any]) -> Any:
    """Plain dicts are request bodies as they are (the client's stubs ask for models)."""
    return obj


def read(response: Any) -> Any:
    return json.loads(response.data)


def get_node(world: SimWorld) -> dict[str, Any]:
    return read(core_api(world).read_node(burst.VK_NODE, _preload_content=False))


def get_pod(world: SimWorld, name: str) -> dict[str, Any] | None:
    try:
        return read(core_api(world).read_namespaced_pod(name, NS, _preload_content=False))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def usage(world: SimWorld) -> dict[str, Any]:
    return burst.read_usage(get_node(world))


def make_pod(
    world: SimWorld,
    name: str,
    gpus: int = 1,
    grace: int = 30,
    bind: bool = True,
    annotations: dict[str, str] | None = None,
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "burst-test", "krea.ai/workload": "inference"},
            "annotations": annotations or {},
        },
        "spec": {
            "terminationGracePeriodSeconds": grace,
            "nodeSelector": {"type": "virtual-kubelet"},
            "tolerations": burst.inference_tolerations(),
            "containers": [
                {
                    "name": "server",
                    "image": "ghcr.io/krea-ai/dit-serve:test",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", burst.GPU: str(gpus)},
                        "limits": {burst.GPU: str(gpus)},
                    },
                }
            ],
        },
    }
    core = core_api(world)
    core.create_namespaced_pod(NS, body(pod), _preload_content=False)
    if bind:
        core.create_namespaced_pod_binding(
            name,
            NS,
            body(
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": burst.VK_NODE},
                }
            ),
            _preload_content=False,
        )


def ready(pod: dict[str, Any] | None) -> bool:
    if not pod or (pod.get("status") or {}).get("phase") != "Running":
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def annotation(pod: dict[str, Any] | None, key: str) -> str | None:
    if not pod:
        return None
    value = (pod["metadata"].get("annotations") or {}).get(key)
    return str(value) if value is not None else None


def api_age(stamp: str) -> float:
    """Seconds since an API stamp: wall time, like the API server's, at any speed."""
    moment = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return time.time() - moment.timestamp()


def set_taints(world: SimWorld, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]):
    core = core_api(world)
    for _ in range(20):
        node = get_node(world)
        taints = change(list(node["spec"].get("taints") or []))
        body = {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "spec": {"taints": taints},
        }
        try:
            core.patch_node(
                burst.VK_NODE,
                body,
                _preload_content=False,
                _content_type="application/merge-patch+json",
            )
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise AssertionError("could not update the node's taints")


# -- registration ------------------------------------------------------------------------


def test_virtual_node_registers_with_taint_labels_capacity_and_lease(tmp_path: Path) -> None:
    with start(tmp_path, speed=120) as world:
        node = wait_for(lambda: get_node_or_none(world))
        labels = node["metadata"]["labels"]
        assert labels["type"] == "virtual-kubelet"
        assert labels["kubernetes.io/role"] == "agent"
        assert labels["kubernetes.io/hostname"] == burst.VK_NODE
        assert labels["krea.ai/pool"] == "burst"
        assert node["spec"]["taints"] == [
            {"key": "virtual-kubelet.io/provider", "value": "burst", "effect": "NoSchedule"}
        ]
        status = node["status"]
        assert status["capacity"]["nvidia.com/gpu"] == str(2 + 4 + 8)
        assert status["capacity"]["pods"] == "10000"
        assert status["nodeInfo"]["kubeletVersion"] == "v1.32.0-vk-krea"
        ready_cond = [c for c in status["conditions"] if c["type"] == "Ready"]
        assert ready_cond and ready_cond[0]["status"] == "True"
        assert set(usage(world)["providers"]) == {"cheap", "mid", "pricey"}

        lease = wait_for(lambda: get_lease(world))
        duration = lease["spec"]["leaseDurationSeconds"]
        # virtual-kubelet's defaults, in wall seconds whatever the speed: a 40 s Lease
        # renewed every 10 s (checked at the end of this test)
        assert duration == 40
        assert 0 <= api_age(lease["spec"]["renewTime"]) < 5
        first_renewal = lease["spec"]["renewTime"]

        # The inference Deployments (the autoscaler creates them when it starts), each
        # with a budget, gated for Kueue.
        apps = client.AppsV1Api(world.client)
        wanted = {"dit-serve-xl", "dit-serve-base", "upscaler"}

        def all_deployments() -> dict[str, Any] | None:
            found = read(apps.list_namespaced_deployment("inference", _preload_content=False))
            return found if wanted <= {d["metadata"]["name"] for d in found["items"]} else None

        deployments = wait_for(all_deployments)
        names = {d["metadata"]["name"] for d in deployments["items"]}
        for dep in deployments["items"]:
            template = dep["spec"]["template"]
            assert template["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "inference"
            assert template["metadata"]["labels"]["krea.ai/workload"] == "inference"
            assert template["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
            assert template["spec"]["priorityClassName"] == "inference"
            keys = {t.get("key") for t in template["spec"]["tolerations"]}
            assert "virtual-kubelet.io/provider" in keys
            assert burst.PAUSE_TAINT_KEY not in keys
            requests = template["spec"]["containers"][0]["resources"]["requests"]
            assert requests["nvidia.com/gpu"] == "1"
        policy = client.PolicyV1Api(world.client)

        def budgets() -> set[str]:
            found = read(
                policy.list_namespaced_pod_disruption_budget("inference", _preload_content=False)
            )
            return {p["metadata"]["name"] for p in found["items"]}

        wait_for(lambda: budgets() == names)

        renewed = wait_for(
            lambda: (
                (lease := get_lease(world))
                and lease["spec"]["renewTime"] != first_renewal
                and lease
            ),
            timeout=25,
        )
        assert 0 <= api_age(renewed["spec"]["renewTime"]) < 5


def get_lease(world: SimWorld) -> dict[str, Any] | None:
    try:
        return read(
            client.CoordinationV1Api(world.client).read_namespaced_lease(
                burst.VK_NODE, "kube-node-lease", _preload_content=False
            )
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def get_node_or_none(world: SimWorld) -> dict[str, Any] | None:
    try:
        return get_node(world)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


# -- placement ---------------------------------------------------------------------------


def test_pods_go_to_the_cheapest_provider_with_room(sim: SimWorld) -> None:
    wait_for(lambda: get_node_or_none(sim))
    make_pod(sim, "fills-cheap", gpus=2)
    first = wait_for(lambda: ready(get_pod(sim, "fills-cheap")) and get_pod(sim, "fills-cheap"))
    assert annotation(first, burst.ANN_PROVIDER) == "cheap"
    assert annotation(first, burst.ANN_PRICE) == "1.00"
    assert annotation(first, burst.ANN_PLACED_AT)
    assert first["status"]["containerStatuses"][0]["state"]["running"]
    # The cold start takes tens of simulated seconds (a fraction of a wall second here:
    # the stamps, wall time with whole seconds, can only show it did not come first).
    placed = dt.datetime.fromisoformat(
        str(annotation(first, burst.ANN_PLACED_AT)).replace("Z", "+00:00")
    )
    started = first["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    started_at = dt.datetime.fromisoformat(started.replace("Z", "+00:00"))
    vk = next(a for a in sim.actors if isinstance(a, burst.VirtualKubelet))
    cold_start = vk.startup_s(first, "cheap")
    assert 15 <= cold_start <= 90
    assert placed <= started_at
    assert 0 <= api_age(started) < 10

    make_pod(sim, "next")
    second = wait_for(lambda: ready(get_pod(sim, "next")) and get_pod(sim, "next"))
    assert annotation(second, burst.ANN_PROVIDER) == "mid"

    # A pod may restrict where it goes.
    make_pod(sim, "picky", annotations={burst.ANN_ALLOWED_PROVIDERS: "pricey"})
    picky = wait_for(lambda: ready(get_pod(sim, "picky")) and get_pod(sim, "picky"))
    assert annotation(picky, burst.ANN_PROVIDER) == "pricey"

    # Nothing has room for 9 GPUs: the pod waits, as the real VK reports it.
    make_pod(sim, "too-big", gpus=9)
    too_big = wait_for(
        lambda: (
            (get_pod(sim, "too-big") or {}).get("status", {}).get("reason") == burst.PROVIDER_FAILED
            and get_pod(sim, "too-big")
        )
    )
    assert too_big["status"]["phase"] == "Pending"
    assert annotation(too_big, burst.ANN_PROVIDER) is None

    def counted() -> dict[str, Any] | None:
        providers = usage(sim).get("providers", {})
        if providers.get("cheap", {}).get("gpusInUse") != 2:
            return None
        if providers.get("mid", {}).get("gpusInUse") != 1:
            return None
        return providers if providers.get("pricey", {}).get("pods") == 1 else None

    providers = wait_for(counted)
    assert providers["cheap"]["pods"] == 1


def test_deletion_waits_for_the_grace_period_and_usage_accumulates(sim: SimWorld) -> None:
    wait_for(lambda: get_node_or_none(sim))
    make_pod(sim, "graceful", gpus=2, grace=600)
    wait_for(lambda: ready(get_pod(sim, "graceful")))
    before = wait_for(lambda: usage(sim)["providers"]["cheap"]["gpuHours"] > 0 and usage(sim))
    cheap = before["providers"]["cheap"]
    assert cheap["costUsd"] == pytest.approx(cheap["gpuHours"] * 1.0, rel=0.01, abs=1e-3)

    deleted_at = sim.clock.time()
    core_api(sim).delete_namespaced_pod("graceful", NS, _preload_content=False)
    time.sleep(0.3)  # 180 simulated seconds: still terminating
    pod = get_pod(sim, "graceful")
    assert pod is not None and pod["metadata"].get("deletionTimestamp")
    wait_for(lambda: get_pod(sim, "graceful") is None, timeout=15)
    assert sim.clock.time() - deleted_at >= 599

    after = wait_for(
        lambda: usage(sim)["providers"]["cheap"]["gpusInUse"] == 0 and usage(sim), timeout=5
    )
    cheap = after["providers"]["cheap"]
    # It ran for at least its grace period of 600 simulated seconds on 2 GPUs, billed in
    # wall hours (what `burst status` counts from the placed-at stamp).
    assert cheap["gpuHours"] >= 2 * sim.clock.to_wall(600) / 3600 * 0.95
    assert cheap["costUsd"] == pytest.approx(cheap["gpuHours"] * 1.0, rel=0.01, abs=1e-3)
    assert after["totals"]["gpuHours"] == pytest.approx(cheap["gpuHours"], abs=1e-3)


def test_provider_failure_marks_pods_failed(tmp_path: Path) -> None:
    flaky = Provider("flaky", 0.5, 8, 1e7)
    with start(tmp_path, providers=(flaky,), extra=NO_DEPLOYMENTS) as world:
        wait_for(lambda: get_node_or_none(world))
        make_pod(world, "doomed")

        def failed() -> dict[str, Any] | None:
            pod = get_pod(world, "doomed")
            return pod if pod and pod["status"].get("phase") == "Failed" else None

        pod = wait_for(failed)
        assert pod["status"]["reason"] == "ProviderFailure"
        assert "flaky" in pod["status"]["message"]
        assert annotation(pod, burst.ANN_PROVIDER) == "flaky"
        state = pod["status"]["containerStatuses"][0]["state"]
        assert state["terminated"]["reason"] == "ProviderFailure"
        final = wait_for(
            lambda: usage(world)["providers"]["flaky"]["failures"] >= 1 and usage(world)
        )
        assert final["providers"]["flaky"]["gpusInUse"] == 0


# -- pause -----------------------------------------------------------------------------


def test_paused_node_places_nothing_new_and_keeps_running_pods(sim: SimWorld) -> None:
    wait_for(lambda: get_node_or_none(sim))
    make_pod(sim, "before")
    wait_for(lambda: ready(get_pod(sim, "before")))

    pause = {"key": burst.PAUSE_TAINT_KEY, "value": "on-call", "effect": "NoSchedule"}
    set_taints(sim, lambda taints: [*taints, pause])
    make_pod(sim, "during")
    time.sleep(0.6)  # 360 simulated seconds: dozens of ticks and a status report
    during = get_pod(sim, "during")
    assert during is not None
    assert during["status"]["phase"] == "Pending"
    assert annotation(during, burst.ANN_PROVIDER) is None
    assert during["status"].get("reason") == burst.BURST_PAUSED
    assert "on-call" in during["status"]["message"]
    assert ready(get_pod(sim, "before"))
    taints = get_node(sim)["spec"]["taints"]
    assert pause in taints and len(taints) == 2  # the VK leaves others' taints alone

    set_taints(sim, lambda taints: [t for t in taints if t["key"] != burst.PAUSE_TAINT_KEY])
    placed = wait_for(lambda: ready(get_pod(sim, "during")) and get_pod(sim, "during"))
    assert annotation(placed, burst.ANN_PROVIDER) in ("cheap", "mid")
    assert "reason" not in placed["status"]


# -- the autoscaler ------------------------------------------------------------------------


def test_autoscaler_follows_demand_within_bounds(tmp_path: Path) -> None:
    spec = {
        "min": 1,
        "max": 6,
        "rpsPerReplica": 1.0,
        "peakRps": 6.0,
        "troughRps": 0.5,
        "periodS": 3600,
        "peakAtS": 0,
        "noise": 0.05,
        "cooldownS": 120,
        "stabilizationS": 60,
    }
    service = burst.InferenceService(
        "tiny-serve", "ghcr.io/krea-ai/tiny:1", "1", "1Gi", 1, 6, 1.0, 0
    )
    manifest = burst.deployment_manifest(service, 1)
    manifest["metadata"]["annotations"][burst.ANN_AUTOSCALE] = json.dumps(spec)
    with start(tmp_path, speed=1200) as world:
        apps = client.AppsV1Api(world.client)

        def created() -> bool:
            try:
                apps.create_namespaced_deployment(
                    "inference", body(manifest), _preload_content=False
                )
            except ApiException as exc:
                if exc.status == 404:  # the namespace is still being created
                    return False
                raise
            return True

        wait_for(created)
        seen: dict[int, str] = {}
        scaled: set[str] = set()
        deadline = time.monotonic() + 6  # two simulated hours: two demand cycles
        while time.monotonic() < deadline and len(seen) < 5:
            dep = read(
                apps.read_namespaced_deployment("tiny-serve", "inference", _preload_content=False)
            )
            replicas = dep["spec"]["replicas"]
            annotations = dep["metadata"]["annotations"]
            seen.setdefault(replicas, annotations.get(burst.ANN_DEMAND, ""))
            if burst.ANN_SCALED_AT in annotations:
                scaled.add(annotations[burst.ANN_SCALED_AT])
            time.sleep(0.05)
        assert len(seen) >= 3, seen
        assert all(1 <= r <= 6 for r in seen), seen
        assert burst.ANN_DESIRED in annotations and burst.ANN_DEMAND in annotations
        assert 1 <= int(annotations[burst.ANN_DESIRED]) <= 6
        moments = sorted(
            dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() for s in scaled
        )
        # the stamps are wall time; the cooldown (120) is simulated seconds
        gaps = [world.clock.to_sim(b - a) for a, b in itertools.pairwise(moments)]
        assert all(gap >= 119 for gap in gaps), gaps

        # The default Deployments are scaled too, within their bounds.
        for dep in read(apps.list_namespaced_deployment("inference", _preload_content=False))[
            "items"
        ]:
            bounds = json.loads(dep["metadata"]["annotations"][burst.ANN_AUTOSCALE])
            assert bounds["min"] <= dep["spec"]["replicas"] <= bounds["max"]


def test_demand_curve_is_seeded_and_diurnal() -> None:
    spec = burst.default_services(64)[0].autoscale()
    a = burst.DemandCurve(spec, "0:demand:inference/dit-serve-xl")
    b = burst.DemandCurve(spec, "0:demand:inference/dit-serve-xl")
    c = burst.DemandCurve(spec, "1:demand:inference/dit-serve-xl")
    day = 86400 * 20000
    peak = day + spec["peakAtS"]
    trough = peak + 43200
    assert a(peak) == b(peak)
    assert a(peak) != c(peak)
    assert a(peak) > 2 * a(trough)
    assert spec["troughRps"] * 0.7 <= a(trough) <= spec["troughRps"] * 1.3


# -- with the cluster's scheduler --------------------------------------------------------


def test_scheduler_binds_tolerating_pods_to_the_virtual_node(tmp_path: Path) -> None:
    config = WorldConfig(nodes=4, speed=120, providers=(CHEAP, MID), extra=NO_DEPLOYMENTS)
    with SimWorld(config, tmp_path, parts=("cluster", "burst")) as world:
        core_api(world).create_namespace(body({"metadata": {"name": NS}}), _preload_content=False)
        wait_for(lambda: get_node_or_none(world), timeout=20)
        make_pod(world, "offsite", bind=False)
        pod = wait_for(lambda: ready(get_pod(world, "offsite")) and get_pod(world, "offsite"), 20)
        assert pod["spec"]["nodeName"] == burst.VK_NODE
        assert annotation(pod, burst.ANN_PROVIDER) == "cheap"

        pause = {"key": burst.PAUSE_TAINT_KEY, "value": "test", "effect": "NoSchedule"}
        set_taints(world, lambda taints: [*taints, pause])
        make_pod(world, "held", bind=False)
        time.sleep(1.0)
        held = get_pod(world, "held")
        assert held is not None and not held["spec"].get("nodeName")
        assert ready(get_pod(world, "offsite"))
