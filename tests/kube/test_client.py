"""Connecting to a cluster fails with one clear line, never a traceback: what the
operator named and cannot be used is bad input (2), a server that does not answer or
refuses is unavailable (1)."""

from __future__ import annotations

import pytest
import yaml

from krea_ops.errors import EXIT_FAILED, BadInput, Unavailable
from krea_ops.kube.client import api_client, check_reachable
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import free_port


def test_connects_through_the_simulators_kubeconfig(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with LocalApiServer(tmp_path / "s") as sim, api_client(str(sim.kubeconfig)) as api:
        check_reachable(api)


def test_missing_corrupt_and_unknown_context(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(BadInput, match="no kubeconfig"):
        api_client()
    with pytest.raises(BadInput, match="does not exist"):
        api_client(str(tmp_path / "nope"))
    corrupt = tmp_path / "corrupt"
    corrupt.write_text("clusters: [unclosed\n")
    with pytest.raises(BadInput, match=r"corrupt"):
        api_client(str(corrupt))
    with LocalApiServer(tmp_path / "s") as sim, pytest.raises(BadInput, match="context"):
        api_client(str(sim.kubeconfig), context="prod")


def test_unreachable_server_and_wrong_token(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with LocalApiServer(tmp_path / "s") as sim:
        config = yaml.safe_load(sim.kubeconfig.read_text())
        config["users"][0]["user"]["token"] = "wrong"
        bad_token = tmp_path / "bad-token"
        bad_token.write_text(yaml.safe_dump(config))
        with api_client(str(bad_token)) as api, pytest.raises(Unavailable, match="refused"):
            check_reachable(api)
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
        dead = tmp_path / "dead"
        dead.write_text(yaml.safe_dump(config))
    with api_client(str(dead)) as api, pytest.raises(Unavailable, match="cannot reach") as exc:
        check_reachable(api, timeout_s=2)
    assert exc.value.exit_code == EXIT_FAILED
