"""``krea-ops sim serve --api-only`` as a process: kubeconfig, loopback, restarts, kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import yaml
from kubernetes import client, config

from tests.conftest import ROOT, cli


def _start(state, kubeconfig) -> tuple[subprocess.Popen[str], str]:  # type: ignore[no-untyped-def]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "commands",
            "sim",
            "serve",
            "--api-only",
            "--state",
            str(state),
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "KREA_OPS_CONFIG": "/nonexistent"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("API server: https://127.0.0.1:"), line + proc.stderr.read()
    proc.stdout.readline()  # kubeconfig line
    return proc, line.split()[-1]


def _core(kubeconfig) -> client.CoreV1Api:  # type: ignore[no-untyped-def]
    return client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))


def test_objects_survive_kill_9_and_versions_keep_rising(tmp_path) -> None:  # type: ignore[no-untyped-def]
    state, kubeconfig = tmp_path / "state", tmp_path / "kubeconfig"
    proc, url = _start(state, kubeconfig)
    try:
        written = yaml.safe_load(kubeconfig.read_text())
        assert written["clusters"][0]["cluster"]["server"] == url
        assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
        core = _core(kubeconfig)
        for i in range(20):
            core.create_namespaced_config_map(
                "default", {"metadata": {"name": f"c{i}"}, "data": {"i": str(i)}}
            )
        core.delete_namespaced_config_map("c0", "default")
        last_rv = int(core.list_namespaced_config_map("default").metadata.resource_version)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    proc, _url = _start(state, kubeconfig)
    try:
        core = _core(kubeconfig)
        names = [c.metadata.name for c in core.list_namespaced_config_map("default").items]
        assert sorted(names) == sorted(f"c{i}" for i in range(1, 20))
        assert core.read_namespaced_config_map("c7", "default").data == {"i": "7"}
        created = core.create_namespaced_config_map("default", {"metadata": {"name": "after"}})
        assert int(created.metadata.resource_version) > last_rv
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_bad_world_parameters_are_refused() -> None:
    result = cli("sim", "serve", "--nodes", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --nodes and --gpus-per-node must be >= 1 and --speed > 0"
    ]


def test_inject_rejects_an_unknown_fault_kind() -> None:
    result = cli("sim", "inject", "meteor", "gpu-node-001")
    assert result.returncode == 2
    assert "unknown fault 'meteor'" in result.stderr


def test_inject_without_a_cluster_is_one_line_exit_2(tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = cli(
        "--kubeconfig", str(tmp_path / "missing"), "sim", "inject", "crash", "gpu-node-001"
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: kubeconfig {tmp_path / 'missing'} does not exist"
    ]


def test_unwritable_state_is_bad_input(tmp_path) -> None:  # type: ignore[no-untyped-def]
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = cli("sim", "serve", "--api-only", "--state", str(blocker / "sub"))
    assert result.returncode == 2 and "not a writable directory" in result.stderr


def test_world_mode_prints_exporters_and_stops_cleanly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "commands",
            "sim",
            "serve",
            "--nodes",
            "3",
            "--speed",
            "60",
            "--seed",
            "5",
            "--state",
            str(tmp_path / "state"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "KREA_OPS_CONFIG": "/nonexistent"},
    )
    try:
        assert proc.stdout is not None
        lines = []
        while not lines or not lines[-1].startswith("try:"):
            line = proc.stdout.readline()
            assert line, "".join(lines) + proc.stderr.read()
            lines.append(line)
        exporters = [ln for ln in lines if ln.startswith("exporter gpu-node-")]
        assert len(exporters) == 3
        assert any(ln.startswith("world: 3 nodes x 8 GPUs, speed 60.0x, seed 5") for ln in lines)
        kubeconfig = next(ln.split()[-1] for ln in lines if ln.startswith("kubeconfig:"))
        core = _core(kubeconfig)
        names = [n.metadata.name for n in core.list_node().items]
        assert {"gpu-node-000", "gpu-node-001", "gpu-node-002"} <= set(names)
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
