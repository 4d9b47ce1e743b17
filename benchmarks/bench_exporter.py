#!/usr/bin/env python3
"""Node exporter scrape benchmark: krea-ops exporter vs node_exporter on the same sysfs tree.

Builds a temporary sysfs tree of N HCAs (copies of the procfs fixture's mlx5_0, counters +
hw_counters) and serves it, one server at a time on 127.0.0.1, with

1. ``krea-ops exporter run --gpu-backend none`` (InfiniBand only),
2. ``krea-ops exporter run --gpu-backend fake --fake-gpus G`` (a full node: G simulated
   H200s plus the same HCAs),
3. ``prometheus-node-exporter --collector.disable-defaults --collector.infiniband``,

then times sequential ``GET /metrics`` against each. Reports client-side median/p99
latency, server CPU per scrape (utime+stime from /proc/<pid>/stat), idle CPU with no
scrapes (/proc/<pid>/task/*/schedstat) and series counts. In-process, it times
``collect()`` alone, ``collect()`` + prometheus_client's ``generate_latest()`` and
``collect()`` + ``CachedTextRenderer.render()`` (the renderer the server uses), after
comparing the two renderers' bytes on one snapshot: it reports "identical" or a
difference only in label order, and fails on any other difference.

Stops by itself; only loopback sockets; the temporary tree is removed at the end.

    .venv/bin/python benchmarks/bench_exporter.py --scrapes 300 --hcas 8 --gpus 8
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import platform
import re
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIXTURE_HCA = ROOT / "tests/fixtures/sysfs-infiniband/procfs-v0.21.1/sys/class/infiniband/mlx5_0"
CLK_TCK = os.sysconf("SC_CLK_TCK")
IB_PREFIXES = (b"krea_ib_", b"node_infiniband_")
GPU_PREFIXES = (b"krea_gpu_", b"krea_nvlink_")
# A full node is ready once GPM (two samples one interval apart) has produced a value.
GPM_MARKER = b"krea_gpu_tensor_active_ratio"


@dataclass
class Server:
    name: str
    argv: list[str]
    markers: tuple[bytes, ...]  # ready once every one of these is in a scrape
    port: int | None = None  # None: read it from krea-ops' "serving http://HOST:PORT" line


@dataclass
class Result:
    name: str
    command: str
    latencies_ms: list[float]
    cpu_ms_per_scrape: float
    idle_cpu_ms_per_s: float
    series: int
    ib_series: int
    gpu_series: int
    body_bytes: int


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_tree(dest: Path, hcas: int) -> Path:
    """dest/sys/class/infiniband/mlx5_0..N-1, each a copy of the fixture's mlx5_0."""
    ib = dest / "sys" / "class" / "infiniband"
    ib.mkdir(parents=True)
    for i in range(hcas):
        shutil.copytree(FIXTURE_HCA, ib / f"mlx5_{i}")
        (ib / f"mlx5_{i}" / "node_guid").write_text(f"0a7f:bc12:45ef:d2{i:02x}\n")
    return dest / "sys"


def krea_ops_cli() -> str | None:
    exe = ROOT / ".venv" / "bin" / "krea-ops"
    return str(exe) if exe.exists() else shutil.which("krea-ops")


def cpu_seconds(pid: int) -> float:
    """utime+stime of the whole process (all threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After "pid (comm)": state is fields[0]; utime and stime are fields 14 and 15 of stat.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU time (ns resolution) of each thread alive now, from /proc/<pid>/task/*/schedstat.

    Used only while nothing is scraping, to measure background work: utime+stime counts in
    10 ms ticks, too coarse for that, but unlike this it includes threads that have exited."""
    times = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):  # a thread just exited
            times[int(task.name)] = int((task / "schedstat").read_text().split()[0]) / 1e9
    return times


def get(port: int) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET /metrics on port {port}: HTTP {resp.status}")
        return body
    finally:
        conn.close()


class _Stdout:
    """Reads a child's stdout on a thread; ``port`` is set from krea-ops' "serving" line."""

    _serving = re.compile(r"^serving http://[^ ]*:(\d+)/metrics")

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self.port: int | None = None
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            match = self._serving.match(line)
            if match and self.port is None:
                self.port = int(match.group(1))
                self.ready.set()


def wait_ready(
    proc: subprocess.Popen[bytes], server: Server, out: _Stdout, timeout: float = 60.0
) -> int:
    """The port, once the server answers with every marker series."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was ready")
        port = server.port if server.port is not None else out.port
        if port is None:
            out.ready.wait(0.1)
            continue
        try:
            body = get(port)
            missing = [m for m in server.markers if m not in body]
            if not missing:
                return port
            last = RuntimeError(f"no {missing[0].decode()} series in the response yet")
        except (OSError, RuntimeError) as exc:
            last = exc
        time.sleep(0.1)
    raise RuntimeError(f"{server.name} not ready within {timeout}s: {last}")


def count_series(body: bytes) -> tuple[int, int, int]:
    lines = [ln for ln in body.splitlines() if ln and not ln.startswith(b"#")]
    ib = sum(1 for ln in lines if ln.startswith(IB_PREFIXES))
    gpu = sum(1 for ln in lines if ln.startswith(GPU_PREFIXES))
    return len(lines), ib, gpu


def measure(
    server: Server, scrapes: int, warmup: int, idle_s: float, env: dict[str, str]
) -> Result:
    with tempfile.TemporaryFile() as errlog:
        proc = subprocess.Popen(
            server.argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=errlog, env=env
        )
        out = _Stdout(proc.stdout)
        try:
            try:
                port = wait_ready(proc, server, out)
            except RuntimeError as exc:
                errlog.seek(0)
                tail = errlog.read()[-2000:].decode(errors="replace")
                raise RuntimeError(f"{server.name}: {exc}\n{tail}") from None
            for _ in range(warmup):
                get(port)
            # Background work (krea-ops' GPM sampler and XID threads) with no scrapes.
            # Only threads alive at both ends count (a warm-up connection's thread may exit).
            time.sleep(0.2)
            idle_before, idle_start = thread_cpu_seconds(proc.pid), time.monotonic()
            time.sleep(idle_s)
            idle_after = thread_cpu_seconds(proc.pid)
            idle_cpu = sum(t - idle_before[i] for i, t in idle_after.items() if i in idle_before)
            idle_wall = time.monotonic() - idle_start
            cpu_before = cpu_seconds(proc.pid)
            latencies = []
            body = b""
            for _ in range(scrapes):
                start = time.perf_counter()
                body = get(port)
                latencies.append((time.perf_counter() - start) * 1e3)
            cpu_after = cpu_seconds(proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    series, ib, gpu = count_series(body)
    return Result(
        name=server.name,
        command=shlex.join(server.argv),
        latencies_ms=latencies,
        cpu_ms_per_scrape=(cpu_after - cpu_before) * 1e3 / scrapes,
        idle_cpu_ms_per_s=idle_cpu * 1e3 / idle_wall if idle_wall > 0 else 0.0,
        series=series,
        ib_series=ib,
        gpu_series=gpu,
        body_bytes=len(body),
    )


# -- in-process ---------------------------------------------------------------------------


class _Fixed:
    """Yields the same collected families every time (a snapshot both renderers can share)."""

    def __init__(self, families: list[Any]) -> None:
        self._families = families

    def collect(self) -> Iterable[Any]:
        return iter(self._families)

    def describe(self) -> list[Any]:
        return []


@dataclass
class InProcess:
    name: str
    samples: int = 0
    same_bytes: str = ""
    steps: dict[str, list[float]] = field(default_factory=dict)


STEPS = (
    "collect() alone, tree unchanged",
    "collect() alone, every IB counter file changed",
    "collect() + generate_latest()",
    "collect() + CachedTextRenderer.render()",
)


_LABEL = re.compile(rb'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _canonical(line: bytes) -> bytes:
    """A sample line with its labels sorted by name (comments unchanged)."""
    if line.startswith(b"#") or b"{" not in line:
        return line
    head, rest = line.split(b"{", 1)
    inner, tail = rest.rsplit(b"}", 1)
    pairs = sorted(_LABEL.findall(inner))
    return head + b"{" + b",".join(k + b'="' + v + b'"' for k, v in pairs) + b"}" + tail


def compare(ours: bytes, reference: bytes) -> str:
    """ "identical", or how CachedTextRenderer's text differs from generate_latest()'s.

    Raises if they differ in anything but the order of labels within a series."""
    if ours == reference:
        return "byte-for-byte identical"
    a, b = ours.splitlines(), reference.splitlines()
    if len(a) == len(b) and all(_canonical(x) == _canonical(y) for x, y in zip(a, b, strict=True)):
        differ = sum(1 for x, y in zip(a, b, strict=True) if x != y)
        return (
            f"NOT byte-identical: {differ} of {len(b)} lines differ, only in label order "
            "(generate_latest() sorts label names; same series, values and line order)"
        )
    raise RuntimeError("CachedTextRenderer output differs from generate_latest()")


def _timed(fn: Any, runs: int, before: Any = None) -> list[float]:
    times = []
    for i in range(runs):
        if before is not None:
            before(i)
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def in_process(name: str, tree: Path, gpus: int, runs: int) -> InProcess:
    """Time one exporter (as the CLI builds it) in this process."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    from krea_ops.exporters.exposition import CachedTextRenderer
    from krea_ops.exporters.server import build_exporter
    from krea_ops.settings import Settings

    settings = Settings(
        exporter_sysfs=str(tree),
        exporter_gpu_backend="fake" if gpus else "none",
        exporter_fake_gpus=gpus,
        exporter_node_name="bench",
    )
    exporter = build_exporter(settings)  # starts the GPM/XID threads, as the server does
    registry = exporter.registry
    try:
        deadline = time.monotonic() + 30
        while gpus and GPM_MARKER not in generate_latest(registry):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: no GPM values within 30 s")
            time.sleep(0.1)

        # Same bytes: render one snapshot of the families with both renderers.
        snapshot = CollectorRegistry(auto_describe=False)
        snapshot.register(_Fixed(list(registry.collect())))
        same = compare(CachedTextRenderer(snapshot).render(), generate_latest(snapshot))

        renderer = CachedTextRenderer(registry)
        for _ in range(20):
            renderer.render()
            generate_latest(registry)
        result = InProcess(name, samples=sum(len(f.samples) for f in registry.collect()))
        result.same_bytes = same
        result.steps[STEPS[0]] = _timed(lambda: list(registry.collect()), runs)
        # The tree never changes during the HTTP runs, so the IB collector reuses every
        # sample it parsed before. Here every IB counter file is rewritten in place (untimed)
        # before each collect().
        counter_files = [
            p for p in tree.glob("class/infiniband/*/ports/*/*counters*/*") if p.name != "lifespan"
        ]

        def rewrite(i: int) -> None:
            for path in counter_files:
                with open(path, "r+") as f:
                    f.write(f"{1_000_000_000 + i}\n")
                    f.truncate()

        result.steps[STEPS[1]] = _timed(lambda: list(registry.collect()), runs, rewrite)
        list(registry.collect())  # settle on the last values again
        result.steps[STEPS[2]] = _timed(lambda: generate_latest(registry), runs)
        result.steps[STEPS[3]] = _timed(renderer.render, runs)
        return result
    finally:
        exporter.close()


# -- main -----------------------------------------------------------------------------------


def versions(node_exporter: str) -> list[str]:
    from importlib.metadata import version

    try:
        ne = subprocess.run(
            [node_exporter, "--version"], capture_output=True, text=True, timeout=30
        )
        ne_version = (ne.stdout or ne.stderr).splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired) as exc:
        ne_version = f"unknown ({exc!r})"
    return [
        f"CPUs (nproc): {os.cpu_count()} online, {len(os.sched_getaffinity(0))} usable",
        f"Python: {platform.python_version()} ({sys.executable})",
        f"prometheus_client: {version('prometheus_client')}",
        f"krea-ops: {version('krea-ops')}",
        f"node_exporter: {ne_version}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrapes", type=int, default=300, help="timed scrapes per server")
    parser.add_argument("--hcas", type=int, default=8, help="HCAs in the generated tree")
    parser.add_argument("--gpus", type=int, default=8, help="fake GPUs for the full-node row")
    parser.add_argument("--warmup", type=int, default=20, help="untimed scrapes first")
    parser.add_argument(
        "--idle", type=float, default=3.0, help="seconds of no scrapes to measure idle CPU"
    )
    parser.add_argument(
        "--node-exporter",
        default=shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter",
    )
    args = parser.parse_args(argv)
    if args.scrapes < 1 or args.hcas < 1 or args.gpus < 1:
        parser.error("--scrapes, --hcas and --gpus must be at least 1")
    cli = krea_ops_cli()
    if cli is None:
        print("no krea-ops executable (.venv/bin/krea-ops or on PATH)", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="bench-exporter-") as tmp:
        tree = build_tree(Path(tmp), args.hcas)
        # No settings file: only the flags below (and the defaults) apply.
        env = {**os.environ, "KREA_OPS_CONFIG": str(Path(tmp) / "no-settings.yaml")}
        ours = [cli, "exporter", "run", "--listen", "127.0.0.1:0", "--sysfs", str(tree)]
        ours += ["--node-name", "bench"]
        ne_port = free_port()
        servers = [
            Server("ours, IB only", [*ours, "--gpu-backend", "none"], (b"krea_ib_",)),
            Server(
                f"ours, full node ({args.gpus} fake GPUs + {args.hcas} HCAs)",
                [*ours, "--gpu-backend", "fake", "--fake-gpus", str(args.gpus)],
                (b"krea_ib_", GPM_MARKER),
            ),
            Server(
                "node_exporter, IB only",
                [
                    args.node_exporter,
                    "--collector.disable-defaults",
                    "--collector.infiniband",
                    f"--path.sysfs={tree}",
                    f"--web.listen-address=127.0.0.1:{ne_port}",
                ],
                (b"node_infiniband_",),
                port=ne_port,
            ),
        ]
        results = [measure(s, args.scrapes, args.warmup, args.idle, env) for s in servers]
        local = [
            in_process("IB only", tree, 0, args.scrapes),
            in_process(f"full node ({args.gpus} GPUs)", tree, args.gpus, args.scrapes),
        ]

    print("\n".join(versions(args.node_exporter)))
    print()
    print(
        f"Scrape of {args.hcas} HCAs (copies of the procfs fixture's mlx5_0), "
        f"{args.scrapes} sequential GETs of /metrics after {args.warmup} warm-up, "
        "a new connection each, one server at a time\n"
    )
    print(
        "| server | median ms | p99 ms | server CPU ms/scrape | idle CPU ms/s "
        "| series | IB series | GPU series | body KiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.name} | {statistics.median(r.latencies_ms):.2f} | {p99(r.latencies_ms):.2f} "
            f"| {r.cpu_ms_per_scrape:.2f} | {r.idle_cpu_ms_per_s:.2f} | {r.series} "
            f"| {r.ib_series} | {r.gpu_series} | {r.body_bytes / 1024:.0f} |"
        )
    print()
    print(
        f"In-process ({args.scrapes} runs each, ms; samples: "
        + ", ".join(f"{x.name} {x.samples}" for x in local)
        + "):\n"
    )
    print("| step | " + " | ".join(f"{x.name} median | p99" for x in local) + " |")
    print("|---|" + "---:|---:|" * len(local))
    for step in STEPS:
        cells = " | ".join(
            f"{statistics.median(x.steps[step]):.3f} | {p99(x.steps[step]):.3f}" for x in local
        )
        print(f"| {step} | {cells} |")
    print()
    for x in local:
        print(f"CachedTextRenderer vs generate_latest(), {x.name}: {x.same_bytes}")
    print()
    print("Servers (tree and ports were temporary):")
    for r in results:
        print(f"    {r.command}")
    print()
    print("Benchmark: " + shlex.join([sys.executable, *sys.argv]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
