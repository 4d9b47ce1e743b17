"""networking.k8s.io/v1 NetworkPolicy, served as the real API server serves it: found by
discovery (``netpol``), applied, printed and described by kubectl, watched by the
official client, defaulted and validated.

The defaults are pkg/apis/networking/v1/defaults.go's ("Any policy that does not specify
policyTypes implies at least "Ingress"", Egress too when it has egress rules, "Default any
undefined Protocol fields to TCP"); the messages are ValidateNetworkPolicySpec's in
pkg/apis/networking/validation/validation.go.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client, watch

from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import KUBECTL, ROOT, Kubectl

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

CONTROLLERS_POLICY = ROOT / "deploy" / "controllers" / "networkpolicy.yaml"

EGRESS = """apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: dns-only, namespace: krea-ops}
spec:
  podSelector: {matchLabels: {app: trainer}}
  egress:
  - to: [{ipBlock: {cidr: 10.96.0.0/12, except: [10.96.0.1/32]}}]
    ports: [{port: 53, protocol: UDP}, {port: 53}]
"""


@pytest.fixture
def kubectl(sim: LocalApiServer, tmp_path: Path) -> Kubectl:
    run = Kubectl(sim.kubeconfig, tmp_path)
    run("create", "namespace", "krea-ops")
    return run


def test_kubectl_finds_applies_prints_and_describes_network_policies(kubectl: Kubectl) -> None:
    listed = kubectl("api-resources", "--api-group=networking.k8s.io", "-o", "wide").stdout
    assert listed.splitlines()[1].split() == [
        "networkpolicies",
        "netpol",
        "networking.k8s.io/v1",
        "true",
        "NetworkPolicy",
        "create,delete,deletecollection,get,list,patch,update,watch",
    ]
    created = kubectl("apply", "-f", str(CONTROLLERS_POLICY)).stdout
    assert created == "networkpolicy.networking.k8s.io/krea-ops-controllers created\n"
    again = kubectl("apply", "-f", str(CONTROLLERS_POLICY)).stdout
    assert again == "networkpolicy.networking.k8s.io/krea-ops-controllers unchanged\n"
    kubectl("apply", "--server-side", "-f", "-", stdin=EGRESS)

    table = kubectl("get", "netpol", "-n", "krea-ops").stdout.splitlines()
    assert table[0].split() == ["NAME", "POD-SELECTOR", "AGE"]
    assert [line.split()[:2] for line in table[1:]] == [
        ["dns-only", "app=trainer"],
        ["krea-ops-controllers", "app.kubernetes.io/name=krea-ops-controller"],
    ]
    # Defaulted as the real server does: Egress joins policyTypes, the port without a
    # protocol is TCP.
    egress = json.loads(kubectl("get", "netpol", "dns-only", "-n", "krea-ops", "-o", "json").stdout)
    assert egress["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert egress["spec"]["egress"][0]["ports"] == [
        {"port": 53, "protocol": "UDP"},
        {"port": 53, "protocol": "TCP"},
    ]

    described = kubectl("describe", "networkpolicy", "krea-ops-controllers", "-n", "krea-ops")
    lines = [line.strip() for line in described.stdout.splitlines()]
    assert "PodSelector:     app.kubernetes.io/name=krea-ops-controller" in lines
    assert "To Port: 9402/TCP" in lines
    assert "NamespaceSelector: kubernetes.io/metadata.name=monitoring" in lines
    assert "Not affecting egress traffic" in lines
    assert "Policy Types: Ingress" in lines

    # podSelector is a LabelSelector: a strategic merge patch merges its labels.
    kubectl(
        "patch",
        "netpol",
        "krea-ops-controllers",
        "-n",
        "krea-ops",
        "-p",
        '{"spec":{"podSelector":{"matchLabels":{"tier":"control"}}}}',
    )
    got = kubectl(
        "get",
        "netpol",
        "krea-ops-controllers",
        "-n",
        "krea-ops",
        "-o",
        "jsonpath={.spec.podSelector.matchLabels}",
    ).stdout
    assert json.loads(got) == {"app.kubernetes.io/name": "krea-ops-controller", "tier": "control"}
    gone = kubectl("delete", "netpol", "--all", "-n", "krea-ops").stdout
    assert gone.count(" deleted") == 2
    assert kubectl("get", "netpol", "-n", "krea-ops").stderr.strip() == (
        "No resources found in krea-ops namespace."
    )


def test_invalid_network_policy_is_refused_with_the_real_messages(kubectl: Kubectl) -> None:
    bad = """apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: bad, namespace: krea-ops}
spec:
  podSelector: {}
  policyTypes: [Sideways]
  ingress:
  - from: [{}, {ipBlock: {cidr: 10.0.0.0/8}, podSelector: {}}]
    ports: [{port: 70000, protocol: ICMP}, {port: metrics, endPort: 9000}, {port: "9400"}]
"""
    failed = kubectl("apply", "-f", "-", stdin=bad, check=False)
    assert failed.returncode != 0
    assert failed.stderr.splitlines() == [
        'The NetworkPolicy "bad" is invalid: ',
        '* spec.ingress[0].ports[0].protocol: Unsupported value: "ICMP": supported values: '
        '"TCP", "UDP", "SCTP"',
        "* spec.ingress[0].ports[0].port: Invalid value: 70000: must be between 1 and 65535, "
        "inclusive",
        "* spec.ingress[0].ports[1].endPort: Invalid value: 9000: may not be specified when "
        "`port` is non-numeric",
        '* spec.ingress[0].ports[2].port: Invalid value: "9400": must contain at least one '
        "letter (a-z)",
        "* spec.ingress[0].from[0]: Required value: must specify a peer",
        "* spec.ingress[0].from[1]: Forbidden: may not specify both ipBlock and another peer",
        '* spec.policyTypes[0]: Unsupported value: "Sideways": supported values: "Ingress", '
        '"Egress"',
    ]
    # kubectl asks for strict field validation: an unknown field is an error (the server
    # reads the body through the Go struct, k8s.io/api networking/v1).
    typo = bad.replace("  podSelector: {}\n", "  podSelektor: {}\n")
    failed = kubectl("apply", "-f", "-", stdin=typo, check=False)
    assert failed.returncode != 0
    assert (
        'NetworkPolicy in version "v1" cannot be handled as a NetworkPolicy: strict decoding '
        'error: unknown field "spec.podSelektor"'
    ) in failed.stderr
    assert kubectl("get", "netpol", "-n", "krea-ops").stderr.strip().startswith("No resources")


def test_the_official_client_lists_and_watches_network_policies(api: client.ApiClient) -> None:
    networking = client.NetworkingV1Api(api)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "krea-ops"}})
    body = yaml.safe_load(CONTROLLERS_POLICY.read_text())
    start = networking.list_namespaced_network_policy("krea-ops").metadata.resource_version
    networking.create_namespaced_network_policy("krea-ops", body)
    watcher = watch.Watch()
    stream = watcher.stream(
        networking.list_namespaced_network_policy,
        "krea-ops",
        resource_version=start,
        timeout_seconds=30,
    )
    event = next(iter(stream))
    watcher.stop()
    assert event["type"] == "ADDED"
    policy = event["object"]
    assert isinstance(policy, client.V1NetworkPolicy)
    assert policy.spec.pod_selector.match_labels == {
        "app.kubernetes.io/name": "krea-ops-controller"
    }
    assert policy.spec.ingress[0].ports[0].port == 9402
    listed = networking.list_network_policy_for_all_namespaces(
        label_selector="app.kubernetes.io/part-of=krea-ops"
    )
    assert [p.metadata.name for p in listed.items] == ["krea-ops-controllers"]
