"""Fleet telemetry from Prometheus: one instant query per family for the whole fleet.

Each ``Family`` of ``dialects.py`` becomes one PromQL expression: the ``or`` of one
sub-expression per spelling, each aggregated down to the node identity labels plus the
family's object labels (so no job, pod or driver labels travel) and tagged with
``krea_ops_src`` = the spelling's metric name. All queries of one collect() are evaluated
at the same instant and run concurrently in a small thread pool; the targets API
(``/api/v1/targets``) adds why a node's exporter is failing.

Error counters and link states are read sparsely (``> 0``, ``< 1``): at 4,096 nodes with
8 GPUs x 18 links x 4 counters a dense read would be 2.4 M series, nearly all 0.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from krea_ops.errors import Unavailable
from krea_ops.model import FleetTelemetry
from krea_ops.settings import Settings
from krea_ops.telemetry.assemble import Assembler, TargetDown
from krea_ops.telemetry.dialects import (
    DETAIL_NODES,
    FAMILIES,
    ID_LABELS,
    KREA,
    NAME,
    NODE_LABELS,
    SRC,
    Family,
    Row,
    Spelling,
    instance_host,
)
from krea_ops.telemetry.source import TelemetrySource, short_reason

WORKERS = 8

FIX = (
    "check --prometheus URL, KREA_OPS_PROMETHEUS_URL or prometheusURL in ConfigMap "
    "krea-ops/krea-ops-config"
)


def quote(text: str) -> str:
    """A PromQL double-quoted string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


class QueryBuilder:
    """PromQL for the families (see module doc). Pure: tests and the benchmark read it."""

    def __init__(self, window_s: float, stale_s: float) -> None:
        self.window = duration(window_s)
        self.window_s = window_s
        # how far back a node's last sample is looked for, and at what resolution
        self.lookback = duration(max(window_s, 3 * stale_s))
        self.lookback_step = duration(max(1.0, stale_s / 20))
        # pattern spellings need a subquery to keep their names apart under rate()
        self.subquery_step = duration(max(1.0, min(15.0, window_s / 10)))

    def selector(self, s: Spelling, extra: Mapping[str, str]) -> str:
        matchers = [f"{k}={quote(v)}" for k, v in s.match]
        matchers += [f"{k}=~{quote(v)}" for k, v in extra.items()]
        if s.pattern:
            inner = ",".join([f"__name__=~{quote(s.name)}", *matchers])
            return f'label_replace({{{inner}}}, "{NAME}", "$1", "__name__", "(.+)")'
        return f"{s.name}{{{','.join(matchers)}}}" if matchers else s.name

    @staticmethod
    def by(family: Family, s: Spelling) -> str:
        implied = {k for k, _ in s.const}
        if s.pattern:
            implied |= {"link", "counter"}
        labels = [*ID_LABELS, *(b for b in family.by if b not in implied)]
        if s.pattern and ({"link", "counter"} & set(family.by)):
            labels.append(NAME)
        return ", ".join(labels)

    def part(self, family: Family, s: Spelling, dense_nodes: str | None) -> str:
        extra: dict[str, str] = {}
        keep = family.keep
        if dense_nodes is not None and s.dialect == KREA:
            extra["node"] = dense_nodes
            if family.sparse_unless_detail:
                keep = None
        sel = self.selector(s, extra)
        by = self.by(family, s)
        if family.kind == "fresh":
            now = f"max by ({by}) (timestamp({sel}))"
            rng = f"{self.lookback}:{self.lookback_step}"
            past = f"max by ({by}) (last_over_time(timestamp({sel})[{rng}]))"
            expr = f"{now} or {past}"
        else:
            if family.kind == "rate":
                rng = f"{self.window}:{self.subquery_step}" if s.pattern else self.window
                inner = f"rate({sel}[{rng}])"
                if family.born_counts:
                    born = f"({sel} unless {sel} offset {self.window}) / {self.window_s:g}"
                    inner = f"({born} or {inner})"
            elif family.kind == "min_window":
                inner = f"min_over_time({sel}[{self.window}])"
            elif family.kind == "max_window":
                inner = f"max_over_time({sel}[{self.window}])"
            else:
                inner = sel
            if keep == ">0":
                inner = f"{inner} > 0"
            elif keep == "<1":
                inner = f"{inner} < 1"
            expr = f"{family.agg} by ({by}) ({inner})"
        return f'label_replace({expr}, "{SRC}", {quote(s.name)}, "", "")'

    def query(self, family: Family, nodes: Collection[str] | None = None) -> str:
        dense_nodes = None
        if nodes is not None and len(nodes) <= DETAIL_NODES:
            dense_nodes = "|".join(re.escape(n) for n in sorted(nodes)) or "^$"
        if family.kind == "present":
            by = ", ".join((*ID_LABELS, *family.by))
            parts = []
            for i, s in enumerate(family.spellings):
                extra = {"node": dense_nodes} if dense_nodes and s.dialect == KREA else {}
                sel = self.selector(s, extra)
                parts.append(
                    f'label_replace(group by ({by}) ({sel}) * {1 << i}, "{SRC}", '
                    f'{quote(s.name)}, "", "")'
                )
            return f"sum by ({by}) ({' or '.join(parts)})"
        return " or ".join(self.part(family, s, dense_nodes) for s in family.spellings)


class PrometheusSource(TelemetrySource):
    """Reads the fleet from one Prometheus. Thread-safe; ``close()`` ends the pool."""

    def __init__(
        self, url: str, settings: Settings, *, families: Sequence[Family] = FAMILIES
    ) -> None:
        self.url = url.rstrip("/")
        self.settings = settings
        self.families = tuple(families)
        self.timeout_s = float(settings.telemetry_timeout_s)
        # one quick retry on a refused or reset connection, none on answers: a down
        # Prometheus must fail the command in about a second, not after backoffs
        retry = Retry(total=1, connect=1, read=0, status=0, other=0, backoff_factor=0.1)
        self._session = requests.Session()
        self._prom = PrometheusConnect(url=self.url, session=self._session, retry=retry)
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="promql")
        self._builder = QueryBuilder(settings.telemetry_window_s, settings.telemetry_stale_s)
        self._lock = threading.Lock()
        self.last_timings: dict[str, float] = {}  # family key -> seconds, for the benchmark

    def describe(self) -> str:
        return f"prometheus {self.url}"

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._session.close()

    def query_text(self, family: Family, nodes: Collection[str] | None = None) -> str:
        return self._builder.query(family, nodes)

    # -- one query ----------------------------------------------------------------------

    def _run(self, key: str, promql: str, at: float) -> list[Row]:
        start = time.perf_counter()
        try:
            result = self._prom.custom_query(
                promql, params={"time": f"{at:.3f}"}, timeout=self.timeout_s
            )
        finally:
            self.last_timings[key] = time.perf_counter() - start
        rows: list[Row] = []
        for item in result:
            try:
                value = float(item["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            rows.append((item.get("metric") or {}, value))
        return rows

    def _targets(self) -> list[dict[str, Any]]:
        response = self._session.get(
            f"{self.url}/api/v1/targets", params={"state": "active"}, timeout=self.timeout_s
        )
        if response.status_code != 200:
            raise PrometheusApiClientException(
                f"HTTP Status Code {response.status_code} ({response.content!r})"
            )
        data = response.json().get("data") or {}
        return list(data.get("activeTargets") or [])

    # -- collect ------------------------------------------------------------------------

    def collect(self, nodes: Collection[str] | None = None) -> FleetTelemetry:
        with self._lock:  # one collect at a time shares the pool fairly
            return self._collect(nodes)

    def _collect(self, nodes: Collection[str] | None) -> FleetTelemetry:
        at = time.time()
        asm = Assembler(
            window_s=self.settings.telemetry_window_s,
            collected_at=at,
            stale_s=self.settings.telemetry_stale_s,
            nodes=nodes,
        )
        futures: dict[str, Future[list[Row]]] = {}
        # the per-link families are the long poles (18 links x 4 counters per GPU): first
        for family in sorted(self.families, key=lambda f: not f.sparse_unless_detail):
            promql = self._builder.query(family, nodes)
            futures[family.key] = self._pool.submit(self._run, family.key, promql, at)
        targets: Future[list[dict[str, Any]]] = self._pool.submit(self._targets)

        errors: list[str] = []
        failures: list[BaseException] = []
        for family in self.families:
            try:
                rows = futures[family.key].result()
            except Exception as exc:
                failures.append(exc)
                asm.failed.add(family.key)
                errors.append(f"query {family.key} failed: {self._reason(exc)}")
                continue
            asm.add(family, rows)
        if failures and len(failures) == len(self.families):
            raise Unavailable(
                f"Prometheus at {self.url} is not answering ({self._reason(failures[0])}): {FIX}"
            )
        down: list[TargetDown] = []
        try:
            down = self._down_targets(targets.result(), asm)
        except Exception as exc:
            errors.append(f"targets API failed ({self._reason(exc)}): failing scrapes not shown")
        return asm.build(self.describe(), errors=errors, down=down)

    def _down_targets(self, targets: list[dict[str, Any]], asm: Assembler) -> list[TargetDown]:
        """Targets Prometheus fails to scrape, mapped to nodes. Only targets of jobs that
        serve telemetry count (a failing kubelet target is not a GPU exporter)."""
        out: list[TargetDown] = []
        for target in targets:
            if target.get("health") != "down":
                continue
            labels = target.get("labels") or {}
            instance = labels.get("instance") or ""
            job = labels.get("job") or ""
            if job not in asm.jobs and instance not in asm.instances:
                continue
            node = next((labels[n] for n in NODE_LABELS if labels.get(n)), None)
            node = node or asm.instances.get(instance) or instance_host(instance)
            if not node:
                continue
            url = target.get("scrapeUrl") or instance
            error = (target.get("lastError") or "").strip() or "scrape failing"
            out.append(TargetDown(node=node, error=f"scrape of {url} failing: {error}"))
        return out

    def _reason(self, exc: BaseException) -> str:
        if isinstance(exc, PrometheusApiClientException):
            text = str(exc)
            # "HTTP Status Code 400 (b'{"status":"error","error":"..."}')": keep the error
            match = re.search(r"HTTP Status Code (\d+) \((.*)\)$", text, re.S)
            if match:
                detail = match.group(2)
                try:
                    body = json.loads(eval_bytes(detail))
                    detail = body.get("error") or detail
                except (ValueError, TypeError, AttributeError):
                    pass
                return f"HTTP {match.group(1)}: {str(detail).splitlines()[0][:200]}"
            return text.splitlines()[0][:200]
        return short_reason(exc, self.timeout_s)


def eval_bytes(literal: str) -> str:
    """The text inside a ``b'...'`` repr as prometheus-api-client formats error bodies."""
    if len(literal) >= 3 and literal[0] == "b" and literal[1] in "'\"":
        body = literal[2:-1]
        return body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    return literal
