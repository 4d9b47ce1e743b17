"""The dashboard shell and the fleet screen on a fixed fleet: navigation, filter, metric
switch, help, read-only mode, command mode, a failing source, refresh paused by a modal,
and an SVG snapshot at a fixed size, seed and clock."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from krea_ops.console import EVERYTHING, FleetScope
from krea_ops.fleet import FleetSnapshot
from krea_ops.sim.fixtures import EPOCH, FixedConsole, synthetic_fleet
from krea_ops.telemetry.dialects import FABRIC
from screens.app import KreaOpsApp
from screens.fleet import FleetScreen
from screens.widgets.heatmap import GpuHeatmap
from tests.screens.conftest import wait_until


def fixed_app(**kw: Any) -> tuple[KreaOpsApp, FixedConsole]:
    hub = FixedConsole(synthetic_fleet(16))
    app = KreaOpsApp(hub, refresh_s=1.0, clock=lambda: EPOCH + 1.0, **kw)
    return app, hub


def heatmap(app: KreaOpsApp) -> GpuHeatmap:
    return app.screen.query_one(GpuHeatmap)


def test_fleet_shows_every_node_attention_first_with_totals() -> None:
    async def body() -> None:
        app, _ = fixed_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: heatmap(app).row_count == 16)
            keys = heatmap(app).ordered_keys
            # planted problems first: BAD (hot GPU, lost GPU, IB flap), UNKNOWN (exporter down)
            assert set(keys[:3]) == {"gpu-node-002", "gpu-node-004", "gpu-node-009"}
            assert keys[3] == "gpu-node-003"
            totals = str(app.screen.query_one("#totals").render())
            assert "128 GPUs on 16 nodes" in totals and "hot ≥78°C: 1" in totals
            assert "tensor activity" in totals and "busy time" in totals
            status = str(app.screen.query_one("#status-bar").render())
            assert "https://sim.example:6443" in status and "BAD: 3" in status

    asyncio.run(body())


def test_metric_switch_filter_and_drill_down() -> None:
    async def body() -> None:
        app, _ = fixed_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: heatmap(app).row_count == 16)
            await pilot.press("a")
            assert heatmap(app).metric.name == "tensor"
            row = heatmap(app).get_row("gpu-node-006")
            assert row is not None and all(v == 0.04 for v in row.values)  # input-bound
            await pilot.press("slash")
            for ch in "node-01":
                await pilot.press(ch)
            await wait_until(pilot, lambda: heatmap(app).row_count == 6)  # 010..015
            await pilot.press("enter")  # keep the filter, back to the heatmap
            await pilot.press("escape")  # clears the filter
            assert heatmap(app).row_count == 16
            heatmap(app).move_cursor_to("gpu-node-002")
            await pilot.press("enter")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "NodeScreen")
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))

    asyncio.run(body())


def test_help_lists_keys_and_offers_no_action_without_a_cluster_or_read_only() -> None:
    async def body(read_only: bool) -> str:
        app, _ = fixed_app(read_only=read_only)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("question_mark")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
            sections = app.screen.sections  # exactly what the help screen lays out
            text = " ".join(f"{t} {k} {w}" for t, keys in sections for k, w in keys)
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
            return text

    # a recorded fleet has nothing to act on: the node actions are not offered
    # (tests/screens/test_actions.py: a console on a cluster lists them)
    normal = asyncio.run(body(False))
    assert "command mode" in normal and "Temperature" in normal
    assert "evict" not in normal.lower()
    assert "evict" not in asyncio.run(body(True)).lower()


def test_command_mode_jumps_between_screens() -> None:
    async def body() -> None:
        app, _ = fixed_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("colon")
            for ch in "node gpu-node-004":
                await pilot.press(ch if ch != " " else "space")
            await pilot.press("enter")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "NodeScreen")
            await pilot.press("colon")
            for ch in "fleet":
                await pilot.press(ch)
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
            await pilot.press("colon")
            for ch in "nonsense":
                await pilot.press(ch)
            await pilot.press("enter")
            assert isinstance(app.screen, FleetScreen)  # unknown command: a notice, no crash

    asyncio.run(body())


def test_a_failing_source_keeps_the_data_greyed_with_the_error_in_the_footer() -> None:
    async def body() -> None:
        app, hub = fixed_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: heatmap(app).row_count == 16)
            hub.fail.add("fleet")
            app.action_refresh_now()
            line = app.screen.query_one("#error-line")
            await wait_until(pilot, lambda: line.display)
            assert "fleet read failed" in str(line.render())
            assert heatmap(app).row_count == 16  # the last good data stays
            assert heatmap(app).has_class("stale")
            hub.fail.clear()
            app.action_refresh_now()
            await wait_until(pilot, lambda: not line.display)
            assert not heatmap(app).has_class("stale")

    asyncio.run(body())


def test_refresh_pauses_while_a_modal_is_open_and_reads_never_overlap() -> None:
    hub = CountingConsole(synthetic_fleet(16))
    app = KreaOpsApp(hub, refresh_s=1.0, clock=lambda: EPOCH + 1.0)

    async def body() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: hub.calls.get("fleet", 0) >= 1)
            await pilot.press("question_mark")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
            before = hub.calls["fleet"]
            await pilot.pause(2.5)  # more than two refresh intervals
            assert hub.calls["fleet"] == before
            await pilot.press("escape")
            await wait_until(pilot, lambda: hub.calls["fleet"] > before, timeout=5)
            app.load("fleet")
            app.load("fleet")  # a second request while one is in flight is dropped
            calls = hub.calls["fleet"]
            await wait_until(pilot, lambda: hub.calls["fleet"] > calls, timeout=5)
            # what the console saw: never two fleet reads in progress at once (a worker
            # that has delivered its read may still be listed as running a moment: the
            # reads are what must not overlap)
            assert hub.most_at_once == 1

    asyncio.run(body())


class CountingConsole(FixedConsole):
    """Counts the fleet reads in progress at once (each read lasts 50 ms)."""

    def __init__(self, snapshot: FleetSnapshot) -> None:
        super().__init__(snapshot)
        self.reading = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def fleet(self, scope: FleetScope = EVERYTHING) -> FleetSnapshot:
        with self._lock:
            self.reading += 1
            self.most_at_once = max(self.most_at_once, self.reading)
        try:
            time.sleep(0.05)
            return super().fleet(scope)
        finally:
            with self._lock:
                self.reading -= 1


def test_fleet_snapshot(snap_compare: Any) -> None:
    app, _ = fixed_app()

    async def loaded(pilot: Any) -> None:
        await wait_until(pilot, lambda: heatmap(app).row_count == 16)
        await pilot.pause(0.1)

    assert snap_compare(app, terminal_size=(120, 36), run_before=loaded)


def test_fleet_on_the_simulator_filter_and_a_failing_telemetry_source(dashboard_world: Any) -> None:
    from tests.screens.conftest import make_app

    async def live() -> None:
        app = make_app(dashboard_world)
        async with app.run_test(size=(120, 40)) as pilot:
            # every GPU node of the simulated cluster, with readings once Prometheus has them
            def readings() -> bool:
                hm = app.screen.query(GpuHeatmap)
                row = hm.first().get_row("gpu-node-001") if hm else None
                return row is not None and all(v is not None for v in row.values)

            await wait_until(pilot, readings, timeout=90)
            assert heatmap(app).total_count == 4  # burst-vk is virtual: no heatmap row
            await pilot.press("slash")
            for ch in "002":
                await pilot.press(ch)
            await wait_until(pilot, lambda: heatmap(app).ordered_keys == ("gpu-node-002",))

    async def failing() -> None:
        app = make_app(dashboard_world, prometheus_url="http://127.0.0.1:9")
        async with app.run_test(size=(120, 40)) as pilot:
            line = app.screen.query_one("#error-line")
            await wait_until(pilot, lambda: line.display and heatmap(app).total_count == 4)
            assert "127.0.0.1:9" in str(line.render())
            rows = [heatmap(app).get_row(k) for k in heatmap(app).ordered_keys]
            assert all(r is not None and r.severity.name == "UNKNOWN" for r in rows)
            assert all(v is None for r in rows if r for v in r.values)  # unknown, not 0

    asyncio.run(live())
    asyncio.run(failing())


def test_each_refresh_reads_only_the_telemetry_the_visible_screen_shows() -> None:
    """The heatmap needs the GPU readings, the queue screen only the verdicts its header
    counts, the fabric screen every port and link (and of the GPU readings only those
    that say which links to read, ``dialects.FABRIC``). A screen that shows more than the last
    read held gets its read at once (the refresh interval here is a minute: only that
    rule, or ``r``, can start a read during the test)."""

    async def body() -> None:
        hub = FixedConsole(synthetic_fleet(16))
        app = KreaOpsApp(hub, refresh_s=60.0, clock=lambda: EPOCH + 1.0)
        gpu = frozenset({"gpu", "verdicts"})

        def last_scope() -> frozenset[str] | None:
            return hub.scopes[-1].families if hub.scopes else frozenset()

        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: hub.scopes)
            assert last_scope() == gpu
            await pilot.press("2")  # fabric: every port's and link's, read now
            fabric = frozenset({*FABRIC, "verdicts"})
            await wait_until(pilot, lambda: last_scope() == fabric)
            await pilot.press("3", "r")  # queue, refreshed: the verdicts only
            await wait_until(pilot, lambda: last_scope() == frozenset({"verdicts"}))
            await pilot.press("1")  # the heatmap again: its readings, read now
            await wait_until(pilot, lambda: last_scope() == gpu)
            heat = heatmap(app).get_row("gpu-node-006")
            assert heat is not None and all(v is not None for v in heat.values)

    asyncio.run(body())
