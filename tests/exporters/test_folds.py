"""The exporter's per-node summaries (``krea_node_*``) fold the very scrape they come with."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from krea_ops.exporters.fakenvml import fake_h200_node
from krea_ops.exporters.folds import IB_COUNTED
from krea_ops.exporters.infiniband import InfinibandCollector
from krea_ops.exporters.nvml import GpuCollector
from krea_ops.exporters.server import Exporter
from krea_ops.model import NODE_FOLDS
from krea_ops.telemetry.dialects import IB_ERROR_COUNTERS
from tests.conftest import PROCFS_TREE

NAMES = {name: key for key, name in NODE_FOLDS.items()}
# the error counters the port views show, as our exporter names them
IB_SHOWN = [krea for krea, _ in IB_ERROR_COUNTERS.values()]


def test_the_counted_ib_errors_are_every_counter_the_port_views_show() -> None:
    assert set(IB_SHOWN) == IB_COUNTED


def _scrape(exporter: Exporter) -> tuple[dict[str, float], dict[str, list[float]]]:
    """(summary key -> the node's value, per-GPU/port series name -> values) of one scrape."""
    node: dict[str, float] = {}
    raw: dict[str, list[float]] = {}
    text = exporter.scrape().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in NAMES:
                assert s.labels == {"node": "n1"}, s
                node[NAMES[s.name]] = s.value
            else:
                raw.setdefault(s.name, []).append(s.value)
    return node, raw


def test_a_scrape_carries_the_folds_of_its_own_readings() -> None:
    nvml = fake_h200_node(count=4)
    nvml.nvmlInit()
    gpu = GpuCollector(nvml, "n1", gpm_interval_s=0.05, event_wait_ms=20)
    exporter = Exporter(node="n1", collectors=[gpu, InfinibandCollector(PROCFS_TREE, "n1")])
    try:
        healthy, raw = _scrape(exporter)
        assert healthy["gpus"] == 4 and healthy["gpus_up_min"] == 1
        assert healthy["temperature_max"] == max(raw["krea_gpu_temperature_celsius"])
        assert healthy["slowdown_gpus"] == 0 and healthy["clock_masks"] == 4
        assert healthy["nvlinks_down"] == 0 and healthy["nvlink_gpus"] == 4
        assert healthy["memory_total_uniform"] == raw["krea_gpu_memory_total_bytes"][0]
        assert "xid_last_max" not in healthy  # no GPU has seen an XID: nothing to fold
        ib_before = healthy["ib_errors"]
        # every port's eight error counters: how many are served, and their sum
        counters = [v for name in IB_SHOWN for v in raw.get(name, ())]
        ports = len(raw["krea_ib_state_id"])
        assert healthy["ib_ports"] == ports == 4
        assert healthy["ib_error_series"] == len(counters) == ports * len(IB_SHOWN)
        assert healthy["ib_counted"] == sum(counters)

        # faults: the very next scrape's folds show them
        nvml.gpus[2].temperature_c = 86
        nvml.gpus[2].clock_event_reasons = 0x80  # power brake
        nvml.gpus[3].add_ecc_errors(uncorrected=2)
        nvml.gpus[0].nvlinks[3].active = False
        nvml.gpus[0].nvlinks[2].crc_flit = 5
        nvml.gpus[1].lost = True

        folds = _scrape(exporter)[0]
        assert folds["temperature_max"] == 86
        assert folds["slowdown_gpus"] == 1
        assert folds["ecc_uncorrected"] == healthy["ecc_uncorrected"] + 2
        assert folds["nvlinks_down"] == 1
        assert folds["nvlink_faults"] >= healthy["nvlink_faults"] + 5
        assert folds["gpus_up_min"] == 0 and folds["gpus"] == 4
        # a lost GPU reports no memory size: the GPUs no longer agree on one
        assert "memory_total_uniform" not in folds
        assert folds["ib_errors"] == ib_before  # (the sysfs fixture does not move)
    finally:
        exporter.close()
