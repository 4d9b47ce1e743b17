"""The dashboard while its sources go away and come back: the error line says what is
wrong (not only that the data ages), and clears by itself once they answer again."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.console import Console
from krea_ops.settings import load_settings
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.fixtures import EPOCH, FixedConsole, synthetic_fleet
from screens.app import KreaOpsApp
from tests.conftest import PROCFS_TREE
from tests.screens.conftest import wait_until
from tests.telemetry.conftest import KreaNode, Prometheus, Target, start_krea_node


def error_line(app: KreaOpsApp) -> str:
    line = app.screen.query_one("#error-line")
    return str(line.render()) if line.display else ""


def _create_node(sim: LocalApiServer, name: str) -> None:
    api = sim.api_client()
    client.CoreV1Api(api).create_node(
        {
            "metadata": {"name": name},
            "status": {
                "capacity": {"nvidia.com/gpu": "8"},
                "allocatable": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    api.close()


@pytest.fixture
def exporter() -> Iterator[KreaNode]:
    node = start_krea_node("node-a", PROCFS_TREE)
    yield node
    node.stop()


def test_the_error_line_names_a_lost_source_and_clears_when_it_returns(
    exporter: KreaNode, tmp_path: Path
) -> None:
    targets = [Target(exporter.address, "krea")]
    prom = Prometheus(targets)
    sim = LocalApiServer(tmp_path / "api")
    _create_node(sim, "node-a")
    settings = load_settings(
        {
            "kubeconfig": str(sim.kubeconfig),
            "prometheus_url": prom.url,
            "telemetry_window_s": 10.0,
            "telemetry_stale_s": 30.0,
            "telemetry_timeout_s": 3.0,
        },
        env={},
    )
    app = KreaOpsApp(Console(settings), refresh_s=1.0)
    servers: list[Any] = [prom, sim]

    async def body() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_until(pilot, lambda: app.fleet_snapshot() is not None)
            await wait_until(pilot, lambda: error_line(app) == "")

            prom.stop()
            text = await wait_until(pilot, lambda: "telemetry:" in (t := error_line(app)) and t)
            assert f"Prometheus at {prom.url} is not answering" in text, text
            again = Prometheus(targets, port=prom.port)
            servers.append(again)
            await wait_until(pilot, lambda: "telemetry:" not in error_line(app))

            sim.close()
            text = await wait_until(pilot, lambda: "fleet:" in (t := error_line(app)) and t)
            assert f"cannot reach the API server at {sim.url}" in text, text
            back = LocalApiServer(tmp_path / "api", port=sim.front.port, token=sim.token)
            servers.append(back)
            await wait_until(pilot, lambda: "fleet:" not in error_line(app))
            snap = app.fleet_snapshot()
            assert snap is not None and [v.info.name for v in snap.views] == ["node-a"]

    try:
        asyncio.run(body())
    finally:
        for server in reversed(servers):
            if isinstance(server, LocalApiServer):
                server.close()
            else:
                server.stop()


def test_a_read_that_hangs_is_said_to_be_slow_while_it_waits() -> None:
    """A source that neither answers nor refuses (a partition): the read waits for its
    timeouts; meanwhile the error line says so instead of the data only ageing."""
    release = threading.Event()

    class Hanging(FixedConsole):
        def fleet(self, scope: Any = None) -> Any:
            snap = super().fleet()
            if self.calls["fleet"] > 1:
                release.wait(30)
            return snap

    console = Hanging(synthetic_fleet(4))
    app = KreaOpsApp(console, refresh_s=0.5, clock=lambda: EPOCH + 1.0, slow_read_s=1.0)

    async def body() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_until(pilot, lambda: console.calls.get("fleet", 0) >= 2)
            text = await wait_until(pilot, lambda: "no answer for" in (t := error_line(app)) and t)
            assert text.startswith("fleet: no answer for") and "still trying" in text
            release.set()
            await wait_until(pilot, lambda: "no answer" not in error_line(app))

    try:
        asyncio.run(body())
    finally:
        release.set()
