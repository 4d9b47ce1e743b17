"""``krea-ops dashboard`` (the configured cluster) and ``krea-ops demo`` (the bundled
simulator). Textual is imported only when a dashboard starts, so ``--help`` stays fast."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

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
        no_controllers: bool = typer.Option(
            False,
            "--no-controllers",
            help="do not run the bundled controllers (burst taint, migrate-back, node "
            "health, quota sync) beside the simulator",
        ),
        control_plane: str = typer.Option(
            "embedded",
            "--control-plane",
            help="embedded (needs nothing) or upstream (the real kube-apiserver, "
            "controller-manager, scheduler, Kueue and JobSet; krea-ops sim upstream build)",
        ),
    ) -> None:
        """Start the simulator (an API server, a world of GPU nodes, exporters and, when
        installed, Prometheus), run the four bundled controllers on it as a separate
        process (as a Deployment would; their log and audit log in the state directory),
        and open the dashboard on it. No cluster needed."""
        if speed <= 0:
            raise BadInput("--speed must be > 0")
        from commands.sim import check_control_plane

        check_control_plane(control_plane)
        world, tmp = start_demo_world(
            nodes=nodes, seed=seed, speed=speed, state=state, control_plane=control_plane
        )
        controllers: DemoControllers | None = None
        try:
            state_dir = Path(world.sim.state_dir)
            window_s = demo_window_s(speed)
            if not no_controllers:
                # their logs outlive a temporary state directory: the path shown at the
                # start must still be there after quit
                logs = state_dir if tmp is None else Path(tempfile.mkdtemp(prefix="krea-ops-demo-"))
                controllers = DemoControllers(world.kubeconfig, logs, speed=speed)
                controllers.start()
            base = dict(ctx.obj or {}) if isinstance(ctx.obj, dict) else {}
            base.update(
                kubeconfig=str(world.kubeconfig),
                context=None,
                prometheus_url=None,
                dashboard_read_only=read_only or None,
                dashboard_refresh_s=refresh,
                training_checkpoint_mount=f"/checkpoints={state_dir / 'checkpoints'}",
                # the window the controllers judge by, so the screen shows their verdicts
                telemetry_window_s=window_s,
            )
            settings = load_settings({k: v for k, v in base.items() if v is not None})
            run_dashboard(settings, title=f"demo: {nodes} simulated nodes at {speed:g}x")
        finally:
            if controllers is not None:
                _timed(
                    "stopping the controllers (each finishes its pass and releases its "
                    f"Lease; at most {CONTROLLERS_GRACE_S:g} s)",
                    controllers.stop,
                )
            _timed(
                "stopping the simulator (its machines, exporters, Prometheus and control plane)",
                world.close,
            )
            if tmp is not None:
                tmp.cleanup()
            if controllers is not None:
                print(
                    f"the controllers' log and audit log: {controllers.log_path.parent}",
                    file=sys.stderr,
                    flush=True,
                )


def _timed(what: str, step: Callable[[], object]) -> None:
    """Says what quitting waits for, and how long it took."""
    print(f"{what}…", file=sys.stderr, flush=True)
    start = time.monotonic()
    step()
    print(f"  done in {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)


def start_demo_world(
    *,
    nodes: int,
    seed: int,
    speed: float,
    state: Path | None,
    wait_s: float = 60.0,
    control_plane: str = "embedded",
) -> tuple[Any, Any]:
    """The simulated world with its story (``krea_ops.sim.machines.story``); returns once a
    reader finds readings for every node, saying on stderr what is coming up meanwhile."""
    from krea_ops.sim.machines.story import story_config
    from krea_ops.sim.world import SimWorld

    tmp = None
    if state is None:
        tmp = tempfile.TemporaryDirectory(prefix="krea-ops-demo-")
        state = Path(tmp.name)
    print(f"starting the simulator: {nodes} nodes at {speed:g}x in {state}", file=sys.stderr)

    def progress(line: str) -> None:
        print(f"  {line}", file=sys.stderr, flush=True)

    # Prometheus scrapes every 5 s (not 15): the first readings come sooner.
    config = dataclasses.replace(
        story_config(nodes=nodes, seed=seed, speed=speed, scrape_interval_s=5),
        control_plane=control_plane,
    )
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


# -- the controllers the demo runs ----------------------------------------------------------

DEMO_INTERVAL_S = 5.0  # seconds between the controllers' passes
DEMO_SCRAPE_S = 5.0  # the demo world's Prometheus scrape interval (start_demo_world)
CONTROLLERS_LOG = "controllers.log"
# SIGTERM to SIGKILL: a pass takes ~1 s on the demo's world, releasing four Leases less
CONTROLLERS_GRACE_S = 10.0
CONTROLLERS_AUDIT = "controllers-audit.jsonl"


def demo_window_s(speed: float) -> float:
    """The health policy's window in the demo: the default (5 min) in simulated time,
    but at least two scrapes, so "hot for the whole window" is never one sample."""
    return max(Settings().telemetry_window_s / speed, 2 * DEMO_SCRAPE_S)


def demo_controller_settings(speed: float, interval_s: float = DEMO_INTERVAL_S) -> dict[str, str]:
    """The settings (``KREA_OPS_*``) the demo's controllers run with: the defaults' wall
    durations in simulated time at ``speed`` (a 5 min hold, 1 h before an automatic
    restore), with floors that keep a decision longer than a few passes, so each acts on
    what it has seen more than once. quota-sync gives training the whole flavor: the story
    has inference borrow what training does not use (training_quota_fraction 1.0)."""
    defaults = Settings()

    def simulated(seconds: float, floor: float) -> str:
        return f"{max(seconds / speed, floor):g}"

    def per_minute(bucket: str) -> str:  # migrate-back's pace, in simulated minutes
        return f"{getattr(defaults, f'migrate_back_{bucket}_per_minute') * speed:g}"

    return {
        "telemetry_window_s": f"{demo_window_s(speed):g}",
        # long enough that the few seconds between the demo's start and the large
        # training's admission never read as "GPUs free, stop bursting"
        "burst_taint_hold_s": simulated(defaults.burst_taint_hold_s, 30.0),
        "node_health_veto_window_s": simulated(defaults.node_health_veto_window_s, 2 * interval_s),
        "node_health_restore_after_s": simulated(
            defaults.node_health_restore_after_s, 6 * interval_s
        ),
        "node_health_cooldown_s": simulated(defaults.node_health_cooldown_s, 6 * interval_s),
        "node_health_lemon_window_s": simulated(defaults.node_health_lemon_window_s, 60.0),
        **{
            f"migrate_back_{bucket}_per_minute": per_minute(bucket)
            for bucket in ("cluster", "namespace", "workload")
        },
        "quota_sync_training_share": "1",
    }


def _die_with_parent() -> None:
    """In the child: SIGTERM when the demo dies, even by SIGKILL (Linux), so a killed
    demo never leaves its controllers running against a stopped API server."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class DemoControllers:
    """``krea-ops controller run all`` as a process of its own beside the demo's world, as
    a Deployment runs it beside a cluster: the world's kubeconfig, the demo's settings
    (``demo_controller_settings``) in its environment, its JSON-lines log and its audit
    log in the state directory. ``stop`` sends SIGTERM: it finishes its pass and
    releases its Leases."""

    def __init__(
        self,
        kubeconfig: Path | str,
        state_dir: Path,
        *,
        speed: float,
        interval_s: float = DEMO_INTERVAL_S,
        namespace: str = "krea-ops",
    ) -> None:
        self.kubeconfig = str(kubeconfig)
        self.log_path = state_dir / CONTROLLERS_LOG
        self.audit_path = state_dir / CONTROLLERS_AUDIT
        self.interval_s = interval_s
        self.namespace = namespace
        self.settings = demo_controller_settings(speed, interval_s)
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "commands",
            "controller",
            "run",
            "all",
            "--interval",
            f"{self.interval_s:g}",
            "--namespace",
            self.namespace,
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({f"KREA_OPS_{k.upper()}": v for k, v in self.settings.items()})
        env.update(
            # the world's, not the ones a config file or the shell may name
            KREA_OPS_KUBECONFIG=self.kubeconfig,
            KREA_OPS_CONTEXT=self._current_context(),
            KREA_OPS_PROMETHEUS_URL="",  # found in the world's krea-ops-config
            KREA_OPS_AUDIT_LOG=str(self.audit_path),
        )
        return env

    def _current_context(self) -> str:
        import yaml

        with open(self.kubeconfig) as f:
            return str((yaml.safe_load(f) or {}).get("current-context") or "")

    def ensure_namespace(self) -> None:
        """The namespace the Leases and the state live in (a real install gets it from
        deploy/controllers)."""
        from krea_ops.kube.cluster import connect

        cluster = connect(self.kubeconfig, None)
        try:
            path = f"/api/v1/namespaces/{self.namespace}"
            if cluster.request("get namespace", "GET", path).status != 404:
                return
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
            made = cluster.request("create namespace", "POST", "/api/v1/namespaces", body=body)
            if not made.ok and made.status != 409:
                raise cluster.refusal(f"create namespace {self.namespace}", made)
        finally:
            cluster.close()

    def start(self) -> None:
        self.ensure_namespace()
        log: IO[bytes] = open(self.log_path, "ab")  # noqa: SIM115 (the child keeps it)
        try:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.environment(),
                start_new_session=True,  # Ctrl-C in the dashboard is the dashboard's
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        print(
            f"  controllers: burst-taint, migrate-back, node-health, quota-sync every "
            f"{self.interval_s:g} s (log: {self.log_path})",
            file=sys.stderr,
            flush=True,
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = CONTROLLERS_GRACE_S) -> int | None:
        """SIGTERM, then wait for the pass to end and the Leases to be released; SIGKILL
        after ``grace_s``. The exit status (None when it was never started)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is not None:
            print(
                f"the controllers had stopped (exit status {proc.returncode}); "
                f"their log: {self.log_path}",
                file=sys.stderr,
                flush=True,
            )
        else:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        return proc.returncode
