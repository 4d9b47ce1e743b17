"""What the API-server fault tests share: a simulated API server per test (no world), the
cluster as the product reaches it (its own ``ApiClient``: ``krea_ops.kube.client``), and
the audit log of the commands a test runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from krea_ops.kube.client import api_client
from krea_ops.kube.cluster import Cluster
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.commands.conftest import audit
from tests.kube.conftest import cluster, kubectl
from tests.sim.conftest import api, core, sim

__all__ = ["api", "audit", "cluster", "core", "kubectl", "sim"]


@pytest.fixture
def product(sim: LocalApiServer) -> Iterator[Cluster]:
    """The simulated cluster through the ``ApiClient`` the commands and controllers use
    (made from the kubeconfig by ``krea_ops.kube.client.api_client``)."""
    with api_client(str(sim.kubeconfig)) as api:
        yield Cluster(api, timeout_s=30)


def kubeconfig(sim: LocalApiServer) -> list[str]:
    return ["--kubeconfig", str(sim.kubeconfig)]
