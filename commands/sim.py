"""``krea-ops sim``: the bundled simulator (a Kubernetes-compatible API server, and later
the GPU cluster world on it)."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

import typer

from krea_ops.errors import BadInput
from krea_ops.exporters.server import parse_listen

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

    Prints the API address and the kubeconfig path; point kubectl or krea-ops at it with
    KUBECONFIG=PATH. Objects persist in STATE across restarts.
    """
    if not api_only:
        raise BadInput(
            "the simulated GPU world (nodes, GPUs, Kueue, kubelets) is not built "
            "yet; run `krea-ops sim serve --api-only`"
        )
    if nodes < 0 or gpus_per_node < 0 or speed <= 0:
        raise BadInput("--nodes and --gpus-per-node must be >= 0 and --speed > 0")
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
    from krea_ops.sim.local import LocalApiServer

    sim = LocalApiServer(state, host=host, port=port, kubeconfig_out=kubeconfig_out)
    print(f"API server: {sim.url}", flush=True)
    print(f"kubeconfig: {sim.kubeconfig}", flush=True)
    print(f"state: {sim.state_dir}", flush=True)
    print(f"try: KUBECONFIG={sim.kubeconfig} kubectl get namespaces", flush=True)

    stop = threading.Event()

    def _stop(_signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        sim.close()
    print("simulator stopped", file=sys.stderr, flush=True)
