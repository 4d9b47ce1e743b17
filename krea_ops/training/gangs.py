"""Training gangs as they run: each training JobSet with the pods of its current attempt.

JobSet labels every child Job and pod with ``jobset.sigs.k8s.io/jobset-name`` and
``jobset.sigs.k8s.io/restart-attempt`` (the JobSet's ``status.restarts`` when the pod was
made): the current attempt's pods are those whose attempt equals ``status.restarts``.
One JobSet list (``krea.ai/workload=training``) and one pod list (the same label) read
every gang of the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from krea_ops.kube.cluster import Cluster, pod_gpus
from krea_ops.kube.rules import is_deleting
from krea_ops.kube.times import parse_time
from krea_ops.training.attribution import FailedPod
from krea_ops.training.runs import JOBSET, TRAINING_SELECTOR

Obj = dict[str, Any]
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"


@dataclass(frozen=True)
class Gang:
    """One training JobSet: ``restarts`` its ``status.restarts``; ``nodes`` the nodes of
    the current attempt's pods that are scheduled; ``running``: every expected pod of the
    current attempt is there and Running; ``expected``: the pods its replicated jobs ask
    for; ``gpus``: their GPUs."""

    namespace: str
    name: str
    uid: str
    restarts: int
    resource_version: str
    nodes: tuple[str, ...]
    running: bool
    expected: int
    gpus: int
    annotations: Mapping[str, str]
    pods: tuple[Obj, ...]
    terminal: bool = False  # Completed or Failed
    previous: tuple[Obj, ...] = ()  # pods of earlier attempts not yet gone
    spec: Mapping[str, Any] = field(default_factory=dict)  # the JobSet's spec (its policies)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def rank0(self) -> Obj | None:
        """The pod of global rank 0 (job index 0, completion index 0), if it exists."""

        def order(pod: Obj) -> tuple[int, int, str]:
            meta = pod.get("metadata") or {}
            labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
            return (
                _int(labels.get(JOB_INDEX_LABEL)),
                _int(notes.get(COMPLETION_INDEX) or labels.get(COMPLETION_INDEX)),
                str(meta.get("name")),
            )

        return min(self.pods, key=order) if self.pods else None

    def failed_pods(self) -> list[FailedPod]:
        """The current attempt's pods that failed (phase Failed, or a container that
        ended with a non-zero exit code), without their logs."""
        return [f for p in self.pods if (f := failed_pod(p)) is not None]


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 1 << 30


def failed_pod(pod: Obj) -> FailedPod | None:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    terminated = None
    for cs in status.get("containerStatuses") or ():
        term = (cs.get("state") or {}).get("terminated")
        if term and term.get("exitCode", 0) != 0:
            terminated = term
            break
    if status.get("phase") != "Failed" and terminated is None:
        return None
    term = terminated or {}
    code = term.get("exitCode")
    return FailedPod(
        pod=str(meta.get("name")),
        node=(pod.get("spec") or {}).get("nodeName"),
        at=parse_time(term.get("finishedAt")) or parse_time(meta.get("deletionTimestamp")),
        reason=term.get("reason") or status.get("reason"),
        exit_code=int(code) if isinstance(code, int) else None,
        message=status.get("message") or term.get("message"),
    )


def _expected(js: Obj) -> int:
    total = 0
    for rj in (js.get("spec") or {}).get("replicatedJobs") or ():
        spec = ((rj.get("template") or {}).get("spec")) or {}
        total += int(rj.get("replicas", 1) or 1) * int(spec.get("parallelism", 1) or 1)
    return total


def _terminal(js: Obj) -> bool:
    for c in (js.get("status") or {}).get("conditions") or ():
        if c.get("type") in ("Completed", "Failed") and c.get("status") == "True":
            return True
    return False


def gangs_of(jobsets: list[Obj], pods: list[Obj]) -> list[Gang]:
    by_run: dict[tuple[str, str], list[Obj]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = (meta.get("labels") or {}).get(JOBSET_NAME_LABEL)
        if name:
            by_run.setdefault((str(meta.get("namespace")), str(name)), []).append(pod)
    out = []
    for js in jobsets:
        meta = js.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        restarts = int((js.get("status") or {}).get("restarts") or 0)
        current = [
            p
            for p in by_run.get((ns, name), [])
            if _int(((p.get("metadata") or {}).get("labels") or {}).get(RESTART_ATTEMPT_LABEL))
            == restarts
        ]
        current.sort(key=lambda p: str((p.get("metadata") or {}).get("name")))
        previous = [
            p
            for p in by_run.get((ns, name), [])
            if _int(((p.get("metadata") or {}).get("labels") or {}).get(RESTART_ATTEMPT_LABEL))
            < restarts
        ]
        expected = _expected(js)
        live = [p for p in current if not is_deleting(p)]
        nodes = sorted({n for p in current if (n := (p.get("spec") or {}).get("nodeName"))})
        running = (
            expected > 0
            and len(live) >= expected
            and all((p.get("status") or {}).get("phase") == "Running" for p in live)
        )
        out.append(
            Gang(
                namespace=ns,
                name=name,
                uid=str(meta.get("uid") or ""),
                restarts=restarts,
                resource_version=str(meta.get("resourceVersion") or ""),
                nodes=tuple(nodes),
                running=running,
                expected=expected,
                gpus=sum(pod_gpus(p.get("spec") or {}) for p in live),
                annotations=dict(meta.get("annotations") or {}),
                pods=tuple(current),
                terminal=_terminal(js),
                previous=tuple(previous),
                spec=dict(js.get("spec") or {}),
            )
        )
    out.sort(key=lambda g: (g.namespace, g.name))
    return out


def read_gangs(cluster: Cluster) -> list[Gang]:
    """Every training gang: one JobSet list and one pod list, both by label."""
    jobsets = cluster.custom_objects(
        JOBSET[0], JOBSET[1], JOBSET[2], label_selector=TRAINING_SELECTOR
    )
    pods = cluster.list_all("list pods", "/api/v1/pods", labelSelector=TRAINING_SELECTOR)
    return gangs_of(jobsets, pods)
