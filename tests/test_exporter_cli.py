"""``krea-ops exporter run|once`` as an operator runs them, including bad input."""

from __future__ import annotations

import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import NODE_EXPORTER_TREE, PROCFS_TREE, cli, wait_for


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _one(samples: dict, name: str, **labels: str) -> float:
    hits = [
        v
        for (n, ls), v in samples.items()
        if n == name and all(dict(ls).get(k) == val for k, val in labels.items())
    ]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_once_prints_a_full_node_scrape_with_gpus_and_infiniband() -> None:
    result = cli(
        "exporter",
        "once",
        "--gpu-backend",
        "fake",
        "--fake-gpus",
        "8",
        "--gpm-interval",
        "0.2",
        "--sysfs",
        str(PROCFS_TREE),
        "--node-name",
        "n1",
    )
    assert result.returncode == 0, result.stderr
    samples = _samples(result.stdout)
    ups = [v for (n, _), v in samples.items() if n == "krea_gpu_up"]
    assert ups == [1.0] * 8
    assert _one(samples, "krea_gpu_nvml_available", node="n1") == 1.0
    # mlx5_0 port 1 port_rcv_data is 18126345378 four-byte words in the procfs fixture.
    assert (
        _one(samples, "krea_ib_port_data_received_bytes_total", device="mlx5_0", port="1")
        == 18126345378 * 4
    )
    assert _one(samples, "krea_exporter_collector_success", collector="infiniband") == 1.0
    assert _one(samples, "krea_exporter_collector_success", collector="gpu") == 1.0
    tensor = [v for (n, _), v in samples.items() if n == "krea_gpu_tensor_active_ratio"]
    assert len(tensor) == 8 and all(0.0 <= v <= 1.0 for v in tensor)


def test_once_without_gpus_serves_infiniband_only() -> None:
    result = cli("exporter", "once", "--gpu-backend", "none", "--sysfs", str(NODE_EXPORTER_TREE))
    assert result.returncode == 0, result.stderr
    samples = _samples(result.stdout)
    assert not any(n.startswith("krea_gpu_") for n, _ in samples)
    assert _one(samples, "krea_ib_state_id", device="mlx4_0", port="1") == 4.0


def test_nvml_missing_still_serves_infiniband_and_says_why() -> None:
    # This machine has no NVIDIA driver: exactly the "NVML cannot be loaded" case.
    result = cli(
        "exporter",
        "once",
        "--gpu-backend",
        "nvml",
        "--sysfs",
        str(NODE_EXPORTER_TREE),
        "--node-name",
        "n2",
    )
    assert result.returncode == 0, result.stderr
    assert "NVML unavailable" in result.stderr
    samples = _samples(result.stdout)
    assert _one(samples, "krea_gpu_nvml_available", node="n2") == 0.0
    reasons = [
        dict(ls)["reason"] for (n, ls), _ in samples.items() if n == "krea_gpu_nvml_load_error_info"
    ]
    assert len(reasons) == 1 and reasons[0]
    assert _one(samples, "krea_ib_state_id", device="mlx4_0", port="2") == 4.0


def _assert_one_line_error(result, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for word in words:
        assert word in lines[0]
    assert "Traceback" not in result.stderr


def test_unknown_gpu_backend_is_one_line_exit_2() -> None:
    _assert_one_line_error(cli("exporter", "once", "--gpu-backend", "cuda"), "cuda", "nvml")


def test_unreadable_sysfs_root_is_one_line_exit_2(tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "no-such-sys"
    _assert_one_line_error(
        cli("exporter", "once", "--gpu-backend", "none", "--sysfs", str(missing)), str(missing)
    )


def test_taken_port_is_one_line_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli(
            "exporter",
            "run",
            "--gpu-backend",
            "none",
            "--sysfs",
            str(NODE_EXPORTER_TREE),
            "--listen",
            f"127.0.0.1:{port}",
        )
    _assert_one_line_error(result, str(port))


def test_unknown_flag_is_one_line_exit_2() -> None:
    _assert_one_line_error(cli("exporter", "run", "--colour", "red"), "--colour")


def test_run_serves_over_http_and_stops_cleanly_on_sigterm(running_exporter) -> None:  # type: ignore[no-untyped-def]
    exp = running_exporter(
        "--gpu-backend", "fake", "--fake-gpus", "2", "--sysfs", str(NODE_EXPORTER_TREE)
    )
    assert exp.address.startswith("127.0.0.1:")
    body = urllib.request.urlopen(exp.url, timeout=10).read().decode()
    samples = _samples(body)
    assert len([1 for (n, _), _v in samples.items() if n == "krea_gpu_up"]) == 2
    assert exp.stop() == 0


def test_run_counts_a_scraper_hanging_up_mid_response_without_a_traceback(running_exporter) -> None:  # type: ignore[no-untyped-def]
    """Requests pipelined on one connection whose reader stops reading: the exporter's
    answers (~180 KB each with 8 GPUs) fill the socket buffers, so it is mid-write when
    the client closes with unread data (the kernel sends RST)."""
    exp = running_exporter(
        "--gpu-backend", "fake", "--fake-gpus", "8", "--sysfs", str(NODE_EXPORTER_TREE)
    )
    host, port = exp.address.rsplit(":", 1)
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    client.settimeout(20)
    client.connect((host, int(port)))
    client.sendall(b"GET /metrics HTTP/1.1\r\nHost: n1\r\n\r\n" * 64)  # ~11 MB of answers
    assert client.recv(1024).startswith(b"HTTP/1.1 200")  # it is writing them now
    client.close()

    def aborted() -> float:
        body = urllib.request.urlopen(exp.url, timeout=10).read().decode()
        return _one(_samples(body), "krea_exporter_scrape_aborted_total")

    assert wait_for(lambda: aborted() == 1.0, timeout=30)
    assert exp.stop() == 0
    err = exp.proc.stderr.read()
    assert "Traceback" not in err, err
    assert "exporter stopped" in err
