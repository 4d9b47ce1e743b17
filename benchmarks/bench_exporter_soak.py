#!/usr/bin/env python3
"""Exporter soak: ``krea-ops exporter run`` scraped every second for ``--duration`` seconds
(default an hour), watching its memory, threads and descriptors for growth.

Serves eight simulated H200s (``--gpu-backend fake``) and the procfs fixture's three HCAs
(a temporary copy) on a free loopback port, as a separate process. Every second it
scrapes ``/metrics`` once with a fresh connection; every ``--hangup-every``-th scrape the
client hangs up with a reset after the first bytes of the answer instead (a scraper
giving up mid-response). After each scrape it reads the server's VmRSS, thread count and
open descriptors from /proc.

Reports: scrapes answered and failed, latency median/p99, and for RSS, threads and fds
their value after the warm-up (the first ``--warmup`` seconds: allocator and caches
settling), at the end, the peak, and RSS's least-squares slope over the rest (KiB per
hour). /proc is read between scrapes (a scrape's own short-lived threads have ended).
Exit status 1 if the median threads or fds of the last tenth of the run exceed those of
the first tenth after warm-up, or a scrape failed.

    .venv/bin/python benchmarks/bench_exporter_soak.py --duration 3600
    .venv/bin/python benchmarks/bench_exporter_soak.py --duration 120   # the short run
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "tests/fixtures/sysfs-infiniband/procfs-v0.21.1/sys"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_status(pid: int) -> tuple[int, int, int]:
    """(VmRSS KiB, threads, open fds) of a process."""
    rss = threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, threads, fds


def scrape(port: int) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
        return body
    finally:
        conn.close()


def hang_up(port: int) -> None:
    client = socket.create_connection(("127.0.0.1", port), timeout=30)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.sendall(b"GET /metrics HTTP/1.1\r\nHost: soak\r\n\r\n")
    client.recv(64)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var * 3600.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=3600.0, help="seconds (default 3600)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    ap.add_argument("--warmup", type=float, default=20.0, help="seconds not judged")
    ap.add_argument("--hangup-every", type=int, default=10, help="0: never hang up")
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    if args.duration <= args.warmup or args.interval <= 0:
        print("--duration must exceed --warmup; --interval must be > 0", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="krea-soak-"))
    shutil.copytree(TREE, tmp / "sys")
    port = free_port()
    exe = ROOT / ".venv/bin/krea-ops"
    cmd = [
        str(exe if exe.exists() else "krea-ops"),
        "exporter",
        "run",
        "--gpu-backend",
        "fake",
        "--fake-gpus",
        str(args.gpus),
        "--sysfs",
        str(tmp / "sys"),
        "--listen",
        f"127.0.0.1:{port}",
    ]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def _stop(_signum: int, _frame: object) -> None:  # stop the exporter too (finally below)
        raise SystemExit(1)

    signal.signal(signal.SIGTERM, _stop)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                scrape(port)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    print(server.stderr.read() if server.stderr else "", file=sys.stderr)
                    raise SystemExit("the exporter did not start") from None
                time.sleep(0.2)

        start = time.monotonic()
        samples: list[tuple[float, int, int, int]] = []  # (t, rss KiB, threads, fds)
        latencies: list[float] = []
        answered = failed = hangups = 0
        n = 0
        while (now := time.monotonic()) - start < args.duration:
            n += 1
            # read between scrapes: a scrape's own short-lived threads have ended by now
            rss, threads, fds = proc_status(server.pid)
            samples.append((now - start, rss, threads, fds))
            if args.hangup_every and n % args.hangup_every == 0:
                hang_up(port)
                hangups += 1
            else:
                t0 = time.perf_counter()
                try:
                    body = scrape(port)
                    latencies.append(time.perf_counter() - t0)
                    answered += 1 if b"krea_gpu_up{" in body else 0
                    failed += 0 if b"krea_gpu_up{" in body else 1
                except (OSError, RuntimeError) as exc:
                    failed += 1
                    print(f"scrape {n} failed: {exc}", file=sys.stderr)
            time.sleep(max(0.0, start + n * args.interval - time.monotonic()))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    judged = [s for s in samples if s[0] >= args.warmup]
    first, last = judged[0], judged[-1]
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(
        f"exporter soak: {args.duration:.0f} s, scrape every {args.interval:g} s, {args.gpus} GPUs"
    )
    print(f"  scrapes answered {answered}, failed {failed}, client hang-ups {hangups}")
    print(f"  latency median {statistics.median(latencies) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
    for name, i in (("RSS KiB", 1), ("threads", 2), ("fds", 3)):
        peak = max(s[i] for s in judged)
        print(f"  {name}: after warm-up {first[i]}, end {last[i]}, peak {peak}")
    rss_slope = slope_per_hour([(s[0], s[1]) for s in judged])
    tenth = max(1, len(judged) // 10)
    early = [statistics.median(s[i] for s in judged[:tenth]) for i in range(4)]
    late = [statistics.median(s[i] for s in judged[-tenth:]) for i in range(4)]
    print(
        "  median of the first and last tenth after warm-up: "
        f"RSS {early[1]:.0f} -> {late[1]:.0f} KiB, threads {early[2]:.0f} -> {late[2]:.0f}, "
        f"fds {early[3]:.0f} -> {late[3]:.0f}"
    )
    print(f"  RSS slope after warm-up: {rss_slope:+.0f} KiB/hour")
    grew = late[2] > early[2] or late[3] > early[3]
    print("  verdict:", "GROWTH" if grew or failed else "no growth in threads or fds")
    return 1 if grew or failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
