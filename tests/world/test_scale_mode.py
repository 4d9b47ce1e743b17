"""The scale mode (``sim serve --telemetry-nodes N``): a fleet bigger than its telemetry.

A world of 250 nodes with devices on the first 8, on each control plane, as a user sees
it: every node Ready, exporters and GPU readings for the 8 nodes only (the other GPUs
are listed with unknown readings), the fleet's 128-node training admitted and running,
and kubectl listing the nodes. The 5,000-node figures are ``benchmarks/bench_scale.py``'s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.sim.machines.burst import default_services
from krea_ops.sim.machines.fleet import NAMESPACE, plan_trainings, scale_config
from krea_ops.sim.world import SimWorld
from tests.conftest import Kubectl, cli, require_binary, wait_for

NODES = 250
TELEMETRY = 8
# Generous: CI machines are loaded, and 500 DaemonSet pods and a 128-node gang come up
# through the real scheduler, controllers and Kueue on two cores.
UP_S = 150.0


@pytest.fixture(scope="module")
def world(control_plane: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWorld]:
    import dataclasses

    config = dataclasses.replace(
        scale_config(
            NODES,
            TELEMETRY,
            speed=4.0,
            # a small inference fleet: the DaemonSets and the gang are what this is about
            inference_services=default_services(8),
            slow_burners=False,
        ),
        control_plane=control_plane,
    )
    with SimWorld(config, tmp_path_factory.mktemp("scale") / "state") as w:
        yield w


def _items(raw: Any) -> list[dict[str, Any]]:
    return list(json.loads(raw.data).get("items") or [])


def _ready(node: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def _gpu_nodes(w: SimWorld) -> list[dict[str, Any]]:
    nodes = _items(client.CoreV1Api(w.client).list_node(_preload_content=False))
    return [n for n in nodes if n["metadata"]["name"].startswith("gpu-node-")]


def test_every_node_is_ready_and_kubectl_lists_them(world: SimWorld, tmp_path: Path) -> None:
    require_binary("kubectl")

    def all_ready() -> int:
        nodes = _gpu_nodes(world)
        return len(nodes) if len(nodes) == NODES and all(map(_ready, nodes)) else 0

    wait_for(all_ready, timeout=UP_S, interval=1.0)
    kubectl = Kubectl(world.kubeconfig, tmp_path)
    out = kubectl("get", "nodes", "-l", "nvidia.com/gpu.present=true", "--no-headers")
    rows = [line.split() for line in out.stdout.splitlines() if line.strip()]
    assert len(rows) == NODES
    assert {row[1] for row in rows} == {"Ready"}


def test_only_the_telemetry_nodes_have_exporters_and_readings(world: SimWorld) -> None:
    expected = {f"gpu-node-{i:03d}" for i in range(TELEMETRY)}
    config = client.CoreV1Api(world.client).read_namespaced_config_map(
        "krea-ops-config", "krea-ops", _preload_content=False
    )
    exporters = json.loads(json.loads(config.data)["data"]["exporters"])
    assert set(exporters) == expected
    assert world.wait_for_readings(UP_S)
    env = {"KUBECONFIG": str(world.kubeconfig), "HOME": os.environ.get("HOME", "/root")}

    def read() -> list[dict[str, Any]]:
        result = cli("gpus", "-o", "json", env=env, timeout=120)
        assert result.returncode == 0, result.stderr
        rows: list[dict[str, Any]] = json.loads(result.stdout)
        read = {r["node"] for r in rows if r["temperature_c"] is not None}
        return rows if read == expected else []

    rows = wait_for(read, timeout=UP_S, interval=2.0)
    # every GPU of the fleet is listed; only the telemetry nodes' have readings
    assert len({r["node"] for r in rows}) == NODES
    assert len(rows) == NODES * world.world.config.gpus_per_node
    unknown = [r for r in rows if r["node"] not in expected]
    assert unknown and all(r["temperature_c"] is None for r in unknown)


def test_a_training_of_many_nodes_runs(world: SimWorld) -> None:
    ((name, size),) = plan_trainings(NODES)
    assert size == 128
    core = client.CoreV1Api(world.client)

    def running() -> set[str]:
        pods = _items(
            core.list_namespaced_pod(
                NAMESPACE,
                label_selector=f"jobset.sigs.k8s.io/jobset-name={name}",
                _preload_content=False,
            )
        )
        live = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        nodes = {str(p["spec"]["nodeName"]) for p in live}
        return nodes if len(live) == size and len(nodes) == size else set()

    nodes = wait_for(running, timeout=UP_S, interval=1.0)
    assert all(n.startswith("gpu-node-") for n in nodes)
