"""Simulated time: ``speed`` simulated seconds pass per wall second."""

from __future__ import annotations

import datetime as dt
import threading
import time

from krea_ops.kube.times import rfc3339


class SimClock:
    """A clock that runs ``speed`` times faster than wall time, from ``start``.

    ``now()`` is a UTC datetime (the API server writes its timestamps from it), ``time()``
    the same as epoch seconds, ``wait(s)`` sleeps ``s`` simulated seconds or until
    ``stop`` is set.
    """

    def __init__(self, speed: float = 1.0, start: dt.datetime | None = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.speed = float(speed)
        self._wall0 = time.monotonic()
        self._sim0 = (start or dt.datetime.now(dt.UTC)).timestamp()
        self.stop = threading.Event()

    def time(self) -> float:
        return self._sim0 + (time.monotonic() - self._wall0) * self.speed

    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.time(), dt.UTC)

    def elapsed(self) -> float:
        """Simulated seconds since the clock started."""
        return (time.monotonic() - self._wall0) * self.speed

    def wall(self, sim_seconds: float) -> float:
        return sim_seconds / self.speed

    def wait(self, sim_seconds: float) -> bool:
        """Sleep ``sim_seconds`` of simulated time; True if the clock was stopped."""
        return self.stop.wait(max(sim_seconds, 0.0) / self.speed)

    def rfc3339(self) -> str:
        return rfc3339(self.time())
