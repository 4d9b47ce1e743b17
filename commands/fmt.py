"""Colour and layout for the CLI's tables: verdict and temperature colours, the first
reason of a row, timestamps for the JSON rows. Numbers are spelled by ``krea_ops.units``
(the dashboard spells them the same way); JSON/YAML/CSV carry the raw numbers."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

VERDICT_STYLE = {"OK": "green", "SUSPECT": "yellow", "UNKNOWN": "magenta", "BAD": "bold red"}


def verdict_style(key: str = "verdict") -> Callable[[dict[str, Any]], str | None]:
    return lambda row: VERDICT_STYLE.get(str(row.get(key)))


def temperature_style(
    hot_c: float, warm_c: float, key: str = "temperature_c"
) -> Callable[[dict[str, Any]], str | None]:
    def style(row: dict[str, Any]) -> str | None:
        t = row.get(key)
        if t is None:
            return None
        if t >= hot_c:
            return "bold red"
        if t >= warm_c:
            return "yellow"
        return "green"

    return style


def first_reason(reasons: list[str]) -> str:
    if not reasons:
        return "-"
    more = f" (+{len(reasons) - 1})" if len(reasons) > 1 else ""
    return reasons[0] + more


def iso(unix_s: float | None) -> str | None:
    if unix_s is None:
        return None
    return _iso(unix_s)


@functools.lru_cache(maxsize=4096)  # a fleet's rows share a few sample times
def _iso(unix_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))
