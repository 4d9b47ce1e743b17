"""Colour and layout for the dashboard: severity colours, bars, the status line, keyed
table updates. Numbers are spelled by ``krea_ops.units``, as in the CLI (the two UI
layers never import each other; both import the core)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.text import Text

from krea_ops import units
from krea_ops.model import Severity
from screens.messages import ControllersLoaded

if TYPE_CHECKING:
    from screens.app import KreaOpsApp

SEVERITY_STYLE = {
    Severity.OK: "green",
    Severity.SUSPECT: "yellow",
    Severity.UNKNOWN: "magenta",
    Severity.BAD: "bold red",
}


def severity_text(sev: Severity) -> Text:
    return Text(str(sev), style=SEVERITY_STYLE[sev])


def bar(used: float | None, total: float | None, width: int = 20) -> Text:
    """A quota bar: used of total, overflow (borrowing) marked."""
    if used is None or not total:
        return Text("?" * width, style="dim")
    ratio = used / total
    filled = min(width, round(min(ratio, 1.0) * width))
    text = Text("█" * filled, style="red" if ratio > 1 else "green")
    text.append("░" * (width - filled), style="dim")
    return text


def status_text(app: KreaOpsApp) -> Text:
    """cluster · context · telemetry · data age · verdict counts."""
    info = app.session.info()
    out = Text()
    out.append("krea-ops ", style="bold")
    out.append(info.cluster)
    if info.context:
        out.append(f" ({info.context})")
    out.append("  telemetry: ")
    out.append(info.telemetry, style="red" if info.telemetry.startswith("none") else "")
    fleet_age = app.data_age("fleet")
    out.append("  data: ")
    if fleet_age is None:
        out.append("loading…", style="dim")
    else:
        out.append(f"{units.age(fleet_age)} old", style="red" if app.is_stale("fleet") else "")
    fleet = app.fleet_snapshot()
    if fleet is not None:
        counts = {s: 0 for s in Severity}
        for view in fleet.views:
            counts[view.verdict.severity] += 1
        for sev in (Severity.BAD, Severity.UNKNOWN, Severity.SUSPECT):
            if counts[sev]:
                out.append(f"  {sev}: {counts[sev]}", style=SEVERITY_STYLE[sev])
    loaded = app.latest("controllers")
    if isinstance(loaded, ControllersLoaded):
        out.append_text(controllers_text(loaded.rows))
    if app.read_only:
        out.append("  [read-only]", style="bold")
    return out


def controllers_text(rows: list[dict[str, Any]]) -> Text:
    """The header's controllers: how many of them run (a leader holds the Lease),
    node-health's blast cap and veto when they hold (red: automation is holding back), and
    the trainings it judges HUNG or STRAGGLER."""
    out = Text("  controllers: ")
    running = [r for r in rows if r.get("running")]
    if not running:
        out.append("none running", style="dim")
        return out
    out.append(f"{len(running)}/{len(rows)} led", style="green")
    for row in rows:
        cap = row.get("blast_cap") if row.get("running") else None
        if isinstance(cap, dict) and cap.get("limit") is not None:
            # automation's quarantines against its cap; operators' evicts apart (the cap
            # does not count them)
            quarantined, limit = cap.get("quarantined_unacked", 0), cap["limit"]
            style = "bold red" if cap.get("reached") else ""
            out.append(f"  node-health holds {quarantined}/{limit}", style=style)
            if cap.get("reached"):
                out.append(" (cap reached)", style="red")
            if cap.get("operators"):
                out.append(f"  {units.counted(int(cap['operators']), 'node')} out by operators")
        runs = row.get("runs") if row.get("running") else None
        for state, names in (runs or {}).items() if isinstance(runs, dict) else ():
            style = "bold red" if state == "HUNG" else "yellow"
            out.append(f"  {units.counted(len(names), 'run')} {state}", style=style)
        veto = row.get("veto") if row.get("running") else None
        if isinstance(veto, dict) and veto.get("active"):
            classes = ", ".join(sorted(veto.get("classes") or {}))
            out.append(f"  VETO: {classes} (fleet-wide signal)", style="bold red")
    return out


# -- queue, burst and training screens -------------------------------------------------


def signed(value: float | None) -> Text:
    """A drift: negative bold red (promised GPUs no healthy node has), zero dim."""
    if value is None:
        return Text("-", style="dim")
    if value < 0:
        return Text(f"{value:+g}", style="bold red")
    return Text(f"{value:+g}" if value else "0", style="green" if value else "dim")


def quota_bar(
    nominal: float | None, reserved: float | None, used: float | None, width: int = 16
) -> Text:
    """Quota as one bar: used (solid), reserved but not yet used (shaded), free (dots),
    and reservation above nominal, i.e. borrowed, in yellow past the end."""
    if nominal is None or reserved is None:
        return Text("?" * width, style="dim")
    used_v = min(used or 0.0, reserved)
    scale = max(nominal, reserved, 1e-9)
    cells = max(1, width)

    def span(value: float) -> int:
        return round(min(max(value, 0.0), scale) / scale * cells)

    own = span(min(reserved, nominal))
    solid = min(span(min(used_v, nominal)), own)
    borrowed = span(reserved) - own
    free = max(cells - own - borrowed, 0)
    text = Text("█" * solid, style="green")
    text.append("▓" * (own - solid), style="cyan")
    text.append("░" * free, style="dim")
    text.append("█" * borrowed, style="yellow")
    return text


def sync_table(
    table: Any, rows: Mapping[str, Sequence[Any]], order: Callable[[str], Any] | None = None
) -> None:
    """Make a DataTable show ``rows`` (row key -> cells, in column order) without clearing
    it: gone keys are removed, new keys added, changed cells updated, and the rows put in
    the mapping's order (or sorted by ``order(key)``) only when that order changed. The
    cursor stays on its row key."""
    keys = list(rows) if order is None else sorted(rows, key=order)
    cursor_key = table_cursor_key(table)
    with table.app.batch_update():
        for row_key in [k for k in table.rows if k.value not in rows]:
            table.remove_row(row_key)
        columns = table.columns
        for key in keys:
            cells = rows[key]
            if key in table.rows:
                for column, before, after in zip(columns, table.get_row(key), cells, strict=False):
                    if before != after:
                        # update_width re-measures the whole column for every cell it is
                        # asked for (seconds for 500 changed rows): only when it must grow
                        grow = cell_width(after) > columns[column].content_width
                        table.update_cell(key, column, after, update_width=grow)
            else:
                table.add_row(*cells, key=key)
        if [r.key.value for r in table.ordered_rows] != keys:
            # DataTable sorts by cell values, not row keys: rank rows by their cells
            rank = {_signature(rows[k]): i for i, k in enumerate(keys)}
            table.sort(key=lambda values: rank.get(_signature(values), len(rank)))
        if cursor_key is not None and cursor_key in rows:
            index = table.get_row_index(cursor_key)
            if index != table.cursor_row:
                table.move_cursor(row=index, animate=False, scroll=False)


def _signature(cells: Sequence[Any]) -> tuple[str, ...]:
    return tuple(str(c) for c in cells)


def cell_width(cell: Any) -> int:
    return cell.cell_len if isinstance(cell, Text) else cell_len(str(cell))


def table_cursor_key(table: Any) -> str | None:
    """The row key under a DataTable's cursor, None when it is empty."""
    if not table.row_count or not table.is_valid_row_index(table.cursor_row):
        return None
    row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
    return None if row_key.value is None else str(row_key.value)
