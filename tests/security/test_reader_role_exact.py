"""deploy/rbac/reader.yaml against the calls krea-ops' reads make: every read the
dashboard and the read commands do (all through ``Console``) runs as a user holding only
that role, on a simulated world (Kueue queues with admitted and pending workloads, JobSets,
a virtual node), while the API server notes each request. Every call is granted, and
no grant is left that no read uses (none is named below as kept for a reason), so a grant
added or a call dropped fails here, both ways (as tests/test_deploy_controllers.py does
for the controllers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, utils

from krea_ops.console import Console
from krea_ops.settings import Settings
from krea_ops.sim.apiserver.authz import Attributes, attributes
from krea_ops.sim.common.kubeconfig import write_kubeconfig
from krea_ops.sim.machines.story import Story, story_config
from krea_ops.sim.world import SimWorld
from tests.conftest import ROOT, wait_for

READER_TOKEN = "reader-token-0123456789"
Atom = tuple[str, str, str, str | None]  # group, resource(/subresource), verb, name

# Granted though no read calls it, each with why (the same reason is a comment in the
# YAML): none. The role is exactly what the reads call; a grant added without a read that
# needs it, or a read that stops calling one, fails here.
NOT_CALLED_BY_THE_READS: dict[Atom, str] = {}


def grants() -> set[Atom]:
    found: set[Atom] = set()
    for doc in yaml.safe_load_all((ROOT / "deploy/rbac/reader.yaml").read_text()):
        for rule in doc.get("rules") or ():
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        for name in rule.get("resourceNames") or [None]:
                            found.add((g, r, v, name))
    return found


def covers(atom: Atom, call: Attributes) -> bool:
    group, resource, verb, name = atom
    return (group, resource, verb) == (call.group, call.combined_resource, call.verb) and name in (
        None,
        call.name,
    )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[SimWorld, Path, list[tuple[Attributes, int]]]]:
    state = tmp_path / "state"
    state.mkdir()
    (state / "tokens.csv").write_text(f'{READER_TOKEN},rita,rita-uid,"krea-ops:readers"\n')
    # The small training outlasts the test: the sweep stays pending behind it, so queue
    # why and the queue screen meet a waiting workload (and ask the visibility API for its
    # position) however slowly a loaded machine gets there.
    w = SimWorld(story_config(nodes=2, seed=0, speed=60, story=Story(small_runs_s=3600)), state)
    calls: list[tuple[Attributes, int]] = []
    try:
        with w.sim.api_client() as admin:
            for doc in yaml.safe_load_all((ROOT / "deploy/rbac/reader.yaml").read_text()):
                utils.create_from_dict(admin, doc)
        handle = w.sim.api.handle

        def noting(req: Any) -> Any:
            answer = handle(req)
            if getattr(req, "user", None) == "rita":
                status = getattr(answer, "status", 200)  # a watch stream: 200
                calls.append((attributes(req.method, req.path, req.query), status))
            return answer

        w.sim.api.handle = noting  # type: ignore[method-assign]
        kubeconfig = write_kubeconfig(
            tmp_path / "reader", w.sim.url, READER_TOKEN, w.sim.ca_cert.read_bytes()
        )
        yield w, kubeconfig, calls
    finally:
        w.close()


def test_the_reader_role_grants_what_the_reads_call(
    world: tuple[SimWorld, Path, list[tuple[Attributes, int]]],
) -> None:
    w, kubeconfig, calls = world
    with w.sim.api_client() as admin:
        custom = client.CustomObjectsApi(admin)

        def both_kinds() -> list[dict[str, Any]] | None:
            items = custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "workloads")
            admitted = {bool((x.get("status") or {}).get("admission")) for x in items["items"]}
            return items["items"] if admitted == {True, False} else None

        # A pending workload and an admitted one, so queue why meets both (asked about
        # the pending ones first, before Kueue admits them).
        workloads = sorted(
            wait_for(both_kinds, timeout=60),
            key=lambda x: bool((x.get("status") or {}).get("admission")),
        )
    print(
        [(x["metadata"]["name"], bool((x.get("status") or {}).get("admission"))) for x in workloads]
    )

    console = Console(Settings(kubeconfig=str(kubeconfig)))
    try:
        console.info()
        # the dashboard's start: one line when the cluster cannot be reached
        console.cluster.nodes("kubernetes.io/hostname=krea-ops-reachability-probe")
        fleet = console.fleet()
        console.node("gpu-node-000")
        console.node_health()
        console.history("gpu-node-000")
        console.queues()
        console.workloads()
        console.queue()
        for x in workloads:
            console.why(x["metadata"]["name"], x["metadata"]["namespace"])
        console.burst()
        runs = console.training()
        rows = console.controllers()
        history = console.restart_history(runs)  # the training screen's restarts
        restarts = console.restarts(runs[0].name, namespace=runs[0].namespace)
        lemons = console.lemons()
    finally:
        console.close()
    assert {v.info.name for v in fleet.views} >= {"gpu-node-000", "gpu-node-001"}
    assert runs and len(rows) == 4  # the reads read something: not refused, not empty
    assert set(history) == {f"{r.namespace}/{r.name}" for r in runs}
    assert restarts.name == runs[0].name and lemons == []

    granted = grants()
    used: set[Atom] = set()
    for call, status in calls:
        assert status != 403, call
        if not call.resource_request:  # discovery, /version: every authenticated user
            continue
        hits = {a for a in granted if covers(a, call)}
        assert hits, f"a read the role does not grant: {call}"
        used |= hits
    unused = granted - used
    assert unused == set(NOT_CALLED_BY_THE_READS), sorted(unused ^ set(NOT_CALLED_BY_THE_READS))
    assert not any(verb == "watch" for _, _, verb, _ in granted)  # nothing of ours watches
