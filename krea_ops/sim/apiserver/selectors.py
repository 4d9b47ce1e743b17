"""Label and field selectors, parsed and matched the way the Kubernetes API server does.

Label selectors follow ``k8s.io/apimachinery/pkg/labels/selector.go`` (v1.32): the same
lexer and recursive-descent parser, the same ``Requirement`` validation (label key and
value syntax) and the same error wording, so a bad ``?labelSelector=`` produces the text
the real server puts in its 400 ``BadRequest`` Status (for example
``unable to parse requirement: found '', expected: in, notin, =, ==, !=, gt, lt``).

Field selectors follow ``k8s.io/apimachinery/pkg/fields/selector.go`` (``=``, ``==``,
``!=``, comma-separated, backslash escapes in values) and each kind's field-label
conversion function (``pkg/apis/*/v1/conversion.go``), which decides both which fields a
kind accepts and the wording of the rejection. The value a field has on an object follows
the kind's registry ``ToSelectableFields`` (``spec.hostNetwork`` defaults to ``false``,
``status.podIP`` is the first of ``status.podIPs``, an Event's ``source`` falls back to its
reporting controller, a Job's ``status.successful`` is ``status.succeeded``...).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from krea_ops.sim.apiserver.validation import go_quote, is_qualified_name, is_valid_label_value

__all__ = [
    "FIELD_SELECTORS",
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "SelectorError",
    "SupportedFields",
    "crd_field_selectors",
    "field_value",
    "go_quote",
    "label_selector_from_set",
    "label_selector_from_spec",
    "parse_field_selector",
    "parse_label_selector",
    "selectable_field_value",
]


class SelectorError(ValueError):
    """A selector the server rejects; ``str()`` is the message of the 400 Status."""


# -- Go formatting helpers ----------------------------------------------------------------


def _go_string_slice(values: list[str] | None) -> str:
    """``fmt.Sprintf("%#v", []string{...})``."""
    if values is None:
        return "[]string(nil)"
    return "[]string{" + ", ".join(go_quote(v) for v in values) + "}"


def _field_invalid(path: str, value: str | list[str] | None, detail: str) -> str:
    """``field.Invalid(path, value, detail).Error()``."""
    shown = go_quote(value) if isinstance(value, str) else _go_string_slice(value)
    return f"{path}: Invalid value: {shown}: {detail}"


def _aggregate(errors: list[str]) -> str:
    """``utilerrors.NewAggregate(errs).Error()``: one error bare, several in brackets."""
    seen: list[str] = []
    for e in errors:
        if e not in seen:
            seen.append(e)
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"


_INT64_RE = re.compile(r"^[+-]?[0-9]+$")


def _parse_int64(s: str) -> int | None:
    """``strconv.ParseInt(s, 10, 64)``; ``None`` where Go returns an error."""
    if not _INT64_RE.match(s):
        return None
    n = int(s)
    if not -(2**63) <= n < 2**63:
        return None
    return n


# -- label selectors -----------------------------------------------------------------------

IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS = "in", "notin", "=", "==", "!="
EXISTS, DOES_NOT_EXIST, GREATER_THAN, LESS_THAN = "exists", "!", "gt", "lt"
_BINARY_OPERATORS = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN)


@dataclass(frozen=True)
class Requirement:
    """One ``key <op> values`` term of a label selector."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op in (IN, EQUALS, DOUBLE_EQUALS):
            return self.key in labels and labels[self.key] in self.values
        if op in (NOT_IN, NOT_EQUALS):
            return self.key not in labels or labels[self.key] not in self.values
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        if op in (GREATER_THAN, LESS_THAN):
            if self.key not in labels or len(self.values) != 1:
                return False
            have, want = _parse_int64(labels[self.key]), _parse_int64(self.values[0])
            if have is None or want is None:
                return False
            return have > want if op == GREATER_THAN else have < want
        return False

    def __str__(self) -> str:
        if self.operator == EXISTS:
            return self.key
        if self.operator == DOES_NOT_EXIST:
            return "!" + self.key
        ops = {
            EQUALS: "=",
            DOUBLE_EQUALS: "==",
            NOT_EQUALS: "!=",
            IN: " in ",
            NOT_IN: " notin ",
            GREATER_THAN: ">",
            LESS_THAN: "<",
        }
        values = ",".join(sorted(self.values))
        if self.operator in (IN, NOT_IN):
            values = "(" + values + ")"
        return self.key + ops[self.operator] + values


def new_requirement(key: str, op: str, values: list[str] | None) -> Requirement:
    """``labels.NewRequirement``: validate and build, raising the aggregated field errors."""
    errs: list[str] = []
    key_errs = is_qualified_name(key)
    if key_errs:
        errs.append(_field_invalid("key", key, "; ".join(key_errs)))
    vals = list(values) if values is not None else None
    n = len(vals or [])
    if op in (IN, NOT_IN):
        if n == 0:
            errs.append(
                _field_invalid(
                    "values", vals, "for 'in', 'notin' operators, values set can't be empty"
                )
            )
    elif op in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS):
        if n != 1:
            errs.append(
                _field_invalid(
                    "values", vals, "exact-match compatibility requires one single value"
                )
            )
    elif op in (EXISTS, DOES_NOT_EXIST):
        if n != 0:
            errs.append(
                _field_invalid(
                    "values", vals, "values set must be empty for exists and does not exist"
                )
            )
    elif op in (GREATER_THAN, LESS_THAN):
        if n != 1:
            errs.append(
                _field_invalid(
                    "values", vals, "for 'Gt', 'Lt' operators, exactly one value is required"
                )
            )
        for i, v in enumerate(vals or []):
            if _parse_int64(v) is None:
                errs.append(
                    _field_invalid(
                        f"values[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer"
                    )
                )
    else:
        supported = ", ".join(go_quote(o) for o in (*_BINARY_OPERATORS, EXISTS, "!"))
        errs.append(f"operator: Unsupported value: {go_quote(op)}: supported values: {supported}")
    for i, v in enumerate(vals or []):
        value_errs = is_valid_label_value(v)
        if value_errs:
            errs.append(_field_invalid(f"values[{i}][{key}]", v, "; ".join(value_errs)))
    if errs:
        raise SelectorError(_aggregate(errs))
    return Requirement(key, op, tuple(vals or ()))


class LabelSelector:
    """An AND of requirements; ``nothing=True`` is ``labels.Nothing()``."""

    def __init__(self, requirements: Iterable[Requirement] = (), *, nothing: bool = False):
        self.requirements: tuple[Requirement, ...] = tuple(
            sorted(requirements, key=lambda r: r.key)
        )
        self.nothing = nothing

    @property
    def empty(self) -> bool:
        """True when it does not restrict anything (``Everything()``); ``Nothing()`` is not."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def requires_exact_match(self, key: str) -> str | None:
        """The value the selector pins ``key`` to (``=``, ``==`` or a one-value ``in``)."""
        for r in self.requirements:
            if r.key == key:
                if r.operator in (EQUALS, DOUBLE_EQUALS, IN) and len(r.values) == 1:
                    return r.values[0]
                return None
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    def __repr__(self) -> str:
        if self.nothing:
            return "LabelSelector(<nothing>)"
        return f"LabelSelector({str(self)!r})"


EVERYTHING = LabelSelector()
NOTHING = LabelSelector(nothing=True)

# Lexer tokens
_ERROR, _EOS, _CLOSE, _COMMA, _NOT, _DEQ, _EQ, _GT, _ID, _IN, _LT, _NEQ, _NOTIN, _OPEN = range(14)
_STRING_TO_TOKEN = {
    ")": _CLOSE,
    ",": _COMMA,
    "!": _NOT,
    "==": _DEQ,
    "=": _EQ,
    ">": _GT,
    "in": _IN,
    "<": _LT,
    "!=": _NEQ,
    "notin": _NOTIN,
    "(": _OPEN,
}
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")


def _lex(s: str) -> list[tuple[int, str]]:
    """``labels.Lexer``: the whole token stream, ending with end-of-string."""
    items: list[tuple[int, str]] = []
    pos, n = 0, len(s)
    while True:
        while pos < n and s[pos] in _WHITESPACE:
            pos += 1
        if pos >= n:
            items.append((_EOS, ""))
            return items
        if s[pos] in _SPECIAL:
            buf, last = "", None
            while pos < n and s[pos] in _SPECIAL:
                buf += s[pos]
                if buf in _STRING_TO_TOKEN:
                    last = (_STRING_TO_TOKEN[buf], buf)
                    pos += 1
                elif last is not None:
                    break
                else:
                    pos += 1
            if last is None:
                items.append((_ERROR, f"error expected: keyword found '{buf}'"))
            else:
                items.append(last)
        else:
            start = pos
            while pos < n and s[pos] not in _SPECIAL and s[pos] not in _WHITESPACE:
                pos += 1
            lit = s[start:pos]
            items.append((_STRING_TO_TOKEN.get(lit, _ID), lit))


class _Parser:
    """``labels.Parser``: left-recursive descent over the scanned tokens."""

    def __init__(self, text: str):
        self.items = _lex(text)
        self.pos = 0

    def lookahead(self, values: bool) -> tuple[int, str]:
        tok, lit = self.items[self.pos]
        if values and tok in (_IN, _NOTIN):
            tok = _ID
        return tok, lit

    def consume(self, values: bool) -> tuple[int, str]:
        tok, lit = self.lookahead(values)
        self.pos += 1
        return tok, lit

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            tok, lit = self.lookahead(True)
            if tok in (_ID, _NOT):
                try:
                    requirements.append(self.parse_requirement())
                except SelectorError as exc:
                    raise SelectorError(f"unable to parse requirement: {exc}") from None
                t, lit2 = self.consume(True)
                if t == _EOS:
                    return requirements
                if t == _COMMA:
                    t2, l2 = self.lookahead(True)
                    if t2 not in (_ID, _NOT):
                        raise SelectorError(f"found '{l2}', expected: identifier after ','")
                else:
                    raise SelectorError(f"found '{lit2}', expected: ',' or 'end of string'")
            elif tok == _EOS:
                return requirements
            else:
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def parse_requirement(self) -> Requirement:
        key, op = self.parse_key_and_infer_operator()
        if op in (EXISTS, DOES_NOT_EXIST):
            return new_requirement(key, op, [])
        op = self.parse_operator()
        values = self.parse_values() if op in (IN, NOT_IN) else self.parse_exact_value()
        return new_requirement(key, op, sorted(values))

    def parse_key_and_infer_operator(self) -> tuple[str, str | None]:
        op = None
        tok, lit = self.consume(True)
        if tok == _NOT:
            op = DOES_NOT_EXIST
            tok, lit = self.consume(True)
        if tok != _ID:
            raise SelectorError(f"found '{lit}', expected: identifier")
        key_errs = is_qualified_name(lit)
        if key_errs:
            raise SelectorError(_field_invalid("<nil>", lit, "; ".join(key_errs)))
        t, _ = self.lookahead(True)
        if t in (_EOS, _COMMA) and op != DOES_NOT_EXIST:
            op = EXISTS
        return lit, op

    def parse_operator(self) -> str:
        tok, lit = self.consume(False)
        ops = {
            _IN: IN,
            _EQ: EQUALS,
            _DEQ: DOUBLE_EQUALS,
            _GT: GREATER_THAN,
            _LT: LESS_THAN,
            _NOTIN: NOT_IN,
            _NEQ: NOT_EQUALS,
        }
        if tok not in ops:
            raise SelectorError(f"found '{lit}', expected: {', '.join(_BINARY_OPERATORS)}")
        return ops[tok]

    def parse_values(self) -> set[str]:
        tok, lit = self.consume(True)
        if tok != _OPEN:
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead(True)
        if tok in (_ID, _COMMA):
            values = self.parse_identifiers_list()
            tok, _ = self.consume(True)
            if tok != _CLOSE:
                raise SelectorError(f"found '{lit}', expected: ')'")
            return values
        if tok == _CLOSE:
            self.consume(True)
            return {""}
        raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")

    def parse_identifiers_list(self) -> set[str]:
        values: set[str] = set()
        while True:
            tok, lit = self.consume(True)
            if tok == _ID:
                values.add(lit)
                tok2, lit2 = self.lookahead(True)
                if tok2 == _COMMA:
                    continue
                if tok2 == _CLOSE:
                    return values
                raise SelectorError(f"found '{lit2}', expected: ',' or ')'")
            if tok == _COMMA:
                if not values:
                    values.add("")  # "(,"
                tok2, _ = self.lookahead(True)
                if tok2 == _CLOSE:
                    values.add("")  # ",)"
                    return values
                if tok2 == _COMMA:
                    values.add("")  # ",,"
                continue
            raise SelectorError(f"found '{lit}', expected: ',', or identifier")

    def parse_exact_value(self) -> set[str]:
        tok, _ = self.lookahead(True)
        if tok in (_EOS, _COMMA):
            return {""}
        tok, lit = self.consume(True)
        if tok == _ID:
            return {lit}
        raise SelectorError(f"found '{lit}', expected: identifier")


def parse_label_selector(text: str | None) -> LabelSelector:
    """``labels.Parse``: ``a=b,c!=d,e in (x,y),f notin (z),g,!h,i>3``; "" selects everything."""
    if not text:
        return EVERYTHING
    return LabelSelector(_Parser(text).parse())


def label_selector_from_set(labels: Mapping[str, str] | None) -> LabelSelector:
    """``labels.SelectorFromSet``: every pair must match; None or {} select everything.

    For map selectors such as a Service's or ReplicationController's ``spec.selector``
    (callers decide what an empty map means for them: a Service without a selector
    selects no pods, which the caller checks before matching).
    """
    if not labels:
        return EVERYTHING
    return LabelSelector(Requirement(k, EQUALS, (v,)) for k, v in labels.items())


_SPEC_OPERATORS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def label_selector_from_spec(
    spec: Mapping[str, Any] | None, *, empty_matches_all: bool = True
) -> LabelSelector:
    """``metav1.LabelSelectorAsSelector`` for a ``metav1.LabelSelector`` dict.

    ``None`` (a null selector) matches nothing; ``{}`` (no matchLabels and no
    matchExpressions) matches everything. That is the policy/v1 PodDisruptionBudget
    contract ("a null selector selects no pods, an empty one selects every pod in the
    namespace"), and the one Deployments, ReplicaSets, DaemonSets and Jobs get from the
    apiserver (their validation forbids empty selectors anyway). Callers that follow the
    older "an empty selector creeps in, it should match nothing" rule (ReplicaSet/DaemonSet
    controllers' pod lookups) pass ``empty_matches_all=False``.

    Raises ``SelectorError`` with the apiserver's text for an unknown operator or an
    invalid key or value.
    """
    if spec is None:
        return NOTHING
    match_labels = spec.get("matchLabels") or {}
    expressions = spec.get("matchExpressions") or []
    if not match_labels and not expressions:
        return EVERYTHING if empty_matches_all else NOTHING
    requirements = [new_requirement(k, EQUALS, [v]) for k, v in match_labels.items()]
    for expr in expressions:
        op = expr.get("operator")
        if op not in _SPEC_OPERATORS:
            raise SelectorError(f"{go_quote(str(op or ''))} is not a valid label selector operator")
        values = expr.get("values")
        requirements.append(
            new_requirement(
                str(expr.get("key") or ""), _SPEC_OPERATORS[op], list(values) if values else None
            )
        )
    return LabelSelector(requirements)


# -- field selectors -----------------------------------------------------------------------


class SupportedFields(frozenset[str]):
    """The field labels one kind accepts, carrying the kind so errors read like the server's.

    A plain frozenset works wherever this does; the extra attributes only pick the kind's
    own rejection wording and aliases (a Pod's legacy ``spec.host``).
    """

    group: str
    kind: str

    def __new__(cls, group: str, kind: str, fields: Iterable[str]) -> SupportedFields:
        obj = super().__new__(cls, fields)
        obj.group = group
        obj.kind = kind
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (SupportedFields, (self.group, self.kind, tuple(self)))


_META = ("metadata.name", "metadata.namespace")

# Where a kind's conversion function says something other than the generic text.
_NOT_SUPPORTED = "field label not supported: {label}"
_DEFAULT_META = '{qlabel} is not a known field selector: only "metadata.name", "metadata.namespace"'
_LABEL_ERRORS: dict[tuple[str, str], str] = {
    ("", "Pod"): _NOT_SUPPORTED,
    ("", "Node"): _NOT_SUPPORTED,
    ("", "ReplicationController"): _NOT_SUPPORTED,
    ("", "Event"): _NOT_SUPPORTED,
    ("", "Namespace"): _NOT_SUPPORTED,
    ("", "Secret"): _NOT_SUPPORTED,
    ("", "Service"): _NOT_SUPPORTED,
    ("events.k8s.io", "Event"): _NOT_SUPPORTED,
    ("batch", "Job"): "field label {qlabel} not supported for batchv1.Job",
    ("certificates.k8s.io", "CertificateSigningRequest"): _NOT_SUPPORTED,
}

# Field labels a kind's conversion function rewrites before matching.
_LABEL_ALIASES: dict[tuple[str, str], dict[str, str]] = {
    ("", "Pod"): {"spec.host": "spec.nodeName"},
}

_KIND_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): (
        *_META,
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
        "spec.host",
    ),
    # Cluster-scoped kinds with their own conversion accept no metadata.namespace.
    ("", "Node"): ("metadata.name", "spec.unschedulable"),
    ("", "Namespace"): ("metadata.name", "status.phase"),
    ("", "ReplicationController"): (*_META, "status.replicas"),
    ("", "Event"): (
        *_META,
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
    ),
    ("events.k8s.io", "Event"): (
        *_META,
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reportingController",
        "reason",
        "source",
        "type",
    ),
    ("", "Secret"): (*_META, "type"),
    ("", "Service"): (*_META, "spec.clusterIP", "spec.type"),
    ("batch", "Job"): (*_META, "status.successful"),
    ("certificates.k8s.io", "CertificateSigningRequest"): ("metadata.name", "spec.signerName"),
}

# Built-in kinds without a conversion function of their own: the scheme's default
# (runtime.DefaultMetaV1FieldSelectorConversion) accepts exactly these two, even on
# cluster-scoped kinds.
_DEFAULT_KINDS: tuple[tuple[str, str], ...] = (
    ("", "ConfigMap"),
    ("", "ServiceAccount"),
    ("", "Endpoints"),
    ("", "PersistentVolume"),
    ("", "PersistentVolumeClaim"),
    ("", "ResourceQuota"),
    ("", "LimitRange"),
    ("", "PodTemplate"),
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "DaemonSet"),
    ("apps", "StatefulSet"),
    ("apps", "ControllerRevision"),
    ("batch", "CronJob"),
    ("policy", "PodDisruptionBudget"),
    ("coordination.k8s.io", "Lease"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("storage.k8s.io", "StorageClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("autoscaling", "HorizontalPodAutoscaler"),
)

BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "policy",
        "autoscaling",
        "coordination.k8s.io",
        "scheduling.k8s.io",
        "apiextensions.k8s.io",
        "events.k8s.io",
        "certificates.k8s.io",
        "discovery.k8s.io",
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "node.k8s.io",
        "admissionregistration.k8s.io",
        "apiregistration.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "resource.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "internal.apiserver.k8s.io",
        "storagemigration.k8s.io",
    }
)

FIELD_SELECTORS: dict[tuple[str, str], SupportedFields] = {
    **{gk: SupportedFields(*gk, fields) for gk, fields in _KIND_FIELDS.items()},
    **{gk: SupportedFields(*gk, _META) for gk in _DEFAULT_KINDS},
}
"""(group, kind) -> the field labels the real server accepts in ``?fieldSelector=``."""


def crd_field_selectors(
    group: str, kind: str, *, namespaced: bool, selectable_fields: Iterable[str] = ()
) -> SupportedFields:
    """What a custom resource accepts: metadata.name, metadata.namespace when namespaced, and
    the CRD version's ``selectableFields`` (given as their ``jsonPath``, with or without the
    leading dot)."""
    fields = {"metadata.name"} | ({"metadata.namespace"} if namespaced else set())
    fields |= {f.lstrip(".") for f in selectable_fields}
    return SupportedFields(group, kind, fields)


def _unsupported_message(group: str | None, kind: str | None, label: str) -> str:
    if group is None or kind is None:
        fmt = _NOT_SUPPORTED
    else:
        fmt = _LABEL_ERRORS.get((group, kind)) or (
            _DEFAULT_META if group in BUILTIN_GROUPS else _NOT_SUPPORTED
        )
    return fmt.format(label=label, qlabel=go_quote(label))


def _go_scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if isinstance(value, str):
        return value
    return ""


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The dotted ``path`` of ``obj`` as a field selector sees it: missing (or not a scalar)
    is "", booleans are ``true``/``false``, numbers in decimal."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return ""
        cur = cur[part]
    return _go_scalar(cur)


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for part in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def _bool_field(path: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda o: "true" if field_value(o, path) == "true" else "false"


def _pod_ip(o: Mapping[str, Any]) -> str:
    ips = _get(o, "status", "podIPs") or []
    if ips and isinstance(ips[0], Mapping):
        return _go_scalar(ips[0].get("ip"))
    return field_value(o, "status.podIP")


def _int_field(path: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda o: field_value(o, path) or "0"


def _first_nonempty(*paths: str) -> Callable[[Mapping[str, Any]], str]:
    def get(o: Mapping[str, Any]) -> str:
        for p in paths:
            v = field_value(o, p)
            if v:
                return v
        return ""

    return get


# registry ToSelectableFields where the value is not simply the dotted path
_SPECIAL_VALUES: dict[tuple[str, str], dict[str, Callable[[Mapping[str, Any]], str]]] = {
    ("", "Pod"): {"spec.hostNetwork": _bool_field("spec.hostNetwork"), "status.podIP": _pod_ip},
    ("", "Node"): {"spec.unschedulable": _bool_field("spec.unschedulable")},
    ("", "ReplicationController"): {"status.replicas": _int_field("status.replicas")},
    ("", "Event"): {"source": _first_nonempty("source.component", "reportingComponent")},
    ("events.k8s.io", "Event"): {
        "source": _first_nonempty("deprecatedSource.component", "reportingController")
    },
    ("batch", "Job"): {"status.successful": _int_field("status.succeeded")},
}


def _group_kind_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    api_version = str(obj.get("apiVersion") or "")
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    return group, str(obj.get("kind") or "")


def selectable_field_value(
    obj: Mapping[str, Any], field: str, *, group: str | None = None, kind: str | None = None
) -> str:
    """The value ``field`` has on ``obj`` for a field selector, per its kind's registry
    (kind taken from ``obj``'s apiVersion/kind unless given)."""
    if group is None or kind is None:
        group, kind = _group_kind_of(obj)
    getter = _SPECIAL_VALUES.get((group, kind), {}).get(field)
    if getter is not None:
        return getter(obj)
    return field_value(obj, field)


@dataclass(frozen=True)
class _Term:
    field: str
    value: str
    equal: bool

    def __str__(self) -> str:
        return f"{self.field}{'=' if self.equal else '!='}{self.value}"


class FieldSelector:
    """An AND of ``field=value`` / ``field!=value`` terms."""

    def __init__(
        self, terms: Iterable[_Term] = (), *, group: str | None = None, kind: str | None = None
    ):
        self.terms: tuple[_Term, ...] = tuple(terms)
        self.group = group
        self.kind = kind

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for t in self.terms:
            have = selectable_field_value(obj, t.field, group=self.group, kind=self.kind)
            if (have == t.value) != t.equal:
                return False
        return True

    def exact(self, field: str) -> str | None:
        """The value of the first ``field=value`` term (``RequiresExactMatch``), else None."""
        for t in self.terms:
            if t.field == field and t.equal:
                return t.value
        return None

    def __str__(self) -> str:
        return ",".join(str(t) for t in self.terms)

    def __repr__(self) -> str:
        return f"FieldSelector({str(self)!r})"


def _split_terms(text: str) -> list[str]:
    terms, start, in_slash = [], 0, False
    for i, c in enumerate(text):
        if in_slash:
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


def _unescape(value: str) -> str:
    if not any(c in value for c in "\\,="):
        return value
    out, in_slash = [], False
    for c in value:
        if in_slash:
            if c not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{c}")
            out.append(c)
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c in ",=":
            raise SelectorError(f"invalid field selector: unescaped character in value: {ord(c)}")
        else:
            out.append(c)
    if in_slash:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_field_selector(
    text: str | None,
    supported: Collection[str],
    *,
    group: str | None = None,
    kind: str | None = None,
) -> FieldSelector:
    """``fields.ParseSelector`` then the kind's field-label conversion.

    ``supported`` is the set of accepted labels (``FIELD_SELECTORS[(group, kind)]``); a
    ``SupportedFields`` also names its kind, which picks the kind's own rejection text
    (``field label not supported: spec.foo`` for Pods, ``"spec.foo" is not a known field
    selector: only "metadata.name", "metadata.namespace"`` for Deployments...), as do
    ``group``/``kind`` given here. Matching takes the kind from the object when not known.
    """
    if group is None and isinstance(supported, SupportedFields):
        group, kind = supported.group, supported.kind
    if not text:
        return FieldSelector(group=group, kind=kind)
    parts = sorted(_split_terms(text))
    parsed: list[tuple[str, str, bool]] = []
    for part in parts:
        if part == "":
            continue
        split = _split_term(part)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        lhs, op, rhs = split
        parsed.append((lhs, _unescape(rhs), op != "!="))
    aliases = _LABEL_ALIASES.get((group or "", kind or ""), {}) if kind else {}
    terms = []
    for lhs, value, equal in parsed:
        if lhs not in supported:
            raise SelectorError(_unsupported_message(group, kind, lhs))
        terms.append(_Term(aliases.get(lhs, lhs), value, equal))
    return FieldSelector(terms, group=group, kind=kind)
