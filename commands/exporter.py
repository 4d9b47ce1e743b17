"""``krea-ops exporter``: the node exporter (GPU/NVLink over NVML, InfiniBand over sysfs)."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import typer

from commands.common import settings_from
from krea_ops.settings import GPU_BACKENDS

app = typer.Typer(no_args_is_help=True, help="Run the node exporter or print one scrape.")

SysfsOption = typer.Option(
    None, "--sysfs", help="sysfs root to read InfiniBand from (default: /sys)"
)
BackendOption = typer.Option(
    None, "--gpu-backend", help=f"GPU backend: {'|'.join(GPU_BACKENDS)} (default: nvml)"
)
NodeOption = typer.Option(
    None, "--node-name", help="node label value (default: $NODE_NAME, hostname)"
)
GpmOption = typer.Option(
    None, "--gpm-interval", help="GPM sampling interval, seconds (default: 1.0)"
)
XidOption = typer.Option(
    None, "--xid-window", help="seconds the last XID stays exported (default: 600)"
)
FakeOption = typer.Option(None, "--fake-gpus", help="GPUs for --gpu-backend fake (default: 8)")
NvmlTimeoutOption = typer.Option(
    None,
    "--nvml-timeout",
    help="seconds an NVML call may run before its GPU reads as timed out (default: 5)",
)
GpuScrapeTimeoutOption = typer.Option(
    None,
    "--gpu-scrape-timeout",
    help="seconds a scrape waits at most for all GPUs' readings (default: 8)",
)


def _flags(**values: Any) -> dict[str, Any]:
    return {
        "exporter_sysfs": values["sysfs"],
        "exporter_gpu_backend": values["gpu_backend"],
        "exporter_node_name": values["node_name"],
        "exporter_gpm_interval_s": values["gpm_interval"],
        "exporter_xid_window_s": values["xid_window"],
        "exporter_fake_gpus": values["fake_gpus"],
        "exporter_nvml_call_timeout_s": values["nvml_timeout"],
        "exporter_gpu_scrape_timeout_s": values["gpu_scrape_timeout"],
    }


@app.command("run")
def run(
    ctx: typer.Context,
    listen: str = typer.Option(
        None, "--listen", help="address to serve /metrics on (default: 127.0.0.1:9400)"
    ),
    sysfs: str = SysfsOption,
    gpu_backend: str = BackendOption,
    node_name: str = NodeOption,
    gpm_interval: float = GpmOption,
    xid_window: float = XidOption,
    fake_gpus: int = FakeOption,
    nvml_timeout: float = NvmlTimeoutOption,
    gpu_scrape_timeout: float = GpuScrapeTimeoutOption,
) -> None:
    """Serve metrics over HTTP until interrupted (SIGINT or SIGTERM)."""
    settings = settings_from(
        ctx,
        exporter_listen=listen,
        **_flags(
            sysfs=sysfs,
            gpu_backend=gpu_backend,
            node_name=node_name,
            gpm_interval=gpm_interval,
            xid_window=xid_window,
            fake_gpus=fake_gpus,
            nvml_timeout=nvml_timeout,
            gpu_scrape_timeout=gpu_scrape_timeout,
        ),
    )
    from krea_ops.exporters.server import HttpEndpoint, build_exporter  # (start-up: see main)

    exporter = build_exporter(settings)
    try:
        endpoint = HttpEndpoint(exporter, settings.exporter_listen)
    except Exception:
        exporter.close()
        raise
    for warning in exporter.warnings:
        print(f"krea-ops exporter: warning: {warning}", file=sys.stderr, flush=True)
    names = ", ".join(c.name for c in exporter.collectors)
    print(f"serving {endpoint.url} (node {exporter.node}; collectors: {names})", flush=True)

    stop = threading.Event()

    def _stop(_signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        endpoint.stop()
        exporter.close()
    print("exporter stopped", file=sys.stderr, flush=True)


@app.command("once")
def once(
    ctx: typer.Context,
    sysfs: str = SysfsOption,
    gpu_backend: str = BackendOption,
    node_name: str = NodeOption,
    gpm_interval: float = GpmOption,
    xid_window: float = XidOption,
    fake_gpus: int = FakeOption,
    nvml_timeout: float = NvmlTimeoutOption,
    gpu_scrape_timeout: float = GpuScrapeTimeoutOption,
) -> None:
    """Print one scrape in Prometheus text format to stdout and exit.

    With GPUs it waits one GPM interval first, so tensor activity has a sample.
    """
    settings = settings_from(
        ctx,
        **_flags(
            sysfs=sysfs,
            gpu_backend=gpu_backend,
            node_name=node_name,
            gpm_interval=gpm_interval,
            xid_window=xid_window,
            fake_gpus=fake_gpus,
            nvml_timeout=nvml_timeout,
            gpu_scrape_timeout=gpu_scrape_timeout,
        ),
    )
    from krea_ops.exporters.server import build_exporter

    exporter = build_exporter(settings, start_threads=False)
    try:
        for warning in exporter.warnings:
            print(f"krea-ops exporter: warning: {warning}", file=sys.stderr, flush=True)
        exporter.prime_gpm(settings.exporter_gpm_interval_s)
        sys.stdout.write(exporter.scrape().decode())
        sys.stdout.flush()
    finally:
        exporter.close()
