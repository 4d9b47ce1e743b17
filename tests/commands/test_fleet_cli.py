"""``gpus``, ``nodes list|show`` and ``fabric`` against the simulated cluster, through the
real CLI: telemetry found through ConfigMap krea-ops-config (a real Prometheus scraping
the simulated exporters), faults injected through the API, verdicts as a user sees them."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from commands.main import invoke
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.faults import inject_fault
from krea_ops.sim.world import SimWorld
from tests.conftest import require_binary

WINDOW_S = "12"


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    capsys.readouterr()
    code = invoke(list(args))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip().startswith("[") else out), err


def until(check: Callable[[], Any], timeout: float = 90.0, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"condition not met in {timeout} s; last: {last!r}")


@pytest.fixture(autouse=True)
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    monkeypatch.setenv("KREA_OPS_TELEMETRY_WINDOW_S", WINDOW_S)
    monkeypatch.setenv("KREA_OPS_TELEMETRY_STALE_S", "20")
    monkeypatch.delenv("KREA_OPS_PROMETHEUS_URL", raising=False)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, control_plane: str) -> Iterator[SimWorld]:
    require_binary("prometheus")
    config = WorldConfig(
        control_plane=control_plane,
        nodes=4,
        speed=60,
        seed=5,
        failure_multiplier=0.0,
        prometheus=shutil.which("prometheus") is not None,
        extra={
            "slow_burners": False,
            "scrape_interval_s": 1,
            "gpm_interval_s": 1,
        },
    )
    with SimWorld(config, tmp_path_factory.mktemp("fleet")) as w:
        until(lambda: w.world.services["devices"].prometheus_url, timeout=60)
        yield w


def kc(w: SimWorld) -> list[str]:
    return ["--kubeconfig", str(w.kubeconfig)]


def test_gpus_lists_every_gpu_with_busy_time_next_to_tensor_activity(
    world: SimWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    def all_reporting() -> list[dict[str, Any]] | None:
        code, rows, _ = run_json(capsys, *kc(world), "gpus", "-o", "json")
        ok = code == 0 and len(rows) == 32 and all(r["temperature_c"] is not None for r in rows)
        return rows if ok else None

    rows = until(all_reporting)
    first = rows[0]
    for key in (
        "node",
        "index",
        "uuid",
        "model",
        "temperature_c",
        "slowdown_margin_c",
        "power_w",
        "util_ratio",
        "tensor_active_ratio",
        "memory_used_bytes",
        "xid_last",
        "nvlink_errors",
        "verdict",
        "reasons",
    ):
        assert key in first
    assert {r["node"] for r in rows} == {f"gpu-node-00{i}" for i in range(4)}
    assert all(r["model"] == "NVIDIA H200" for r in rows)
    assert all(0.0 <= r["util_ratio"] <= 1.0 for r in rows if r["util_ratio"] is not None)

    capsys.readouterr()
    assert invoke([*kc(world), "gpus"]) == 0
    table = capsys.readouterr().out
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NODE"))
    assert "BUSY" in lines[start] and "TENSOR" in lines[start]
    # The GPU rows fit 80 columns; the reason lines below them ("gpu-node-002/gpu5: ...")
    # are prose as long as their reasons, so a GPU that is not OK must not fail this.
    gpu_rows = lines[start + 1 : start + 33]
    assert all(line.startswith("gpu-node-") and "/gpu" not in line for line in gpu_rows)
    assert max(len(line) for line in gpu_rows) <= 80
    assert "\x1b[" not in table  # no colour when not a terminal

    # --sort tensor: the wasted GPUs first (busy time furthest above tensor activity),
    # an idle GPU (nothing running) after them; GPUs without both readings last
    def gaps_of(rows: list[dict[str, Any]]) -> list[float]:
        return [
            r["util_ratio"] - r["tensor_active_ratio"]
            for r in rows
            if r["util_ratio"] is not None and r["tensor_active_ratio"] is not None
        ]

    def sorted_by_tensor() -> list[dict[str, Any]] | None:
        # (tensor activity needs two GPM samples: the first reads may have none yet)
        code, rows, _ = run_json(capsys, *kc(world), "gpus", "--sort", "tensor", "-o", "json")
        return rows if code == 0 and gaps_of(rows) else None

    ranked = until(sorted_by_tensor)
    gaps = gaps_of(ranked)
    assert gaps == sorted(gaps, reverse=True)
    both = len(gaps)
    assert all(r["util_ratio"] is None or r["tensor_active_ratio"] is None for r in ranked[both:])


def test_an_injected_hot_gpu_is_bad_with_its_reason(
    world: SimWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    inject_fault(world.client, "hot-gpu", "gpu-node-002", gpu=5, value=88.0)

    def hot() -> dict[str, Any] | None:
        _, rows, _ = run_json(capsys, *kc(world), "gpus", "--node", "gpu-node-002", "-o", "json")
        row = next(r for r in rows if r["index"] == 5)
        return row if row["verdict"] == "BAD" and row["temperature_min_window_c"] >= 78 else None

    row = until(hot)
    assert any("GPU 5" in r and "78 °C" in r for r in row["reasons"])

    # at once: the node summaries nodes list reads are of the scrape gpus just read
    code, nodes, _ = run_json(capsys, *kc(world), "nodes", "list", "-o", "json")
    assert code == 0 and nodes[0]["verdict"] == "BAD", nodes[0]
    assert nodes[0]["name"] == "gpu-node-002"  # worst first
    assert any("GPU 5" in r for r in nodes[0]["reasons"])

    # read from the node summaries the exporters publish: the hot node read GPU by GPU,
    # the others judged from their summaries, and the table says so
    # (until every exporter has served its GPUs once: before that a node has no summary)
    def summarized() -> str | None:
        capsys.readouterr()
        assert invoke([*kc(world), "nodes", "list"]) == 0
        listed = capsys.readouterr().out
        line = next((x for x in listed.splitlines() if x.startswith("node summaries:")), "")
        return line if line.startswith("node summaries: 3 nodes clean") else None

    line = until(summarized, timeout=60)
    assert "1 read GPU by GPU (a GPU is warm or hot" in line, line

    capsys.readouterr()
    assert invoke([*kc(world), "gpus", "--sort", "temperature"]) == 0
    table = capsys.readouterr().out
    first_row = next(line for line in table.splitlines() if line.startswith("gpu-"))
    assert first_row.split()[:2] == ["gpu-node-002", "5"] and "BAD" in first_row
    assert "gpu-node-002/gpu5: BAD: GPU 5 at" in table


def test_a_node_whose_exporter_stops_is_unknown(
    world: SimWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    devices = world.world.services["devices"]
    nd = devices.node("gpu-node-003")
    nd.host_failed(True)  # the exporter stops answering (the node itself stays Ready)
    try:

        def unknown() -> dict[str, Any] | None:
            _, rows, _ = run_json(capsys, *kc(world), "nodes", "list", "-o", "json")
            row = next(r for r in rows if r["name"] == "gpu-node-003")
            return row if row["verdict"] == "UNKNOWN" else None

        row = until(unknown, timeout=60)
        assert any("exporter" in r or "sample" in r for r in row["reasons"])
        _, gpus, _ = run_json(capsys, *kc(world), "gpus", "--node", "gpu-node-003", "-o", "json")
        assert len(gpus) == 8 and all(g["verdict"] == "UNKNOWN" for g in gpus)
        assert all(g["temperature_c"] is None for g in gpus)  # unknown, not a stale number
    finally:
        nd.host_failed(False)


def test_nodes_show_and_fabric(world: SimWorld, capsys: pytest.CaptureFixture[str]) -> None:
    def shown_with_ports() -> Any:
        code, shown, _ = run_json(capsys, *kc(world), "nodes", "show", "gpu-node-001", "-o", "json")
        return shown if code == 0 and len(shown) == 1 and len(shown[0]["ib_ports"]) == 8 else None

    node = until(shown_with_ports)[0]
    assert node["name"] == "gpu-node-001" and node["gpu_capacity"] == 8
    assert len(node["gpus"]) == 8 and len(node["ib_ports"]) == 8
    assert any(p["namespace"] == "kube-system" for p in node["pods"])  # the DaemonSet pods

    # (every port active and moving data: a node whose exporter the test before stopped
    # and restarted lists its ports without readings until its next scrape)
    def all_ports() -> Any:
        code, ports, _ = run_json(capsys, *kc(world), "fabric", "--kind", "ib", "-o", "json")
        settled = all(p["state"] == "ACTIVE" and p["rx_bytes_per_s"] is not None for p in ports)
        return ports if code == 0 and len(ports) == 32 and settled else None

    ports = until(all_ports)
    assert all(p["kind"] == "ib" for p in ports)

    inject_fault(world.client, "ib-flap", "gpu-node-000", value=2)

    def flapped() -> dict[str, Any] | None:
        _, rows, _ = run_json(capsys, *kc(world), "fabric", "--kind", "ib", "-o", "json")
        return rows[0] if rows and rows[0]["verdict"] == "BAD" else None

    worst = until(flapped)
    assert worst["node"] == "gpu-node-000" and worst["port"].startswith("mlx5_2")

    # the fleet list reads only the verdicts' rows (no counter-presence): the flap shows
    # (polled: a flap leaves the 12 s window, and a loaded machine may see it late)
    def listed_bad() -> dict[str, Any] | None:
        _, listed, _ = run_json(capsys, *kc(world), "nodes", "list", "-o", "json")
        row = next(r for r in listed if r["name"] == "gpu-node-000")
        return row if row["verdict"] == "BAD" else None

    row = until(listed_bad, timeout=60)
    assert any("mlx5_2" in r for r in row["reasons"]), row
    capsys.readouterr()
    assert invoke([*kc(world), "nodes", "show", "gpu-node-000"]) == 0
    text = capsys.readouterr().out
    assert "Verdict:     BAD" in text and "mlx5_2" in text and "Pods (" in text


def test_errors_are_one_line(world: SimWorld, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_json(capsys, *kc(world), "nodes", "show", "no-such-node")
    assert code == 2 and err.count("\n") == 1 and "no-such-node" in err

    code, out, err = run_json(
        capsys, *kc(world), "--prometheus", "http://127.0.0.1:9", "nodes", "list", "-o", "json"
    )
    # the nodes still print (from the API), GPU nodes UNKNOWN, then one error line, exit 1
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1
    assert "127.0.0.1:9" in err
    assert out and all(r["verdict"] == "UNKNOWN" for r in out if not r["virtual"])
    code, _, err = run_json(capsys, *kc(world), "--prometheus", "http://127.0.0.1:9", "gpus")
    assert code == 1 and "127.0.0.1:9" in err


def test_nvlink_errors_show_where_the_node_summaries_do_not_prove_them_zero(
    world: SimWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gpus`` asks for NVLink faults, XIDs, ECC and row remapping only of the nodes whose
    summaries do not prove them 0: a GPU whose link starts counting errors still shows
    them (once a rule evaluation has seen it), the other GPUs show 0, not unknown, and
    the table says how many nodes were asked."""
    inject_fault(world.client, "nvlink-errors", "gpu-node-001", gpu=3, value="2")

    def counting() -> list[dict[str, Any]] | None:
        code, rows, _ = run_json(capsys, *kc(world), "gpus", "-o", "json")
        assert code == 0
        mine = [r for r in rows if r["node"] == "gpu-node-001"]
        faulty = next(r for r in mine if r["index"] == 3)
        return rows if faulty["nvlink_errors"] and faulty["nvlink_errors"] > 0 else None

    rows = until(counting, timeout=60)
    others = [
        r
        for r in rows
        if r["node"] in ("gpu-node-000", "gpu-node-001")
        and (r["node"], r["index"]) != ("gpu-node-001", 3)
    ]
    assert len(others) == 15 and all(r["nvlink_errors"] == 0.0 for r in others), others

    def said() -> str | None:
        capsys.readouterr()
        assert invoke([*kc(world), "gpus"]) == 0
        table = capsys.readouterr().out
        return next((x for x in table.splitlines() if x.startswith("node summaries:")), None)

    line = until(said, timeout=30)
    match = re.search(r"asked of (\d+) of (\d+) nodes", line)
    assert match is not None, line
    asked, total = int(match.group(1)), int(match.group(2))
    assert 1 <= asked < total == 4, line


def test_fabric_reads_only_what_its_rows_show_and_shows_what_a_full_read_would(
    world: SimWorld,
) -> None:
    """``fabric`` asks Prometheus for the port and link readings and the few GPU readings
    its rows derive from (``FABRIC_FAMILIES``), not the ten dense readings per GPU: at
    the same instant its rows are those of a read of every family, with a fault on a
    link and a flapping port among them."""
    from commands.fabric import FABRIC_FAMILIES, FabricKind, fabric_rows
    from krea_ops.console import Console, FleetScope
    from krea_ops.settings import load_settings
    from krea_ops.telemetry.prometheus import PrometheusSource

    inject_fault(world.client, "nvlink-errors", "gpu-node-002", gpu=1, value="3")
    inject_fault(world.client, "ib-flap", "gpu-node-003", value=1)
    settings = load_settings({"kubeconfig": str(world.kubeconfig)})
    url = world.world.services["devices"].prometheus_url
    assert url

    def rows(families: tuple[str, ...] | None, at: float) -> list[dict[str, Any]]:
        source = PrometheusSource(url, settings, clock=lambda: at)
        console = Console(settings, source=source)
        try:
            return fabric_rows(console.fleet(FleetScope.of(families=families)), FabricKind.all)
        finally:
            console.close()

    def faulty() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        at = time.time()
        narrow, full = rows(FABRIC_FAMILIES, at), rows(None, at)
        counting = any(r["kind"] == "nvlink" and r["errors_in_window"] for r in full)
        # (the queries are evaluated at ``at``; which scrapes fail is Prometheus' targets
        # API now, which may change between the two reads on a loaded machine: asked
        # again until both reads saw the same targets)
        return (narrow, full) if counting and narrow == full else None

    narrow, _ = until(faulty, timeout=90)
    assert any(r["kind"] == "ib" for r in narrow) and any(r["kind"] == "nvlink" for r in narrow)
