"""Server-side apply, managedFields and the scale subresource, as kubectl and the
official client see them.

The wording is the real API server's: the conflict message is ``getConflictMessage`` /
``printManager`` in k8s.io/apiserver pkg/endpoints/handlers/fieldmanager/internal/
conflict.go (a path prints as sigs.k8s.io/structured-merge-diff's ``fieldpath.Path``);
the missing field manager is ``ValidatePatchOptions`` in k8s.io/apimachinery
pkg/apis/meta/v1/validation; the negative replicas is ``ValidateScale`` in
k8s.io/kubernetes pkg/apis/autoscaling/validation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import KUBECTL, Kubectl

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {{app: web}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: {image}
        env: [{{name: MODE, value: serve}}]
"""


@pytest.fixture
def kubectl(sim: LocalApiServer, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.kubeconfig, tmp_path)


def _deployment(replicas: int = 2, image: str = "nginx:1.27") -> str:
    return DEPLOYMENT.format(replicas=replicas, image=image)


def _managed(kubectl: Kubectl, *what: str) -> dict[str, dict[str, Any]]:
    """manager/operation[/subresource] -> entry, from ``-o yaml --show-managed-fields``."""
    obj = yaml.safe_load(kubectl("get", *what, "-o", "yaml", "--show-managed-fields").stdout)
    out = {}
    for e in obj["metadata"]["managedFields"]:
        key = "/".join(x for x in (e["manager"], e["operation"], e.get("subresource")) if x)
        out[key] = e
    return out


def _apply(
    api: client.ApiClient, name: str, body: dict[str, Any], **options: Any
) -> dict[str, Any]:
    """An apply patch of the ConfigMap ``name`` in ``default`` by the official client."""
    resp = client.CoreV1Api(api).patch_namespaced_config_map(
        name,
        "default",
        body,
        _content_type="application/apply-patch+yaml",
        _preload_content=False,
        **options,
    )
    return dict(json.loads(resp.data))


@needs_kubectl
def test_conflict_with_client_side_apply_and_force(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=_deployment(2))
    managed = _managed(kubectl, "deployment", "web")
    csa = managed["kubectl-client-side-apply/Update"]
    assert csa["apiVersion"] == "apps/v1" and csa["fieldsType"] == "FieldsV1"
    spec = csa["fieldsV1"]["f:spec"]
    assert "f:replicas" in spec and spec["f:selector"] == {}  # LabelSelector is atomic
    container = spec["f:template"]["f:spec"]["f:containers"]['k:{"name":"web"}']
    assert container["."] == {} and "f:image" in container
    assert "f:imagePullPolicy" in container  # an Update owns what defaulting filled in
    assert container["f:env"]['k:{"name":"MODE"}'] == {".": {}, "f:name": {}, "f:value": {}}

    failed = kubectl(
        "apply", "--server-side", "--field-manager=other", "-f", "-", stdin=_deployment(3),
        check=False,
    )
    assert failed.returncode != 0
    assert (
        'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using '
        "apps/v1: .spec.replicas"
    ) in failed.stderr
    assert kubectl("get", "deploy", "web", "-o", "jsonpath={.spec.replicas}").stdout == "2"

    # kubectl's own server-side apply takes over what its last client-side apply set and
    # the object still has (the API server's lastAppliedManager): no --force-conflicts.
    kubectl("apply", "--server-side", "-f", "-", stdin=_deployment(3))
    assert kubectl("get", "deploy", "web", "-o", "jsonpath={.spec.replicas}").stdout == "3"
    managed = _managed(kubectl, "deployment", "web")
    applied = managed["kubectl/Apply"]["fieldsV1"]
    assert "f:replicas" in applied["f:spec"]
    # An Apply entry holds what was applied, no `.` on maps (typed.ToFieldSet).
    assert applied["f:metadata"] == {"f:labels": {"f:app": {}}}
    others = [e for k, e in managed.items() if k != "kubectl/Apply"]
    assert all("f:replicas" not in e["fieldsV1"].get("f:spec", {}) for e in others)


@needs_kubectl
def test_two_appliers_conflict_share_and_prune(kubectl: Kubectl) -> None:
    kubectl("apply", "--server-side", "--field-manager=alice", "-f", "-", stdin=_deployment(2))
    # The same value is no conflict: both own it.
    kubectl("apply", "--server-side", "--field-manager=bob", "-f", "-", stdin=_deployment(2))
    managed = _managed(kubectl, "deployment", "web")
    assert "f:replicas" in managed["alice/Apply"]["fieldsV1"]["f:spec"]
    assert "f:replicas" in managed["bob/Apply"]["fieldsV1"]["f:spec"]

    failed = kubectl(
        "apply", "--server-side", "--field-manager=bob", "-f", "-",
        stdin=_deployment(5, "nginx:1.28"), check=False,
    )
    assert failed.returncode != 0
    assert (
        'Apply failed with 2 conflicts: conflicts with "alice":\n- .spec.replicas\n'
        '- .spec.template.spec.containers[name="web"].image'
    ) in failed.stderr

    kubectl(
        "apply", "--server-side", "--field-manager=bob", "--force-conflicts", "-f", "-",
        stdin=_deployment(5, "nginx:1.28"),
    )
    got = json.loads(kubectl("get", "deploy", "web", "-o", "json").stdout)
    assert got["spec"]["replicas"] == 5
    assert got["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.28"
    managed = _managed(kubectl, "deployment", "web")
    assert "f:replicas" not in managed["alice/Apply"]["fieldsV1"]["f:spec"]

    # Alice stops applying her env var: she owned it with bob, so it stays; bob stops
    # too, and it goes.
    no_env = _deployment(5, "nginx:1.28").replace("        env: [{name: MODE, value: serve}]\n", "")
    kubectl("apply", "--server-side", "--field-manager=alice", "-f", "-", stdin=no_env)
    def env() -> Any:
        got = json.loads(kubectl("get", "deploy", "web", "-o", "json").stdout)
        return got["spec"]["template"]["spec"]["containers"][0].get("env")

    assert env() == [{"name": "MODE", "value": "serve"}]
    kubectl("apply", "--server-side", "--field-manager=bob", "-f", "-", stdin=no_env)
    assert env() is None


@needs_kubectl
def test_containers_merge_by_name_across_managers(kubectl: Kubectl) -> None:
    kubectl("apply", "--server-side", "--field-manager=alice", "-f", "-", stdin=_deployment(1))
    sidecar = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers:
      - {name: exporter, image: "exporter:2"}
"""
    kubectl("apply", "--server-side", "--field-manager=sidecars", "-f", "-", stdin=sidecar)
    got = json.loads(kubectl("get", "deploy", "web", "-o", "json").stdout)
    names = [c["name"] for c in got["spec"]["template"]["spec"]["containers"]]
    assert names == ["web", "exporter"]
    managed = _managed(kubectl, "deployment", "web")
    mine = managed["sidecars/Apply"]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]
    assert list(mine["f:containers"]) == ['k:{"name":"exporter"}']


@needs_kubectl
def test_custom_resource_follows_its_list_types(kubectl: Kubectl) -> None:
    cq = """apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: research}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: h200
      resources: [{name: "nvidia.com/gpu", nominalQuota: %d}]
"""
    kubectl("apply", "--server-side", "--field-manager=platform", "-f", "-", stdin=cq % 8)
    managed = _managed(kubectl, "clusterqueue", "research")
    # resourceGroups is x-kubernetes-list-type: atomic in Kueue's CRD: one leaf.
    assert managed["platform/Apply"]["fieldsV1"]["f:spec"]["f:resourceGroups"] == {}
    failed = kubectl(
        "apply", "--server-side", "--field-manager=team", "-f", "-", stdin=cq % 16, check=False
    )
    assert 'Apply failed with 1 conflict: conflict with "platform": .spec.resourceGroups' in (
        failed.stderr
    )


def test_apply_needs_a_field_manager_and_force_only_applies(api: client.ApiClient) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    with pytest.raises(ApiException) as err:
        _apply(api, "c", body)
    assert err.value.status == 422
    status = json.loads(err.value.body)
    assert status["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
        "is required for apply patch"
    )
    created = _apply(api, "c", body, field_manager="tool")  # creates the object
    assert created["data"] == {"a": "1"}
    (entry,) = created["metadata"]["managedFields"]
    assert entry["manager"] == "tool" and entry["operation"] == "Apply"
    assert entry["fieldsV1"] == {"f:data": {"f:a": {}}}
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("c", "default", {"data": {"b": "2"}}, force=True)
    assert err.value.status == 422
    assert json.loads(err.value.body)["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: '
        "may not be specified for non-apply patch"
    )


def test_writes_record_update_entries(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}
    )
    raw = core.read_namespaced_config_map("c", "default", _preload_content=False)
    (entry,) = json.loads(raw.data)["metadata"]["managedFields"]
    # No ?fieldManager=: the manager is the User-Agent up to its first "/".
    assert entry["manager"] == "OpenAPI-Generator" and entry["operation"] == "Update"
    assert entry["fieldsV1"] == {"f:data": {".": {}, "f:a": {}, "f:b": {}}}
    core.patch_namespaced_config_map("c", "default", {"data": {"a": "9"}}, field_manager="ops")
    raw = core.read_namespaced_config_map("c", "default", _preload_content=False)
    managed = {e["manager"]: e for e in json.loads(raw.data)["metadata"]["managedFields"]}
    assert managed["ops"]["fieldsV1"] == {"f:data": {"f:a": {}}}
    assert managed["OpenAPI-Generator"]["fieldsV1"] == {"f:data": {".": {}, "f:b": {}}}
    # An apply that sets a field an Update manager owns conflicts with it, "using" its
    # version; the same value does not.
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    _apply(api, "c", {**body, "data": {"a": "9"}}, field_manager="cd")
    with pytest.raises(ApiException) as err:
        _apply(api, "c", {**body, "data": {"a": "1", "b": "3"}}, field_manager="cd")
    status = json.loads(err.value.body)
    assert err.value.status == 409 and status["reason"] == "Conflict"
    assert status["message"] == (
        'Apply failed with 2 conflicts: conflicts with "OpenAPI-Generator" using v1:\n'
        '- .data.b\nconflicts with "ops" using v1:\n- .data.a'
    )
    assert {"reason": "FieldManagerConflict", "message": 'conflict with "ops" using v1',
            "field": ".data.a"} in status["details"]["causes"]


def test_status_writes_are_recorded_with_their_subresource(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_node({"metadata": {"name": "n1"}})
    core.patch_node_status(
        "n1", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        field_manager="kubelet",
    )
    raw = core.read_node("n1", _preload_content=False)
    entries = json.loads(raw.data)["metadata"]["managedFields"]
    kubelet = next(e for e in entries if e["manager"] == "kubelet")
    assert kubelet["subresource"] == "status"
    cond = kubelet["fieldsV1"]["f:status"]["f:conditions"]['k:{"type":"Ready"}']
    assert cond == {".": {}, "f:status": {}, "f:type": {}}


@needs_kubectl
def test_kubectl_scale(kubectl: Kubectl, api: client.ApiClient) -> None:
    kubectl("apply", "--server-side", "--field-manager=deployer", "-f", "-", stdin=_deployment(2))
    kubectl("scale", "deployment", "web", "--replicas=4")
    assert kubectl("get", "deploy", "web", "-o", "jsonpath={.spec.replicas}").stdout == "4"
    scale = json.loads(
        kubectl("get", "--raw", "/apis/apps/v1/namespaces/default/deployments/web/scale").stdout
    )
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 4}
    assert scale["status"]["selector"] == "app=web"
    managed = _managed(kubectl, "deployment", "web")
    (scaler,) = [e for e in managed.values() if e.get("subresource") == "scale"]
    assert scaler["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    assert scaler["apiVersion"] == "apps/v1"
    # The applier lost replicas to the scaler; applying them again conflicts with it.
    failed = kubectl(
        "apply", "--server-side", "--field-manager=deployer", "-f", "-", stdin=_deployment(2),
        check=False,
    )
    assert (
        f'conflict with "{scaler["manager"]}" with subresource "scale" using apps/v1: '
        ".spec.replicas"
    ) in failed.stderr
    stale = kubectl("scale", "deployment", "web", "--replicas=1", "--resource-version=1",
                    check=False)
    assert stale.returncode != 0
    apps = client.AppsV1Api(api)
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_deployment_scale(
            "web", "default", {"metadata": {"name": "web"}, "spec": {"replicas": -1}}
        )
    assert err.value.status == 422
    assert json.loads(err.value.body)["message"] == (
        'Scale.autoscaling "web" is invalid: spec.replicas: Invalid value: -1: '
        "must be greater than or equal to 0"
    )
    got = apps.read_namespaced_deployment_scale("web", "default")
    assert got.spec.replicas == 4


POOL_CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: pools.example.com}
spec:
  group: example.com
  names: {kind: Pool, plural: pools, singular: pool}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.size
        statusReplicasPath: .status.ready
        labelSelectorPath: .status.selector
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status:
            type: object
            properties: {ready: {type: integer}, selector: {type: string}}
"""


@needs_kubectl
def test_kubectl_scale_of_a_custom_resource(kubectl: Kubectl, api: client.ApiClient) -> None:
    kubectl("apply", "-f", "-", stdin=POOL_CRD)
    pool = "apiVersion: example.com/v1\nkind: Pool\nmetadata: {name: p}\nspec: {size: 2}\n"
    kubectl("apply", "--server-side", "-f", "-", stdin=pool)
    custom = client.CustomObjectsApi(api)
    custom.patch_namespaced_custom_object_status(
        "example.com", "v1", "default", "pools", "p",
        {"status": {"ready": 2, "selector": "app=pool"}},
    )
    kubectl("scale", "pool", "p", "--replicas=5")
    assert kubectl("get", "pool", "p", "-o", "jsonpath={.spec.size}").stdout == "5"
    scale = json.loads(
        kubectl("get", "--raw", "/apis/example.com/v1/namespaces/default/pools/p/scale").stdout
    )
    assert scale["spec"] == {"replicas": 5}
    assert scale["status"] == {"replicas": 2, "selector": "app=pool"}


def test_unknown_patch_type_lists_what_the_resource_accepts(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    resp = api.call_api(
        "PATCH",
        f"{api.configuration.host}/api/v1/namespaces/default/configmaps/c",
        header_params={"Content-Type": "application/x-unknown", **api.default_headers,
                       "Authorization": api.configuration.api_key["authorization"]},
        body=b"{}",
    )  # fmt: skip
    assert resp.status == 415
    # negotiation.NewUnsupportedMediaTypeError with the built-in kinds' patch types
    assert json.loads(resp.read())["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, "
        "application/strategic-merge-patch+json, application/apply-patch+yaml"
    )


def test_replicaset_scale_through_the_official_client(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_replica_set(
        "default",
        {
            "metadata": {"name": "rs"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "rs"}},
                "template": {
                    "metadata": {"labels": {"app": "rs"}},
                    "spec": {"containers": [{"name": "c", "image": "img:1"}]},
                },
            },
        },
    )
    scale = apps.patch_namespaced_replica_set_scale("rs", "default", {"spec": {"replicas": 3}})
    assert (scale.kind, scale.spec.replicas, scale.status.selector) == ("Scale", 3, "app=rs")
    assert apps.read_namespaced_replica_set("rs", "default").spec.replicas == 3
    stale = apps.read_namespaced_replica_set_scale("rs", "default")
    same = apps.replace_namespaced_replica_set_scale("rs", "default", stale)  # a no-op
    assert same.metadata.resource_version == stale.metadata.resource_version
    apps.patch_namespaced_replica_set_scale("rs", "default", {"spec": {"replicas": 4}})
    stale.spec.replicas = 5
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_replica_set_scale("rs", "default", stale)  # now stale
    assert err.value.status == 409
    assert json.loads(err.value.body)["message"] == (
        'Operation cannot be fulfilled on replicasets.apps "rs": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )


@needs_kubectl
def test_server_side_dry_run_and_diff(kubectl: Kubectl) -> None:
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '%s'}\n"
    out = kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", stdin=cm % 1).stdout
    assert out.strip() == "configmap/c serverside-applied (server dry run)"
    assert "NotFound" in kubectl("get", "cm", "c", check=False).stderr
    kubectl("apply", "--server-side", "-f", "-", stdin=cm % 1)
    diff = kubectl("diff", "--server-side", "-f", "-", stdin=cm % 2, check=False)
    assert diff.returncode == 1  # differences found
    changed = [x for x in diff.stdout.splitlines() if x[:1] in "+-" and x[:3] not in "+++---"]
    assert '-  a: "1"' in changed and '+  a: "2"' in changed
    assert not any("resourceVersion" in x for x in changed)  # a dry run keeps the version


@needs_kubectl
def test_apply_of_a_list_item_without_its_key(kubectl: Kubectl) -> None:
    nameless = _deployment(1).replace("      - name: web\n        image:", "      - image:")
    failed = kubectl("apply", "--server-side", "-f", "-", stdin=nameless, check=False)
    assert failed.returncode != 0
    # fieldmanager's "failed to create typed patch object (%v): %v" around
    # structured-merge-diff's element error; a plain error, so no reason.
    assert (
        "Error from server: failed to create typed patch object (apps/v1, Kind=Deployment): "
        ".spec.template.spec.containers: element 0: associative list with keys has an element "
        'that omits key field "name" (and doesn\'t have default value)'
    ) in failed.stderr
    # A key with a default (a port's protocol) may be left out.
    ports = _deployment(1).replace(
        "        env:", "        ports: [{containerPort: 80}]\n        env:"
    )
    kubectl("apply", "--server-side", "-f", "-", stdin=ports)


# -- the same value is shared, a different one conflicts ------------------------------------
#
# "When trying to apply an object, fields that have a different value and are owned by
# another manager will result in a conflict." and "If two or more appliers set a field to
# the same value, they share ownership of that field. Any subsequent attempt to change the
# value of the shared field, by any of the appliers, results in a conflict." (Server-Side
# Apply, https://kubernetes.io/docs/reference/using-api/server-side-apply/). In
# structured-merge-diff, merge/update.go takes the conflicts from
# ``managerSet.Set().Intersection(compare.Modified.Union(compare.Added))`` and
# typed/compare.go's doLeaf marks an atomic map or list, or a scalar, Modified only when
# ``!value.EqualsUsing(...)``: an equal value is no change, so no conflict.

KUEUE_SETUP = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h200}
spec:
  nodeLabels: {krea.ai/pool: %(pool)s}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: gpu}
spec: {}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: training}
spec:
  cohortName: gpu
  namespaceSelector: %(selector)s
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: h200
      resources: [{name: "nvidia.com/gpu", nominalQuota: 64}]
"""


def _kueue_setup(pool: str = "h200", selector: str = "{}") -> str:
    return KUEUE_SETUP % {"pool": pool, "selector": selector}


@needs_kubectl
def test_server_side_apply_after_client_side_apply_of_the_same_values(kubectl: Kubectl) -> None:
    """``kubectl apply`` then ``kubectl apply --server-side`` of the same manifests: the
    atomic maps (nodeLabels, an empty namespaceSelector, an empty spec) are no conflict."""
    kubectl("apply", "-f", "-", stdin=_kueue_setup())
    done = kubectl("apply", "--server-side", "-f", "-", stdin=_kueue_setup())
    assert done.stdout.count(" serverside-applied\n") == 3, done.stdout
    assert done.stderr == ""
    # kubectl then moves the client-side entry into its own (csaupgrade, since 1.26) and
    # keeps the last-applied annotation under "kubectl-last-applied".
    managed = _managed(kubectl, "resourceflavor", "h200")
    assert set(managed) == {"kubectl/Apply", "kubectl-last-applied/Apply"}
    assert "f:nodeLabels" in managed["kubectl/Apply"]["fieldsV1"]["f:spec"]
    assert "f:spec" in _managed(kubectl, "cohort", "gpu")["kubectl/Apply"]["fieldsV1"]

    # Another applier with a different value: a conflict with "kubectl", the value kept.
    failed = kubectl(
        "apply",
        "--server-side",
        "--field-manager=tuner",
        "-f",
        "-",
        stdin=_kueue_setup(pool="b200"),
        check=False,
    )
    assert failed.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .spec.nodeLabels' in (
        failed.stderr
    )
    got = kubectl("get", "resourceflavor", "h200", "-o", "jsonpath={.spec.nodeLabels}").stdout
    assert json.loads(got) == {"krea.ai/pool": "h200"}


@needs_kubectl
def test_applying_the_values_another_manager_wrote_shares_them(kubectl: Kubectl) -> None:
    """A manager that wrote with ``kubectl create`` (an Update) and an applier of the same
    values both own every field, atomic or scalar; a changed value then conflicts."""
    kubectl("create", "-f", "-", stdin=_kueue_setup())
    done = kubectl("apply", "--server-side", "-f", "-", stdin=_kueue_setup())
    assert done.stdout.count(" serverside-applied\n") == 3, done.stdout
    shared = {
        ("resourceflavor", "h200"): {"f:nodeLabels", "f:tolerations"},
        ("clusterqueue", "training"): {"f:cohortName", "f:namespaceSelector", "f:resourceGroups"},
    }
    for what, fields in shared.items():
        managed = _managed(kubectl, *what)
        assert set(managed) == {"kubectl-create/Update", "kubectl/Apply"}, what
        for entry in managed.values():
            spec = entry["fieldsV1"]["f:spec"]
            assert fields <= set(spec), (what, entry["manager"])
            assert all(spec[f] == {} for f in fields), (what, entry["manager"])  # leaves
    cohort = _managed(kubectl, "cohort", "gpu")
    assert {e: cohort[e]["fieldsV1"] for e in cohort} == {
        "kubectl-create/Update": {"f:spec": {}},
        "kubectl/Apply": {"f:spec": {}},
    }

    # Changing a shared value is a conflict with the other owner, whoever applies it.
    failed = kubectl(
        "apply",
        "--server-side",
        "-f",
        "-",
        stdin=_kueue_setup(pool="b200", selector="{matchLabels: {team: vision}}"),
        check=False,
    )
    assert failed.returncode != 0
    for path in (".spec.nodeLabels", ".spec.namespaceSelector"):
        assert (
            'Apply failed with 1 conflict: conflict with "kubectl-create" using '
            f"kueue.x-k8s.io/v1beta2: {path}"
        ) in failed.stderr
    forced = kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "-",
        stdin=_kueue_setup(pool="b200"),
    )
    assert "resourceflavor.kueue.x-k8s.io/h200 serverside-applied" in forced.stdout
    managed = _managed(kubectl, "resourceflavor", "h200")
    assert "f:nodeLabels" in managed["kubectl/Apply"]["fieldsV1"]["f:spec"]
    assert "f:nodeLabels" not in managed["kubectl-create/Update"]["fieldsV1"]["f:spec"]
    assert "f:tolerations" in managed["kubectl-create/Update"]["fieldsV1"]["f:spec"]


def test_an_apply_of_equal_values_is_no_conflict_in_the_response(api: client.ApiClient) -> None:
    """The official client: the apply's own response already shows both owners, and the
    409 of a changed value lists each conflict, as getConflictMessage writes them."""
    custom = client.CustomObjectsApi(api)
    flavor = yaml.safe_load(_kueue_setup().split("---")[0])
    custom.create_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "resourceflavors", flavor, field_manager="platform"
    )

    def apply(body: dict[str, Any], **options: Any) -> dict[str, Any]:
        resp = custom.patch_cluster_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            "resourceflavors",
            "h200",
            body,
            field_manager="team",
            _content_type="application/apply-patch+yaml",
            _preload_content=False,
            **options,
        )
        return dict(json.loads(resp.data))

    got = apply(flavor)
    owners = {e["manager"]: e["fieldsV1"]["f:spec"] for e in got["metadata"]["managedFields"]}
    assert set(owners) == {"platform", "team"}
    assert all("f:nodeLabels" in spec and "f:tolerations" in spec for spec in owners.values())

    # An update that sends the same spec back (a read-modify-write that changed nothing
    # there) takes no field from them.
    current = custom.get_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "resourceflavors", "h200"
    )
    current["metadata"]["labels"] = {"reviewed": "yes"}
    replaced = custom.replace_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "resourceflavors", "h200", current, field_manager="editor"
    )
    fields = {e["manager"]: e["fieldsV1"] for e in replaced["metadata"]["managedFields"]}
    assert fields["editor"] == {"f:metadata": {"f:labels": {".": {}, "f:reviewed": {}}}}
    assert all("f:nodeLabels" in fields[m]["f:spec"] for m in ("platform", "team"))

    changed = json.loads(json.dumps(flavor))
    changed["spec"]["tolerations"][0]["effect"] = "NoExecute"
    changed["spec"]["nodeLabels"]["krea.ai/pool"] = "b200"
    with pytest.raises(ApiException) as err:
        apply(changed)
    status = json.loads(err.value.body)
    assert err.value.status == 409 and status["reason"] == "Conflict"
    assert status["message"] == (
        'Apply failed with 2 conflicts: conflicts with "platform" using kueue.x-k8s.io/v1beta2:'
        "\n- .spec.nodeLabels\n- .spec.tolerations"
    )
