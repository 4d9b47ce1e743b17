"""The API server throttling, refusing, stalling and hanging up, and what the product does:
a 429's ``Retry-After`` is waited out (bounded) and the call completes; a 409 storm on a
node stops ``nodes evict`` with one line and nothing half-written, and running it again
converges; a list answered 500/503 is one line and exit 1, never an empty fleet; a stalled
call costs one timeout, not four; a GET hung up on is asked again once, a write never.

The faults come from the simulated API server's fault switch
(``krea_ops.sim.apiserver.fault_switch``), set per test through
``LocalApiServer.api.faults``, by ``sim serve --faults`` and by the ConfigMap
``krea-sim/api-faults``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commands.main import invoke
from krea_ops.errors import BadInput, Unavailable
from krea_ops.kube.cluster import MAX_RETRY_AFTER_S, Cluster
from krea_ops.kube.eviction import Outcome, evict
from krea_ops.kube.writes import ATTEMPTS, Cordon, node, update
from krea_ops.runbook.nodes import EVICTED_REASON, TAINT_KEY
from krea_ops.sim.apiserver.fault_switch import FaultSwitch, parse_text
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import KREA_OPS, ROOT, Kubectl
from tests.faults.conftest import kubeconfig
from tests.kube.conftest import Kubelets
from tests.runbook.conftest import fleet, node_obj, pod_names, pod_on

BAD = "gpu-node-001"


def run(
    sim: LocalApiServer, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    capsys.readouterr()
    code = invoke([*args, *kubeconfig(sim)])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    (line,) = err.splitlines()
    return line


# -- the switch itself ---------------------------------------------------------------------


def test_a_rate_draws_the_same_requests_every_run_under_its_seed() -> None:
    def pattern(seed: int) -> list[bool]:
        switch = FaultSwitch()
        switch.set([{"verbs": ["get"], "resources": ["nodes"], "status": 500, "rate": 0.5}],
                   seed=seed)  # fmt: skip
        return [switch.decide("get", "", "nodes", "", "", f"n{i}") is not None for i in range(40)]

    assert pattern(7) == pattern(7)
    assert 5 < sum(pattern(7)) < 35  # some of each
    assert pattern(7) != pattern(8)


def test_fault_rules_that_cannot_be_read_are_one_line() -> None:
    for text, words in (
        ("rules: [{verbs: [list], status: 418}]", "status 418 is not one the switch answers"),
        ("rules: [{verbs: [lists], status: 500}]", "unknown verb 'lists'"),
        ("rules: [{verbs: [list]}]", "says nothing to do"),
        ("rules: [{status: 500, rate: 2}]", "rate must be at least 0 and at most 1"),
        ("rules: [{status: 500, color: red}]", "unknown key 'color'"),
        ("rules: {a: 1}", "rules must be a list"),
        ("seed: x", "seed must be a whole number"),
        ("rules: [", "not YAML"),
    ):
        with pytest.raises(BadInput, match=words) as caught:
            parse_text(text, "faults.yaml")
        assert "\n" not in str(caught.value) and str(caught.value).startswith("faults.yaml")


def test_the_configmap_switch_is_read_live_and_kubectl_sees_the_real_answers(
    sim: LocalApiServer, kubectl: Kubectl
) -> None:
    kubectl("create", "namespace", "krea-sim")
    fleet_ok = kubectl("get", "nodes", "-o", "name")
    assert fleet_ok.stdout == ""
    rules = "rules:\n- verbs: [list]\n  resources: [nodes]\n  status: 503\n"
    kubectl(
        "create", "configmap", "api-faults", "-n", "krea-sim", f"--from-literal=faults.yaml={rules}"
    )
    refused = kubectl("get", "nodes", check=False)
    assert refused.returncode == 1
    assert (
        "Error from server (ServiceUnavailable): the server is currently unable to handle "
        "the request" in refused.stderr
    ), refused.stderr
    # every request faulted, but the switch itself: it can always be turned off
    everything = json.dumps({"data": {"faults.yaml": "rules: [{status: 503}]"}})
    kubectl("patch", "configmap", "api-faults", "-n", "krea-sim", "--type=merge", "-p", everything)
    assert kubectl("get", "namespaces", check=False).returncode == 1
    invalid = kubectl(
        "patch", "configmap", "api-faults", "-n", "krea-sim", "--type=merge",
        "-p", json.dumps({"data": {"faults.yaml": "rules: [{status: 418}]"}}), check=False,
    )  # fmt: skip
    assert invalid.returncode == 1
    assert "is invalid" in invalid.stderr and "status 418" in invalid.stderr, invalid.stderr
    kubectl("delete", "configmap", "api-faults", "-n", "krea-sim")
    assert kubectl("get", "nodes", "-o", "name").returncode == 0


def test_sim_serve_faults_flag_arms_the_switch_and_bad_rules_are_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [{verbs: [list], resources: [nodes], status: 404}]\n")
    env_args = ["sim", "serve", "--api-only", "--state", str(tmp_path / "state")]
    refused = subprocess.run(
        [*KREA_OPS, *env_args, "--faults", str(bad)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2
    assert one_line(refused.stderr).startswith(f"error: --faults {bad}: rule 1: status 404")

    good = tmp_path / "faults.yaml"
    good.write_text("seed: 3\nrules:\n- verbs: [list]\n  resources: [nodes]\n  status: 500\n")
    proc = subprocess.Popen(
        [*KREA_OPS, *env_args, "--faults", str(good)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        while not any(line.startswith("try:") for line in lines):
            line = proc.stdout.readline()
            assert line, lines
            lines.append(line)
        assert f"faults: 1 rules from {good}\n" in lines
        config = next(x for x in lines if x.startswith("kubeconfig: ")).split(": ", 1)[1].strip()
        listed = subprocess.run(
            [sys.executable, "-m", "commands", "nodes", "list", "--kubeconfig", config],
            capture_output=True, text=True, cwd=ROOT, timeout=60,
        )  # fmt: skip
        assert listed.returncode == 1
        assert one_line(listed.stderr) == (
            "error: list nodes: HTTP 500 Internal error occurred: injected by the "
            "simulator's fault switch"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- 429 with Retry-After ------------------------------------------------------------------


def test_a_429_with_retry_after_is_waited_out_and_reads_writes_and_evictions_complete(
    sim: LocalApiServer, product: Cluster
) -> None:
    fleet(product, 2)
    pod_on(product, BAD, "web-0", labels={"app": "web"})
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    product.sleep = sleep
    faults = sim.api.faults
    # the filters' own 429 (plain text, Retry-After: 1) on the read, twice
    faults.set([{"verbs": ["list"], "resources": ["nodes"], "status": 429, "times": 2}])
    assert [n.name for n in product.nodes()] == ["gpu-node-000", BAD]
    assert faults.seen("list", "nodes") == 3 and waits == [1.0, 1.0]
    # the read and the write of a read-modify-write, once each
    faults.set([
        {"verbs": ["get"], "resources": ["nodes"], "status": 429, "times": 1},
        {"verbs": ["patch"], "resources": ["nodes"], "status": 429, "times": 1},
    ])  # fmt: skip
    written = update(product, node(BAD), Cordon())
    assert (faults.seen("get", "nodes"), faults.seen("patch", "nodes")) == (2, 2)
    assert written.changed and node_obj(product, BAD)["spec"]["unschedulable"] is True
    # a read answered 503 with a Retry-After: the same
    faults.set([{"verbs": ["list"], "resources": ["nodes"], "status": 503, "retryAfter": 1,
                 "times": 1}])  # fmt: skip
    assert len(product.nodes()) == 2 and len(waits) == 5
    # an eviction answered with the Status form (reason TooManyRequests, retryAfterSeconds)
    faults.set([{"verbs": ["create"], "resources": ["pods/eviction"], "status": 429,
                 "body": "status", "retryAfter": 1, "times": 1}])  # fmt: skip
    result = evict(product, "default", "web-0")
    assert result.outcome is Outcome.EVICTED and faults.seen("create", "pods/eviction") == 2
    pod = product.get("pod", "/api/v1/namespaces/default/pods/web-0")
    assert pod["metadata"]["deletionTimestamp"]  # evicted: Terminating until its kubelet ends it
    product.request("kubelet", "DELETE", "/api/v1/namespaces/default/pods/web-0",
                    body={"gracePeriodSeconds": 0})  # fmt: skip
    assert pod_names(product, BAD) == []
    assert waits == [1.0] * 6
    assert len(faults.injected()) == 6


def test_a_429_that_does_not_end_is_waited_out_bounded_then_one_line(
    sim: LocalApiServer, product: Cluster
) -> None:
    waits: list[float] = []
    product.sleep = waits.append  # the bound is what is measured here, not the wait
    sim.api.faults.set([{"verbs": ["list"], "resources": ["nodes"], "status": 429,
                         "body": "status", "retryAfter": 3600}])  # fmt: skip
    with pytest.raises(Unavailable) as caught:
        product.nodes()
    assert str(caught.value) == "list nodes: HTTP 429 Too many requests, please try again later."
    # each wait at most MAX_RETRY_AFTER_S, all of them within the request timeout (30 s)
    assert waits == [MAX_RETRY_AFTER_S] * 3
    assert sim.api.faults.seen("list", "nodes") == 4


def test_a_budget_refusal_is_left_to_the_eviction_not_retried_underneath(
    sim: LocalApiServer, product: Cluster
) -> None:
    from tests.runbook.conftest import budget

    fleet(product, 2)
    pod_on(product, BAD, "web-0", labels={"app": "web"})
    budget(product, "web", {"app": "web"}, pods=1, minAvailable=1)
    waits: list[float] = []
    product.sleep = waits.append
    result = evict(product, "default", "web-0")
    assert result.outcome is Outcome.BLOCKED and result.budget == "web"
    assert waits == []  # one call: the caller (evict_until, the drain) decides about budgets


# -- 409 storms ------------------------------------------------------------------------------


def test_a_409_storm_stops_evict_with_one_line_nothing_half_written_and_a_rerun_converges(
    sim: LocalApiServer, product: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet(product, 10)
    pod_on(product, BAD, "web-0", labels={"app": "web"})
    before = node_obj(product, BAD)
    sim.api.faults.set([{"verbs": ["patch"], "resources": ["nodes"], "name": BAD,
                         "status": 409, "times": ATTEMPTS}])  # fmt: skip
    code, _, err = run(sim, capsys, "nodes", "evict", BAD, "--reason", "XID 79", "--yes")
    assert code == 1
    line = one_line(err)
    assert line.startswith(f"error: nodes evict stopped: update node {BAD}: another client changed")
    assert f"({ATTEMPTS} attempts, HTTP 409 each time); run the command again" in line
    assert len(sim.api.faults.injected("patch", "nodes")) == ATTEMPTS
    # nothing of the write landed, nothing after it ran
    assert node_obj(product, BAD) == before
    assert pod_names(product, BAD) == ["default/web-0"]

    with Kubelets(sim):  # the rerun drains: the node's kubelet stops the evicted pod
        code, _, err = run(sim, capsys, "nodes", "evict", BAD, "--reason", "XID 79", "--yes")
    assert code == 0, err
    after = node_obj(product, BAD)
    assert after["spec"]["unschedulable"] is True
    assert [t["key"] for t in after["spec"]["taints"]] == [TAINT_KEY]
    assert after["metadata"]["annotations"][EVICTED_REASON] == "XID 79"
    assert pod_names(product, BAD) == []
    records = [json.loads(x) for x in audit.read_text().splitlines()]
    ends = [(r["status"], r["stopped"] is not None) for r in records if r["record"] == "end"]
    assert ends == [("failed", True), ("done", False)]  # both attempts, in the audit log


# -- 500/503 on a list -------------------------------------------------------------------------


def test_a_list_answered_500_or_503_is_one_line_and_exit_1_never_an_empty_fleet(
    sim: LocalApiServer, product: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet(product, 3)
    for status, words in (
        (500, "HTTP 500 Internal error occurred: injected by the simulator's fault switch"),
        (503, "HTTP 503 the server is currently unable to handle the request"),
    ):
        sim.api.faults.set([{"verbs": ["list"], "resources": ["nodes"], "status": status}])
        for command in (["nodes", "list"], ["gpus"], ["nodes", "list", "-o", "json"]):
            code, out, err = run(sim, capsys, *command)
            assert code == 1 and out == "", (command, out)
            assert one_line(err) == f"error: list nodes: {words}", command
    sim.api.faults.clear()
    assert len(product.nodes()) == 3


# -- slow answers and timeouts -----------------------------------------------------------------


def test_a_stalled_call_costs_one_timeout_not_four_and_the_next_call_works(
    sim: LocalApiServer, product: Cluster
) -> None:
    fleet(product, 2)
    impatient = Cluster(product.api, timeout_s=1)
    sim.api.faults.set([{"verbs": ["list"], "resources": ["nodes"], "latency": 3}])
    with pytest.raises(Unavailable) as caught:
        impatient.nodes()
    assert str(caught.value) == (
        f"cannot reach the API server at {sim.url} (list nodes): no answer within 1 s; "
        "check --kubeconfig/--context"
    )
    # sent once: urllib3's default Retry(3) would have sent the GET three times more
    assert sim.api.faults.seen("list", "nodes") == 1
    # a slow answer within the timeout is just slow
    sim.api.faults.set([{"verbs": ["list"], "resources": ["nodes"], "latency": 0.2}])
    assert len(impatient.nodes()) == 2


# -- connection resets -----------------------------------------------------------------------


def test_a_get_hung_up_on_is_asked_again_once_a_write_never(
    sim: LocalApiServer, product: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet(product, 2)
    faults = sim.api.faults
    faults.set([{"verbs": ["list"], "resources": ["nodes"], "drop": True, "times": 1}])
    assert len(product.nodes()) == 2 and faults.seen("list", "nodes") == 2
    faults.set([{"verbs": ["list"], "resources": ["nodes"], "drop": True}])
    code, out, err = run(sim, capsys, "nodes", "list")
    assert code == 1 and out == ""
    assert one_line(err) == (
        f"error: cannot reach the API server at {sim.url} (list nodes): Remote end closed "
        "connection without response; check --kubeconfig/--context"
    )
    # a PATCH hung up on may or may not have been applied: it is not sent again behind
    # the caller's back; the edit is idempotent, so doing it again is safe
    faults.set([{"verbs": ["patch"], "resources": ["nodes"], "drop": True, "times": 1}])
    with pytest.raises(Unavailable, match="closed connection without response"):
        update(product, node(BAD), Cordon())
    assert faults.seen("patch", "nodes") == 1
    assert update(product, node(BAD), Cordon()).changed
    assert update(product, node(BAD), Cordon()).changed is False


def test_a_server_that_takes_the_connection_but_never_answers_is_named_with_the_real_wait(
    sim: LocalApiServer, tmp_path: Path
) -> None:
    """Found: with the API server stopped, the error said "no answer within 30 s" after 5
    or 10 s. A server whose process is stopped still completes TCP handshakes (the
    kernel's backlog) but never the TLS one, which times out after the connect timeout
    and which urllib3 reports as a read timeout: the line says how long it waited."""
    import socket as socket_

    from krea_ops.kube.client import api_client
    from krea_ops.kube.cluster import CONNECT_TIMEOUT_S
    from krea_ops.sim.common.kubeconfig import write_kubeconfig

    with socket_.socket() as stalled:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(8)  # never accepted, never answered
        url = f"https://127.0.0.1:{stalled.getsockname()[1]}"
        config = write_kubeconfig(tmp_path / "stalled", url, sim.token, sim.ca_cert.read_bytes())
        with api_client(str(config)) as api, pytest.raises(Unavailable) as caught:
            Cluster(api, timeout_s=30).nodes()
    said = re.search(r"no answer within (\d+) s", str(caught.value))
    assert said is not None, str(caught.value)
    # the connect timeout it waited (a loaded machine may add a second), not the 30 s
    assert CONNECT_TIMEOUT_S <= int(said.group(1)) < 30
