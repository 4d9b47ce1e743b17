"""The node drill-down and the fabric screen, driven with Pilot.

Against the demo's simulated world (4 nodes, exporters, Prometheus): Enter on the heatmap
opens the node with its 8 GPUs, sparklines and DaemonSet pods; a hot GPU injected into
the world turns its row BAD with the reason; the fabric lists the 32 InfiniBand ports,
filters to one node and opens it; an unreachable Prometheus shows the error and UNKNOWN.
Against a fixed 64-node fleet (``FixedConsole``): the 500-row cap, the cursor kept across
refreshes, and a failing read greying the screen.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from textual.css.query import NoMatches
from textual.widgets import DataTable, Sparkline, Static

from krea_ops import units
from krea_ops.sim.fixtures import FixedConsole, synthetic_fleet
from krea_ops.sim.machines.faults import inject_fault
from screens.app import KreaOpsApp
from screens.fabric import FabricScreen
from screens.fleet import FleetScreen
from screens.node import NodeScreen
from screens.widgets.heatmap import GpuHeatmap
from tests.screens.conftest import make_app, wait_until

SIZE = (120, 40)


def table(app: KreaOpsApp, table_id: str) -> DataTable[Any]:
    return app.screen.query_one(f"#{table_id}", DataTable)


def rows(app: KreaOpsApp, table_id: str) -> dict[str, dict[str, str]]:
    """Row key -> column key -> the cell's text, as the user reads it ({} while the
    screen is still being composed)."""
    try:
        t = table(app, table_id)
    except NoMatches:
        return {}
    columns = [str(c.value) for c in t.columns]
    return {
        str(r.key.value): dict(zip(columns, (str(c) for c in t.get_row(r.key)), strict=True))
        for r in t.ordered_rows
    }


def text_of(app: KreaOpsApp, widget_id: str) -> str:
    try:
        return str(app.screen.query_one(f"#{widget_id}", Static).render())
    except NoMatches:
        return ""


async def settle(pilot: Any, app: KreaOpsApp) -> None:
    """Let the reads in flight land and start no more before the app exits: a read that
    lands during shutdown makes KreaOpsApp._update_status raise ScreenStackError."""
    app.action_help()  # a modal pauses the refresh
    await wait_until(
        pilot,
        lambda: all(w.is_finished for w in app.workers if w.group.startswith("load-")),
    )
    await pilot.pause(0.2)


def gpu_numbers_shown(app: KreaOpsApp) -> bool:
    if not isinstance(app.screen, NodeScreen):
        return False
    gpus = rows(app, "gpus")
    return len(gpus) == 8 and all(r["temp"].endswith("°C") for r in gpus.values())


def all_nodes_reporting(app: KreaOpsApp) -> bool:
    snap = app.fleet_snapshot()
    if snap is None:
        return False
    gpu_views = [v for v in snap.views if not v.info.virtual]
    return len(gpu_views) == 4 and all(
        v.telemetry is not None and v.telemetry.gpus and v.telemetry.exporter_up for v in gpu_views
    )


def pod_ages_follow_the_wall_clock(app: KreaOpsApp, on_node: list[Any]) -> bool:
    """Each pod's AGE is what ``units.age`` prints for the wall time since its start, within a
    couple of refreshes, and the DaemonSet pods' (up since the world started) is not 0s."""
    shown = rows(app, "pods")
    now = time.time()
    for p in on_node:
        cell = shown.get(f"{p.namespace}/{p.name}", {}).get("age")
        if cell is None or p.started_at is None:
            return False
        since = now - p.started_at
        if cell not in {units.age(since - lag) for lag in range(0, 4)}:
            return False
        if p.namespace == "kube-system" and cell == units.age(0):
            return False
    return True


# --- the simulated world ---------------------------------------------------------------------


def test_enter_on_heatmap_opens_node_with_gpus_history_and_pods(dashboard_world: Any) -> None:
    async def body() -> None:
        app = make_app(dashboard_world)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: all_nodes_reporting(app))
            heatmap = app.screen.query_one(GpuHeatmap)
            node = await wait_until(pilot, lambda: heatmap.cursor_key)
            await pilot.press("enter")
            screen = await wait_until(
                pilot, lambda: isinstance(app.screen, NodeScreen) and app.screen
            )
            assert screen.node == node
            assert set(screen.kinds()) == {"fleet", f"node:{node}"}

            await wait_until(pilot, lambda: gpu_numbers_shown(app))
            gpus = rows(app, "gpus")
            assert list(gpus) == [str(i) for i in range(8)]
            for r in gpus.values():
                assert r["busy"].endswith("%") and r["tensor"].endswith("%")
                assert r["power"].endswith("W") and "GiB" in r["memory"]
                assert r["verdict"] in ("OK", "SUSPECT", "BAD")
            header = text_of(app, "node-header")
            view = app.latest(f"node:{node}").detail.view  # the read the screen shows
            assert node in header and str(view.verdict.severity) in header
            for reason in view.verdict.reasons:
                assert reason.message in header
            assert "Ready: yes" in header and "cordoned: no" in header

            # the node's DaemonSet pods, exactly the ones the API has on it
            # (pods come and go as the world runs: the screen, refreshing, catches up with
            # the API's list of the same moment)
            def agrees() -> Any:
                on = app.session.cluster.pods_on_node(node)
                shown = rows(app, "pods")
                same = shown and set(shown) == {f"{p.namespace}/{p.name}" for p in on}
                return same and (on, shown)

            on_node, pods = await wait_until(pilot, agrees)
            daemons = [r for r in pods.values() if r["owner"].startswith("DaemonSet/")]
            assert daemons and all(r["namespace"] == "kube-system" for r in daemons)
            # their ages count from their start on the wall clock, which the simulator's
            # stamps follow at any speed: seconds after the world started, not 0s
            await wait_until(pilot, lambda: pod_ages_follow_the_wall_clock(app, on_node))

            # 8 IB ports with live rates
            ib = await wait_until(pilot, lambda: len(rows(app, "ib")) == 8 and rows(app, "ib"))
            assert all(r["state"].startswith("ACTIVE") for r in ib.values())

            # history: "collecting…" until two refreshes, then a sparkline per GPU
            def sparklines() -> list[Sparkline]:
                return [s for s in app.screen.query(Sparkline) if len(s.data or []) >= 2]

            await wait_until(pilot, lambda: len(sparklines()) == 16)
            label = text_of(app, "hist-3-temp-label")
            assert label.startswith("GPU 3") and "°C" in label and "collecting" not in label

            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))

            # :node of a node that is not in the fleet says so and opens nothing
            app.run_command("node gpu-node-404")

            def warning() -> Any:
                return next((n for n in app._notifications if "404" in str(n.message)), None)

            warned = await wait_until(pilot, warning)
            assert str(warned.message) == (
                "no node gpu-node-404 in the fleet (krea-ops nodes list shows them)"
            )
            assert isinstance(app.screen, FleetScreen)
            # a node screen whose node is not (or no longer) there says so, and no part of
            # it waits on "collecting…" (found: the history did)
            app.open_node("gpu-node-404")
            await wait_until(pilot, lambda: isinstance(app.screen, NodeScreen))
            await wait_until(pilot, lambda: "not in the fleet" in text_of(app, "node-header"))
            assert rows(app, "gpus") == {}
            assert "collecting" not in text_of(app, "history-note")
            await settle(pilot, app)

    asyncio.run(body())


def test_hot_gpu_turns_its_row_bad_with_the_reason(dashboard_world: Any) -> None:
    async def body() -> None:
        app = make_app(dashboard_world)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
            app.open_node("gpu-node-001")
            await wait_until(pilot, lambda: gpu_numbers_shown(app))
            assert rows(app, "gpus")["3"]["verdict"] != "BAD"
            inject_fault(dashboard_world.client, "hot-gpu", "gpu-node-001", gpu=3, value=90.0)

            # (at 60x the fault heats the GPU within one device tick, which can land
            # between two NVML reads of one scrape: the clock event or the margin of the
            # hot GPU may read before its temperature does, for that one scrape)
            def hot() -> Any:
                r = rows(app, "gpus")["3"]
                return r["verdict"] == "BAD" and int(r["temp"].removesuffix("°C")) >= 78 and r

            gpu3 = await wait_until(pilot, hot, 45)
            assert "GPU 3" in gpu3["reason"]
            view = app.latest("node:gpu-node-001").detail.view  # the read the screen shows
            assert str(view.verdict.severity) == "BAD"
            header = text_of(app, "node-header")
            assert all(r.message in header for r in view.verdict.reasons if r.gpu == 3)
            assert rows(app, "gpus")["0"]["verdict"] != "BAD"  # only GPU 3 is hot
            await settle(pilot, app)

    asyncio.run(body())


def test_fabric_lists_ib_ports_filters_and_opens_a_node(dashboard_world: Any) -> None:
    async def body() -> None:
        app = make_app(dashboard_world)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("2")
            await wait_until(pilot, lambda: isinstance(app.screen, FabricScreen))
            fabric = await wait_until(
                pilot,
                lambda: (
                    (f := rows(app, "fabric"))
                    and sum(r["kind"] == "ib" for r in f.values()) == 32
                    and f
                ),
            )
            assert {r["node"] for r in fabric.values()} == {f"gpu-node-00{i}" for i in range(4)}
            assert "gpu-node-002/ib/mlx5_3/1" in fabric
            # found: the Fabric screen said "0 NVLink links" while every node screen said
            # 144: both count each GPU's links (18 per H200, 8 GPUs a node, 4 nodes)
            assert "32 InfiniBand ports, 576 NVLink links" in text_of(app, "summary")

            await pilot.press("slash")
            await pilot.press(*"node-002")
            only = await wait_until(pilot, lambda: (f := rows(app, "fabric")) and len(f) == 8 and f)
            assert {r["node"] for r in only.values()} == {"gpu-node-002"}
            assert "filter 'node-002': 8 match" in text_of(app, "summary")
            await pilot.press("enter")  # keeps the filter, back to the table
            await pilot.press("down")
            await pilot.press("enter")
            screen = await wait_until(
                pilot, lambda: isinstance(app.screen, NodeScreen) and app.screen
            )
            assert screen.node == "gpu-node-002"
            nvlink = await wait_until(pilot, lambda: "144" in text_of(app, "nvlink") and
                                      text_of(app, "nvlink"))  # fmt: skip
            assert "144 of 144 links up" in nvlink or "144 links, 0 down" in nvlink
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, FabricScreen))
            await pilot.press("escape")  # clears the filter
            await wait_until(pilot, lambda: len(rows(app, "fabric")) >= 32)
            await settle(pilot, app)

    asyncio.run(body())


def test_unreachable_prometheus_shows_the_error_and_unknown(dashboard_world: Any) -> None:
    async def body() -> None:
        app = make_app(dashboard_world, prometheus_url="http://127.0.0.1:9")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
            app.open_node("gpu-node-000")
            header = await wait_until(
                pilot, lambda: "UNKNOWN" in (h := text_of(app, "node-header")) and h
            )
            assert "127.0.0.1:9" in header  # the telemetry error, on the screen
            gpus = await wait_until(
                pilot, lambda: len(rows(app, "gpus")) == 8 and rows(app, "gpus")
            )
            assert all(r["verdict"] == "UNKNOWN" and r["temp"] == "-" for r in gpus.values())
            await wait_until(pilot, lambda: rows(app, "pods"))  # the API still answers
            label = await wait_until(pilot, lambda: text_of(app, "hist-0-temp-label"))
            assert "no reading" in label
            await pilot.press("2")
            await wait_until(pilot, lambda: isinstance(app.screen, FabricScreen))
            summary = await wait_until(
                pilot, lambda: "without telemetry" in (s := text_of(app, "summary")) and s
            )
            assert "4 GPU nodes without telemetry" in summary and "127.0.0.1:9" in summary
            assert rows(app, "fabric") == {}
            await settle(pilot, app)

    asyncio.run(body())


# --- a fixed fleet ----------------------------------------------------------------------------


def test_fabric_caps_at_500_keeps_the_cursor_and_greys_on_failure() -> None:
    async def body() -> None:
        hub = FixedConsole(synthetic_fleet(64))  # 512 IB ports and one NVLink link
        app = KreaOpsApp(hub, refresh_s=1.0)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
            await pilot.press("2")
            await wait_until(pilot, lambda: isinstance(app.screen, FabricScreen))
            await wait_until(pilot, lambda: table(app, "fabric").row_count == 500)
            assert "showing 500 of 505" in text_of(app, "summary")  # node 3's exporter is down
            fabric = rows(app, "fabric")
            top = [(r["node"], r["port"], r["verdict"]) for r in list(fabric.values())[:2]]
            assert top == [
                ("gpu-node-004", "mlx5_2/1", "BAD"),
                ("gpu-node-007", "gpu0/link7", "SUSPECT"),
            ]
            for _ in range(5):
                await pilot.press("down")
            key = list(fabric)[5]
            assert key == "gpu-node-050/ib/mlx5_0/1"
            t = table(app, "fabric")
            # new numbers re-rank the ports: that port drops to 249th, the cursor follows it
            hub.fleet_snapshot = synthetic_fleet(64, seed=8)
            await pilot.press("r")
            await wait_until(pilot, lambda: t.get_row_index(key) == 248)
            assert t.coordinate_to_cell_key(t.cursor_coordinate).row_key.value == key
            assert t.row_count == 500

            hub.fail.add("fleet")
            await wait_until(pilot, lambda: t.has_class("stale"))
            error_line = app.screen.query_one("#error-line", Static)
            assert error_line.display and "fleet read failed" in str(error_line.render())
            assert t.row_count == 500  # the last good data stays
            await settle(pilot, app)

    asyncio.run(body())
