"""Node screen: one node in detail, opened from the fleet heatmap or ``:node NAME``.

Header (verdict and every reason, Ready, cordon, taints, our annotations), the node's last
validation (each check against the pool's baseline, needs-repair, pending; ``v`` starts a
quick one through the plan dialog and the app waits for it in the background), a row per GPU,
sparklines of each GPU's temperature and tensor activity over the console's recent
history, the InfiniBand ports, the NVLink links with problems, and the pods on the node.
Everything comes from one read of this node whole (``Console.node``: every telemetry
family and the pods), so the per-GPU and per-port work stays per-node however big the
fleet is; the fleet read says when the node is gone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Sparkline, Static

from krea_ops import units
from krea_ops.console import NodeDetail
from krea_ops.fleet import (
    FabricEntry,
    FleetSnapshot,
    GpuEntry,
    fabric_entries,
    gpu_entries,
    nvlink_counts,
    usable,
)
from krea_ops.health import HealthPolicy, busy_not_work
from krea_ops.history import GpuHistory
from krea_ops.model import Doubt, GpuSample, NodeView, PodInfo, Severity
from krea_ops.validation import NEEDS_REPAIR_LABEL, PENDING_TAINT_KEY, Check
from krea_ops.validation_status import NodeValidation, node_validation
from screens.base import DataScreen
from screens.fabric import (
    LEGEND,
    add_columns,
    errors_text,
    first_reason,
    short,
    state_text,
    wait_ratio_text,
    window_label,
)
from screens.messages import FleetLoaded, Loaded, NodeLoaded, node_key
from screens.text import SEVERITY_STYLE, severity_text, sync_table

OUR_ANNOTATIONS = ("krea.ai/", "burst.krea.ai/", "sim.krea.ai/")
MAX_SPARKLINES = 16  # GPUs with a history row; more than a node has in practice
MAX_NVLINK_LINES = 20
# what one read of the node fills (greyed when it fails)
NODE_PARTS = ("#node-header", "#validation", "#gpus", "#history", "#ib", "#nvlink")

GPU_COLUMNS = (
    ("gpu", "GPU"),
    ("temp", "temp"),
    ("margin", "slowdown margin"),
    ("power", "power"),
    ("busy", "busy (GPU util)"),
    ("tensor", "tensor active"),
    ("memory", "memory"),
    ("xid", "XID"),
    ("nvlink", "NVLink errors"),
    ("verdict", "verdict"),
    ("reason", "first reason"),
)


def ib_columns(window_s: float) -> tuple[tuple[str, str], ...]:
    return (
        ("port", "port"),
        ("state", "state"),
        ("speed", "speed"),
        ("rx", "rx"),
        ("tx", "tx"),
        ("errors", window_label("errors", window_s)),
        ("rate", "error rate"),
        ("wait_pct", "wait %"),
        ("verdict", "verdict"),
        ("reason", "first reason"),
    )


POD_COLUMNS = (
    ("namespace", "namespace"),
    ("name", "name"),
    ("phase", "phase"),
    ("gpus", "GPUs"),
    ("workload", "workload"),
    ("owner", "owner"),
    ("age", "age"),
)


# --- cells ----------------------------------------------------------------------------------


def temperature_text(t: float | None, policy: HealthPolicy) -> Text:
    if t is None:
        return Text(units.UNKNOWN, style="dim")
    style = "bold red" if t >= policy.hot_c else "yellow" if t >= policy.warm_c else "green"
    return Text(units.celsius(t), style=style)


def margin_text(m: float | None, policy: HealthPolicy) -> Text:
    if m is None:
        return Text(units.UNKNOWN, style="dim")
    style = "bold red" if m <= 0 else "yellow" if m < policy.slowdown_margin_c else ""
    return Text(units.celsius(m), style=style)


def power_text(g: GpuSample) -> str:
    """Draw over the enforced limit: 650W/700W."""
    if g.power_w is None or g.power_limit_w is None:
        return units.watts(g.power_w)
    return f"{units.watts(g.power_w)}/{units.watts(g.power_limit_w)}"


def tensor_text(g: GpuSample, policy: HealthPolicy, doubt: Doubt | None = None) -> Text:
    if doubt is not None and "tensor_active_ratio" in doubt.fields:
        return doubtful_text(g.tensor_active_ratio)
    text = Text(units.percent(g.tensor_active_ratio))
    # busy time far above tensor activity: the GPU looks busy but does little math
    if busy_not_work(g.util_ratio, g.tensor_active_ratio, policy):
        text.stylize("yellow")
    return text


def busy_text(g: GpuSample, doubt: Doubt | None = None) -> Text:
    if doubt is not None and "util_ratio" in doubt.fields:
        return doubtful_text(g.util_ratio)
    return Text(units.percent(g.util_ratio))


def doubtful_text(value: float | None) -> Text:
    """A reading that contradicts another of its GPU: marked, in the colour of unknown."""
    return Text(f"{units.percent(value)}?", style="magenta")


def memory_text(g: GpuSample) -> str:
    """Used over total: 80GiB/140GiB."""
    if g.memory_used_bytes is None or g.memory_total_bytes is None:
        return units.size(g.memory_used_bytes)
    return f"{units.size(g.memory_used_bytes)}/{units.size(g.memory_total_bytes)}"


def xid_text(g: GpuSample) -> Text:
    events = sum(g.xid_increase.values()) if g.xid_increase else 0
    if g.xid_last is None and not events:
        return Text("-", style="dim")
    text = Text("-" if g.xid_last is None else str(g.xid_last))
    if events:
        text.append(f" ({events:.0f} new)")
        text.stylize("bold red")
    return text


def gpu_cells(e: GpuEntry, policy: HealthPolicy) -> tuple[Any, ...]:
    g = e.sample
    known: tuple[Any, ...]
    if g is None:
        known = (Text("-", style="dim"),) * 8
    else:
        known = (
            temperature_text(g.temperature_c, policy),
            margin_text(g.slowdown_margin_c, policy),
            power_text(g),
            busy_text(g, e.doubt),
            tensor_text(g, policy, e.doubt),
            memory_text(g),
            xid_text(g),
            errors_text(e.nvlink_errors),
        )
    reason = first_reason(e.verdict)
    if not e.verdict.reasons and e.doubt is not None:
        reason = Text(short(e.doubt.message), style="magenta")
    return (str(e.index), *known, severity_text(e.verdict.severity), reason)


def ib_cells(e: FabricEntry, policy: HealthPolicy) -> tuple[Any, ...]:
    p = e.ib
    return (
        e.port,
        state_text(e.state if p is None or not p.phys_state else f"{e.state} {p.phys_state}"),
        units.bit_rate(p.rate_bytes_per_s if p else None),
        units.bit_rate(p.rx_bytes_per_s if p else None),
        units.bit_rate(p.tx_bytes_per_s if p else None),
        errors_text(e.errors_in_window),
        units.rate(e.error_rate_per_s),
        wait_ratio_text(e.xmit_wait_ratio, policy),
        severity_text(e.verdict.severity),
        first_reason(e.verdict),
    )


def pod_cells(p: PodInfo, now: float) -> tuple[Any, ...]:
    phase = p.phase or "-"
    style = {"Running": "green", "Succeeded": "dim", "Failed": "red", "Pending": "yellow"}
    return (
        p.namespace,
        p.name,
        Text(phase, style=style.get(phase, "")),
        str(p.gpus) if p.gpus else "-",
        p.labels.get("krea.ai/workload") or "-",
        p.owner or "-",
        units.since(p.started_at, now),
    )


# --- header ---------------------------------------------------------------------------------


def yes_no(v: bool | None) -> Text:
    if v is None:
        return Text("unknown", style="magenta")
    return Text("yes" if v else "no", style="green" if v else "bold red")


def header_text(view: NodeView, snapshot: FleetSnapshot) -> Text:
    info, tel, verdict = view.info, view.telemetry, view.verdict
    out = Text()
    out.append(info.name, style="bold")
    out.append("  ")
    out.append_text(severity_text(verdict.severity))
    gpus = "-" if info.gpu_capacity is None else str(info.gpu_capacity)
    alloc = "-" if info.gpu_allocatable is None else str(info.gpu_allocatable)
    out.append(f"  GPUs {gpus} (allocatable {alloc})")
    for label in ("krea.ai/pool", "krea.ai/rack"):
        if info.labels.get(label):
            out.append(f"  {label.split('/')[1]}: {info.labels[label]}")
    if info.virtual:
        out.append("  virtual kubelet", style="cyan")
    for r in verdict.reasons:
        out.append("\n  • ")
        out.append(r.message, style=SEVERITY_STYLE[r.severity])
    out.append("\nReady: ")
    out.append_text(yes_no(info.ready))
    if info.ready_reason and info.ready is not True:
        out.append(f" ({info.ready_reason})")
    out.append("  cordoned: ")
    out.append(
        "yes" if info.unschedulable else "no", style="bold yellow" if info.unschedulable else ""
    )
    out.append("  schedulable: ")
    out.append_text(yes_no(info.schedulable))
    out.append("\nTaints: ")
    out.append(", ".join(str(t) for t in info.taints) or "-")
    ours = {k: v for k, v in sorted(info.annotations.items()) if k.startswith(OUR_ANNOTATIONS)}
    out.append("\nAnnotations: ")
    out.append(", ".join(f"{k}={short(v, 60)}" for k, v in ours.items()) or "-")
    out.append("\nTelemetry: ")
    if snapshot.telemetry_error:
        said = any(snapshot.telemetry_error in r.message for r in verdict.reasons)
        out.append("unavailable (see above)" if said else snapshot.telemetry_error, "bold red")
    elif tel is None:
        out.append("none for this node", style="magenta")
    elif tel.exporter_up is False:
        out.append(f"exporter down: {tel.error or 'no answer'}", style="bold red")
    elif tel.stale:
        out.append(f"stale: {tel.error or 'old samples'}", style="magenta")
    else:
        out.append(f"{units.age(tel.age_s)} old", style="green")
        out.append(f" from {snapshot.source or '-'}, window {snapshot.policy.window_text}")
    return out


def check_text(c: Check) -> Text:
    """One check of a validation: its figure against the baseline and where that comes
    from; a failing one's detail."""
    out = Text("  ")
    out.append("✓ " if c.passed else "✗ ", style="green" if c.passed else "bold red")
    out.append(c.name, style="bold" if not c.passed else "")
    figure = None
    if c.figure is not None:
        figure = f"{c.figure:.1f} {c.unit or ''}".rstrip()
        if c.baseline is not None:
            figure += f" against {c.baseline:.1f} ({c.baseline_from or 'baseline'})"
    if c.passed:
        out.append(f" {figure or c.detail}")
    else:
        out.append(f" {figure}: " if figure else " ")
        out.append(c.detail, style="red")
    return out


def validation_text(
    standing: NodeValidation | None,
    running: tuple[str, str] | None,
    now: float,
    *,
    can_validate: bool = True,
) -> Text:
    """The node's last validation (pass/fail, level, age, by whom, the Job, each check),
    its needs-repair label, the pending-validation taint, whether an evicted node was
    validated since, and the validation this dashboard waits for; where one is due (a
    failure, pending, none since an eviction) and the dashboard can act, that ``v``
    starts one."""
    out = Text("Validation: ", style="bold")
    v = standing.last if standing is not None else None
    if v is None:
        unreadable = standing is not None and standing.unreadable
        out.append("unreadable annotation" if unreadable else "none on record", style="dim")
    else:
        out.append("pass" if v.passed else "FAIL", style="bold green" if v.passed else "bold red")
        out.append(f" ({v.level}) {units.since(v.at, now)} ago by {v.by or '?'}")
        out.append(f", Job {v.job or '-'}", style="dim")
        for c in sorted(v.checks, key=lambda c: c.passed):
            out.append("\n")
            out.append_text(check_text(c))
    if standing is not None and standing.needs_repair is not None:
        out.append(f"\nneeds repair: {NEEDS_REPAIR_LABEL}={standing.needs_repair}", "bold red")
    if standing is not None and standing.pending:
        out.append(f"\npending validation: tainted {PENDING_TAINT_KEY} until it passes", "yellow")
    if standing is not None and standing.evicted_at is not None and not standing.since_eviction:
        out.append(
            f"\nevicted {units.since(standing.evicted_at, now)} ago; none since its eviction",
            style="yellow",
        )
    if running is not None:
        job, what = running
        out.append(f"\nrunning: {job} ({what}), waiting for its result…", style="cyan")
    elif (
        can_validate
        and standing is not None
        and (
            (v is not None and not v.passed) or standing.pending or standing.since_eviction is False
        )
    ):
        out.append("\n(v validates)", style="dim")
    return out


def nvlink_text(
    entries: Sequence[FabricEntry],
    gpus: Sequence[GpuEntry],
    window_s: float,
    counts: tuple[int, int] | None = None,
) -> Text:
    """``counts``: (links, up) as every view counts them (``fleet.nvlink_counts``)."""
    out = Text("NVLink: ", style="bold")
    if counts is None:
        counts = (
            sum(e.sample.nvlinks_total or 0 for e in gpus if e.sample),
            sum(e.sample.nvlinks_up or 0 for e in gpus if e.sample),
        )
    total, up = counts
    if not entries:
        if total:
            out.append(f"{up} of {total} links up", style="" if up == total else "bold red")
            out.append(" (no per-link counters)", style="dim")
        else:
            out.append("no link data", style="dim")
        return out
    down = sum(1 for e in entries if e.state == "DOWN")
    bad = [e for e in entries if e.verdict.severity is not Severity.OK]
    out.append(f"{max(total, len(entries))} links, ")
    out.append(f"{down} down", style="bold red" if down else "")
    out.append(", ")
    out.append(f"{len(bad)} with problems", style="bold red" if bad else "green")
    for e in bad[:MAX_NVLINK_LINES]:
        out.append(f"\n  {e.port} {e.state or '-'} ")
        out.append_text(severity_text(e.verdict.severity))
        out.append(
            f" errors {units.count(e.errors_in_window)} in {units.duration(window_s)} "
            f"({units.rate(e.error_rate_per_s)})"
        )
        if e.verdict.reasons:
            out.append(": " + "; ".join(r.message for r in e.verdict.reasons))
    if len(bad) > MAX_NVLINK_LINES:
        out.append(f"\n  … and {len(bad) - MAX_NVLINK_LINES} more (the Fabric screen has all)")
    return out


# --- history --------------------------------------------------------------------------------


def known_points(series: Sequence[float]) -> list[float]:
    """The known values, oldest first: an unknown refresh is left out of the line rather
    than drawn as zero."""
    return [v for v in series if not math.isnan(v)]


def history_label(name: str, series: Sequence[float], fmt: Any) -> Text:
    points = known_points(series)
    out = Text(f"{name} ")
    now = series[-1] if series else math.nan
    if len(points) < 2:
        out.append("no reading" if math.isnan(now) else "collecting…", style="dim")
        return out
    out.append("-" if math.isnan(now) else fmt(now), style="bold")
    out.append(f" {fmt(min(points))}–{fmt(max(points))}", style="dim")
    return out


class NodeScreen(DataScreen):
    SCREEN_NAME = "node"
    SCREEN_TITLE = "Node"
    KINDS: ClassVar[tuple[str, ...]] = ("fleet",)
    # the fleet read keeps recording every GPU's history (the sparklines) while one
    # node is shown; the node itself is read whole
    FAMILIES: ClassVar[tuple[str, ...] | None] = ("gpu",)
    HELP = (
        "One node: its verdict and every reason, its last validation (each check against "
        "the pool's baseline, needs-repair), each GPU (busy time next to tensor activity), "
        "recent temperature and tensor history, InfiniBand ports, NVLink links with "
        "problems, and the pods on it."
    )
    ACTIONS = (
        ("e", "evict this node: cordon, taint, drain (asks why, shows the plan)"),
        ("R", "restore this node: undo our evict"),
        (
            "v",
            "validate this node: a quick validation Job (DCGM diagnostics, NCCL all-reduce; "
            "shows the plan), then its result, recorded on the node",
        ),
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("e", "evict", "Evict"),
        Binding("R", "restore", "Restore"),
        Binding("v", "validate", "Validate"),
        Binding("g", "focus_table('gpus')", "GPUs"),
        Binding("i", "focus_table('ib')", "InfiniBand"),
        Binding("p", "focus_table('pods')", "Pods"),
    ]

    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node
        self.view: NodeView | None = None
        self.snapshot: FleetSnapshot | None = None
        self.vanished = False
        self._history_rows: list[int] = []
        self._ready = False

    def kinds(self) -> tuple[str, ...]:
        return ("fleet", node_key(self.node))

    def compose(self) -> ComposeResult:
        yield Static(f"Node {self.node}", classes="screen-title", id="title")
        with VerticalScroll(id="node-body"):
            yield Static(
                Text("waiting for the first read…", style="dim"),
                classes="summary",
                id="node-header",
            )
            yield Static("", classes="summary", id="validation")
            yield Static("GPUs", classes="pane-title", id="gpus-title")
            yield DataTable(id="gpus", cursor_type="row", zebra_stripes=True)
            yield Static("Recent history", classes="pane-title", id="history-title")
            with Vertical(id="history"):
                yield Static(Text("collecting…", style="dim"), id="history-note")
            yield Static("InfiniBand", classes="pane-title", id="ib-title")
            yield DataTable(id="ib", cursor_type="row", zebra_stripes=True)
            yield Static("", classes="summary", id="nvlink")
            yield Static("Pods", classes="pane-title", id="pods-title")
            yield DataTable(id="pods", cursor_type="row", zebra_stripes=True)
        yield from self.krea.screen_chrome()

    def on_mount(self) -> None:
        add_columns(self.query_one("#gpus", DataTable), GPU_COLUMNS)
        add_columns(self.query_one("#pods", DataTable), POD_COLUMNS)
        self.query_one("#gpus", DataTable).focus()
        self._ready = True
        for kind in self.kinds():
            loaded = self.krea.latest(kind)
            if loaded is not None:
                self.update_data(loaded)

    def action_node(self) -> str | None:
        return self.node

    def action_validate(self) -> None:
        """``v``: a quick validation of this node through the plan dialog; once it runs,
        the app waits for its Job in the background and the result shows here."""
        node, title = self.node, f"validate {self.node}"
        running = self.krea.validating.get(node)
        if running is not None:
            self.notify(f"{title}: {running[0]} is running ({running[1]}); its result shows here")
            return
        self.krea.start_action(
            title,
            lambda actions: actions.plan_validate([node], level="quick"),
            then=lambda plan: self.krea.wait_for_validations(plan.options.get("jobs") or {}),
        )

    def validation_changed(self, nodes: set[str]) -> None:
        if self._ready and self.node in nodes:
            self._show_validation()

    def _show_validation(self) -> None:
        standing = None if self.view is None else node_validation(self.view.info)
        came = self.krea.validations.get(self.node)  # the node's read may not have it yet
        last = None if standing is None else standing.last
        if came is not None and (last is None or last.at < came.at):
            standing = replace(standing or NodeValidation(self.node, None), last=came)
        self.query_one("#validation", Static).update(
            validation_text(
                standing,
                self.krea.validating.get(self.node),
                self.krea.clock(),
                can_validate=self.krea.actions is not None,
            )
        )

    def action_focus_table(self, table_id: str) -> None:
        table = self.query_one(f"#{table_id}", DataTable)
        table.focus()
        table.scroll_visible()

    # -- data ------------------------------------------------------------------------------

    def update_data(self, loaded: Loaded) -> None:
        if not self._ready:
            return  # on_mount fills from the app's data
        if isinstance(loaded, FleetLoaded):
            self._show_presence(loaded.snapshot)
        elif isinstance(loaded, NodeLoaded) and loaded.detail.view.info.name == self.node:
            self._show_node(loaded.detail)
            self._show_pods(loaded.detail.pods)

    def data_failed(self, kind: str, error: str) -> None:
        if not self._ready:
            return
        if kind == node_key(self.node):
            for wid in (*NODE_PARTS, "#pods"):
                self.query_one(wid).set_class(True, "stale")

    def _show_presence(self, snapshot: FleetSnapshot) -> None:
        """The fleet read says whether the node is still there."""
        if snapshot.view(self.node) is not None:
            self.vanished = False
            return
        self.vanished = True
        was = "was in the fleet; it is gone now" if self.view else "is not in the fleet"
        text = Text(f"{self.node} {was} (deleted, renamed, or never joined).", style="bold red")
        if self.view is not None:
            text.append("\nThe tables below are the last data seen.", style="dim")
        self.query_one("#node-header", Static).update(text)
        for wid in ("#gpus", "#history", "#ib", "#nvlink"):
            self.query_one(wid).set_class(True, "stale")
        if self.view is None:  # nothing will be collected for a node that is not there
            for note in self.query("#history-note"):
                if isinstance(note, Static):
                    note.update(Text("no history: the node is not in the fleet", style="dim"))

    def _show_node(self, detail: NodeDetail) -> None:
        if self.vanished:
            return  # the fleet read that came after this one found the node gone
        header = self.query_one("#node-header", Static)
        snapshot, view = detail.snapshot, detail.view
        self.view, self.snapshot = view, snapshot
        policy = snapshot.policy
        gpus = gpu_entries(snapshot)
        fabric = fabric_entries(snapshot, "all")
        ib = sorted((e for e in fabric if e.kind == "ib"), key=lambda e: e.port)
        links = [e for e in fabric if e.kind == "nvlink"]
        header.update(header_text(view, snapshot))
        self._show_validation()
        sync_table(
            self.query_one("#gpus", DataTable),
            {str(e.index): gpu_cells(e, policy) for e in sorted(gpus, key=lambda e: e.index)},
        )
        self.query_one("#gpus-title", Static).update(f"GPUs ({len(gpus)})")
        ib_table = self.query_one("#ib", DataTable)
        add_columns(ib_table, ib_columns(policy.window_s))  # (the first read names the window)
        sync_table(ib_table, {e.port: ib_cells(e, policy) for e in ib})
        ib_title = Text(f"InfiniBand ports ({len(ib)})" if ib else "InfiniBand: no port data")
        if ib:
            ib_title.append(f"   {LEGEND}", style="dim not bold")
        self.query_one("#ib-title", Static).update(ib_title)
        counts = nvlink_counts(view.telemetry) if usable(view.telemetry) else None
        self.query_one("#nvlink", Static).update(nvlink_text(links, gpus, policy.window_s, counts))
        if not view.info.virtual:
            self._show_history(self.krea.session.history(self.node), [e.index for e in gpus])
        for wid in NODE_PARTS:
            self.query_one(wid).set_class(False, "stale")

    def _show_pods(self, pods: Sequence[PodInfo]) -> None:
        now = self.krea.clock()
        rows = sorted(pods, key=lambda p: (p.namespace, p.name))
        sync_table(
            self.query_one("#pods", DataTable),
            {f"{p.namespace}/{p.name}": pod_cells(p, now) for p in rows},
        )
        gpus = sum(p.gpus for p in pods)
        self.query_one("#pods-title", Static).update(f"Pods ({len(pods)}, {gpus} GPUs requested)")
        self.query_one("#pods").set_class(False, "stale")

    def _show_history(self, history: GpuHistory | None, indices: Sequence[int]) -> None:
        title = self.query_one("#history-title", Static)
        note = self.query_one("#history-note", Static)
        points = len(history.times) if history is not None else 0
        if history is None or points < 2:
            title.update("Recent history")
            note.update(Text(f"collecting… ({points} of 2 refreshes so far)", style="dim"))
            note.display = True
            return
        span = history.times[-1] - history.times[0]
        title.update(
            f"Recent history: temperature and tensor activity, last {units.duration(span)} "
            f"({points} refreshes)"
        )
        note.display = False
        wanted = [i for i in indices if i in history.temperature_c][:MAX_SPARKLINES]
        box = self.query_one("#history", Vertical)
        for i in wanted:
            temps = history.temperature_c.get(i, ())
            tensor = history.tensor_active_ratio.get(i, ())
            temp_label = history_label(f"GPU {i:<2} temp", temps, units.celsius)
            tensor_label = history_label("tensor", tensor, units.percent)
            if i not in self._history_rows:
                self._history_rows.append(i)
                box.mount(
                    Horizontal(
                        Static(temp_label, classes="history-temp", id=f"hist-{i}-temp-label"),
                        Sparkline(known_points(temps), id=f"hist-{i}-temp"),
                        Static(tensor_label, classes="history-tensor", id=f"hist-{i}-tensor-label"),
                        Sparkline(known_points(tensor), id=f"hist-{i}-tensor"),
                        classes="history-row",
                        id=f"hist-{i}",
                    )
                )
                continue
            row = box.query(f"#hist-{i}")
            if not row:
                continue  # still being mounted; the next refresh fills it
            row.first().query_one(f"#hist-{i}-temp-label", Static).update(temp_label)
            row.first().query_one(f"#hist-{i}-temp", Sparkline).data = known_points(temps)
            row.first().query_one(f"#hist-{i}-tensor-label", Static).update(tensor_label)
            row.first().query_one(f"#hist-{i}-tensor", Sparkline).data = known_points(tensor)
