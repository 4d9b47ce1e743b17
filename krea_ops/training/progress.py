"""A training run's progress, from what its rank 0 logs (pure).

torchtitan's metrics line (``[titan] 2026-12-06 13:00:10,123 - root - INFO - step: 40
loss: ...``, every ``log_freq`` steps) says which step the run reached and when, on the
trainer's own clock (UTC in the container). ``points`` turns a log tail into
``(time, step)`` points; ``remember`` keeps a run's points across passes (the tail read
each pass is short, the baseline needs a longer window), and ``progress`` says what they
show:

* the last step and its age: how long rank 0 has logged no new step;
* the step time now (seconds per step over the last ``recent_s``) and the run's
  baseline: the median step time of the intervals before that, within ``window_s``, in
  the current attempt, leaving out its first ``grace_s`` (a resumed run compiles, loads
  and warms up; its first steps are slow);
* when the attempt began (the ``Training starts at step N.`` line, else rank 0's pod's
  start, else its first point).

A run's history is kept per attempt: a restart (the JobSet's ``status.restarts`` moving
on) or a step going backwards (a resume from an older checkpoint) starts it again.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# torchtitan's logging format: "[titan] %(asctime)s - %(name)s - %(levelname)s - ..."
# with logging's default asctime ("2026-12-06 13:00:10,123")
_STAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})"
_STEP_LINE = re.compile(r"\[titan\] " + _STAMP + r" - \S+ - \w+ - step:\s*(\d+)\b")
_START_LINE = re.compile(r"\[titan\] " + _STAMP + r" - \S+ - \w+ - Training starts at step (\d+)")

KEEP_POINTS = 240  # per run: at torchtitan's 10-step logging and a few s a step, hours


def _when(day_time: str, millis: str) -> float:
    moment = dt.datetime.strptime(day_time, "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.UTC)
    return moment.timestamp() + int(millis) / 1000.0


def points(lines: Iterable[str]) -> list[tuple[float, int]]:
    """The ``(time, step)`` of every metrics line, in log order."""
    out = []
    for line in lines:
        m = _STEP_LINE.search(line)
        if m:
            out.append((_when(m.group(1), m.group(2)), int(m.group(3))))
    return out


def started(lines: Iterable[str]) -> tuple[float, int] | None:
    """When the attempt said ``Training starts at step N.``, and N; None if not in the
    lines."""
    found = None
    for line in lines:
        m = _START_LINE.search(line)
        if m:
            found = (_when(m.group(1), m.group(2)), int(m.group(3)))
    return found


def remember(
    prev: Mapping[str, Any] | None,
    uid: str,
    attempt: int,
    lines: Sequence[str],
    head: Sequence[str] = (),
    *,
    keep_s: float,
    began: float | None = None,
) -> dict[str, Any]:
    """A run's history after this pass (JSON): ``uid``, ``attempt``, ``start`` (the attempt's
    start on the trainer's clock, or None) and ``points`` (``[time, step]``, oldest first,
    within ``keep_s`` of the newest). ``prev``: the last pass's history of the run;
    ``began``: when rank 0's pod started, the start where the log does not say it."""
    same = isinstance(prev, Mapping) and prev.get("uid") == uid and prev.get("attempt") == attempt
    kept: list[list[float]] = []
    start = None
    if same and isinstance(prev, Mapping):
        kept = [
            [float(p[0]), int(p[1])]
            for p in prev.get("points") or ()
            if isinstance(p, (list, tuple)) and len(p) == 2
        ]
        raw = prev.get("start")
        start = float(raw) if isinstance(raw, (int, float)) else None
    said = started([*head, *lines])
    if said is not None and (start is None or said[0] > start):
        start = said[0]
        kept = [p for p in kept if p[0] >= start]
    if start is None and began is not None:
        start = began
    for t, step in points(lines):
        if kept and step < kept[-1][1] and t > kept[-1][0]:
            kept = []  # back to an older step, later: a resume within the attempt
        if not kept or (step > kept[-1][1] and t >= kept[-1][0]):
            kept.append([t, step])
    if kept:
        horizon = kept[-1][0] - keep_s
        kept = [p for p in kept if p[0] >= horizon][-KEEP_POINTS:]
    return {"uid": uid, "attempt": attempt, "start": start, "points": kept}


@dataclass(frozen=True)
class Progress:
    """What a run's history shows at ``now``. Times are Unix seconds; step times seconds
    per step; None where the history does not say."""

    last_step: int | None
    last_step_at: float | None
    started_at: float | None
    step_time_s: float | None  # over the last ``recent_s``
    baseline_s: float | None  # median over the window before that
    points: int

    def age(self, now: float) -> float | None:
        """Seconds since the last step was logged."""
        return None if self.last_step_at is None else max(now - self.last_step_at, 0.0)

    def since_start(self, now: float) -> float | None:
        return None if self.started_at is None else max(now - self.started_at, 0.0)

    @property
    def ratio(self) -> float | None:
        """Step time now over the baseline (1.5: steps take 1.5 times as long)."""
        if self.step_time_s is None or not self.baseline_s:
            return None
        return self.step_time_s / self.baseline_s


def _rate(pts: Sequence[Sequence[float]]) -> float | None:
    """Seconds per step from the first to the last of ``pts``."""
    if len(pts) < 2 or pts[-1][1] <= pts[0][1]:
        return None
    return (pts[-1][0] - pts[0][0]) / (pts[-1][1] - pts[0][1])


def progress(
    history: Mapping[str, Any] | None,
    now: float,
    *,
    recent_s: float,
    grace_s: float,
) -> Progress:
    """``history`` as ``remember`` keeps it (None: nothing read yet)."""
    pts = [
        (float(p[0]), int(p[1]))
        for p in (history or {}).get("points") or ()
        if isinstance(p, (list, tuple)) and len(p) == 2
    ]
    raw = (history or {}).get("start")
    start = float(raw) if isinstance(raw, (int, float)) else (pts[0][0] if pts else None)
    if not pts:
        return Progress(None, None, start, None, None, 0)
    last_t, last = pts[-1]
    cut = now - recent_s
    recent = [p for p in pts if p[0] >= cut]
    # the step time now: the recent points, and the one before them (the interval that
    # ends in the window counts); none if the last step is older than the window
    before = [p for p in pts if p[0] < cut]
    span = ([before[-1]] if before else []) + recent
    now_rate = _rate(span) if recent else None
    warm = start + grace_s if start is not None else None
    older = [p for p in before if warm is None or p[0] >= warm]
    intervals = [
        (b[0] - a[0]) / (b[1] - a[1])
        for a, b in itertools.pairwise(older)
        if b[1] > a[1] and b[0] >= a[0]
    ]
    baseline = statistics.median(intervals) if len(intervals) >= 3 else None
    return Progress(last, last_t, start, now_rate, baseline, len(pts))
