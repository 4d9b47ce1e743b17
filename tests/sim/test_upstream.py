"""``krea-ops sim upstream build`` and ``sim serve --control-plane upstream`` as a user runs
them: the build's answers, the real versions served, everything stopped on SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import KUBECTL, ROOT, Kubectl, require_upstream

CLI = [sys.executable, "-m", "commands"]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "KREA_OPS_CONFIG": "/nonexistent", **(env or {})},
    )


def test_build_without_go_says_so_in_one_line(tmp_path: Path) -> None:
    # a PATH with bash and the usual tools but no go
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sha256sum", "cat", "cut", "sed", "head"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    result = _run("sim", "upstream", "build", env={"PATH": str(bin_dir)})
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: Go 1.26 is needed to build the upstream control plane; the embedded one "
        "needs nothing"
    )


def test_build_is_a_no_op_when_cached_and_names_the_pins() -> None:
    found = require_upstream()
    result = _run("sim", "upstream", "build")
    assert result.returncode == 0, result.stderr
    assert f"binaries: {found / 'bin'}" in result.stdout
    pins = (ROOT / "deploy" / "dev" / "upstream" / "versions.env").read_text()
    for line in pins.splitlines():
        if line and not line.startswith("#"):
            assert line.split("=")[1] in result.stdout
    assert "building" not in result.stderr  # found in the cache, nothing built


def test_bad_control_plane_is_bad_input() -> None:
    result = _run("sim", "serve", "--control-plane", "kind", "--api-only")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --control-plane 'kind': choose embedded or upstream"
    faults = _run("sim", "serve", "--control-plane", "upstream", "--faults", "/dev/null")
    assert faults.returncode == 2
    assert "fault switch" in faults.stderr and len(faults.stderr.strip().splitlines()) == 1


def _listening_ports(pids: set[int]) -> set[int]:
    """TCP ports in LISTEN state owned by ``pids`` (from /proc/net/tcp and their fds)."""
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                inodes[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)
    ports = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inode = target[8:-1]
                if inode in inodes:
                    ports.add(inodes[inode])
    return ports


def _children(root: int) -> set[int]:
    out = {root}
    changed = True
    while changed:
        changed = False
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in out:
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) in out:
                    out.add(int(entry))
                    changed = True
    return out


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_serve_upstream_runs_the_real_versions_and_stops_everything(tmp_path: Path) -> None:
    require_upstream()
    state = tmp_path / "state"
    proc = subprocess.Popen(
        [*CLI, "sim", "serve", "--control-plane", "upstream", "--api-only", "--state", str(state)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "KREA_OPS_CONFIG": "/nonexistent"},
    )
    try:
        assert proc.stdout is not None
        lines = []
        while not any(line.startswith("try:") for line in lines):
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            lines.append(line)
        kubeconfig = next(x for x in lines if x.startswith("kubeconfig: ")).split(": ", 1)[1]
        assert "control plane: upstream\n" in lines
        kubectl = Kubectl(Path(kubeconfig.strip()), tmp_path / "home")
        version = json.loads(kubectl("version", "-o", "json").stdout)
        pins = dict(
            line.split("=", 1)
            for line in (ROOT / "deploy/dev/upstream/versions.env").read_text().splitlines()
            if line and not line.startswith("#")
        )
        assert version["serverVersion"]["gitVersion"] == pins["KUBERNETES_VERSION"]
        # the project's Kueue setup is there, through Kueue's own webhooks
        queues = kubectl("get", "clusterqueues", "-o", "name").stdout.split()
        assert queues == [
            "clusterqueue.kueue.x-k8s.io/inference",
            "clusterqueue.kueue.x-k8s.io/training",
        ]
        # every component listens on loopback only
        pids = _children(proc.pid)
        names = {Path(f"/proc/{p}/comm").read_text().strip() for p in pids}
        assert {"etcd", "kube-apiserver", "kueue"} <= names, names
        ports = _listening_ports(pids)
        assert ports
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, state_ = fields[1], fields[3]
                if state_ == "0A" and int(local.rsplit(":", 1)[1], 16) in ports:
                    address = local.rsplit(":", 1)[0]
                    assert address in ("0100007F", "00000000000000000000000001000000"), line
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    time.sleep(1)
    alive = [p for p in pids if Path(f"/proc/{p}").exists()]
    assert alive == []
    for port in ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, port


def test_a_component_whose_port_was_taken_meanwhile_starts_again_on_new_ones(
    tmp_path: Path,
) -> None:
    """Between picking a free port and a component binding it, another process on a busy
    machine can take it: the component exits with "bind: address already in use"; it is
    started again on new ports (the API server's URL follows), but not when the caller gave
    the port."""
    from krea_ops.sim.upstream.controlplane import (
        PORT_TRIES,
        PortTaken,
        Process,
        UpstreamControlPlane,
    )

    plane = UpstreamControlPlane.__new__(
        UpstreamControlPlane
    )  # the plumbing only: nothing is started
    bind_error = "listen tcp 127.0.0.1:1: bind: address already in use"
    plane._say, plane._t0, plane.host = (lambda _line: None), time.monotonic(), "127.0.0.1"
    plane.port, plane.url = 1, "https://127.0.0.1:1"
    # how a component that could not bind is told apart from one that failed otherwise
    taken = Process(
        "kube-apiserver",
        [sys.executable, "-c", f"print({bind_error!r}); raise SystemExit(1)"],
        tmp_path / "a.log",
    )
    with pytest.raises(PortTaken):
        plane._wait(taken, "ready", lambda: False, 10)
    other = Process("etcd", [sys.executable, "-c", "raise SystemExit(2)"], tmp_path / "b.log")
    with pytest.raises(Exception) as failed:
        plane._wait(other, "serving", lambda: False, 10)
    assert not isinstance(failed.value, PortTaken)

    calls: list[int] = []

    def start() -> None:
        calls.append(plane.port)
        if len(calls) < PORT_TRIES:
            raise PortTaken("bind: address already in use")

    plane._start_apiserver = start  # type: ignore[method-assign]
    plane._again_on_other_ports(plane._start_apiserver)
    assert len(calls) == PORT_TRIES and len(set(calls)) == PORT_TRIES
    assert plane.url == f"https://127.0.0.1:{plane.port}"
    calls.clear()
    with pytest.raises(PortTaken):
        plane._again_on_other_ports(plane._start_apiserver, fixed=True)
    assert len(calls) == 1

    # components started side by side: each spawned before any is waited for, and the
    # one whose port was taken spawned again on its own; one taken every time fails
    spawned: list[str] = []

    def launch(name: str, taken_times: int) -> Callable[[], Callable[[], None]]:
        def spawn() -> Callable[[], None]:
            spawned.append(name)
            tries = spawned.count(name)

            def wait() -> None:
                if tries <= taken_times:
                    raise PortTaken("bind: address already in use")

            return wait

        return spawn

    wait = plane._launch_all([launch("kcm", 1), launch("scheduler", 0)])
    assert spawned == ["kcm", "scheduler"]
    wait()
    assert spawned == ["kcm", "scheduler", "kcm"]
    spawned.clear()
    with pytest.raises(PortTaken):
        plane._launch_all([launch("kueue", PORT_TRIES + 1)])()
    assert spawned == ["kueue"] * (PORT_TRIES + 1)
