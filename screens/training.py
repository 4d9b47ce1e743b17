"""Training screen: the DiT runs, the checkpoints of the selected one, and how often it
should checkpoint.

Top: one row per training JobSet (state, progress as ``krea-ops train status`` judges it:
RUNNING, SLOW, STRAGGLER, HUNG... with the step time against the run's baseline, nodes x
GPUs, restarts of the maximum, queue, the newest complete checkpoint and its age). Below,
for the run under the cursor: its status (``gangstatus.summary_lines``: the last step and
its age, step time, its GPUs, why, what stands out), its checkpoints on disk, newest
first, each complete or with the reason it is not (or why none can be read: the directory
is not mounted here), and the advice: Young's and Daly's intervals, the work lost per
failure, the waste, and the MTBF they assume; then its restarts as node-health recorded
them (``krea-ops train restarts``): when, the work lost, the node/GPU/port each is
attributed to and how sure, the evidence of the newest and its phases (detection,
teardown, scheduling, start, first step; the slowest named).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.widgets import DataTable, Input, Static

from krea_ops import units
from krea_ops.controllers.restarts import RestartRow, RunRestarts, anatomy_text
from krea_ops.gangstatus import GangStatus, summary_lines
from krea_ops.training.advice import Advice
from krea_ops.training.checkpoints import Checkpoint
from krea_ops.training.runs import TrainingRun
from screens.base import DataScreen
from screens.messages import Loaded, TrainingLoaded
from screens.text import sync_table, table_cursor_key

STATE_STYLE = {
    "Running": "green",
    "Restarting": "yellow",
    "Suspended": "dim",
    "Completed": "cyan",
    "Failed": "bold red",
}
RUN_COLUMNS = (
    ("RUN", "run"),
    ("STATE", "state"),
    ("PROGRESS", "progress"),
    ("NODESxGPU", "shape"),
    ("RESTARTS", "restarts"),
    ("QUEUE", "queue"),
    ("CHECKPOINT", "step"),
    ("CKPT AGE", "ckpt_age"),
)
RESTART_COLUMNS = (
    ("#", "number"),
    ("WHEN", "when"),
    ("LOST", "lost"),
    ("ATTRIBUTED TO", "target"),
    ("CAUSE", "cause"),
    ("CONF", "confidence"),
)
CHECKPOINT_COLUMNS = (
    ("CHECKPOINT", "name"),
    ("STEP", "step"),
    ("WRITTEN", "written"),
    ("SIZE", "size"),
    ("STATUS", "status"),
)


def run_key(run: TrainingRun) -> str:
    return f"{run.namespace}/{run.name}"


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)


PROGRESS_STYLE = {
    "HUNG": "bold red",
    "STALLED": "red",
    "STRAGGLER": "bold yellow",
    "SLOW": "yellow",
    "RUNNING": "green",
    "STARTING": "dim",
    "PENDING": "dim",
    "UNKNOWN": "magenta",
}


def progress_cell(status: GangStatus | None) -> Text:
    """The run's state as ``train status`` judges it, with its step time against its
    baseline where known."""
    if status is None:
        return Text("-", style="dim")
    state = status.judgement.state
    out = Text(state, style=PROGRESS_STYLE.get(state, ""))
    ratio = status.progress.ratio
    if ratio is not None and state not in ("HUNG", "STALLED"):
        out.append(f" {ratio:.2f}x", style="dim")
    return out


def run_cells(run: TrainingRun, now: float, status: GangStatus | None = None) -> tuple[Any, ...]:
    latest = run.latest_complete
    if run.checkpoints is None:
        step: Any = Text("unknown", style="magenta")
        ckpt_age = "-"
    elif latest is None:
        step = Text("none yet", style="dim")
        ckpt_age = "-"
    else:
        step = "-" if latest.step is None else f"{latest.step:,}"
        ckpt_age = units.since(latest.mtime, now)
    restarts = Text(f"{_n(run.restarts)}/{_n(run.max_restarts)}")
    if run.restarts and run.max_restarts and run.restarts >= run.max_restarts:
        restarts.stylize("bold red")
    return (
        run_key(run),
        Text(run.state, style=STATE_STYLE.get(run.state, "")),
        progress_cell(status),
        f"{_n(run.nodes)}x{_n(run.gpus_per_node)}",
        restarts,
        run.queue or "-",
        step,
        ckpt_age,
    )


def restart_cells(row: RestartRow, now: float) -> tuple[Any, ...]:
    a = row.attribution
    floor = "≥" if row.lost_at_least else ""
    lost = "?" if row.lost_steps is None else f"{floor}{row.lost_steps:,} steps"
    if row.lost_gpu_hours is not None:
        lost += f", {row.lost_gpu_hours:,.1f} GPU-h"
    if a is None:
        target = Text("window open", style="dim")
    elif row.provisional:
        left = units.duration(row.attributed_at - now) if row.attributed_at is not None else "?"
        target = Text(f"{a.target} (provisional, final in {left})", style="dim italic")
    elif a.attributed:
        target = Text(a.target, style="bold")
    else:
        target = Text(a.target, style="magenta" if a.cause == "systemic" else "dim")
    return (
        str(row.number),
        units.since(row.at, now) + ("" if row.at_exact else " ~"),
        lost,
        target,
        a.cause if a is not None else "-",
        f"{a.confidence:.2f}" if a is not None and a.attributed else "-",
    )


def restarts_title(got: RunRestarts | None, error: str | None) -> Text:
    if error is not None:
        return Text(f"restarts unknown: {error}", style="magenta")
    if got is None or not got.recorded:
        return Text(
            "restarts: nothing recorded (node-health records and attributes them)", style="dim"
        )
    text = f"Restarts of {got.namespace}/{got.name}: {len(got.rows)} recorded"
    if got.unrecorded:
        text += f", {got.unrecorded} before node-health saw the run"
    return Text(text)


def checkpoint_name(cp: Checkpoint, run: TrainingRun) -> str:
    """The checkpoint's directory relative to the run's, e.g. ``step-1200``."""
    if run.local_dir is not None:
        try:
            rel = cp.path.relative_to(run.local_dir)
        except ValueError:
            return str(cp.path)
        return str(rel) if str(rel) != "." else cp.path.name
    return cp.path.name


def checkpoint_cells(cp: Checkpoint, run: TrainingRun, now: float) -> tuple[Any, ...]:
    if cp.complete:
        status = Text("complete", style="green")
        if cp.tracker:
            status.append(" (tracker)", style="dim")
        if cp.note:
            status.append(f"; {cp.note}", style="dim")
    else:
        status = Text(f"incomplete: {cp.reason or 'no reason given'}", style="red")
    written = "-"
    if cp.mtime is not None:
        clock = time.strftime("%H:%M:%S", time.localtime(cp.mtime))
        written = f"{clock} ({units.since(cp.mtime, now)} ago)"
    return (
        checkpoint_name(cp, run),
        "-" if cp.step is None else f"{cp.step:,}",
        written,
        units.size(cp.size_bytes),
        status,
    )


def advice_text(advice: Advice | None, run: TrainingRun) -> Text:
    out = Text()
    out.append("Checkpoint interval advice", style="bold")
    if advice is None:
        out.append(f"  unknown: the size of {run_key(run)} is not known", style="dim")
        return out
    if advice.mtbf_source == "nodes":
        source = (
            f"{advice.nodes} nodes x {advice.failures_per_1000_node_days:g} failures per "
            "1,000 node-days"
        )
    else:
        source = "given"
    rec = advice.recommended
    out.append("\nevery ")
    out.append(units.duration(advice.daly_interval_s), style="bold")
    out.append(f" of compute (Daly; Young {units.duration(advice.young_interval_s)})")
    out.append("   lost per failure ")
    out.append(units.duration(rec.lost_s_per_failure), style="bold")
    out.append("   waste ")
    out.append(units.percent(rec.waste_ratio, 1), style="bold")
    out.append(f" (Daly {units.percent(rec.waste_ratio_daly, 1)})")
    out.append(f"\nMTBF {units.duration(advice.mtbf_s)} ({source})")
    out.append(f", {advice.failures_per_day:.3g} failures/day")
    out.append(f", one save {units.duration(advice.checkpoint_s)}")
    if advice.restart_s:
        out.append(f", restart {units.duration(advice.restart_s)}")
    if advice.current is not None:
        cur = advice.current
        out.append(
            f"\nnow every {units.duration(cur.interval_s)}: lost per failure "
            f"{units.duration(cur.lost_s_per_failure)}, waste {units.percent(cur.waste_ratio, 1)}"
        )
    return out


def next_name(name: str, taken: set[str]) -> str:
    """The name offered for launching ``name`` again: ``name-2``, ``-3``... (a trailing
    ``-N`` counts up), the first not taken."""
    stem, _, tail = name.rpartition("-")
    base, n = (stem, int(tail)) if stem and tail.isdigit() else (name, 1)
    while True:
        n += 1
        candidate = f"{base}-{n}"
        if candidate not in taken:
            return candidate


class TrainingScreen(DataScreen):
    SCREEN_NAME = "training"
    SCREEN_TITLE = "Training"
    KINDS: ClassVar[tuple[str, ...]] = ("fleet", "training")
    FILTER_FOCUS = "#run-table"
    HELP = (
        "Training runs: state, progress (RUNNING, SLOW, STRAGGLER, HUNG... as krea-ops "
        "train status judges it, with the step time against the run's baseline), size, "
        "restarts, the newest complete checkpoint; for the selected run its status (last "
        "step, step time, its GPUs, why, what stands out), its checkpoints (complete or "
        "why not) and the checkpoint-interval advice (Young/Daly, lost work per failure, "
        "waste, MTBF); its restarts, each attributed to a node/GPU/port with the evidence "
        "(as krea-ops train restarts)."
    )
    ACTIONS = (
        ("L", "launch the selected run again under a new name (fresh checkpoints)"),
        ("S", "resume the selected finished run from its newest complete checkpoint"),
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("L", "launch_again", "Launch again"),
        Binding("S", "resume", "Resume"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.runs: dict[str, TrainingRun] = {}
        self.restarts: dict[str, RunRestarts] = {}
        self.restarts_error: str | None = None
        self.statuses: dict[str, GangStatus] = {}
        self.statuses_error: str | None = None
        self.selected: str | None = None
        self.filter_text = ""

    def compose(self) -> ComposeResult:
        yield Static("Training", classes="screen-title", id="title")
        runs: DataTable[Any] = DataTable(
            id="run-table", cursor_type="row", zebra_stripes=True, classes="training-data"
        )
        for label, key in RUN_COLUMNS:
            runs.add_column(label, key=key)
        yield runs
        yield Static("", id="run-status", classes="training-data")
        yield Static(Text("waiting for the first read…", style="dim"), classes="pane-title",
                     id="ckpt-title")  # fmt: skip
        yield Static("", classes="summary training-data", id="ckpt-error")
        checkpoints: DataTable[Any] = DataTable(
            id="ckpt-table", cursor_type="row", zebra_stripes=True, classes="training-data"
        )
        for label, key in CHECKPOINT_COLUMNS:
            checkpoints.add_column(label, key=key)
        yield checkpoints
        yield Static("", id="advice", classes="training-data")
        yield Static("", classes="pane-title", id="restart-title")
        restarts: DataTable[Any] = DataTable(
            id="restart-table", cursor_type="row", zebra_stripes=True, classes="training-data"
        )
        for label, key in RESTART_COLUMNS:
            restarts.add_column(label, key=key)
        yield restarts
        yield Static("", id="restart-evidence", classes="training-data")
        yield Input(
            placeholder="filter runs (Enter keeps it, Esc clears)",
            id="filter",
            select_on_focus=False,
        )
        yield from self.krea.screen_chrome()

    def on_mount(self) -> None:
        self.query_one("#run-table", DataTable).focus()
        loaded = self.krea.latest("training")
        if loaded is not None:
            self.update_data(loaded)

    # -- data -----------------------------------------------------------------------

    def update_data(self, loaded: Loaded) -> None:
        if not isinstance(loaded, TrainingLoaded):
            return
        try:
            self.query_one("#run-table", DataTable)
        except NoMatches:
            return
        self.runs = {run_key(r): r for r in loaded.runs}
        self.restarts = loaded.restarts
        self.restarts_error = loaded.restarts_error
        self.statuses = loaded.statuses
        self.statuses_error = loaded.statuses_error
        self._show()
        for widget in self.query(".training-data"):
            widget.set_class(False, "stale")

    def data_failed(self, kind: str, error: str) -> None:
        if kind != "training":
            return
        for widget in self.query(".training-data"):
            widget.set_class(True, "stale")

    def _show(self) -> None:
        table = self.query_one("#run-table", DataTable)
        now = self.krea.clock()
        needle = self.filter_text.lower()
        rows = {}
        for key, run in self.runs.items():
            cells = run_cells(run, now, self.statuses.get(key))
            if needle and not any(needle in str(c).lower() for c in cells):
                continue
            rows[key] = cells
        order = {key: i for i, key in enumerate(self.runs)}  # the core's: newest first
        with self.app.batch_update():
            sync_table(table, rows, order=lambda key: order.get(key, len(order)))
            self.selected = table_cursor_key(table)
            self._show_details()

    @on(DataTable.RowHighlighted, "#run-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        # the row under the cursor now: a refresh may have re-sorted since the event
        key = table_cursor_key(self.query_one("#run-table", DataTable))
        if key != self.selected:
            self.selected = key
            with self.app.batch_update():
                self._show_details()

    def _show_details(self) -> None:
        run = self.runs.get(self.selected) if self.selected else None
        title = self.query_one("#ckpt-title", Static)
        error = self.query_one("#ckpt-error", Static)
        table = self.query_one("#ckpt-table", DataTable)
        advice = self.query_one("#advice", Static)
        self._show_status(run)
        if run is None:
            title.update(Text("no training runs" if not self.runs else "no run selected"))
            error.display = False
            sync_table(table, {})
            advice.update("")
            self._show_restarts(None)
            return
        count = "" if run.checkpoints is None else f" ({len(run.checkpoints)})"
        title.update(f"Checkpoints of {run_key(run)}{count}: {run.checkpoint_dir or '?'}")
        now = self.krea.clock()
        if run.checkpoints is None:
            error.update(Text(f"checkpoints unknown: {run.checkpoints_error}", style="magenta"))
            error.display = True
            rows: dict[str, tuple[Any, ...]] = {}
        else:
            if run.checkpoints:
                error.display = False
            else:
                error.update(Text("no checkpoint written yet", style="dim"))
                error.display = True
            rows = {str(cp.path): checkpoint_cells(cp, run, now) for cp in run.checkpoints}
        order = {key: i for i, key in enumerate(rows)}  # the core's: newest first
        sync_table(table, rows, order=lambda key: order.get(key, len(order)))
        advice.update(advice_text(run.advice, run))
        self._show_restarts(run)

    def _show_status(self, run: TrainingRun | None) -> None:
        """The selected run's status as ``krea-ops train status`` says it."""
        box = self.query_one("#run-status", Static)
        status = self.statuses.get(run_key(run)) if run is not None else None
        if run is None:
            box.update("")
        elif status is None:
            why = self.statuses_error or "not running"
            box.update(Text(f"status: {why}", style="magenta" if self.statuses_error else "dim"))
        else:
            head, *rest = summary_lines(status, self.krea.clock())
            text = Text(head, style=PROGRESS_STYLE.get(status.judgement.state, "bold"))
            text.append("\n" + "\n".join(rest), style="")
            box.update(text)

    def _show_restarts(self, run: TrainingRun | None) -> None:
        """The selected run's restarts, newest first, and the evidence of the newest."""
        title = self.query_one("#restart-title", Static)
        table = self.query_one("#restart-table", DataTable)
        evidence = self.query_one("#restart-evidence", Static)
        got = self.restarts.get(run_key(run)) if run is not None else None
        title.update(restarts_title(got, self.restarts_error) if run is not None else "")
        now = self.krea.clock()
        rows = {str(r.number): restart_cells(r, now) for r in reversed(got.rows)} if got else {}
        order = {key: i for i, key in enumerate(rows)}
        sync_table(table, rows, order=lambda key: order.get(key, len(order)))
        newest = got.rows[-1] if got and got.rows else None
        if newest is None or newest.attribution is None:
            evidence.update("")
            return
        lines = [f"#{newest.number}: {e}" for e in newest.attribution.evidence[:3]]
        phases = anatomy_text(newest.anatomy)
        if phases:
            lines.append(f"#{newest.number}: {phases}")
        evidence.update(Text("\n".join(lines), style="dim"))

    # -- actions ----------------------------------------------------------------------

    def _selected_run(self, title: str) -> TrainingRun | None:
        run = self.runs.get(self.selected) if self.selected else None
        if run is None:
            self.notify(f"{title}: no run selected", severity="warning")
        return run

    def action_launch_again(self) -> None:
        """``L``: the selected run's nodes, image, queue and arguments as a new run, under a
        name the operator gives (a suffix is offered)."""
        run = self._selected_run("launch again")
        if run is None or not self.krea.can_act("launch again"):
            return
        from screens.dialogs import ReasonScreen

        def named(new_name: str | None) -> None:
            if new_name:
                self.krea.start_action(
                    f"launch {run.namespace}/{new_name}",
                    lambda actions: actions.plan_launch_again(
                        run.name, namespace=run.namespace, new_name=new_name
                    )[0],
                )

        self.app.push_screen(
            ReasonScreen(
                f"Launch {run_key(run)} again",
                question="Name of the new run (its own checkpoint directory; it starts fresh)",
                placeholder=f"{run.name}-2",
                value=next_name(run.name, {r.name for r in self.runs.values()}),
                needed="a name is needed",
            ),
            named,
        )

    def action_resume(self) -> None:
        """``S``: relaunch the selected finished run from its newest complete checkpoint."""
        run = self._selected_run("resume")
        if run is None:
            return
        self.krea.start_action(
            f"resume {run_key(run)}",
            lambda actions: actions.plan_resume(run.name, namespace=run.namespace)[0],
        )

    # -- filter ---------------------------------------------------------------------

    def apply_filter(self, text: str) -> None:
        self.filter_text = text
        self._show()
