"""One sequence of kubectl and official-client operations against the embedded API server
and the upstream kube-apiserver (with its controller-manager, scheduler, Kueue and JobSet),
answers compared after normalising names, UIDs and times.

Each step records what a client sees: the HTTP status, the ``Status`` reason and message of
a refusal, and the parts of an object the step is about. A difference fails the test with
both answers; the differences found and fixed are listed in docs/architecture.md ("Where
the embedded server followed upstream"). Pods here are bound by hand and marked Running by
the test (no kubelet runs), which the real scheduler leaves alone (it skips bound pods).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from krea_ops.kube.cluster import ApiAnswer, Cluster
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.common import podlogs
from krea_ops.sim.machines.kubelet_server import KubeletServer
from tests.conftest import KUBECTL, Kubectl, require_upstream

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

NS = "diff"
LOG_NODE = "log-node"
CID = "containerd://" + "ab" * 32
Obj = dict[str, Any]
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def _norm_text(text: str) -> str:
    return STAMP.sub("<time>", UID.sub("<uid>", text))


class Side:
    """One API server and what the sequence saw on it."""

    def __init__(
        self, name: str, cluster: Cluster, kubectl: Kubectl, state_dir: Path, kubelet_port: int
    ) -> None:
        self.name = name
        self.cluster = cluster
        self.kubectl = kubectl
        self.state_dir = state_dir  # where its containers' logs are kept
        self.kubelet_port = kubelet_port  # the simulated kubelet that serves them
        self.seen: dict[str, Any] = {}

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> ApiAnswer:
        return self.cluster.request("diff", method, path, body=body, **kw)

    def record(
        self, step: str, answer: ApiAnswer, pick: Callable[[Obj], Any] | None = None
    ) -> None:
        out: dict[str, Any] = {"status": answer.status}
        body = answer.body or {}
        if not answer.ok:
            out["reason"] = body.get("reason")
            out["message"] = _norm_text(str(body.get("message") or ""))
        elif pick is not None:
            out["value"] = pick(body)
        self.seen[step] = out

    def record_kubectl(self, step: str, result: subprocess.CompletedProcess[str]) -> None:
        self.seen[step] = {
            "rc": result.returncode,
            "out": _norm_text(result.stdout.strip()),
            "err": _norm_text(result.stderr.strip()),
        }


def _wait(check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s: {last!r}")


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Side]]:
    require_upstream()
    from krea_ops.sim.upstream.controlplane import UpstreamControlPlane

    root = tmp_path_factory.mktemp("differential")
    embedded = LocalApiServer(root / "embedded")
    upstream = None
    try:
        upstream = UpstreamControlPlane(root / "upstream", kueue_setup=False)
        out = []
        with contextlib.ExitStack() as kubelets:
            for name, server in (("embedded", embedded), ("upstream", upstream)):
                api = server.api_client()
                kubectl = Kubectl(server.kubeconfig, root / name)
                # the log node's kubelet: kube-apiserver proxies `kubectl logs` to it (the
                # embedded server reads the same log store itself)
                kubelet = kubelets.enter_context(
                    KubeletServer(server.state_dir, api, node=LOG_NODE))
                out.append(Side(name, Cluster(api, timeout_s=30), kubectl, server.state_dir,
                                kubelet.port))  # fmt: skip
            yield out
            for side in out:
                side.cluster.api.close()
    finally:
        embedded.close()
        if upstream is not None:
            upstream.close()


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _node(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }


def _pod(name: str, node: str, labels: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


RUNNING = {
    "phase": "Running",
    "conditions": [{"type": "Ready", "status": "True"}],
    "containerStatuses": [
        {
            "name": "main",
            "ready": True,
            "restartCount": 0,
            "image": "registry.k8s.io/pause:3.10",
            "imageID": "",
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        }
    ],
}


def run_sequence(side: Side, tmp: Path) -> None:
    c, k = side, side.kubectl
    c.record("create ns", c.call("POST", "/api/v1/namespaces", {"metadata": {"name": NS}}))
    cm = {"metadata": {"name": "cm-a", "labels": {"app": "a"}}, "data": {"k": "v"}}
    path = f"/api/v1/namespaces/{NS}/configmaps"
    c.record("create cm", c.call("POST", path, cm), lambda b: b.get("data"))
    c.record("create cm again", c.call("POST", path, cm))
    c.record("create cm bad name", c.call("POST", path, {"metadata": {"name": "Bad_Name"}}))
    c.record(
        "create cm unknown field (strict)",
        c.call("POST", path, {"metadata": {"name": "cm-x"}, "dataa": {}},
               query={"fieldValidation": "Strict"}),
    )
    c.record("get missing", c.call("GET", f"{path}/nope"))
    # patches: merge, strategic (a ConfigMap has no strategy: JSON merge semantics), JSON
    c.record(
        "merge patch",
        c.call("PATCH", f"{path}/cm-a", {"data": {"k2": "v2"}},
               content_type="application/merge-patch+json"),
        lambda b: b.get("data"),
    )
    c.record(
        "json patch",
        c.call("PATCH", f"{path}/cm-a", [{"op": "remove", "path": "/data/k"}],
               content_type="application/json-patch+json"),
        lambda b: b.get("data"),
    )
    c.record(
        "json patch test fails",
        c.call("PATCH", f"{path}/cm-a", [{"op": "test", "path": "/data/k2", "value": "no"}],
               content_type="application/json-patch+json"),
    )
    stale = {"metadata": {"name": "cm-a", "resourceVersion": "1"}, "data": {}}
    c.record("update with stale resourceVersion", c.call("PUT", f"{path}/cm-a", stale))
    # kubectl apply: client-side twice, then server-side with a conflict and with force
    manifest = tmp / f"{side.name}-cm.yaml"
    manifest.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "cm-apply", "namespace": NS}, "data": {"a": "1"}})
    )
    c.record_kubectl("kubectl apply", k("apply", "-f", str(manifest), check=False))
    c.record_kubectl("kubectl apply again", k("apply", "-f", str(manifest), check=False))
    manifest.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "cm-apply", "namespace": NS}, "data": {"a": "2"}})
    )
    c.record_kubectl(
        "kubectl apply --server-side conflict",
        k("apply", "--server-side", "-f", str(manifest), check=False),
    )
    c.record_kubectl(
        "kubectl apply --server-side --force-conflicts",
        k("apply", "--server-side", "--force-conflicts", "-f", str(manifest), check=False),
    )
    c.record_kubectl(
        "kubectl get cm-apply",
        k("get", "configmap", "cm-apply", "-n", NS, "-o", "jsonpath={.data}", check=False),
    )
    # list with paging
    for i in range(5):
        c.call("POST", path, {"metadata": {"name": f"page-{i}", "labels": {"page": "yes"}}})
    names: list[list[str]] = []
    token: str | None = None
    for _ in range(5):
        answer = c.call("GET", path, query={"labelSelector": "page=yes", "limit": 2,
                                            "continue": token})
        body = answer.body or {}
        names.append([_meta(i)["name"] for i in body.get("items") or []])
        token = _meta(body).get("continue")
        if not token:
            break
    side.seen["list pages"] = names
    c.record("list bad continue", c.call("GET", path, query={"limit": 2, "continue": "garbage"}))
    c.record("list bad selector", c.call("GET", path, query={"labelSelector": "a in (b"}))
    # watch: what a client sees of a create, an update and a delete
    side.seen["watch"] = _watch_events(c, path)
    # RBAC: a service account with no grants
    c.call("POST", f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": "nobody"}})
    token_answer = c.call(
        "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/nobody/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    c.record("token request", token_answer, lambda b: sorted((b.get("status") or {}).keys()))
    _as_nobody(c, str(((token_answer.body or {}).get("status") or {}).get("token")))
    c.record_kubectl(
        "kubectl auth can-i as nobody",
        k("auth", "can-i", "list", "pods", "-n", NS, f"--as=system:serviceaccount:{NS}:nobody",
          check=False),
    )
    # scale: a Deployment's scale subresource (spec only: the replicas the controller makes
    # differ, none run on the embedded bare server)
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    }
    c.call("POST", f"/apis/apps/v1/namespaces/{NS}/deployments", deployment)
    c.record_kubectl("kubectl scale", k("scale", "deployment/web", "-n", NS, "--replicas=3",
                                        check=False))
    c.record(
        "get scale",
        c.call("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/web/scale"),
        lambda b: (b.get("kind"), b.get("spec"), (b.get("status") or {}).get("selector")),
    )
    # evictions: a Running pod without a budget, then two behind a budget of minAvailable 2
    c.call("POST", "/api/v1/nodes", _node("diff-node"))
    for name, labels in (("lone", {"app": "lone"}), ("b-0", {"app": "b"}), ("b-1", {"app": "b"})):
        c.call("POST", f"/api/v1/namespaces/{NS}/pods", _pod(name, "diff-node", labels))
        c.call("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status", {"status": RUNNING},
               content_type="application/merge-patch+json")
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "b", "namespace": NS},
           "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "b"}}}}
    c.call("POST", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets", pdb)

    def evict(name: str) -> ApiAnswer:
        return c.call("POST", f"/api/v1/namespaces/{NS}/pods/{name}/eviction",
                      {"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": name, "namespace": NS}})

    c.record("evict without a budget", evict("lone"), lambda b: b.get("kind"))
    # the budget's status as the disruption controller (or the embedded server) computes it
    pdb_path = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/b"

    def settled() -> Obj | None:
        status = (c.call("GET", pdb_path).body or {}).get("status") or {}
        return status if status.get("observedGeneration") == 1 else None

    status = _wait(settled)
    side.seen["pdb status"] = {
        key: status.get(key)
        for key in ("currentHealthy", "desiredHealthy", "disruptionsAllowed", "expectedPods")
    }
    c.record("evict behind a budget", evict("b-0"))
    c.record_kubectl(
        "kubectl get pods",
        k("get", "pods", "-n", NS, "-l", "app in (lone,b)", "-o",
          "custom-columns=NAME:.metadata.name", "--no-headers", check=False),
    )


def _logs(side: Side) -> None:
    """``kubectl logs`` and the API's ``/log`` of a Running pod on a node whose kubelet
    serves its container's log (upstream proxies to it; the embedded server reads the
    log store itself), with the options and the refusals a user meets."""
    c, k = side, side.kubectl
    node = _node(LOG_NODE)
    c.call("POST", "/api/v1/nodes", node)
    node_status = {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": side.kubelet_port}},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    }
    c.call("PATCH", f"/api/v1/nodes/{LOG_NODE}/status", {"status": node_status},
           content_type="application/merge-patch+json")  # fmt: skip
    c.call("POST", f"/api/v1/namespaces/{NS}/pods", _pod("talker", LOG_NODE, {"app": "talk"}))
    running = json.loads(json.dumps(RUNNING))
    running["containerStatuses"][0]["containerID"] = CID
    c.call("PATCH", f"/api/v1/namespaces/{NS}/pods/talker/status", {"status": running},
           content_type="application/merge-patch+json")  # fmt: skip
    t0 = 1_780_000_000.0
    podlogs.for_state(side.state_dir).write(CID, [(t0 + i, f"step {i}") for i in range(5)])
    log = f"/api/v1/namespaces/{NS}/pods/talker/log"
    c.record_kubectl("kubectl logs", k("logs", "talker", "-n", NS, check=False))
    c.record_kubectl("kubectl logs --tail", k("logs", "talker", "-n", NS, "--tail=2",
                                              "--timestamps", check=False))  # fmt: skip
    c.record_kubectl("kubectl logs -c missing", k("logs", "talker", "-n", NS, "-c", "nope",
                                                  check=False))  # fmt: skip
    c.record_kubectl("kubectl logs --previous", k("logs", "talker", "-n", NS, "--previous",
                                                  check=False))  # fmt: skip
    c.record("log tailLines=1", c.call("GET", log, query={"tailLines": 1}, raw=True))
    c.seen["log tailLines=1 text"] = c.call("GET", log, query={"tailLines": 1}, raw=True).text
    c.record("log tailLines=-1", c.call("GET", log, query={"tailLines": -1}))
    c.record("log limitBytes=0", c.call("GET", log, query={"limitBytes": 0}))
    c.record("log of a missing pod", c.call("GET", f"/api/v1/namespaces/{NS}/pods/none/log"))


def _watch_events(c: Side, path: str) -> list[tuple[str, str]]:
    first = c.call("GET", path, query={"labelSelector": "w=yes"})
    rv = _meta(first.body or {}).get("resourceVersion")
    events: list[tuple[str, str]] = []
    done = threading.Event()
    api = c.cluster.api

    def watch() -> None:
        resp = api.call_api(
            *api.param_serialize(
                "GET", path, query_params=[("watch", "true"), ("labelSelector", "w=yes"),
                                           ("resourceVersion", rv), ("timeoutSeconds", "10")],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            ),
            _request_timeout=15,
        )
        for line in resp.response.stream(amt=None):
            for raw in line.decode().splitlines():
                if raw.strip():
                    event = json.loads(raw)
                    events.append((event["type"], _meta(event["object"]).get("name", "")))
            if len(events) >= 3:
                break
        done.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    time.sleep(0.5)
    c.call("POST", path, {"metadata": {"name": "w", "labels": {"w": "yes"}}})
    c.call("PATCH", f"{path}/w", {"data": {"x": "1"}}, content_type="application/merge-patch+json")
    c.call("DELETE", f"{path}/w")
    done.wait(15)
    return events


def _as_nobody(c: Side, token: str) -> None:
    from kubernetes import client

    config = client.Configuration()
    config.host = c.cluster.api.configuration.host
    config.ssl_ca_cert = c.cluster.api.configuration.ssl_ca_cert
    config.api_key = {"authorization": f"Bearer {token}"}
    with client.ApiClient(config) as api:
        nobody = Cluster(api, timeout_s=30)
        c.record("list pods as nobody", nobody.request("d", "GET", f"/api/v1/namespaces/{NS}/pods"))
        c.record(
            "create cm as nobody",
            nobody.request("d", "POST", f"/api/v1/namespaces/{NS}/configmaps",
                           body={"metadata": {"name": "x"}}),
        )
        c.record("list nodes as nobody", nobody.request("d", "GET", "/api/v1/nodes"))


def test_the_same_operations_answer_the_same_on_both(sides: list[Side], tmp_path: Path) -> None:
    for side in sides:
        run_sequence(side, tmp_path)
        _logs(side)
    embedded, upstream = sides
    differences = {
        step: {"embedded": embedded.seen.get(step), "upstream": upstream.seen.get(step)}
        for step in sorted(set(embedded.seen) | set(upstream.seen))
        if embedded.seen.get(step) != upstream.seen.get(step)
    }
    assert differences == {}, json.dumps(differences, indent=1)
    # the logs came through (the same on both, and not the same refusal)
    assert upstream.seen["kubectl logs"]["out"].splitlines() == [f"step {i}" for i in range(5)]
    assert upstream.seen["log tailLines=1 text"] == "step 4\n"
