"""Kubernetes timestamps: ``metav1.Time`` (RFC 3339, seconds, ``2026-11-29T21:00:00Z``) and
``metav1.MicroTime`` (``2026-11-29T21:00:00.123456Z``, Lease renew times, Events).

One parser and one pair of formatters for the product and the simulator. The API writes
UTC with ``Z``; offsets (``+02:00``) and fractions of any length are accepted on read, as
Go's ``time.RFC3339`` parser accepts them.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime


def parse_time(text: str | None) -> float | None:
    """An RFC 3339 timestamp as Unix seconds; None when absent, not a string (any other
    JSON value a malformed object holds there) or not RFC 3339."""
    if not text or not isinstance(text, str):
        return None
    return _parse_text(text)


@functools.lru_cache(maxsize=8192)  # list reads repeat a few thousand distinct stamps
def _parse_text(text: str) -> float | None:
    # RFC 3339 only: a date, "T" (or "t"), a time and a zone; datetime.fromisoformat on
    # its own also takes "2026-11-29 21:00" and basic-format "20261129T2100" (~25x faster
    # than strptime, which matters at 4,096 nodes a list)
    if len(text) < 20 or text[4] != "-" or text[10] not in "Tt" or text[-1] not in "Zz0123456789":
        return None
    if text[-1] not in "Zz" and text[-6] not in "+-":
        return None
    try:
        stamp = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1] in "Zz" else text)
    except ValueError:
        return None
    if stamp.tzinfo is None:  # pragma: no cover - the zone check above requires one
        return None
    return stamp.timestamp()


def rfc3339(unix_s: float) -> str:
    """``metav1.Time``: whole seconds, UTC, ``Z``."""
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(unix_s: float) -> str:
    """``metav1.MicroTime``: microseconds, UTC, ``Z`` (Lease ``renewTime``, Event
    ``eventTime``)."""
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def nano_time(unix_s: float) -> str:
    """RFC 3339 with nanoseconds, UTC, ``Z``: the CRI log timestamp ``kubectl logs
    --timestamps`` prints."""
    nanos = min(round((unix_s - int(unix_s)) * 1e9), 999_999_999)
    return datetime.fromtimestamp(int(unix_s), UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{nanos:09d}Z"
