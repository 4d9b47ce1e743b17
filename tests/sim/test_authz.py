"""Credentials with less than admin: static tokens and ABAC policies on the simulator,
seen through the official client and kubectl as a real server's 403s."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from krea_ops.sim.apiserver.authz import attributes, policies_from_rbac
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.common.kubeconfig import write_kubeconfig
from tests.conftest import ROOT, require_binary

POD_READER = {
    "apiVersion": "abac.authorization.kubernetes.io/v1beta1",
    "kind": "Policy",
    "spec": {
        "user": "alice",
        "namespace": "team-a",
        "resource": "pods",
        "apiGroup": "*",
        "readonly": True,
    },
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalApiServer]:
    reader_docs = list(yaml.safe_load_all((ROOT / "deploy/rbac/reader.yaml").read_text()))
    s = LocalApiServer(
        tmp_path / "state",
        users={"alice-token": ("alice", ["devs"]), "bob-token": ("bob", ["krea-ops:readers"])},
        policies=[POD_READER, *policies_from_rbac(reader_docs, "krea-ops:readers")],
    )
    try:
        yield s
    finally:
        s.close()


def as_user(s: LocalApiServer, token: str) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = s.url
    cfg.api_key = {"authorization": f"Bearer {token}"}
    cfg.ssl_ca_cert = str(s.ca_cert)
    return client.ApiClient(cfg)


def test_policies_allow_and_deny_with_the_real_wording(server: LocalApiServer) -> None:
    admin = client.CoreV1Api(server.api_client())
    admin.create_namespace({"metadata": {"name": "team-a"}})
    admin.create_namespaced_pod(
        "team-a", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    )
    alice = client.CoreV1Api(as_user(server, "alice-token"))
    assert [p.metadata.name for p in alice.list_namespaced_pod("team-a").items] == ["p"]
    with pytest.raises(ApiException) as denied:
        alice.list_node()
    assert denied.value.status == 403
    body = json.loads(denied.value.body)
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the '
        "cluster scope"
    )
    with pytest.raises(ApiException) as ro:
        alice.delete_namespaced_pod("p", "team-a")
    assert (
        ro.value.status == 403
        and 'cannot delete resource "pods"' in json.loads(ro.value.body)["message"]
    )
    with pytest.raises(ApiException) as other_ns:
        alice.list_namespaced_pod("default")
    assert 'in the namespace "default"' in json.loads(other_ns.value.body)["message"]
    with pytest.raises(ApiException) as unknown:
        client.CoreV1Api(as_user(server, "nobody")).list_node()
    assert unknown.value.status == 401


def test_the_reader_role_reads_but_never_writes(server: LocalApiServer) -> None:
    bob = as_user(server, "bob-token")
    assert client.CoreV1Api(bob).list_node().items == []
    assert (
        client.CustomObjectsApi(bob).list_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "clusterqueues"
        )["items"]
        == []
    )
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(bob).patch_node("n", {"spec": {"unschedulable": True}})
    assert denied.value.status == 403
    with pytest.raises(ApiException):
        client.CoreV1Api(bob).list_secret_for_all_namespaces()


def test_kubectl_sees_the_same_forbidden(server: LocalApiServer, tmp_path: Path) -> None:
    kubectl = require_binary("kubectl")
    kubeconfig = write_kubeconfig(
        tmp_path / "alice", server.url, "alice-token", server.ca_cert.read_bytes()
    )
    out = subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), "get", "nodes"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert 'nodes is forbidden: User "alice" cannot list resource "nodes"' in out.stderr


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        # (verb, group, resource, subresource, namespace, name)
        ("GET", "/api/v1/namespaces/a/pods", {}, ("list", "", "pods", "", "a", "")),
        ("GET", "/api/v1/namespaces/a/pods", {"watch": "true"}, ("watch", "", "pods", "", "a", "")),
        ("GET", "/api/v1/watch/namespaces/a/pods/p", {}, ("watch", "", "pods", "", "a", "p")),
        ("GET", "/api/v1/pods", {}, ("list", "", "pods", "", "", "")),
        (
            "DELETE",
            "/apis/batch/v1/namespaces/a/jobs",
            {},
            ("deletecollection", "batch", "jobs", "", "a", ""),
        ),
        (
            "POST",
            "/api/v1/namespaces/a/pods/p/eviction",
            {},
            ("create", "", "pods", "eviction", "a", "p"),
        ),
        ("PATCH", "/api/v1/nodes/n/status", {}, ("patch", "", "nodes", "status", "", "n")),
        # requestinfo.go: a namespace's own status is a subresource of "namespaces"
        (
            "PUT",
            "/api/v1/namespaces/a/status",
            {},
            ("update", "", "namespaces", "status", "a", "a"),
        ),
        ("GET", "/api/v1/namespaces/a", {}, ("get", "", "namespaces", "", "a", "a")),
    ],
)
def test_request_attributes_as_the_request_info_factory_derives_them(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    attrs = attributes(method, path, query)
    assert attrs.resource_request
    assert (
        attrs.verb,
        attrs.group,
        attrs.resource,
        attrs.subresource,
        attrs.namespace,
        attrs.name,
    ) == expected


def test_discovery_paths_are_non_resource_requests() -> None:
    for path in ("/api", "/api/v1", "/apis/apps/v1", "/openapi/v3", "/metrics"):
        attrs = attributes("GET", path, {})
        assert (attrs.resource_request, attrs.verb, attrs.path) == (False, "get", path)


def test_a_token_file_in_the_state_dir_adds_users(tmp_path: Path) -> None:
    """The real ``--token-auth-file`` format: token,user,uid,"group1,group2"."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "tokens.csv").write_text(
        'dana-token,dana,uid-42,"ops,oncall"\n,skipped,line\nerin-token,erin,uid-7\n'
    )
    with LocalApiServer(state, crds=False) as s:
        review = client.AuthenticationV1Api(as_user(s, "dana-token")).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
        info = review.status.user_info
        assert (info.username, info.uid, info.groups) == (
            "dana",
            "uid-42",
            ["ops", "oncall", "system:authenticated"],
        )
        with pytest.raises(ApiException) as denied:
            client.CoreV1Api(as_user(s, "erin-token")).list_namespaced_pod("default")
        assert json.loads(denied.value.body)["message"] == (
            'pods is forbidden: User "erin" cannot list resource "pods" in API group "" in the '
            'namespace "default"'
        )
        client.RbacAuthorizationV1Api(s.api_client()).create_cluster_role_binding(
            {
                "metadata": {"name": "oncall-view"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "view",
                },
                "subjects": [{"kind": "Group", "name": "oncall"}],
            }
        )
        assert client.CoreV1Api(as_user(s, "dana-token")).list_namespaced_pod("default").items == []
    (state / "tokens.csv").write_text("short,line\n")
    with pytest.raises(ValueError, match="must have at least 3 columns"):
        LocalApiServer(state, crds=False)


def test_no_credentials_is_the_anonymous_user(server: LocalApiServer) -> None:
    """kube-apiserver's --anonymous-auth (on by default): a request without a token is
    ``system:anonymous`` in ``system:unauthenticated``, which may read only the public
    info (system:public-info-viewer), while a token nobody issued is 401."""
    cfg = client.Configuration()
    cfg.host = server.url
    cfg.ssl_ca_cert = str(server.ca_cert)
    anonymous = client.ApiClient(cfg)
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(anonymous).list_namespaced_pod("default")
    assert denied.value.status == 403
    assert json.loads(denied.value.body)["message"] == (
        'pods is forbidden: User "system:anonymous" cannot list resource "pods" in API group "" '
        'in the namespace "default"'
    )
    assert client.VersionApi(anonymous).get_code().major == "1"
