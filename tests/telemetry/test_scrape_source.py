"""ScrapeSource without Prometheus, and how open_source() picks a source.

Our exporter runs in this process on simulated H200s; a second node's exporter is a
closed port. Peer dialects (dcgm-exporter text) go through the same evaluation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from krea_ops.errors import Unavailable
from krea_ops.kube.client import api_client
from krea_ops.kube.cluster import Cluster
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.telemetry import PrometheusSource, ScrapeSource, open_source
from tests.conftest import PROCFS_TREE, free_port
from tests.telemetry.conftest import KreaNode, TextServer, settings, start_krea_node
from tests.telemetry.dcgm_text import DcgmGpu, dcgm_text

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def alive() -> Iterator[KreaNode]:
    node = start_krea_node("alive", PROCFS_TREE)
    yield node
    node.stop()


def test_two_rounds_then_previous_scrape_as_baseline(alive: KreaNode) -> None:
    dead_url = f"http://127.0.0.1:{free_port()}/metrics"
    source = ScrapeSource({"alive": alive.url, "dead": dead_url}, settings())
    try:
        assert source.describe() == "scrape of 2 exporters"
        start = time.monotonic()
        fleet = source.collect()
        first_s = time.monotonic() - start
        assert first_s >= 1.0  # two rounds, telemetry_scrape_gap_s apart
        assert fleet.source == "scrape of 2 exporters" and fleet.errors == ()
        assert 0.9 < fleet.window_s < 3

        dead = fleet.nodes["dead"]
        assert dead.exporter_up is False and dead.gpus == ()
        assert dead.error == f"GET {dead_url}: connection refused"

        node = fleet.nodes["alive"]
        assert node.exporter_up is True and node.age_s is not None and node.age_s < 2
        fake = alive.nvml.gpus
        assert [g.temperature_c for g in node.gpus] == [f.temperature_c for f in fake]
        assert [g.memory_used_bytes for g in node.gpus] == [f.memory_used_bytes for f in fake]
        assert node.gpus[0].nvlink_error_increase == {
            "replay": 0.0,
            "recovery": 0.0,
            "crc_flit": 0.0,
            "crc_data": 0.0,
        }
        ports = {p.name: p for p in node.ib_ports}
        assert ports["mlx5_0/1"].rx_bytes_per_s == 0.0 and ports["mlx5_0/1"].state == "ACTIVE"
        assert node.nvlinks == ()  # fleet view: no link has anything to report

        fake[2].nvlinks[5].replay = 10
        before = fake[6].temperature_c
        fake[6].temperature_c = 90
        time.sleep(0.3)
        start = time.monotonic()
        fleet = source.collect()
        assert time.monotonic() - start < 1.0  # one round: no sleeping
        node = fleet.nodes["alive"]
        (link,) = node.nvlinks
        assert link.name == "gpu2/link5" and link.errors_total["replay"] == 10
        assert link.error_rate_per_s["replay"] > 0
        assert node.gpus[2].nvlink_error_increase == pytest.approx(
            {"replay": 10.0, "recovery": 0.0, "crc_flit": 0.0, "crc_data": 0.0}
        )
        hot = node.gpus[6]  # hot now, but not over the whole window
        assert hot.temperature_c == 90 and hot.temperature_min_window_c == before

        # one node asked for: every link of it, and only it
        detail = source.collect({"alive"})
        assert set(detail.nodes) == {"alive"}
        assert len(detail.nodes["alive"].nvlinks) == 8 * 18
    finally:
        source.close()


def test_dcgm_text_scraped_directly(text_servers: list[TextServer]) -> None:
    gpus = [DcgmGpu(index=i) for i in range(2)]
    gpus[1].clock_mask = 0x4
    t0 = time.time()
    old = TextServer(lambda: dcgm_text(gpus, new_names=False, host="ignored", t0=t0))
    new = TextServer(lambda: dcgm_text(gpus, new_names=True, host="ignored", t0=t0))
    text_servers += [old, new]
    with ScrapeSource({"n-old": old.url, "n-new": new.url}, settings()) as source:
        fleet = source.collect()
    assert fleet.dialects == {"dcgm"}
    for name in ("n-old", "n-new"):  # the node is the ConfigMap's key, not a label
        g0, g1 = fleet.nodes[name].gpus
        assert g0.temperature_c == 60 and g0.util_ratio == pytest.approx(0.87)
        assert g0.memory_used_bytes == 81920 * MIB
        assert g0.sm_clock_hz == g0.sm_clock_max_hz == 1980e6
        assert g1.clock_events == {"sw_power_cap"}
        link = {ln.name: ln for ln in fleet.nodes[name].nvlinks}["gpu0/link3"]
        assert link.error_rate_per_s["replay"] == pytest.approx(2.0, abs=1.5)


def test_open_source_picks_flag_then_configmap_then_fails(tmp_path: Path) -> None:
    with pytest.raises(Unavailable) as info:
        open_source(settings(), None)
    assert str(info.value) == (
        "no Prometheus: pass --prometheus URL, set KREA_OPS_PROMETHEUS_URL, "
        "or set prometheusURL/exporters in ConfigMap krea-ops/krea-ops-config"
    )
    flagged = open_source(settings(prometheus_url="http://prom.example:9090/"), None)
    assert isinstance(flagged, PrometheusSource)
    assert flagged.describe() == "prometheus http://prom.example:9090"
    flagged.close()

    with LocalApiServer(tmp_path / "sim") as sim, api_client(str(sim.kubeconfig)) as api:
        cluster = Cluster(api)
        with pytest.raises(Unavailable, match="no Prometheus"):
            open_source(settings(), cluster)  # no ConfigMap at all
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="krea-ops")))
        exporters = {
            "gpu-1": "http://10.0.0.1:9400/metrics",
            "gpu-2": "http://10.0.0.2:9400/metrics",
        }
        core.create_namespaced_config_map(
            "krea-ops",
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="krea-ops-config"),
                data={"exporters": json.dumps(exporters)},
            ),
        )
        scrape = open_source(settings(), cluster)
        assert isinstance(scrape, ScrapeSource) and scrape.urls == exporters
        assert scrape.describe() == "scrape of 2 exporters"
        scrape.close()
        core.patch_namespaced_config_map(
            "krea-ops-config", "krea-ops", {"data": {"prometheusURL": "http://prom:9090"}}
        )
        prom = open_source(settings(), cluster)
        assert isinstance(prom, PrometheusSource) and prom.url == "http://prom:9090"
        prom.close()
        # the flag beats the ConfigMap
        flagged = open_source(settings(prometheus_url="http://other:9090"), cluster)
        assert isinstance(flagged, PrometheusSource) and flagged.url == "http://other:9090"
        flagged.close()
