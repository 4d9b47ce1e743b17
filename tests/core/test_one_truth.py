"""One truth: at every sampled moment, every surface gives every node the same verdict.

A simulated world (six GPU nodes, a real Prometheus scraping their exporters every
two seconds) has faults injected one after another: a hot GPU, an HBM failure (uncorrectable
ECC, XID 48, a pending row remap), NVLink errors, an InfiniBand flap, a GPU lost, a host
down (its exporter silent, its node NotReady). Right after each fault, while it is still
arriving (and, in a long run, again a few seconds later), every surface is read at one
instant: the
telemetry instant is pinned (every query of every read is evaluated there, as a test's
``clock`` does), and the nodes' Ready, cordon and taints are read before and after (a
sample whose nodes changed in between is taken again: that is not one moment).

Surfaces: ``nodes list`` (which reads the exporters' node summaries), ``nodes show`` of
every node, ``gpus``, ``fabric``, ``queue list``'s healthy nodes, the node health that
``burst migrate`` and ``train launch`` judge by (``Console.node_health``), what the
node-health controller reads (``NodeHealth.read``), and the dashboard's fleet screen.
Any disagreement fails the test with every reading of it.

``KREA_OPS_ONE_TRUTH_ROUNDS`` (default 1) repeats the fault schedule for a longer run.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from textual.widgets import Static

from commands.main import invoke
from krea_ops.console import Console
from krea_ops.controllers.base import Inputs
from krea_ops.controllers.node_health import NodeHealth
from krea_ops.health import HealthPolicy
from krea_ops.settings import load_settings
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.faults import inject_fault
from krea_ops.sim.world import SimWorld
from krea_ops.telemetry.prometheus import PrometheusSource
from screens.app import KreaOpsApp
from screens.fleet import FleetScreen
from screens.node import NodeScreen
from screens.queue import QueueScreen
from screens.widgets.heatmap import GpuHeatmap
from tests.conftest import require_binary
from tests.screens.conftest import wait_until

NODES = [f"gpu-node-{i:03d}" for i in range(6)]
WINDOW_S = 20.0
SETTINGS = {"telemetry_window_s": WINDOW_S, "telemetry_stale_s": 15.0}
# (kind, node, fault options): one after another, each left in place
FAULTS: list[tuple[str, str, dict[str, Any]]] = [
    ("hot-gpu", "gpu-node-001", {"gpu": 3, "value": 88.0}),
    ("crash", "gpu-node-002", {"value": "gpu-hbm"}),
    ("nvlink-errors", "gpu-node-003", {"gpu": 2}),
    ("ib-flap", "gpu-node-000", {"value": 1}),
    ("gpu-lost", "gpu-node-004", {"gpu": 5}),
    ("crash", "gpu-node-005", {"value": "host"}),
]


class Instant:
    """The one instant every telemetry read of a sample is evaluated at."""

    at = 0.0

    def __call__(self) -> float:
        return self.at or time.time()


INSTANT = Instant()


@pytest.fixture(autouse=True)
def pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    monkeypatch.setenv("KREA_OPS_TELEMETRY_WINDOW_S", f"{WINDOW_S:g}")
    monkeypatch.setenv("KREA_OPS_TELEMETRY_STALE_S", f"{SETTINGS['telemetry_stale_s']:g}")
    monkeypatch.delenv("KREA_OPS_PROMETHEUS_URL", raising=False)
    init = PrometheusSource.__init__

    def at_the_instant(self: PrometheusSource, *args: Any, **kwargs: Any) -> None:
        kwargs["clock"] = INSTANT
        init(self, *args, **kwargs)

    monkeypatch.setattr(PrometheusSource, "__init__", at_the_instant)


@pytest.fixture
def world(tmp_path: Path, control_plane: str) -> Iterator[SimWorld]:
    require_binary("prometheus")
    config = WorldConfig(
        control_plane=control_plane,
        nodes=len(NODES),
        speed=60,
        seed=11,
        failure_multiplier=0.0,
        prometheus=shutil.which("prometheus") is not None,
        # (every 2 s, a 1.6 s timeout: a loaded machine's scrapes must not time out, or
        # every sample sees an exporter come and go)
        extra={"slow_burners": False, "scrape_interval_s": 2, "gpm_interval_s": 1},
    )
    with SimWorld(config, tmp_path / "world") as w:
        assert w.wait_for_readings(90), "no readings from the simulated exporters"
        yield w


def cli(w: SimWorld, *args: str) -> Any:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = invoke(["--kubeconfig", str(w.kubeconfig), *args])
    assert code in (0, 1), (args, code)  # 1: a part missing (a host down), still printed
    return json.loads(out.getvalue())


def node_state(w: SimWorld) -> dict[str, Any]:
    """What a sample's instant does not pin: the nodes in the API, and whether Prometheus
    scrapes each exporter now (its targets API has no past)."""
    nodes = cli(w, "nodes", "list", "-o", "json")
    state: dict[str, Any] = {
        n["name"]: (n["ready"], n["cordoned"], tuple(n["taints"])) for n in nodes
    }
    url = w.world.services["devices"].prometheus_url
    with urllib.request.urlopen(f"{url}/api/v1/targets?state=active", timeout=10) as answer:
        targets = json.load(answer)["data"]["activeTargets"]
    state["targets"] = sorted((t["labels"].get("node"), t["health"]) for t in targets)
    return state


def flapped(w: SimWorld, since: float) -> list[str]:
    """The exporters whose scrapes came and went since ``since`` (a scrape timing out on
    a loaded machine): Prometheus' targets API has no past, so a read during the flap saw
    "exporter down" where one before or after did not. Such a sample is not one moment."""
    url = w.world.services["devices"].prometheus_url
    span = max(1, round(time.time() - since + 3))
    query = urllib.parse.urlencode(
        {"query": f"max_over_time(up[{span}s]) - min_over_time(up[{span}s]) > 0"}
    )
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as answer:
        rows = json.load(answer)["data"]["result"]
    return sorted(str(r["metric"].get("node")) for r in rows)


def take(w: SimWorld, app: KreaOpsApp | None = None) -> dict[str, dict[Any, Any]]:
    """Every surface's verdicts at ``INSTANT.at``: surface -> key -> (verdict, reasons)."""
    seen: dict[str, dict[Any, Any]] = {}
    listed = cli(w, "nodes", "list", "-o", "json")
    seen["nodes list"] = {
        n["name"]: (n["verdict"], n["reasons"]) for n in listed if not n["virtual"]
    }
    seen["nodes show"], seen["nodes show: gpus"], seen["nodes show: ib"] = {}, {}, {}
    for name in NODES:
        shown = cli(w, "nodes", "show", name, "-o", "json")[0]
        seen["nodes show"][name] = (shown["verdict"], shown["reasons"])
        for g in shown["gpus"]:
            seen["nodes show: gpus"][(name, g["index"])] = (g["verdict"], g["reasons"])
        for p in shown["ib_ports"]:
            seen["nodes show: ib"][(name, p["port"])] = (p["verdict"], p["reasons"])
    seen["gpus"] = {
        (g["node"], g["index"]): (g["verdict"], g["reasons"]) for g in cli(w, "gpus", "-o", "json")
    }
    seen["fabric"] = {
        (p["node"], p["port"]): (p["verdict"], p["reasons"])
        for p in cli(w, "fabric", "--kind", "ib", "-o", "json")
    }
    # queue list: a Ready, schedulable GPU node is healthy, bad or of unknown health
    queues = cli(w, "queue", "list", "-o", "json")
    states: dict[str, str] = {}
    for cq in queues:
        for f in cq["flavors"]:
            cap = f["capacity"]
            if cap is None or f["flavor"] != "h200":
                continue
            states = {n: "healthy" for n in NODES}
            states.update({n["node"]: n["state"] for n in cap["not_healthy"]})
    seen["queue list"] = {n: (states[n], None) for n in states}
    settings = load_settings({"kubeconfig": str(w.kubeconfig), **SETTINGS}, env={})
    with Console(settings) as console:
        health = console.node_health()
        assert health.severity is not None, health.error
        seen["node health (burst migrate, train launch)"] = {
            n: (s.name, None) for n, s in health.severity.items() if n in NODES
        }
        source, error = console._telemetry()
        policy = HealthPolicy.from_settings(settings)
        read = NodeHealth().read(
            Inputs(console.cluster, source, policy, "one-truth", source_error=error), time.time()
        )
    seen["node-health controller"] = {
        n: (v.severity.name, [r.message for r in v.reasons])
        for n, v in read.verdicts.items()
        if n in NODES
    }
    if app is not None:
        heat = app.screen.query_one(GpuHeatmap)
        rows = {n: heat.get_row(n) for n in NODES}
        seen["dashboard fleet"] = {
            n: (r.severity.name, r.note) for n, r in rows.items() if r is not None
        }
    return seen


# How long something has been so, said against each surface's own clock: "NotReady for
# 3 s" read a second after "NotReady for 2 s" is the same reason, a second older.
SINCE = re.compile(
    r"\b(for|ago|in) \d+(?:\.\d+)? ?(?:s|min|h|d)\b|\b\d+(?:\.\d+)? ?(?:s|min|h) ago\b"
)


def _since(text: Any) -> Any:
    if isinstance(text, str):
        return SINCE.sub("<duration>", text)
    if isinstance(text, list):
        return [_since(t) for t in text]
    return text


def disagreements(seen: dict[str, dict[Any, Any]]) -> list[str]:
    """Each way two surfaces differ on one node, GPU or port, with both readings."""
    out: list[str] = []

    def same(a: str, b: str) -> None:
        for key in sorted(set(seen[a]) | set(seen[b]), key=str):
            x, y = seen[a].get(key), seen[b].get(key)
            if x is None or y is None or x[0] != y[0] or _since(x[1]) != _since(y[1]):
                out.append(f"{key}: {a} {x!r}, {b} {y!r}")

    same("nodes list", "nodes show")
    same("nodes list", "node-health controller")
    same("gpus", "nodes show: gpus")
    same("fabric", "nodes show: ib")
    if "dashboard node" in seen:
        for name, (verdict, reasons) in seen["dashboard node"].items():
            shown = seen["nodes show"][name]
            if verdict != shown[0] or _since(reasons) != _since(shown[1]):
                out.append(f"{name}: dashboard node {(verdict, reasons)!r}, nodes show {shown!r}")
        for name, state in seen["dashboard queue"].items():
            if state != seen["queue list"].get(name):
                queued = seen["queue list"].get(name)
                out.append(f"{name}: dashboard queue {state!r}, queue list {queued!r}")
    listed = seen["nodes list"]
    for name, (verdict, _) in seen["node health (burst migrate, train launch)"].items():
        if verdict != listed[name][0]:
            out.append(f"{name}: node health {verdict}, nodes list {listed[name]!r}")
    for name, (state, _) in seen["queue list"].items():
        expected = {"BAD": "bad", "UNKNOWN": "unknown"}.get(listed[name][0], "healthy")
        if state in ("healthy", "bad", "unknown") and state != expected:
            out.append(f"{name}: queue list {state}, nodes list {listed[name]!r}")
    # every GPU's node: its worst GPU is at most as bad as the node (a GPU of unknown
    # health, silent in the newest scrape, leaves its node UNKNOWN or worse: BAD)
    order = ["OK", "SUSPECT", "UNKNOWN", "BAD"]
    for (name, index), (verdict, reasons) in seen["gpus"].items():
        node = listed[name][0]
        if node != "UNKNOWN" and order.index(verdict) > order.index(node):
            out.append(f"{name} GPU {index}: gpus {verdict} {reasons}, nodes list {node}")
    if "dashboard fleet" in seen:
        for name, (verdict, note) in seen["dashboard fleet"].items():
            first = (listed[name][1] or [""])[0]
            if verdict != listed[name][0] or _since(note) != _since(first):
                out.append(
                    f"{name}: dashboard fleet {(verdict, note)!r}, nodes list {listed[name]!r}"
                )
    return out


async def dashboard_screens(
    app: KreaOpsApp, pilot: Any, nodes: list[str], since: float
) -> dict[str, dict[Any, Any]]:
    """The node screen of each of ``nodes`` (its header, as drawn: the verdict and every
    reason) and the queue screen's healthy nodes, each from a read at the pinned instant
    (the node's) or after ``since`` (the queue's, which judges by the fleet read at it)."""
    seen: dict[str, dict[Any, Any]] = {"dashboard node": {}, "dashboard queue": {}}
    for name in nodes:
        app.open_node(name)

        def drawn(name: str = name) -> Any:
            screen = app.screen
            if not isinstance(screen, NodeScreen) or screen.node != name:
                return None
            snap = screen.snapshot
            if snap is None or abs(snap.collected_at - INSTANT.at) > 1e-6:
                return None
            return str(screen.query_one("#node-header", Static).render())

        header = (await wait_until(pilot, drawn, timeout=30.0)).splitlines()
        verdict = header[0].split()[1]
        reasons = [line.removeprefix("  • ") for line in header if line.startswith("  • ")]
        seen["dashboard node"][name] = (verdict, reasons)
        app.go("fleet")
    app.go("queue")

    def queued() -> Any:
        screen = app.screen
        snap = getattr(screen, "snapshot", None)
        if not isinstance(screen, QueueScreen) or snap is None or snap.collected_at < since:
            return None
        return snap

    snap = await wait_until(pilot, queued, timeout=30.0)
    cap = snap.flavors["h200"]
    states = {n: "healthy" for n in NODES}
    states.update({c.node: c.state for c in cap.not_healthy})
    seen["dashboard queue"] = {n: (state, None) for n, state in states.items()}
    app.go("fleet")
    await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen), timeout=30.0)
    return seen


async def _wait_for_instant(console: Console, pilot: Any, timeout: float = 30.0) -> None:
    """Until the dashboard has drawn a fleet read made at the pinned instant."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = console.last_fleet
        if last is not None and abs(last.collected_at - INSTANT.at) < 1e-6:
            await pilot.pause(0.3)  # the read lands, then the screen draws it
            return
        await pilot.pause(0.2)
    raise AssertionError("the dashboard did not read the fleet at the pinned instant")


@pytest.mark.timeout(480)
def test_every_surface_gives_every_node_the_same_verdict_at_each_moment(world: SimWorld) -> None:
    rounds = int(os.environ.get("KREA_OPS_ONE_TRUTH_ROUNDS", "1"))
    settings = load_settings({"kubeconfig": str(world.kubeconfig), **SETTINGS}, env={})
    console = Console(settings)
    app = KreaOpsApp(console, refresh_s=0.5)
    samples: list[tuple[str, dict[str, dict[Any, Any]]]] = []

    async def sample(label: str, pilot: Any) -> None:
        for _ in range(8):
            INSTANT.at = time.time() - 3.0  # every scrape before it is in
            # (before the dashboard reads: its read is part of the moment too)
            started = time.time()
            before = await asyncio.to_thread(node_state, world)
            await _wait_for_instant(console, pilot)
            since = time.time()
            seen = await asyncio.to_thread(take, world, app)
            # the node screens of (up to two of) the nodes not OK, in turn over the run
            listed = seen["nodes list"]
            worse = sorted(n for n, (v, _) in listed.items() if v != "OK") or NODES[:1]
            turn = len(samples) % len(worse)
            shown = (worse[turn:] + worse[:turn])[:2]
            seen.update(await dashboard_screens(app, pilot, shown, since))
            steady = not await asyncio.to_thread(flapped, world, started)
            if steady and await asyncio.to_thread(node_state, world) == before:
                samples.append((label, seen))
                problems = disagreements(seen)
                assert not problems, f"at {label}:\n" + "\n".join(problems)
                return
        raise AssertionError(f"at {label}: the nodes kept changing under every sample")

    async def run() -> None:
        async with app.run_test(size=(140, 50)) as pilot:
            assert isinstance(app.screen, FleetScreen)
            await sample("start", pilot)
            client = world.client
            for r in range(rounds):
                for i, (kind, node, options) in enumerate(FAULTS):
                    name = inject_fault(client, kind, node, **options)
                    await pilot.pause(1.5)
                    await sample(f"round {r + 1}: {kind} on {node}, arriving", pilot)
                    # (settled too, in a long run and after the last fault: each sample
                    # costs the suite ~10 s)
                    if rounds > 1 or i == len(FAULTS) - 1:
                        await pilot.pause(4.0)
                        await sample(f"round {r + 1}: {kind} on {node}, settled", pilot)
                    if r + 1 < rounds:
                        k8s.CoreV1Api(client).delete_namespaced_config_map(name, "krea-sim")

    asyncio.run(run())
    # the faults showed: each faulted node was seen not OK (some come back: a window passes)
    for kind, node, _ in FAULTS:
        seen_bad = [label for label, seen in samples if seen["nodes list"][node][0] != "OK"]
        assert seen_bad, f"{kind} on {node} never showed"
    assert len(samples) == (2 + len(FAULTS) if rounds == 1 else 1 + 2 * len(FAULTS) * rounds)
