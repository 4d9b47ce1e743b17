"""The training and burst screens' actions, against a simulated API server with the real
Console: `S` resumes the selected finished run from its newest complete checkpoint and `L`
launches it again under a new name (each through the plan dialog, which starts on
Cancel); `p` asks why and pauses bursting on every virtual node, `P` unpauses; `b` with no
free in-cluster GPU is refused in one line and writes nothing.

An API server per test: the actions on each control plane (upstream, the real Kueue and
JobSet controller act on what the plans make), on nodes registered as their kubelets do;
the header's reading of what the test writes on the embedded one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, DataTable, Input, Static

from krea_ops.burst import PAUSE_TAINT_KEY, PAUSED_REASON
from krea_ops.console import Console
from krea_ops.kube.cluster import Cluster
from krea_ops.runbook.training import jobset_path
from krea_ops.settings import load_settings
from krea_ops.training.manifests import RESUME_FROM_ANNOTATION, spec_of
from screens.app import KreaOpsApp
from screens.dialogs import ConfirmScreen, OutcomeScreen, ReasonScreen
from screens.training import next_name
from tests.conftest import sim_on_control_plane
from tests.kube.conftest import Kubelets, cluster, create, registered
from tests.runbook.conftest import node_obj
from tests.runbook.test_train import NAME, NS, launched
from tests.screens.conftest import cluster_actors, gpu_nodes, plan_dialog, wait_until
from tests.training.dcp_fixture import write_dcp_checkpoint

__all__ = ["cluster", "sim"]

sim = sim_on_control_plane  # an API server per test, on each control plane

# The header reads what the test itself writes (a Lease, a ConfigMap), which no control
# plane acts on: once, on the embedded one.
EMBEDDED = pytest.mark.parametrize("control_plane", ["embedded"], indirect=True)

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
VKS = ("vk-runpod", "vk-salad")
TERMINAL = ("Failed", "Completed")  # a JobSet's conditions once it has ended


def kueue_and_nodes(cluster: Cluster, count: int = 2) -> None:
    """What a launch checks: the namespace's LocalQueue, its ClusterQueue and GPU
    flavor, the priority class, and ``count`` Ready nodes of 8 GPUs in the flavor. The
    quota is the flavor's GPUs (as quota-sync sets it): one gang of ``count`` nodes
    takes it all, and the next waits, suspended, for Kueue to admit it. (Each object
    says its kind: the API server takes a custom resource's from the body only.)"""

    def kind(name: str) -> dict[str, str]:
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": name}

    create(
        cluster,
        f"{KUEUE}/resourceflavors",
        {
            **kind("ResourceFlavor"),
            "metadata": {"name": "h200"},
            "spec": {"nodeLabels": {"krea.ai/pool": "h200"}},
        },
    )
    create(
        cluster,
        f"{KUEUE}/clusterqueues",
        {
            **kind("ClusterQueue"),
            "metadata": {"name": "training"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "h200",
                                "resources": [
                                    {"name": "nvidia.com/gpu", "nominalQuota": 8 * count}
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    create(
        cluster,
        f"{KUEUE}/namespaces/{NS}/localqueues",
        {
            **kind("LocalQueue"),
            "metadata": {"name": "training"},
            "spec": {"clusterQueue": "training"},
        },
    )
    create(
        cluster,
        f"{KUEUE}/workloadpriorityclasses",
        {**kind("WorkloadPriorityClass"), "metadata": {"name": "training"}, "value": 1000},
    )
    gpu_nodes(cluster, count)  # gpu-node-000 ..., labelled krea.ai/pool=h200


def virtual_kubelets(cluster: Cluster) -> None:
    """The virtual nodes as virtual-kubelet registers them: labelled
    ``type=virtual-kubelet``, tainted with their provider, Ready (their Leases renewed by
    the test's ``Kubelets``)."""
    for vk, provider in zip(VKS, ("runpod", "salad"), strict=True):
        taint = {"key": "virtual-kubelet.io/provider", "value": provider, "effect": "NoSchedule"}
        create(
            cluster,
            "/api/v1/nodes",
            {
                "metadata": {"name": vk, "labels": {"type": "virtual-kubelet"}},
                "spec": {"taints": [taint]},
                "status": {
                    "capacity": {"nvidia.com/gpu": "64", "pods": "1000"},
                    "allocatable": {"nvidia.com/gpu": "64", "pods": "1000"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                },
            },
        )
    for vk in VKS:
        registered(cluster, vk)


def make_app(sim: Any, audit: Path, **settings: Any) -> KreaOpsApp:
    values = {
        "kubeconfig": str(sim.kubeconfig),
        "prometheus_url": "http://127.0.0.1:9",  # no telemetry
        "audit_log": str(audit),
        **settings,
    }
    return KreaOpsApp(Console(load_settings(values, env={})), refresh_s=60.0)


@pytest.fixture(autouse=True)
def quiet_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")


def dialog_text(app: KreaOpsApp) -> str:
    return "\n".join(str(w.render()) for w in app.screen.query(Static))


async def run_the_plan(app: KreaOpsApp, pilot: Any, count: int = 1) -> OutcomeScreen:
    """The confirm dialog is up and starts on Cancel; for more than one node the count
    is typed first; then Run, and the outcome."""
    confirm = await wait_until(pilot, lambda: plan_dialog(app))
    assert app.focused is confirm.query_one("#cancel", Button)
    if count > 1:
        await pilot.press("tab", "enter")  # Run without the count: refused, still here
        await pilot.pause(0.1)
        assert app.screen is confirm
        confirm.query_one("#confirm-count", Input).focus()
        await pilot.press(*str(count))
        confirm.query_one("#run", Button).focus()
        await pilot.press("enter")
    else:
        await pilot.press("tab", "enter")
    outcome: OutcomeScreen = await wait_until(
        pilot, lambda: app.screen if isinstance(app.screen, OutcomeScreen) else None, timeout=90
    )
    return outcome


def jobsets(cluster: Cluster) -> dict[str, dict[str, Any]]:
    answer = cluster.request("jobsets", "GET", jobset_path(NS))
    assert answer.body is not None
    return {o["metadata"]["name"]: o for o in answer.body["items"]}


def test_next_name_counts_up_past_the_names_taken() -> None:
    assert next_name("dit", set()) == "dit-2"
    assert next_name("dit", {"dit-2", "dit-3"}) == "dit-4"
    assert next_name("dit-7", set()) == "dit-8"
    assert next_name("dit-v2", set()) == "dit-v2-2"


def test_training_screen_resumes_and_launches_again(
    sim: Any, cluster: Cluster, tmp_path: Path, control_plane: str
) -> None:
    root = tmp_path / "mnt"
    run_dir = root / NS / NAME
    write_dcp_checkpoint(run_dir / "step-100")
    write_dcp_checkpoint(run_dir / "step-200")
    write_dcp_checkpoint(run_dir / "step-300", commit=False)  # the crash's incomplete step
    failed = launched(cluster)  # Failed: maxRestarts spent
    audit = tmp_path / "audit.jsonl"

    async def body() -> None:
        app = make_app(sim, audit, training_checkpoint_mount=f"/checkpoints={root}")
        async with app.run_test(size=(150, 50)) as pilot:
            app.go("training")
            table = await wait_until(
                pilot,
                lambda: next(
                    (t for t in app.screen.query("#run-table").results(DataTable) if t.row_count),
                    None,
                ),
            )
            assert table.row_count == 1
            actions = dict(dict(app.help_sections()).get("Actions", []))
            assert set(actions) == {"L", "S"}

            # S: delete the Failed run and create it again from step-200, never step-300
            await pilot.press("S")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            text = dialog_text(app)
            assert f"DELETE {jobset_path(NS, NAME)}" in text
            assert f"POST {jobset_path(NS)}" in text and "step-200" in text
            assert "step-300" not in text.split("Findings")[0]
            assert jobsets(cluster)[NAME]["status"]["restarts"] == 10  # nothing written yet
            outcome = await run_the_plan(app, pilot)
            assert outcome.title_text == f"resume {NS}/{NAME}: done", outcome.lines
            resumed = jobsets(cluster)[NAME]
            assert resumed["metadata"]["annotations"][RESUME_FROM_ANNOTATION].endswith("step-200")
            # a new JobSet, with nothing of the failed one's status (its Failed condition,
            # its restarts); upstream, the JobSet controller writes its own on it at once
            # (Suspended while Kueue has not admitted it: setJobSetSuspendedCondition)
            assert resumed["metadata"]["uid"] != failed["metadata"]["uid"]
            status = resumed.get("status") or {}
            ended = [c for c in status.get("conditions") or () if c["type"] in TERMINAL]
            assert not ended and not status.get("restarts"), status
            await pilot.press("escape")

            # L: the same gang under a new name, starting fresh in its own directory
            await pilot.press("L")
            prompt = await wait_until(
                pilot, lambda: app.screen if isinstance(app.screen, ReasonScreen) else None
            )
            assert prompt.query_one("#reason", Input).value == f"{NAME}-2"
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            assert f"POST {jobset_path(NS)}" in dialog_text(app)
            assert f"{NAME}-2" not in jobsets(cluster)
            outcome = await run_the_plan(app, pilot)
            assert outcome.title_text == f"launch {NS}/{NAME}-2: done", outcome.lines
            again = jobsets(cluster)[f"{NAME}-2"]
            old, new = spec_of(resumed), spec_of(again)
            assert (new.nodes, new.image, new.queue, new.args) == (
                old.nodes,
                old.image,
                old.queue,
                old.args,
            )
            assert new.resume_from is None and new.checkpoints == f"/checkpoints/{NS}/{NAME}-2"
            assert again["spec"]["suspend"] is True  # for Kueue to admit

    with cluster_actors(sim, control_plane):
        kueue_and_nodes(cluster)
        asyncio.run(body())
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [r["action"] for r in records if r["record"] == "end"] == [
        "train resume",
        "train launch",
    ]


def test_burst_screen_pauses_unpauses_and_refuses_a_migrate_with_no_room(
    sim: Any, cluster: Cluster, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"

    def paused() -> dict[str, str | None]:
        out = {}
        for vk in VKS:
            obj = node_obj(cluster, vk)
            keys = {t["key"] for t in obj["spec"].get("taints") or []}
            reason = (obj["metadata"].get("annotations") or {}).get(PAUSED_REASON)
            out[vk] = reason if PAUSE_TAINT_KEY in keys else None
        return out

    async def body() -> None:
        app = make_app(sim, audit)
        async with app.run_test(size=(150, 50)) as pilot:
            app.go("burst")
            await pilot.pause(0.3)
            assert set(dict(dict(app.help_sections()).get("Actions", []))) == {"b", "o", "p", "P"}

            # b: no in-cluster GPU is free, so the plan is refused in one line
            await pilot.press("b")
            await pilot.pause(0.2)
            note = await wait_until(
                pilot,
                lambda: next((n for n in app._notifications if n.severity == "error"), None),
            )
            assert note.message.startswith("migrate back: ") and "\n" not in note.message
            assert not isinstance(app.screen, ConfirmScreen)

            await pilot.press("p")
            await wait_until(pilot, lambda: isinstance(app.screen, ReasonScreen))
            await pilot.press(*"drill")
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            assert paused() == {vk: None for vk in VKS}
            outcome = await run_the_plan(app, pilot, count=len(VKS))
            assert outcome.title_text == "pause bursting: done", outcome.lines
            assert paused() == {vk: "drill" for vk in VKS}
            await pilot.press("escape")

            await pilot.press("P")
            outcome = await run_the_plan(app, pilot, count=len(VKS))
            assert outcome.title_text == "unpause bursting: done", outcome.lines
            assert paused() == {vk: None for vk in VKS}

    with Kubelets(sim):  # the virtual kubelets' Leases
        virtual_kubelets(cluster)
        asyncio.run(body())
    assert not [
        r for r in map(json.loads, audit.read_text().splitlines()) if r["action"] == "burst migrate"
    ]


@EMBEDDED
def test_header_shows_the_controllers_and_a_reached_blast_cap(
    sim: Any, cluster: Cluster, tmp_path: Path
) -> None:
    """What the runner leaves in the cluster (its Lease renewed now, node-health's state
    with the cap reached) reads in the header as controllers led and the cap in red;
    with the Lease expired, none running."""
    import time

    from krea_ops.kube.times import rfc3339

    create(cluster, "/api/v1/namespaces", {"metadata": {"name": "krea-ops"}})
    leases = "/apis/coordination.k8s.io/v1/namespaces/krea-ops/leases"
    now = rfc3339(time.time()).replace("Z", ".000000Z")
    lease = create(
        cluster,
        leases,
        {
            "metadata": {"name": "krea-ops-node-health"},
            "spec": {
                "holderIdentity": "controllers-0-ab12",
                "leaseDurationSeconds": 15,
                "acquireTime": now,
                "renewTime": now,
            },
        },
    )
    # node-health holds one node (its cap), operators evicted two more: found, the header
    # read "quarantined 2/1 (cap reached)" after a manual evict
    state = {"cap": {"quarantined_unacked": 1, "operators": 2, "limit": 1, "reached": True},
             "veto": {"active": False, "classes": {}}}  # fmt: skip
    create(
        cluster,
        "/api/v1/namespaces/krea-ops/configmaps",
        {"metadata": {"name": "krea-ops-controller-state"},
         "data": {"node-health": json.dumps(state)}},
    )  # fmt: skip

    async def body() -> None:
        app = make_app(sim, tmp_path / "audit.jsonl")

        def header_with(text: str) -> str | None:
            shown = str(app.screen.query_one("#status-bar").render())
            return shown if text in shown else None

        async with app.run_test(size=(200, 50)) as pilot:
            header = await wait_until(
                pilot,
                lambda: header_with("controllers:"),
            )
            assert "controllers: 1/4 led" in header
            assert "node-health holds 1/1 (cap reached)  2 nodes out by operators" in header

            # the leader stopped renewing 20 s ago: its Lease has expired
            old = rfc3339(time.time() - 20).replace("Z", ".000000Z")
            cluster.request(
                "renew",
                "PATCH",
                f"{leases}/krea-ops-node-health",
                body={"spec": {"renewTime": old},
                      "metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]}},
                content_type="application/merge-patch+json",
            )  # fmt: skip
            app.action_refresh_now()
            header = await wait_until(
                pilot,
                lambda: header_with("none running"),
            )
            assert "quarantined" not in header

    asyncio.run(body())
