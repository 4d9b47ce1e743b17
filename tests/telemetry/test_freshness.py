"""Stale or missing is unknown, never healthy; a Prometheus that is down fails the command.

A real Prometheus scrapes two of our exporters; one is stopped. Its node first shows its
exporter down with Prometheus's own scrape error, then, past the staleness limit, stale.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from krea_ops import units
from krea_ops.errors import Unavailable
from krea_ops.telemetry import PrometheusSource
from krea_ops.telemetry.dialects import VERDICTS
from tests.conftest import Exporter, free_port
from tests.telemetry.conftest import Prometheus, Target, settings, start_krea_node, wait_until

STALE_S = 4.0


def test_a_stopped_exporter_is_down_then_stale_never_healthy(
    tmp_path: Path, running_exporter: type[Exporter]
) -> None:
    # real processes: stopping one closes its kept-alive connections too
    args = ("--gpu-backend", "fake", "--fake-gpus", "2", "--sysfs", str(tmp_path))
    gone = running_exporter(*args, "--node-name", "gone")
    stays = running_exporter(*args, "--node-name", "stays")
    # (each target labelled with its node, as the shipped scrape config's relabelling does)
    prom = Prometheus(
        [
            Target(gone.address, "krea", {"node": "gone"}),
            Target(stays.address, "krea", {"node": "stays"}),
        ]
    )
    source = PrometheusSource(prom.url, settings(telemetry_stale_s=STALE_S))
    try:
        prom.wait_scrapes("krea", 2)
        fleet = source.collect()
        assert fleet.nodes["gone"].exporter_up is True
        assert fleet.nodes["gone"].gpus[0].temperature_c is not None

        gone.stop()
        stopped_at = time.time()

        def down() -> bool:
            # (a scrape in flight as the process stops fails with "unexpected EOF"; the
            # next ones say what a user will see from then on: connection refused)
            node = source.collect().nodes.get("gone")
            return (
                node is not None
                and node.exporter_up is False
                and "connection refused" in (node.error or "")
            )

        wait_until(down, timeout=15)
        fleet = source.collect()
        node = fleet.nodes["gone"]
        assert node.exporter_up is False
        assert node.error is not None
        assert f"scrape of {gone.url} failing:" in node.error
        assert "connection refused" in node.error
        # no readings (not even the window's older ones), nothing that looks healthy
        assert all(
            g.temperature_c is None and g.temperature_min_window_c is None for g in node.gpus
        )
        assert all(g.up is None and g.nvlink_error_increase is None for g in node.gpus)
        assert node.ib_ports == () and node.nvlinks == ()
        assert node.last_sample_at is not None and node.last_sample_at <= stopped_at + 0.5
        assert fleet.nodes["stays"].exporter_up is True
        assert fleet.nodes["stays"].error is None
        assert fleet.errors == ()

        time.sleep(max(0.0, stopped_at + STALE_S + 1 - time.time()))
        node = source.collect().nodes["gone"]
        assert node.stale is True and node.exporter_up is False
        assert node.age_s is not None and node.age_s > STALE_S
        assert f"last sample {units.age(node.age_s)} ago" in (node.error or "")
        assert all(g.temperature_min_window_c is None for g in node.gpus)
        # asking for the node alone says the same
        assert source.collect({"gone"}).nodes["gone"].stale is True

        # past the freshness lookback its series are gone from every query: the scrape
        # error alone names it, asked for with the fleet or alone (the read of one node
        # learns which jobs serve telemetry from the fleet, as the fleet read does)
        lookback = max(10.0, 3 * STALE_S) + max(10.0, 3 * STALE_S) / 6
        time.sleep(max(0.0, stopped_at + lookback + 1 - time.time()))
        reads = {
            "fleet": source.collect(),
            "one node": source.collect({"gone"}),
            "verdicts (node summaries)": source.collect(families={VERDICTS}),
        }
        for what, read in reads.items():
            assert "gone" in read.nodes, what
            node = read.nodes["gone"]
            assert node.exporter_up is False and node.last_sample_at is None
            assert f"scrape of {gone.url} failing:" in (node.error or "")
            assert node.gpus == () and node.ib_ports == ()
    finally:
        source.close()
        prom.stop()


def test_prometheus_down_is_one_line_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with PrometheusSource(url, settings()) as source, pytest.raises(Unavailable) as info:
        source.collect()
    message = str(info.value)
    assert url in message and "connection refused" in message
    assert "--prometheus" in message and "\n" not in message
    assert info.value.exit_code == 1
    assert time.monotonic() - start < 5


def test_a_url_that_is_not_prometheus_is_unavailable(tmp_path: Path) -> None:
    exporter = start_krea_node("n", tmp_path, gpus=0)  # answers 404 outside /metrics
    try:
        base = f"http://{exporter.address}"
        with PrometheusSource(base, settings()) as source, pytest.raises(Unavailable) as info:
            source.collect()
        assert base in str(info.value) and "HTTP 404" in str(info.value)
    finally:
        exporter.stop()
