"""One renderer for every read command: table, wide, json, yaml, csv.

Rows are lists of dicts with snake_case keys and units in the key names; ``None`` prints
as ``-`` in tables and ``null`` in JSON/YAML, never as 0.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table


class OutputFormat(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"
    csv = "csv"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, list | tuple):
        return ",".join(_cell(v) for v in value) or "-"
    return str(value)


def render(
    rows: Sequence[dict[str, Any]],
    fmt: OutputFormat,
    *,
    columns: Sequence[str] | None = None,
    wide_columns: Sequence[str] | None = None,
) -> str:
    """Render rows; ``columns`` picks the table view, ``wide_columns`` the wide one."""
    if fmt is OutputFormat.json:
        return json.dumps(list(rows), indent=2, sort_keys=False) + "\n"
    if fmt is OutputFormat.yaml:
        return yaml.safe_dump(list(rows), sort_keys=False)
    keys = list(rows[0].keys()) if rows else list(columns or [])
    if fmt is OutputFormat.csv:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in keys})
        return buf.getvalue()
    shown = list(wide_columns or keys) if fmt is OutputFormat.wide else list(columns or keys)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for key in shown:
        table.add_column(key.upper())
    for row in rows:
        table.add_row(*(_cell(row.get(k)) for k in shown))
    console = Console(file=io.StringIO(), width=200, force_terminal=False, color_system=None)
    console.print(table)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return str(out)


def emit(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
