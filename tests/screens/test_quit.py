"""Quitting the dashboard with work in flight, against a stalled API server: a read is
left behind and the process ends at once (it used to wait the read's 30 s timeout after
``q``); a write (an evict the operator confirmed) is waited for, and lands whole.

The API server is the embedded simulator with its fault switch (a latency on one verb
and resource); the dashboard is the real app and Console, quitting as ``q`` does."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from krea_ops.console import Console
from krea_ops.kube.cluster import Cluster
from krea_ops.runbook.nodes import TAINT_KEY
from krea_ops.settings import load_settings
from krea_ops.sim.apiserver.local import LocalApiServer
from screens.app import KreaOpsApp
from tests.faults.conftest import product, sim
from tests.runbook.conftest import fleet, node_obj
from tests.screens.conftest import give_evict_reason, plan_dialog, wait_until

__all__ = ["product", "sim"]

NODE = "gpu-node-001"
READ_TIMEOUT_S = 30  # the product's API request timeout (krea_ops.kube.cluster.connect)


@pytest.fixture
def app(
    sim: LocalApiServer, product: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> KreaOpsApp:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    fleet(product, 3)
    settings = load_settings(
        {
            "kubeconfig": str(sim.kubeconfig),
            "prometheus_url": "http://127.0.0.1:9",  # no telemetry: nodes read UNKNOWN
            "audit_log": str(tmp_path / "audit.jsonl"),
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


def test_quitting_over_a_stalled_read_ends_at_once(sim: LocalApiServer, app: KreaOpsApp) -> None:
    faults = sim.api.faults

    async def body(pilot: Any) -> None:
        await wait_until(pilot, lambda: app.fleet_snapshot() is not None, timeout=60)
        faults.set([{"verbs": ["list"], "resources": ["nodes"], "latency": 120}])
        # the next refresh's node list arrives and is held
        await wait_until(pilot, lambda: faults.seen("list", "nodes") >= 1, timeout=30)
        await pilot.pause(0.5)

    took = quit_time(app, body)
    assert faults.injected("list", "nodes"), "no read was stalled"
    assert took < READ_TIMEOUT_S / 2, f"quitting waited {took:.1f} s for a stalled read"


def test_quitting_during_an_evict_waits_for_it_and_it_lands_whole(
    sim: LocalApiServer, product: Cluster, app: KreaOpsApp, tmp_path: Path
) -> None:
    faults = sim.api.faults

    async def body(pilot: Any) -> None:
        await give_evict_reason(app, pilot, NODE, "hot")
        await wait_until(pilot, lambda: plan_dialog(app))
        # every write to a node takes 2 s: the evict is mid-way when q is pressed
        faults.set([{"verbs": ["patch"], "resources": ["nodes"], "latency": 2}])
        await pilot.press("tab", "enter")  # Run
        await wait_until(pilot, lambda: faults.seen("patch", "nodes") >= 1, timeout=30)

    took = quit_time(app, body)
    spec = node_obj(product, NODE)["spec"]
    assert spec.get("unschedulable") is True
    assert TAINT_KEY in [t["key"] for t in spec.get("taints") or []]
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert records[-1].get("status") == "done", records[-1]
    assert took >= 1.0, f"quitting took {took:.1f} s: it did not wait for the write"
