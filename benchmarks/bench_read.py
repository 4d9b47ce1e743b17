#!/usr/bin/env python3
"""Issue 5: ``krea-ops gpus`` / ``nodes list`` / ``fabric`` on a simulated fleet, next to
``kubectl get nodes``, against the same API server in the same run.

1. starts the bundled API server (``krea-ops sim serve --api-only``, as
   benchmarks/bench_apiserver.py does) and creates ``--nodes`` H200 nodes (8 GPUs, 8 HCAs,
   the sim's labels and capacity);
2. synthesizes the telemetry of every node in OpenMetrics text, the series our exporter
   serves for the families krea-ops reads (listed in the output), with samples every
   ``--interval`` s from a window before the start until ``--horizon`` s *after* it, so
   instant queries at "now" find fresh samples for the whole run; a few nodes are sick
   (NVLink replays rising, a link down, a hot GPU, IB symbol errors rising, NVLink CRC
   errors rising, uncorrectable ECC errors rising). These are the exporters from before
   the node summaries: no ``krea_node_*`` series, so every read reads every GPU;
3. backfills it with ``promtool tsdb create-blocks-from openmetrics`` and starts
   ``prometheus`` on that data directory;
4. times ``--repeat`` runs of each command as a subprocess (start-up included, like
   kubectl's) and prints a markdown table: median / min / max seconds, output bytes, rows,
   the machine's load average; beside kubectl, the official Python client's floor (a
   fresh interpreter that imports ``kubernetes.client`` and makes one list call:
   ``FLOOR_LEAN``, and the same through ``CoreV1Api``: ``FLOOR_API``);
5. (``--summaries publish``) adds the ``krea_node_*`` series today's exporter publishes
   with every scrape, for every node and sample time: ``fold()`` of
   krea_ops/exporters/folds.py over the same synthesized readings. They are backfilled as
   more blocks into the same data directory and Prometheus is restarted on it; then
   every command is timed again, and the script checks that ``nodes list`` gives every
   node the same verdict and reasons, ``gpus`` every GPU the same row, and ``fabric``,
   ``nodes show`` and ``queue list`` the same output, as the full read of phase 4.

At 5,000 nodes give ``--horizon`` room for the whole run (synthesis and backfill grow
with nodes x samples: ``--horizon 3600`` on a quiet machine).

    .venv/bin/python benchmarks/bench_read.py --nodes 512 --repeat 3   # quick
    .venv/bin/python benchmarks/bench_read.py                          # 4,096 nodes
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import re
import resource
import shlex
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_apiserver import (  # noqa: E402
    NodeHeartbeats,
    ServerProcess,
    compile_project,
    create_request,
    node_name,
    run_writes,
    table,
)

GPUS = 8
HCAS = 8
LINKS = 18
NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")
CLOCK_REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
    "display_clock_setting",
)
ECC: tuple[tuple[str, str], ...] = (
    ("corrected", "volatile"),
    ("uncorrected", "volatile"),
    ("corrected", "aggregate"),
)
ECC += (("uncorrected", "aggregate"),)
IB_ERRORS = (
    "krea_ib_symbol_error",
    "krea_ib_link_downed",
    "krea_ib_link_error_recovery",
    "krea_ib_port_errors_received",
    "krea_ib_port_receive_remote_physical_errors",
    "krea_ib_port_discards_transmitted",
    "krea_ib_local_link_integrity_errors",
    "krea_ib_excessive_buffer_overrun_errors",
)
HDR_RATE = 50e9  # NDR 400 Gb/s in bytes/s
# (family name, type, [(labels, value per sample time: None where no sample)])
Family = tuple[str, str, Sequence[tuple[str, Sequence[float | None]]]]
# the same, of the synthesized readings (a sample at every time)
Readings = tuple[str, str, list[tuple[str, list[float]]]]


# ---------------------------------------------------------------------------------------
# Synthetic telemetry


class Fleet:
    """Which nodes are sick, and every series' value at a time."""

    def __init__(self, nodes: int, sick: int, per_link: str) -> None:
        self.nodes = nodes
        stride = max(1, nodes // max(1, sick))
        self.nvlink_errors = {i for i in range(3, nodes, stride)}
        self.link_down = {i for i in range(5, nodes, stride * 2)}
        self.hot = {i for i in range(7, nodes, stride * 2)}
        self.ib_errors = {i for i in range(11, nodes, stride)}
        # fault counters rising: NVLink CRC errors on one link, uncorrectable ECC errors
        self.nvlink_faults = {i for i in range(13, nodes, stride * 2)}
        self.ecc_errors = {i for i in range(17, nodes, stride * 2)}
        sick_links = self.nvlink_errors | self.link_down | self.nvlink_faults
        self.per_link = set(range(nodes)) if per_link == "all" else sick_links

    def labels(self, i: int, gpu: int) -> str:
        name = node_name(i)
        return (
            f'node="{name}",gpu="{gpu}",uuid="GPU-{i:08x}-{gpu:04x}",'
            f'pci_bus_id="00000000:{0x18 + gpu * 0x10:02X}:00.0",model="NVIDIA H200",'
            f'job="krea-exporter",instance="{instance(i)}"'
        )

    def port_labels(self, i: int, hca: int) -> str:
        return (
            f'node="{node_name(i)}",device="mlx5_{hca}",port="1",'
            f'job="krea-exporter",instance="{instance(i)}"'
        )


def instance(i: int) -> str:
    return f"10.64.{i // 256}.{i % 256}:9400"


def families(
    fleet: Fleet, times: list[float], t0: float, only: list[int] | None = None
) -> Iterator[Readings]:
    """(family name, type, [(labels, value per time)]) of the whole fleet, or of the
    nodes ``only`` names, family by family (OpenMetrics keeps a family's samples
    together). The readings of the exporters from before the node summaries: no
    ``krea_node_*`` series (``node_summaries`` computes those)."""
    nodes = range(fleet.nodes) if only is None else only
    linked = sorted(fleet.per_link) if only is None else [i for i in only if i in fleet.per_link]
    k = len(times)
    since = [t - times[0] for t in times]  # seconds since the first sample
    ones, zeros = [1.0] * k, [0.0] * k
    steps = [float(j) for j in range(k)]  # a fault counter rising one every sample

    def gpu_gauge(name: str, value: Any) -> Readings:
        rows = []
        for i in nodes:
            for g in range(GPUS):
                v = value(i, g) if callable(value) else value
                rows.append((fleet.labels(i, g), v if isinstance(v, list) else [float(v)] * k))
        return name, "gauge", rows

    def temp(i: int, g: int) -> float:
        return 85.0 if i in fleet.hot and g == 3 else 38.0 + (i * 7 + g * 3) % 17

    yield (
        "krea_exporter_build_info",
        "gauge",
        [
            (
                f'node="{node_name(i)}",version="0.1.0",job="krea-exporter",instance="{instance(i)}"',
                ones,
            )
            for i in nodes
        ],
    )
    yield gpu_gauge("krea_gpu_up", 1)
    yield gpu_gauge("krea_gpu_temperature_celsius", temp)
    yield gpu_gauge("krea_gpu_memory_temperature_celsius", lambda i, g: temp(i, g) + 6)
    yield gpu_gauge("krea_gpu_slowdown_margin_celsius", lambda i, g: 89 - temp(i, g))
    yield gpu_gauge("krea_gpu_power_watts", lambda i, g: 420.0 + (i * 13 + g * 29) % 240)
    yield gpu_gauge("krea_gpu_power_limit_watts", 700)
    yield gpu_gauge("krea_gpu_sm_clock_hertz", 1980e6)
    yield gpu_gauge("krea_gpu_utilization_ratio", lambda i, g: 1.0 if (i + g) % 5 else 0.0)
    yield gpu_gauge("krea_gpu_tensor_active_ratio", lambda i, g: ((i * 31 + g * 7) % 60) / 100)
    yield gpu_gauge("krea_gpu_sm_active_ratio", lambda i, g: ((i * 17 + g * 5) % 90) / 100)
    yield gpu_gauge("krea_gpu_memory_used_bytes", lambda i, g: float(((i + g) % 140) << 30))
    yield gpu_gauge("krea_gpu_memory_total_bytes", float(143771 << 20))
    yield gpu_gauge("krea_gpu_xid_monitored", 1)
    yield gpu_gauge("krea_gpu_row_remap_pending", 0)
    yield gpu_gauge("krea_gpu_row_remap_failed", 0)
    yield gpu_gauge("krea_gpu_nvlink_links", LINKS)
    yield gpu_gauge(
        "krea_gpu_nvlink_links_up",
        lambda i, g: LINKS - 1 if i in fleet.link_down and g == 1 else LINKS,
    )
    rows = []
    for i in nodes:
        for g in range(GPUS):
            for reason in CLOCK_REASONS:
                on = reason == "gpu_idle" and (i + g) % 5 == 0
                rows.append((f'{fleet.labels(i, g)},reason="{reason}"', ones if on else zeros))
    yield "krea_gpu_clock_event_active", "gauge", rows
    # the same as one bitmask per GPU (gpu_idle is bit 0x1)
    yield gpu_gauge("krea_gpu_clock_event_reasons", lambda i, g: 0 if (i + g) % 5 else 1)
    rows = []
    for i in nodes:
        for g in range(GPUS):
            for error_type, counter_type in ECC:
                labels = (
                    f'{fleet.labels(i, g)},error_type="{error_type}",counter_type="{counter_type}"'
                )
                rising = i in fleet.ecc_errors and g == 6 and error_type == "uncorrected"
                rows.append((labels, steps if rising else zeros))
    yield "krea_gpu_ecc_errors", "counter", rows

    def replays(i: int, g: int) -> list[float]:
        """replay count of link 5 of GPU 2 on the NVLink-sick nodes: rising 1 per second
        (replays alone are the link layer's routine retries: no rule judges them)."""
        if i in fleet.nvlink_errors and g == 2:
            return [100.0 + s for s in since]
        return zeros

    def crc(i: int, g: int) -> list[float]:
        """CRC flit errors of link 7 of GPU 4 on the NVLink-fault nodes, one more a sample."""
        return steps if i in fleet.nvlink_faults and g == 4 else zeros

    def nvlink_count(i: int, g: int, c: str) -> list[float]:
        return replays(i, g) if c == "replay" else crc(i, g) if c == "crc_flit" else zeros

    rows = []
    for i in nodes:
        for g in range(GPUS):
            for c in NVLINK_COUNTERS:
                rows.append((f'{fleet.labels(i, g)},counter="{c}"', nvlink_count(i, g, c)))
    yield "krea_gpu_nvlink_errors", "counter", rows
    rows = []
    for i in linked:
        for g in range(GPUS):
            for link in range(LINKS):
                down = i in fleet.link_down and g == 1 and link == 0
                rows.append((f'{fleet.labels(i, g)},link="{link}"', zeros if down else ones))
    yield "krea_nvlink_state", "gauge", rows
    rows = []
    for i in linked:
        for g in range(GPUS):
            for link in range(LINKS):
                for c in NVLINK_COUNTERS:
                    on = link == (5 if c == "replay" else 7)
                    v = nvlink_count(i, g, c) if on else zeros
                    rows.append((f'{fleet.labels(i, g)},link="{link}",counter="{c}"', v))
    yield "krea_nvlink_errors", "counter", rows

    def port_series(value: Any) -> list[tuple[str, list[float]]]:
        out = []
        for i in nodes:
            for h in range(HCAS):
                v = value(i, h) if callable(value) else value
                out.append((fleet.port_labels(i, h), v if isinstance(v, list) else [float(v)] * k))
        return out

    yield "krea_ib_state_id", "gauge", port_series(4)
    yield "krea_ib_physical_state_id", "gauge", port_series(5)
    yield "krea_ib_rate_bytes_per_second", "gauge", port_series(HDR_RATE)

    def traffic(i: int, h: int) -> list[float]:
        rate = HDR_RATE * (((i * 11 + h * 3) % 70) / 100)
        return [1e12 + rate * s for s in since]

    yield "krea_ib_port_data_received_bytes", "counter", port_series(traffic)
    yield "krea_ib_port_data_transmitted_bytes", "counter", port_series(traffic)
    yield (
        "krea_ib_port_transmit_wait",
        "counter",
        port_series(lambda i, h: [1e6 + ((i + h) % 9) * 1000.0 * s for s in since]),
    )
    for name in IB_ERRORS:
        if name == "krea_ib_symbol_error":
            yield (
                name,
                "counter",
                port_series(
                    lambda i, h: (
                        [5.0 + s / 2 for s in since] if i in fleet.ib_errors and h == 3 else 5.0
                    )
                ),
            )
        else:
            yield name, "counter", port_series(0)
    rows = [
        (f'{fleet.port_labels(i, h)},counter="port_xmit_wait"', zeros)
        for i in nodes
        for h in range(HCAS)
    ]
    yield "krea_ib_port_counters_saturated", "gauge", rows
    _ = t0


def backfill(om: Path, data: Path) -> None:
    """``promtool tsdb create-blocks-from openmetrics`` of ``om`` into ``data``; ``om`` is
    removed after."""
    subprocess.run(
        [
            shutil.which("promtool") or "promtool",
            *("tsdb", "create-blocks-from", "openmetrics", str(om), str(data)),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    om.unlink()


def write_openmetrics(path: Path, fams: Iterable[Family], times: list[float]) -> tuple[int, int]:
    """Writes the file; returns (series, samples)."""
    stamps = [f"{t:.3f}" for t in times]
    series = samples = 0
    with path.open("w", buffering=1 << 22) as out:
        for name, kind, rows in fams:
            sample = f"{name}_total" if kind == "counter" else name
            out.write(f"# TYPE {name} {kind}\n")
            chunk: list[str] = []
            for labels, values in rows:
                head = f"{sample}{{{labels}}} "
                chunk.extend(
                    f"{head}{v!r} {ts}\n"
                    for v, ts in zip(values, stamps, strict=True)
                    if v is not None
                )
                samples += sum(1 for v in values if v is not None)
                if len(chunk) > 200_000:
                    out.write("".join(chunk))
                    chunk.clear()
            out.write("".join(chunk))
            series += len(rows)
        out.write("# EOF\n")
    return series, samples


# ---------------------------------------------------------------------------------------
# The node summaries the exporters publish with every scrape (krea_node_*)


def node_summaries(fleet: Fleet, times: list[float], t0: float) -> list[Family]:
    """The ``krea_node_*`` series the exporter of each node would have served beside the
    readings ``families`` synthesizes: at every sample time, ``fold()`` of
    krea_ops/exporters/folds.py itself over that node's readings of that time, handed over
    as the exporter hands them (prometheus_client families, counters' samples named
    ``*_total``), one series per node and fold (``model.NODE_FOLDS``), labelled as
    Prometheus stores the exporter's series (node, job, instance). A fold a scrape leaves
    out has no sample at that time."""
    from prometheus_client.core import Metric
    from prometheus_client.samples import Sample

    from krea_ops.exporters.folds import fold
    from krea_ops.model import NODE_FOLDS

    k = len(times)
    out: dict[str, list[tuple[str, Sequence[float | None]]]] = {key: [] for key in NODE_FOLDS}
    for i in range(fleet.nodes):
        served = [
            (name, kind, f"{name}_total" if kind == "counter" else name, rows)
            for name, kind, rows in families(fleet, times, t0, only=[i])
            if name != "krea_exporter_build_info"  # (served after the folds, not folded)
        ]
        parsed = [
            (name, kind, sample, [(dict(_LABEL.findall(lb)), v) for lb, v in rows])
            for name, kind, sample, rows in served
        ]
        values: dict[str, list[float | None]] = {key: [None] * k for key in NODE_FOLDS}
        for j in range(k):
            scrape = []
            for name, kind, sample, rows in parsed:
                family = Metric(name, "", kind)
                family.samples = [Sample(sample, labels, v[j]) for labels, v in rows]
                scrape.append(family)
            for key, value in fold(scrape).items():
                values[key][j] = value
        labels = f'node="{node_name(i)}",job="krea-exporter",instance="{instance(i)}"'
        for key, per_time in values.items():
            if any(v is not None for v in per_time):
                out[key].append((labels, per_time))
    return [
        (name.removesuffix("_total"), "counter", out[key])
        if name.endswith("_total")
        else (name, "gauge", out[key])
        for key, name in NODE_FOLDS.items()
        if out[key]
    ]


# PromQL folds of the synthesized readings that each node series must equal (a check of
# the series above against what the readings say, independent of fold()'s code)
NODE_CHECKS = {
    "krea_node_gpus": "count by (node) (krea_gpu_up)",
    "krea_node_gpu_temperature_max_celsius": "max by (node) (krea_gpu_temperature_celsius)",
    "krea_node_gpu_slowdown_margin_min_celsius": (
        "min by (node) (krea_gpu_slowdown_margin_celsius)"
    ),
    "krea_node_nvlinks_down": ("sum by (node) (krea_gpu_nvlink_links - krea_gpu_nvlink_links_up)"),
    "krea_node_nvlink_fault_errors_total": (
        'sum by (node) (krea_gpu_nvlink_errors_total{counter=~"recovery|crc_flit|crc_data"})'
    ),
    "krea_node_gpu_ecc_uncorrected_errors_total": (
        "sum by (node) (krea_gpu_ecc_errors_total"
        '{error_type="uncorrected",counter_type="volatile"})'
    ),
    "krea_node_ib_errors_total": (
        'sum by (node) ({__name__=~"krea_ib_(symbol_error|link_downed|link_error_recovery'
        "|port_errors_received|port_receive_remote_physical_errors"
        '|local_link_integrity_errors|excessive_buffer_overrun_errors)_total"})'
    ),
    "krea_node_ib_error_counters_total": (
        'sum by (node) ({__name__=~"krea_ib_(symbol_error|link_downed|link_error_recovery'
        "|port_errors_received|port_receive_remote_physical_errors|port_discards_transmitted"
        '|local_link_integrity_errors|excessive_buffer_overrun_errors)_total"})'
    ),
    "krea_node_ib_ports": "count by (node) (krea_ib_state_id)",
    "krea_node_ib_counters_saturated_any": "max by (node) (krea_ib_port_counters_saturated)",
    "krea_node_nvlink_errors_total": "sum by (node) (krea_gpu_nvlink_errors_total)",
    "krea_node_nvlink_error_series": (
        "count by (node) (krea_gpu_nvlink_errors_total"
        '{counter=~"replay|recovery|crc_flit|crc_data"})'
    ),
}


def same_instant(url: str, groups: tuple[str, ...], what: str) -> str:
    """The telemetry of ``groups`` read in this process at one instant with and without
    the node summaries: whether every node's GPUs, links and ports read the same. (The
    commands' outputs above are of two phases minutes apart, where a counter's total
    caps its window's count differently: this compares like with like.)"""
    from krea_ops.settings import load_settings
    from krea_ops.telemetry.prometheus import PrometheusSource

    settings = load_settings(env={})
    at = time.time()
    with PrometheusSource(url, settings, clock=lambda: at) as source:
        pruned = source.collect(None, families=groups)
    with PrometheusSource(url, settings, use_summaries=False, clock=lambda: at) as source:
        whole = source.collect(None, families=groups)
    skipped = sorted(k for k, v in pruned.skipped.items() if v)
    for node in sorted(whole.nodes.keys() | pruned.nodes.keys()):
        a, b = pruned.nodes.get(node), whole.nodes.get(node)
        if a is None or b is None:
            return f"{what} at one instant: DIFFERS: {node} read by one read only"
        for part in ("gpus", "nvlinks", "ib_ports"):
            for x, y in zip(getattr(a, part), getattr(b, part), strict=False):
                if x != y:
                    fields = [k for k in vars(x) if getattr(x, k) != getattr(y, k)]
                    return f"{what} at one instant: DIFFERS on {node} {part}: {fields}"
            if len(getattr(a, part)) != len(getattr(b, part)):
                return f"{what} at one instant: DIFFERS on {node}: {part} counted apart"
    return (
        f"{what} at one instant: the same telemetry for all {len(whole.nodes):,} nodes with"
        f" and without the summaries (skipped by them: {', '.join(skipped) or 'nothing'})"
    )


def check_node_series(prom: Prometheus, nodes: int) -> str:
    """Counts, at "now", the nodes whose series are missing or differ from the PromQL
    fold of their readings (NODE_CHECKS)."""
    bad: list[str] = []
    for series, promql in NODE_CHECKS.items():
        have = prom.query(f"count({series})")
        n = int(have[0]["value"][1]) if have else 0  # type: ignore[index]
        differ = prom.query(f"count({series} != on (node) ({promql}))")
        d = int(differ[0]["value"][1]) if differ else 0  # type: ignore[index]
        if n != nodes or d:
            bad.append(f"{series}: {n:,} series, {d:,} differ from {promql}")
    if bad:
        return "NODE SERIES WRONG: " + "; ".join(bad)
    return (
        f"node series at 'now': {len(NODE_CHECKS)} checked against PromQL folds of the"
        f" readings, equal for all {nodes:,} nodes"
    )


# ---------------------------------------------------------------------------------------
# Loading it into Prometheus' head over remote write


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint((number << 3) | 2) + _varint(len(data)) + data


def _snappy_literal(data: bytes) -> bytes:
    """Snappy block format holding ``data`` as literals only (valid, uncompressed: the
    receiver decodes it like any other; loopback needs no compression)."""
    out = bytearray(_varint(len(data)))
    for i in range(0, len(data), 65536):
        chunk = data[i : i + 65536]
        n = len(chunk) - 1
        if n < 60:
            out.append(n << 2)
        elif n < 256:
            out += bytes((60 << 2, n))
        else:
            out += bytes((61 << 2,)) + struct.pack("<H", n)
        out += chunk
    return bytes(out)


_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')


def remote_write(url: str, fams: Iterable[Family], times: list[float]) -> tuple[int, int]:
    """Sends these families' samples to Prometheus' remote-write receiver (prompb
    WriteRequest, hand-encoded), so they sit in the head block in memory as a scraping
    Prometheus holds its last hours, rather than in backfilled blocks on disk. Returns
    (series, samples)."""
    host, port = url.removeprefix("http://").split(":")
    stamps = [_varint(int(t * 1000)) for t in times]
    sample_cache: dict[float, bytes] = {}

    def samples(values: Sequence[float | None]) -> bytes:
        first = values[0]
        if first is not None and all(v == first for v in values):
            cached = sample_cache.get(first)
            if cached is not None:
                return cached
        body = b"".join(
            _field(2, b"\x09" + struct.pack("<d", v) + b"\x10" + ts)
            for v, ts in zip(values, stamps, strict=True)
            if v is not None
        )
        if first is not None and all(v == first for v in values) and len(sample_cache) < 10_000:
            sample_cache[first] = body
        return body

    work: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
    failed: list[str] = []

    def sender() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=300)
        headers = {
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        }
        while (payload := work.get()) is not None:
            conn.request("POST", "/api/v1/write", _snappy_literal(payload), headers)
            response = conn.getresponse()
            body = response.read()
            if response.status >= 300 and not failed:
                failed.append(f"HTTP {response.status}: {body[:300]!r}")

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    series = count = 0
    batch: list[bytes] = []
    size = 0
    for name, kind, rows in fams:
        sample_name = f"{name}_total" if kind == "counter" else name
        for labels, values in rows:
            pairs = sorted([("__name__", sample_name), *_LABEL.findall(labels)])
            encoded = b"".join(
                _field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in pairs
            )
            item = _field(1, encoded + samples(values))
            batch.append(item)
            size += len(item)
            series += 1
            count += sum(1 for v in values if v is not None)
            if size > 4 << 20:
                work.put(b"".join(batch))
                batch, size = [], 0
                if failed:
                    break
    if batch:
        work.put(b"".join(batch))
    work.put(None)
    thread.join()
    if failed:
        raise RuntimeError(f"remote write refused: {failed[0]}")
    return series, count


# ---------------------------------------------------------------------------------------
# Prometheus


class Prometheus:
    def __init__(self, data: Path, config: Path, port: int) -> None:
        config.write_text("global:\n  scrape_interval: 60s\nscrape_configs: []\n")
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [
                shutil.which("prometheus") or "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=30d",
                "--web.enable-remote-write-receiver",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).status == 200:
                    return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("prometheus did not become ready")

    def query(self, promql: str) -> list[dict[str, object]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=120) as r:
            return json.load(r)["data"]["result"]  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def overlapping_blocks(data: Path) -> int:
    """How many of the TSDB's blocks overlap another's time range."""
    spans = []
    for meta in data.glob("*/meta.json"):
        try:
            m = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue  # (a block being written or deleted)
        spans.append((m["minTime"], m["maxTime"]))
    return sum(1 for a in spans if any(b is not a and a[0] < b[1] and b[0] < a[1] for b in spans))


def publish_summaries(
    prom: Prometheus,
    data: Path,
    tmp: Path,
    load: str,
    fleet: Fleet,
    times: list[float],
    t0: float,
) -> Prometheus:
    """Adds the ``krea_node_*`` series the exporters would have published with every
    scrape (``node_summaries``) to the same Prometheus: backfilled as more blocks into the
    same data directory, then Prometheus restarted on it to load them (and waited for
    while it merges the overlapping blocks, as it does within a minute of starting, so
    that the merge's CPU lands on no timed run); or remote-written into its head
    (``--load head``). Prints what each step took."""
    g0 = time.perf_counter()
    summaries = node_summaries(fleet, times, t0)
    generated = time.perf_counter() - g0
    if load == "head":
        w0 = time.perf_counter()
        series, samples = remote_write(prom.url, summaries, times)
        print(
            f"- node summaries: fold() of each node's readings at each of the {len(times)}"
            f" sample times in {generated:.0f} s; remote-wrote {series:,} series,"
            f" {samples:,} samples in {time.perf_counter() - w0:.0f} s",
            flush=True,
        )
        return prom
    om = tmp / "node-summaries.om"
    w0 = time.perf_counter()
    series, samples = write_openmetrics(om, summaries, times)
    print(
        f"- node summaries: fold() of each node's readings at each of the {len(times)}"
        f" sample times in {generated:.0f} s; {series:,} series, {samples:,} samples"
        f" ({om.stat().st_size / 2**20:.0f} MiB OpenMetrics) written in"
        f" {time.perf_counter() - w0:.0f} s",
        flush=True,
    )
    prom.stop()
    b0 = time.perf_counter()
    backfill(om, data)
    backfilled = time.perf_counter() - b0
    p0 = time.perf_counter()
    prom = Prometheus(data, tmp / "prometheus.yml", free_port())
    ready = time.perf_counter() - p0
    # Prometheus merges overlapping blocks (vertical compaction) in its first compaction,
    # a minute after it starts: a run of the whole backfill's CPU, not to be timed
    overlapping = overlapping_blocks(data)
    deadline = time.monotonic() + 900
    while overlapping_blocks(data) and time.monotonic() < deadline:
        time.sleep(2)
    left = overlapping_blocks(data)
    print(
        f"- promtool backfill of the node summaries into the same data directory:"
        f" {backfilled:.0f} s; Prometheus restarted, ready in {ready:.0f} s;"
        f" {overlapping} overlapping blocks merged by it"
        + (f" (NOT done, {left} left)" if left else "")
        + f" {time.perf_counter() - p0:.0f} s after the restart",
        flush=True,
    )
    return prom


def same_verdicts(plain: bytes, summarized: bytes) -> str:
    """Whether two ``nodes list -o json`` outputs give every node the same verdict and
    reasons (the summaries must change what is read, never what is said)."""
    try:
        a = {r["name"]: (r["verdict"], r["reasons"]) for r in json.loads(plain)}
        b = {r["name"]: (r["verdict"], r["reasons"]) for r in json.loads(summarized)}
    except (ValueError, KeyError, TypeError) as exc:
        return f"verdicts not comparable: {exc}"
    differ = sorted(n for n in a.keys() | b.keys() if a.get(n) != b.get(n))
    flagged = sum(1 for v, _ in b.values() if v != "OK")
    if not differ:
        return f"same verdicts and reasons for all {len(a):,} nodes ({flagged} not OK)"
    first = differ[0]
    return f"VERDICTS DIFFER on {len(differ)} nodes, e.g. {first}: {a.get(first)} vs {b.get(first)}"


def same_gpus(plain: bytes, summarized: bytes) -> str:
    """Whether two ``gpus -o json`` outputs say the same of every GPU (the summaries only
    spare the read the readings they prove empty), sample times and ages aside."""
    skip = {"sampled_at", "age_s"}
    try:
        a = {(r["node"], r["index"]): r for r in json.loads(plain)}
        b = {(r["node"], r["index"]): r for r in json.loads(summarized)}
    except (ValueError, KeyError, TypeError) as exc:
        return f"GPU rows not comparable: {exc}"
    differ = sorted(
        k
        for k in a.keys() | b.keys()
        if k not in a
        or k not in b
        or {f: v for f, v in a[k].items() if f not in skip}
        != {f: v for f, v in b[k].items() if f not in skip}
    )
    if not differ:
        return f"gpus: every reading and verdict the same for all {len(a):,} GPUs"
    first = differ[0]
    ra, rb = a.get(first) or {}, b.get(first) or {}
    fields = sorted(f for f in ra.keys() | rb.keys() if ra.get(f) != rb.get(f))
    return f"gpus: ROWS DIFFER for {len(differ):,} GPUs, e.g. {first}: {fields}"


def same_output(name: str, plain: bytes, summarized: bytes, rising: Iterable[str] = ()) -> str:
    """Whether a command's ``-o json`` says the same with and without the node summaries,
    sample times and ages aside, and the ``rising`` fields (counter totals at "now",
    which the synthesized readings raise between the two phases)."""
    volatile = {"sampled_at", "age_s", "collected_at", "last_sample_at", "telemetry_age_s"}
    volatile |= set(rising)

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in volatile}
        if isinstance(value, list):
            return [strip(v) for v in value]
        if isinstance(value, float):
            # a rate of a counter rising steadily, taken at another instant, may differ
            # in its last bits (28000000000.000004 against ...008)
            return float(f"{value:.12g}")
        return value

    try:
        a, b = strip(json.loads(plain)), strip(json.loads(summarized))
    except ValueError as exc:
        return f"{name}: not comparable: {exc}"
    if a == b:
        rows = len(a) if isinstance(a, list) else 1
        return f"{name}: the same output ({rows:,} rows) with and without the summaries"
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        differ = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        first = differ[0]
        keys = sorted(k for k in a[first] if a[first].get(k) != b[first].get(k))
        shown = {k: (a[first].get(k), b[first].get(k)) for k in keys}
        where = {k: a[first].get(k) for k in ("node", "kind", "port", "name") if k in a[first]}
        return (
            f"{name}: OUTPUT DIFFERS in {len(differ):,} rows, e.g. row {first} {where}:"
            f" {str(shown)[:300]}"
        )
    return f"{name}: OUTPUT DIFFERS"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------
# Timing


def process_cpu(pid: int) -> float:
    """User + system CPU seconds a process and its live descendants have used so far
    (the upstream control plane's kube-apiserver and etcd are children of
    ``sim serve``)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # (gone meanwhile)
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        todo.extend(children.get(p, ()))
    return total


# The official Python client's own floor: a fresh interpreter that imports
# ``kubernetes.client``, loads the kubeconfig and makes one list call, printing the
# answer as it came (no model objects, as krea-ops builds none). FLOOR_LEAN goes through
# ``ApiClient`` as krea-ops does; FLOOR_API through the generated ``CoreV1Api``, as most
# programs using the client are written (its import wraps every method in pydantic's
# ``validate_call``, ~0.6 s).
FLOOR_LEAN = """\
import sys
import kubernetes.client
from kubernetes.config import load_kube_config
config = kubernetes.client.Configuration()
load_kube_config(sys.argv[1], client_configuration=config)
api = kubernetes.client.ApiClient(config)
call = api.param_serialize("GET", "/api/v1/nodes", auth_settings=["BearerToken"])
resp = api.call_api(*call[:2], header_params=call[2], body=call[3], post_params=call[4])
sys.stdout.buffer.write(resp.read())
"""
FLOOR_API = """\
import sys
import kubernetes.client
from kubernetes.config import load_kube_config
load_kube_config(sys.argv[1])
resp = kubernetes.client.CoreV1Api().list_node(_preload_content=False)
sys.stdout.buffer.write(resp.data)
"""


@dataclass
class Timing:
    walls: list[float]
    own_cpu: list[float]  # the command's own user + system CPU
    servers_cpu: list[float]  # Prometheus' + the API server's CPU during the command
    nbytes: int
    rows: int
    err: str
    out: bytes = b""  # the last run's output
    load: list[float] = field(default_factory=list)  # 1-min load average at each start


def time_command(argv: list[str], env: dict[str, str], repeat: int, servers: list[int]) -> Timing:
    """``repeat`` runs: wall, own CPU, the servers' CPU meanwhile, output bytes, rows, and
    the first stderr line."""
    t = Timing([], [], [], 0, 0, "")
    for _ in range(repeat):
        t.load.append(os.getloadavg()[0])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        served = sum(process_cpu(pid) for pid in servers)
        t0 = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, cwd=ROOT)
        t.walls.append(time.perf_counter() - t0)
        t.servers_cpu.append(sum(process_cpu(pid) for pid in servers) - served)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        t.own_cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        t.nbytes = len(proc.stdout)
        t.out = proc.stdout
        if proc.returncode != 0 or proc.stderr.strip():
            t.err = f"exit {proc.returncode}: " + proc.stderr.decode(errors="replace")[:300]
        try:
            data = json.loads(proc.stdout)
            t.rows = len(data["items"]) if isinstance(data, dict) else len(data)
        except (ValueError, KeyError, TypeError):
            t.rows = -1
    return t


KUEUE_SETUP = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h200}
spec: {nodeLabels: {krea.ai/pool: h200}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: training}
spec:
  cohortName: gpu
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h200
      resources: [{name: nvidia.com/gpu, nominalQuota: %(gpus)d}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: inference}
spec:
  cohortName: gpu
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h200
      resources: [{name: nvidia.com/gpu, nominalQuota: 0}]
---
apiVersion: v1
kind: Namespace
metadata: {name: training}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: training, namespace: training}
spec: {clusterQueue: training}
"""


def kueue_setup(kubectl: str, kc: list[str], tmp: Path, env: dict[str, str], nodes: int) -> None:
    """Kueue's objects for ``queue list`` / ``queue workloads`` to read (a flavor, two
    ClusterQueues in a cohort, a LocalQueue), applied with kubectl as an operator would.
    ``burst status`` reads the virtual nodes there are (none here: it lists nothing)."""
    manifest = tmp / "kueue.yaml"
    manifest.write_text(KUEUE_SETUP % {"gpus": GPUS * nodes})
    subprocess.run(
        [kubectl, *kc, "apply", "-f", str(manifest)],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--interval", type=float, default=60.0, help="sample spacing, s")
    parser.add_argument(
        "--horizon", type=float, default=600.0, help="samples reach this far past the start, s"
    )
    parser.add_argument("--sick", type=int, default=0, help="sick nodes per kind (0: nodes/256)")
    parser.add_argument(
        "--per-link",
        choices=("sick", "all"),
        default="sick",
        help="which nodes get the per-link NVLink series (all: 720 more series per node)",
    )
    parser.add_argument(
        "--load",
        choices=("backfill", "head"),
        default="backfill",
        help="backfill: promtool blocks on disk; head: remote write into Prometheus' "
        "in-memory head, as a scraping Prometheus holds its last hours",
    )
    parser.add_argument(
        "--summaries",
        choices=("publish", "none"),
        default="publish",
        help="publish: after the first runs (exporters from before the node summaries), add "
        "the krea_node_* series the exporters publish with every scrape, folded from the "
        "same readings (backfilled into the same data directory, Prometheus restarted on "
        "it), and time kubectl, `gpus` and `nodes list` again, comparing their output",
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--hold", type=float, default=0, help="keep serving this long, s")
    parser.add_argument("--kubectl", default=shutil.which("kubectl") or "kubectl")
    parser.add_argument(
        "--control-plane",
        choices=("embedded", "upstream"),
        default="embedded",
        help="the API server to run against: ours, or the upstream kube-apiserver with its "
        "controller-manager, scheduler, Kueue and JobSet (krea-ops sim upstream build)",
    )
    args = parser.parse_args(argv)
    # a plain kill must still stop the API server and Prometheus (the finally below)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cli = str(Path(sys.executable).with_name("krea-ops"))
    command = "python benchmarks/bench_read.py " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    print(f"# krea-ops read benchmark (issue 5)\n\n    {command.strip()}\n", flush=True)
    compile_project()
    sick = args.sick or max(2, args.nodes // 256)
    fleet = Fleet(args.nodes, sick, args.per_link)
    window = 300.0  # telemetry_window_s default: rates need two samples inside it

    with tempfile.TemporaryDirectory(prefix="bench-read-") as tmp_name:
        tmp = Path(tmp_name)
        t_start = time.time()
        server = ServerProcess(
            cli,
            tmp / "state",
            tmp / "kubeconfig",
            tmp / "ca.pem",
            args.control_plane,
            nodes=args.nodes,
        )
        prom: Prometheus | None = None
        beats: NodeHeartbeats | None = None
        try:
            made = run_writes(
                f"create nodes ({args.concurrency} clients)",
                server,
                list(range(args.nodes)),
                create_request("node", 0),
                args.concurrency,
            )
            print(f"- API server {server.url}: {args.nodes} nodes created in {made.wall_s:.1f} s")
            if args.control_plane == "upstream":
                # (the controller-manager would take kubelet-less nodes NotReady mid-run)
                beats = NodeHeartbeats(server, [node_name(i) for i in range(args.nodes)])
                print(
                    f"- node Leases created, renewed every {beats.renew_s:g} s from here on "
                    "(as the simulated kubelets do)",
                    flush=True,
                )

            t0 = time.time()
            first = t0 - window - args.interval
            count = int((t0 + args.horizon - first) // args.interval) + 1
            times = [first + i * args.interval for i in range(count)]
            span = (
                f"timestamps every {args.interval:g} s from {window + args.interval:g} s before"
                f" the start to {args.horizon:g} s after it (in the future), so instant"
                " queries at 'now' see samples under a minute old for the whole run"
            )
            data = tmp / "data"
            p0 = time.perf_counter()
            if args.load == "head":
                prom = Prometheus(data, tmp / "prometheus.yml", free_port())
                series, samples = remote_write(prom.url, families(fleet, times, t0), times)
                print(
                    f"- remote-wrote {series:,} series x {count} samples = {samples:,} samples"
                    f" into the head in {time.perf_counter() - p0:.0f} s; {span}",
                    flush=True,
                )
            else:
                om = tmp / "fleet.om"
                series, samples = write_openmetrics(om, families(fleet, times, t0), times)
                print(
                    f"- synthesized {series:,} series x {count} samples = {samples:,} samples"
                    f" ({om.stat().st_size / 2**30:.2f} GiB OpenMetrics) in"
                    f" {time.perf_counter() - p0:.0f} s; {span}",
                    flush=True,
                )
                b0 = time.perf_counter()
                backfill(om, data)
                print(f"- promtool backfill: {time.perf_counter() - b0:.0f} s", flush=True)
                p0 = time.perf_counter()
                prom = Prometheus(data, tmp / "prometheus.yml", free_port())
            up = prom.query("count(krea_gpu_up)")
            folded = prom.query("count(krea_node_gpus)")
            print(
                f"- prometheus {prom.url} ready in {time.perf_counter() - p0:.0f} s;"
                f" count(krea_gpu_up) = {up[0]['value'][1] if up else 0}"  # type: ignore[index]
                f"; count(krea_node_gpus) = {folded[0]['value'][1] if folded else 0}"  # type: ignore[index]
                " (exporters from before the node summaries: the reads read every GPU)",
                flush=True,
            )
            env = {
                **os.environ,
                "HOME": str(tmp),
                "KREA_OPS_CONFIG": str(tmp / "no-config.yaml"),
                "NO_COLOR": "1",
            }
            kc = ["--kubeconfig", str(server.target.kubeconfig)]
            ko = [cli, *kc, "--prometheus", prom.url]
            kueue_setup(args.kubectl, kc, tmp, env, args.nodes)
            one = node_name(0)
            kubeconfig = str(server.target.kubeconfig)
            runs = [
                ("kubectl get nodes -o json", [args.kubectl, *kc, "get", "nodes", "-o", "json"]),
                (
                    "python: kubernetes.client ApiClient, one list of nodes (the floor)",
                    [sys.executable, "-c", FLOOR_LEAN, kubeconfig],
                ),
                (
                    "python: kubernetes.client CoreV1Api().list_node()",
                    [sys.executable, "-c", FLOOR_API, kubeconfig],
                ),
                ("krea-ops gpus -o json", [*ko, "gpus", "-o", "json"]),
                ("krea-ops nodes list -o json", [*ko, "nodes", "list", "-o", "json"]),
                ("krea-ops fabric -o json", [*ko, "fabric", "-o", "json"]),
                (f"krea-ops nodes show {one} -o json", [*ko, "nodes", "show", one, "-o", "json"]),
                ("krea-ops queue list -o json", [*ko, "queue", "list", "-o", "json"]),
                ("krea-ops queue workloads -o json", [*ko, "queue", "workloads", "-o", "json"]),
                ("krea-ops burst status -o json", [*ko, "burst", "status", "-o", "json"]),
                ("krea-ops version", [cli, "version"]),
            ]
            # (name, timing, the kubectl run of the same phase it is compared with)
            results: list[tuple[str, Timing, Timing]] = []

            def timed(runs: list[tuple[str, list[str]]]) -> list[Timing]:
                servers = [prom.proc.pid, server.pid]  # type: ignore[union-attr]
                out: list[Timing] = []
                for name, cmd in runs:
                    timing = time_command(cmd, env, args.repeat, servers)
                    out.append(timing)
                    results.append((name, timing, out[0]))
                    median = statistics.median(timing.walls)
                    print(
                        f"  {name}: median {median:.2f} s (load average"
                        f" {statistics.median(timing.load):.1f}) {timing.err.strip()}",
                        flush=True,
                    )
                return out

            plain = timed(runs)
            if args.summaries == "publish":
                prom = publish_summaries(prom, data, tmp, args.load, fleet, times, t0)
                print(f"  {check_node_series(prom, args.nodes)}", flush=True)
                ko = [cli, *kc, "--prometheus", prom.url]
                listing = [*ko, "nodes", "list", "-o", "json"]
                showing = [*ko, "gpus", "-o", "json"]
                # every command again, side by side with kubectl and the floor, on the
                # restarted Prometheus (today's exporters: the node summaries published)
                again = [
                    (
                        f"{name} (node summaries)",
                        [*ko, *argv[len(ko) :]] if argv[: len(ko) - 1] == ko[:-1] else argv,
                    )
                    for name, argv in runs
                ]
                second = timed(again)
                by_name = {name: t for (name, _), t in zip(runs, second, strict=True)}
                before = {name: t for (name, _), t in zip(runs, plain, strict=True)}
                listed = by_name["krea-ops nodes list -o json"]
                gpus = by_name["krea-ops gpus -o json"]
                print(f"  {same_verdicts(before['krea-ops nodes list -o json'].out, listed.out)}")
                print(f"  {same_gpus(before['krea-ops gpus -o json'].out, gpus.out)}")
                from krea_ops.telemetry.dialects import FABRIC

                print(f"  {same_instant(prom.url, ('gpu',), 'gpus')}", flush=True)
                print(f"  {same_instant(prom.url, FABRIC, 'fabric')}", flush=True)
                for name, rising in (
                    ("krea-ops fabric -o json", ("errors_total", "counters")),
                    (f"krea-ops nodes show {one} -o json", ()),
                    ("krea-ops queue list -o json", ()),
                ):
                    compared = same_output(name, before[name].out, by_name[name].out, rising)
                    print(f"  {compared}", flush=True)
                for what, argv in (
                    ("nodes list", listing[:-2]),
                    ("gpus", showing[:-2]),
                    ("fabric", [*ko, "fabric"]),
                ):
                    table_run = subprocess.run(argv, env=env, capture_output=True, cwd=ROOT)
                    said = [
                        line
                        for line in table_run.stdout.decode(errors="replace").splitlines()
                        if line.startswith("node summaries:")
                    ]
                    line = said[0] if said else "no node-summary line"
                    print(f"  the {what} table says: {line}", flush=True)
            if args.hold:
                print(
                    f"holding {args.hold:g} s: KUBECONFIG={server.target.kubeconfig} "
                    f"--prometheus {prom.url}",
                    flush=True,
                )
                time.sleep(args.hold)
            last = times[-1]
            if time.time() > last:
                print(f"WARNING: the run outlasted the samples by {time.time() - last:.0f} s")
            if beats is not None:
                print(
                    f"- node Leases: {beats.renewals} renewals, {len(beats.errors)} failed"
                    + (f" (e.g. {beats.errors[0]})" if beats.errors else "")
                )
        finally:
            if beats is not None:
                beats.stop()
            if prom is not None:
                prom.stop()
            server.stop()
        print()
        print(
            table(
                [
                    "command",
                    "median s",
                    "min s",
                    "max s",
                    "x kubectl",
                    "own CPU s",
                    "servers' CPU s",
                    "output bytes",
                    "rows",
                    "load",
                ],
                [
                    [
                        f"`{name}`",
                        f"{statistics.median(t.walls):.2f}",
                        f"{min(t.walls):.2f}",
                        f"{max(t.walls):.2f}",
                        f"{statistics.median(t.walls) / statistics.median(k.walls):.2f}",
                        f"{statistics.median(t.own_cpu):.2f}",
                        f"{statistics.median(t.servers_cpu):.2f}",
                        f"{t.nbytes:,}",
                        f"{t.rows:,}",
                        f"{statistics.median(t.load):.1f}",
                    ]
                    for name, t, k in results
                ],
            )
        )
        print(
            "\nown CPU: the command's user + system CPU (median); servers' CPU: what"
            " Prometheus and the API server used meanwhile (median; kubectl uses only the"
            " API server; on the upstream control plane its kube-apiserver and etcd);"
            " load: the machine's 1-minute load average as each run started (median)."
        )
        print(
            f"\n{args.nodes} nodes x {GPUS} GPUs x {HCAS} HCAs, {args.repeat} runs each, "
            f"each a fresh process; sick nodes per kind: {sick}; per-link NVLink series for "
            f"{len(fleet.per_link)} nodes ({args.per_link}). Total {time.time() - t_start:.0f} s."
        )
        print(
            "\nSynthesized (our exporter's names and labels; everything krea-ops queries): "
            "krea_exporter_build_info; per GPU krea_gpu_{up, temperature_celsius, "
            "memory_temperature_celsius, slowdown_margin_celsius, power_watts, "
            "power_limit_watts, sm_clock_hertz, utilization_ratio, tensor_active_ratio, "
            "sm_active_ratio, memory_used_bytes, memory_total_bytes, xid_monitored, "
            "row_remap_pending, row_remap_failed, nvlink_links, nvlink_links_up}, "
            "krea_gpu_clock_event_active{reason} x9, krea_gpu_clock_event_reasons, "
            "krea_gpu_ecc_errors_total x4, "
            "krea_gpu_nvlink_errors_total{counter} x4; per link krea_nvlink_state, "
            "krea_nvlink_errors_total{counter} x4; per HCA port krea_ib_{state_id, "
            "physical_state_id, rate_bytes_per_second, port_data_received_bytes_total, "
            "port_data_transmitted_bytes_total, port_transmit_wait_total}, the 8 IB error "
            "counters, krea_ib_port_counters_saturated; and, in the second phase, the "
            "exporter's per-node folds krea_node_* (model.NODE_FOLDS) of those readings. "
            "Not synthesized: series krea-ops "
            "never queries (GPM sub-ratios, energy, clocks other than SM, thresholds, IB "
            "packet counters, the exporter's own metrics): the real exporter serves ~1,700 "
            "series per node, these are fewer."
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
