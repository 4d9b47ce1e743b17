"""The conventions every command shares, as an operator meets them on a simulated cluster:
global options after the subcommand (the later one wins), exit codes (a malformed label
selector or a URL without a scheme is bad input, 2; an API server that does not answer is
1 for every command), a command group alone prints its help, and ``sim inject`` says
which GPU, link or HCA it hit."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from commands.main import command, invoke
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.faults import FAULT_NAMESPACE
from krea_ops.sim.world import SimWorld
from tests.conftest import NODE_EXPORTER_TREE, free_port, require_binary, wait_for

PARTS = ("cluster", "devices")
FAST = {"devices_period_s": 15.0, "gpm_interval_s": 0.5, "slow_burners": False}


@pytest.fixture(autouse=True)
def clean_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    monkeypatch.delenv("KREA_OPS_PROMETHEUS_URL", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWorld]:
    """Two GPU nodes and their exporters, no Prometheus: telemetry is a direct scrape of
    the exporters the world publishes in ConfigMap krea-ops-config."""
    config = WorldConfig(nodes=2, speed=60, prometheus=False, failure_multiplier=0.0, extra=FAST)
    with SimWorld(config, tmp_path_factory.mktemp("conventions"), parts=PARTS) as w:
        core = client.CoreV1Api(w.client)
        wait_for(lambda: len(core.list_node().items) == 2, timeout=30)
        wait_for(lambda: len(w.world.services["devices"].exporter_urls()) == 2, timeout=30)
        yield w


@pytest.fixture(scope="module")
def kc(world: SimWorld) -> str:
    return str(world.kubeconfig)


@pytest.fixture(scope="module")
def dead_kubeconfig(world: SimWorld, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The world's kubeconfig with its server moved to a port nothing listens on."""
    config = yaml.safe_load(world.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    path = tmp_path_factory.mktemp("dead") / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = invoke(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# -- global options after the subcommand -----------------------------------------------


def test_kubeconfig_after_the_subcommand_reaches_the_cluster(
    kc: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def sixteen_gpus() -> list[dict[str, Any]] | None:
        code, out, _ = run(capsys, "gpus", "--kubeconfig", kc, "-o", "json")
        rows = json.loads(out) if code == 0 else []
        return rows if len(rows) == 16 else None

    rows = wait_for(sixteen_gpus, timeout=60, interval=1)
    assert {r["node"] for r in rows} == {"gpu-node-000", "gpu-node-001"}
    # between a group and its subcommand too, and with the context named after it
    code, out, err = run(capsys, "nodes", "--kubeconfig", kc, "list", "--context", "krea-sim")
    assert code == 0, err
    assert "gpu-node-000" in out and "gpu-node-001" in out


def test_the_later_of_two_global_options_wins(kc: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--kubeconfig", "/nonexistent/kc", "nodes", "list",
                         "--kubeconfig", kc, "-o", "json")  # fmt: skip
    assert "gpu-node-000" in out, err
    code, _, err = run(
        capsys, "--kubeconfig", kc, "nodes", "list", "--kubeconfig", "/nonexistent/kc"
    )
    assert code == 2
    assert one_error(err) == "error: kubeconfig /nonexistent/kc does not exist"
    code, _, err = run(capsys, "--context", "krea-sim", "gpus", "--kubeconfig", kc,
                       "--context", "prod")  # fmt: skip
    assert code == 2 and "prod" in one_error(err)


def test_the_later_context_wins_as_in_kubectl(
    world: SimWorld, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One kubeconfig, two contexts: the simulator and a server that does not answer.
    config = yaml.safe_load(world.kubeconfig.read_text())
    dead = dict(config["clusters"][0], name="dead")
    dead["cluster"] = dict(dead["cluster"], server=f"https://127.0.0.1:{free_port()}")
    config["clusters"].append(dead)
    config["contexts"].append(
        {"name": "dead", "context": {"cluster": "dead", "user": config["users"][0]["name"]}}
    )
    two = tmp_path / "two-contexts"
    two.write_text(yaml.safe_dump(config))
    kubectl = require_binary("kubectl")
    for first, later in (("dead", "krea-sim"), ("krea-sim", "dead")):
        picked = subprocess.run(
            [kubectl, "--kubeconfig", str(two), "--context", first, "config", "view",
             "--minify", "--context", later, "-o", "jsonpath={.contexts[0].name}"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert picked == later  # kubectl: the later flag wins
        code, out, err = run(capsys, "--kubeconfig", str(two), "--context", first,
                             "nodes", "list", "-o", "json", "--context", later)  # fmt: skip
        if later == "krea-sim":
            assert code == 0 and "gpu-node-000" in out, err
        else:
            assert code == 1 and "cannot reach the API server" in one_error(err)


def test_prometheus_after_the_subcommand_is_the_one_read(
    kc: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without the flag the fleet is read by scraping the world's exporters; with it, from
    # that Prometheus (here one that does not answer: the failure names its URL).
    first, second = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    code, _, err = run(capsys, "--prometheus", first, "gpus", "--kubeconfig", kc,
                       "--prometheus", second)  # fmt: skip
    assert code == 1
    line = one_error(err)
    assert second in line and first not in line


def test_debug_after_the_subcommand_shows_the_traceback(
    kc: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "queue", "why", "w", "--kubeconfig", kc)
    assert code == 2
    line = one_error(err)
    assert line.startswith("error: workload w not found")
    code, _, err = run(capsys, "queue", "why", "w", "--kubeconfig", kc, "--debug")
    assert code == 2
    assert err.startswith("Traceback (most recent call last):")
    assert err.splitlines()[-1] == line


@pytest.mark.parametrize(
    "args",
    [
        ["version", "-o", "json", "--context", "c", "--debug"],
        ["train", "advise", "--checkpoint-seconds", "30", "--mtbf-hours", "8", "--kubeconfig",
         "/any/where", "-o", "json"],
        ["exporter", "once", "--gpu-backend", "none", "--sysfs", str(NODE_EXPORTER_TREE),
         "--prometheus", "http://127.0.0.1:9090", "--debug"],
    ],
    ids=["version", "train advise", "exporter once"],
)  # fmt: skip
def test_commands_that_need_no_cluster_accept_them_too(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert out.strip()


# -- exit codes ----------------------------------------------------------------------------


def _kubectl_reason(kc: str, selector: str) -> str:
    """What the API server says is wrong with ``selector``, as kubectl 1.32 shows it:
    ``Unable to find "/v1, Resource=nodes" that match label selector "a b", field
    selector "": unable to parse requirement: ...``."""
    kubectl = require_binary("kubectl")
    result = subprocess.run(
        [kubectl, "--kubeconfig", kc, "get", "nodes", "-l", selector],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    match = re.search(r'that match label selector ".*", field selector "": (.*)$', result.stderr)
    assert match, result.stderr
    return match.group(1)


@pytest.mark.parametrize("selector", ["a b", "pool in (h200", "!", "a=b=c"])
def test_a_malformed_selector_is_bad_input_with_the_servers_reason(
    kc: str, selector: str, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = _kubectl_reason(kc, selector)
    for args in (["gpus", "-l", selector], ["nodes", "list", "-l", selector],
                 ["fabric", "--selector", selector]):  # fmt: skip
        code, out, err = run(capsys, *args, "--kubeconfig", kc)
        assert code == 2 and out == "", (args, err)
        assert one_error(err) == f"error: invalid label selector {selector!r}: {reason}"


def test_a_well_formed_selector_still_selects(kc: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "nodes", "list", "-l", "kubernetes.io/hostname in (gpu-node-001)",
                         "-o", "json", "--kubeconfig", kc)  # fmt: skip
    assert code == 0, err
    assert [n["name"] for n in json.loads(out)] == ["gpu-node-001"]


@pytest.mark.parametrize(
    ("where", "fix"),
    [("flag", "--prometheus 'localhost:9090' has no scheme: use http://localhost:9090"),
     ("env", "KREA_OPS_PROMETHEUS_URL 'localhost:9090' has no scheme: use http://localhost:9090")],
)  # fmt: skip
def test_a_prometheus_url_without_a_scheme_is_bad_input(
    kc: str,
    where: str,
    fix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flag = ["--prometheus", "localhost:9090"] if where == "flag" else []
    if where == "env":
        monkeypatch.setenv("KREA_OPS_PROMETHEUS_URL", "localhost:9090")
    for args in (["gpus"], ["nodes", "list"], ["fabric"]):
        code, out, err = run(capsys, *args, "--kubeconfig", kc, *flag)
        assert (code, out) == (2, ""), (args, err)
        assert one_error(err) == f"error: {fix}"


def test_a_prometheus_url_without_a_scheme_in_the_configmap_is_bad_input_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from krea_ops.sim.apiserver.local import LocalApiServer

    with LocalApiServer(tmp_path / "api") as server, server.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "krea-ops"}})
        core.create_namespaced_config_map("krea-ops", {
            "metadata": {"name": "krea-ops-config"}, "data": {"prometheusURL": "prom:9090"},
        })  # fmt: skip
        code, out, err = run(capsys, "gpus", "--kubeconfig", str(server.kubeconfig))
    assert (code, out) == (2, "")
    assert one_error(err) == (
        "error: ConfigMap krea-ops/krea-ops-config key prometheusURL 'prom:9090' has no "
        "scheme: use http://prom:9090"
    )


CLUSTER_COMMANDS = [
    ["gpus"],
    ["fabric"],
    ["nodes", "list"],
    ["nodes", "show", "gpu-node-000"],
    ["queue", "list"],
    ["queue", "workloads"],
    ["queue", "why", "w"],
    ["burst", "status"],
    ["sim", "inject", "hot-gpu", "gpu-node-000"],
]


@pytest.mark.parametrize("args", CLUSTER_COMMANDS, ids=" ".join)
def test_an_unreachable_api_server_is_exit_1_for_every_command(
    dead_kubeconfig: str, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *args, "--kubeconfig", dead_kubeconfig)
    assert (code, out) == (1, ""), err
    line = one_error(err)
    assert "cannot reach the API server at https://127.0.0.1:" in line
    assert "--kubeconfig" in line  # names the fix


def _groups(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if getattr(cmd, "commands", None):
        yield path
        for name, sub in cmd.commands.items():
            yield from _groups(sub, (*path, name))


@pytest.mark.parametrize("path", list(_groups(command())), ids=lambda p: " ".join(p) or "krea-ops")
def test_a_group_alone_prints_its_help_and_exits_0(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *path)
    assert (code, err) == (0, "")
    assert f"Usage: krea-ops {' '.join(path)}".rstrip() in out
    group = command()
    for name in path:
        group = group.commands[name]
    for name in group.commands:  # the menu it was asked for
        assert re.search(rf"│ {name} ", out), name


# -- sim inject ------------------------------------------------------------------------------


def test_inject_says_which_gpu_link_or_hca_it_chose(
    world: SimWorld, kc: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "sim", "inject", "hot-gpu", "gpu-node-001", "--kubeconfig", kc)
    assert code == 0, err
    name, gpu = re.fullmatch(
        r"fault (\S+): hot-gpu on gpu-node-001 GPU (\d) \(the simulator chose the GPU; "
        r"--gpu picks the GPU\)\n",
        out,
    ).groups()  # type: ignore[union-attr]
    faults = world.world.services["devices"].active_faults
    assert faults[name].targets == {"GPU": int(gpu)}  # the GPU that is heating up

    code, out, _ = run(capsys, "sim", "inject", "hot-gpu", "gpu-node-001", "--gpu", "3",
                       "--kubeconfig", kc)  # fmt: skip
    assert code == 0 and re.fullmatch(r"fault \S+: hot-gpu on gpu-node-001 GPU 3\n", out), out

    code, out, _ = run(capsys, "sim", "inject", "nvlink-errors", "gpu-node-000", "--gpu", "2",
                       "--kubeconfig", kc)  # fmt: skip
    assert code == 0
    assert re.fullmatch(
        r"fault \S+: nvlink-errors on gpu-node-000 GPU 2, NVLink \d+ \(the simulator chose "
        r"the NVLink; --value picks the NVLink\)\n",
        out,
    ), out

    code, out, _ = run(capsys, "sim", "inject", "ib-flap", "gpu-node-000", "--kubeconfig", kc)
    assert code == 0
    assert re.fullmatch(
        r"fault \S+: ib-flap on gpu-node-000 HCA \d \(the simulator chose the HCA; "
        r"--value picks the HCA\)\n",
        out,
    ), out


def test_a_fault_the_simulator_cannot_apply_is_refused_and_removed(
    world: SimWorld, kc: str, capsys: pytest.CaptureFixture[str]
) -> None:
    core = client.CoreV1Api(world.client)
    before = {c.metadata.name for c in core.list_namespaced_config_map(FAULT_NAMESPACE).items}
    code, out, err = run(capsys, "sim", "inject", "ib-flap", "gpu-node-000", "--value", "9",
                         "--kubeconfig", kc)  # fmt: skip
    assert (code, out) == (2, "")
    assert one_error(err).endswith(": node gpu-node-000 has 8 HCAs: no HCA 9")
    after = {c.metadata.name for c in core.list_namespaced_config_map(FAULT_NAMESPACE).items}
    assert after == before


def test_inject_into_a_simulator_without_a_world_times_out_as_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from commands import sim
    from krea_ops.sim.apiserver.local import LocalApiServer

    monkeypatch.setattr(sim, "APPLY_TIMEOUT_S", 1.0)
    with LocalApiServer(tmp_path / "api-only") as api_only, api_only.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_node(
            {"metadata": {"name": "n1"}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}
        )
        code, out, err = run(capsys, "sim", "inject", "hot-gpu", "n1",
                             "--kubeconfig", str(api_only.kubeconfig))  # fmt: skip
        left = core.list_namespaced_config_map(FAULT_NAMESPACE)
    assert (code, out) == (1, "")
    assert "did not apply fault" in one_error(err) and "--api-only" in err
    assert left.items == []
