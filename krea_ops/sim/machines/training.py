"""Simulated DiT pre-training runs: the JobSet they are launched as, and the checkpoints
their pods write.

``dit_jobset_manifest`` and ``latest_complete_checkpoint`` are pure functions of the
core, for the product's ``train launch`` / ``train checkpoints`` / ``train resume`` too.
Whether a checkpoint is complete is decided by the product's own check
(``krea_ops.training.checkpoints``), which reads this module's JSON ``.metadata`` as well
as real DCP's pickled one.

Checkpoints follow PyTorch DCP as torchtitan lays it out: ``<dir>/step-<N>/`` holds one
shard per rank, ``__<rank>_0.distcp``, and a ``.metadata`` file that rank 0 writes last
(``.metadata.tmp`` renamed into place) and that commits the checkpoint. A checkpoint
without ``.metadata`` is incomplete: a crash while it was being written. Resuming takes the
newest complete one, never a newer incomplete one.

In the simulated world (``TrainingActor``), while every pod of a training's gang is
Running, the ranks write a checkpoint every ``checkpoint_interval_s`` simulated seconds
into ``<state>/checkpoints/<namespace>/<name>/``; writing takes ``checkpoint_write_s``
(``WorldConfig.extra``, default 60 s), shards first, ``.metadata`` last. When the gang
breaks mid-write (a pod failed, the job was preempted) the step directory stays behind
without ``.metadata``. Each time the gang (re)starts it resumes from the newest complete
checkpoint, records the step in the JobSet annotation ``sim.krea.ai/resumed-from-step``
(``0``: from scratch) and says so in an Event.

Pace. A run's step is integrated tick by tick: each tick it advances by ``dt * rate *
pace`` (``rate``: ``training_steps_per_s`` in ``WorldConfig.extra``, default 1), the pace
being the gang's as its devices decide it (``world.services["devices"].gang_pace``:
a tenth in an input-bound phase, 1/F behind a straggler GPU of slowdown F, 0 while its
collective hangs; 1 in a world without devices). Checkpoints and the log take that step.

Hang. From the moment a ``hang`` fault stalls the gang's collective the ranks make no
progress and write nothing: no step line, no new checkpoint, and a checkpoint being
written does not complete. After the NCCL timeout (torch.distributed's default
collective timeout, 10 minutes: ``logs.NCCL_TIMEOUT_MS``; ``extra["nccl_timeout_s"]``)
from the stall every rank's watchdog aborts its process (the watchdog lines in every
rank's log, ``logs.py``) and torchrun exits with 1 (``TORCHRUN_CHILD_FAILED_EXIT``: its
children died of SIGABRT, and its ``@record`` main re-raises ChildFailedError); the
trainers tell the kubelet through ``world.services["container-exits"]`` (``kubelet.py``)
and the pods fail, so the JobSet's failure policy restarts the gang, which resumes from
its newest complete checkpoint. A gang restarted or evicted before the timeout never
times out: its new attempt runs at full pace.

Like the kubelets and the devices, the trainers are machines of the world: they act only
through the API and read no control-plane stand-in's state (the Kueue actor, its JobSet
and Job controllers, the scheduler), so they run as they are on the real control plane.
Each tick they take their own reading (``TrainerReading``): one list of the training
JobSets, and the pods of JobSets from the cluster actors' shared pod list
(``world.services["cluster-view"]``) when it exists, else one label-selected list.

The ranks also honour a planned swap's checkpoint request, as a real trainer's launcher
must (docs/operations.md, "Planned swaps"): while the gang runs, a JobSet annotation
``krea.ai/checkpoint-requested-at`` newer than its ``krea.ai/checkpoint-completed-at``
starts a checkpoint at once (after the one being written, if any), with an Event
``CheckpointRequested``; once its ``.metadata`` is committed the JobSet is annotated
``krea.ai/checkpoint-completed-at`` (wall time, RFC 3339) and
``krea.ai/checkpoint-completed-step``, with an Event ``CheckpointCompleted``. A request
that is not an RFC 3339 time is ignored, with one Warning Event per value. The trainers'
log keeps torchtitan's own save lines, which name no step (its ``Checkpointer`` logs the
step only for the last step's save).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client.rest import ApiException

from krea_ops.kube.times import parse_time, rfc3339
from krea_ops.sim.common.actor import Actor, World
from krea_ops.sim.common.api import Events
from krea_ops.sim.common.jobapi import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    JS_NAME,
    JS_RESTART,
    JobApi,
    Obj,
    annots,
    deleting,
    ignore_gone,
    jobset_pod_count,
    key,
    labels,
    meta,
    phase,
    pod_requests,
)
from krea_ops.sim.machines.devices import FULL_PACE, GangPace
from krea_ops.sim.machines.kubelet import EXITS_SERVICE
from krea_ops.sim.machines.logs import NCCL_TIMEOUT_MS, TrainerLogs
from krea_ops.training.checkpoints import METADATA, STEP_DIR, inspect_checkpoint
from krea_ops.training.manifests import (
    WORKLOAD_LABEL,
    TrainingSpec,
    default_checkpoint_dir,
    training_jobset,
)
from krea_ops.training.runs import CHECKPOINT_DIR_ANNOTATION, RESUME_FROM_ANNOTATION
from krea_ops.training.swaps import (
    CHECKPOINT_COMPLETED_AT,
    CHECKPOINT_COMPLETED_STEP,
    CHECKPOINT_REQUESTED_AT,
    CHECKPOINT_REQUESTED_BY,
    CHECKPOINT_REQUESTED_REASON,
)

RESUMED_STEP_ANNOTATION = "sim.krea.ai/resumed-from-step"
RESUMED_FROM_ANNOTATION = "sim.krea.ai/resumed-from"
LAST_CHECKPOINT_ANNOTATION = "sim.krea.ai/last-checkpoint-step"
COMPONENT = "dit-trainer"
# What the container exits with when the NCCL watchdog aborts its ranks: each child
# dies of SIGABRT (exitcode -6 to torchrun's agent), and torchrun, the container's
# command, ends with the ChildFailedError its ``@record`` main re-raises: exit code 1.
TORCHRUN_CHILD_FAILED_EXIT = 1


# -- checkpoints (pure) ----------------------------------------------------------------


def shard_name(rank: int) -> str:
    return f"__{rank}_0.distcp"


def checkpoint_complete(step_dir: Path | str) -> bool:
    """DCP's commit check, the product's own (``krea_ops.training.checkpoints``), so the
    simulator and ``krea-ops train checkpoints`` never disagree on "complete":
    ``.metadata`` exists and is readable, and every file it lists exists with at least
    ``offset + length`` bytes."""
    return inspect_checkpoint(step_dir).complete


def list_checkpoints(path: Path | str) -> list[tuple[int, Path, bool]]:
    """``(step, dir, complete)`` for every ``step-<N>`` directory, newest first."""
    root = Path(path)
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    out = []
    for entry in entries:
        m = STEP_DIR.match(entry.name)
        if m and entry.is_dir():
            out.append((int(m.group(1)), entry, checkpoint_complete(entry)))
    out.sort(key=lambda t: t[0], reverse=True)
    return out


def latest_complete_checkpoint(path: Path | str) -> tuple[int, Path] | None:
    """The newest complete checkpoint under ``path`` as ``(step, dir)``; None if none.

    Like torchtitan's ``load_step=-1``: the largest N whose ``step-N/.metadata`` commits
    it. Incomplete directories (a crash mid-write), other names and files are skipped.
    """
    for step, step_dir, complete in list_checkpoints(path):
        if complete:
            return step, step_dir
    return None


def _shard_bytes(seed: str, size: int) -> bytes:
    block = hashlib.sha256(seed.encode()).digest()
    return (block * (size // len(block) + 1))[:size]


def write_shard(step_dir: Path, rank: int, step: int, size: int) -> None:
    (step_dir / shard_name(rank)).write_bytes(_shard_bytes(f"{step_dir}:{step}:{rank}", size))


def commit_checkpoint(step_dir: Path, step: int, world_size: int, extra: Obj | None = None) -> None:
    """Rank 0's finish(): ``.metadata.tmp`` written, flushed, renamed to ``.metadata``."""
    storage = {}
    for rank in range(world_size):
        size = (step_dir / shard_name(rank)).stat().st_size
        storage[shard_name(rank)] = {"offset": 0, "length": size}
    doc = {
        "format": "krea-sim-dcp/1",
        "step": step,
        "world_size": world_size,
        "storage_data": storage,
        **(extra or {}),
    }
    tmp = step_dir / f"{METADATA}.tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, step_dir / METADATA)


# -- the launch manifest: the product's builder (krea_ops.training.manifests) -----------


def dit_jobset_manifest(
    name: str,
    nodes: int,
    gpus_per_node: int = 8,
    checkpoint_dir: str | None = None,
    namespace: str = "training",
    image: str = "krea/dit:latest",
    resume_from: str | None = None,
    *,
    queue: str = "training",
    priority_class: str = "training",
    max_restarts: int = 10,
    run_seconds: float | None = None,
) -> Obj:
    """The JobSet ``krea-ops train launch`` creates (``training_jobset``), with what only
    the simulated world adds: the pods' PriorityClass of the same name (the world's
    scheduler preempts inference pods by it) and ``sim.krea.ai/run-seconds``. The world's
    trainings keep disruptions counting towards ``maxRestarts`` (``disruptions_free``
    off): the simulated ranks do not crash when one of them is evicted, so the gang
    restart on a drain comes from the Job's ``backoffLimit: 0``, as the world's tests of
    a drain expect."""
    if nodes < 1:
        raise ValueError("nodes must be >= 1")
    if gpus_per_node < 1:
        raise ValueError("gpus_per_node must be >= 1")
    spec = TrainingSpec(
        name=name,
        nodes=nodes,
        image=image,
        namespace=namespace,
        gpus_per_node=gpus_per_node,
        queue=queue,
        priority=priority_class,
        checkpoint_dir=checkpoint_dir,
        resume_from=resume_from,
        max_restarts=max_restarts,
        disruptions_free=False,
    )
    js = training_jobset(spec)
    (rjob,) = js["spec"]["replicatedJobs"]
    pod = rjob["template"]["spec"]["template"]
    pod["spec"]["priorityClassName"] = priority_class
    if run_seconds is not None:
        pod["metadata"]["annotations"] = {"sim.krea.ai/run-seconds": str(int(run_seconds))}
    return js


def submit_training(
    api_client: Any,
    name: str,
    nodes: int,
    gpus_per_node: int = 8,
    checkpoint_dir: str | None = None,
    namespace: str = "training",
    image: str = "krea/dit:latest",
    resume_from: str | None = None,
    **options: Any,
) -> Obj:
    """Create the training's JobSet (``dit_jobset_manifest``) through the API; returns it."""
    from kubernetes import client

    body = dit_jobset_manifest(
        name, nodes, gpus_per_node, checkpoint_dir, namespace, image, resume_from, **options
    )
    custom: Any = client.CustomObjectsApi(api_client)
    out: Obj = custom.create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, body
    )
    return out


# -- the simulated trainers ------------------------------------------------------------


@dataclass
class Write:
    step: int
    dir: Path
    started: float
    world_size: int
    written: int = 0
    requested: str | None = None  # the checkpoint-requested-at it answers


@dataclass
class Run:
    """One attempt of a gang, from its start; ``progress`` the steps it has made since
    ``base_step`` (fractional), integrated tick by tick at the gang's pace."""

    gang: frozenset[str]
    started: float
    base_step: int
    next_checkpoint: float
    writing: Write | None = None
    checkpoints: list[int] = field(default_factory=list)
    progress: float = 0.0
    advanced_to: float | None = None  # simulated time ``progress`` counts up to
    pace: float = 1.0  # the gang's pace over the last tick
    stalled_since: float | None = None  # its collective hangs since then
    timed_out: bool = False  # the NCCL watchdog fired

    @property
    def step(self) -> int:
        """The last step the gang completed."""
        return self.base_step + int(self.progress)

    def advance(
        self, now: float, rate: float, pace: float, stalled_since: float | None = None
    ) -> None:
        """Progress up to ``now`` at ``rate`` steps a second times ``pace``; a stall stops
        it from the moment it began (before that the gang ran at its former pace)."""
        last = self.started if self.advanced_to is None else self.advanced_to
        if stalled_since is not None:
            until = min(now, max(stalled_since, last))
            self.progress += max(until - last, 0.0) * rate * self.pace
            self.pace = 0.0
        else:
            self.progress += max(now - last, 0.0) * rate * pace
            self.pace = pace
        self.advanced_to = max(now, last)
        self.stalled_since = stalled_since


def host_path(state_dir: Path, pod_path: str) -> Path:
    """Where a path the pods see lies on this machine: ``/checkpoints/...`` is the
    world's ``<state>/checkpoints/...``; any other path is taken as it is."""
    if pod_path.startswith("/checkpoints/"):
        return state_dir / "checkpoints" / pod_path.removeprefix("/checkpoints/")
    return Path(pod_path)


class TrainerReading:
    """What one tick of the trainers read through the API: the training JobSets and the
    pods of JobSets (labelled ``jobset.sigs.k8s.io/jobset-name``). Read-only: the pods
    may be the cluster view's shared objects."""

    def __init__(self, time: float, jobsets: list[Obj], pods: list[Obj]) -> None:
        self.time = time
        self.jobsets = jobsets
        self._pods: dict[tuple[str, str], list[Obj]] = {}
        for pod in pods:
            name = labels(pod).get(JS_NAME)
            if name:
                self._pods.setdefault((str(meta(pod).get("namespace", "")), name), []).append(pod)

    def pods_of_jobset(self, ns: str, name: str) -> list[Obj]:
        return list(self._pods.get((ns, name), ()))


class TrainingActor(Actor):
    """The ranks of every running DiT training: checkpoints, crashes, resumes.

    Takes its own reading through the API each tick (``read``): one list of the training
    JobSets, and their pods from the shared cluster view (or one label-selected list)."""

    name = "training"
    # The ranks notice a broken gang within a tick: shorter than a checkpoint write, or a
    # crash mid-write would find the checkpoint already committed.
    period_s = 2.0

    def __init__(self, world: World) -> None:
        super().__init__(world)
        extra = world.config.extra
        default = max(self.period_s, 0.25 * world.config.speed)
        self.period_s = float(extra.get("training_period_s", default))
        self.write_s = float(extra.get("checkpoint_write_s", 60.0))
        self.rate = float(extra.get("training_steps_per_s", 1.0))
        self.nccl_timeout_s = float(extra.get("nccl_timeout_s", NCCL_TIMEOUT_MS / 1000.0))
        self.shard_size = int(extra.get("checkpoint_shard_bytes", 1024))
        self.keep = max(int(extra.get("checkpoint_keep", 5)), 1)
        self.api = JobApi(world.client)
        self.recorder = Events(self.api, world, COMPONENT)
        self.runs: dict[str, Run] = {}
        self._ignored: dict[str, str] = {}  # JobSet uid -> the bad request value warned of
        # JobSet uid -> the request last answered (a list may not show the answer yet)
        self._answered: dict[str, str] = {}
        # what `kubectl logs` shows
        self.logs = TrainerLogs(world, self.rate, self.write_s, round(self.nccl_timeout_s * 1000))

    def _pods(self) -> list[Obj]:
        """The pods of JobSets: from the cluster actors' shared list when there is one
        (no request of our own while it is fresh), else one label-selected list."""
        view = self.world.services.get("cluster-view")
        if view is None:
            return self.api.pods(JS_NAME)
        return [p for p in view.pods() if JS_NAME in labels(p)]

    def read(self) -> TrainerReading | None:
        """This tick's reading: one list of the training JobSets, then their pods (none
        listed while there is no training). None while JobSets cannot be listed (the
        JobSet CRD not installed yet)."""
        try:
            jobsets = self.api.custom.list_cluster_custom_object(
                JOBSET_GROUP,
                JOBSET_VERSION,
                JOBSET_PLURAL,
                label_selector=f"{WORKLOAD_LABEL}=training",
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        items = [js for js in jobsets.get("items") or [] if not deleting(js)]
        return TrainerReading(self.clock.time(), items, self._pods() if items else [])

    def tick(self) -> None:
        snap = self.read()
        if snap is None:
            return
        now = self.clock.time()
        seen = set()
        for js in snap.jobsets:
            if labels(js).get(WORKLOAD_LABEL) != "training" or deleting(js):
                continue
            uid = str(meta(js).get("uid"))
            seen.add(uid)
            self._step(js, uid, snap, now)
            self.logs.observe(js, snap.pods_of_jobset(*key(js)), self.runs.get(uid), now)
        for uid in list(self.runs):
            if uid not in seen:
                self.runs.pop(uid)
        for memo in (self._ignored, self._answered):
            for uid in [u for u in memo if u not in seen]:
                memo.pop(uid)
        self.logs.end_tick(seen)

    # -- per training --------------------------------------------------------------------

    def checkpoint_root(self, js: Obj) -> Path:
        ns, name = key(js)
        pod_path = annots(js).get(CHECKPOINT_DIR_ANNOTATION) or default_checkpoint_dir(ns, name)
        if pod_path.startswith("/checkpoints/"):
            return host_path(self.world.state_dir, pod_path)
        return self.world.state_dir / "checkpoints" / ns / name

    def _event(self, js: Obj, reason: str, message: str, type_: str = "Normal") -> None:
        api_version = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
        self.recorder.event(js, reason, message, type_=type_,
                            api_version=api_version, kind="JobSet")  # fmt: skip

    def _annotate(self, js: Obj, values: dict[str, str | None]) -> None:
        ns, name = key(js)
        ignore_gone(lambda: self.api.patch_jobset_meta(ns, name, {"annotations": values}))

    def _world_size(self, js: Obj, pods: list[Obj]) -> int:
        gpus = 0
        for pod in pods:
            gpus += int(pod_requests(pod.get("spec") or {}).get("nvidia.com/gpu", 0))
        return gpus or len(pods) or 1

    def _step(self, js: Obj, uid: str, snap: TrainerReading, now: float) -> None:
        ns, name = key(js)
        restarts = str((js.get("status") or {}).get("restarts", 0))
        pods = [
            p for p in snap.pods_of_jobset(ns, name) if labels(p).get(JS_RESTART, "0") == restarts
        ]
        live = [p for p in pods if not deleting(p)]
        expected = jobset_pod_count(js)
        up = (
            expected > 0
            and not (js.get("spec") or {}).get("suspend")
            and len(live) == expected
            and all(phase(p) == "Running" for p in live)
        )
        gang = frozenset(str(meta(p).get("uid")) for p in live)
        run = self.runs.get(uid)
        if run is not None and (not up or run.gang != gang):
            self._abort(js, run, pods)
            self.runs.pop(uid)
            run = None
        if not up:
            return
        if run is None:
            run = self._start(js, gang, now)
            self.runs[uid] = run
        pace = self._pace(gang, now)
        run.advance(now, self.rate, pace.factor, pace.stalled_since)
        if run.stalled_since is not None:
            self._hung(js, run, live, now)
            return
        self._advance(js, run, now, self._world_size(js, live), self._requested(js, uid))

    def _pace(self, gang: frozenset[str], now: float) -> GangPace:
        """The gang's pace as its devices show it (full without simulated devices)."""
        devices = self.world.services.get("devices")
        return FULL_PACE if devices is None else devices.gang_pace(gang, now)

    def _hung(self, js: Obj, run: Run, live: list[Obj], now: float) -> None:
        """A stalled collective: the ranks are silent (no step, no checkpoint progress)
        until NCCL's watchdog times the collective out; then every rank aborts and
        torchrun exits, so the kubelet reports the pods' containers exited."""
        assert run.stalled_since is not None
        ran_s = now - run.stalled_since
        if run.timed_out or ran_s < self.nccl_timeout_s:
            return
        run.timed_out = True
        self.logs.watchdog_abort(js, live, run, round(ran_s * 1000))
        exits = self.world.services.get(EXITS_SERVICE)
        if exits is None:
            return  # no kubelet in this world: the pods stay as they are
        for pod in live:
            exits.exited(str(meta(pod).get("uid")), TORCHRUN_CHILD_FAILED_EXIT)

    def _requested(self, js: Obj, uid: str) -> str | None:
        """The pending checkpoint request (its requested-at as written), None if none:
        one newer than the last checkpoint completed for a request. A value that is not
        an RFC 3339 time is ignored, with one Warning Event per value."""
        notes = annots(js)
        raw = notes.get(CHECKPOINT_REQUESTED_AT)
        if not raw:
            return None
        at = parse_time(raw)
        if at is None:
            if self._ignored.get(uid) != raw:
                self._ignored[uid] = raw
                self._event(
                    js,
                    "CheckpointRequestIgnored",
                    f"{CHECKPOINT_REQUESTED_AT}={raw!r} is not an RFC 3339 time: ignored",
                    "Warning",
                )
            return None
        if self._answered.get(uid) == raw:
            return None
        done = parse_time(notes.get(CHECKPOINT_COMPLETED_AT))
        return raw if done is None or at > done else None

    def _start(self, js: Obj, gang: frozenset[str], now: float) -> Run:
        root = self.checkpoint_root(js)
        latest = latest_complete_checkpoint(root)
        source: Path | None = None
        step = 0
        if latest is not None:
            step, source = latest
        else:
            wanted = annots(js).get(RESUME_FROM_ANNOTATION)
            if wanted:
                candidate = host_path(self.world.state_dir, wanted)
                if STEP_DIR.match(candidate.name) and checkpoint_complete(candidate):
                    step, source = int(candidate.name.split("-", 1)[1]), candidate
                else:
                    found = latest_complete_checkpoint(candidate)
                    if found is not None:
                        step, source = found
        self._annotate(
            js,
            {
                RESUMED_STEP_ANNOTATION: str(step),
                RESUMED_FROM_ANNOTATION: str(source) if source else None,
            },
        )
        if source is not None:
            self._event(js, "Resumed", f"resumed from checkpoint step-{step} ({source})")
        else:
            self._event(js, "Started", "no complete checkpoint: training from step 0")
        return Run(gang, now, step, now + self.world.config.checkpoint_interval_s)

    def _abort(self, js: Obj, run: Run, pods: list[Obj]) -> None:
        if run.writing is None:
            return
        failed = [meta(p).get("name") for p in pods if phase(p) == "Failed" or deleting(p)]
        why = f"pod {failed[0]} failed" if failed else "the gang was stopped"
        self._event(
            js,
            "CheckpointIncomplete",
            f"checkpoint step-{run.writing.step} left incomplete in {run.writing.dir} "
            f"({run.writing.written}/{run.writing.world_size} shards, no {METADATA}): {why}",
            "Warning",
        )
        run.writing = None

    def _advance(
        self, js: Obj, run: Run, now: float, world_size: int, requested: str | None = None
    ) -> None:
        if run.writing is None and (requested or now >= run.next_checkpoint):
            step = run.step
            step_dir = self.checkpoint_root(js) / f"step-{step}"
            if step_dir.exists():
                shutil.rmtree(step_dir, ignore_errors=True)  # a crash's leftover: rewritten
            step_dir.mkdir(parents=True, exist_ok=True)
            run.writing = Write(step, step_dir, now, world_size, requested=requested)
            if requested:
                notes = annots(js)
                by = notes.get(CHECKPOINT_REQUESTED_BY) or "someone"
                why = notes.get(CHECKPOINT_REQUESTED_REASON)
                self._event(
                    js,
                    "CheckpointRequested",
                    f"checkpoint requested at {requested} by {by}"
                    + (f" ({why})" if why else "")
                    + f": writing step-{step} now",
                )
        w = run.writing
        if w is None:
            return
        elapsed = now - w.started
        fraction = 1.0 if self.write_s <= 0 else min(elapsed / self.write_s, 1.0)
        due = min(w.world_size, max(math.ceil(w.world_size * fraction), 1))
        for rank in range(w.written, due):
            write_shard(w.dir, rank, w.step, self.shard_size)
        w.written = max(w.written, due)
        if w.written < w.world_size or elapsed < self.write_s:
            return
        ns, name = key(js)
        commit_checkpoint(w.dir, w.step, w.world_size, {"training": f"{ns}/{name}"})
        run.writing = None
        run.checkpoints.append(w.step)
        run.next_checkpoint = w.started + self.world.config.checkpoint_interval_s
        answer: dict[str, str | None] = {LAST_CHECKPOINT_ANNOTATION: str(w.step)}
        if w.requested:
            self._answered[str(meta(js).get("uid"))] = w.requested
            answer[CHECKPOINT_COMPLETED_AT] = rfc3339(self.clock.wall())
            answer[CHECKPOINT_COMPLETED_STEP] = str(w.step)
        self._annotate(js, answer)
        self._event(js, "CheckpointSaved", f"checkpoint step-{w.step} saved to {w.dir}")
        if w.requested:
            self._event(
                js,
                "CheckpointCompleted",
                f"checkpoint step-{w.step} requested at {w.requested} is complete ({w.dir})",
            )
        self._prune(self.checkpoint_root(js))

    def _prune(self, root: Path) -> None:
        """Keep the newest ``checkpoint_keep`` complete checkpoints (and anything newer)."""
        complete = [step for step, _, ok in list_checkpoints(root) if ok]
        if len(complete) <= self.keep:
            return
        oldest_kept = complete[self.keep - 1]
        for step, step_dir, _ in list_checkpoints(root):
            if step < oldest_kept:
                shutil.rmtree(step_dir, ignore_errors=True)


__all__ = [
    "RESUMED_STEP_ANNOTATION",
    "TrainerReading",
    "TrainingActor",
    "checkpoint_complete",
    "dit_jobset_manifest",
    "latest_complete_checkpoint",
    "list_checkpoints",
    "submit_training",
]
