"""Queue screen: Kueue's ClusterQueues against healthy capacity, the workloads, and why
the selected one waits.

Top: one row per ClusterQueue and GPU flavor with a quota bar (used, reserved, free,
borrowed), the counts and the flavor's drift (healthy GPUs minus the quota promised on
it); below it one line per flavor naming the nodes that make drift negative. Middle: the
workloads, pending ones first in queue order. Bottom: the ``why`` paragraph of the
workload under the cursor, read on demand in a thread worker (one at a time).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.widgets import DataTable, Input, Static

from krea_ops import units
from krea_ops.queue import FlavorCapacity, QueueSnapshot, WorkloadInfo
from screens.base import DataScreen
from screens.messages import Loaded, QueueLoaded, WhyFailed, WhyLoaded
from screens.text import quota_bar, signed, sync_table, table_cursor_key

STATE_STYLE = {
    "pending": "yellow",
    "evicted": "bold red",
    "reserving": "cyan",
    "admitted": "green",
    "finished": "dim",
}
STATE_ORDER = {"pending": 0, "evicted": 0, "reserving": 1, "admitted": 2, "finished": 3}
NO_POSITION = 1 << 30

CQ_COLUMNS = (
    ("CLUSTERQUEUE", "cq"),
    ("FLAVOR", "flavor"),
    ("GPU QUOTA (used▕reserved▕free▕borrowed)", "bar"),
    ("USED", "used"),
    ("RESV", "reserved"),
    ("QUOTA", "nominal"),
    ("BORROWED", "borrowed"),
    ("PEND", "pending"),
    ("ADMIT", "admitted"),
    ("DRIFT", "drift"),
)
WL_COLUMNS = (
    ("WORKLOAD", "workload"),
    ("STATE", "state"),
    ("PRIO", "priority"),
    ("PODSxGPU", "gang"),
    ("QUEUE", "queue"),
    ("POS", "position"),
    ("AGE", "age"),
    ("KUEUE REASON", "reason"),
)


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def workload_key(wl: WorkloadInfo) -> str:
    return f"{wl.namespace}/{wl.name}"


def workload_cells(wl: WorkloadInfo, now: float) -> tuple[Any, ...]:
    state = Text(wl.state, style=STATE_STYLE.get(wl.state, ""))
    if wl.evicted_holding_quota:
        state.append("!", style="bold red")
    if not wl.active:
        state.append(" (inactive)", style="dim")
    return (
        workload_key(wl),
        state,
        _count(wl.priority),
        wl.gang,
        wl.local_queue or wl.cluster_queue or "-",
        wl.position_text or "-",
        units.since(wl.created_at, now),
        wl.reason or "",
    )


def workload_order(wl: WorkloadInfo) -> tuple[int, int, str]:
    position = NO_POSITION if wl.position is None else wl.position
    return (STATE_ORDER.get(wl.state, 4), position, workload_key(wl))


def queue_rows(snap: QueueSnapshot) -> dict[str, tuple[Any, ...]]:
    """One row per ClusterQueue and GPU flavor; a ClusterQueue without GPU quota gets one
    row without a flavor."""
    rows: dict[str, tuple[Any, ...]] = {}
    for cq in snap.cluster_queues:
        quotas = cq.gpu_quotas
        if not quotas:
            rows[f"{cq.name}/"] = (
                cq.name, "-", Text("no GPU quota", style="dim"), "-", "-", "-", "-",
                _count(cq.pending_workloads), _count(cq.admitted_workloads), signed(None),
            )  # fmt: skip
            continue
        for q in quotas:
            cap = snap.flavors.get(q.flavor)
            borrowed = Text(_g(q.borrowed), style="yellow" if q.borrowed else "")
            rows[f"{cq.name}/{q.flavor}"] = (
                cq.name,
                q.flavor,
                quota_bar(q.nominal, q.reserved, q.used),
                _g(q.used),
                _g(q.reserved),
                _g(q.nominal),
                borrowed,
                _count(cq.pending_workloads),
                _count(cq.admitted_workloads),
                signed(cap.drift_gpus if cap is not None else None),
            )
    return rows


def flavor_line(cap: FlavorCapacity) -> Text:
    out = Text()
    out.append(f"flavor {cap.flavor}: ", style="bold")
    out.append(
        f"{cap.healthy_gpus} healthy GPUs on {cap.healthy_nodes} of {cap.nodes} nodes, "
        f"quota {_g(cap.nominal_gpus)}, drift "
    )
    out.append_text(signed(cap.drift_gpus))
    if cap.unknown_gpus:
        out.append(f"; {cap.unknown_gpus} GPUs of unknown health", style="magenta")
    if cap.unavailable_gpus:
        out.append(f"; {cap.unavailable_gpus} GPUs unavailable", style="red")
    bad = [n for n in cap.not_healthy if n.state != "unknown"]
    if bad:
        drift = cap.drift_gpus
        style = "red" if drift is not None and drift < 0 else ""
        shown = ", ".join(
            f"{n.node} {n.state.replace('_', ' ')}" + (f" ({n.detail})" if n.detail else "")
            for n in bad[:6]
        )
        more = len(bad) - 6
        out.append(f": {shown}" + (f", {more} more" if more > 0 else ""), style=style)
    return out


def flavors_text(snap: QueueSnapshot) -> Text:
    lines = [flavor_line(c) for c in snap.flavors.values() if c.nominal_gpus is not None]
    if not snap.health_judged and lines:
        lines.append(
            Text(
                "node health not judged (no telemetry yet): capacity counts Ready, "
                "uncordoned, untainted nodes",
                style="dim",
            )
        )
    if not snap.cluster_queues:
        lines.insert(0, Text("no ClusterQueues", style="dim"))
    return Text("\n").join(lines)


def why_text(report: Any) -> Text:
    wl = report.workload
    out = Text()
    out.append(f"why {wl.namespace}/{wl.name}", style="bold")
    out.append(f"  ({wl.state})\n", style=STATE_STYLE.get(wl.state, ""))
    out.append(report.summary)
    if report.kueue_reason and report.kueue_reason not in report.summary:
        out.append(f"\nKueue says: {report.kueue_reason}", style="bold")
        if report.kueue_message:
            out.append(f" {report.kueue_message}")
    return out


class QueueScreen(DataScreen):
    SCREEN_NAME = "queue"
    SCREEN_TITLE = "Queue"
    KINDS: ClassVar[tuple[str, ...]] = ("fleet", "queue")
    FILTER_FOCUS = "#wl-table"
    HELP = (
        "Kueue: GPU quota per ClusterQueue and flavor (used, reserved, borrowed) against "
        "healthy capacity, the workloads in queue order, and why the selected one waits."
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "why", "Why (re-read)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.snapshot: QueueSnapshot | None = None
        self.workloads: dict[str, WorkloadInfo] = {}
        self.filter_text = ""
        self.why_key: str | None = None  # the workload the why pane is (being) read for
        self._why_signature: tuple[Any, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static("Queue", classes="screen-title", id="title")
        cqs: DataTable[Any] = DataTable(
            id="cq-table", cursor_type="row", zebra_stripes=True, classes="queue-data"
        )
        for label, key in CQ_COLUMNS:
            cqs.add_column(label, key=key)
        yield cqs
        yield Static(
            Text("waiting for the first read…", style="dim"),
            classes="summary queue-data",
            id="flavors",
        )
        yield Static("Workloads", classes="pane-title", id="wl-title")
        wls: DataTable[Any] = DataTable(
            id="wl-table", cursor_type="row", zebra_stripes=True, classes="queue-data"
        )
        for label, key in WL_COLUMNS:
            wls.add_column(label, key=key)
        yield wls
        yield Static(
            Text("select a workload to see why it waits", style="dim"), classes="why", id="why"
        )
        yield Input(
            placeholder="filter workloads (Enter keeps it, Esc clears)",
            id="filter",
            select_on_focus=False,
        )
        yield from self.krea.screen_chrome()

    def on_mount(self) -> None:
        self.query_one("#wl-table", DataTable).focus()
        loaded = self.krea.latest("queue")
        if loaded is not None:
            self.update_data(loaded)

    # -- data -----------------------------------------------------------------------

    def update_data(self, loaded: Loaded) -> None:
        if not isinstance(loaded, QueueLoaded):
            return
        try:
            cq_table = self.query_one("#cq-table", DataTable)
            self.query_one("#wl-table", DataTable)
        except NoMatches:  # not composed yet; on_mount shows it
            return
        snap, workloads = loaded.reading.queues, loaded.reading.workloads
        self.snapshot = snap
        self.workloads = {workload_key(w): w for w in workloads}
        with self.app.batch_update():
            sync_table(cq_table, queue_rows(snap))
            self.query_one("#flavors", Static).update(flavors_text(snap))
            self._render_workloads()
            for widget in self.query(".queue-data"):
                widget.set_class(False, "stale")
        self._follow_cursor()

    def data_failed(self, kind: str, error: str) -> None:
        if kind != "queue":
            return
        for widget in self.query(".queue-data"):
            widget.set_class(True, "stale")

    def _render_workloads(self) -> None:
        table = self.query_one("#wl-table", DataTable)
        needle = self.filter_text.lower()
        now = self.krea.clock()
        rows = {}
        for key, wl in self.workloads.items():
            cells = workload_cells(wl, now)
            if needle and not any(needle in str(c).lower() for c in cells):
                continue
            rows[key] = cells
        orders = {k: workload_order(w) for k, w in self.workloads.items()}
        sync_table(table, rows, order=lambda key: orders.get(key, (9, NO_POSITION, key)))
        shown = f"{len(rows)} of {len(self.workloads)}" if needle else str(len(rows))
        waiting = sum(1 for w in self.workloads.values() if w.waiting)
        self.query_one("#wl-title", Static).update(
            f"Workloads: {shown}, {waiting} waiting"
            + (f"   filter: {self.filter_text}" if needle else "")
        )

    # -- why ------------------------------------------------------------------------

    @on(DataTable.RowHighlighted, "#wl-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        # the row under the cursor now, not the event's: a refresh may have re-sorted the
        # rows since the event was posted
        self._follow_cursor()

    @on(DataTable.RowSelected, "#wl-table")
    def _selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self._request_why(str(event.row_key.value), force=True)

    def action_why(self) -> None:
        key = table_cursor_key(self.query_one("#wl-table", DataTable))
        if key is not None:
            self._request_why(key, force=True)

    def _follow_cursor(self) -> None:
        """After a refresh: read the why of the row under the cursor when it is a new
        row, or when its workload moved (state, reason, position) since the last read."""
        key = table_cursor_key(self.query_one("#wl-table", DataTable))
        if key is not None:
            self._request_why(key)

    @staticmethod
    def _signature(wl: WorkloadInfo) -> tuple[Any, ...]:
        return (
            wl.state,
            wl.pending_reason,
            wl.evicted_reason,
            wl.position,
            wl.evicted_holding_quota,
            wl.active,
        )

    def _request_why(self, key: str, *, force: bool = False) -> None:
        wl = self.workloads.get(key)
        if wl is None:
            return
        signature = self._signature(wl)
        if not force and key == self.why_key and signature == self._why_signature:
            return
        first = key != self.why_key
        self.why_key = key
        self._why_signature = signature
        pane = self.query_one("#why", Static)
        if first:
            pane.update(Text(f"reading why {key}…", style="dim"))
        pane.set_class(True, "stale")
        console = self.krea.session
        name, namespace = wl.name, wl.namespace

        def work() -> None:
            try:
                report = console.why(name, namespace)
            except Exception as exc:  # one line in the pane, never a crash
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self.post_message(WhyFailed(key, message))
                return
            self.post_message(WhyLoaded(key, report))

        self.krea.run_worker(
            work,
            name=f"why-{key}",
            group="why",
            thread=True,
            exclusive=True,
            exit_on_error=False,
            description=f"why {key}",
        )

    def on_why_loaded(self, message: WhyLoaded) -> None:
        if message.key != self.why_key:
            return  # the cursor moved on; a newer read is coming
        pane = self.query_one("#why", Static)
        pane.update(why_text(message.report))
        pane.set_class(False, "stale")

    def on_why_failed(self, message: WhyFailed) -> None:
        if message.key != self.why_key:
            return
        pane = self.query_one("#why", Static)
        pane.update(Text(f"why {message.key}: {message.error}", style="red"))
        pane.set_class(False, "stale")
        self._why_signature = None  # try again on the next refresh

    # -- filter ---------------------------------------------------------------------

    def apply_filter(self, text: str) -> None:
        self.filter_text = text
        with self.app.batch_update():
            self._render_workloads()
