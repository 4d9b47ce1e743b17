"""Fleet telemetry without Prometheus: scrape every exporter directly and keep a short history.

Each exporter URL is fetched concurrently (timeout ``telemetry_timeout_s``) and parsed with
``prometheus_client.parser``; the families of ``dialects.py`` are then evaluated over the
samples the way PromQL would (rates against an older scrape, min/max over the kept
scrapes, the same sparse filters) and handed to the same assembler as Prometheus rows.

Rates need two scrapes. The first collect() of a node scrapes it twice,
``telemetry_scrape_gap_s`` apart; later ones reuse the oldest scrape still inside
``telemetry_window_s`` as the baseline, so a dashboard that collects every few seconds
gets rates over (up to) the whole window and never sleeps. Only a handful of scrapes per
node are kept (at least a tenth of the window apart). The snapshot's ``window_s`` is the
span actually measured (about the gap on a first, one-shot collect).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import requests
from prometheus_client.parser import text_string_to_metric_families

from krea_ops.daemon_pool import DaemonPool
from krea_ops.model import FleetTelemetry
from krea_ops.settings import Settings
from krea_ops.telemetry.assemble import Assembler, TargetDown
from krea_ops.telemetry.dialects import (
    DETAIL_NODES,
    FAMILIES,
    KREA,
    NAME,
    SRC,
    Family,
    Row,
    Spelling,
    select,
)
from krea_ops.telemetry.source import TelemetrySource, short_reason

Series = tuple[dict[str, str], float]


@dataclass
class _Snapshot:
    t: float
    by_name: dict[str, list[Series]]
    index: dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _series_key(name: str, labels: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


class ScrapeSource(TelemetrySource):
    """Scrapes ``urls`` (node -> exporter URL) itself. Thread-safe; keep one per session."""

    def __init__(
        self,
        urls: Mapping[str, str],
        settings: Settings,
        *,
        families: Sequence[Family] = FAMILIES,
    ) -> None:
        self.urls = dict(urls)
        self.settings = settings
        self.families = tuple(families)
        self.timeout_s = float(settings.telemetry_timeout_s)
        self._history: dict[str, list[_Snapshot]] = {}
        self._last_ok: dict[str, float] = {}
        self._failed: dict[str, bool] = {}  # node -> its last scrape failed
        self._session = requests.Session()
        workers = max(1, min(32, len(self.urls)))
        adapter = requests.adapters.HTTPAdapter(pool_connections=workers, pool_maxsize=workers)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._pool = DaemonPool(workers, name="scrape")  # (a stalled scrape never holds the exit)
        self._lock = threading.Lock()
        names: set[str] = set()
        patterns: list[re.Pattern[str]] = []
        for family in self.families:
            for s in family.spellings:
                if s.pattern:
                    patterns.append(re.compile(s.name))
                else:
                    names.add(s.name)
        self._names = frozenset(names)
        self._patterns = tuple(patterns)
        self._regex: dict[str, re.Pattern[str]] = {p.pattern: p for p in patterns}

    def describe(self) -> str:
        n = len(self.urls)
        return f"scrape of {n} exporter{'s' if n != 1 else ''}"

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._session.close()

    # -- fetching -----------------------------------------------------------------------

    def _wanted(self, name: str) -> bool:
        return name in self._names or any(p.fullmatch(name) for p in self._patterns)

    def _fetch(self, url: str) -> _Snapshot:
        try:
            response = self._session.get(url, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise _ScrapeError(f"GET {url}: {short_reason(exc, self.timeout_s)}") from None
        t = time.time()
        if response.status_code != 200:
            raise _ScrapeError(f"GET {url}: HTTP {response.status_code}")
        by_name: dict[str, list[Series]] = {}
        index: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        try:
            for metric in text_string_to_metric_families(response.text):
                for sample in metric.samples:
                    name = sample.name
                    if not self._wanted(name):
                        # the parser appends _total to counters exposed without it
                        # (dcgm-exporter's); Prometheus stores them as exposed
                        name = name.removesuffix("_total")
                        if metric.type != "counter" or not self._wanted(name):
                            continue
                    labels, value = dict(sample.labels), float(sample.value)
                    by_name.setdefault(name, []).append((labels, value))
                    index[_series_key(name, labels)] = value
        except ValueError as exc:
            first = str(exc).splitlines()[0][:120] if str(exc) else "unparsable"
            raise _ScrapeError(f"GET {url}: not Prometheus text format ({first})") from None
        return _Snapshot(t, by_name, index)

    def _round(self, targets: Mapping[str, str]) -> dict[str, _Snapshot | str]:
        futures = {node: self._pool.submit(self._fetch, url) for node, url in targets.items()}
        out: dict[str, _Snapshot | str] = {}
        for node, future in futures.items():
            try:
                snap = future.result()
            except _ScrapeError as exc:
                out[node] = str(exc)
                self._failed[node] = True
                continue
            except Exception as exc:  # a bug or an odd body: this node only
                out[node] = f"GET {targets[node]}: {short_reason(exc, self.timeout_s)}"
                self._failed[node] = True
                continue
            out[node] = snap
            self._failed[node] = False
            self._keep(node, snap)
        return out

    def _keep(self, node: str, snap: _Snapshot) -> None:
        window = self.settings.telemetry_window_s
        history = [s for s in self._history.get(node, []) if s.t >= snap.t - window]
        kept: list[_Snapshot] = []
        for s in history:
            if not kept or s.t - kept[-1].t >= window / 10:
                kept.append(s)
        kept.append(snap)
        self._history[node] = kept
        self._last_ok[node] = snap.t

    def _has_baseline(self, node: str, now: float) -> bool:
        history = self._history.get(node) or []
        return any(s.t >= now - self.settings.telemetry_window_s for s in history)

    # -- collect ------------------------------------------------------------------------

    def collect(
        self, nodes: Collection[str] | None = None, *, families: Collection[str] | None = None
    ) -> FleetTelemetry:
        with self._lock:
            return self._collect(nodes, select(self.families, families))

    def _collect(self, nodes: Collection[str] | None, families: Sequence[Family]) -> FleetTelemetry:
        wanted = None if nodes is None else set(nodes)
        targets = {n: u for n, u in self.urls.items() if wanted is None or n in wanted}
        now = time.time()
        # a node seen failing last time gets no second round: a dead exporter must not
        # make every later collect sleep
        first = {
            n: u
            for n, u in targets.items()
            if not self._has_baseline(n, now) and not self._failed.get(n)
        }
        if first:
            self._round(first)
            time.sleep(self.settings.telemetry_scrape_gap_s)
        results = self._round(targets)
        collected_at = time.time()
        detail = wanted is not None and len(wanted) <= DETAIL_NODES
        asm = Assembler(
            window_s=self.settings.telemetry_window_s,
            collected_at=collected_at,
            stale_s=self.settings.telemetry_stale_s,
            nodes=wanted,
        )
        down: list[TargetDown] = []
        span = 0.0
        for node, result in results.items():
            if isinstance(result, str):
                down.append(TargetDown(node, result, self._last_ok.get(node)))
                continue
            history = self._history[node]
            base = history[0] if history[0] is not result else None
            if base is not None:
                span = max(span, result.t - base.t)
            asm.note_fresh(node, result.t)
            for family in families:
                asm.add(family, self._rows(node, family, result, base, history, detail))
        return asm.build(self.describe(), down=down, window_s=span)

    # -- evaluating a family over one node's scrapes -------------------------------------

    def _series(self, snap: _Snapshot, s: Spelling) -> Iterable[tuple[str, Series]]:
        if s.pattern:
            regex = self._regex[s.name]
            for name, series in snap.by_name.items():
                if regex.fullmatch(name):
                    for item in series:
                        yield name, item
            return
        match, match_in = s.match, s.match_in
        for item in snap.by_name.get(s.name, ()):
            labels = item[0]
            if all(labels.get(k) == v for k, v in match) and all(
                labels.get(k) in vs for k, vs in match_in
            ):
                yield s.name, item

    def _rows(
        self,
        node: str,
        family: Family,
        cur: _Snapshot,
        base: _Snapshot | None,
        history: list[_Snapshot],
        detail: bool,
    ) -> list[Row]:
        rows: list[Row] = []
        if family.kind in ("present", "present_rate"):
            masks: dict[tuple[str, ...], int] = {}
            for i, s in enumerate(family.spellings):
                for name, (labels, _v) in self._series(cur, s):
                    if family.kind == "present_rate" and (
                        base is None or _find(base, _series_key(name, labels)) is None
                    ):
                        continue  # no rate yet: an absent rate must not read as 0
                    key = tuple(labels.get(b, "") for b in family.by)
                    masks[key] = masks.get(key, 0) | (1 << i)
            for key, mask in masks.items():
                rows.append(({"node": node, **dict(zip(family.by, key, strict=True))}, mask))
            return rows
        if family.kind == "fresh":
            return rows  # note_fresh() already has the scrape time
        for s in family.spellings:
            implied = {k for k, _ in s.const} | ({"link", "counter"} if s.pattern else set())
            by = [b for b in family.by if b not in implied]
            per_name = s.pattern and bool({"link", "counter"} & set(family.by))
            keep = family.keep
            if family.sparse_unless_detail and detail and s.dialect == KREA:
                keep = None
            groups: dict[tuple[str, ...], list[float]] = {}
            for name, (labels, value) in self._series(cur, s):
                v = self._value(family, name, labels, value, cur, base, history)
                if v is None:
                    continue
                if (keep == ">0" and not v > 0) or (keep == "<1" and not v < 1):
                    continue
                key = tuple(labels.get(b, "") for b in by) + ((name,) if per_name else ())
                groups.setdefault(key, []).append(v)
            for key, values in groups.items():
                labels_out = {"node": node, SRC: s.name, **dict(zip(by, key, strict=False))}
                if per_name:
                    labels_out[NAME] = key[-1]
                rows.append((labels_out, _aggregate(family.agg, values)))
        return rows

    @staticmethod
    def _value(
        family: Family,
        name: str,
        labels: dict[str, str],
        value: float,
        cur: _Snapshot,
        base: _Snapshot | None,
        history: list[_Snapshot],
    ) -> float | None:
        kind = family.kind
        if kind == "gauge":
            return value
        key = _series_key(name, labels)
        if kind == "rate":
            if base is None:
                return None
            old = _find(base, key)
            if cur.t <= base.t:
                return None
            if old is None:
                # a counter created at its first event (see Family.born_counts)
                return value / (cur.t - base.t) if family.born_counts else None
            # a counter that went down was reset: everything it counts now is new
            delta = value - old if value >= old else value
            return delta / (cur.t - base.t)
        values = [v for snap in history if (v := _find(snap, key)) is not None]
        if not values:
            return None
        return min(values) if kind == "min_window" else max(values)


class _ScrapeError(Exception):
    """One exporter could not be scraped; the message is the node's error line."""


def _find(snap: _Snapshot, key: tuple[str, tuple[tuple[str, str], ...]]) -> float | None:
    return snap.index.get(key)


def _aggregate(agg: str, values: list[float]) -> float:
    if agg == "sum":
        return sum(values)
    if agg == "min":
        return min(values)
    if agg == "count":
        return float(len(values))
    if agg == "group":
        return 1.0
    return max(values)
