"""The dashboard's node actions: `e` asks why, plans (nothing written), shows the plan in
a dialog that starts on Cancel, and runs it only after Run; `R` restores; read-only mode
and Esc write nothing. Against an API server per test with the real Console: the evict
and restore on each control plane, on nodes whose kubelets run (``cluster_actors``) and a
pod its ReplicaSet made; what only the dialog does (Esc, read-only) on the embedded one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Static

from krea_ops.console import Console
from krea_ops.kube.cluster import Cluster
from krea_ops.settings import load_settings
from screens.app import KreaOpsApp
from screens.dialogs import ConfirmScreen, OutcomeScreen, ReasonScreen
from tests.conftest import sim_on_control_plane, wait_for
from tests.kube.conftest import cluster, create
from tests.runbook.conftest import node_obj, pod_names
from tests.screens.conftest import (
    cluster_actors,
    give_evict_reason,
    gpu_nodes,
    plan_dialog,
    wait_until,
)
from tests.validated import pass_validation

__all__ = ["cluster", "sim"]

sim = sim_on_control_plane  # an API server per test, on each control plane

# What the dialog alone decides (Esc, read-only) sends nothing to the cluster, whichever
# control plane it is: once, on the embedded one.
DIALOG_ONLY = pytest.mark.parametrize("control_plane", ["embedded"], indirect=True)

NODE = "gpu-node-001"
OUR_TAINT = "krea.ai/unhealthy"


@pytest.fixture
def nodes(sim: Any, cluster: Cluster, control_plane: str) -> Iterator[Cluster]:
    """12 GPU nodes (one is within the default 10 % share), their kubelets running."""
    with cluster_actors(sim, control_plane):
        gpu_nodes(cluster, 12)
        yield cluster


@pytest.fixture
def web(nodes: Cluster) -> str:
    """The pod of ReplicaSet ``web`` (one replica, on NODE by its hostname label) as the
    ReplicaSet controller made it, scheduled there and Running; its name. (A pod naming
    an owner that does not exist is refused upstream, by Kueue's pod webhook.)"""
    labels = {"app": "web"}
    template = {
        "metadata": {"labels": labels},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "containers": [{"name": "c", "image": "img:1"}],
        },
    }
    create(
        nodes,
        "/apis/apps/v1/namespaces/default/replicasets",
        {
            "metadata": {"name": "web", "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
        },
    )

    def running() -> str | None:
        body = nodes.get("pods", "/api/v1/namespaces/default/pods", labelSelector="app=web")
        for pod in body["items"]:
            running = (pod.get("status") or {}).get("phase") == "Running"
            if pod["spec"].get("nodeName") == NODE and running:
                return str(pod["metadata"]["name"])
        return None

    name: str = wait_for(running, timeout=60)
    return name


@pytest.fixture
def audit(tmp_path: Path) -> Path:
    return tmp_path / "audit.jsonl"


def make_app(sim: Any, audit: Path, **settings: Any) -> KreaOpsApp:
    values = {
        "kubeconfig": str(sim.kubeconfig),
        "prometheus_url": "http://127.0.0.1:9",  # no telemetry: nodes read UNKNOWN
        "audit_log": str(audit),
        **settings,
    }
    console = Console(load_settings(values, env={}))
    return KreaOpsApp(console, refresh_s=60.0, read_only=bool(settings.get("dashboard_read_only")))


@pytest.fixture
def quiet_config(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    yield


def taint_keys(cluster: Cluster) -> list[str]:
    return [t["key"] for t in node_obj(cluster, NODE)["spec"].get("taints") or []]


def dialog_text(app: KreaOpsApp) -> str:
    return "\n".join(str(w.render()) for w in app.screen.query(Static))


def test_evict_from_the_node_screen_asks_why_shows_the_plan_then_runs_it(
    sim: Any, nodes: Cluster, web: str, audit: Path, quiet_config: None
) -> None:
    async def body() -> None:
        app = make_app(sim, audit)
        async with app.run_test(size=(140, 50)) as pilot:
            app.open_node(NODE)
            await pilot.pause(0.2)
            actions = dict(dict(app.help_sections()).get("Actions", []))
            assert set(actions) == {"e", "R", "v"} and "evict this node" in actions["e"]
            await pilot.press("e")
            await wait_until(pilot, lambda: isinstance(app.screen, ReasonScreen))
            # an empty reason is not accepted: the dialog stays
            await pilot.press("enter")
            await pilot.pause(0.1)
            assert isinstance(app.screen, ReasonScreen)
            for key in "hot gpu":
                await pilot.press("space" if key == " " else key)
            await pilot.press("enter")
            confirm = await wait_until(pilot, lambda: plan_dialog(app))
            text = dialog_text(app)
            assert f"PATCH /api/v1/nodes/{NODE}" in text
            assert "/eviction" in text and web in text
            assert f"{OUR_TAINT}=hot-gpu:NoSchedule" in text
            # planning wrote nothing, and the dialog starts on Cancel
            assert OUR_TAINT not in taint_keys(nodes)
            assert not node_obj(nodes, NODE)["spec"].get("unschedulable")
            assert app.focused is confirm.query_one("#cancel", Button)
            await pilot.press("tab")  # to Run
            assert app.focused is confirm.query_one("#run", Button)
            await pilot.press("enter")
            outcome = await wait_until(
                pilot,
                lambda: app.screen if isinstance(app.screen, OutcomeScreen) else None,
                timeout=90,
            )
            assert outcome.title_text == f"evict {NODE}: done", outcome.lines
            assert node_obj(nodes, NODE)["spec"]["unschedulable"] is True
            assert OUR_TAINT in taint_keys(nodes)
            assert pod_names(nodes, NODE) == []
            records = [json.loads(line) for line in audit.read_text().splitlines()]
            assert records and {r.get("reason") for r in records if "reason" in r} == {"hot gpu"}
            await pilot.press("escape")

            # e again on the node now out says who took it out, when and why, before any
            # plan (found: it did not, and replaced the first reason)
            def seen_out() -> bool:
                snapshot = app.fleet_snapshot()
                view = snapshot.view(NODE) if snapshot is not None else None
                return view is not None and "krea.ai/evicted-by" in view.info.annotations

            await wait_until(pilot, seen_out, timeout=60)
            await pilot.press("e")
            await wait_until(pilot, lambda: isinstance(app.screen, ReasonScreen))
            asked = dialog_text(app)
            assert f"{NODE} is already out: taken out by krea-sim-admin at " in asked
            assert ": hot gpu. That stays the first reason" in asked
            await pilot.press("escape")

            # R on the node with no validation since: refused in one line saying how to
            # validate it, no plan dialog, nothing written
            await pilot.press("R")
            refusal = await wait_until(
                pilot,
                lambda: next(
                    (
                        n
                        for n in app._notifications
                        if n.severity == "error" and str(n.message).startswith(f"restore {NODE}")
                    ),
                    None,
                ),
            )
            said = str(refusal.message)
            assert said.startswith(f"restore {NODE}: node {NODE} has no validation since its ")
            assert f"(krea-ops nodes validate {NODE})" in said and "--force" in said
            assert plan_dialog(app) is None
            assert OUR_TAINT in taint_keys(nodes)

            # validated since: R restores: the same dialog, then our taint and cordon are gone
            pass_validation(nodes, NODE)
            await pilot.press("R")
            confirm = await wait_until(pilot, lambda: plan_dialog(app))
            assert f"PATCH /api/v1/nodes/{NODE}" in dialog_text(app)
            await pilot.press("tab", "enter")
            outcome = await wait_until(
                pilot,
                lambda: app.screen if isinstance(app.screen, OutcomeScreen) else None,
                timeout=60,
            )
            assert outcome.title_text == f"restore {NODE}: done", outcome.lines
            assert OUR_TAINT not in taint_keys(nodes)
            assert not node_obj(nodes, NODE)["spec"].get("unschedulable")

    asyncio.run(body())


@DIALOG_ONLY
def test_escape_on_the_plan_writes_nothing(
    sim: Any, nodes: Cluster, web: str, audit: Path, quiet_config: None
) -> None:
    async def body() -> None:
        app = make_app(sim, audit)
        async with app.run_test(size=(140, 50)) as pilot:
            await give_evict_reason(app, pilot, NODE, "flaky")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("escape")
            await pilot.pause(0.5)
            assert not isinstance(app.screen, (ConfirmScreen, OutcomeScreen))
        assert OUR_TAINT not in taint_keys(nodes)
        assert not node_obj(nodes, NODE)["spec"].get("unschedulable")
        assert pod_names(nodes, NODE) == [f"default/{web}"]
        assert not audit.exists()

    asyncio.run(body())


@DIALOG_ONLY
def test_read_only_offers_no_action(
    sim: Any, nodes: Cluster, web: str, audit: Path, quiet_config: None
) -> None:
    async def body() -> None:
        app = make_app(sim, audit, dashboard_read_only=True)
        async with app.run_test(size=(140, 50)) as pilot:
            app.open_node(NODE)
            await pilot.pause(0.2)
            await pilot.press("e")
            await pilot.pause(0.3)
            assert not isinstance(app.screen, (ReasonScreen, ConfirmScreen))
            sections = dict(app.help_sections())
            assert "Actions" not in sections
        assert OUR_TAINT not in taint_keys(nodes)
        assert not audit.exists()

    asyncio.run(body())
