"""The node screen's `v`: a quick validation through the plan dialog (the Job's POST shown,
nothing created before Run), the Job pinned to the node once run, then the wait for it in
the background and its result in the screen's validation box, recorded on the node. On a
simulated world per control plane whose machines answer validation Jobs, their tools cut
short (``WorldConfig.extra``, as ``tests/world/test_validation_sim.py`` does)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Static

from krea_ops.console import Console
from krea_ops.kube.cluster import Cluster
from krea_ops.settings import load_settings
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.world import SimWorld
from krea_ops.validation import Check, Validation
from krea_ops.validation_status import NodeValidation
from screens.app import KreaOpsApp
from screens.dialogs import OutcomeScreen
from screens.node import NodeScreen, validation_text
from tests.screens.conftest import plan_dialog, wait_until

NODE = "gpu-node-001"
SELECTOR = "app.kubernetes.io/name=krea-ops-validation"
EXTRA = {
    "slow_burners": False,
    "devices_period_s": 15.0,
    "validation_dcgm_r2_s": 30.0,
    "validation_nccl_s": 20.0,
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, control_plane: str) -> Iterator[SimWorld]:
    config = WorldConfig(
        control_plane=control_plane,
        nodes=3,
        speed=60,
        exporters=False,
        prometheus=False,
        failure_multiplier=0.0,
        extra=dict(EXTRA),
    )
    state = tmp_path_factory.mktemp(f"validate-screen-{control_plane}")
    with SimWorld(config, state, parts=("devices", "cluster", "kueue")) as w:
        yield w


def make_app(world: SimWorld, audit: Path) -> tuple[KreaOpsApp, Cluster]:
    values = {
        "kubeconfig": str(world.kubeconfig),
        "prometheus_url": "http://127.0.0.1:9",  # no telemetry: nodes read UNKNOWN
        "audit_log": str(audit),
    }
    console = Console(load_settings(values, env={}))
    return KreaOpsApp(console, refresh_s=60.0), console.cluster


def box(app: KreaOpsApp) -> str:
    """The node screen's validation box ("" until it is composed)."""
    found = app.screen.query("#validation")
    return str(found.first(Static).render()) if found else ""


def dialog_text(app: KreaOpsApp) -> str:
    return "\n".join(str(w.render()) for w in app.screen.query(Static))


def jobs_on(cluster: Cluster, node: str) -> list[dict[str, Any]]:
    body = cluster.get("jobs", "/apis/batch/v1/namespaces/krea-ops/jobs", labelSelector=SELECTOR)
    out = []
    for job in body["items"]:
        affinity = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        [term] = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        if term["matchFields"][0]["values"] == [node]:
            out.append(job)
    return out


def test_v_on_the_node_screen_plans_runs_and_shows_the_result(
    world: SimWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")

    async def body() -> None:
        app, cluster = make_app(world, tmp_path / "audit.jsonl")
        async with app.run_test(size=(140, 50)) as pilot:
            app.open_node(NODE)
            await wait_until(pilot, lambda: "Validation: none on record" in box(app))
            actions = dict(dict(app.help_sections()).get("Actions", []))
            assert "validate this node" in actions["v"]

            await pilot.press("v")
            confirm = await wait_until(pilot, lambda: plan_dialog(app))
            text = dialog_text(app)
            assert "POST /apis/batch/v1/namespaces/krea-ops/jobs" in text
            assert f"create Job krea-ops/krea-validate-{NODE}-quick-" in text
            assert jobs_on(cluster, NODE) == []  # planning created nothing
            assert app.focused is confirm.query_one("#cancel", Button)
            await pilot.press("tab", "enter")  # Run
            outcome = await wait_until(
                pilot, lambda: app.screen if isinstance(app.screen, OutcomeScreen) else None
            )
            assert outcome.title_text == f"validate {NODE}: done", outcome.lines
            [job] = jobs_on(cluster, NODE)
            assert job["metadata"]["annotations"]["krea.ai/validation-node"] == NODE
            assert job["metadata"]["labels"]["krea.ai/validation-level"] == "quick"
            await pilot.press("escape")
            assert isinstance(app.screen, NodeScreen)

            # the wait runs in the background: the screen answers meanwhile, and says so
            await wait_until(pilot, lambda: "running: krea-ops/krea-validate-" in box(app))
            await wait_until(pilot, lambda: "Validation: pass (quick)" in box(app), timeout=90)
            shown = box(app)
            assert "✓ dcgm" in shown and "✓ nccl" in shown and "against 450.0 (nominal)" in shown
            assert "running:" not in shown and NODE not in app.validating

            # recorded on the node, and the node's next read shows the same
            notes = cluster.node(NODE).annotations
            recorded = Validation.from_annotation(NODE, notes.get("krea.ai/validation"))
            assert recorded is not None and recorded.passed
            assert recorded.job == f"krea-ops/{job['metadata']['name']}"
            screen = app.screen
            assert isinstance(screen, NodeScreen)

            def read_again() -> bool:
                view = screen.view
                return view is not None and "krea.ai/validation" in view.info.annotations

            await wait_until(pilot, read_again)
            assert "Validation: pass (quick)" in box(app)

    asyncio.run(body())


def test_the_box_shows_a_failure_its_details_and_what_the_node_waits_for() -> None:
    nccl = Check(
        "nccl", False, "bus bandwidth 261.3 GB/s, under 405.0", 261.3, "GB/s", 450.0,
        "pool median of 3",
    )  # fmt: skip
    checks = (Check("dcgm", True, "4 tests passed"), nccl)
    failed = Validation(NODE, "quick", 1000.0, checks, job="krea-ops/krea-validate-x", by="alice")
    standing = NodeValidation(NODE, failed, needs_repair="nccl", pending=True, evicted_at=900.0)
    text = str(validation_text(standing, None, 1600.0))
    assert text.splitlines() == [
        "Validation: FAIL (quick) 10m ago by alice, Job krea-ops/krea-validate-x",
        "  ✗ nccl 261.3 GB/s against 450.0 (pool median of 3): bus bandwidth 261.3 GB/s, "
        "under 405.0",
        "  ✓ dcgm 4 tests passed",
        "needs repair: krea.ai/needs-repair=nccl",
        "pending validation: tainted krea.ai/validation until it passes",
        "(v validates)",
    ]
    # read-only (or a console that cannot write): no key to offer
    lines = str(validation_text(standing, None, 1600.0, can_validate=False)).splitlines()
    assert "(v validates)" not in lines and len(lines) == 5
    # a node never validated, not out and not pending: one line
    assert str(validation_text(NodeValidation(NODE, None), None, 0.0)) == (
        "Validation: none on record"
    )
    out = NodeValidation(NODE, None, evicted_at=900.0)
    running = ("krea-ops/krea-validate-y", "Running")
    assert str(validation_text(out, running, 1600.0)).splitlines() == [
        "Validation: none on record",
        "evicted 11m ago; none since its eviction",
        "running: krea-ops/krea-validate-y (Running), waiting for its result…",
    ]
