"""Kubernetes Events about what krea-ops does, written as client-go's events library writes
them (``k8s.io/client-go/tools/events``).

Each event names the object it is about (``regarding``, and optionally ``related``), a
``type`` (Normal or Warning), a ``reason`` (CamelCase, what happened), an ``action`` (what
was done or tried: ``Cordon``, ``Evict``), a ``note`` for people, the ``eventTime``
(MicroTime) and who reported it: ``reportingController`` (a qualified name, such as
``krea.ai/krea-ops``) and ``reportingInstance`` (which process).

Written through core/v1 rather than events.k8s.io/v1. Both are views of the same stored
Event, and core/v1 carries every field of the newer API (eventTime, series, action,
related, reportingComponent/reportingInstance): written with ``eventTime`` set, the API
server validates it by the same rules (``legacyValidateEvent``: reportingController,
reportingInstance, action and reason required; an event about a cluster-scoped object
lives in ``default``). ``kubectl get events`` and ``kubectl describe`` read core/v1, one
RBAC rule (``events`` in the core group) covers every writer, and the simulated API server
serves core/v1 Events only.

Repeats, as client-go aggregates them: occurrences with the same type, action, reason,
reporter, regarding and related object form a *series*. The first is created; the
second adds ``series: {count: 2, lastObservedTime}`` at once; later ones only count, and
the count is written when ``refresh_after_s`` (30 min) has passed since the last write,
when the series ends (no occurrence for ``finish_after_s``, 6 min; the next occurrence
starts a new Event), or on ``flush()`` (a one-shot command flushes before it exits: use
the recorder as a context manager). Unlike client-go, the regarding object's
resourceVersion is not part of what makes two occurrences the same: a controller
reporting the same finding about a node every pass would otherwise write a new Event each
time the kubelet updated the node.

Events are best effort, as in Kubernetes: a write that fails is reported in the returned
``RecordedEvent`` and never raised. Notes are stripped of anything that looks like a
credential (bearer tokens, JWTs, ``token=...``/``password: ...``, and the client's own
token and password wherever they appear) and cut to the API's 1,024 bytes.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import quote

from krea_ops.errors import Unavailable
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.times import micro_time

NORMAL = "Normal"
WARNING = "Warning"
CONTROLLER = "krea.ai/krea-ops"

# pkg/apis/core/validation/events.go
NOTE_LIMIT = 1024  # bytes
REASON_LIMIT = ACTION_LIMIT = INSTANCE_LIMIT = 128

FINISH_AFTER_S = 6 * 60.0  # client-go's finishTime
REFRESH_AFTER_S = 30 * 60.0  # client-go's refreshTime

_QUALIFIED = re.compile(
    r"^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
REDACTED = "<redacted>"
_CREDENTIALS = (
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]+=*"), f"Bearer {REDACTED}"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), REDACTED),
    (
        re.compile(
            r"(?i)\b((?:[a-z-]+[-_])?(?:token|password|passwd|secret|api[-_]?key|key-data)"
            r")(\"?\s*[=:]\s*\"?)[^\s\",;]+"
        ),
        rf"\1\2{REDACTED}",
    ),
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without credentials: the given secret strings wherever they appear, and
    whatever has the shape of a bearer token, a JWT or a ``token=``/``password:`` pair."""
    for secret in secrets:
        if len(secret) >= 8:  # a short "secret" would blank ordinary words
            text = text.replace(secret, REDACTED)
    for pattern, replacement in _CREDENTIALS:
        text = pattern.sub(replacement, text)
    return text


def _cut(text: str, limit: int) -> str:
    """At most ``limit`` bytes of UTF-8, ending in `` ...`` when cut (the scheduler's
    truncateMessage), never in half a character."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: limit - 4].decode(errors="ignore") + " ..."


def client_secrets(cluster: Cluster) -> tuple[str, ...]:
    """The credentials the cluster's client holds (bearer token, password), to keep out
    of every note."""
    config = getattr(cluster.api, "configuration", None)
    found: list[str] = []
    for value in (getattr(config, "api_key", None) or {}).values():
        token = str(value).removeprefix("Bearer ").strip()
        if token:
            found.append(token)
    password = getattr(config, "password", None)
    if password:
        found.append(str(password))
    return tuple(found)


@dataclass(frozen=True)
class ObjectRef:
    """A ``core/v1`` ObjectReference: the object an event is about."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    resource_version: str = ""
    field_path: str = ""

    @classmethod
    def of(
        cls, obj: dict[str, Any], *, kind: str | None = None, api_version: str | None = None
    ) -> ObjectRef:
        """The reference to an object as the API returned it (a list's items carry no
        kind: pass it)."""
        meta = obj.get("metadata") or {}
        return cls(
            kind=kind or str(obj.get("kind") or ""),
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            uid=str(meta.get("uid") or ""),
            api_version=api_version or str(obj.get("apiVersion") or "v1"),
            resource_version=str(meta.get("resourceVersion") or ""),
        )

    def as_dict(self) -> dict[str, str]:
        out = {
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "apiVersion": self.api_version,
            "resourceVersion": self.resource_version,
            "fieldPath": self.field_path,
        }
        return {k: v for k, v in out.items() if v}

    @property
    def identity(self) -> tuple[str, str, str, str, str, str]:
        return (self.api_version, self.kind, self.namespace, self.name, self.uid, self.field_path)


@dataclass(frozen=True)
class RecordedEvent:
    """What ``record`` did: the Event's name and namespace, the occurrences counted, and
    whether this call wrote (a repeat may only count until the next write)."""

    name: str
    namespace: str
    count: int
    written: bool
    error: str | None = None


@dataclass
class _Series:
    name: str
    namespace: str
    body: dict[str, Any]  # the Event as first created
    count: int
    last_observed: float
    written_count: int = 0
    last_written: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


_Key = tuple[str, str, str, str, str, tuple[str, ...], tuple[str, ...]]


class EventRecorder:
    """Records Events for one reporter; safe to share between threads."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        controller: str = CONTROLLER,
        instance: str | None = None,
        clock: Callable[[], float] = time.time,
        secrets: Iterable[str] = (),
        finish_after_s: float = FINISH_AFTER_S,
        refresh_after_s: float = REFRESH_AFTER_S,
    ) -> None:
        if not _QUALIFIED.match(controller):
            raise ValueError(f"reportingController {controller!r} is not a qualified name")
        self.cluster = cluster
        self.controller = controller
        # client-go's default: the controller and the host it runs on
        self.instance = _cut(instance or f"{controller}-{socket.gethostname()}", INSTANCE_LIMIT)
        self.clock = clock
        self.secrets = (*client_secrets(cluster), *secrets)
        self.finish_after_s = finish_after_s
        self.refresh_after_s = refresh_after_s
        self._lock = threading.Lock()
        self._series: dict[_Key, _Series] = {}
        self._last_nanos = 0

    def __enter__(self) -> EventRecorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.flush()

    def record(
        self,
        regarding: ObjectRef,
        type_: str,
        reason: str,
        action: str,
        note: str,
        *,
        related: ObjectRef | None = None,
        instance: str | None = None,
    ) -> RecordedEvent:
        """Record one occurrence; ``instance`` overrides the reporter's instance (one
        process reporting for several hosts)."""
        if type_ not in (NORMAL, WARNING):
            raise ValueError(f"event type must be {NORMAL} or {WARNING}, not {type_!r}")
        if not reason or len(reason) > REASON_LIMIT or not action or len(action) > ACTION_LIMIT:
            raise ValueError("an event needs a reason and an action of at most 128 characters")
        reporter = _cut(instance, INSTANCE_LIMIT) if instance else self.instance
        key: _Key = (
            type_,
            action,
            reason,
            self.controller,
            reporter,
            regarding.identity,
            related.identity if related else (),
        )
        now = self.clock()
        with self._lock:
            finished = self._take_finished(now)
            series = self._series.get(key)
            if series is None:
                series = self._new_series(
                    regarding, related, type_, reason, action, note, reporter, now
                )
                self._series[key] = series
            else:
                series.count += 1
                series.last_observed = now
        for old in finished:
            self._write(old)
        with series.lock:
            due = (
                series.written_count == 0
                or (series.count >= 2 and series.written_count < 2)
                or now - series.last_written >= self.refresh_after_s
            )
            error = self._write_locked(series) if due else None
            return RecordedEvent(
                series.name, series.namespace, series.count, due and error is None, error
            )

    def flush(self) -> list[RecordedEvent]:
        """Write every count not yet written; forget the series that have ended."""
        now = self.clock()
        with self._lock:
            finished = self._take_finished(now)
            pending = [s for s in self._series.values() if s.written_count < s.count]
        out = []
        for series in [*finished, *pending]:
            with series.lock:
                if series.written_count < series.count:
                    error = self._write_locked(series)
                    out.append(
                        RecordedEvent(
                            series.name, series.namespace, series.count, error is None, error
                        )
                    )
        return out

    # -- internals --------------------------------------------------------------------

    def _take_finished(self, now: float) -> list[_Series]:
        """Remove the series with no occurrence for ``finish_after_s``; the ones whose
        last count is not written yet are returned, to be written (caller holds the
        lock)."""
        ended = [k for k, s in self._series.items() if now - s.last_observed > self.finish_after_s]
        finished = [self._series.pop(k) for k in ended]
        return [s for s in finished if s.written_count < s.count]

    def _new_series(
        self,
        regarding: ObjectRef,
        related: ObjectRef | None,
        type_: str,
        reason: str,
        action: str,
        note: str,
        reporter: str,
        now: float,
    ) -> _Series:
        namespace = regarding.namespace or "default"
        # client-go names an event <object>.<unix nanoseconds in hex>; one recorder never
        # reuses a name, even for two events in the same nanosecond (a simulated clock)
        nanos = max(int(now * 1e9), self._last_nanos + 1)
        self._last_nanos = nanos
        name = f"{regarding.name}.{nanos:x}"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": regarding.as_dict(),
            "type": type_,
            "reason": reason,
            "action": action,
            "message": _cut(redact(note, self.secrets), NOTE_LIMIT),
            "eventTime": micro_time(now),
            "reportingComponent": self.controller,
            "reportingInstance": reporter,
        }
        if related is not None:
            body["related"] = related.as_dict()
        return _Series(name, namespace, body, 1, now)

    def _write(self, series: _Series) -> None:
        with series.lock:
            if series.written_count < series.count:
                self._write_locked(series)

    def _write_locked(self, series: _Series) -> str | None:
        """Create the Event, or patch its series; None when written, else the error."""
        path = f"/api/v1/namespaces/{quote(series.namespace)}/events"
        count, observed = series.count, series.last_observed
        what = f"record event {series.namespace}/{series.name}"
        try:
            answer = None
            if series.written_count > 0 and count >= 2:
                patch = {"series": {"count": count, "lastObservedTime": micro_time(observed)}}
                answer = self.cluster.request(
                    what,
                    "PATCH",
                    f"{path}/{quote(series.name)}",
                    body=patch,
                    content_type="application/merge-patch+json",
                )
            if answer is None or answer.status == 404:  # new, or expired from the server
                body = dict(series.body)
                if count >= 2:
                    body["series"] = {"count": count, "lastObservedTime": micro_time(observed)}
                answer = self.cluster.request(what, "POST", path, body=body)
        except Unavailable as exc:
            return str(exc)
        if not answer.ok:
            return str(self.cluster.refusal(what, answer))
        series.written_count = count
        series.last_written = self.clock()
        return None
