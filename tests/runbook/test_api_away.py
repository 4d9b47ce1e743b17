"""The API server goes away in the middle of ``nodes evict``: the command stops with one
line and exit 1, the audit log says which steps ran, which failed and which never began;
started again on the same state (its SQLite store), the same command converges.

The real simulated API server is stopped (its HTTP front closed and its store shut)
while the executor waits for an evicted pod whose kubelet has not yet stopped it (seen on
the command's own thread, so the eviction's answer has arrived), so the run is cut
between the eviction it made and the steps after it."""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from commands.main import invoke
from krea_ops.kube.cluster import Cluster
from krea_ops.runbook.execute import _gone
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import wait_for
from tests.kube.conftest import Kubelets
from tests.runbook.conftest import fleet, node_obj, pod_names, pod_on
from tests.runbook.test_nodes import kubelet_alive

SLOW, QUICK = "gpu-node-001", "gpu-node-002"  # SLOW's kubelet is alive: its pod lingers
REASON = "IB link flapping"


def waiting_for_pod(thread: int) -> bool:
    """Whether ``thread`` is inside the executor's wait for an evicted pod to be gone."""
    frame = sys._current_frames().get(thread)
    while frame is not None:
        if frame.f_code is _gone.__code__:
            return True
        frame = frame.f_back
    return False


def records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_api_server_going_away_mid_evict_is_one_line_and_the_audit_says_what_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    log = tmp_path / "audit.jsonl"
    monkeypatch.setenv("KREA_OPS_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("KREA_OPS_AUDIT_LOG", str(log))
    server = LocalApiServer(state)
    port = int(server.url.rsplit(":", 1)[1])
    kube = ["--kubeconfig", str(server.kubeconfig)]
    evict = ["nodes", "evict", SLOW, QUICK, "--reason", REASON, "--max-share", "0.1", "--yes"]
    stopped = threading.Event()
    try:
        with server.api_client() as api:
            cluster = Cluster(api, timeout_s=30)
            fleet(cluster, 20)  # 10% of 20: two nodes may go
            kubelet_alive(cluster, SLOW)
            pod_on(cluster, SLOW, "web-0", labels={"app": "web"})
            pod_on(cluster, QUICK, "web-1", labels={"app": "web"})

            def stop_once_evicted() -> None:
                # the eviction was answered and the executor now waits for the pod to go
                # (the command runs on this process's main thread): stop the server there
                wait_for(lambda: waiting_for_pod(main), timeout=60)
                server.close()
                stopped.set()

            main = threading.get_ident()
            stopper = threading.Thread(target=stop_once_evicted)
            stopper.start()
            capsys.readouterr()
            code = invoke([*evict, *kube])
            stopper.join()
    finally:
        if not stopped.is_set():
            server.close()

    out, err = capsys.readouterr()
    assert code == 1
    (line,) = err.splitlines()
    assert line.startswith(
        f"error: nodes evict stopped: cannot reach the API server at https://127.0.0.1:{port} "
        "(get pod default/web-0): "
    ), line
    assert line.endswith("; check --kubeconfig/--context")
    # stdout says what ran, step by step, before the error line
    ran = re.findall(r"^(\d+)\. (done|failed|blocked|unchanged): ", out, flags=re.M)
    assert ran == [("1", "done"), ("2", "done"), ("3", "done"), ("4", "done"), ("5", "failed")]
    assert out.endswith("Result: failed\n")

    start, *steps, end = records(log)
    assert (start["record"], end["record"]) == ("start", "end")
    planned = [s["description"] for s in start["plan"]["steps"]]
    assert [d.split(":")[0] for d in planned[:4:2]] == [f"node {SLOW}", f"node {QUICK}"]
    assert planned[1::2][:2] == [
        f"record Event Cordoned on node {SLOW}",
        f"record Event Cordoned on node {QUICK}",
    ]
    assert planned[4:] == [
        f"evict 1 pod from node {SLOW}",
        f"record Event Drained on node {SLOW} (DrainBlocked if pods are left)",
        f"evict 1 pod from node {QUICK}",
        f"record Event Drained on node {QUICK} (DrainBlocked if pods are left)",
    ]
    assert [(s["step"], s["status"]) for s in steps] == [
        (1, "done"),
        (2, "done"),
        (3, "done"),
        (4, "done"),
        (5, "failed"),
    ]
    assert steps[4]["lines"] == [end["stopped"]] and "API server" in end["stopped"]
    assert [c["about"] for c in steps[4]["calls"]][:1] == ["pod default/web-0"]  # made
    assert end["status"] == "failed"
    assert [(s["step"], s["description"]) for s in end["not_run"]] == [
        (6, f"record Event Drained on node {SLOW} (DrainBlocked if pods are left)"),
        (7, f"evict 1 pod from node {QUICK}"),
        (8, f"record Event Drained on node {QUICK} (DrainBlocked if pods are left)"),
    ]
    assert {r["run_id"] for r in (start, *steps, end)} == {start["run_id"]}

    # the same state, the same address: the kubeconfig still works; the kubelet finishes
    # web-0 meanwhile, and the same command does what is left, and only that (QUICK's
    # kubelet stops web-1 once evicted)
    with (
        LocalApiServer(state, port=port, token=server.token) as again,
        again.api_client() as api,
        Kubelets(again, lost=(SLOW,)),
    ):
        cluster = Cluster(api, timeout_s=30)
        assert node_obj(cluster, SLOW)["spec"]["unschedulable"] is True
        assert pod_names(cluster, QUICK) == ["default/web-1"]  # never evicted
        path = "/api/v1/namespaces/default/pods/web-0"
        cluster.request("kubelet", "DELETE", path, body={"gracePeriodSeconds": 0})

        assert invoke([*evict, *kube]) == 0
        assert pod_names(cluster, SLOW) == [] and pod_names(cluster, QUICK) == []
        rerun = [r for r in records(log) if r["run_id"] != start["run_id"]]
        assert [s["description"] for s in rerun[0]["plan"]["steps"]] == [
            f"evict 1 pod from node {QUICK}",
            f"record Event Drained on node {QUICK} (DrainBlocked if pods are left)",
        ]
        assert rerun[-1]["status"] == "done" and rerun[-1]["not_run"] == []

        assert invoke([*evict, *kube]) == 0  # and once more: nothing to do
        assert "nothing to do" in capsys.readouterr().out
