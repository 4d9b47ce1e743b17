"""The read commands with exactly deploy/rbac/reader.yaml's permissions (ABAC policies
derived from it on the simulator): they work; with less they fail in one line naming the
role to grant."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from commands.main import invoke
from krea_ops.sim.apiserver.authz import policies_from_rbac
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.common.kubeconfig import write_kubeconfig
from tests.conftest import ROOT, api_server

PODS_ONLY = {
    "apiVersion": "abac.authorization.kubernetes.io/v1beta1",
    "kind": "Policy",
    "spec": {
        "user": "pat",
        "namespace": "*",
        "resource": "pods",
        "apiGroup": "*",
        "readonly": True,
    },
}


class Readers:
    """An API server with the reader role in it, and a token for each of two users: one
    holding exactly that role, one that may only read pods."""

    def __init__(self, server: Any, reader: str, pods_only: str) -> None:
        self.server = server
        self.url, self.ca_cert = server.url, server.ca_cert
        self.reader, self.pods_only = reader, pods_only


def _fleet(core: client.CoreV1Api) -> None:
    for i in range(3):
        core.create_node(
            {
                "metadata": {"name": f"gpu-node-00{i}", "labels": {"krea.ai/pool": "h200"}},
                "status": {
                    "capacity": {"nvidia.com/gpu": "8"},
                    "allocatable": {"nvidia.com/gpu": "8"},
                },
            }
        )
    core.create_namespace({"metadata": {"name": "krea-ops"}})
    core.create_namespaced_config_map(
        "krea-ops",
        {"metadata": {"name": "krea-ops-config"}, "data": {"exporters": "{}"}},
    )


def _service_account_tokens(server: Any, docs: list[dict[str, Any]]) -> tuple[str, str]:
    """On the real API server: reader.yaml applied as it is, and its two roles bound to
    ServiceAccount ``rita`` as well as to the group it names; ``pat`` may get and list
    pods. Their tokens from the TokenRequest API."""
    from krea_ops.kube.cluster import Cluster

    ns = "krea-ops"
    with server.api_client() as api:
        cluster = Cluster(api, timeout_s=30)

        def post(path: str, body: dict[str, Any]) -> None:
            answer = cluster.request("create", "POST", path, body=body)
            assert answer.ok, (answer.status, answer.body)

        rbac = "/apis/rbac.authorization.k8s.io/v1"
        for doc in docs:
            kind, meta = doc["kind"], doc["metadata"]
            where = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
            post(f"{rbac}{where}/{kind.lower()}s", doc)
        tokens = []
        for name in ("rita", "pat"):
            post(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": name}})
        def bind(name: str, account: str, role_kind: str, role: str, where: str = "") -> None:
            kind = "rolebindings" if where else "clusterrolebindings"
            subject = {"kind": "ServiceAccount", "name": account, "namespace": ns}
            ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role}
            body = {"metadata": {"name": name}, "subjects": [subject], "roleRef": ref}
            post(f"{rbac}{where}/{kind}", body)

        bind("rita-reader", "rita", "ClusterRole", "krea-ops-reader")
        bind("rita-config", "rita", "Role", "krea-ops-reader-config", f"/namespaces/{ns}")
        rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
        post(f"{rbac}/clusterroles", {"metadata": {"name": "pods-only"}, "rules": [rule]})
        bind("pat-pods", "pat", "ClusterRole", "pods-only")
        for name in ("rita", "pat"):
            answer = cluster.request(
                "token", "POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                      "spec": {}},
            )  # fmt: skip
            assert answer.ok and answer.body is not None, answer.body
            tokens.append(str(answer.body["status"]["token"]))
    return tokens[0], tokens[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, control_plane: str) -> Iterator[Readers]:
    """ABAC policies derived from reader.yaml on the embedded server; the ClusterRole and
    Role themselves, bound to service accounts, on the upstream one."""
    docs = list(yaml.safe_load_all((ROOT / "deploy/rbac/reader.yaml").read_text()))
    state = tmp_path_factory.mktemp("rbac")
    if control_plane == "upstream":
        with api_server("upstream", state / "state") as up:
            with up.api_client() as api:
                _fleet(client.CoreV1Api(api))
            yield Readers(up, *_service_account_tokens(up, docs))
        return
    s = LocalApiServer(
        state / "state",
        users={"reader": ("rita", ["krea-ops:readers"]), "pods-only": ("pat", [])},
        policies=[*policies_from_rbac(docs, "krea-ops:readers"), PODS_ONLY],
    )
    _fleet(client.CoreV1Api(s.api_client()))
    try:
        yield Readers(s, "reader", "pods-only")
    finally:
        s.close()


def kubeconfig_for(s: Readers, token: str, path: Path) -> str:
    return str(write_kubeconfig(path, s.url, token, s.ca_cert.read_bytes()))


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = invoke(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_reader_role_is_enough_for_every_read_command(
    server: Readers,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    kc = ["--kubeconfig", kubeconfig_for(server, server.reader, tmp_path / "reader")]
    for args in (
        ["queue", "list", "-o", "json"],
        ["queue", "workloads", "-o", "json"],
        ["burst", "status", "-o", "json"],
    ):
        code, out, err = run(capsys, *kc, *args)
        assert code == 0, (args, err)
        assert "forbidden" not in err
        json.loads(out)
    # nodes are readable; with no exporters published the only failure is telemetry's
    code, out, err = run(capsys, *kc, "nodes", "list", "-o", "json")
    assert [n["name"] for n in json.loads(out)] == ["gpu-node-000", "gpu-node-001", "gpu-node-002"]
    assert code == 1 and "forbidden" not in err and "Prometheus" in err


def test_less_than_the_reader_role_fails_in_one_line_naming_it(
    server: Readers,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    kc = ["--kubeconfig", kubeconfig_for(server, server.pods_only, tmp_path / "pods")]
    code, out, err = run(capsys, *kc, "nodes", "list")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("error: forbidden: list nodes")
    # "pat", or the service account of that name on the upstream server
    user = r'User "(system:serviceaccount:krea-ops:)?pat"'
    assert re.search(user + r' cannot list resource "nodes"', err)
    assert "krea-ops-reader" in err
    code, _, err = run(capsys, *kc, "queue", "list")
    assert code == 1 and "forbidden" in err and err.count("\n") == 1


def test_an_unreachable_api_server_is_one_line_exit_1(
    server: Readers,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    dead = write_kubeconfig(
        tmp_path / "dead", "https://127.0.0.1:9", "x", server.ca_cert.read_bytes()
    )
    for args in (["gpus"], ["nodes", "list"], ["queue", "list"], ["fabric"]):
        code, _, err = run(capsys, "--kubeconfig", str(dead), *args)
        assert code == 1 and err.count("\n") == 1, (args, err)
        assert "cannot reach the API server at https://127.0.0.1:9" in err and "--kubeconfig" in err
