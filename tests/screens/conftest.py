"""Dashboard tests: a small simulated world per module, and the app on top of it.

``dashboard_world`` starts the same world ``krea-ops demo`` does (a training running,
one waiting, inference, exporters and Prometheus when installed), small and fast.
``make_app(world)`` builds the dashboard on it with a short refresh and window.
``wait_until(pilot, check)`` pumps the app until ``check()`` is true.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from commands.dashboard import start_demo_world
from krea_ops.console import Console
from krea_ops.history import HISTORY_POINTS
from krea_ops.settings import load_settings
from screens.app import KreaOpsApp


@pytest.fixture(scope="module")
def dashboard_world() -> Iterator[Any]:
    os.environ.setdefault("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    world, tmp = start_demo_world(nodes=4, seed=3, speed=60, state=None)
    try:
        yield world
    finally:
        world.close()
        if tmp is not None:
            tmp.cleanup()


def make_app(world: Any, **settings: Any) -> KreaOpsApp:
    values = {
        "kubeconfig": str(world.kubeconfig),
        "training_checkpoint_mount": f"/checkpoints={world.sim.state_dir / 'checkpoints'}",
        "telemetry_window_s": 20.0,
        "telemetry_stale_s": 30.0,
        **settings,
    }
    console = Console(load_settings(values, env={}), history_points=HISTORY_POINTS)
    return KreaOpsApp(console, refresh_s=1.0, read_only=bool(settings.get("dashboard_read_only")))


async def wait_until(pilot: Any, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Pump the app until ``check()`` returns something true; fail after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = None
    while loop.time() < deadline:
        last = check()
        if last:
            return last
        await pilot.pause(0.2)
    raise AssertionError(f"not reached in {timeout} s (last: {last!r})")
