"""The queue, burst and training screens on the demo's simulated world, driven by keys.

The world runs Kueue, two DiT trainings (one admitted, one too big to fit), inference
with a virtual kubelet, and checkpoints on disk. Each test opens its screen the way an
operator does (digit keys, ``:``) and asserts what shows: cells, the why paragraph, the
PAUSED banner, the checkpoint list with complete/why-not, and that a failing read keeps
the old rows, greyed, with the error in the footer line. Which training Kueue admits first
is the simulator's race, so the tests look it up instead of assuming it.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Static

from krea_ops import units
from krea_ops.burst import PAUSE_TAINT_KEY, PAUSE_TAINT_VALUE, PAUSED_REASON
from krea_ops.errors import KreaError
from krea_ops.queue import BLOCKERS
from krea_ops.sim.machines.story import LARGE, QUEUED, SMALL
from screens.burst import BurstScreen
from screens.queue import QueueScreen
from screens.text import table_cursor_key
from screens.training import TrainingScreen
from tests.screens.conftest import make_app, wait_until

SIZE = (140, 45)
TRAININGS = (SMALL, LARGE, QUEUED)  # the story's, as the demo runs it
VK = "burst-vk"
NODE = "gpu-node-003"


def gpu_quota(world: Any, flavor: str) -> dict[str, str]:
    """ClusterQueue -> its nominal GPU quota on ``flavor``, as its spec says."""
    custom: Any = client.CustomObjectsApi(world.client)
    out = {}
    for cq in custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues")[
        "items"
    ]:
        for group in cq["spec"]["resourceGroups"]:
            for fl in group["flavors"]:
                for res in fl["resources"]:
                    if fl["name"] == flavor and res["name"] == "nvidia.com/gpu":
                        out[cq["metadata"]["name"]] = str(res["nominalQuota"])
    return out


def keys(table: DataTable[Any]) -> list[str]:
    return [str(k.value) for k in table.rows]


def shown(table: DataTable[Any]) -> list[str]:
    """Row keys top to bottom, as the rows are on screen."""
    return [
        str(table.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value)
        for i in range(table.row_count)
    ]


def cell(table: DataTable[Any], row: str, column: str) -> str:
    return str(table.get_cell(row, column))


def text(widget: Static) -> str:
    return str(widget.content)


def error_line(app: Any) -> str:
    line = app.screen.query_one("#error-line", Static)
    return text(line) if line.display else ""


async def move_to(pilot: Any, table: DataTable[Any], key: str) -> None:
    """Arrow keys until the cursor is on ``key``, as an operator would."""
    for _ in range(2 * table.row_count + 2):
        current = table_cursor_key(table)
        if current == key:
            return
        target = table.get_row_index(key)
        await pilot.press("down" if table.cursor_row < target else "up")
    raise AssertionError(f"cursor never reached {key} (at {table_cursor_key(table)})")


async def quiet(pilot: Any, app: Any) -> None:
    """Let the reads in flight land before the app closes (the help dialog pauses the
    refresh), so no answer arrives while the app tears its screens down."""
    await pilot.press("question_mark")
    await wait_until(pilot, lambda: all(w.is_finished for w in app.workers), timeout=30)
    await pilot.pause(0.2)


def set_pause(world: Any, reason: str | None) -> None:
    """Add (reason given) or remove our pause taint on the virtual node, as
    ``burst pause`` does: the taint ``krea.ai/burst-paused=true:NoSchedule`` and the
    reason in an annotation (free text; a taint's value must be a label value), by
    read-modify-write on the resourceVersion."""
    core = client.CoreV1Api(world.client)
    for _ in range(20):
        raw: Any = core.read_node(VK, _preload_content=False)  # the raw response
        node = json.loads(raw.data)
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != PAUSE_TAINT_KEY]
        if reason is not None:
            taints.append(
                {"key": PAUSE_TAINT_KEY, "value": PAUSE_TAINT_VALUE, "effect": "NoSchedule"}
            )
        patch = {
            "metadata": {
                "resourceVersion": node["metadata"]["resourceVersion"],
                "annotations": {PAUSED_REASON: reason},  # None removes it
            },
            "spec": {"taints": taints},
        }
        try:
            core.patch_node(
                VK,
                patch,
                _preload_content=False,
                _content_type="application/merge-patch+json",
            )
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise AssertionError("could not update the virtual node's taints")


def cordon(world: Any, node: str, on: bool) -> None:
    core = client.CoreV1Api(world.client)
    core.patch_node(
        node,
        {"spec": {"unschedulable": on}},
        _preload_content=False,
        _content_type="application/merge-patch+json",
    )


def test_queue_shows_quota_workloads_and_why_the_pending_one_waits(dashboard_world: Any) -> None:
    async def body() -> None:
        app = make_app(dashboard_world)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("3")
            await wait_until(pilot, lambda: isinstance(app.screen, QueueScreen))
            screen = app.screen
            cqs = screen.query_one("#cq-table", DataTable)
            wls = screen.query_one("#wl-table", DataTable)

            # both ClusterQueues on the h200 flavor, with Kueue's reservation filled in
            await wait_until(
                pilot,
                lambda: (
                    {"training/h200", "inference/h200"} <= set(keys(cqs))
                    and cell(cqs, "training/h200", "reserved") != "-"
                ),
            )
            # the quota each ClusterQueue's spec gives the flavor
            for cq, nominal in gpu_quota(dashboard_world, "h200").items():
                assert cell(cqs, f"{cq}/h200", "nominal") == nominal
            assert int(cell(cqs, "training/h200", "reserved")) > 0
            assert "█" in cell(cqs, "training/h200", "bar")
            assert "flavor h200:" in text(screen.query_one("#flavors", Static))

            # the trainings are workloads; some run, the sweep waits with Kueue's reason
            # (the story's sweep, which waits for quota the running ones hold; the large
            # training may wait a moment too, while Kueue preempts inference for it)
            def pending() -> str | None:
                rows = [k for k in keys(wls) if any(t in k for t in TRAININGS)]
                waiting = [k for k in rows if QUEUED in k and cell(wls, k, "state") == "pending"]
                running = [k for k in rows if cell(wls, k, "state") == "admitted"]
                if running and len(waiting) == 1 and cell(wls, waiting[0], "reason"):
                    return waiting[0]
                return None

            key = await wait_until(pilot, pending)
            reason = cell(wls, key, "reason")
            assert cell(wls, key, "gang").endswith("x8")
            assert cell(wls, key, "position").lstrip("~").isdigit()
            assert any(
                cell(wls, k, "state") == "admitted" for k in keys(wls) if "dit-" in k and k != key
            )

            # select it: the why paragraph names the blocker and quotes Kueue
            await move_to(pilot, wls, key)
            await pilot.press("enter")
            why = screen.query_one("#why", Static)
            await wait_until(pilot, lambda: reason in text(why) and "Waiting for:" in text(why))
            assert key.split("/", 1)[1] in text(why)
            assert any(phrase in text(why) for phrase in BLOCKERS.values())
            assert "Kueue says:" in text(why)

            # / narrows the workloads, Esc brings them back, the cursor stays on its row
            total = wls.row_count
            await pilot.press("slash", *"ablation")
            await wait_until(pilot, lambda: 0 < wls.row_count < total)
            assert all("ablation" in k for k in keys(wls))
            await pilot.press("escape")
            # every workload of the latest read again (the story's world moves on: some may
            # have finished since the count above)
            await wait_until(
                pilot,
                lambda: wls.row_count == len(app.latest("queue").reading.workloads) > 0,
            )
            assert isinstance(app.screen, QueueScreen)

            # a refresh keeps the cursor on the same workload, wherever its row went
            await move_to(pilot, wls, key)
            before = app.updated_at["queue"]
            await wait_until(pilot, lambda: app.updated_at["queue"] > before)
            await pilot.pause()
            assert table_cursor_key(wls) == key

            # a cordoned node: the h200 drift goes negative, in red, and names it
            cordon(dashboard_world, NODE, True)
            try:
                flavors = screen.query_one("#flavors", Static)
                await wait_until(pilot, lambda: f"{NODE} cordoned" in text(flavors))
                await wait_until(pilot, lambda: cell(cqs, "training/h200", "drift").startswith("-"))
                drift = cqs.get_cell("training/h200", "drift")
                assert "red" in str(drift.style)
                line = next(ln for ln in text(flavors).splitlines() if NODE in ln)
                assert line.startswith("flavor h200:") and "drift -" in line
            finally:
                cordon(dashboard_world, NODE, False)

            await quiet(pilot, app)

    asyncio.run(body())


def test_burst_shows_the_virtual_node_providers_and_pause(dashboard_world: Any) -> None:
    async def body() -> None:
        app = make_app(dashboard_world)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("4")
            await wait_until(pilot, lambda: isinstance(app.screen, BurstScreen))
            screen = app.screen
            nodes = screen.query_one("#vnode-table", DataTable)
            providers = screen.query_one("#provider-table", DataTable)
            banner = screen.query_one("#paused", Static)

            await wait_until(pilot, lambda: VK in keys(nodes) and providers.row_count > 0)
            assert "virtual-kubelet.io/provider=burst:NoSchedule" in cell(nodes, VK, "theirs")
            assert cell(nodes, VK, "ours") == "-"
            assert "Ready" in cell(nodes, VK, "state")
            assert not banner.display
            assert all(k.startswith(f"{VK}/") for k in keys(providers))
            summary = text(screen.query_one("#burst-summary", Static))
            assert "inference pending with no node:" in summary

            set_pause(dashboard_world, "provider outage drill")
            try:
                await wait_until(pilot, lambda: banner.display, timeout=20)
                assert "PAUSED" in text(banner)
                assert "provider outage drill" in text(banner)
                assert cell(nodes, VK, "state").startswith("PAUSED")
                assert "krea.ai/burst-paused=true:NoSchedule" in cell(nodes, VK, "ours")
            finally:
                set_pause(dashboard_world, None)
            await wait_until(pilot, lambda: not banner.display, timeout=20)
            assert not cell(nodes, VK, "state").startswith("PAUSED")

            await quiet(pilot, app)

    asyncio.run(body())


def test_training_lists_runs_checkpoints_and_advice(dashboard_world: Any) -> None:
    async def body() -> None:
        app = make_app(dashboard_world)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("5")
            await wait_until(pilot, lambda: isinstance(app.screen, TrainingScreen))
            screen = app.screen
            runs = screen.query_one("#run-table", DataTable)
            ckpts = screen.query_one("#ckpt-table", DataTable)
            # the story's trainings, the small and the large one at least (the sweep
            # joins once the large one is admitted)
            await wait_until(pilot, lambda: {SMALL, LARGE} <= {k.split("/")[1] for k in keys(runs)})
            assert {k.split("/")[1] for k in keys(runs)} <= set(TRAININGS)

            # the admitted run writes checkpoints (every 600 simulated seconds)
            def checkpointed() -> str | None:
                for k in keys(runs):
                    if cell(runs, k, "step")[:1].isdigit():
                        return k
                return None

            key = await wait_until(pilot, checkpointed)
            by_key = {f"{r.namespace}/{r.name}": r for r in app.latest("training").runs}
            run = by_key[key]
            # another run of another size (its advice must differ)
            other = next(k for k, r in by_key.items() if k != key and r.nodes != run.nodes)
            assert cell(runs, key, "state") == "Running"
            assert cell(runs, key, "shape").endswith("x8")

            # its progress as train status judges it, and the status under the table (a
            # gang between two attempts, its pods pending again, is PENDING meanwhile)
            def judged() -> str | None:
                status = app.latest("training").statuses.get(key)
                state = status.judgement.state if status is not None else None
                return state if state in ("STARTING", "RUNNING", "SLOW") else None

            await wait_until(pilot, judged)
            await move_to(pilot, runs, key)
            box = screen.query_one("#run-status", Static)
            await wait_until(pilot, lambda: text(box).startswith(f"{key}: "))
            assert "progress: step" in text(box) and "why:" in text(box)
            assert cell(runs, key, "progress").split()[0] in ("STARTING", "RUNNING", "SLOW")

            # a save that crashed before committing, on the shared volume
            crashed = Path(run.local_dir) / "step-99999999"
            crashed.mkdir(parents=True)
            (crashed / "__0_0.distcp").write_bytes(b"\0" * 512)
            old = time.time() - 3600
            os.utime(crashed / "__0_0.distcp", (old, old))

            await move_to(pilot, runs, key)
            title = screen.query_one("#ckpt-title", Static)
            await wait_until(pilot, lambda: key in text(title))
            await wait_until(pilot, lambda: str(crashed) in keys(ckpts))
            assert cell(ckpts, str(crashed), "name") == "step-99999999"
            status = cell(ckpts, str(crashed), "status")
            assert status.startswith("incomplete:") and ".metadata" in status
            complete = [k for k in keys(ckpts) if cell(ckpts, k, "status") == "complete"]
            assert complete, [cell(ckpts, k, "status") for k in keys(ckpts)]
            assert shown(ckpts)[0] == str(crashed)  # newest first
            # the run's column shows the newest *complete* step, not the crashed one
            assert cell(runs, key, "step") != "99,999,999"
            assert cell(ckpts, complete[0], "step") == cell(runs, key, "step")

            advice = text(screen.query_one("#advice", Static))
            assert run.advice is not None
            assert units.duration(run.advice.daly_interval_s) in advice
            assert units.duration(run.advice.young_interval_s) in advice
            assert units.duration(run.advice.recommended.lost_s_per_failure) in advice
            assert f"waste {units.percent(run.advice.recommended.waste_ratio, 1)}" in advice
            assert f"{run.advice.nodes} nodes x 6.5 failures" in advice

            # the other run: its own (empty or not) list and its own advice
            await move_to(pilot, runs, other)
            await wait_until(pilot, lambda: other in text(title))
            assert str(crashed) not in keys(ckpts)
            runs_read = app.latest("training").runs
            other_run = next(r for r in runs_read if f"{r.namespace}/{r.name}" == other)
            assert other_run.advice is not None and other_run.advice.nodes != run.advice.nodes
            advice = text(screen.query_one("#advice", Static))
            assert f"{other_run.advice.nodes} nodes x 6.5 failures" in advice
            assert units.duration(other_run.advice.daly_interval_s) in advice

            await quiet(pilot, app)

    asyncio.run(body())


def test_failed_queue_read_keeps_rows_greyed_and_shows_the_error(dashboard_world: Any) -> None:
    async def body() -> None:
        app = make_app(dashboard_world)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("colon", *"queue", "enter")
            await wait_until(pilot, lambda: isinstance(app.screen, QueueScreen))
            screen = app.screen
            wls = screen.query_one("#wl-table", DataTable)
            await wait_until(pilot, lambda: wls.row_count > 0)
            rows = keys(wls)

            def boom() -> Any:
                raise KreaError("boom: the Kueue API is not answering")

            app.session.queue = boom
            await wait_until(pilot, lambda: "queue: boom" in error_line(app))
            assert wls.has_class("stale")
            assert screen.query_one("#cq-table", DataTable).has_class("stale")
            assert keys(wls) == rows  # the last good rows stay
            assert isinstance(app.screen, QueueScreen)

            await quiet(pilot, app)

    asyncio.run(body())


def test_training_shows_the_selected_runs_restarts_as_node_health_recorded_them(
    dashboard_world: Any,
) -> None:
    """What node-health's restart recorder persisted (its state ConfigMap, as the
    controller writes it) shows under the selected run: newest first, lost work, the
    node/GPU it is attributed to, and the evidence of the newest."""
    from krea_ops.controllers.loop import write_state
    from krea_ops.kube.cluster import connect

    cluster = connect(str(dashboard_world.kubeconfig), None)
    now = time.time()

    def record(number: int, node: str | None, gpu: int | None, cause: str, ago: float) -> Any:
        evidence = (
            [f"{node}: GPU {gpu} at 86 °C, above 78 °C (BAD, seen from 4 min before it)"]
            if node
            else ["no BAD or SUSPECT finding on the gang's 2 node(s) from 10:00 to 10:17 UTC"]
        )
        return {
            "number": number,
            "at": now - ago,
            "at_exact": True,
            "gpus": 16,
            "nodes": 2,
            "attribution": {
                "node": node,
                "gpu": gpu,
                "port": None,
                "cause": cause,
                "confidence": 0.84 if node else 0.0,
                "evidence": evidence,
            },
            "failed": [],
            "lost_steps": 120 * number,
            "lost_gpu_hours": 1.5,
            "last_step": 1320,
            "resumed_step": 1200,
        }

    async def body() -> None:
        app = make_app(dashboard_world)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("5")
            await wait_until(pilot, lambda: isinstance(app.screen, TrainingScreen))
            screen = app.screen
            runs = screen.query_one("#run-table", DataTable)
            await wait_until(pilot, lambda: any(SMALL in k for k in keys(runs)))
            key = next(k for k in keys(runs) if k.endswith(f"/{SMALL}"))
            await move_to(pilot, runs, key)
            title = screen.query_one("#restart-title", Static)
            await wait_until(pilot, lambda: "nothing recorded" in text(title))
            recorder = {
                "log": {
                    key: [
                        record(1, None, None, "unattributed", 3600),
                        record(2, "gpu-node-003", 5, "thermal", 600),
                    ]
                },
                "gangs": {key: {"uid": "u", "restarts": 2, "unrecorded": 0}},
            }
            write_state(cluster, "krea-ops", {"node-health": {"recorder": recorder}})
            table = screen.query_one("#restart-table", DataTable)
            await wait_until(pilot, lambda: keys(table) == ["2", "1"])
            assert f"Restarts of {key}: 2 recorded" in text(title)
            assert cell(table, "2", "target") == "gpu-node-003 GPU 5"
            assert cell(table, "2", "cause") == "thermal"
            assert cell(table, "2", "confidence") == "0.84"
            assert cell(table, "2", "lost") == "240 steps, 1.5 GPU-h"
            assert cell(table, "1", "target") == "unattributed"
            assert cell(table, "1", "confidence") == "-"
            evidence = text(screen.query_one("#restart-evidence", Static))
            assert evidence.startswith("#2: gpu-node-003: GPU 5 at 86 °C")

    try:
        asyncio.run(body())
    finally:
        cluster.close()
