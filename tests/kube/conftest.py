"""A simulated API server per test, reached through the product's Cluster and a real kubectl."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from krea_ops.kube.cluster import Cluster
from krea_ops.sim.local import LocalApiServer
from tests.conftest import Kubectl
from tests.sim import conftest as sim_conftest

sim = sim_conftest.sim  # one simulated API server per test, as in tests/sim


@pytest.fixture
def cluster(sim: LocalApiServer) -> Iterator[Cluster]:
    with sim.api_client() as api:
        yield Cluster(api, timeout_s=30)


@pytest.fixture
def kubectl(sim: LocalApiServer, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.kubeconfig, tmp_path / "home")


def create(cluster: Cluster, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    answer = cluster.request(f"create {path}", "POST", path, body=obj)
    assert answer.ok and answer.body is not None, (answer.status, answer.body)
    return answer.body


def set_status(cluster: Cluster, path: str, status: dict[str, Any]) -> dict[str, Any]:
    answer = cluster.request(
        f"status {path}",
        "PATCH",
        f"{path}/status",
        body={"status": status},
        content_type="application/merge-patch+json",
    )
    assert answer.ok and answer.body is not None, (answer.status, answer.body)
    return answer.body


def gpu_node(cluster: Cluster, name: str, taints: list[dict[str, str]] | None = None) -> None:
    spec = {"taints": taints} if taints else {}
    create(cluster, "/api/v1/nodes", {"metadata": {"name": name}, "spec": spec})


def running_pod(
    cluster: Cluster, name: str, labels: dict[str, str], *, ready: bool = True
) -> dict[str, Any]:
    path = "/api/v1/namespaces/default/pods"
    pod = create(
        cluster,
        path,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "img:1"}]},
        },
    )
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    set_status(cluster, f"{path}/{name}", {"phase": "Running", "conditions": [condition]})
    return pod
