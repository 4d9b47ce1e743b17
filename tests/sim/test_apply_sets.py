"""The field-set algebra behind managedFields (krea_ops.sim.apiserver.apply), on fieldsV1 trees.

Semantics follow sigs.k8s.io/structured-merge-diff's fieldpath.Set (a node is a member
when it is a leaf ``{}`` or carries ``.``) and its path printing (``fieldpath.Path``)."""

from __future__ import annotations

from krea_ops.sim.apiserver import apply as ssa

POD = ssa.root_node("", "Pod", None)


def test_union_and_difference_are_member_wise() -> None:
    a = {"f:spec": {"f:replicas": {}, "f:template": {"f:x": {}}}}
    b = {"f:spec": {"f:replicas": {}}, "f:data": {}}
    both = {"f:spec": {"f:replicas": {}, "f:template": {"f:x": {}}}, "f:data": {}}
    assert ssa.union(a, b) == both
    assert ssa.difference(a, b) == {"f:spec": {"f:template": {"f:x": {}}}}
    # A member that gains children keeps its "." ; one that loses them becomes a leaf.
    assert ssa.union({"f:labels": {}}, {"f:labels": {"f:a": {}}}) == {
        "f:labels": {".": {}, "f:a": {}}
    }
    assert ssa.difference({"f:labels": {".": {}, "f:a": {}}}, {"f:labels": {"f:a": {}}}) == {
        "f:labels": {}
    }
    # Untouched trees are returned as they are (no copy on the hot path).
    assert ssa.difference(a, {"f:other": {}}) is a


def test_without_subtrees_drops_everything_under_a_removed_field() -> None:
    owned = {"f:data": {".": {}, "f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}
    assert ssa.without_subtrees(owned, {"f:metadata": {"f:labels": {}}}) == {
        "f:data": {".": {}, "f:a": {}, "f:b": {}}
    }
    assert ssa.without_subtrees(owned, {"f:data": {"f:a": {}}}) == {
        "f:data": {".": {}, "f:b": {}},
        "f:metadata": {"f:labels": {"f:x": {}}},
    }


def test_compare_marks_added_items_and_maps_as_members() -> None:
    old = {"spec": {"containers": [{"name": "a", "image": "x:1"}]}}
    new = {
        "spec": {
            "containers": [
                {"name": "a", "image": "x:2"},
                {"name": "b", "image": "y", "env": [{"name": "E", "value": "1"}]},
            ],
            "nodeSelector": {"pool": "h200"},
        }
    }
    changed, removed = ssa.compare(old, new, POD)
    assert removed == {}
    assert changed == {
        "f:spec": {
            "f:containers": {
                'k:{"name":"a"}': {"f:image": {}},
                'k:{"name":"b"}': {
                    ".": {},
                    "f:name": {},
                    "f:image": {},
                    "f:env": {'k:{"name":"E"}': {".": {}, "f:name": {}, "f:value": {}}},
                },
            },
            "f:nodeSelector": {".": {}, "f:pool": {}},
        }
    }
    _, removed = ssa.compare(new, old, POD)
    assert removed == {
        "f:spec": {"f:containers": {'k:{"name":"b"}': {}}, "f:nodeSelector": {}}
    }


def test_paths_print_as_fieldpath_does() -> None:
    elements = ["f:spec", "f:containers", 'k:{"name":"web"}', "f:ports",
                'k:{"containerPort":80,"protocol":"TCP"}', "f:name"]  # fmt: skip
    assert ssa.render_path(elements) == (
        '.spec.containers[name="web"].ports[containerPort=80,protocol="TCP"].name'
    )
    assert ssa.render_path(["f:metadata", "f:finalizers", 'v:"x"']) == '.metadata.finalizers[="x"]'


def test_tolerations_are_atomic_and_finalizers_a_set() -> None:
    obj = {
        "metadata": {"finalizers": ["a", "b"]},
        "spec": {"tolerations": [{"key": "k", "operator": "Exists"}]},
    }
    assert ssa.fieldset(obj, POD) == {
        "f:metadata": {"f:finalizers": {'v:"a"': {}, 'v:"b"': {}}},
        "f:spec": {"f:tolerations": {}},
    }


def test_prune_keeps_what_someone_else_still_owns() -> None:
    obj = {"data": {"a": "1", "b": "2", "c": "3"}}
    node = ssa.root_node("", "ConfigMap", None)
    stale = {"f:data": {"f:b": {}, "f:c": {}}}
    keep = {"f:data": {"f:a": {}, "f:c": {}}}
    assert ssa.prune(obj, stale, keep, node) == {"data": {"a": "1", "c": "3"}}
    assert obj == {"data": {"a": "1", "b": "2", "c": "3"}}  # not changed in place


def test_update_takes_fields_from_other_managers() -> None:
    node = ssa.root_node("", "ConfigMap", None)
    base = {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}
    managed = ssa.record_update(
        None, base, manager="creator", subresource="", api_version="v1", now="t1", node=node,
        has_status=False,
    )  # fmt: skip
    assert managed == [
        {
            "manager": "creator",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "t1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, "f:a": {}, "f:b": {}}},
        }
    ]
    stored = {**base, "metadata": {"name": "c", "managedFields": managed}}
    changed = {**stored, "data": {"a": "1", "b": "9"}}
    after = ssa.record_update(
        stored, changed, manager="editor", subresource="", api_version="v1", now="t2",
        node=node, has_status=False,
    )  # fmt: skip
    assert after is not None
    by = {e["manager"]: e for e in after}
    assert by["editor"]["fieldsV1"] == {"f:data": {"f:b": {}}}
    assert by["creator"]["fieldsV1"] == {"f:data": {".": {}, "f:a": {}}}
    assert by["creator"]["time"] == "t1"  # the entry that only lost a field keeps its time
    # A write that changes nothing leaves the entries as they were.
    assert ssa.record_update(
        changed, changed, manager="x", subresource="", api_version="v1", now="t3", node=node,
        has_status=False,
    ) == managed  # fmt: skip


def test_conflict_message_lists_managers_in_identifier_order() -> None:
    alice = {"manager": "alice", "operation": "Apply"}
    kcm = {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1"}
    scaler = {"manager": "kubectl", "operation": "Update", "apiVersion": "apps/v1",
              "subresource": "scale"}  # fmt: skip
    one = ssa.conflict_message([ssa.FieldConflict(scaler, ["f:spec", "f:replicas"])])
    assert one == (
        'Apply failed with 1 conflict: conflict with "kubectl" with subresource "scale" '
        "using apps/v1: .spec.replicas"
    )
    many = ssa.conflict_message(
        [
            ssa.FieldConflict(kcm, ["f:spec", "f:replicas"]),
            ssa.FieldConflict(alice, ["f:spec", "f:template"]),
            ssa.FieldConflict(alice, ["f:spec", "f:paused"]),
        ]
    )
    assert many == (
        'Apply failed with 3 conflicts: conflicts with "alice":\n- .spec.paused\n'
        '- .spec.template\nconflicts with "kube-controller-manager" using apps/v1:\n'
        "- .spec.replicas"
    )


def test_more_than_ten_updaters_fold_into_ancient_changes() -> None:
    node = ssa.root_node("", "ConfigMap", None)
    obj: dict = {"metadata": {"name": "c"}, "data": {}}
    for i in range(12):
        new = {**obj, "data": {**obj["data"], f"k{i}": "v"}}
        managed = ssa.record_update(
            obj, new, manager=f"m{i:02d}", subresource="", api_version="v1", now=f"t{i:02d}",
            node=node, has_status=False,
        )  # fmt: skip
        obj = {**new, "metadata": {"name": "c", "managedFields": managed}}
    entries = obj["metadata"]["managedFields"]
    assert len(entries) == 10
    (ancient,) = [e for e in entries if e["manager"] == "ancient-changes"]
    # m00..m02 folded (the oldest), stamped with the newest of them.
    assert ancient["fieldsV1"] == {"f:data": {"f:k0": {}, "f:k1": {}, "f:k2": {}}}
    assert ancient["time"] == "t02"
    kept = {f"m{i:02d}" for i in range(3, 12)}
    assert {e["manager"] for e in entries} == {"ancient-changes"} | kept
