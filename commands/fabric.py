"""``krea-ops fabric``: InfiniBand ports and NVLink links ranked by errors and fabric wait."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import typer

from commands import fmt
from commands.common import OutputOption, read_fleet
from commands.gpus import attention_lines, source_line
from commands.output import Formatter, OutputFormat, emit, render
from krea_ops import units
from krea_ops.errors import Unavailable
from krea_ops.fleet import FabricEntry, FleetSnapshot, fabric_entries
from krea_ops.telemetry.dialects import FABRIC

# what the fabric rows are built from (telemetry.dialects groups): every port's and
# link's readings, and of the GPUs only what says which links to read (``LINKS``)
FABRIC_FAMILIES = FABRIC


class FabricKind(StrEnum):
    all = "all"
    ib = "ib"
    nvlink = "nvlink"


COLUMNS = [
    "node",
    "kind",
    "port",
    "state",
    "errors_in_window",
    "error_rate_per_s",
    "xmit_wait_ratio",
    "verdict",
]
WIDE = [
    "node",
    "kind",
    "port",
    "state",
    "phys_state",
    "rate_bytes_per_s",
    "rx_bytes_per_s",
    "tx_bytes_per_s",
    "errors_total",
    "errors_in_window",
    "error_rate_per_s",
    "link_downed_in_window",
    "xmit_wait_bytes_per_s",
    "xmit_wait_ratio",
    "saturated",
    "verdict",
    "reasons",
]
FORMATS: dict[str, Formatter] = {
    "errors_in_window": units.count,
    "errors_total": units.count,
    "link_downed_in_window": units.count,
    "error_rate_per_s": units.rate,
    "xmit_wait_bytes_per_s": units.bit_rate,
    "xmit_wait_ratio": units.percent,
    "rate_bytes_per_s": units.bit_rate,
    "rx_bytes_per_s": units.bit_rate,
    "tx_bytes_per_s": units.bit_rate,
    "reasons": fmt.first_reason,
}
LEGEND = "WAIT%: share of time with data to send but no credit (port_xmit_wait x 8 B / link speed)"


def headers(window_s: float) -> dict[str, str]:
    """Column headers; the window counts name their window (``ERRORS/5m``)."""
    window = units.duration(window_s)
    return {
        "errors_in_window": f"ERRORS/{window}",
        "error_rate_per_s": "ERR-RATE",
        "xmit_wait_bytes_per_s": "WAIT-BW",
        "xmit_wait_ratio": "WAIT%",
        "rate_bytes_per_s": "SPEED",
        "rx_bytes_per_s": "RX",
        "tx_bytes_per_s": "TX",
        "errors_total": "ERRORS-TOTAL",
        "link_downed_in_window": f"DOWNED/{window}",
        "phys_state": "PHYS",
    }


def fabric_row(e: FabricEntry) -> dict[str, Any]:
    p = e.ib
    return {
        "node": e.node,
        "kind": e.kind,
        "port": e.port,
        "state": e.state,
        "phys_state": p.phys_state if p else None,
        "rate_bytes_per_s": p.rate_bytes_per_s if p else None,
        "rx_bytes_per_s": p.rx_bytes_per_s if p else None,
        "tx_bytes_per_s": p.tx_bytes_per_s if p else None,
        "errors_total": e.errors_total,
        "errors_in_window": e.errors_in_window,
        "error_rate_per_s": e.error_rate_per_s,
        "link_downed_in_window": p.error_increase.get("link_downed") if p else None,
        "xmit_wait_per_s": e.xmit_wait_per_s,
        "xmit_wait_bytes_per_s": e.xmit_wait_bytes_per_s,
        "xmit_wait_ratio": e.xmit_wait_ratio,
        "counters": dict(p.errors_total if p else e.nvlink.errors_total if e.nvlink else {}),
        "saturated": sorted(p.saturated) if p else [],
        "verdict": str(e.verdict.severity),
        "reasons": [r.message for r in e.verdict.reasons],
    }


def fabric_rows(snapshot: FleetSnapshot, kind: FabricKind) -> list[dict[str, Any]]:
    return [fabric_row(e) for e in fabric_entries(snapshot, kind.value)]


def register(app: typer.Typer) -> None:
    @app.command("fabric", rich_help_panel="Fleet")
    def fabric(
        ctx: typer.Context,
        node: str = typer.Option(None, "--node", help="only this node"),
        selector: str = typer.Option(
            None, "--selector", "-l", help="only nodes matching this label selector"
        ),
        kind: FabricKind = typer.Option(
            FabricKind.all,
            "--kind",
            help="InfiniBand ports, NVLink links or both",
            case_sensitive=False,
        ),
        top: int = typer.Option(0, "--top", min=0, help="only the N worst rows (0: all)"),
        output: OutputFormat = OutputOption,
    ) -> None:
        """One row per InfiniBand port and NVLink link, worst first: errors over the
        telemetry window (never more than the counters hold), their rate, and the share
        of the time each IB port waited for credit to send (congestion)."""
        snapshot = read_fleet(ctx, node=node, selector=selector, families=FABRIC_FAMILIES)
        if snapshot.telemetry_error:
            raise Unavailable(snapshot.telemetry_error)
        rows = fabric_rows(snapshot, kind)
        if top:
            rows = rows[:top]
        text = render(
            rows,
            output,
            columns=COLUMNS,
            wide_columns=WIDE,
            headers=headers(snapshot.policy.window_s),
            formats=FORMATS,
            styles={"verdict": fmt.verdict_style()},
        )
        if output is OutputFormat.table:
            text = source_line(snapshot) + text
        if output in (OutputFormat.table, OutputFormat.wide) and any(
            r["kind"] == "ib" for r in rows
        ):
            text += LEGEND + "\n"
        if output is OutputFormat.table:
            text += attention_lines(rows, lambda r: f"{r['node']} {r['port']}")
        emit(text)
