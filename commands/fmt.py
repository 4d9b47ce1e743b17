"""Text and colour for the CLI's tables: units, percentages, ages, verdict and
temperature colours. JSON/YAML/CSV never go through here (they carry raw numbers)."""

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


def celsius(v: float) -> str:
    return f"{v:.0f}°C"


def watts(v: float) -> str:
    return f"{v:.0f}W"


def percent(v: float) -> str:
    return f"{v * 100:.0f}%"


def rate(v: float) -> str:
    if v == 0:
        return "0"
    if v < 0.01:
        return f"{v:.1e}/s"
    return f"{v:,.2f}/s" if v < 100 else f"{v:,.0f}/s"


def count(v: float) -> str:
    return f"{v:,.0f}"


def size(v: float) -> str:
    n = float(v)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}TiB"


def bytes_rate(v: float) -> str:
    return size(v) + "/s"


def age(seconds: float) -> str:
    s = max(0.0, float(seconds))
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    if s < 172800:
        return f"{s / 3600:.0f}h"
    return f"{s / 86400:.0f}d"


def since(unix_s: float) -> str:
    return age(time.time() - unix_s)


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


def gib(v: float) -> str:
    """Memory in GiB, short: 0.5G, 12G, 141G."""
    g = float(v) / 1024**3
    return f"{g:.1f}G" if g < 10 else f"{g:.0f}G"
