"""PrometheusSource against a real Prometheus scraping every dialect we read.

One Prometheus (1 s scrape interval, 10 s window) scrapes:

* ``node-a``: our exporter in this process, 8 simulated H200s with faults set on some of
  them, InfiniBand from procfs's sysfs fixture;
* ``ib-krea``: our exporter with no GPUs on node_exporter's sysfs fixture, and
  ``ib-node``: node_exporter's own output for that same tree (target label ``node``);
* ``dcgm-old`` / ``dcgm-new``: dcgm-exporter text with the field names before and after
  the DCGM 4.6 renames (``Hostname`` vs ``hostname`` labels), same readings;
* ``mixed``: one node served in both our names and DCGM's, different values;
* a dcgm-exporter started with ``--no-hostname`` (no node label: the instance's host);
* ``node-b``: our exporter, healthy, one GPU whose NVLink ``crc_data`` counter is not
  supported on any link (so its per-GPU sum is absent: unknown, not 0);
* ``old-node``: our exporter's text without the per-GPU NVLink sums, the clock event
  bitmask and the node summaries (an older exporter), one link counting replays, one
  GPU in thermal slowdown.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pynvml
import pytest

from krea_ops.exporters.infiniband import InfinibandCollector
from krea_ops.exporters.server import Exporter, HttpEndpoint
from krea_ops.health import HealthPolicy, node_verdict
from krea_ops.model import FleetTelemetry, GpuSample, NodeInfo, NodeTelemetry, Severity
from krea_ops.telemetry import PrometheusSource
from krea_ops.telemetry.dialects import FAMILY_BY_KEY, Family
from krea_ops.telemetry.prometheus import WORKERS
from krea_ops.telemetry.summary import expressions
from tests.conftest import NODE_EXPORTER_TREE, PROCFS_TREE, wait_for
from tests.telemetry.conftest import (
    KreaNode,
    Prometheus,
    Target,
    TextServer,
    settings,
    start_krea_node,
)
from tests.telemetry.dcgm_text import DcgmGpu, dcgm_text

MIB = 1024 * 1024
NODE_EXPORTER_TEXT = (NODE_EXPORTER_TREE.parent / "node_exporter-expected.prom").read_text()


@dataclass
class World:
    prom: Prometheus
    krea: KreaNode
    dcgm_gpus: list[DcgmGpu]
    t0: float
    node_b: KreaNode
    old: KreaNode
    # The instant every read of this module is evaluated at: just after the events.
    # The window is 10 s; on a loaded machine the module runs for longer than that, and
    # read at "now" the events would slide out of the window test by test.
    at: float

    def clock(self) -> float:
        return self.at


def without_sums(text: str) -> str:
    """Our exporter's text as an exporter from before the per-GPU NVLink series, the
    clock event bitmask and the node summaries."""
    newer = ("krea_gpu_nvlink_", "krea_gpu_clock_event_reasons", "krea_node_")
    return "".join(line + "\n" for line in text.splitlines() if not any(n in line for n in newer))


def _dcgm_gpus() -> list[DcgmGpu]:
    gpus = [DcgmGpu(index=i) for i in range(8)]
    gpus[1].xid = 79
    gpus[2].clock_mask = 0x28  # hw_slowdown | sw_thermal
    gpus[3].temp = 83
    return gpus


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    krea = start_krea_node("node-a", PROCFS_TREE)
    gpus = krea.nvml.gpus
    gpus[3].temperature_c = 85  # hot from the start: sustained over the window
    gpus[1].clock_event_reasons = 0x20 | 0x40
    gpus[4].lost = True
    gpus[7].nvlinks[0].active = False
    gpus[2].nvlinks[5].replay = 7
    node_b = start_krea_node("node-b", PROCFS_TREE, seed=1)
    for link in range(18):
        node_b.nvml.gpus[0].unsupported.add(
            ("nvmlDeviceGetNvLinkErrorCounter", link, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA)
        )
    old = start_krea_node("old-node", PROCFS_TREE, seed=2)
    old.nvml.gpus[2].clock_event_reasons = 0x20  # sw_thermal

    ib_node = "ib-krea"
    ib_exporter = Exporter(
        node=ib_node, collectors=[InfinibandCollector(str(NODE_EXPORTER_TREE), ib_node)]
    )
    ib_endpoint = HttpEndpoint(ib_exporter, "127.0.0.1:0")

    dcgm = _dcgm_gpus()
    t0 = time.time()
    servers = [
        TextServer(lambda: dcgm_text(dcgm, new_names=False, host="dcgm-old", t0=t0)),
        TextServer(lambda: dcgm_text(dcgm, new_names=True, host="dcgm-new", t0=t0)),
        TextServer(lambda: dcgm_text(dcgm[:1], new_names=False, host=None, t0=t0)),
        TextServer(lambda: NODE_EXPORTER_TEXT),
        TextServer(
            lambda: (
                "# TYPE krea_gpu_temperature_celsius gauge\n"
                'krea_gpu_temperature_celsius{node="mixed",gpu="0"} 60\n'
                "# TYPE krea_exporter_build_info gauge\n"
                'krea_exporter_build_info{node="mixed",version="0"} 1\n'
                "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
                'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="mixed"} 70\n'
                "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
                'DCGM_FI_DEV_POWER_USAGE{gpu="0",Hostname="mixed"} 250\n'
            )
        ),
        TextServer(lambda: without_sums(old.exporter.scrape().decode())),
    ]
    targets = [
        Target(krea.address, "krea"),
        Target(f"{ib_endpoint.host}:{ib_endpoint.port}", "krea"),
        Target(servers[0].address, "dcgm"),
        Target(servers[1].address, "dcgm"),
        Target(servers[2].address, "dcgm"),
        Target(servers[3].address, "node-exporter", {"node": "ib-node"}),
        Target(servers[4].address, "mixed"),
        Target(node_b.address, "krea"),
        Target(servers[5].address, "krea"),
    ]
    prom = Prometheus(targets)
    try:
        for job in ("krea", "dcgm", "node-exporter", "mixed"):
            prom.wait_scrapes(job, 1)
        # rate() divides by the whole window: let the history fill it first
        time.sleep(settings().telemetry_window_s + 1)
        # then events inside the window: counters move, an XID arrives (its counter
        # series is born with it)
        gpus[2].nvlinks[5].replay = 20
        gpus[2].nvlinks[5].crc_flit = 3
        old.nvml.gpus[3].nvlinks[9].replay = 40
        gpus[6].add_ecc_errors(uncorrected=2)
        assert krea.nvml.inject_xid(5, 79) == 1

        # Pin the reads once Prometheus holds the events (on a loaded machine a few
        # scrape intervals are not always enough)
        window = settings().telemetry_window_s
        summaries = expressions(window)

        def recorded(what: str, node: str) -> bool:
            rows = prom.query(f"({summaries[what]}) > 0")
            return any(r["metric"].get("node") == node for r in rows)

        wait_for(
            lambda: (
                all(
                    recorded(what, node)
                    for what, node in (
                        ("xids_new", "node-a"),
                        ("ecc_uncorrected_rate", "node-a"),
                        ("nvlink_faults_rate", "node-a"),
                    )
                )
                and prom.query(
                    f'rate(krea_nvlink_errors_total{{node="old-node"}}[{window:g}s]) > 0'
                )
            ),
            timeout=60,
        )
        yield World(prom, krea, dcgm, t0, node_b, old, at=time.time())
    finally:
        prom.stop()
        krea.stop()
        node_b.stop()
        old.stop()
        ib_endpoint.stop()
        ib_exporter.close()
        for s in servers:
            s.stop()


@pytest.fixture(scope="module")
def fleet(world: World) -> FleetTelemetry:
    with PrometheusSource(world.prom.url, settings(), clock=world.clock) as source:
        return source.collect()


def test_our_exporter_gives_the_simulated_gpus_values(world: World, fleet: FleetTelemetry) -> None:
    assert fleet.errors == ()
    assert fleet.source == f"prometheus {world.prom.url}"
    node = fleet.nodes["node-a"]
    assert node.exporter_up is True and not node.stale and node.error is None
    assert node.age_s is not None and node.age_s < 5
    assert [g.index for g in node.gpus] == list(range(8))
    fake = world.krea.nvml.gpus
    for g in node.gpus:
        f = fake[g.index]
        assert g.uuid == f.uuid and g.model == "NVIDIA H200" and g.pci_bus_id == f.pci_bus_id
        if g.index == 4:
            continue
        assert g.up is True
        assert g.temperature_c == f.temperature_c
        assert g.memory_temperature_c == f.memory_temperature_c
        assert g.slowdown_margin_c == f.slowdown_temp_c - f.temperature_c
        assert g.power_w == pytest.approx(f.power_w)
        assert g.power_limit_w == 700.0
        assert g.sm_clock_hz == f.sm_clock_mhz * 1e6 and g.sm_clock_max_hz == 1980e6
        assert g.util_ratio == 1.0
        assert g.tensor_active_ratio == pytest.approx(f.tensor_active, abs=0.01)
        assert g.memory_used_bytes == f.memory_used_bytes
        assert g.memory_total_bytes == f.memory_total_bytes
        assert g.row_remap_pending is False and g.row_remap_failed is False
        assert g.nvlinks_total == 18
    hot = node.gpus[3]
    assert hot.temperature_c == 85 and hot.temperature_min_window_c == 85
    assert node.gpus[1].clock_events == {"sw_thermal", "hw_thermal"}
    assert node.gpus[0].clock_events == frozenset()
    lost = node.gpus[4]
    assert lost.up is False and lost.down_reason == "gpu_is_lost"
    assert lost.temperature_c is None and lost.power_w is None  # absent, never 0
    assert node.gpus[5].xid_last == 79
    assert node.gpus[5].xid_increase is not None and node.gpus[5].xid_increase[79] > 0
    assert node.gpus[0].xid_increase == {}  # watched, none seen
    assert node.gpus[6].ecc_uncorrected_increase and node.gpus[6].ecc_uncorrected_increase > 0
    assert node.gpus[0].ecc_uncorrected_increase == 0.0
    assert node.gpus[7].nvlinks_up == 17


def test_nvlink_errors_rates_and_down_links(fleet: FleetTelemetry) -> None:
    node = fleet.nodes["node-a"]
    # the fleet view carries only links worth a look: one with errors, one down
    links = {ln.name: ln for ln in node.nvlinks}
    assert set(links) == {"gpu2/link5", "gpu7/link0"}
    bad = links["gpu2/link5"]
    assert bad.up is True
    assert bad.errors_total == {"replay": 20.0, "recovery": 0.0, "crc_flit": 3.0, "crc_data": 0.0}
    assert bad.error_rate_per_s["replay"] > 0 and bad.error_rate_per_s["recovery"] == 0
    assert links["gpu7/link0"].up is False
    gpu2 = node.gpus[2]
    assert gpu2.nvlink_errors_total == 23.0
    assert gpu2.nvlink_error_increase is not None and gpu2.nvlink_error_increase["replay"] > 0
    # the faults (CRC) come from their own per-GPU read; replays are not faults
    assert gpu2.nvlink_fault_increase == pytest.approx(3.0, rel=0.5)
    assert gpu2.nvlink_error_increase["crc_flit"] == pytest.approx(gpu2.nvlink_fault_increase)
    assert node.gpus[0].nvlink_fault_increase == 0.0
    assert node.gpus[0].nvlink_error_increase == {
        "replay": 0.0,
        "recovery": 0.0,
        "crc_flit": 0.0,
        "crc_data": 0.0,
    }


def test_asking_for_one_node_reads_all_its_links(world: World) -> None:
    with PrometheusSource(world.prom.url, settings(), clock=world.clock) as source:
        fleet = source.collect({"node-a"})
    assert set(fleet.nodes) == {"node-a"}
    links = fleet.nodes["node-a"].nvlinks
    assert len(links) == 7 * 18  # GPU 4 is lost: NVML answers nothing for it
    assert sum(1 for ln in links if ln.up is False) == 1
    counters = {"replay", "recovery", "crc_flit", "crc_data"}
    assert all(set(ln.errors_total) == counters for ln in links)


def test_ib_ports_of_our_exporter(fleet: FleetTelemetry) -> None:
    ports = {p.name: p for p in fleet.nodes["node-a"].ib_ports}
    assert set(ports) == {"hfi1_0/1", "mlx4_0/1", "mlx4_0/2", "mlx5_0/1"}
    mlx5 = ports["mlx5_0/1"]
    assert mlx5.state == "ACTIVE" and mlx5.phys_state == "PortConfigurationTraining"
    assert mlx5.rate_bytes_per_s == 2.5e9 * 1.25
    # static fixture: the rates exist (two scrapes in the window) and are 0
    assert mlx5.rx_bytes_per_s == 0.0 and mlx5.xmit_wait_per_s == 0.0
    assert set(mlx5.errors_total) == {
        "symbol_error",
        "link_downed",
        "link_error_recovery",
        "port_rcv_errors",
        "port_rcv_remote_physical_errors",
        "port_xmit_discards",
        "local_link_integrity_errors",
        "excessive_buffer_overrun_errors",
    }
    assert mlx5.error_increase["symbol_error"] == 0.0


def _ports(node: NodeTelemetry) -> dict[str, tuple]:
    return {
        p.name: (
            p.state,
            p.phys_state,
            p.rate_bytes_per_s,
            p.rx_bytes_per_s,
            p.tx_bytes_per_s,
            p.xmit_wait_per_s,
            dict(p.errors_total),
            dict(p.error_rate_per_s),
        )
        for p in node.ib_ports
    }


def test_node_exporter_infiniband_reads_like_ours(fleet: FleetTelemetry) -> None:
    assert {"krea", "dcgm", "node_exporter"} <= fleet.dialects
    ours, theirs = fleet.nodes["ib-krea"], fleet.nodes["ib-node"]
    assert ours.gpus == () and theirs.gpus == ()
    assert _ports(theirs) == _ports(ours)
    mlx4 = {p.name: p for p in theirs.ib_ports}["mlx4_0/1"]
    assert mlx4.state == "ACTIVE" and mlx4.phys_state == "LinkUp"
    assert mlx4.rate_bytes_per_s == 5e9
    assert mlx4.errors_total["port_xmit_discards"] == 5.0
    assert mlx4.errors_total["port_rcv_errors"] == 0.0
    assert "symbol_error" not in mlx4.errors_total  # the fixture has no such file: unknown
    # i40iw has no PMA: no counters at all, which is unknown, not zero
    i40iw = {p.name: p for p in theirs.ib_ports}["i40iw0/1"]
    assert i40iw.errors_total == {} and i40iw.rx_bytes_per_s is None
    # saturation is ours only: node_exporter has no such series
    ours_mlx4 = {p.name: p for p in ours.ib_ports}["mlx4_0/1"]
    assert ours_mlx4.saturated == {"port_xmit_wait"} and mlx4.saturated == frozenset()


def test_dcgm_old_and_new_names_give_the_same_readings(world: World, fleet: FleetTelemetry) -> None:
    old, new = fleet.nodes["dcgm-old"], fleet.nodes["dcgm-new"]
    assert old.exporter_up is True and new.exporter_up is True

    # everything but the NVLink counter, which the two servers read at different moments
    def same(g: GpuSample) -> GpuSample:
        return replace(
            g, node="x", sampled_at=None, nvlink_errors_total=None, nvlink_error_increase=None
        )

    assert [same(g) for g in old.gpus] == [same(g) for g in new.gpus]
    assert len(old.gpus) == 8
    for g, d in zip(old.gpus, world.dcgm_gpus, strict=True):
        assert g.uuid == d.uuid and g.model == "NVIDIA H200"
        assert g.temperature_c == d.temp
        assert g.power_w == d.power_w and g.power_limit_w == 700.0
        assert g.util_ratio == pytest.approx(d.util_percent / 100)  # percent -> ratio
        assert g.memory_used_bytes == d.fb_used_mib * MIB  # MiB -> bytes
        assert g.memory_total_bytes == 143771 * MIB
        assert g.sm_clock_hz == g.sm_clock_max_hz == 1980e6  # MHz -> Hz
        assert g.tensor_active_ratio == d.tensor and g.sm_active_ratio == d.sm_active
        assert g.slowdown_margin_c == 89 - d.temp
        assert g.up is None  # DCGM has no up series: unknown
    assert old.gpus[1].xid_last == 79 and old.gpus[0].xid_last is None
    assert old.gpus[1].xid_increase == {79: 1.0}
    assert old.gpus[2].clock_events == {"hw_slowdown", "sw_thermal"}
    assert old.gpus[0].clock_events == frozenset()
    assert old.gpus[3].temperature_min_window_c == 83
    # per-link fields: link 3 of GPU 0 counts replays, 2 per second
    links = {ln.name: ln for ln in old.nvlinks}
    assert set(links) == {"gpu0/link3"}
    assert links["gpu0/link3"].error_rate_per_s["replay"] == pytest.approx(2.0, rel=0.3)
    assert old.gpus[0].nvlink_error_increase is not None
    assert old.gpus[0].nvlink_error_increase["replay"] > 0


def test_ours_wins_over_dcgm_and_instance_names_unlabelled_nodes(fleet: FleetTelemetry) -> None:
    mixed = fleet.nodes["mixed"].gpus[0]
    assert mixed.temperature_c == 60  # ours, not DCGM's 70
    assert mixed.power_w == 250  # only DCGM has it
    assert "127.0.0.1" in fleet.nodes  # --no-hostname dcgm-exporter: instance host
    assert len(fleet.nodes["127.0.0.1"].gpus) == 1


def test_a_failing_query_costs_only_its_family(world: World) -> None:
    # a served metric grouped by a label name PromQL cannot parse: Prometheus answers 400
    broken = Family("broken", FAMILY_BY_KEY["temperature"].spellings, ("not a label",), "rate")
    families = (*[f for f in FAMILY_BY_KEY.values() if f.key != "power"], broken)
    with PrometheusSource(
        world.prom.url, settings(), families=families, clock=world.clock
    ) as source:
        fleet = source.collect()
    assert len(fleet.errors) == 1 and fleet.errors[0].startswith("query broken failed: HTTP 400")
    assert not fleet.ok
    g = fleet.nodes["node-a"].gpus[0]
    assert g.temperature_c is not None and g.power_w is None


ZEROS = {"replay": 0.0, "recovery": 0.0, "crc_flit": 0.0, "crc_data": 0.0}


def test_fleet_wide_links_are_read_only_for_nodes_whose_sums_say_so(
    fleet: FleetTelemetry,
) -> None:
    # node-a has a link with errors and one down: its links are read (the test above);
    # node-b is healthy: the per-GPU sums tell all, no link of it is read
    b = fleet.nodes["node-b"]
    assert b.nvlinks == ()
    assert all(g.nvlinks_total == 18 and g.nvlinks_up == 18 for g in b.gpus)
    assert b.gpus[1].nvlink_error_increase == ZEROS and b.gpus[1].nvlink_errors_total == 0.0
    # crc_data is supported on no link of GPU 0: unknown, not 0
    assert b.gpus[0].nvlink_error_increase == {"replay": 0.0, "recovery": 0.0, "crc_flit": 0.0}


def test_an_exporter_without_the_sums_is_read_per_link(fleet: FleetTelemetry) -> None:
    old = fleet.nodes["old-node"]
    assert all(g.nvlinks_total == 18 and g.nvlinks_up == 18 for g in old.gpus)
    inc = old.gpus[3].nvlink_error_increase
    assert inc is not None and inc["replay"] > 0 and inc["crc_flit"] == 0.0
    assert old.gpus[3].nvlink_errors_total == 40.0
    assert old.gpus[0].nvlink_error_increase == ZEROS
    assert {ln.name for ln in old.nvlinks} == {"gpu3/link9"}


def test_an_exporter_without_the_clock_bitmask_is_read_per_reason(world: World) -> None:
    with PrometheusSource(world.prom.url, settings(), clock=world.clock) as source:
        asked: list[tuple[str, str]] = []
        run = source._run

        def spy(key: str, promql: str, at: float, labels: tuple[str, ...] | None = None) -> Any:
            asked.append((key, promql))
            return run(key, promql, at, labels)

        source._run = spy  # type: ignore[method-assign]
        fleet = source.collect(families={"gpu"})
    old, new = fleet.nodes["old-node"], fleet.nodes["node-a"]
    assert old.gpus[2].clock_events == {"sw_thermal"} and old.gpus[0].clock_events == set()
    assert new.gpus[1].clock_events == {"sw_thermal", "hw_thermal"}  # from the bitmask
    assert new.gpus[0].clock_events == set()
    # the nine series per GPU are read for the old exporter's node alone
    # (one query for both where a small fleet's queries are merged: "a+b")
    reasons = {"clock_events", "clock_events_known"}
    per_reason = [q for key, q in asked if reasons & set(key.split("+"))]
    assert sum(len(reasons & set(key.split("+"))) for key, _ in asked) == 2
    found = {n for q in per_reason for n in re.findall(r'node=~"([^"]*)"', q)}
    assert found == {r"old\\-node"}


def test_a_caller_gets_only_the_families_it_asks_for(world: World, fleet: FleetTelemetry) -> None:
    with PrometheusSource(world.prom.url, settings(), clock=world.clock) as source:
        gpus = source.collect(families={"gpu"})
        verdicts = source.collect(families={"gpu", "nvlink", "ib"})
        with pytest.raises(ValueError):
            source.collect(families={"gpus"})
    a = gpus.nodes["node-a"]
    assert a.ib_ports == () and a.nvlinks == ()  # not read
    assert a.gpus[0].temperature_c is not None and a.gpus[0].nvlinks_total is None
    # the verdicts' NVLink input is one fault rate per GPU; counters and totals are detail
    assert a.gpus[2].nvlink_fault_increase is not None and a.gpus[2].nvlink_fault_increase > 0
    assert a.gpus[0].nvlink_fault_increase == 0.0
    assert a.gpus[2].nvlink_error_increase is None and a.gpus[2].nvlink_errors_total is None
    # an older exporter's NVLink increase still comes from its links
    inc = gpus.nodes["old-node"].gpus[3].nvlink_error_increase
    assert inc is not None and inc["replay"] > 0

    a = verdicts.nodes["node-a"]
    assert {ln.name for ln in a.nvlinks} == {"gpu2/link5", "gpu7/link0"}
    mlx5 = {p.name: p for p in a.ib_ports}["mlx5_0/1"]
    assert mlx5.state == "ACTIVE" and mlx5.rate_bytes_per_s == 2.5e9 * 1.25
    # the verdicts' read asks for the counters' rows that are not 0, not which exist:
    # zeros are unknown there (the full read above has them as 0.0)
    assert mlx5.error_increase == {} and mlx5.error_rate_per_s == {}
    assert mlx5.rx_bytes_per_s is None and mlx5.errors_total == {}  # not read: unknown
    # the full read: a counter the port does not have stays unknown, the others are 0
    mlx4 = {p.name: p for p in fleet.nodes["ib-node"].ib_ports}["mlx4_0/1"]
    assert "symbol_error" not in mlx4.error_increase
    assert mlx4.error_increase["port_rcv_errors"] == 0.0


def verdicts(fleet: FleetTelemetry) -> dict[str, list[tuple[object, ...]]]:
    """Every node's reasons (severity, code, GPU, port) under the test policy."""
    policy = HealthPolicy.from_settings(settings())
    return {
        name: sorted(
            (int(r.severity), r.code, r.gpu, r.port)
            for r in node_verdict(None, tel, policy).reasons
        )
        for name, tel in fleet.nodes.items()
    }


# the families as a fleet of our exporter alone would have them read
OURS = tuple(
    replace(f, spellings=tuple(s for s in f.spellings if s.dialect == "krea"))
    for f in FAMILY_BY_KEY.values()
)


def test_a_verdicts_only_read_gives_the_same_verdicts(world: World) -> None:
    """``nodes list`` reads only what the health rules read, error-like readings only
    where they are not 0: every node's verdict must be the one the full read gives."""
    with PrometheusSource(world.prom.url, settings(), clock=world.clock) as source:
        full = source.collect()
        lean = source.collect(families={"verdicts"})
    assert verdicts(lean) == verdicts(full)
    codes = {code for reasons in verdicts(lean).values() for _, code, _, _ in reasons}
    assert {"gpu_hot", "gpu_lost", "gpu_hw_thermal"} <= codes, codes
    # a fleet-wide read has node-a's down link alone (its GPU's other 17 links are up:
    # the GPU's own count says so): BAD, as a read of node-a alone finds it
    down = [r for r in verdicts(lean)["node-a"] if r[1] == "nvlink_down"]
    assert down == [(3, "nvlink_down", 7, "gpu7/link0")], verdicts(lean)["node-a"]
    with PrometheusSource(world.prom.url, settings(), clock=world.clock) as source:
        alone = source.collect({"node-a"}, families={"verdicts"})
    assert verdicts(alone)["node-a"] == verdicts(lean)["node-a"]
    a = lean.nodes["node-a"].gpus[0]
    # node-a's temperature has DCGM spellings too here: read whole, as the full read does
    assert a.temperature_c is not None
    assert a.power_w is None and a.util_ratio is None and a.memory_used_bytes is None  # no rule

    # a fleet of our exporter alone: error-like readings come back only where not 0, and
    # the verdicts are still the full read's
    with PrometheusSource(world.prom.url, settings(), families=OURS, clock=world.clock) as source:
        full = source.collect({"node-a", "node-b", "old-node"})
        lean = source.collect({"node-a", "node-b", "old-node"}, families={"verdicts"})
    assert verdicts(lean) == verdicts(full)
    gpus = lean.nodes["node-a"].gpus
    assert gpus[3].temperature_c == 85 and gpus[3].temperature_min_window_c == 85
    assert gpus[0].row_remap_pending is None  # 0: left out (no rule fires on it)
    assert full.nodes["node-a"].gpus[0].row_remap_pending is False


def test_a_view_reads_rule_only_readings_sparse_and_judges_gpus_alike(world: World) -> None:
    """``gpus`` reads the ``gpu`` group: ECC and row remapping, which no table shows,
    come back only where not 0, and every GPU reason is the full read's."""
    with PrometheusSource(world.prom.url, settings(), families=OURS, clock=world.clock) as source:
        full = source.collect()
        view = source.collect(families={"gpu"})

    def gpu_reasons(fleet: FleetTelemetry) -> dict[str, list[tuple[object, ...]]]:
        return {
            n: [r for r in rs if r[2] is not None and r[3] is None]
            for n, rs in verdicts(fleet).items()
        }

    assert gpu_reasons(view) == gpu_reasons(full)
    codes = {r[1] for rs in gpu_reasons(view).values() for r in rs}
    assert {"gpu_ecc_uncorrected", "gpu_hot", "gpu_lost"} <= codes, codes
    a = view.nodes["node-a"].gpus
    assert a[6].ecc_uncorrected_increase and a[6].ecc_uncorrected_increase > 0
    assert a[0].ecc_uncorrected_increase is None and a[0].row_remap_pending is None
    assert full.nodes["node-a"].gpus[0].ecc_uncorrected_increase == 0.0


def test_node_summaries_skip_only_the_nodes_no_rule_can_fire_on(world: World) -> None:
    """Where the exporters publish node summaries, a verdicts-only read of
    the fleet reads GPU by GPU only the nodes whose summary leaves a rule a chance, and
    gives every node the verdict the full read gives."""
    with PrometheusSource(world.prom.url, settings(), families=OURS, clock=world.clock) as source:
        full = source.collect()
        summarized = source.collect(families={"verdicts"})
    assert verdicts(summarized) == verdicts(full)
    assert set(summarized.nodes) == set(full.nodes)
    # node-b is healthy: counted, not read
    b = summarized.nodes["node-b"]
    assert b.detail_reason is None and b.gpus == () and b.ib_ports == ()
    assert b.gpu_count == 8 and b.exporter_up is True and not b.stale
    assert b.age_s is not None and b.age_s < 5
    # the others are read one GPU at a time, each for a reason a user can check
    a = summarized.nodes["node-a"]
    assert a.detail_reason == "a GPU is not answering NVML" and len(a.gpus) == 8
    assert summarized.nodes["old-node"].detail_reason == "no summary"  # an older exporter
    assert summarized.nodes["ib-krea"].detail_reason == "no summary"  # no GPUs: none
    codes = {r[1] for rs in verdicts(summarized).values() for r in rs}
    assert {"gpu_hot", "gpu_lost", "gpu_hw_thermal", "nvlink_down", "xid_bus"} <= codes, codes
    # a counted node misses no GPU: 8 of 8 is OK, 8 of a capacity of 9 is not
    policy = HealthPolicy.from_settings(settings())
    info = NodeInfo(name="node-b", gpu_capacity=8, ready=True)
    assert node_verdict(info, b, policy).severity is Severity.OK
    missing = node_verdict(replace(info, gpu_capacity=9), b, policy)
    assert [r.code for r in missing.reasons] == ["gpu_missing"]
    assert "only 8 of 9" in missing.reasons[0].message


def test_a_summary_is_of_the_scrape_the_readings_are_of(world: World) -> None:
    """At the very instant of the first scrape that shows a GPU's uncorrectable ECC
    errors and its XID 95, the node-summary read calls the node what the full read does
    (BAD), never "clean by its summary": the summaries come with the readings, in the
    same scrape. (Recording rules folded them up to one evaluation interval later.)"""
    node = start_krea_node("sudden", PROCFS_TREE, seed=4)
    prom = Prometheus([Target(node.address, "krea")])
    try:
        prom.wait_scrapes("krea", 3)
        node.nvml.gpus[1].add_ecc_errors(uncorrected=3)
        assert node.nvml.inject_xid(1, 95) == 1
        ecc = (
            'krea_gpu_ecc_errors_total{node="sudden",error_type="uncorrected",'
            'counter_type="volatile"} > 0'
        )
        rows = wait_for(lambda: prom.query(f"timestamp({ecc})"), timeout=20)
        first = float(rows[0]["value"][1])  # the scrape that first saw them
        with PrometheusSource(prom.url, settings(), families=OURS, clock=lambda: first) as src:
            full = src.collect()
            lean = src.collect(families={"verdicts"})
        assert verdicts(lean) == verdicts(full)
        sudden = lean.nodes["sudden"]
        assert sudden.detail_reason is not None and len(sudden.gpus) == 8
        codes = {r[1] for r in verdicts(lean)["sudden"]}
        assert "gpu_ecc_uncorrected" in codes, codes
    finally:
        prom.stop()
        node.stop()


def _shape(value: object) -> object:
    """A reading as far as two reads a few seconds apart must agree on it: a rate over
    a sliding window moves, whether it is unknown, 0 or more does not."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return "0" if value == 0 else ">0"
    if isinstance(value, Mapping):
        return {k: _shape(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("by_name", [True, False], ids=["others-by-name", "all-but-proven"])
def test_a_view_skips_readings_the_node_summaries_prove_empty(
    world: World, by_name: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gpus`` at fleet scale asks for NVLink faults, ECC, row remapping and XIDs only
    of the nodes whose summaries do not prove them 0 (the rate over every GPU's fault
    counters alone is a sixth of a fleet read's Prometheus CPU), and still shows every
    GPU what the read without the summaries shows: a skipped GPU's NVLink faults are 0,
    not unknown."""
    fields = (
        "nvlink_fault_increase",
        # (a node without the fault rate would be read link by link, as if its exporter
        # served no per-GPU sums: the per-counter increases would come back)
        "nvlink_error_increase",
        "xid_last",
        "xid_increase",
        "ecc_uncorrected_increase",
        "row_remap_pending",
        "row_remap_failed",
    )

    # set once per GPU: the same value from the node's summary as from each GPU's series
    exact = ("memory_total_bytes", "power_limit_w")

    def readings(fleet: FleetTelemetry) -> dict[tuple[str, int], tuple[object, ...]]:
        return {
            (n, g.index): (
                *(_shape(getattr(g, f)) for f in fields),
                *(getattr(g, f) for f in exact),
            )
            for n, t in fleet.nodes.items()
            for g in t.gpus
        }

    if not by_name:  # more nodes left than a name list holds: node!~ the proven ones
        monkeypatch.setattr("krea_ops.telemetry.prometheus.LINK_QUERY_NODES", 0)
    with PrometheusSource(world.prom.url, settings(), families=OURS, clock=world.clock) as source:
        pruned = source.collect(families={"gpu"})
        skipped = pruned.skipped
        asked = set(source.last_timings)
    with PrometheusSource(
        world.prom.url, settings(), families=OURS, use_summaries=False, clock=world.clock
    ) as plain:
        whole = plain.collect(families={"gpu"})
        assert whole.skipped == {}
    assert readings(pruned) == readings(whole)
    assert set(skipped) == {
        "nvlink_fault_rate",
        "xid_last",
        "xid_rate",
        "ecc_uncorrected_rate",
        "row_remap_pending",
        "row_remap_failed",
        "memory_total",
        "power_limit",
        "xid_monitored",
    }, skipped
    # node-b is healthy: nothing asked of it; node-a has faults, an XID and ECC errors
    assert all("node-b" in nodes for nodes in skipped.values()), skipped
    for key in ("nvlink_fault_rate", "xid_last", "xid_rate", "ecc_uncorrected_rate"):
        assert "node-a" not in skipped[key], key
    assert "node-a" in skipped["row_remap_pending"]
    # node-a has a GPU NVML lost (no readings): its GPUs do not all report one value
    assert "node-a" not in skipped["memory_total"]
    assert pruned.nodes["node-b"].gpus[0].memory_total_bytes == 143_771 * 1024 * 1024
    assert {"nvlink_fault_rate", "xid_rate", "row_remap_pending"} <= asked, asked
    # old-node's exporter serves no per-GPU NVLink sums: its faults are not proven 0
    assert "old-node" not in skipped["nvlink_fault_rate"]
    assert all(g.nvlink_fault_increase == 0.0 for g in pruned.nodes["node-b"].gpus)
    a = pruned.nodes["node-a"].gpus
    assert a[2].nvlink_fault_increase is not None and a[2].nvlink_fault_increase > 0
    assert a[5].xid_last == 79 and a[5].xid_increase and a[5].xid_increase[79] > 0
    assert a[6].ecc_uncorrected_increase is not None and a[6].ecc_uncorrected_increase > 0


def test_a_reading_proven_empty_on_every_node_read_is_not_asked_for(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where every node being read has its summaries prove a reading empty (here the
    healthy node-b alone, read as a fleet would be), the reading is not queried at all,
    and the GPUs still show a fault rate of 0."""
    monkeypatch.setattr("krea_ops.telemetry.prometheus.DETAIL_NODES", 0)
    with PrometheusSource(world.prom.url, settings(), families=OURS, clock=world.clock) as source:
        fleet = source.collect({"node-b"}, families={"gpu"})
        asked = set(source.last_timings)
    pruned = {"nvlink_fault_rate", "xid_rate", "xid_last", "row_remap_pending", "memory_total"}
    assert pruned.isdisjoint(asked), asked
    assert {"temperature", "summary:gpus"} <= asked
    assert [g.nvlink_fault_increase for g in fleet.nodes["node-b"].gpus] == [0.0] * 8
    assert {g.memory_total_bytes for g in fleet.nodes["node-b"].gpus} == {143_771 * 1024 * 1024}
    assert all(
        g.xid_last is None and g.ecc_uncorrected_increase is None
        for g in fleet.nodes["node-b"].gpus
    )


def _queries_answered(world: World) -> float:
    """How many instant queries Prometheus has answered, by its own counter."""
    with urllib.request.urlopen(f"{world.prom.url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query"' in line
    )


@pytest.mark.parametrize("nodes", [None, {"node-a"}], ids=["fleet", "one-node"])
def test_bounded_queries_go_out_merged_with_the_same_readings(
    world: World, nodes: set[str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our readings of a few named nodes, and the node summaries of a fleet of a few
    hundred of our exporters, go out as a few queries, each the ``or`` of several (at 64
    nodes a read made 37-43 requests; ``nodes show`` 41). Every reading is the one a
    query apiece gives, and a larger fleet's summaries go out one query each, by
    Prometheus' own count of the queries it answered."""

    def read() -> tuple[FleetTelemetry, float]:
        with PrometheusSource(
            world.prom.url, settings(), families=OURS, clock=world.clock
        ) as source:
            before = _queries_answered(world)
            fleet = source.collect(nodes)
            return fleet, _queries_answered(world) - before

    merged, few = read()
    # a larger fleet: its summaries stay apart (a few nodes' readings are still merged)
    monkeypatch.setattr("krea_ops.telemetry.prometheus.MERGE_NODES", 0)
    large, apart = read()
    monkeypatch.setattr("krea_ops.telemetry.prometheus.MERGE_LEAST", 10**6)  # none merged
    alone, many = read()
    assert merged == alone and large == alone
    assert merged.errors == () and "node-a" in merged.nodes and merged.nodes["node-a"].gpus
    if nodes is None:
        assert few < apart < many, (few, apart, many)
    else:
        assert few == apart and few * 10 <= many, (few, apart, many)


def test_a_failing_query_among_merged_ones_costs_only_its_family(world: World) -> None:
    """Merged with others, a query Prometheus refuses fails the one query they make: each
    is then asked alone, and only the refused family is missing, named in the error."""
    broken = Family("broken", FAMILY_BY_KEY["power"].spellings[:1], ("not a label",), "rate")
    assert broken.spellings[0].dialect == "krea"
    families = (*[f for f in OURS if f.key != "power"], broken)
    with PrometheusSource(
        world.prom.url, settings(), families=families, clock=world.clock
    ) as source:
        fleet = source.collect({"node-b"})
    assert len(fleet.errors) == 1 and fleet.errors[0].startswith("query broken failed: HTTP 400")
    g = fleet.nodes["node-b"].gpus[0]
    assert g.temperature_c is not None and g.power_w is None and g.util_ratio is not None


def test_a_read_in_flight_when_its_source_closes_ends_and_does_not_wait_for_ever(
    world: World,
) -> None:
    """The dashboard closes its source as it quits, with a read perhaps in flight: the
    queries still queued are cancelled, and the read ends with an error instead of
    waiting for ever on a merged query that will never run (the process, which waits for
    its read threads before it exits, hung with it)."""
    source = PrometheusSource(world.prom.url, settings(), families=OURS, clock=world.clock)
    release = threading.Event()
    try:
        for _ in range(WORKERS):  # every query thread busy: the read's queries queue
            source._pool.submit(release.wait, 30)
        outcome: list[object] = []
        queued: list[str] = []
        submit = source._pool.submit

        def recorded(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            queued.append(getattr(fn, "__name__", ""))
            return submit(fn, *args, **kwargs)

        source._pool.submit = recorded  # type: ignore[method-assign]

        def read() -> None:
            try:
                outcome.append(source.collect({"node-a"}))
            except Exception as exc:
                outcome.append(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        wait_for(lambda: "_run_merged" in queued, timeout=20)
    finally:
        source.close()
        release.set()
    reader.join(timeout=20)
    assert not reader.is_alive(), "the read still waits on a query the closed source cancelled"
    assert outcome and (
        isinstance(outcome[0], Exception) or outcome[0].errors  # type: ignore[attr-defined]
    ), outcome
