"""Quitting the dashboard with work in flight, against a stalled API server: a read is
left behind and the process ends at once (it used to wait the read's 30 s timeout after
``q``); a write (an evict the operator confirmed) is waited for, and lands whole.

The stalled read on each control plane: the dashboard reaches the API server through a
TCP proxy that stops forwarding (an API server partitioned away). The write in flight on
the embedded one: its fault switch holds only the node PATCHes (a latency on one verb and
resource), which nothing in front of kube-apiserver can single out. The dashboard is the
real app and Console, quitting as ``q`` does."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from krea_ops.console import Console
from krea_ops.kube.cluster import Cluster
from krea_ops.runbook.nodes import TAINT_KEY
from krea_ops.settings import load_settings
from krea_ops.sim.common.kubeconfig import write_kubeconfig
from screens.app import KreaOpsApp
from tests.conftest import EMBEDDED_ONLY, sim_on_control_plane
from tests.controllers.conftest import PausableProxy, proxy
from tests.kube.conftest import cluster
from tests.runbook.conftest import fleet, node_obj
from tests.screens.conftest import give_evict_reason, plan_dialog, wait_until

__all__ = ["cluster", "proxy", "sim"]

sim = sim_on_control_plane  # an API server per test, on each control plane

NODE = "gpu-node-001"
READ_TIMEOUT_S = 30  # the product's API request timeout (krea_ops.kube.cluster.connect)


@pytest.fixture
def nodes(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    fleet(cluster, 3)
    yield cluster


def make_app(kubeconfig: Path, audit: Path) -> KreaOpsApp:
    settings = load_settings(
        {
            "kubeconfig": str(kubeconfig),
            "prometheus_url": "http://127.0.0.1:9",  # no telemetry: nodes read UNKNOWN
            "audit_log": str(audit),
        },
        env={},
    )
    return KreaOpsApp(Console(settings), refresh_s=1.0)


def quit_time(app: KreaOpsApp, body: Any) -> float:
    """Seconds from leaving the app (as ``q`` does) to the event loop's end, which waits
    for the executor the app's worker threads run on."""
    left: list[float] = []

    async def run() -> None:
        async with app.run_test(size=(140, 50)) as pilot:
            await body(pilot)
            left.append(time.monotonic())

    asyncio.run(run())
    return time.monotonic() - left[0]


def test_quitting_over_a_stalled_read_ends_at_once(
    sim: Any, nodes: Cluster, proxy: PausableProxy, tmp_path: Path
) -> None:
    proxied = write_kubeconfig(
        tmp_path / "proxied", f"https://127.0.0.1:{proxy.port}", sim.token,
        sim.ca_cert.read_bytes(),
    )  # fmt: skip
    app = make_app(proxied, tmp_path / "audit.jsonl")

    async def body(pilot: Any) -> None:
        await wait_until(pilot, lambda: app.fleet_snapshot() is not None, timeout=60)
        proxy.pause()  # nothing gets through: the next refresh's read hangs
        await wait_until(pilot, lambda: app._in_flight, timeout=30)
        await pilot.pause(0.5)

    took = quit_time(app, body)
    assert took < READ_TIMEOUT_S / 2, f"quitting waited {took:.1f} s for a stalled read"


@EMBEDDED_ONLY
def test_quitting_during_an_evict_waits_for_it_and_it_lands_whole(
    sim: Any, nodes: Cluster, tmp_path: Path
) -> None:
    faults = sim.api.faults
    app = make_app(sim.kubeconfig, tmp_path / "audit.jsonl")

    async def body(pilot: Any) -> None:
        await give_evict_reason(app, pilot, NODE, "hot")
        await wait_until(pilot, lambda: plan_dialog(app))
        # every write to a node takes 2 s: the evict is mid-way when q is pressed
        faults.set([{"verbs": ["patch"], "resources": ["nodes"], "latency": 2}])
        await pilot.press("tab", "enter")  # Run
        await wait_until(pilot, lambda: faults.seen("patch", "nodes") >= 1, timeout=30)

    took = quit_time(app, body)
    spec = node_obj(nodes, NODE)["spec"]
    assert spec.get("unschedulable") is True
    assert TAINT_KEY in [t["key"] for t in spec.get("taints") or []]
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert records[-1].get("status") == "done", records[-1]
    assert took >= 1.0, f"quitting took {took:.1f} s: it did not wait for the write"
