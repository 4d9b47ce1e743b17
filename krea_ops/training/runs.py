"""Training runs as the console shows them: the DiT JobSets in the cluster, their state,
their checkpoints on disk and the checkpoint-interval advice for their size.

A run's checkpoint directory is the JobSet's ``krea.ai/checkpoint-dir`` annotation, a
path *inside the pods* (a shared volume, ``/checkpoints/<ns>/<name>`` by default). The
console can only judge checkpoints it can read, so the setting
``training_checkpoint_mount`` says where that volume is mounted locally
(``REMOTE=LOCAL``, e.g. ``/checkpoints=/mnt/checkpoints``; the demo maps it onto the
simulator's state directory). Without it a run's checkpoints are unknown, not empty.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krea_ops.errors import BadInput, KreaError
from krea_ops.kube.cluster import Cluster, pod_gpus
from krea_ops.kube.times import parse_time
from krea_ops.training.advice import Advice, advise
from krea_ops.training.checkpoints import Checkpoint, discover

JOBSET = ("jobset.x-k8s.io", "jobsets", ("v1alpha2",))
CHECKPOINT_DIR_ANNOTATION = "krea.ai/checkpoint-dir"
RESUME_FROM_ANNOTATION = "krea.ai/resume-from"
TRAINING_SELECTOR = "krea.ai/workload=training"


@dataclass(frozen=True)
class TrainingRun:
    namespace: str
    name: str
    state: str  # Suspended | Running | Restarting | Completed | Failed
    nodes: int | None
    gpus_per_node: int | None
    restarts: int | None
    max_restarts: int | None
    queue: str | None
    priority_class: str | None
    created_at: float | None
    checkpoint_dir: str | None  # as the pods see it
    local_dir: Path | None  # where the console reads it (None: not mounted here)
    checkpoints: tuple[Checkpoint, ...] | None  # None: unknown (see checkpoints_error)
    checkpoints_error: str | None
    advice: Advice | None

    @property
    def gpus(self) -> int | None:
        if self.nodes is None or self.gpus_per_node is None:
            return None
        return self.nodes * self.gpus_per_node

    @property
    def latest_complete(self) -> Checkpoint | None:
        return next((c for c in self.checkpoints or () if c.complete), None)


def parse_mount(text: str | None) -> tuple[str, Path] | None:
    if not text:
        return None
    remote, sep, local = text.partition("=")
    if not sep or not remote or not local:
        raise BadInput(
            f"training_checkpoint_mount {text!r} must be REMOTE=LOCAL, "
            "e.g. /checkpoints=/mnt/checkpoints"
        )
    return remote.rstrip("/") or "/", Path(local)


def local_path(remote: str, mount: tuple[str, Path] | None) -> Path | None:
    if mount is None:
        return None
    prefix, root = mount
    if remote != prefix and not remote.startswith(prefix.rstrip("/") + "/"):
        return None
    return root / remote[len(prefix) :].lstrip("/")


def _state(obj: dict[str, Any]) -> str:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or ()}
    if conds.get("Completed") == "True":
        return "Completed"
    if conds.get("Failed") == "True":
        return "Failed"
    if spec.get("suspend"):
        return "Suspended"
    return "Running"


def _shape(obj: dict[str, Any]) -> tuple[int | None, int | None]:
    for rj in (obj.get("spec") or {}).get("replicatedJobs") or ():
        job = (rj.get("template") or {}).get("spec") or {}
        pods = job.get("parallelism")
        replicas = rj.get("replicas") or 1
        gpus = pod_gpus((job.get("template") or {}).get("spec") or {})
        nodes = None if pods is None else int(pods) * int(replicas)
        return nodes, (gpus or None)
    return None, None


def read_runs(
    cluster: Cluster,
    *,
    mount: tuple[str, Path] | None = None,
    checkpoint_seconds: float = 30.0,
    failures_per_1000_node_days: float = 6.5,
    now: float | None = None,
) -> list[TrainingRun]:
    """Every training JobSet (label ``krea.ai/workload=training``), newest first."""
    objs = cluster.custom_objects(JOBSET[0], JOBSET[1], JOBSET[2], label_selector=TRAINING_SELECTOR)
    now = time.time() if now is None else now
    runs = []
    for obj in objs:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        nodes, gpus_per_node = _shape(obj)
        remote = annotations.get(CHECKPOINT_DIR_ANNOTATION)
        local = local_path(remote, mount) if remote else None
        checkpoints: tuple[Checkpoint, ...] | None = None
        error = None
        if remote is None:
            error = "the JobSet names no checkpoint directory"
        elif local is None:
            error = f"{remote} is not mounted here (setting training_checkpoint_mount)"
        elif not local.exists():
            checkpoints = ()  # mounted, nothing written yet
        else:
            try:
                checkpoints = tuple(discover(local, now=now))
            except KreaError as exc:
                error = str(exc)
        advice = None
        if nodes:
            advice = advise(
                checkpoint_seconds,
                nodes=nodes,
                failures_per_1000_node_days=failures_per_1000_node_days,
            )
        spec = obj.get("spec") or {}
        runs.append(
            TrainingRun(
                namespace=meta.get("namespace", ""),
                name=meta.get("name", ""),
                state=_state(obj),
                nodes=nodes,
                gpus_per_node=gpus_per_node,
                restarts=(obj.get("status") or {}).get("restarts"),
                max_restarts=(spec.get("failurePolicy") or {}).get("maxRestarts"),
                queue=labels.get("kueue.x-k8s.io/queue-name"),
                priority_class=labels.get("kueue.x-k8s.io/priority-class"),
                created_at=parse_time(meta.get("creationTimestamp")),
                checkpoint_dir=remote,
                local_dir=local,
                checkpoints=checkpoints,
                checkpoints_error=error,
                advice=advice,
            )
        )
    runs.sort(key=lambda r: (-(r.created_at or 0.0), r.namespace, r.name))
    return runs
