"""Every server krea-ops starts listens on loopback unless a flag says otherwise: read
from the kernel's socket table (/proc/net/tcp, tcp6) for the process and its children
after a real start, and checked in the code's and deploy/'s defaults."""

from __future__ import annotations

import inspect
import ipaddress
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from krea_ops.exporters.server import parse_listen
from krea_ops.settings import Settings
from krea_ops.sim.apiserver.http import HttpFront
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.world import SimWorld
from tests.conftest import KREA_OPS, ROOT, wait_for

ENV = {**os.environ, "KREA_OPS_CONFIG": "/nonexistent/krea-ops.yaml"}


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid and p not in found]
        found.update(children)
        frontier.extend(children)
    return found


def _address(hex_ip: str) -> str:
    raw = bytes.fromhex(hex_ip)
    # /proc/net/tcp{,6} print each 32-bit word in host (little-endian) order.
    ordered = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(ordered))


def listening(root: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN held by ``root`` or its children."""
    inodes: set[str] = set()
    for pid in _descendants(root):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                ip, port = cols[1].split(":")
                found.add((_address(ip), int(port, 16)))
    return found


def loopback(found: set[tuple[str, int]]) -> bool:
    return all(ipaddress.ip_address(ip).is_loopback for ip, _ in found)


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start(procs: list[subprocess.Popen[str]], *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [*KREA_OPS, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=ENV,
    )
    procs.append(proc)
    return proc


def _port(url: str) -> int:
    match = re.search(r":(\d+)(/|$)", url)
    assert match, url
    return int(match[1])


def test_the_simulator_its_exporters_and_its_prometheus_listen_on_loopback(
    spawn: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    proc = start(spawn, "sim", "serve", "--nodes", "2", "--state", str(tmp_path / "state"))
    assert proc.stdout is not None
    lines: list[str] = []
    while not lines or not lines[-1].startswith("try:"):
        line = proc.stdout.readline()
        assert line, "".join(lines)
        lines.append(line)
    ports = {
        _port(line.split()[-1]) for line in lines if line.startswith(("API server:", "exporter "))
    }
    ports |= {_port(line.split()[-1]) for line in lines if line.startswith("prometheus:")}
    assert len(ports) >= 3  # the API server and two node exporters, Prometheus where installed

    def all_up() -> set[tuple[str, int]] | None:
        found = listening(proc.pid)
        return found if {p for _, p in found} >= ports else None

    found = wait_for(all_up)
    assert loopback(found), found


def test_the_exporter_and_the_controllers_metrics_listen_on_loopback(
    spawn: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    # The exporter with only a port named: the host it picks is its own default.
    exporter = start(spawn, "exporter", "run", "--listen", ":0", "--gpu-backend", "fake")
    assert exporter.stdout is not None
    serving = exporter.stdout.readline()
    assert serving.startswith("serving http://127.0.0.1:"), serving
    found = wait_for(lambda: listening(exporter.pid) or None)
    assert {p for _, p in found} == {_port(serving.split()[1])} and loopback(found), found

    with LocalApiServer(tmp_path / "state", crds=False) as sim:
        ctl = start(
            spawn,
            *("--kubeconfig", str(sim.kubeconfig), "controller", "run", "quota-sync"),
            *("--interval", "3600", "--metrics-port", "0"),
        )
        assert ctl.stderr is not None
        said = ctl.stderr.readline()
        assert said.startswith("metrics on http://127.0.0.1:"), said
        found = wait_for(lambda: listening(ctl.pid) or None)
        assert {p for _, p in found} == {_port(said.split()[-1])} and loopback(found), found


def test_a_flag_that_says_otherwise_is_obeyed(spawn: list[subprocess.Popen[str]]) -> None:
    """The socket table is read right: an address asked for is the address seen."""
    exporter = start(spawn, "exporter", "run", "--listen", "0.0.0.0:0", "--gpu-backend", "fake")
    assert exporter.stdout is not None
    assert exporter.stdout.readline().startswith("serving http://0.0.0.0:")
    found = wait_for(lambda: listening(exporter.pid) or None)
    assert {ip for ip, _ in found} == {"0.0.0.0"} and not loopback(found)


def test_no_default_address_is_a_wildcard() -> None:
    assert parse_listen(":9400") == ("127.0.0.1", 9400)  # no host: loopback, not all
    assert Settings().exporter_listen == "127.0.0.1:9400"
    from krea_ops.sim.machines.kubelet_server import KubeletServer
    from krea_ops.sim.upstream.controlplane import UpstreamControlPlane

    for callable_ in (
        HttpFront.__init__,
        LocalApiServer.__init__,
        SimWorld.__init__,
        UpstreamControlPlane.__init__,
        KubeletServer.__init__,
    ):
        assert inspect.signature(callable_).parameters["host"].default == "127.0.0.1"
    from commands import controller, sim

    assert inspect.signature(controller.run).parameters["metrics_address"].default.default == (
        "127.0.0.1"
    )
    assert inspect.signature(sim.serve).parameters["listen"].default.default == "127.0.0.1:0"

    # Nowhere in the code or the manifests is an all-interfaces address written down:
    # in deploy/ the exporter and the controllers listen on the pod's own IP, by name.
    wildcard = re.compile(
        r"(?<![\d.])0\.0\.0\.0(?!/0)|\[::\]|bind\(\(\"\"|(host|addr|address)=\"\""
    )
    allowed = {"krea_ops/sim/crds"}  # upstream CRD schemas' own prose
    offenders = []
    for top in ("krea_ops", "commands", "screens", "deploy"):
        for path in (ROOT / top).rglob("*"):
            rel = path.relative_to(ROOT).as_posix()
            if path.suffix not in (".py", ".yaml", ".yml", ".tcss") or rel.startswith(
                tuple(allowed)
            ):
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if wildcard.search(line):
                    offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []
    listens = [
        line.strip()
        for path in (ROOT / "deploy").rglob("*.yaml")
        for line in path.read_text().splitlines()
        if re.search(r"--(listen|metrics-address)\b", line)
    ]
    assert listens and all("$(POD_IP)" in line for line in listens), listens
