"""``krea-ops burst status`` against the simulated world and the simulated API server.

The world runs the cluster (scheduler, Deployment controllers, kubelets) and the burst
virtual kubelet with two providers; a Deployment whose pods may only run on the virtual
node bursts out at once, so the test needs no training to push it out.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from commands.burst import POD_CSV_KEYS
from commands.main import invoke
from krea_ops.burst import PAUSE_TAINT_KEY
from krea_ops.burst.status import burst_status
from krea_ops.kube.cluster import connect
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.common.actor import Provider, WorldConfig
from krea_ops.sim.world import SimWorld
from tests.conftest import free_port, wait_for

CHEAP = Provider("cheap", 1.0, 2, 0.0)
MID = Provider("mid", 2.0, 4, 0.0)
PRICES = {"cheap": 1.0, "mid": 2.0}
DEPLOYMENT = "dit-serve-test"
VK = "burst-vk"
TOLERATE_VK = {"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}
GPU = "nvidia.com/gpu"


def body(obj: dict[str, Any]) -> Any:
    """Plain dicts are request bodies as they are (the client's stubs ask for models)."""
    return obj


def read(response: Any) -> Any:
    """The JSON of a raw (``_preload_content=False``) response."""
    return json.loads(response.data)


def offsite_deployment(replicas: int) -> dict[str, Any]:
    labels = {"app": DEPLOYMENT, "krea.ai/workload": "inference"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": "inference", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": DEPLOYMENT}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"type": "virtual-kubelet"},
                    "tolerations": [TOLERATE_VK],
                    "containers": [
                        {
                            "name": "server",
                            "image": "ghcr.io/krea-ai/dit-serve:test",
                            "resources": {"limits": {GPU: "1"}},
                        }
                    ],
                },
            },
        },
    }


def stuck_inference_pod() -> dict[str, Any]:
    """An inference pod no node can take: it stays Pending with no node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "waits-for-room", "labels": {"krea.ai/workload": "inference"}},
        "spec": {
            "nodeSelector": {"krea.ai/pool": "nowhere"},
            "tolerations": [TOLERATE_VK],
            "containers": [{"name": "server", "image": "x", "resources": {"limits": {GPU: "1"}}}],
        },
    }


@pytest.fixture(autouse=True)
def no_settings_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, control_plane: str) -> Iterator[SimWorld]:
    config = WorldConfig(
        control_plane=control_plane,
        nodes=2,
        speed=300,
        exporters=False,
        prometheus=False,
        failure_multiplier=0.0,
        providers=(CHEAP, MID),
        extra={"slow_burners": False, "inference_services": ()},
    )
    with SimWorld(config, tmp_path_factory.mktemp("world"), parts=("cluster", "burst")) as w:
        core = client.CoreV1Api(w.client)
        client.AppsV1Api(w.client).create_namespaced_deployment(
            "inference", body(offsite_deployment(3)), _preload_content=False
        )
        core.create_namespaced_pod("inference", body(stuck_inference_pod()), _preload_content=False)

        def placed_and_billed() -> bool:
            raw = core.list_namespaced_pod(
                "inference", field_selector=f"spec.nodeName={VK}", _preload_content=False
            )
            pods = read(raw)["items"]
            running = [p for p in pods if p["status"].get("phase") == "Running"]
            node = read(core.read_node(VK, _preload_content=False))
            usage = json.loads(node["metadata"]["annotations"]["burst.krea.ai/usage"])
            return len(running) == 3 and usage["providers"]["mid"]["gpuHours"] > 0

        wait_for(placed_and_billed, timeout=30)
        yield w


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = invoke(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def status_json(world: SimWorld, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    code, out, err = run(
        capsys, "--kubeconfig", str(world.kubeconfig), "burst", "status", "-o", "json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert isinstance(data, list)
    return data


def seconds(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def set_pause(world: SimWorld, reason: str | None) -> None:
    """Add (reason given) or remove our pause taint: read-modify-write on resourceVersion."""
    core = client.CoreV1Api(world.client)
    for _ in range(20):
        node = read(core.read_node(VK, _preload_content=False))
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != PAUSE_TAINT_KEY]
        if reason is not None:
            taints.append({"key": PAUSE_TAINT_KEY, "value": reason, "effect": "NoSchedule"})
        patch = {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "spec": {"taints": taints},
        }
        try:
            core.patch_node(
                VK,
                body(patch),
                _preload_content=False,
                _content_type="application/merge-patch+json",
            )
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise AssertionError("could not update the virtual node's taints")


# -- against the world --------------------------------------------------------------------


def test_json_shows_the_offsite_pods_their_providers_and_cost(
    world: SimWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    [node] = status_json(world, capsys)
    assert node["node"] == VK
    assert node["detected_by"] == "type=virtual-kubelet"
    assert node["provider"] == "burst"
    assert node["ready"] is True
    assert node["gpu_capacity"] == 6
    assert node["paused"] is False and node["pause_reason"] is None
    assert node["taints"] == [
        {
            "key": "virtual-kubelet.io/provider",
            "value": "burst",
            "effect": "NoSchedule",
            "owner": "provider",
        }
    ]
    # The pod no node can take is counted; the three offsite ones are not "pending".
    assert node["pending_inference_pods"] == 1
    collected = seconds(node["collected_at"])

    pods = node["pods"]
    assert len(pods) == 3
    # The cheapest provider fills first (2 GPUs), the third pod goes to the next one.
    assert sorted(p["provider"] for p in pods) == ["cheap", "cheap", "mid"]
    for pod in pods:
        assert pod["namespace"] == "inference"
        assert pod["name"].startswith(f"{DEPLOYMENT}-")
        assert pod["owner"] == f"Deployment/{DEPLOYMENT}"
        assert pod["phase"] == "Running"
        assert pod["gpus"] == 1
        assert pod["usd_per_gpu_hour"] == PRICES[pod["provider"]]
        assert pod["gpu_hours"] > 0
        # GPU-hours are GPUs x time since placement; cost is price x GPU-hours.
        since = collected - seconds(pod["placed_at"])
        assert pod["gpu_hours"] == pytest.approx(since / 3600, abs=1e-3)
        assert pod["cost_usd"] == pytest.approx(
            pod["gpu_hours"] * pod["usd_per_gpu_hour"], abs=1e-3
        )
        assert pod["age_s"] >= since - 1
        assert pod["ended_at"] is None

    providers = {p["provider"]: p for p in node["providers"]}
    assert set(providers) == {"cheap", "mid"}
    assert (providers["cheap"]["pods"], providers["cheap"]["gpus_in_use"]) == (2, 2)
    assert (providers["mid"]["pods"], providers["mid"]["gpus_in_use"]) == (1, 1)
    for name, totals in providers.items():
        assert totals["source"] == "usage-annotation"
        assert totals["usd_per_gpu_hour"] == PRICES[name]
        assert totals["capacity_gpus"] == {"cheap": 2, "mid": 4}[name]
        assert totals["gpu_hours"] > 0
        assert totals["cost_usd"] == pytest.approx(totals["gpu_hours"] * PRICES[name], abs=1e-3)
    # The virtual kubelet's running total refreshes once a simulated minute: it trails
    # the pods' own GPU-hours by at most that.
    cheap_pods = sum(p["gpu_hours"] for p in pods if p["provider"] == "cheap")
    assert cheap_pods - 2 * 120 / 3600 <= providers["cheap"]["gpu_hours"] <= cheap_pods + 1e-3

    # yaml is the same shape.
    code, out, _ = run(
        capsys, "--kubeconfig", str(world.kubeconfig), "burst", "status", "-o", "yaml"
    )
    assert code == 0
    assert yaml.safe_load(out)[0]["pods"][0].keys() == pods[0].keys()


def test_gpu_hours_follow_the_clock_passed_in(world: SimWorld) -> None:
    cluster = connect(str(world.kubeconfig), None)
    try:
        now = time.time()  # the API's stamps are wall time
        report = burst_status(cluster, now=now)
        later = burst_status(cluster, now=now + 3600)
    finally:
        cluster.api.close()
    assert report.collected_at == now
    [node] = report.nodes
    [node_later] = later.nodes
    for pod, pod_later in zip(node.pods, node_later.pods, strict=True):
        assert pod.placed_at is not None and pod.gpu_hours is not None and pod.provider
        assert pod.gpu_hours == pytest.approx(pod.gpus * (now - pod.placed_at) / 3600)
        # One more hour on one GPU: one more GPU-hour, at the pod's price.
        assert pod_later.gpu_hours == pytest.approx(pod.gpu_hours + 1.0)
        assert pod_later.cost_usd == pytest.approx((pod.gpu_hours + 1.0) * PRICES[pod.provider])


def test_table_reads_in_80_columns(world: SimWorld, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--kubeconfig", str(world.kubeconfig), "burst", "status")
    assert code == 0, err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    for title in ("VIRTUAL NODES", "PROVIDERS", "PODS"):
        assert title in lines
    pod_lines = [line for line in lines if line.startswith(f"{DEPLOYMENT}-")]
    assert len(pod_lines) == 3
    # GPU-hours and money with two decimals: the last two columns of a pod line.
    for line in pod_lines:
        assert re.search(r"\s\d+\.\d\d\s+\$[\d,]+\.\d\d$", line), line
    provider_lines = {
        line.split()[0]: line for line in lines if line.split()[:1] in (["cheap"], ["mid"])
    }
    assert provider_lines["mid"].split()[-1] == "$2.00"  # USD per GPU-hour
    assert "inference pods pending with no node: 1" in lines
    assert "bursting is PAUSED" not in out

    code, wide, _ = run(
        capsys, "--kubeconfig", str(world.kubeconfig), "burst", "status", "-o", "wide"
    )
    assert code == 0
    assert f"Deployment/{DEPLOYMENT}" in wide
    assert "virtual-kubelet.io/provider=burst:NoSchedule" in wide
    assert "usage-annotation" in wide

    code, csv_out, _ = run(
        capsys, "--kubeconfig", str(world.kubeconfig), "burst", "status", "-o", "csv"
    )
    assert code == 0
    header, *rows = csv_out.splitlines()
    assert header.startswith("node,namespace,name,owner,phase,gpus,provider")
    assert len(rows) == 3


def test_pause_taint_shows_with_its_reason(
    world: SimWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    set_pause(world, "on-call-drill")
    try:
        [node] = status_json(world, capsys)
        assert node["paused"] is True
        assert node["pause_reason"] == "on-call-drill"
        ours = [t for t in node["taints"] if t["owner"] == "krea"]
        assert ours == [
            {
                "key": PAUSE_TAINT_KEY,
                "value": "on-call-drill",
                "effect": "NoSchedule",
                "owner": "krea",
            }
        ]
        assert len(node["pods"]) == 3  # running offsite pods stay
        code, out, _ = run(capsys, "--kubeconfig", str(world.kubeconfig), "burst", "status")
        assert code == 0
        assert f"bursting is PAUSED on {VK}: on-call-drill" in out
    finally:
        set_pause(world, None)
    [node] = status_json(world, capsys)
    assert node["paused"] is False


# -- against the bare API server ------------------------------------------------------------


def test_no_virtual_nodes_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with LocalApiServer(tmp_path / "api") as sim:
        kubeconfig = str(sim.kubeconfig)
        code, out, err = run(capsys, "--kubeconfig", kubeconfig, "burst", "status")
        assert (code, out) == (0, "")
        assert err.strip() == "no virtual-kubelet nodes in the cluster (bursting is not set up)"
        code, out, err = run(capsys, "--kubeconfig", kubeconfig, "burst", "status", "-o", "json")
        assert (code, json.loads(out), err) == (0, [], "")
        code, out, err = run(capsys, "--kubeconfig", kubeconfig, "burst", "status", "-o", "csv")
        assert (code, out.splitlines(), err) == (0, [",".join(POD_CSV_KEYS)], "")


def test_unreachable_api_server_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with LocalApiServer(tmp_path / "api") as sim:
        config = yaml.safe_load(sim.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    dead = tmp_path / "dead-kubeconfig"
    dead.write_text(yaml.safe_dump(config))
    code, out, err = run(capsys, "--kubeconfig", str(dead), "burst", "status", "-o", "json")
    assert code == 1
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the API server"), err


def _node(name: str, labels: dict[str, str], taints: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
        "status": {"capacity": {GPU: "16"}, "allocatable": {GPU: "16"}},
    }


def test_other_virtual_kubelet_conventions(tmp_path: Path) -> None:
    """An Azure-style node (provider only in its taint, no krea annotations on pods) and
    an interLink node (its own label, no provider at all); an ordinary node is left out."""
    with LocalApiServer(tmp_path / "api") as sim, sim.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_node(
            body(
                _node(
                    "virtual-node-aci-linux",
                    {"type": "virtual-kubelet", "kubernetes.io/role": "agent"},
                    [
                        {
                            "key": "virtual-kubelet.io/provider",
                            "value": "azure",
                            "effect": "NoSchedule",
                        }
                    ],
                )
            )
        )
        core.create_node(
            body(
                _node(
                    "interlink-slurm",
                    {"virtual-node.interlink/type": "virtual-kubelet"},
                    [
                        {
                            "key": "virtual-node.interlink/no-schedule",
                            "value": "true",
                            "effect": "NoSchedule",
                        },
                        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                    ],
                )
            )
        )
        core.create_node(body(_node("aks-gpu-0", {"kubernetes.io/role": "agent"}, [])))
        core.create_namespace(body({"metadata": {"name": "serve"}}))
        manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "aci-pod", "namespace": "serve"},
            "spec": {
                "nodeName": "virtual-node-aci-linux",
                "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "2"}}}],
            },
        }
        core.create_namespaced_pod("serve", body(manifest))
        started = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1)
        stamp = started.strftime("%Y-%m-%dT%H:%M:%SZ")
        core.patch_namespaced_pod_status(
            "aci-pod", "serve", body({"status": {"phase": "Running", "startTime": stamp}})
        )

        cluster = connect(str(sim.kubeconfig), None)
        try:
            report = burst_status(cluster, now=started.timestamp() + 3 * 3600)
        finally:
            cluster.api.close()

    nodes = {n.name: n for n in report.nodes}
    assert set(nodes) == {"virtual-node-aci-linux", "interlink-slurm"}
    aci, interlink = nodes["virtual-node-aci-linux"], nodes["interlink-slurm"]
    assert aci.provider == "azure" and aci.detected_by == "type=virtual-kubelet"
    assert interlink.provider is None
    assert interlink.detected_by == "virtual-node.interlink/type=virtual-kubelet"
    assert {t.key: t.owner for t in interlink.taints} == {
        "virtual-node.interlink/no-schedule": "provider",
        "node.kubernetes.io/unreachable": "kubernetes",
    }
    assert aci.ready is None  # no Ready condition reported: unknown, not "not ready"
    assert aci.gpu_capacity == 16 and not aci.paused

    [pod] = aci.pods
    # Placed when it started (no krea annotation), 2 GPUs for 3 hours; no price known.
    assert pod.provider == "azure"
    assert pod.gpu_hours == pytest.approx(6.0)
    assert pod.usd_per_gpu_hour is None and pod.cost_usd is None
    [totals] = aci.providers
    assert (totals.provider, totals.source, totals.pods, totals.gpus_in_use) == (
        "azure",
        "pods",
        1,
        2,
    )
    assert totals.gpu_hours == pytest.approx(6.0) and totals.cost_usd is None
    assert interlink.pods == () and interlink.providers == ()
    assert report.pending_inference_pods == 0


def test_a_providers_cost_that_is_not_its_rows_sum_says_why() -> None:
    """The provider's own usage counts pods that have left and is written now and then:
    where it differs from the pods listed, burst status and the dashboard say both."""
    from dataclasses import replace

    from krea_ops.burst.status import (
        SOURCE_USAGE,
        BurstPod,
        BurstStatus,
        ProviderTotals,
        VirtualNode,
        cost_notes,
    )

    pod = BurstPod("inference", "p-1", None, "Running", 1, "cheap", 1.0, 0.0, None, 2.0, 2.0, 1.0)
    totals = ProviderTotals("cheap", 1, 1, 5.0, 5.0, 1.0, 2, SOURCE_USAGE)
    node = VirtualNode(
        "burst-vk", "type=virtual-kubelet", "burst", True, None, False, 2, 2, (), False,
        None, (totals,), (pod,), 3600.0,
    )  # fmt: skip
    report = BurstStatus(nodes=(node,), pending_inference_pods=0, collected_at=4000.0)
    (note,) = cost_notes(report)
    assert note.startswith("burst-vk/cheap: $5.00 by the provider's usage (as of 01:00:00 UTC")
    assert note.endswith("$2.00 for the 1 pod listed")
    agreeing = replace(node, providers=(replace(totals, cost_usd=2.0),))
    assert cost_notes(replace(report, nodes=(agreeing,))) == []
