"""The whole simulated world at high speed: every actor, through the API, end to end.

A training is admitted as a gang and reclaims GPUs that inference borrowed; the evicted
inference lands on the virtual-kubelet node at a provider; a node crash injected through
the API restarts the training from its newest complete checkpoint; an injected hot GPU
shows in that node's exporter and in Prometheus; InfiniBand counters only grow; kubectl
prints a believable cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.faults import inject_fault
from krea_ops.sim.machines.training import checkpoint_complete, submit_training
from krea_ops.sim.world import SimWorld
from tests.conftest import require_binary, wait_for

JOBSET = ("jobset.x-k8s.io", "v1alpha2")
KUEUE = ("kueue.x-k8s.io", "v1beta2")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWorld]:
    prometheus = shutil.which("prometheus") is not None
    config = WorldConfig(
        nodes=8,
        speed=120,
        seed=11,
        failure_multiplier=0.0,
        checkpoint_interval_s=300.0,
        prometheus=prometheus,
        extra={
            "slow_burners": False,
            "scrape_interval_s": 2,
            # only the borrowing batch inference below, so GPUs
            # come in whole nodes and the gang can fit
            "inference_services": (),
        },
    )
    with SimWorld(config, tmp_path_factory.mktemp("world")) as w:
        yield w


def _core(w: SimWorld) -> Any:
    return client.CoreV1Api(w.client)


def _custom(w: SimWorld) -> Any:
    return client.CustomObjectsApi(w.client)


def _pods(w: SimWorld, ns: str, selector: str) -> list[dict[str, Any]]:
    raw = _core(w).list_namespaced_pod(ns, label_selector=selector, _preload_content=False)
    return [p for p in json.loads(raw.data)["items"] if not p["metadata"].get("deletionTimestamp")]


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def _exporters(w: SimWorld) -> dict[str, str]:
    cm = _core(w).read_namespaced_config_map("krea-ops-config", "krea-ops")
    return json.loads(cm.data["exporters"])


def _borrowing_inference(replicas: int) -> dict[str, Any]:
    labels = {
        "app": "batch-infer",
        "krea.ai/workload": "inference",
        "kueue.x-k8s.io/queue-name": "inference",
        "kueue.x-k8s.io/priority-class": "inference",
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "batch-infer", "namespace": "inference"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "batch-infer"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
                    "priorityClassName": "inference",
                    "tolerations": [
                        {
                            "key": "virtual-kubelet.io/provider",
                            "operator": "Exists",
                            "effect": "NoSchedule",
                        }
                    ],
                    "containers": [
                        {
                            "name": "server",
                            "image": "krea/dit-serve:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            },
        },
    }


def test_training_reclaims_gpus_and_inference_bursts_out(world: SimWorld) -> None:
    # Inference borrows most of the training queue's on-prem quota...
    client.AppsV1Api(world.client).create_namespaced_replica_set(
        "inference", _borrowing_inference(5)
    )
    wait_for(
        lambda: (
            len(
                [
                    p
                    for p in _pods(world, "inference", "app=batch-infer")
                    if p["status"].get("phase") == "Running"
                ]
            )
            >= 3
        ),
        timeout=60,
    )
    # ...until a 6-node training gang (its whole 48-GPU quota) arrives and takes it back.
    submit_training(world.client, "dit-xl", nodes=6)

    def gang_running() -> bool:
        pods = _pods(world, "training", "krea.ai/training=dit-xl")
        return len(pods) == 6 and all(p["status"].get("phase") == "Running" for p in pods)

    wait_for(gang_running, timeout=90)
    nodes = {p["spec"]["nodeName"] for p in _pods(world, "training", "krea.ai/training=dit-xl")}
    assert len(nodes) == 6 and all(n.startswith("gpu-node-") for n in nodes)

    # Kueue deletes a preempted pod's Workload with the pod; its Event stays.
    events = _core(world).list_namespaced_event("inference", field_selector="reason=Preempted")
    preempted = [
        e
        for e in events.items
        if "batch-infer" in (e.involved_object.name or "") or "batch-infer" in (e.message or "")
    ]
    assert preempted, "training should have preempted borrowing inference"

    def offsite() -> list[dict[str, Any]]:
        return [
            p
            for p in _pods(world, "inference", "app=batch-infer")
            if p["spec"].get("nodeName") == "burst-vk" and p["status"].get("phase") == "Running"
        ]

    burst = wait_for(offsite, timeout=90)
    annotations = burst[0]["metadata"]["annotations"]
    assert annotations["burst.krea.ai/provider"] in {p.name for p in world.world.config.providers}
    assert float(annotations["burst.krea.ai/usd-per-gpu-hour"]) > 0


def test_crash_restarts_training_from_newest_complete_checkpoint(world: SimWorld) -> None:
    root = world.world.state_dir / "checkpoints" / "training" / "dit-xl"
    wait_for(lambda: any(checkpoint_complete(d) for d in root.glob("step-*")), timeout=90)
    victim = _pods(world, "training", "krea.ai/training=dit-xl")[0]["spec"]["nodeName"]
    fault = inject_fault(world.client, "crash", victim, value="host", repair_s=900)

    def resumed() -> int | None:
        js = _custom(world).get_namespaced_custom_object(*JOBSET, "training", "jobsets", "dit-xl")
        step = js["metadata"].get("annotations", {}).get("sim.krea.ai/resumed-from-step")
        restarts = (js.get("status") or {}).get("restarts", 0)
        return int(step) if restarts >= 1 and step not in (None, "0") else None

    step = wait_for(resumed, timeout=120)
    assert checkpoint_complete(root / f"step-{step}")
    applied = _core(world).read_namespaced_config_map(fault, "krea-sim").metadata.annotations
    assert applied.get("sim.krea.ai/applied")
    # The host comes back after its repair time and the node is Ready again.
    wait_for(
        lambda: (
            not (_core(world).read_node(victim).metadata.annotations or {}).get(
                "sim.krea.ai/failed"
            )
        ),
        timeout=60,
    )


def test_hot_gpu_shows_in_the_exporter_and_prometheus(world: SimWorld) -> None:
    node = "gpu-node-002"
    inject_fault(world.client, "hot-gpu", node, gpu=3, value="86")
    url = _exporters(world)[node]

    def hot() -> float | None:
        temps = {
            dict(k[1])["gpu"]: v
            for k, v in _scrape(url).items()
            if k[0] == "krea_gpu_temperature_celsius"
        }
        return temps["3"] if temps.get("3", 0) > 78 else None

    assert wait_for(hot, timeout=90) > 78
    if os.environ.get("CI") or shutil.which("prometheus"):
        require_binary("prometheus")
        from prometheus_api_client import PrometheusConnect

        prom_url = wait_for(
            lambda: (
                _core(world)
                .read_namespaced_config_map("krea-ops-config", "krea-ops")
                .data.get("prometheusURL")
            ),
            timeout=30,
        )
        prom = PrometheusConnect(url=prom_url, disable_ssl=True)
        query = f'krea_gpu_temperature_celsius{{node="{node}",gpu="3"}} > 78'
        assert wait_for(lambda: prom.custom_query(query), timeout=60)


def test_infiniband_counters_only_grow(world: SimWorld) -> None:
    url = _exporters(world)["gpu-node-001"]
    names = (
        "krea_ib_port_data_received_bytes_total",
        "krea_ib_port_transmit_wait_total",
        "krea_ib_symbol_error_total",
    )
    first = {k: v for k, v in _scrape(url).items() if k[0] in names}
    assert first
    later = wait_for(
        lambda: (
            (s := {k: v for k, v in _scrape(url).items() if k[0] in names})
            and any(s[k] > first[k] for k in first if k in s)
            and s
        ),
        timeout=30,
    )
    for key, value in first.items():
        assert later[key] >= value, key


def test_kubectl_prints_a_believable_cluster(world: SimWorld, tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    env = {**os.environ, "KUBECONFIG": str(world.kubeconfig), "HOME": str(tmp_path)}
    out = subprocess.run(
        [kubectl, "get", "nodes,pods,workloads,clusterqueues", "-A"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "gpu-node-007" in text and "burst-vk" in text
    assert "krea-ops-exporter-" in text and "dit-xl" in text
    assert "clusterqueue.kueue.x-k8s.io/training" in text
    assert "workload.kueue.x-k8s.io/" in text
