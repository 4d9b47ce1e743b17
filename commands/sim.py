"""``krea-ops sim``: the bundled simulator: a Kubernetes-compatible API server and the
simulated GPU cluster world acting on it."""

from __future__ import annotations

import gc
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import typer

from krea_ops.errors import BadInput

app = typer.Typer(no_args_is_help=True, help="Run the bundled cluster simulator.")


@app.command("serve")
def serve(
    nodes: int = typer.Option(64, "--nodes", help="GPU nodes in the simulated world"),
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
) -> None:
    """Run the simulator in the foreground until interrupted.

    Prints the API address, the kubeconfig path and the exporter addresses; point kubectl
    or krea-ops at it with KUBECONFIG=PATH. Objects persist in STATE across restarts.
    --api-only serves an empty cluster without the world.
    """
    if nodes < 1 or gpus_per_node < 1 or speed <= 0:
        raise BadInput("--nodes and --gpus-per-node must be >= 1 and --speed > 0")
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
    if api_only:
        from krea_ops.sim.local import LocalApiServer

        sim = LocalApiServer(state, host=host, port=port, kubeconfig_out=kubeconfig_out)
        exporters: dict[str, str] = {}
        closer, prometheus = sim, None
    else:
        from krea_ops.sim.world.actor import WorldConfig
        from krea_ops.sim.world.world import SimWorld

        config = WorldConfig(
            nodes=nodes, gpus_per_node=gpus_per_node, seed=0 if seed is None else seed, speed=speed
        )
        world = SimWorld(config, state, host=host, port=port, kubeconfig_out=kubeconfig_out)
        sim, closer = world.sim, world
        devices = world.world.services.get("devices")
        exporters = devices.exporter_urls() if devices is not None else {}
        prometheus = getattr(devices, "prometheus_url", None) if devices is not None else None
    print(f"API server: {sim.url}", flush=True)
    print(f"kubeconfig: {sim.kubeconfig}", flush=True)
    print(f"state: {sim.state_dir}", flush=True)
    if not api_only:
        print(
            f"world: {nodes} nodes x {gpus_per_node} GPUs, speed {speed}x, "
            f"seed {0 if seed is None else seed}",
            flush=True,
        )
        for node_name, url in sorted(exporters.items()):
            print(f"exporter {node_name}: {url}", flush=True)
        if prometheus:
            print(f"prometheus: {prometheus}", flush=True)
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
        while not stop.wait(1.0):
            pass
    finally:
        closer.close()
    print("simulator stopped", file=sys.stderr, flush=True)


FAULT_KINDS = ("hot-gpu", "nvlink-errors", "ib-flap", "gpu-lost", "crash")


@app.command("inject")
def inject(
    ctx: typer.Context,
    kind: str = typer.Argument(..., help="hot-gpu | nvlink-errors | ib-flap | gpu-lost | crash"),
    node: str = typer.Argument(..., help="node to fail, e.g. gpu-node-007"),
    gpu: int = typer.Option(None, "--gpu", help="GPU index (hot-gpu, nvlink-errors, gpu-lost)"),
    value: str = typer.Option(
        None,
        "--value",
        help="fault parameter, e.g. target °C for hot-gpu or the HCA index for ib-flap",
    ),
) -> None:
    """Make a fault happen now in a running simulator (found through the kubeconfig).

    The fault is a ConfigMap in namespace krea-sim, so injecting is itself an API call.
    """
    if kind not in FAULT_KINDS:
        raise BadInput(f"unknown fault {kind!r}: choose one of {', '.join(FAULT_KINDS)}")
    from krea_ops.kube.client import api_client, check_reachable
    from krea_ops.sim.world.faults import inject_fault

    obj = ctx.obj or {}
    api = api_client(obj.get("kubeconfig"), obj.get("context"))
    with api:
        check_reachable(api)
        name = inject_fault(api, kind, node, gpu=gpu, value=value)
    print(f"fault {name}: {kind} on {node}" + (f" gpu {gpu}" if gpu is not None else ""))
