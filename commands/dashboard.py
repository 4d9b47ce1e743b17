"""``krea-ops dashboard`` (the configured cluster) and ``krea-ops demo`` (the bundled
simulator). Textual is imported only when a dashboard starts, so ``--help`` stays fast."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import typer

from commands.common import settings_from
from krea_ops.errors import BadInput
from krea_ops.settings import Settings, load_settings


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
    """The simulated world with its story (``krea_ops.sim.world.story``); returns once a
    reader finds readings for every node, saying on stderr what is coming up meanwhile."""
    from krea_ops.sim.world.story import story_config
    from krea_ops.sim.world.world import SimWorld

    tmp = None
    if state is None:
        tmp = tempfile.TemporaryDirectory(prefix="krea-ops-demo-")
        state = Path(tmp.name)
    print(f"starting the simulator: {nodes} nodes at {speed:g}x in {state}", file=sys.stderr)

    def progress(line: str) -> None:
        print(f"  {line}", file=sys.stderr, flush=True)

    # Prometheus scrapes every 5 s (not 15): the first readings come sooner.
    config = story_config(nodes=nodes, seed=seed, speed=speed, scrape_interval_s=5)
    try:
        world = SimWorld(config, state, progress=progress)
    except BaseException:
        if tmp is not None:
            tmp.cleanup()
        raise
    try:
        if not world.wait_for_readings(wait_s):
            progress(f"no readings from Prometheus within {wait_s:g} s; opening anyway")
    except BaseException:
        world.close()
        if tmp is not None:
            tmp.cleanup()
        raise
    return world, tmp
