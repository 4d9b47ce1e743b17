"""Quantities as an operator reads them: one spelling of each, for the CLI's tables and
the dashboard alike. Pure strings; colours, styles and layout stay in the UI layers
(``commands/fmt.py``, ``screens/text.py``). The core keeps base units (seconds, bytes,
bytes/s, 0-1 ratios, °C, W, USD: docs/metrics.md); the conversions happen only here.

Every function takes None (and NaN) for "unknown" and prints ``UNKNOWN``, never 0.

Units, and why each:

* **ages** ("how long ago"): kubectl's AGE spelling (``45s``, ``5m30s``, ``3h5m``,
  ``2d4h``, ``30d``), so a pod's age here reads as ``kubectl get pods`` prints it. A
  negative age (the clocks of two machines a little apart) is ``0s``.
* **durations** (a span to plan with: a checkpoint interval, an MTBF): one decimal where
  it matters, in the largest unit that keeps it readable: ``45s``, ``21.6m``, ``5.4h``,
  ``77d``.
* **sizes**: binary (IEC) units, ``KiB``/``MiB``/``GiB``/``TiB``: GPU memory is built and
  stated in powers of two (nvidia-smi prints MiB, an "141 GB" H200 is 140 GiB), and
  Kubernetes memory quantities (``Gi``) and ``du -h`` count files the same way.
* **network rates and link speeds**: decimal bits per second (``400Gb/s``), the unit
  InfiniBand states speeds in (sysfs ``rate`` is ``400 Gb/sec (4X NDR)``, ``ibstat``
  prints ``Rate: 400``). Traffic uses the same unit as the link speed so that
  ``21.5Gb/s`` reads against ``400Gb/s``; the core holds bytes/s, the Prometheus base
  unit, and this module multiplies by 8.
* **event rates**: per second, three significant digits, SI prefixes past 1,000.
* **counts**: whole numbers with thousands separators. A window count is extrapolated by
  Prometheus, so a count above 0 but below 1 is ``<1``, never a ``0`` that is not zero.
* **percentages** of 0-1 ratios: whole percent unless asked for decimals; a share above
  0 that would print as 0 is ``<1%`` (or ``<0.1%``).
* temperatures ``°C``, power ``W``, money ``$`` (USD, cents).
"""

from __future__ import annotations

import math

UNKNOWN = "-"

_SI = ("", "k", "M", "G", "T", "P", "E")
_IEC = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def _unknown(value: float | None) -> bool:
    return value is None or value != value  # (NaN is not equal to itself)


def _sig3(value: float) -> str:
    """Three significant digits without trailing zeros: 400, 56, 21.5, 2.54, 0.5."""
    text = f"{value:.3g}"
    return text if "e" not in text else f"{value:.0f}"


def _scaled(value: float, base: float, prefixes: tuple[str, ...]) -> tuple[str, str]:
    """(digits, prefix) of ``value`` in the largest prefix that keeps it at 1 or more,
    moved up one where three digits would round it to ``base`` (999.7 -> 1k)."""
    magnitude = abs(value)
    index, top = 0, len(prefixes) - 1
    limit = 999.5 if base == 1000 else base - 0.5  # what three digits print below base
    while index < top and magnitude >= limit:
        magnitude /= base
        index += 1
    return ("-" if value < 0 else "") + _sig3(magnitude), prefixes[index]


# --- time --------------------------------------------------------------------------------


def age(seconds: float | None) -> str:
    """How long ago, as kubectl prints AGE (``duration.HumanDuration``): 45s, 5m30s, 12m,
    3h5m, 10h, 2d4h, 30d, 2y10d. Negative (clock skew) is 0s."""
    if _unknown(seconds) or (seconds is not None and math.isinf(seconds)):
        return UNKNOWN
    assert seconds is not None
    s = int(seconds) if seconds > 0 else 0
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if years < 8:
        rest = days % 365
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{years}y"


def since(unix_s: float | None, now: float) -> str:
    """The age of a Unix timestamp at ``now``."""
    return UNKNOWN if _unknown(unix_s) or unix_s is None else age(now - unix_s)


def _one_decimal(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def duration(seconds: float | None) -> str:
    """A span with one decimal where it matters: 5.5s, 45s, 21.6m, 5.4h, 3.2d, 77d.
    Negative is 0s (a span cannot be)."""
    if _unknown(seconds) or (seconds is not None and math.isinf(seconds)):
        return UNKNOWN
    assert seconds is not None
    s = max(0.0, seconds)
    if s < 120:
        return f"{_one_decimal(s)}s"
    if s < 7200:
        return f"{_one_decimal(s / 60)}m"
    if s < 172800:
        return f"{_one_decimal(s / 3600)}h"
    days = s / 86400
    return f"{_one_decimal(days) if days < 100 else f'{days:,.0f}'}d"


# --- bytes and bits ------------------------------------------------------------------------


def size(n_bytes: float | None) -> str:
    """A size in binary units: 512B, 9.9KiB, 12.3GiB, 140GiB."""
    if n_bytes is None or n_bytes != n_bytes:
        return UNKNOWN
    if abs(n_bytes) < 1023.5:
        return f"{n_bytes:.0f}B"
    digits, unit = _scaled(n_bytes / 1024, 1024, _IEC[1:])
    return digits + unit


def bit_rate(bytes_per_s: float | None) -> str:
    """A network rate or link speed, given in bytes/s, in decimal bits/s: 400Gb/s,
    21.5Gb/s, 153Mb/s, 12kb/s, 0b/s."""
    if _unknown(bytes_per_s):
        return UNKNOWN
    assert bytes_per_s is not None
    digits, prefix = _scaled(bytes_per_s * 8, 1000, _SI)
    return f"{digits}{prefix}b/s"


# --- counts and rates ----------------------------------------------------------------------


def count(n: float | None) -> str:
    """Events: 0, 7, 12,345; above 0 but under 1 (an extrapolated window count) is <1."""
    if n is None or n != n:
        return UNKNOWN
    if n == 0:
        return "0"
    text = f"{n:,.0f}"
    if text in ("0", "-0"):
        return "<1" if n > 0 else "0"
    return text


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 pod``, ``3 pods``, ``0 pods``: a count and its noun, agreeing."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def rate(per_s: float | None) -> str:
    """Events per second: 0/s, <0.01/s, 0.03/s, 12.5/s, 1.31k/s, 2.4M/s."""
    if _unknown(per_s):
        return UNKNOWN
    assert per_s is not None
    if per_s == 0:
        return "0/s"
    if abs(per_s) < 0.01:
        return "<0.01/s"
    digits, prefix = _scaled(per_s, 1000, _SI)
    return f"{digits}{prefix}/s"


def number(value: float | None, places: int = 0) -> str:
    """A plain quantity with thousands separators and ``places`` decimals (GPU-hours)."""
    if _unknown(value):
        return UNKNOWN
    return f"{value:,.{places}f}"


def percent(ratio: float | None, places: int = 0) -> str:
    """A 0-1 ratio in percent: 0%, 37%, 100%; above 0 but printing as 0: <1% (<0.1% with
    one place)."""
    if ratio is None or ratio != ratio:
        return UNKNOWN
    text = f"{ratio * 100:.{places}f}"
    if abs(ratio) < 0.01 and float(text) == 0:  # (rounds to nothing: say whether it is)
        return f"<{10.0**-places:g}%" if ratio > 0 else f"{0:.{places}f}%"
    return text + "%"


# --- physical and money --------------------------------------------------------------------


def celsius(value: float | None) -> str:
    return UNKNOWN if value is None or value != value else f"{value:.0f}°C"


def watts(value: float | None) -> str:
    return UNKNOWN if value is None or value != value else f"{value:.0f}W"


def usd(value: float | None) -> str:
    """Money in US dollars and cents: $0.00, $1,234.50, -$3.20."""
    if _unknown(value):
        return UNKNOWN
    assert value is not None
    sign = "-" if value < 0 and round(value, 2) != 0 else ""
    return f"{sign}${abs(value):,.2f}"
