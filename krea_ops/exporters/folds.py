"""Per-node folds of the node's own readings, published with every scrape.

A verdicts-only read of thousands of nodes (``nodes list``, node-health) needs to know,
per node, whether any health rule could fire there at all; only the nodes where one could
are then read GPU by GPU and port by port (krea_ops/telemetry/summary.py). These series
let it answer with one series per node and reading: the hottest GPU, the lowest slowdown
margin, the GPUs slowed down, the sums of the fault counters... (``model.NODE_FOLDS``).

They are computed here, from the families this scrape's collectors returned, so a fold
and the readings it folds are always of the same moment: a summary can never say "clean"
about a scrape the per-GPU readings have already moved past. (Prometheus recording rules
fold only at their evaluation interval, up to 30 s behind the samples.) The counters are
sums over GPUs or ports; a read asks whether they changed in the window, so a reset or a
GPU gone reads as a change: the fold errs towards reading the node, never towards
calling it clean.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from krea_ops.exporters.infiniband import counter_metric
from krea_ops.exporters.nvml import CLOCK_EVENT_REASONS
from krea_ops.health import IB_ERROR_COUNTERS, SLOWDOWN_EVENTS
from krea_ops.model import NODE_FOLDS, NVLINK_COUNTERS, NVLINK_FAULT_COUNTERS

SLOWDOWN_MASK = sum(bit for name, bit in CLOCK_EVENT_REASONS if name in SLOWDOWN_EVENTS)
# IB counters whose rise a health rule judges (what ib_port_reasons reads)
IB_JUDGED = frozenset(counter_metric(c) for c in (*IB_ERROR_COUNTERS, "link_downed"))
# every IB error counter ``fabric`` and ``nodes show`` show (the judged ones, and the
# transmit discards no rule judges): what proves a node's port error rows empty
IB_COUNTED = IB_JUDGED | {counter_metric("port_xmit_discards")}
# counters whose saturation hides a rise the rules would judge, and the congestion counter
IB_SATURABLE = frozenset((*IB_ERROR_COUNTERS, "link_downed", "port_xmit_wait"))
IB_ACTIVE_STATES = (4.0, 5.0)  # active, active defer

HELP = {
    "gpus": "GPUs this exporter reports (krea_gpu_up series).",
    "gpus_up_min": "0 if any GPU did not answer NVML this scrape, else 1.",
    "temperature_max": "Hottest GPU core temperature.",
    "margin_min": "Lowest GPU slowdown margin (degrees to the slowdown temperature).",
    "clock_masks": "GPUs serving krea_gpu_clock_event_reasons.",
    "slowdown_gpus": "GPUs with a thermal, power-brake or hardware slowdown active.",
    "xid_last_max": "Highest krea_gpu_xid_last (0: no XID since the exporter started).",
    "xids": "XIDs seen, summed over the GPUs (krea_gpu_xid_errors_total).",
    "ecc_uncorrected": "Volatile uncorrected ECC errors, summed over the GPUs.",
    "row_remap_max": "1 if any GPU has a row remap pending or failed.",
    "nvlink_faults": "NVLink recovery and CRC errors, summed over the GPUs' links.",
    "nvlink_fault_gpus": "GPUs serving their NVLink fault counters this scrape.",
    "nvlink_gpus": "GPUs serving krea_gpu_nvlink_links.",
    "nvlinks_down": "NVLinks not active, summed over the GPUs.",
    "ib_ports_not_active": "InfiniBand ports whose logical state is not active.",
    "ib_errors": "InfiniBand port errors the health rules judge, summed over the ports.",
    "ib_counted": "Every InfiniBand error counter (transmit discards too), summed over the ports.",
    "ib_error_series": "InfiniBand error counter series served this scrape, over the ports.",
    "ib_ports": "InfiniBand ports this exporter reports (krea_ib_state_id series).",
    "ib_saturated_max": "1 if an error or wait counter of a port is stuck at its maximum.",
    "ib_saturated_any": "1 if any counter of a port is stuck at its maximum.",
    "nvlink_counted": "Every NVLink error counter, summed over the GPUs' links.",
    "nvlink_error_series": "NVLink error counter series served this scrape, over the GPUs.",
    "memory_total_uniform": "Device memory of every GPU, where all report the same.",
    "power_limit_uniform": "Power limit of every GPU, where all report the same.",
    "xid_monitored_uniform": "krea_gpu_xid_monitored of every GPU, where all report the same.",
    "nvlink_links_uniform": "NVLinks of every GPU, where all report the same.",
    "nvlink_links_up_uniform": "NVLinks up of every GPU, where all report the same.",
    "ib_phys_state_uniform": "Physical state of every InfiniBand port, where all report the same.",
    "ib_rate_uniform": "Link speed of every InfiniBand port, where all report the same.",
}
# a reading every GPU of a node reports alike -> the series it is read from
UNIFORM_SOURCE = {
    "memory_total_uniform": "krea_gpu_memory_total_bytes",
    "power_limit_uniform": "krea_gpu_power_limit_watts",
    "xid_monitored_uniform": "krea_gpu_xid_monitored",
    "nvlink_links_uniform": "krea_gpu_nvlink_links",
    "nvlink_links_up_uniform": "krea_gpu_nvlink_links_up",
}
# the same for every InfiniBand port of a node (not the state: ``krea_ib_state_id`` is the
# series that names a node's ports to a read, asked of every node)
UNIFORM_PORT_SOURCE = {
    "ib_phys_state_uniform": "krea_ib_physical_state_id",
    "ib_rate_uniform": "krea_ib_rate_bytes_per_second",
}


def _values(by_name: dict[str, list[tuple[dict[str, str], float]]], name: str) -> list[float]:
    return [v for _, v in by_name.get(name, ())]


def fold(families: Iterable[Metric]) -> dict[str, float]:
    """summary key -> value, over one scrape's families; a key is left out where nothing
    it folds was served (a count of 0 stays: 0 GPUs slowed down)."""
    by_name: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in families:
        for s in family.samples:
            by_name[s.name].append((s.labels, s.value))
    out: dict[str, float] = {}
    up = _values(by_name, "krea_gpu_up")
    if not up:
        return out  # no GPU readings at all: nothing to fold, the read reads this node
    out["gpus"] = float(len(up))
    out["gpus_up_min"] = min(up)
    for key, name, pick in (
        ("temperature_max", "krea_gpu_temperature_celsius", max),
        ("margin_min", "krea_gpu_slowdown_margin_celsius", min),
        ("xid_last_max", "krea_gpu_xid_last", max),
    ):
        if values := _values(by_name, name):
            out[key] = pick(values)
    masks = _values(by_name, "krea_gpu_clock_event_reasons")
    out["clock_masks"] = float(len(masks))
    out["slowdown_gpus"] = float(sum(1 for m in masks if int(m) & SLOWDOWN_MASK))
    out["xids"] = sum(_values(by_name, "krea_gpu_xid_errors_total"))
    out["ecc_uncorrected"] = sum(
        v
        for labels, v in by_name.get("krea_gpu_ecc_errors_total", ())
        if labels.get("error_type") == "uncorrected" and labels.get("counter_type") == "volatile"
    )
    remaps = [*_values(by_name, "krea_gpu_row_remap_pending")]
    remaps += _values(by_name, "krea_gpu_row_remap_failed")
    out["row_remap_max"] = max(remaps, default=0.0)
    faults = [
        (labels.get("gpu"), v)
        for labels, v in by_name.get("krea_gpu_nvlink_errors_total", ())
        if labels.get("counter") in NVLINK_FAULT_COUNTERS
    ]
    out["nvlink_faults"] = sum(v for _, v in faults)
    out["nvlink_fault_gpus"] = float(len({g for g, _ in faults}))
    sums = by_name.get("krea_gpu_nvlink_errors_total", ())
    out["nvlink_counted"] = sum(v for _, v in sums)
    out["nvlink_error_series"] = float(
        sum(1 for labels, _ in sums if labels.get("counter") in NVLINK_COUNTERS)
    )
    links = {labels.get("gpu"): v for labels, v in by_name.get("krea_gpu_nvlink_links", ())}
    links_up = {labels.get("gpu"): v for labels, v in by_name.get("krea_gpu_nvlink_links_up", ())}
    out["nvlink_gpus"] = float(len(links))
    out["nvlinks_down"] = sum(n - links_up[g] for g, n in links.items() if g in links_up)
    states = _values(by_name, "krea_ib_state_id")
    out["ib_ports_not_active"] = float(sum(1 for s in states if s not in IB_ACTIVE_STATES))
    out["ib_errors"] = sum(v for name in IB_JUDGED for v in _values(by_name, name))
    counted = [v for name in IB_COUNTED for v in _values(by_name, name)]
    out["ib_counted"] = sum(counted)
    out["ib_error_series"] = float(len(counted))
    out["ib_ports"] = float(len(states))
    out["ib_saturated_max"] = max(
        (
            v
            for labels, v in by_name.get("krea_ib_port_counters_saturated", ())
            if labels.get("counter") in IB_SATURABLE
        ),
        default=0.0,
    )
    out["ib_saturated_any"] = max(_values(by_name, "krea_ib_port_counters_saturated"), default=0.0)
    for sources, count in ((UNIFORM_SOURCE, len(up)), (UNIFORM_PORT_SOURCE, len(states))):
        for key, name in sources.items():
            values = _values(by_name, name)
            if values and len(values) == count and len(set(values)) == 1:
                out[key] = values[0]
    return out


def node_fold_metrics(node: str, families: Iterable[Metric]) -> Iterator[Metric]:
    """The ``krea_node_*`` families of one scrape (see ``fold``)."""
    for key, value in fold(families).items():
        name = NODE_FOLDS[key]
        kind = CounterMetricFamily if name.endswith("_total") else GaugeMetricFamily
        family = kind(name, HELP[key], labels=["node"])
        family.add_metric([node], value)
        yield family
