"""Prometheus down, slow, erroring and stale, as the product meets it: a real Prometheus
scraping two of our exporters (simulated GPUs), reached through an HTTP proxy written
here that can delay its answers, answer 500, cut a body short or fail one query; or
stopped outright. The cluster is the API-only simulator with the exporters' two nodes.

- read commands (``gpus``, ``nodes list``): exit 1 and one error line naming Prometheus
  and what is wrong; ``nodes list`` still prints the nodes, its GPU nodes UNKNOWN;
- the controllers that read telemetry (node-health, burst-taint), run by the runner:
  nothing written while it is down, slow or erroring, and the log and the metrics say
  why; a quarantined node is not restored on readings that are not there;
- stale series (an exporter stopped past ``telemetry_stale_s``): its node is UNKNOWN,
  never grounds for a cordon;
- the dashboard keeps the last good view, greyed, with its age and the error line."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from commands.main import invoke
from krea_ops.console import Console
from krea_ops.controllers.base import NAMESPACE, Controller, Inputs
from krea_ops.controllers.burst_taint import BurstTaint, BurstTaintConfig
from krea_ops.controllers.loop import ControllerMetrics, JsonLog, PassResult, Runner
from krea_ops.controllers.node_health import NodeHealth, NodeHealthConfig
from krea_ops.health import HealthPolicy
from krea_ops.kube.cluster import Cluster
from krea_ops.model import Severity
from krea_ops.runbook.audit import AuditLog
from krea_ops.runbook.execute import RunResult
from krea_ops.runbook.nodes import TAINT_KEY
from krea_ops.settings import Settings, load_settings
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.telemetry import PrometheusSource
from screens.app import KreaOpsApp
from screens.widgets.heatmap import GpuHeatmap
from tests.conftest import PROCFS_TREE, free_port, require_binary
from tests.controllers.conftest import Clock, virtual_node
from tests.kube.conftest import create, set_status
from tests.screens.conftest import wait_until as pump_until
from tests.telemetry.conftest import KreaNode, Prometheus, Target, start_krea_node, wait_until

GPUS = 2
HOT, COOL = "node-a", "node-b"
WINDOW_S = 3.0
STALE_S = 4.0
TIMEOUT_S = 2.0
SETTINGS = Settings(
    telemetry_window_s=WINDOW_S, telemetry_stale_s=STALE_S, telemetry_timeout_s=TIMEOUT_S
)
POLICY = HealthPolicy(window_s=WINDOW_S)
MINUTE, HOUR = 60.0, 3600.0
# how each fault reads in the one error line (after "Prometheus at URL is not answering")
FAULTS = {
    "slow": f"timed out after {TIMEOUT_S:g} s",
    "error": "HTTP 500: upstream connect error or disconnect/reset before headers",
    "truncate": "the answer was cut short",
}


class FaultyProxy:
    """An HTTP proxy in front of Prometheus. ``mode``: ``pass`` (forward), ``slow``
    (wait ``delay_s`` first), ``error`` (answer 500 as a failing reverse proxy does),
    ``truncate`` (forward, but send only half of the body under the full
    Content-Length, then hang up), ``fail-query`` (500 for instant queries whose PromQL
    contains ``match``; the rest forwarded: one query failing, as one too expensive
    does). ``requests`` counts what came in, by mode."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.mode = "pass"
        self.delay_s = 0.0
        self.match = ""
        self.requests: dict[str, int] = {}
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                outer._answer(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer._answer(self, self.rfile.read(length))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.1,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def set(self, mode: str, *, delay_s: float = 0.0, match: str = "") -> None:
        self.mode, self.delay_s, self.match = mode, delay_s, match

    def _forward(self, h: BaseHTTPRequestHandler, body: bytes | None) -> tuple[int, str, bytes]:
        host = self.upstream.hostname or "127.0.0.1"
        conn = http.client.HTTPConnection(host, self.upstream.port, timeout=30)
        try:
            headers = {"Content-Type": h.headers.get("Content-Type") or ""} if body else {}
            conn.request(h.command, h.path, body=body, headers=headers)
            answer = conn.getresponse()
            return answer.status, answer.getheader("Content-Type") or "", answer.read()
        finally:
            conn.close()

    def _answer(self, h: BaseHTTPRequestHandler, body: bytes | None) -> None:
        try:
            self._handle(h, body)
        except OSError:  # the client gave up first (a slow answer past its timeout)
            h.close_connection = True

    def _handle(self, h: BaseHTTPRequestHandler, body: bytes | None) -> None:
        mode = self.mode
        with self._lock:
            self.requests[mode] = self.requests.get(mode, 0) + 1
        if mode == "slow":
            time.sleep(self.delay_s)
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(h.path).query)
        if body:
            query.update(urllib.parse.parse_qs(body.decode()))
        promql = " ".join(query.get("query") or ())
        failing = mode == "error" or (
            mode == "fail-query" and h.path.startswith("/api/v1/query") and self.match in promql
        )
        if failing:
            data = b"upstream connect error or disconnect/reset before headers\n"
            h.send_response(500)
            h.send_header("Content-Type", "text/plain")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        try:
            status, ctype, data = self._forward(h, body)
        except OSError:
            h.close_connection = True
            return  # Prometheus not there: hang up, as a proxy with no upstream may
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        if mode == "truncate":
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(data[: len(data) // 2])
            h.wfile.flush()
            h.close_connection = True
            return
        h.end_headers()
        h.wfile.write(data)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class Stack:
    hot: KreaNode
    cool: KreaNode
    prom: Prometheus
    proxy: FaultyProxy


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    require_binary("prometheus")
    hot = start_krea_node(HOT, PROCFS_TREE, gpus=GPUS)
    cool = start_krea_node(COOL, PROCFS_TREE, gpus=GPUS, seed=1)
    prom = Prometheus([Target(hot.address, "krea"), Target(cool.address, "krea")])
    proxy = FaultyProxy(prom.url)
    try:
        prom.wait_scrapes("krea", 2)
        yield Stack(hot, cool, prom, proxy)
    finally:
        proxy.close()
        prom.stop()
        for node in (hot, cool):
            with contextlib.suppress(Exception):  # (the stale test stops one itself)
                node.stop()


def set_hot(node: KreaNode, temperature_c: int) -> None:
    for gpu in node.nvml.gpus:
        gpu.update(temperature_c=temperature_c)


def verdict(url: str, node: str) -> Severity:
    """The node's verdict from Prometheus now (straight, not through the proxy)."""
    from krea_ops.health import node_verdict

    with PrometheusSource(url, SETTINGS) as source:
        tel = source.collect(families=("verdicts",)).nodes.get(node)
    return node_verdict(None, tel, POLICY).severity


def gpu_nodes(cluster: Cluster) -> None:
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    for name in (HOT, COOL):
        create(cluster, "/api/v1/nodes", {"metadata": {"name": name}})
        set_status(
            cluster,
            f"/api/v1/nodes/{name}",
            {
                "capacity": {"nvidia.com/gpu": str(GPUS)},
                "allocatable": {"nvidia.com/gpu": str(GPUS)},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        )


def cli(capsys: pytest.CaptureFixture[str], sim: LocalApiServer, url: str, *args: str
        ) -> tuple[int, str, str]:  # fmt: skip
    capsys.readouterr()
    code = invoke(["--kubeconfig", str(sim.kubeconfig), "--prometheus", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def commands_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    monkeypatch.setenv("KREA_OPS_TELEMETRY_WINDOW_S", str(WINDOW_S))
    monkeypatch.setenv("KREA_OPS_TELEMETRY_STALE_S", str(STALE_S))
    monkeypatch.setenv("KREA_OPS_TELEMETRY_TIMEOUT_S", str(TIMEOUT_S))
    monkeypatch.delenv("KREA_OPS_PROMETHEUS_URL", raising=False)


@pytest.mark.usefixtures("commands_env")
def test_read_commands_say_what_is_unknown_when_prometheus_is_down_slow_or_erroring(
    stack: Stack, sim: LocalApiServer, product: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu_nodes(product)
    proxy = stack.proxy
    proxy.set("pass")
    code, out, err = cli(capsys, sim, proxy.url, "nodes", "list", "-o", "json")
    assert code == 0 and err == "" and {r["name"] for r in json.loads(out)} == {HOT, COOL}
    down = f"http://127.0.0.1:{free_port()}"  # a Prometheus that is not there
    cases = [(proxy.url, mode, why) for mode, why in FAULTS.items()]
    cases.append((down, "down", "connection refused"))
    for url, mode, why in cases:
        proxy.set(mode, delay_s=3 * TIMEOUT_S)
        code, out, err = cli(capsys, sim, url, "nodes", "list", "-o", "json")
        # the nodes still print (the API answered), GPU nodes UNKNOWN, then one line
        assert code == 1, (mode, out, err)
        assert err.count("\n") == 1 and err.startswith("error: "), (mode, err)
        assert f"Prometheus at {url} is not answering ({why})" in err, (mode, err)
        rows = json.loads(out)
        assert {r["name"]: r["verdict"] for r in rows} == {HOT: "UNKNOWN", COOL: "UNKNOWN"}
        code, out, err = cli(capsys, sim, url, "gpus", "-o", "json")
        assert code == 1 and out == "" and err.count("\n") == 1, (mode, out, err)
        assert why in err, (mode, err)
    proxy.set("pass")
    code, _, err = cli(capsys, sim, proxy.url, "gpus", "-o", "json")
    assert code == 0 and err == ""


class Passes:
    """node-health and burst-taint as in their pods, reading Prometheus through ``url``,
    in simulated time (the readings are real, taken now)."""

    def __init__(self, cluster: Cluster, url: str, tmp: Path) -> None:
        self.clock = Clock()
        self.out = io.StringIO()
        self.metrics = ControllerMetrics()
        self.source = PrometheusSource(url, SETTINGS, policy=POLICY)
        # without the repair ladder: a node that cooled is restored after an hour OK
        self.node_health = NodeHealth(NodeHealthConfig(validate=False))
        self.burst_taint = BurstTaint(BurstTaintConfig(hold_s=0))
        self.runner = Runner(
            cluster,
            [self.node_health, self.burst_taint],
            lambda name: Inputs(
                cluster, self.source, POLICY, f"system:serviceaccount:krea-ops:{name}"
            ),
            identity="replica-a",
            audit=AuditLog(tmp / "audit.jsonl"),
            metrics=self.metrics,
            log=JsonLog(self.out, self.clock.wall),
            clock=self.clock.mono,
            wall=self.clock.wall,
        )

    def pass_at(self, t: float, controller: Controller[Any]) -> PassResult:
        self.clock.t = t
        assert self.runner.electors[controller.name].try_acquire_or_renew(t)
        return self.runner.pass_once(controller)

    def lines(self, event: str) -> list[dict[str, Any]]:
        records = [json.loads(line) for line in self.out.getvalue().splitlines()]
        return [r for r in records if r["event"] == event]

    def close(self) -> None:
        self.source.close()


def quarantined(cluster: Cluster) -> set[str]:
    out = set()
    for obj in cluster.get("nodes", "/api/v1/nodes").get("items") or ():
        spec = obj.get("spec") or {}
        if spec.get("unschedulable") or any(
            t.get("key") == TAINT_KEY for t in spec.get("taints") or ()
        ):
            out.add(obj["metadata"]["name"])
    return out


def test_controllers_change_nothing_while_prometheus_is_down_slow_or_erroring(
    stack: Stack, sim: LocalApiServer, product: Cluster, tmp_path: Path
) -> None:
    gpu_nodes(product)
    virtual_node(product, "vk-0")
    set_hot(stack.hot, 80)  # above the hot threshold, clear of the slowdown margin
    try:
        wait_until(lambda: verdict(stack.prom.url, HOT) is Severity.BAD, timeout=30)
        passes = Passes(product, stack.proxy.url, tmp_path)
        t = 0.0
        for mode, why in FAULTS.items():
            stack.proxy.set(mode, delay_s=3 * TIMEOUT_S)
            for controller in (passes.node_health, passes.burst_taint):
                result = passes.pass_at(t, controller)
                assert result.outcome == "ok" and result.runs == [], (mode, controller.name)
                assert result.decision is not None and not result.decision.acts
                alerts = [a for a in result.decision.alerts if a.kind == "stale-input"]
                assert len(alerts) == 1 and why in alerts[0].message, (mode, alerts)
            t += MINUTE
        assert quarantined(product) == set()
        logged = passes.lines("alert")
        assert {r["controller"] for r in logged} == {"node-health", "burst-taint"}
        assert all(r["kind"] == "stale-input" and "\n" not in r["message"] for r in logged)
        text = passes.metrics.text()
        for name in ("node-health", "burst-taint"):
            line = (
                f'krea_ops_controller_alerts_active{{controller="{name}",kind="stale-input"}} 1.0'
            )
            assert line in text, text
        # Prometheus answers again: the node that was hot all along is evicted now
        stack.proxy.set("pass")
        result = passes.pass_at(t, passes.node_health)
        assert [(r.plan.action, r.status) for r in result.runs] == [("nodes evict", "done")]
        assert quarantined(product) == {HOT}
        # one query failing (the GPU temperatures): the node still hot must not be
        # taken for healthy and restored an hour later
        stack.proxy.set("fail-query", match="temperature")
        start = t
        while t < start + 2 * HOUR:
            t += 20 * MINUTE
            result = passes.pass_at(t, passes.node_health)
            assert result.runs == [], (t - start, result.runs)
            assert result.decision is not None
            assert result.decision.gauges["unknown_nodes"] == 2
            assert any(a.kind == "stale-input" for a in result.decision.alerts)
        assert quarantined(product) == {HOT}
        stack.proxy.set("pass")
        set_hot(stack.hot, 40)
        wait_until(lambda: verdict(stack.prom.url, HOT) is Severity.OK, timeout=30)
        restored: list[RunResult] = []
        start = t
        while not restored and t < start + 3 * HOUR:
            t += 20 * MINUTE
            result = passes.pass_at(t, passes.node_health)
            restored = [r for r in result.runs if r.plan.action == "nodes restore"]
        assert [r.status for r in restored] == ["done"] and t - start >= HOUR
        assert quarantined(product) == set()
        passes.close()
    finally:
        stack.proxy.set("pass")
        set_hot(stack.hot, 40)


def test_the_dashboard_keeps_the_last_good_view_greyed_with_its_age_and_the_error(
    stack: Stack, sim: LocalApiServer, product: Cluster
) -> None:
    gpu_nodes(product)
    settings = load_settings(
        {
            "kubeconfig": str(sim.kubeconfig),
            "prometheus_url": stack.proxy.url,
            "telemetry_window_s": WINDOW_S,
            "telemetry_stale_s": STALE_S,
            "telemetry_timeout_s": TIMEOUT_S,
        },
        env={},
    )
    app = KreaOpsApp(Console(settings), refresh_s=1.0)

    def error_line() -> str:
        line = app.screen.query_one("#error-line")
        return str(line.render()) if line.display else ""

    def header() -> str:
        return str(app.screen.query_one("#status-bar").render())

    def temperatures() -> dict[tuple[str, int], float | None]:
        snap = app.fleet_snapshot()
        if snap is None:
            return {}
        return {
            (v.info.name, g.index): g.temperature_c
            for v in snap.views
            for g in (v.telemetry.gpus if v.telemetry else ())
        }

    async def body() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            heatmap = app.screen.query_one(GpuHeatmap)
            await pump_until(pilot, lambda: len(temperatures()) == 2 * GPUS)
            await pump_until(pilot, lambda: error_line() == "")
            assert all(t is not None for t in temperatures().values())
            stack.proxy.set("error")
            text = await pump_until(pilot, lambda: "telemetry:" in (t := error_line()) and t)
            why = FAULTS["error"]  # (slow answers: tests/screens/test_outage.py)
            assert f"Prometheus at {stack.proxy.url} is not answering ({why})" in text
            # the readings of the last good read stay, greyed, the header ageing
            kept = temperatures()
            assert len(kept) == 2 * GPUS and all(t is not None for t in kept.values())
            assert heatmap.has_class("stale")
            assert app.screen.query_one("#status-bar").has_class("-stale")
            age = app.data_age("fleet") or 0.0
            await pump_until(pilot, lambda: (app.data_age("fleet") or 0) > age + 1)
            assert "old" in header() and temperatures() == kept
            snap = app.fleet_snapshot()
            assert snap is not None
            assert all(v.verdict.severity is not Severity.UNKNOWN for v in snap.views)
            stack.proxy.set("pass")
            await pump_until(pilot, lambda: "telemetry:" not in error_line())
            assert not heatmap.has_class("stale")

    try:
        asyncio.run(body())
    finally:
        stack.proxy.set("pass")


@pytest.mark.usefixtures("commands_env")
def test_stale_series_are_unknown_never_grounds_for_a_cordon(
    stack: Stack,
    sim: LocalApiServer,
    product: Cluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gpu_nodes(product)
    # the cool node's GPUs run hot, then its exporter stops: its last samples are hot
    set_hot(stack.cool, 80)
    wait_until(lambda: verdict(stack.prom.url, COOL) is Severity.BAD, timeout=30)
    stack.cool.stop()
    with PrometheusSource(stack.prom.url, SETTINGS) as source:
        wait_until(lambda: source.collect().nodes[COOL].stale, timeout=30)
    passes = Passes(product, stack.prom.url, tmp_path)
    t = 0.0
    while t < 2 * HOUR:
        result = passes.pass_at(t, passes.node_health)
        assert result.outcome == "ok" and result.runs == [], (t, result.runs)
        assert result.decision is not None
        assert result.decision.gauges["unknown_nodes"] == 1
        assert result.decision.gauges["bad_nodes"] == 0
        t += 30 * MINUTE
    passes.close()
    assert quarantined(product) == set()
    # the read commands say it is unknown, and since when
    code, out, err = cli(capsys, sim, stack.prom.url, "nodes", "list", "-o", "json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and err == "", err
    assert rows[COOL]["verdict"] == "UNKNOWN" and rows[HOT]["verdict"] != "UNKNOWN"
    assert "last sample" in json.dumps(rows[COOL]["reasons"])
    code, out, err = cli(capsys, sim, stack.prom.url, "gpus", "-o", "json")
    gpus = [g for g in json.loads(out) if g["node"] == COOL]
    assert code == 0 and gpus and all(g["temperature_c"] is None for g in gpus), gpus
    assert all(g["verdict"] == "UNKNOWN" for g in gpus)
