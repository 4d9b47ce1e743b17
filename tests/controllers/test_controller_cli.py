"""``krea-ops controller run|status|ack`` through the real CLI against the simulated API
server, with our exporter (simulated H200s) as the telemetry the ConfigMap names."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from commands.main import invoke
from krea_ops.controllers.base import ACK_AT, ACK_BY, ACK_REASON, NAMESPACE, STATE_CONFIGMAP
from krea_ops.controllers.loop import read_state, write_state
from krea_ops.kube.cluster import Cluster
from tests.controllers.conftest import PROVIDER_TAINT, gpu_node, gpu_pod, taints_of, virtual_node
from tests.kube.conftest import create
from tests.telemetry.conftest import start_krea_node

PAUSE_TAINT = {"key": "krea.ai/burst-paused", "value": "true", "effect": "NoSchedule"}
OURS = ("krea.ai/burst-disabled", "true", "NoSchedule")


@pytest.fixture
def kc(
    ops: Cluster, sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[str]]:
    """One GPU node whose exporter answers, one virtual node (paused by an operator), the
    ConfigMap naming the exporter; settings: hold 0, taint above 4 free GPUs."""
    (tmp_path / "sys").mkdir()
    exporter = start_krea_node("gpu-node-000", tmp_path / "sys")
    gpu_node(ops, "gpu-node-000")
    virtual_node(ops, "vk-0", [PROVIDER_TAINT, PAUSE_TAINT])
    create(
        ops,
        f"/api/v1/namespaces/{NAMESPACE}/configmaps",
        {
            "metadata": {"name": "krea-ops-config"},
            "data": {"exporters": json.dumps({"gpu-node-000": exporter.url})},
        },
    )
    monkeypatch.setenv("KREA_OPS_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("KREA_OPS_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    monkeypatch.delenv("KREA_OPS_PROMETHEUS_URL", raising=False)
    monkeypatch.setenv("KREA_OPS_TELEMETRY_WINDOW_S", "10")
    monkeypatch.setenv("KREA_OPS_TELEMETRY_STALE_S", "30")
    monkeypatch.setenv("KREA_OPS_BURST_TAINT_HOLD_S", "0")
    monkeypatch.setenv("KREA_OPS_BURST_TAINT_FREE_GPUS_HIGH", "4")
    monkeypatch.setenv("KREA_OPS_BURST_TAINT_FREE_GPUS_LOW", "2")
    try:
        yield ["--kubeconfig", str(sim.kubeconfig)]
    finally:
        exporter.stop()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = invoke(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def log_lines(err: str, event: str) -> list[dict[str, Any]]:
    records = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
    return [r for r in records if r.get("event") == event]


def audit(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_run_once_taints_then_dry_run_plans_the_removal_and_status_shows_it(
    kc: list[str], ops: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, *kc, "controller", "run", "burst-taint", "--once")
    assert code == 0, err
    (action,) = log_lines(err, "action")
    assert action["action"] == "burst-taint add" and action["status"] == "done"
    assert "8 of 8 healthy in-cluster GPUs free" in action["reason"]
    assert OURS in taints_of(ops, "vk-0")
    assert ("krea.ai/burst-paused", "true", "NoSchedule") in taints_of(ops, "vk-0")
    assert [r["record"] for r in audit(tmp_path)] == ["start", "step", "step", "end"]

    code, out, _ = run(capsys, *kc, "controller", "status", "-o", "json")
    assert code == 0
    rows = {r["controller"]: r for r in json.loads(out)}
    assert set(rows) == {"burst-taint", "migrate-back", "node-health", "quota-sync"}
    row = rows["burst-taint"]
    assert row["running"] is False and row["leader"] is None  # released on exit
    assert row["last_action"]["action"] == "burst-taint add"
    assert row["last_action"]["status"] == "done"
    assert row["state"]["tainted"] is True
    assert rows["node-health"]["last_action"] is None

    # a training takes the GPUs: --dry-run plans the removal and changes nothing
    gpu_pod(ops, "gpu-node-000", "train-0", 8)
    code, _, err = run(capsys, *kc, "controller", "run", "burst-taint", "--once", "--dry-run")
    assert code == 0, err
    (planned,) = log_lines(err, "plan")
    assert planned["plan"]["action"] == "burst-taint remove"
    assert log_lines(err, "action") == []
    assert OURS in taints_of(ops, "vk-0")
    assert len(audit(tmp_path)) == 4

    code, out, _ = run(capsys, *kc, "controller", "status")
    assert code == 0
    assert "burst-taint add" in out and "no controller leads now" in out


def test_status_shows_the_blast_cap_veto_and_ack_and_ack_is_audited(
    kc: list[str], ops: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write_state(
        ops,
        NAMESPACE,
        {"node-health": {"cap": {"held": 2, "max": 2, "tripped": True}, "veto": None}},
    )
    code, out, err = run(capsys, *kc, "controller", "ack", "--reason", "racks 3-4 checked")
    assert code == 2 and "pass --yes" in err
    assert read_state(ops, NAMESPACE).annotations == {}

    code, out, err = run(capsys, *kc, "controller", "ack", "--reason", " ", "--yes")
    assert code == 2 and "--reason" in err

    code, out, _ = run(
        capsys, *kc, "controller", "ack", "--reason", "racks 3-4 checked", "--dry-run"
    )
    assert code == 0 and "PATCH" in out and "resourceVersion" in out
    assert read_state(ops, NAMESPACE).annotations == {}

    code, out, err = run(capsys, *kc, "controller", "ack", "--reason", "racks 3-4 checked", "--yes")
    assert code == 0, err
    annotations = read_state(ops, NAMESPACE).annotations
    assert annotations[ACK_REASON] == "racks 3-4 checked"
    assert annotations[ACK_BY] and annotations[ACK_AT].endswith("Z")
    records = audit(tmp_path)
    assert [r["record"] for r in records] == ["start", "step", "end"]
    assert records[0]["action"] == "controller ack" and records[-1]["status"] == "done"
    # the state the controllers keep is untouched
    assert read_state(ops, NAMESPACE).data["node-health"]["cap"]["tripped"] is True

    code, out, _ = run(capsys, *kc, "controller", "status", "-o", "json")
    rows = {r["controller"]: r for r in json.loads(out)}
    assert rows["node-health"]["blast_cap"] == {"held": 2, "max": 2, "tripped": True}
    assert rows["node-health"]["ack"]["reason"] == "racks 3-4 checked"
    code, out, _ = run(capsys, *kc, "controller", "status")
    assert "node-health blast cap:" in out and "racks 3-4 checked" in out


def test_ack_creates_the_state_configmap_when_there_is_none(
    kc: list[str], ops: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, *kc, "controller", "ack", "--reason", "first look", "--yes")
    assert code == 0, err
    cm = ops.get("cm", f"/api/v1/namespaces/{NAMESPACE}/configmaps/{STATE_CONFIGMAP}")
    assert cm["metadata"]["annotations"][ACK_REASON] == "first look"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("run", "nope", "--once"), "unknown controller 'nope'"),
        (("run", "burst-taint", "--interval", "0"), "--interval must be more than 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    kc: list[str], capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    code, _, err = run(capsys, *kc, "controller", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


# -- controller run all: the watch caches --------------------------------------------------------


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _total(metrics: dict[Any, float], name: str, **labels: str) -> float:
    return sum(
        v
        for (n, lab), v in metrics.items()
        if n == name and all(dict(lab).get(k) == want for k, want in labels.items())
    )


def _apiserver_lists(ops: Cluster) -> dict[str, float]:
    """LIST requests the upstream kube-apiserver has served, by resource (its own
    ``apiserver_request_total``)."""
    from prometheus_client.parser import text_string_to_metric_families

    answer = ops.request("metrics", "GET", "/metrics", raw=True)
    assert answer.ok, answer.status
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(answer.text or ""):
        for s in family.samples:
            if s.name == "apiserver_request_total" and s.labels.get("verb") == "LIST":
                out[s.labels["resource"]] = out.get(s.labels["resource"], 0) + s.value
    return out


def test_run_all_reads_through_watch_caches_and_lists_nothing_in_the_steady_state(
    kc: list[str], ops: Cluster, tmp_path: Path, control_plane: str
) -> None:
    """Four controllers, one process, one list-and-watch per kind: after the first pass
    the passes go on (burst-taint even acts) and no list is sent, by the process's own
    count and, on the upstream control plane, by kube-apiserver's."""
    import os
    import subprocess
    import time

    from tests.conftest import KREA_OPS, ROOT, wait_for

    env = {**os.environ, "KREA_OPS_CONFIG": "/nonexistent/krea-ops.yaml"}
    proc = subprocess.Popen(
        [*KREA_OPS, *kc, "controller", "run", "all", "--interval", "0.5", "--metrics-port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        assert proc.stderr is not None
        url = None
        while url is None:
            line = proc.stderr.readline()
            assert line, "controller run all exited before serving its metrics"
            if line.startswith("metrics on "):
                url = line.split()[2]

        def passes() -> float:
            return _total(_scrape(url), "krea_ops_controller_passes_total", result="ok")

        wait_for(lambda: passes() >= 8, timeout=60, interval=0.5)
        first = _scrape(url)
        upstream = control_plane == "upstream"
        before = _apiserver_lists(ops) if upstream else {}
        started = passes()
        wait_for(lambda: passes() >= started + 12, timeout=60, interval=0.5)
        time.sleep(1)
        after = _scrape(url)
        listed = {
            name: _total(after, name) - _total(first, name)
            for name in (
                "krea_ops_controller_uncached_lists_total",
                "krea_ops_controller_watch_gone_total",
            )
        }
        listed["relists"] = _total(
            after, "krea_ops_controller_watch_requests_total", request="relist"
        ) - _total(first, "krea_ops_controller_watch_requests_total", request="relist")
        assert listed == {
            "krea_ops_controller_uncached_lists_total": 0,
            "krea_ops_controller_watch_gone_total": 0,
            "relists": 0,
        }
        # one cache per collection for the four of them, each listed once, watching now
        firsts = {
            dict(lab)["resource"]: v
            for (n, lab), v in after.items()
            if n == "krea_ops_controller_watch_requests_total" and dict(lab)["request"] == "list"
        }
        assert {"nodes", "pods", "clusterqueues", "resourceflavors"} <= set(firsts), firsts
        assert all(v == 1 for v in firsts.values()), firsts
        connected = [
            v for (n, _lab), v in after.items() if n == "krea_ops_controller_watch_connected"
        ]
        assert connected and all(v == 1 for v in connected), after
        assert _total(after, "krea_ops_controller_watch_objects", resource="nodes") >= 2
        # burst-taint acted through the cached reads: the virtual node is tainted
        assert OURS in taints_of(ops, "vk-0")
        if upstream:
            # what kube-apiserver served meanwhile: no LIST of what the controllers read
            # (the upstream controllers list nothing in their steady state either)
            now = _apiserver_lists(ops)
            grew = {r: now.get(r, 0) - before.get(r, 0) for r in now}
            assert {r: n for r, n in grew.items() if n and r in firsts} == {}, grew
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
