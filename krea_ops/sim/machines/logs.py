"""What the simulated trainers print: the lines ``kubectl logs`` shows for a DiT run.

The training actor calls :meth:`TrainerLogs.observe` once per training and tick with the
training's pods and its current run; this module turns what changed into the lines a
torchtitan job under torchrun prints, into each pod's container log
(``krea_ops.sim.common.podlogs``): on start, the checkpoint it loaded (``Loading the checkpoint at
step N.``) or ``Training starts at step 1.``; every ``LOG_FREQ`` steps a metrics line
(step, loss, memory, tps, tflops, mfu); checkpoint saves; and when a pod of the gang
fails, on the failed rank the CUDA error PyTorch raises for a GPU fault, and on the
surviving ranks the NCCL watchdog timeout (ProcessGroupNCCL.cpp) and the take-down line.
Lines are prefixed ``[rankN]:`` as torchrun's ``--tee``/``--local-ranks-filter`` output
is, N being the pod's first global rank. Times are the wall clock, spread over the tick.

The steps are the run's own (``Run.step``): they advance at the gang's pace, so the
metrics lines come further apart behind a straggler or in an input-bound phase and stop
in a hung collective. A hang is silent, as a real one is: nothing until NCCL's watchdog
times the collective out (``Timeout(ms)``: torch.distributed's default 600,000 ms, or
``WorldConfig.extra["nccl_timeout_s"]``); then every local rank of every pod prints the
watchdog timeout (``ran for N milliseconds``, N the time since the stall) and the
take-down line, and torchrun reports its children dead of SIGABRT (``exitcode: -6``) and
exits with ``ChildFailedError`` (:meth:`TrainerLogs.watchdog_abort`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

from krea_ops.sim.common import podlogs
from krea_ops.sim.common.actor import World

Obj = dict[str, Any]
LOG_FREQ = 10  # torchtitan's [metrics] log_freq default
MAX_LINES_PER_TICK = 200
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
NCCL_TIMEOUT_MS = 600_000  # torch.distributed's default collective timeout, 10 minutes
CUDA_ERROR = "CUDA error: an illegal memory access was encountered"


@dataclass
class _Seen:
    run: int | None = None  # id() of the run last seen
    step: int = 0
    saving: int | None = None
    saved: int = 0
    wall: float = 0.0
    crashed: set[str] = field(default_factory=set)
    stopping: set[str] = field(default_factory=set)
    timed_out: set[str] = field(default_factory=set)  # pods whose watchdog aborted them
    touched: bool = True


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _trainer_status(pod: Obj) -> Obj | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("containerID"):
            return dict(cs)
    return None


def _gpus(pod: Obj) -> int:
    for c in (pod.get("spec") or {}).get("containers") or []:
        req = ((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
        if req:
            return max(int(str(req)), 1)
    return 1


def _node_rank(pod: Obj) -> int:
    raw = (_meta(pod).get("labels") or {}).get(COMPLETION_INDEX) or (
        _meta(pod).get("annotations") or {}
    ).get(COMPLETION_INDEX)
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return 0


def _noise(*parts: object) -> float:
    """A repeatable number in [0, 1) for the given key."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _titan(t: float, message: str) -> str:
    moment = dt.datetime.fromtimestamp(t, dt.UTC)
    stamp = f"{moment:%Y-%m-%d %H:%M:%S},{moment.microsecond // 1000:03d}"
    return f"[titan] {stamp} - root - INFO - {message}"


class TrainerLogs:
    """Writes the trainers' container logs; one per training actor."""

    def __init__(
        self, world: World, rate: float, write_s: float, timeout_ms: int = NCCL_TIMEOUT_MS
    ) -> None:
        self.store = podlogs.for_state(world.state_dir)
        self.clock = world.clock
        self.rate = rate
        self.write_s = write_s
        self.timeout_ms = timeout_ms
        self._seen: dict[str, _Seen] = {}

    def _write(self, pod: Obj, lines: list[tuple[float, str]], prefix: bool = True) -> None:
        cs = _trainer_status(pod)
        if cs is None or not lines:
            return
        rank = _node_rank(pod) * _gpus(pod)
        tag = f"[rank{rank}]:" if prefix else ""
        image = str(cs.get("image") or "")
        started = podlogs.started_at(cs, lines[0][0])
        name = str(cs.get("name") or "trainer")
        self.store.write(
            str(cs["containerID"]),
            [(t, tag + text) for t, text in lines],
            seed=lambda: podlogs.banner(pod, name, image, started),
        )

    def observe(self, js: Obj, pods: list[Obj], run: Any, now: float) -> None:
        """One tick of one training: ``pods`` all its pods, ``run`` the training actor's
        run of the gang now up (None while none is), ``now`` the simulated time."""
        uid = str(_meta(js).get("uid"))
        seen = self._seen.setdefault(uid, _Seen(wall=self.clock.wall()))
        seen.touched = True
        wall = self.clock.wall()
        self._failures(js, pods, seen, wall)
        if run is None:
            seen.run = None
            seen.wall = wall
            return
        gang = [p for p in pods if str(_meta(p).get("uid")) in run.gang]
        if seen.run != id(run):
            seen.run, seen.step, seen.saving, seen.saved = id(run), run.base_step, None, 0
            for pod in gang:
                self._write(pod, self._start_lines(run.base_step, wall))
        step = run.step
        first = (seen.step // LOG_FREQ + 1) * LOG_FREQ
        steps = list(range(first, step + 1, LOG_FREQ))[-MAX_LINES_PER_TICK:]
        if steps:
            until = wall
            if run.stalled_since is not None:  # the steps done before the collective hung
                until = min(wall, wall - self.clock.to_wall(max(now - run.stalled_since, 0.0)))
            span = max(until - seen.wall, 0.0)
            lines = []
            for i, s in enumerate(steps):
                t = seen.wall + span * (i + 1) / len(steps)
                lines.append((t, _titan(t, self._metrics(js, s))))
            for pod in gang:
                self._write(pod, lines)
            seen.step = step
        writing = run.writing
        if writing is not None and seen.saving != writing.step:
            seen.saving = writing.step
            for pod in gang:
                self._write(
                    pod,
                    [
                        (
                            wall,
                            _titan(wall, "Saving the checkpoint (or staging if async is enabled)."),
                        )
                    ],
                )
        while seen.saved < len(run.checkpoints):
            seen.saved += 1
            # torchtitan's wording, the missing space included.
            text = (
                "Finished saving the checkpoint (or staging if async is enabled)"
                f"in {self.write_s:.2f} seconds."
            )
            for pod in gang:
                self._write(pod, [(wall, _titan(wall, text))])
        seen.wall = wall

    def watchdog_abort(self, js: Obj, pods: list[Obj], run: Any, ran_ms: int) -> None:
        """The gang's collective hung ``ran_ms`` ago, past the NCCL timeout: on every pod,
        each local rank's watchdog timeout and take-down line, then torchrun's report of
        its children killed by SIGABRT."""
        uid = str(_meta(js).get("uid"))
        seen = self._seen.setdefault(uid, _Seen(wall=self.clock.wall()))
        wall = self.clock.wall()
        seq = max(run.step, 1) * 37 + int(_noise(uid, run.step) * 30)
        for pod in pods:
            seen.timed_out.add(str(_meta(pod).get("uid")))
            lines = self._watchdog_lines(pod, wall, seq, ran_ms) + self._abort_lines(pod, wall)
            self._write(pod, lines, prefix=False)

    def end_tick(self, alive: set[str]) -> None:
        """Forget the trainings that are gone (``alive``: the uids observed this tick)."""
        for uid in [u for u in self._seen if u not in alive]:
            del self._seen[uid]

    # -- lines -----------------------------------------------------------------------------

    @staticmethod
    def _start_lines(step: int, wall: float) -> list[tuple[float, str]]:
        if step > 0:
            load_s = 8.0 + 4.0 * _noise("load", step)
            return [
                (wall, _titan(wall, f"Loading the checkpoint at step {step}.")),
                (wall, _titan(wall, f"Finished loading the checkpoint in {load_s:.2f} seconds.")),
                (wall, _titan(wall, f"Training starts at step {step + 1}.")),
            ]
        return [(wall, _titan(wall, "Training starts at step 1."))]

    @staticmethod
    def _metrics(js: Obj, step: int) -> str:
        name = str(_meta(js).get("name"))
        wiggle = _noise(name, step)
        loss = 0.92 + 6.4 * math.exp(-step / 4000.0) + 0.06 * (wiggle - 0.5)
        tps = int(3350 + 180 * (_noise(name, step, "tps") - 0.5))
        tflops = tps * 0.1231
        mfu = tflops / 989.0 * 100
        memory = 61.2 + 0.8 * _noise(name, step, "mem")
        return (
            f"step: {step:2}  loss: {loss:7.4f}  memory: {memory:5.2f}GiB"
            f"({memory / 139.8 * 100:.2f}%)  tps: {tps:,}  tflops: {tflops:,.2f}  mfu: {mfu:.2f}%"
        )

    def _failures(self, js: Obj, pods: list[Obj], seen: _Seen, wall: float) -> None:
        """The first tick a pod of the training is Failed: its own last words (a CUDA error
        for a GPU fault) and the NCCL watchdog timeout on its gang's surviving ranks; a pod
        being deleted (preemption, a restart of the gang) gets torchrun's SIGTERM lines."""
        for pod in pods:
            pid = str(_meta(pod).get("uid"))
            if _meta(pod).get("deletionTimestamp") and pid not in seen.stopping:
                seen.stopping.add(pid)
                if (pod.get("status") or {}).get("phase") == "Running":
                    self._write(pod, self._sigterm_lines(pod, wall), prefix=False)
            if (pod.get("status") or {}).get("phase") != "Failed" or pid in seen.crashed:
                continue
            seen.crashed.add(pid)
            if pid in seen.timed_out:
                continue  # its watchdog already said why
            attempt = (_meta(pod).get("labels") or {}).get(RESTART_LABEL)
            peers = [
                p
                for p in pods
                if p is not pod
                and (_meta(p).get("labels") or {}).get(RESTART_LABEL) == attempt
                and (p.get("status") or {}).get("phase") == "Running"
                and str(_meta(p).get("uid")) not in seen.timed_out
                and not _meta(p).get("deletionTimestamp")  # stopping: SIGTERM, not a hang
            ]
            message = str((pod.get("status") or {}).get("message") or "")
            seq = max(seen.step, 1) * 37 + int(_noise(pid) * 30)
            if "(gpu" in message:
                self._write(pod, self._cuda_error_lines(pod, wall), prefix=False)
            for peer in peers:
                self._write(peer, self._watchdog_lines(peer, wall, seq), prefix=False)

    @staticmethod
    def _cuda_error_lines(pod: Obj, wall: float) -> list[tuple[float, str]]:
        gpus = _gpus(pod)
        local = int(_noise(_meta(pod).get("uid"), "gpu") * gpus)
        rank = _node_rank(pod) * gpus + local
        tag = f"[rank{rank}]:"
        glog = podlogs.glog_prefix("E", wall, 2100 + local)
        lines = [
            f"{tag}[{glog.strip()} ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) "
            f"Rank {rank}] Process group watchdog thread terminated with exception: {CUDA_ERROR}",
            f"{tag} Traceback (most recent call last):",
            f'{tag}   File "/opt/krea/dit/train.py", line 412, in <module>',
            f"{tag}     trainer.train()",
            f'{tag}   File "/opt/krea/dit/train.py", line 318, in train',
            f"{tag}     loss.backward()",
            f"{tag} RuntimeError: {CUDA_ERROR}",
            f"{tag} CUDA kernel errors might be asynchronously reported at some other API call, "
            "so the stacktrace below might be incorrect.",
            f"{tag} For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
            f"{tag} Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
            podlogs.glog_prefix("E", wall, 1)
            + "torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
            f"local_rank: {local} (pid: {2100 + local}) of binary: /usr/bin/python3",
        ]
        return [(wall, line) for line in lines]

    def _watchdog_lines(
        self, pod: Obj, wall: float, seq: int, ran_ms: int | None = None
    ) -> list[tuple[float, str]]:
        gpus = _gpus(pod)
        base = _node_rank(pod) * gpus
        timeout = self.timeout_ms
        out = []
        for local in range(gpus):
            rank = base + local
            glog = podlogs.glog_prefix("E", wall, 2100 + local).strip()
            ran = max(ran_ms or 0, timeout) + int(_noise(rank, seq) * 90)
            out.append(
                (
                    wall,
                    f"[rank{rank}]:[{glog} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog "
                    f"caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
                    f"OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={timeout}) "
                    f"ran for {ran} milliseconds before timing out.",
                )
            )
        for local in range(gpus):
            rank = base + local
            glog = podlogs.glog_prefix("E", wall, 2100 + local).strip()
            out.append(
                (
                    wall,
                    f"[rank{rank}]:[{glog} ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID "
                    f"0(default_pg) Rank {rank}] To avoid data inconsistency, we are taking "
                    "the entire process down.",
                )
            )
        return out

    @staticmethod
    def _abort_lines(pod: Obj, wall: float) -> list[tuple[float, str]]:
        """torchrun's agent after its children aborted (SIGABRT: exitcode -6): the first
        failure it saw, and the ChildFailedError its main re-raises (exit code 1)."""
        gpus = _gpus(pod)
        base = _node_rank(pod) * gpus
        moment = dt.datetime.fromtimestamp(wall, dt.UTC)
        host = str(_meta(pod).get("name") or "localhost")

        def failure(local: int) -> list[str]:
            pid = 2100 + local
            return [
                f"  time      : {moment:%Y-%m-%d_%H:%M:%S}",
                f"  host      : {host}",
                f"  rank      : {base + local} (local_rank: {local})",
                f"  exitcode  : -6 (pid: {pid})",
                "  error_file: <N/A>",
                f"  traceback : Signal 6 (SIGABRT) received by PID {pid}",
            ]

        lines = [
            podlogs.glog_prefix("E", wall, 1)
            + "torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) "
            "local_rank: 0 (pid: 2100) of binary: /usr/bin/python3",
            "Traceback (most recent call last):",
            '  File "/usr/local/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "=" * 60,
            "/opt/krea/dit/train.py FAILED",
            "-" * 60,
            "Failures:",
        ]
        for local in range(1, gpus):
            lines += [f"[{local}]:", *failure(local)]
        if gpus == 1:
            lines.append("  <NO_OTHER_FAILURES>")
        lines += ["-" * 60, "Root Cause (first observed failure):", "[0]:", *failure(0)]
        lines.append("=" * 60)
        return [(wall, line) for line in lines]

    @staticmethod
    def _sigterm_lines(pod: Obj, wall: float) -> list[tuple[float, str]]:
        gpus = _gpus(pod)
        return [
            (
                wall,
                podlogs.glog_prefix("W", wall, 1)
                + "torch/distributed/elastic/multiprocessing/api.py:897] Sending process "
                f"{2100 + local} closing signal SIGTERM",
            )
            for local in range(gpus)
        ]
