"""The exporter's HTTP endpoint when a scraper hangs up mid-response: routine, counted in
``krea_exporter_scrape_aborted_total``, no traceback, and the next scrape is served."""

from __future__ import annotations

import socket
import struct
import threading
import urllib.request
from collections.abc import Iterable, Iterator

import pytest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from krea_ops.exporters.server import Exporter, HttpEndpoint
from tests.conftest import wait_for


class HeldCollector:
    """A collector whose scrape waits until the test lets it go, so a client can hang up
    while its request is being answered."""

    name = "held"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.hold = True

    def collect(self) -> Iterable[Metric]:
        if self.hold:
            self.entered.set()
            assert self.release.wait(20), "the test never released the scrape"
        family = GaugeMetricFamily("krea_test_payload", "a large answer", labels=["i"])
        for i in range(5000):  # ~150 KB: more than one write to a socket that is gone
            family.add_metric([str(i)], float(i))
        yield family

    def close(self) -> None:
        pass


def aborted_total(url: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "krea_exporter_scrape_aborted_total":
                return sample.value
    raise AssertionError("no krea_exporter_scrape_aborted_total in the scrape")


def hang_up_with_reset(sock: socket.socket) -> None:
    """Close so that the kernel sends RST at once (what a killed scraper's host does)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.fixture
def held() -> Iterator[tuple[HeldCollector, HttpEndpoint]]:
    collector = HeldCollector()
    exporter = Exporter(node="n1", collectors=[collector])
    endpoint = HttpEndpoint(exporter, "127.0.0.1:0")
    try:
        yield collector, endpoint
    finally:
        collector.release.set()
        endpoint.stop()


def test_a_scraper_hanging_up_mid_response_is_counted_without_a_traceback(
    held: tuple[HeldCollector, HttpEndpoint], capfd: pytest.CaptureFixture[str]
) -> None:
    collector, endpoint = held
    client = socket.create_connection((endpoint.host, endpoint.port), timeout=10)
    client.sendall(b"GET /metrics HTTP/1.1\r\nHost: n1\r\n\r\n")
    assert collector.entered.wait(20), "the request never reached the collector"
    hang_up_with_reset(client)
    collector.hold = False
    collector.release.set()  # the handler now writes its answer to a socket that is gone

    assert wait_for(lambda: aborted_total(endpoint.url) == 1.0, timeout=20)
    # the endpoint keeps serving, and the hang-up printed nothing
    body = urllib.request.urlopen(endpoint.url, timeout=10).read().decode()
    assert 'krea_test_payload{i="4999"} 4999.0' in body
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
    assert "BrokenPipeError" not in err and "ConnectionResetError" not in err, err


def test_an_idle_keep_alive_connection_reset_is_not_an_aborted_scrape(
    held: tuple[HeldCollector, HttpEndpoint], capfd: pytest.CaptureFixture[str]
) -> None:
    collector, endpoint = held
    collector.hold = False
    client = socket.create_connection((endpoint.host, endpoint.port), timeout=10)
    client.sendall(b"GET /metrics HTTP/1.1\r\nHost: n1\r\n\r\n")
    reader = client.makefile("rb")
    assert reader.readline().startswith(b"HTTP/1.1 200")
    length = 0
    while (line := reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    assert len(reader.read(length)) == length  # the whole answer: this scrape succeeded
    reader.close()
    hang_up_with_reset(client)  # the handler is waiting for the next request line

    assert aborted_total(endpoint.url) == 0.0
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
