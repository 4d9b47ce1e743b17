"""The simulated API server's fault switch: refuse, slow down or hang up on chosen requests.

A fault rule picks requests by verb and resource, as RBAC names them (``get``, ``list``,
``watch``, ``create``, ``update``, ``patch``, ``delete``, ``deletecollection``;
``nodes``, ``pods/eviction``, ``clusterqueues.kueue.x-k8s.io``, ``*``), optionally by
namespace and name, and does one or more of:

- answer with an error ``status`` instead of serving the request, worded as the real
  server words it:

  - 409: the optimistic-concurrency ``Conflict`` Status ("Operation cannot be fulfilled
    on nodes "x": the object has been modified; please apply your changes to the latest
    version and try again");
  - 429: what kube-apiserver's max-in-flight and priority-and-fairness filters send when
    they reject a request (``staging/src/k8s.io/apiserver/pkg/server/filters/
    maxinflight.go``, ``tooManyRequests``): a ``Retry-After`` header (their constant is
    ``"1"``) and the plain-text body "Too many requests, please try again later."; with
    ``body: status``, the ``metav1.Status`` that ``apierrors.NewTooManyRequests`` makes
    instead (reason ``TooManyRequests``, ``details.retryAfterSeconds``, the same
    ``Retry-After`` header);
  - 500: ``InternalError``, "Internal error occurred: ..." (``apierrors.NewInternalError``);
  - 503: ``ServiceUnavailable``, "the server is currently unable to handle the request"
    (the Status apimachinery gives a 503), with ``Retry-After`` when ``retryAfter`` is set;

- wait ``latency`` seconds before answering (or before the error);
- ``drop`` the connection: close the socket without an answer;
- ``closeWatchAfter`` N: end a watch's stream after N events, as a server that restarts
  ends its watches (the client is expected to resume from the last resourceVersion).

``after`` lets that many matching requests through first, ``times`` caps how often the
rule fires, ``rate`` (0..1) makes it fire on that share of matching requests, drawn from a
random generator seeded by ``seed`` and the rule's position, so a run is the same every
time for the same sequence of requests.

Rules come from three places, combined: ``sim serve --faults FILE`` (a YAML document),
the ConfigMap ``krea-sim/api-faults`` (key ``faults.yaml``, the same document, read again
on every write to it; requests for that ConfigMap itself are never faulted, so the switch
can always be turned off), and ``LocalApiServer.faults`` from a test. The document::

    seed: 7
    rules:
      - verbs: [patch]
        resources: [nodes]
        status: 409
        times: 6
      - verbs: [list]
        resources: ["*"]
        status: 503
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from krea_ops.errors import BadInput

CONFIGMAP_NAMESPACE = "krea-sim"
CONFIGMAP_NAME = "api-faults"
CONFIGMAP_KEY = "faults.yaml"

VERBS = frozenset(
    {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
)
STATUSES = frozenset({409, 429, 500, 503})
TOO_MANY_REQUESTS = "Too many requests, please try again later."
UNAVAILABLE = "the server is currently unable to handle the request"
INTERNAL_DETAIL = "injected by the simulator's fault switch"
_RULE_KEYS = frozenset(
    {
        "verbs",
        "resources",
        "namespace",
        "name",
        "status",
        "retryAfter",
        "body",
        "message",
        "latency",
        "drop",
        "closeWatchAfter",
        "after",
        "times",
        "rate",
    }
)


@dataclass(frozen=True)
class FaultRule:
    """One rule (see the module docstring); ``FaultRule.of(mapping)`` reads the YAML form."""

    verbs: frozenset[str] = frozenset({"*"})
    resources: frozenset[str] = frozenset({"*"})
    namespace: str | None = None
    name: str | None = None
    status: int | None = None
    retry_after_s: int | None = None
    body: str = "text"  # 429 only: text (as APF) or status (apierrors.NewTooManyRequests)
    message: str | None = None
    latency_s: float = 0.0
    drop: bool = False
    close_watch_after: int | None = None
    after: int = 0
    times: int | None = None
    rate: float = 1.0

    @staticmethod
    def of(raw: Any, where: str = "fault rule") -> FaultRule:
        if not isinstance(raw, Mapping):
            raise BadInput(f"{where}: must be a mapping of verbs, resources and what to do")
        unknown = sorted(set(raw) - _RULE_KEYS)
        if unknown:
            raise BadInput(
                f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_RULE_KEYS))})"
            )

        def words(key: str) -> frozenset[str]:
            value = raw.get(key, ["*"])
            if isinstance(value, str):
                value = [value]
            if (
                not isinstance(value, list)
                or not value
                or not all(isinstance(v, str) and v for v in value)
            ):
                raise BadInput(f'{where}: {key} must be a list of names (or "*")')
            return frozenset(value)

        verbs = words("verbs")
        bad = sorted(verbs - VERBS - {"*"})
        if bad:
            raise BadInput(f"{where}: unknown verb {bad[0]!r} (known: {', '.join(sorted(VERBS))})")

        def number(key: str, kind: type, minimum: float, maximum: float | None = None) -> Any:
            value = raw.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise BadInput(f"{where}: {key} must be a number")
            if kind is int and value != int(value):
                raise BadInput(f"{where}: {key} must be a whole number")
            if value < minimum or (maximum is not None and value > maximum):
                top = f" and at most {maximum:g}" if maximum is not None else ""
                raise BadInput(f"{where}: {key} must be at least {minimum:g}{top}")
            return kind(value)

        status = number("status", int, 400, 599)
        if status is not None and status not in STATUSES:
            raise BadInput(
                f"{where}: status {status} is not one the switch answers (409, 429, 500, 503)"
            )
        body = raw.get("body", "text")
        if body not in ("text", "status"):
            raise BadInput(f"{where}: body must be text or status")
        drop = raw.get("drop", False)
        if not isinstance(drop, bool):
            raise BadInput(f"{where}: drop must be true or false")
        message = raw.get("message")
        if message is not None and not isinstance(message, str):
            raise BadInput(f"{where}: message must be a string")
        for key in ("namespace", "name"):
            if raw.get(key) is not None and not isinstance(raw.get(key), str):
                raise BadInput(f"{where}: {key} must be a string")
        rule = FaultRule(
            verbs=verbs,
            resources=words("resources"),
            namespace=raw.get("namespace"),
            name=raw.get("name"),
            status=status,
            retry_after_s=number("retryAfter", int, 0, 3600),
            body=body,
            message=message,
            latency_s=number("latency", float, 0, 600) or 0.0,
            drop=drop,
            close_watch_after=number("closeWatchAfter", int, 0),
            after=number("after", int, 0) or 0,
            times=number("times", int, 0),
            rate=1.0 if raw.get("rate") is None else number("rate", float, 0, 1),
        )
        if not (rule.status or rule.latency_s or rule.drop or rule.close_watch_after is not None):
            raise BadInput(
                f"{where}: says nothing to do (give status, latency, drop or closeWatchAfter)"
            )
        return rule

    def matches(self, verb: str, names: tuple[str, str], namespace: str, name: str) -> bool:
        """``names``: the resource as ``pods/eviction`` and group-qualified
        (``clusterqueues.kueue.x-k8s.io/status``)."""
        if "*" not in self.verbs and verb not in self.verbs:
            return False
        if "*" not in self.resources and not any(n in self.resources for n in names):
            return False
        if self.namespace is not None and namespace != self.namespace:
            return False
        return self.name is None or name == self.name

    def describe(self) -> str:
        what = [f"status {self.status}"] if self.status else []
        what += [f"latency {self.latency_s:g}s"] if self.latency_s else []
        what += ["drop"] if self.drop else []
        if self.close_watch_after is not None:
            what += [f"close watch after {self.close_watch_after}"]
        verbs = ",".join(sorted(self.verbs))
        resources = ",".join(sorted(self.resources))
        return f"{verbs} {resources}: {', '.join(what)}"


@dataclass(frozen=True)
class FaultMatch:
    """What the switch decided for one request: the rule's actions."""

    rule: FaultRule
    source: str

    @property
    def status(self) -> int | None:
        return self.rule.status

    @property
    def latency_s(self) -> float:
        return self.rule.latency_s

    @property
    def drop(self) -> bool:
        return self.rule.drop

    @property
    def close_watch_after(self) -> int | None:
        return self.rule.close_watch_after


@dataclass
class _Armed:
    rule: FaultRule
    rng: random.Random
    matched: int = 0
    fired: int = 0


@dataclass(frozen=True)
class Injection:
    """One fault the switch injected: which request and what it did (for tests and
    the figures in docs/reliability.md)."""

    verb: str
    resource: str
    namespace: str
    name: str
    rule: str
    source: str


@dataclass
class _Source:
    seed: int
    armed: list[_Armed] = field(default_factory=list)


def parse(document: Any, where: str) -> tuple[int, list[FaultRule]]:
    """(seed, rules) from the YAML document's parsed form (None: no rules)."""
    if document is None:
        return 0, []
    if not isinstance(document, Mapping):
        raise BadInput(f"{where}: must be a mapping with rules (and an optional seed)")
    unknown = sorted(set(document) - {"seed", "rules"})
    if unknown:
        raise BadInput(f"{where}: unknown key {unknown[0]!r} (known: rules, seed)")
    seed = document.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise BadInput(f"{where}: seed must be a whole number")
    rules = document.get("rules") or []
    if not isinstance(rules, list):
        raise BadInput(f"{where}: rules must be a list")
    return seed, [FaultRule.of(r, f"{where}: rule {i + 1}") for i, r in enumerate(rules)]


def parse_text(text: str, where: str) -> tuple[int, list[FaultRule]]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "not YAML"
        raise BadInput(f"{where}: not YAML ({first})") from None
    return parse(document, where)


class FaultSwitch:
    """The rules in force, from each source (``file``, ``configmap``, ``api``), and a
    record of what was injected. Thread-safe: every request thread consults it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: dict[str, _Source] = {}
        self._injected: list[Injection] = []
        self._seen: dict[tuple[str, str], int] = {}

    def set(self, rules: Iterable[FaultRule | Mapping[str, Any]], *, seed: int = 0,
            source: str = "api") -> None:  # fmt: skip
        """Replace the rules of ``source`` (an empty list clears them)."""
        parsed = [r if isinstance(r, FaultRule) else FaultRule.of(r) for r in rules]
        armed = [_Armed(r, random.Random(f"{seed}/{source}/{i}")) for i, r in enumerate(parsed)]
        with self._lock:
            if armed:
                self._sources[source] = _Source(seed, armed)
            else:
                self._sources.pop(source, None)

    def load(self, text: str, where: str, source: str) -> None:
        seed, rules = parse_text(text, where)
        self.set(rules, seed=seed, source=source)

    def clear(self, source: str | None = None) -> None:
        with self._lock:
            if source is None:
                self._sources.clear()
            else:
                self._sources.pop(source, None)

    @property
    def active(self) -> bool:
        return bool(self._sources)

    def decide(
        self, verb: str, group: str, plural: str, subresource: str, namespace: str, name: str
    ) -> FaultMatch | None:
        """The fault for this request, or None. Each matching rule counts the request;
        the first whose ``after``, ``times`` and ``rate`` let it fire, fires."""
        if not self._sources:
            return None
        tail = f"/{subresource}" if subresource else ""
        resource = plural + tail
        names = (resource, f"{plural}.{group}{tail}" if group else resource)
        if (namespace, name, resource) == (CONFIGMAP_NAMESPACE, CONFIGMAP_NAME, "configmaps"):
            return None  # the switch itself: it can always be turned off
        with self._lock:
            self._seen[verb, resource] = self._seen.get((verb, resource), 0) + 1
            for source_name, source in self._sources.items():
                for armed in source.armed:
                    rule = armed.rule
                    if not rule.matches(verb, names, namespace, name):
                        continue
                    armed.matched += 1
                    if armed.matched <= rule.after:
                        continue
                    if rule.times is not None and armed.fired >= rule.times:
                        continue
                    if rule.rate < 1.0 and armed.rng.random() >= rule.rate:
                        continue
                    armed.fired += 1
                    self._injected.append(
                        Injection(verb, resource, namespace, name, rule.describe(), source_name)
                    )
                    return FaultMatch(rule, source_name)
        return None

    def injected(self, verb: str | None = None, resource: str | None = None) -> list[Injection]:
        """What was injected so far (optionally of one verb and resource)."""
        with self._lock:
            return [
                i
                for i in self._injected
                if (verb is None or i.verb == verb) and (resource is None or i.resource == resource)
            ]

    def seen(self, verb: str, resource: str) -> int:
        """How many ``verb`` requests for ``resource`` arrived while rules were set
        (faulted or not): the attempts a client made."""
        with self._lock:
            return self._seen.get((verb, resource), 0)

    def requests(self) -> dict[tuple[str, str], int]:
        """Every (verb, resource) seen while rules were set, and how often."""
        with self._lock:
            return dict(self._seen)

    def spent(self) -> bool:
        """Every rule with ``times`` has fired that often."""
        with self._lock:
            return all(
                a.rule.times is not None and a.fired >= a.rule.times
                for s in self._sources.values()
                for a in s.armed
            )
