"""Fleet screen: every GPU as a heatmap cell, nodes that need attention first."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Input, Static

from krea_ops import units
from krea_ops.fleet import FleetSnapshot, fleet_totals, usable
from krea_ops.health import HealthPolicy, activity_doubt, busy_idle_gap
from krea_ops.model import GpuSample, NodeView, Severity
from screens.base import DataScreen
from screens.messages import FleetLoaded, Loaded
from screens.text import SEVERITY_STYLE
from screens.widgets.heatmap import METRICS, SORT_MODES, GpuHeatmap, HeatRow


def _nvlink(g: GpuSample) -> float | None:
    return g.nvlink_fault_increase


VALUE_OF = {
    "temperature": lambda g: g.temperature_c,
    "tensor": lambda g: g.tensor_active_ratio,
    "util": lambda g: g.util_ratio,
    "margin": lambda g: g.slowdown_margin_c,
    "nvlink": _nvlink,
}


def heat_row(view: NodeView, metric: str, policy: HealthPolicy | None = None) -> HeatRow | None:
    info = view.info
    if info.virtual or not (info.gpu_capacity or (view.telemetry and view.telemetry.gpus)):
        return None
    width = max(info.gpu_capacity or 0, len(view.telemetry.gpus) if view.telemetry else 0)
    values: list[float | None] = [None] * width
    # tensor activity ranks by how far busy time is above it: the busy GPU whose tensor
    # cores idle is the wasted one, an idle GPU is merely free
    ranks: list[float | None] | None = [None] * width if metric == "tensor" else None
    tel = view.telemetry
    if usable(tel):
        pick = VALUE_OF[metric]
        # an activity reading that contradicts its GPU's others is no fact to colour
        activity = metric in ("tensor", "util")
        for g in tel.gpus:
            if 0 <= g.index < width and g.up is not False:
                if activity and policy is not None and activity_doubt(g, policy):
                    continue
                values[g.index] = pick(g)
                if ranks is not None:
                    ranks[g.index] = busy_idle_gap(g.util_ratio, g.tensor_active_ratio)
    reasons = view.verdict.reasons
    return HeatRow(
        key=info.name,
        label=info.name,
        severity=view.verdict.severity,
        values=tuple(values),
        note=reasons[0].message if reasons else "",
        ranks=None if ranks is None else tuple(ranks),
    )


def heat_rows(snap: FleetSnapshot, metric: str) -> list[HeatRow]:
    """The heatmap's rows of every node, in the snapshot's order."""
    policy = snap.policy
    return [r for v in snap.views if (r := heat_row(v, metric, policy))]


def prepare_fleet(loaded: Loaded, *, metric: str) -> None:
    """On the worker: the heat rows for ``metric`` and the totals line of a fleet read
    (``FleetScreen.update_data`` takes them from ``loaded.prepared``)."""
    if isinstance(loaded, FleetLoaded) and loaded.scope.covers(FleetScreen.FAMILIES):
        loaded.prepared[("heat_rows", metric)] = heat_rows(loaded.snapshot, metric)
        loaded.prepared["totals"] = totals_text(loaded.snapshot)


def totals_text(snap: FleetSnapshot) -> Text:
    t = fleet_totals(snap)
    out = Text()
    out.append(f"{t.gpus:,} GPUs on {t.nodes:,} nodes", style="bold")
    out.append(f"  hot ≥{snap.policy.hot_c:g}°C: ")
    out.append(str(t.hot), style="bold red" if t.hot else "green")
    if t.without_reading:
        out.append(f"  no reading: {t.without_reading:,}", style="magenta")
    for sev in (Severity.BAD, Severity.UNKNOWN, Severity.SUSPECT, Severity.OK):
        out.append(f"  {sev}: {t.by_severity[sev]}", style=SEVERITY_STYLE[sev])
    out.append("\ntensor activity ")
    out.append(units.percent(t.tensor_active_ratio), style="bold")
    out.append(" vs GPU utilization (busy time) ")
    out.append(units.percent(t.util_ratio), style="bold")
    if t.averaged:
        out.append(f", mean of {t.averaged:,} GPUs reporting both", style="dim")
    if t.busy_not_work:
        out.append("  ← busy is not work", style="yellow")
    return out


class FleetScreen(DataScreen):
    SCREEN_NAME = "fleet"
    SCREEN_TITLE = "Fleet"
    KINDS: ClassVar[tuple[str, ...]] = ("fleet",)
    FAMILIES: ClassVar[tuple[str, ...] | None] = ("gpu",)  # the heatmap's readings
    FILTER_FOCUS = "#heatmap"
    HELP = "Every GPU as a cell, one row per node; nodes that need attention first."
    ACTIONS = (
        ("e", "evict the node under the cursor (asks why, shows the plan)"),
        ("R", "restore the node under the cursor"),
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("e", "evict", "Evict"),
        Binding("R", "restore", "Restore"),
        Binding("t", "metric('temperature')", "Temperature"),
        Binding("a", "metric('tensor')", "Tensor activity"),
        Binding("u", "metric('util')", "Busy time"),
        Binding("m", "metric('margin')", "Slowdown margin"),
        Binding("n", "metric('nvlink')", "NVLink errors"),
        Binding("s", "cycle_sort", "Sort"),
        Binding("enter", "open_node", "Open node", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.metric_name = "temperature"
        self.snapshot: FleetSnapshot | None = None

    def compose(self) -> ComposeResult:
        yield Static("Fleet", classes="screen-title", id="title")
        yield Static(
            Text("waiting for the first read…", style="dim"), classes="summary", id="totals"
        )
        yield Static("", classes="summary", id="legend")
        yield GpuHeatmap(metric=METRICS[self.metric_name], id="heatmap")
        yield Input(
            placeholder="filter: a node, a reason, or bad/sus/unk/ok (Enter keeps it)",
            id="filter",
            select_on_focus=False,
        )
        yield from self.krea.screen_chrome()

    def on_mount(self) -> None:
        self.query_one(GpuHeatmap).focus()
        self._legend()
        loaded = self.krea.latest("fleet")
        if loaded is not None:
            self.update_data(loaded)

    def _legend(self) -> None:
        heatmap = self.query_one(GpuHeatmap)
        legend = heatmap.legend_text()
        legend.append(f"   sort: {heatmap.sort_mode}")
        if heatmap.metric.name == "tensor" and heatmap.sort_mode != "name":
            legend.append(" (busy time above tensor activity first)", style="dim")
        self.query_one("#legend", Static).update(legend)

    def preparer(self, kind: str) -> Callable[[Loaded], None] | None:
        """The heat rows of the metric shown now and the totals line, built on the
        worker (at 5,000 nodes ~0.15 s of CPU the UI thread would otherwise stall for)."""
        metric = self.metric_name
        return functools.partial(prepare_fleet, metric=metric)

    def update_data(self, loaded: Loaded) -> None:
        if not isinstance(loaded, FleetLoaded) or not loaded.scope.covers(self.FAMILIES):
            return  # (a read for another screen: the next one is for this one)
        data = loaded.snapshot
        self.snapshot = data
        rows = loaded.prepared.get(("heat_rows", self.metric_name))
        if isinstance(rows, list):
            self.query_one(GpuHeatmap).apply_rows(rows)
        else:
            self._render_rows()
        totals = loaded.prepared.get("totals")
        self.query_one("#totals", Static).update(
            totals if isinstance(totals, Text) else totals_text(data)
        )
        self.query_one("#totals").set_class(False, "stale")
        self.query_one(GpuHeatmap).set_class(False, "stale")

    def data_failed(self, kind: str, error: str) -> None:
        if kind == "fleet":
            self.query_one("#totals").set_class(True, "stale")
            self.query_one(GpuHeatmap).set_class(True, "stale")

    def _render_rows(self) -> None:
        if self.snapshot is None:
            return
        self.query_one(GpuHeatmap).set_rows(heat_rows(self.snapshot, self.metric_name))

    def action_metric(self, name: str) -> None:
        self.metric_name = name
        heatmap = self.query_one(GpuHeatmap)
        heatmap.metric = METRICS[name]
        self._render_rows()
        self._legend()

    def action_cycle_sort(self) -> None:
        heatmap = self.query_one(GpuHeatmap)
        i = SORT_MODES.index(heatmap.sort_mode)
        heatmap.sort_mode = SORT_MODES[(i + 1) % len(SORT_MODES)]
        self._legend()

    def action_node(self) -> str | None:
        return self.query_one(GpuHeatmap).cursor_key or None

    def action_open_node(self) -> None:
        key = self.query_one(GpuHeatmap).cursor_key
        if key:
            self.krea.open_node(key)

    @on(GpuHeatmap.NodeSelected)
    def _selected(self, event: GpuHeatmap.NodeSelected) -> None:
        self.krea.open_node(event.key)

    # -- filter ---------------------------------------------------------------------

    def apply_filter(self, text: str) -> None:
        self.query_one(GpuHeatmap).filter_text = text
