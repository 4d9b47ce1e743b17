"""The manifests that run the controllers (deploy/): they render, each controller runs as
its own least-privileged identity in a locked-down pod, the settings are ones krea-ops
reads, the Kueue setup is the one krea-ops assumes, and an API server accepts all of it and
enforces exactly the access each controller's code needs.

``python -m tests.test_deploy_controllers`` rewrites
deploy/prometheus-operator/prometheusrules.yaml from deploy/prometheus/*.yaml.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from krea_ops.kube.cluster import Cluster
from krea_ops.sim.local import LocalApiServer
from tests.conftest import KUBECTL, ROOT, Kubectl, require_binary

DEPLOY = ROOT / "deploy"
NAMESPACE = "krea-ops"
CONTROLLERS = ("burst-taint", "migrate-back", "node-health", "quota-sync")
METRICS_PORT = 9402

Obj = dict[str, Any]

# What each controller's code calls, cluster-wide: (API group, resource, verb). This is the
# authority the ClusterRoles are checked against, from the code paths:
# - nodes: get (runbook/nodes.py read_nodes, kube/writes.py update: not migrate-back, which
#   only lists them), list (pages of /api/v1/nodes), patch (the merge PATCH with
#   resourceVersion of update_step / update);
# - pods: list (GPUs requested per node, a node's pods, a workload's Ready pods), get (an
#   evicted pod re-read until gone: execute.py _gone, burst.py run_move);
# - pods/eviction create (kube/eviction.py), poddisruptionbudgets list (the preflights);
# - jobsets get (the evict preflight reads a gang's JobSet by name);
# - clusterqueues get/list/patch, resourceflavors and cohorts list (quota-sync;
#   Cluster.custom_objects lists, kube/writes.py update GETs then PATCHes);
# - clusterqueues, localqueues, resourceflavors list (migrate-back: where Kueue would
#   admit a moved pod's replacement);
# - events create + patch (kube/events.py: core/v1, a series' count is merge-patched).
EVENTS = {("", "events", "create"), ("", "events", "patch")}
CLUSTER_CALLS: dict[str, set[tuple[str, str, str]]] = {
    "burst-taint": {
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "patch"),
        ("", "pods", "list"),
        *EVENTS,
    },
    "migrate-back": {
        ("", "nodes", "list"),
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods/eviction", "create"),
        ("policy", "poddisruptionbudgets", "list"),
        ("kueue.x-k8s.io", "clusterqueues", "list"),
        ("kueue.x-k8s.io", "localqueues", "list"),
        ("kueue.x-k8s.io", "resourceflavors", "list"),
        *EVENTS,
    },
    "node-health": {
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "patch"),
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods/eviction", "create"),
        ("policy", "poddisruptionbudgets", "list"),
        ("jobset.x-k8s.io", "jobsets", "get"),
        *EVENTS,
    },
    "quota-sync": {
        ("", "nodes", "list"),
        ("kueue.x-k8s.io", "clusterqueues", "get"),
        ("kueue.x-k8s.io", "clusterqueues", "list"),
        ("kueue.x-k8s.io", "clusterqueues", "patch"),
        ("kueue.x-k8s.io", "resourceflavors", "list"),
        ("kueue.x-k8s.io", "cohorts", "list"),
        *EVENTS,
    },
}


def _kustomize(directory: Path) -> list[Obj]:
    if KUBECTL is None:
        pytest.skip("kubectl not installed")
    done = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module")
def base() -> list[Obj]:
    return _kustomize(DEPLOY)


def _one(docs: list[Obj], kind: str, name: str) -> Obj:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def _of(docs: list[Obj], kind: str) -> list[Obj]:
    return [d for d in docs if d["kind"] == kind]


def _grants(role: Obj) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role.get("rules") or ()
        for group in rule.get("apiGroups") or ()
        for resource in rule.get("resources") or ()
        for verb in rule.get("verbs") or ()
    }


# -- rendering -------------------------------------------------------------------------------


def test_base_renders_everything_without_the_operator_kinds(base: list[Obj]) -> None:
    kinds = {d["kind"] for d in base}
    # a cluster without the Prometheus Operator must be able to apply the base
    assert not kinds & {"PodMonitor", "PrometheusRule", "ServiceMonitor"}
    assert _one(base, "Namespace", NAMESPACE)
    assert _one(base, "DaemonSet", "krea-ops-exporter")
    assert _one(base, "ClusterRole", "krea-ops-reader")
    assert _one(base, "ConfigMap", "krea-ops-config")["metadata"]["namespace"] == NAMESPACE
    for name in CONTROLLERS:
        assert _one(base, "Deployment", f"krea-ops-{name}")["metadata"]["namespace"] == NAMESPACE
        assert _one(base, "PodDisruptionBudget", f"krea-ops-{name}")
    assert {d["metadata"]["name"] for d in _of(base, "ClusterQueue")} == {"training", "inference"}
    namespaced = [d for d in base if d["kind"] not in CLUSTER_SCOPED]
    assert all(d["metadata"].get("namespace") for d in namespaced), [
        d["metadata"]["name"] for d in namespaced if not d["metadata"].get("namespace")
    ]


CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "WorkloadPriorityClass",
    "ResourceFlavor",
    "ClusterQueue",
    "Cohort",
}


def test_operator_overlay_adds_only_monitoring(base: list[Obj]) -> None:
    overlay = _kustomize(DEPLOY / "prometheus-operator")
    key = lambda d: (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])  # noqa: E731
    added = {key(d) for d in overlay} - {key(d) for d in base}
    assert added == {
        ("PodMonitor", NAMESPACE, "krea-ops-exporter"),
        ("PodMonitor", NAMESPACE, "krea-ops-controllers"),
        ("PrometheusRule", NAMESPACE, "krea-ops-rules"),
        ("PrometheusRule", NAMESPACE, "krea-ops-controllers-rules"),
        ("PrometheusRule", NAMESPACE, "krea-ops-node-summary"),
    }
    # and everything else is the base, unchanged
    assert [d for d in overlay if key(d) not in added] == base
    monitor = _one(overlay, "PodMonitor", "krea-ops-controllers")
    pods = _one(base, "Deployment", "krea-ops-node-health")["spec"]["template"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pods["metadata"]["labels"].items()
    port = monitor["spec"]["podMetricsEndpoints"][0]["port"]
    assert port in {p["name"] for p in pods["spec"]["containers"][0]["ports"]}


RULE_FILES = ("krea-ops-rules", "krea-ops-controllers-rules", "krea-ops-node-summary")


def test_controller_alert_rules_are_valid_and_fire_as_tested() -> None:
    promtool = require_binary("promtool")
    rules = DEPLOY / "prometheus"
    for args in (
        ["check", "rules", "krea-ops-controllers-rules.yaml"],
        ["test", "rules", "krea-ops-controllers-rules.test.yaml"],
    ):
        done = subprocess.run(
            [promtool, *args], cwd=rules, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_controller_alert_rules_use_the_runners_metrics() -> None:
    """Every krea_ops_* name the controller alerts read is one the runner serves."""
    try:
        from krea_ops.controllers.loop import ControllerMetrics  # type: ignore[import-not-found]
    except ImportError:
        pytest.skip("the controllers' runner (krea_ops/controllers/loop.py) is not here yet")
    registry = ControllerMetrics().registry
    served = set()
    for family in registry.collect():
        served.add(family.name)
        if family.type == "counter":
            served.add(family.name + "_total")
    rules = yaml.safe_load((DEPLOY / "prometheus" / "krea-ops-controllers-rules.yaml").read_text())
    used = {
        name
        for group in rules["groups"]
        for rule in group["rules"]
        for name in re.findall(r"\b(krea_[a-z0-9_]+)", rule["expr"])
    }
    assert sorted(used - served) == []


def test_prometheus_rules_are_the_rule_files() -> None:
    """The PrometheusRules carry exactly the rules promtool checks and tests."""
    path = DEPLOY / "prometheus-operator" / "prometheusrules.yaml"
    assert path.read_text() == prometheus_rules_text(), (
        "stale: run python -m tests.test_deploy_controllers"
    )


# -- RBAC ------------------------------------------------------------------------------------


def test_no_role_grants_a_wildcard_or_secrets(base: list[Obj]) -> None:
    roles = _of(base, "ClusterRole") + _of(base, "Role")
    assert len(roles) == 2 + 2 * len(CONTROLLERS)  # the reader's two, and two per controller
    for role in roles:
        name = role["metadata"]["name"]
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in (rule.get(field) or ()), (name, field, rule)
            assert "secrets" not in rule.get("resources", ()), (name, rule)
            assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(
                rule["verbs"]
            ), (name, rule)


def test_each_controller_has_its_own_identity_and_only_the_calls_its_code_makes(
    base: list[Obj],
) -> None:
    for name in CONTROLLERS:
        full = f"krea-ops-{name}"
        sa = _one(base, "ServiceAccount", full)
        assert sa["metadata"]["namespace"] == NAMESPACE
        subject = [{"kind": "ServiceAccount", "name": full, "namespace": NAMESPACE}]
        for kind, binding in (("ClusterRole", "ClusterRoleBinding"), ("Role", "RoleBinding")):
            bound = _one(base, binding, full)
            assert bound["subjects"] == subject, (binding, full)
            assert bound["roleRef"] == {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": kind,
                "name": full,
            }
        cluster_role = _one(base, "ClusterRole", full)
        assert _grants(cluster_role) == CLUSTER_CALLS[name], name
        assert not any(r.get("resourceNames") for r in cluster_role["rules"])
        # in krea-ops: its own Lease, the state ConfigMap, and where Prometheus is
        role = _one(base, "Role", full)
        assert role["metadata"]["namespace"] == NAMESPACE
        by_target = {
            (g, r, v, tuple(rule.get("resourceNames") or ()))
            for rule in role["rules"]
            for g in rule["apiGroups"]
            for r in rule["resources"]
            for v in rule["verbs"]
        }
        lease = ("coordination.k8s.io", "leases")
        assert by_target == {
            (*lease, "get", (full,)),
            (*lease, "update", (full,)),
            (*lease, "create", ()),  # create cannot be limited by name
            ("", "configmaps", "get", ("krea-ops-config", "krea-ops-controller-state")),
            ("", "configmaps", "patch", ("krea-ops-controller-state",)),
            ("", "configmaps", "create", ()),
        }
        pod = _one(base, "Deployment", full)["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == full


# -- the pods --------------------------------------------------------------------------------


def test_deployments_run_two_locked_down_replicas(base: list[Obj]) -> None:
    config = _one(base, "ConfigMap", "krea-ops-config")
    for name in CONTROLLERS:
        deployment = _one(base, "Deployment", f"krea-ops-{name}")
        spec = deployment["spec"]
        assert spec["replicas"] == 2
        pod = spec["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 65532
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
        # the leader and its stand-in on different nodes
        (spread,) = pod["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        assert spread["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        assert spread["podAffinityTerm"]["labelSelector"] == spec["selector"]
        (container,) = pod["containers"]
        sc = container["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        args = container["args"]
        assert args[:3] == ["controller", "run", name]
        assert f"--metrics-port={METRICS_PORT}" in args
        # reachable by Prometheus and the kubelet: not the loopback default
        assert "--metrics-address=$(POD_IP)" in args
        assert not any(a in ("--dry-run", "--once") for a in args)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"metrics": METRICS_PORT}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}, probe
        resources = container["resources"]
        assert resources["requests"]["cpu"] and resources["requests"]["memory"]
        assert resources["limits"]["memory"]
        env = {e["name"]: e for e in container["env"]}
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        # every path it writes is a volume: the settings file is the ConfigMap's key
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        settings_file = Path(env["KREA_OPS_CONFIG"]["value"])
        config_volume = volumes[mounts[str(settings_file.parent)]]["configMap"]
        assert config_volume["name"] == "krea-ops-config"
        assert settings_file.name in config["data"]
        for writable in (Path(env["KREA_OPS_AUDIT_LOG"]["value"]).parent, Path("/tmp")):
            assert "emptyDir" in volumes[mounts[str(writable)]], writable
        # its budget covers exactly its pods and lets one go at a time
        pdb = _one(base, "PodDisruptionBudget", f"krea-ops-{name}")["spec"]
        assert pdb["maxUnavailable"] == 1
        assert pdb["selector"] == spec["selector"]
        assert (
            spec["selector"]["matchLabels"].items()
            <= spec["template"]["metadata"]["labels"].items()
        )
    # no Deployment (nor its budget) selects another controller's pods
    for name in CONTROLLERS:
        selector = _one(base, "Deployment", f"krea-ops-{name}")["spec"]["selector"]
        for other in CONTROLLERS:
            labels = _one(base, "Deployment", f"krea-ops-{other}")["spec"]["template"]
            mine = selector["matchLabels"].items() <= labels["metadata"]["labels"].items()
            assert mine is (other == name), (name, other)


def test_config_map_settings_read_as_krea_ops_reads_them(base: list[Obj], tmp_path: Path) -> None:
    """The settings file in krea-ops-config loads through krea-ops' own loader, and its
    prometheusURL is one krea-ops accepts; the hot-GPU alert uses the same threshold."""
    from krea_ops.settings import Settings, check_url, load_settings

    data = _one(base, "ConfigMap", "krea-ops-config")["data"]
    check_url(data["prometheusURL"], "prometheusURL")
    settings = yaml.safe_load(data["config.yaml"])
    known = {f.name for f in dataclasses.fields(Settings)}
    assert set(settings) - known == set(), "not settings of krea-ops"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in settings.items() if k in known}))
    loaded = load_settings(env={"KREA_OPS_CONFIG": str(path)})
    for key in set(settings) & known:
        assert getattr(loaded, key) == settings[key], key
    rules = yaml.safe_load((DEPLOY / "prometheus" / "krea-ops-rules.yaml").read_text())
    (hot,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "KreaGpuHot"]
    assert hot["expr"] == f"krea_gpu_temperature_celsius >= {loaded.health_hot_c:g}"


def test_every_setting_in_the_config_map_is_one_the_controllers_read(
    base: list[Obj], tmp_path: Path
) -> None:
    from krea_ops.settings import Settings, load_settings

    data = _one(base, "ConfigMap", "krea-ops-config")["data"]
    settings = yaml.safe_load(data["config.yaml"])
    assert set(settings) <= {f.name for f in dataclasses.fields(Settings)}
    path = tmp_path / "config.yaml"
    path.write_text(data["config.yaml"])
    loaded = load_settings(env={"KREA_OPS_CONFIG": str(path)})
    assert {key: getattr(loaded, key) for key in settings} == settings


def test_node_health_settings_are_its_config_with_the_issues_limits(base: list[Obj]) -> None:
    """The node_health_* settings are node-health's own (NodeHealthConfig), and say: blast
    cap max(1 node, 2 %), veto at 3 nodes or 1 % within 60 s."""
    from krea_ops.controllers.node_health import NodeHealthConfig

    data = _one(base, "ConfigMap", "krea-ops-config")["data"]
    prefix = "node_health_"
    section = {
        key.removeprefix(prefix): value
        for key, value in yaml.safe_load(data["config.yaml"]).items()
        if key.startswith(prefix)
    }
    config = NodeHealthConfig.from_mapping(section)
    assert {key: getattr(config, key) for key in section} == section
    assert [config.cap(n) for n in (10, 50, 100, 1500)] == [1, 1, 2, 30]
    assert (config.veto_nodes, config.veto_share, config.veto_window_s) == (3, 0.01, 60.0)


# -- Kueue and the descheduler ----------------------------------------------------------------


def test_kueue_setup_is_the_one_krea_ops_assumes(base: list[Obj]) -> None:
    from krea_ops.sim.world.actor import WorldConfig
    from krea_ops.sim.world.kueue import kueue_objects

    world = {(d["kind"], d["metadata"]["name"]): d for d in kueue_objects(WorldConfig())}
    for flavor in _of(base, "ResourceFlavor"):
        name = flavor["metadata"]["name"]
        assert flavor["spec"] == world[("ResourceFlavor", name)]["spec"], name
    priorities = {d["metadata"]["name"]: d["value"] for d in _of(base, "WorkloadPriorityClass")}
    assert priorities["training"] > priorities["inference"]
    queues = {d["metadata"]["name"]: d["spec"] for d in _of(base, "ClusterQueue")}
    assert queues["training"]["cohortName"] == queues["inference"]["cohortName"]
    # training takes back what inference borrowed; inference never preempts to borrow
    assert queues["training"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert queues["inference"]["preemption"]["borrowWithinCohort"] == {"policy": "Never"}
    for name, spec in queues.items():
        (group,) = spec["resourceGroups"]
        assert group["coveredResources"] == ["nvidia.com/gpu"], name
    flavors = [f["name"] for f in queues["inference"]["resourceGroups"][0]["flavors"]]
    assert flavors == ["h200", "burst"]  # in-cluster first, offsite when it must
    local = {
        (d["metadata"]["namespace"], d["spec"]["clusterQueue"]) for d in _of(base, "LocalQueue")
    }
    assert local == {("training", "training"), ("inference", "inference")}


def test_descheduler_policy_reads_only_the_burst_taint() -> None:
    from krea_ops.burst import INFERENCE_SELECTOR

    policy = yaml.safe_load((DEPLOY / "descheduler" / "policy.yaml").read_text())
    assert policy["apiVersion"] == "descheduler/v1alpha2"
    assert policy["kind"] == "DeschedulerPolicy"
    (profile,) = policy["profiles"]
    assert profile["plugins"]["deschedule"]["enabled"] == ["RemovePodsViolatingNodeTaints"]
    args = {c["name"]: c["args"] for c in profile["pluginConfig"]}
    assert args["RemovePodsViolatingNodeTaints"]["includedTaints"] == [
        "krea.ai/burst-disabled=true"
    ]
    evictor = args["DefaultEvictor"]
    assert evictor["nodeFit"] is True
    key, value = INFERENCE_SELECTOR.split("=")
    assert evictor["labelSelector"] == {"matchLabels": {key: value}}
    assert policy["maxNoOfPodsToEvictTotal"] >= 1


# -- against an API server ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def applied(base: list[Obj], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """An API server with ``kubectl apply`` of the base done (twice)."""
    if KUBECTL is None:
        pytest.skip("kubectl not installed")
    root = tmp_path_factory.mktemp("deploy-apply")
    server = LocalApiServer(root / "state")
    try:
        kubectl = Kubectl(server.kubeconfig, root / "home")
        served = set()
        listed = kubectl("api-resources", "-o", "wide", "--no-headers").stdout
        for line in listed.splitlines():
            fields = line.split()
            # NAME [SHORTNAMES] APIVERSION NAMESPACED KIND VERBS...
            namespaced = next(i for i, f in enumerate(fields) if f in ("true", "false"))
            served.add((fields[namespaced - 1], fields[namespaced + 1]))
        kinds = {(d["apiVersion"], d["kind"]) for d in base}
        assert kinds <= served, kinds - served
        docs = yaml.safe_dump_all(base)
        first = kubectl("apply", "-f", "-", stdin=docs, timeout=120)
        assert first.stdout.count(" created\n") == len(base), first.stdout
        # again: nothing new. kubectl always patches a PodDisruptionBudget's selector (its
        # patchStrategy is replace, so the computed patch is never empty): "configured".
        again = kubectl("apply", "-f", "-", stdin=docs, timeout=120).stdout
        assert " created" not in again, again
        changed = {line.split()[0] for line in again.splitlines() if line.endswith(" configured")}
        assert {c.split("/")[0] for c in changed} <= {"poddisruptionbudget.policy"}, again
        assert "networkpolicy.networking.k8s.io/krea-ops-controllers unchanged" in again
        with server.api_client() as api:
            yield Cluster(api, timeout_s=30)
    finally:
        server.close()


def _allowed(cluster: Cluster, controller: str | None, attributes: Obj) -> bool:
    """Whether controller's service account (None: a member of group krea-ops:readers)
    may make the call ``attributes`` describe."""
    if controller is None:
        who: Obj = {"user": "someone", "groups": ["krea-ops:readers", "system:authenticated"]}
    else:
        who = {
            "user": f"system:serviceaccount:{NAMESPACE}:krea-ops-{controller}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{NAMESPACE}",
                "system:authenticated",
            ],
        }
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {**who, "resourceAttributes": attributes},
    }
    answer = cluster.request(
        "review", "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review
    )
    assert answer.ok and answer.body is not None, (answer.status, answer.body)
    return bool(answer.body["status"]["allowed"])


def _attributes(group: str, resource: str, verb: str, **more: str) -> Obj:
    name, _, sub = resource.partition("/")
    out: Obj = {"group": group, "resource": name, "verb": verb, **more}
    if sub:
        out["subresource"] = sub
    return out


# Calls every controller's code makes in its own namespace (controllers/leader.py, loop.py,
# telemetry/source.py), and the ones it must not be able to make there.
OWN = [
    ("coordination.k8s.io", "leases", "create", None),
    ("coordination.k8s.io", "leases", "get", "{lease}"),
    ("coordination.k8s.io", "leases", "update", "{lease}"),
    ("", "configmaps", "create", None),
    ("", "configmaps", "get", "krea-ops-controller-state"),
    ("", "configmaps", "patch", "krea-ops-controller-state"),
    ("", "configmaps", "get", "krea-ops-config"),
]
CLUSTER_RESOURCES = {"nodes", "clusterqueues", "resourceflavors"}
NOT_OWN = [
    ("coordination.k8s.io", "leases", "update", "krea-ops-{other}"),
    ("", "configmaps", "patch", "krea-ops-config"),
    ("", "configmaps", "get", "some-other-config"),
    ("", "secrets", "get", "any"),
    ("", "pods", "delete", "any"),
    ("", "nodes", "delete", "any"),
    ("apps", "deployments", "update", "krea-ops-node-health"),
]


def test_the_api_server_accepts_the_base_and_enforces_each_controllers_access(
    applied: Cluster,
) -> None:
    cluster = applied
    # what was applied is there, as written (the Kueue objects passed the CRDs' schemas)
    cq = cluster.get("get cq", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/inference")
    assert [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]] == ["h200", "burst"]
    deployment = cluster.get(
        "get deployment",
        f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/krea-ops-node-health",
    )
    assert deployment["spec"]["replicas"] == 2
    for name, port in (("krea-ops-controllers", METRICS_PORT), ("krea-ops-exporter", 9400)):
        policy = cluster.get(
            "get networkpolicy",
            f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies/{name}",
        )
        assert policy["spec"]["policyTypes"] == ["Ingress"], name
        (rule,) = policy["spec"]["ingress"]
        assert rule["ports"] == [{"port": port, "protocol": "TCP"}], name
        (peer,) = rule["from"]
        assert peer == {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
        }, name
    every = {call for calls in CLUSTER_CALLS.values() for call in calls}
    for name in CONTROLLERS:
        other = next(c for c in CONTROLLERS if c != name)
        for group, resource, verb in sorted(every):
            where = {} if resource in CLUSTER_RESOURCES else {"namespace": "default"}
            attributes = _attributes(group, resource, verb, **where)
            expected = (group, resource, verb) in CLUSTER_CALLS[name]
            assert _allowed(cluster, name, attributes) is expected, (name, attributes)
        for calls, expected in ((OWN, True), (NOT_OWN, False)):
            for group, resource, verb, target in calls:
                more = {"namespace": NAMESPACE}
                if target:
                    more["name"] = target.format(lease=f"krea-ops-{name}", other=other)
                attributes = _attributes(group, resource, verb, **more)
                assert _allowed(cluster, name, attributes) is expected, (name, attributes)


def test_readers_can_see_who_leads_and_change_nothing(applied: Cluster) -> None:
    """``krea-ops controller status`` reads each Lease and the state ConfigMap."""
    cluster = applied
    for name in CONTROLLERS:
        lease = _attributes(
            "coordination.k8s.io", "leases", "get", namespace=NAMESPACE, name=f"krea-ops-{name}"
        )
        assert _allowed(cluster, None, lease)
        assert not _allowed(cluster, None, {**lease, "verb": "update"})
    state = _attributes(
        "", "configmaps", "get", namespace=NAMESPACE, name="krea-ops-controller-state"
    )
    assert _allowed(cluster, None, state)
    assert not _allowed(cluster, None, {**state, "verb": "patch"})
    assert not _allowed(cluster, None, {**state, "name": "another"})


@contextlib.contextmanager
def _own_cluster(admin: Cluster, controller: str) -> Iterator[Cluster]:
    """A client that calls as ``controller``'s service account, with a token the API
    server issues for it (TokenRequest), as the kubelet mounts one in its pod."""
    from kubernetes import client

    token = admin.request(
        "token",
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/krea-ops-{controller}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert token.ok and token.body is not None, token.body
    config = client.Configuration()
    config.host = admin.api.configuration.host
    config.ssl_ca_cert = admin.api.configuration.ssl_ca_cert
    config.api_key = {"authorization": f"Bearer {token.body['status']['token']}"}
    with client.ApiClient(config) as api:
        yield Cluster(api, timeout_s=30)


def test_a_controllers_own_token_gets_exactly_its_access(applied: Cluster) -> None:
    """With node-health's own service-account token (as in its pod): it takes its Lease,
    cordons a node; writing a ClusterQueue or deleting a pod is refused with 403."""
    cluster = applied
    create_node = cluster.request(
        "node", "POST", "/api/v1/nodes", body={"metadata": {"name": "gpu-node-000"}}
    )
    assert create_node.ok
    with _own_cluster(cluster, "node-health") as own:
        lease = own.request(
            "lease",
            "POST",
            f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases",
            body={
                "metadata": {"name": "krea-ops-node-health"},
                "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15},
            },
        )
        assert lease.status == 201, lease.body
        node = own.get("node", "/api/v1/nodes/gpu-node-000")
        cordon = own.request(
            "cordon",
            "PATCH",
            "/api/v1/nodes/gpu-node-000",
            body={
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"unschedulable": True},
            },
            content_type="application/merge-patch+json",
        )
        assert cordon.status == 200, cordon.body
        refused = [
            own.request(
                "quota",
                "PATCH",
                "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/training",
                body={"spec": {"stopPolicy": "Hold"}},
                content_type="application/merge-patch+json",
            ),
            own.request("delete", "DELETE", "/api/v1/namespaces/default/pods/any"),
            own.request(
                "other lease",
                "GET",
                f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/krea-ops-quota-sync",
            ),
        ]
        assert [a.status for a in refused] == [403, 403, 403], [a.body for a in refused]


# -- the PrometheusRules, generated ------------------------------------------------------------


class _Block(str):
    pass


def _block(dumper: yaml.SafeDumper, text: _Block) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(text), style="|")


def _blocks(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _blocks(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_blocks(v) for v in value]
    if isinstance(value, str) and "\n" in value:
        return _Block(value)
    return value


def prometheus_rules_text() -> str:
    """deploy/prometheus-operator/prometheusrules.yaml: each rule file of deploy/prometheus
    as a PrometheusRule of the same groups."""
    dumper = type("Dumper", (yaml.SafeDumper,), {})
    dumper.add_representer(_Block, _block)
    docs = []
    for name in RULE_FILES:
        groups = yaml.safe_load((DEPLOY / "prometheus" / f"{name}.yaml").read_text())["groups"]
        docs.append(
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PrometheusRule",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": {
                        "app.kubernetes.io/name": "krea-ops",
                        "app.kubernetes.io/part-of": "krea-ops",
                    },
                },
                "spec": {"groups": _blocks(groups)},
            }
        )
    head = (
        "# Generated from deploy/prometheus/{krea-ops-rules,krea-ops-controllers-rules,\n"
        "# krea-ops-node-summary}.yaml"
        " by `python -m tests.test_deploy_controllers`; edit those, then run that.\n"
        "# Your Prometheus' ruleSelector must match these labels (kube-prometheus-stack selects\n"
        "# release: <its release name> unless ruleSelectorNilUsesHelmValues is false).\n"
    )
    body = yaml.dump_all(docs, Dumper=dumper, sort_keys=False, allow_unicode=True, width=1000)
    return head + body


if __name__ == "__main__":
    out = DEPLOY / "prometheus-operator" / "prometheusrules.yaml"
    out.write_text(prometheus_rules_text())
    print(f"wrote {out}")


def test_node_health_with_its_own_token_quarantines_a_dead_node(applied: Cluster) -> None:
    """node-health's pass, read to execution, as its own service account with the RBAC of
    deploy/: a node NotReady for 10 minutes is cordoned, tainted and drained (a gang's
    JobSet read, budgets listed, pods evicted, Events written), nothing refused."""
    from krea_ops.controllers.base import Inputs
    from krea_ops.controllers.node_health import NodeHealth
    from krea_ops.health import HealthPolicy
    from krea_ops.kube.times import rfc3339
    from krea_ops.runbook.execute import execute
    from tests.runbook.conftest import pod_names, pod_on

    admin = applied
    dead = "nh-node-002"
    for i in range(8):
        name = f"nh-node-{i:03d}"
        made = admin.request("node", "POST", "/api/v1/nodes", body={"metadata": {"name": name}})
        assert made.ok, made.body
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
        if name == dead:
            ready = {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "lastTransitionTime": rfc3339(time.time() - 600),
            }
        status = admin.request(
            "status",
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            body={
                "status": {
                    "capacity": {"nvidia.com/gpu": "8"},
                    "allocatable": {"nvidia.com/gpu": "8"},
                    "conditions": [ready],
                }
            },
            content_type="application/merge-patch+json",
        )
        assert status.ok, status.body
    jobset = admin.request(
        "jobset",
        "POST",
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
        body=JOBSET,
    )
    assert jobset.ok, jobset.body
    pod_on(admin, dead, "web-0", labels={"app": "web"})
    pod_on(
        admin,
        dead,
        "run-1-workers-0-0",
        labels={"jobset.sigs.k8s.io/jobset-name": "run-1"},
        owned_by=("Job", "run-1-workers-0"),
    )

    with _own_cluster(admin, "node-health") as own:
        user = f"system:serviceaccount:{NAMESPACE}:krea-ops-node-health"
        controller = NodeHealth()
        inputs = Inputs(cluster=own, source=None, policy=HealthPolicy(), user=user)
        snapshot = controller.read(inputs, time.time())
        assert snapshot.evict.nodes == (dead,)
        assert {k: g.status for k, g in snapshot.evict.gangs.items()} == {("default", "run-1"): 200}
        decision = controller.decide(snapshot, time.time(), {})
        assert len(decision.plans) == 1, (decision.skipped, decision.alerts)
        (plan,) = decision.plans
        result = execute(own, plan)
        assert result.status == "done", result
    node = admin.get("node", f"/api/v1/nodes/{dead}")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["krea.ai/evicted-by"] == user
    assert pod_names(admin, dead) == []
    events = admin.get("events", "/api/v1/namespaces/default/events")["items"]
    assert {e["reason"] for e in events if e["involvedObject"]["name"] == dead} >= {
        "Cordoned",
        "Drained",
    }


JOBSET: Obj = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "run-1"},
    "spec": {
        # a rank evicted fails its Job (backoffLimit 0) and the JobSet restarts the gang
        "failurePolicy": {"maxRestarts": 3},
        "replicatedJobs": [
            {
                "name": "workers",
                "replicas": 1,
                "template": {
                    "spec": {
                        "backoffLimit": 0,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "c", "image": "img:1"}],
                            }
                        },
                    }
                },
            }
        ],
    },
}
