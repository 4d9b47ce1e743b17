"""Fabric screen: every InfiniBand port and NVLink link in the fleet, worst first.

Ranking the whole fabric (``krea_ops.fleet.fabric_entries``) is ~600k links at 4,096
nodes and takes seconds, so it runs in a thread worker and posts ``FabricRanked`` back;
the table shows only the worst ``MAX_ROWS`` of what matches the filter.

Also home of ``sync_table``, the keyed DataTable update the node screen shares.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable, Input, Static

from krea_ops import units
from krea_ops.fleet import FabricEntry, FleetSnapshot, fabric_entries, nvlink_counts, usable
from krea_ops.health import HealthPolicy
from krea_ops.model import Severity, Verdict
from krea_ops.telemetry.dialects import FABRIC
from screens.base import DataScreen
from screens.messages import FleetLoaded, Loaded
from screens.text import SEVERITY_STYLE, severity_text, sync_table

MAX_ROWS = 500
REASON_WIDTH = 70

# --- formatting shared with the node screen -------------------------------------------------


def short(text: str, width: int = REASON_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def first_reason(verdict: Verdict) -> Text:
    if not verdict.reasons:
        return Text("")
    r = verdict.reasons[0]
    more = f" (+{len(verdict.reasons) - 1})" if len(verdict.reasons) > 1 else ""
    return Text(short(r.message) + more, style=SEVERITY_STYLE[r.severity])


def state_text(state: str | None) -> Text:
    if state is None:
        return Text("-", style="dim")
    style = {"ACTIVE": "green", "UP": "green", "DOWN": "bold red"}.get(state.upper(), "yellow")
    return Text(state, style=style)


def wait_ratio_text(ratio: float | None, policy: HealthPolicy) -> Text:
    if ratio is None:
        return Text(units.UNKNOWN, style="dim")
    style = "yellow" if ratio >= policy.xmit_wait_ratio_suspect else ""
    return Text(units.percent(ratio), style=style)


def errors_text(v: float | None) -> Text:
    return Text(units.count(v), style="bold red" if v else "")


def add_columns(table: DataTable[Any], columns: Sequence[tuple[str, str]]) -> None:
    if not table.columns:
        for key, label in columns:
            table.add_column(label, key=key)


def window_label(label: str, window_s: float) -> str:
    """A window count's column label, naming its window: ``errors/5m``."""
    return f"{label}/{units.duration(window_s)}"


LEGEND = "wait %: share of time with data to send but no credit (port_xmit_wait x 8 B / speed)"


# --- the screen -----------------------------------------------------------------------------


def fabric_columns(window_s: float) -> tuple[tuple[str, str], ...]:
    return (
        ("node", "node"),
        ("kind", "kind"),
        ("port", "port"),
        ("state", "state"),
        ("errors", window_label("errors", window_s)),
        ("rate", "error rate"),
        ("wait_pct", "wait %"),
        ("verdict", "verdict"),
        ("reason", "first reason"),
    )


def fabric_key(e: FabricEntry) -> str:
    return f"{e.node}/{e.kind}/{e.port}"


def fabric_cells(e: FabricEntry, policy: HealthPolicy) -> tuple[Any, ...]:
    # node, kind and port stay plain str: sync_table rebuilds the key from them
    return (
        e.node,
        e.kind,
        e.port,
        state_text(e.state),
        errors_text(e.errors_in_window),
        units.rate(e.error_rate_per_s),
        wait_ratio_text(e.xmit_wait_ratio, policy),
        severity_text(e.verdict.severity),
        first_reason(e.verdict),
    )


def matches(e: FabricEntry, terms: Sequence[str]) -> bool:
    text = f"{e.node} {e.kind} {e.port}".lower()
    return all(t in text for t in terms)


@dataclass(frozen=True)
class Ranking:
    """The fabric ranked once per fleet read, and the part of it the table shows."""

    snapshot: FleetSnapshot
    entries: tuple[FabricEntry, ...]  # all of them, worst first
    shown: tuple[FabricEntry, ...]  # the worst MAX_ROWS that match the filter
    matched: int
    filter_text: str
    counts: dict[str, int]  # "ib", "nvlink", and each severity name
    dark_nodes: int  # GPU nodes without usable telemetry: not listed


def rank_fabric(
    snapshot: FleetSnapshot,
    filter_text: str,
    entries: tuple[FabricEntry, ...] | None = None,
    limit: int = MAX_ROWS,
) -> Ranking:
    """Runs in a worker: ``entries`` (from an earlier ranking of the same snapshot) skips
    the ranking when only the filter changed."""
    if entries is None:
        entries = tuple(fabric_entries(snapshot, "all"))
    terms = filter_text.lower().split()
    picked = [e for e in entries if matches(e, terms)] if terms else list(entries)
    counts = {"ib": 0, "nvlink": 0, **{str(s): 0 for s in Severity}}
    for e in entries:
        if e.kind == "ib":
            counts["ib"] += 1
        counts[str(e.verdict.severity)] += 1
    # links as the node screen counts them: a fleet-wide read lists only the links that
    # are down, one per row; every GPU says how many it has
    counts["nvlink"] = sum(
        nvlink_counts(v.telemetry)[0] for v in snapshot.views if usable(v.telemetry)
    )
    dark = sum(
        1
        for v in snapshot.views
        if not v.info.virtual and (v.info.gpu_capacity or 0) > 0 and not usable(v.telemetry)
    )
    return Ranking(
        snapshot=snapshot,
        entries=entries,
        shown=tuple(picked[:limit]),
        matched=len(picked),
        filter_text=filter_text,
        counts=counts,
        dark_nodes=dark,
    )


class FabricRanked(Message):
    def __init__(self, serial: int, ranking: Ranking | None, error: str | None = None) -> None:
        super().__init__()
        self.serial = serial
        self.ranking = ranking
        self.error = error


def summary_text(r: Ranking) -> Text:
    out = Text()
    c = r.counts
    out.append(f"{c['ib']:,} InfiniBand ports, {c['nvlink']:,} NVLink links", style="bold")
    for sev in (Severity.BAD, Severity.UNKNOWN, Severity.SUSPECT):
        if c[str(sev)]:
            out.append(f"  {sev}: {c[str(sev)]:,}", style=SEVERITY_STYLE[sev])
    out.append(f"  window {r.snapshot.policy.window_text}")
    if r.dark_nodes:
        out.append(f"  {r.dark_nodes:,} GPU nodes without telemetry (not listed)", style="magenta")
    out.append("\n")
    if r.filter_text:
        out.append(f"filter '{r.filter_text}': {r.matched:,} match  ")
    if len(r.shown) < r.matched:
        out.append(f"showing {len(r.shown):,} of {r.matched:,}, worst first", style="yellow")
    else:
        out.append(f"showing {len(r.shown):,}, worst first (errors, then xmit wait)")
    out.append(f"\n{LEGEND}", style="dim")
    if r.snapshot.telemetry_error:
        out.append(f"\ntelemetry: {r.snapshot.telemetry_error}", style="bold red")
    return out


class FabricScreen(DataScreen):
    SCREEN_NAME = "fabric"
    SCREEN_TITLE = "Fabric"
    KINDS: ClassVar[tuple[str, ...]] = ("fleet",)
    # every port's and link's counters, and of the GPUs what says which links to read
    FAMILIES: ClassVar[tuple[str, ...] | None] = FABRIC
    FILTER_FOCUS = "#fabric"
    HELP = (
        "Every InfiniBand port and NVLink link in the fleet, worst first: errors in the "
        "telemetry window (never more than the port's counters hold), their rate, the share "
        "of the time each IB port waited for credit (congestion) and the verdict."
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_node", "Open node", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.snapshot: FleetSnapshot | None = None
        self.ranking: Ranking | None = None
        self.filter_text = ""
        self._serial = itertools.count(1)
        self._latest = 0
        self._ready = False

    def compose(self) -> ComposeResult:
        yield Static("Fabric", classes="screen-title", id="title")
        yield Static(
            Text("waiting for the first read…", style="dim"), classes="summary", id="summary"
        )
        yield DataTable(id="fabric", cursor_type="row", zebra_stripes=True)
        yield Input(
            placeholder="filter by node or port (Enter keeps it, Esc clears)",
            id="filter",
            select_on_focus=False,
        )
        yield from self.krea.screen_chrome()

    def on_mount(self) -> None:
        table = self.query_one("#fabric", DataTable)
        table.focus()
        self._ready = True
        loaded = self.krea.latest("fleet")
        if loaded is not None:
            self.update_data(loaded)

    # -- data ----------------------------------------------------------------------------

    def update_data(self, loaded: Loaded) -> None:
        if not isinstance(loaded, FleetLoaded) or not self._ready:
            return
        if not loaded.scope.covers(self.FAMILIES):
            return  # (a read for another screen: the next one is for this one)
        data = loaded.snapshot
        if data is self.snapshot and self.ranking is not None:
            return  # a resume with nothing new
        self.snapshot = data
        if self.is_current:  # hidden under the node screen: rank on resume, not now
            self._rank(None)

    def data_failed(self, kind: str, error: str) -> None:
        if kind == "fleet" and self._ready:
            self.query_one("#fabric").set_class(True, "stale")
            self.query_one("#summary").set_class(True, "stale")

    def _rank(self, entries: tuple[FabricEntry, ...] | None) -> None:
        snapshot, text = self.snapshot, self.filter_text
        if snapshot is None:
            return
        serial = self._latest = next(self._serial)

        def work() -> None:
            try:
                ranking = rank_fabric(snapshot, text, entries)
            except Exception as exc:  # shown in the summary line, never a crash
                self.post_message(FabricRanked(serial, None, f"{type(exc).__name__}: {exc}"))
                return
            self.post_message(FabricRanked(serial, ranking))

        self.run_worker(
            work,
            group="fabric-rank",
            thread=True,
            exclusive=True,
            exit_on_error=False,
            description="ranking the fabric",
        )

    @on(FabricRanked)
    def _ranked(self, message: FabricRanked) -> None:
        if message.serial != self._latest:
            return  # an older ranking finished after a newer one started
        summary = self.query_one("#summary", Static)
        table = self.query_one("#fabric", DataTable)
        if message.ranking is None:
            summary.update(Text(f"could not rank the fabric: {message.error}", style="red"))
            return
        r = self.ranking = message.ranking
        policy = r.snapshot.policy
        add_columns(table, fabric_columns(policy.window_s))  # (the first ranking names the window)
        sync_table(table, {fabric_key(e): fabric_cells(e, policy) for e in r.shown})
        summary.update(summary_text(r))
        stale = self.krea.is_stale("fleet") and "fleet" in self.krea.errors
        table.set_class(stale, "stale")
        summary.set_class(stale, "stale")

    # -- navigation ----------------------------------------------------------------------

    def node_at_cursor(self) -> str | None:
        table = self.query_one("#fabric", DataTable)
        if not table.row_count or not table.is_valid_row_index(table.cursor_row):
            return None
        return str(table.get_row_at(table.cursor_row)[0])

    def action_open_node(self) -> None:
        node = self.node_at_cursor()
        if node:
            self.krea.open_node(node)

    @on(DataTable.RowSelected, "#fabric")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        node = self.query_one("#fabric", DataTable).get_row(event.row_key)[0]
        self.krea.open_node(str(node))

    # -- filter --------------------------------------------------------------------------

    def apply_filter(self, text: str) -> None:
        self.filter_text = text
        r = self.ranking
        # the same snapshot: filter the ranked entries again rather than rank them again
        self._rank(r.entries if r is not None and r.snapshot is self.snapshot else None)
