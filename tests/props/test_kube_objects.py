"""Kubernetes objects the console reads (krea_ops/kube/cluster.py nodes and pods,
krea_ops/queue.py Kueue ClusterQueues, LocalQueues, ResourceFlavors and Workloads).

Contract: the objects are as an API server serves them, so every field has its schema's
JSON type, but any field may be missing and any string may hold anything (a quantity
that is not one, a timestamp that is not RFC 3339, a condition status other than
True/False). Each reader gives its snapshot: an unreadable value is None (never 0, never
an exception), and what is built from the snapshots (a queue view, a why-pending report)
builds too."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from krea_ops.kube.cluster import node_info, pod_info
from krea_ops.model import NodeInfo, PodInfo
from krea_ops.queue import (
    _Raw,
    _snapshot,
    explain,
    parse_cluster_queue,
    parse_local_queue,
    parse_workload,
    workload_state,
)

GPU = "nvidia.com/gpu"
text = st.text(max_size=12)
names = st.one_of(st.sampled_from(["a", "b", "h200", "gpu-node-001", "default", ""]), text)
quantities = st.one_of(
    st.sampled_from(
        ["8", "0", "500m", "1Gi", "1e3", "-8", "8.5", "nan", "inf", "1e99999999", "٣", ""]
    ),
    text,
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
)
times = st.one_of(
    st.sampled_from(
        [
            "2026-11-29T21:00:00Z",
            "2026-11-29T21:00:00.123456Z",
            "0001-01-01T00:00:00+01:00",
            "yesterday",
            "",
        ]
    ),
    text,
)
statuses = st.sampled_from(["True", "False", "Unknown", "", "true"])


def maybe(**fields: Any) -> st.SearchStrategy[dict[str, Any]]:
    """An object with any subset of these fields."""
    return st.fixed_dictionaries({}, optional=fields)


def conditions(types: list[str]) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.lists(
        maybe(
            type=st.sampled_from(types) | text,
            status=statuses,
            reason=text,
            message=text,
            lastTransitionTime=times,
        ),
        max_size=4,
    )


labels = st.dictionaries(
    st.sampled_from(["type", "kubernetes.io/hostname", "nvidia.com/gpu.product", "x"]) | text,
    text,
    max_size=3,
)
metadata = maybe(
    name=names,
    namespace=names,
    labels=labels,
    annotations=st.dictionaries(text, text, max_size=2),
    creationTimestamp=times,
    ownerReferences=st.lists(
        maybe(
            kind=st.sampled_from(["JobSet", "Job", "Pod"]) | text,
            name=names,
            controller=st.booleans(),
        ),
        max_size=2,
    ),
)
resources = st.dictionaries(st.sampled_from([GPU, "cpu", "memory"]), quantities, max_size=3)
taints = st.lists(
    maybe(key=text, value=text, effect=st.sampled_from(["NoSchedule", "NoExecute", ""]) | text),
    max_size=2,
)
tolerations = st.lists(
    maybe(key=text, operator=st.sampled_from(["Equal", "Exists"]), value=text, effect=text),
    max_size=2,
)

nodes = maybe(
    metadata=metadata,
    spec=maybe(taints=taints, unschedulable=st.booleans()),
    status=maybe(
        conditions=conditions(["Ready", "MemoryPressure"]),
        capacity=resources,
        allocatable=resources,
    ),
)
containers = st.lists(
    maybe(name=text, resources=maybe(limits=resources, requests=resources)), max_size=2
)
pod_spec = maybe(
    containers=containers, nodeName=names, nodeSelector=labels, tolerations=tolerations
)
pods = maybe(
    metadata=metadata,
    spec=pod_spec,
    status=maybe(
        phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]) | text, startTime=times
    ),
)
flavor_usage = st.lists(
    maybe(
        name=names,
        resources=st.lists(
            maybe(name=st.sampled_from([GPU, "cpu"]) | text, total=quantities, borrowed=quantities),
            max_size=2,
        ),
    ),
    max_size=2,
)
counts = st.integers(-(2**31), 2**31)
cluster_queues = maybe(
    metadata=metadata,
    spec=maybe(
        cohort=names,
        cohortName=names,
        queueingStrategy=st.sampled_from(["BestEffortFIFO", "StrictFIFO"]) | text,
        stopPolicy=text,
        preemption=st.dictionaries(text, text, max_size=2),
        resourceGroups=st.lists(
            maybe(
                coveredResources=st.lists(text, max_size=2),
                flavors=st.lists(
                    maybe(
                        name=names,
                        resources=st.lists(
                            maybe(
                                name=st.sampled_from([GPU, "cpu"]) | text,
                                nominalQuota=quantities,
                                borrowingLimit=quantities,
                                lendingLimit=quantities,
                            ),
                            max_size=2,
                        ),
                    ),
                    max_size=2,
                ),
            ),
            max_size=2,
        ),
    ),
    status=maybe(
        conditions=conditions(["Active"]),
        flavorsReservation=flavor_usage,
        flavorsUsage=flavor_usage,
        pendingWorkloads=counts,
        reservingWorkloads=counts,
        admittedWorkloads=counts,
    ),
)
local_queues = maybe(
    metadata=metadata,
    spec=maybe(clusterQueue=names),
    status=maybe(
        conditions=conditions(["Active"]),
        flavorsReservation=flavor_usage,
        flavorsUsage=flavor_usage,
        pendingWorkloads=counts,
    ),
)
flavors = maybe(
    metadata=metadata, spec=maybe(nodeLabels=labels, nodeTaints=taints, tolerations=tolerations)
)
workloads = maybe(
    metadata=metadata,
    spec=maybe(
        queueName=names,
        active=st.booleans(),
        priority=counts,
        priorityClassName=names,
        priorityClassRef=maybe(name=names),
        podSets=st.lists(
            maybe(name=names, count=counts, template=maybe(spec=pod_spec)), max_size=2
        ),
    ),
    status=maybe(
        conditions=conditions(
            ["QuotaReserved", "Admitted", "Evicted", "Preempted", "Finished", "PodsReady"]
        ),
        admission=maybe(
            clusterQueue=names,
            podSetAssignments=st.lists(
                maybe(name=names, flavors=st.dictionaries(st.just(GPU), names, max_size=1)),
                max_size=2,
            ),
        ),
        requeueState=maybe(count=counts, requeueAt=times),
        schedulingStats=maybe(evictions=st.lists(maybe(reason=text, count=counts), max_size=2)),
    ),
)


@given(nodes)
def test_any_node(obj: dict[str, Any]) -> None:
    info = node_info(obj)
    assert isinstance(info, NodeInfo)
    assert info.ready in (True, False, None)
    for value in (info.gpu_capacity, info.gpu_allocatable):
        assert value is None or isinstance(value, int)
    capacity = (obj.get("status") or {}).get("capacity") or {}
    if GPU not in capacity or capacity[GPU] in ("nan", "inf", "", "1e99999999", "٣"):
        assert info.gpu_capacity is None  # unknown, not 0
    for value in (info.created_at, info.ready_since):
        assert value is None or math.isfinite(value)


@given(pods)
def test_any_pod(obj: dict[str, Any]) -> None:
    info = pod_info(obj)
    assert isinstance(info, PodInfo) and isinstance(info.gpus, int)
    for value in (info.created_at, info.started_at):
        assert value is None or math.isfinite(value)


@given(
    st.lists(cluster_queues, max_size=2),
    st.lists(local_queues, max_size=2),
    st.lists(flavors, max_size=2),
    st.lists(nodes, max_size=3),
    st.lists(workloads, min_size=1, max_size=2),
    st.lists(pods, max_size=3),
)
def test_any_kueue_objects(
    cqs: list[dict[str, Any]],
    lqs: list[dict[str, Any]],
    fls: list[dict[str, Any]],
    node_objs: list[dict[str, Any]],
    wl_objs: list[dict[str, Any]],
    pod_objs: list[dict[str, Any]],
) -> None:
    """From the objects to ``queue list`` and ``queue why``: the queue view and the
    why-pending report of each workload build."""
    for lq in lqs:
        parse_local_queue(lq)
    for cq in cqs:
        parse_cluster_queue(cq)
    node_list = [node_info(n) for n in node_objs]
    flavor_map = {str((f.get("metadata") or {}).get("name")): f for f in fls}
    snap = _snapshot(_Raw("v1beta2", cqs, lqs, flavor_map, node_list), None)
    lq_map = {(q.namespace, q.name): q.cluster_queue for q in snap.local_queues}
    pod_list = [pod_info(p) for p in pod_objs]
    for obj in wl_objs:
        state, _holding = workload_state(obj)
        assert isinstance(state, str)
        wl = parse_workload(obj, lq_map)
        report = explain(wl, snap, flavor_map, node_list, pod_list)
        assert report.workload == wl and report.summary.strip()
