"""The world's two clocks: simulated time for its processes, wall time for the API."""

from __future__ import annotations

import threading
import time

from krea_ops.kube.times import rfc3339


class SimClock:
    """Simulated time, ``speed`` times faster than the wall clock, and the wall clock.

    ``time()`` is simulated epoch seconds, from the wall time the clock started at. The
    world's processes run on it: heat, failures and repairs, training steps and
    checkpoints, diurnal load, how long containers run and start.

    ``wall()`` is the wall clock. Every timestamp an actor writes to the API or compares
    with one it read (conditions, Leases, Events, start and finish times, annotations) is
    wall time, as the API server's own stamps are, so ages, lease expiry and grace
    periods read right in ``kubectl`` however fast the world runs, and after a restart
    on the same state. ``to_wall(s)`` is how long ``s`` simulated seconds last on it.

    ``wait(s)`` sleeps ``s`` simulated seconds or until ``stop`` is set.
    """

    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.speed = float(speed)
        self._wall0 = time.monotonic()
        self._sim0 = time.time()
        self.stop = threading.Event()

    def time(self) -> float:
        return self._sim0 + self.elapsed()

    def elapsed(self) -> float:
        """Simulated seconds since the clock started."""
        return (time.monotonic() - self._wall0) * self.speed

    @staticmethod
    def wall() -> float:
        return time.time()

    def to_wall(self, sim_seconds: float) -> float:
        """How many wall seconds ``sim_seconds`` of simulated time last."""
        return sim_seconds / self.speed

    def to_sim(self, wall_seconds: float) -> float:
        """How many simulated seconds pass in ``wall_seconds``."""
        return wall_seconds * self.speed

    def rfc3339(self) -> str:
        """Now on the wall clock, as the API writes it."""
        return rfc3339(self.wall())

    def wait(self, sim_seconds: float) -> bool:
        """Sleep ``sim_seconds`` of simulated time; True if the clock was stopped."""
        return self.stop.wait(max(sim_seconds, 0.0) / self.speed)
