"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and Kubernetes strategic merge patch."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from krea_ops.sim.apiserver.patch import (
    SMP_KINDS,
    PatchError,
    json_merge_patch,
    json_patch,
    strategic_merge_patch,
)

# -- RFC 7386 --------------------------------------------------------------------------------

RFC7386_APPENDIX_A = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), RFC7386_APPENDIX_A)
def test_json_merge_patch_rfc7386_appendix(target: Any, patch: Any, expected: Any) -> None:
    before = copy.deepcopy((target, patch))
    assert json_merge_patch(target, patch) == expected
    assert (target, patch) == before


def test_json_merge_patch_rfc7386_section3_example() -> None:
    target = {
        "title": "Goodbye!",
        "author": {"givenName": "John", "familyName": "Doe"},
        "tags": ["example", "sample"],
        "content": "This will be unchanged",
    }
    patch = {
        "title": "Hello!",
        "phoneNumber": "+01-123-456-7890",
        "author": {"familyName": None},
        "tags": ["example"],
    }
    assert json_merge_patch(target, patch) == {
        "title": "Hello!",
        "author": {"givenName": "John"},
        "tags": ["example"],
        "content": "This will be unchanged",
        "phoneNumber": "+01-123-456-7890",
    }


def test_json_merge_patch_result_shares_nothing_with_inputs() -> None:
    target = {"a": {"b": [1]}}
    patch = {"c": {"d": [2]}}
    result = json_merge_patch(target, patch)
    result["a"]["b"].append(9)
    result["c"]["d"].append(9)
    assert target == {"a": {"b": [1]}}
    assert patch == {"c": {"d": [2]}}


# -- RFC 6902 --------------------------------------------------------------------------------

RFC6902_APPENDIX_A = [
    (  # A.1 adding an object member
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux"}],
        {"baz": "qux", "foo": "bar"},
    ),
    (  # A.2 adding an array element
        {"foo": ["bar", "baz"]},
        [{"op": "add", "path": "/foo/1", "value": "qux"}],
        {"foo": ["bar", "qux", "baz"]},
    ),
    (  # A.3 removing an object member
        {"baz": "qux", "foo": "bar"},
        [{"op": "remove", "path": "/baz"}],
        {"foo": "bar"},
    ),
    (  # A.4 removing an array element
        {"foo": ["bar", "qux", "baz"]},
        [{"op": "remove", "path": "/foo/1"}],
        {"foo": ["bar", "baz"]},
    ),
    (  # A.5 replacing a value
        {"baz": "qux", "foo": "bar"},
        [{"op": "replace", "path": "/baz", "value": "boo"}],
        {"baz": "boo", "foo": "bar"},
    ),
    (  # A.6 moving a value
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
    ),
    (  # A.7 moving an array element
        {"foo": ["all", "grass", "cows", "eat"]},
        [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
        {"foo": ["all", "cows", "eat", "grass"]},
    ),
    (  # A.8 testing a value: success
        {"baz": "qux", "foo": ["a", 2, "c"]},
        [
            {"op": "test", "path": "/baz", "value": "qux"},
            {"op": "test", "path": "/foo/1", "value": 2},
        ],
        {"baz": "qux", "foo": ["a", 2, "c"]},
    ),
    (  # A.10 adding a nested member object
        {"foo": "bar"},
        [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
        {"foo": "bar", "child": {"grandchild": {}}},
    ),
    (  # A.11 ignoring unrecognized elements
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
        {"foo": "bar", "baz": "qux"},
    ),
    (  # A.14 ~ escape ordering
        {"/": 9, "~1": 10},
        [{"op": "test", "path": "/~01", "value": 10}],
        {"/": 9, "~1": 10},
    ),
    (  # A.16 adding an array value
        {"foo": ["bar"]},
        [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
        {"foo": ["bar", ["abc", "def"]]},
    ),
]


@pytest.mark.parametrize(("target", "ops", "expected"), RFC6902_APPENDIX_A)
def test_json_patch_rfc6902_appendix(target: Any, ops: list, expected: Any) -> None:
    before = copy.deepcopy((target, ops))
    assert json_patch(target, ops) == expected
    assert (target, ops) == before


RFC6902_ERRORS = [
    (  # A.9 testing a value: error
        {"baz": "qux"},
        [{"op": "test", "path": "/baz", "value": "bar"}],
        "testing value /baz failed: test failed",
    ),
    (  # A.12 adding to a nonexistent target
        {"foo": "bar"},
        [{"op": "add", "path": "/baz/bat", "value": "qux"}],
        'add operation does not apply: doc is missing path: "/baz/bat": missing value',
    ),
    (  # A.15 comparing strings and numbers
        {"/": 9, "~1": 10},
        [{"op": "test", "path": "/~01", "value": "10"}],
        "testing value /~01 failed: test failed",
    ),
    (  # a bool is not a number
        {"a": True},
        [{"op": "test", "path": "/a", "value": 1}],
        "testing value /a failed: test failed",
    ),
    (
        {"a": {}},
        [{"op": "remove", "path": "/a/b"}],
        "error in remove for path: '/a/b': Unable to remove nonexistent key: b: missing value",
    ),
    (
        {"a": 1},
        [{"op": "replace", "path": "/b", "value": 2}],
        "replace operation does not apply: doc is missing key: /b: missing value",
    ),
    (
        {"a": [1, 2]},
        [{"op": "add", "path": "/a/5", "value": 3}],
        "error in add for path: '/a/5': Unable to access invalid index: 5: "
        "invalid index referenced",
    ),
    (
        {"a": [1, 2]},
        [{"op": "remove", "path": "/a/01"}],
        "error in remove for path: '/a/01': Unable to access invalid index: 01: "
        "invalid index referenced",
    ),
    (
        {"a": 1},
        [{"op": "move", "from": "/x", "path": "/y"}],
        "move operation does not apply: doc is missing from path: /x: missing value",
    ),
    (
        {"a": {"b": 1}},
        [{"op": "move", "from": "/a", "path": "/a/b/c"}],
        "move operation does not apply: path /a/b/c is a child of from /a",
    ),
    (
        {"a": 1},
        [{"op": "test", "path": "/nope", "value": 1}],
        "test operation does not apply: is missing path: /nope: missing value",
    ),
    ({"a": 1}, [{"op": "frobnicate", "path": "/a"}], "Unexpected kind: frobnicate"),
    ({"a": 1}, [{"path": "/a"}], "Unexpected kind: unknown"),
    ({"a": 1}, [{"op": "add", "value": 1}], "add operation, missing path field: missing value"),
    ({"a": 1}, [{"op": "add", "path": "/b"}], "add operation, missing value field: missing value"),
]


@pytest.mark.parametrize(("target", "ops", "message"), RFC6902_ERRORS)
def test_json_patch_errors_are_invalid(target: Any, ops: list, message: str) -> None:
    before = copy.deepcopy(target)
    with pytest.raises(PatchError) as err:
        json_patch(target, ops)
    assert err.value.reason == "Invalid"
    assert str(err.value) == message
    assert "\n" not in str(err.value)
    assert target == before


def test_json_patch_failed_test_applies_nothing() -> None:
    target = {"spec": {"replicas": 1}}
    ops = [
        {"op": "replace", "path": "/spec/replicas", "value": 5},
        {"op": "test", "path": "/spec/replicas", "value": 1},
    ]
    with pytest.raises(PatchError):
        json_patch(target, ops)
    assert target == {"spec": {"replicas": 1}}


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ({"op": "add"}, "json: cannot unmarshal object into Go value of type jsonpatch.Patch"),
        ("nope", "json: cannot unmarshal string into Go value of type jsonpatch.Patch"),
        ([1], "json: cannot unmarshal number into Go value of type jsonpatch.Operation"),
    ],
)
def test_json_patch_malformed_document_is_bad_request(ops: Any, message: str) -> None:
    with pytest.raises(PatchError) as err:
        json_patch({}, ops)
    assert err.value.reason == "BadRequest"
    assert str(err.value) == message


def test_json_patch_copy_pointer_escapes_and_root() -> None:
    doc = {"metadata": {"labels": {"a/b": "1", "c~d": "2"}}, "list": [1]}
    ops = [
        {"op": "copy", "from": "/metadata/labels/a~1b", "path": "/metadata/labels/x"},
        {"op": "remove", "path": "/metadata/labels/c~0d"},
        {"op": "add", "path": "/list/0", "value": 0},
        {"op": "add", "path": "/list/-", "value": 2},
    ]
    assert json_patch(doc, ops) == {
        "metadata": {"labels": {"a/b": "1", "x": "1"}},
        "list": [0, 1, 2],
    }
    assert json_patch(doc, [{"op": "replace", "path": "", "value": {"z": 1}}]) == {"z": 1}


def test_json_patch_copied_value_is_independent() -> None:
    doc = {"a": {"b": [1]}}
    result = json_patch(doc, [{"op": "copy", "from": "/a", "path": "/c"}])
    result["c"]["b"].append(2)
    assert result["a"] == {"b": [1]}


def test_json_patch_typical_kubectl_label_removal() -> None:
    node = {"metadata": {"name": "n1", "labels": {"gpu": "h100", "pool": "a"}}}
    ops = [{"op": "remove", "path": "/metadata/labels/gpu"}]
    assert json_patch(node, ops) == {"metadata": {"name": "n1", "labels": {"pool": "a"}}}


# -- strategic merge patch -------------------------------------------------------------------


def _pod(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "x"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "train:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {"name": "sidecar", "image": "log:1"},
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
    }
    base["spec"].update(spec)
    return base


def _node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1", "labels": {"pool": "a"}},
        "spec": {
            "podCIDRs": ["10.0.0.0/24"],
            "taints": [
                {"key": "a", "effect": "NoSchedule"},
                {"key": "b", "value": "x", "effect": "NoExecute"},
            ],
        },
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": "MemoryPressure", "status": "False", "reason": "Fine"},
            ],
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "Hostname", "address": "gpu-1"},
            ],
        },
    }


def _deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "app:1",
                            "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
                        },
                        {"name": "proxy", "image": "envoy:1"},
                    ]
                },
            },
        },
        "status": {
            "conditions": [
                {"type": "Available", "status": "True"},
                {"type": "Progressing", "status": "True"},
            ]
        },
    }


def _directive_keys(value: Any, path: str = "") -> list[str]:
    """Every ``$``-prefixed key anywhere in ``value``."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, child in value.items():
            if key.startswith("$"):
                found.append(f"{path}/{key}")
            found += _directive_keys(child, f"{path}/{key}")
    elif isinstance(value, list):
        for i, child in enumerate(value):
            found += _directive_keys(child, f"{path}/{i}")
    return found


def _smp(target: dict, patch: dict, kind: str, group: str = "") -> dict:
    """Apply and check the inputs were left alone."""
    before = copy.deepcopy((target, patch))
    result = strategic_merge_patch(target, patch, kind, group)
    assert (target, patch) == before, "strategic_merge_patch mutated its inputs"
    return result


def test_smp_kinds_cover_the_builtins_clients_patch() -> None:
    for pair in [
        ("", "Pod"),
        ("", "Node"),
        ("", "Namespace"),
        ("", "Service"),
        ("", "ConfigMap"),
        ("", "Event"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "DaemonSet"),
        ("batch", "Job"),
        ("policy", "PodDisruptionBudget"),
        ("coordination.k8s.io", "Lease"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ]:
        assert pair in SMP_KINDS
    assert ("kubeflow.org", "PyTorchJob") not in SMP_KINDS
    assert ("apps", "Pod") not in SMP_KINDS


def test_smp_container_env_merges_by_name_and_keeps_the_others() -> None:
    patch = {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "3"}]}]}}
    result = _smp(_pod(), patch, "Pod")
    main, sidecar = result["spec"]["containers"]
    assert main["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]
    assert main["image"] == "train:1"
    assert main["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert sidecar == {"name": "sidecar", "image": "log:1"}


def test_smp_container_image_change_keeps_other_containers() -> None:
    patch = {"spec": {"containers": [{"name": "sidecar", "image": "log:2"}]}}
    result = _smp(_pod(), patch, "Pod")
    assert [c["name"] for c in result["spec"]["containers"]] == ["main", "sidecar"]
    assert result["spec"]["containers"][1]["image"] == "log:2"
    assert result["spec"]["containers"][0] == _pod()["spec"]["containers"][0]


def test_smp_ports_merge_by_container_port_and_mounts_by_mount_path() -> None:
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "ports": [{"containerPort": 8080, "name": "http"}, {"containerPort": 9090}],
                    "volumeMounts": [{"name": "data2", "mountPath": "/data"}],
                }
            ]
        }
    }
    main = _smp(_pod(), patch, "Pod")["spec"]["containers"][0]
    assert {"containerPort": 8080, "protocol": "TCP", "name": "http"} in main["ports"]
    assert {"containerPort": 9090} in main["ports"]
    assert len(main["ports"]) == 2
    assert main["volumeMounts"] == [{"name": "data2", "mountPath": "/data"}]


def test_smp_adding_a_toleration_replaces_the_list() -> None:
    patch = {"spec": {"tolerations": [{"key": "dedicated", "value": "train"}]}}
    result = _smp(_pod(), patch, "Pod")
    assert result["spec"]["tolerations"] == [{"key": "dedicated", "value": "train"}]


def test_smp_node_taints_are_replaced_whole() -> None:
    patch = {"spec": {"taints": [{"key": "b", "value": "x", "effect": "NoExecute"}]}}
    result = _smp(_node(), patch, "Node")
    assert result["spec"]["taints"] == [{"key": "b", "value": "x", "effect": "NoExecute"}]


def test_smp_kubectl_taint_removing_the_last_taint() -> None:
    result = _smp(_node(), {"spec": {"taints": None}}, "Node")
    assert "taints" not in result["spec"]
    assert result["spec"]["podCIDRs"] == ["10.0.0.0/24"]


def test_smp_kubectl_cordon() -> None:
    result = _smp(_node(), {"spec": {"unschedulable": True}}, "Node")
    assert result["spec"]["unschedulable"] is True
    assert len(result["spec"]["taints"]) == 2


def test_smp_node_condition_merges_by_type() -> None:
    patch = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady"},
                {"type": "GPUHealthy", "status": "True"},
            ]
        }
    }
    conditions = _smp(_node(), patch, "Node")["status"]["conditions"]
    by_type = {c["type"]: c for c in conditions}
    assert set(by_type) == {"Ready", "MemoryPressure", "GPUHealthy"}
    assert by_type["Ready"] == {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}
    assert by_type["MemoryPressure"] == {
        "type": "MemoryPressure",
        "status": "False",
        "reason": "Fine",
    }
    assert by_type["GPUHealthy"] == {"type": "GPUHealthy", "status": "True"}


def test_smp_node_condition_update_keeps_unpatched_fields() -> None:
    patch = {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    conditions = _smp(_node(), patch, "Node")["status"]["conditions"]
    assert conditions[0] == {"type": "Ready", "status": "Unknown", "reason": "KubeletReady"}
    assert conditions[1]["type"] == "MemoryPressure"


def test_smp_node_addresses_merge_by_type() -> None:
    patch = {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]}}
    addresses = _smp(_node(), patch, "Node")["status"]["addresses"]
    assert {"type": "InternalIP", "address": "10.0.0.9"} in addresses
    assert {"type": "Hostname", "address": "gpu-1"} in addresses
    assert len(addresses) == 2


def test_smp_patch_delete_removes_one_container() -> None:
    patch = {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}
    result = _smp(_pod(), patch, "Pod")
    assert [c["name"] for c in result["spec"]["containers"]] == ["main"]


def test_smp_patch_delete_of_an_env_var_inside_a_container() -> None:
    patch = {"spec": {"containers": [{"name": "main", "env": [{"name": "A", "$patch": "delete"}]}]}}
    result = _smp(_pod(), patch, "Pod")
    assert result["spec"]["containers"][0]["env"] == [{"name": "B", "value": "2"}]


def test_smp_patch_replace_list_element_replaces_the_whole_list() -> None:
    patch = {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "i:1"}]}}
    result = _smp(_pod(), patch, "Pod")
    assert result["spec"]["containers"] == [{"name": "only", "image": "i:1"}]


def test_smp_patch_replace_on_a_map() -> None:
    target = _pod(nodeSelector={"pool": "a", "zone": "z1"})
    patch = {"spec": {"nodeSelector": {"$patch": "replace", "pool": "b"}}}
    assert _smp(target, patch, "Pod")["spec"]["nodeSelector"] == {"pool": "b"}


def test_smp_patch_delete_on_a_map_and_patch_merge() -> None:
    target = _pod(securityContext={"runAsUser": 1000, "fsGroup": 2000})
    deleted = _smp(target, {"spec": {"securityContext": {"$patch": "delete"}}}, "Pod")
    assert deleted["spec"]["securityContext"] == {}
    merged = _smp(target, {"spec": {"securityContext": {"$patch": "merge", "fsGroup": 1}}}, "Pod")
    assert merged["spec"]["securityContext"] == {"runAsUser": 1000, "fsGroup": 1}


def test_smp_whole_object_patch_replace() -> None:
    cm = {"metadata": {"name": "c"}, "data": {"a": "1"}}
    patch = {"$patch": "replace", "metadata": {"name": "c"}, "data": {"b": "2"}}
    assert _smp(cm, patch, "ConfigMap") == {"metadata": {"name": "c"}, "data": {"b": "2"}}


def test_smp_finalizers_union_and_delete_from_primitive_list() -> None:
    pod = _pod()
    pod["metadata"]["finalizers"] = ["a.io/one", "b.io/two"]
    added = _smp(pod, {"metadata": {"finalizers": ["b.io/two", "c.io/three"]}}, "Pod")
    assert sorted(added["metadata"]["finalizers"]) == ["a.io/one", "b.io/two", "c.io/three"]
    removed = _smp(pod, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.io/one"]}}, "Pod")
    assert removed["metadata"]["finalizers"] == ["b.io/two"]
    assert _directive_keys(removed) == []


def test_smp_owner_references_merge_by_uid() -> None:
    pod = _pod()
    pod["metadata"]["ownerReferences"] = [{"uid": "u1", "kind": "ReplicaSet", "name": "rs"}]
    patch = {"metadata": {"ownerReferences": [{"uid": "u2", "kind": "Job", "name": "j"}]}}
    refs = _smp(pod, patch, "Pod")["metadata"]["ownerReferences"]
    assert {r["uid"] for r in refs} == {"u1", "u2"}


def test_smp_labels_are_a_map_and_null_deletes() -> None:
    node = _node()
    patch = {"metadata": {"labels": {"pool": None, "gpu": "h200"}, "annotations": {"x": None}}}
    meta = _smp(node, patch, "Node")["metadata"]
    assert meta["labels"] == {"gpu": "h200"}
    assert meta["annotations"] == {}


def test_smp_new_items_come_first_like_apimachinery() -> None:
    """Without $setElementOrder, apimachinery puts patch items not on the server in front."""
    patch = {"spec": {"containers": [{"name": "new", "image": "n:1"}]}}
    names = [c["name"] for c in _smp(_pod(), patch, "Pod")["spec"]["containers"]]
    assert names == ["new", "main", "sidecar"]


def test_smp_set_element_order_containers() -> None:
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "new"}, {"name": "main"}],
            "containers": [{"name": "new", "image": "n:1"}],
        }
    }
    result = _smp(_pod(), patch, "Pod")
    assert [c["name"] for c in result["spec"]["containers"]] == ["sidecar", "new", "main"]
    assert result["spec"]["containers"][2]["image"] == "train:1"
    assert _directive_keys(result) == []


def test_smp_set_element_order_alone_reorders() -> None:
    patch = {"spec": {"$setElementOrder/containers": [{"name": "sidecar"}, {"name": "main"}]}}
    result = _smp(_pod(), patch, "Pod")
    assert [c["name"] for c in result["spec"]["containers"]] == ["sidecar", "main"]


def test_smp_set_element_order_for_primitives() -> None:
    pod = _pod()
    pod["metadata"]["finalizers"] = ["a", "b", "c"]
    patch = {
        "metadata": {
            "$setElementOrder/finalizers": ["b", "a", "d"],
            "$deleteFromPrimitiveList/finalizers": ["c"],
            "finalizers": ["d"],
        }
    }
    assert _smp(pod, patch, "Pod")["metadata"]["finalizers"] == ["b", "a", "d"]


def test_smp_kubectl_apply_patch_leaves_no_directives() -> None:
    """The shape kubectl apply sends after editing a Deployment manifest."""
    patch = {
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}\n"},
        },
        "spec": {
            "replicas": 3,
            "strategy": {"$retainKeys": ["type"], "rollingUpdate": None, "type": "Recreate"},
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": "app"}],
                    "containers": [
                        {
                            "$setElementOrder/env": [{"name": "X"}, {"name": "Z"}],
                            "env": [{"name": "Y", "$patch": "delete"}, {"name": "Z", "value": "3"}],
                            "image": "app:2",
                            "name": "app",
                        },
                        {"name": "proxy", "$patch": "delete"},
                    ],
                }
            },
        },
    }
    result = _smp(_deployment(), patch, "Deployment", "apps")
    assert _directive_keys(result) == []
    spec = result["spec"]
    assert spec["replicas"] == 3
    assert spec["strategy"] == {"type": "Recreate"}
    (app,) = spec["template"]["spec"]["containers"]
    assert app["image"] == "app:2"
    assert app["env"] == [{"name": "X", "value": "1"}, {"name": "Z", "value": "3"}]
    assert result["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/last-applied-configuration": "{}\n"
    }
    assert result["status"] == _deployment()["status"]


def test_smp_kubectl_apply_creating_lists_with_directives() -> None:
    """Directives inside values the object does not have yet are consumed, not stored."""
    target = {"metadata": {"name": "d"}, "spec": {"template": {"spec": {}}}}
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
                    "containers": [
                        {"name": "a", "$retainKeys": ["name"]},
                        {
                            "name": "b",
                            "$setElementOrder/env": [{"name": "E"}],
                            "env": [{"name": "E", "value": "1"}],
                        },
                    ],
                    "volumes": [{"name": "gone", "$patch": "delete"}, {"name": "v"}],
                    "nodeSelector": {"x": None, "y": "1"},
                }
            }
        }
    }
    pod_spec = _smp(target, patch, "Deployment", "apps")["spec"]["template"]["spec"]
    assert _directive_keys(pod_spec) == []
    assert pod_spec["containers"] == [
        {"name": "a"},
        {"name": "b", "env": [{"name": "E", "value": "1"}]},
    ]
    assert pod_spec["volumes"] == [{"name": "v"}]
    assert pod_spec["nodeSelector"] == {"y": "1"}


def test_smp_retain_keys_clears_fields_of_other_volume_sources() -> None:
    target = _pod(volumes=[{"name": "data", "emptyDir": {}}])
    patch = {
        "spec": {
            "volumes": [
                {"$retainKeys": ["hostPath", "name"], "name": "data", "hostPath": {"path": "/d"}}
            ]
        }
    }
    assert _smp(target, patch, "Pod")["spec"]["volumes"] == [
        {"name": "data", "hostPath": {"path": "/d"}}
    ]


@pytest.mark.parametrize(
    ("kind", "group", "path"),
    [
        ("Deployment", "apps", ("spec", "template", "spec")),
        ("ReplicaSet", "apps", ("spec", "template", "spec")),
        ("DaemonSet", "apps", ("spec", "template", "spec")),
        ("Job", "batch", ("spec", "template", "spec")),
        ("Pod", "", ("spec",)),
    ],
)
def test_smp_pod_spec_location_per_kind(kind: str, group: str, path: tuple[str, ...]) -> None:
    def nest(leaf: dict) -> dict:
        for key in reversed(path):
            leaf = {key: leaf}
        return leaf

    target = nest({"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]})
    patch = nest({"containers": [{"name": "b", "image": "3"}]})
    result = _smp(target, patch, kind, group)
    for key in path:
        result = result[key]
    assert result["containers"] == [{"name": "a", "image": "1"}, {"name": "b", "image": "3"}]


def test_smp_status_conditions_merge_by_type_for_workloads_and_pods() -> None:
    patch = {"status": {"conditions": [{"type": "Progressing", "status": "False"}]}}
    conditions = _smp(_deployment(), patch, "Deployment", "apps")["status"]["conditions"]
    assert conditions == [
        {"type": "Available", "status": "True"},
        {"type": "Progressing", "status": "False"},
    ]
    pod = _pod()
    pod["status"] = {"conditions": [{"type": "Ready", "status": "False"}], "podIPs": []}
    patch = {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    types = [c["type"] for c in _smp(pod, patch, "Pod")["status"]["conditions"]]
    assert sorted(types) == ["PodScheduled", "Ready"]


def test_smp_service_ports_merge_by_port() -> None:
    svc = {
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 8443}]},
    }
    patch = {"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}
    ports = _smp(svc, patch, "Service")["spec"]["ports"]
    assert ports == [{"port": 80, "targetPort": 9090}, {"port": 443, "targetPort": 8443}]


def test_smp_pdb_selector_is_replaced() -> None:
    pdb = {"spec": {"selector": {"matchLabels": {"app": "a", "tier": "x"}}, "minAvailable": 1}}
    patch = {"spec": {"selector": {"matchLabels": {"app": "b"}}}}
    result = _smp(pdb, patch, "PodDisruptionBudget", "policy")
    assert result["spec"] == {"selector": {"matchLabels": {"app": "b"}}, "minAvailable": 1}


def test_smp_lease_and_priority_class_are_plain_merges() -> None:
    lease = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    result = _smp(lease, {"spec": {"holderIdentity": "b"}}, "Lease", "coordination.k8s.io")
    assert result["spec"] == {"holderIdentity": "b", "leaseDurationSeconds": 15}
    pc = {"metadata": {"name": "high"}, "value": 1000}
    result = _smp(pc, {"description": "x"}, "PriorityClass", "scheduling.k8s.io")
    assert result == {"metadata": {"name": "high"}, "value": 1000, "description": "x"}


def test_smp_crd_keeps_dollar_fields_that_are_not_directives() -> None:
    crd = {
        "metadata": {"name": "things.example.com"},
        "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"type": "object"}}}]},
    }
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}
    patch = {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]}}
    result = _smp(crd, patch, "CustomResourceDefinition", "apiextensions.k8s.io")
    # CRD versions have no patch strategy: the list is replaced.
    assert result["spec"]["versions"][0]["schema"]["openAPIV3Schema"] == schema


def test_smp_unknown_kind_still_merges_metadata() -> None:
    obj = {"metadata": {"finalizers": ["a"]}, "spec": {"items": [1, 2]}}
    patch = {"metadata": {"finalizers": ["b"]}, "spec": {"items": [3]}}
    result = _smp(obj, patch, "PyTorchJob", "kubeflow.org")
    assert sorted(result["metadata"]["finalizers"]) == ["a", "b"]
    assert result["spec"]["items"] == [3]


def test_smp_result_shares_nothing_with_inputs() -> None:
    target = _pod()
    patch = {"spec": {"containers": [{"name": "x", "env": [{"name": "E", "value": "1"}]}]}}
    result = strategic_merge_patch(target, patch, "Pod")
    for container in result["spec"]["containers"]:
        container.setdefault("env", []).append({"name": "MUTATED"})
    result["metadata"]["labels"]["mutated"] = "yes"
    assert target == _pod()
    assert patch == {"spec": {"containers": [{"name": "x", "env": [{"name": "E", "value": "1"}]}]}}


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            {"spec": {"containers": [{"name": "main", "$patch": "bogus"}]}},
            "unknown patch type: bogus in map: map[$patch:bogus name:main]",
        ),
        (
            {"spec": {"nodeSelector": {"$patch": "bogus"}}},
            "unknown patch type: bogus in map: map[$patch:bogus]",
        ),
        (
            {"spec": {"containers": [{"$patch": "delete", "image": "x"}]}},
            "map: map[$patch:delete image:x] does not contain declared merge key: name",
        ),
        (
            {"spec": {"containers": [{"image": "x"}]}},
            "map: map[image:x] does not contain declared merge key: name",
        ),
        ({"spec": {"$retainKeys": "containers"}}, "invalid patch format of retainKeys"),
        (
            {"spec": {"$retainKeys": ["containers"], "tolerations": []}},
            "invalid patch format of retainKeys",
        ),
        (
            {"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}},
            "invalid patch format of primitive list",
        ),
        (
            {"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}},
            "invalid patch format of primitive list",
        ),
        (
            {"spec": {"$setElementOrder/containers": {"name": "main"}}},
            "invalid patch format of setElementOrder list",
        ),
        (
            {
                "spec": {
                    "$setElementOrder/containers": [{"name": "main"}],
                    "containers": [{"name": "other", "image": "x"}],
                }
            },
            "The order in patch list: [map[image:x name:other]] doesn't match "
            "$setElementOrder list: [map[name:main]]",
        ),
    ],
)
def test_smp_malformed_directives_are_bad_request(patch: dict, message: str) -> None:
    target = _pod(nodeSelector={"pool": "a"})
    before = copy.deepcopy(target)
    with pytest.raises(PatchError) as err:
        strategic_merge_patch(target, patch, "Pod")
    assert err.value.reason == "BadRequest"
    assert str(err.value) == message
    assert target == before


def test_smp_patch_must_be_an_object() -> None:
    with pytest.raises(PatchError) as err:
        strategic_merge_patch({}, [1], "Pod")  # type: ignore[arg-type]
    assert err.value.reason == "BadRequest"
    assert "cannot unmarshal array" in str(err.value)
