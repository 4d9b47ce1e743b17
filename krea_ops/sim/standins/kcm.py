"""The simulated kube-controller-manager controllers the API semantics depend on.

- garbage collector: dependents of a deleted owner are deleted (background), owners
  deleted in the foreground wait for their dependents, orphaning strips owner refs, and
  an object whose owners do not exist (a made-up uid, an owner already gone) is deleted,
  or loses the references that dangle when another owner is alive;
- namespace lifecycle: a deleted namespace empties itself, then goes away;
- disruption controller: PodDisruptionBudget status follows the pods it selects;
- pod garbage collection, as the pod GC controller does it
  (pkg/controller/podgc/gc_controller.go): a terminating pod that never got a node is
  marked Failed for the owner its finalizers wait for (``gcUnscheduledTerminating``); a
  pod bound to a node that no longer exists is deleted (``gcOrphaned``); a terminating
  pod on a NotReady node tainted ``node.kubernetes.io/out-of-service`` is deleted
  (``gcTerminating``). A pod being deleted gracefully on a node whose kubelet has stopped
  stays Terminating, as upstream: only its kubelet, an out-of-service taint, the node's
  deletion or a forced delete ends it.

They act on the store directly from one thread, in the order changes arrived.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from krea_ops.sim.apiserver.errors import ApiError
from krea_ops.sim.apiserver.resources import ResourceType
from krea_ops.sim.apiserver.store import StoreError
from krea_ops.sim.common.objects import node_ready

if TYPE_CHECKING:
    from krea_ops.sim.apiserver.server import ApiServer

SWEEP_S = 1.0
# The pod GC's quarantine for a node it cannot find (podgc's ``quarantineTime``).
ORPHAN_QUARANTINE_S = 40.0


OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"


def _out_of_service(node: dict[str, Any]) -> bool:
    """NotReady and tainted out-of-service: the pod GC's ``gcTerminating`` condition."""
    taints = (node.get("spec") or {}).get("taints") or []
    return not node_ready(node) and any(t.get("key") == OUT_OF_SERVICE for t in taints)


def _status_core(status: dict[str, Any] | None) -> dict[str, Any]:
    out = dict(status or {})
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in out.get("conditions") or []
    ]
    return out


class ControllerManager:
    def __init__(self, server: ApiServer) -> None:
        self._server = server
        self._queue: queue.Queue[tuple[ResourceType, dict[str, Any], bool] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="sim-kcm", daemon=True)
        self._stop = threading.Event()
        # Pods being deleted gracefully, so the sweep does not list every pod each second;
        # None until the first sweep has looked at all pods (e.g. after a restart).
        self._terminating: set[tuple[str, str]] | None = None
        # Pods bound to a node that is not there, and since when (monotonic seconds).
        self._orphans: dict[tuple[str, str], float] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout=5)

    def notify(self, rt: ResourceType, obj: dict[str, Any], deleted: bool = False) -> None:
        self._queue.put((rt, obj, deleted))

    def idle(self, timeout: float = 5.0) -> bool:
        """Wait until every queued change has been handled (for tests)."""
        done = threading.Event()
        self._queue.put((None, {"done": done}, False))  # type: ignore[arg-type]
        return done.wait(timeout)

    # -- loop -------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=SWEEP_S)
            except queue.Empty:
                self._guard(self._sweep_pods)
                continue
            if item is None:
                return
            rt, obj, deleted = item
            if rt is None:
                obj["done"].set()
                continue
            self._guard(self._handle, rt, obj, deleted)

    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except (ApiError, StoreError):
            pass  # the object changed under us; the next event brings us back
        except Exception as exc:  # a controller bug must not stop the others
            if not self._stop.is_set():
                print(f"sim controllers: {exc!r}", file=sys.stderr)

    def _handle(self, rt: ResourceType, obj: dict[str, Any], deleted: bool) -> None:
        meta = obj.get("metadata") or {}
        if deleted:
            self._collect_dependents(meta.get("uid"))
            self._recheck_foreground_owners(obj)
        elif meta.get("deletionTimestamp"):
            finalizers = meta.get("finalizers") or []
            if "orphan" in finalizers:
                self._orphan(rt, obj)
            if "foregroundDeletion" in finalizers:
                self._foreground(rt, obj)
        elif meta.get("ownerReferences"):
            self._dangling(rt, obj)
        if rt.group == "" and rt.kind == "Namespace" and meta.get("deletionTimestamp"):
            self._finish_namespace(obj)
        if rt.group == "" and rt.kind == "Pod":
            self._sync_budgets(meta.get("namespace", ""))
            key = (meta.get("namespace", ""), meta.get("name", ""))
            if meta.get("deletionTimestamp") and not deleted:
                if self._terminating is not None:
                    self._terminating.add(key)
                self._finish_pod(obj)
            elif self._terminating is not None:
                self._terminating.discard(key)
        if rt.group == "" and rt.kind == "Node" and (deleted or _out_of_service(obj)):
            self._gc_pods_on(meta.get("name", ""))
        if rt.group == "policy" and rt.kind == "PodDisruptionBudget" and not deleted:
            self._sync_budgets(meta.get("namespace", ""))
        if meta.get("namespace"):
            ns = self._server.store.get("/namespaces", "", meta["namespace"])
            if ns is not None and ns.obj["metadata"].get("deletionTimestamp"):
                self._finish_namespace(ns.obj)

    # -- garbage collection -------------------------------------------------------------

    def _dependents(self, uid: str) -> list[tuple[ResourceType, dict[str, Any]]]:
        server = self._server
        out = []
        with server.store.lock:
            for rt in server.registry.all_storage():
                for entry in server.store.list(rt.key)[0]:
                    refs = (entry.obj.get("metadata") or {}).get("ownerReferences") or []
                    if any(r.get("uid") == uid for r in refs):
                        out.append((rt, entry.obj))
        return out

    def _owner_alive(self, ref: dict[str, Any], ns: str) -> bool:
        group = ref.get("apiVersion", "").rpartition("/")[0]
        rt = self._server.registry.by_kind(group, ref.get("kind", ""))
        if rt is None:
            return False
        entry = self._server.store.get(rt.key, ns if rt.namespaced else "", ref.get("name", ""))
        return entry is not None and entry.obj["metadata"].get("uid") == ref.get("uid")

    def _owner_state(self, ref: dict[str, Any], ns: str) -> str:
        """``alive``, ``dangling`` (no object of that kind, name and uid: absent, or made
        again with another uid) or ``unknown`` (a kind this server does not serve: the
        real collector cannot map it and leaves the dependent alone, retrying)."""
        group = ref.get("apiVersion", "").rpartition("/")[0]
        rt = self._server.registry.by_kind(group, ref.get("kind", ""))
        if rt is None:
            return "unknown"
        return "alive" if self._owner_alive(ref, ns) else "dangling"

    def _dangling(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        """An object that names owners which do not exist, as the garbage collector's
        attemptToDeleteItem treats it (classifyReferences): with no owner left alive it is
        deleted (in the background), else the dangling references are taken off it."""
        meta = obj["metadata"]
        ns = meta.get("namespace", "")
        refs = meta.get("ownerReferences") or []
        states = [self._owner_state(r, ns) for r in refs]
        if "dangling" not in states:
            return
        if all(state == "dangling" for state in states):
            self._server.delete(rt, ns, meta["name"], {"propagationPolicy": "Background"})
            return
        updated = copy.deepcopy(obj)
        updated["metadata"]["ownerReferences"] = [
            r for r, state in zip(refs, states, strict=True) if state != "dangling"
        ]
        self._server.store.update(rt.key, ns, meta["name"], updated)

    def _collect_dependents(self, uid: str | None) -> None:
        if not uid:
            return
        for rt, obj in self._dependents(uid):
            meta = obj["metadata"]
            ns = meta.get("namespace", "")
            others = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != uid]
            if any(self._owner_alive(r, ns) for r in others):
                updated = copy.deepcopy(obj)
                updated["metadata"]["ownerReferences"] = others
                self._server.store.update(rt.key, ns, meta["name"], updated)
                continue
            if meta.get("deletionTimestamp"):
                continue
            self._server.delete(rt, ns, meta["name"], {"propagationPolicy": "Background"})

    def _remove_finalizer(self, rt: ResourceType, obj: dict[str, Any], finalizer: str) -> None:
        server = self._server
        meta = obj["metadata"]
        with server.store.lock:
            entry = server.store.get(rt.key, meta.get("namespace", ""), meta["name"])
            if entry is None:
                return
            updated = copy.deepcopy(entry.obj)
            updated["metadata"]["finalizers"] = [
                f for f in updated["metadata"].get("finalizers") or [] if f != finalizer
            ]
            server._update(
                rt.at_version(rt.storage_version or rt.version),
                meta.get("namespace", ""),
                meta["name"],
                updated,
                status=False,
                dry_run=False,
                expect_rv=entry.rv,
            )

    def _orphan(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        uid = obj["metadata"].get("uid")
        for drt, dep in self._dependents(uid):
            updated = copy.deepcopy(dep)
            updated["metadata"]["ownerReferences"] = [
                r for r in updated["metadata"].get("ownerReferences") or [] if r.get("uid") != uid
            ]
            self._server.store.update(
                drt.key, dep["metadata"].get("namespace", ""), dep["metadata"]["name"], updated
            )
        self._remove_finalizer(rt, obj, "orphan")

    def _recheck_foreground_owners(self, obj: dict[str, Any]) -> None:
        """A dependent is gone: an owner deleted in the foreground may now finish."""
        meta = obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            group = ref.get("apiVersion", "").rpartition("/")[0]
            rt = self._server.registry.by_kind(group, ref.get("kind", ""))
            if rt is None:
                continue
            entry = self._server.store.get(
                rt.key, meta.get("namespace", "") if rt.namespaced else "", ref.get("name", "")
            )
            if entry is None or entry.obj["metadata"].get("uid") != ref.get("uid"):
                continue
            owner_meta = entry.obj["metadata"]
            if owner_meta.get("deletionTimestamp") and "foregroundDeletion" in (
                owner_meta.get("finalizers") or []
            ):
                self._foreground(rt, entry.obj)

    def _foreground(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        uid = obj["metadata"].get("uid")
        dependents = self._dependents(uid)
        for drt, dep in dependents:
            if not dep["metadata"].get("deletionTimestamp"):
                self._server.delete(
                    drt,
                    dep["metadata"].get("namespace", ""),
                    dep["metadata"]["name"],
                    {"propagationPolicy": "Foreground"},
                )
        if not self._dependents(uid):
            self._remove_finalizer(rt, obj, "foregroundDeletion")

    # -- namespaces ---------------------------------------------------------------------

    def _finish_namespace(self, ns_obj: dict[str, Any]) -> None:
        server = self._server
        name = ns_obj["metadata"]["name"]
        for rkey, obj_name in server.store.namespaces_in_use(name):
            rt = server.registry.storage(rkey)
            entry = server.store.get(rkey, name, obj_name)
            if rt is None or entry is None or entry.obj["metadata"].get("deletionTimestamp"):
                continue
            server.delete(rt, name, obj_name, {"propagationPolicy": "Background"})
        if server.store.namespaces_in_use(name):
            return
        ns_rt = server.registry.storage("/namespaces")
        assert ns_rt is not None
        with server.store.lock:
            entry = server.store.get("/namespaces", "", name)
            if entry is None:
                return
            if entry.obj["metadata"].get("finalizers"):
                return  # someone else's finalizer still holds it
            server.store.delete("/namespaces", "", name)
        self.notify(ns_rt, entry.obj, deleted=True)

    # -- pods and budgets ---------------------------------------------------------------

    def _finish_pod(self, pod: dict[str, Any]) -> None:
        """The pod GC's verdict on a terminating pod (or any pod whose node is gone)."""
        server = self._server
        meta = pod["metadata"]
        node_name = (pod.get("spec") or {}).get("nodeName")
        rt = server.registry.storage("/pods")
        assert rt is not None
        if not node_name:
            if not meta.get("deletionTimestamp"):
                return
            # gcUnscheduledTerminating: a pod being deleted that never got a node is marked
            # Failed (no kubelet ever will), so the owner its finalizer waits for (the Job
            # controller) can count it.
            phase = (pod.get("status") or {}).get("phase")
            if meta.get("finalizers") and phase not in ("Succeeded", "Failed"):
                failed = copy.deepcopy(pod)
                failed.setdefault("status", {})["phase"] = "Failed"
                with contextlib.suppress(ApiError):
                    server._update(
                        rt, meta.get("namespace", ""), meta["name"], failed,
                        status=True, dry_run=False,
                    )  # fmt: skip
            return
        key = (meta.get("namespace", ""), meta["name"])
        node = server.store.get("/nodes", "", node_name)
        if node is not None:
            self._orphans.pop(key, None)
            if not meta.get("deletionTimestamp") or not _out_of_service(node.obj):
                return  # its kubelet finishes it, when it comes back
        else:
            # gcOrphaned: a node gone for the quarantine time (it may come back: a node
            # re-registering keeps its pods) takes its pods with it.
            since = self._orphans.setdefault(key, time.monotonic())
            if time.monotonic() - since < ORPHAN_QUARANTINE_S:
                return
            self._orphans.pop(key, None)
        with contextlib.suppress(ApiError):
            server.delete(rt, meta["namespace"], meta["name"], {"gracePeriodSeconds": 0})

    def _gc_pods_on(self, node_name: str) -> None:
        """A node was deleted, or went out of service: its pods go as the pod GC says."""
        for entry in self._server.store.list("/pods")[0]:
            if (entry.obj.get("spec") or {}).get("nodeName") == node_name:
                self._finish_pod(entry.obj)

    def _sweep_pods(self) -> None:
        server = self._server
        if self._terminating is None:
            self._terminating = {
                (e.obj["metadata"].get("namespace", ""), e.obj["metadata"]["name"])
                for e in server.store.list("/pods")[0]
                if e.obj["metadata"].get("deletionTimestamp")
            }
        for ns, name in list(self._terminating):
            entry = server.store.get("/pods", ns, name)
            if entry is None:
                self._terminating.discard((ns, name))
            elif entry.obj["metadata"].get("deletionTimestamp"):
                self._finish_pod(entry.obj)
        for ns, name in list(self._orphans):
            entry = server.store.get("/pods", ns, name)
            if entry is None:
                self._orphans.pop((ns, name), None)
            else:
                self._finish_pod(entry.obj)

    def _sync_budgets(self, ns: str) -> None:
        server = self._server
        rt = server.registry.storage("policy/poddisruptionbudgets")
        if rt is None or not ns:
            return
        budgets = server.store.list(rt.key, ns)[0]
        if not budgets:
            return  # no budget here: nothing to recompute for this pod change
        with server.store.lock:
            for entry in budgets:
                status = server.pdb_status(entry.obj)
                if _status_core(status) == _status_core(entry.obj.get("status")):
                    continue
                updated = copy.deepcopy(entry.obj)
                updated["status"] = status
                server.store.update(
                    rt.key, ns, entry.obj["metadata"]["name"], updated, expect_rv=entry.rv
                )
