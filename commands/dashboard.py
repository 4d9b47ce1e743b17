"""``krea-ops dashboard`` (the configured cluster) and ``krea-ops demo`` (the bundled
simulator). Textual is imported only when a dashboard starts, so ``--help`` stays fast."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from commands.common import settings_from
from krea_ops.errors import BadInput
from krea_ops.settings import Settings, load_settings

DEMO_TRAININGS = (
    # (name, share of the nodes): one that runs, one too big to fit (queue why has a story)
    ("dit-xl-pretrain", 0.5),
    ("dit-b-ablation", 0.75),
)


def run_dashboard(settings: Settings, *, title: str | None = None) -> None:
    from krea_ops.console import Console
    from krea_ops.history import HISTORY_POINTS
    from screens.app import KreaOpsApp

    console = Console(settings, history_points=HISTORY_POINTS)
    # fail fast, with one line, when the cluster cannot be reached
    console.cluster.nodes("kubernetes.io/hostname=krea-ops-reachability-probe")
    app = KreaOpsApp(
        console,
        refresh_s=settings.dashboard_refresh_s,
        read_only=settings.dashboard_read_only,
        title=title,
    )
    app.run()


def register(app: typer.Typer) -> None:
    @app.command("dashboard", rich_help_panel="Dashboard")
    def dashboard(
        ctx: typer.Context,
        read_only: bool = typer.Option(
            None, "--read-only", help="hide every action (default: setting dashboard_read_only)"
        ),
        refresh: float = typer.Option(
            None, "--refresh", min=0.5, help="refresh interval in seconds (default: 5)"
        ),
    ) -> None:
        """The Textual dashboard on the configured cluster: fleet heatmap, node drill-down,
        fabric, queue, burst and training screens."""
        settings = settings_from(ctx, dashboard_read_only=read_only, dashboard_refresh_s=refresh)
        run_dashboard(settings)

    @app.command("demo", rich_help_panel="Dashboard")
    def demo(
        ctx: typer.Context,
        nodes: int = typer.Option(64, "--nodes", min=1, help="GPU nodes"),
        seed: int = typer.Option(0, "--seed", help="random seed of the world"),
        speed: float = typer.Option(60.0, "--speed", help="simulated seconds per real second"),
        state: Path = typer.Option(
            None, "--state", help="simulator state directory (default: a new temp dir)"
        ),
        read_only: bool = typer.Option(False, "--read-only", help="hide every action"),
        refresh: float = typer.Option(
            2.0, "--refresh", min=0.5, help="refresh interval in seconds"
        ),
    ) -> None:
        """Start the simulator (an API server, a world of GPU nodes, exporters and, when
        installed, Prometheus) and open the dashboard on it. No cluster needed."""
        if speed <= 0:
            raise BadInput("--speed must be > 0")
        world, tmp = start_demo_world(nodes=nodes, seed=seed, speed=speed, state=state)
        try:
            base = dict(ctx.obj or {}) if isinstance(ctx.obj, dict) else {}
            base.update(
                kubeconfig=str(world.kubeconfig),
                context=None,
                prometheus_url=None,
                dashboard_read_only=read_only or None,
                dashboard_refresh_s=refresh,
                training_checkpoint_mount=f"/checkpoints={world.sim.state_dir / 'checkpoints'}",
            )
            settings = load_settings({k: v for k, v in base.items() if v is not None})
            run_dashboard(settings, title=f"demo: {nodes} simulated nodes at {speed:g}x")
        finally:
            print("stopping the simulator…", file=sys.stderr, flush=True)
            world.close()
            if tmp is not None:
                tmp.cleanup()


def start_demo_world(
    *, nodes: int, seed: int, speed: float, state: Path | None, wait_s: float = 60.0
) -> tuple[Any, Any]:
    """The simulated world with a training running and one waiting; returns once the
    exporters are published (and Prometheus, when installed, answers)."""
    from krea_ops.sim.world.actor import WorldConfig
    from krea_ops.sim.world.training import submit_training
    from krea_ops.sim.world.world import SimWorld

    tmp = None
    if state is None:
        tmp = tempfile.TemporaryDirectory(prefix="krea-ops-demo-")
        state = Path(tmp.name)
    print(f"starting the simulator: {nodes} nodes at {speed:g}x in {state}", file=sys.stderr)
    config = WorldConfig(nodes=nodes, seed=seed, speed=speed, extra={"scrape_interval_s": 5})
    world = SimWorld(config, state)
    try:
        for name, share in DEMO_TRAININGS:
            size = max(1, int(nodes * share))
            try:
                submit_training(world.client, name, size, run_seconds=86400.0)
            except Exception as exc:  # the run exists from an earlier demo on this state
                if "AlreadyExists" not in str(exc) and "409" not in str(exc):
                    raise
        devices = world.world.services.get("devices")
        deadline = time.monotonic() + wait_s
        while devices is not None and time.monotonic() < deadline:
            if devices.exporter_urls() and (
                devices.prometheus is None or devices.prometheus_url is not None
            ):
                break
            time.sleep(0.5)
    except BaseException:
        world.close()
        if tmp is not None:
            tmp.cleanup()
        raise
    return world, tmp
