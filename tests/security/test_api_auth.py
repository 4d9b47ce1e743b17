"""The simulated API server refuses: a token it did not issue, one that expired, one of a
deleted service account or a malformed Authorization header is 401 on every verb, reads
and writes alike; no token at all is the anonymous user, 403; krea-ops' reader role is
403 on every write. Nothing refused changes anything. Its one listener speaks only TLS.
Seen raw, through the official client's wire format, and through kubectl."""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from krea_ops.sim.apiserver.authz import policies_from_rbac
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.common.kubeconfig import write_kubeconfig
from tests.conftest import ROOT, Kubectl, require_binary

MERGE = "application/merge-patch+json"
# (method, path, body, content type): a read, a watch, discovery, and each kind of write
# krea-ops makes (cordon, eviction, Event, Lease) plus a delete.
REQUESTS: list[tuple[str, str, Any, str]] = [
    ("GET", "/api/v1/nodes", None, ""),
    ("GET", "/api/v1/nodes?watch=true&timeoutSeconds=1", None, ""),
    ("GET", "/apis", None, ""),
    ("PATCH", "/api/v1/nodes/gpu-node-000", {"spec": {"unschedulable": True}}, MERGE),
    (
        "POST",
        "/api/v1/namespaces/default/pods/p/eviction",
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}},
        "application/json",
    ),
    (
        "POST",
        "/api/v1/namespaces/default/events",
        {"metadata": {"name": "e"}, "involvedObject": {"kind": "Node", "name": "gpu-node-000"}},
        "application/json",
    ),
    (
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        {"metadata": {"name": "krea-ops-node-health"}, "spec": {"holderIdentity": "me"}},
        "application/json",
    ),
    ("DELETE", "/api/v1/namespaces/default/pods/p", None, ""),
]
# What the reader answers here of REQUESTS: the reads. This server grants the role as ABAC
# policies (``policies_from_rbac``: read-only, so a watch too, though the role grants no
# watch); the role's exact verbs are checked under RBAC in test_reader_role_exact.py.
READS = {"/api/v1/nodes", "/api/v1/nodes?watch=true&timeoutSeconds=1", "/apis"}


class Clock:
    def __init__(self) -> None:
        self.offset = dt.timedelta()

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC) + self.offset


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def server(tmp_path: Path, clock: Clock) -> Iterator[LocalApiServer]:
    reader = list(yaml.safe_load_all((ROOT / "deploy/rbac/reader.yaml").read_text()))
    s = LocalApiServer(
        tmp_path / "state",
        crds=False,
        clock=clock,
        users={"reader-token-0123456789": ("rita", ["krea-ops:readers"])},
        policies=policies_from_rbac(reader, "krea-ops:readers"),
    )
    try:
        yield s
    finally:
        s.close()


def call(s: LocalApiServer, method: str, path: str, body: Any, ctype: str, auth: str | None):
    """One request on a fresh TLS connection: (status, parsed body)."""
    context = ssl.create_default_context(cafile=str(s.ca_cert))
    conn = http.client.HTTPSConnection(s.front.host, s.front.port, context=context, timeout=30)
    headers = {"Accept": "application/json"}
    if auth is not None:
        headers["Authorization"] = auth
    if ctype:
        headers["Content-Type"] = ctype
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers=headers)  # fmt: skip
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    first = raw.split(b"\n", 1)[0]
    return resp.status, json.loads(first) if first.startswith(b"{") else None


def snapshot(core: client.CoreV1Api, coord: client.CoordinationV1Api) -> Any:
    return (
        core.read_node("gpu-node-000").metadata.resource_version,
        [p.metadata.name for p in core.list_namespaced_pod("default").items],
        [e.metadata.name for e in core.list_namespaced_event("default").items],
        [x.metadata.name for x in coord.list_namespaced_lease("default").items],
    )


def test_bad_credentials_are_401_and_no_credentials_403_on_every_verb(
    server: LocalApiServer, clock: Clock
) -> None:
    admin = server.api_client()
    core, coord = client.CoreV1Api(admin), client.CoordinationV1Api(admin)
    core.create_node({"metadata": {"name": "gpu-node-000"}})
    core.create_namespaced_pod(
        "default",
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
    )
    for sa in ("brief", "gone"):
        core.create_namespaced_service_account("default", {"metadata": {"name": sa}})
    brief, gone = (
        core.create_namespaced_service_account_token(
            sa, "default", {"spec": {"expirationSeconds": 600}}
        ).status.token
        for sa in ("brief", "gone")
    )
    core.delete_namespaced_service_account("gone", "default")
    before = snapshot(core, coord)

    bad = {
        "a token nobody issued": "Bearer " + "x" * 43,
        "an empty bearer token": "Bearer ",
        "basic auth": "Basic " + base64.b64encode(b"admin:" + server.token.encode()).decode(),
        "the token without its scheme": server.token,
        "a deleted service account's token": f"Bearer {gone}",
        "a forged token (claims changed, signature kept)": "Bearer " + _forged(brief),
    }
    for what, auth in bad.items():
        for method, path, body, ctype in REQUESTS:
            status, answer = call(server, method, path, body, ctype, auth)
            assert status == 401, (what, method, path, status, answer)
            assert answer is not None and answer["reason"] == "Unauthorized"
    # The same service account's token works until it expires, then is 401 everywhere.
    assert call(server, "GET", "/api/v1/nodes", None, "", f"Bearer {brief}")[0] == 403
    clock.offset = dt.timedelta(minutes=11)
    for method, path, body, ctype in REQUESTS:
        assert call(server, method, path, body, ctype, f"Bearer {brief}")[0] == 401, path
    clock.offset = dt.timedelta()

    # No credentials at all: the anonymous user, who may do nothing here.
    for method, path, body, ctype in REQUESTS:
        status, answer = call(server, method, path, body, ctype, None)
        assert status == 403 and answer is not None, (method, path, status)
        assert 'User "system:anonymous"' in answer["message"]
    # ... but may see the server is up, as on a real one (system:public-info-viewer).
    assert call(server, "GET", "/version", None, "", None)[0] == 200

    # The reader role reads and never writes.
    reader = "Bearer reader-token-0123456789"
    for method, path, body, ctype in REQUESTS:
        status, answer = call(server, method, path, body, ctype, reader)
        expected = 200 if path in READS else 403
        assert status == expected, (method, path, status, answer)
        if expected == 403:
            assert answer is not None and 'User "rita" cannot' in answer["message"]
    assert snapshot(core, coord) == before  # nothing refused changed anything
    admin.close()


def _forged(token: str) -> str:
    head, claims, sig = token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    decoded["sub"] = "system:serviceaccount:kube-system:admin"
    body = base64.urlsafe_b64encode(json.dumps(decoded).encode()).rstrip(b"=").decode()
    return f"{head}.{body}.{sig}"


def test_the_api_port_answers_nothing_in_plain_http(server: LocalApiServer) -> None:
    with socket.create_connection((server.front.host, server.front.port), timeout=30) as sock:
        sock.sendall(b"GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert b"HTTP/1." not in got and b"nodes" not in got


def test_kubectl_is_refused_the_same_way(server: LocalApiServer, tmp_path: Path) -> None:
    require_binary("kubectl")
    admin = Kubectl(server.kubeconfig, tmp_path / "admin")
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-000"}}
    admin("create", "-f", "-", stdin=json.dumps(node))
    ca = server.ca_cert.read_bytes()
    wrong = Kubectl(write_kubeconfig(tmp_path / "wrong", server.url, "x" * 43, ca), tmp_path / "w")
    for args in (("get", "nodes"), ("cordon", "gpu-node-000"), ("auth", "whoami")):
        out = wrong(*args, check=False)
        assert out.returncode == 1, args
        # kubectl's words for a 401 (the reason differs with the request it was on)
        last = out.stderr.splitlines()[-1]
        assert last.startswith("error: You must be logged in to the server ("), out.stderr
    reader = Kubectl(
        write_kubeconfig(tmp_path / "reader", server.url, "reader-token-0123456789", ca),
        tmp_path / "r",
    )
    assert reader("get", "nodes", "-o", "name").stdout == "node/gpu-node-000\n"
    # (kubectl cordon prints the refusal and exits 0 on a real server too)
    cordon = reader("cordon", "gpu-node-000", check=False)
    assert 'User "rita" cannot patch resource "nodes"' in cordon.stderr
    patch = reader("patch", "node", "gpu-node-000", "-p", '{"spec":{"unschedulable":true}}',
                   check=False)  # fmt: skip
    assert patch.returncode == 1
    assert 'User "rita" cannot patch resource "nodes"' in patch.stderr
    assert reader("auth", "can-i", "patch", "nodes", check=False).stdout == "no\n"
    assert admin("get", "node", "gpu-node-000", "-o", "jsonpath={.spec.unschedulable}").stdout == ""
