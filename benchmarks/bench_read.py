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
   (NVLink errors rising, a link down, a hot GPU, IB symbol errors rising);
3. backfills it with ``promtool tsdb create-blocks-from openmetrics`` and starts
   ``prometheus`` on that data directory;
4. times ``--repeat`` runs of each command as a subprocess (start-up included, like
   kubectl's) and prints a markdown table: median / min / max seconds, output bytes, rows.

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_apiserver import (  # noqa: E402
    ServerProcess,
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
        sick_links = self.nvlink_errors | self.link_down
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
    fleet: Fleet, times: list[float], t0: float
) -> Iterator[tuple[str, str, list[tuple[str, list[float]]]]]:
    """(family name, type, [(labels, value per time)]) of the whole fleet, family by family
    (OpenMetrics keeps a family's samples together)."""
    n = fleet.nodes
    k = len(times)
    since = [t - times[0] for t in times]  # seconds since the first sample
    ones, zeros = [1.0] * k, [0.0] * k

    def gpu_gauge(name: str, value: Any) -> tuple[str, str, list[tuple[str, list[float]]]]:
        rows = []
        for i in range(n):
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
            for i in range(n)
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
    for i in range(n):
        for g in range(GPUS):
            for reason in CLOCK_REASONS:
                on = reason == "gpu_idle" and (i + g) % 5 == 0
                rows.append((f'{fleet.labels(i, g)},reason="{reason}"', ones if on else zeros))
    yield "krea_gpu_clock_event_active", "gauge", rows
    # the same as one bitmask per GPU (gpu_idle is bit 0x1)
    yield gpu_gauge("krea_gpu_clock_event_reasons", lambda i, g: 0 if (i + g) % 5 else 1)
    rows = []
    for i in range(n):
        for g in range(GPUS):
            for error_type, counter_type in ECC:
                labels = (
                    f'{fleet.labels(i, g)},error_type="{error_type}",counter_type="{counter_type}"'
                )
                rows.append((labels, zeros))
    yield "krea_gpu_ecc_errors", "counter", rows

    def replays(i: int, g: int) -> list[float]:
        """replay count of link 5 of GPU 2 on the NVLink-sick nodes: rising 1 per second."""
        if i in fleet.nvlink_errors and g == 2:
            return [100.0 + s for s in since]
        return zeros

    rows = []
    for i in range(n):
        for g in range(GPUS):
            for c in NVLINK_COUNTERS:
                rows.append(
                    (
                        f'{fleet.labels(i, g)},counter="{c}"',
                        replays(i, g) if c == "replay" else zeros,
                    )
                )
    yield "krea_gpu_nvlink_errors", "counter", rows
    rows = []
    for i in sorted(fleet.per_link):
        for g in range(GPUS):
            for link in range(LINKS):
                down = i in fleet.link_down and g == 1 and link == 0
                rows.append((f'{fleet.labels(i, g)},link="{link}"', zeros if down else ones))
    yield "krea_nvlink_state", "gauge", rows
    rows = []
    for i in sorted(fleet.per_link):
        for g in range(GPUS):
            for link in range(LINKS):
                for c in NVLINK_COUNTERS:
                    v = replays(i, g) if c == "replay" and link == 5 else zeros
                    rows.append((f'{fleet.labels(i, g)},link="{link}",counter="{c}"', v))
    yield "krea_nvlink_errors", "counter", rows

    def port_series(value: Any) -> list[tuple[str, list[float]]]:
        out = []
        for i in range(n):
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
        for i in range(n)
        for h in range(HCAS)
    ]
    yield "krea_ib_port_counters_saturated", "gauge", rows
    _ = t0


def write_openmetrics(path: Path, fleet: Fleet, times: list[float], t0: float) -> tuple[int, int]:
    """Writes the file; returns (series, samples)."""
    stamps = [f"{t:.3f}" for t in times]
    series = samples = 0
    with path.open("w", buffering=1 << 22) as out:
        for name, kind, rows in families(fleet, times, t0):
            sample = f"{name}_total" if kind == "counter" else name
            out.write(f"# TYPE {name} {kind}\n")
            chunk: list[str] = []
            for labels, values in rows:
                head = f"{sample}{{{labels}}} "
                chunk.extend(f"{head}{v!r} {ts}\n" for v, ts in zip(values, stamps, strict=True))
                if len(chunk) > 200_000:
                    out.write("".join(chunk))
                    chunk.clear()
            out.write("".join(chunk))
            series += len(rows)
            samples += len(rows) * len(times)
        out.write("# EOF\n")
    return series, samples


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


def remote_write(url: str, fleet: Fleet, times: list[float], t0: float) -> tuple[int, int]:
    """Sends the whole fleet's samples to Prometheus' remote-write receiver (prompb
    WriteRequest, hand-encoded), so they sit in the head block in memory as a scraping
    Prometheus holds its last hours, rather than in backfilled blocks on disk. Returns
    (series, samples)."""
    host, port = url.removeprefix("http://").split(":")
    stamps = [_varint(int(t * 1000)) for t in times]
    sample_cache: dict[float, bytes] = {}

    def samples(values: list[float]) -> bytes:
        first = values[0]
        if all(v == first for v in values):
            cached = sample_cache.get(first)
            if cached is not None:
                return cached
        body = b"".join(
            _field(2, b"\x09" + struct.pack("<d", v) + b"\x10" + ts)
            for v, ts in zip(values, stamps, strict=True)
        )
        if all(v == first for v in values) and len(sample_cache) < 10_000:
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
    for name, kind, rows in families(fleet, times, t0):
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
            count += len(values)
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
    def __init__(self, data: Path, config: Path, port: int, rules: Path | None = None) -> None:
        text = "global:\n  scrape_interval: 60s\nscrape_configs: []\n"
        if rules is not None:
            # the backfilled blocks reach past "now" (--horizon): without an out-of-order
            # window the rules' results at "now" would be refused as out of bounds
            text += f"rule_files: [{json.dumps(str(rules))}]\n"
            text += "storage:\n  tsdb:\n    out_of_order_time_window: 1d\n"
        config.write_text(text)
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


def load_summaries(prom: Prometheus, data: Path, tmp: Path, window: float) -> Prometheus:
    """Restarts Prometheus on the same data with the node-summary rules loaded, as a
    deployment runs them (evaluated live, every 30 s, over the backfilled samples), and
    waits for their first evaluation. Prints what one evaluation costs."""
    from krea_ops.telemetry.summary import DEFAULT_INTERVAL_S, rule_text

    rules = tmp / "node-summary.yaml"
    rules.write_text(rule_text(window))
    t0 = time.perf_counter()
    prom.stop()
    prom = Prometheus(data, tmp / "prometheus.yml", free_port(), rules=rules)
    deadline = time.monotonic() + 180  # (the first evaluation comes within an interval)
    group: dict[str, object] = {}
    while time.monotonic() < deadline:
        url = f"{prom.url}/api/v1/rules?type=record"
        with urllib.request.urlopen(url, timeout=30) as r:
            groups = json.load(r)["data"]["groups"]
        if groups and all(rule["health"] == "ok" for rule in groups[0]["rules"]):
            group = groups[0]
            break
        time.sleep(0.5)
    else:
        prom.stop()  # (the caller holds the old one: this one would outlive the script)
        states = {
            rule["name"]: (rule["health"], rule.get("lastError"))
            for g in groups
            for rule in g["rules"]
        }
        raise RuntimeError(f"the node-summary rules did not evaluate: {states}")
    print(
        f"- Prometheus restarted with the node-summary rules; first evaluation done"
        f" {time.perf_counter() - t0:.0f} s later; one evaluation takes"
        f" {float(group['evaluationTime']):.1f} s (Prometheus' evaluationTime), every"  # type: ignore[arg-type]
        f" {DEFAULT_INTERVAL_S:g} s",
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


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------
# Timing


def process_cpu(pid: int) -> float:
    """User + system CPU seconds a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Timing:
    walls: list[float]
    own_cpu: list[float]  # the command's own user + system CPU
    servers_cpu: list[float]  # Prometheus' + the API server's CPU during the command
    nbytes: int
    rows: int
    err: str
    out: bytes = b""  # the last run's output


def time_command(argv: list[str], env: dict[str, str], repeat: int, servers: list[int]) -> Timing:
    """``repeat`` runs: wall, own CPU, the servers' CPU meanwhile, output bytes, rows, and
    the first stderr line."""
    t = Timing([], [], [], 0, 0, "")
    for _ in range(repeat):
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
        choices=("record", "none"),
        default="record",
        help="record: after the first runs, restart Prometheus with the node-summary rules "
        "(deploy/prometheus/krea-ops-node-summary.yaml) loaded and time `nodes list` "
        "again, as a deployment with the rules reads it",
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
    sick = args.sick or max(2, args.nodes // 256)
    fleet = Fleet(args.nodes, sick, args.per_link)
    window = 300.0  # telemetry_window_s default: rates need two samples inside it

    with tempfile.TemporaryDirectory(prefix="bench-read-") as tmp_name:
        tmp = Path(tmp_name)
        t_start = time.time()
        server = ServerProcess(
            cli, tmp / "state", tmp / "kubeconfig", tmp / "ca.pem", args.control_plane
        )
        prom: Prometheus | None = None
        try:
            made = run_writes(
                f"create nodes ({args.concurrency} clients)",
                server,
                list(range(args.nodes)),
                create_request("node", 0),
                args.concurrency,
            )
            print(f"- API server {server.url}: {args.nodes} nodes created in {made.wall_s:.1f} s")

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
                series, samples = remote_write(prom.url, fleet, times, t0)
                print(
                    f"- remote-wrote {series:,} series x {count} samples = {samples:,} samples"
                    f" into the head in {time.perf_counter() - p0:.0f} s; {span}",
                    flush=True,
                )
            else:
                om = tmp / "fleet.om"
                series, samples = write_openmetrics(om, fleet, times, t0)
                print(
                    f"- synthesized {series:,} series x {count} samples = {samples:,} samples"
                    f" ({om.stat().st_size / 2**30:.2f} GiB OpenMetrics) in"
                    f" {time.perf_counter() - p0:.0f} s; {span}",
                    flush=True,
                )
                b0 = time.perf_counter()
                subprocess.run(
                    [
                        shutil.which("promtool") or "promtool",
                        *("tsdb", "create-blocks-from", "openmetrics", str(om), str(data)),
                    ],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
                om.unlink()
                print(f"- promtool backfill: {time.perf_counter() - b0:.0f} s", flush=True)
                p0 = time.perf_counter()
                prom = Prometheus(data, tmp / "prometheus.yml", free_port())
            up = prom.query("count(krea_gpu_up)")
            print(
                f"- prometheus {prom.url} ready in {time.perf_counter() - p0:.0f} s;"
                f" count(krea_gpu_up) = {up[0]['value'][1] if up else 0}",  # type: ignore[index]
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
            runs = [
                ("kubectl get nodes -o json", [args.kubectl, *kc, "get", "nodes", "-o", "json"]),
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
                    print(f"  {name}: median {median:.2f} s {timing.err.strip()}", flush=True)
                return out

            plain = timed(runs)
            if args.summaries == "record":
                prom = load_summaries(prom, data, tmp, window)
                ko = [cli, *kc, "--prometheus", prom.url]
                again = [*ko, "nodes", "list", "-o", "json"]
                # kubectl again, side by side: Prometheus now evaluates the rules every
                # 30 s, whoever's run that lands on pays for it
                _, gpus, listed = timed(
                    [
                        ("kubectl get nodes -o json (rules loaded)", runs[0][1]),
                        ("krea-ops gpus -o json (node summaries)", [*ko, "gpus", "-o", "json"]),
                        ("krea-ops nodes list -o json (node summaries)", again),
                    ]
                )
                print(f"  {same_verdicts(plain[2].out, listed.out)}", flush=True)
                print(f"  {same_gpus(plain[1].out, gpus.out)}", flush=True)
                table_run = subprocess.run(again[:-2], env=env, capture_output=True, cwd=ROOT)
                said = [
                    line
                    for line in table_run.stdout.decode(errors="replace").splitlines()
                    if line.startswith("node summaries:")
                ]
                print(f"  the table says: {said[0] if said else 'no node-summary line'}")
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
        finally:
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
                    ]
                    for name, t, k in results
                ],
            )
        )
        print(
            "\nown CPU: the command's user + system CPU (median); servers' CPU: what"
            " Prometheus and the API server used meanwhile (median; kubectl uses only the"
            " API server)."
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
            "counters, krea_ib_port_counters_saturated. Not synthesized: series krea-ops "
            "never queries (GPM sub-ratios, energy, clocks other than SM, thresholds, IB "
            "packet counters, the exporter's own metrics): the real exporter serves ~1,700 "
            "series per node, these are fewer."
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
