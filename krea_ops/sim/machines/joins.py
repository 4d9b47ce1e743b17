"""New GPU nodes joining a running simulated world.

A node request is a ConfigMap in namespace ``krea-sim`` labelled
``sim.krea.ai/node-request=true`` (``krea-ops sim add-node`` creates it, so asking for a
node is itself an API call, as ``sim inject`` is for faults) with data:

``name``
  the node's name (empty: the next free ``gpu-node-NNN``);
``taints``
  JSON list of taints (``{"key", "value", "effect"}``) the node registers with, as a
  kubelet started with ``--register-with-taints`` registers them (``krea-ops sim
  add-node`` defaults to ``krea.ai/validation=pending:NoSchedule``, the taint a node
  joining the pool carries until its first validation passes).

:class:`NodeJoins` (every ``max(2, speed / 4)`` simulated seconds) brings each request up
once: its hardware first (``world.services["devices"].ensure_node``: GPUs, HCAs and
exporter, which the device actor then publishes in ``krea-ops-config`` and Prometheus
scrapes, like every other node's), then the Node as its kubelet registers it (the labels,
capacity and conditions of the world's other GPU nodes, ``nodes.make_node``, with the
taints) and its Lease; the simulated kubelet takes it over on its next tick, and the
DaemonSets place their pods on it. The request is annotated ``sim.krea.ai/registered:
<node>``, or ``sim.krea.ai/error: <why>`` (a node of that name exists).
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from krea_ops.errors import BadInput
from krea_ops.sim.common.actor import Actor, World
from krea_ops.sim.common.objects import meta_of
from krea_ops.sim.machines.faults import ERROR, FAULT_NAMESPACE, ensure_namespace
from krea_ops.sim.machines.kubelet import Kubelet
from krea_ops.sim.machines.nodes import NODE_PREFIX, lease_body, make_node, node_name

REQUEST_LABEL = "sim.krea.ai/node-request"
REGISTERED = "sim.krea.ai/registered"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TAINT = re.compile(r"^([^=:\s]+)(?:=([^:\s]*))?:(\w+)$")
_INDEXED = re.compile(rf"^{re.escape(NODE_PREFIX)}(\d+)$")
MERGE = "application/merge-patch+json"


def parse_taint(text: str) -> dict[str, str]:
    """``KEY=VALUE:EFFECT`` or ``KEY:EFFECT`` (kubelet's ``--register-with-taints``)."""
    m = _TAINT.match(text.strip())
    if not m or m.group(3) not in EFFECTS:
        raise BadInput(
            f"taint {text!r}: write KEY=VALUE:EFFECT, EFFECT one of {', '.join(EFFECTS)}"
        )
    taint = {"key": m.group(1), "effect": m.group(3)}
    if m.group(2):
        taint["value"] = m.group(2)
    return taint


def request_node(api_client: Any, name: str | None, taints: list[dict[str, str]]) -> str:
    """Create a node request in ``krea-sim``; returns the request's name."""
    core: Any = client.CoreV1Api(api_client)
    if name:
        try:
            core.read_node(name, _preload_content=False)
            raise BadInput(f"node {name!r} exists already")
        except ApiException as exc:
            if exc.status != 404:
                raise
    ensure_namespace(core, FAULT_NAMESPACE)
    body = {
        "metadata": {
            "name": f"node-request-{secrets.token_hex(4)}",
            "labels": {REQUEST_LABEL: "true"},
        },
        "data": {"name": name or "", "taints": json.dumps(taints)},
    }
    created = core.create_namespaced_config_map(FAULT_NAMESPACE, body, _preload_content=False)
    return str(json.loads(created.data)["metadata"]["name"])


def registered(api_client: Any, request: str) -> tuple[str | None, str | None]:
    """(the node the request registered, the error it met), each None until known."""
    core: Any = client.CoreV1Api(api_client)
    resp = core.read_namespaced_config_map(request, FAULT_NAMESPACE, _preload_content=False)
    annotations = (json.loads(resp.data).get("metadata") or {}).get("annotations") or {}
    return annotations.get(REGISTERED) or None, annotations.get(ERROR) or None


class NodeJoins(Actor):
    """Registers the nodes of node requests (see the module)."""

    name = "node-joins"

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self.period_s = max(2.0, 0.25 * world.config.speed)
        self.core: Any = client.CoreV1Api(world.client)
        self.coord: Any = client.CoordinationV1Api(world.client)

    def setup(self) -> None:
        ensure_namespace(self.core, FAULT_NAMESPACE)

    def tick(self) -> None:
        resp = self.core.list_namespaced_config_map(
            FAULT_NAMESPACE, label_selector=f"{REQUEST_LABEL}=true", _preload_content=False
        )
        pending = [
            obj
            for obj in json.loads(resp.data).get("items") or []
            if not ({REGISTERED, ERROR} & set(meta_of(obj).get("annotations") or {}))
        ]
        if not pending:
            return
        nodes = json.loads(self.core.list_node(_preload_content=False).data).get("items") or []
        names = {str(meta_of(n).get("name")) for n in nodes}
        for obj in sorted(pending, key=lambda o: str(meta_of(o).get("creationTimestamp"))):
            data = obj.get("data") or {}
            try:
                node = self._join(str(data.get("name") or ""), data.get("taints") or "[]", names)
                note = {REGISTERED: node}
            except (ValueError, ApiException) as exc:
                note = {ERROR: str(getattr(exc, "reason", None) or exc)}
            self.core.patch_namespaced_config_map(
                meta_of(obj)["name"],
                FAULT_NAMESPACE,
                {"metadata": {"annotations": note}},
                _content_type=MERGE,
                _preload_content=False,
            )

    def _join(self, wanted: str, taints_json: str, names: set[str]) -> str:
        taints = json.loads(taints_json)
        if not isinstance(taints, list):
            raise ValueError("taints must be a JSON list")
        used = [int(m.group(1)) for n in names if (m := _INDEXED.match(n))]
        index = max([*used, self.world.config.nodes - 1]) + 1
        name = wanted or node_name(index)
        if name in names:
            raise ValueError(f"node {name} exists already")
        cfg = self.world.config
        devices = self.world.services.get("devices")
        if devices is not None:  # the hardware is there before its kubelet registers
            devices.ensure_node(name, cfg.gpus_per_node)
        server = self.world.services.get("kubelet-server")
        endpoint = ("127.0.0.1", int(server.port)) if server is not None else None
        now = self.clock.wall()
        node = make_node(index, cfg.gpus_per_node, now, endpoint)
        if name != node_name(index):
            node["metadata"]["name"] = name
            node["metadata"]["labels"]["kubernetes.io/hostname"] = name
            for address in node["status"]["addresses"]:
                if address["type"] == "Hostname":
                    address["address"] = name
        if taints:
            node["spec"]["taints"] = [
                {k: str(t[k]) for k in ("key", "value", "effect") if t.get(k)} for t in taints
            ]
        resp = self.core.create_node(node, _preload_content=False)
        uid = json.loads(resp.data)["metadata"].get("uid")
        try:
            self.coord.create_namespaced_lease(
                "kube-node-lease",
                lease_body(name, uid, now, Kubelet.lease_duration_for(cfg)),
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
        names.add(name)
        return name
