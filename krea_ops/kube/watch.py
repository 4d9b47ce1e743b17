"""Watch caches: one list-and-watch per kind, shared by every controller of a process.

A controller's pass used to list every node and pod it looks at, each pass: at 5,000
nodes that is tens of megabytes a pass per controller, the API server encoding them
every time. ``WatchedCluster`` answers the same list calls (``Cluster.nodes``, ``pods``,
``active_pods``, ``custom_objects``, ``list_all``: whatever goes through ``_pages``) from
memory, for the collections in ``WATCHED``, with the label and field selectors applied
here as the API server applies them. Every other call (single GETs, logs, writes, the
kinds not watched) goes to the API server as before.

Each collection is kept by a ``Reflector``, as client-go's informers keep theirs:

- one paginated **list** (``limit``/``continue``) at start, its ``resourceVersion`` noted;
- a **watch** from there (``watch=true&resourceVersion=RV&allowWatchBookmarks=true``,
  ``timeoutSeconds`` 5 to 10 minutes, spread like client-go's): ADDED/MODIFIED replace an
  object, DELETED removes it, BOOKMARK only moves the resourceVersion on;
- a watch that ends (its timeout, an API server restarting, a dropped connection) is
  **resumed from the last resourceVersion seen**, without a list;
- ``410 Gone`` (the resourceVersion has been compacted away: the API server answers the
  watch with it, or sends an ERROR event with code 410) makes it **relist**;
- a **periodic resync** relists every ``resync_s`` (default an hour; 0: never), a safety
  net against a cache that drifted by a bug: in the steady state a pass makes no list
  call at all.

Managed fields are dropped from the cached objects (client-go users do the same with a
transform): nothing krea-ops reads is there, and they are most of a Pod's bytes.

Honest about what it knows. A read waits (``sync_timeout_s``) for the collection's first
list, or answers ``Unavailable`` at once where the API server refused it (401, 403: the
list is tried again meanwhile); a collection whose watch has been down longer than
``stale_s`` answers ``Unavailable``, and so does one that has not caught up with this
process's own writes within ``sync_timeout_s`` (``WatchedCluster`` notes the
resourceVersion each write of a watched kind returns, and a read of that kind waits
until the watch has delivered it): a controller then changes nothing that pass
(fail-static), as it does when the API server cannot be reached, rather than deciding on
a cache that may be behind. A node-health pass that cordoned a node therefore never
counts its blast cap from a cache that has not seen the cordon. Comparing
resourceVersions as numbers is what that needs: the API server's are etcd revisions (and
the simulator's counters); one that is not a number is not waited for.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from krea_ops.errors import BadInput, Unavailable
from krea_ops.kube.cluster import PAGE_SIZE, ApiAnswer, Cluster, Expired, WatchEvents
from krea_ops.kube.rules import selector_matches

Obj = dict[str, Any]

# (API group, resource): what the bundled controllers list every pass. Events (listed
# for one JobSet after it restarted) and pod logs are read when needed, not kept.
WATCHED: frozenset[tuple[str, str]] = frozenset(
    {
        ("", "nodes"),
        ("", "pods"),
        ("batch", "jobs"),
        ("jobset.x-k8s.io", "jobsets"),
        ("kueue.x-k8s.io", "clusterqueues"),
        ("kueue.x-k8s.io", "localqueues"),
        ("kueue.x-k8s.io", "resourceflavors"),
        ("kueue.x-k8s.io", "cohorts"),
        ("kueue.x-k8s.io", "workloads"),
    }
)
RESYNC_S = 3600.0
STALE_S = 30.0
SYNC_TIMEOUT_S = 60.0  # a first list of every pod of 5,000 nodes takes tens of seconds
# client-go's reflector: a watch asks for minWatchTimeout (5 min) x (1 + rand) seconds
MIN_WATCH_TIMEOUT_S = 300.0
BACKOFF_S = (0.5, 30.0)  # first and longest wait between failed attempts


Gone = Expired  # 410: the resourceVersion asked for is older than the API server keeps


@dataclass(frozen=True)
class Collection:
    """A list path as RBAC sees it: ``/api/v1/namespaces/ns/pods`` is ("", "pods", "ns")."""

    group: str
    resource: str
    namespace: str | None
    path: str  # the collection's path, without a query

    @staticmethod
    def of(path: str) -> Collection | None:
        """The collection ``path`` lists, None for anything else (an object, a
        subresource, discovery)."""
        parts = [unquote(p) for p in path.split("?")[0].strip("/").split("/")]
        if parts[:2] == ["api", "v1"]:
            group, rest = "", parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, rest = parts[1], parts[3:]
        else:
            return None
        namespace = None
        if len(rest) == 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if len(rest) != 1:
            return None
        return Collection(group, rest[0], namespace, path.split("?")[0])


# -- selectors, applied as the API server applies them ----------------------------------------


def _label_selector(selector: str) -> dict[str, Any]:
    """``selector`` (the labelSelector grammar: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``,
    ``a notin (x)``, ``a``, ``!a``) as the LabelSelector it means (matchExpressions:
    ``=`` is In one value, ``!=`` NotIn); BadInput when it does not parse (the API
    server's 400 for the same)."""
    terms: list[dict[str, Any]] = []

    def term_of(key: str, operator: str, values: Iterable[str] = ()) -> None:
        terms.append({"key": key.strip(), "operator": operator, "values": list(values)})

    text = selector.strip()
    i = 0
    while i < len(text):
        # one term: up to the next comma outside parentheses
        depth, j = 0, i
        while j < len(text) and (text[j] != "," or depth):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        term = text[i:j].strip()
        i = j + 1
        if not term:
            raise BadInput(f"invalid label selector {selector!r}: empty term")
        words = term.split()
        if len(words) >= 2 and words[1] in ("in", "notin"):
            inside = term.split(None, 2)[2].strip()
            if not (inside.startswith("(") and inside.endswith(")")):
                raise BadInput(f"invalid label selector {selector!r}: {term!r}")
            values = [v.strip() for v in inside[1:-1].split(",") if v.strip()]
            term_of(words[0], "In" if words[1] == "in" else "NotIn", values)
        elif "!=" in term:
            key, value = term.split("!=", 1)
            term_of(key, "NotIn", [value.strip()])
        elif "=" in term:
            key, value = term.replace("==", "=", 1).split("=", 1)
            term_of(key, "In", [value.strip()])
        elif term.startswith("!"):
            term_of(term[1:], "DoesNotExist")
        else:
            term_of(term, "Exists")
    return {"matchExpressions": terms}


def label_matcher(selector: str | None) -> Callable[[Mapping[str, str]], bool]:
    if not selector or not selector.strip():
        return lambda _labels: True
    parsed = _label_selector(selector)
    return lambda labels: selector_matches(parsed, labels)


def _field(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_matcher(selector: str | None) -> Callable[[Obj], bool]:
    """A fieldSelector (``spec.nodeName=n1,status.phase!=Failed``): ``=``, ``==`` and
    ``!=`` on dotted paths; a field that is absent reads as "" (the API server's
    ``spec.nodeName=`` selects the unscheduled pods)."""
    if not selector or not selector.strip():
        return lambda _obj: True
    terms: list[tuple[str, bool, str]] = []
    for term in selector.split(","):
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append((key.strip(), False, value.strip()))
        elif "=" in term:
            key, value = term.replace("==", "=", 1).split("=", 1)
            terms.append((key.strip(), True, value.strip()))
        else:
            raise BadInput(f"invalid field selector {selector!r}: {term!r}")

    def matches(obj: Obj) -> bool:
        return all((_field(obj, key) == value) == equal for key, equal, value in terms)

    return matches


# -- one collection ----------------------------------------------------------------------------


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _rv_number(rv: Any) -> int | None:
    try:
        return int(str(rv))
    except (TypeError, ValueError):
        return None


def _trim(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


@dataclass
class ReflectorCounts:
    """What a reflector asked of the API server (and why), for its metrics and tests."""

    lists: int = 0  # list requests (pages)
    relists: int = 0  # lists after the first: 410 Gone, a resync, a failed attempt
    gone: int = 0  # 410s answered
    resyncs: int = 0
    watches: int = 0  # watch requests (the first, and each resume)
    resumes: int = 0  # watches resumed from the last resourceVersion, without a list
    events: int = 0
    errors: int = 0


class Reflector:
    """One collection kept in memory by list-and-watch (the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        collection: Collection,
        *,
        resync_s: float = RESYNC_S,
        stale_s: float = STALE_S,
        watch_timeout_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.collection = collection
        self.what = f"watch {collection.resource}" + (
            f" in {collection.namespace}" if collection.namespace else ""
        )
        self.resync_s = resync_s
        self.stale_s = stale_s
        self.watch_timeout_s = watch_timeout_s
        self.clock = clock
        self.counts = ReflectorCounts()
        self.objects: dict[str, Obj] = {}
        self.rv: str | None = None
        self.error: str | None = None
        self._lock = threading.Condition()
        self._synced = False
        self._refused = False  # the last list was refused (401, 403)
        self._connected = False
        self._since = clock()  # when the watch last was connected (or the reflector began)
        self._listed_at: float | None = None
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    # -- the loop -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=self.what, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()  # wakes a read blocked on the stream
        if self._thread is not None:
            self._thread.join(timeout=5)

    def run(self) -> None:
        need_list, backoff = True, BACKOFF_S[0]
        while not self._stop.is_set():
            try:
                due = (
                    self.resync_s > 0
                    and self._listed_at is not None
                    and self.clock() - self._listed_at >= self.resync_s
                )
                if due:
                    self.counts.resyncs += 1
                if need_list or due:
                    self._list()
                    need_list = False
                self._watch()
                backoff = BACKOFF_S[0]
            except Gone:
                self.counts.gone += 1
                need_list = True
            except (Unavailable, BadInput) as exc:
                self.counts.errors += 1
                self._failed(str(exc))
                self._stop.wait(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, BACKOFF_S[1])
            except Exception as exc:  # a reflector must outlive any one error
                self.counts.errors += 1
                self._failed(f"{self.what}: unexpected {type(exc).__name__}: {exc}")
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_S[1])

    def _failed(self, error: str) -> None:
        with self._lock:
            if self._connected:
                self._since = self.clock()
            self._connected = False
            self.error = error
            self._lock.notify_all()

    def _list(self) -> None:
        objects: dict[str, Obj] = {}
        token: str | None = None
        rv: str | None = None
        while True:
            query: dict[str, str | int | None] = {"limit": PAGE_SIZE, "continue": token}
            answer = self.cluster.request(
                f"list {self.collection.resource}", "GET", self.collection.path, query=query
            )
            self.counts.lists += 1
            if self._synced or self._listed_at is not None:
                self.counts.relists += 1
            if answer.status == 410 and token is not None:
                # a continue token past compaction: the list starts again (client-go too)
                token, objects = None, {}
                continue
            if not answer.ok or answer.body is None:
                refused = self.cluster.refusal(f"list {self.collection.resource}", answer)
                if answer.status in (401, 403):
                    # refused, not failing: a read says so now rather than after
                    # sync_timeout_s (the list is tried again meanwhile)
                    with self._lock:
                        self._refused = True
                        self.error = str(refused)
                        self._lock.notify_all()
                raise refused
            for obj in answer.body.get("items") or ():
                objects[_key(obj)] = _trim(obj)
            meta = answer.body.get("metadata") or {}
            rv = meta.get("resourceVersion") or rv
            token = meta.get("continue")
            if not token:
                break
        with self._lock:
            self.objects = objects
            self.rv = rv
            self._synced = True
            self._refused = False
            self._connected = True
            self._since = self.clock()
            self._listed_at = self.clock()
            self.error = None
            self._lock.notify_all()

    def _watch(self) -> None:
        timeout = self.watch_timeout_s or MIN_WATCH_TIMEOUT_S * (1 + random.random())
        self.counts.watches += 1
        if self.counts.watches > 1:
            self.counts.resumes += 1
        query: dict[str, str | int | None] = {
            "watch": "true",
            "resourceVersion": self.rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": int(timeout),
        }
        with self.cluster.watch(self.what, self.collection.path, query=query) as stream:
            self._response = stream
            with self._lock:
                self._connected = True
                self._since = self.clock()
                self.error = None
            try:
                for event in stream:
                    if self._stop.is_set():
                        return
                    self._apply(event)
            finally:
                self._response = None
                with self._lock:
                    if self._connected:
                        self._since = self.clock()
                    self._connected = False

    def _apply(self, event: Obj) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(obj.get("message") or "410 Gone")
            raise Unavailable(
                f"{self.what}: the API server ended the watch: "
                f"{obj.get('message') or obj.get('reason') or obj}"
            )
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            self.counts.events += 1
            if kind in ("ADDED", "MODIFIED"):
                self.objects[_key(obj)] = _trim(obj)
            elif kind == "DELETED":
                self.objects.pop(_key(obj), None)
            if rv:
                self.rv = rv
            self._lock.notify_all()

    @property
    def connected(self) -> bool:
        """Whether the watch is open now."""
        return self._connected

    # -- reads ------------------------------------------------------------------------------

    def items(self, *, at_least: int | None = None, timeout_s: float = SYNC_TIMEOUT_S) -> list[Obj]:
        """The collection now (the objects are the cache's: never change them). Waits for
        the first list, and for ``at_least`` (a resourceVersion this process wrote), up
        to ``timeout_s``; Unavailable when it cannot say (module docstring)."""
        deadline = self.clock() + timeout_s
        with self._lock:
            while True:
                caught_up = at_least is None or (_rv_number(self.rv) or 0) >= at_least
                if self._synced and caught_up:
                    break
                if not self._synced and self._refused:
                    raise Unavailable(f"{self.what}: the watch cache cannot list: {self.error}")
                left = deadline - self.clock()
                if left <= 0:
                    why = (
                        "has not been listed yet"
                        if not self._synced
                        else f"has not caught up with this process's own write (at {self.rv}, "
                        f"wrote {at_least})"
                    )
                    raise Unavailable(
                        f"{self.what}: the watch cache {why} after {timeout_s:.0f} s"
                        + (f": {self.error}" if self.error else "")
                    )
                self._lock.wait(min(left, 0.5))
            if not self._connected and self.clock() - self._since > self.stale_s:
                raise Unavailable(
                    f"{self.what}: the watch has been down for "
                    f"{self.clock() - self._since:.0f} s, the cache may be behind: "
                    f"{self.error or 'no answer'}"
                )
            return list(self.objects.values())


# -- the cluster, read through the caches --------------------------------------------------------


class WatchedCluster(Cluster):
    """``inner``, with the lists of ``kinds`` answered from watch caches (module
    docstring). Every request still goes through ``inner.request`` (and watches through
    ``inner.watch``): its wrappers (a recording one in the RBAC tests) see them all.
    Caches start on the first list of their collection; ``close`` stops them."""

    def __init__(
        self,
        inner: Cluster,
        *,
        kinds: frozenset[tuple[str, str]] = WATCHED,
        resync_s: float = RESYNC_S,
        stale_s: float = STALE_S,
        sync_timeout_s: float = SYNC_TIMEOUT_S,
        watch_timeout_s: float | None = None,
    ) -> None:
        super().__init__(inner.api, timeout_s=inner.timeout_s, sleep=inner.sleep)
        self.inner = inner
        self.kinds = kinds
        self.resync_s = resync_s
        self.stale_s = stale_s
        self.sync_timeout_s = sync_timeout_s
        self.watch_timeout_s = watch_timeout_s
        self.reflectors: dict[str, Reflector] = {}
        self._written: dict[tuple[str, str], int] = {}  # (group, resource) -> rv
        # lists sent to the API server itself, kinds not watched: (resource, namespace)
        self.uncached: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._closed = False

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
    ) -> ApiAnswer:
        answer = self.inner.request(
            what, method, path, body=body, content_type=content_type, query=query, raw=raw
        )
        if method != "GET" and answer.ok and answer.body is not None:
            self._note_write(path, answer.body)
        return answer

    @contextlib.contextmanager
    def watch(
        self, what: str, path: str, *, query: dict[str, str | int | None]
    ) -> Iterator[WatchEvents]:
        with self.inner.watch(what, path, query=query) as events:
            yield events

    def _note_write(self, path: str, body: Obj) -> None:
        rv = _rv_number((body.get("metadata") or {}).get("resourceVersion"))
        if rv is None:
            return
        parent = Collection.of(path.split("?")[0].rsplit("/", 1)[0])
        if parent is None:
            return
        kind = (parent.group, parent.resource)
        if kind in self.kinds:
            with self._lock:
                self._written[kind] = max(self._written.get(kind, 0), rv)

    def reflector(self, path: str) -> Reflector | None:
        """The cache of the collection ``path`` lists (started now if new), None when
        that collection is not watched."""
        collection = Collection.of(path)
        if collection is None or (collection.group, collection.resource) not in self.kinds:
            return None
        with self._lock:
            if self._closed:
                raise Unavailable("the watch caches are closed")
            found = self.reflectors.get(collection.path)
            if found is None:
                found = Reflector(
                    self.inner,
                    collection,
                    resync_s=self.resync_s,
                    stale_s=self.stale_s,
                    watch_timeout_s=self.watch_timeout_s,
                )
                self.reflectors[collection.path] = found
                found.start()
            return found

    def _pages(self, what: str, path: str, **query: str | None) -> Iterator[Obj]:
        reflector = self.reflector(path)
        if reflector is None:
            collection = Collection.of(path)
            where = (
                (collection.resource, collection.namespace or "")
                if collection is not None
                else (path, "")
            )
            with self._lock:
                self.uncached[where] = self.uncached.get(where, 0) + 1
            yield from self.inner._pages(what, path, **query)
            return
        labels = label_matcher(query.get("labelSelector"))
        fields = field_matcher(query.get("fieldSelector"))
        kind = (reflector.collection.group, reflector.collection.resource)
        with self._lock:
            wrote = self._written.get(kind)
        for obj in reflector.items(at_least=wrote, timeout_s=self.sync_timeout_s):
            meta = obj.get("metadata") or {}
            if labels(meta.get("labels") or {}) and fields(obj):
                yield obj

    def counts(self) -> dict[str, ReflectorCounts]:
        with self._lock:
            return {path: r.counts for path, r in self.reflectors.items()}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            reflectors = list(self.reflectors.values())
        for r in reflectors:
            r.stop()
