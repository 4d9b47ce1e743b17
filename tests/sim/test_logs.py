"""``kubectl logs`` against the simulated API server's ``pods/{name}/log``.

Wording: the container choice is the apiserver's (pkg/registry/core/pod/strategy.go
``LogLocation``: "a container name must be specified for pod %s, choose one of: [%s]",
"container %s is not valid for pod %s"); the instance choice the kubelet's
(pkg/kubelet/kubelet_pods.go ``validateContainerLogStatus``: "previous terminated
container %q in pod %q not found", "container %q in pod %q is waiting to start: %v");
the options ``ValidatePodLogOptions`` (pkg/apis/core/validation).
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from krea_ops.kube.times import nano_time
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.common import podlogs
from tests.conftest import KUBECTL, Kubectl, wait_for

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
CID_OLD = "containerd://" + "a" * 64
CID_NEW = "containerd://" + "b" * 64
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ")


@pytest.fixture
def kubectl(sim: LocalApiServer, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.kubeconfig, tmp_path)


def _status(name: str, cid: str, state: dict[str, Any], last: dict[str, Any] | None = None,
            restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "image": "krea/app:1",
        "imageID": "",
        "containerID": cid,
        "ready": "running" in state,
        "restartCount": restarts,
        "started": "running" in state,
        "state": state,
        "lastState": last or {},
    }


def _pod(core: client.CoreV1Api, name: str, containers: list[str], statuses: list[Any]) -> None:
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": c, "image": "krea/app:1"} for c in containers],
            },
        },
    )
    core.patch_namespaced_pod_status(
        name, "default", {"status": {"phase": "Running", "containerStatuses": statuses}}
    )


def _running(since: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"running": {"startedAt": since}}


@needs_kubectl
def test_kubectl_logs_flags(sim: LocalApiServer, core: client.CoreV1Api, kubectl: Kubectl) -> None:
    store = podlogs.for_state(sim.state_dir)
    t0 = time.time() - 100
    store.write(CID_OLD, [(t0 + i, f"old line {i}") for i in range(5)])
    store.write(CID_NEW, [(t0 + 50 + i, f"line {i}") for i in range(20)])
    terminated = {
        "terminated": {"exitCode": 1, "reason": "Error", "containerID": CID_OLD,
                       "startedAt": "2026-01-01T00:00:00Z",
                       "finishedAt": "2026-01-01T00:10:00Z"}
    }
    _pod(core, "web", ["app"], [_status("app", CID_NEW, _running(), terminated, restarts=1)])

    out = kubectl("logs", "web").stdout.splitlines()
    assert out == [f"line {i}" for i in range(20)]
    tail = kubectl("logs", "web", "--tail=3").stdout.splitlines()
    assert tail == ["line 17", "line 18", "line 19"]
    assert kubectl("logs", "web", "-c", "app", "--tail=1").stdout == "line 19\n"
    stamped = kubectl("logs", "web", "--timestamps", "--tail=2").stdout.splitlines()
    assert len(stamped) == 2 and all(STAMP.match(x) for x in stamped)
    assert stamped[1].endswith(" line 19")
    assert nano_time(t0 + 69) in stamped[1]
    # --since-time: from line 15's timestamp on; --since: the last 40 s hold lines 10..19.
    since = nano_time(t0 + 65)
    assert kubectl("logs", "web", f"--since-time={since}").stdout.splitlines()[0] == "line 15"
    recent = kubectl("logs", "web", "--since=40s").stdout.splitlines()
    assert recent and recent[-1] == "line 19" and "line 0" not in recent
    # --previous: the instance before the restart, named by lastState.terminated
    assert kubectl("logs", "web", "--previous").stdout.splitlines() == [
        f"old line {i}" for i in range(5)
    ]
    bad = kubectl("logs", "web", "-c", "nope", check=False)
    assert "container nope is not valid for pod web" in bad.stderr

    _pod(core, "fresh", ["app"], [_status("app", CID_NEW.replace("b", "c"), _running())])
    gone = kubectl("logs", "fresh", "--previous", check=False)
    assert gone.returncode != 0
    assert 'previous terminated container "app" in pod "fresh" not found' in gone.stderr
    # A container nobody wrote to yet prints its start-up line.
    assert "starting krea/app:1 in pod fresh" in kubectl("logs", "fresh").stdout


@needs_kubectl
def test_kubectl_logs_follow_streams_until_the_container_stops(
    sim: LocalApiServer, core: client.CoreV1Api, kubectl: Kubectl
) -> None:
    store = podlogs.for_state(sim.state_dir)
    store.write(CID_NEW, [(time.time(), "first")])
    _pod(core, "web", ["app"], [_status("app", CID_NEW, _running())])
    proc = kubectl.popen("logs", "-f", "web")
    assert proc.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        wait_for(lambda: lines == ["first\n"], timeout=30)
        store.write(CID_NEW, [(time.time(), "second"), (time.time(), "third")])
        wait_for(lambda: lines == ["first\n", "second\n", "third\n"], timeout=30)
        # The container stops: the stream ends, and kubectl with it.
        done = {"terminated": {"exitCode": 0, "reason": "Completed", "containerID": CID_NEW,
                               "startedAt": "2026-01-01T00:00:00Z",
                               "finishedAt": "2026-01-01T00:01:00Z"}}
        core.patch_namespaced_pod_status(
            "web", "default", {"status": {"containerStatuses": [_status("app", CID_NEW, done)]}}
        )
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_log_errors_worded_as_upstream(sim: LocalApiServer, core: client.CoreV1Api) -> None:
    _pod(
        core,
        "two",
        ["app", "sidecar"],
        [_status("app", CID_NEW, _running()), _status("sidecar", CID_OLD, _running())],
    )

    def error(name: str, **kw: Any) -> tuple[int, str]:
        with pytest.raises(ApiException) as err:
            core.read_namespaced_pod_log(name, "default", **kw)
        return err.value.status, json.loads(err.value.body)["message"]

    assert error("two") == (
        400,
        "a container name must be specified for pod two, choose one of: [app sidecar]",
    )
    assert error("two", container="app", tail_lines=-1) == (
        422,
        'PodLogOptions "two" is invalid: tailLines: Invalid value: -1: must be greater than '
        "or equal to 0",
    )
    assert error("two", container="app", since_seconds=0) == (
        422,
        'PodLogOptions "two" is invalid: sinceSeconds: Invalid value: 0: must be greater than 0',
    )
    waiting = {"waiting": {"reason": "ContainerCreating"}}
    _pod(core, "pending", ["app"], [_status("app", "", waiting)])
    assert error("pending") == (
        400,
        'container "app" in pod "pending" is waiting to start: ContainerCreating',
    )
    assert error("missing")[0] == 404
    # limitBytes cuts the body
    podlogs.for_state(sim.state_dir).write(CID_NEW, [(time.time(), "0123456789")])
    got = core.read_namespaced_pod_log("two", "default", container="app", limit_bytes=4)
    assert len(got.encode()) == 4


def test_rings_are_bounded() -> None:
    store = podlogs.LogStore(max_lines=10, max_containers=3)
    for c in range(5):
        store.write(f"c{c}", [(float(i), f"l{i}") for i in range(25)])
    assert store.read("c0") == [] and store.read("c1") == []  # least recently written: gone
    kept = store.read("c4")
    assert [x.text for x in kept] == [f"l{i}" for i in range(15, 25)]
    assert [x.text for x in store.after("c4", kept[-3].seq)] == ["l23", "l24"]
