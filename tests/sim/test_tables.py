"""Server-side Tables: built-in printers, CRD printer columns, ages, and kubectl's view."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from krea_ops.sim.apiserver.tables import (
    TableError,
    column_definitions,
    evaluate_jsonpath,
    human_duration,
    to_table,
    translate_timestamp_since,
)

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
CRDS = Path(__file__).resolve().parents[2] / "krea_ops" / "sim" / "crds"
KUBECTL = shutil.which("kubectl") or (
    "/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else None
)


def ago(**kw: float) -> str:
    return (NOW - timedelta(**kw)).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "creationTimestamp": ago(minutes=5),
        "resourceVersion": "7",
        "uid": f"uid-{name}",
        **extra,
    }


def row(obj: dict[str, Any], group: str, kind: str, **kw: Any) -> list[Any]:
    table = to_table([obj], group=group, kind=kind, now=NOW, **kw)
    return table["rows"][0]["cells"]


def names(group: str, kind: str, printer_columns: Any = None) -> list[str]:
    return [c["name"] for c in column_definitions(group, kind, printer_columns)]


def wide_names(group: str, kind: str, printer_columns: Any = None) -> list[str]:
    return [
        c["name"] for c in column_definitions(group, kind, printer_columns) if c["priority"] == 1
    ]


def printer_columns(file: str, version: str) -> list[dict[str, Any]]:
    crd = yaml.safe_load((CRDS / file).read_text())
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return list(v.get("additionalPrinterColumns") or [])
    raise AssertionError(version)


# -- ages ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        (timedelta(seconds=-5), "<invalid>"),
        (timedelta(seconds=-2), "<invalid>"),
        (timedelta(seconds=-1.5), "0s"),
        (timedelta(seconds=-1), "0s"),
        (timedelta(0), "0s"),
        (timedelta(seconds=0.9), "0s"),
        (timedelta(seconds=45), "45s"),
        (timedelta(seconds=119), "119s"),
        (timedelta(minutes=2), "2m"),
        (timedelta(minutes=5), "5m"),
        (timedelta(minutes=5, seconds=10), "5m10s"),
        (timedelta(minutes=9, seconds=59), "9m59s"),
        (timedelta(minutes=10, seconds=30), "10m"),
        (timedelta(minutes=179), "179m"),
        (timedelta(hours=3), "3h"),
        (timedelta(hours=3, minutes=12, seconds=40), "3h12m"),
        (timedelta(hours=7, minutes=59), "7h59m"),
        (timedelta(hours=8, minutes=30), "8h"),
        (timedelta(hours=47, minutes=59), "47h"),
        (timedelta(days=2), "2d"),
        (timedelta(days=2, hours=3), "2d3h"),
        (timedelta(days=7, hours=23), "7d23h"),
        (timedelta(days=8, hours=5), "8d"),
        (timedelta(days=400), "400d"),
        (timedelta(days=729), "729d"),
        (timedelta(days=730), "2y"),
        (timedelta(days=3 * 365 + 20), "3y20d"),
        (timedelta(days=7 * 365 + 364), "7y364d"),
        (timedelta(days=8 * 365), "8y"),
        (timedelta(days=20 * 365 + 100), "20y"),
    ],
)
def test_human_duration(delta: timedelta, expected: str) -> None:
    assert human_duration(delta) == expected


def test_translate_timestamp_since() -> None:
    assert translate_timestamp_since(ago(hours=3, minutes=12), NOW) == "3h12m"
    assert translate_timestamp_since("2025-06-01T11:59:15.123456Z", NOW) == "44s"
    assert translate_timestamp_since("2025-06-01T13:30:00+02:00", NOW) == "30m"
    assert translate_timestamp_since(NOW - timedelta(days=2), NOW) == "2d"
    assert translate_timestamp_since(None, NOW) == "<unknown>"
    assert translate_timestamp_since("yesterday", NOW) == "<unknown>"


# -- Node ----------------------------------------------------------------------------------


def node(
    name: str,
    *,
    ready: str | None = "True",
    unschedulable: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    n: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta(name, labels=labels or {}, creationTimestamp=ago(days=2, hours=3)),
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"}],
            "nodeInfo": {
                "kubeletVersion": "v1.32.4",
                "osImage": "Ubuntu 22.04.4 LTS",
                "kernelVersion": "6.8.0-45-generic",
                "containerRuntimeVersion": "containerd://1.7.22",
            },
            "addresses": [
                {"type": "Hostname", "address": name},
                {"type": "InternalIP", "address": "10.0.0.11"},
            ],
        },
    }
    if ready is not None:
        n["status"]["conditions"].append({"type": "Ready", "status": ready})
    return n


def test_node_columns() -> None:
    assert names("", "Node") == [
        "Name",
        "Status",
        "Roles",
        "Age",
        "Version",
        "Internal-IP",
        "External-IP",
        "OS-Image",
        "Kernel-Version",
        "Container-Runtime",
    ]
    assert wide_names("", "Node") == [
        "Internal-IP",
        "External-IP",
        "OS-Image",
        "Kernel-Version",
        "Container-Runtime",
    ]


def test_node_cordoned_control_plane() -> None:
    cells = row(
        node(
            "cp-1",
            unschedulable=True,
            labels={"node-role.kubernetes.io/control-plane": "", "kubernetes.io/hostname": "cp-1"},
        ),
        "",
        "Node",
    )
    assert cells == [
        "cp-1",
        "Ready,SchedulingDisabled",
        "control-plane",
        "2d3h",
        "v1.32.4",
        "10.0.0.11",
        "<none>",
        "Ubuntu 22.04.4 LTS",
        "6.8.0-45-generic",
        "containerd://1.7.22",
    ]


def test_node_status_and_roles() -> None:
    assert row(node("a", ready="False"), "", "Node")[1:3] == ["NotReady", "<none>"]
    assert row(node("a", ready="Unknown"), "", "Node")[1] == "NotReady"
    assert row(node("a", ready=None, unschedulable=True), "", "Node")[1] == (
        "Unknown,SchedulingDisabled"
    )
    roles = {
        "node-role.kubernetes.io/worker": "",
        "node-role.kubernetes.io/gpu": "true",
        "node-role.kubernetes.io/": "",
        "kubernetes.io/role": "infra",
    }
    assert row(node("a", labels=roles), "", "Node")[2] == "gpu,infra,worker"
    bare = node("a")
    bare["status"] = {}
    assert row(bare, "", "Node")[4:] == [
        "",
        "<none>",
        "<none>",
        "<unknown>",
        "<unknown>",
        "<unknown>",
    ]


# -- Pod -----------------------------------------------------------------------------------


def pod(
    name: str = "trainer-0",
    *,
    phase: str = "Running",
    statuses: list[dict[str, Any]] | None = None,
    containers: int = 1,
    **kw: Any,
) -> dict[str, Any]:
    p: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(name, namespace="ml"),
        "spec": {
            "containers": [{"name": f"c{i}", "image": "img"} for i in range(containers)],
            "nodeName": "gpu-1",
        },
        "status": {
            "phase": phase,
            "podIP": "10.244.1.7",
            "podIPs": [{"ip": "10.244.1.7"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": statuses
            if statuses is not None
            else [
                {
                    "name": "c0",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": ago(minutes=4)}},
                }
            ],
        },
    }
    for key, value in kw.items():
        section, field = key.split("__")
        p[section][field] = value
    return p


def test_pod_columns() -> None:
    assert names("", "Pod") == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
        "IP",
        "Node",
        "Nominated Node",
        "Readiness Gates",
    ]
    assert wide_names("", "Pod") == ["IP", "Node", "Nominated Node", "Readiness Gates"]
    restarts = column_definitions("", "Pod")[3]
    assert restarts["type"] == "string"
    assert column_definitions("", "Pod")[0]["format"] == "name"


def test_running_pod() -> None:
    assert row(pod(), "", "Pod") == [
        "trainer-0",
        "1/1",
        "Running",
        "0",
        "5m",
        "10.244.1.7",
        "gpu-1",
        "<none>",
        "<none>",
    ]


def test_terminating_pod() -> None:
    p = pod(metadata__deletionTimestamp=ago(seconds=10))
    assert row(p, "", "Pod")[2] == "Terminating"
    done = pod(
        phase="Succeeded",
        statuses=[
            {
                "name": "c0",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
            }
        ],
        metadata__deletionTimestamp=ago(seconds=10),
    )
    assert row(done, "", "Pod")[2] == "Completed"  # terminal phases are not "Terminating"
    lost = pod(metadata__deletionTimestamp=ago(seconds=10))
    lost["status"]["reason"] = "NodeLost"
    assert row(lost, "", "Pod")[2] == "Unknown"


def test_pod_with_waiting_container_reason() -> None:
    p = pod(
        phase="Running",
        statuses=[
            {
                "name": "c0",
                "ready": False,
                "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {
                    "terminated": {
                        "exitCode": 1,
                        "reason": "Error",
                        "finishedAt": ago(minutes=2, seconds=5),
                    }
                },
            }
        ],
    )
    assert row(p, "", "Pod")[:5] == ["trainer-0", "0/1", "CrashLoopBackOff", "3 (2m5s ago)", "5m"]
    creating = pod(
        phase="Pending",
        statuses=[
            {
                "name": "c0",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
        ],
    )
    assert row(creating, "", "Pod")[1:4] == ["0/1", "ContainerCreating", "0"]


def test_pod_status_variants() -> None:
    oom = pod(
        statuses=[
            {
                "name": "c0",
                "ready": False,
                "restartCount": 1,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            }
        ]
    )
    assert row(oom, "", "Pod")[2:4] == ["OOMKilled", "1"]  # no finishedAt: no "ago"
    killed = pod(
        statuses=[
            {
                "name": "c0",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 143}},
            }
        ]
    )
    assert row(killed, "", "Pod")[2] == "ExitCode:143"
    signaled = pod(
        statuses=[
            {
                "name": "c0",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "signal": 9}},
            }
        ]
    )
    assert row(signaled, "", "Pod")[2] == "Signal:9"
    pending = pod(phase="Pending", statuses=[])
    pending["spec"].pop("nodeName")
    pending["status"] = {"phase": "Pending"}
    assert row(pending, "", "Pod")[1:3] == ["0/1", "Pending"]
    assert row(pending, "", "Pod")[5:7] == ["<none>", "<none>"]
    gated = pod(phase="Pending", statuses=[])
    gated["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    ]
    assert row(gated, "", "Pod")[2] == "SchedulingGated"
    evicted = pod(phase="Failed", statuses=[])
    evicted["status"]["reason"] = "Evicted"
    assert row(evicted, "", "Pod")[2] == "Evicted"


def test_pod_completed_with_running_sidecar_container() -> None:
    statuses = [
        {"name": "c0", "ready": True, "restartCount": 0, "state": {"running": {}}},
        {
            "name": "c1",
            "ready": False,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
        },
    ]
    p = pod(statuses=statuses, containers=2)
    assert row(p, "", "Pod")[1:3] == ["1/2", "Running"]
    p["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert row(p, "", "Pod")[2] == "NotReady"


def test_pod_init_containers() -> None:
    def with_init(*init_statuses: dict[str, Any], initialized: bool = False) -> dict[str, Any]:
        p = pod(
            phase="Pending",
            statuses=[
                {
                    "name": "c0",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "PodInitializing"}},
                }
            ],
        )
        p["spec"]["initContainers"] = [
            {"name": "fetch", "image": "i"},
            {"name": "warmup", "image": "i"},
        ]
        p["status"]["initContainerStatuses"] = list(init_statuses)
        if initialized:
            p["status"]["conditions"] = [{"type": "Initialized", "status": "True"}]
        return p

    done = {
        "name": "fetch",
        "ready": True,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
    }
    running = {"name": "warmup", "ready": False, "restartCount": 0, "state": {"running": {}}}
    assert row(with_init(done, running), "", "Pod")[2] == "Init:1/2"
    crash = {
        "name": "fetch",
        "ready": False,
        "restartCount": 4,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(seconds=30)}},
    }
    assert row(with_init(crash), "", "Pod")[2:4] == ["Init:CrashLoopBackOff", "4 (30s ago)"]
    failed = {
        "name": "fetch",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 2}},
    }
    assert row(with_init(failed), "", "Pod")[2] == "Init:ExitCode:2"
    errored = {
        "name": "fetch",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 1, "reason": "Error"}},
    }
    assert row(with_init(errored), "", "Pod")[2] == "Init:Error"
    # all init containers done: the main containers decide
    assert row(with_init(done, {**done, "name": "warmup"}), "", "Pod")[2] == "PodInitializing"


def test_pod_native_sidecar_counts_as_a_container() -> None:
    p = pod()
    p["spec"]["initContainers"] = [{"name": "proxy", "image": "i", "restartPolicy": "Always"}]
    p["status"]["initContainerStatuses"] = [
        {
            "name": "proxy",
            "ready": True,
            "started": True,
            "restartCount": 2,
            "state": {"running": {}},
            "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(hours=1)}},
        }
    ]
    assert row(p, "", "Pod")[1:4] == ["2/2", "Running", "2 (60m ago)"]


def test_pod_wide_cells_and_succeeded_condition() -> None:
    p = pod(
        phase="Succeeded",
        statuses=[
            {
                "name": "c0",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
            }
        ],
    )
    p["spec"]["readinessGates"] = [
        {"conditionType": "example.com/a"},
        {"conditionType": "example.com/b"},
    ]
    p["status"]["conditions"] = [
        {"type": "example.com/a", "status": "True"},
        {"type": "example.com/b", "status": "False"},
    ]
    p["status"]["nominatedNodeName"] = "gpu-2"
    p["status"]["podIPs"] = [{"ip": "fd00::7"}, {"ip": "10.244.1.7"}]
    table = to_table([p], group="", kind="Pod", now=NOW)
    r = table["rows"][0]
    assert r["cells"] == [
        "trainer-0",
        "0/1",
        "Completed",
        "0",
        "5m",
        "fd00::7",
        "gpu-1",
        "gpu-2",
        "1/2",
    ]
    assert r["conditions"] == [
        {
            "type": "Completed",
            "status": "True",
            "reason": "Succeeded",
            "message": "The pod has completed successfully.",
        }
    ]
    assert "conditions" not in to_table([pod()], group="", kind="Pod", now=NOW)["rows"][0]


# -- other built-ins -----------------------------------------------------------------------


def test_namespace_configmap_secret_lease_priorityclass() -> None:
    ns = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": meta("ml"),
        "status": {"phase": "Active"},
    }
    assert names("", "Namespace") == ["Name", "Status", "Age"]
    assert row(ns, "", "Namespace") == ["ml", "Active", "5m"]
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta("cfg"),
        "data": {"a": "1", "b": "2"},
        "binaryData": {"c": "AA=="},
    }
    assert names("", "ConfigMap") == ["Name", "Data", "Age"]
    assert row(cm, "", "ConfigMap") == ["cfg", 3, "5m"]
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta("s"),
        "type": "Opaque",
        "data": {"k": "dg=="},
    }
    assert row(secret, "", "Secret") == ["s", "Opaque", 1, "5m"]
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta("kcm"),
        "spec": {"holderIdentity": "kcm-1_abc"},
    }
    assert names("coordination.k8s.io", "Lease") == ["Name", "Holder", "Age"]
    assert row(lease, "coordination.k8s.io", "Lease") == ["kcm", "kcm-1_abc", "5m"]
    assert row({**lease, "spec": {}}, "coordination.k8s.io", "Lease")[1] == ""
    pc = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": meta("high"),
        "value": 100000,
        "globalDefault": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    assert names("scheduling.k8s.io", "PriorityClass") == [
        "Name",
        "Value",
        "Global-Default",
        "Age",
        "PreemptionPolicy",
    ]
    assert row(pc, "scheduling.k8s.io", "PriorityClass") == [
        "high",
        100000,
        True,
        "5m",
        "PreemptLowerPriority",
    ]


def test_event_rows() -> None:
    assert names("", "Event") == [
        "Last Seen",
        "Type",
        "Reason",
        "Object",
        "Subobject",
        "Source",
        "Message",
        "First Seen",
        "Count",
        "Name",
    ]
    ev = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": meta("trainer-0.1"),
        "involvedObject": {
            "kind": "Pod",
            "name": "trainer-0",
            "namespace": "ml",
            "fieldPath": "spec.containers{c0}",
        },
        "reason": "BackOff",
        "type": "Warning",
        "message": " Back-off restarting \n",
        "source": {"component": "kubelet", "host": "gpu-1"},
        "firstTimestamp": ago(hours=1),
        "lastTimestamp": ago(seconds=30),
        "count": 12,
    }
    assert row(ev, "", "Event") == [
        "30s",
        "Warning",
        "BackOff",
        "pod/trainer-0",
        "spec.containers{c0}",
        "kubelet, gpu-1",
        "Back-off restarting",
        "60m",
        12,
        "trainer-0.1",
    ]
    single = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": meta("n.1"),
        "involvedObject": {"kind": "Node"},
        "reason": "Rebooted",
        "type": "Normal",
        "eventTime": "2025-06-01T11:58:00.000000Z",
        "reportingComponent": "kubelet",
    }
    assert row(single, "", "Event") == [
        "2m",
        "Normal",
        "Rebooted",
        "node",
        "",
        "kubelet",
        "",
        "2m",
        1,
        "n.1",
    ]
    new_api = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": meta("e.2"),
        "regarding": {"kind": "Workload", "name": "job-a"},
        "reason": "Admitted",
        "type": "Normal",
        "note": "Admitted by ClusterQueue cq",
        "reportingController": "kueue-admission",
        "reportingInstance": "kueue-0",
        "eventTime": ago(minutes=3),
        "series": {"count": 4, "lastObservedTime": ago(seconds=20)},
    }
    assert row(new_api, "events.k8s.io", "Event") == [
        "20s",
        "Normal",
        "Admitted",
        "workload/job-a",
        "",
        "kueue-admission, kueue-0",
        "Admitted by ClusterQueue cq",
        "3m",
        4,
        "e.2",
    ]


def test_service_rows() -> None:
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta("api"),
        "spec": {
            "type": "ClusterIP",
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "ports": [{"port": 53, "protocol": "UDP"}, {"port": 9153}],
            "selector": {"k8s-app": "kube-dns", "a": "b"},
        },
    }
    assert names("", "Service") == [
        "Name",
        "Type",
        "Cluster-IP",
        "External-IP",
        "Port(s)",
        "Age",
        "Selector",
    ]
    assert row(svc, "", "Service") == [
        "api",
        "ClusterIP",
        "10.96.0.10",
        "<none>",
        "53/UDP,9153/TCP",
        "5m",
        "a=b,k8s-app=kube-dns",
    ]
    lb = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta("lb"),
        "spec": {
            "type": "LoadBalancer",
            "clusterIPs": ["10.96.3.3"],
            "ports": [{"port": 443, "nodePort": 31443, "protocol": "TCP"}],
        },
    }
    assert row(lb, "", "Service")[1:] == [
        "LoadBalancer",
        "10.96.3.3",
        "<pending>",
        "443:31443/TCP",
        "5m",
        "<none>",
    ]
    lb["status"] = {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}
    assert row(lb, "", "Service")[3] == "203.0.113.9"
    headless = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta("h"),
        "spec": {"clusterIP": "None"},
    }
    assert row(headless, "", "Service")[1:5] == ["ClusterIP", "None", "<none>", "<none>"]


def test_pdb_rows() -> None:
    assert names("policy", "PodDisruptionBudget") == [
        "Name",
        "Min Available",
        "Max Unavailable",
        "Allowed Disruptions",
        "Age",
    ]
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta("trainer"),
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "t"}}},
        "status": {"disruptionsAllowed": 1},
    }
    assert row(pdb, "policy", "PodDisruptionBudget") == ["trainer", "2", "N/A", 1, "5m"]
    pdb["spec"] = {"maxUnavailable": "25%"}
    pdb["status"] = {}
    assert row(pdb, "policy", "PodDisruptionBudget") == ["trainer", "N/A", "25%", 0, "5m"]


def test_network_policy_rows() -> None:
    """printNetworkPolicy: the pod selector as FormatLabelSelector writes it, ``<none>``
    for the empty one that selects every pod of the namespace."""
    assert names("networking.k8s.io", "NetworkPolicy") == ["Name", "Pod-Selector", "Age"]
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta("metrics"),
        "spec": {
            "podSelector": {
                "matchLabels": {"app": "exporter"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}],
            }
        },
    }
    assert row(policy, "networking.k8s.io", "NetworkPolicy") == [
        "metrics",
        "app=exporter,tier in (gpu)",
        "5m",
    ]
    policy["spec"] = {"podSelector": {}}
    assert row(policy, "networking.k8s.io", "NetworkPolicy")[1] == "<none>"


def test_workload_controllers() -> None:
    template = {
        "metadata": {"labels": {"app": "t"}},
        "spec": {
            "containers": [{"name": "a", "image": "img:1"}, {"name": "b", "image": "img:2"}],
            "nodeSelector": {"gpu": "h200"},
        },
    }
    selector = {
        "matchLabels": {"app": "t"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}],
    }
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta("web"),
        "spec": {"replicas": 3, "selector": selector, "template": template},
        "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
    }
    assert names("apps", "Deployment") == [
        "Name",
        "Ready",
        "Up-to-date",
        "Available",
        "Age",
        "Containers",
        "Images",
        "Selector",
    ]
    assert row(deploy, "apps", "Deployment") == [
        "web",
        "2/3",
        3,
        2,
        "5m",
        "a,b",
        "img:1,img:2",
        "app=t,tier in (x)",
    ]
    rs = {**deploy, "kind": "ReplicaSet", "status": {"replicas": 3, "readyReplicas": 1}}
    assert names("apps", "ReplicaSet") == [
        "Name",
        "Desired",
        "Current",
        "Ready",
        "Age",
        "Containers",
        "Images",
        "Selector",
    ]
    assert row(rs, "apps", "ReplicaSet") == [
        "web",
        3,
        3,
        1,
        "5m",
        "a,b",
        "img:1,img:2",
        "app=t,tier in (x)",
    ]
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta("exporter"),
        "spec": {"selector": {"matchLabels": {"app": "t"}}, "template": template},
        "status": {
            "desiredNumberScheduled": 4,
            "currentNumberScheduled": 4,
            "numberReady": 3,
            "updatedNumberScheduled": 4,
            "numberAvailable": 3,
        },
    }
    assert names("apps", "DaemonSet") == [
        "Name",
        "Desired",
        "Current",
        "Ready",
        "Up-to-date",
        "Available",
        "Node Selector",
        "Age",
        "Containers",
        "Images",
        "Selector",
    ]
    assert row(ds, "apps", "DaemonSet") == [
        "exporter",
        4,
        4,
        3,
        4,
        3,
        "gpu=h200",
        "5m",
        "a,b",
        "img:1,img:2",
        "app=t",
    ]
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta("db"),
        "spec": {"template": template},
        "status": {"readyReplicas": 1},
    }
    assert row(sts, "apps", "StatefulSet") == ["db", "1/1", "5m", "a,b", "img:1,img:2"]


def test_job_rows() -> None:
    assert names("batch", "Job") == [
        "Name",
        "Status",
        "Completions",
        "Duration",
        "Age",
        "Containers",
        "Images",
        "Selector",
    ]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta("train"),
        "spec": {
            "completions": 4,
            "parallelism": 4,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}},
            "template": {"spec": {"containers": [{"name": "t", "image": "pt:2"}]}},
        },
        "status": {
            "succeeded": 4,
            "startTime": ago(minutes=5),
            "completionTime": ago(minutes=1, seconds=30),
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True"},
                {"type": "Complete", "status": "True"},
            ],
        },
    }
    assert row(job, "batch", "Job") == [
        "train",
        "Complete",
        "4/4",
        "3m30s",
        "5m",
        "t",
        "pt:2",
        "batch.kubernetes.io/controller-uid=u",
    ]
    running = {
        **job,
        "spec": {"parallelism": 8},
        "status": {"active": 8, "startTime": ago(minutes=2)},
    }
    assert row(running, "batch", "Job")[1:4] == ["Running", "0/1 of 8", "2m"]
    single = {**job, "spec": {}, "status": {}}
    assert row(single, "batch", "Job")[1:4] == ["Running", "0/1", ""]
    failed = {**job, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    assert row(failed, "batch", "Job")[1] == "Failed"
    suspended = {**job, "status": {"conditions": [{"type": "Suspended", "status": "True"}]}}
    assert row(suspended, "batch", "Job")[1] == "Suspended"
    dying = {**job, "metadata": meta("train", deletionTimestamp=ago(seconds=1)), "status": {}}
    assert row(dying, "batch", "Job")[1] == "Terminating"


def test_crd_uses_the_default_convertor() -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": meta("workloads.kueue.x-k8s.io", creationTimestamp="2025-05-01T08:09:10Z"),
    }
    table = to_table([crd], group="apiextensions.k8s.io", kind="CustomResourceDefinition", now=NOW)
    assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [
        ("Name", "string"),
        ("Created At", "date"),
    ]
    assert table["rows"][0]["cells"] == ["workloads.kueue.x-k8s.io", "2025-05-01T08:09:10Z"]


# -- custom resources ----------------------------------------------------------------------


def workload(name: str, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": meta(name, namespace="ml", creationTimestamp=ago(hours=3, minutes=12)),
        "spec": {"queueName": "user-queue"},
        "status": status,
    }


def test_workload_printer_columns_with_filters() -> None:
    cols = printer_columns("kueue.x-k8s.io_workloads.yaml", "v1beta2")
    assert names("kueue.x-k8s.io", "Workload", cols) == [
        "Name",
        "Queue",
        "Reserved in",
        "Admitted",
        "Finished",
        "Age",
    ]
    admitted = workload(
        "job-a",
        admission={"clusterQueue": "cluster-queue"},
        conditions=[
            {"type": "QuotaReserved", "status": "True"},
            {"type": "Admitted", "status": "True"},
            {"type": "Finished", "status": "False"},
        ],
    )
    pending = workload("job-b", conditions=[{"type": "QuotaReserved", "status": "False"}])
    table = to_table(
        [admitted, pending], group="kueue.x-k8s.io", kind="Workload", printer_columns=cols, now=NOW
    )
    assert [r["cells"] for r in table["rows"]] == [
        ["job-a", "user-queue", "cluster-queue", "True", "False", "3h12m"],
        ["job-b", "user-queue", None, None, None, "3h12m"],
    ]
    defs = table["columnDefinitions"]
    assert defs[3] == {
        "name": "Admitted",
        "type": "string",
        "format": "",
        "description": "Admission status",
        "priority": 0,
    }
    assert defs[5]["type"] == "date"


def test_cluster_queue_columns_get_no_age() -> None:
    cols = printer_columns("kueue.x-k8s.io_clusterqueues.yaml", "v1beta2")
    assert names("kueue.x-k8s.io", "ClusterQueue", cols) == [
        "Name",
        "Cohort",
        "Strategy",
        "Pending Workloads",
        "Admitted Workloads",
    ]
    assert wide_names("kueue.x-k8s.io", "ClusterQueue", cols) == ["Strategy", "Admitted Workloads"]
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": meta("cluster-queue"),
        "spec": {"cohortName": "all", "queueingStrategy": "BestEffortFIFO"},
        "status": {"pendingWorkloads": 3, "admittedWorkloads": 2.0},
    }
    assert row(cq, "kueue.x-k8s.io", "ClusterQueue", printer_columns=cols) == [
        "cluster-queue",
        "all",
        "BestEffortFIFO",
        3,
        2,
    ]
    assert row(
        {**cq, "spec": {}, "status": {}}, "kueue.x-k8s.io", "ClusterQueue", printer_columns=cols
    ) == ["cluster-queue", None, None, None, None]


def test_custom_resource_without_columns_gets_name_and_age() -> None:
    rf = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": meta("default-flavor"),
    }
    for cols in (None, []):
        table = to_table(
            [rf], group="kueue.x-k8s.io", kind="ResourceFlavor", printer_columns=cols, now=NOW
        )
        assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [
            ("Name", "string"),
            ("Age", "date"),
        ]
        assert table["rows"][0]["cells"] == ["default-flavor", "5m"]


def test_custom_column_types() -> None:
    cols = [
        {"name": "Str", "type": "string", "jsonPath": ".spec.s"},
        {"name": "StrNum", "type": "string", "jsonPath": ".spec.n"},
        {"name": "StrFloat", "type": "string", "jsonPath": ".spec.f"},
        {"name": "StrBig", "type": "string", "jsonPath": ".spec.big"},
        {"name": "StrList", "type": "string", "jsonPath": ".spec.list"},
        {"name": "StrMap", "type": "string", "jsonPath": ".spec.map"},
        {"name": "StrNull", "type": "string", "jsonPath": ".spec.null"},
        {"name": "Int", "type": "integer", "jsonPath": ".spec.f"},
        {"name": "IntFromStr", "type": "integer", "jsonPath": ".spec.s"},
        {"name": "Num", "type": "number", "jsonPath": ".spec.n"},
        {"name": "Bool", "type": "boolean", "jsonPath": ".spec.b"},
        {"name": "When", "type": "date", "jsonPath": ".status.when"},
        {"name": "Bad", "type": "date", "jsonPath": ".status.bad"},
        {"name": "Empty", "type": "date", "jsonPath": ".status.empty"},
        {"name": "First", "type": "string", "jsonPath": ".spec.items[*].name"},
        {"name": "Last", "type": "string", "jsonPath": ".spec.items[-1].name"},
        {"name": "OutOfRange", "type": "string", "jsonPath": ".spec.items[5].name"},
        {"name": "Key", "type": "string", "jsonPath": ".metadata.labels['example.com/team']"},
        {"name": "Cmp", "type": "string", "jsonPath": ".spec.items[?(@.size > 2)].name"},
        {"name": "Mismatch", "type": "string", "jsonPath": ".spec.items[?(@.size == 'x')].name"},
    ]
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": meta("t", labels={"example.com/team": "ml"}),
        "spec": {
            "s": "hello",
            "n": 7,
            "f": 2.5,
            "big": 1e6,
            "list": ["a", 1, True],
            "map": {"b": 2, "a": "x"},
            "null": None,
            "b": False,
            "items": [{"name": "one", "size": 1}, {"name": "two", "size": 3}],
        },
        "status": {"when": ago(days=3), "bad": "not-a-time", "empty": ""},
    }
    assert row(obj, "example.com", "Thing", printer_columns=cols) == [
        "t",
        "hello",
        "7",
        "2.5",
        "1e+06",
        "[a 1 true]",
        "map[a:x b:2]",
        "<no value>",
        2,
        None,
        7.0,
        False,
        "3d",
        "<invalid>",
        "<unknown>",
        "one",
        "two",
        None,
        "ml",
        "two",
        None,
    ]
    defs = column_definitions("example.com", "Thing", cols)
    assert defs[1]["description"] == (
        "Custom resource definition column (in JSONPath format): .spec.s"
    )


def test_evaluate_jsonpath() -> None:
    obj = {
        "status": {
            "conditions": [
                {"type": "Admitted", "status": "True"},
                {"type": "Finished", "status": "False"},
            ]
        },
        "a": [[1, 2], [3]],
    }
    assert evaluate_jsonpath(obj, '.status.conditions[?(@.type=="Finished")].status') == ["False"]
    assert evaluate_jsonpath(obj, ".status.conditions[?(@.type=='Nope')].status") == []
    assert evaluate_jsonpath(obj, ".status.conditions[*].type") == ["Admitted", "Finished"]
    assert evaluate_jsonpath(obj, ".status.conditions[0:1].type") == ["Admitted"]
    assert evaluate_jsonpath(obj, ".status.conditions[?(@.reason)].type") == []
    assert evaluate_jsonpath(obj, ".a[*][0]") == [1, 3]
    assert evaluate_jsonpath(obj, ".missing.deeper") == []
    assert evaluate_jsonpath({"a": [{"n": 3}]}, ".a[?(@.n > 2)].n") == [3]
    with pytest.raises(ValueError):  # int against float: a bad comparison in Go
        evaluate_jsonpath({"a": [{"n": 3}]}, ".a[?(@.n > 2.5)].n")
    with pytest.raises(ValueError):
        evaluate_jsonpath(obj, ".status[0]")


# -- the Table envelope --------------------------------------------------------------------


def test_include_object_variants() -> None:
    p = pod()
    p["metadata"]["labels"] = {"app": "t"}
    meta_row = to_table([p], group="", kind="Pod", now=NOW)["rows"][0]
    assert meta_row["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": p["metadata"],
    }
    assert meta_row["object"]["metadata"] is not p["metadata"]
    assert (
        to_table([p], group="", kind="Pod", include_object="", now=NOW)["rows"][0]["object"]["kind"]
        == "PartialObjectMetadata"
    )
    assert (
        to_table([p], group="", kind="Pod", include_object="Object", now=NOW)["rows"][0]["object"]
        == p
    )
    assert (
        "object"
        not in to_table([p], group="", kind="Pod", include_object="None", now=NOW)["rows"][0]
    )
    with pytest.raises(TableError, match="includeObject"):
        to_table([p], group="", kind="Pod", include_object="Everything")


def test_table_envelope_and_list_meta() -> None:
    table = to_table(
        [pod("a"), pod("b")],
        group="",
        kind="Pod",
        now=NOW,
        list_meta={
            "resourceVersion": "123",
            "continue": "tok",
            "remainingItemCount": 5,
            "selfLink": "x",
        },
    )
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {
        "resourceVersion": "123",
        "continue": "tok",
        "remainingItemCount": 5,
    }
    assert [r["cells"][0] for r in table["rows"]] == ["a", "b"]
    empty = to_table([], group="", kind="Pod", now=NOW)
    assert empty["rows"] == [] and empty["metadata"] == {}
    assert len(empty["columnDefinitions"]) == 9
    assert (
        to_table([pod()], group="", kind="Pod", no_headers=True, now=NOW)["columnDefinitions"]
        is None
    )
    for col in table["columnDefinitions"]:
        assert set(col) == {"name", "type", "format", "description", "priority"}
    json.dumps(table)  # serialisable as is


def test_default_now_is_the_wall_clock() -> None:
    p = pod()
    p["metadata"]["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert to_table([p], group="", kind="Pod")["rows"][0]["cells"][4] in ("0s", "1s", "2s")


# -- what kubectl prints -------------------------------------------------------------------


class _Stub(BaseHTTPRequestHandler):
    """Legacy discovery plus Table responses: all kubectl get needs."""

    routes: ClassVar[dict[str, Any]] = {}
    accepts: ClassVar[list[str]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        body = self.routes.get(path)
        if callable(body):
            self.accepts.append(self.headers.get("Accept", ""))
            body = body()
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def kubectl(tmp_path: Path) -> Iterator[Any]:
    if KUBECTL is None:
        pytest.skip("kubectl not installed")
    wl_cols = printer_columns("kueue.x-k8s.io_workloads.yaml", "v1beta2")
    cordoned = node(
        "gpu-1", unschedulable=True, labels={"node-role.kubernetes.io/control-plane": ""}
    )
    crashing = pod(
        "trainer-0",
        statuses=[
            {
                "name": "c0",
                "ready": False,
                "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(minutes=2)}},
            }
        ],
    )
    crashing["metadata"]["namespace"] = "default"
    wl = workload(
        "job-a",
        admission={"clusterQueue": "cq"},
        conditions=[{"type": "Admitted", "status": "True"}],
    )
    routes: dict[str, Any] = {
        "/api": {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}
            ],
        },
        "/apis": {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": "kueue.x-k8s.io",
                    "versions": [{"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"}],
                    "preferredVersion": {
                        "groupVersion": "kueue.x-k8s.io/v1beta2",
                        "version": "v1beta2",
                    },
                }
            ],
        },
        "/api/v1": {
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                {
                    "name": "nodes",
                    "singularName": "node",
                    "namespaced": False,
                    "kind": "Node",
                    "verbs": ["get", "list"],
                },
                {
                    "name": "pods",
                    "singularName": "pod",
                    "namespaced": True,
                    "kind": "Pod",
                    "verbs": ["get", "list"],
                },
            ],
        },
        "/apis/kueue.x-k8s.io/v1beta2": {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "kueue.x-k8s.io/v1beta2",
            "resources": [
                {
                    "name": "workloads",
                    "singularName": "workload",
                    "namespaced": True,
                    "kind": "Workload",
                    "verbs": ["get", "list"],
                }
            ],
        },
        "/api/v1/nodes": lambda: to_table(
            [cordoned], group="", kind="Node", now=NOW, list_meta={"resourceVersion": "10"}
        ),
        "/api/v1/namespaces/default/pods": lambda: to_table(
            [crashing], group="", kind="Pod", now=NOW, list_meta={"resourceVersion": "10"}
        ),
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads": lambda: to_table(
            [wl],
            group="kueue.x-k8s.io",
            kind="Workload",
            printer_columns=wl_cols,
            now=NOW,
            list_meta={"resourceVersion": "10"},
        ),
    }
    handler = type("Handler", (_Stub,), {"routes": routes, "accepts": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")

    def run(*args: str) -> str:
        proc = subprocess.run(
            [
                KUBECTL,
                f"--kubeconfig={kubeconfig}",
                f"--cache-dir={tmp_path / 'cache'}",
                "-s",
                f"http://127.0.0.1:{server.server_address[1]}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "HOME": str(tmp_path)},
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    run.accepts = handler.accepts  # type: ignore[attr-defined]
    try:
        yield run
    finally:
        server.shutdown()
        server.server_close()


def test_kubectl_prints_the_tables(kubectl: Any) -> None:
    assert kubectl("get", "nodes").splitlines() == [
        "NAME    STATUS                     ROLES           AGE    VERSION",
        "gpu-1   Ready,SchedulingDisabled   control-plane   2d3h   v1.32.4",
    ]
    wide = kubectl("get", "nodes", "-o", "wide").splitlines()
    assert wide[0].split() == [
        "NAME",
        "STATUS",
        "ROLES",
        "AGE",
        "VERSION",
        "INTERNAL-IP",
        "EXTERNAL-IP",
        "OS-IMAGE",
        "KERNEL-VERSION",
        "CONTAINER-RUNTIME",
    ]
    assert "10.0.0.11" in wide[1] and "Ubuntu 22.04.4 LTS" in wide[1]
    assert kubectl("get", "pods").splitlines() == [
        "NAME        READY   STATUS             RESTARTS     AGE",
        "trainer-0   0/1     CrashLoopBackOff   3 (2m ago)   5m",
    ]
    assert kubectl("get", "pods", "-o", "wide").splitlines()[0].split() == [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED",
        "NODE",
        "READINESS",
        "GATES",
    ]
    assert kubectl("get", "workloads").splitlines() == [
        "NAME    QUEUE        RESERVED IN   ADMITTED   FINISHED   AGE",
        "job-a   user-queue   cq            True                  3h12m",
    ]
    labels = kubectl("get", "workloads", "--show-labels").splitlines()
    assert labels[0].split()[-1] == "LABELS"  # read from the PartialObjectMetadata
    assert all("as=Table;v=v1;g=meta.k8s.io" in a for a in kubectl.accepts)


def test_service_account_endpoints_cronjob() -> None:
    sa = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta("default"),
        "secrets": [{"name": "t"}],
    }
    assert names("", "ServiceAccount") == ["Name", "Secrets", "Age"]
    assert row(sa, "", "ServiceAccount") == ["default", 1, "5m"]
    ep = {"apiVersion": "v1", "kind": "Endpoints", "metadata": meta("api")}
    assert names("", "Endpoints") == ["Name", "Endpoints", "Age"]
    assert row(ep, "", "Endpoints") == ["api", "<none>", "5m"]
    ep["subsets"] = [
        {
            "addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::2"}],
            "ports": [{"port": 80}, {"port": 443}],
        }
    ]
    assert row(ep, "", "Endpoints")[1] == "10.0.0.1:80,[fd00::2]:80,10.0.0.1:443 + 1 more..."
    ep["subsets"] = [{"addresses": [{"ip": "10.0.0.1"}]}]  # headless, no ports
    assert row(ep, "", "Endpoints")[1] == "10.0.0.1"
    cj = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta("nightly"),
        "spec": {
            "schedule": "0 3 * * *",
            "suspend": False,
            "jobTemplate": {
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
            },
        },
        "status": {"active": [{"name": "nightly-1"}], "lastScheduleTime": ago(hours=9)},
    }
    assert names("batch", "CronJob") == [
        "Name",
        "Schedule",
        "Timezone",
        "Suspend",
        "Active",
        "Last Schedule",
        "Age",
        "Containers",
        "Images",
        "Selector",
    ]
    assert row(cj, "batch", "CronJob") == [
        "nightly",
        "0 3 * * *",
        "<none>",
        "False",
        1,
        "9h",
        "5m",
        "c",
        "i",
        "<none>",
    ]
    cj["spec"].update(timeZone="Etc/UTC")
    del cj["spec"]["suspend"]
    cj["status"] = {}
    assert row(cj, "batch", "CronJob")[2:6] == ["Etc/UTC", "<unset>", 0, "<none>"]


def test_service_external_ips() -> None:
    def svc(**spec: Any) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Service", "metadata": meta("s"), "spec": spec}

    assert row(svc(type="NodePort", externalIPs=["1.2.3.4", "5.6.7.8"]), "", "Service")[3] == (
        "1.2.3.4,5.6.7.8"
    )
    assert row(svc(type="ExternalName", externalName="db.example.com"), "", "Service")[3] == (
        "db.example.com"
    )
    lb = svc(type="LoadBalancer", externalIPs=["9.9.9.9"])
    lb["status"] = {
        "loadBalancer": {"ingress": [{"hostname": "lb.example.com"}, {"ip": "1.1.1.1"}]}
    }
    assert row(lb, "", "Service")[3] == "1.1.1.1,lb.example.com,9.9.9.9"
    assert row(svc(type="Weird"), "", "Service")[3] == "<unknown>"


def test_jsonpath_corners() -> None:
    obj = {
        "items": [
            {"a": 1, "b": 1, "ok": True, "name": "x"},
            {"a": 1, "b": 2, "ok": False, "name": "y"},
            {"name": "z"},
        ],
        "m": {"k.with.dots": "v", "x": {"y": 1}},
    }
    assert evaluate_jsonpath(obj, ".items[?(@.a == @.b)].name") == ["x"]
    assert evaluate_jsonpath(obj, ".items[?(@.ok == true)].name") == ["x"]
    assert evaluate_jsonpath(obj, ".items[?(@.ok != false)].name") == ["x"]
    assert evaluate_jsonpath(obj, ".items[?(@.a)].name") == ["x", "y"]
    assert evaluate_jsonpath(obj, ".items[?(@.a >= 1)].name") == ["x", "y"]
    assert evaluate_jsonpath(obj, ".items[?(@.b < 2)].name") == ["x"]
    assert evaluate_jsonpath(obj, ".items[?(@.b <= 2)].name") == ["x", "y"]
    assert evaluate_jsonpath(obj, ".items[?(@.name > 'x')].name") == ["y", "z"]
    assert evaluate_jsonpath(obj, ".items[0:3:2].name") == ["x", "z"]
    assert evaluate_jsonpath(obj, ".items[-2:].name") == ["y", "z"]
    assert evaluate_jsonpath(obj, ".items[1:1].name") == []
    assert evaluate_jsonpath(obj, ".m['k.with.dots']") == ["v"]
    assert evaluate_jsonpath(obj, '.m["k.with.dots"]') == ["v"]
    assert evaluate_jsonpath(obj, r".m.k\.with\.dots") == ["v"]
    assert evaluate_jsonpath(obj, ".m.*") == ["v", {"y": 1}]
    assert evaluate_jsonpath(obj, "$.m.x.y") == [1]
    for bad in (
        "..name",
        ".items[",
        ".items[x]",
        ".items[?(1 == 1)]",
        ".items[0:1:0]",
        ".items[2:1]",
        ".items[?(@.ok < true)]",
        "name",
        ".items[?(@.a == nope)]",
    ):
        with pytest.raises(ValueError):
            evaluate_jsonpath(obj, bad)


def test_unparsable_printer_column_drops_it_and_the_rest() -> None:
    cols = [
        {"name": "A", "type": "string", "jsonPath": ".spec.a"},
        {"name": "B", "type": "string", "jsonPath": ".spec[oops"},
        {"name": "C", "type": "string", "jsonPath": ".spec.c"},
    ]
    assert names("example.com", "Thing", cols) == ["Name", "A"]
    obj = {"metadata": meta("t"), "spec": {"a": "1", "c": "3"}}
    assert row(obj, "example.com", "Thing", printer_columns=cols) == ["t", "1"]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.000123, "0.000123"),
        (0.00001, "1e-05"),
        (-1.5, "-1.5"),
        (123456.0, "123456"),
        (1234567.0, "1.234567e+06"),
        (1e21, "1e+21"),
        (100.0, "100"),
        (0.0, "0"),
        (float("nan"), "NaN"),
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
    ],
)
def test_float_cells_print_like_go(value: float, text: str) -> None:
    cols = [{"name": "V", "type": "string", "jsonPath": ".v"}]
    assert (
        row({"metadata": meta("t"), "v": value}, "example.com", "Thing", printer_columns=cols)[1]
        == text
    )
