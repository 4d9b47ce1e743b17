"""One derivation and one unit per fabric quantity, as a user reads them in ``fabric``,
``nodes show`` and the dashboard, against real parts: our exporter over a sysfs tree the
test writes, a real Prometheus scraping it, the bundled API server holding the node.

The port's error counter is young: it was 0 until a moment ago and did all its counting
inside the window, where Prometheus' increase() extrapolates past the last sample (it
reads more errors in the window than the counter holds). Its xmit-wait counter grows at
a known share of the link's time."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client
from textual.css.query import NoMatches
from textual.widgets import DataTable

from commands.main import invoke
from krea_ops.console import Console
from krea_ops.history import HISTORY_POINTS
from krea_ops.settings import load_settings
from krea_ops.sim.apiserver.local import LocalApiServer
from screens.app import KreaOpsApp
from screens.fabric import FabricScreen
from screens.node import NodeScreen
from tests.conftest import NODE_EXPORTER_TREE, require_binary
from tests.screens.conftest import wait_until
from tests.telemetry.conftest import KreaNode, Prometheus, Target, start_krea_node

NODE = "young-node"
WINDOW_S = 90  # long enough that every read below sees the young counter's zeros
PORT = "mlx4_0/1"  # 40 Gb/sec (4X QDR): 5e9 bytes/s, one 8-byte tick every 1.6 ns
WAIT_SHARE = 0.03  # of the port's time spent waiting for credit (32 bits last 229 s)
TICKS_PER_S = WAIT_SHARE * 5e9 / 8
ERRORS = (5, 12, 19)  # symbol_error values, written one after the other


def counters(tree: Path, port: int = 1) -> Path:
    return tree / "class" / "infiniband" / "mlx4_0" / "ports" / str(port) / "counters"


def write(path: Path, value: int) -> None:
    """As sysfs changes a value: in place (the exporter keeps the file open), and a
    counter only gets longer."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, f"{value}\n".encode(), 0)
    finally:
        os.close(fd)


@dataclass
class Fabric:
    api: LocalApiServer
    prometheus: Prometheus
    node: KreaNode
    sysfs: Path
    errors_at: float  # when the first error was counted

    def args(self) -> list[str]:
        return ["--kubeconfig", str(self.api.kubeconfig), "--prometheus", self.prometheus.url]

    def instant(self, promql: str) -> float | None:
        url = f"{self.prometheus.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as response:
            result = orjson.loads(response.read())["data"]["result"]
        return float(result[0]["value"][1]) if result else None


def _wait(check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.25)
    raise AssertionError(f"not reached in {timeout} s")


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("fabric-units")
    sysfs = tmp / "sys"
    shutil.copytree(NODE_EXPORTER_TREE, sysfs)
    port = counters(sysfs)
    for name in ("symbol_error", "port_rcv_remote_physical_errors"):
        (port / name).write_text("0\n")  # counters the fixture's HCA lacks: new, at 0
    (port / "port_xmit_wait").write_text("0\n")  # the fixture's is saturated

    stop = threading.Event()
    started = time.monotonic()

    def waiting() -> None:  # the xmit-wait ticks follow the wall clock, whatever the load
        while not stop.wait(0.2):
            write(port / "port_xmit_wait", int(TICKS_PER_S * (time.monotonic() - started)))

    writer = threading.Thread(target=waiting, daemon=True)
    writer.start()
    node = start_krea_node(NODE, sysfs, gpus=2)
    prometheus = Prometheus([Target(node.address, "krea")])
    try:
        with LocalApiServer(tmp / "api") as api:
            core: Any = client.CoreV1Api(api.api_client())
            core.create_node({"metadata": {"name": NODE}})
            gpus = {"nvidia.com/gpu": "2", "cpu": "8", "memory": "64Gi", "pods": "110"}
            ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
            core.patch_node_status(
                NODE, {"status": {"capacity": gpus, "allocatable": gpus, "conditions": [ready]}}
            )
            prometheus.wait_scrapes("krea", count=3)
            fab = Fabric(api, prometheus, node, sysfs, errors_at=time.time())
            for value in ERRORS:
                write(port / "symbol_error", value)
                time.sleep(1.0)
            # Prometheus has the last value twice: the errors are all behind it
            last = "krea_ib_symbol_error_total{port='1'}[2500ms]"
            _wait(
                lambda: (
                    (fab.instant(f"count_over_time({last})") or 0) >= 2
                    and fab.instant(f"min_over_time({last})") == ERRORS[-1]
                )
            )
            yield fab
    finally:
        stop.set()
        writer.join(timeout=5)
        prometheus.stop()
        node.stop()


@pytest.fixture(autouse=True)
def window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    monkeypatch.setenv("KREA_OPS_TELEMETRY_WINDOW_S", str(WINDOW_S))
    monkeypatch.setenv("KREA_OPS_TELEMETRY_STALE_S", "30")
    monkeypatch.delenv("KREA_OPS_PROMETHEUS_URL", raising=False)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert invoke(list(args)) == 0
    return capsys.readouterr().out


def table(text: str, first: str) -> dict[str, dict[str, str]]:
    """The table whose header starts with ``first`` (``NODE`` of ``fabric``, ``PORT`` of
    ``nodes show``'s InfiniBand table): port -> header -> cell. Up to the REASONS
    column no cell holds a space."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [first])
    header = lines[start].split()
    key = header.index("PORT")
    rows: dict[str, dict[str, str]] = {}
    for line in lines[start + 1 :]:
        cells = line.split()
        if len(cells) < len(header) - 1 or "/" not in cells[key]:
            break
        rows[cells[key]] = dict(zip(header, cells, strict=False))
    return rows


def sysfs_speed(tree: Path) -> str:
    """The link speed as the kernel states it, ``40 Gb/sec (4X QDR)``, in our spelling."""
    text = (tree / "class" / "infiniband" / "mlx4_0" / "ports" / "1" / "rate").read_text()
    return f"{text.split()[0]}Gb/s"


def test_a_young_counter_counts_no_more_in_the_window_than_it_holds(
    fabric: Fabric, capsys: pytest.CaptureFixture[str]
) -> None:
    # the cause, in Prometheus itself: the window's increase extrapolated past 19
    raw = fabric.instant(f"increase(krea_ib_symbol_error_total{{port='1'}}[{WINDOW_S}s])")
    assert raw is not None and raw >= ERRORS[-1]

    rows = orjson.loads(run(capsys, *fabric.args(), "fabric", "--kind", "ib", "-o", "json"))
    port = next(r for r in rows if r["port"] == PORT)
    assert time.time() - fabric.errors_at < WINDOW_S - 5  # (the zeros are still in the window)
    assert port["counters"]["symbol_error"] == ERRORS[-1]
    assert port["errors_total"] == port["errors_in_window"] == ERRORS[-1]
    # the rate is the same count per second, not a second extrapolation
    assert port["error_rate_per_s"] * WINDOW_S == pytest.approx(ERRORS[-1])
    assert any(f"{ERRORS[-1]} link errors in the last" in r for r in port["reasons"])
    for r in rows:
        assert r["errors_in_window"] is None or r["errors_in_window"] <= r["errors_total"]

    wide = table(run(capsys, *fabric.args(), "fabric", "--kind", "ib", "-o", "wide"), "NODE")
    cells = wide[PORT]
    assert cells["ERRORS-TOTAL"] == cells[f"ERRORS/{WINDOW_S}s"] == str(ERRORS[-1])


def test_wait_share_and_wait_bandwidth_are_one_reading(
    fabric: Fabric, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = orjson.loads(run(capsys, *fabric.args(), "fabric", "--kind", "ib", "-o", "json"))
    port = next(r for r in rows if r["port"] == PORT)
    assert port["rate_bytes_per_s"] == 5e9
    assert port["xmit_wait_bytes_per_s"] == pytest.approx(port["xmit_wait_per_s"] * 8)
    share = port["xmit_wait_bytes_per_s"] / port["rate_bytes_per_s"]
    assert port["xmit_wait_ratio"] == pytest.approx(share)
    # (no more than the share written; a series younger than the window reads less)
    assert 0 < port["xmit_wait_ratio"] <= WAIT_SHARE * 1.05

    out = run(capsys, *fabric.args(), "fabric", "--kind", "ib", "-o", "wide")
    cells = table(out, "NODE")[PORT]
    assert cells["SPEED"] == "40Gb/s"
    waited_gbps = float(cells["WAIT-BW"].removesuffix("Gb/s").removesuffix("Mb/s")) * (
        1.0 if cells["WAIT-BW"].endswith("Gb/s") else 1e-3
    )
    # WAIT% is WAIT-BW over SPEED (up to their rounding: whole percent, 3 digits)
    share = waited_gbps / 40 * 100
    if cells["WAIT%"].startswith("<"):  # above 0 but under one percent
        assert 0 < share < float(cells["WAIT%"].strip("<%")) * 1.01, cells
    else:
        percent = float(cells["WAIT%"].removesuffix("%"))
        assert abs(share - percent) <= 0.5 + 0.01 * percent, cells
    assert "WAIT%: share of time with data to send but no credit" in out


def test_ib_speed_and_counts_read_the_same_in_fabric_nodes_show_and_the_dashboard(
    fabric: Fabric, capsys: pytest.CaptureFixture[str]
) -> None:
    speed = sysfs_speed(fabric.sysfs)
    assert speed == "40Gb/s"
    wide = table(run(capsys, *fabric.args(), "fabric", "--kind", "ib", "-o", "wide"), "NODE")
    shown = table(run(capsys, *fabric.args(), "nodes", "show", NODE), "PORT")
    errors = f"ERRORS/{WINDOW_S}s"
    for port in ("mlx4_0/1", "mlx4_0/2"):
        assert wide[port]["SPEED"] == shown[port]["SPEED"] == speed
        assert wide[port][errors] == shown[port][errors]
    assert shown[PORT][errors] == str(ERRORS[-1])

    dashboard = asyncio.run(dashboard_cells(fabric))
    node_ib, fabric_ib = dashboard
    for port in ("mlx4_0/1", "mlx4_0/2"):
        assert node_ib[port]["speed"] == speed
        assert node_ib[port]["errors"] == fabric_ib[f"{NODE}/ib/{port}"]["errors"]
        assert node_ib[port]["errors"] == wide[port][errors]
    assert node_ib[PORT]["errors"] == str(ERRORS[-1])
    assert node_ib[PORT]["wait_pct"] == fabric_ib[f"{NODE}/ib/{PORT}"]["wait_pct"]
    assert node_ib[PORT]["wait_pct"].endswith("%") and node_ib[PORT]["wait_pct"] != "0%"


def cells_of(app: KreaOpsApp, table_id: str) -> dict[str, dict[str, str]]:
    try:
        t = app.screen.query_one(f"#{table_id}", DataTable)
    except NoMatches:
        return {}
    keys = [str(c.value) for c in t.columns]
    return {
        str(r.key.value): dict(zip(keys, (str(c) for c in t.get_row(r.key)), strict=True))
        for r in t.ordered_rows
    }


async def dashboard_cells(fabric: Fabric) -> tuple[dict[str, Any], dict[str, Any]]:
    """The node screen's InfiniBand rows and the fabric screen's, as they are drawn."""
    values = {
        "kubeconfig": str(fabric.api.kubeconfig),
        "prometheus_url": fabric.prometheus.url,
        "telemetry_window_s": float(WINDOW_S),
        "telemetry_stale_s": 30.0,
    }
    console = Console(load_settings(values, env={}), history_points=HISTORY_POINTS)
    app = KreaOpsApp(console, refresh_s=60.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.fleet_snapshot() is not None)
        app.open_node(NODE)
        await wait_until(pilot, lambda: isinstance(app.screen, NodeScreen))
        node_ib = await wait_until(
            pilot, lambda: {PORT, "mlx4_0/2"} <= (c := cells_of(app, "ib")).keys() and c
        )
        labels = [str(c.label) for c in app.screen.query_one("#ib", DataTable).columns.values()]
        assert f"errors/{WINDOW_S}s" in labels
        await pilot.press("escape")
        await pilot.press("2")
        await wait_until(pilot, lambda: isinstance(app.screen, FabricScreen))
        wanted = {f"{NODE}/ib/{PORT}", f"{NODE}/ib/mlx4_0/2"}
        fabric_rows = await wait_until(
            pilot, lambda: wanted <= (c := cells_of(app, "fabric")).keys() and c
        )
        app.action_help()  # a modal pauses the refresh: nothing lands during shutdown
        await pilot.pause(0.2)
    return node_ib, fabric_rows
