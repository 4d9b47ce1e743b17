"""Typed messages from the dashboard's worker threads to the UI thread."""

from __future__ import annotations

from typing import Any

from textual.message import Message


class DataLoaded(Message):
    """A read of ``kind`` finished; ``data`` is the core's snapshot."""

    def __init__(self, kind: str, data: Any, took_s: float, at: float) -> None:
        super().__init__()
        self.kind = kind
        self.data = data
        self.took_s = took_s
        self.at = at


class DataFailed(Message):
    """A read of ``kind`` failed with a one-line ``error``."""

    def __init__(self, kind: str, error: str, at: float) -> None:
        super().__init__()
        self.kind = kind
        self.error = error
        self.at = at
