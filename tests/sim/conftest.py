"""A simulated API server per test, reached through the official Python client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from krea_ops.sim.apiserver.local import LocalApiServer


@pytest.fixture
def sim(tmp_path) -> Iterator[LocalApiServer]:  # type: ignore[no-untyped-def]
    server = LocalApiServer(tmp_path / "state")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def api(sim: LocalApiServer) -> Iterator[client.ApiClient]:
    with sim.api_client() as api_client:
        yield api_client


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)
