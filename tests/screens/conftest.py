"""Dashboard tests: a small simulated world per module, and the app on top of it.

``dashboard_world`` starts the same world ``krea-ops demo`` does (a training running,
one waiting, inference, exporters and Prometheus when installed), small and fast.
``make_app(world)`` builds the dashboard on it with a short refresh and window.
``wait_until(pilot, check)`` pumps the app until ``check()`` is true.

The actions' tests (test_actions, test_run_actions) make their own objects on an API
server per test, on each control plane; ``gpu_nodes`` registers nodes as their kubelets
do and ``cluster_actors`` runs those kubelets (and, on the embedded control plane, the
scheduler and workload controllers the upstream one has for real).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from commands.dashboard import start_demo_world
from krea_ops.console import Console
from krea_ops.history import HISTORY_POINTS
from krea_ops.kube.cluster import Cluster
from krea_ops.settings import load_settings
from screens.app import KreaOpsApp


@pytest.fixture(scope="module")
def dashboard_world(control_plane: str) -> Iterator[Any]:
    """The demo's world, once per module on each control plane (``control_plane``)."""
    os.environ.setdefault("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    world, tmp = start_demo_world(
        nodes=4, seed=3, speed=60, state=None, control_plane=control_plane
    )
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


def plan_dialog(app: KreaOpsApp) -> Any:
    """The plan dialog (``ConfirmScreen``) once it is up and focused: it is the screen
    as soon as it is pushed, but focuses its first button (Cancel) only once mounted, and
    keys sent before would reach no button. None until then."""
    from screens.dialogs import ConfirmScreen

    screen = app.screen
    return screen if isinstance(screen, ConfirmScreen) and screen.focused is not None else None


async def give_evict_reason(app: KreaOpsApp, pilot: Any, node: str, reason: str) -> None:
    """Open ``node``'s screen, press ``e`` and give ``reason``: the evict is being planned
    (its dialog comes next, ``plan_dialog``)."""
    from screens.dialogs import ReasonScreen

    app.open_node(node)
    await pilot.pause(0.2)
    await pilot.press("e")
    await wait_until(pilot, lambda: isinstance(app.screen, ReasonScreen))
    for key in reason:
        await pilot.press("space" if key == " " else key)
    await pilot.press("enter")


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


# -- the actions' clusters: an API server per test, with machines on it -----------------


def gpu_nodes(cluster: Cluster, count: int, gpus: int = 8) -> list[str]:
    """``count`` GPU nodes gpu-node-000 ... as their kubelets register them
    (``krea_ops.sim.machines.nodes.make_node``: the hostname and ``krea.ai/pool=h200`` labels,
    capacity with ``pods``, Ready), each once it is schedulable: on the upstream control
    plane, once the node lifecycle controller has lifted the ``not-ready`` taint that
    admission puts on every new node (``tests.kube.conftest.registered``)."""
    from krea_ops.sim.machines.nodes import make_node
    from tests.kube.conftest import create, registered

    names = []
    for i in range(count):
        node = create(cluster, "/api/v1/nodes", make_node(i, gpus, time.time()))
        names.append(str(node["metadata"]["name"]))
    for name in names:
        registered(cluster, name)
    return names


@contextlib.contextmanager
def cluster_actors(server: Any, control_plane: str, speed: float = 60.0) -> Iterator[None]:
    """The simulated world's cluster actors on a bare API server, on the nodes the test
    makes (none of the world's own): every node's kubelet (``krea_ops.sim.machines.kubelet``:
    it renews the node's Lease, keeps it Ready, runs the pods bound there and finishes
    their graceful deletion, as a real kubelet does; without one, a pod evicted upstream
    stays Terminating), and on the embedded control plane the scheduler and the
    DaemonSet/Deployment/ReplicaSet controllers the upstream one runs for real
    (``krea_ops.sim.world.cluster_actors``, less its nodes and DaemonSets)."""
    from kubernetes.client.exceptions import ApiException

    from krea_ops.sim.common.actor import Actor, World, WorldConfig
    from krea_ops.sim.common.api import Api, ClusterView
    from krea_ops.sim.common.clock import SimClock
    from krea_ops.sim.machines.kubelet import Kubelet
    from krea_ops.sim.standins.scheduler import Scheduler
    from krea_ops.sim.standins.workloads import Controllers

    client = server.api_client()
    api = Api(client)
    try:  # the Leases' namespace (kube-apiserver makes it; the embedded server does not)
        api.call(api.core.create_namespace, {"metadata": {"name": "kube-node-lease"}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    config = WorldConfig(
        nodes=1, speed=speed, control_plane=control_plane, exporters=False, prometheus=False
    )
    clock = SimClock(speed)
    world = World(config, clock, client, server.state_dir)
    view = ClusterView(api)
    actors: list[Actor] = [Kubelet(world, view, api)]
    if control_plane != "upstream":
        actors += [Scheduler(world, view, api), Controllers(world, view, api)]
    for actor in actors:
        actor.start()
    try:
        yield
    finally:
        clock.stop.set()
        for actor in actors:
            actor.join()
        client.close()
