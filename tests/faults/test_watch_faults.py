"""A watch the API server ends mid-stream (as it ends every watch when it restarts).

No krea-ops code watches today (the controllers re-list each pass, the leader polls its
Lease, the dashboard polls), so what is tested is the simulator's watch semantics the
clients rely on: the official Python client's ``Watch`` resumes from the last
resourceVersion it saw, and gets every change once, none lost and none twice; ``kubectl
get -w`` prints each change once and ends cleanly with the stream."""

from __future__ import annotations

from kubernetes import client, watch

from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import Kubectl

NODES = [f"gpu-node-{i:03d}" for i in range(7)]


def new_node(core: client.CoreV1Api, name: str) -> None:
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name)))


def test_the_official_clients_watch_resumes_with_no_event_lost_or_applied_twice(
    sim: LocalApiServer, core: client.CoreV1Api
) -> None:
    start = core.list_node().metadata.resource_version
    for name in NODES[:5]:
        new_node(core, name)
    core.patch_node(NODES[0], {"metadata": {"labels": {"krea.ai/pool": "h200"}}})
    # the server ends the stream after 2 events, twice
    sim.api.faults.set(
        [{"verbs": ["watch"], "resources": ["nodes"], "closeWatchAfter": 2, "times": 2}]
    )
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    for event in w.stream(core.list_node, resource_version=start, _request_timeout=(5, 30)):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 6:  # every change made before the watch, and then some after it
            new_node(core, NODES[5])
        if len(seen) == 7:
            w.stop()
    assert seen == [("ADDED", n) for n in NODES[:5]] + [
        ("MODIFIED", NODES[0]),
        ("ADDED", NODES[5]),
    ]
    assert len(sim.api.faults.injected("watch", "nodes")) == 2
    assert sim.api.faults.seen("watch", "nodes") == 3  # two ends, two resumes


def test_kubectl_get_watch_prints_each_change_once_and_ends_with_the_stream(
    sim: LocalApiServer, kubectl: Kubectl, core: client.CoreV1Api
) -> None:
    new_node(core, NODES[0])
    sim.api.faults.set(
        [{"verbs": ["watch"], "resources": ["nodes"], "closeWatchAfter": 2, "times": 1}]
    )
    proc = kubectl.popen("get", "nodes", "--watch", "-o", "name")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == f"node/{NODES[0]}\n"  # the list, then the watch
        new_node(core, NODES[1])
        core.patch_node(NODES[1], {"metadata": {"labels": {"krea.ai/pool": "h200"}}})
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and err == ""
    assert out.splitlines() == [f"node/{NODES[1]}", f"node/{NODES[1]}"]  # added, modified
    assert len(sim.api.faults.injected("watch", "nodes")) == 1
