"""Label and field selectors: parsing, matching and the API server's error wording."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest

from krea_ops.sim.apiserver.selectors import (
    FIELD_SELECTORS,
    FieldSelector,
    LabelSelector,
    SelectorError,
    SupportedFields,
    crd_field_selectors,
    field_value,
    go_quote,
    label_selector_from_set,
    label_selector_from_spec,
    parse_field_selector,
    parse_label_selector,
    selectable_field_value,
)

KUBECTL = shutil.which("kubectl") or (
    "/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else None
)

NAME_PART_ERR = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
VALUE_ERR = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


# -- label selectors: operators ----------------------------------------------------------

LABELS = {"app": "web", "tier": "frontend", "gpu": "8", "env": "prod"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", True),
        ("app==web", True),
        ("app=db", False),
        ("missing=x", False),
        ("app!=db", True),
        ("app!=web", False),
        ("missing!=x", True),  # != matches objects without the label
        ("tier in (frontend,backend)", True),
        ("tier in (backend)", False),
        ("missing in (x)", False),
        ("env notin (dev,staging)", True),
        ("env notin (prod)", False),
        ("missing notin (x)", True),  # notin matches objects without the label
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("gpu>4", True),
        ("gpu>8", False),
        ("gpu<9", True),
        ("app>1", False),  # not an integer on the object: no match
        ("missing<100", False),
        ("app=web,tier in (frontend),!missing,env!=dev", True),
        ("app=web,tier=backend", False),
        ("", True),
    ],
)
def test_label_operators(selector: str, expected: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is expected


def test_label_selector_tolerates_whitespace_and_keywords_as_values() -> None:
    sel = parse_label_selector("  app = web ,\ttier  in  ( frontend , backend ) , ! missing ")
    assert sel.matches(LABELS)
    assert str(sel) == "app=web,!missing,tier in (backend,frontend)"  # sorted by key
    # "in" and "notin" are identifiers where a key or value is expected
    assert parse_label_selector("in in (in,notin)").matches({"in": "notin"})
    assert parse_label_selector("notin=in").matches({"notin": "in"})


def test_label_selector_values_and_empty_values() -> None:
    assert parse_label_selector("a=").matches({"a": ""})
    assert not parse_label_selector("a=").matches({})
    assert parse_label_selector("a in ()").matches({"a": ""})
    sel = parse_label_selector("x in (foo,,baz),y,z notin ()")
    assert str(sel) == "x in (,baz,foo),y,z notin ()"
    assert sel.matches({"x": "", "y": "1"})
    assert parse_label_selector("example.com/gpu-type=h200").matches(
        {"example.com/gpu-type": "h200"}
    )


def test_empty_label_selector_and_none_labels() -> None:
    sel = parse_label_selector("")
    assert sel.empty and sel.matches(None) and sel.matches({})
    assert not parse_label_selector("a").empty
    assert parse_label_selector("!a").matches(None)
    assert not parse_label_selector("a=b").matches(None)


def test_requires_exact_match() -> None:
    sel = parse_label_selector("app=web,tier in (a),env in (a,b),x!=y")
    assert sel.requires_exact_match("app") == "web"
    assert sel.requires_exact_match("tier") == "a"
    assert sel.requires_exact_match("env") is None
    assert sel.requires_exact_match("x") is None
    assert sel.requires_exact_match("nope") is None


# -- label selectors: errors (text verified against kubectl v1.32's own parser) -----------

PARSE_ERRORS = [
    ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    ("a!", "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt"),
    ("a=b,", "found '', expected: identifier after ','"),
    (",a", "found ',', expected: !, identifier, or 'end of string'"),
    ("a=b c", "found 'c', expected: ',' or 'end of string'"),
    ("!a=b", "found '=', expected: ',' or 'end of string'"),
    ("a=b=c", "found '=', expected: ',' or 'end of string'"),
    ("a in (", "unable to parse requirement: found '', expected: ',', ')' or identifier"),
    ("a in x", "unable to parse requirement: found 'x' expected: '('"),
    ("a in (x y)", "unable to parse requirement: found 'y', expected: ',' or ')'"),
    ("a in (x", "unable to parse requirement: found '', expected: ',' or ')'"),
    ("!", "unable to parse requirement: found '', expected: identifier"),
    ("a=(", "unable to parse requirement: found '(', expected: identifier"),
    ("a_=b", f'unable to parse requirement: <nil>: Invalid value: "a_": {NAME_PART_ERR}'),
    ("-a", f'unable to parse requirement: <nil>: Invalid value: "-a": {NAME_PART_ERR}'),
    (
        "a>x",
        "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' "
        "operators, the value must be an integer",
    ),
    ("a<-3", f'unable to parse requirement: values[0][a]: Invalid value: "-3": {VALUE_ERR}'),
    ("a=b!c", "found '!', expected: ',' or 'end of string'"),
    (
        "a=" + "x" * 64,
        'unable to parse requirement: values[0][a]: Invalid value: "'
        + "x" * 64
        + '": must be no more than 63 characters',
    ),
    (
        "a/b/c",
        'unable to parse requirement: <nil>: Invalid value: "a/b/c": a qualified name '
        "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
        "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "
        "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an "
        "optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
    ),
    (
        "A.b/c",
        'unable to parse requirement: <nil>: Invalid value: "A.b/c": prefix part a '
        "lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
        "'-' or '.', and must start and end with an alphanumeric character (e.g. "
        "'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    ),
    (
        "/a=b",
        'unable to parse requirement: <nil>: Invalid value: "/a": prefix part must be non-empty',
    ),
]


@pytest.mark.parametrize(("selector", "message"), PARSE_ERRORS)
def test_label_parse_errors(selector: str, message: str) -> None:
    with pytest.raises(SelectorError) as exc:
        parse_label_selector(selector)
    assert str(exc.value) == message
    assert isinstance(exc.value, ValueError)


def _as_label_selector_dict(sel: LabelSelector) -> dict[str, Any]:
    """What metav1.ParseToLabelSelector builds from the same requirements."""
    out: dict[str, Any] = {}
    ops = {"in": "In", "notin": "NotIn", "exists": "Exists", "!": "DoesNotExist"}
    for r in sel.requirements:
        if r.operator in ("=", "=="):
            out.setdefault("matchLabels", {})[r.key] = r.values[0]
        else:
            expr: dict[str, Any] = {"key": r.key, "operator": ops[r.operator]}
            if r.values:
                expr["values"] = list(r.values)
            out.setdefault("matchExpressions", []).append(expr)
    return out


DIFFERENTIAL = [
    *(s for s, _ in PARSE_ERRORS),
    "a=b",
    "a==b,c in (x,y),!d,e",
    " a = b ",
    "x in (foo,,baz),y,z notin ()",
    "in in (in)",
    "a in (x,)",
    "a in (,x)",
    "a notin(x),b",
    "example.com/a=b",
    "a=",
]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")
def test_label_parser_agrees_with_kubectl() -> None:
    """kubectl create pdb --selector runs apimachinery's parser client-side: same results."""
    env = {**os.environ, "KUBECONFIG": os.devnull}
    for selector in DIFFERENTIAL:
        proc = subprocess.run(
            [
                KUBECTL,
                "create",
                "pdb",
                "x",
                f"--selector={selector}",
                "--min-available=1",
                "--dry-run=client",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        try:
            mine: Any = _as_label_selector_dict(parse_label_selector(selector))
        except SelectorError as exc:
            mine = str(exc)
        if proc.returncode == 0:
            import json

            theirs: Any = json.loads(proc.stdout)["spec"]["selector"]
        else:
            prefix = f'error: couldn\'t parse the selector string "{selector}": '
            assert proc.stderr.startswith(prefix), proc.stderr
            theirs = proc.stderr[len(prefix) :].rstrip("\n")
        assert mine == theirs, selector


# -- metav1.LabelSelector ------------------------------------------------------------------


def test_label_selector_from_spec_match_labels_and_expressions() -> None:
    sel = label_selector_from_spec(
        {
            "matchLabels": {"app": "trainer"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "env", "operator": "NotIn", "values": ["dev"]},
                {"key": "gpu", "operator": "Exists"},
                {"key": "drain", "operator": "DoesNotExist"},
            ],
        }
    )
    good = {"app": "trainer", "tier": "b", "env": "prod", "gpu": ""}
    assert sel.matches(good)
    assert not sel.matches({**good, "app": "other"})
    assert not sel.matches({**good, "tier": "c"})
    assert not sel.matches({**good, "env": "dev"})
    assert sel.matches({k: v for k, v in good.items() if k != "env"})
    assert not sel.matches({k: v for k, v in good.items() if k != "gpu"})
    assert not sel.matches({**good, "drain": "true"})
    assert str(sel) == "app=trainer,!drain,env notin (dev),gpu,tier in (a,b)"


def test_label_selector_from_spec_null_and_empty() -> None:
    # policy/v1 PDB: a null selector selects nothing, an empty one every pod
    nothing = label_selector_from_spec(None)
    assert not nothing.matches({}) and not nothing.matches({"a": "b"}) and not nothing.empty
    everything = label_selector_from_spec({})
    assert everything.matches({}) and everything.matches({"a": "b"}) and everything.empty
    assert label_selector_from_spec({"matchLabels": {}, "matchExpressions": []}).empty
    legacy = label_selector_from_spec({}, empty_matches_all=False)
    assert not legacy.matches({"a": "b"})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            '"Gt" is not a valid label selector operator',
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
            "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't "
            "be empty",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            'values: Invalid value: []string{"x"}: values set must be empty for exists and does '
            "not exist",
        ),
        ({"matchLabels": {"a_": "b"}}, f'key: Invalid value: "a_": {NAME_PART_ERR}'),
        ({"matchLabels": {"a": "b c"}}, f'values[0][a]: Invalid value: "b c": {VALUE_ERR}'),
    ],
)
def test_label_selector_from_spec_errors(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SelectorError) as exc:
        label_selector_from_spec(spec)
    assert str(exc.value) == message


def test_label_selector_from_set() -> None:
    sel = label_selector_from_set({"app": "web", "tier": "fe"})
    assert sel.matches({"app": "web", "tier": "fe", "x": "y"})
    assert not sel.matches({"app": "web"})
    assert label_selector_from_set(None).empty and label_selector_from_set({}).empty


# -- field selectors -----------------------------------------------------------------------


def _pod(name: str, node: str = "", phase: str = "Running", **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if node:
        spec["nodeName"] = node
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
        "status": {"phase": phase},
    }
    for path, value in extra.items():
        section, key = path.split("__")
        pod[section][key] = value
    return pod


POD_FIELDS = FIELD_SELECTORS[("", "Pod")]


def test_pod_field_selectors() -> None:
    pods = [
        _pod("a", "gpu-1"),
        _pod("b", "gpu-2", "Pending"),
        _pod("c", phase="Pending"),
        _pod("d", "gpu-1", "Succeeded"),
    ]

    def names(text: str) -> list[str]:
        sel = parse_field_selector(text, POD_FIELDS)
        return [p["metadata"]["name"] for p in pods if sel.matches(p)]

    assert names("spec.nodeName=gpu-1") == ["a", "d"]
    assert names("spec.nodeName==gpu-1") == ["a", "d"]
    assert names("spec.nodeName=") == ["c"]  # unscheduled pods
    assert names("spec.nodeName!=") == ["a", "b", "d"]
    assert names("status.phase!=Succeeded,status.phase!=Failed") == ["a", "b", "c"]
    assert names("spec.nodeName=gpu-1,status.phase!=Succeeded") == ["a"]
    assert names("metadata.name=b") == ["b"]
    assert names("metadata.namespace=default") == ["a", "b", "c", "d"]
    assert names("") == ["a", "b", "c", "d"]
    assert names("spec.host=gpu-2") == ["b"]  # legacy v1 clients' name for spec.nodeName


def test_pod_special_field_values() -> None:
    pod = _pod("a", "n")
    assert selectable_field_value(pod, "spec.hostNetwork") == "false"
    pod["spec"]["hostNetwork"] = True
    assert selectable_field_value(pod, "spec.hostNetwork") == "true"
    pod["status"]["podIPs"] = [{"ip": "10.1.0.5"}, {"ip": "fd00::5"}]
    pod["status"]["podIP"] = "10.1.0.5"
    assert parse_field_selector("status.podIP=10.1.0.5", POD_FIELDS).matches(pod)
    del pod["status"]["podIPs"]
    assert selectable_field_value(pod, "status.podIP") == "10.1.0.5"
    assert parse_field_selector("spec.hostNetwork=true", POD_FIELDS).matches(pod)
    assert parse_field_selector("spec.hostNetwork!=false", POD_FIELDS).matches(pod)


def test_field_selector_exact_and_empty() -> None:
    sel = parse_field_selector(
        "spec.nodeName=gpu-1,metadata.name=x,status.phase!=Failed", POD_FIELDS
    )
    assert sel.exact("spec.nodeName") == "gpu-1"
    assert sel.exact("metadata.name") == "x"
    assert sel.exact("status.phase") is None  # != is no index lookup
    assert sel.exact("metadata.namespace") is None
    assert not sel.empty
    assert parse_field_selector("", POD_FIELDS).empty
    assert parse_field_selector(",", POD_FIELDS).empty
    assert parse_field_selector("spec.host=n1", POD_FIELDS).exact("spec.nodeName") == "n1"
    assert isinstance(sel, FieldSelector)


@pytest.mark.parametrize(
    ("group", "kind", "label", "message"),
    [
        ("", "Pod", "spec.foo", "field label not supported: spec.foo"),
        ("", "Pod", "status.podIPs", "field label not supported: status.podIPs"),
        ("", "Node", "metadata.namespace", "field label not supported: metadata.namespace"),
        ("", "Namespace", "spec.finalizers", "field label not supported: spec.finalizers"),
        ("", "Event", "message", "field label not supported: message"),
        ("", "Secret", "data", "field label not supported: data"),
        (
            "batch",
            "Job",
            "status.succeeded",
            'field label "status.succeeded" not supported for batchv1.Job',
        ),
        (
            "apps",
            "Deployment",
            "spec.replicas",
            '"spec.replicas" is not a known field selector: only "metadata.name", '
            '"metadata.namespace"',
        ),
        (
            "",
            "ConfigMap",
            "data.x",
            '"data.x" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
    ],
)
def test_unsupported_field_labels(group: str, kind: str, label: str, message: str) -> None:
    with pytest.raises(SelectorError) as exc:
        parse_field_selector(f"{label}=x", FIELD_SELECTORS[(group, kind)])
    assert str(exc.value) == message


def test_unsupported_field_label_with_plain_set_and_explicit_kind() -> None:
    with pytest.raises(SelectorError, match=r"^field label not supported: spec\.foo$"):
        parse_field_selector("spec.foo=1", {"metadata.name"})
    with pytest.raises(SelectorError, match=r'^"spec\.foo" is not a known field selector'):
        parse_field_selector("spec.foo=1", {"metadata.name"}, group="apps", kind="ReplicaSet")
    # terms are checked in sorted order, like the server
    with pytest.raises(SelectorError, match=r"^field label not supported: a\.b$"):
        parse_field_selector("z.z=1,a.b=2", POD_FIELDS)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("spec.nodeName", "invalid selector: 'spec.nodeName'; can't understand 'spec.nodeName'"),
        ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
        ("metadata.name=a=b", "invalid field selector: unescaped character in value: 61"),
        ("metadata.name=a\\x", "invalid field selector: invalid escape sequence: \\x"),
        ("metadata.name=a\\", "invalid field selector: invalid escape sequence: \\"),
    ],
)
def test_field_selector_parse_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as exc:
        parse_field_selector(text, POD_FIELDS)
    assert str(exc.value) == message


def test_field_selector_escapes() -> None:
    sel = parse_field_selector(r"metadata.name=a\,b\=c\\d", POD_FIELDS)
    pod = _pod("x")
    pod["metadata"]["name"] = "a,b=c\\d"
    assert sel.matches(pod)


def test_node_field_selectors() -> None:
    fields = FIELD_SELECTORS[("", "Node")]
    assert fields == {"metadata.name", "spec.unschedulable"}
    cordoned = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "spec": {"unschedulable": True},
    }
    ready = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}, "spec": {}}
    sel = parse_field_selector("spec.unschedulable=false", fields)
    assert sel.matches(ready) and not sel.matches(cordoned)
    assert parse_field_selector("spec.unschedulable!=false", fields).matches(cordoned)


def _event(**kw: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "p1.17a", "namespace": "default"},
        "involvedObject": {
            "kind": "Pod",
            "namespace": "default",
            "name": "p1",
            "uid": "u-1",
            "apiVersion": "v1",
            "resourceVersion": "42",
            "fieldPath": "spec.containers{trainer}",
        },
        "reason": "BackOff",
        "type": "Warning",
        "source": {"component": "kubelet", "host": "gpu-1"},
        "reportingComponent": "kubelet",
        "message": "Back-off restarting failed container",
    }
    ev.update(kw)
    return ev


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("involvedObject.kind=Pod", True),
        ("involvedObject.kind=Node", False),
        ("involvedObject.name=p1,involvedObject.namespace=default", True),
        ("involvedObject.uid=u-1", True),
        ("involvedObject.apiVersion=v1", True),
        ("involvedObject.resourceVersion=42", True),
        ("involvedObject.fieldPath=spec.containers{trainer}", True),
        ("reason=BackOff,type=Warning", True),
        ("type!=Warning", False),
        ("source=kubelet", True),
        ("reportingComponent=kubelet", True),
        ("metadata.name=p1.17a", True),
    ],
)
def test_event_involved_object_fields(text: str, expected: bool) -> None:
    sel = parse_field_selector(text, FIELD_SELECTORS[("", "Event")])
    assert sel.matches(_event()) is expected


def test_event_source_falls_back_to_reporting_controller() -> None:
    fields = FIELD_SELECTORS[("", "Event")]
    ev = _event(source={}, reportingComponent="kueue-controller")
    assert parse_field_selector("source=kueue-controller", fields).matches(ev)
    ev = _event(source={"component": "kubelet"}, reportingComponent="other")
    assert parse_field_selector("source=kubelet", fields).matches(ev)
    assert parse_field_selector("reportingComponent=other", fields).matches(ev)


def test_events_k8s_io_event_fields() -> None:
    fields = FIELD_SELECTORS[("events.k8s.io", "Event")]
    ev = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "e", "namespace": "ns"},
        "regarding": {"kind": "Node", "name": "gpu-1"},
        "reason": "NodeNotReady",
        "type": "Normal",
        "reportingController": "node-controller",
    }
    assert parse_field_selector("regarding.kind=Node,regarding.name=gpu-1", fields).matches(ev)
    assert parse_field_selector("source=node-controller", fields).matches(ev)
    assert parse_field_selector("reportingController=node-controller", fields).matches(ev)
    with pytest.raises(SelectorError, match=r"^field label not supported: involvedObject\.kind$"):
        parse_field_selector("involvedObject.kind=Node", fields)


def test_job_namespace_secret_service_fields() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "status": {"succeeded": 3},
    }
    assert parse_field_selector("status.successful=3", FIELD_SELECTORS[("batch", "Job")]).matches(
        job
    )
    assert parse_field_selector("status.successful=0", FIELD_SELECTORS[("batch", "Job")]).matches(
        {**job, "status": {}}
    )
    ns = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "a"},
        "status": {"phase": "Terminating"},
    }
    assert parse_field_selector(
        "status.phase=Terminating", FIELD_SELECTORS[("", "Namespace")]
    ).matches(ns)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "type": "kubernetes.io/tls",
    }
    assert parse_field_selector("type=kubernetes.io/tls", FIELD_SELECTORS[("", "Secret")]).matches(
        secret
    )
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"type": "ClusterIP", "clusterIP": "None"},
    }
    assert parse_field_selector(
        "spec.clusterIP=None,spec.type=ClusterIP", FIELD_SELECTORS[("", "Service")]
    ).matches(svc)


def test_field_selector_tables_match_the_real_server() -> None:
    pod = FIELD_SELECTORS[("", "Pod")]
    assert {
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    } <= pod
    assert FIELD_SELECTORS[("", "Namespace")] == {"metadata.name", "status.phase"}
    assert FIELD_SELECTORS[("", "Secret")] == {"metadata.name", "metadata.namespace", "type"}
    assert FIELD_SELECTORS[("batch", "Job")] == {
        "metadata.name",
        "metadata.namespace",
        "status.successful",
    }
    assert FIELD_SELECTORS[("", "Event")] >= {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
    for gk in [
        ("apps", "Deployment"),
        ("policy", "PodDisruptionBudget"),
        ("coordination.k8s.io", "Lease"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("", "ConfigMap"),
    ]:
        assert FIELD_SELECTORS[gk] == {"metadata.name", "metadata.namespace"}
    for (group, kind), fields in FIELD_SELECTORS.items():
        assert isinstance(fields, SupportedFields)
        assert (fields.group, fields.kind) == (group, kind)
        assert "metadata.name" in fields


def test_crd_field_selectors() -> None:
    cq = crd_field_selectors("kueue.x-k8s.io", "ClusterQueue", namespaced=False)
    assert cq == {"metadata.name"}
    with pytest.raises(SelectorError, match=r"^field label not supported: metadata\.namespace$"):
        parse_field_selector("metadata.namespace=x", cq)
    wl = crd_field_selectors(
        "kueue.x-k8s.io", "Workload", namespaced=True, selectable_fields=[".spec.queueName"]
    )
    assert wl == {"metadata.name", "metadata.namespace", "spec.queueName"}
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w"},
        "spec": {"queueName": "q", "active": True},
    }
    assert parse_field_selector("spec.queueName=q", wl).matches(obj)


def test_field_value() -> None:
    obj = {"spec": {"a": {"b": "x"}, "n": 3, "t": True, "f": False, "l": [1], "none": None}}
    assert field_value(obj, "spec.a.b") == "x"
    assert field_value(obj, "spec.n") == "3"
    assert field_value(obj, "spec.t") == "true"
    assert field_value(obj, "spec.f") == "false"
    assert field_value(obj, "spec.missing") == ""
    assert field_value(obj, "spec.a.b.c") == ""
    assert field_value(obj, "spec.l") == ""
    assert field_value(obj, "spec.none") == ""
    assert field_value({}, "metadata.name") == ""


def test_go_quote() -> None:
    assert go_quote('a"b\\c\n') == '"a\\"b\\\\c\\n"'
    assert go_quote("\x01é") == '"\\x01é"'
