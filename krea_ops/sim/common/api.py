"""How the cluster actors reach the API server: the official client's typed APIs without
model objects, one shared list of pods and one of nodes, and Events.

The actors share one list of pods and one of nodes (:class:`ClusterView`,
``world.services["cluster-view"]``), relisted at most every half wall second or after the
reader's own writes.
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
            return self.api.quiet(fn, *args, **kwargs)
        finally:
            self._wrote = time.monotonic()
