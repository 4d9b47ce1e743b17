"""One spelling of each quantity (``krea_ops.units``), as a user reads it: ages as kubectl
prints AGE (checked against a real kubectl), the edges of each unit, the same age in
the CLI's tables and the dashboard's, and the fabric's readings printed alike by
``fabric``, the dashboard's fabric screen and its node screen."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from commands.burst import status_tables
from commands.fabric import FORMATS, fabric_rows, headers
from commands.fabric import FabricKind as CliKind
from commands.output import OutputFormat, render
from commands.queue import _workload_display
from krea_ops import units
from krea_ops.burst.status import BurstPod, BurstStatus, VirtualNode
from krea_ops.fleet import FleetSnapshot, fabric_entries
from krea_ops.health import HealthPolicy, fleet_views
from krea_ops.model import FleetTelemetry, IbPortSample, NodeInfo, NodeTelemetry
from krea_ops.queue import PodSetInfo, WorkloadInfo
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.apiserver.tables import human_duration
from screens.burst import pod_cells
from screens.fabric import fabric_cells
from screens.node import ib_cells
from screens.queue import workload_cells

KUBECTL = shutil.which("kubectl")

# k8s.io/apimachinery/pkg/util/duration.HumanDuration, the AGE of every kubectl table
KUBECTL_AGES = [
    (0, "0s"),
    (45, "45s"),
    (119, "119s"),
    (120, "2m"),
    (330, "5m30s"),
    (600, "10m"),
    (3600, "60m"),
    (10799, "179m"),
    (10800, "3h"),
    (11100, "3h5m"),
    (28800, "8h"),
    (100000, "27h"),
    (190000, "2d4h"),
    (8 * 86400, "8d"),
    (800 * 86400, "2y70d"),
    (9 * 365 * 86400, "9y"),
]


@pytest.mark.parametrize(("seconds", "text"), KUBECTL_AGES)
def test_ages_are_spelled_as_kubectl_spells_age(seconds: int, text: str) -> None:
    assert units.age(seconds) == text
    assert units.age(seconds + 0.9) == text  # whole seconds, truncated as Go's int()


def test_ages_read_like_the_servers_tables_across_the_range() -> None:
    """The simulated server prints AGE in its Table output (``kubectl get``) with
    HumanDuration; every age the console prints reads the same."""
    for seconds in [*range(0, 200_000, 7), *range(200_000, 400 * 86400, 3607)]:
        assert units.age(seconds) == human_duration(dt.timedelta(seconds=seconds)), seconds


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_ages_match_a_real_kubectl(tmp_path: Path) -> None:
    """kubectl's own printer (``--server-print=false``) computes AGE from
    creationTimestamp on the client: namespaces created at chosen ages read the same
    there and in ``units.age``. Ages sit mid-minute so kubectl running a few seconds
    later prints the same."""
    ages = [30 * 60 + 25, 3 * 3600 + 5 * 60 + 25, 10 * 3600 + 25, 2 * 86400 + 4 * 3600 + 25,
            30 * 86400 + 25, 800 * 86400 + 25]  # fmt: skip
    now = [dt.datetime.now(dt.UTC)]
    with LocalApiServer(tmp_path / "api", clock=lambda: now[0]) as api:
        core: Any = client.CoreV1Api(api.api_client())
        start = time.time()
        for i, age in enumerate(ages):
            now[0] = dt.datetime.fromtimestamp(start - age, dt.UTC)
            core.create_namespace({"metadata": {"name": f"age-{i}"}})
        now[0] = dt.datetime.now(dt.UTC)
        env = {**os.environ, "KUBECONFIG": str(api.kubeconfig), "HOME": str(tmp_path)}
        assert KUBECTL is not None
        out = subprocess.run(
            [KUBECTL, "get", "namespaces", "--server-print=false", "--no-headers"],
            capture_output=True, text=True, env=env, timeout=60, check=True,
        ).stdout  # fmt: skip
        printed_at = time.time()
    shown = dict(line.split() for line in out.splitlines())
    for i, age in enumerate(ages):
        created = int(start - age)  # creationTimestamp keeps whole seconds
        assert shown[f"age-{i}"] == units.age(printed_at - created), (age, shown)


def test_unit_edges() -> None:
    for f in (units.age, units.duration, units.size, units.bit_rate, units.rate, units.count,
              units.percent, units.celsius, units.watts, units.usd):  # fmt: skip
        assert f(None) == f(float("nan")) == units.UNKNOWN == "-"
    assert units.age(-3) == "0s"  # clock skew: "just now", never a negative age
    assert units.age(float("inf")) == "-"
    assert units.age(10**12) == "31709y"
    assert units.since(None, 1000.0) == "-" and units.since(1000.0, 990.0) == "0s"
    assert units.since(1000.0, 1330.0) == "5m30s"

    assert [units.duration(s) for s in (-5, 0, 5.5, 45, 1296, 3600, 19440, 77 * 86400)] == [
        "0s", "0s", "5.5s", "45s", "21.6m", "60m", "5.4h", "77d"]  # fmt: skip

    # sizes in powers of two: GPU memory (nvidia-smi MiB), Kubernetes Gi, files
    assert [units.size(b) for b in (0, 512, 1023, 1024, 10_137, 1_048_000, 1_048_570)] == [
        "0B", "512B", "1023B", "1KiB", "9.9KiB", "1023KiB", "1MiB"]  # fmt: skip
    assert units.size(143_771 * 2**20) == "140GiB"  # an H200's "141 GB" HBM3e
    assert units.size(3.3 * 2**40) == "3.3TiB" and units.size(2**70) == "1024EiB"

    # link speeds and traffic in decimal bits, as IB states speeds (the exporter turns
    # the rate file's Gb/s into bytes/s: times 125,000,000)
    for gbps in (2.5, 10, 40, 56, 100, 200, 400, 800):
        assert units.bit_rate(gbps * 125_000_000) == f"{gbps:g}Gb/s"
    assert [units.bit_rate(b) for b in (0, 1512, 145e6, 124.99e9)] == [
        "0b/s", "12.1kb/s", "1.16Gb/s", "1Tb/s"]  # fmt: skip

    assert [units.rate(r) for r in (0, 0.001, 0.0339, 12.49, 999.7, 1313, 246_919, 2.4e6)] == [
        "0/s", "<0.01/s", "0.0339/s", "12.5/s", "1k/s", "1.31k/s", "247k/s", "2.4M/s"]  # fmt: skip
    # a window count is extrapolated: above 0 is never printed as 0
    assert [units.count(n) for n in (0, 0.3, 0.7, 19.33, 12_345.6)] == [
        "0", "<1", "1", "19", "12,346"]  # fmt: skip
    assert [units.percent(r) for r in (0, 4e-5, 0.004, 0.2, 0.999, 1.0, -1e-9)] == [
        "0%", "<1%", "<1%", "20%", "100%", "100%", "0%"]  # fmt: skip
    assert units.percent(4e-5, 1) == "<0.1%" and units.percent(0.046, 1) == "4.6%"
    assert (units.celsius(81.4), units.watts(699.6)) == ("81°C", "700W")
    assert [units.usd(v) for v in (0, 1234.5, -3.2, -0.001)] == [
        "$0.00", "$1,234.50", "-$3.20", "$0.00"]  # fmt: skip
    assert units.number(1234.567, 2) == "1,234.57"


# --- the same age in the CLI and the dashboard -----------------------------------------

NOW = 1_800_000_000.0
SHOWN_AGES = (0.0, 45.0, 330.0, 11_100.0, 190_000.0, -2.0)


def test_a_workload_age_reads_the_same_in_queue_workloads_and_the_queue_screen() -> None:
    for age in SHOWN_AGES:
        wl = WorkloadInfo(
            namespace="training", name="dit", owner=None, local_queue="q",
            cluster_queue="training", state="pending", active=True, priority=100,
            priority_class=None, pod_sets=(PodSetInfo("main", 2, 8),), created_at=NOW - age,
        )  # fmt: skip
        cli = _workload_display(wl, NOW)["age"]
        dashboard = workload_cells(wl, NOW)[6]
        assert cli == dashboard == units.age(age)


def test_a_burst_pod_age_reads_the_same_in_burst_status_and_the_burst_screen() -> None:
    pods = tuple(
        BurstPod(
            namespace="inference",
            name=f"pod-{i}",
            owner=None,
            phase="Running",
            gpus=1,
            provider="acme",
            usd_per_gpu_hour=2.5,
            placed_at=NOW - age,
            ended_at=None,
            gpu_hours=age / 3600,
            cost_usd=2.5 * age / 3600,
            age_s=age,
        )
        for i, age in enumerate(SHOWN_AGES)
    )
    node = VirtualNode(
        name="vk-acme", detected_by="type=virtual-kubelet", provider="acme", ready=True,
        ready_reason=None, cordoned=False, gpu_capacity=8, gpu_allocatable=8, taints=(),
        paused=False, pause_reason=None, providers=(), pods=pods, usage_updated_at=None,
    )  # fmt: skip
    text = status_tables(BurstStatus(NOW, (node,), 0), OutputFormat.table)
    lines = text.splitlines()
    header = lines.index("PODS") + 1
    columns = lines[header].split()
    cli = {row.split()[0]: row.split()[columns.index("AGE")] for row in lines[header + 1 :][:6]}
    for pod in pods:
        dashboard = pod_cells(pod, node.name)
        assert cli[pod.name] == dashboard[7] == units.age(pod.age_s)
        assert dashboard[6] == units.usd(pod.cost_usd)  # money spelled once too


# --- fabric readings printed alike -----------------------------------------------------


def congested_fleet() -> FleetSnapshot:
    """One node, one NDR port: 19 symbol errors in the window (the counter's all), and
    waiting for credit a fifth of the time (1.25e9 8-byte ticks a second of 50 GB/s)."""
    port = IbPortSample(
        node="gpu-node-000", device="mlx5_0", port="1", state="ACTIVE", phys_state="LinkUp",
        rate_bytes_per_s=50e9, rx_bytes_per_s=2.6875e9, tx_bytes_per_s=2.7e9,
        xmit_wait_per_s=1.25e9, errors_total={"symbol_error": 19.0},
        error_rate_per_s={"symbol_error": 19.0 / 300}, error_increase={"symbol_error": 19.0},
    )  # fmt: skip
    tel = NodeTelemetry(node="gpu-node-000", exporter_up=True, last_sample_at=NOW - 2,
                        age_s=2.0, ib_ports=(port,))  # fmt: skip
    fleet = FleetTelemetry("test", NOW, 300.0, {"gpu-node-000": tel})
    info = NodeInfo(name="gpu-node-000", ready=True)
    policy = HealthPolicy(window_s=300.0)
    return FleetSnapshot(
        views=tuple(fleet_views([info], fleet, policy)), telemetry=fleet,
        telemetry_error=None, source="test", collected_at=NOW, policy=policy,
    )  # fmt: skip


def test_fabric_readings_print_alike_in_the_cli_and_both_dashboard_screens() -> None:
    snap = congested_fleet()
    (entry,) = fabric_entries(snap, "ib")
    assert entry.xmit_wait_ratio == pytest.approx(0.2)
    assert entry.errors_in_window == entry.errors_total == 19

    rows = fabric_rows(snap, CliKind.ib)
    wide = render(rows, OutputFormat.wide, wide_columns=[
        "port", "rate_bytes_per_s", "rx_bytes_per_s", "errors_total", "errors_in_window",
        "error_rate_per_s", "xmit_wait_bytes_per_s", "xmit_wait_ratio"],
        headers=headers(300.0), formats=FORMATS, color=False)  # fmt: skip
    header, line = wide.splitlines()[:2]
    assert header.split() == ["PORT", "SPEED", "RX", "ERRORS-TOTAL", "ERRORS/5m", "ERR-RATE",
                              "WAIT-BW", "WAIT%"]  # fmt: skip
    # WAIT-BW / SPEED = WAIT%: 80 of 400 Gb/s is 20 % of the time
    assert line.split() == ["mlx5_0/1", "400Gb/s", "21.5Gb/s", "19", "19", "0.0633/s",
                            "80Gb/s", "20%"]  # fmt: skip

    fabric_screen = [str(c) for c in fabric_cells(entry, snap.policy)]
    node_screen = [str(c) for c in ib_cells(entry, snap.policy)]
    assert fabric_screen[4:7] == ["19", "0.0633/s", "20%"]  # errors/5m, error rate, wait %
    assert node_screen[2:8] == ["400Gb/s", "21.5Gb/s", "21.6Gb/s", "19", "0.0633/s", "20%"]
    # and the reason says the same share, of the time
    reasons = [r.message for r in entry.verdict.reasons]
    assert "IB mlx5_0/1: waiting for credit ~20% of the time (congestion)" in reasons
    assert re.search(r"19 link errors in the last 5 min", "; ".join(reasons))
