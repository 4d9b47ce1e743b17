"""Formatting for the dashboard: units, ages, the status line. (The CLI has its own in
``commands/fmt.py``; the two UI layers never import each other.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from krea_ops.model import Severity

if TYPE_CHECKING:
    from screens.app import KreaOpsApp

SEVERITY_STYLE = {
    Severity.OK: "green",
    Severity.SUSPECT: "yellow",
    Severity.UNKNOWN: "magenta",
    Severity.BAD: "bold red",
}


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    if s < 172800:
        return f"{s / 3600:.0f}h"
    return f"{s / 86400:.0f}d"


def num(value: float | None, spec: str = ".0f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def size(value: float | None) -> str:
    if value is None:
        return "-"
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}TiB"


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
    info = app.hub.info()
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
        out.append(f"{age(fleet_age)} old", style="red" if app.is_stale("fleet") else "")
    fleet = app.data.get("fleet")
    if fleet is not None:
        counts = {s: 0 for s in Severity}
        for view in fleet.views:
            counts[view.verdict.severity] += 1
        for sev in (Severity.BAD, Severity.UNKNOWN, Severity.SUSPECT):
            if counts[sev]:
                out.append(f"  {sev}: {counts[sev]}", style=SEVERITY_STYLE[sev])
    if app.read_only:
        out.append("  [read-only]", style="bold")
    return out
