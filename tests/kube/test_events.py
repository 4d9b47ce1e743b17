"""Events as an operator sees them with a real ``kubectl get events``: the fields, one
series for repeats, and no credential in any note."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from krea_ops.kube.cluster import Cluster
from krea_ops.kube.events import (
    NORMAL,
    WARNING,
    EventRecorder,
    ObjectRef,
    redact,
)
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import KUBECTL, Kubectl
from tests.kube.conftest import gpu_node, running_pod

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

T0 = 1_795_000_000.0  # 2026-11-18T10:13:20Z
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def events(kubectl: Kubectl, namespace: str = "default") -> list[dict[str, Any]]:
    """The events krea-ops reported in ``namespace`` (a control plane reports its own too:
    the node controller's ``RegisteredNode``)."""
    items: list[dict[str, Any]] = json.loads(
        kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    )["items"]
    return [e for e in items if e.get("reportingComponent") == "krea.ai/krea-ops"]


def node_ref(cluster: Cluster, name: str) -> ObjectRef:
    return ObjectRef.of(cluster.get("get node", f"/api/v1/nodes/{name}"), kind="Node")


def test_an_event_reaches_kubectl_with_every_field(cluster: Cluster, kubectl: Kubectl) -> None:
    gpu_node(cluster, "gpu-node-000")
    ref = node_ref(cluster, "gpu-node-000")
    recorder = EventRecorder(cluster, instance="krea-ops-alice@laptop")

    recorded = recorder.record(ref, WARNING, "GpuHot", "Cordon", "GPU 3 at 91 °C for 5 min")

    assert recorded.written and recorded.error is None and recorded.namespace == "default"
    [event] = events(kubectl)
    assert event["metadata"]["name"] == recorded.name
    assert recorded.name.startswith("gpu-node-000.")
    assert event["involvedObject"] == {
        "kind": "Node",
        "name": "gpu-node-000",
        "uid": ref.uid,
        "apiVersion": "v1",
        "resourceVersion": ref.resource_version,
    }
    assert (event["type"], event["reason"], event["action"]) == ("Warning", "GpuHot", "Cordon")
    assert event["message"] == "GPU 3 at 91 °C for 5 min"
    assert event["reportingComponent"] == "krea.ai/krea-ops"
    assert event["reportingInstance"] == "krea-ops-alice@laptop"
    assert MICRO_TIME.match(event["eventTime"])
    assert "series" not in event and "count" not in event
    assert event["firstTimestamp"] is None  # a new-style Event: eventTime, no legacy times

    table = kubectl("get", "events", "-n", "default").stdout.splitlines()
    assert table[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    [row] = [line for line in table[1:] if "GpuHot" in line]
    assert row.split()[1:5] == ["Warning", "GpuHot", "node/gpu-node-000", "GPU"]


def test_a_pods_event_lives_in_its_namespace_and_names_the_related_node(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    gpu_node(cluster, "gpu-node-000")
    pod = ObjectRef.of(running_pod(cluster, "inf-0", {"app": "inference"}), kind="Pod")
    recorder = EventRecorder(cluster)
    recorder.record(
        pod, NORMAL, "Evicted", "Evict", "evicted for node maintenance",
        related=node_ref(cluster, "gpu-node-000"),
    )  # fmt: skip
    [event] = events(kubectl, "default")
    assert event["involvedObject"]["kind"] == "Pod"
    assert event["involvedObject"]["namespace"] == "default"
    assert event["related"]["name"] == "gpu-node-000"


def test_repeats_form_one_series_as_client_go_writes_it(cluster: Cluster, kubectl: Kubectl) -> None:
    gpu_node(cluster, "gpu-node-000")
    clock = Clock()
    recorder = EventRecorder(cluster, clock=clock)
    ref = node_ref(cluster, "gpu-node-000")

    def occur() -> Any:
        clock.now += 30
        return recorder.record(ref, WARNING, "QuarantineHeld", "Hold", "blast cap reached")

    first, second, third = occur(), occur(), occur()

    assert first.name == second.name == third.name
    assert (first.written, second.written, third.written) == (True, True, False)
    [event] = events(kubectl)
    assert event["series"]["count"] == 2  # the second occurrence is written at once
    assert recorder.flush()[0].count == 3  # later ones when flushed (or every 30 min)
    [event] = events(kubectl)
    assert event["series"]["count"] == 3
    assert MICRO_TIME.match(event["series"]["lastObservedTime"])
    wide = kubectl("get", "events", "-n", "default", "-o", "wide").stdout.splitlines()
    header = wide[0].split()
    assert header[-2:] == ["COUNT", "NAME"] and wide[1].split()[-2:] == ["3", first.name]

    clock.now += 7 * 60  # no occurrence for longer than a series lasts: the next is new
    fourth = occur()
    assert fourth.name != first.name and fourth.count == 1
    assert len(events(kubectl)) == 2


def test_a_different_finding_is_a_different_event(cluster: Cluster, kubectl: Kubectl) -> None:
    gpu_node(cluster, "gpu-node-000")
    recorder = EventRecorder(cluster)
    ref = node_ref(cluster, "gpu-node-000")
    recorder.record(ref, WARNING, "GpuHot", "Cordon", "hot")
    recorder.record(ref, WARNING, "NvlinkErrors", "Cordon", "nvlink")
    recorder.record(ref, NORMAL, "GpuHot", "Cordon", "hot")
    assert len(events(kubectl)) == 3


def test_no_note_carries_a_credential(
    sim: LocalApiServer, cluster: Cluster, kubectl: Kubectl
) -> None:
    gpu_node(cluster, "gpu-node-000")
    recorder = EventRecorder(cluster)
    note = (
        f"kubeconfig token {sim.token} used; Authorization: Bearer abc.def-ghi; "
        "password=hunter22 client-key-data: LS0tLS1CRUdJTi "
        "jwt eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.c2lnbmF0dXJl"
    )
    recorder.record(node_ref(cluster, "gpu-node-000"), NORMAL, "Audited", "Evict", note)
    [event] = events(kubectl)
    stored = event["message"]
    for secret in (sim.token, "abc.def-ghi", "hunter22", "LS0tLS1CRUdJTi", "c2lnbmF0dXJl"):
        assert secret not in stored
    assert stored.startswith("kubeconfig token <redacted> used; Authorization: Bearer <redacted>")


def test_redaction_leaves_ordinary_text_alone() -> None:
    text = "cordoned gpu-node-003: XID 79 on GPU 5 (token bucket at 3/s), reason=gpu-hot"
    assert redact(text) == text
    assert redact("api_key: s3cr3tvalue ok") == "api_key: <redacted> ok"


def test_long_notes_are_cut_to_the_apis_limit(cluster: Cluster, kubectl: Kubectl) -> None:
    gpu_node(cluster, "gpu-node-000")
    EventRecorder(cluster).record(
        node_ref(cluster, "gpu-node-000"), NORMAL, "Long", "Report", "é" * 2000
    )
    [event] = events(kubectl)
    assert len(event["message"].encode()) <= 1024 and event["message"].endswith(" ...")


def test_a_refused_write_is_reported_not_raised(cluster: Cluster) -> None:
    gone = ObjectRef("Pod", "inf-0", namespace="no-such-namespace")
    recorded = EventRecorder(cluster).record(gone, WARNING, "Evicted", "Evict", "x")
    assert not recorded.written
    assert recorded.error is not None and "not found" in recorded.error


def test_what_the_api_requires_is_checked_before_anything_is_sent(cluster: Cluster) -> None:
    with pytest.raises(ValueError, match="qualified name"):
        EventRecorder(cluster, controller="krea ops")
    recorder = EventRecorder(cluster)
    ref = ObjectRef("Node", "gpu-node-000")
    with pytest.raises(ValueError, match="Normal or Warning"):
        recorder.record(ref, "Error", "GpuHot", "Cordon", "x")
    with pytest.raises(ValueError, match="reason and an action"):
        recorder.record(ref, NORMAL, "GpuHot", "", "x")
