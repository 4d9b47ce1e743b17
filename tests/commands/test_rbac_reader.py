"""The read commands with exactly deploy/rbac/reader.yaml's permissions (ABAC policies
derived from it on the simulator): they work; with less they fail in one line naming the
role to grant."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from commands.main import invoke
from krea_ops.sim.apiserver.authz import policies_from_rbac
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.common.kubeconfig import write_kubeconfig
from tests.conftest import ROOT

PODS_ONLY = {
    "apiVersion": "abac.authorization.kubernetes.io/v1beta1",
    "kind": "Policy",
    "spec": {
        "user": "pat",
        "namespace": "*",
        "resource": "pods",
        "apiGroup": "*",
        "readonly": True,
    },
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalApiServer]:
    docs = list(yaml.safe_load_all((ROOT / "deploy/rbac/reader.yaml").read_text()))
    state = tmp_path_factory.mktemp("rbac")
    s = LocalApiServer(
        state / "state",
        users={"reader": ("rita", ["krea-ops:readers"]), "pods-only": ("pat", [])},
        policies=[*policies_from_rbac(docs, "krea-ops:readers"), PODS_ONLY],
    )
    core = client.CoreV1Api(s.api_client())
    for i in range(3):
        core.create_node(
            {
                "metadata": {"name": f"gpu-node-00{i}", "labels": {"krea.ai/pool": "h200"}},
                "status": {
                    "capacity": {"nvidia.com/gpu": "8"},
                    "allocatable": {"nvidia.com/gpu": "8"},
                },
            }
        )
    core.create_namespace({"metadata": {"name": "krea-ops"}})
    core.create_namespaced_config_map(
        "krea-ops",
        {"metadata": {"name": "krea-ops-config"}, "data": {"exporters": "{}"}},
    )
    try:
        yield s
    finally:
        s.close()


def kubeconfig_for(s: LocalApiServer, token: str, path: Path) -> str:
    return str(write_kubeconfig(path, s.url, token, s.ca_cert.read_bytes()))


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = invoke(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_reader_role_is_enough_for_every_read_command(
    server: LocalApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    kc = ["--kubeconfig", kubeconfig_for(server, "reader", tmp_path / "reader")]
    for args in (
        ["queue", "list", "-o", "json"],
        ["queue", "workloads", "-o", "json"],
        ["burst", "status", "-o", "json"],
    ):
        code, out, err = run(capsys, *kc, *args)
        assert code == 0, (args, err)
        assert "forbidden" not in err
        json.loads(out)
    # nodes are readable; with no exporters published the only failure is telemetry's
    code, out, err = run(capsys, *kc, "nodes", "list", "-o", "json")
    assert [n["name"] for n in json.loads(out)] == ["gpu-node-000", "gpu-node-001", "gpu-node-002"]
    assert code == 1 and "forbidden" not in err and "Prometheus" in err


def test_less_than_the_reader_role_fails_in_one_line_naming_it(
    server: LocalApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    kc = ["--kubeconfig", kubeconfig_for(server, "pods-only", tmp_path / "pods")]
    code, out, err = run(capsys, *kc, "nodes", "list")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("error: forbidden: list nodes")
    assert 'User "pat" cannot list resource "nodes"' in err and "krea-ops-reader" in err
    code, _, err = run(capsys, *kc, "queue", "list")
    assert code == 1 and "forbidden" in err and err.count("\n") == 1


def test_an_unreachable_api_server_is_one_line_exit_1(
    server: LocalApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    dead = write_kubeconfig(
        tmp_path / "dead", "https://127.0.0.1:9", "x", server.ca_cert.read_bytes()
    )
    for args in (["gpus"], ["nodes", "list"], ["queue", "list"], ["fabric"]):
        code, _, err = run(capsys, "--kubeconfig", str(dead), *args)
        assert code == 1 and err.count("\n") == 1, (args, err)
        assert "cannot reach the API server at https://127.0.0.1:9" in err and "--kubeconfig" in err
