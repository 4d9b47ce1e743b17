"""No token, client key or kubeconfig content in anything krea-ops writes: a write
command's output, audit log and Events; the controllers' JSON log, audit log, metrics,
Events, Leases and state; the errors of a refused token and of broken kubeconfigs, with
and without --debug. The credentials are distinctive random strings (conftest), looked
for verbatim, in base64 and in slices."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from commands.main import invoke
from krea_ops.controllers.base import NAMESPACE
from krea_ops.kube.cluster import Cluster
from krea_ops.runbook.audit import AuditLog
from tests.conftest import KREA_OPS, ROOT, free_port, wait_for
from tests.controllers.conftest import PROVIDER_TAINT, gpu_node, virtual_node
from tests.kube.conftest import create
from tests.security.conftest import Credentials
from tests.telemetry.conftest import start_krea_node


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = invoke(list(args))
    out, err = capsys.readouterr()
    return code, out + err


def cluster_dump(creds: Credentials) -> str:
    """What krea-ops may have written to the cluster: nodes (annotations, taints), Events,
    the controllers' ConfigMaps and Leases."""
    with creds.sim.api_client() as api:
        core, coord = client.CoreV1Api(api), client.CoordinationV1Api(api)
        parts = [
            api.sanitize_for_serialization(x)
            for x in (
                core.list_node(),
                core.list_event_for_all_namespaces(),
                core.list_namespaced_config_map(NAMESPACE),
                coord.list_namespaced_lease(NAMESPACE),
            )
        ]
    return json.dumps(parts)


@pytest.fixture
def world(creds: Credentials, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """One GPU node with its exporter, one virtual node, the controllers' namespace and
    ConfigMap; settings that make burst-taint act; the audit log's path."""
    (tmp_path / "sys").mkdir()
    exporter = start_krea_node("gpu-node-000", tmp_path / "sys")
    with creds.sim.api_client() as api:
        ops = Cluster(api, timeout_s=30)
        create(ops, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        gpu_node(ops, "gpu-node-000")
        gpu_node(ops, "gpu-node-001")
        virtual_node(ops, "vk-0", [PROVIDER_TAINT])
        create(
            ops,
            f"/api/v1/namespaces/{NAMESPACE}/configmaps",
            {
                "metadata": {"name": "krea-ops-config"},
                "data": {"exporters": json.dumps({"gpu-node-000": exporter.url})},
            },
        )
    audit = tmp_path / "audit.jsonl"
    env = {
        "KREA_OPS_CONFIG": str(tmp_path / "no-config.yaml"),
        "KREA_OPS_AUDIT_LOG": str(audit),
        "KREA_OPS_TELEMETRY_WINDOW_S": "10",
        "KREA_OPS_BURST_TAINT_HOLD_S": "0",
        "KREA_OPS_BURST_TAINT_FREE_GPUS_HIGH": "4",
        "KREA_OPS_BURST_TAINT_FREE_GPUS_LOW": "2",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("KREA_OPS_PROMETHEUS_URL", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    yield audit
    exporter.stop()


def test_writes_controllers_and_their_records_hold_no_credentials(
    creds: Credentials, world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kc = ["--kubeconfig", str(creds.kubeconfig)]
    written: dict[str, str] = {}

    code, written["nodes evict"] = run(
        capsys, *kc, "nodes", "evict", "gpu-node-001", "--reason", "xid 79", "--yes"
    )
    assert code == 0, written["nodes evict"]
    # All four on a loop, as in a pod: the JSON log on stderr and /metrics while it runs.
    port = free_port()
    proc = subprocess.Popen(
        [
            *KREA_OPS,
            *kc,
            "controller",
            "run",
            "all",
            "--interval",
            "1",
            "--metrics-port",
            f"{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=os.environ.copy(),
    )
    url = f"http://127.0.0.1:{port}/metrics"

    def passes_done() -> str | None:
        try:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError:
            return None
        ended = [
            x
            for x in text.splitlines()
            if x.startswith("krea_ops_controller_passes_total{") and 'result="ok"' in x
        ]
        return text if len(ended) == 4 else None  # each controller led a pass

    try:
        written["metrics"] = wait_for(passes_done, timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    written["controller run all"] = out + err
    log = [json.loads(x) for x in err.splitlines() if x[:1] == "{"]  # its JSON log
    assert any(r.get("action") == "burst-taint add" for r in log), err

    # Then one pass of each, as a CronJob would (the loop released its Leases).
    code, written["controller run --once"] = run(capsys, *kc, "controller", "run", "all", "--once")
    assert code == 0, written["controller run --once"]
    log = [json.loads(x) for x in written["controller run --once"].splitlines() if x[:1] == "{"]
    assert {r["controller"] for r in log if r.get("event") == "leader"} == {
        "burst-taint",
        "migrate-back",
        "node-health",
        "quota-sync",
    }

    written["audit log"] = world.read_text()
    records = [json.loads(x) for x in written["audit log"].splitlines()]
    assert {r["action"] for r in records if r["record"] == "start"} >= {
        "nodes evict",
        "burst-taint add",
    }
    written["cluster"] = cluster_dump(creds)
    assert "EvictStarted" in written["cluster"] or "Cordoned" in written["cluster"]
    for name, text in written.items():
        assert creds.leaks(text) == [], name


def _kubeconfig_with(creds: Credentials, path: Path, **user: str) -> Path:
    config = yaml.safe_load(creds.kubeconfig.read_text())
    config["users"][0]["user"].update(user)
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_refused_and_broken_credentials_fail_without_showing_them(
    creds: Credentials,
    world: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    debug: bool,
) -> None:
    wrong = "kreaWrongCanary" + base64.urlsafe_b64encode(os.urandom(30)).decode()
    creds.add("wrong token", wrong.removeprefix("kreaWrongCanary"))
    refused = _kubeconfig_with(creds, tmp_path / "refused", token=wrong)
    broken_yaml = tmp_path / "broken"
    # A flow sequence never closed: YAML's error points into the token's line.
    broken_yaml.write_text(creds.kubeconfig.read_text().replace("token: ", "token: [", 1))
    bad_key = _kubeconfig_with(
        creds,
        tmp_path / "bad-key",
        **{
            "client-key-data": base64.b64encode(
                b"-----BEGIN PRIVATE KEY-----\n" + wrong.encode()
            ).decode()
        },
    )
    not_base64 = _kubeconfig_with(creds, tmp_path / "not-base64", **{"client-key-data": wrong})
    garbage = _kubeconfig_with(creds, tmp_path / "garbage", **{"client-key-data": "!!" + wrong})
    flag = ["--debug"] if debug else []
    evict = ["nodes", "evict", "gpu-node-001", "--reason", "r", "--yes"]
    cases = {  # name: (kubeconfig, command, exit code, what the line says)
        "401 on a read": (refused, ["gpus"], 1, "refused the credentials"),
        "401 on a write": (refused, evict, 1, "refused the credentials"),
        "broken YAML": (broken_yaml, ["nodes", "list"], 2, "could not be read"),
        "a key that does not load": (bad_key, evict, 2, "client certificate and key do not"),
        "key data not base64": (not_base64, ["nodes", "list"], 2, "kubeconfig"),
        "key data with bytes base64 lacks": (garbage, ["nodes", "list"], 2, "kubeconfig"),
    }
    for name, (kubeconfig, args, exit_code, says) in cases.items():
        code, text = run(capsys, *flag, "--kubeconfig", str(kubeconfig), *args)
        assert code == exit_code and says in text, (name, text)
        if not debug:
            assert len(text.strip().splitlines()) == 1, (name, text)
        assert creds.leaks(text) == [], (name, text)
    written = world.read_text() if world.exists() else ""
    assert creds.leaks(written + cluster_dump(creds)) == []


def test_a_controller_whose_token_is_refused_says_so(
    creds: Credentials, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "another replica leads": no replica holds the Lease, the API server refused the
    token (the CLI waits a lease duration, 15 s, for a Lease to expire; short here)."""
    from kubernetes import config as kube_config

    from krea_ops.controllers.burst_taint import BurstTaint, BurstTaintConfig
    from krea_ops.controllers.leader import ElectionSettings
    from krea_ops.controllers.loop import JsonLog, Runner

    wrong = "kreaWrongCanary" + base64.urlsafe_b64encode(os.urandom(30)).decode()
    creds.add("wrong token", wrong.removeprefix("kreaWrongCanary"))
    kubeconfig = _kubeconfig_with(creds, tmp_path / "refused", token=wrong)
    log = io.StringIO()
    with kube_config.new_client_from_config(str(kubeconfig)) as api:
        runner = Runner(
            Cluster(api, timeout_s=30),
            [BurstTaint(BurstTaintConfig(free_gpus_high=8, free_gpus_low=4, hold_s=0))],
            lambda name: pytest.fail("a pass ran without the Lease"),
            identity="replica-a",
            election=ElectionSettings(0.6, 0.4, 0.1),
            audit=AuditLog(tmp_path / "audit.jsonl"),
            log=JsonLog(log),
        )
        capsys.readouterr()
        code = runner.run(threading.Event(), once=True)
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("controller burst-taint: its Lease could not be taken: ")
    assert "refused the credentials" in err and "another replica" not in err
    assert creds.leaks(err + log.getvalue()) == []
    assert not (tmp_path / "audit.jsonl").exists()
