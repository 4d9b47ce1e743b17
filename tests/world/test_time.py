"""The API's clock is the wall clock, however fast the simulated world runs.

Issue 14: objects used to be stamped hours ahead after minutes at ``--speed 60``, so
``kubectl`` printed ``<invalid>`` ages and anything comparing a Lease's ``renewTime +
leaseDurationSeconds`` with now was misled. Here a world runs minutes of simulated time
ahead of the wall clock while every stamp it and its API server write stays within
seconds of ``time.time()``, real kubectl prints believable ages, the HTTP ``Date`` header
is now, and a restart on the same state keeps ages right.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.kube.times import parse_time
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.world import SimWorld
from tests.conftest import wait_for

SPEED = 60.0
# Long enough for the simulated clock to run minutes ahead of the wall clock.
RUN_WALL_S = 6.0
SLACK_S = 3.0  # whole-second stamps, a loaded machine
KUBECTL = shutil.which("kubectl")


def raw(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return json.loads(fn(*args, _preload_content=False, **kwargs).data)


def stamp(text: str | None) -> float:
    t = parse_time(text)
    assert t is not None, f"not an RFC 3339 timestamp: {text!r}"
    return t


def start_world(state: Path) -> SimWorld:
    return SimWorld(WorldConfig(nodes=3, speed=SPEED), state, parts=("cluster",))


def create_pod(world: SimWorld, name: str) -> None:
    body = {
        "metadata": {"name": name, "labels": {"krea.ai/workload": "training"}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }
    raw(client.CoreV1Api(world.client).create_namespaced_pod, "training", body)


def running(world: SimWorld, name: str) -> dict[str, Any] | None:
    pod = raw(client.CoreV1Api(world.client).read_namespaced_pod, name, "training")
    return pod if pod["status"].get("phase") == "Running" else None


def kubectl(world: SimWorld, home: Path, *args: str) -> str:
    assert KUBECTL is not None
    env = {"KUBECONFIG": str(world.kubeconfig), "HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [KUBECTL, *args], capture_output=True, text=True, env=env, timeout=30, check=True
    ).stdout


_DURATION = re.compile(r"(\d+)([smhdy])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}


def kubectl_age_s(text: str) -> float:
    """An AGE cell as kubectl prints it (``45s``, ``2m5s``, ``3h``) in seconds."""
    assert re.fullmatch(r"(\d+[smhdy])+", text), f"not an age: {text!r}"
    return float(sum(int(n) * _UNIT_S[u] for n, u in _DURATION.findall(text)))


def ages(table: str) -> dict[str, str]:
    """NAME -> AGE of a ``kubectl get`` table (one word a cell in the tables read here)."""
    lines = [line.split() for line in table.splitlines() if line.strip()]
    header, rows = lines[0], lines[1:]
    assert all(len(row) == len(header) for row in rows), table
    return {row[header.index("NAME")]: row[header.index("AGE")] for row in rows}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWorld]:
    with start_world(tmp_path_factory.mktemp("time")) as w:
        yield w


@pytest.fixture(scope="module")
def ran(world: SimWorld) -> dict[str, float]:
    """The world with a running pod, after it has run minutes of simulated time."""
    started = time.time()
    create_pod(world, "sleeper")
    wait_for(lambda: running(world, "sleeper"), timeout=30)
    time.sleep(max(0.0, RUN_WALL_S - (time.time() - started)))
    ahead = world.clock.time() - time.time()
    # the world's own clock did run minutes ahead: what used to leak into the stamps
    assert ahead >= (SPEED - 1) * RUN_WALL_S * 0.9, ahead
    return {"started": started}


def test_every_stamp_is_wall_time_after_minutes_at_speed_60(
    world: SimWorld, ran: dict[str, float]
) -> None:
    core = client.CoreV1Api(world.client)
    low, high = ran["started"] - SLACK_S - 60, time.time() + SLACK_S
    stamps: list[tuple[str, str]] = []
    for node in raw(core.list_node)["items"]:
        name = node["metadata"]["name"]
        stamps.append((f"node {name} created", node["metadata"]["creationTimestamp"]))
        for c in node["status"]["conditions"]:
            stamps.append((f"node {name} {c['type']} heartbeat", c["lastHeartbeatTime"]))
            stamps.append((f"node {name} {c['type']} transition", c["lastTransitionTime"]))
    pods = raw(core.list_pod_for_all_namespaces)["items"]
    assert {p["metadata"]["name"] for p in pods} >= {"sleeper"}
    for pod in pods:
        name = pod["metadata"]["name"]
        stamps.append((f"pod {name} created", pod["metadata"]["creationTimestamp"]))
        if "startTime" in pod["status"]:
            stamps.append((f"pod {name} started", pod["status"]["startTime"]))
        for c in pod["status"].get("conditions") or []:
            stamps.append((f"pod {name} {c['type']}", c["lastTransitionTime"]))
        for cs in pod["status"].get("containerStatuses") or []:
            if "running" in cs["state"]:
                stamps.append((f"pod {name} running", cs["state"]["running"]["startedAt"]))
    for event in raw(core.list_event_for_all_namespaces)["items"]:
        # a legacy Event has lastTimestamp, an events-API one (the scheduler's) eventTime
        when = event.get("lastTimestamp") or event.get("eventTime")
        stamps.append((f"event {event['reason']}", when))
    leases = raw(client.CoordinationV1Api(world.client).list_namespaced_lease, "kube-node-lease")
    for lease in leases["items"]:
        stamps.append((f"lease {lease['metadata']['name']}", lease["spec"]["renewTime"]))
    assert len(stamps) > 50
    wrong = [(what, text) for what, text in stamps if not low <= stamp(text) <= high]
    assert wrong == []


def test_node_leases_say_the_kubelets_are_alive(world: SimWorld, ran: dict[str, float]) -> None:
    leases = raw(client.CoordinationV1Api(world.client).list_namespaced_lease, "kube-node-lease")
    assert len(leases["items"]) == 3
    now = time.time()
    for lease in leases["items"]:
        spec = lease["spec"]
        # what a leader-election client or the node lifecycle controller computes
        assert stamp(spec["renewTime"]) + spec["leaseDurationSeconds"] > now
        assert spec["leaseDurationSeconds"] == 40


def test_http_date_header_is_now(world: SimWorld, ran: dict[str, float]) -> None:
    # bracketed by the local clock around the request (the header has whole seconds):
    # tighter than the "within 2 s", and no slack a loaded machine could outrun
    before = time.time()
    response = client.CoreV1Api(world.client).list_namespace(_preload_content=False)
    after = time.time()
    date = parsedate_to_datetime(response.headers["Date"]).timestamp()
    assert int(before) <= date <= after


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_prints_sane_ages(world: SimWorld, ran: dict[str, float], tmp_path: Path) -> None:
    up_s = time.time() - ran["started"]
    tables = {
        "pods": kubectl(world, tmp_path, "get", "pods", "-n", "training"),
        "nodes": kubectl(world, tmp_path, "get", "nodes"),
        "leases": kubectl(world, tmp_path, "get", "leases", "-n", "kube-node-lease"),
    }
    for kind, table in tables.items():
        assert "<invalid>" not in table, table
        shown = ages(table)
        assert shown, table
        for name, age in shown.items():
            # created after the world started (up to a minute of set-up before it)
            assert kubectl_age_s(age) <= up_s + 60 + SLACK_S, (kind, name, age)
    pods = ages(tables["pods"])
    # the pod has been there for RUN_WALL_S wall seconds: neither 0 nor hours
    assert RUN_WALL_S - SLACK_S <= kubectl_age_s(pods["sleeper"]) <= up_s + SLACK_S


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_a_restart_on_the_same_state_keeps_ages(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with start_world(state) as first:
        time.sleep(1.0)  # the world's clock a minute ahead already
        created_at = time.time()
        create_pod(first, "survivor")
        pod = wait_for(lambda: running(first, "survivor"), timeout=30)
        time.sleep(2.0)  # two simulated minutes more
    created = stamp(pod["metadata"]["creationTimestamp"])
    assert created_at - 1.0 <= created <= created_at + SLACK_S
    time.sleep(2.0)  # the world is down
    restarted_at = time.time()
    with start_world(state) as second:
        core = client.CoreV1Api(second.client)
        again = raw(core.read_namespaced_pod, "survivor", "training")
        assert again["metadata"]["creationTimestamp"] == pod["metadata"]["creationTimestamp"]
        assert again["status"]["startTime"] == pod["status"]["startTime"]
        table = kubectl(second, tmp_path, "get", "pods", "-n", "training")
        assert "<invalid>" not in table, table
        # its age is the wall time since it was created, across the restart
        shown = kubectl_age_s(ages(table)["survivor"])
        assert abs(shown - (time.time() - created_at)) <= SLACK_S, (shown, table)
        # the kubelets renew their Leases again, stamped now
        lease_api = client.CoordinationV1Api(second.client)

        def renewed() -> bool:
            leases = raw(lease_api.list_namespaced_lease, "kube-node-lease")["items"]
            return all(stamp(x["spec"]["renewTime"]) >= restarted_at for x in leases)

        wait_for(renewed, timeout=30)
        # and what is created now is newer than what was created before
        create_pod(second, "newcomer")
        newcomer = raw(core.read_namespaced_pod, "newcomer", "training")
        assert stamp(newcomer["metadata"]["creationTimestamp"]) >= created + 4.0 - 1.0
