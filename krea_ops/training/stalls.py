"""Silent failures of a running gang: HUNG and STRAGGLER (pure).

A gang can stop making progress while every pod is Running and every GPU reads 100 %
busy: an NCCL collective that never completes spins its kernels (busy, no tensor work)
until torch's watchdog ends the job (``TORCH_NCCL_...`` timeout, 10 minutes by default,
often set to 30). And a gang can run slowly because one GPU does: a power brake or a
hardware slowdown holds its clocks down, every other rank waits for it at each
collective. ``judge`` reads a run's progress (``training.progress``, from rank 0's log),
its GPUs' readings and its nodes' verdicts and says which, with the evidence.

States, worst first:

``HUNG``
    no new step for ``max(hang_floor_s, hang_steps x step time)`` (the step time: the
    baseline, else the step time last seen), every pod Running, and the gang's GPUs busy
    (mean busy time at least ``hang_busy_min``) with little tensor activity (mean at most
    ``hang_tensor_max``). Names the likely node where one of the gang's nodes shows a
    finding (NotReady, an InfiniBand flap, an XID, NVLink errors): BAD first, then
    SUSPECT.
``STALLED``
    no new step as long, but the GPUs are not spinning (idle, or not read): stuck
    outside the collectives (I/O, the data loader, the host). Reported, not acted on.
``STRAGGLER``
    the step time now at least ``straggler_ratio`` x the baseline, and one GPU stands
    out from the rest of the gang (``standouts``): a busy GPU's SM clock under
    ``clock_ratio`` x its maximum (or the gang's median) while the others run at theirs,
    with the clock event reason that holds it; a GPU ``hot_margin_c`` or more above the
    gang's median temperature; a node whose InfiniBand or NVLink shows errors. Names that
    node and GPU. Or, whatever the step time says (a straggler already in the gang when
    the attempt began sets the baseline itself), a GPU whose clocks stand out that the
    rest visibly wait for: its tensor activity at least ``wait_ratio`` x the others'
    median (they sit in the collectives while it computes).
``SLOW``
    as slow, and no GPU stands out: the whole gang is slower (the data loader, a slower
    phase of the run), not a straggler. Reported, not acted on.
``STARTING``
    within ``grace_s`` of the attempt's start (a start or resume compiles, loads a
    checkpoint and warms up): not judged.
``RUNNING``
    steps arrive at the run's pace.
``UNKNOWN``
    no step read yet (the log cannot be read, or says nothing yet).
``PENDING``
    not every pod of the attempt is Running (admission, a restart under way).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from krea_ops.model import GpuSample, Reason, Severity, Verdict
from krea_ops.settings import Settings
from krea_ops.training.progress import Progress

HUNG, STALLED, STRAGGLER, SLOW = "HUNG", "STALLED", "STRAGGLER", "SLOW"
STARTING, RUNNING, UNKNOWN, PENDING = "STARTING", "RUNNING", "UNKNOWN", "PENDING"
STATES = (HUNG, STALLED, STRAGGLER, SLOW, STARTING, RUNNING, UNKNOWN, PENDING)
PROGRESSING = frozenset({STRAGGLER, SLOW, STARTING, RUNNING})  # steps arrive

# clock event reasons that hold a busy GPU's clocks down (not gpu_idle, not the
# applications-clocks or display settings an operator chose)
HOLDING = ("hw_power_brake", "hw_slowdown", "hw_thermal", "sw_thermal", "sw_power_cap")
# node findings that make a node the likely cause of a hang
_FABRIC_PREFIXES = ("ib_", "nvlink", "xid", "gpu_lost", "node_not_ready")


@dataclass(frozen=True)
class StallConfig:
    """Thresholds (settings ``training_*`` and ``node_health_hang_restart_after_s``,
    docs/operations.md "Hung and straggling runs")."""

    grace_s: float = 300.0
    hang_floor_s: float = 180.0
    hang_steps: float = 10.0
    hang_busy_min: float = 0.9
    hang_tensor_max: float = 0.1
    hang_restart_after_s: float = 60.0
    straggler_ratio: float = 1.1
    wait_ratio: float = 1.25
    clock_ratio: float = 0.9
    hot_margin_c: float = 8.0
    recent_s: float = 120.0
    window_s: float = 1800.0

    def hang_after(self, step_time_s: float | None) -> float:
        """Seconds without a step after which a run is HUNG (or STALLED)."""
        return max(self.hang_floor_s, self.hang_steps * (step_time_s or 0.0))

    @staticmethod
    def from_settings(settings: Settings) -> StallConfig:
        return StallConfig(
            grace_s=settings.training_grace_s,
            hang_floor_s=settings.training_hang_floor_s,
            hang_steps=settings.training_hang_steps,
            hang_busy_min=settings.training_hang_busy_min,
            hang_tensor_max=settings.training_hang_tensor_max,
            hang_restart_after_s=settings.node_health_hang_restart_after_s,
            straggler_ratio=settings.training_straggler_ratio,
            wait_ratio=settings.training_wait_ratio,
            clock_ratio=settings.training_clock_ratio,
            hot_margin_c=settings.training_hot_margin_c,
            recent_s=settings.training_recent_s,
            window_s=settings.training_baseline_window_s,
        )

    @staticmethod
    def from_mapping(values: Mapping[str, Any] | None) -> StallConfig:
        """From ``{field: number}`` (unknown keys are an error, as settings are)."""
        base = StallConfig()
        out: dict[str, float] = {}
        for key, value in (values or {}).items():
            if not hasattr(base, key):
                raise ValueError(f"unknown training stall setting {key!r}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"training stall setting {key}: expected a number >= 0")
            out[key] = float(value)
        return StallConfig(**{**base.__dict__, **out})


@dataclass(frozen=True)
class Standout:
    """One GPU (or node, ``gpu`` None) that differs from the rest of its gang."""

    node: str
    gpu: int | None
    kind: str  # clock | temperature | fabric | tensor
    message: str
    strength: float  # how far it stands out: ranks standouts, larger first


@dataclass(frozen=True)
class GpuRow:
    """A GPU of the gang as ``train status`` shows it."""

    node: str
    index: int
    busy: float | None
    tensor: float | None
    sm_clock_mhz: float | None
    sm_clock_max_mhz: float | None
    temperature_c: float | None
    events: tuple[str, ...]


@dataclass(frozen=True)
class RunJudgement:
    state: str
    reasons: tuple[str, ...]
    node: str | None = None  # the likely or standing-out node
    gpu: int | None = None
    standouts: tuple[Standout, ...] = ()
    busy: float | None = None  # the gang's mean busy time
    tensor: float | None = None  # and tensor activity
    gpus: tuple[GpuRow, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reasons": list(self.reasons),
            "node": self.node,
            "gpu": self.gpu,
            "standouts": [
                {"node": s.node, "gpu": s.gpu, "kind": s.kind, "message": s.message}
                for s in self.standouts
            ],
            "busy": self.busy,
            "tensor": self.tensor,
        }


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def _median(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def span(seconds: float) -> str:
    """A run's times as its reasons, ``train status`` and a restart's anatomy say them:
    ``4.5 s``, ``45 s``, ``3 min``, ``2.5 h``."""
    if seconds >= 7200:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def gpu_rows(gpus: Mapping[str, Sequence[GpuSample]]) -> tuple[GpuRow, ...]:
    rows = []
    for node in sorted(gpus):
        for g in sorted(gpus[node], key=lambda g: g.index):
            rows.append(
                GpuRow(
                    node,
                    g.index,
                    g.util_ratio,
                    g.tensor_active_ratio,
                    None if g.sm_clock_hz is None else g.sm_clock_hz / 1e6,
                    None if g.sm_clock_max_hz is None else g.sm_clock_max_hz / 1e6,
                    g.temperature_c,
                    tuple(sorted(g.clock_events or ())),
                )
            )
    return tuple(rows)


def standouts(
    gpus: Mapping[str, Sequence[GpuSample]],
    verdicts: Mapping[str, Verdict],
    cfg: StallConfig,
) -> list[Standout]:
    """The GPUs and nodes of a gang that differ from the rest, strongest first."""
    rows = gpu_rows(gpus)
    busy = [r for r in rows if (r.busy or 0.0) >= 0.5]
    out: list[Standout] = []
    clocks = _median([r.sm_clock_mhz for r in busy])
    temps = _median([r.temperature_c for r in busy])
    tensors = _median([r.tensor for r in busy])
    for r in busy:
        top = r.sm_clock_max_mhz or clocks
        if r.sm_clock_mhz is not None and top and clocks:
            share = r.sm_clock_mhz / top
            held = [e for e in r.events if e in HOLDING]
            if share < cfg.clock_ratio and r.sm_clock_mhz < cfg.clock_ratio * clocks:
                why = f" ({', '.join(held)})" if held else ""
                out.append(
                    Standout(
                        r.node,
                        r.index,
                        "clock",
                        f"GPU {r.index} SM clock {r.sm_clock_mhz:.0f} of {top:.0f} MHz{why}, "
                        f"the gang's median {clocks:.0f} MHz",
                        3.0 + (1.0 - share),
                    )
                )
                continue
        if r.temperature_c is not None and temps is not None:
            above = r.temperature_c - temps
            if above >= cfg.hot_margin_c:
                out.append(
                    Standout(
                        r.node,
                        r.index,
                        "temperature",
                        f"GPU {r.index} at {r.temperature_c:.0f} °C, {above:.0f} °C above the "
                        f"gang's median",
                        2.0 + above / 100.0,
                    )
                )
                continue
        # the one rank not waiting at the collectives: the others wait for it
        if (
            r.tensor is not None
            and tensors
            and len(busy) >= 4
            and r.tensor >= 1.5 * tensors
            and r.tensor - tensors >= 0.1
        ):
            out.append(
                Standout(
                    r.node,
                    r.index,
                    "tensor",
                    f"GPU {r.index} tensor activity {r.tensor:.2f}, the gang's median "
                    f"{tensors:.2f}: the others wait for it",
                    1.0 + r.tensor - tensors,
                )
            )
    for node in sorted(gpus):
        verdict = verdicts.get(node)
        for reason in verdict.reasons if verdict is not None else ():
            if reason.severity in (Severity.SUSPECT, Severity.BAD) and reason.code.startswith(
                ("ib_", "nvlink")
            ):
                out.append(Standout(node, reason.gpu, "fabric", reason.message, 1.5))
                break
    return sorted(out, key=lambda s: (-s.strength, s.node, -1 if s.gpu is None else s.gpu))


def likely_node(nodes: Sequence[str], verdicts: Mapping[str, Verdict]) -> tuple[str, Reason] | None:
    """The gang's node with a finding that could stall a collective (BAD before
    SUSPECT, then by name), and that finding."""
    found: list[tuple[int, str, Reason]] = []
    for node in nodes:
        verdict = verdicts.get(node)
        for reason in verdict.reasons if verdict is not None else ():
            if reason.severity in (Severity.SUSPECT, Severity.BAD) and (
                reason.code.startswith(_FABRIC_PREFIXES) or reason.severity is Severity.BAD
            ):
                found.append((-int(reason.severity), node, reason))
                break
    if not found:
        return None
    _, node, reason = min(found, key=lambda x: (x[0], x[1]))
    return node, reason


def judge(
    running: bool,
    prog: Progress,
    gpus: Mapping[str, Sequence[GpuSample]],
    verdicts: Mapping[str, Verdict],
    now: float,
    cfg: StallConfig | None = None,
    nodes: Sequence[str] = (),
) -> RunJudgement:
    """The run's state at ``now`` (module docstring). ``gpus``: the readings of the
    gang's GPUs by node (empty: not read); ``nodes``: the gang's nodes (default: those
    of ``gpus``)."""
    cfg = cfg or StallConfig()
    rows = gpu_rows(gpus)
    busy = _mean([r.busy for r in rows])
    tensor = _mean([r.tensor for r in rows])
    members = list(nodes) or sorted(gpus)

    def out(state: str, reasons: list[str], **kw: Any) -> RunJudgement:
        return RunJudgement(state, tuple(reasons), busy=busy, tensor=tensor, gpus=rows, **kw)

    if not running:
        return out(PENDING, ["not every pod of the attempt is Running"])
    if prog.last_step_at is None:
        return out(UNKNOWN, ["rank 0 has logged no step yet"])
    since = prog.since_start(now)
    age = prog.age(now) or 0.0
    if since is not None and since < cfg.grace_s:
        return out(
            STARTING,
            [f"started {span(since)} ago: not judged for its first {span(cfg.grace_s)}"],
        )
    pace = prog.baseline_s or prog.step_time_s
    limit = cfg.hang_after(pace)
    if age >= limit:
        said = f"no step since {prog.last_step} for {span(age)}"
        if pace:
            said += f" (step time {pace:.2f} s: {age / pace:.0f} steps' time)"
        spinning = (
            busy is not None
            and tensor is not None
            and busy >= cfg.hang_busy_min
            and tensor <= cfg.hang_tensor_max
        )
        if not spinning:
            seen = (
                "its GPUs were not read"
                if busy is None
                else f"its GPUs {busy:.0%} busy, tensor activity {tensor or 0:.2f}: not "
                "spinning in a collective"
            )
            return out(STALLED, [said, seen])
        reasons = [
            said,
            f"every GPU busy ({busy:.0%}) with tensor activity {tensor:.2f}: a collective "
            "that does not complete",
        ]
        cause = likely_node(members, verdicts)
        if cause is None:
            reasons.append("no node of the gang shows a finding")
            return out(HUNG, reasons)
        node, reason = cause
        reasons.append(f"likely {node}: {reason.message}")
        return out(HUNG, reasons, node=node, gpu=reason.gpu)
    ratio = prog.ratio
    found = standouts(gpus, verdicts, cfg)
    if ratio is not None and ratio >= cfg.straggler_ratio:
        slow = (
            f"step time {prog.step_time_s:.2f} s, {ratio:.2f}x the run's baseline "
            f"{prog.baseline_s:.2f} s"
        )
        if found:
            top = found[0]
            return out(
                STRAGGLER,
                [slow, f"{top.node}: {top.message}"],
                node=top.node,
                gpu=top.gpu,
                standouts=tuple(found),
            )
        return out(
            SLOW,
            [
                slow,
                "no node or GPU stands out: the whole gang is slower (input, a slower "
                "phase), not a straggler",
            ],
        )
    reasons = [f"step {prog.last_step}, {span(age)} ago"]
    if prog.step_time_s is not None:
        reasons.append(
            f"step time {prog.step_time_s:.2f} s"
            + (f" ({ratio:.2f}x the baseline)" if ratio is not None else "")
        )
    led = waited_for(found, rows, cfg)
    if led is not None:
        # no step-time evidence (the baseline was taken with the straggler in the gang:
        # it joined at a restart), but the gang shows it waits for that GPU
        top, said = led
        return out(
            STRAGGLER,
            [*reasons, f"{top.node}: {top.message}", said],
            node=top.node,
            gpu=top.gpu,
            standouts=tuple(found),
        )
    return out(RUNNING, reasons, standouts=tuple(found))


def waited_for(
    found: Sequence[Standout], rows: Sequence[GpuRow], cfg: StallConfig
) -> tuple[Standout, str] | None:
    """A GPU whose clocks are held down and that the rest of its gang visibly waits for:
    its tensor activity at least ``wait_ratio`` x the others' median (they sit in the
    collectives while it computes). A synchronous gang runs at its slowest rank's pace,
    so that is a straggler whatever the run's own step-time history says."""
    for top in found:
        if top.kind != "clock" or top.gpu is None:
            continue
        mine = next((r for r in rows if (r.node, r.index) == (top.node, top.gpu)), None)
        others = [
            r.tensor
            for r in rows
            if (r.node, r.index) != (top.node, top.gpu) and (r.busy or 0.0) >= 0.5
        ]
        median = _median(others)
        if mine is None or mine.tensor is None or not median or len(others) < 3:
            continue
        if mine.tensor >= cfg.wait_ratio * median:
            return top, (
                f"its tensor activity {mine.tensor:.2f} against the rest of the gang's "
                f"{median:.2f}: they wait for it"
            )
    return None
