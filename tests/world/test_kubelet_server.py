"""The simulated kubelet's ``/containerLogs`` over real HTTPS, against what the embedded
API server's ``pods/{name}/log`` (so ``kubectl logs``) answers for the same pod.

The query is the one kube-apiserver builds in ``LogLocation``
(pkg/registry/core/pod/strategy.go: ``follow=true``, ``previous=true``,
``timestamps=true``, ``sinceSeconds``, ``sinceTime``, ``tailLines``, ``limitBytes``; Go's
``url.Values.Encode`` sorts the keys). The errors are the kubelet's ``getContainerLogs``
(pkg/kubelet/server/server.go) and ``validateContainerLogStatus``
(pkg/kubelet/kubelet_pods.go), which kube-apiserver's ``GenericHttpResponseChecker``
turns into a 400 BadRequest with the body as its message.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

import pytest
from kubernetes import client

from krea_ops.kube.times import nano_time
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.common import podlogs
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.kubelet_server import KubeletServer
from krea_ops.sim.machines.training import submit_training
from krea_ops.sim.world import SimWorld
from tests.conftest import KUBECTL, Kubectl, wait_for

STEP = re.compile(r"^\[rank0\]:\[titan\] \S+ \S+ - root - INFO - step: +(\d+)  loss: ")
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ")
CID_OLD = "containerd://" + "a" * 64
CID_NEW = "containerd://" + "b" * 64


# -- HTTP helpers -------------------------------------------------------------------------


def _query(**opts: Any) -> str:
    """A query as kube-apiserver's LogLocation writes it: the options asked for, booleans
    as ``true``, the keys sorted (``url.Values.Encode``)."""
    params = {
        k: ("true" if v is True else str(v)) for k, v in opts.items() if v not in (None, False)
    }
    return urlencode(sorted(params.items()))


def _location(ns: str, pod: str, container: str, **opts: Any) -> str:
    """The path and query kube-apiserver's LogLocation sends to the kubelet."""
    query = _query(**opts)
    return f"/containerLogs/{ns}/{pod}/{container}" + (f"?{query}" if query else "")


class _Served(Protocol):
    """An API server a world runs on (``LocalApiServer``, or the upstream one)."""

    url: str
    token: str
    ca_cert: Path


@dataclass
class _Peer:
    """An HTTPS server of the test's: the kubelet, or the API server (with its token)."""

    host: str
    port: int
    ca: Path
    token: str | None = None

    @classmethod
    def api(cls, sim: _Served) -> _Peer:
        url = urlsplit(sim.url)
        return cls(str(url.hostname), int(url.port or 443), sim.ca_cert, sim.token)

    @classmethod
    def of(cls, kubelet: KubeletServer) -> _Peer:
        return cls(kubelet.host, kubelet.port, kubelet.ca_cert)

    def connect(self, timeout: float = 15) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=str(self.ca))
        return http.client.HTTPSConnection(self.host, self.port, context=context, timeout=timeout)

    def request(self, path: str, method: str = "GET") -> http.client.HTTPResponse:
        conn = self.connect()
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        conn.request(method, path, headers=headers)
        return conn.getresponse()

    def get(self, path: str, method: str = "GET") -> tuple[int, Any, bytes]:
        resp = self.request(path, method)
        try:
            return resp.status, resp.headers, resp.read()
        finally:
            resp.close()


def _api_log(api: _Peer, ns: str, pod: str, container: str, **opts: Any) -> tuple[int, bytes]:
    """``GET .../pods/{pod}/log`` as kubectl logs sends it."""
    query = _query(container=container, **opts)
    code, _headers, body = api.get(f"/api/v1/namespaces/{ns}/pods/{pod}/log?{query}")
    return code, body


def _same_text(api: _Peer, kubelet: _Peer, ns: str, pod: str, container: str, **opts: Any) -> bytes:
    """The kubelet's body for these options, asserted equal to the API server's: read
    between two API reads that agree (the trainers keep writing), so all three saw the
    same log."""
    for _ in range(100):
        before = _api_log(api, ns, pod, container, **opts)
        code, _headers, mine = kubelet.get(_location(ns, pod, container, **opts))
        after = _api_log(api, ns, pod, container, **opts)
        assert before[0] == 200, before
        assert code == 200, mine
        if before == after:
            assert mine == before[1], (opts, mine[-300:], before[1][-300:])
            return mine
        time.sleep(0.02)
    pytest.fail(f"the log of {pod} never held still for {opts}")


def _api_error(api: _Peer, ns: str, pod: str, container: str, **opts: Any) -> tuple[int, str]:
    code, body = _api_log(api, ns, pod, container, **opts)
    assert code != 200, body
    return code, json.loads(body)["message"]


def _ends_soon(resp: http.client.HTTPResponse, within_s: float = 10.0) -> None:
    """The stream ends (cleanly, or hung up on) within ``within_s``."""
    start = time.monotonic()
    with contextlib.suppress(http.client.IncompleteRead, OSError):
        while resp.read(65536):
            pass
    assert time.monotonic() - start < within_s


# -- a world with a training writing its logs ---------------------------------------------


@pytest.fixture
def world(tmp_path: Path) -> Iterator[SimWorld]:
    config = WorldConfig(
        nodes=2,
        speed=240,
        checkpoint_interval_s=240.0,
        exporters=False,
        prometheus=False,
        extra={"checkpoint_write_s": 30.0},
    )
    with SimWorld(config, tmp_path / "state", parts=("cluster", "kueue")) as w:
        yield w


def _rank0(w: SimWorld) -> str | None:
    raw: Any = client.CoreV1Api(w.client).list_namespaced_pod(
        "training",
        label_selector="krea.ai/training=dit,batch.kubernetes.io/job-completion-index=0",
        _preload_content=False,
    )
    for pod in json.loads(raw.data)["items"]:
        if (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get(
            "deletionTimestamp"
        ):
            return str(pod["metadata"]["name"])
    return None


def test_container_logs_are_what_the_api_server_serves(world: SimWorld, tmp_path: Path) -> None:
    api = _Peer.api(world.sim)
    submit_training(world.client, "dit", nodes=2)
    pod = wait_for(lambda: _rank0(world), timeout=60)

    def stepped() -> bool:
        return any(
            STEP.match(x)
            for x in _api_log(api, "training", pod, "trainer")[1].decode().splitlines()
        )

    wait_for(stepped, timeout=60)

    with KubeletServer(world.sim.state_dir, world.client) as server:
        kubelet = _Peer.of(server)
        assert server.url == f"https://127.0.0.1:{server.port}"
        assert server.ca_cert == world.sim.state_dir / "pki" / "kubelet" / "kubelet.crt"
        code, headers, body = kubelet.get("/healthz")
        assert (code, body) == (200, b"ok")
        assert headers["Content-Type"] == "text/plain; charset=utf-8"

        def same(**opts: Any) -> bytes:
            return _same_text(api, kubelet, "training", pod, "trainer", **opts)

        whole = same().decode()
        assert "torch/distributed/run.py:792] Setting OMP_NUM_THREADS" in whole
        assert "Training starts at step 1." in whole
        assert len(same(tailLines=3).decode().splitlines()) == 3
        stamped = same(tailLines=4, timestamps=True).decode().splitlines()
        assert len(stamped) == 4 and all(STAMP.match(x) for x in stamped)
        later = same(sinceTime=stamped[1].split(" ", 1)[0])
        assert later and len(later) < len(whole.encode())
        assert len(same(limitBytes=10)) == 10
        assert same(sinceSeconds=3600)

        # No instance before this one: the kubelet's 400, and the API server's BadRequest
        # carries the same text.
        missing = f'previous terminated container "trainer" in pod "{pod}" not found'
        code, _headers, body = kubelet.get(_location("training", pod, "trainer", previous=True))
        assert (code, body.decode()) == (400, missing)
        assert _api_error(api, "training", pod, "trainer", previous=True) == (400, missing)
        if KUBECTL is not None:
            kubectl = Kubectl(world.kubeconfig, tmp_path / "home")
            gone = kubectl("logs", "-n", "training", pod, "--previous", check=False)
            assert missing in gone.stderr
            for _ in range(100):
                out = kubectl("logs", "-n", "training", pod, "--tail=2").stdout
                _code, _headers, mine = kubelet.get(
                    _location("training", pod, "trainer", tailLines=2)
                )
                if mine.decode() == out:
                    break
            else:
                pytest.fail("kubectl logs --tail=2 never matched /containerLogs")

        # follow=true streams each step line as the trainer prints it.
        resp = kubelet.request(_location("training", pod, "trainer", follow=True, tailLines=1))
        assert resp.status == 200 and resp.headers["Transfer-Encoding"] == "chunked"
        got: list[str] = []
        deadline = time.monotonic() + 60
        while sum(1 for x in got if STEP.match(x)) < 2 and time.monotonic() < deadline:
            line = resp.readline()
            assert line, "the stream ended while the trainer runs"
            got.append(line.decode())
        assert sum(1 for x in got if STEP.match(x)) >= 2, got

        # close() ends the stream it still serves, and nothing listens on the port after.
        server.close()
        _ends_soon(resp)
        resp.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()


# -- the kubelet's answers, on a pod whose statuses the test writes ------------------------


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[LocalApiServer]:
    with LocalApiServer(tmp_path / "state") as server:
        yield server


@pytest.fixture
def core(sim: LocalApiServer) -> Iterator[client.CoreV1Api]:
    with sim.api_client() as api:
        yield client.CoreV1Api(api)


def _status(
    name: str, cid: str, state: dict[str, Any], last: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "image": "krea/app:1",
        "imageID": "",
        "containerID": cid,
        "ready": "running" in state,
        "restartCount": 1 if last else 0,
        "started": "running" in state,
        "state": state,
        "lastState": last or {},
    }


def _pod(core: client.CoreV1Api, name: str, statuses: list[Any], node: str = "n1") -> None:
    manifest: Any = {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "krea/app:1"}]},
    }
    core.create_namespaced_pod("default", manifest)
    core.patch_namespaced_pod_status(
        name, "default", {"status": {"phase": "Running", "containerStatuses": statuses}}
    )


RUNNING = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}


def _terminated(cid: str) -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": 1,
            "reason": "Error",
            "containerID": cid,
            "startedAt": "2026-01-01T00:00:00Z",
            "finishedAt": "2026-01-01T00:10:00Z",
        }
    }


def test_the_kubelets_answers(sim: LocalApiServer, core: client.CoreV1Api) -> None:
    store = podlogs.for_state(sim.state_dir)
    t0 = time.time() - 100
    store.write(CID_OLD, [(t0 + i, f"old line {i}") for i in range(5)])
    store.write(CID_NEW, [(t0 + 50 + i, f"line {i}") for i in range(20)])
    _pod(core, "web", [_status("app", CID_NEW, RUNNING, _terminated(CID_OLD))])
    _pod(core, "elsewhere", [_status("app", CID_NEW, RUNNING)], node="n2")
    waiting = {"waiting": {"reason": "ContainerCreating"}}
    _pod(core, "pending", [_status("app", "", waiting)])
    unscheduled: Any = {
        "metadata": {"name": "unscheduled"},
        "spec": {"containers": [{"name": "app", "image": "krea/app:1"}]},
    }
    core.create_namespaced_pod("default", unscheduled)
    api = _Peer.api(sim)

    with KubeletServer(sim.state_dir, core.api_client, node="n1") as server:
        kubelet = _Peer.of(server)

        def get(path: str, method: str = "GET") -> tuple[int, str]:
            code, _headers, body = kubelet.get(path, method)
            return code, body.decode()

        def same(**opts: Any) -> str:
            return _same_text(api, kubelet, "default", "web", "app", **opts).decode()

        assert same().splitlines() == [f"line {i}" for i in range(20)]
        assert same(tailLines=2) == "line 18\nline 19\n"
        assert same(previous=True).splitlines() == [f"old line {i}" for i in range(5)]
        assert same(previous=True, tailLines=1, timestamps=True) == (
            f"{nano_time(t0 + 4)} old line 4\n"
        )
        assert same(sinceTime=nano_time(t0 + 65)).splitlines()[0] == "line 15"
        assert same(limitBytes=4) == "line"
        # the legacy "tail" parameter, and "all"
        assert get("/containerLogs/default/web/app?tail=1") == (200, "line 19\n")
        assert get("/containerLogs/default/web/app?tail=all&tailLines=1")[1].count("\n") == 20
        # a boolean is false only when absent, "0" or "false"
        assert get("/containerLogs/default/web/app?previous=yes&tailLines=1") == (
            200,
            "old line 4\n",
        )
        assert get("/containerLogs/default/web/app?previous=False&tailLines=1") == (
            200,
            "line 19\n",
        )

        invalid = (422, '{"message": "Invalid request."}')
        assert get("/containerLogs/default/web/app?tailLines=-1") == invalid
        assert get("/containerLogs/default/web/app?limitBytes=0") == invalid
        assert get("/containerLogs/default/web/app?sinceSeconds=0") == invalid
        assert get("/containerLogs/default/web/app?stream=Both") == invalid
        assert (
            get("/containerLogs/default/web/app?sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z")
            == invalid
        )
        undecodable = (400, '{"message": "Unable to decode query."}')
        assert get("/containerLogs/default/web/app?tailLines=x") == undecodable
        assert get("/containerLogs/default/web/app?sinceTime=yesterday") == undecodable
        assert get("/containerLogs/default/web/app?stream=Stderr") == (
            400,
            'unable to return the given log stream: "Stderr". Please enable '
            "PodLogsQuerySplitStreams feature gate in kubelet",
        )
        assert get("/containerLogs/default/web/app?stream=All&tailLines=1") == (200, "line 19\n")
        assert get("/containerLogs/default/nope/app") == (404, 'pod "nope" does not exist')
        assert get("/containerLogs/default/elsewhere/app") == (
            404,
            'pod "elsewhere" does not exist',
        )
        assert get("/containerLogs/default/unscheduled/app") == (
            404,
            'pod "unscheduled" does not exist',
        )
        assert get("/containerLogs/default/web/sidecar") == (
            404,
            'container "sidecar" not found in pod "web"',
        )
        waiting_text = 'container "app" in pod "pending" is waiting to start: ContainerCreating'
        # The log and validateContainerLogStatus's refusals come after getContainerLogs set
        # Transfer-Encoding: chunked (net/http sniffs no Content-Type then); the errors
        # before it are sniffed text.
        for path, code in (
            ("/containerLogs/default/web/app", 200),
            ("/containerLogs/default/pending/app", 400),
        ):
            got, headers, _body = kubelet.get(path)
            assert got == code
            assert headers["Transfer-Encoding"] == "chunked" and "Content-Type" not in headers
        got, headers, _body = kubelet.get("/containerLogs/default/nope/app")
        assert (got, headers["Content-Type"]) == (404, "text/plain; charset=utf-8")
        assert get("/containerLogs/default/pending/app") == (400, waiting_text)
        assert _api_error(api, "default", "pending", "app") == (400, waiting_text)
        assert get("/containerLogs/default/web/app", "POST") == (405, "Method Not Allowed")
        assert get("/containerLogs/default/web") == (404, "404: Page Not Found")
        assert get("/exec/default/web/app") == (404, "404: Page Not Found")

        # follow=true: what is there, each new line, and the end when the container stops.
        resp = kubelet.request(_location("default", "web", "app", follow=True, tailLines=1))
        lines: list[bytes] = []
        reader = threading.Thread(
            target=lambda: lines.extend(iter(resp.readline, b"")), daemon=True
        )
        reader.start()
        wait_for(lambda: lines == [b"line 19\n"], timeout=10)
        store.write(CID_NEW, [(time.time(), "line 20")])
        wait_for(lambda: lines == [b"line 19\n", b"line 20\n"], timeout=10)
        core.patch_namespaced_pod_status(
            "web",
            "default",
            {
                "status": {
                    "containerStatuses": [
                        _status("app", CID_NEW, _terminated(CID_NEW), _terminated(CID_OLD))
                    ]
                }
            },
        )
        reader.join(timeout=15)
        assert not reader.is_alive(), "the stream outlived the container"
        assert lines == [b"line 19\n", b"line 20\n"]
        resp.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()


def test_loopback_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="loopback only"):
        KubeletServer(tmp_path, None, host="0.0.0.0")
