"""How often a training should checkpoint, and what failures cost at a given interval.

Inputs: the checkpoint cost C (seconds the training stalls to save), the mean time between
failures M of the whole gang (given, or from the node count and a failure rate: Kokolis et
al. measured 6.5 failures per 1,000 node-days on RSC-1, so ``M = 24,000 h / (nodes x
rate)``), and optionally the restart time R (detection + rescheduling + loading).

Formulas (shared/research/reliability.md §2):

- Young (1974): ``T = sqrt(2 C M)``.
- Daly (2006), higher order, for compute time between checkpoints:
  ``tau = sqrt(2 C M) [1 + 1/3 sqrt(C / 2M) + 1/9 (C / 2M)] - C`` when ``C < 2M``, else
  ``tau = M``. The recommended interval is Daly's.
- Lost work per failure, the model used here: a failure lands uniformly inside one
  interval of T compute plus C saving, so on average ``(T + C) / 2`` of work is redone,
  plus the restart time R. (Detection time, e.g. an NCCL watchdog timeout on a hang, is
  part of R if the caller counts it.)
- Waste ratio, first order: ``C/T`` spent saving plus ``(T + C) / 2M + R/M`` lost to
  failures (the research note's table: C = 30 s, M = 8 h gives 4.6% at 21.9 min, 7.1% at
  60 min), capped at 1.
- Waste ratio, Daly's model for exponentially distributed failures: expected wall time
  ``M e^(R/M) (e^((T + C)/M) - 1)`` per ``T`` of useful compute, so
  ``waste = 1 - T / (M e^(R/M) (e^((T + C)/M) - 1))``.

Worked example (C = 30 s, M = 8 h): Young 21.9 min, Daly 21.6 min. Both formulas assume
failures arrive as a Poisson process; lemon nodes and failure bursts break that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from krea_ops.errors import BadInput

DEFAULT_FAILURES_PER_1000_NODE_DAYS = 6.5


@dataclass(frozen=True)
class IntervalCost:
    """What failures and saves cost when checkpointing every ``interval_s`` of compute."""

    interval_s: float
    lost_s_per_failure: float
    waste_ratio: float  # first order
    waste_ratio_daly: float


@dataclass(frozen=True)
class Advice:
    """The advice for one training. ``mtbf_source`` is ``"given"`` or ``"nodes"``;
    ``nodes`` and ``failures_per_1000_node_days`` are None when the MTBF was given."""

    checkpoint_s: float
    mtbf_s: float
    mtbf_source: str
    nodes: int | None
    failures_per_1000_node_days: float | None
    restart_s: float
    failures_per_day: float
    young_interval_s: float
    daly_interval_s: float
    recommended: IntervalCost
    current: IntervalCost | None


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's optimum interval ``sqrt(2 C M)``."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints."""
    c, m = checkpoint_s, mtbf_s
    if c >= 2.0 * m:
        return m
    x = c / (2.0 * m)
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - c


def mtbf_hours_from_nodes(
    nodes: int, failures_per_1000_node_days: float = DEFAULT_FAILURES_PER_1000_NODE_DAYS
) -> float:
    """The gang's MTBF when each node fails at the given rate: ``24,000 / (nodes x rate)``."""
    return 24.0 * 1000.0 / (nodes * failures_per_1000_node_days)


def interval_cost(
    interval_s: float, checkpoint_s: float, mtbf_s: float, restart_s: float = 0.0
) -> IntervalCost:
    """Lost work per failure and the waste ratios (first order and Daly) at an interval."""
    t, c, m, r = interval_s, checkpoint_s, mtbf_s, restart_s
    first_order = min(c / t + (t + c) / (2.0 * m) + r / m, 1.0)
    try:
        wall_per_interval = m * math.exp(r / m) * math.expm1((t + c) / m)
        daly = 1.0 - t / wall_per_interval
    except OverflowError:
        daly = 1.0
    return IntervalCost(
        interval_s=t,
        lost_s_per_failure=(t + c) / 2.0 + r,
        waste_ratio=first_order,
        waste_ratio_daly=daly,
    )


def _positive(value: float, what: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise BadInput(f"{what} must be a positive number, got {value:g}")
    return float(value)


def advise(
    checkpoint_s: float,
    *,
    mtbf_hours: float | None = None,
    nodes: int | None = None,
    failures_per_1000_node_days: float | None = None,
    restart_s: float = 0.0,
    current_interval_s: float | None = None,
) -> Advice:
    """Young and Daly intervals, lost work and waste for one training.

    Exactly one of ``mtbf_hours`` and ``nodes`` is given; the failure rate applies only
    with ``nodes`` (default 6.5 per 1,000 node-days). Raises ``BadInput`` for zero,
    negative or non-finite numbers and for both or neither of ``mtbf_hours``/``nodes``."""
    c = _positive(checkpoint_s, "--checkpoint-seconds")
    if (mtbf_hours is None) == (nodes is None):
        raise BadInput("give exactly one of --mtbf-hours and --nodes")
    if not math.isfinite(restart_s) or restart_s < 0:
        raise BadInput(f"--restart-minutes must be zero or more, got {restart_s / 60:g}")
    current = (
        None
        if current_interval_s is None
        else _positive(current_interval_s, "--current-interval-minutes")
    )
    if nodes is not None:
        if nodes < 1:
            raise BadInput(f"--nodes must be at least 1, got {nodes}")
        rate = _positive(
            DEFAULT_FAILURES_PER_1000_NODE_DAYS
            if failures_per_1000_node_days is None
            else failures_per_1000_node_days,
            "--failures-per-1000-node-days",
        )
        hours = mtbf_hours_from_nodes(nodes, rate)
        source = "nodes"
    else:
        if failures_per_1000_node_days is not None:
            raise BadInput("--failures-per-1000-node-days applies only with --nodes")
        assert mtbf_hours is not None  # exactly one of the two was checked above
        hours, rate, source = _positive(mtbf_hours, "--mtbf-hours"), None, "given"
    m = hours * 3600.0
    daly = daly_interval_s(c, m)
    return Advice(
        checkpoint_s=c,
        mtbf_s=m,
        mtbf_source=source,
        nodes=nodes,
        failures_per_1000_node_days=rate,
        restart_s=float(restart_s),
        failures_per_day=24.0 / hours,
        young_interval_s=young_interval_s(c, m),
        daly_interval_s=daly,
        recommended=interval_cost(daly, c, m, restart_s),
        current=None if current is None else interval_cost(current, c, m, restart_s),
    )


__all__ = [
    "DEFAULT_FAILURES_PER_1000_NODE_DAYS",
    "Advice",
    "IntervalCost",
    "advise",
    "daly_interval_s",
    "interval_cost",
    "mtbf_hours_from_nodes",
    "young_interval_s",
]
