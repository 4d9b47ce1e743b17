"""What real clients put on the wire, and what the simulated API server makes of it:
protobuf bodies, chunked bodies, field validation, Lease MicroTimes, lists at a future
resourceVersion. Real kubectl where it applies, the official client and plain HTTP for
the rest; every message is the real server's wording (upstream file in each test)."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.apiserver.proto import coordination_v1_pb2, core_v1_pb2, meta_v1_pb2, runtime_pb2
from tests.conftest import KUBECTL, Kubectl, wait_for

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

PROTOBUF = "application/vnd.kubernetes.protobuf"


@pytest.fixture
def kubectl(sim: LocalApiServer, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.kubeconfig, tmp_path)


def _connection(sim: LocalApiServer) -> http.client.HTTPSConnection:
    ctx = ssl.create_default_context(cafile=str(sim.ca_cert))
    host, port = sim.url.removeprefix("https://").rsplit(":", 1)
    return http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)


def _request(
    conn: http.client.HTTPSConnection,
    sim: LocalApiServer,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    all_headers = {"Authorization": f"Bearer {sim.token}", **(headers or {})}
    conn.request(method, path, body=body, headers=all_headers)
    resp = conn.getresponse()
    data = resp.read()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


def _get_json(kubectl: Kubectl, *args: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kubectl("get", *args, "-o", "json").stdout)
    return result


# -- 1. protobuf bodies --------------------------------------------------------------------


@needs_kubectl
def test_kubectl_create_sends_protobuf_and_the_objects_are_stored_as_json(
    kubectl: Kubectl,
) -> None:
    made = kubectl("create", "namespace", "x", "-v=6")
    assert "namespace/x created" in made.stdout
    # -v=6 logs each request; the body went as protobuf and was accepted
    logged = kubectl("create", "configmap", "c", "--from-literal=a=b", "-v=8").stderr
    assert f"Content-Type: {PROTOBUF}" in logged
    assert "201 Created" in logged
    kubectl("create", "deployment", "d", "--image=nginx", "--replicas=2")
    kubectl("create", "job", "j", "--image=busybox")

    ns = _get_json(kubectl, "namespace", "x")
    assert ns["metadata"]["name"] == "x"
    assert ns["status"]["phase"] == "Active"
    assert "namespace" not in ns["metadata"]  # empty strings are omitempty, not ""
    cm = _get_json(kubectl, "configmap", "c")
    assert cm["data"] == {"a": "b"}
    deploy = _get_json(kubectl, "deployment", "d")
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["selector"] == {"matchLabels": {"app": "d"}}
    template = deploy["spec"]["template"]
    # Go writes a zero metav1.Time as null, as a real server shows it
    assert template["metadata"] == {"creationTimestamp": None, "labels": {"app": "d"}}
    assert [c["image"] for c in template["spec"]["containers"]] == ["nginx"]
    # IntOrString from protobuf comes back as the JSON string it was
    assert deploy["spec"]["strategy"]["rollingUpdate"] == {
        "maxSurge": "25%",
        "maxUnavailable": "25%",
    }
    job = _get_json(kubectl, "job", "j")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox"
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # a Secret goes as protobuf too; its data is stored base64, as the real server keeps it
    kubectl("create", "secret", "generic", "s", "--from-literal=k=v")
    secret = _get_json(kubectl, "secret", "s")
    assert secret["data"] == {"k": "dg=="}
    assert secret["type"] == "Opaque"


@needs_kubectl
def test_kubectl_debug_node_creates_its_pod_through_protobuf(kubectl: Kubectl) -> None:
    kubectl("create", "-f", "-", stdin='{"apiVersion": "v1", "kind": "Node", '
            '"metadata": {"name": "n1"}}')  # fmt: skip
    made = kubectl("debug", "node/n1", "--image=busybox", "--profile=general", "-v=8")
    # kubectl's words, then the protobuf POST the server accepted
    assert "Creating debugging pod node-debugger-n1-" in made.stdout
    assert f"Content-Type: {PROTOBUF}" in made.stderr and "201 Created" in made.stderr
    pods = json.loads(kubectl("get", "pods", "-o", "json").stdout)["items"]
    [pod] = [p for p in pods if p["metadata"]["name"].startswith("node-debugger-n1-")]
    spec = pod["spec"]
    assert spec["nodeName"] == "n1" and spec["hostPID"] is True and spec["hostNetwork"] is True
    assert spec["containers"][0]["image"] == "busybox"
    # the node's root file system, as the general profile mounts it
    assert {"name": "host-root", "hostPath": {"path": "/", "type": ""}} in spec["volumes"]


def test_an_answer_in_protobuf_for_a_client_that_accepts_only_protobuf(
    sim: LocalApiServer, core: client.CoreV1Api
) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"k": "v"}})
    conn = _connection(sim)
    code, headers, body = _request(
        conn, sim, "GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/none",
        headers={"Accept": PROTOBUF},
    )
    assert code == 404
    assert headers["content-type"] == PROTOBUF
    # k8s\0 + runtime.Unknown{typeMeta, raw=metav1.Status}
    assert body[:4] == b"k8s\x00"
    envelope = runtime_pb2.Unknown()
    envelope.ParseFromString(body[4:])
    assert (envelope.typeMeta.apiVersion, envelope.typeMeta.kind) == ("v1", "Status")
    status = meta_v1_pb2.Status()
    status.ParseFromString(envelope.raw)
    assert status.code == 404
    assert status.reason == "NotFound"
    assert status.message == 'leases.coordination.k8s.io "none" not found'

    code, headers, body = _request(
        conn, sim, "GET", "/api/v1/namespaces/default/configmaps", headers={"Accept": PROTOBUF}
    )
    assert code == 200
    envelope = runtime_pb2.Unknown()
    envelope.ParseFromString(body[4:])
    assert envelope.typeMeta.kind == "ConfigMapList"
    listed = core_v1_pb2.ConfigMapList()
    listed.ParseFromString(envelope.raw)
    assert [(i.metadata.name, dict(i.data)) for i in listed.items] == [("c", {"k": "v"})]
    assert int(listed.metadata.resourceVersion) > 0

    # kubectl's Accept (protobuf, then JSON) is answered in JSON
    code, headers, body = _request(
        conn, sim, "GET", "/api/v1/namespaces/default/configmaps/c",
        headers={"Accept": f"{PROTOBUF},application/json"},
    )
    assert code == 200
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["data"] == {"k": "v"}


def test_a_protobuf_body_a_go_client_writes_is_decoded(sim: LocalApiServer) -> None:
    """A Lease the way client-go's protobuf codec writes it (gogo writes every
    non-pointer field, zero or not), built here with the generated messages."""
    lease = coordination_v1_pb2.Lease()
    lease.metadata.name = "ctrl"
    lease.metadata.namespace = ""
    lease.metadata.generateName = ""
    lease.spec.holderIdentity = "me"
    lease.spec.leaseDurationSeconds = 15
    lease.spec.renewTime.seconds = 1_767_225_600  # 2026-01-01T00:00:00Z
    lease.spec.renewTime.nanos = 123_456_000
    envelope = runtime_pb2.Unknown()
    envelope.typeMeta.apiVersion = "coordination.k8s.io/v1"
    envelope.typeMeta.kind = "Lease"
    envelope.raw = lease.SerializeToString()
    conn = _connection(sim)
    code, _, body = _request(
        conn, sim, "POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        body=b"k8s\x00" + envelope.SerializeToString(),
        headers={"Content-Type": PROTOBUF, "Accept": "application/json"},
    )
    assert code == 201, body
    stored = json.loads(body)
    assert stored["spec"] == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "renewTime": "2026-01-01T00:00:00.123456Z",
    }
    assert "generateName" not in stored["metadata"]


def test_a_body_in_a_format_the_server_does_not_speak_is_415(sim: LocalApiServer) -> None:
    conn = _connection(sim)
    code, _, body = _request(
        conn, sim, "POST", "/api/v1/namespaces",
        body=b"name: x", headers={"Content-Type": "text/plain"},
    )
    assert code == 415
    status = json.loads(body)
    assert status["reason"] == "UnsupportedMediaType"
    # k8s.io/apiserver pkg/endpoints/handlers/negotiation/errors.go, errUnsupportedMediaType
    assert status["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml, application/vnd.kubernetes.protobuf"
    )
    # custom resources have no protobuf form
    code, _, body = _request(
        conn, sim, "POST", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
        body=b"k8s\x00", headers={"Content-Type": PROTOBUF},
    )
    assert code == 415
    assert json.loads(body)["message"].endswith(
        "accepted media types include: application/json, application/yaml"
    )


# -- 2. chunked bodies ---------------------------------------------------------------------


@needs_kubectl
def test_kubectl_create_raw_sends_a_chunked_body(kubectl: Kubectl, tmp_path: Path) -> None:
    spec = tmp_path / "ns.json"
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "raw"}}
    spec.write_text(json.dumps(namespace))
    # kubectl streams the file: no Content-Length, Transfer-Encoding: chunked
    out = kubectl("create", "--raw", "/api/v1/namespaces", "-f", str(spec))
    assert json.loads(out.stdout)["metadata"]["name"] == "raw"
    assert _get_json(kubectl, "namespace", "raw")["status"]["phase"] == "Active"


def test_a_chunked_body_leaves_the_keep_alive_connection_in_step(sim: LocalApiServer) -> None:
    conn = _connection(sim)
    chunks = [b'{"metadata":', b' {"name": "chunked"}}']
    conn.request(
        "POST",
        "/api/v1/namespaces",
        body=iter(chunks),
        encode_chunked=True,
        headers={
            "Authorization": f"Bearer {sim.token}",
            "Content-Type": "application/json",
            "Transfer-Encoding": "chunked",
        },
    )
    first = conn.getresponse()
    assert first.status == 201
    assert json.loads(first.read())["metadata"]["name"] == "chunked"
    # the next request on the same connection is read as a request, not as the body's rest
    code, _, body = _request(conn, sim, "GET", "/api/v1/namespaces/chunked")
    assert code == 200
    assert json.loads(body)["metadata"]["name"] == "chunked"


# -- 3. field validation -------------------------------------------------------------------

_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replica: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
"""


@needs_kubectl
def test_unknown_fields_strict_warn_ignore(kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(_DEPLOYMENT)
    strict = kubectl("create", "-f", str(manifest), check=False)
    assert strict.returncode != 0
    # k8s.io/apiserver pkg/endpoints/handlers/rest.go transformDecodeError, around
    # sigs.k8s.io/json's strict error
    assert (
        'Deployment in version "v1" cannot be handled as a Deployment: '
        'strict decoding error: unknown field "spec.replica"'
    ) in strict.stderr
    assert kubectl("get", "deployments", "-o", "name").stdout == ""

    warned = kubectl("create", "-f", str(manifest), "--validate=warn")
    assert 'Warning: unknown field "spec.replica"' in warned.stderr
    stored = _get_json(kubectl, "deployment", "web")
    assert "replica" not in stored["spec"]  # unknown fields are never stored
    assert stored["spec"]["replicas"] == 1

    kubectl("delete", "deployment", "web")
    ignored = kubectl("create", "-f", str(manifest), "--validate=false")
    assert "Warning" not in ignored.stderr
    assert "replica" not in _get_json(kubectl, "deployment", "web")["spec"]


@needs_kubectl
def test_a_type_error_reads_as_go_json(kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(_DEPLOYMENT.replace("replica: 3", 'replicas: "3"'))
    out = kubectl("apply", "-f", str(manifest), check=False)
    assert out.returncode != 0
    # sigs.k8s.io/json internal/golang/encoding/json/decode.go UnmarshalTypeError
    assert (
        'Deployment in version "v1" cannot be handled as a Deployment: json: cannot '
        "unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
    ) in out.stderr
    assert "None" not in out.stderr


def test_duplicate_fields_and_the_warning_header(sim: LocalApiServer) -> None:
    conn = _connection(sim)
    body = b'{"metadata": {"name": "dup", "name": "dup"}, "data": {"a": "1"}, "bogus": 1}'
    code, _, answer = _request(
        conn, sim, "POST", "/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
        body=body, headers={"Content-Type": "application/json"},
    )
    assert code == 400
    assert json.loads(answer)["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
        'duplicate field "metadata.name", unknown field "bogus"'
    )
    # no fieldValidation: Warn, the real server's default (handlers/rest.go fieldValidation)
    code, headers, answer = _request(
        conn, sim, "POST", "/api/v1/namespaces/default/configmaps",
        body=body, headers={"Content-Type": "application/json"},
    )
    assert code == 201
    assert headers["warning"] == (
        '299 - "duplicate field \\"metadata.name\\"", 299 - "unknown field \\"bogus\\""'
    )
    assert "bogus" not in json.loads(answer)


def test_type_errors_name_the_go_struct_and_type(sim: LocalApiServer) -> None:
    # (the official client checks types itself, so these go as plain HTTP)
    cases = [
        (
            {"metadata": {"name": 5}},
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.name "
            "of type string",
        ),
        (
            {"metadata": {"name": "c"}, "data": ["a"]},
            "json: cannot unmarshal array into Go struct field ConfigMap.data of type "
            "map[string]string",
        ),
        (
            {"metadata": {"name": "c", "labels": {"a": True}}},
            "json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.labels "
            "of type string",
        ),
    ]
    conn = _connection(sim)
    for body, message in cases:
        code, _, answer = _request(
            conn, sim, "POST", "/api/v1/namespaces/default/configmaps",
            body=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
        )
        assert code == 400
        assert json.loads(answer)["message"] == (
            f'ConfigMap in version "v1" cannot be handled as a ConfigMap: {message}'
        )


# -- 4. Leases -----------------------------------------------------------------------------


def _lease(spec: dict[str, Any], name: str = "l") -> bytes:
    return json.dumps(
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
         "spec": spec}
    ).encode()


def test_lease_micro_times_validation_and_wording(sim: LocalApiServer) -> None:
    conn = _connection(sim)
    path = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    json_type = {"Content-Type": "application/json"}
    code, _, body = _request(
        conn, sim, "POST", path, _lease({
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T01:00:00.000001+01:00",
            "renewTime": "2026-01-01T00:00:05.250000+00:00",
        }), json_type,
    )
    assert code == 201, body
    spec = json.loads(body)["spec"]
    # metav1.MicroTime.MarshalJSON: UTC, RFC3339Micro
    assert spec["acquireTime"] == "2026-01-01T00:00:00.000001Z"
    assert spec["renewTime"] == "2026-01-01T00:00:05.250000Z"

    code, _, body = _request(
        conn, sim, "POST", path, _lease({"leaseDurationSeconds": 0}, "zero"), json_type
    )
    assert code == 422
    # kubernetes pkg/apis/coordination/validation/validation.go ValidateLeaseSpec
    assert json.loads(body)["message"] == (
        'Lease.coordination.k8s.io "zero" is invalid: spec.leaseDurationSeconds: '
        "Invalid value: 0: must be greater than 0"
    )
    bad_times = [
        ("x", 'cannot parse "x" as "2006"'),
        # RFC3339Micro's ".000000" takes exactly six digits (Go time.Parse, stdFracSecond0)
        ("2026-01-01T00:00:00Z", 'cannot parse "Z" as ".000000"'),
        ("2026-01-01T00:00:00.5Z", 'cannot parse ".5Z" as ".000000"'),
    ]
    for text, why in bad_times:
        code, _, body = _request(
            conn, sim, "POST", path, _lease({"renewTime": text}, "bad"), json_type
        )
        assert code == 400
        assert json.loads(body)["message"] == (
            'Lease in version "v1" cannot be handled as a Lease: parsing time '
            f'"{text}" as "2006-01-02T15:04:05.000000Z07:00": {why}'
        )


@needs_kubectl
def test_kubectl_sees_a_malformed_lease_time_rejected(kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "lease.yaml"
    manifest.write_text(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: l}\n"
        "spec: {renewTime: x, leaseDurationSeconds: 10}\n"
    )
    out = kubectl("apply", "-f", str(manifest), check=False)
    assert out.returncode != 0
    assert (
        'Lease in version "v1" cannot be handled as a Lease: parsing time "x" as '
        '"2006-01-02T15:04:05.000000Z07:00": cannot parse "x" as "2006"'
    ) in out.stderr
    manifest.write_text(manifest.read_text().replace("renewTime: x", "holderIdentity: me"))
    kubectl("apply", "-f", str(manifest))
    assert _get_json(kubectl, "lease", "l")["spec"]["leaseDurationSeconds"] == 10


def test_the_official_leader_election_holds_and_renews_a_lease(
    api: client.ApiClient,
) -> None:
    coordination = client.CoordinationV1Api(api)
    lock = LeaseLock("krea-ops-leader", "default", "candidate-1")
    lock.api_instance = coordination
    leading, done = threading.Event(), threading.Event()

    def on_started() -> None:
        leading.set()
        done.wait(60)
        raise RuntimeError("test over: stop leading")

    config = electionconfig.Config(
        lock,
        lease_duration=6,
        renew_deadline=4,
        retry_period=1,
        onstarted_leading=on_started,
        onstopped_leading=lambda: None,
    )
    election = leaderelection.LeaderElection(config)
    runner = threading.Thread(target=election.run, daemon=True)
    runner.start()
    try:
        assert leading.wait(60)
        first = coordination.read_namespaced_lease("krea-ops-leader", "default")
        assert first.spec.holder_identity == "candidate-1"
        assert first.spec.lease_duration_seconds == 6

        def renewed() -> bool:
            now = coordination.read_namespaced_lease("krea-ops-leader", "default")
            return bool(now.spec.renew_time > first.spec.renew_time)

        wait_for(renewed, timeout=60)
    finally:
        done.set()
        runner.join(60)
    assert not runner.is_alive()


# -- 5. lists at a future resourceVersion ---------------------------------------------------


def test_a_list_at_a_future_resource_version_is_504(core: client.CoreV1Api) -> None:
    current = int(core.list_namespaced_pod("default").metadata.resource_version)
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_pod("default", resource_version=str(current + 1000))
    assert exc.value.status == 504
    assert exc.value.headers["Retry-After"] == "1"
    status = json.loads(exc.value.body)
    # k8s.io/apiserver pkg/storage/errors.go NewTooLargeResourceVersionError
    assert status["reason"] == "Timeout"
    assert status["message"] == (
        f"Timeout: Too large resource version: {current + 1000}, current: {current}"
    )
    assert status["details"] == {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }
    # the current version, or none, lists as before
    core.list_namespaced_pod("default", resource_version=str(current))


@needs_kubectl
def test_kubectl_get_at_a_future_resource_version(kubectl: Kubectl) -> None:
    out = kubectl(
        "get", "--raw", "/api/v1/namespaces/default/pods?resourceVersion=99999999",
        check=False, timeout=120,
    )
    assert out.returncode != 0
    assert "Timeout: Too large resource version: 99999999, current: " in out.stderr
