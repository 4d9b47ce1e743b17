"""One renderer for every read command: table, wide, json, yaml, csv.

Rows are lists of dicts with snake_case keys and units in the key names; ``None`` prints
as ``-`` in tables and ``null`` in JSON/YAML, never as 0.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any

import orjson
import yaml


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


Formatter = Callable[[Any], str]
Styler = Callable[[dict[str, Any]], str | None]


def color_wanted() -> bool:
    """Colour only on a terminal, and never with NO_COLOR set (no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return "; ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return value


def render(
    rows: Sequence[dict[str, Any]],
    fmt: OutputFormat,
    *,
    columns: Sequence[str] | None = None,
    wide_columns: Sequence[str] | None = None,
    headers: Mapping[str, str] | None = None,
    formats: Mapping[str, Formatter] | None = None,
    styles: Mapping[str, Styler] | None = None,
    color: bool | None = None,
) -> str:
    """Render rows; ``columns`` picks the table view, ``wide_columns`` the wide one.

    Tables only: ``headers`` renames columns (default KEY in upper case), ``formats``
    turns a value into text (units, percentages; ``None`` is always ``-``), ``styles``
    gives a Rich style for a cell from its row (colour that carries meaning). ``color``
    defaults to ``color_wanted()``: plain text when piped."""
    if fmt is OutputFormat.json:
        # orjson: the same indented JSON ~25x faster than json.dumps(indent=2), which has
        # no C encoder (32 k GPU rows: 0.64 s -> 0.03 s); UTF-8, and NaN is null
        encoded = orjson.dumps(list(rows), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        return encoded.decode() + "\n"
    if fmt is OutputFormat.yaml:
        return yaml.safe_dump(list(rows), sort_keys=False)
    keys = list(rows[0].keys()) if rows else list(columns or [])
    if fmt is OutputFormat.csv:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_cell(row.get(k)) for k in keys})
        return buf.getvalue()
    shown = list(wide_columns or keys) if fmt is OutputFormat.wide else list(columns or keys)
    headers = headers or {}
    formats = formats or {}
    styles = styles or {}
    # (rich is imported here: -o json/yaml/csv never pay for it, ~30 ms of start-up)
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    use_color = color_wanted() if color is None else color
    body: list[list[Any]] = []
    widths = [len(headers.get(k, k.upper())) for k in shown]
    for row in rows:
        cells: list[Any] = []
        for i, k in enumerate(shown):
            value = row.get(k)
            text = "-" if value is None else (formats[k](value) if k in formats else _cell(value))
            style = styles[k](row) if (use_color and k in styles) else None
            cells.append(Text(text, style=style or ""))
            widths[i] = max(widths[i], len(text))
        body.append(cells)
    # Two spaces between columns; one where that makes a table fit an 80-column terminal
    # that two would not (a table of every GPU on a laptop's split pane)
    gap = 2 if sum(widths) + 2 * (len(widths) - 1) <= NARROW else 1
    table = Table(
        box=None,
        pad_edge=False,
        padding=(0, gap, 0, 0),
        header_style="bold" if use_color else "",
    )
    for key in shown:
        table.add_column(headers.get(key, key.upper()), no_wrap=True)
    for cells in body:
        table.add_row(*cells)
    console = Console(
        file=io.StringIO(),
        width=400,
        force_terminal=use_color,
        color_system="standard" if use_color else None,
        highlight=False,
    )
    console.print(table)
    out = str(console.file.getvalue())  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in out.split("\n"))


NARROW = 80  # columns: the terminal a table should still fit where it can


def emit(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
