"""The manifests that run the controllers (deploy/): they render, each controller runs as
its own least-privileged identity in a locked-down pod, the settings are ones krea-ops
reads, the Kueue setup is the one krea-ops assumes, and an API server accepts all of it and
enforces exactly the access each controller's code needs: each controller makes a pass that
acts with its own service-account token, every request it makes is one its roles grant,
every grant it does not use is named with the code that needs it, and a grant taken away
is refused with 403.

``python -m tests.test_deploy_controllers`` rewrites
deploy/prometheus-operator/prometheusrules.yaml from deploy/prometheus/*.yaml.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from krea_ops.kube.cluster import Cluster
from krea_ops.kube.watch import WatchedCluster
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import KUBECTL, ROOT, Kubectl, require_binary, wait_for

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
# - jobsets get (the evict preflight reads a gang's JobSet by name), patch (node-health's
#   planned swap's checkpoint request: runbook/training.py build_checkpoint_request,
#   kube/writes.py update);
# - node-health's restart recorder (controllers/restarts.py): jobsets list and pods list
#   (training.gangs), pods/log get (rank 0's last lines, a failed pod's last words), events
#   list (the JobSet controller's restart Events: when, and which child Job failed first);
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
        ("", "nodes", "watch"),
        ("", "nodes", "patch"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        *EVENTS,
    },
    "migrate-back": {
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods/eviction", "create"),
        ("policy", "poddisruptionbudgets", "list"),
        ("kueue.x-k8s.io", "clusterqueues", "list"),
        ("kueue.x-k8s.io", "clusterqueues", "watch"),
        ("kueue.x-k8s.io", "localqueues", "list"),
        ("kueue.x-k8s.io", "localqueues", "watch"),
        ("kueue.x-k8s.io", "resourceflavors", "list"),
        ("kueue.x-k8s.io", "resourceflavors", "watch"),
        *EVENTS,
    },
    "node-health": {
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        ("", "nodes", "patch"),
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods/eviction", "create"),
        ("policy", "poddisruptionbudgets", "list"),
        ("jobset.x-k8s.io", "jobsets", "get"),
        ("jobset.x-k8s.io", "jobsets", "list"),
        ("jobset.x-k8s.io", "jobsets", "watch"),
        ("jobset.x-k8s.io", "jobsets", "patch"),
        ("", "pods/log", "get"),
        ("", "events", "list"),
        # the repair ladder: is the validation PriorityClass there
        ("scheduling.k8s.io", "priorityclasses", "get"),
        *EVENTS,
    },
    "quota-sync": {
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        ("kueue.x-k8s.io", "clusterqueues", "get"),
        ("kueue.x-k8s.io", "clusterqueues", "list"),
        ("kueue.x-k8s.io", "clusterqueues", "watch"),
        ("kueue.x-k8s.io", "clusterqueues", "patch"),
        ("kueue.x-k8s.io", "resourceflavors", "list"),
        ("kueue.x-k8s.io", "resourceflavors", "watch"),
        ("kueue.x-k8s.io", "cohorts", "list"),
        ("kueue.x-k8s.io", "cohorts", "watch"),
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
    }
    # and everything else is the base, unchanged
    assert [d for d in overlay if key(d) not in added] == base
    monitor = _one(overlay, "PodMonitor", "krea-ops-controllers")
    pods = _one(base, "Deployment", "krea-ops-node-health")["spec"]["template"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pods["metadata"]["labels"].items()
    port = monitor["spec"]["podMetricsEndpoints"][0]["port"]
    assert port in {p["name"] for p in pods["spec"]["containers"][0]["ports"]}


RULE_FILES = ("krea-ops-rules", "krea-ops-controllers-rules")


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
            # node-health's validation Jobs (the repair ladder), in krea-ops only
            *(
                {
                    ("batch", "jobs", "create", ()),
                    ("batch", "jobs", "list", ()),
                    ("batch", "jobs", "watch", ()),
                }
                if name == "node-health"
                else set()
            ),
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
    from krea_ops.sim.common.actor import WorldConfig
    from krea_ops.sim.standins.kueue import kueue_objects

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


@dataclasses.dataclass(frozen=True)
class Deployed:
    """The API server ``applied`` set up: an admin client, a kubectl for it."""

    cluster: Cluster
    kubectl: Kubectl


@pytest.fixture(scope="module")
def applied(deployed: Deployed) -> Cluster:
    return deployed.cluster


@pytest.fixture(scope="module")
def deployed(
    base: list[Obj], tmp_path_factory: pytest.TempPathFactory, control_plane: str
) -> Iterator[Deployed]:
    """An API server with ``kubectl apply`` of the base done (twice): the embedded one, or
    the upstream control plane (Kueue's CRDs and webhooks in place, nothing of deploy/
    applied before the test's kubectl)."""
    if KUBECTL is None:
        pytest.skip("kubectl not installed")
    root = tmp_path_factory.mktemp("deploy-apply")
    server: Any
    if control_plane == "upstream":
        from krea_ops.sim.upstream.controlplane import UpstreamControlPlane

        server = UpstreamControlPlane(root / "state", kueue_setup=False)
    else:
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
            yield Deployed(Cluster(api, timeout_s=30), kubectl)
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
def _own_cluster(admin: Cluster, controller: str, account: str | None = None) -> Iterator[Cluster]:
    """A client that calls as ``controller``'s service account (or ``account``), with a
    token the API server issues for it (TokenRequest), as the kubelet mounts one in its pod."""
    from kubernetes import client

    account = account or f"krea-ops-{controller}"
    token = admin.request(
        "token",
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert token.ok and token.body is not None, token.body
    config = client.Configuration()
    config.host = admin.api.configuration.host
    config.ssl_ca_cert = admin.api.configuration.ssl_ca_cert
    config.api_key = {"authorization": f"Bearer {token.body['status']['token']}"}
    with client.ApiClient(config) as api:
        yield Cluster(api, timeout_s=30)


def test_a_controllers_own_token_gets_exactly_its_access(
    applied: Cluster, scratch: list[str]
) -> None:
    """With node-health's own service-account token (as in its pod): it takes its Lease,
    cordons a node; writing a ClusterQueue or deleting a pod is refused with 403. (The node
    is registered as a kubelet does it and left as the node lifecycle controller leaves it:
    the cordon's resourceVersion would otherwise race that controller's own update.)"""
    cluster = applied
    _gpu_node(cluster, scratch, "gpu-node-000")
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


OPERATOR_CRDS = (
    "monitoring.coreos.com_podmonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
)


def test_the_operator_overlay_applies_once_the_operators_crds_are_there(
    deployed: Deployed,
) -> None:
    """``kubectl apply -k deploy/prometheus-operator`` on a cluster with the base applied,
    once the Prometheus Operator's CRDs are (those of the pinned release the upstream build
    carries, applied server-side): its PodMonitors and PrometheusRules are created and kept
    as written (nothing pruned or refused by the CRDs' schemas), nothing else is created,
    and applying it again changes nothing. The embedded server serves these CRDs as it
    serves any (krea_ops/sim/apiserver/validation.py:
    schema validation, defaulting, pruning)."""
    from tests.conftest import require_upstream

    crd_dir = require_upstream() / "manifests" / "prometheus-operator" / "crd"
    crds = sorted(crd_dir.glob("*.yaml"))
    assert {p.name for p in crds} >= set(OPERATOR_CRDS), crds
    kubectl, cluster = deployed.kubectl, deployed.cluster
    files = [arg for path in crds for arg in ("-f", str(path))]
    kubectl("apply", "--server-side", "--field-manager=krea-ops-tests", *files, timeout=120)

    def established() -> bool:
        for path in crds:
            name = yaml.safe_load(path.read_text())["metadata"]["name"]
            crd = cluster.get(
                "crd", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            )
            conditions = (crd.get("status") or {}).get("conditions") or ()
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    wait_for(established, 60)
    overlay = DEPLOY / "prometheus-operator"
    first = kubectl("apply", "-k", str(overlay), timeout=120).stdout
    created = {line.split()[0] for line in first.splitlines() if line.endswith(" created")}
    assert created == {
        "podmonitor.monitoring.coreos.com/krea-ops-exporter",
        "podmonitor.monitoring.coreos.com/krea-ops-controllers",
        "prometheusrule.monitoring.coreos.com/krea-ops-rules",
        "prometheusrule.monitoring.coreos.com/krea-ops-controllers-rules",
    }, first
    again = kubectl("apply", "-k", str(overlay), timeout=120).stdout
    assert " created" not in again, again
    changed = {line.split()[0] for line in again.splitlines() if line.endswith(" configured")}
    assert {c.split("/")[0] for c in changed} <= {"poddisruptionbudget.policy"}, again
    plural = {"PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules"}
    for doc in _kustomize(overlay):
        if doc["kind"] not in plural:
            continue
        name = doc["metadata"]["name"]
        stored = cluster.get(
            "get",
            f"/apis/monitoring.coreos.com/v1/namespaces/{NAMESPACE}/{plural[doc['kind']]}/{name}",
        )
        assert _kept(doc["spec"], stored["spec"]), (doc["kind"], name)
        assert stored["metadata"]["labels"] == doc["metadata"]["labels"]


def _kept(written: Any, stored: Any) -> bool:
    """Everything ``written`` says is in ``stored`` as written (defaults may add more)."""
    if isinstance(written, dict):
        return isinstance(stored, dict) and all(
            k in stored and _kept(v, stored[k]) for k, v in written.items()
        )
    if isinstance(written, list):
        return (
            isinstance(stored, list)
            and len(written) == len(stored)
            and all(_kept(w, s) for w, s in zip(written, stored, strict=True))
        )
    return bool(written == stored)


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
        "# Generated from deploy/prometheus/{krea-ops-rules,krea-ops-controllers-rules}.yaml"
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


# -- each controller's pass, as its own service account ------------------------------------------
#
# One pass of each controller through the runner (its Lease acquired first, released after,
# as a replica does), on a client holding the controller's own service-account token, over
# objects that make it act. Every request it makes is recorded and mapped to the RBAC
# (group, resource, verb) the API server checks: each must be one its roles grant, and each
# grant its pass did not use must be named below with the code path that needs it.

Atom = tuple[str, str, str, str | None]  # (group, resource, verb, resourceName; None: any)
# /api, /api/v1, /apis, /apis/GROUP, /apis/GROUP/VERSION: discovery (Cluster.custom_version),
# granted to every authenticated user by the default ClusterRole system:discovery
DISCOVERY = re.compile(r"^/apis?(/[^/]+){0,2}$")
STATE_CREATE: Atom = ("", "configmaps", "create", None)
STATE_PATCH: Atom = ("", "configmaps", "patch", "krea-ops-controller-state")
# Whether the state ConfigMap is there before a controller's pass: its pass then patches
# it, else creates it (loop.write_state); between them, both calls are made with a token.
STATE_THERE = {"burst-taint": False, "migrate-back": True, "node-health": True, "quota-sync": False}
FIRST_PASS_ONLY = "loop.write_state creates the state ConfigMap on the first pass ever"
LATER_PASSES = "loop.write_state merge-patches the state ConfigMap once it exists"
# kube/events.py: an Event recorded again within one run (same reason about the same object)
# is merge-patched with its series count; none of the passes below repeats one.
EVENT_SERIES: Atom = ("", "events", "patch", None)
SERIES = "kube/events.py EventRecorder: a repeated Event's series count is merge-patched"
# Grants a controller's pass below does not use, and the code that needs each.
NOT_IN_THE_PASS: dict[str, dict[Atom, str]] = {
    "burst-taint": {STATE_PATCH: LATER_PASSES, EVENT_SERIES: SERIES},
    "migrate-back": {STATE_CREATE: FIRST_PASS_ONLY, EVENT_SERIES: SERIES},
    "node-health": {
        STATE_CREATE: FIRST_PASS_ONLY,
        EVENT_SERIES: SERIES,
        ("jobset.x-k8s.io", "jobsets", "patch", None): (
            "runbook/training.py build_checkpoint_request: a planned swap's checkpoint "
            "request (a gang's node SUSPECT with a slow burn)"
        ),
        ("", "pods/log", "get", None): "controllers/restarts.py reads rank 0's log while a "
        "training gang runs, and a failed pod's",
        ("", "events", "list", None): "controllers/restarts.py lists a JobSet's Events "
        "after it restarted",
        ("batch", "jobs", "create", None): "controllers/ladder.py starts a validation Job on "
        "a node it quarantined, after the cool-down",
    },
    "quota-sync": {STATE_PATCH: LATER_PASSES, EVENT_SERIES: SERIES},
}


@dataclasses.dataclass(frozen=True)
class ApiCall:
    """One request as RBAC sees it. ``group`` None: a non-resource URL (``resource`` is
    the path)."""

    method: str
    path: str
    status: int
    group: str | None
    resource: str
    verb: str
    namespace: str | None = None
    name: str | None = None


def api_call(method: str, path: str, query: Obj | None, status: int) -> ApiCall:
    """``method path`` as the API server's request-info resolver reads it: GET on a
    collection is list (watch=true: watch), on an object get; POST create, PUT update,
    PATCH patch, DELETE delete (on a collection: deletecollection); a subresource is
    ``resource/sub`` (pods/eviction)."""
    from urllib.parse import unquote

    parts = [unquote(p) for p in path.split("?")[0].strip("/").split("/")]
    group, rest = None, []
    if parts[0] == "api" and len(parts) > 2:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    if group is None:
        return ApiCall(method, path, status, None, path, method.lower())
    namespace = None
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    name = rest[1] if len(rest) > 1 else None
    if method == "GET":
        verb = "get" if name else "watch" if str((query or {}).get("watch")) == "true" else "list"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]
    return ApiCall(method, path, status, group, resource, verb, namespace, name)


def test_requests_map_to_the_rbac_attributes_the_api_server_checks() -> None:
    nodes = api_call("GET", "/api/v1/nodes", {"limit": 500}, 200)
    assert (nodes.group, nodes.resource, nodes.verb, nodes.name) == ("", "nodes", "list", None)
    assert api_call("GET", "/api/v1/nodes", {"watch": "true"}, 200).verb == "watch"
    evict = api_call("POST", "/api/v1/namespaces/a/pods/p-0/eviction", None, 201)
    assert (evict.group, evict.resource, evict.verb, evict.namespace, evict.name) == (
        "", "pods/eviction", "create", "a", "p-0",
    )  # fmt: skip
    cq = api_call("PATCH", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/training", None, 200)
    assert (cq.group, cq.resource, cq.verb, cq.name) == (
        "kueue.x-k8s.io", "clusterqueues", "patch", "training",
    )  # fmt: skip
    lease = api_call(
        "PUT", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/x", None, 200
    )
    assert (lease.resource, lease.verb, lease.namespace) == ("leases", "update", NAMESPACE)
    ns = api_call("GET", "/api/v1/namespaces/default", None, 200)
    assert (ns.resource, ns.verb, ns.name) == ("namespaces", "get", "default")
    assert api_call("DELETE", "/api/v1/namespaces/a/pods", None, 200).verb == "deletecollection"
    assert api_call("GET", "/apis/kueue.x-k8s.io/v1beta2", None, 200).group is None


class RecordingCluster(Cluster):
    """``inner``, noting every request it answers (GETs too) in ``calls``."""

    def __init__(self, inner: Cluster, calls: list[ApiCall]) -> None:
        super().__init__(inner.api, timeout_s=inner.timeout_s)
        self.inner = inner
        self.calls = calls
        self._lock = threading.Lock()

    def request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: dict[str, str | int | None] | None = None,
        raw: bool = False,
    ) -> Any:
        answer = self.inner.request(
            what, method, path, body=body, content_type=content_type, query=query, raw=raw
        )
        with self._lock:
            self.calls.append(api_call(method, path, query, answer.status))
        return answer

    @contextlib.contextmanager
    def watch(self, what: str, path: str, *, query: dict[str, Any]) -> Iterator[Any]:
        """A watch (the watch caches'), noted as RBAC sees it once answered: 403 when
        refused."""
        from krea_ops.errors import Unavailable

        try:
            with self.inner.watch(what, path, query=query) as events:
                with self._lock:
                    self.calls.append(api_call("GET", path, query, 200))
                yield events
        except Unavailable as exc:
            if str(exc).startswith("forbidden"):
                with self._lock:
                    self.calls.append(api_call("GET", path, query, 403))
            raise


def _grant_atoms(base: list[Obj], name: str) -> tuple[set[Atom], set[Atom]]:
    """(the ClusterRole's grants, the Role's in krea-ops), one per resourceName."""
    cluster: set[Atom] = {(g, r, v, None) for g, r, v in CLUSTER_CALLS[name]}
    role: set[Atom] = set()
    for rule in _one(base, "Role", f"krea-ops-{name}")["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for target in rule.get("resourceNames") or [None]:
                        role.add((group, resource, verb, target))
    return cluster, role


def _covers(atom: Atom, call: ApiCall, namespace: str | None) -> bool:
    group, resource, verb, target = atom
    return (
        (call.group, call.resource, call.verb) == (group, resource, verb)
        and (target is None or call.name == target)
        and (namespace is None or call.namespace == namespace)
    )


def _exercised(base: list[Obj], name: str, calls: list[ApiCall]) -> set[Atom]:
    """The grants ``calls`` used; fails on a refused call or one no grant covers."""
    cluster, role = _grant_atoms(base, name)
    used: set[Atom] = set()
    for call in calls:
        assert call.status != 403, f"{name}: {call} refused"
        if call.group is None:
            assert call.verb == "get" and DISCOVERY.match(call.path), call
            continue
        hits = {a for a in cluster if _covers(a, call, None)}
        hits |= {a for a in role if _covers(a, call, NAMESPACE)}
        assert hits, f"{name} made a call its roles do not grant: {call}"
        used |= hits
    return used


@dataclasses.dataclass
class OwnPass:
    result: Any  # loop.PassResult
    calls: list[ApiCall]
    log: list[Obj]
    holder: str | None  # the Lease's holder during the pass


def _deployed_settings(base: list[Obj], tmp: Path, **env: str) -> Any:
    """The settings a controller pod loads: krea-ops-config's config.yaml, then
    KREA_OPS_* variables (``env``) as a Deployment's would override them."""
    from krea_ops.settings import load_settings

    path = tmp / "config.yaml"
    path.write_text(_one(base, "ConfigMap", "krea-ops-config")["data"]["config.yaml"])
    return load_settings(env={"KREA_OPS_CONFIG": str(path), **env})


def _fleet(admin: Cluster) -> Any:
    """Fresh, cool readings of every in-cluster GPU node now: the recorded fleet that
    stands in for Prometheus (hardware readings are the one thing these tests fake)."""
    from krea_ops.kube.cluster import node_info
    from tests.controllers.conftest import healthy_telemetry

    nodes = [node_info(o) for o in admin.get("nodes", "/api/v1/nodes")["items"]]
    return healthy_telemetry([n.name for n in nodes if not n.virtual], time.time())


def _own_pass(
    admin: Cluster,
    base: list[Obj],
    controller: Any,
    settings: Any,
    *,
    account: str | None = None,
    state_there: bool = True,
) -> OwnPass:
    """One pass of ``controller`` through the runner as its own service account (or
    ``account``): its Lease taken from scratch, the pass, the Lease released."""
    from krea_ops.controllers.base import STATE_CONFIGMAP, Inputs
    from krea_ops.controllers.leader import ElectionSettings, lease_name, lease_path
    from krea_ops.controllers.leader import new_identity as identity_of
    from krea_ops.controllers.loop import JsonLog, Runner, state_path, write_state
    from krea_ops.health import HealthPolicy
    from krea_ops.telemetry.prometheus import PrometheusSource
    from krea_ops.telemetry.source import open_source
    from tests.controllers.conftest import RecordedSource

    name = controller.name
    admin.request("lease", "DELETE", lease_path(NAMESPACE, lease_name(name)))
    admin.request("state", "DELETE", state_path(NAMESPACE, STATE_CONFIGMAP))
    if state_there:
        write_state(admin, NAMESPACE, {})
    calls: list[ApiCall] = []
    out = io.StringIO()
    with _own_cluster(admin, name, account) as own:
        cluster = RecordingCluster(own, calls)
        policy = HealthPolicy.from_settings(settings)
        # where a live pass finds Prometheus (LiveInputs): krea-ops-config's prometheusURL
        found = open_source(settings, cluster, policy)
        try:
            config = _one(base, "ConfigMap", "krea-ops-config")["data"]
            assert isinstance(found, PrometheusSource)
            assert found.url == config["prometheusURL"].rstrip("/")
        finally:
            found.close()
        user = f"system:serviceaccount:{NAMESPACE}:{account or f'krea-ops-{name}'}"
        # as the pod reads: through the watch caches (commands/controller.py), its
        # writes too (a read waits for the cache to have seen them)
        watched = WatchedCluster(cluster)
        inputs = Inputs(watched, RecordedSource(_fleet(admin)), policy, user)
        runner = Runner(
            watched,
            [controller],
            lambda _: inputs,
            identity=identity_of({"POD_NAME": f"krea-ops-{name}-0"}),
            # no other replica here: a renew deadline no slow step of a loaded machine meets
            election=ElectionSettings(lease_duration_s=600, renew_deadline_s=300, retry_period_s=2),
            log=JsonLog(out),
        )
        elector = runner.electors[name]
        elector.cluster = RecordingCluster(elector.cluster, calls)
        assert elector.try_acquire_or_renew()
        try:
            lease = admin.get("lease", lease_path(NAMESPACE, lease_name(name)))
            result = runner.pass_once(controller)
            # each cache the pass started has made its watch (or been refused it)
            wait_for(
                lambda: all(r.connected or r.counts.errors for r in watched.reflectors.values()),
                timeout=30,
            )
        finally:
            watched.close()
            elector.release()
            # gone again: a test after this one may take the Lease as another holder
            admin.request("lease", "DELETE", lease_path(NAMESPACE, lease_name(name)))
    log = [json.loads(line) for line in out.getvalue().splitlines()]
    return OwnPass(result, calls, log, lease["spec"].get("holderIdentity"))


def _acted(name: str, done: OwnPass, admin: Cluster) -> None:
    """The pass read, decided, ran every plan to the end and saved its state: nothing
    refused."""
    from krea_ops.controllers.loop import read_state

    result = done.result
    assert result.outcome == "ok", (result.detail, done.log)
    assert result.detail is None, result.detail
    assert result.decision is not None and result.decision.acts, result.decision
    assert result.runs and [r.status for r in result.runs] == ["done"] * len(result.runs), [
        (r.failed, r.blocked, r.stopped) for r in result.runs
    ]
    for run in result.runs:
        assert {s.status for s in run.steps} <= {"done"}, [s.as_dict() for s in run.steps]
    assert not [c for c in done.calls if c.status == 403]
    assert done.holder and done.holder.startswith(f"krea-ops-{name}-0_")
    stored = read_state(admin, NAMESPACE)
    assert stored.data[f"{name}.last-action"]["status"] == "done"
    assert stored.data[f"{name}.last-action"]["by"] == done.holder
    if result.decision.state is not None:
        assert stored.data[name] == json.loads(json.dumps(result.decision.state))


def _least_privilege(base: list[Obj], name: str, done: OwnPass) -> None:
    """Every call was granted, and every grant not used is one NOT_IN_THE_PASS names."""
    used = _exercised(base, name, done.calls)
    cluster, role = _grant_atoms(base, name)
    unused = (cluster | role) - used
    print(f"{name}: grants not used in this pass: {sorted(unused, key=str)}")
    assert unused == set(NOT_IN_THE_PASS[name]), sorted(unused, key=str)
    # and the ones it did use are the ones its code calls (not an accident of the setup)
    assert {(g, r, v) for g, r, v, _ in used & cluster} <= CLUSTER_CALLS[name]


@pytest.fixture
def scratch(applied: Cluster) -> Iterator[list[str]]:
    """Paths of objects a test makes in the shared API server: deleted after it, so the
    next test's controller does not meet them."""
    made: list[str] = []
    yield made
    for path in reversed(made):
        applied.request("cleanup", "DELETE", path, body={"gracePeriodSeconds": 0})


def _make(admin: Cluster, made: list[str], path: str, obj: Obj, status: Obj | None = None) -> Obj:
    answer = admin.request("create", "POST", path, body=obj)
    assert answer.ok and answer.body is not None, answer.body
    where = f"{path}/{answer.body['metadata']['name']}"
    made.append(where)
    if status is not None:
        patched = admin.request(
            "status",
            "PATCH",
            f"{where}/status",
            body={"status": status},
            content_type="application/merge-patch+json",
        )
        assert patched.ok, patched.body
    return answer.body


NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def _gpu_node(
    admin: Cluster,
    made: list[str],
    name: str,
    labels: dict[str, str] | None = None,
    taints: list[Obj] | None = None,
    gpus: int = 8,
    ready: str = "True",
) -> None:
    """A node as its kubelet registers it: its hostname label, the GPUs and pods it takes
    (its CPU and memory left out: deploy/'s controller pods, which request CPU, then stay
    Pending instead of landing on the test's nodes), its Ready condition with a heartbeat.

    The API server taints every new node ``node.kubernetes.io/not-ready:NoSchedule``
    (admission plugin TaintNodesByCondition, plugin/pkg/admission/nodetaint) and the node
    lifecycle controller takes the taint off once it sees Ready=True (doNoScheduleTaintingPass,
    pkg/controller/nodelifecycle): a Ready node is waited for until then, as nothing lands on
    it before (the embedded server adds no such taint)."""
    from krea_ops.kube.times import rfc3339

    now = rfc3339(time.time())
    resources = {"nvidia.com/gpu": str(gpus), "pods": "110"}
    _make(
        admin,
        made,
        "/api/v1/nodes",
        {
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": {"taints": taints or []},
        },
        {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    )
    if ready == "True":
        wait_for(lambda: NOT_READY_TAINT not in {t[0] for t in _taints(admin, name)}, timeout=30)


PROVIDER_TAINT = {"key": "virtual-kubelet.io/provider", "value": "acme", "effect": "NoSchedule"}
BURST_DISABLED = ("krea.ai/burst-disabled", "true", "NoSchedule")
H200 = {"krea.ai/pool": "h200"}


def _taints(admin: Cluster, node: str) -> list[tuple[str, str | None, str]]:
    spec = admin.get("node", f"/api/v1/nodes/{node}").get("spec") or {}
    return sorted((t["key"], t.get("value"), t["effect"]) for t in spec.get("taints") or ())


def test_burst_taint_with_its_own_token_taints_the_virtual_nodes(
    applied: Cluster, base: list[Obj], scratch: list[str], tmp_path: Path
) -> None:
    """24 healthy in-cluster GPUs free (more than the deployed 16): its pass taints the
    virtual node burst-disabled, as krea-ops-burst-taint, nothing refused."""
    from krea_ops.controllers.loop import make_controller

    admin = applied
    for i in range(3):
        _gpu_node(admin, scratch, f"bt-gpu-{i}", H200)
    _gpu_node(admin, scratch, "bt-vk-0", {"type": "virtual-kubelet"}, [PROVIDER_TAINT], 64)
    settings = _deployed_settings(base, tmp_path, KREA_OPS_BURST_TAINT_HOLD_S="0")
    controller = make_controller("burst-taint", settings)
    done = _own_pass(admin, base, controller, settings, state_there=STATE_THERE["burst-taint"])
    _acted("burst-taint", done, admin)
    assert BURST_DISABLED in _taints(admin, "bt-vk-0")
    assert ("virtual-kubelet.io/provider", "acme", "NoSchedule") in _taints(admin, "bt-vk-0")
    _least_privilege(base, "burst-taint", done)


def test_quota_sync_with_its_own_token_sets_the_quota_to_the_gpus_there(
    applied: Cluster, base: list[Obj], scratch: list[str], quotas: dict[str, int], tmp_path: Path
) -> None:
    """Two h200 nodes (16 GPUs) against the applied 768 + 256: in mode apply its pass
    writes training 12 (75 %) and inference 8 (its floor), as krea-ops-quota-sync."""
    admin = applied
    assert quotas == {"training": 768, "inference": 256}
    done = _quota_sync_pass(admin, base, scratch, tmp_path)
    _acted("quota-sync", done, admin)
    assert _h200_quota(admin) == {"training": 12, "inference": 8}
    _least_privilege(base, "quota-sync", done)


def _h200_quota(admin: Cluster) -> dict[str, int]:
    from krea_ops.runbook.quota import nominal_quota

    return {
        cq: int(nominal_quota(admin.get("cq", f"{CQ_PATH}/{cq}"), "h200") or 0)
        for cq in ("training", "inference")
    }


CQ_PATH = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"


@pytest.fixture
def quotas(applied: Cluster) -> Iterator[dict[str, int]]:
    """The ClusterQueues' h200 quotas as applied; put back after the test."""
    before = _h200_quota(applied)
    yield before
    _set_h200_quota(applied, before)


def _quota_sync_pass(
    admin: Cluster, base: list[Obj], scratch: list[str], tmp: Path, account: str | None = None
) -> OwnPass:
    from krea_ops.controllers.loop import make_controller

    for i in range(2):
        _gpu_node(admin, scratch, f"qs-gpu-{i}", H200)
    settings = _deployed_settings(base, tmp, KREA_OPS_QUOTA_SYNC_MODE="apply")
    controller = make_controller("quota-sync", settings)
    return _own_pass(
        admin, base, controller, settings, account=account, state_there=STATE_THERE["quota-sync"]
    )


def test_migrate_back_with_its_own_token_evicts_an_offsite_pod_that_fits_home(
    applied: Cluster,
    base: list[Obj],
    scratch: list[str],
    quotas: dict[str, int],
    tmp_path: Path,
    control_plane: str,
) -> None:
    """A Kueue-managed inference workload with two Ready pods offsite on a burst-disabled
    virtual node, an h200 node free at home: its pass evicts one (Eviction API) as
    krea-ops-migrate-back, and the move completes once the replacement is Ready in-cluster.

    Upstream, the workload is a Deployment whose pods Kueue admits (on burst while the h200
    quota is 0, as while a training holds every in-cluster GPU), the scheduler binds and
    the test's kubelets run; the replacement is the ReplicaSet controller's, admitted on
    h200. The embedded server is API-only: the pods are made here, as those controllers
    and the kubelet would make them."""
    from krea_ops.controllers.loop import make_controller
    from krea_ops.controllers.migrate_back import MigrateBack

    admin = applied
    upstream = control_plane == "upstream"
    _gpu_node(admin, scratch, "mb-gpu-0", H200)
    key, value, effect = BURST_DISABLED
    disabled = {"key": key, "value": value, "effect": effect}
    vk_taints = [PROVIDER_TAINT] if upstream else [PROVIDER_TAINT, disabled]
    _gpu_node(admin, scratch, "mb-vk-0", {"type": "virtual-kubelet"}, vk_taints, 64)
    pods = "/api/v1/namespaces/inference/pods"
    settings = _deployed_settings(base, tmp_path)
    deployed = make_controller("migrate-back", settings)
    assert isinstance(deployed, MigrateBack)
    controller = MigrateBack(dataclasses.replace(deployed.config, move_timeout_s=60.0))
    if upstream:
        with _Kubelets(admin, ["mb-gpu-0", "mb-vk-0"]) as kubelets:
            try:
                _set_h200_quota(admin, {"training": 0, "inference": 0})
                _make(admin, scratch, SERVE_PATH, _serve_deployment())
                wait_for(lambda: _ready_on(admin, pods, "app=serve") == ["mb-vk-0"] * 2, 60)
                _set_h200_quota(admin, quotas)
                # what burst-taint does once in-cluster GPUs are free
                _taint(admin, "mb-vk-0", [PROVIDER_TAINT, disabled])
                done = _own_pass(
                    admin, base, controller, settings, state_there=STATE_THERE["migrate-back"]
                )
                left = admin.get("pods", pods, labelSelector="app=serve")["items"]
            finally:
                kubelets.remove(f"{SERVE_PATH}/serve", pods, "app=serve")
        assert not kubelets.errors, kubelets.errors
    else:
        # the pods' ReplicaSet, for real (the garbage collector deletes a pod whose owner
        # does not exist); no ReplicaSet controller runs on this API-only server
        template = {"metadata": {"labels": {"app": "serve"}},
                    "spec": {"containers": [{"name": "server", "image": "img:1"}]}}  # fmt: skip
        rs = _make(admin, scratch, "/apis/apps/v1/namespaces/inference/replicasets", {
            "metadata": {"name": SERVE_OWNER["name"]},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "serve"}},
                     "template": template}})  # fmt: skip
        SERVE_OWNER["uid"] = rs["metadata"]["uid"]
        for i in range(2):
            _make(admin, scratch, pods, _serving_pod(f"serve-{i}", "mb-vk-0"), READY)
        stop = threading.Event()
        home = threading.Thread(target=_replace_evicted, args=(admin, scratch, stop), daemon=True)
        home.start()
        try:
            done = _own_pass(
                admin, base, controller, settings, state_there=STATE_THERE["migrate-back"]
            )
        finally:
            stop.set()
            home.join(timeout=30)
        left = admin.get("pods", pods, labelSelector="app=serve")["items"]
    _acted("migrate-back", done, admin)
    (plan,) = done.result.decision.plans
    assert len(plan.steps) == 1  # one pod of one workload per pass (its bucket holds one)
    evictions = [c for c in done.calls if c.resource == "pods/eviction"]
    assert [(c.namespace, c.status) for c in evictions] == [("inference", 201)]
    active = {
        p["metadata"]["name"]: p["spec"].get("nodeName")
        for p in left
        if not p["metadata"].get("deletionTimestamp")
    }
    assert evictions[0].name not in active
    assert sorted(active.values()) == ["mb-gpu-0", "mb-vk-0"]
    _least_privilege(base, "migrate-back", done)


READY: Obj = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
SERVE_OWNER: Obj = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "name": "serve-5d8f",
    "uid": "",  # the ReplicaSet's, once the test made it
    "controller": True,
}


def _serving_pod(name: str, node: str, selector: dict[str, str] | None = None) -> Obj:
    """A pod of Deployment inference/serve, admitted by Kueue (LocalQueue inference)."""
    return {
        "metadata": {
            "name": name,
            "labels": {
                "app": "serve",
                "krea.ai/workload": "inference",
                "kueue.x-k8s.io/queue-name": "inference",
                "pod-template-hash": "5d8f",
            },
            "ownerReferences": [SERVE_OWNER],
        },
        "spec": {
            "nodeName": node,
            "nodeSelector": selector or {"type": "virtual-kubelet"},
            "tolerations": [
                {"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "server",
                    "image": "img:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def _replace_evicted(admin: Cluster, made: list[str], stop: threading.Event) -> None:
    """The ReplicaSet controller, the scheduler and the kubelet of this API-only server:
    once a pod of serve is evicted, its replacement runs Ready on the h200 node."""
    pods = "/api/v1/namespaces/inference/pods"
    while not stop.wait(0.05):
        items = admin.get("pods", pods, labelSelector="app=serve")["items"]
        if len(items) < 2 or any(p["metadata"].get("deletionTimestamp") for p in items):
            _make(admin, made, pods, _serving_pod("serve-2", "mb-gpu-0", H200), READY)
            return


SERVE_PATH = "/apis/apps/v1/namespaces/inference/deployments"
GPU = "nvidia.com/gpu"


def _serve_deployment() -> Obj:
    """Deployment inference/serve: two pods of one GPU, Kueue-managed (LocalQueue
    inference). Kueue gives each admitted pod its flavor's nodeSelector and tolerations."""
    labels = {
        "app": "serve",
        "krea.ai/workload": "inference",
        "kueue.x-k8s.io/queue-name": "inference",
    }
    container = {"name": "server", "image": "img:1", "resources": {"limits": {GPU: "1"}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "serve"}},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def _ready_on(admin: Cluster, path: str, selector: str, fields: str | None = None) -> list[str]:
    """The nodes of the Ready pods (not being deleted) that ``selector`` selects."""
    return sorted(
        p["spec"].get("nodeName") or ""
        for p in admin.get("pods", path, labelSelector=selector or None, fieldSelector=fields)[
            "items"
        ]
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or ()
        )
    )


def _set_h200_quota(admin: Cluster, quotas: dict[str, int]) -> None:
    for cq, quota in quotas.items():
        obj = admin.get("cq", f"{CQ_PATH}/{cq}")
        for flavor in obj["spec"]["resourceGroups"][0]["flavors"]:
            if flavor["name"] == "h200":
                flavor["resources"][0]["nominalQuota"] = quota
        put = admin.request("quota", "PUT", f"{CQ_PATH}/{cq}", body=obj)
        assert put.ok, put.body


def _taint(admin: Cluster, node: str, taints: list[Obj]) -> None:
    answer = admin.request(
        "taint",
        "PATCH",
        f"/api/v1/nodes/{node}",
        body={"spec": {"taints": taints}},
        content_type="application/merge-patch+json",
    )
    assert answer.ok, answer.body


class _Kubelets:
    """The kubelets of ``nodes`` (a virtual kubelet's too) on the upstream control plane,
    where nothing else runs them. Each renews its node's Lease in kube-node-lease (its
    heartbeat, which keeps the node lifecycle controller from marking the node Unknown
    after --node-monitor-grace-period), runs the pods bound to its node (Running, Ready)
    and ends those being deleted (phase Failed, then the DELETE with grace period 0 a
    kubelet makes last). ``stop(node)``: that node's kubelet is gone."""

    RENEW_S = 5.0

    def __init__(self, admin: Cluster, nodes: list[str]) -> None:
        self.admin = admin
        self.nodes = set(nodes)
        self.errors: list[str] = []
        self._renewed: dict[str, float] = {}
        self._ended: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelets", daemon=True)

    def __enter__(self) -> _Kubelets:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def stop(self, node: str) -> None:
        with self._lock:
            self.nodes.discard(node)

    def remove(self, owner: str, pods: str, selector: str, timeout_s: float = 60.0) -> None:
        """Delete ``owner`` and wait (while the kubelets still run) until the pods
        ``selector`` selects in ``pods`` are gone, so no later test meets them."""
        self.admin.request("cleanup", "DELETE", owner, body={"propagationPolicy": "Background"})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.admin.get("pods", pods, labelSelector=selector)["items"]:
                return
            time.sleep(0.2)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self._tick()
            except Exception as exc:  # kept for the failure's message
                self.errors.append(repr(exc))

    def _tick(self) -> None:
        from krea_ops.kube.times import micro_time, rfc3339

        with self._lock:
            nodes = set(self.nodes)
        now = time.time()
        for node in sorted(nodes):
            if now - self._renewed.get(node, 0.0) >= self.RENEW_S:
                self._renew(node, micro_time(now))
                self._renewed[node] = now
        for pod in self.admin.get("pods", "/api/v1/pods")["items"]:
            if (pod.get("spec") or {}).get("nodeName") not in nodes:
                continue
            meta, status = pod["metadata"], pod.get("status") or {}
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            if meta.get("deletionTimestamp"):
                if meta["uid"] in self._ended:
                    continue
                if status.get("phase") not in ("Succeeded", "Failed"):
                    self._status(path, "Failed", "False", rfc3339(now))
                self.admin.request(
                    "kubelet",
                    "DELETE",
                    path,
                    body={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
                )
                self._ended.add(meta["uid"])
            elif status.get("phase") in (None, "Pending"):
                self._status(path, "Running", "True", rfc3339(now))

    def _status(self, path: str, phase: str, ready: str, now: str) -> None:
        conditions = [
            {"type": t, "status": ready, "lastTransitionTime": now}
            for t in ("Initialized", "ContainersReady", "Ready")
        ]
        status: Obj = {"phase": phase, "conditions": conditions}
        if phase == "Running":
            status["startTime"] = now
        self.admin.request(
            "kubelet",
            "PATCH",
            f"{path}/status",
            body={"status": status},
            content_type="application/strategic-merge-patch+json",
        )

    def _renew(self, node: str, now: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
        spec = {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": now}
        answer = self.admin.request(
            "lease", "PATCH", path, body={"spec": spec},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        if answer.status != 404:
            return
        uid = self.admin.get("node", f"/api/v1/nodes/{node}")["metadata"]["uid"]
        owner = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
        self.admin.request(
            "lease",
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            body={"metadata": {"name": node, "ownerReferences": [owner]}, "spec": spec},
        )


def test_node_health_with_its_own_token_quarantines_a_dead_node(
    applied: Cluster, base: list[Obj], scratch: list[str], tmp_path: Path, control_plane: str
) -> None:
    """node-health's pass as its own service account with the RBAC of deploy/: a node
    NotReady for 10 minutes is cordoned, tainted and drained (a gang's JobSet read, budgets
    listed, pods evicted, Events written), nothing refused.

    A training gang's rank and a ReplicaSet's pod ran there before its kubelet stopped.
    Upstream, the JobSet, Job and ReplicaSet controllers made them, the scheduler bound
    them there and the test's kubelets ran them; the pods evicted from the dead node stay
    Terminating (only its kubelet would end them). The embedded server is API-only: the
    pods are made here, bound there, and it removes the pods of a node without a kubelet."""
    from krea_ops.controllers.loop import make_controller
    from krea_ops.kube.times import rfc3339
    from tests.runbook.conftest import pod_on

    admin = applied
    dead = "nh-node-002"
    nodes = [f"nh-node-{i:03d}" for i in range(8)]
    for name in nodes:
        _gpu_node(admin, scratch, name)
    scratch.append("/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/run-1")
    jobset = admin.request(
        "jobset",
        "POST",
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
        body=_jobset(dead),
    )
    assert jobset.ok, jobset.body
    kubelets = _Kubelets(admin, nodes)
    with contextlib.ExitStack() as running:
        if control_plane == "upstream":
            running.enter_context(kubelets)
            _make(admin, scratch, "/apis/apps/v1/namespaces/default/replicasets", _web(dead))
            on_dead = f"spec.nodeName={dead}"
            wait_for(lambda: _ready_on(admin, "/api/v1/pods", "", on_dead) == [dead] * 2, 60)
            kubelets.stop(dead)
        else:
            for pod in ("web-0", "run-1-workers-0-0"):
                scratch.append(f"/api/v1/namespaces/default/pods/{pod}")
            pod_on(admin, dead, "web-0", labels={"app": "web"})
            pod_on(
                admin,
                dead,
                "run-1-workers-0-0",
                labels={"jobset.sigs.k8s.io/jobset-name": "run-1"},
                owned_by=("Job", "run-1-workers-0"),
            )
        there = sorted(p["metadata"]["name"] for p in _pods_on(admin, dead))
        _node_not_ready_since(admin, dead, time.time() - 600, rfc3339)
        settings = _deployed_settings(base, tmp_path)
        controller = make_controller("node-health", settings)
        done = _own_pass(admin, base, controller, settings, state_there=STATE_THERE["node-health"])
    assert not kubelets.errors, kubelets.errors
    _acted("node-health", done, admin)
    (plan,) = [p for p in done.result.decision.plans if p.steps]
    assert plan.nodes == (dead,)
    user = f"system:serviceaccount:{NAMESPACE}:krea-ops-node-health"
    node = admin.get("node", f"/api/v1/nodes/{dead}")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["krea.ai/evicted-by"] == user
    evicted = [(c.name, c.status) for c in done.calls if c.resource == "pods/eviction"]
    assert sorted(evicted) == [(name, 201) for name in there]
    # none left running there: gone, or (upstream) Terminating until the node is back
    assert [p["metadata"]["name"] for p in _pods_on(admin, dead)
            if not p["metadata"].get("deletionTimestamp")] == []  # fmt: skip
    gang = [c for c in done.calls if c.resource == "jobsets"]
    # the restart recorder's list (planned swaps read it too) and its cache's watch, then
    # the preflight's read
    assert sorted((c.verb, c.name or "", c.status) for c in gang) == [
        ("get", "run-1", 200),
        ("list", "", 200),
        ("watch", "", 200),
    ]
    events = admin.get("events", "/api/v1/namespaces/default/events")["items"]
    assert {e["reason"] for e in events if e["involvedObject"]["name"] == dead} >= {
        "Cordoned",
        "Drained",
    }
    _least_privilege(base, "node-health", done)


def _pods_on(admin: Cluster, node: str) -> list[Obj]:
    items: list[Obj] = admin.get("pods", "/api/v1/pods", fieldSelector=f"spec.nodeName={node}")[
        "items"
    ]
    return items


def _jobset(node: str) -> Obj:
    """JOBSET, its pods on ``node`` (by its hostname label)."""
    out = copy.deepcopy(JOBSET)
    pod = out["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["nodeSelector"] = {"kubernetes.io/hostname": node}
    return out


def _web(node: str) -> Obj:
    """ReplicaSet web: one pod on ``node``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [{"name": "c", "image": "img:1"}],
                },
            },
        },
    }


def _node_not_ready_since(admin: Cluster, node: str, since: float, rfc3339: Any) -> None:
    condition = {
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "lastTransitionTime": rfc3339(since),
    }
    answer = admin.request(
        "status",
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        body={"status": {"conditions": [condition]}},
        content_type="application/merge-patch+json",
    )
    assert answer.ok, answer.body


# What quota-sync's pass comes to without each grant of its ClusterRole: a read refused is
# fail-static (the pass changes nothing: "unavailable"); a write refused fails its plan's run
# ("failed"); an Event refused is best effort (kube/events.py): the run is done without it.
WITHOUT_GRANT = {
    ("", "nodes", "list"): "unavailable",
    ("kueue.x-k8s.io", "clusterqueues", "list"): "unavailable",
    ("kueue.x-k8s.io", "resourceflavors", "list"): "unavailable",
    ("kueue.x-k8s.io", "cohorts", "list"): "unavailable",
    # a watch refused: the pass reads what the cache's list brought and acts; the
    # cache then fails its reads once its watch has been down stale_s (tests/kube/test_watch.py)
    ("", "nodes", "watch"): "done",
    ("kueue.x-k8s.io", "clusterqueues", "watch"): "done",
    ("kueue.x-k8s.io", "resourceflavors", "watch"): "done",
    ("kueue.x-k8s.io", "cohorts", "watch"): "done",
    ("kueue.x-k8s.io", "clusterqueues", "get"): "failed",
    ("kueue.x-k8s.io", "clusterqueues", "patch"): "failed",
    ("", "events", "create"): "done",
}


def test_without_grant_cases_are_quota_syncs_cluster_role() -> None:
    assert set(WITHOUT_GRANT) == CLUSTER_CALLS["quota-sync"] - {EVENT_SERIES[:3]}


@pytest.mark.parametrize("grant", sorted(WITHOUT_GRANT), ids="/".join)
def test_a_grant_taken_from_quota_syncs_role_is_refused_with_403_in_its_pass(
    applied: Cluster,
    base: list[Obj],
    scratch: list[str],
    quotas: dict[str, int],
    tmp_path: Path,
    grant: tuple[str, str, str],
) -> None:
    """A copy of quota-sync's identity whose ClusterRole lacks ``grant``: its pass makes
    the call, the API server refuses it with 403, and the pass does not do its work (an
    Event aside: those are best effort)."""
    admin = applied
    account = "krea-ops-quota-sync-scratch"
    _scratch_identity(admin, scratch, base, "quota-sync", account, without=grant)
    done = _quota_sync_pass(admin, base, scratch, tmp_path, account=account)
    refused = {(c.group, c.resource, c.verb) for c in done.calls if c.status == 403}
    assert refused == {grant}, refused
    result = done.result
    outcome = WITHOUT_GRANT[grant]
    if outcome == "unavailable":
        assert result.outcome == "unavailable" and "forbidden" in (result.detail or "")
        assert "deploy/rbac/reader.yaml" in (result.detail or "")  # a read: the reader role
        assert result.runs == [] and _h200_quota(admin) == quotas
        return
    assert result.outcome == "ok" and result.decision is not None and result.decision.acts
    if outcome == "failed":
        (run,) = result.runs  # the first write refused ends the run: nothing after it is made
        assert run.status == "failed"
        assert run.stopped is not None and "forbidden" in run.stopped, run.stopped
        # a refused write names the acting identity's role, not the read-only one (the
        # GET of a read-modify-write is a read: the reader role does grant it)
        if grant[2] != "get":
            assert "deploy/controllers/" in run.stopped and "reader" not in run.stopped
        assert _h200_quota(admin) == quotas
    else:
        assert [r.status for r in result.runs] == ["done"]
        assert _h200_quota(admin) == {"training": 12, "inference": 8}


def _scratch_identity(
    admin: Cluster,
    made: list[str],
    base: list[Obj],
    controller: str,
    account: str,
    *,
    without: tuple[str, str, str],
) -> None:
    """ServiceAccount ``account`` bound to a copy of ``controller``'s Role and of its
    ClusterRole less the grant ``without``."""
    full = f"krea-ops-{controller}"
    group, resource, verb = without
    rules = []
    for rule in _one(base, "ClusterRole", full)["rules"]:
        if group in rule["apiGroups"] and resource in rule["resources"]:
            assert rule["apiGroups"] == [group] and rule["resources"] == [resource], rule
            rule = {**rule, "verbs": [v for v in rule["verbs"] if v != verb]}
        if rule["verbs"]:
            rules.append(rule)
    assert _grants({"rules": rules}) == CLUSTER_CALLS[controller] - {without}
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    meta = {"name": account}
    subjects = [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]

    def ref(kind: str) -> Obj:
        return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": account}

    role = _one(base, "Role", full)["rules"]
    for path, obj in (
        (f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": meta}),
        (f"{rbac}/clusterroles", {"metadata": meta, "rules": rules}),
        (
            f"{rbac}/clusterrolebindings",
            {"metadata": meta, "subjects": subjects, "roleRef": ref("ClusterRole")},
        ),
        (f"{rbac}/namespaces/{NAMESPACE}/roles", {"metadata": meta, "rules": role}),
        (
            f"{rbac}/namespaces/{NAMESPACE}/rolebindings",
            {"metadata": meta, "subjects": subjects, "roleRef": ref("Role")},
        ),
    ):
        _make(admin, made, path, obj)


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
