"""A real Prometheus scrapes ``krea-ops exporter run`` on loopback; we read it back.

Also ``promtool check metrics`` on a real scrape of a full node (8 GPUs, 3 HCAs).
"""

from __future__ import annotations

import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_api_client import PrometheusConnect
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import PROCFS_TREE, cli, free_port, require_binary, wait_for


def test_promtool_accepts_a_full_node_scrape() -> None:
    promtool = require_binary("promtool")
    scrape = cli(
        "exporter",
        "once",
        "--gpu-backend",
        "fake",
        "--gpm-interval",
        "0.2",
        "--sysfs",
        str(PROCFS_TREE),
    )
    assert scrape.returncode == 0, scrape.stderr
    assert "krea_gpu_temperature_celsius" in scrape.stdout
    check = subprocess.run(
        [promtool, "check", "metrics"],
        input=scrape.stdout,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.fixture
def prometheus_server(running_exporter) -> Iterator[tuple[PrometheusConnect, object]]:  # type: ignore[no-untyped-def]
    binary = require_binary("prometheus")
    exporter = running_exporter(
        "--gpu-backend",
        "fake",
        "--fake-gpus",
        "8",
        "--gpm-interval",
        "0.2",
        "--sysfs",
        str(PROCFS_TREE),
        "--node-name",
        "gpu-node-1",
    )
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: krea-ops-exporter\n"
            f"    static_configs:\n      - targets: ['{exporter.address}']\n"
        )
        port = free_port()
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp}/data",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:

            def ready() -> bool:
                try:
                    return urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200
                except OSError:
                    return False

            wait_for(ready, timeout=30)
            yield PrometheusConnect(url=url, disable_ssl=True), exporter
        finally:
            proc.terminate()
            proc.wait(timeout=15)


def test_prometheus_scrapes_the_exporter_and_reads_back_values(prometheus_server) -> None:  # type: ignore[no-untyped-def]
    prom, exporter = prometheus_server

    def up() -> list:
        return prom.custom_query('up{job="krea-ops-exporter"} == 1')

    wait_for(up, timeout=30)
    temps = wait_for(lambda: prom.custom_query("krea_gpu_temperature_celsius"), timeout=30)
    assert len(temps) == 8
    assert {t["metric"]["node"] for t in temps} == {"gpu-node-1"}
    assert {t["metric"]["gpu"] for t in temps} == {str(i) for i in range(8)}
    assert all(20.0 < float(t["value"][1]) < 100.0 for t in temps)

    # The same number Prometheus stored is the one the exporter serves right now.
    direct = urllib.request.urlopen(exporter.url, timeout=10).read().decode()
    rcv = prom.custom_query('krea_ib_port_data_received_bytes_total{device="mlx5_0",port="1"}')
    assert len(rcv) == 1
    assert float(rcv[0]["value"][1]) == 18126345378 * 4
    served = [
        s.value
        for family in text_string_to_metric_families(direct)
        for s in family.samples
        if s.name == "krea_ib_port_data_received_bytes_total"
        and s.labels.get("device") == "mlx5_0"
        and s.labels.get("port") == "1"
    ]
    assert served == [float(rcv[0]["value"][1])]

    # A ratio Prometheus can compute across GPUs: tensor activity stays within 0..1.
    avg = prom.custom_query("avg(krea_gpu_tensor_active_ratio)")
    assert avg and 0.0 <= float(avg[0]["value"][1]) <= 1.0
