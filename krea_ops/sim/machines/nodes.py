"""The GPU nodes of the simulated cluster: their shape, labels, conditions and Leases, the
system DaemonSets they run, and the marks of a failed node.

:func:`bootstrap` (run by ``world.py`` synchronously, before any actor starts, so every
other actor finds the nodes in place) creates the namespaces, ``--nodes`` GPU nodes with
their labels, capacity, conditions and Leases in ``kube-node-lease``, and the
``krea-ops-exporter`` and ``nvidia-device-plugin`` DaemonSets in ``kube-system``.

A failed node carries annotation ``sim.krea.ai/failed: <cause>`` (:data:`FAILED_ANNOTATION`);
the kubelet plays its failure and repair (see ``kubelet.py``).
"""

from __future__ import annotations

from typing import Any

from krea_ops.kube.times import micro_time, rfc3339
from krea_ops.sim.common.actor import World
from krea_ops.sim.common.api import Api
from krea_ops.sim.common.objects import (
    GPU,
    NODE_CONDITIONS,
    labels_of,
    meta_of,
    sha256_hex,
)

NAMESPACES = ("training", "inference", "krea-sim", "krea-ops")
NODES_PER_RACK = 8
RACKS_PER_SPINE = 4
NODE_PREFIX = "gpu-node-"
VIRTUAL_KUBELET_LABEL = ("type", "virtual-kubelet")

HEALTHY_CONDITIONS = {
    "MemoryPressure": (
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    "Ready": ("True", "KubeletReady", "kubelet is posting ready status"),
}

KUBELET_VERSION = "v1.32.0"
OS_IMAGE = "Ubuntu 22.04.5 LTS"
KERNEL_VERSION = "5.15.0-131-generic"
CONTAINER_RUNTIME = "containerd://1.7.24"


def is_virtual(node: dict[str, Any]) -> bool:
    return labels_of(node).get(VIRTUAL_KUBELET_LABEL[0]) == VIRTUAL_KUBELET_LABEL[1]


def node_name(i: int) -> str:
    return f"{NODE_PREFIX}{i:03d}"


def node_ip(i: int) -> str:
    return f"10.1.{i // 200}.{i % 200 + 10}"


def pod_cidr(i: int) -> str:
    return f"10.{64 + i // 256}.{i % 256}.0/24"


def node_labels(i: int, gpus: int) -> dict[str, str]:
    rack = i // NODES_PER_RACK
    spine = rack // RACKS_PER_SPINE
    name = node_name(i)
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"gpu-h200-{gpus}x",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H200",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": "143771",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/cuda.driver-version.full": "570.124.06",
        "krea.ai/pool": "h200",
        "krea.ai/rack": f"rack-{rack:02d}",
        "krea.ai/spine": f"spine-{spine}",
        "topology.kubernetes.io/region": "us-east",
        "topology.kubernetes.io/zone": "us-east-1a",
    }


def healthy_node_conditions(t: float, heartbeat: float | None = None) -> list[dict[str, Any]]:
    hb = rfc3339(heartbeat if heartbeat is not None else t)
    out = []
    for kind in NODE_CONDITIONS:
        status, reason, message = HEALTHY_CONDITIONS[kind]
        out.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": hb,
                "lastTransitionTime": rfc3339(t),
            }
        )
    return out


def make_node(
    i: int, gpus: int, t: float, kubelet: tuple[str, int] | None = None
) -> dict[str, Any]:
    """Node ``i`` as its kubelet registers it. ``kubelet`` is the (address, port) its
    kubelet endpoint answers on (the API server proxies ``kubectl logs`` there): on the
    upstream control plane the one loopback endpoint every simulated kubelet shares; by
    default a private address nothing dials (the embedded server reads logs itself)."""
    name = node_name(i)
    ip, port = kubelet or (node_ip(i), 10250)
    machine = sha256_hex("machine", name)[:32]
    capacity = {
        "cpu": "224",
        "memory": "2147483648Ki",  # 2 TiB
        GPU: str(gpus),
        "pods": "110",
        "ephemeral-storage": "7499362304Ki",  # 7 TiB of local NVMe
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    allocatable = dict(capacity)
    allocatable.update(
        {"cpu": "222", "memory": "2130706432Ki", "ephemeral-storage": "6911361305364"}
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(i, gpus),
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": pod_cidr(i), "podCIDRs": [pod_cidr(i)]},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": healthy_node_conditions(t),
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "nodeInfo": {
                "machineID": machine,
                "systemUUID": f"{machine[:8]}-{machine[8:12]}-{machine[12:16]}-"
                f"{machine[16:20]}-{machine[20:32]}",
                "bootID": sha256_hex("boot", name)[:36],
                "kernelVersion": KERNEL_VERSION,
                "osImage": OS_IMAGE,
                "containerRuntimeVersion": CONTAINER_RUNTIME,
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "phase": "Running",
        },
    }


def _system_pod_spec(containers: list[dict[str, Any]], volumes: list[dict[str, Any]]) -> Any:
    return {
        "priorityClassName": "system-node-critical",
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "type", "operator": "NotIn", "values": ["virtual-kubelet"]}
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": [{"operator": "Exists"}],
        "containers": containers,
        "volumes": volumes,
    }


def daemonsets() -> list[dict[str, Any]]:
    """The system DaemonSets every GPU node runs."""
    exporter_labels = {
        "app.kubernetes.io/name": "krea-ops-exporter",
        "app.kubernetes.io/part-of": "krea-ops",
        "krea.ai/workload": "system",
    }
    plugin_labels = {
        "app.kubernetes.io/name": "nvidia-device-plugin",
        "krea.ai/workload": "system",
    }
    exporter = {
        "name": "exporter",
        "image": "ghcr.io/krea-ai/krea-ops:0.1.0",
        "args": ["exporter", "run", "--listen=$(POD_IP):9400", "--sysfs=/host/sys"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "ports": [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": "sys", "mountPath": "/host/sys", "readOnly": True}],
    }
    plugin = {
        "name": "nvidia-device-plugin-ctr",
        "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
        "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}],
    }
    out = []
    for name, labels, container, volumes in (
        (
            "krea-ops-exporter",
            exporter_labels,
            exporter,
            [{"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}}],
        ),
        (
            "nvidia-device-plugin",
            plugin_labels,
            plugin,
            [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
        ),
    ):
        selector = {"app.kubernetes.io/name": labels["app.kubernetes.io/name"]}
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": name, "namespace": "kube-system", "labels": dict(labels)},
                "spec": {
                    "selector": {"matchLabels": selector},
                    "updateStrategy": {
                        "type": "RollingUpdate",
                        "rollingUpdate": {"maxUnavailable": "10%"},
                    },
                    "template": {
                        "metadata": {"labels": dict(labels)},
                        "spec": _system_pod_spec([container], volumes),
                    },
                },
            }
        )
    return out


def lease_body(name: str, node_uid: str | None, t: float, duration: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "kube-node-lease"}
    if node_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}
        ]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": duration,
            "renewTime": micro_time(t),
        },
    }


# Nodes registered at once at bootstrap in the scale mode: each client thread registers a
# node and its Lease in turn (a real fleet's kubelets register concurrently); one thread
# spent most of a 5,000-node start-up in round trips.
BOOTSTRAP_THREADS = 8


def bootstrap(
    world: World, api: Api, lease_duration_s: int, kubelet: tuple[str, int] | None = None
) -> None:
    """Namespaces, nodes, their Leases and the system DaemonSets; what exists is kept."""
    for ns in NAMESPACES:
        api.quiet(api.core.create_namespace, {"metadata": {"name": ns}}, ok=(409,))
    t = world.clock.wall()
    gpus = world.config.gpus_per_node

    def register(i: int) -> None:
        created = api.quiet(api.core.create_node, make_node(i, gpus, t, kubelet), ok=(409,))
        uid = meta_of(created).get("uid") if created else None
        api.quiet(
            api.coord.create_namespaced_lease,
            "kube-node-lease",
            lease_body(node_name(i), uid, t, lease_duration_s),
            ok=(409,),
        )

    if world.config.scale_mode and world.config.nodes > 2 * BOOTSTRAP_THREADS:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(BOOTSTRAP_THREADS, thread_name_prefix="sim-register") as pool:
            for _ in pool.map(register, range(world.config.nodes)):
                pass
    else:
        for i in range(world.config.nodes):
            register(i)
    for ds in daemonsets():
        api.quiet(api.apps.create_namespaced_daemon_set, "kube-system", ds, ok=(409,))
