"""Assemble the node exporter: collectors, self-metrics, and the HTTP endpoint.

A scrape runs each collector in turn; a collector that raises costs only its own
families and is reported as ``krea_exporter_collector_success{collector} 0``. A scraper
that hangs up before its answer is written (Prometheus stopping, a timed-out ``curl``) is
routine: no traceback, one more ``krea_exporter_scrape_aborted_total``. A client that
goes silent without hanging up (its host gone, a partition) is let go after
``CLIENT_TIMEOUT_S`` without a read or write making progress, so it cannot hold a thread.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

import krea_ops
from krea_ops.errors import BadInput
from krea_ops.exporters.exposition import CONTENT_TYPE, CachedTextRenderer
from krea_ops.exporters.folds import node_fold_metrics
from krea_ops.serving import ConnectionTrackingServer
from krea_ops.settings import GPU_BACKENDS, Settings


class Collector(Protocol):
    name: str

    def collect(self) -> Iterable[Metric]: ...

    def close(self) -> None: ...


class _SelfMetrics:
    """Runs the collectors and reports how each one did in the same scrape."""

    def __init__(
        self, collectors: list[Collector], node: str, notes: list[Metric], exporter: Exporter
    ) -> None:
        self._collectors = collectors
        self._node = node
        self._notes = notes
        self._exporter = exporter

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        duration = GaugeMetricFamily(
            "krea_exporter_collector_duration_seconds",
            "Time the collector took in this scrape.",
            labels=["node", "collector"],
        )
        success = GaugeMetricFamily(
            "krea_exporter_collector_success",
            "1 if the collector finished this scrape without an error, else 0.",
            labels=["node", "collector"],
        )
        served: list[Metric] = []
        for collector in self._collectors:
            start = time.perf_counter()
            try:
                families = list(collector.collect())
                ok = 1.0
            except Exception as exc:  # one collector never fails the others
                families = []
                ok = 0.0
                print(
                    f"krea-ops exporter: collector {collector.name} failed: {exc!r}",
                    file=sys.stderr,
                )
            # Measured before yielding: the time to render text is not the collector's.
            duration.add_metric([self._node, collector.name], time.perf_counter() - start)
            success.add_metric([self._node, collector.name], ok)
            served += families
            yield from families
        # the per-node folds of this very scrape (krea_ops/exporters/folds.py)
        yield from node_fold_metrics(self._node, served)
        yield duration
        yield success
        build = GaugeMetricFamily(
            "krea_exporter_build_info",
            "krea-ops exporter version; value is 1.",
            labels=["node", "version"],
        )
        build.add_metric([self._node, krea_ops.__version__], 1.0)
        yield build
        aborted = CounterMetricFamily(
            "krea_exporter_scrape_aborted",
            "Scrapes whose client hung up before the answer was written.",
            labels=["node"],
        )
        aborted.add_metric([self._node], float(self._exporter.aborted_scrapes))
        yield aborted
        yield from self._notes


def nvml_unavailable_metrics(node: str, reason: str) -> list[Metric]:
    """Series that say, in the scrape itself, why there are no GPU metrics."""
    available = GaugeMetricFamily(
        "krea_gpu_nvml_available",
        "1 if NVML loaded and GPU metrics are collected, 0 if it could not be loaded.",
        labels=["node"],
    )
    available.add_metric([node], 0.0)
    info = GaugeMetricFamily(
        "krea_gpu_nvml_load_error_info",
        "Why NVML could not be loaded; value is 1.",
        labels=["node", "reason"],
    )
    info.add_metric([node, reason], 1.0)
    return [available, info]


def nvml_available_metrics(node: str) -> list[Metric]:
    available = GaugeMetricFamily(
        "krea_gpu_nvml_available",
        "1 if NVML loaded and GPU metrics are collected, 0 if it could not be loaded.",
        labels=["node"],
    )
    available.add_metric([node], 1.0)
    return [available]


@dataclass
class _Flight:
    """A render in progress and, once ``done``, its body (None: it raised)."""

    done: threading.Event = field(default_factory=threading.Event)
    body: bytes | None = None


@dataclass
class Exporter:
    """The collectors of one node and the registry that serves them."""

    node: str
    collectors: list[Collector]
    notes: list[Metric] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    registry: CollectorRegistry = field(init=False)
    renderer: CachedTextRenderer = field(init=False)
    aborted_scrapes: int = field(init=False, default=0)
    _aborted_lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _flight: _Flight | None = field(init=False, default=None)
    _flight_lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_SelfMetrics(self.collectors, self.node, self.notes, self))
        self.renderer = CachedTextRenderer(self.registry)

    def scrape_aborted(self) -> None:
        """Count a scrape whose client went away before its answer was written."""
        with self._aborted_lock:  # handler threads run in parallel; += is not atomic
            self.aborted_scrapes += 1

    def scrape(self) -> bytes:
        """One scrape in the Prometheus text format.

        Requests that arrive while a scrape is being rendered get that scrape's answer
        instead of rendering again: on a starved CPU a scraper that timed out asks again
        while its first render still runs, and each one started anew made the next
        slower still (the simulator's 64 exporters ended with thousands of handler
        threads, every scrape past its timeout)."""
        with self._flight_lock:
            flight = self._flight
            leader = flight is None
            if flight is None:
                flight = self._flight = _Flight()
        if not leader:
            flight.done.wait()
            if flight.body is None:
                raise RuntimeError("the scrape this request waited for failed")
            return flight.body
        try:
            flight.body = self.renderer.render()
        finally:
            with self._flight_lock:
                self._flight = None
            flight.done.set()
        return flight.body

    def prime_gpm(self, interval_s: float) -> None:
        """For a one-shot scrape without background threads: two GPM samples one interval
        apart, so tensor activity has a value (a server's sampler thread does this itself)."""
        samplers = [c for c in self.collectors if hasattr(c, "sample_gpm")]
        if not samplers:
            return
        for c in samplers:
            c.sample_gpm()
        time.sleep(interval_s)
        for c in samplers:
            c.sample_gpm()

    def close(self) -> None:
        for collector in self.collectors:
            try:
                collector.close()
            except Exception as exc:
                print(f"krea-ops exporter: closing {collector.name}: {exc!r}", file=sys.stderr)


def default_node_name() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()


def build_exporter(settings: Settings, *, start_threads: bool = True) -> Exporter:
    """Create the collectors the settings ask for. Bad settings raise BadInput."""
    from krea_ops.exporters.infiniband import InfinibandCollector

    backend = settings.exporter_gpu_backend
    if backend not in GPU_BACKENDS:
        raise BadInput(
            f"unknown --gpu-backend {backend!r}: choose one of {', '.join(GPU_BACKENDS)}"
        )
    for flag, value in (
        ("--nvml-timeout", settings.exporter_nvml_call_timeout_s),
        ("--gpu-scrape-timeout", settings.exporter_gpu_scrape_timeout_s),
    ):
        if not (value > 0 and math.isfinite(value)):
            raise BadInput(f"{flag} must be more than 0 seconds, got {value!r}")
    node = settings.exporter_node_name or default_node_name()
    collectors: list[Collector] = [InfinibandCollector(settings.exporter_sysfs, node)]
    notes: list[Metric] = []
    warnings: list[str] = []

    nvml: Any = None
    if backend == "fake":
        from krea_ops.exporters.fakenvml import fake_h200_node

        if settings.exporter_fake_gpus < 0:
            raise BadInput("--fake-gpus must be 0 or more")
        nvml = fake_h200_node(count=settings.exporter_fake_gpus)
        nvml.nvmlInit()
    elif backend == "nvml":
        from krea_ops.exporters.nvml import NvmlUnavailable, load_nvml

        try:
            nvml = load_nvml()
        except NvmlUnavailable as exc:
            reason = str(exc)
            warnings.append(f"NVML unavailable ({reason}); serving InfiniBand metrics only")
            notes.extend(nvml_unavailable_metrics(node, reason))
    if nvml is not None:
        from krea_ops.exporters.nvml import GpuCollector

        gpu = GpuCollector(
            nvml,
            node,
            gpm_interval_s=settings.exporter_gpm_interval_s,
            xid_window_s=settings.exporter_xid_window_s,
            call_timeout_s=settings.exporter_nvml_call_timeout_s,
            scrape_timeout_s=settings.exporter_gpu_scrape_timeout_s,
        )
        if start_threads:
            gpu.start()
        collectors.insert(0, gpu)
        notes.extend(nvml_available_metrics(node))
    return Exporter(node=node, collectors=collectors, notes=notes, warnings=warnings)


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) into a bind address; BadInput otherwise."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not port_text.isdigit():
        raise BadInput(f"--listen {listen!r} must look like 127.0.0.1:9400")
    port = int(port_text)
    if port > 65535:
        raise BadInput(f"--listen {listen!r}: port must be 0-65535")
    host = host.strip("[]") or "127.0.0.1"
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise BadInput(f"--listen {listen!r}: {host!r} is not an IP address") from None
    return host, port


# Longer than any scrape interval in use (Prometheus reuses its connection between
# scrapes; one closed while idle is simply opened again).
CLIENT_TIMEOUT_S = 300.0


class _Handler(BaseHTTPRequestHandler):
    exporter: Exporter
    timeout = CLIENT_TIMEOUT_S  # socket timeout for each read and write
    server_version = "krea-ops-exporter/" + krea_ops.__version__
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes (keep-alive)

    def handle(self) -> None:
        # A client closing an idle keep-alive connection with a reset is routine too; it
        # is no aborted scrape (nothing was asked), so it is not counted.
        with contextlib.suppress(ConnectionError, TimeoutError):
            super().handle()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body, ctype, code = self.exporter.scrape(), CONTENT_TYPE, 200
        elif path == "/":
            body = b'<html><body><a href="/metrics">/metrics</a></body></html>\n'
            ctype, code = "text/html; charset=utf-8", 200
        else:
            body, ctype, code = b"not found: try /metrics\n", "text/plain; charset=utf-8", 404
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (ConnectionError, TimeoutError):  # the scraper hung up, or went silent
            self.close_connection = True
            self.exporter.scrape_aborted()

    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
        pass


class HttpEndpoint:
    """The exporter's /metrics endpoint on a background thread."""

    def __init__(
        self, exporter: Exporter, listen: str, *, client_timeout_s: float = CLIENT_TIMEOUT_S
    ) -> None:
        host, port = parse_listen(listen)
        handler = type("Handler", (_Handler,), {"exporter": exporter, "timeout": client_timeout_s})
        try:
            self._server = ConnectionTrackingServer((host, port), handler)
        except OSError as exc:
            raise BadInput(
                f"cannot listen on {listen}: {exc.strerror or exc} "
                "(is another exporter running? choose another --listen)"
            ) from None
        # serve_forever's poll interval only bounds how long stop() waits; the simulator
        # runs one endpoint per node, so a 0.1 s poll cost 30 % of a core at 512 nodes.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.5,), name="exporter-http", daemon=True
        )
        self._thread.start()
        bound = self._server.server_address
        self.host, self.port = str(bound[0]), int(bound[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
        self._thread.join(timeout=5)
