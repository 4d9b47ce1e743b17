#!/usr/bin/env python3
"""The scale mode on the upstream control plane: ``krea-ops sim serve --control-plane
upstream --nodes N --telemetry-nodes T``, measured from outside as an operator would.

For each ``--telemetry-nodes`` value given (the same N nodes each time):

1. starts ``sim serve`` in a fresh state directory as its own process group and times
   until it prints ``try:`` (every component up, the N nodes and their Leases registered,
   the world's actors started: ``up``), until every node is Ready, both DaemonSets have a
   ready pod on every node and every training's pods are ready (``settled``: read from the
   DaemonSets', Jobs' and Deployments' status, not by listing pods), and until Prometheus
   has scraped every exporter once (``readings``);
2. over ``--steady`` seconds after that, samples the CPU seconds and at the end the
   resident memory of each process (etcd, kube-apiserver, kube-controller-manager,
   kube-scheduler, Kueue, JobSet, Prometheus, the Python world) and the upstream API
   server's own ``apiserver_request_total`` (its ``/metrics`` with the world's admin
   credentials) at both ends: requests per second by verb and resource;
3. times ``kubectl get nodes -o json`` (``--kubectl-runs`` times, a warm discovery cache,
   the median) and ``kubectl get pods -A -o json`` once, and reads etcd's database size,
   Prometheus' head series and one exporter's series (the series per telemetry node);
4. stops it (SIGTERM) and checks no process of its tree is left.

Markdown tables follow. With two telemetry sizes (``--telemetry-nodes 256,0``) the last
table is the memory per telemetry node: the difference of the world's and Prometheus'
resident memory over the difference of telemetry nodes.

    .venv/bin/python benchmarks/bench_scale.py --nodes 5000 --telemetry-nodes 256,0
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import re
import shlex
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from bench_control_planes import PAGE, TICK, tree

ROOT = Path(__file__).resolve().parents[1]
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kueue",
    "jobset-controller",
    "prometheus",
)
# The requests the simulated kubelets make (verb, resource, subresource): Lease renewals,
# node status heartbeats, pod status and deletions; others' share of these is small in
# the steady state (the node lifecycle controller writes node status only on a change).
KUBELET_ROWS = {
    ("PATCH", "leases", ""),
    ("PATCH", "nodes", "status"),
    ("PATCH", "pods", "status"),
    ("DELETE", "pods", ""),
}


def role(pid: int, world: int) -> str:
    if pid == world:
        return "world (Python)"
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return "gone"
    name = Path(argv0).name
    return name if name in COMPONENTS else f"other ({name})"


def usage(world: int) -> dict[str, tuple[float, float]]:
    """Role -> (CPU seconds, resident MiB) over the world's process tree now."""
    out: dict[str, tuple[float, float]] = {}
    for pid in tree(world):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu = (int(fields[11]) + int(fields[12])) / TICK
        rss = int(fields[21]) * PAGE / 2**20
        who = role(pid, world)
        was = out.get(who, (0.0, 0.0))
        out[who] = (was[0] + cpu, was[1] + rss)
    return out


def arg_of(pid_list: list[int], binary: str, flag: str) -> str | None:
    for pid in pid_list:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if argv and Path(argv[0]).name == binary:
            for arg in argv:
                if arg.startswith(flag + "="):
                    return arg.split("=", 1)[1]
    return None


class Api:
    """The upstream API server through the world's kubeconfig (admin bearer token)."""

    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        self.url = cluster["server"]
        self.token = config["users"][0]["user"]["token"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        self.ctx = ssl.create_default_context(cadata=ca)

    def get(self, path: str, timeout: float = 60) -> bytes:
        req = urllib.request.Request(self.url + path)
        req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=timeout, context=self.ctx) as resp:
            return bytes(resp.read())

    def json(self, path: str) -> Any:
        return json.loads(self.get(path))


METRIC = re.compile(r"^(\w+)\{(.*)\} ([0-9.eE+-]+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def requests(api: Api) -> dict[tuple[str, str, str], float]:
    """(verb, resource, subresource) -> apiserver_request_total now."""
    out: dict[tuple[str, str, str], float] = {}
    for line in api.get("/metrics").decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        m = METRIC.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(2)))
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def gauge(url: str, name: str) -> float | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def settled(api: Api, nodes: int) -> str | None:
    """None once every node is Ready and every DaemonSet, Job and Deployment pod is ready,
    else what is still coming (read from the controllers' status, no pod list)."""
    for ds in api.json("/apis/apps/v1/namespaces/kube-system/daemonsets")["items"]:
        st = ds.get("status") or {}
        if st.get("numberReady", 0) < nodes:
            return f"DaemonSet {ds['metadata']['name']}: {st.get('numberReady', 0)}/{nodes}"
    jobs = api.json("/apis/batch/v1/namespaces/training/jobs")["items"]
    want = sum(j["spec"].get("parallelism") or 0 for j in jobs)
    have = sum((j.get("status") or {}).get("ready") or 0 for j in jobs)
    if not jobs or have < want:
        return f"training pods ready {have}/{want}"
    for d in api.json("/apis/apps/v1/namespaces/inference/deployments")["items"]:
        st = d.get("status") or {}
        if (st.get("readyReplicas") or 0) < (d["spec"].get("replicas") or 0):
            return f"Deployment {d['metadata']['name']} {st.get('readyReplicas')}"
    # last, and once: a list of every node is the heaviest read here
    node_list = api.json("/api/v1/nodes?labelSelector=nvidia.com%2Fgpu.present%3Dtrue")
    ready = sum(
        1
        for n in node_list["items"]
        for c in n["status"].get("conditions") or []
        if c["type"] == "Ready" and c["status"] == "True"
    )
    if ready < nodes:
        return f"{ready}/{nodes} nodes Ready"
    return None


def kubectl_time(kubeconfig: Path, home: Path, *args: str) -> tuple[float, int]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(home)}
    t0 = time.monotonic()
    out = subprocess.run(["kubectl", *args], env=env, capture_output=True, check=True)
    return time.monotonic() - t0, len(out.stdout)


def measure(
    pid: int, state: Path, home: Path, args: argparse.Namespace, exporters: dict[str, str]
) -> dict[str, Any]:
    """The steady state of the running ``sim serve`` ``pid`` (state directory ``state``):
    CPU and memory per process, the API server's request rates, kubectl's times, etcd's
    size, the telemetry's series."""
    api = Api(state / "kubeconfig")
    before, req0, t_req0 = usage(pid), requests(api), time.monotonic()
    time.sleep(args.steady)
    after, req1, t_req1 = usage(pid), requests(api), time.monotonic()
    window = t_req1 - t_req0
    rates = {k: (req1.get(k, 0.0) - req0.get(k, 0.0)) / window for k in req1}
    home.mkdir(exist_ok=True)
    kubeconfig = state / "kubeconfig"
    kubectl_time(kubeconfig, home, "get", "namespaces")  # the discovery cache
    nodes_times = []
    size = 0
    for _ in range(args.kubectl_runs):
        took, size = kubectl_time(kubeconfig, home, "get", "nodes", "-o", "json")
        nodes_times.append(took)
    pods_s, pods_bytes = kubectl_time(kubeconfig, home, "get", "pods", "-A", "-o", "json")
    table_s, _ = kubectl_time(kubeconfig, home, "get", "nodes")
    pids = tree(pid)
    etcd = arg_of(pids, "etcd", "--listen-client-urls")
    db = gauge(f"{etcd}/metrics", "etcd_mvcc_db_total_size_in_bytes") if etcd else None
    prom_url = _prometheus_url(api)
    head = gauge(f"{prom_url}/metrics", "prometheus_tsdb_head_series") if prom_url else None
    per_node = None
    if exporters:
        first = sorted(exporters)[0]
        with urllib.request.urlopen(exporters[first], timeout=10) as resp:
            body = resp.read().decode()
        per_node = sum(1 for ln in body.splitlines() if ln and not ln.startswith("#"))
    return {
        "cpu_pct": {
            who: 100 * (after[who][0] - before.get(who, (0.0, 0.0))[0]) / args.steady
            for who in after
        },
        "rss_mib": {who: after[who][1] for who in after},
        "rates": rates,
        "kubectl_nodes_s": statistics.median(nodes_times),
        "kubectl_nodes_mb": size / 1e6,
        "kubectl_nodes_table_s": table_s,
        "kubectl_pods_s": pods_s,
        "kubectl_pods_mb": pods_bytes / 1e6,
        "etcd_db_mb": None if db is None else db / 1e6,
        "prometheus_head_series": head,
        "series_per_node": per_node,
        "exporters": len(exporters),
    }


def one_run(cli: str, args: argparse.Namespace, telemetry: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        state = Path(tmp) / "state"
        argv = [
            cli, "sim", "serve", "--control-plane", "upstream", "--nodes", str(args.nodes),
            "--telemetry-nodes", str(telemetry), "--speed", str(args.speed),
            "--state", str(state),
        ]  # fmt: skip
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        marks: dict[str, float] = {}
        exporters: dict[str, str] = {}
        err_lines: list[str] = []

        def read_err() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                err_lines.append(line)
                print(f"  {time.monotonic() - t0:5.0f} s:{line.rstrip()}", file=sys.stderr)
                if "every exporter scraped once" in line and "readings" not in marks:
                    marks["readings"] = time.monotonic() - t0

        threading.Thread(target=read_err, daemon=True).start()
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("exporter "):
                name, url = line.split()[1].rstrip(":"), line.split()[2]
                exporters[name] = url
            if line.startswith("try:"):
                marks["up"] = time.monotonic() - t0
                break
        if "up" not in marks:
            raise RuntimeError("did not start:\n" + "".join(err_lines[-20:]))
        threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
        api = Api(state / "kubeconfig")
        deadline = time.monotonic() + args.settle_timeout
        waiting: str | None = "?"
        while time.monotonic() < deadline:
            try:
                waiting = settled(api, args.nodes)
            except (OSError, http.client.HTTPException) as exc:
                waiting = f"API: {type(exc).__name__}: {exc}"
            if waiting is None:
                marks["settled"] = time.monotonic() - t0
                break
            print(f"  {time.monotonic() - t0:5.0f} s: {waiting}", file=sys.stderr, flush=True)
            time.sleep(10)
        if "settled" not in marks:
            print(f"  not settled within {args.settle_timeout:.0f} s: {waiting}", file=sys.stderr)
        if telemetry:
            end = time.monotonic() + 120
            while "readings" not in marks and time.monotonic() < end:
                time.sleep(1)
        time.sleep(args.calm)
        result = measure(proc.pid, state, Path(tmp) / "home", args, exporters)
        pids = tree(proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        time.sleep(1)
        left = [p for p in pids if Path(f"/proc/{p}").exists()]
        if left:
            os.killpg(proc.pid, signal.SIGKILL)
            raise RuntimeError(f"processes left after stop: {left}")
        return {"telemetry": telemetry, "marks": marks, **result}


PROBE = """
import json, sys, time, urllib.request
from krea_ops.sim.machines.fleet import scale_config
from krea_ops.sim.world import SimWorld
nodes = int(sys.argv[1])
config = scale_config(nodes, nodes, slow_burners=False)
with SimWorld(config, parts=["devices"]) as world:
    assert world.wait_for_readings(300)
    time.sleep(float(sys.argv[2]))
    devices = world.world.services["devices"]
    urls = devices.exporter_urls()
    body = urllib.request.urlopen(next(iter(urls.values())), timeout=30).read().decode()
    series = sum(1 for ln in body.splitlines() if ln and not ln.startswith("#"))
    prom = devices.prometheus
    print(json.dumps({"exporters": len(urls), "series_per_node": series,
                      "prometheus_pid": prom.proc.pid if prom and prom.proc else None,
                      "prometheus_url": prom.url if prom else None}), flush=True)
    sys.stdin.readline()
"""


def telemetry_probe(nodes: int, settle_s: float) -> dict[str, Any]:
    """The devices part alone (exporters and Prometheus, on the embedded API server) for
    ``nodes`` telemetry nodes: the world's and Prometheus' resident memory, the series."""
    proc = subprocess.Popen(
        [sys.executable, "-c", PROBE, str(nodes), str(settle_s)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    info = json.loads(proc.stdout.readline())
    world = usage_of(proc.pid)
    prom = usage_of(info["prometheus_pid"]) if info["prometheus_pid"] else 0.0
    head = gauge(f"{info['prometheus_url']}/metrics", "prometheus_tsdb_head_series")
    proc.stdin.write("\n")
    proc.stdin.flush()
    proc.wait(120)
    return {**info, "world_rss_mib": world, "prometheus_rss_mib": prom, "head_series": head}


def usage_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[21]) * PAGE / 2**20


def _prometheus_url(api: Api) -> str | None:
    try:
        cm = api.json("/api/v1/namespaces/krea-ops/configmaps/krea-ops-config")
    except OSError:
        return None
    url = (cm.get("data") or {}).get("prometheusURL")
    return str(url) if url else None


def report(runs: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        "\n| telemetry nodes | up s | settled s | first readings s | kubectl get nodes -o json s "
        "(MB) | kubectl get nodes s | kubectl get pods -A -o json s (MB) | etcd db MB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        m = r["marks"]
        print(
            f"| {r['telemetry']} | {_f(m.get('up'))} | {_f(m.get('settled'))} | "
            f"{_f(m.get('readings'))} | {r['kubectl_nodes_s']:.2f} ({r['kubectl_nodes_mb']:.0f}) | "
            f"{r['kubectl_nodes_table_s']:.2f} | {r['kubectl_pods_s']:.2f} "
            f"({r['kubectl_pods_mb']:.0f}) | {_f(r['etcd_db_mb'])} |"
        )
    roles = sorted({who for r in runs for who in r["rss_mib"]})
    print(f"\nSteady state over {args.steady:.0f} s, per process (CPU: % of one core):\n")
    print(
        "| process | "
        + " | ".join(f"CPU % (T={r['telemetry']}) | RSS MiB (T={r['telemetry']})" for r in runs)
        + " |"
    )
    print("|---|" + "---:|---:|" * len(runs))
    for who in [*roles, "total"]:
        cells = []
        for r in runs:
            if who == "total":
                cpu, rss = sum(r["cpu_pct"].values()), sum(r["rss_mib"].values())
            else:
                cpu, rss = r["cpu_pct"].get(who, 0.0), r["rss_mib"].get(who, 0.0)
            cells.append(f"{cpu:.0f} | {rss:.0f}")
        print(f"| {who} | " + " | ".join(cells) + " |")
    for r in runs:
        rates = sorted(r["rates"].items(), key=lambda kv: -kv[1])
        total = sum(v for _, v in rates)
        kubelet = sum(v for k, v in rates if k in KUBELET_ROWS)
        print(
            f"\nAPI requests/s at the upstream API server (T={r['telemetry']}): {total:.1f} in "
            f"all, {kubelet:.1f} of them the kubelets' kinds (marked *):\n"
        )
        print("| verb | resource | subresource | requests/s |")
        print("|---|---|---|---:|")
        for (verb, resource, sub), rate in rates:
            if rate >= 0.05:
                mark = " *" if (verb, resource, sub) in KUBELET_ROWS else ""
                print(f"| {verb}{mark} | {resource} | {sub} | {rate:.2f} |")
    with_t = [r for r in runs if r["telemetry"]]
    for r in with_t:
        print(
            f"\nTelemetry (T={r['telemetry']}): {r['series_per_node']} series per node "
            f"exporter, Prometheus head {_f(r['prometheus_head_series'])} series, "
            f"scrape interval 15 s."
        )
    if len(runs) >= 2:
        a, b = max(runs, key=lambda r: r["telemetry"]), min(runs, key=lambda r: r["telemetry"])
        dt = a["telemetry"] - b["telemetry"]
        if dt > 0:
            print(f"\nMemory per telemetry node (T={a['telemetry']} minus T={b['telemetry']}):\n")
            print("| process | MiB per telemetry node |")
            print("|---|---:|")
            for who in ("world (Python)", "prometheus"):
                d = a["rss_mib"].get(who, 0.0) - b["rss_mib"].get(who, 0.0)
                print(f"| {who} | {d / dt:.2f} |")


def _f(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--telemetry-nodes", default="256", help="comma-separated sizes")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--steady", type=float, default=120.0, help="seconds of sampling")
    parser.add_argument("--calm", type=float, default=30.0, help="seconds after settling")
    parser.add_argument("--settle-timeout", type=float, default=1800.0)
    parser.add_argument("--kubectl-runs", type=int, default=3)
    parser.add_argument(
        "--attach",
        type=int,
        default=0,
        metavar="PID",
        help="instead of starting one: measure the running sim serve PID's steady state "
        "(its --state and --telemetry-nodes read from its command line), leave it running",
    )
    parser.add_argument(
        "--probe-telemetry",
        default="",
        help="instead: the devices part alone at these telemetry sizes (e.g. 16,64), for "
        "the memory and series per telemetry node",
    )
    args = parser.parse_args(argv)
    cli = str(Path(sys.executable).with_name("krea-ops"))
    command = "python benchmarks/bench_scale.py " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    print(f"# the scale mode on the upstream control plane\n\n    {command.strip()}\n", flush=True)
    if args.probe_telemetry:
        probes = [telemetry_probe(int(x), 45.0) for x in args.probe_telemetry.split(",")]
        print(
            "| telemetry nodes | series per node | Prometheus head series | world RSS MiB "
            "| Prometheus RSS MiB |"
        )
        print("|---:|---:|---:|---:|---:|")
        for p in probes:
            print(
                f"| {p['exporters']} | {p['series_per_node']} | {_f(p['head_series'])} | "
                f"{p['world_rss_mib']:.0f} | {p['prometheus_rss_mib']:.0f} |"
            )
        if len(probes) >= 2:
            a, b = probes[-1], probes[0]
            dn = a["exporters"] - b["exporters"]
            print(
                f"\nPer telemetry node ({a['exporters']} minus {b['exporters']}): world "
                f"{(a['world_rss_mib'] - b['world_rss_mib']) / dn:.2f} MiB, Prometheus "
                f"{(a['prometheus_rss_mib'] - b['prometheus_rss_mib']) / dn:.2f} MiB"
            )
        return 0
    if args.attach:
        argv_of = Path(f"/proc/{args.attach}/cmdline").read_bytes().decode().split("\0")
        state = Path(argv_of[argv_of.index("--state") + 1])
        telemetry = int(argv_of[argv_of.index("--telemetry-nodes") + 1])
        api = Api(state / "kubeconfig")
        print(f"attached to {args.attach} ({state}): {settled(api, args.nodes) or 'settled'}")
        exporters: dict[str, str] = {}
        if telemetry:
            cm = api.json("/api/v1/namespaces/krea-ops/configmaps/krea-ops-config")
            exporters = json.loads((cm.get("data") or {}).get("exporters") or "{}")
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
            result = measure(args.attach, state, Path(tmp) / "home", args, exporters)
        report([{"telemetry": telemetry, "marks": {}, **result}], args)
        return 0
    runs = []
    for size in [int(x) for x in args.telemetry_nodes.split(",")]:
        run = one_run(cli, args, size)
        runs.append(run)
        print(
            f"- T={size}: " + json.dumps({k: v for k, v in run.items() if k != "rates"}), flush=True
        )
    report(runs, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
