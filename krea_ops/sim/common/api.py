"""How the cluster actors reach the API server: the official client's typed APIs without
model objects, one shared list of pods and one of nodes, and Events.

The actors share one list of pods and one of nodes (``world.services["cluster-view"]``):
:class:`ClusterView` relists them at most every half wall second or after the reader's
own writes; :class:`WatchedClusterView` (the scale mode, ``WorldConfig.telemetry_nodes``)
lists each once and then follows a watch, as an informer does (and as KWOK follows the
nodes and pods it plays): resumed from its resourceVersion after a disconnect, listed
again (in pages) on 410 Gone. A reader that wrote waits until the watch has brought its
own write back (its resourceVersion), so it never acts twice on what it has already done.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from krea_ops.kube.times import rfc3339
from krea_ops.sim.common.actor import Actor, World
from krea_ops.sim.common.objects import meta_of

VIEW_TTL_WALL_S = 0.5


class Api:
    """The typed APIs of the official client, called without model deserialisation."""

    def __init__(self, api_client: Any) -> None:
        self.core = k8s.CoreV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.coord = k8s.CoordinationV1Api(api_client)

    @staticmethod
    def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args)`` with ``_preload_content=False``: the JSON body as dicts (reading
        it all also returns the connection to the pool)."""
        resp = fn(*args, _preload_content=False, **kwargs)
        data = resp.data
        return json.loads(data) if data else None

    def quiet(
        self, fn: Callable[..., Any], *args: Any, ok: Iterable[int] = (404, 409), **kwargs: Any
    ) -> Any:
        """Like :meth:`call`; a status in ``ok`` (gone, conflict) returns None."""
        try:
            return self.call(fn, *args, **kwargs)
        except ApiException as exc:
            if exc.status in tuple(ok):
                return None
            raise

    def merge_patch(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.quiet(fn, *args, _content_type="application/merge-patch+json")


class ClusterView:
    """One list of pods and one of nodes shared by the actors of this module.

    ``pods(fresh_after=t)`` lists again when the cached list is older than the TTL or was
    started before ``t`` (a reader passes the monotonic time of its own last write to see
    it). The returned objects are shared: never mutate them.
    """

    def __init__(self, api: Api, ttl_wall_s: float = VIEW_TTL_WALL_S) -> None:
        self.api = api
        self.ttl = ttl_wall_s
        self._locks = {"pods": threading.Lock(), "nodes": threading.Lock()}
        self._cache: dict[str, tuple[float, float, list[dict[str, Any]]]] = {}
        self.lists = 0

    def _get(self, kind: str, fetch: Callable[[], Any], fresh_after: float) -> list[Any]:
        with self._locks[kind]:
            at, _, items = self._cache.get(kind, (-math.inf, -math.inf, []))
            now = time.monotonic()
            if at < fresh_after or now - at > self.ttl:
                result = fetch()
                items = list((result or {}).get("items") or [])
                self._cache[kind] = (now, time.monotonic(), items)
                self.lists += 1
            return items

    def fetched(self, kind: str) -> float:
        """When the cached list of ``kind`` ("pods" or "nodes") came back (monotonic)."""
        return self._cache.get(kind, (-math.inf, -math.inf, []))[1]

    def pods(self, fresh_after: float = 0.0) -> list[dict[str, Any]]:
        return self._get(
            "pods", lambda: self.api.call(self.api.core.list_pod_for_all_namespaces), fresh_after
        )

    def nodes(self, fresh_after: float = 0.0) -> list[dict[str, Any]]:
        return self._get("nodes", lambda: self.api.call(self.api.core.list_node), fresh_after)

    def note_write(self, obj: Any) -> None:
        """A reader wrote ``obj`` (the API's answer): the next list is taken after it anyway."""

    def close(self) -> None:
        pass


WATCH_TIMEOUT_S = 240  # the server ends a watch after this; it is resumed at once
LIST_PAGE = 500  # objects a page of the (re)list holds, as client-go's pager
CAUGHT_UP_WAIT_S = 5.0  # longest a reader waits for the watch to bring its write back
SYNC_WAIT_S = 120.0  # longest a first reader waits for the first list


class _Gone(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class _Informer:
    """One kind's objects, listed once and kept current by a watch, on one thread."""

    def __init__(
        self, kind: str, list_fn: Callable[..., Any], stop: threading.Event, page: int
    ) -> None:
        self.kind = kind
        self.list_fn = list_fn
        self.stop = stop
        self.page = page
        self.lists = 0
        self.watches = 0
        self.events = 0
        self.errors = 0
        self._cond = threading.Condition()
        self._objects: dict[str, dict[str, Any]] = {}
        self._items: list[dict[str, Any]] | None = []
        self._rv = 0  # the newest resourceVersion seen, as an integer (0: unknown)
        self._resume: str | None = None
        self._synced = False
        self._changed = -math.inf
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, name=f"sim-watch-{kind}", daemon=True)
        self._thread.start()

    # -- readers ---------------------------------------------------------------------------

    def items(self, written_rv: int = 0) -> list[dict[str, Any]]:
        """The objects now (a shared list: never mutate it or them); waits for the first
        list, and for the watch to reach ``written_rv`` (bounded)."""
        with self._cond:
            if not self._synced:
                self._cond.wait_for(lambda: self._synced or self.stop.is_set(), SYNC_WAIT_S)
            if written_rv > self._rv:
                self._cond.wait_for(
                    lambda: self._rv >= written_rv or self.stop.is_set(), CAUGHT_UP_WAIT_S
                )
            if self._items is None:
                self._items = list(self._objects.values())
            return self._items

    def changed(self) -> float:
        return self._changed

    # -- the loop --------------------------------------------------------------------------

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                if self._resume is None:
                    self._list()
                self._watch()
            except _Gone:
                self._resume = None
            except Exception as exc:  # the API server restarting, a dropped connection
                self.errors += 1
                if self.stop.is_set():
                    return
                if self.errors in (1, 10, 100):
                    print(f"sim watch {self.kind}: {type(exc).__name__}: {exc}", flush=True)
                self.stop.wait(1.0)

    def _list(self) -> None:
        objects: dict[str, dict[str, Any]] = {}
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.page}
            if token:
                kwargs["_continue"] = token
            try:
                data = json.loads(self.list_fn(_preload_content=False, **kwargs).data)
            except ApiException as exc:
                if exc.status == 410 and token:  # the continue token expired: from the top
                    objects, token = {}, None
                    continue
                raise
            for obj in data.get("items") or []:
                objects[_key(obj)] = _slim(obj)
            meta = data.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                break
        self.lists += 1
        rv = str(meta.get("resourceVersion") or "")
        with self._cond:
            self._objects = objects
            self._items = None
            self._advance(rv)
            self._resume = rv
            self._synced = True
            self._changed = time.monotonic()
            self._cond.notify_all()

    def _watch(self) -> None:
        self.watches += 1
        try:
            resp = self.list_fn(
                watch=True,
                resource_version=self._resume,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_TIMEOUT_S,
                _preload_content=False,
                _request_timeout=(10, WATCH_TIMEOUT_S + 30),
            )
        except ApiException as exc:
            if exc.status == 410:
                raise _Gone from None
            raise
        self._resp = resp
        try:
            for line in iter_resp_lines(resp):
                if self.stop.is_set():
                    return
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                rv = str(meta_of(obj).get("resourceVersion") or "")
                with self._cond:
                    if kind == "DELETED":
                        self._objects.pop(_key(obj), None)
                    elif kind in ("ADDED", "MODIFIED"):
                        self._objects[_key(obj)] = _slim(obj)
                    if kind != "BOOKMARK":
                        self._items = None
                        self._changed = time.monotonic()
                        self.events += 1
                    self._advance(rv)
                    if rv:
                        self._resume = rv
                    self._cond.notify_all()
        finally:
            self._resp = None
            with contextlib.suppress(Exception):
                resp.close()
                resp.release_conn()

    def _advance(self, rv: str) -> None:
        if rv.isdigit():
            self._rv = max(self._rv, int(rv))

    def close(self) -> None:
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.shutdown() if hasattr(resp, "shutdown") else resp.close()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(2.0)


def _key(obj: dict[str, Any]) -> str:
    meta = meta_of(obj)
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without ``managedFields``, which no machine reads (a third of a node)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class WatchedClusterView(ClusterView):
    """:class:`ClusterView`'s surface over one list-and-watch of pods and one of nodes
    (the scale mode): no list in the steady state, whatever the number of readers and
    however often they read. ``fresh_after`` is not needed: a reader's own writes are
    waited for by their resourceVersion (``note_write``, which ``ViewActor`` calls)."""

    def __init__(self, api: Api, stop: threading.Event, page: int = LIST_PAGE) -> None:
        super().__init__(api)
        self.stop = stop
        self._written = {"Pod": 0, "Node": 0}
        self._lock = threading.Lock()
        self._informers = {
            "pods": _Informer("pods", api.core.list_pod_for_all_namespaces, stop, page),
            "nodes": _Informer("nodes", api.core.list_node, stop, page),
        }

    def counts(self) -> dict[str, int]:
        """Lists, watches started, events received and errors, over both kinds."""
        out = {"lists": 0, "watches": 0, "events": 0, "errors": 0}
        for i in self._informers.values():
            for name in out:
                out[name] += getattr(i, name)
        return out

    def fetched(self, kind: str) -> float:
        return self._informers[kind].changed()

    def pods(self, fresh_after: float = 0.0) -> list[dict[str, Any]]:
        return self._informers["pods"].items(self._written["Pod"])

    def nodes(self, fresh_after: float = 0.0) -> list[dict[str, Any]]:
        return self._informers["nodes"].items(self._written["Node"])

    def note_write(self, obj: Any) -> None:
        if not isinstance(obj, dict) or obj.get("kind") not in self._written:
            return
        rv = str(meta_of(obj).get("resourceVersion") or "")
        if rv.isdigit():
            kind = str(obj["kind"])
            with self._lock:  # the kubelet writes from several threads in the scale mode
                self._written[kind] = max(self._written[kind], int(rv))

    def close(self) -> None:
        self.stop.set()
        for informer in self._informers.values():
            informer.close()


class Events:
    """Writes core/v1 Events the way the components they speak for do: the kubelet, the
    controller manager's controllers and controller-runtime's recorder (Kueue, JobSet)
    still write the old shape (source, firstTimestamp, count); the scheduler, which
    writes through the events API, records with ``krea_ops.kube.events.EventRecorder``.
    ``api`` is anything with the official client's ``core`` (``CoreV1Api``)."""

    def __init__(self, api: Any, world: World, component: str) -> None:
        self.api = api
        self.clock = world.clock
        self.component = component
        self._seq = 0

    def emit(
        self,
        obj: dict[str, Any],
        kind: str,
        type_: str,
        reason: str,
        message: str,
        *,
        host: str | None = None,
        api_version: str = "v1",
    ) -> None:
        meta = meta_of(obj)
        name = str(meta.get("name"))
        ns = meta.get("namespace") or "default"
        t = self.clock.wall()
        self._seq += 1
        stamp = rfc3339(t)
        source: dict[str, Any] = {"component": self.component}
        if host:
            source["host"] = host
        body = {
            "metadata": {"name": f"{name}.{int(t * 1e9) + self._seq:x}", "namespace": ns},
            "involvedObject": {
                "kind": kind,
                "namespace": meta.get("namespace") or "",
                "name": name,
                "uid": meta.get("uid") or name,
                "apiVersion": api_version,
                "resourceVersion": meta.get("resourceVersion") or "",
            },
            "reason": reason,
            "message": message[:1024],  # what the API server accepts of a note
            "type": type_,
            "source": source,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": host or self.component,
        }
        with contextlib.suppress(ApiException):  # an event is best effort, as in Kubernetes
            self.api.core.create_namespaced_event(ns, body, _preload_content=False)

    def event(
        self,
        obj: dict[str, Any],
        reason: str,
        message: str,
        *,
        type_: str = "Normal",
        api_version: str | None = None,
        kind: str | None = None,
    ) -> None:
        """``emit`` for an object that says its own kind and apiVersion (a custom
        object as the API returned it), as controller-runtime's recorder is called."""
        self.emit(
            obj,
            kind or str(obj.get("kind", "")),
            type_,
            reason,
            message,
            api_version=api_version or str(obj.get("apiVersion", "v1")),
        )


class ViewActor(Actor):
    """An actor that reads pods and nodes through the shared :class:`ClusterView` and
    writes through :class:`Api`: its writes counted, and the time of its last one kept
    (``_wrote``), so that its next read of the view is one listed after it."""

    def __init__(self, world: World, view: ClusterView, api: Api) -> None:
        super().__init__(world)
        self.view = view
        self.api = api
        self.writes = 0
        self._wrote = 0.0

    def _write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        try:
            out = self.api.quiet(fn, *args, **kwargs)
            self.view.note_write(out)
            return out
        finally:
            self._wrote = time.monotonic()
