"""Burst screen: where inference has burst to and what it costs.

The virtual nodes with their taints (ours, i.e. the pause switch, apart from the
provider's and Kubernetes' own; a paused node is announced in a banner with its reason),
one row per provider behind each node (pods, GPUs, GPU-hours and cost so far, and where
those numbers come from), and every pod placed offsite. The summary line says how many
inference pods are pending with no node: waiting to burst, or for room.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.widgets import DataTable, Input, Static

from krea_ops import units
from krea_ops.burst.status import BurstPod, BurstStatus, VirtualNode, VirtualNodeTaint, cost_notes
from screens.base import DataScreen
from screens.messages import BurstLoaded, Loaded
from screens.text import sync_table

NODE_COLUMNS = (
    ("NODE", "node"),
    ("STATE", "state"),
    ("PROVIDER", "provider"),
    ("GPUS", "gpus"),
    ("PODS", "pods"),
    ("OUR TAINTS", "ours"),
    ("PROVIDER / KUBERNETES TAINTS", "theirs"),
    ("USAGE WRITTEN", "usage"),
)
PROVIDER_COLUMNS = (
    ("PROVIDER", "provider"),
    ("NODE", "node"),
    ("PODS", "pods"),
    ("GPUS", "gpus"),
    ("GPU-H", "gpu_hours"),
    ("COST", "cost"),
    ("$/GPU-H", "price"),
    ("CAPACITY", "capacity"),
    ("SOURCE", "source"),
)
POD_COLUMNS = (
    ("POD", "pod"),
    ("PHASE", "phase"),
    ("PROVIDER", "provider"),
    ("GPUS", "gpus"),
    ("$/GPU-H", "price"),
    ("GPU-H", "gpu_hours"),
    ("COST", "cost"),
    ("AGE", "age"),
    ("NODE", "node"),
)
READY = {True: ("Ready", "green"), False: ("NotReady", "bold red"), None: ("Unknown", "magenta")}
PHASE_STYLE = {"Running": "green", "Pending": "yellow", "Failed": "bold red", "Succeeded": "dim"}


def taint_text(taints: tuple[VirtualNodeTaint, ...]) -> str:
    if not taints:
        return "-"
    return ", ".join(
        f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in taints
    )


def node_state(node: VirtualNode) -> Text:
    text, style = READY[node.ready]
    out = Text()
    if node.paused:
        out.append("PAUSED", style="bold reverse red")
        out.append(" ")
    out.append(text, style=style)
    if node.cordoned:
        out.append(",SchedulingDisabled", style="yellow")
    return out


def node_cells(node: VirtualNode, now: float) -> tuple[Any, ...]:
    gpus = "-" if node.gpu_allocatable is None else f"{node.gpu_allocatable:,}"
    if node.gpu_capacity is not None and node.gpu_capacity != node.gpu_allocatable:
        gpus += f"/{node.gpu_capacity:,}"
    ours = Text(taint_text(node.our_taints), style="bold red" if node.paused else "dim")
    usage = None if node.usage_updated_at is None else now - node.usage_updated_at
    return (
        node.name,
        node_state(node),
        node.provider or "-",
        gpus,
        str(sum(1 for p in node.pods if p.active)),
        ours,
        taint_text(node.provider_taints),
        units.UNKNOWN if usage is None else f"{units.age(usage)} ago",
    )


def pod_cells(pod: BurstPod, node: str) -> tuple[Any, ...]:
    return (
        f"{pod.namespace}/{pod.name}",
        Text(pod.phase or "-", style=PHASE_STYLE.get(pod.phase or "", "")),
        pod.provider or "-",
        str(pod.gpus),
        units.usd(pod.usd_per_gpu_hour),
        units.number(pod.gpu_hours, 2),
        units.usd(pod.cost_usd),
        units.age(pod.age_s),
        node,
    )


def paused_text(status: BurstStatus) -> Text:
    out = Text()
    for node in status.nodes:
        if not node.paused:
            continue
        if out:
            out.append("\n")
        out.append(f"PAUSED: bursting to {node.name} is paused: ")
        out.append(node.pause_reason or "no reason given", style="bold")
        out.append(" (no new placements; running pods stay)")
    return out


def summary_text(status: BurstStatus) -> Text:
    out = Text()
    if not status.nodes:
        out.append(
            "no virtual nodes found (labels type=virtual-kubelet, "
            "virtual-node.interlink/type, kubernetes.io/os=virtual-kubelet, liqo.io/type)",
            style="dim",
        )
        return out
    pods = [p for n in status.nodes for p in n.pods if p.active]
    gpus = sum(p.gpus for p in pods)
    costs = [t.cost_usd for n in status.nodes for t in n.providers]
    out.append(f"{len(status.nodes)} virtual node{'s' if len(status.nodes) != 1 else ''}", "bold")
    out.append(f"  offsite: {len(pods)} pods on {gpus} GPUs")
    out.append("  cost so far: ")
    known = [c for c in costs if c is not None]
    out.append(units.usd(sum(known) if known and len(known) == len(costs) else None), style="bold")
    pending = status.pending_inference_pods
    out.append("  inference pending with no node: ")
    out.append(
        "-" if pending is None else str(pending),
        style="bold yellow" if pending else "",
    )
    if pending and status.paused:
        out.append(" (bursting is paused)", style="red")
    elif pending:
        out.append(" (waiting to burst or for room)", style="dim")
    for note in cost_notes(status):
        out.append("\n" + note, style="dim")
    return out


class BurstScreen(DataScreen):
    SCREEN_NAME = "burst"
    SCREEN_TITLE = "Burst"
    KINDS: ClassVar[tuple[str, ...]] = ("fleet", "burst")
    FILTER_FOCUS = "#pod-table"
    HELP = (
        "Inference burst: virtual nodes and their taints (PAUSED when our pause taint is "
        "on), GPU-hours and cost per provider, the pods placed offsite, and the inference "
        "pods waiting with no node."
    )
    ACTIONS = (
        ("b", "migrate inference back in-cluster while GPUs are free (paced, shows the plan)"),
        ("o", "migrate inference out to the virtual nodes (clears GPUs for a training)"),
        ("p", "pause bursting: our taint on every virtual node (asks why)"),
        ("P", "unpause bursting: our taint off, nothing else"),
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("b", "migrate('back')", "Migrate back"),
        Binding("o", "migrate('out')", "Migrate out"),
        Binding("p", "pause", "Pause bursting"),
        Binding("P", "unpause", "Unpause"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.status: BurstStatus | None = None
        self.filter_text = ""

    def compose(self) -> ComposeResult:
        yield Static("Burst", classes="screen-title", id="title")
        yield Static("", id="paused")
        yield Static(
            Text("waiting for the first read…", style="dim"),
            classes="summary burst-data",
            id="burst-summary",
        )
        yield Static("Virtual nodes", classes="pane-title")
        yield self._table("vnode-table", NODE_COLUMNS)
        yield Static("Providers", classes="pane-title")
        yield self._table("provider-table", PROVIDER_COLUMNS)
        yield Static("Pods placed offsite", classes="pane-title", id="pods-title")
        yield self._table("pod-table", POD_COLUMNS)
        yield Input(
            placeholder="filter pods (Enter keeps it, Esc clears)",
            id="filter",
            select_on_focus=False,
        )
        yield from self.krea.screen_chrome()

    @staticmethod
    def _table(table_id: str, columns: tuple[tuple[str, str], ...]) -> DataTable[Any]:
        table: DataTable[Any] = DataTable(
            id=table_id, cursor_type="row", zebra_stripes=True, classes="burst-data"
        )
        for label, key in columns:
            table.add_column(label, key=key)
        return table

    def on_mount(self) -> None:
        self.query_one("#pod-table", DataTable).focus()
        loaded = self.krea.latest("burst")
        if loaded is not None:
            self.update_data(loaded)

    def update_data(self, loaded: Loaded) -> None:
        if not isinstance(loaded, BurstLoaded):
            return
        try:
            self.query_one("#pod-table", DataTable)
        except NoMatches:
            return
        self.status = loaded.status
        self._show()

    def _show(self) -> None:
        status = self.status
        if status is None:
            return
        now = status.collected_at
        nodes = {n.name: node_cells(n, now) for n in status.nodes}
        providers = {
            f"{n.name}/{t.provider}": (
                t.provider,
                n.name,
                str(t.pods),
                str(t.gpus_in_use),
                units.number(t.gpu_hours, 2),
                units.usd(t.cost_usd),
                units.usd(t.usd_per_gpu_hour),
                "-" if t.capacity_gpus is None else f"{t.capacity_gpus:,}",
                t.source,
            )
            for n in status.nodes
            for t in n.providers
        }
        needle = self.filter_text.lower()
        all_pods = {f"{p.namespace}/{p.name}": pod_cells(p, n.name) for n in status.nodes
                    for p in n.pods}  # fmt: skip
        pods = {
            k: cells
            for k, cells in all_pods.items()
            if not needle or any(needle in str(c).lower() for c in cells)
        }
        with self.app.batch_update():
            sync_table(self.query_one("#vnode-table", DataTable), nodes)
            sync_table(self.query_one("#provider-table", DataTable), providers)
            sync_table(self.query_one("#pod-table", DataTable), pods, order=lambda k: k)
            banner = self.query_one("#paused", Static)
            banner.update(paused_text(status))
            banner.display = status.paused
            self.query_one("#burst-summary", Static).update(summary_text(status))
            shown = f"{len(pods)} of {len(all_pods)}" if needle else str(len(pods))
            self.query_one("#pods-title", Static).update(
                f"Pods placed offsite: {shown}"
                + (f"   filter: {self.filter_text}" if needle else "")
            )
            for widget in self.query(".burst-data"):
                widget.set_class(False, "stale")

    def data_failed(self, kind: str, error: str) -> None:
        if kind != "burst":
            return
        for widget in self.query(".burst-data"):
            widget.set_class(True, "stale")

    # -- actions ----------------------------------------------------------------------

    def action_migrate(self, direction: str) -> None:
        """``b``/``o``: ``burst migrate --back|--out`` with its defaults: as many pods as
        the free GPUs on the other side hold, each waited for until its replacement is
        Ready, one at a time per workload."""
        self.krea.start_action(
            f"migrate {direction}",
            lambda actions: actions.plan_burst_migrate(direction=direction),
        )

    def action_pause(self) -> None:
        if not self.krea.can_act("pause bursting"):
            return
        from screens.dialogs import ReasonScreen

        def reasoned(reason: str | None) -> None:
            if reason:
                self.krea.start_action(
                    "pause bursting", lambda actions: actions.plan_burst_pause(reason=reason)
                )

        self.app.push_screen(
            ReasonScreen(
                "Pause bursting",
                question="Why? (recorded on every virtual node and in the audit log)",
                placeholder="e.g. provider outage",
            ),
            reasoned,
        )

    def action_unpause(self) -> None:
        self.krea.start_action("unpause bursting", lambda actions: actions.plan_burst_unpause())

    # -- filter ---------------------------------------------------------------------

    def apply_filter(self, text: str) -> None:
        self.filter_text = text
        self._show()
