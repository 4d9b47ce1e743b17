"""``krea-ops sim``: the bundled simulator: a Kubernetes-compatible API server and the
simulated GPU cluster world acting on it."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import typer

from krea_ops.errors import BadInput

app = typer.Typer(no_args_is_help=True, help="Run the bundled cluster simulator.")


@app.command("serve")
def serve(
    nodes: int = typer.Option(
        64,
        "--nodes",
        help="GPU nodes in the simulated world (with --api-only on upstream: the nodes your "
        "clients register and keep alive, which sizes the node lifecycle controller's grace "
        "period as the world's kubelets' Lease)",
    ),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per node"),
    seed: int = typer.Option(None, "--seed", help="random seed of the world"),
    speed: float = typer.Option(1.0, "--speed", help="simulated seconds per real second"),
    listen: str = typer.Option(
        "127.0.0.1:0", "--listen", help="API server address (port 0 picks a free port)"
    ),
    state: Path = typer.Option(
        None, "--state", help="directory for the object store (default: a new temp dir)"
    ),
    kubeconfig_out: Path = typer.Option(
        None, "--kubeconfig-out", help="where to write the kubeconfig (default: STATE/kubeconfig)"
    ),
    api_only: bool = typer.Option(
        False, "--api-only", help="only the API server, with an empty cluster"
    ),
    faults: Path = typer.Option(
        None,
        "--faults",
        help="YAML fault rules for the API server: errors (409, 429, 500, 503), latency, "
        "dropped connections, watches closed, per verb and resource (docs/operations.md)",
    ),
    control_plane: str = typer.Option(
        "embedded",
        "--control-plane",
        help="embedded: our API server with its scheduler, controllers and Kueue stand-ins "
        "(needs nothing); upstream: etcd, kube-apiserver, kube-controller-manager, "
        "kube-scheduler, Kueue and JobSet built from their Go modules (krea-ops sim "
        "upstream build; needs Go), with only the machines simulated",
    ),
    telemetry_nodes: str = typer.Option(
        None,
        "--telemetry-nodes",
        metavar="N",
        help="the scale mode: devices, exporters and readings for the first N nodes only "
        "(0 to --nodes); every node keeps its kubelet, the machines follow the cluster "
        "through watches, and trainings of 64-512 nodes run instead of the demo's story "
        "(default: every node, no scale mode)",
        show_default=False,
    ),
) -> None:
    """Run the simulator in the foreground until interrupted.

    Prints the API address, the kubeconfig path and the exporter addresses; point kubectl
    or krea-ops at it with KUBECONFIG=PATH. Objects persist in STATE across restarts.
    --api-only serves an empty cluster without the world. --faults makes the API server
    refuse, slow down or hang up on the requests its rules name; the ConfigMap
    krea-sim/api-faults (key faults.yaml) does the same while it runs.
    --telemetry-nodes N runs a big fleet cheaply (e.g. --control-plane upstream --nodes
    5000 --telemetry-nodes 256): only the first N nodes have GPUs, exporters and
    readings; the others are kept alive in the API by their kubelets.
    """
    if nodes < 1 or gpus_per_node < 1 or speed <= 0:
        raise BadInput("--nodes and --gpus-per-node must be >= 1 and --speed > 0")
    check_control_plane(control_plane)
    telemetry = parse_telemetry_nodes(telemetry_nodes, nodes)
    if telemetry is not None and api_only:
        raise BadInput("--telemetry-nodes sizes the world: --api-only runs none")
    if faults is not None and control_plane != "embedded":
        raise BadInput("--faults is the embedded API server's fault switch: not with upstream")
    fault_rules = None
    if faults is not None:
        from krea_ops.sim.apiserver.fault_switch import parse_text

        try:
            text = faults.read_text()
        except OSError as exc:
            raise BadInput(f"--faults {faults}: {exc.strerror or exc}") from None
        fault_rules = parse_text(text, f"--faults {faults}")
    from krea_ops.exporters.server import parse_listen  # (start-up: see main)

    host, port = parse_listen(listen)
    if state is not None:
        try:
            state.mkdir(parents=True, exist_ok=True)
            probe = state / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise BadInput(
                f"--state {state} is not a writable directory: {exc.strerror or exc}"
            ) from None
    closer: Any
    sim: Any  # LocalApiServer or UpstreamControlPlane: url, kubeconfig, state_dir
    say = lambda line: print(f"  {line}", file=sys.stderr, flush=True)  # noqa: E731
    if api_only and control_plane == "upstream":
        from krea_ops.sim.common.actor import WorldConfig
        from krea_ops.sim.machines.kubelet import Kubelet
        from krea_ops.sim.upstream.controlplane import UpstreamControlPlane

        sim = UpstreamControlPlane(
            state or _temp_state(),
            host=host,
            port=port,
            kubeconfig_out=kubeconfig_out,
            # a client's nodes renew their Leases as the world's kubelets would
            node_grace_s=max(50.0, Kubelet.lease_duration_for(WorldConfig(nodes=nodes))),
            progress=say,
        )
        exporters: dict[str, str] = {}
        closer, prometheus = sim, None
    elif api_only:
        from krea_ops.sim.apiserver.local import LocalApiServer

        sim = LocalApiServer(state, host=host, port=port, kubeconfig_out=kubeconfig_out)
        exporters = {}
        closer, prometheus = sim, None
    else:
        from krea_ops.sim.machines.fleet import scale_config
        from krea_ops.sim.machines.story import story_config
        from krea_ops.sim.world import SimWorld

        world_seed = 0 if seed is None else seed
        config = dataclasses.replace(
            story_config(nodes, gpus_per_node, world_seed, speed)
            if telemetry is None
            else scale_config(nodes, telemetry, gpus_per_node, world_seed, speed),
            control_plane=control_plane,
        )
        world = SimWorld(
            config,
            state,
            host=host,
            port=port,
            kubeconfig_out=kubeconfig_out,
            progress=say,
        )
        sim, closer = world.sim, world
        devices = world.world.services.get("devices")
        exporters = devices.exporter_urls() if devices is not None else {}
        prometheus = getattr(devices, "prometheus_url", None) if devices is not None else None
    if fault_rules is not None:
        seed_, rules = fault_rules
        sim.api.faults.set(rules, seed=seed_, source="file")
    print(f"API server: {sim.url}", flush=True)
    print(f"control plane: {control_plane}", flush=True)
    print(f"kubeconfig: {sim.kubeconfig}", flush=True)
    print(f"state: {sim.state_dir}", flush=True)
    if not api_only:
        print(
            f"world: {nodes} nodes x {gpus_per_node} GPUs, speed {speed}x, "
            f"seed {0 if seed is None else seed}",
            flush=True,
        )
        if telemetry is not None:
            print(
                f"scale mode: devices and exporters on the first {telemetry} of {nodes} "
                "nodes; the others are kept alive by their kubelets only",
                flush=True,
            )
        for node_name, url in sorted(exporters.items()):
            print(f"exporter {node_name}: {url}", flush=True)
        if prometheus:
            print(f"prometheus: {prometheus}", flush=True)
    if fault_rules is not None:
        print(f"faults: {len(fault_rules[1])} rules from {faults}", flush=True)
    print(f"try: KUBECONFIG={sim.kubeconfig} kubectl get namespaces", flush=True)
    # A long-lived server holding every object in memory: keep the start-up heap out of
    # the collector and make full collections rare (each one walks every stored object).
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 1000)

    stop = threading.Event()

    def _stop(_signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        if not api_only:
            world.wait_for_readings(60.0, cancel=stop.is_set)
        while not stop.wait(1.0):
            pass
    finally:
        closer.close()
    print("simulator stopped", file=sys.stderr, flush=True)


CONTROL_PLANES = ("embedded", "upstream")


def parse_telemetry_nodes(value: str | None, nodes: int) -> int | None:
    """``--telemetry-nodes``: None (not given: every node), else a whole number within
    0..``nodes``; anything else is bad input (one line, exit 2)."""
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit():
        raise BadInput(
            f"--telemetry-nodes {value!r}: give a whole number of nodes, 0 to --nodes ({nodes})"
        )
    count = int(text)
    if count > nodes:
        raise BadInput(f"--telemetry-nodes {count} is more than --nodes {nodes}: 0 to {nodes}")
    return count


def check_control_plane(value: str) -> None:
    if value not in CONTROL_PLANES:
        raise BadInput(f"--control-plane {value!r}: choose embedded or upstream")


def _temp_state() -> Path:
    return Path(tempfile.mkdtemp(prefix="krea-sim-"))


upstream_app = typer.Typer(
    no_args_is_help=True, help="The upstream control plane, built from its Go modules."
)
app.add_typer(upstream_app, name="upstream")


@upstream_app.command("build")
def upstream_build() -> None:
    """Build kube-apiserver, kube-controller-manager, kube-scheduler, etcd, the Kueue
    manager and the JobSet controller at the versions pinned in
    deploy/dev/upstream/versions.env, from the Go module proxy, into a cache keyed by the
    versions and the Go toolchain (a second build does nothing); print where they are.
    Needs Go 1.26; the embedded control plane needs nothing."""
    from krea_ops.sim.upstream import build

    found = build.ensure_built(lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    pins = build.versions()
    print(f"binaries: {found / 'bin'}")
    print(f"manifests: {found / 'manifests'}")
    print(
        "versions: "
        + ", ".join(f"{k.removesuffix('_VERSION').lower()} {v}" for k, v in pins.items())
    )


FAULT_KINDS = ("hot-gpu", "nvlink-errors", "ib-flap", "gpu-lost", "crash", "hang", "straggler")
VALUE_PICKS = {"nvlink-errors": "NVLink", "ib-flap": "HCA"}  # what --value selects
APPLY_TIMEOUT_S = 30.0  # the fault loop runs every 2 simulated s (at 0.1x: 20 s of wall time)


@app.command("inject")
def inject(
    ctx: typer.Context,
    kind: str = typer.Argument(
        ..., help="hot-gpu | nvlink-errors | ib-flap | gpu-lost | crash | hang | straggler"
    ),
    node: str = typer.Argument(..., help="node to fail, e.g. gpu-node-007"),
    gpu: int = typer.Option(
        None,
        "--gpu",
        help="GPU index (hot-gpu, nvlink-errors, gpu-lost, straggler; default: the simulator "
        "picks one and says which)",
    ),
    value: str = typer.Option(
        None,
        "--value",
        help="hot-gpu: the °C its sensor reads from a simulated minute on, idle or loaded "
        "(default 84); nvlink-errors: the link; ib-flap: the HCA index; crash: the cause "
        "(host, gpu-hbm, ib-link...); straggler: power-brake (default) or hw-slowdown, the "
        "clock-event reason it shows",
    ),
    slowdown: float = typer.Option(
        None,
        "--slowdown",
        help="straggler only: the GPU runs at 1/F of its SM clock when busy, and a training "
        "gang on it at 1/F of its pace (F greater than 1, at most 4; default 1.5)",
    ),
) -> None:
    """Make a fault happen now in a running simulator (found through the kubeconfig).

    The fault is a ConfigMap in namespace krea-sim, so injecting is itself an API call.
    The command waits until the simulator has applied it and prints what it hit: the GPU,
    NVLink or HCA it chose where --gpu or --value left that open, or for a hang the
    training gang whose collective stalled (its ranks time out after NCCL's timeout).
    """
    if kind not in FAULT_KINDS:
        raise BadInput(f"unknown fault {kind!r}: choose one of {', '.join(FAULT_KINDS)}")
    from krea_ops.kube.client import api_client, check_reachable
    from krea_ops.sim.machines.faults import check_fault, inject_fault

    check_fault(kind, gpu, value, slowdown)  # before any cluster is needed

    obj = ctx.obj or {}
    api = api_client(obj.get("kubeconfig"), obj.get("context"))
    with api:
        check_reachable(api)
        name = inject_fault(api, kind, node, gpu=gpu, value=value, slowdown=slowdown)
        target = _wait_applied(api, name)
    print(
        f"fault {name}: {kind} on {node}"
        + (f" {target}{_chosen(kind, target, gpu, value)}" if target else "")
    )


JOIN_TIMEOUT_S = 30.0


@app.command("add-node")
def add_node(
    ctx: typer.Context,
    name: str = typer.Argument(None, help="the new node's name (default: the next gpu-node-NNN)"),
    taint: list[str] = typer.Option(
        None,
        "--taint",
        help="KEY=VALUE:EFFECT the node registers with, as kubelet's --register-with-taints "
        "(repeatable; default krea.ai/validation=pending:NoSchedule, the taint of a node "
        "that has not passed its first validation)",
    ),
    no_taints: bool = typer.Option(False, "--no-taints", help="register without any taint"),
) -> None:
    """Add a GPU node to a running simulator (found through the kubeconfig).

    The request is a ConfigMap in namespace krea-sim; the simulator gives the node its
    GPUs, HCAs and exporter like the others, registers it with the taints, and its kubelet
    takes over. Waits until the node is registered and prints its name.
    """
    import time

    from krea_ops.errors import Unavailable
    from krea_ops.kube.client import api_client, check_reachable
    from krea_ops.sim.machines.joins import parse_taint, registered, request_node
    from krea_ops.validation import PENDING_TAINT_EFFECT, PENDING_TAINT_KEY, PENDING_TAINT_VALUE

    if no_taints and taint:
        raise BadInput("--no-taints and --taint: choose one")
    default = f"{PENDING_TAINT_KEY}={PENDING_TAINT_VALUE}:{PENDING_TAINT_EFFECT}"
    taints = [] if no_taints else [parse_taint(t) for t in (taint or [default])]
    obj = ctx.obj or {}
    api = api_client(obj.get("kubeconfig"), obj.get("context"))
    with api:
        check_reachable(api)
        request = request_node(api, name or None, taints)
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while True:
            node, error = registered(api, request)
            if node:
                break
            if error:
                raise BadInput(f"the simulator could not add the node: {error}")
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"the simulator did not register node request {request} within "
                    f"{JOIN_TIMEOUT_S:g} s: is its world running? sim serve --api-only has none"
                )
            time.sleep(0.2)
    print(node)


def _chosen(kind: str, target: str, gpu: int | None, value: str | None) -> str:
    """`` (the simulator chose the GPU; --gpu picks the GPU)`` for the parts of ``target``
    (``GPU 4, NVLink 14``) that the command line left open; "" when it named them all."""
    by_value = VALUE_PICKS.get(kind)
    flags = {"GPU": "--gpu", **({by_value: "--value"} if by_value else {})}
    given = {"GPU": gpu is not None, **({by_value: value is not None} if by_value else {})}
    hit = [part.partition(" ")[0] for part in target.split(", ")]
    # a hang's gang is where the node is, not a choice
    chosen = [what for what in hit if what != "gang" and not given.get(what, False)]
    if not chosen:
        return ""
    how = ", ".join(f"{flags[what]} picks the {what}" for what in chosen if what in flags)
    return f" (the simulator chose the {' and '.join(chosen)}" + (f"; {how})" if how else ")")


def _wait_applied(api: Any, name: str) -> str | None:
    """What the simulator's fault loop says fault ``name`` hit, once it has applied it.
    A fault it could not apply, or did not apply in time, is deleted again (nothing is
    left to happen later, unasked) and reported."""
    import json
    import time

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from krea_ops.errors import Unavailable
    from krea_ops.sim.machines.faults import APPLIED, ERROR, FAULT_NAMESPACE, TARGET

    core = client.CoreV1Api(api)
    deadline = time.monotonic() + APPLY_TIMEOUT_S
    while True:
        try:
            resp: Any = core.read_namespaced_config_map(
                name, FAULT_NAMESPACE, _preload_content=False
            )
        except ApiException as exc:
            raise Unavailable(f"fault {name}: reading it back failed (HTTP {exc.status})") from None
        annotations = (json.loads(resp.data).get("metadata") or {}).get("annotations") or {}
        if annotations.get(APPLIED) and not annotations.get(ERROR):
            return annotations.get(TARGET) or None
        if annotations.get(ERROR) or time.monotonic() > deadline:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_config_map(name, FAULT_NAMESPACE)
            if annotations.get(ERROR):
                raise BadInput(f"the simulator could not apply {name}: {annotations[ERROR]}")
            raise Unavailable(
                f"the simulator did not apply fault {name} within {APPLY_TIMEOUT_S:g} s "
                "(removed again): is its world running? sim serve --api-only has none"
            )
        time.sleep(0.2)
