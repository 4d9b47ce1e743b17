"""Typed messages from the dashboard's worker threads to the UI thread: one per kind of
data the console reads, each carrying the core's snapshot as it is."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual.message import Message

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from krea_ops.burst.status import BurstStatus
    from krea_ops.console import FleetScope, NodeDetail, QueueReading
    from krea_ops.controllers.restarts import RunRestarts
    from krea_ops.fleet import FleetSnapshot
    from krea_ops.gangstatus import GangStatus
    from krea_ops.queue import WhyReport
    from krea_ops.runbook.execute import RunResult
    from krea_ops.runbook.plan import Plan
    from krea_ops.training.runs import TrainingRun
    from krea_ops.validation import Validation

    AfterRun = Callable[[Plan], None]


class Loaded(Message):
    """A read finished. ``key`` names what was read (``fleet``, ``node:NAME``, ``queue``,
    ``burst``, ``training``): the app keeps the latest of each key and hands it to the
    screens that show it. ``took_s`` and ``at`` are set by the worker that read it."""

    KIND: ClassVar[str]

    def __init__(self) -> None:
        super().__init__()
        self.took_s = 0.0
        self.at = 0.0
        # what the screens' preparers derived from it on the worker (DataScreen.preparer)
        self.prepared: dict[object, object] = {}

    @property
    def key(self) -> str:
        return self.KIND


class FleetLoaded(Loaded):
    KIND = "fleet"

    def __init__(self, snapshot: FleetSnapshot, scope: FleetScope) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.scope = scope  # what was read: a screen that needs more waits for the next


class NodeLoaded(Loaded):
    KIND = "node"

    def __init__(self, detail: NodeDetail) -> None:
        super().__init__()
        self.detail = detail

    @property
    def key(self) -> str:
        return node_key(self.detail.view.info.name)


class QueueLoaded(Loaded):
    KIND = "queue"

    def __init__(self, reading: QueueReading) -> None:
        super().__init__()
        self.reading = reading


class BurstLoaded(Loaded):
    KIND = "burst"

    def __init__(self, status: BurstStatus) -> None:
        super().__init__()
        self.status = status


class TrainingLoaded(Loaded):
    """The runs, their restarts as node-health recorded them (``restarts_error``: why
    those could not be read; the runs still show), and their statuses (``train status``:
    progress and HUNG / STRAGGLER / ...; ``statuses_error`` likewise)."""

    KIND = "training"

    def __init__(
        self,
        runs: tuple[TrainingRun, ...],
        restarts: Mapping[str, RunRestarts] | None = None,
        restarts_error: str | None = None,
        statuses: Mapping[str, GangStatus] | None = None,
        statuses_error: str | None = None,
    ) -> None:
        super().__init__()
        self.runs = runs
        self.restarts = dict(restarts or {})
        self.restarts_error = restarts_error
        self.statuses = dict(statuses or {})
        self.statuses_error = statuses_error


class ControllersLoaded(Loaded):
    """The bundled controllers' status (``controller status``), for the header."""

    KIND = "controllers"

    def __init__(self, rows: list[dict[str, object]]) -> None:
        super().__init__()
        self.rows = rows


class DataFailed(Message):
    """A read of ``key`` failed with a one-line ``error``."""

    def __init__(self, key: str, error: str, at: float) -> None:
        super().__init__()
        self.key = key
        self.error = error
        self.at = at


class WhyLoaded(Message):
    """The queue screen's ``why`` of the workload ``key`` (``namespace/name``)."""

    def __init__(self, key: str, report: WhyReport) -> None:
        super().__init__()
        self.key = key
        self.report = report


class WhyFailed(Message):
    def __init__(self, key: str, error: str) -> None:
        super().__init__()
        self.key = key
        self.error = error


class PlanReady(Message):
    """An action's plan, built on a worker from the cluster as it is now: the app shows it
    in the confirm dialog. ``title``: what the operator asked for (``evict gpu-node-003``);
    ``then``: what follows once it ran (or had nothing to do), on the UI thread."""

    def __init__(self, title: str, plan: Plan, then: AfterRun | None = None) -> None:
        super().__init__()
        self.title = title
        self.plan = plan
        self.then = then


class ActionDone(Message):
    """The executor ran a plan the operator confirmed; ``result`` has each step's outcome."""

    def __init__(self, title: str, result: RunResult, then: AfterRun | None = None) -> None:
        super().__init__()
        self.title = title
        self.result = result
        self.then = then


class ValidationSeen(Message):
    """One look at the validation Jobs the dashboard waits for: the results that came
    (already recorded on their nodes) and what each Job still running is doing (its pod's
    phase); ``ended``: the wait is over (all came, or the timeout, or the app is closing)."""

    def __init__(
        self,
        done: Mapping[str, Validation],
        running: Mapping[str, str],
        *,
        ended: bool = False,
    ) -> None:
        super().__init__()
        self.done = dict(done)
        self.running = dict(running)
        self.ended = ended


class ValidationWaitFailed(Message):
    """Waiting for the validation Jobs of ``nodes`` stopped with a one-line ``error``."""

    def __init__(self, nodes: tuple[str, ...], error: str) -> None:
        super().__init__()
        self.nodes = nodes
        self.error = error


class ActionFailed(Message):
    """Planning or running an action stopped with a one-line ``error`` (bad input, the
    API server gone, RBAC)."""

    def __init__(self, title: str, error: str) -> None:
        super().__init__()
        self.title = title
        self.error = error


def node_key(name: str) -> str:
    """The data key of one node's detailed read."""
    return f"node:{name}"
