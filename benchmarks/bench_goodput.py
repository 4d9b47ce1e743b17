#!/usr/bin/env python3
"""Issue 18, goodput: what the console's automation buys a pre-training, in effective
training time (ETTR: productive training time over wall time).

A discrete-event simulation of one gang of ``--nodes`` nodes (8 GPUs each) training for
``--days`` simulated days, under two failure regimes, each run twice over the same
physical history (same seed, same failures, same noise): once **without automation** and
once **with krea-ops**. docs/benchmarks.md ("Goodput") says what is modelled and what is
not; in short:

Physical history (shared by both runs). Every node of the pool (the gang's nodes plus
spares) fails as the simulator's ``FailureActor`` makes it fail: a Poisson process at
``WorldConfig.failures_per_1000_node_days`` x the regime's multiplier, the lemon node at
``LEMON_FACTOR`` times that, causes drawn with ``faults.CAUSES``' Llama 3 weights, the
GPU or HCA drawn as the actor draws them, the repair time ``cause.repair_s`` x U(0.5, 1.5);
a node does not fail again while it is being repaired. Software bugs (Llama 3 Table 5's
"Software bug" row, which ``CAUSES`` leaves out because it fails no node) crash the gang
at 54/351 of the gang's hardware rate. The slow burners are the ones
``devices.plan_slow_burners`` picks for the pool: creeping GPUs (the temperature
under training load from ``thermal.GpuModel`` as the simulator's devices drive it) and a
bad InfiniBand port (its symbol errors from ``devices.bad_port_errors``); each is taken to
fail (a thermal crash; the link going down) at the moment the health policy first calls
it BAD, the policy's definition of "hurts a run now". Noise: findings on random nodes
that are not failures (warm GPUs, transient heat, a few link errors, an application XID,
congestion, a link flap), ``--noise`` per node-day (default 1), lasting 1-10 min; the
attribution sees it, node-health only with ``--noise-to-node-health``.

Both runs: a checkpoint write stalls the gang ``--checkpoint-s`` seconds (default 30);
a restart takes ``--restart-s`` (default 300) in four phases, ``RESTART_PHASES``
(an assumption: 30 s pods gone, 30 s re-admitted and bound, 90 s running with NCCL up,
150 s to the first step, scaled to ``--restart-s``; a wait for nodes is admission's); a
gang that starts with a failed node crashes again; Kubernetes' scheduler never binds a
gang pod to a NotReady node or to one with a GPU the device plugin took out (every GPU
failure here, UNSCHEDULABLE_CAUSES).
GPU crashes (XID 79/48/95/119) and software bugs stop the gang at once; NVLink,
InfiniBand and host failures hang the collectives until NCCL's 10-minute watchdog
timeout (``--watchdog-min``, 10; many set 30). A cap alert is acknowledged by an
operator after the same delay a human takes to restart a run (below).

Without automation: a checkpoint every 60 min; a human notices each stopped gang after
a log-normal delay (median 15 min from 08:00 to 20:00 UTC, 60 min at night, sigma 0.7),
pulls the gang's nodes that are failed at that moment, and restarts from the newest
checkpoint; repaired nodes, lemons and slow burners go back into the pool.

With krea-ops, the decisions are the product's: the checkpoint interval is
``training.advice.advise`` (Daly) for the gang; the health policy (``health.gpu_reasons``,
``ib_port_reasons``, ``node_reasons``) turns each node's synthetic samples into
verdicts, and ``NodeHealth().decide`` runs on them every 30 s around each change and
evicts, restores and labels lemons with the runbook's plans (blast cap, veto and
windows as shipped); an eviction of a gang node ends a hang at once; the gang resumes at
once from the newest complete checkpoint; every restart is attributed with
``training.attribution.attribute`` from the signals in its window (the true cause's,
the slow burners', the noise's, node-health's evictions); ``attribution.lemon_candidates``
over the attributed restarts flags lemons, which leave the pool; planned swaps are
node-health's own (``controllers.planned_swaps`` over ``training.swaps``, inside the same
``decide``): it sees the gang as a ``training.gangs.Gang``, asks for a checkpoint with
the JobSet annotation, and the simulated trainer answers once the checkpoint is written,
as the documented protocol says; node-health then evicts the node.

Hangs and stragglers (issue 26). Silent hangs (no node shows a finding) hit the gang at
Llama 3 Table 5's "NCCL watchdog timeouts" row (7 of 419 unexpected interruptions; 7/351
of the hardware rate; ``--hangs`` scales it; ``faults.CAUSES`` also lends that row to
NVLink, so it counts twice, an assumption that leans to more hangs). Stragglers are GPUs
whose clocks are held down (``STRAGGLER_KINDS``: a power brake, a hardware slowdown, a
power cap), at STRAGGLER_SHARE of the node rate: an ASSUMPTION (Lin et al., OSDI 2025,
arXiv 2505.05713, find stragglers common at ByteDance and mostly not hardware, but give
no per-node rate for this kind); the gang steps at the slowest GPU's pace until that
node leaves the gang. Without automation a hang idles the gang until the watchdog fires,
then waits for the human; a straggler is seen only at two checks a working day
(``STRAGGLER_CHECKS_UTC``) when 10 % slower or more, then swapped after the human's delay
from the newest checkpoint. With krea-ops, node-health's read is reproduced: rank 0's
metrics lines at the gang's pace (``STEP_S``, every ``LOG_EVERY`` steps) go through
``training.progress.progress`` and ``training.stalls.judge`` with the GPUs' readings
(the straggling GPUs' nodes and three more: the rest read the same) into a
``gangstatus.GangStatus`` in ``NodeHealthSnapshot.stalls``; ``NodeHealth().decide``
plans the restart of a HUNG gang (rank 0's pod, or the likely node) and the planned swap
of a STRAGGLER's node or of a GPU held down by a power brake; the bench applies those
plans. Not reproduced: the log read itself (the lines are made, not parsed), and a
checkpoint write's pause in the step times.

Validation before return (issue 27, ``--validation``; ``--returned-bad`` alone adds the
physics without the third run). A repair leaves the node still bad with the share
``--returned-bad`` (RETURNED_BAD_SHARE, an ASSUMPTION: no published figure, see
docs/benchmarks.md); such a node shows nothing while idle, so it looks OK and comes back
(the human puts it back when the repair is done; node-health restores it after an hour
OK), and under training load it fails again with the same cause after a time drawn with
mean RELAPSE_LOAD_MEAN_S in a running gang (an assumption): another crash or hang of the
gang, another restart, another eviction. With ``--validation`` a third run, krea-ops
with validation before return, is made over the same history: node-health's restore plan
(its hour OK is the cool-down) is held while a full validation (VALIDATION_S: DCGM
``diag -r 3``, the all-reduce, ``ib_write_bw``) runs on the quarantined node, at most
VALIDATION_SHARE of the pool at once; a still-bad node is caught with DETECTION[cause]
(assumptions, by the check that targets the fault) and then stays out, labelled
``krea.ai/needs-repair``, is repaired again (a new repair time, again still bad with the
same share) and revalidated, and escalated (out for the rest of the run) after
ESCALATE_AFTER failures in a row; a pass lets the restore through. A sound node always
passes (no false failures: an assumption). Validation is modelled here, in the bench:
node-health's decisions are unchanged (``NodeHealth().decide`` still plans the restore; the
bench applies it once the node has passed).

    .venv/bin/python benchmarks/bench_goodput.py                 # table, 128 nodes, 7 days
    .venv/bin/python benchmarks/bench_goodput.py --json --seed 3
    .venv/bin/python benchmarks/bench_goodput.py --checkpoint-s 5 --restart-s 120
    .venv/bin/python benchmarks/bench_goodput.py --seeds 10 --validation   # issue 27
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import itertools
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from krea_ops.controllers.node_health import (  # noqa: E402
    NodeHealth,
    NodeHealthSnapshot,
    also_prepared,
    evictable,
)
from krea_ops.controllers.restarts import RestartInputs  # noqa: E402
from krea_ops.gangstatus import GangStatus  # noqa: E402
from krea_ops.health import (  # noqa: E402
    HealthPolicy,
    gpu_reasons,
    ib_port_reasons,
    node_reasons,
)
from krea_ops.kube.times import rfc3339  # noqa: E402
from krea_ops.model import (  # noqa: E402
    OK_VERDICT,
    GpuSample,
    IbPortSample,
    NodeInfo,
    NodeTelemetry,
    Reason,
    Severity,
    Verdict,
)
from krea_ops.runbook.nodes import EvictInputs  # noqa: E402
from krea_ops.runbook.plan import Plan, StepKind  # noqa: E402
from krea_ops.sim.common.actor import WorldConfig  # noqa: E402
from krea_ops.sim.machines.devices import (  # noqa: E402
    SLOW_BURNERS_RNG,
    SlowBurners,
    _h,
    bad_port_errors,
    plan_slow_burners,
)
from krea_ops.sim.machines.faults import (  # noqa: E402
    CAUSES,
    DEFAULT_REPAIR_S,
    GPU_CAUSES,
    LEMON_FACTOR,
    repair_time,
)
from krea_ops.sim.machines.thermal import HW_SLOWDOWN, HW_THERMAL, SW_THERMAL, GpuModel, Load  # noqa: E402
from krea_ops.training import attribution  # noqa: E402
from krea_ops.training.advice import advise  # noqa: E402
from krea_ops.training.gangs import Gang  # noqa: E402
from krea_ops.training.manifests import LEMON_LABEL, TrainingSpec, training_jobset  # noqa: E402
from krea_ops.training.progress import progress  # noqa: E402
from krea_ops.training.stalls import StallConfig, judge  # noqa: E402
from krea_ops.training.swaps import (  # noqa: E402
    CHECKPOINT_COMPLETED_AT,
    CHECKPOINT_COMPLETED_STEP,
    CHECKPOINT_REQUESTED_AT,
)

WORLD = WorldConfig()
GPUS = WORLD.gpus_per_node
HCAS = WORLD.hcas_per_node
DAY, HOUR, MINUTE = 86400.0, 3600.0, 60.0
T0 = 1_799_971_200.0  # 2027-01-15 00:00 UTC: the simulated clock starts at midnight

# Llama 3 Table 5: "Software bug 54" unexpected interruptions beside the hardware rows
# CAUSES stands for (their weights sum to 351).
SOFTWARE_BUG_WEIGHT = 54.0
NCCL_TIMEOUT_S = 600.0  # NCCL's (torch.distributed's) default watchdog timeout
NODE_MONITOR_GRACE_S = 40.0  # kube-controller-manager --node-monitor-grace-period
SCRAPE_S = 15.0  # a finding reaches the health policy one scrape after it happens
PASS_S = 30.0  # the controllers' loop interval (controllers.loop.DEFAULT_INTERVAL_S)
RESTART_S = 300.0  # restart and reload, bind included (Kokolis et al.: u0 5-20 min)
# The restart's phases and their share of --restart-s (defaults in seconds of the 300):
# the old pods gone (terminated, the JobSet's failure policy sees it), the new pods
# admitted and bound (the gang's pods are bound when these two are over: 60 s by
# default, longer while too few nodes can take the gang), running (image, containers,
# torchrun's rendezvous, NCCL set up), and the first step (checkpoint loaded, compiled,
# warmed up). An assumption: Kokolis et al. give 5-20 min for the whole, not its split.
RESTART_PHASES = (
    ("restart_pods_gone", 30.0),
    ("restart_admitted", 30.0),
    ("restart_running", 90.0),
    ("restart_first_step", 150.0),
)
WITHOUT_INTERVAL_S = 3600.0
HUMAN_MEDIAN_DAY_S = 15 * MINUTE
HUMAN_MEDIAN_NIGHT_S = 60 * MINUTE
HUMAN_SIGMA = 0.7
NIGHT = (20, 8)  # 20:00 to 08:00 UTC
SPARE_SHARE = 1 / 16
NOISE_PER_NODE_DAY = 1.0
HANG_CAUSES = frozenset({"nvlink", "ib-link", "host", "hang"})
# Silent hangs: a collective that never completes and no node shows a finding. Llama 3
# Table 5's "NCCL watchdog timeouts" row (7 of 419 unexpected interruptions, 1.7 %), at
# 7/351 of the gang's hardware rate like the software bugs above. faults.CAUSES already
# lends that row's weight to NVLink (hangs with an XID 74 finding); here it is counted a
# second time, as the silent hangs the row literally is (--hangs scales it).
HANG_WEIGHT = 7.0
# Stragglers: a GPU whose clocks are held down slows every step of its gang by the same
# factor. Lin et al. (OSDI 2025, arXiv 2505.05713) find stragglers common in ByteDance's
# LLM training and not always hardware; the published figures give no per-node rate for
# the hardware kind, so the rate is an ASSUMPTION: a tenth of the node failure rate, per
# node (--stragglers scales it). The kinds and their slowdowns are assumptions too
# (STRAGGLER_KINDS).
STRAGGLER_SHARE = 0.1
STEP_S = 5.0  # the gang's step time (an assumption): hang_after(5 s) is the 180 s floor
LOG_EVERY = 10  # steps per metrics line (torchtitan's default log_freq)
STALLS = StallConfig()
# A human sees a slow gang only when they look at its step time (a slow gang pages no
# one): at two checks a working day, and only when it is 10 % slower or more; then they
# act after the usual delay. An assumption.
STRAGGLER_CHECKS_UTC = (9, 17)
HUMAN_VISIBLE_RATIO = 1.1
JOBSET_SPEC = training_jobset(TrainingSpec(name="dit", nodes=2, image="reg/dit:1"))["spec"]
# Failures whose node Kubernetes will not bind an 8-GPU gang pod to while they last: a
# host that is down (NotReady), and a GPU failure, because NVIDIA's k8s-device-plugin
# marks a GPU unhealthy on every XID but the application ones (13, 31, 43, 45, 68), so
# the node's allocatable GPUs drop to 7. An InfiniBand link down leaves it schedulable.
UNSCHEDULABLE_CAUSES = frozenset({"host", "thermal", *GPU_CAUSES})
USER = "system:serviceaccount:krea-ops:node-health"
# Validation before return (issue 27). The share of repairs that leave the node still bad:
# an ASSUMPTION (no source found gives it; docs/benchmarks.md, "Validation before return",
# says why 10 %). --returned-bad sets it.
RETURNED_BAD_SHARE = 0.10
# A still-bad node fails again after this much time, on average (exponential), in a
# running gang: an assumption (a node that is still bad fails within hours under load).
RELAPSE_LOAD_MEAN_S = 2 * HOUR
# A full validation: DCGM's `dcgmi diag -r 3` ("normally lasting approximately 15
# minutes", NVIDIA's dcgmi-diag reference), the all-reduce and ib_write_bw per port.
VALIDATION_S = 20 * MINUTE
VALIDATION_SHARE = 0.05  # of GPU nodes validating at once (settings.validation_share)
ESCALATE_AFTER = 3  # failed validations in a row before the node is escalated (out)
NEEDS_REPAIR_LABEL = "krea.ai/needs-repair"  # krea_ops.validation's label
# The chance a full validation catches a node that is still bad, by the fault it still
# has; assumptions, by the check that targets it: DCGM r3 (PCIe, memory, SM stress,
# targeted power) a GPU off the bus or its memory; the GSP's timeouts are intermittent;
# the all-reduce's bus bandwidth a degraded NVLink; ib_write_bw a weak or failing port;
# a cooling fault only if the GPU still runs hot in DCGM's stress; a host fault (kernel,
# DIMM, PSU) is outside what the three checks exercise.
DETECTION: dict[str, float] = {
    "faulty-gpu": 0.95,
    "gpu-lost": 0.95,
    "gpu-hbm": 0.9,
    "gpu-sram": 0.9,
    "gpu-gsp": 0.5,
    "nvlink": 0.8,
    "ib-link": 0.9,
    "thermal": 0.5,
    "host": 0.3,
}
CATEGORIES = (
    "lost_work",
    "hang_watchdog",
    "straggling",
    "detection",
    *(name for name, _ in RESTART_PHASES),
    "checkpoint_writes",
)
CATEGORY_WORDS = {
    "lost_work": "work since the checkpoint",
    "hang_watchdog": "hung, waiting for the watchdog",
    "straggling": "straggling (the slowed share)",
    "detection": "detection (human; krea-ops)",
    "restart_pods_gone": "restart: pods gone",
    "restart_admitted": "restart: re-admitted, bound",
    "restart_running": "restart: running, NCCL up",
    "restart_first_step": "restart: to the first step",
    "checkpoint_writes": "checkpoint writes",
}


@dataclass(frozen=True)
class Regime:
    name: str
    multiplier: float  # x WorldConfig.failures_per_1000_node_days
    checkpoint_s: float
    words: str


REGIMES = (
    Regime(
        "meta",
        WORLD.failure_multiplier,
        30.0,
        "Kokolis et al.'s fitted RSC-1 rate (6.5 per 1,000 node-days), Llama 3 causes",
    ),
    # Kokolis et al. measured a 7.9 h MTTF for 1,024-GPU jobs: 23.7 failures per 1,000
    # node-days, 3.65x the fitted rate. With software bugs on top, runs last ~7 h.
    Regime(
        "krea",
        23.7 / WORLD.failures_per_1000_node_days,
        30.0,
        "Kokolis et al.'s measured 1,024-GPU rate (23.7 per 1,000 node-days)",
    ),
)


# -- the physical history --------------------------------------------------------------


@dataclass
class Fault:
    """One failure of a node (``node`` None: a software bug of the gang)."""

    at: float
    node: str | None
    cause: str
    repair_s: float
    gpu: int | None = None
    hca: int | None = None
    source: str = "random"  # random | slow-burner | bug | hang | relapse
    reasons: tuple[Reason, ...] = ()  # what the health policy says while it is open
    key: str = ""  # names the fault in the draws of what its repair leaves (issue 27)

    @property
    def end(self) -> float:
        return self.at + self.repair_s

    @property
    def hangs(self) -> bool:
        return self.cause in HANG_CAUSES

    def open_at(self, t: float) -> bool:
        return self.at <= t < self.end


@dataclass(frozen=True)
class Segment:
    """A stretch of time over which a slow burner's verdict keeps the same findings."""

    node: str
    start: float
    end: float
    reasons: tuple[Reason, ...]


@dataclass(frozen=True)
class Straggler:
    """A GPU whose clocks are held down from ``at`` (1/``factor`` of its clock, its gang's
    steps ``factor`` times as long) until its node leaves the gang (it is then repaired)."""

    at: float
    node: str
    gpu: int
    factor: float
    kind: str  # power-brake | hw-slowdown | power-cap
    events: frozenset[str]
    reasons: tuple[Reason, ...]  # what the health policy says of the GPU meanwhile


# (share, kind, clock event reasons, the slowdown drawn): a power brake holds the clocks
# far down; a hardware slowdown less; a GPU at its power limit (a lowered limit, a weak
# supply) a little, often under the straggler ratio. The shares and ranges: assumptions.
STRAGGLER_KINDS: tuple[tuple[float, str, frozenset[str], Callable[[random.Random], float]], ...] = (
    (0.25, "power-brake", frozenset({"hw_power_brake", "hw_slowdown"}), lambda r: r.uniform(2, 4)),
    (0.25, "hw-slowdown", frozenset({"hw_slowdown"}), lambda r: r.uniform(1.3, 2.0)),
    (
        0.5,
        "power-cap",
        frozenset({"sw_power_cap"}),
        lambda r: min(1.0 + r.lognormvariate(math.log(0.15), 0.8), 4.0),
    ),
)


@dataclass(frozen=True)
class Noise:
    node: str
    start: float
    end: float
    reasons: tuple[Reason, ...]


@dataclass
class History:
    nodes: list[str]
    gang_size: int
    horizon: float
    faults: list[Fault]  # sorted by time
    bugs: list[Fault]
    segments: list[Segment]  # slow burners' findings before they fail
    noise: list[Noise]
    lemons: set[str]
    slow_burners: dict[str, str]  # node -> what
    rate_per_node_day: float
    hangs: list[Fault] = field(default_factory=list)  # silent hangs of the gang
    stragglers: list[Straggler] = field(default_factory=list)  # sorted by time
    returned_bad: float = 0.0  # share of repairs that leave the node still bad (issue 27)
    seed: int = 0
    regime: str = ""

    def draw(self, key: str, what: str) -> random.Random:
        """A generator for one draw about one fault's aftermath: the same in every run of
        this history, whatever else happened in it (seeded with a string: no hash seed)."""
        return random.Random(f"{self.seed}:goodput:{self.regime}:returned:{key}:{what}")


@dataclass
class Latent:
    """A node a repair left still bad: it shows nothing until it fails again under load."""

    cause: str
    gpu: int | None
    hca: int | None
    reasons: tuple[Reason, ...]
    key: str
    load_s: float  # time in a running gang until it fails again
    since: float


POLICY = HealthPolicy()
SM_CLOCK_MAX_HZ = 1.98e9  # an H100 SXM's maximum SM clock


def _gpu(node: str, index: int, **values: Any) -> GpuSample:
    return GpuSample(node=node, index=index, up=True, **values)


def _port(node: str, hca: int, **values: Any) -> IbPortSample:
    return IbPortSample(node=node, device=f"mlx5_{hca}", port="1", **values)


def fault_reasons(f: Fault, node: str) -> tuple[Reason, ...]:
    """The health policy's findings while the failure is open, from the samples the
    exporter would report (the marks the simulator's fault actor leaves)."""
    g = f.gpu if f.gpu is not None else 0
    if f.cause in ("faulty-gpu", "gpu-lost"):
        sample = GpuSample(node=node, index=g, up=False, down_reason="gpu_is_lost", xid_last=79)
        return tuple(gpu_reasons(sample, POLICY))
    if f.cause == "gpu-hbm":
        s = _gpu(node, g, xid_increase={48: 1.0}, ecc_uncorrected_increase=1.0)
        return tuple(gpu_reasons(s, POLICY))
    if f.cause == "gpu-sram":
        s = _gpu(node, g, xid_increase={95: 1.0}, ecc_uncorrected_increase=1.0)
        return tuple(gpu_reasons(s, POLICY))
    if f.cause == "gpu-gsp":
        return tuple(gpu_reasons(_gpu(node, g, xid_increase={119: 1.0}), POLICY))
    if f.cause == "nvlink":
        s = _gpu(node, g, xid_increase={74: 1.0}, nvlink_fault_increase=1360.0)
        return tuple(gpu_reasons(s, POLICY))
    if f.cause == "ib-link":
        h = f.hca if f.hca is not None else 0
        port = _port(
            node, h, state="DOWN", phys_state="Disabled", error_increase={"link_downed": 1}
        )
        return tuple(ib_port_reasons(port, POLICY))
    if f.cause == "thermal":
        return f.reasons  # the creeping GPU's last findings, set when it was made
    # a host down: its exporter stops answering, then the kubelet stops posting status
    info = NodeInfo(
        name=node,
        ready=False,
        ready_status="Unknown",
        ready_reason="NodeStatusUnknown",
        ready_message="Kubelet stopped posting node status.",
        ready_since=f.at + NODE_MONITOR_GRACE_S,
        gpu_capacity=GPUS,
    )
    tel = NodeTelemetry(node=node, exporter_up=False, error="connection refused")
    return tuple(node_reasons(info, tel, POLICY, now=f.at + NODE_MONITOR_GRACE_S))


NOISE_KINDS: tuple[tuple[float, Callable[[str], tuple[Reason, ...]]], ...] = (
    (
        0.35,
        lambda n: tuple(
            gpu_reasons(_gpu(n, 0, temperature_c=76.0, temperature_min_window_c=70.0), POLICY)
        ),
    ),
    (
        0.20,
        lambda n: tuple(
            gpu_reasons(_gpu(n, 0, temperature_c=79.0, temperature_min_window_c=72.0), POLICY)
        ),
    ),
    (
        0.25,
        lambda n: tuple(
            ib_port_reasons(
                _port(n, 0, state="ACTIVE", error_increase={"symbol_error": 12}), POLICY
            )
        ),
    ),
    (0.15, lambda n: tuple(gpu_reasons(_gpu(n, 0, xid_increase={13: 1.0}), POLICY))),
    (
        0.05,
        lambda n: tuple(
            ib_port_reasons(_port(n, 0, state="ACTIVE", error_increase={"link_downed": 1}), POLICY)
        ),
    ),
)


def _relabel(reasons: Iterable[Reason], gpu: int | None, hca: int | None) -> tuple[Reason, ...]:
    """A noise template's findings moved to the GPU or port it happened on."""
    out = []
    for r in reasons:
        if r.port is not None and hca is not None:
            port = f"mlx5_{hca}/1"
            out.append(Reason(r.severity, r.code, r.message.replace(r.port, port), r.gpu, port))
        elif r.gpu is not None and gpu is not None:
            msg = r.message.replace(f"GPU {r.gpu}", f"GPU {gpu}")
            out.append(Reason(r.severity, r.code, msg, gpu, r.port))
        else:
            out.append(r)
    return tuple(out)


def _slow_burner_plan(seed: int, nodes: int) -> SlowBurners:
    """The slow burners the simulator's devices pick for a pool of ``nodes`` nodes
    (``devices.plan_slow_burners`` with the world's seeded generator)."""
    config = WorldConfig(nodes=nodes, seed=seed)
    return plan_slow_burners(config, random.Random(f"{seed}:{SLOW_BURNERS_RNG}"))


def _creeping_model(seed: int, node: str, gpu: int) -> GpuModel:
    """The creeping GPU's thermal model as ``NodeDevices`` builds it and ``_slow_burn``
    sets its creep (world start at t = 0)."""
    inlet = 24.0 + 5.0 * _h(seed, node, "inlet")
    hot = _h(seed, node, gpu, "runs-hot") < 0.04
    q = 0.82 + 0.06 * _h(seed, node, gpu, "q") if hot else 0.92 + 0.16 * _h(seed, node, gpu, "q")
    m = GpuModel(inlet, q, 70.0 + 10.0 * _h(seed, node, gpu, "idle"), inlet + 4.0)
    m.creep_start = 600.0 * _h(seed, node, gpu, "creep")
    m.creep_s = 6 * 3600.0
    m.creep_end_q = 0.66
    return m


_EVENTS = ((HW_THERMAL, "hw_thermal"), (SW_THERMAL, "sw_thermal"), (HW_SLOWDOWN, "hw_slowdown"))


def _signature(reasons: Sequence[Reason]) -> tuple[tuple[int, str], ...]:
    return tuple((int(r.severity), r.code) for r in reasons)


def _segments(
    node: str, horizon: float, sample: Callable[[float], tuple[Reason, ...]]
) -> tuple[list[Segment], float | None, tuple[Reason, ...]]:
    """Sample a slow burner every minute until the policy calls it BAD: the segments of
    constant findings before, the time it turns BAD (None: not within the horizon) and
    its BAD findings."""
    out: list[Segment] = []
    start = 0.0
    current: tuple[Reason, ...] = ()
    t = 0.0
    while t <= horizon:
        reasons = sample(t)
        if any(r.severity is Severity.BAD for r in reasons):
            if current:
                out.append(Segment(node, T0 + start, T0 + t, current))
            return out, t, reasons
        if _signature(reasons) != _signature(current):
            if current:
                out.append(Segment(node, T0 + start, T0 + t, current))
            start, current = t, reasons
        t += MINUTE
    if current:
        out.append(Segment(node, T0 + start, T0 + horizon, current))
    return out, None, ()


def creeping_sampler(seed: int, node: str, gpu: int) -> Callable[[float], tuple[Reason, ...]]:
    model = _creeping_model(seed, node, gpu)
    recent: list[float] = []
    last = [0.0]
    window = int(POLICY.window_s // MINUTE)

    def sample(t: float) -> tuple[Reason, ...]:
        fields: dict[str, Any] = {}
        for _ in range(3):  # to the steady state of this minute (tau 40 s)
            fields = model.step(Load("training"), max(t - last[0], 0.0) / 3 or 20.0, t, 0.0)
        last[0] = t
        temp = float(fields["temperature_c"])
        recent.append(temp)
        del recent[:-window]
        bits = int(fields["clock_event_reasons"])
        events = frozenset(name for bit, name in _EVENTS if bits & bit)
        s = _gpu(
            node,
            gpu,
            temperature_c=temp,
            temperature_min_window_c=min(recent),
            clock_events=events,
        )
        return tuple(gpu_reasons(s, POLICY))

    return sample


def bad_port_sampler(node: str, hca: int) -> Callable[[float], tuple[Reason, ...]]:
    """The bad port's errors over the policy's window, as the simulator's bad port adds
    them (``devices.bad_port_errors``)."""

    def sample(t: float) -> tuple[Reason, ...]:
        added = bad_port_errors(t, POLICY.window_s)
        port_sample = _port(node, hca, state="ACTIVE", phys_state="LinkUp", error_increase=added)
        return tuple(ib_port_reasons(port_sample, POLICY))

    return sample


def pick_cause(rng: random.Random) -> Any:
    """As ``FailureActor.pick_cause``."""
    total = sum(c.weight for c in CAUSES)
    x = rng.random() * total
    for c in CAUSES:
        x -= c.weight
        if x < 0:
            return c
    return CAUSES[-1]


def make_stalls(
    rng: random.Random,
    names: Sequence[str],
    nodes: int,
    horizon: float,
    rate: float,
    hangs: float,
    stragglers: float,
) -> tuple[list[Fault], list[Straggler]]:
    """Silent hangs of the gang (a Poisson process at HANG_WEIGHT/351 of the gang's
    hardware rate, x ``hangs``) and stragglers on the pool's nodes (STRAGGLER_SHARE of
    the node rate, x ``stragglers``), from their own generator: the rest of the history
    does not change with them."""
    out: list[Fault] = []
    hang_rate = rate * nodes * hangs * HANG_WEIGHT / sum(c.weight for c in CAUSES) / DAY
    t = 0.0
    while hang_rate > 0:
        t += rng.expovariate(hang_rate)
        if t >= horizon:
            break
        out.append(Fault(T0 + t, None, "hang", 0.0, source="hang"))
    slow: list[Straggler] = []
    node_rate = rate * STRAGGLER_SHARE * stragglers / DAY
    weights = [w for w, *_ in STRAGGLER_KINDS]
    for node in names:
        t = 0.0
        while node_rate > 0:
            t += rng.expovariate(node_rate)
            if t >= horizon:
                break
            _, kind, events, draw = STRAGGLER_KINDS[rng.choices(range(len(weights)), weights)[0]]
            gpu, factor = rng.randrange(GPUS), draw(rng)
            sample = _gpu(
                node,
                gpu,
                util_ratio=1.0,
                sm_clock_hz=SM_CLOCK_MAX_HZ / factor,
                sm_clock_max_hz=SM_CLOCK_MAX_HZ,
                clock_events=events,
            )
            reasons = tuple(gpu_reasons(sample, POLICY))
            slow.append(Straggler(T0 + t, node, gpu, factor, kind, events, reasons))
    slow.sort(key=lambda x: (x.at, x.node))
    return out, slow


def make_history(
    regime: Regime,
    seed: int,
    nodes: int,
    days: float,
    noise_rate: float = NOISE_PER_NODE_DAY,
    hangs: float = 1.0,
    stragglers: float = 1.0,
    returned_bad: float = 0.0,
) -> History:
    spares = max(2, math.ceil(nodes * SPARE_SHARE))
    pool = nodes + spares
    names = [f"gpu-node-{i:03d}" for i in range(pool)]
    horizon = days * DAY
    rate = WORLD.failures_per_1000_node_days * regime.multiplier / 1000.0  # per node-day
    rng = random.Random(f"{seed}:goodput:{regime.name}")
    plan = _slow_burner_plan(seed, pool)
    lemons = {plan.lemon} if plan.lemon else set()

    segments: list[Segment] = []
    faults: list[Fault] = []
    burners: dict[str, str] = {}
    for node, g in plan.creeping:
        segs, bad_t, bad = _segments(node, horizon, creeping_sampler(seed, node, g))
        segments += segs
        burners[node] = f"creeping GPU {g}"
        if bad_t is not None:
            faults.append(
                Fault(T0 + bad_t, node, "thermal", DEFAULT_REPAIR_S, g, None, "slow-burner", bad)
            )
    for node, h in plan.bad_ports:
        segs, bad_t, _ = _segments(node, horizon, bad_port_sampler(node, h))
        segments += segs
        burners[node] = f"bad port mlx5_{h}/1"
        if bad_t is not None:
            faults.append(
                Fault(T0 + bad_t, node, "ib-link", repair_time("ib-link"), None, h, "slow-burner")
            )

    for node in names:
        node_rate = rate * (LEMON_FACTOR if node in lemons else 1.0) / DAY
        t = 0.0
        busy_until = -1.0
        while True:
            t += rng.expovariate(node_rate)
            if t >= horizon:
                break
            cause = pick_cause(rng)
            repair = cause.repair_s * rng.uniform(0.5, 1.5)
            gpu = rng.randrange(GPUS) if cause.name in GPU_CAUSES else None
            hca = rng.randrange(HCAS) if cause.name == "ib-link" else None
            if t < busy_until:
                continue  # still being repaired: the actor does not fail it again
            faults.append(Fault(T0 + t, node, cause.name, repair, gpu, hca))
            busy_until = t + repair
    # a slow burner's own failure: the random ones overlapping it are dropped likewise
    faults.sort(key=lambda f: (f.at, f.node or ""))
    kept: list[Fault] = []
    busy: dict[str, float] = {}
    for f in faults:
        assert f.node is not None
        if f.at < busy.get(f.node, -1.0):
            continue
        busy[f.node] = f.end
        kept.append(f)
    counts: dict[str, int] = {}
    for f in kept:
        if f.cause != "thermal":
            f.reasons = fault_reasons(f, str(f.node))
        counts[str(f.node)] = counts.get(str(f.node), 0) + 1
        f.key = f"{f.node}#{counts[str(f.node)]}"

    bug_rate = rate * nodes * SOFTWARE_BUG_WEIGHT / sum(c.weight for c in CAUSES) / DAY
    bugs: list[Fault] = []
    t = 0.0
    while True:
        t += rng.expovariate(bug_rate)
        if t >= horizon:
            break
        bugs.append(Fault(T0 + t, None, "software", 0.0, source="bug"))

    noise: list[Noise] = []
    weights = [w for w, _ in NOISE_KINDS]
    templates = {i: kind("template") for i, (_, kind) in enumerate(NOISE_KINDS)}
    for node in names:
        t = 0.0
        while True:
            t += rng.expovariate(noise_rate / DAY)
            if t >= horizon:
                break
            i = rng.choices(range(len(NOISE_KINDS)), weights)[0]
            reasons = tuple(
                Reason(r.severity, r.code, r.message, r.gpu, r.port) for r in templates[i]
            )
            reasons = _relabel(reasons, rng.randrange(GPUS), rng.randrange(HCAS))
            length = rng.uniform(60.0, 600.0)
            noise.append(Noise(node, T0 + t, T0 + t + length, reasons))
    stall_rng = random.Random(f"{seed}:goodput:{regime.name}:stalls")
    silent, slow = make_stalls(stall_rng, names, nodes, horizon, rate, hangs, stragglers)
    return History(
        nodes=names,
        gang_size=nodes,
        horizon=horizon,
        faults=kept,
        bugs=bugs,
        segments=segments,
        noise=noise,
        lemons=lemons,
        slow_burners=burners,
        rate_per_node_day=rate,
        hangs=silent,
        stragglers=slow,
        returned_bad=returned_bad,
        seed=seed,
        regime=regime.name,
    )


# -- one run ---------------------------------------------------------------------------


def _node_obj(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": "1", "labels": {}, "annotations": {}},
        "spec": {},
        "status": {
            "capacity": {"nvidia.com/gpu": str(GPUS)},
            "allocatable": {"nvidia.com/gpu": str(GPUS)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@dataclass
class RestartRecord:
    at: float
    culprit: str | None  # the node the simulation knows it was due to (None: software)
    planned: bool
    also: frozenset[str] = frozenset()  # gang nodes that failed too, in the same window
    verdict: str = ""  # right | wrong | unattributed (the "with" run)
    attributed: str | None = None


@dataclass
class Run:
    history: History
    automated: bool
    interval_s: float
    checkpoint_s: float
    seed: int
    restart_s: float = RESTART_S
    noise_to_node_health: bool = False
    watchdog_s: float = NCCL_TIMEOUT_S
    validate: bool = False  # issue 27: node-health's restores wait for a passed validation
    lost: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    productive: float = 0.0
    restarts: list[RestartRecord] = field(default_factory=list)
    planned_swaps: int = 0
    evictions: int = 0
    cap_held: set[str] = field(default_factory=set)
    swapped: set[str] = field(default_factory=set)
    acks: int = 0
    flagged: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        h = self.history
        self.end = T0 + h.horizon
        self.rng = random.Random(f"{self.seed}:goodput:{'with' if self.automated else 'without'}")
        self.gang: list[str] = h.nodes[: h.gang_size]
        self.objs = {n: _node_obj(n) for n in h.nodes}
        self.version = 1
        self.controller = NodeHealth()
        self.state: dict[str, Any] = {}
        self.evicted_signals: list[attribution.Signal] = []
        self.by_node: dict[str, list[Fault]] = {}
        for f in h.faults:
            self.by_node.setdefault(str(f.node), []).append(f)
        self.segments_by_node: dict[str, list[Segment]] = {}
        self.noise_by_node: dict[str, list[Noise]] = {}
        if self.noise_to_node_health:
            for n in h.noise:
                self.noise_by_node.setdefault(n.node, []).append(n)
        for s in h.segments:
            self.segments_by_node.setdefault(s.node, []).append(s)
        self.slow_by_node: dict[str, list[tuple[int, Straggler]]] = {}
        for i, sl in enumerate(h.stragglers):
            self.slow_by_node.setdefault(sl.node, []).append((i, sl))
        self.queue: list[tuple[float, int, int, str, Any]] = []
        self.seq = 0
        self.passes: set[int] = set()
        # gang state
        self.up_since: float | None = T0  # running since (None: stopped)
        self.hang: Fault | None = None  # a hang in progress (running, no progress)
        self.down_from = 0.0
        self.attributed_times: list[tuple[str, float]] = []
        self.begin = T0
        # the training JobSet as node-health reads it (training.gangs.Gang)
        self.jobset_notes: dict[str, str] = {}
        self.jobset_version = 1
        self.honoured_request: str | None = None
        self.ack_at: float | None = None
        self.ack_pending = False
        self.waiting = 0.0  # restarts waiting for enough schedulable nodes
        # the restart's phases, scaled to restart_s; the pods are bound after the first two
        scale = self.restart_s / sum(d for _, d in RESTART_PHASES)
        self.phases = [(name, d * scale) for name, d in RESTART_PHASES]
        self.bind_delay = self.phases[0][1] + self.phases[1][1]
        # stragglers: which have ended (index -> when their node left), the gang's pace
        self.gone: dict[int, float] = {}
        self.factor = 1.0  # the gang's step time over its healthy step time
        self.slow_mark = T0
        self.slow_acc = 0.0  # the slowed share of the running segment, in seconds
        self.attempt_at = T0
        self.pace: list[tuple[float, float]] = [(T0, 1.0)]
        self.hang_idle: list[tuple[str, float]] = []  # (cause, hang to restart begun)
        self.checks: set[float] = set()
        self.pulled: dict[str, float] = {}  # the human's straggler nodes: back when repaired
        self.straggler_swaps = 0
        self.hang_restarts = 0
        self.restart_planned = False  # this pass planned a restart of the gang
        # issue 27: nodes a repair left still bad, their relapses, returns, validations
        self.latent: dict[str, Latent] = {}
        self.armed: dict[str, int] = {}  # latent key -> times its relapse was armed
        self.pending: set[str] = set()  # latent keys with a relapse event queued
        self.relapses = 0
        self.relapse_restarts = 0
        self.relapse_named = 0  # of those, attributed to the node that relapsed
        self.relapse_evictions = 0
        self.returns = 0
        self.returns_bad = 0
        self.evicted_at: dict[str, float] = {}  # quarantined (by node-health) since
        # the first quarantine not yet followed by a sound return
        self.chain_start: dict[str, float] = {}
        self.ttr: list[float] = []  # quarantine to back in service
        self.to_sound: list[float] = []  # first quarantine to a return that was sound
        self.validating: dict[str, float] = {}
        self.cleared: set[str] = set()  # passed: node-health's restore may go through
        self.rerepair: set[str] = set()
        self.failed_in_row: dict[str, int] = {}
        self.escalated: set[str] = set()
        self.validations = 0
        self.validation_fails = 0
        self.validation_missed = 0  # passed while still bad
        self.validating_s = 0.0

    # -- the event queue ------------------------------------------------------------

    def push(self, t: float, kind: str, payload: Any = None, prio: int = 5) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (t, prio, self.seq, kind, payload))

    def schedule_passes(self, start: float, span: float) -> None:
        if not self.automated:
            return
        k = math.ceil((start - T0) / PASS_S)
        while T0 + k * PASS_S <= min(start + span, self.end):
            if k not in self.passes:
                self.passes.add(k)
                self.push(T0 + k * PASS_S, "pass", None, prio=0)
            k += 1

    # -- what the world looks like at t ------------------------------------------------

    def open_fault(self, node: str, t: float) -> Fault | None:
        for f in self.by_node.get(node, ()):
            if f.open_at(t):
                return f
            if f.at > t:
                break
        return None

    def reasons_at(self, node: str, t: float) -> list[Reason]:
        out: list[Reason] = []
        f = self.open_fault(node, t - SCRAPE_S)
        if f is not None:
            if f.cause == "host" and t < f.at + NODE_MONITOR_GRACE_S:
                out += [r for r in f.reasons if r.code != "node_not_ready"]
            else:
                out += f.reasons
        for s in self.segments_by_node.get(node, ()):
            if s.start + SCRAPE_S <= t < s.end + SCRAPE_S and not (f and f.source == "slow-burner"):
                out += s.reasons
        for n in self.noise_by_node.get(node, ()):
            if n.start + SCRAPE_S <= t < n.end + SCRAPE_S:
                out += n.reasons
        for i, slow in self.slow_by_node.get(node, ()):
            if slow.at + SCRAPE_S <= t and self.gone.get(i, math.inf) > t:
                out += slow.reasons
        return out

    def verdict_at(self, node: str, t: float) -> Verdict:
        reasons = self.reasons_at(node, t)
        return Verdict.of(reasons) if reasons else OK_VERDICT

    def schedulable(self, node: str, t: float) -> bool:
        """Kubernetes would bind a gang pod there (and, with krea-ops, it is neither
        cordoned nor a lemon)."""
        f = self.open_fault(node, t)
        if f is not None and f.cause in UNSCHEDULABLE_CAUSES:
            return False
        if not self.automated:
            return True
        obj = self.objs[node]
        if obj["spec"].get("unschedulable"):
            return False
        if (obj["metadata"].get("labels") or {}).get(LEMON_LABEL) == "true":
            return False
        return node not in self.flagged

    # -- node-health ------------------------------------------------------------------

    def sync_ready(self, t: float) -> None:
        for node, obj in self.objs.items():
            f = self.open_fault(node, t)
            down = f is not None and f.cause == "host" and t >= f.at + NODE_MONITOR_GRACE_S
            cond = obj["status"]["conditions"][0]
            want = "Unknown" if down else "True"
            if cond["status"] != want:
                since = (f.at + NODE_MONITOR_GRACE_S) if down and f else t
                obj["status"]["conditions"] = [
                    {"type": "Ready", "status": want, "lastTransitionTime": rfc3339(since)}
                ]
                self.bump(obj)

    def bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def gang_view(self) -> Gang:
        running = self.up_since is not None and self.hang is None
        rank0 = {
            "metadata": {
                "namespace": "training",
                "name": "dit-trainer-0-0",
                "uid": f"rank0-{len(self.restarts)}",
                "labels": {
                    "jobset.sigs.k8s.io/jobset-name": "dit",
                    "jobset.sigs.k8s.io/replicatedjob-name": "trainer",
                    "jobset.sigs.k8s.io/job-index": "0",
                    "jobset.sigs.k8s.io/restart-attempt": str(len(self.restarts)),
                    "batch.kubernetes.io/job-completion-index": "0",
                },
            },
            "spec": {"nodeName": self.gang[0]},
            "status": {"phase": "Running"},
        }
        return Gang(
            namespace="training",
            name="dit",
            uid="dit-uid",
            restarts=len(self.restarts),
            resource_version=str(self.jobset_version),
            nodes=tuple(self.gang),
            running=running,
            expected=len(self.gang),
            gpus=len(self.gang) * GPUS,
            annotations=dict(self.jobset_notes),
            pods=(rank0,),
            spec=JOBSET_SPEC,
        )

    # -- hangs and stragglers as node-health reads them ------------------------------

    def stragglers_at(self, t: float, gang_only: bool = True) -> list[tuple[int, Straggler]]:
        gang = set(self.gang)
        return [
            (i, s)
            for i, s in enumerate(self.history.stragglers)
            if s.at <= t and i not in self.gone and (not gang_only or s.node in gang)
        ]

    def gang_factor(self, t: float) -> float:
        return max((s.factor for _, s in self.stragglers_at(t)), default=1.0)

    def slow_tick(self, t: float) -> None:
        """Account the slowed share up to t at the pace so far, then take the pace at t."""
        if self.up_since is not None and self.hang is None:
            self.slow_acc += max(t - self.slow_mark, 0.0) * (1.0 - 1.0 / self.factor)
        self.slow_mark = max(t, self.slow_mark)
        factor = self.gang_factor(t)
        if factor != self.factor:
            self.factor = factor
            self.pace.append((t, factor))

    def end_stragglers(self, node: str, t: float) -> None:
        """The node has left the gang (or been evicted): it is repaired before it is used."""
        for i, s in enumerate(self.history.stragglers):
            if s.node == node and s.at <= t and i not in self.gone:
                self.gone[i] = t

    def step_points(self, t: float) -> list[list[float]]:
        """Rank 0's metrics lines of this attempt within the baseline window, as
        ``progress.remember`` keeps them: a line every LOG_EVERY steps at the gang's pace,
        none after a hang began."""
        end = self.down_from if self.hang is not None else t
        lo = t - STALLS.window_s - STALLS.recent_s
        out: list[list[float]] = []
        steps = 0.0
        segs = [*self.pace, (end, 1.0)]
        for (a, f), (b, _) in itertools.pairwise(segs):
            if a >= end:
                break
            b, dt = min(b, end), STEP_S * f
            n0, n1 = steps, steps + max(b - a, 0.0) / dt
            first = n0 + max(lo - a, 0.0) / dt
            k = math.floor(max(first, n0) / LOG_EVERY) + 1
            while k * LOG_EVERY <= n1:
                x = a + (k * LOG_EVERY - n0) * dt
                if x >= lo:
                    out.append([x, float(k * LOG_EVERY)])
                k += 1
            steps = n1
        return out

    def stall_status(self, t: float, verdicts: dict[str, Verdict]) -> dict[str, GangStatus]:
        """The gang's status as node-health's read takes it (``gangstatus``): its progress
        from rank 0's lines and ``stalls.judge`` over its GPUs' readings (the straggling
        GPUs' nodes and three more: the rest read the same), only while it is hung or
        slowed (a RUNNING gang is not acted on)."""
        hung = self.hang is not None
        running = self.up_since is not None and self.up_since <= t and not hung
        slow = {s.node: s for _, s in self.stragglers_at(t)}
        if not hung and not (running and slow):
            return {}
        cfg = self.controller.config.stalls
        history = {"start": self.attempt_at, "points": self.step_points(t)}
        prog = progress(history, t, recent_s=cfg.recent_s, grace_s=cfg.grace_s)
        gpus: dict[str, tuple[GpuSample, ...]] = {}
        # the gang runs at its slowest GPU's pace: that GPU computes all the time, the
        # others wait for it in the collectives for the rest (the simulator's model)
        pace = max((s.factor for s in slow.values()), default=1.0)
        for node in dict.fromkeys([*slow, *self.gang[:3]]):
            held = slow.get(node)
            rows = []
            for g in range(GPUS):
                mine = held is not None and held.gpu == g
                rows.append(
                    GpuSample(
                        node=node,
                        index=g,
                        up=True,
                        util_ratio=1.0,
                        tensor_active_ratio=0.0
                        if hung
                        else (
                            0.35
                            if held is not None and mine and held.factor >= pace
                            else 0.35 / pace
                        ),
                        sm_clock_hz=SM_CLOCK_MAX_HZ / (held.factor if held and mine else 1.0),
                        sm_clock_max_hz=SM_CLOCK_MAX_HZ,
                        clock_events=held.events if held and mine else frozenset(),
                    )
                )
            gpus[node] = tuple(rows)
        j = judge(True, prog, gpus, verdicts, t, cfg, nodes=self.gang)
        status = GangStatus("training", "dit", len(self.restarts), tuple(self.gang), prog, j)
        return {status.key: status}

    def checkpoint_requested(self, t: float) -> None:
        """The trainer's launcher sees the request (the simulator's trainer does the
        same): a checkpoint now, or the one being written, then the answer."""
        stamp = self.jobset_notes.get(CHECKPOINT_REQUESTED_AT)
        if stamp is None or stamp == self.honoured_request:
            return
        if self.up_since is None or self.hang is not None or t < self.up_since:
            return  # a stopped or stuck gang writes nothing: the request times out
        done = self.close_segment(t, "planned")
        self.up_since = done  # the next interval starts after this checkpoint
        self.honoured_request = stamp
        self.push(done, "checkpointed", stamp, prio=1)

    def checkpointed(self, stamp: str, t: float) -> None:
        self.jobset_notes[CHECKPOINT_COMPLETED_AT] = rfc3339(math.ceil(t))
        self.jobset_notes[CHECKPOINT_COMPLETED_STEP] = str(int(self.productive))
        self.jobset_version += 1
        self.schedule_passes(t, 2 * PASS_S)

    def apply(self, plan: Plan) -> None:
        for step in plan.steps:
            if step.kind is StepKind.UPDATE and step.node is None:  # the JobSet
                obj: dict[str, Any] = {"metadata": {"annotations": dict(self.jobset_notes)}}
                for edit in step.edits:
                    obj = edit.apply(obj) or obj
                self.jobset_notes = dict(obj["metadata"].get("annotations") or {})
                self.jobset_version += 1
                continue
            if step.kind is not StepKind.UPDATE or step.node is None:
                continue
            obj = self.objs[step.node]
            for edit in step.edits:
                obj = edit.apply(obj) or obj
            self.objs[step.node] = obj
            self.bump(obj)

    def node_health_pass(self, t: float) -> list[str]:
        """One ``NodeHealth.decide`` over the nodes as they are at t; its plans applied.
        Returns the nodes it evicted."""
        self.sync_ready(t)
        self.restart_planned = False
        verdicts = {n: self.verdict_at(n, t) for n in self.objs}
        stalls = self.stall_status(t, verdicts)
        gang = self.gang_view()
        extra = also_prepared((gang,), verdicts, stalls, self.controller.config)
        names = evictable(self.objs, verdicts, USER, extra)
        evict = EvictInputs(
            nodes=tuple(names),
            objs={n: self.objs[n] for n in names},
            fleet=len(self.objs),
            pods={n: () for n in names},
        )
        snap = NodeHealthSnapshot(
            nodes=self.objs,
            verdicts=verdicts,
            evict=evict,
            user=USER,
            ack_at=self.ack_at,
            ack_by="operator" if self.ack_at is not None else None,
            restarts=RestartInputs(gangs=(gang,)),
            stalls=stalls,
        )
        decision = self.controller.decide(snap, t, self.state)
        self.state = json.loads(json.dumps(decision.state))
        held = {s.target for s in decision.skipped if s.why == "cap"}
        self.cap_held |= held
        if held and not self.ack_pending:
            # the cap's alert pages an operator, who runs `krea-ops controller ack`
            self.ack_pending = True
            self.push(t + self.human_delay(t), "ack", None, prio=0)
        evicted: list[str] = []
        for plan in decision.plans:
            if plan.action == "nodes restore" and not self.may_restore(plan.nodes, t):
                continue  # held until the node has passed its validation
            self.apply(plan)
            if plan.action == "nodes restore":
                for n in plan.nodes:
                    self.restored(n, t)
            if plan.action == "train checkpoint-request":
                self.checkpoint_requested(t)
            if plan.action == "train restart":
                self.restart_planned = True  # rank 0's pod evicted: the JobSet restarts
            if plan.action == "nodes evict":
                if (plan.reason or "").startswith("planned swap"):
                    self.swapped |= set(plan.nodes)
                for n in plan.nodes:
                    if n not in evicted:
                        evicted.append(n)
                        self.evictions += 1
                        self.evicted_at.setdefault(n, t)
                        self.chain_start.setdefault(n, t)
                        self.cleared.discard(n)
                        g = self.open_fault(n, t)
                        self.relapse_evictions += g is not None and g.source == "relapse"
                        if n in self.gang and any(s.node == n for _, s in self.stragglers_at(t)):
                            self.straggler_swaps += 1
                        self.end_stragglers(n, t)
                        self.evicted_signals.append(
                            attribution.Signal(
                                n,
                                "evicted",
                                Severity.BAD,
                                f"evicted by node-health: {plan.reason}",
                                t,
                                t,
                            )
                        )
        return evicted

    # -- still bad when returned, and validation before return (issue 27) --------------

    def repaired(self, f: Fault, t: float) -> None:
        """A repair is done: the node is sound, or (``returned_bad``) still bad."""
        node = str(f.node)
        other = self.open_fault(node, t)
        if other is not None and other is not f:
            return  # still down for another failure: its repair decides
        h = self.history
        if h.draw(f.key, "bad").random() < h.returned_bad:
            load = h.draw(f.key, "load").expovariate(1.0 / RELAPSE_LOAD_MEAN_S)
            self.latent[node] = Latent(f.cause, f.gpu, f.hca, f.reasons, f.key, load, t)
        else:
            self.latent.pop(node, None)
        if not self.automated or node not in self.evicted_at:
            self.count_return(node)  # nothing held it out: back in service now
        self.arm_relapse(node, t)

    def count_return(self, node: str) -> None:
        self.returns += 1
        self.returns_bad += node in self.latent

    def arm_relapse(self, node: str, t: float) -> None:
        """A still-bad node in a running gang fails again after its time under load (by
        memorylessness, a fresh draw each time its gang starts it again)."""
        lat = self.latent.get(node)
        if lat is None or lat.key in self.pending or node not in self.gang:
            return
        if self.up_since is None:
            return
        k = self.armed.get(lat.key, 0)
        self.armed[lat.key] = k + 1
        load = lat.load_s
        if k:
            load = self.history.draw(lat.key, f"load{k}").expovariate(1.0 / RELAPSE_LOAD_MEAN_S)
        self.pending.add(lat.key)
        self.push(t + load, "relapse", (node, lat.key), prio=1)

    def relapse(self, node: str, key: str, t: float) -> None:
        self.pending.discard(key)
        lat = self.latent.get(node)
        if lat is None or lat.key != key:
            return
        if node not in self.gang or self.up_since is None:
            return  # not under load now: armed again when its gang starts
        del self.latent[node]
        repair = repair_time(lat.cause) * self.history.draw(key, "repair").uniform(0.5, 1.5)
        f = Fault(t, node, lat.cause, repair, lat.gpu, lat.hca, "relapse", lat.reasons, key + "r")
        if f.cause != "thermal":
            f.reasons = fault_reasons(f, node)
        bisect.insort(self.by_node.setdefault(node, []), f, key=lambda x: x.at)
        self.relapses += 1
        self.push(t, "fault", f, prio=1)
        self.push(f.end, "repaired", f, prio=1)
        if self.automated:
            self.schedule_passes(t, 8 * MINUTE)
            self.schedule_passes(f.end, 2 * PASS_S)
            restore = self.controller.config.restore_after_s or 0.0
            self.schedule_passes(f.end + restore, 3 * PASS_S)

    def may_restore(self, nodes: Sequence[str], t: float) -> bool:
        """node-health plans a restore: without validation it goes through; with it, only
        once each node has passed (a node not yet validated starts its validation)."""
        if not self.validate:
            return True
        waiting = [n for n in nodes if n not in self.cleared]
        for n in waiting:
            self.start_validation(n, t)
        return not waiting

    def start_validation(self, node: str, t: float) -> None:
        if node in self.validating or node in self.rerepair or node in self.escalated:
            return
        if len(self.validating) >= max(1, int(VALIDATION_SHARE * len(self.objs))):
            self.schedule_passes(t + 5 * MINUTE, PASS_S)  # node-health asks again then
            return
        self.validating[node] = t
        self.validations += 1
        self.push(t + VALIDATION_S, "validated", node, prio=1)

    def set_label(self, node: str, value: str | None) -> None:
        labels = self.objs[node]["metadata"].setdefault("labels", {})
        if labels.get(NEEDS_REPAIR_LABEL) != value:
            if value is None:
                labels.pop(NEEDS_REPAIR_LABEL, None)
            else:
                labels[NEEDS_REPAIR_LABEL] = value
            self.bump(self.objs[node])

    def validated(self, node: str, t: float) -> None:
        started = self.validating.pop(node, None)
        if started is None:
            return
        self.validating_s += t - started
        lat = self.latent.get(node)
        caught = lat is not None and (
            self.history.draw(lat.key, "detect").random() < DETECTION.get(lat.cause, 0.5)
        )
        if lat is None or not caught:
            self.validation_missed += lat is not None
            self.failed_in_row.pop(node, None)
            self.set_label(node, None)
            self.cleared.add(node)
            self.schedule_passes(t, 2 * PASS_S)  # node-health's next restore goes through
            return
        self.validation_fails += 1
        fails = self.failed_in_row[node] = self.failed_in_row.get(node, 0) + 1
        self.set_label(node, lat.cause)
        del self.latent[node]
        if fails >= ESCALATE_AFTER:
            self.escalated.add(node)  # to the vendor: out for the rest of the run
            return
        repair = repair_time(lat.cause) * self.history.draw(lat.key, "rerepair").uniform(0.5, 1.5)
        self.rerepair.add(node)
        self.push(t + repair, "rerepaired", (node, lat), prio=1)

    def rerepaired(self, node: str, lat: Latent, t: float) -> None:
        """Repaired again after a failed validation: sound, or still bad (the same share),
        then validated again at once."""
        self.rerepair.discard(node)
        key = lat.key + "v"
        h = self.history
        if h.draw(key, "bad").random() < h.returned_bad:
            load = h.draw(key, "load").expovariate(1.0 / RELAPSE_LOAD_MEAN_S)
            self.latent[node] = Latent(lat.cause, lat.gpu, lat.hca, lat.reasons, key, load, t)
        self.start_validation(node, t)

    def restored(self, node: str, t: float) -> None:
        """node-health's restore applied: the node is back in service."""
        self.cleared.discard(node)
        self.count_return(node)
        since = self.evicted_at.pop(node, None)
        if since is not None:
            self.ttr.append(t - since)
        if node not in self.latent and node in self.chain_start:
            self.to_sound.append(t - self.chain_start.pop(node))

    # -- accounting -------------------------------------------------------------------

    def close_segment(self, t: float, how: str) -> float:
        """Account the running stretch up to t; ``how``: fail | end | planned. Returns
        when the gang stops (a planned swap first writes its checkpoint)."""
        assert self.up_since is not None
        self.slow_tick(t)
        s = max(t - self.up_since, 0.0)
        kept_before = self.productive
        t_int, c = self.interval_s, self.checkpoint_s
        k = math.floor(s / (t_int + c))
        r = s - k * (t_int + c)
        self.productive += k * t_int
        self.lost["checkpoint_writes"] += k * c
        stop = t
        if how == "end":
            self.productive += min(r, t_int)
            self.lost["checkpoint_writes"] += max(r - t_int, 0.0)
        elif how == "fail":
            self.lost["lost_work"] += min(r, t_int)
            self.lost["checkpoint_writes"] += max(r - t_int, 0.0)
        else:  # planned: a checkpoint now (or the one being written) then the swap
            self.productive += min(r, t_int)
            self.lost["checkpoint_writes"] += c
            stop = t + (c if r <= t_int else (t_int + c - r))
        # the slowed share of the time kept: steps a straggler made take longer
        kept = self.productive - kept_before
        slowed = min(self.slow_acc, s) * (kept / s) if s > 0 else 0.0
        self.productive -= slowed
        self.lost["straggling"] += slowed
        self.slow_acc, self.slow_mark = 0.0, stop
        self.up_since = None
        return stop

    # -- the gang ---------------------------------------------------------------------

    def human_delay(self, t: float) -> float:
        hour = ((t - T0) % DAY) / HOUR
        night = hour >= NIGHT[0] or hour < NIGHT[1]
        median = HUMAN_MEDIAN_NIGHT_S if night else HUMAN_MEDIAN_DAY_S
        return min(self.rng.lognormvariate(math.log(median), HUMAN_SIGMA), 8 * HOUR)

    def on_failure(self, f: Fault, t: float) -> None:
        """A fault hits the gang while it runs."""
        if self.up_since is not None and t < self.up_since:
            # during a requested checkpoint's write: it hits when the write ends
            self.push(self.up_since, "fault", f, prio=1)
            return
        if self.up_since is None or self.hang is not None:
            return
        self.close_segment(t, "fail")
        self.down_from = t
        if f.hangs:
            self.hang = f
            self.push(t + self.watchdog_s, "nccl-timeout", f)
            # (with krea-ops, a node-health eviction of a gang node ends it sooner: "pass")
        else:
            self.stopped(f, t)

    def stopped(
        self,
        f: Fault | None,
        t: float,
        evicted: str | None = None,
        planned: bool = False,
        watchdog: bool = False,
        at_once: bool = False,
    ) -> None:
        """The gang has stopped at t (a crash, the end of a hang, a planned swap).
        ``watchdog``: a hang ended by NCCL's watchdog; ``at_once``: the human is already
        there (a straggler they swap)."""
        self.hang = None
        self.lost["hang_watchdog" if watchdog else "detection"] += t - self.down_from
        culprit = f.node if f is not None else None
        also = frozenset(
            n
            for n in self.gang
            if (g := self.open_fault(n, t)) is not None and g.at >= t - attribution.WINDOW_BEFORE_S
        )
        rec = RestartRecord(t, culprit, planned, also)
        self.restarts.append(rec)
        if self.automated:
            self.attribute(rec, f, evicted)
            begin = t
        elif at_once:
            begin = t
        else:
            begin = t + self.human_delay(t)
            self.lost["detection"] += min(begin, self.end) - t
        if f is not None and f.source == "relapse":
            self.relapse_restarts += 1
            self.relapse_named += rec.attributed == f.node
        if f is not None and f.hangs:
            self.hang_idle.append((f.cause, min(begin, self.end) - self.down_from))
        self.begin = begin
        self.push(begin + self.bind_delay, "bind", begin, prio=2)

    def attribute(self, rec: RestartRecord, f: Fault | None, evicted: str | None) -> None:
        t = rec.at
        failed: list[attribution.FailedPod] = []
        if evicted is not None:
            failed.append(
                attribution.FailedPod(
                    f"trainer-{evicted}", evicted, t, "Evicted", 143, "evicted", ()
                )
            )
        elif f is not None and f.node is not None and not f.hangs:
            failed.append(
                attribution.FailedPod(
                    f"trainer-{f.node}",
                    f.node,
                    t,
                    "Error",
                    1,
                    None,
                    (
                        "RuntimeError: CUDA error: an illegal memory access was encountered "
                        f"(GPU {f.gpu})",
                    ),
                )
            )
        elif f is not None and f.node is None and not f.hangs:
            node = self.rng.choice(self.gang)
            failed.append(
                attribution.FailedPod(
                    f"trainer-{node}",
                    node,
                    t,
                    "Error",
                    1,
                    None,
                    ("Traceback (most recent call last):", "ValueError: shapes do not match"),
                )
            )
        else:
            node = self.rng.choice(self.gang)
            failed.append(
                attribution.FailedPod(
                    f"trainer-{node}", node, t, "Error", 1, None, (attribution.NCCL_TIMEOUT,)
                )
            )
        restart = attribution.Restart(
            "training",
            "dit",
            len(self.restarts),
            t,
            tuple(self.gang),
            tuple(failed),
            len(self.gang) * GPUS,
        )
        result = attribution.attribute(restart, self.signals_near(t))
        rec.attributed = result.node
        if result.node is None:
            rec.verdict = "right" if rec.culprit is None else "unattributed"
        else:
            right = result.node == rec.culprit or result.node in rec.also
            rec.verdict = "right" if right else "wrong"
            if attribution.counts_towards_lemon(result.cause):
                self.attributed_times.append((result.node, t))
            flagged = attribution.lemon_candidates(
                self.attributed_times, t, fleet_nodes=len(self.history.nodes)
            )
            self.flagged |= set(flagged)

    def signals_near(self, t: float) -> list[attribution.Signal]:
        lo, hi = t - attribution.WINDOW_BEFORE_S, t + attribution.WINDOW_AFTER_S
        h = self.history
        out: list[attribution.Signal] = []
        gang = set(self.gang)

        def add(node: str, reasons: Iterable[Reason], first: float, last: float) -> None:
            if node not in gang or last < lo or first > hi:
                return
            for r in reasons:
                out.append(
                    attribution.Signal(
                        node, r.code, r.severity, r.message, first, last, r.gpu, r.port
                    )
                )

        for node in gang:
            for f in self.by_node.get(node, ()):
                if f.at > hi:
                    break
                if f.cause == "host":
                    rs = [r for r in f.reasons if r.code != "node_not_ready"]
                    add(node, rs, f.at + SCRAPE_S, f.end)
                    nr = [r for r in f.reasons if r.code == "node_not_ready"]
                    add(node, nr, f.at + NODE_MONITOR_GRACE_S, f.end)
                else:
                    add(node, f.reasons, f.at + SCRAPE_S, f.end)
            for s in self.segments_by_node.get(node, ()):
                add(node, s.reasons, s.start + SCRAPE_S, s.end)
        for n in h.noise:
            if n.start > hi:
                break
            add(n.node, n.reasons, n.start, n.end)
        out += [s for s in self.evicted_signals if lo <= s.first <= hi and s.node in gang]
        return out

    def bind(self, begin: float, t: float) -> None:
        """Pods of the restarted gang are bound at t: replace the nodes that cannot run."""
        keep: list[str] = []
        for n in self.gang:
            if self.automated:
                ok = self.schedulable(n, t)
            else:
                # the human pulled the nodes that were failed when they restarted
                ok = self.schedulable(n, t) and self.open_fault(n, begin) is None
                ok = ok and self.pulled.get(n, 0.0) <= t
            if ok:
                keep.append(n)
        need = self.history.gang_size - len(keep)
        if need:
            spares = [
                n
                for n in self.history.nodes
                if n not in self.gang
                and self.schedulable(n, t)
                and (self.automated or self.pulled.get(n, 0.0) <= t)
            ]
            if len(spares) < need:
                # wait for a node to come back: try again at the next repair or restore
                self.waiting += 5 * MINUTE
                self.push(t + 5 * MINUTE, "bind", begin, prio=2)
                return
            keep += spares[:need]
        for n in self.gang:
            if n not in keep:
                self.end_stragglers(n, t)
        self.gang = keep
        done = max(begin + self.restart_s, t + self.restart_s - self.bind_delay)
        self.push(done, "up", None, prio=3)

    def account_restart(self, elapsed: float) -> None:
        """A restart's time, phase by phase in order; a wait for nodes is admission's."""
        extra = max(elapsed - self.restart_s, 0.0)
        for name, length in self.phases:
            if name == "restart_admitted":
                length += extra
            part = min(length, max(elapsed, 0.0))
            self.lost[name] += part
            elapsed -= part

    def up(self, t: float) -> None:
        self.account_restart(t - self.begin)
        self.up_since = t
        self.down_from = t
        self.attempt_at, self.slow_acc, self.slow_mark = t, 0.0, t
        self.factor = self.gang_factor(t)
        self.pace = [(t, self.factor)]
        for n in self.gang:
            self.arm_relapse(n, t)
        # a gang that starts with a failed node crashes again at once
        for n in self.gang:
            f = self.open_fault(n, t)
            if f is not None:
                self.on_failure(f, t)
                return
        if self.automated:
            self.schedule_passes(t, 2 * PASS_S)
            if self.factor > 1.0:  # judged once past the attempt's grace
                self.schedule_passes(t + STALLS.grace_s, self.straggler_span())
        elif self.factor > 1.0:
            self.schedule_check(t)

    # -- stragglers as a human sees them ----------------------------------------------

    def straggler_span(self) -> float:
        """How long node-health is run after a gang slows: the step time's window, a few
        metrics lines at the slowest pace, the checkpoint the swap asks for."""
        return STALLS.recent_s + 4 * LOG_EVERY * STEP_S * 4 + 6 * PASS_S

    def schedule_check(self, t: float) -> None:
        day = math.floor((t - T0) / DAY)
        for d in (day, day + 1):
            for hour in STRAGGLER_CHECKS_UTC:
                at = T0 + d * DAY + hour * HOUR
                if at > t:
                    if at not in self.checks:
                        self.checks.add(at)
                        self.push(at, "check", None, prio=4)
                    return

    def check(self, t: float) -> None:
        """Someone looks at the gang's step time."""
        slow = self.stragglers_at(t)
        if not slow:
            return
        running = self.up_since is not None and self.hang is None and self.up_since <= t
        if running and self.factor >= HUMAN_VISIBLE_RATIO:
            i, _ = max(slow, key=lambda x: x[1].factor)
            self.push(t + self.human_delay(t), "human-swap", i, prio=1)
        elif not running:
            self.schedule_check(t)

    def human_swap(self, i: int, t: float) -> None:
        """The human stops the gang and restarts it without the slow node (which is
        repaired meanwhile), from the newest checkpoint."""
        s = self.history.stragglers[i]
        if i in self.gone or s.node not in self.gang:
            return
        self.pulled[s.node] = t + DEFAULT_REPAIR_S
        if self.up_since is None or self.hang is not None or self.up_since > t:
            return  # stopped: the restart under way leaves it out
        self.close_segment(t, "fail")
        self.down_from = t
        self.straggler_swaps += 1
        self.stopped(Fault(t, s.node, "straggler", 0.0), t, at_once=True)

    def run(self) -> None:
        h = self.history
        for f in h.faults:
            self.push(f.at, "fault", f, prio=1)
            if h.returned_bad > 0:
                self.push(f.end, "repaired", f, prio=1)
            if self.automated:
                self.schedule_passes(f.at, 8 * MINUTE)
                self.schedule_passes(f.end, 2 * PASS_S)
                restore = self.controller.config.restore_after_s or 0.0
                self.schedule_passes(f.end + restore, 3 * PASS_S)
        for b in h.bugs:
            self.push(b.at, "fault", b, prio=1)
        for g in h.hangs:
            self.push(g.at, "fault", g, prio=1)
            if self.automated:
                stalls = self.controller.config.stalls
                span = stalls.hang_after(STEP_S) + stalls.hang_restart_after_s + 4 * PASS_S
                self.schedule_passes(g.at, span)
        for i, sl in enumerate(h.stragglers):
            self.push(sl.at, "straggle", i, prio=1)
            if self.automated:
                self.schedule_passes(sl.at, self.straggler_span())
        if self.automated:
            for s in h.segments:
                self.schedule_passes(s.start + SCRAPE_S, 2 * PASS_S)
            for ns in self.noise_by_node.values():
                for n in ns:
                    self.schedule_passes(n.start + SCRAPE_S, n.end - n.start + 2 * PASS_S)
        self.schedule_passes(T0, PASS_S)
        while self.queue:
            t, _, _, kind, payload = heapq.heappop(self.queue)
            if t >= self.end:
                break
            if kind == "fault":
                f = payload
                if f.node is not None:
                    self.latent.pop(f.node, None)  # failed again: its repair decides anew
                    self.cleared.discard(f.node)
                    started = self.validating.pop(f.node, None)
                    if started is not None:  # failed under validation: repaired, then again
                        self.validating_s += t - started
                if f.node is None or f.node in self.gang:
                    self.on_failure(f, t)
            elif kind == "repaired":
                self.repaired(payload, t)
            elif kind == "relapse":
                self.relapse(payload[0], payload[1], t)
            elif kind == "validated":
                self.validated(payload, t)
            elif kind == "rerepaired":
                self.rerepaired(payload[0], payload[1], t)
            elif kind == "nccl-timeout":
                if self.hang is payload:
                    self.stopped(payload, t, watchdog=True)
            elif kind == "straggle":
                self.slow_tick(t)
                if not self.automated and self.history.stragglers[payload].node in self.gang:
                    self.schedule_check(t)
            elif kind == "check":
                self.check(t)
            elif kind == "human-swap":
                self.human_swap(payload, t)
            elif kind == "pass":
                evicted = self.node_health_pass(t)
                hit = [n for n in evicted if n in self.gang]
                if hit and self.hang is not None:
                    self.stopped(self.hang, t, evicted=hit[0])
                elif self.restart_planned and self.hang is not None:
                    self.hang_restarts += 1
                    self.stopped(self.hang, t)
                elif hit and self.up_since is not None:
                    # an eviction of a running gang's node (no failure the simulation knows)
                    planned = hit[0] in self.swapped
                    at = max(t, self.up_since)  # (a requested checkpoint is written first)
                    self.close_segment(at, "fail")
                    self.down_from = at
                    cause = "planned" if planned else "evicted"
                    stop = Fault(at, hit[0], cause, 0.0)
                    self.stopped(stop, at, evicted=hit[0], planned=planned)
                    self.planned_swaps += planned
            elif kind == "ack":
                self.ack_at, self.ack_pending = t, False
                self.acks += 1
                self.schedule_passes(t, 2 * PASS_S)
            elif kind == "bind":
                self.bind(payload, t)
            elif kind == "up":
                self.up(t)
            elif kind == "checkpointed":
                self.checkpointed(payload, t)
        if self.up_since is not None:
            self.close_segment(self.end, "end")
        # time still down at the end (a hang, a restart under way) is not accounted yet
        accounted = self.productive + sum(self.lost.values())
        gap = self.history.horizon - accounted
        if gap > 1e-6:
            if self.hang is not None:
                self.lost["detection" if self.automated else "hang_watchdog"] += gap
            else:
                self.account_restart(gap)

    @property
    def ettr(self) -> float:
        return self.productive / self.history.horizon


# -- the benchmark -----------------------------------------------------------------------


def run_regime(
    regime: Regime,
    seed: int,
    nodes: int,
    days: float,
    noise_rate: float = NOISE_PER_NODE_DAY,
    checkpoint_s: float | None = None,
    restart_s: float = RESTART_S,
    noise_to_node_health: bool = False,
    hangs: float = 1.0,
    stragglers: float = 1.0,
    watchdog_s: float = NCCL_TIMEOUT_S,
    validation: bool = False,
    returned_bad: float | None = None,
) -> dict[str, Any]:
    if returned_bad is None:
        returned_bad = RETURNED_BAD_SHARE if validation else 0.0
    history = make_history(regime, seed, nodes, days, noise_rate, hangs, stragglers, returned_bad)
    write_s = regime.checkpoint_s if checkpoint_s is None else checkpoint_s
    advice = advise(
        write_s,
        nodes=nodes,
        failures_per_1000_node_days=history.rate_per_node_day * 1000.0,
        restart_s=restart_s,
    )
    without = Run(
        history, False, WITHOUT_INTERVAL_S, write_s, seed, restart_s, watchdog_s=watchdog_s
    )
    with_ = Run(
        history,
        True,
        advice.daly_interval_s,
        write_s,
        seed,
        restart_s,
        noise_to_node_health,
        watchdog_s,
    )
    without.run()
    with_.run()
    validated: Run | None = None
    if validation:
        validated = Run(
            history,
            True,
            advice.daly_interval_s,
            write_s,
            seed,
            restart_s,
            noise_to_node_health,
            watchdog_s,
            validate=True,
        )
        validated.run()
    verdicts = [r.verdict for r in with_.restarts]
    # lemons: the restart-attributed candidates, and the nodes node-health labelled
    # (evicted lemon_remediations times, or those candidates, under its blast cap)
    for run in (with_, validated):
        if run is not None:
            run.flagged |= {
                n
                for n, obj in run.objs.items()
                if (obj["metadata"].get("labels") or {}).get(LEMON_LABEL) == "true"
            }
    flagged_true = len(with_.flagged & history.lemons)
    gpu_h = nodes * GPUS / HOUR
    remaining = sum(with_.lost.values())
    shares = {k: (v / remaining if remaining else 0.0) for k, v in with_.lost.items()}
    phases = [name for name, _ in RESTART_PHASES]

    def hang_figures(run: Run) -> dict[str, Any]:
        idle = [x for _, x in run.hang_idle]
        silent = [x for cause, x in run.hang_idle if cause == "hang"]
        return {
            "count": len(idle),
            "silent": len(silent),
            "mean_idle_min": round(sum(idle) / len(idle) / MINUTE, 2) if idle else None,
            "mean_idle_gpu_h": round(sum(idle) / len(idle) * gpu_h, 1) if idle else None,
            "silent_mean_idle_min": (
                round(sum(silent) / len(silent) / MINUTE, 2) if silent else None
            ),
        }

    out = {
        "regime": regime.name,
        "ettr_without": round(without.ettr, 4),
        "ettr_with": round(with_.ettr, 4),
        "restarts": {"without": len(without.restarts), "with": len(with_.restarts)},
        "attributed_right": verdicts.count("right"),
        "attributed_wrong": verdicts.count("wrong"),
        "unattributed": verdicts.count("unattributed"),
        "lemons_flagged": len(with_.flagged),
        "lemons_flagged_true": flagged_true,
        "lemons_true": len(history.lemons),
        "lost_hours_by_cause": {
            "without": {k: round(v / HOUR, 2) for k, v in without.lost.items()},
            "with": {k: round(v / HOUR, 2) for k, v in with_.lost.items()},
        },
        "lost_gpu_hours_by_cause": {
            "without": {k: round(v * gpu_h, 1) for k, v in without.lost.items()},
            "with": {k: round(v * gpu_h, 1) for k, v in with_.lost.items()},
        },
        "lost_gpu_hours": {
            "without": round(sum(without.lost.values()) * gpu_h, 1),
            "with": round(remaining * gpu_h, 1),
        },
        "remaining_loss_share": {k: round(v, 4) for k, v in shares.items()},
        "next_lever": max(shares, key=lambda k: shares[k]),
        "largest_restart_phase": max(phases, key=lambda k: shares[k]),
        "restart_phase_share": round(sum(shares[k] for k in phases), 4),
        "hangs": {"without": hang_figures(without), "with": hang_figures(with_)},
        "stragglers": {
            "pool": len(history.stragglers),
            "by_kind": {
                kind: sum(1 for x in history.stragglers if x.kind == kind)
                for _, kind, *_ in STRAGGLER_KINDS
            },
            "under_ratio": sum(1 for x in history.stragglers if x.factor < STALLS.straggler_ratio),
            "swapped": {"without": without.straggler_swaps, "with": with_.straggler_swaps},
        },
        "hang_restarts": with_.hang_restarts,
        "failures": {
            "hardware_on_pool": sum(1 for f in history.faults if f.source == "random"),
            "slow_burner": sum(1 for f in history.faults if f.source == "slow-burner"),
            "software": len(history.bugs),
        },
        "planned_swaps": with_.planned_swaps,
        "evictions": with_.evictions,
        "cap_held_nodes": len(with_.cap_held),
        "cap_acks": with_.acks,
        "waiting_for_nodes_h": {
            "without": round(without.waiting / HOUR, 2),
            "with": round(with_.waiting / HOUR, 2),
        },
        "interval_min": {
            "without": round(WITHOUT_INTERVAL_S / MINUTE, 1),
            "with": round(advice.daly_interval_s / MINUTE, 1),
        },
        "gang_mtbf_h": round(advice.mtbf_s / HOUR, 1),
        "nodes": nodes,
        "spares": len(history.nodes) - nodes,
        "days": days,
        "seed": seed,
        "noise_per_node_day": noise_rate,
        "checkpoint_s": write_s,
        "restart_s": restart_s,
        "noise_to_node_health": noise_to_node_health,
        "hangs_multiplier": hangs,
        "stragglers_multiplier": stragglers,
        "watchdog_min": round(watchdog_s / MINUTE, 1),
    }
    if returned_bad > 0 or validated is not None:
        runs = {"without": without, "with": with_}
        if validated is not None:
            runs["validated"] = validated
        out["returned_bad_share"] = returned_bad
        out["returned"] = {name: returned_figures(run, gpu_h) for name, run in runs.items()}
    return out


def _p90(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(0.9 * len(ordered)) - 1, 0)]


def returned_figures(run: Run, gpu_h: float) -> dict[str, Any]:
    """Issue 27's figures of one run: returns and how many were still bad, the restarts
    and evictions the relapses caused, time to repair, validations."""
    lost = sum(run.lost.values())
    return {
        "ettr": round(run.ettr, 4),
        "lost_gpu_hours": round(lost * gpu_h, 1),
        "lost_gpu_hours_by_cause": {k: round(v * gpu_h, 1) for k, v in run.lost.items()},
        "restarts": len(run.restarts),
        "returns": run.returns,
        "returns_still_bad": run.returns_bad,
        "returned_bad_share": round(run.returns_bad / run.returns, 4) if run.returns else None,
        "relapses": run.relapses,
        "relapse_restarts": run.relapse_restarts,
        "relapse_restarts_attributed": run.relapse_named,
        "relapse_evictions": run.relapse_evictions,
        "evictions": run.evictions,
        # quarantine (node-health's eviction) to back in service (its restore applied)
        "ttr_min": [round(x / MINUTE, 1) for x in run.ttr],
        # first quarantine to the return after which the node was sound
        "to_sound_min": [round(x / MINUTE, 1) for x in run.to_sound],
        "still_out": len(run.evicted_at),
        "validations": run.validations,
        "validation_fails": run.validation_fails,
        "validation_missed": run.validation_missed,
        "escalated": len(run.escalated),
        "validating_node_h": round(run.validating_s / HOUR, 2),
        "lemons_flagged": len(run.flagged) if run.automated else 0,
        "cap_held_nodes": len(run.cap_held),
        "cap_acks": run.acks,
        "waiting_for_nodes_h": round(run.waiting / HOUR, 2),
    }


def positive(kind: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{what} must be above 0, got {text}")
        return value

    return parse


def share_of(what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, got {text!r}") from None
        if not 0.0 <= value <= 1.0:
            raise argparse.ArgumentTypeError(f"{what} must be a share, 0 to 1, got {text}")
        return value

    return parse


def table(results: list[dict[str, Any]]) -> str:
    lines = []
    for r in results:
        lines.append(
            f"{r['regime']}: {r['nodes']} nodes (+{r['spares']} spares), {r['days']:g} days, "
            f"seed {r['seed']}; gang MTBF {r['gang_mtbf_h']} h (hardware), "
            f"checkpoint every {r['interval_min']['without']:g} min without, "
            f"{r['interval_min']['with']:g} min with"
        )
        lines.append(f"  {'':22} {'without':>9} {'with':>9}")
        lines.append(f"  {'ETTR':22} {r['ettr_without']:>9.3f} {r['ettr_with']:>9.3f}")
        lines.append(f"  {'restarts':22} {r['restarts']['without']:>9} {r['restarts']['with']:>9}")
        lines.append(
            f"  lost GPU-hours by cause{'':8} {'without':>9} {'with':>9} {'share (with)':>13}"
        )
        for k in CATEGORIES:
            w = r["lost_gpu_hours_by_cause"]["without"][k]
            a = r["lost_gpu_hours_by_cause"]["with"][k]
            share = r["remaining_loss_share"][k]
            lines.append(f"    {CATEGORY_WORDS[k]:29} {w:>9.0f} {a:>9.0f} {share:>12.1%}")
        lines.append(
            f"    {'total':29} {r['lost_gpu_hours']['without']:>9.0f} "
            f"{r['lost_gpu_hours']['with']:>9.0f}"
        )
        lines.append(
            f"  next lever (with): {CATEGORY_WORDS[r['next_lever']]}; restart phases "
            f"{r['restart_phase_share']:.1%} of the remaining loss, the largest "
            f"{CATEGORY_WORDS[r['largest_restart_phase']]} "
            f"({r['remaining_loss_share'][r['largest_restart_phase']]:.1%})"
        )
        hw, ha = r["hangs"]["without"], r["hangs"]["with"]

        def idle(h: dict[str, Any]) -> str:
            return "n/a" if h["mean_idle_min"] is None else f"{h['mean_idle_min']:.1f} min"

        lines.append(
            f"  hangs: {hw['count']} ({hw['silent']} silent), hung until the restart began "
            f"{idle(hw)} without, {idle(ha)} with (watchdog {r['watchdog_min']:g} min); "
            f"restarted by node-health {r['hang_restarts']}"
        )
        st = r["stragglers"]
        lines.append(
            f"  stragglers in the pool: {st['pool']} "
            f"({', '.join(f'{k} {v}' for k, v in st['by_kind'].items())}; "
            f"{st['under_ratio']} under the straggler ratio); swapped "
            f"{st['swapped']['without']} without, {st['swapped']['with']} with"
        )
        total = r["restarts"]["with"] or 1
        lines.append(
            f"  attribution (with): right {r['attributed_right']} "
            f"({100 * r['attributed_right'] / total:.0f} %), wrong {r['attributed_wrong']}, "
            f"unattributed {r['unattributed']}"
        )
        lines.append(
            f"  lemons: flagged {r['lemons_flagged']} ({r['lemons_flagged_true']} true), "
            f"true {r['lemons_true']}; planned swaps {r['planned_swaps']}; "
            f"evictions {r['evictions']}; "
            f"held by the blast cap {r['cap_held_nodes']} nodes ({r['cap_acks']} acks); "
            f"waited for nodes {r['waiting_for_nodes_h']['without']:g} h without, "
            f"{r['waiting_for_nodes_h']['with']:g} h with"
        )
        f = r["failures"]
        lines.append(
            f"  failures in the pool: {f['hardware_on_pool']} hardware, "
            f"{f['slow_burner']} slow burners, {f['software']} software"
        )
        if "returned" in r:
            lines += returned_table([r])
    return "\n".join(lines)


RUN_WORDS = {"without": "without", "with": "krea-ops", "validated": "+validation"}


def _hours(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    p90 = _p90(values) or 0.0
    return f"{sum(values) / len(values) / 60:.1f} / {p90 / 60:.1f}"


def returned_table(rs: list[dict[str, Any]]) -> list[str]:
    """Issue 27's lines over one regime's results (one seed or several): per run, what
    still-bad returns cost and what validation before return changes."""
    runs = list(rs[0]["returned"])
    width = 13
    weeks = sum(r["days"] for r in rs) / 7.0

    def row(words: str, cells: Iterable[str]) -> str:
        return f"    {words:36}" + "".join(f"{c:>{width}}" for c in cells)

    def total(name: str, key: str) -> int:
        return sum(int(r["returned"][name][key]) for r in rs)

    lines = [
        f"  still bad when returned ({rs[0]['returned_bad_share']:.0%} of repairs; issue 27):",
        row("", (RUN_WORDS[n] for n in runs)),
    ]
    ettr = {n: [r["returned"][n]["ettr"] for r in rs] for n in runs}
    lines.append(row("ETTR, mean", (f"{sum(ettr[n]) / len(ettr[n]):.3f}" for n in runs)))
    if len(rs) > 1:
        lines.append(row("ETTR, min-max", (f"{min(ettr[n]):.3f}-{max(ettr[n]):.3f}" for n in runs)))
    lines.append(
        row(
            "lost GPU-hours a week",
            (f"{sum(r['returned'][n]['lost_gpu_hours'] for r in rs) / weeks:.0f}" for n in runs),
        )
    )
    lines.append(row("restarts", (str(total(n, "restarts")) for n in runs)))
    lines.append(
        row(
            "  of them, still-bad returns (named)",
            (
                f"{total(n, 'relapse_restarts')}"
                + ("" if n == "without" else f" ({total(n, 'relapse_restarts_attributed')})")
                for n in runs
            ),
        )
    )
    lines.append(
        row("evictions of still-bad returns", (str(total(n, "relapse_evictions")) for n in runs))
    )

    def share(n: str) -> str:
        back, bad = total(n, "returns"), total(n, "returns_still_bad")
        return f"{bad}/{back} {bad / back:.1%}" if back else "n/a"

    lines.append(row("returns still bad", (share(n) for n in runs)))
    ttr = {n: [x for r in rs for x in r["returned"][n]["ttr_min"]] for n in runs}
    sound = {n: [x for r in rs for x in r["returned"][n]["to_sound_min"]] for n in runs}
    lines.append(row("time to repair, mean / p90 (h)", (_hours(ttr[n]) for n in runs)))
    lines.append(row("  to a sound return, mean / p90 (h)", (_hours(sound[n]) for n in runs)))
    lines.append(row("quarantined at the end", (str(total(n, "still_out")) for n in runs)))
    lines.append(
        row(
            "validations: failed / missed",
            (
                f"{total(n, 'validations')}: {total(n, 'validation_fails')}/"
                f"{total(n, 'validation_missed')}"
                for n in runs
            ),
        )
    )
    lines.append(row("escalated", (str(total(n, "escalated")) for n in runs)))
    lines.append(
        row(
            "node-hours validating",
            (f"{sum(r['returned'][n]['validating_node_h'] for r in rs):.1f}" for n in runs),
        )
    )
    lines.append(row("lemons flagged", (str(total(n, "lemons_flagged")) for n in runs)))
    lines.append(
        row("nodes held by the blast cap", (str(total(n, "cap_held_nodes")) for n in runs))
    )
    return lines


def summary(results: list[dict[str, Any]]) -> str:
    """Over several seeds, per regime: ETTR mean (min-max) and how many seeds reach the
    issue's goal, lost hours per week by cause, attribution and lemons summed."""
    goals = {"meta": 0.97, "krea": 0.95}
    lines = []
    for name in dict.fromkeys(r["regime"] for r in results):
        rs = [r for r in results if r["regime"] == name]
        weeks = sum(r["days"] for r in rs) / 7.0
        lines.append(
            f"{name}: {len(rs)} seeds, {rs[0]['nodes']} nodes (+{rs[0]['spares']} spares), "
            f"{rs[0]['days']:g} days each"
        )
        for run in ("without", "with"):
            ettr = [r[f"ettr_{run}"] for r in rs]
            goal = goals.get(name)
            reach = f", {sum(1 for e in ettr if e >= goal)} reach {goal}" if goal else ""
            lost = {
                k: sum(r["lost_hours_by_cause"][run][k] for r in rs) / weeks
                for k in rs[0]["lost_hours_by_cause"][run]
            }
            lost_text = ", ".join(f"{k} {v:.2f}" for k, v in sorted(lost.items()))
            lines.append(
                f"  {run:8} ETTR {sum(ettr) / len(ettr):.3f} ({min(ettr):.3f}-{max(ettr):.3f})"
                f"{reach}; restarts {sum(r['restarts'][run] for r in rs)}; "
                f"lost h/week: {lost_text}"
            )
        right = sum(r["attributed_right"] for r in rs)
        wrong = sum(r["attributed_wrong"] for r in rs)
        none = sum(r["unattributed"] for r in rs)
        total = max(right + wrong + none, 1)
        flagged = sum(r["lemons_flagged"] for r in rs)
        true = sum(r["lemons_flagged_true"] for r in rs)
        precision = f"{true / flagged:.0%}" if flagged else "n/a (none flagged)"
        lines.append(
            f"  attribution: right {right} ({right / total:.1%}), wrong {wrong} "
            f"({wrong / total:.1%}), unattributed {none}"
        )
        lines.append(
            f"  lemons: flagged {flagged}, of them true {true} (precision {precision}); "
            f"true lemons {sum(r['lemons_true'] for r in rs)}; planned swaps "
            f"{sum(r['planned_swaps'] for r in rs)}; nodes held by the blast cap "
            f"{sum(r['cap_held_nodes'] for r in rs)}"
        )
        if "returned" in rs[0]:
            lines += returned_table(rs)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--days", type=positive(float, "--days"), default=7.0)
    parser.add_argument("--nodes", type=positive(int, "--nodes"), default=128)
    parser.add_argument(
        "--noise",
        type=positive(float, "--noise"),
        default=NOISE_PER_NODE_DAY,
        help="findings that are not failures, per node-day (default 1)",
    )
    parser.add_argument(
        "--checkpoint-s",
        type=positive(float, "--checkpoint-s"),
        default=None,
        help="seconds a checkpoint write stalls the gang (default 30)",
    )
    parser.add_argument(
        "--restart-s",
        type=positive(float, "--restart-s"),
        default=RESTART_S,
        help="seconds a restart takes, pods bound to training again (default 300)",
    )
    parser.add_argument(
        "--noise-to-node-health",
        action="store_true",
        help="node-health (and its planned swaps) see the noise too, not only attribution",
    )
    parser.add_argument(
        "--hangs",
        type=positive(float, "--hangs"),
        default=1.0,
        help="silent hangs, x the Llama 3 rate (default 1)",
    )
    parser.add_argument(
        "--stragglers",
        type=positive(float, "--stragglers"),
        default=1.0,
        help="stragglers, x the assumed rate (default 1)",
    )
    parser.add_argument(
        "--watchdog-min",
        type=positive(float, "--watchdog-min"),
        default=NCCL_TIMEOUT_S / MINUTE,
        help="NCCL's watchdog timeout in minutes (default 10; many set 30)",
    )
    parser.add_argument(
        "--validation",
        action="store_true",
        help="issue 27: repairs leave some nodes still bad, and a third run validates "
        "each node before node-health's restore",
    )
    parser.add_argument(
        "--returned-bad",
        type=share_of("--returned-bad"),
        default=None,
        help=f"share of repairs that leave the node still bad (default 0, "
        f"{RETURNED_BAD_SHARE:g} with --validation)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per regime")
    parser.add_argument(
        "--seeds",
        type=positive(int, "--seeds"),
        default=None,
        help="run seeds 0..N-1 and print the summary over them (with --json: one object "
        "per regime and seed)",
    )

    def one_line(message: str) -> NoReturn:
        print(f"bench_goodput.py: {message}", file=sys.stderr)
        raise SystemExit(2)

    parser.error = one_line  # type: ignore[method-assign,assignment]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    started = time.perf_counter()
    seeds = list(range(args.seeds)) if args.seeds else [args.seed]
    results = [
        run_regime(
            r,
            seed,
            args.nodes,
            args.days,
            args.noise,
            args.checkpoint_s,
            args.restart_s,
            args.noise_to_node_health,
            args.hangs,
            args.stragglers,
            args.watchdog_min * MINUTE,
            args.validation,
            args.returned_bad,
        )
        for seed in seeds
        for r in REGIMES
    ]
    if args.seeds and not args.json:
        print(summary(results))
        print(f"({time.perf_counter() - started:.1f} s)")
        return 0
    if args.json:
        for r in results:
            print(json.dumps(r, sort_keys=True))
    else:
        print(table(results))
        print(f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
