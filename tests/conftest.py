"""Shared test helpers: fixture paths, free ports, and the real CLI as a subprocess."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
IB_FIXTURE = FIXTURES / "sysfs-infiniband"
NODE_EXPORTER_TREE = IB_FIXTURE / "sys"
PROCFS_TREE = IB_FIXTURE / "procfs-v0.21.1" / "sys"
KREA_OPS = [sys.executable, "-m", "commands"]

# pytest-xdist's workers run with COLUMNS=80 and LINES=24 in their environment; rich and
# Textual size themselves by those, so a program a test starts (the demo in tmux, a
# command whose table is read) would draw at 80 columns whatever its terminal. Tests see
# the environment a plain `pytest` run has.
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``krea-ops ARGS`` as a user would, in a clean settings environment."""
    full_env = {**os.environ, "KREA_OPS_CONFIG": "/nonexistent/krea-ops.yaml", **(env or {})}
    return subprocess.run(
        [*KREA_OPS, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=full_env
    )


class Exporter:
    """``krea-ops exporter run`` in the background, on a free loopback port."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "KREA_OPS_CONFIG": "/nonexistent/krea-ops.yaml"}
        self.proc = subprocess.Popen(
            [*KREA_OPS, "exporter", "run", "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("serving "):
            self.proc.kill()
            raise AssertionError(f"exporter did not start: {line!r} {self.proc.stderr.read()}")
        self.url = line.split()[1]
        self.address = self.url.removeprefix("http://").removesuffix("/metrics")

    def stop(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture
def running_exporter() -> Iterator[type[Exporter]]:
    started: list[Exporter] = []

    class _Tracked(Exporter):
        def __init__(self, *args: str) -> None:
            super().__init__(*args)
            started.append(self)

    yield _Tracked
    for exp in started:
        if exp.proc.poll() is None:
            exp.stop()


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.1):  # type: ignore[no-untyped-def]
    """Poll until predicate() is truthy; return its value or fail with the last one."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} not installed: .ci/run must install it")
        pytest.skip(f"{name} not installed (Debian package; .ci/run installs it)")
    return path


KUBECTL = shutil.which("kubectl")


class Kubectl:
    """A real kubectl against one kubeconfig, with its own home and discovery cache."""

    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "HOME": str(home),
            "KUBECACHEDIR": str(home / "cache"),
        }

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 60, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        result = subprocess.run(
            [KUBECTL, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            input=stdin,
        )
        if check:
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    def popen(self, *args: str) -> subprocess.Popen[str]:
        assert KUBECTL is not None
        return subprocess.Popen(
            [KUBECTL, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )


# The slowest files first: on two workers, the demo's story (minutes of real time) runs
# beside everything else instead of alone at the end.
SLOWEST_FIRST = ("tests/test_demo_story.py", "tests/test_demo_tmux.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in SLOWEST_FIRST)


# -- the two control planes --------------------------------------------------------------

CONTROL_PLANES = ("embedded", "upstream")


def require_upstream() -> Path:
    """The built upstream binaries (``krea-ops sim upstream build``, which the README's
    test command runs). In CI a missing build fails the test: it is never skipped there."""
    from krea_ops.sim.upstream import build

    found = _upstream_built(build)
    if found is None:
        message = "upstream control plane not built: run krea-ops sim upstream build"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


_UPSTREAM: list[Path | None] = []


def _upstream_built(build: object) -> Path | None:
    if not _UPSTREAM:
        _UPSTREAM.append(build.is_built())  # type: ignore[attr-defined]
    return _UPSTREAM[0]


@pytest.fixture(scope="module", params=CONTROL_PLANES)
def control_plane(request: pytest.FixtureRequest) -> str:
    """Each control plane the test's world runs on: ``embedded`` (ours) and ``upstream``
    (the real kube-apiserver, controller-manager, scheduler, Kueue and JobSet). Module
    scoped, so a module's world fixture is built once per control plane."""
    if request.param == "upstream":
        require_upstream()
    return str(request.param)


# A test that needs the embedded server itself (its fault switch ``sim.api.faults``, its
# store) runs on the embedded control plane only: ``@EMBEDDED_ONLY`` on it, in a module
# whose API server fixture takes ``control_plane``.
EMBEDDED_ONLY = pytest.mark.parametrize("control_plane", ["embedded"], indirect=True)


@contextlib.contextmanager
def api_server(control_plane: str, state_dir: Path) -> Iterator[Any]:
    """An API server with nothing of ours on it, on ``control_plane``: the embedded
    ``LocalApiServer``, or the upstream control plane (kube-apiserver with the real
    controller-manager, scheduler, Kueue and JobSet running, and their CRDs) without the
    project's Kueue setup. Either has ``url``, ``kubeconfig``, ``state_dir`` and
    ``api_client()``."""
    server: Any
    if control_plane == "upstream":
        from krea_ops.sim.upstream.controlplane import UpstreamControlPlane

        server = UpstreamControlPlane(state_dir, kueue_setup=False)
    else:
        from krea_ops.sim.apiserver.local import LocalApiServer

        server = LocalApiServer(state_dir)
    try:
        yield server
    finally:
        server.close()


class _SharedUpstream:
    """The worker's upstream control plane for :func:`sim_on_control_plane`, started on
    first use and put back to its baseline after each test (``tests/baseline.py``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started = 0
        self.server: Any = None
        self.baseline: Any = None

    def take(self) -> Any:
        if self.server is None:
            from krea_ops.sim.upstream.controlplane import UpstreamControlPlane
            from tests.baseline import Baseline

            self.started += 1
            self.server = UpstreamControlPlane(self.root / f"state-{self.started}",
                                               kueue_setup=False)  # fmt: skip
            self.baseline = Baseline(self.server)
        return self.server

    def give_back(self) -> None:
        """Back to the baseline; where that fails, the next test gets a fresh control
        plane. The test is over and judged by then: the failure is said (a warning in
        the run's summary, with its reason), not charged to it."""
        try:
            self.baseline.reset()
        except Exception as exc:
            self.close()
            warnings.warn(
                f"the shared upstream control plane could not be reset ({exc!r}); "
                "the next test gets a fresh one",
                stacklevel=1,
            )

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        self.server = self.baseline = None


@pytest.fixture(scope="session")
def _shared_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_SharedUpstream]:
    shared = _SharedUpstream(tmp_path_factory.mktemp("upstream"))
    yield shared
    shared.close()


@pytest.fixture
def sim_on_control_plane(
    request: pytest.FixtureRequest, tmp_path: Path, control_plane: str
) -> Iterator[Any]:
    """An API server for the test (:func:`api_server`), on each control plane: a fresh
    embedded one per test, and on upstream the worker's one control plane, emptied of
    everything the test made when it ends. A module or a conftest whose tests run on both
    takes it as its ``sim``: ``sim = sim_on_control_plane``."""
    if control_plane != "upstream":
        with api_server(control_plane, tmp_path / "state") as server:
            yield server
        return
    shared: _SharedUpstream = request.getfixturevalue("_shared_upstream")
    yield shared.take()
    shared.give_back()
