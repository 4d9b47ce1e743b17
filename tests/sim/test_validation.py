"""Custom-resource validation against the real Kueue and JobSet CRDs, worded as the API server."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from krea_ops.sim.apiserver import validation as V
from krea_ops.sim.apiserver.validation import (
    CrdVersion,
    FieldError,
    apply_defaults,
    bundled_crds,
    evaluate_cel_rules,
    load_crd_versions,
    prune,
    prune_with_report,
    validate_against_schema,
    validate_custom_resource,
    validate_name,
    validate_object_meta,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SAMPLE_FILES = sorted((FIXTURES / "kueue-samples").glob("*.yaml")) + sorted(
    (FIXTURES / "jobset").glob("*.yaml")
)

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
NOT_CHECKED = (
    'Invalid value: "null": some validation rules were not checked because the '
    "object was invalid; correct the existing errors to complete validation"
)
QUANTITY = (
    "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?"
    "(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$"
)

needs_cel = pytest.mark.skipif(not V.CEL_AVAILABLE, reason="cel-python (celpy) not installed")


@pytest.fixture(scope="module")
def versions() -> dict[tuple[str, str], CrdVersion]:
    out = {}
    for crd in bundled_crds():
        for v in load_crd_versions(crd):
            out[(f"{v.group}/{v.version}", v.kind)] = v
    return out


def schema_of(
    versions: dict[tuple[str, str], CrdVersion], kind: str, version: str = "kueue.x-k8s.io/v1beta2"
) -> dict[str, Any]:
    schema = versions[(version, kind)].schema
    assert schema is not None
    return schema


def admit(
    obj: dict[str, Any], schema: dict[str, Any], old: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[FieldError]]:
    """What the server does with a custom resource body: prune, default, validate."""
    cooked = apply_defaults(prune(obj, schema), schema)
    return cooked, validate_custom_resource(cooked, schema, old)


def cluster_queue(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": "default-flavor",
                        "resources": [
                            {"name": "cpu", "nominalQuota": 9},
                            {"name": "memory", "nominalQuota": "36Gi"},
                        ],
                    }
                ],
            }
        ],
    }
    body.update(spec)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cluster-queue"},
        "spec": body,
    }


def only(errors: list[FieldError]) -> FieldError:
    real = [e for e in errors if e.message != NOT_CHECKED]
    assert len(real) == 1, [str(e) for e in errors]
    return real[0]


# ------------------------------------------------------------------- samples validate


def _sample_docs() -> list[Any]:
    params = []
    for path in SAMPLE_FILES:
        for i, doc in enumerate(d for d in yaml.safe_load_all(path.read_text()) if d):
            name = doc["metadata"].get("name") or doc["metadata"].get("generateName")
            params.append(pytest.param(doc, id=f"{path.parent.name}/{path.name}#{i}:{name}"))
    return params


# The upstream JobSet example omits failurePolicy.rules[].name, which the JobSet CRD from the
# same commit marks required: a real API server rejects it exactly so.
REAL_REJECTIONS = {
    "restartjobset-action-example": [
        FieldError("FieldValueRequired", "spec.failurePolicy.rules[0].name", "Required value"),
        FieldError("FieldValueInvalid", "<nil>", NOT_CHECKED),
    ],
}
NO_BUNDLED_CRD = {("batch/v1", "Job")}


@pytest.mark.parametrize("doc", _sample_docs())
def test_sample_validates_against_its_crd(
    doc: dict[str, Any], versions: dict[tuple[str, str], CrdVersion]
) -> None:
    key = (doc["apiVersion"], doc["kind"])
    if key in NO_BUNDLED_CRD:
        assert key not in versions  # a built-in / Kubeflow kind: not validated here
        return
    v = versions[key]
    assert v.served
    cooked, errors = admit(doc, v.schema or {})
    meta = copy.deepcopy(cooked["metadata"])
    if v.namespaced:
        meta.setdefault("namespace", "default")
    errors += validate_object_meta(meta, "dns1123-subdomain", v.namespaced)
    assert errors == REAL_REJECTIONS.get(doc["metadata"].get("name"), [])
    # pruning kept everything the samples say (they use no unknown fields)
    assert prune_with_report(doc, v.schema or {})[1] == []


def test_samples_cover_every_kind_with_a_crd(versions: dict[tuple[str, str], CrdVersion]) -> None:
    kinds = {
        (d["apiVersion"], d["kind"])
        for p in SAMPLE_FILES
        for d in yaml.safe_load_all(p.read_text())
        if d
    }
    assert kinds - NO_BUNDLED_CRD <= set(versions)
    assert {"ClusterQueue", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass", "JobSet"} <= {
        k for _, k in kinds
    }


def test_samples_validate_against_v1beta1_too(versions: dict[tuple[str, str], CrdVersion]) -> None:
    docs = yaml.safe_load_all(
        (FIXTURES / "kueue-samples" / "single-clusterqueue-setup.yaml").read_text()
    )
    for doc in docs:
        v = versions[("kueue.x-k8s.io/v1beta1", doc["kind"])]
        assert v.deprecated and not v.storage
        doc["apiVersion"] = "kueue.x-k8s.io/v1beta1"
        assert admit(doc, v.schema or {})[1] == []


# ------------------------------------------------------------------- defaulting


def test_cluster_queue_defaults(versions: dict[tuple[str, str], CrdVersion]) -> None:
    schema = schema_of(versions, "ClusterQueue")
    cooked, errors = admit(cluster_queue(), schema)
    assert errors == []
    spec = cooked["spec"]
    assert spec["queueingStrategy"] == "BestEffortFIFO"
    assert spec["stopPolicy"] == "None"
    assert spec["preemption"] == {
        "borrowWithinCohort": {"policy": "Never"},
        "reclaimWithinCohort": "Never",
        "withinClusterQueue": "Never",
    }
    assert spec["flavorFungibility"] == {
        "whenCanBorrow": "MayStopSearch",
        "whenCanPreempt": "TryNextFlavor",
    }


def test_defaults_keep_given_values_and_do_not_mutate_input(
    versions: dict[tuple[str, str], CrdVersion],
) -> None:
    schema = schema_of(versions, "ClusterQueue")
    obj = cluster_queue(
        queueingStrategy="StrictFIFO", preemption={"withinClusterQueue": "LowerPriority"}
    )
    before = copy.deepcopy(obj)
    cooked = apply_defaults(obj, schema)
    assert obj == before
    assert cooked["spec"]["queueingStrategy"] == "StrictFIFO"
    assert cooked["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
    assert cooked["spec"]["preemption"]["reclaimWithinCohort"] == "Never"


def test_jobset_defaults(versions: dict[tuple[str, str], CrdVersion]) -> None:
    schema = schema_of(versions, "JobSet", "jobset.x-k8s.io/v1alpha2")
    doc = yaml.safe_load((FIXTURES / "jobset" / "example-resnet.yaml").read_text())
    cooked, errors = admit(doc, schema)
    assert errors == []
    rjob = cooked["spec"]["replicatedJobs"][0]
    assert rjob["replicas"] == 1 and rjob["groupName"] == "default"
    assert "replicas" not in doc["spec"]["replicatedJobs"][0]


def test_nulls_are_defaulted_or_dropped() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "default": "x"},
            "b": {"type": "string"},
            "c": {"type": "string", "nullable": True},
            "d": {
                "type": "object",
                "default": {},
                "properties": {"e": {"type": "integer", "default": 3}},
            },
        },
    }
    assert apply_defaults({"a": None, "b": None, "c": None}, schema) == {
        "a": "x",
        "c": None,
        "d": {"e": 3},
    }


# ------------------------------------------------------------------- errors a user sees


def test_wrong_type(versions: dict[tuple[str, str], CrdVersion]) -> None:
    schema = schema_of(versions, "WorkloadPriorityClass")
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "high"},
        "value": "1000",
    }
    e = only(admit(obj, schema)[1])
    assert e == FieldError(
        "FieldValueTypeInvalid",
        "value",
        'Invalid value: "string": value in body must be of type integer: "string"',
    )
    assert str(e) == (
        'value: Invalid value: "string": value in body must be of type integer: "string"'
    )


def test_wrong_type_nested_and_integral_float_accepted(
    versions: dict[tuple[str, str], CrdVersion],
) -> None:
    schema = schema_of(versions, "JobSet", "jobset.x-k8s.io/v1alpha2")
    doc = yaml.safe_load((FIXTURES / "jobset" / "example-resnet.yaml").read_text())
    doc["spec"]["replicatedJobs"][0]["replicas"] = "two"
    e = only(admit(doc, schema)[1])
    assert (e.type, e.field) == ("FieldValueTypeInvalid", "spec.replicatedJobs[0].replicas")
    assert e.message == (
        'Invalid value: "string": spec.replicatedJobs[0].replicas in body must '
        'be of type integer: "string"'
    )
    doc["spec"]["replicatedJobs"][0]["replicas"] = 2.0  # JSON 2.0 is an integer to the server
    assert admit(doc, schema)[1] == []


def test_missing_required_field(versions: dict[tuple[str, str], CrdVersion]) -> None:
    obj = cluster_queue()
    del obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"]
    _, errors = admit(obj, schema_of(versions, "ClusterQueue"))
    assert errors == [
        FieldError(
            "FieldValueRequired",
            "spec.resourceGroups[0].flavors[0].resources[1].nominalQuota",
            "Required value",
        ),
        # a required-field error blocks the CEL rules, as on the real server
        FieldError("FieldValueInvalid", "<nil>", NOT_CHECKED),
    ]


def test_enum_violation_preemption_policy(versions: dict[tuple[str, str], CrdVersion]) -> None:
    obj = cluster_queue(
        preemption={"borrowWithinCohort": {"policy": "Always"}, "withinClusterQueue": "Sometimes"}
    )
    errors = admit(obj, schema_of(versions, "ClusterQueue"))[1]
    assert errors[:2] == [
        FieldError(
            "FieldValueNotSupported",
            "spec.preemption.borrowWithinCohort.policy",
            'Unsupported value: "Always": supported values: "Never", "LowerPriority"',
        ),
        FieldError(
            "FieldValueNotSupported",
            "spec.preemption.withinClusterQueue",
            'Unsupported value: "Sometimes": supported values: "Never", '
            '"LowerPriority", "LowerOrNewerEqualPriority"',
        ),
    ]


def test_pattern_violation(versions: dict[tuple[str, str], CrdVersion]) -> None:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["name"] = "Default_Flavor"
    e = only(admit(obj, schema_of(versions, "ClusterQueue"))[1])
    path = "spec.resourceGroups[0].flavors[0].name"
    assert e == FieldError(
        "FieldValueInvalid",
        path,
        f'Invalid value: "Default_Flavor": {path} in body should match '
        "'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
    )


def test_quantity_pattern_applies_to_strings_only(
    versions: dict[tuple[str, str], CrdVersion],
) -> None:
    schema = schema_of(versions, "ClusterQueue")
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = "lots"
    path = "spec.resourceGroups[0].flavors[0].resources[1].nominalQuota"
    assert only(admit(obj, schema)[1]) == FieldError(
        "FieldValueInvalid",
        path,
        f"Invalid value: \"lots\": {path} in body should match '{QUANTITY}'",
    )
    for good in (0, 300, "300m", "1.5Gi", "1e3", "+2k"):
        obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = good
        assert admit(obj, schema)[1] == []


def test_int_or_string_wrong_type(versions: dict[tuple[str, str], CrdVersion]) -> None:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = True
    path = "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    errors = admit(obj, schema_of(versions, "ClusterQueue"))[1]
    assert errors == [
        FieldError(
            "FieldValueTypeInvalid",
            path,
            f'Invalid value: "boolean": {path} in body must be of type integer,string: "boolean"',
        ),
        FieldError(
            "FieldValueInvalid",
            "<nil>",
            f'Invalid value: "": "{path}" must validate at least one schema (anyOf)',
        ),
        FieldError(
            "FieldValueTypeInvalid",
            path,
            f'Invalid value: "boolean": {path} in body must be of type integer: "boolean"',
        ),
        FieldError("FieldValueInvalid", "<nil>", NOT_CHECKED),
    ]


def test_minimum(versions: dict[tuple[str, str], CrdVersion]) -> None:
    schema = schema_of(versions, "JobSet", "jobset.x-k8s.io/v1alpha2")
    doc = yaml.safe_load((FIXTURES / "jobset" / "example-resnet.yaml").read_text())
    doc["spec"]["replicatedJobs"][0]["replicas"] = -1
    path = "spec.replicatedJobs[0].replicas"
    assert only(admit(doc, schema)[1]) == FieldError(
        "FieldValueInvalid",
        path,
        f"Invalid value: -1: {path} in body should be greater than or equal to 0",
    )


def test_numeric_bounds_messages() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "maximum": 10},
            "b": {"type": "number", "minimum": 0.5, "exclusiveMinimum": True},
            "c": {"type": "integer", "maximum": 5, "exclusiveMaximum": True},
            "d": {"type": "integer", "multipleOf": 4},
        },
    }
    assert validate_against_schema({"a": 11, "b": 0.5, "c": 5, "d": 6}, schema) == [
        FieldError(
            "FieldValueInvalid",
            "a",
            "Invalid value: 11: a in body should be less than or equal to 10",
        ),
        FieldError(
            "FieldValueInvalid", "b", "Invalid value: 0.5: b in body should be greater than 0.5"
        ),
        FieldError("FieldValueInvalid", "c", "Invalid value: 5: c in body should be less than 5"),
        FieldError(
            "FieldValueInvalid", "d", "Invalid value: 6: d in body should be a multiple of 4"
        ),
    ]


def test_max_items_and_max_length(versions: dict[tuple[str, str], CrdVersion]) -> None:
    schema = schema_of(versions, "ClusterQueue")
    obj = cluster_queue(cohortName="c" * 254)
    obj["spec"]["resourceGroups"][0]["coveredResources"] = [f"r{i}" for i in range(65)]
    errors = admit(obj, schema)[1]
    assert errors == [
        FieldError(
            "FieldValueTooLong", "spec.cohortName", "Too long: may not be more than 253 bytes"
        ),
        FieldError(
            "FieldValueTooMany",
            "spec.resourceGroups[0].coveredResources",
            "Too many: 65: must have at most 64 items",
        ),
        FieldError("FieldValueInvalid", "<nil>", NOT_CHECKED),
    ]


def test_min_items_and_min_length() -> None:
    schema = {
        "type": "object",
        "properties": {
            "xs": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            "s": {"type": "string", "minLength": 2},
            "m": {"type": "object", "minProperties": 1},
            "n": {"type": "object", "maxProperties": 1},
        },
    }
    assert validate_against_schema(
        {"xs": [], "s": "a", "m": {}, "n": {"a": 1, "b": 2}}, schema
    ) == [
        FieldError(
            "FieldValueInvalid", "xs", "Invalid value: 0: xs in body should have at least 1 items"
        ),
        FieldError(
            "FieldValueInvalid",
            "s",
            'Invalid value: "a": s in body should be at least 2 chars long',
        ),
        FieldError(
            "FieldValueInvalid",
            "m",
            "Invalid value: 0: m in body should have at least 1 properties",
        ),
        FieldError("FieldValueTooMany", "n", "Too many: 2: must have at most 1 item"),
    ]


def test_duplicate_in_list_map(versions: dict[tuple[str, str], CrdVersion]) -> None:
    obj = cluster_queue()
    flavors = obj["spec"]["resourceGroups"][0]["flavors"]
    flavors.append(copy.deepcopy(flavors[0]))
    flavors.append(copy.deepcopy(flavors[0]))
    flavors[0]["resources"].append({"name": "cpu", "nominalQuota": 1})
    errors = admit(obj, schema_of(versions, "ClusterQueue"))[1]
    dup = [e for e in errors if e.type == "FieldValueDuplicate"]
    assert dup == [
        FieldError(
            "FieldValueDuplicate",
            "spec.resourceGroups[0].flavors[1]",
            'Duplicate value: map[string]interface {}{"name":"default-flavor"}',
        ),
        FieldError(
            "FieldValueDuplicate",
            "spec.resourceGroups[0].flavors[0].resources[2]",
            'Duplicate value: map[string]interface {}{"name":"cpu"}',
        ),
    ]


def test_duplicates_in_set_and_multi_key_map() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["port", "protocol"],
                "items": {
                    "type": "object",
                    "properties": {"port": {"type": "integer"}, "protocol": {"type": "string"}},
                },
            },
        },
    }
    obj = {
        "tags": ["a", "b", "a", "a"],
        "ports": [
            {"port": 80, "protocol": "TCP"},
            {"port": 80, "protocol": "UDP"},
            {"port": 80, "protocol": "TCP"},
        ],
    }
    assert validate_against_schema(obj, schema) == [
        FieldError("FieldValueDuplicate", "tags[2]", 'Duplicate value: "a"'),
        FieldError(
            "FieldValueDuplicate",
            "ports[2]",
            'Duplicate value: map[string]interface {}{"port":80, "protocol":"TCP"}',
        ),
    ]


def test_unknown_fields_are_pruned_not_errors(versions: dict[tuple[str, str], CrdVersion]) -> None:
    schema = schema_of(versions, "ClusterQueue")
    obj = cluster_queue(colour="blue")
    obj["spec"]["resourceGroups"][0]["flavors"][0]["weight"] = 3
    obj["status"] = {"pendingWorkloads": 1, "mood": "ok"}
    obj["extra"] = True
    obj["metadata"]["labels"] = {"team": "a"}
    pruned, dropped = prune_with_report(obj, schema)
    assert dropped == [
        "spec.resourceGroups[0].flavors[0].weight",
        "spec.colour",
        "status.mood",
        "extra",
    ]
    assert "colour" not in pruned["spec"] and "extra" not in pruned
    assert pruned["status"] == {"pendingWorkloads": 1}
    assert pruned["metadata"] == {"name": "cluster-queue", "labels": {"team": "a"}}
    assert pruned["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert admit(obj, schema)[1] == []
    assert "colour" in obj["spec"]  # the input is left alone


def test_prune_preserve_unknown_fields_and_embedded_resources() -> None:
    schema = {
        "type": "object",
        "properties": {
            "free": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {
                    "typed": {"type": "object", "properties": {"a": {"type": "string"}}}
                },
            },
            "embedded": {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}},
            },
        },
    }
    obj = {
        "free": {"anything": {"goes": 1}, "typed": {"a": "1", "b": "2"}},
        "embedded": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"x": "1", "y": "2"},
        },
    }
    out, dropped = prune_with_report(obj, schema)
    assert out["free"] == {"anything": {"goes": 1}, "typed": {"a": "1"}}
    assert out["embedded"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"x": "1"},
    }
    assert dropped == ["free.typed.b", "embedded.spec.y"]
    bad = {"embedded": {"spec": {}}}
    assert validate_against_schema(bad, schema) == [
        FieldError(
            "FieldValueRequired", "embedded.apiVersion", "Required value: must not be empty"
        ),
        FieldError("FieldValueRequired", "embedded.kind", "Required value: must not be empty"),
    ]


def test_format_date_time_and_null() -> None:
    schema = {
        "type": "object",
        "properties": {
            "t": {"type": "string", "format": "date-time"},
            "n": {"type": "integer", "format": "int32"},
            "xs": {"type": "array", "items": {"type": "string"}},
        },
    }
    assert validate_against_schema({"t": "2026-01-02T03:04:05Z", "n": 2**40}, schema) == []
    assert validate_against_schema({"t": "yesterday", "xs": [None]}, schema) == [
        FieldError(
            "FieldValueTypeInvalid",
            "t",
            'Invalid value: "yesterday": t in body must be of type date-time: "yesterday"',
        ),
        FieldError(
            "FieldValueTypeInvalid",
            "xs[0]",
            'Invalid value: "null": xs[0] in body must be of type string: "null"',
        ),
    ]


def test_root_type_error_is_reported_at_nil() -> None:
    assert validate_against_schema([], {"type": "object"}) == [
        FieldError(
            "FieldValueTypeInvalid",
            "<nil>",
            'Invalid value: "array":  in body must be of type object: "array"',
        )
    ]
    assert validate_against_schema(
        {"x": "1"}, {"type": "object", "properties": {"x": {"type": "integer"}}}, root="spec"
    ) == [
        FieldError(
            "FieldValueTypeInvalid",
            "spec.x",
            'Invalid value: "string": spec.x in body must be of type integer: "string"',
        )
    ]


# ------------------------------------------------------------------- CEL


@needs_cel
def test_cel_rule_failure(versions: dict[tuple[str, str], CrdVersion]) -> None:
    schema = schema_of(versions, "ClusterQueue")
    obj = cluster_queue(
        flavorFungibility={"preference": "BorrowingOverPreemption"},
        preemption={
            "reclaimWithinCohort": "Never",
            "borrowWithinCohort": {"policy": "LowerPriority"},
        },
    )
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()
    assert admit(obj, schema)[1] == [
        FieldError(
            "FieldValueInvalid",
            "spec.flavorFungibility",
            'Invalid value: "object": preference can only be set when both '
            "whenCanBorrow and whenCanPreempt are TryNextFlavor",
        ),
        FieldError(
            "FieldValueInvalid",
            "spec.preemption",
            'Invalid value: "object": reclaimWithinCohort=Never and '
            "borrowWithinCohort.Policy!=Never",
        ),
        FieldError(
            "FieldValueInvalid",
            "spec.resourceGroups[0]",
            'Invalid value: "object": flavors must have the same number of resources '
            "as the coveredResources",
        ),
    ]


@needs_cel
def test_cel_borrowing_limit_without_cohort(versions: dict[tuple[str, str], CrdVersion]) -> None:
    schema = schema_of(versions, "ClusterQueue")
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 1
    assert admit(obj, schema)[1] == [
        FieldError(
            "FieldValueInvalid",
            "spec",
            'Invalid value: "object": borrowingLimit must be nil when cohort is empty',
        )
    ]
    obj["spec"]["cohortName"] = "pool"
    assert admit(obj, schema)[1] == []


@needs_cel
def test_cel_root_rule_reports_at_nil(versions: dict[tuple[str, str], CrdVersion]) -> None:
    schema = schema_of(versions, "Workload")
    wl = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {
            "queueName": "user-queue",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
                }
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "r",
                    "message": "m",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            "admission": {"clusterQueue": "cq", "podSetAssignments": []},
        },
    }
    assert admit(wl, schema)[1] == [
        FieldError(
            "FieldValueInvalid",
            "<nil>",
            'Invalid value: "object": podSetAssignments must have the same number of podSets as '
            "the spec",
        )
    ]


@needs_cel
def test_cel_transition_rule_only_on_update(versions: dict[tuple[str, str], CrdVersion]) -> None:
    schema = schema_of(versions, "LocalQueue")

    def lq(cq: str) -> dict[str, Any]:
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": "default"},
            "spec": {"clusterQueue": cq},
        }

    assert admit(lq("b"), schema)[1] == []
    old = apply_defaults(lq("a"), schema)
    assert admit(lq("b"), schema, old)[1] == [
        FieldError(
            "FieldValueInvalid", "spec.clusterQueue", 'Invalid value: "string": field is immutable'
        )
    ]
    assert admit(lq("a"), schema, old)[1] == []


@needs_cel
def test_cel_list_map_items_correlate_with_old(versions: dict[tuple[str, str], CrdVersion]) -> None:
    schema = {
        "type": "object",
        "properties": {
            "xs": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["k"],
                "items": {
                    "type": "object",
                    "properties": {"k": {"type": "string"}, "v": {"type": "integer"}},
                    "x-kubernetes-validations": [{"rule": "self.v >= oldSelf.v"}],
                },
            }
        },
    }
    old = {"xs": [{"k": "a", "v": 5}, {"k": "b", "v": 1}]}
    new = {"xs": [{"k": "b", "v": 0}, {"k": "a", "v": 6}, {"k": "c", "v": 0}]}
    assert evaluate_cel_rules(new, schema, old) == [
        FieldError(
            "FieldValueInvalid",
            "xs[0]",
            'Invalid value: "object": failed rule: self.v >= oldSelf.v',
        )
    ]


@needs_cel
def test_cel_runtime_error_and_uncompilable_rule_is_skipped() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "x-kubernetes-validations": [
                    {"rule": "self.n > 1", "message": "n must exceed 1"},
                    {"rule": "self.n >", "message": "never compiles"},
                    {"rule": "self.n < 10", "fieldPath": ".n", "reason": "FieldValueForbidden"},
                ],
            }
        },
    }
    assert evaluate_cel_rules({"a": {"n": 0}}, schema) == [
        FieldError("FieldValueInvalid", "a", 'Invalid value: "object": n must exceed 1')
    ]
    assert evaluate_cel_rules({"a": {"n": 10}}, schema) == [
        FieldError("FieldValueForbidden", "a.n", "Forbidden: failed rule: self.n < 10")
    ]
    assert evaluate_cel_rules({"a": {}}, schema)[0] == FieldError(
        "FieldValueInvalid",
        "a",
        'Invalid value: "object": no such key: n evaluating rule: n must exceed 1',
    )
    assert "self.n >" in [rule for rule, _ in V.SKIPPED_CEL_RULES]


@needs_cel
def test_every_bundled_cel_rule_compiles() -> None:
    rules: list[str] = []

    def walk(s: Any) -> None:
        if isinstance(s, dict):
            rules.extend(r["rule"] for r in s.get("x-kubernetes-validations") or [])
            for k, v in s.items():
                if k != "x-kubernetes-validations":
                    walk(v)
        elif isinstance(s, list):
            for v in s:
                walk(v)

    for crd in bundled_crds():
        walk(crd["spec"]["versions"])
    assert len(rules) > 40
    for rule in rules:
        assert V._cel_program(rule) is not None, rule


# ------------------------------------------------------------------- names and metadata


def test_invalid_name_real_message() -> None:
    assert validate_name("Cluster_Queue", "dns1123-subdomain") == [SUBDOMAIN_MSG]
    errors = validate_object_meta({"name": "Cluster_Queue"}, "dns1123-subdomain", False)
    assert errors == [
        FieldError(
            "FieldValueInvalid", "metadata.name", f'Invalid value: "Cluster_Queue": {SUBDOMAIN_MSG}'
        )
    ]


def test_name_rules() -> None:
    assert validate_name("a" * 254, "dns1123-subdomain") == ["must be no more than 253 characters"]
    assert validate_name("a.b", "dns1123-label") == ["must not contain dots"]
    assert validate_name("-a", "dns1123-label") == [
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
        "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
        "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    ]
    assert validate_name("1abc", "dns1035-label") == [
        "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
        "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
        "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
    ]
    assert validate_name("..", "path-segment") == ["may not be '..'"]
    assert validate_name("a/b%c", "path-segment") == ["may not contain '/'", "may not contain '%'"]
    assert validate_name("sleep-job-", "dns1123-subdomain", prefix=True) == []
    assert validate_name("ok\n", "dns1123-subdomain") == [SUBDOMAIN_MSG]
    with pytest.raises(ValueError):
        validate_name("x", "nope")


def test_label_value_too_long_and_bad_key() -> None:
    value = "v" * 64
    errors = validate_object_meta(
        {
            "name": "q",
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/queue-name": value, "bad key": "x"},
        },
        "dns1123-subdomain",
        True,
    )
    assert errors == [
        FieldError(
            "FieldValueInvalid",
            "metadata.labels",
            f'Invalid value: "{value}": must be no more than 63 characters',
        ),
        FieldError(
            "FieldValueInvalid",
            "metadata.labels",
            'Invalid value: "bad key": name part must consist of alphanumeric '
            "characters, '-', '_' or '.', and must start and end with an alphanumeric "
            "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
    ]
    assert str(errors[0]) == (
        'metadata.labels: Invalid value: "' + value + '": must be no more than 63 characters'
    )


def test_object_meta_name_namespace_annotations() -> None:
    assert validate_object_meta({}, "dns1123-subdomain", False) == [
        FieldError(
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required",
        )
    ]
    assert (
        validate_object_meta(
            {"generateName": "sleep-job-", "namespace": "default"}, "dns1123-subdomain", True
        )
        == []
    )
    assert validate_object_meta({"name": "a"}, "dns1123-subdomain", True) == [
        FieldError("FieldValueRequired", "metadata.namespace", "Required value")
    ]
    assert validate_object_meta({"name": "a", "namespace": "ns"}, "dns1123-subdomain", False) == [
        FieldError(
            "FieldValueForbidden", "metadata.namespace", "Forbidden: not allowed on this type"
        )
    ]
    big = {"note": "x" * (256 * 1024)}
    assert validate_object_meta({"name": "a", "annotations": big}, "dns1123-subdomain", False) == [
        FieldError(
            "FieldValueTooLong",
            "metadata.annotations",
            "Too long: may not be more than 262144 bytes",
        )
    ]


# ------------------------------------------------------------------- CRD loading


def test_load_crd_versions_cluster_queue() -> None:
    crd = next(c for c in bundled_crds() if c["metadata"]["name"] == "clusterqueues.kueue.x-k8s.io")
    vs = load_crd_versions(crd)
    assert [v.version for v in vs] == ["v1beta1", "v1beta2"]
    v1beta1, v1beta2 = vs
    assert v1beta2.storage and not v1beta1.storage and v1beta1.served and v1beta2.served
    assert v1beta1.deprecated and v1beta1.deprecation_warning == (
        "This version is deprecated. Use v1beta2 instead."
    )
    assert (v1beta2.group, v1beta2.kind, v1beta2.plural, v1beta2.singular) == (
        "kueue.x-k8s.io",
        "ClusterQueue",
        "clusterqueues",
        "clusterqueue",
    )
    assert v1beta2.short_names == ("cq",)
    assert v1beta2.namespaced is False
    assert v1beta2.status_subresource and v1beta2.scale_subresource is None
    assert [c["name"] for c in v1beta2.printer_columns] == [
        "Cohort",
        "Strategy",
        "Pending Workloads",
        "Admitted Workloads",
    ]
    assert v1beta2.printer_columns[0]["jsonPath"] == ".spec.cohortName"
    assert v1beta1.printer_columns[0]["jsonPath"] == ".spec.cohort"
    assert v1beta2.list_kind == "ClusterQueueList"
    assert v1beta2.schema is not None and v1beta2.schema["type"] == "object"


def test_bundled_crds() -> None:
    crds = bundled_crds()
    assert sorted(c["metadata"]["name"] for c in crds) == [
        "clusterqueues.kueue.x-k8s.io",
        "cohorts.kueue.x-k8s.io",
        "jobsets.jobset.x-k8s.io",
        "localqueues.kueue.x-k8s.io",
        "pytorchjobs.kubeflow.org",
        "resourceflavors.kueue.x-k8s.io",
        "topologies.kueue.x-k8s.io",
        "workloadpriorityclasses.kueue.x-k8s.io",
        "workloads.kueue.x-k8s.io",
    ]
    crds[0]["spec"] = None
    assert bundled_crds()[0]["spec"] is not None  # callers get their own copies
    by_kind = {v.kind: v for c in bundled_crds() for v in load_crd_versions(c) if v.storage}
    assert by_kind["JobSet"].namespaced and by_kind["JobSet"].version == "v1alpha2"
    assert by_kind["LocalQueue"].namespaced and by_kind["Workload"].namespaced
    assert not by_kind["ResourceFlavor"].namespaced
    assert not by_kind["WorkloadPriorityClass"].namespaced
    assert all(
        v.version == "v1beta2" for k, v in by_kind.items() if k not in ("JobSet", "PyTorchJob")
    )


# ------------------------------------------------------------------- Go formatting


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (1e6, "1e+06"),
        (100000.0, "100000"),
        (0.5, "0.5"),
        (1.5e-7, "1.5e-07"),
        (123456.7, "123456.7"),
        (-2.0, "-2"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
    ],
)
def test_go_float(value: float, shown: str) -> None:
    assert V.go_float(value) == shown


def test_error_body_values() -> None:
    assert V.error_body("FieldValueInvalid", 'a"b\n') == 'Invalid value: "a\\"b\\n"'
    assert V.error_body("FieldValueInvalid", None, "x") == 'Invalid value: "null": x'
    assert V.error_body("FieldValueInvalid", ["a", 1, None, True]) == (
        'Invalid value: []interface {}{"a", 1, interface {}(nil), true}'
    )
    assert V.error_body("FieldValueRequired", "ignored", "d") == "Required value: d"
