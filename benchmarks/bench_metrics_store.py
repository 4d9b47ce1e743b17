#!/usr/bin/env python3
"""Issue 28: the fleet read on Prometheus and on VictoriaMetrics, side by side.

1. synthesizes the telemetry of ``--nodes`` H200 nodes (8 GPUs, 8 HCAs) with
   benchmarks/bench_read.py's ``Fleet``/``families`` (the families krea-ops reads, a few
   sick nodes) plus the ``krea_node_*`` summaries today's exporter publishes
   (``node_summaries``), samples every ``--interval`` s from a window before the start to
   ``--horizon`` s after it, and encodes it once as remote-write requests, so every store
   is sent the same bytes;
2. for each store in turn, alone on the machine: starts it on a temp dir on loopback,
   remote-writes everything into it (Prometheus: ``--web.enable-remote-write-receiver``,
   its in-memory head, as a scraping Prometheus holds its recent hours; VictoriaMetrics:
   ``/api/v1/write``; its cluster version: vminsert's ``/insert/0/prometheus/...``), waits
   until every GPU is searchable, and reads its RSS;
3. times ``--repeat`` fleet reads through the product's ``PrometheusSource`` (in this
   process, so the figure is the store's answer and the product's parsing, not the API
   server's or Python's start-up): the families ``krea-ops gpus`` asks for (``gpu``),
   ``nodes list`` (``verdicts``, read from the node summaries) and ``fabric`` (all), with
   the store's CPU seconds over the reads, and its RSS after them;
4. checks that each store gave the same nodes, the same GPUs and temperatures and the same
   summaries-proven-clean sets as the first store, and prints a markdown table.

Stores: ``prometheus`` and ``victoria-metrics`` from PATH (Debian's), ``--vm-binary
LABEL=PATH`` for another single-node VictoriaMetrics (one built from its Go module), and
``--vm-cluster DIR`` for a directory holding ``vmstorage``, ``vminsert`` and ``vmselect``
(one vmstorage, one of each on loopback; read through ``/select/0/prometheus``).

    .venv/bin/python benchmarks/bench_metrics_store.py --nodes 256 --repeat 2   # quick
    .venv/bin/python benchmarks/bench_metrics_store.py --nodes 4096
"""

from __future__ import annotations

import argparse
import http.client
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_read import (  # noqa: E402
    _LABEL as LABEL_RE,
)
from bench_read import (  # noqa: E402
    GPUS,
    Fleet,
    families,
    free_port,
    node_summaries,
)
from bench_read import _field as field_bytes  # noqa: E402
from bench_read import _snappy_literal as snappy_literal  # noqa: E402
from bench_read import _varint as varint  # noqa: E402

from krea_ops.settings import Settings  # noqa: E402
from krea_ops.telemetry import PrometheusSource  # noqa: E402

READS = (
    ("gpus", frozenset({"gpu"})),
    ("nodes list", frozenset({"verdicts"})),
    ("fabric", None),
)


# ---------------------------------------------------------------------------------------
# The data, encoded once


def encode(fams: Iterable[Any], times: list[float], into: list[bytes]) -> tuple[int, int]:
    """Appends snappy-framed prompb WriteRequests of about 4 MiB each; (series, samples)."""
    stamps = [varint(int(t * 1000)) for t in times]
    series = count = 0
    batch: list[bytes] = []
    size = 0
    for name, kind, rows in fams:
        sample_name = f"{name}_total" if kind == "counter" else name
        for labels, values in rows:
            pairs = sorted([("__name__", sample_name), *LABEL_RE.findall(labels)])
            encoded = b"".join(
                field_bytes(1, field_bytes(1, k.encode()) + field_bytes(2, v.encode()))
                for k, v in pairs
            )
            body = b"".join(
                field_bytes(2, b"\x09" + float_bytes(v) + b"\x10" + ts)
                for v, ts in zip(values, stamps, strict=True)
                if v is not None
            )
            item = field_bytes(1, encoded + body)
            batch.append(item)
            size += len(item)
            series += 1
            count += sum(1 for v in values if v is not None)
            if size > 4 << 20:
                into.append(snappy_literal(b"".join(batch)))
                batch, size = [], 0
    if batch:
        into.append(snappy_literal(b"".join(batch)))
    return series, count


def float_bytes(v: float) -> bytes:
    import struct

    return struct.pack("<d", v)


def send(host_port: str, path: str, payloads: Sequence[bytes]) -> None:
    host, port = host_port.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    headers = {
        "Content-Encoding": "snappy",
        "Content-Type": "application/x-protobuf",
        "X-Prometheus-Remote-Write-Version": "0.1.0",
    }
    for payload in payloads:
        conn.request("POST", path, payload, headers)
        response = conn.getresponse()
        body = response.read()
        if response.status >= 300:
            raise RuntimeError(
                f"remote write to {host_port}{path}: {response.status} {body[:300]!r}"
            )
    conn.close()


# ---------------------------------------------------------------------------------------
# The stores


def rss_kib(pid: int, key: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


WAL_NOTE = " (its WAL and head chunks: nothing compacted into a block yet)"


def du(path: Path) -> int:
    """Bytes of the files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def get(url: str, timeout: float = 5) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            r.read()
            return int(r.status)
    except OSError:
        return 0


def wait_for(
    url: str, procs: list[subprocess.Popen[bytes]], what: str, timeout: float = 300
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what} exited with {p.returncode}")
        if get(url) == 200:
            return
        time.sleep(0.25)
    raise RuntimeError(f"{what} not ready at {url} in {timeout:.0f} s")


@dataclass
class Store:
    name: str
    version: str
    write: tuple[str, str]  # host:port, path
    read_url: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    flush_urls: tuple[str, ...] = ()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def rss_mib(self, key: str = "VmRSS") -> float:
        return sum(rss_kib(pid, key) for pid in self.pids) / 1024

    def rss_by_process(self) -> str:
        """Each process's RSS, for a store of several (the cluster version)."""
        return ", ".join(
            f"{Path(cast(list[str], p.args)[0]).name} {rss_kib(p.pid, 'VmRSS') / 1024:.0f} MiB"
            for p in self.procs
        )

    def cpu(self) -> float:
        return sum(cpu_s(pid) for pid in self.pids)

    def flush(self) -> None:
        for url in self.flush_urls:
            get(url, timeout=120)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def version_of(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except OSError:
        return "?"
    text = (out.stdout + out.stderr).strip().splitlines()
    if text:
        return text[0][:80]
    # Debian's victoria-metrics prints no version: its package's
    dpkg = subprocess.run(
        ["dpkg-query", "-S", os.path.realpath(argv[0])], capture_output=True, text=True
    )
    package = dpkg.stdout.split(":")[0] if dpkg.returncode == 0 else ""
    if package:
        got = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True
        )
        return f"Debian {package} {got.stdout.strip()}"
    return "?"


def start_prometheus(tmp: Path, log: Any) -> Store:
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 60s\nscrape_configs: []\n")
    binary = shutil.which("prometheus") or "prometheus"
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=30d",
            "--web.enable-remote-write-receiver",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    store = Store(
        "Prometheus",
        version_of([binary, "--version"]),
        (f"127.0.0.1:{port}", "/api/v1/write"),
        url,
        [proc],
    )
    wait_for(f"{url}/-/ready", store.procs, "prometheus")
    return store


VM_FLAGS = (
    # the product's fleet read selects every GPU's series of a family in one query:
    # tens of thousands at 4,096 nodes; VictoriaMetrics' default cap is 300,000 per query
    # on older versions and depends on memory on newer ones, so a fleet deployment sets it
    "-search.maxUniqueTimeseries=5000000",
)


def start_vm(tmp: Path, log: Any, binary: str, label: str) -> Store:
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"-storageDataPath={tmp / 'data'}",
            "-retentionPeriod=30d",
            f"-httpListenAddr=127.0.0.1:{port}",
            *VM_FLAGS,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    store = Store(
        label,
        version_of([binary, "-version"]),
        (f"127.0.0.1:{port}", "/api/v1/write"),
        url,
        [proc],
        (f"{url}/internal/force_flush",),
    )
    wait_for(f"{url}/health", store.procs, label)
    return store


def start_vm_cluster(tmp: Path, log: Any, bindir: Path) -> Store:
    """One vmstorage, one vminsert, one vmselect on loopback."""
    http_s, ins, sel = free_port(), free_port(), free_port()
    http_i, http_q = free_port(), free_port()
    storage = subprocess.Popen(
        [
            str(bindir / "vmstorage"),
            f"-storageDataPath={tmp / 'data'}",
            "-retentionPeriod=30d",
            f"-httpListenAddr=127.0.0.1:{http_s}",
            f"-vminsertAddr=127.0.0.1:{ins}",
            f"-vmselectAddr=127.0.0.1:{sel}",
            "-search.maxUniqueTimeseries=5000000",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    procs = [storage]
    try:
        wait_for(f"http://127.0.0.1:{http_s}/health", procs, "vmstorage")
        procs.append(
            subprocess.Popen(
                [
                    str(bindir / "vminsert"),
                    f"-httpListenAddr=127.0.0.1:{http_i}",
                    f"-storageNode=127.0.0.1:{ins}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    str(bindir / "vmselect"),
                    f"-httpListenAddr=127.0.0.1:{http_q}",
                    f"-storageNode=127.0.0.1:{sel}",
                    f"-cacheDataPath={tmp / 'select-cache'}",
                    "-search.maxUniqueTimeseries=5000000",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        wait_for(f"http://127.0.0.1:{http_i}/health", procs, "vminsert")
        wait_for(f"http://127.0.0.1:{http_q}/health", procs, "vmselect")
    except BaseException:
        Store("", "", ("", ""), "", procs).stop()
        raise
    return Store(
        "VictoriaMetrics cluster",
        version_of([str(bindir / "vmstorage"), "-version"]),
        (f"127.0.0.1:{http_i}", "/insert/0/prometheus/api/v1/write"),
        f"http://127.0.0.1:{http_q}/select/0/prometheus",
        procs,
        (f"http://127.0.0.1:{http_s}/internal/force_flush",),
    )


def gpus_searchable(store: Store) -> int:
    query = urllib.parse.urlencode({"query": "count(krea_gpu_up)", "nocache": "1"})
    try:
        with urllib.request.urlopen(f"{store.read_url}/api/v1/query?{query}", timeout=120) as r:
            import json

            result = json.load(r)["data"]["result"]
    except OSError:
        return 0
    return int(float(result[0]["value"][1])) if result else 0


# ---------------------------------------------------------------------------------------
# The reads


@dataclass
class Read:
    walls: list[float]
    cpu_s: float  # the store's CPU over all the repeats
    slowest: tuple[str, float]  # the slowest family query of the last repeat
    digest: Any


def digest(telemetry: Any) -> Any:
    gpus = {
        (name, g.index): g.temperature_c
        for name, node in telemetry.nodes.items()
        for g in node.gpus
    }
    ports = sum(len(node.ib_ports) for node in telemetry.nodes.values())
    links = sum(len(node.nvlinks) for node in telemetry.nodes.values())
    skipped = {k: len(v) for k, v in telemetry.skipped.items()}
    return (sorted(telemetry.nodes), gpus, ports, links, skipped)


def time_reads(store: Store, settings: Settings, repeat: int, at: float) -> dict[str, Read]:
    out = {}
    source = PrometheusSource(store.read_url, settings, clock=lambda: at)
    with source:
        for name, fams in READS:
            walls = []
            c0 = store.cpu()
            telemetry: Any = None
            for _ in range(repeat):
                source.last_timings.clear()  # the slowest query of this read alone
                t0 = time.perf_counter()
                telemetry = source.collect(families=fams)
                walls.append(time.perf_counter() - t0)
                if telemetry.errors:
                    raise RuntimeError(f"{store.name}: {name}: {telemetry.errors[0]}")
            timings = dict(source.last_timings)
            slowest = max(timings.items(), key=lambda kv: kv[1]) if timings else ("-", 0.0)
            out[name] = Read(walls, store.cpu() - c0, slowest, digest(telemetry))
    return out


# ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--interval", type=float, default=60.0, help="sample spacing, s")
    parser.add_argument(
        "--horizon", type=float, default=1500.0, help="samples reach this far past the start, s"
    )
    parser.add_argument("--sick", type=int, default=0, help="sick nodes per kind (0: nodes/256)")
    parser.add_argument("--no-prometheus", action="store_true")
    parser.add_argument(
        "--no-debian-vm", action="store_true", help="leave out PATH's victoria-metrics"
    )
    parser.add_argument(
        "--vm-binary",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="another single-node victoria-metrics binary to measure (repeatable)",
    )
    parser.add_argument(
        "--vm-cluster", type=Path, help="a directory with vmstorage, vminsert and vmselect"
    )
    args = parser.parse_args(argv)
    command = "python benchmarks/bench_metrics_store.py " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    print(f"# Metrics stores: the fleet read (issue 28)\n\n    {command.strip()}\n", flush=True)

    sick = args.sick or max(2, args.nodes // 256)
    fleet = Fleet(args.nodes, sick, "sick")
    window = 300.0
    t0 = time.time()
    first = t0 - window - args.interval
    count = int((t0 + args.horizon - first) // args.interval) + 1
    times = [first + i * args.interval for i in range(count)]
    p0 = time.perf_counter()
    payloads: list[bytes] = []
    series, samples = encode(families(fleet, times, t0), times, payloads)
    summaries = node_summaries(fleet, times, t0)
    s2, n2 = encode(summaries, times, payloads)
    del summaries
    size = sum(len(p) for p in payloads)
    print(
        f"- synthesized {series:,} series + {s2:,} node-summary series = {series + s2:,}"
        f" x {count} samples ({samples + n2:,} samples, {size / 2**20:.0f} MiB of remote-write"
        f" requests) in {time.perf_counter() - p0:.0f} s; every {args.interval:g} s from"
        f" {window + args.interval:g} s before the start to {args.horizon:g} s after it",
        flush=True,
    )
    total_series = series + s2
    settings = Settings(telemetry_timeout_s=300.0)

    starters: list[tuple[str, Any]] = []
    if not args.no_prometheus:
        starters.append(("prometheus", lambda tmp, log: start_prometheus(tmp, log)))
    if not args.no_debian_vm:
        vm = shutil.which("victoria-metrics")
        if vm:
            starters.append(
                (
                    "victoria-metrics",
                    lambda tmp, log, vm=vm: start_vm(tmp, log, vm, "VictoriaMetrics (Debian)"),
                )
            )
        else:
            print("- victoria-metrics not on PATH: left out")
    for spec in args.vm_binary:
        label, _, path = spec.partition("=")
        starters.append((label, lambda tmp, log, p=path, lab=label: start_vm(tmp, log, p, lab)))
    if args.vm_cluster:
        starters.append(
            ("vm-cluster", lambda tmp, log: start_vm_cluster(tmp, log, args.vm_cluster))
        )

    rows: list[tuple[Store, float, float, float, float, float, dict[str, Read]]] = []
    reference: dict[str, Any] | None = None
    for key, start in starters:
        with tempfile.TemporaryDirectory(prefix=f"bench-store-{key}-") as tmp_name:
            tmp = Path(tmp_name)
            log = (tmp / "log").open("wb")
            store = start(tmp, log)
            try:
                idle = store.rss_mib()
                w0 = time.perf_counter()
                send(store.write[0], store.write[1], payloads)
                store.flush()
                want = args.nodes * GPUS
                while (have := gpus_searchable(store)) < want:
                    if time.perf_counter() - w0 > 900:
                        raise RuntimeError(f"{store.name}: {have} of {want} GPUs searchable")
                    store.flush()
                    time.sleep(1)
                ingest = time.perf_counter() - w0
                time.sleep(5)  # let the ingest's garbage settle before reading RSS
                after_ingest = store.rss_mib()
                try:
                    reads = time_reads(store, settings, args.repeat, t0)
                except RuntimeError as exc:  # a query the store refused or timed out
                    print(f"- {store.name} ({store.version}): ingest + searchable"
                          f" {ingest:.0f} s; RSS after ingest {after_ingest:.0f} MiB;"
                          f" a read failed: {exc}", flush=True)  # fmt: skip
                    continue
                after_reads = store.rss_mib()
                by_process = store.rss_by_process() if len(store.procs) > 1 else ""
                peak = store.rss_mib("VmHWM")
                store.flush()
                disk = du(tmp / "data")
                print(
                    f"- {store.name} ({store.version}): ingest + searchable {ingest:.0f} s; RSS"
                    f" idle {idle:.0f} MiB, after ingest {after_ingest:.0f} MiB, after reads"
                    f" {after_reads:.0f} MiB, peak {peak:.0f} MiB; data directory"
                    f" {disk / 2**20:.0f} MiB, {disk / (samples + n2):.2f} bytes per sample"
                    f"{WAL_NOTE if key == 'prometheus' else ''}",
                    flush=True,
                )
                if by_process:
                    print(f"  RSS after reads by process: {by_process}", flush=True)
                for name, r in reads.items():
                    print(
                        f"  {name}: median {statistics.median(r.walls):.2f} s"
                        f" ({', '.join(f'{w:.2f}' for w in r.walls)}); store CPU"
                        f" {r.cpu_s / len(r.walls):.2f} s a read; slowest query"
                        f" {r.slowest[0]} {r.slowest[1]:.2f} s",
                        flush=True,
                    )
                digests = {name: r.digest for name, r in reads.items()}
                if reference is None:
                    reference = digests
                else:
                    for name in digests:
                        same = digests[name] == reference[name]
                        print(
                            f"  {name}: {'same' if same else 'DIFFERENT'} nodes, GPUs,"
                            f" temperatures, ports, links and summary-clean sets as the first store"
                        )
                rows.append((store, ingest, idle, after_ingest, after_reads, peak, reads))
            finally:
                store.stop()
                log.close()

    print()
    print(
        "| store | ingest s | RSS after ingest | after reads | peak | MiB per M series"
        " (after reads, less idle) | gpus s | nodes list s | fabric s"
        " | store CPU s per fabric read |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for store, ingest, idle, ing, rd, peak, reads in rows:
        med = {n: statistics.median(r.walls) for n, r in reads.items()}
        fab = reads["fabric"]
        print(
            f"| {store.name} | {ingest:.0f} | {ing:,.0f} MiB | {rd:,.0f} MiB | {peak:,.0f} MiB"
            f" | {(rd - idle) / (total_series / 1e6):,.0f} | {med['gpus']:.2f}"
            f" | {med['nodes list']:.2f}"
            f" | {med['fabric']:.2f} | {fab.cpu_s / len(fab.walls):.2f} |"
        )
    print(f"\n{total_series:,} series; reads are medians of {args.repeat}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
