"""Real parts for telemetry tests: a Prometheus binary on a temp dir, in-process exporters
(our own, with simulated H200s and a sysfs fixture) and tiny HTTP servers serving peer
exporters' text (dcgm-exporter, node_exporter)."""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from krea_ops.exporters.fakenvml import FakeNvml, fake_h200_node
from krea_ops.exporters.infiniband import InfinibandCollector
from krea_ops.exporters.nvml import GpuCollector
from krea_ops.exporters.server import Exporter, HttpEndpoint, nvml_available_metrics
from krea_ops.settings import Settings
from tests.conftest import free_port, require_binary, wait_for

SCRAPE_INTERVAL_S = 1


def settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "telemetry_window_s": 10.0,
        "telemetry_stale_s": 30.0,
        "telemetry_timeout_s": 5.0,
        "telemetry_scrape_gap_s": 1.0,
    }
    return Settings(**{**base, **overrides})


class TextServer:
    """Serves ``body()`` as Prometheus text on /metrics; ``stop()`` closes the port."""

    def __init__(self, body: Callable[[], str]) -> None:
        self.body = body
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                data = outer.body().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.2,))
        self._thread.daemon = True
        self._thread.start()
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self.url = f"http://{self.address}/metrics"
        self.stopped = False

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self._server.shutdown()
            self._server.server_close()


@dataclass
class KreaNode:
    """Our exporter in this process: simulated H200s (``nvml``) and a sysfs tree."""

    node: str
    nvml: FakeNvml
    exporter: Exporter
    endpoint: HttpEndpoint

    @property
    def address(self) -> str:
        return f"{self.endpoint.host}:{self.endpoint.port}"

    @property
    def url(self) -> str:
        return self.endpoint.url

    def stop(self) -> None:
        self.endpoint.stop()
        self.exporter.close()


def start_krea_node(node: str, sysfs: Path | str, gpus: int = 8, seed: int = 0) -> KreaNode:
    nvml = fake_h200_node(gpus, seed=seed)
    nvml.nvmlInit()
    gpu = GpuCollector(nvml, node, gpm_interval_s=0.2, xid_window_s=600.0, event_wait_ms=100)
    gpu.start()
    exporter = Exporter(
        node=node,
        collectors=[gpu, InfinibandCollector(str(sysfs), node)],
        notes=nvml_available_metrics(node),
    )
    return KreaNode(node, nvml, exporter, HttpEndpoint(exporter, "127.0.0.1:0"))


@dataclass
class Target:
    address: str
    job: str
    labels: dict[str, str] = field(default_factory=dict)


class Prometheus:
    """The real ``prometheus`` binary on a temp dir, scraping ``targets`` every second."""

    def __init__(
        self,
        targets: list[Target],
        interval_s: float = SCRAPE_INTERVAL_S,
        rules: str = "",
        port: int | None = None,
        remote_write: str | None = None,
    ) -> None:
        """``rules``: the text of a rule file Prometheus evaluates every interval.
        ``port``: listen there (a Prometheus restarted where the last one was).
        ``remote_write``: a remote-write URL every sample is also sent to, in batches
        of at most a second (a VictoriaMetrics fed the same scrapes)."""
        binary = require_binary("prometheus")
        self._tmp = tempfile.TemporaryDirectory()
        tmp = Path(self._tmp.name)
        jobs: dict[str, list[Target]] = {}
        for t in targets:
            jobs.setdefault(t.job, []).append(t)
        lines = [
            "global:",
            f"  scrape_interval: {interval_s:g}s",
            f"  scrape_timeout: {interval_s:g}s",
            f"  evaluation_interval: {interval_s:g}s",
        ]
        if remote_write:
            lines += [
                "remote_write:",
                f"  - url: {remote_write}",
                "    queue_config:",
                "      batch_send_deadline: 1s",
                "      min_backoff: 100ms",
                "      max_backoff: 1s",
            ]
        if rules:
            (tmp / "rules.yaml").write_text(rules)
            lines += ["rule_files:", f"  - {tmp / 'rules.yaml'}"]
        lines.append("scrape_configs:")
        for job, members in jobs.items():
            lines += [f"  - job_name: {job}", "    static_configs:"]
            for t in members:
                lines.append(f"      - targets: ['{t.address}']")
                if t.labels:
                    lines.append("        labels:")
                    lines += [f"          {k}: '{v}'" for k, v in t.labels.items()]
        (tmp / "prometheus.yml").write_text("\n".join(lines) + "\n")
        port = port or free_port()
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def ready() -> bool:
            try:
                return urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).status == 200
            except OSError:
                return False

        try:
            wait_for(ready, timeout=30)
        except BaseException:
            self.stop()
            raise

    def scrapes_done(self, job: str, count: int = 3) -> bool:
        """True once every target of ``job`` has been scraped ``count`` times."""
        query = f"min(count_over_time(up{{job='{job}'}}[5m]))"
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        with urllib.request.urlopen(url, timeout=5) as response:
            result = json.load(response)["data"]["result"]
        return bool(result) and float(result[0]["value"][1]) >= count

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query at now: the result's series."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as response:
            return list(json.load(response)["data"]["result"])

    def wait_scrapes(self, job: str, count: int = 3, timeout: float = 40) -> None:
        wait_for(lambda: self.scrapes_done(job, count), timeout=timeout, interval=0.25)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._tmp.cleanup()


@pytest.fixture
def text_servers() -> Iterator[list[TextServer]]:
    started: list[TextServer] = []
    yield started
    for s in started:
        s.stop()


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"not reached within {timeout}s: {last!r}")
