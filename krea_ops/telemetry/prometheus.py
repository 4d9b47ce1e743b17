"""Fleet telemetry from Prometheus: one instant query per family for the whole fleet.

A collect first asks which metric names exist (``/api/v1/label/__name__/values``, one
index read) so that each ``Family`` of ``dialects.py`` is asked only for the spellings
somebody serves (a family nobody serves is not queried at all). It then becomes one PromQL
expression: the ``or`` of one sub-expression per served spelling, each aggregated down to
the node identity labels plus the family's object labels (so no job, pod or driver labels
travel; our exporter's series by ``node`` alone) and, where more than one spelling is
served, tagged with ``krea_ops_src`` = the spelling's metric name. All queries of one
collect() are evaluated at the same instant and run concurrently in a small thread pool;
the targets API (``/api/v1/targets``) adds why a node's exporter is failing. Only the
families of the groups the caller asks for are read (``collect(families=...)``).
Answers of one value per GPU or per port of ours are read with one regular expression
(``decode_values``) rather than a JSON object per row.

At fleet scale the cost is rows (see docs/benchmarks.md): error counters and link states
are read sparsely (``> 0``, ``< 1``); NVLink is read per GPU from our exporter's sums (the
verdicts: one fault rate per GPU), not from the 2.4 M per-link series at 4,096 nodes; the
clock events as one bitmask per GPU. Second rounds, restricted by ``node=~`` to the nodes
that need them (at most ``LINK_QUERY_NODES``; more: fleet-wide): per-link NVLink rows
(``Assembler.nodes_needing_links``: errors in the window or a link down per the sums, or
an exporter without the sums), an older exporter's per-reason clock events
(``Family.fallback_of``), exact presence masks. Asking for at most ``DETAIL_NODES`` nodes
reads every link of those nodes in the first round.

Queries whose answers are bounded go out merged, at most ``MERGE_GROUPS`` a round, each
the ``or`` of several told apart by ``QUERY_TAG``: our readings asked of a few named
nodes (``nodes show``, the nodes a verdicts-only read reads GPU by GPU, the per-link
rounds), and the node summaries (one row per node) where our exporter runs on at most
``MERGE_NODES`` nodes (counted with one index read). A 64-node read went from 37-43
requests to 7-19, and `nodes show` from 41 to 3. A fleet-wide reading stays one query:
Prometheus evaluates a query's parts one after another, and merged, the readings of a
64-node fleet took longer on the wall for the same CPU (docs/benchmarks.md). Where a
merged query fails, its parts are asked one by one, so that the failure is told of its
own family.

Where our exporters publish their node summaries (``summary.py``), a verdicts-only read
of the fleet reads them instead of every GPU (``_collect_summarized``), and any other
fleet-wide read asks for the readings they prove empty on a node (``PROVEN_EMPTY``) or
give the value of (``PROVEN_VALUE``) only of the other nodes (``_collect_detail``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, AnyStr

import orjson
import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from krea_ops import units
from krea_ops.daemon_pool import DaemonPool
from krea_ops.errors import Unavailable
from krea_ops.health import HealthPolicy
from krea_ops.model import FleetTelemetry, NodeTelemetry
from krea_ops.settings import Settings
from krea_ops.telemetry import summary
from krea_ops.telemetry.assemble import Assembler, TargetDown, folds_simply
from krea_ops.telemetry.dialects import (
    DETAIL_NODES,
    FAMILIES,
    FAMILY_BY_KEY,
    ID_LABELS,
    KREA,
    LINK_QUERY_NODES,
    NAME,
    NODE_LABELS,
    NVLINK,
    RULES_ONLY,
    SRC,
    VERDICTS,
    Family,
    Row,
    Spelling,
    instance_host,
    node_of,
    quote,
    select,
)
from krea_ops.telemetry.source import TelemetrySource, short_reason

WORKERS = 8
# Queries whose answers are bounded (see the module doc) go out as at most this many
# queries a round, each the ``or`` of at least ``MERGE_LEAST`` told apart by
# ``QUERY_TAG``: a request costs the command CPU and a round trip, and a 64-node read made
# 37-43. A few rather than one, so that Prometheus still evaluates them side by side.
MERGE_GROUPS = 3
MERGE_LEAST = 2
# at most this many of our exporters' nodes: the node summaries are merged too
MERGE_NODES = LINK_QUERY_NODES
# the one series each of our exporters serves, whose ``node`` values count them
EXPORTER_SERIES = "krea_exporter_build_info"
QUERY_TAG = "krea_ops_query"
# one query to ask: (key, PromQL, the labels its plain answer has, see ``value_labels``)
Ask = tuple[str, str, "tuple[str, ...] | None"]


def value_labels(family: Family) -> tuple[str, ...] | None:
    """The labels of a family's rows, in the (sorted) order Prometheus writes them, when
    its answer can be decoded as plain values (see ``decode_values``) and folded by
    ``Assembler.add_values``: one spelling of ours (the query keeps exactly ``node`` and
    the object's labels) on the simple path; else None."""
    if len(family.spellings) != 1 or family.spellings[0].dialect != KREA:
        return None
    return tuple(sorted(("node", *family.by))) if folds_simply(family) else None


_PATTERNS: dict[tuple[str, ...], re.Pattern[str]] = {}


@dataclass(frozen=True)
class Values:
    """A family's rows as ``decode_values`` reads them: label values in ``labels``
    order, then the value's text."""

    labels: tuple[str, ...]
    rows: list[tuple[str, ...]]


def decode_values(body: str, labels: tuple[str, ...]) -> list[tuple[str, ...]] | None:
    """The rows of a successful instant-query answer whose every series has exactly
    ``labels`` (sorted), as (label values..., value text), read with one regular
    expression instead of building a dict per row (several times faster at 32 k rows).
    None when any row does not have that exact shape (an escaped character, another
    label): the caller then parses the JSON."""
    pattern = _PATTERNS.get(labels)
    if pattern is None:
        inner = ",".join(f'"{name}":"([^"\\\\]*)"' for name in labels)
        pattern = _PATTERNS[labels] = re.compile(
            '\\{"metric":\\{' + inner + '\\},"value":\\[[^\\],]*,"([^"\\\\]*)"\\]\\}'
        )
    if not body.startswith('{"status":"success","data":{"resultType":"vector"'):
        return None
    rows: list[tuple[str, ...]] = []
    for start, end in _row_spans(body, '{"metric":'):
        rows += pattern.findall(body, start, end)
    if len(rows) != body.count('{"metric":'):
        return None
    return rows


# The longest one regular expression or JSON parse of an answer runs (~3 ms): a C call
# holds the GIL throughout, and at 5,000 nodes an answer of 40,000 rows (3 MB) took
# 20-40 ms to match and 60-85 ms to parse whole, every such stretch a stall of the
# dashboard's UI thread while its worker reads (docs/benchmarks.md, "Decoding in slices")
SLICE_CHARS = 1 << 17


def _row_spans(body: AnyStr, marker: AnyStr) -> Iterator[tuple[int, int]]:
    """(start, end) of successive stretches of ``body`` of about ``SLICE_CHARS`` each,
    cut just before a row's ``marker`` (``{"metric":``): a quote that is not escaped never
    occurs inside a JSON string, so the marker starts a row wherever it is found."""
    start, size = 0, len(body)
    while start < size:
        end = body.find(marker, start + SLICE_CHARS) if start + SLICE_CHARS < size else -1
        end = size if end < 0 else end
        yield start, end
        start = end


def decode_rows(content: bytes) -> list[Any]:
    """The ``data.result`` rows of an instant-query answer, parsed a slice of rows at a
    time where it is large (``SLICE_CHARS``, as ``decode_values``), else whole. The
    rows are found by their markers (``{"metric":`` starts one, ``"value":[`` and ``]}``
    end the last), whatever the server writes around them (VictoriaMetrics' ``isPartial``
    and ``stats``); an answer they do not fit is parsed whole."""
    head = content[:256]
    opening = head.find(b'"result":[')
    if (
        len(content) <= 2 * SLICE_CHARS
        or not head.startswith(b'{"status":"success"')
        or b'"resultType":"vector"' not in head
        or opening < 0
    ):
        return _whole_rows(content)
    first = opening + len(b'"result":[')
    last = content.rfind(b'{"metric":')
    value = content.find(b'"value":[', last) if last >= first else -1
    close = content.find(b"]}", value) if value >= 0 else -1
    if close < 0:
        return _whole_rows(content)
    body = content[first : close + 2]
    rows: list[Any] = []
    try:
        for start, end in _row_spans(body, b',{"metric":'):
            # each stretch but the first begins with the comma before its first row
            rows += orjson.loads(b"[" + body[start + 1 if start else 0 : end] + b"]")
    except orjson.JSONDecodeError:
        return _whole_rows(content)
    return rows


def _whole_rows(content: bytes) -> list[Any]:
    rows: list[Any] = orjson.loads(content)["data"]["result"]
    return rows


FIX = (
    "check --prometheus URL, KREA_OPS_PROMETHEUS_URL or prometheusURL in ConfigMap "
    "krea-ops/krea-ops-config"
)


class _SummaryUnreadable(Exception):
    """A node-summary query failed: the read falls back to every GPU and port."""


@dataclass(frozen=True)
class _Asked:
    """The node-summary queries of one read, in flight (``_ask_summaries``)."""

    values: Mapping[str, Future[list[Row] | Values]]
    stamp: Future[list[Row] | Values]


def _never_ran(parts: Mapping[str, Future[list[Row] | Values]], task: Future[None]) -> None:
    """A merged query's parts cancelled with it: the pool cancels a query still queued
    when the source closes (a dashboard quitting mid-read), and a part's future, set only
    by the query itself, would otherwise leave the read waiting on it for ever (and the
    process, which waits for its read threads, with it)."""
    if task.cancelled():
        for future in parts.values():
            future.cancel()


def _split(answer: list[Row] | Values, parts: int) -> list[list[Row] | Values]:
    """A merged answer (``PrometheusSource._run_merged``) as each part's own, the tag
    taken off."""
    if isinstance(answer, Values):
        at = answer.labels.index(QUERY_TAG)
        labels = answer.labels[:at] + answer.labels[at + 1 :]
        values: list[list[tuple[str, ...]]] = [[] for _ in range(parts)]
        for row in answer.rows:
            values[int(row[at])].append(row[:at] + row[at + 1 :])
        return [Values(labels, v) for v in values]
    rows: list[list[Row]] = [[] for _ in range(parts)]
    for labels_of, value in answer:
        tag = labels_of.get(QUERY_TAG)
        if tag is None or not tag.isdigit() or int(tag) >= parts:
            continue  # (not ours to place: no part asked for it)
        rows[int(tag)].append(({k: v for k, v in labels_of.items() if k != QUERY_TAG}, value))
    return list(rows)


def _ours(family: Family) -> bool:
    """Every spelling of the family is our exporter's: a ``node=~`` list bounds its
    answer (a peer's spellings are asked of every node, see ``QueryBuilder.part``)."""
    return all(s.dialect == KREA for s in family.spellings)


def _by_node(rows: list[Row] | Values) -> list[tuple[str, float]]:
    """(node, value) of a per-node answer, decoded either way (see ``decode_values``)."""
    if isinstance(rows, Values):
        at = rows.labels.index("node")
        return [(r[at], float(r[-1])) for r in rows.rows]
    return [(labels["node"], value) for labels, value in rows if labels.get("node")]


def duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


class QueryBuilder:
    """PromQL for the families (see module doc). Pure: tests and the benchmark read it."""

    def __init__(self, window_s: float, stale_s: float) -> None:
        self.window = duration(window_s)
        self.window_s = window_s
        # how far back a node's last sample is looked for, and at what resolution
        self.lookback = duration(max(window_s, 3 * stale_s))
        # (only nodes silent for longer than Prometheus' 5 min lookback come from this
        # subquery: their age is known to a step, a minute at the defaults, which is plenty
        # at that age; each step costs a timestamp() of every node's series: 30 steps were
        # a tenth of a gpus read's Prometheus CPU at 4,096 nodes)
        self.lookback_step = duration(max(1.0, max(window_s, 3 * stale_s) / 6))
        # pattern spellings need a subquery to keep their names apart under rate()
        self.subquery_step = duration(max(1.0, min(15.0, window_s / 10)))

    @staticmethod
    def by(family: Family, s: Spelling) -> str:
        implied = {k for k, _ in s.const}
        if s.pattern:
            implied |= {"link", "counter"}
        # our exporter labels every series with its node: instance would only add bytes
        ids = ("node",) if s.dialect == KREA and family.kind != "fresh" else ID_LABELS
        labels = [*ids, *(b for b in family.by if b not in implied)]
        if s.pattern and ({"link", "counter"} & set(family.by)):
            labels.append(NAME)
        return ", ".join(labels)

    def part(
        self,
        family: Family,
        s: Spelling,
        dense_nodes: str | None,
        link_nodes: str | None = None,
        skip_nodes: str | None = None,
    ) -> str:
        extra: dict[str, str] = {}
        exclude = {"node": skip_nodes} if skip_nodes is not None and s.dialect == KREA else None
        keep = family.keep
        if dense_nodes is not None and s.dialect == KREA:
            extra["node"] = dense_nodes
            if family.sparse_unless_detail:
                keep = None
        elif link_nodes is not None and s.dialect == KREA:
            extra["node"] = link_nodes
        sel = s.selector(extra, exclude)
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
        if len(family.spellings) == 1:
            return expr  # the assembler knows the only spelling without a tag
        return f'label_replace({expr}, "{SRC}", {quote(s.name)}, "", "")'

    def exact_present(self, family: Family, nodes: Collection[str] | None) -> str:
        """The bitmask form of a presence family, for ``nodes`` (None: all)."""
        return self.query(family, None, link_nodes=nodes) if nodes else self._mask(family)

    def _mask(self, family: Family) -> str:
        by = ", ".join((*ID_LABELS, *family.by))
        parts = []
        for i, s in enumerate(family.spellings):
            sel = s.selector()
            if family.kind == "present_rate":
                sel = f"count_over_time({sel}[{self.window}]) > 1"
            parts.append(
                f'label_replace(group by ({by}) ({sel}) * {1 << i}, "{SRC}", "{i}", "", "")'
            )
        return f"sum by ({by}) ({' or '.join(parts)})"

    @staticmethod
    def node_regex(nodes: Collection[str]) -> str:
        return "|".join(re.escape(n) for n in sorted(nodes)) or "^$"

    def query(
        self,
        family: Family,
        nodes: Collection[str] | None = None,
        *,
        link_nodes: Collection[str] | None = None,
        skip_nodes: Collection[str] | None = None,
    ) -> str:
        """``link_nodes`` restricts our spellings to those nodes (the per-link round);
        ``skip_nodes`` leaves those nodes out of them (their summaries give the reading
        there, see summary.PROVEN_EMPTY and PROVEN_VALUE)."""
        dense_nodes = None
        if nodes is not None and len(nodes) <= DETAIL_NODES:
            dense_nodes = self.node_regex(nodes)
        links = None if link_nodes is None else self.node_regex(link_nodes)
        skip = self.node_regex(skip_nodes) if skip_nodes else None
        if family.kind in ("present", "present_rate"):
            by = ", ".join((*ID_LABELS, *family.by))
            counted = None if dense_nodes or links else self.present_count(family, by, skip)
            if counted is not None:
                return counted
            parts = []
            for i, s in enumerate(family.spellings):
                node_re = dense_nodes or links
                extra = {"node": node_re} if node_re and (s.dialect == KREA or links) else {}
                exclude = {"node": skip} if skip is not None and s.dialect == KREA else None
                sel = s.selector(extra, exclude)
                if family.kind == "present_rate":  # a rate needs two samples in the window
                    sel = f"count_over_time({sel}[{self.window}]) > 1"
                # the tag keeps the spellings apart under "or" (it is summed away)
                parts.append(
                    f'label_replace(group by ({by}) ({sel}) * {1 << i}, "{SRC}", "{i}", "", "")'
                )
            return f"sum by ({by}) ({' or '.join(parts)})"
        return " or ".join(self.part(family, s, dense_nodes, links, skip) for s in family.spellings)

    def present_count(self, family: Family, by: str, skip: str | None = None) -> str | None:
        """The cheap fleet-wide form of a presence bitmask: per object, how many of each
        dialect's spellings exist (``krea_ops_src`` = the dialect). One selector per
        dialect and a count, where the bitmask form costs a group, a label_replace and
        an ``or`` per spelling; objects with fewer than all (rare: a counter file
        missing) get their exact bitmask in a second, node-restricted query. None where
        the spellings cannot share one selector. ``skip``: nodes our spellings are not
        asked of (their summaries prove every object there has them all)."""
        parts = []
        for dialect in dict.fromkeys(s.dialect for s in family.spellings):
            group = [s for s in family.spellings if s.dialect == dialect]
            names = {s.name for s in group}
            keys = {k for s in group for k, _ in s.match}
            unless = f",node!~{quote(skip)}" if skip is not None and dialect == KREA else ""
            if any(s.pattern for s in group):
                return None
            if len(names) == 1 and len(keys) == 1 and all(len(s.match) == 1 for s in group):
                key = keys.pop()
                values = "|".join(re.escape(s.match[0][1]) for s in group)
                sel = f"{group[0].name}{{{key}=~{quote(values)}{unless}}}"
            elif not keys:
                if family.kind == "present_rate":
                    return None  # count_over_time would drop the names apart
                names_re = quote("|".join(re.escape(n) for n in sorted(names)))
                sel = f"{{__name__=~{names_re}{unless}}}"
            else:
                return None
            if family.kind == "present_rate":
                sel = f"count_over_time({sel}[{self.window}]) > 1"
            parts.append(f'label_replace(count by ({by}) ({sel}), "{SRC}", "{dialect}", "", "")')
        return " or ".join(parts)


class PrometheusSource(TelemetrySource):
    """Reads the fleet from one Prometheus. Thread-safe; ``close()`` ends the pool."""

    def __init__(
        self,
        url: str,
        settings: Settings,
        *,
        families: Sequence[Family] = FAMILIES,
        use_summaries: bool = True,
        policy: HealthPolicy | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url.rstrip("/")
        self.settings = settings
        # the health rules the node summaries are judged by: the caller's policy, so a
        # node skipped as clean is clean by the thresholds its verdict will use
        self.policy = policy if policy is not None else HealthPolicy.from_settings(settings)
        # the instant every query of a read is evaluated at: now (a test pins it, so that
        # what is "in the window" does not depend on how fast the tests run)
        self.clock = clock
        self.families = tuple(families)
        self.timeout_s = float(settings.telemetry_timeout_s)
        # one quick retry on a refused or reset connection, none on answers: a down
        # Prometheus must fail the command in about a second, not after backoffs
        retry = Retry(total=1, connect=1, read=0, status=0, other=0, backoff_factor=0.1)
        self._session = requests.Session()
        self._prom = PrometheusConnect(url=self.url, session=self._session, retry=retry)
        self._pool = DaemonPool(WORKERS, name="promql")  # (a stalled query never holds the exit)
        self._builder = QueryBuilder(settings.telemetry_window_s, settings.telemetry_stale_s)
        self._lock = threading.Lock()
        # fleet-wide reads use the node summaries where Prometheus records them
        self.use_summaries = use_summaries
        self.last_timings: dict[str, float] = {}  # family key -> seconds, for the benchmark

    def describe(self) -> str:
        return f"prometheus {self.url}"

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._session.close()

    def query_text(
        self,
        family: Family,
        nodes: Collection[str] | None = None,
        *,
        link_nodes: Collection[str] | None = None,
    ) -> str:
        return self._builder.query(family, nodes, link_nodes=link_nodes)

    # -- one query ----------------------------------------------------------------------

    def _run(
        self, key: str, promql: str, at: float, labels: tuple[str, ...] | None = None
    ) -> list[Row] | Values:
        """The rows of one query; with ``labels`` (see ``value_labels``) as ``Values``
        where the answer has that plain shape."""
        start = time.perf_counter()
        try:
            # POST only for long queries (a per-link round names up to LINK_QUERY_NODES
            # nodes: too long for some proxies' URL limits); GET otherwise, which any
            # Prometheus-compatible API answers. The session carries prometheus-api-client's
            # adapter (retries).
            # ``nocache=1``: VictoriaMetrics otherwise moves an instant query within its
            # -search.latencyOffset (30 s by default) of now back to now minus that offset,
            # so every reading (and each node's freshness) would be 30 s older than the
            # same read of Prometheus, which ignores the parameter (docs/operations.md,
            # "Metrics on VictoriaMetrics")
            form = {"query": promql, "time": f"{at:.3f}", "nocache": "1"}
            url = f"{self.url}/api/v1/query"
            if len(promql) > 4000:
                response = self._session.post(url, data=form, timeout=self.timeout_s)
            else:
                response = self._session.get(url, params=form, timeout=self.timeout_s)
            if response.status_code != 200:
                raise PrometheusApiClientException(
                    f"HTTP Status Code {response.status_code} ({response.content!r})"
                )
            if labels is not None:
                values = decode_values(response.content.decode(), labels)
                if values is not None:
                    return Values(labels, values)
            # orjson on the bytes: requests' .json() first decodes them to a str copy,
            # and json.loads takes ~2x as long (gpu_info: 32,768 rows at 4,096 nodes)
            result = decode_rows(response.content)
        finally:
            self.last_timings[key] = time.perf_counter() - start
        rows: list[Row] = []
        append = rows.append
        for item in result:
            try:
                value = float(item["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            append((item.get("metric") or {}, value))
        return rows

    def _submit(
        self, asks: Sequence[Ask], at: float, *, merge: bool | Collection[str] = False
    ) -> dict[str, Future[list[Row] | Values]]:
        """Each query's answer, in flight on the pool: one request each, or, for the keys
        ``merge`` names (True: all), ``MERGE_GROUPS`` requests at most for all of them,
        each of ``MERGE_LEAST`` queries at least."""
        chosen = [a for a in asks if merge is True or (merge and a[0] in merge)]
        groups = min(MERGE_GROUPS, len(chosen) // MERGE_LEAST)
        merged = chosen if groups else []
        together = {key for key, _, _ in merged}
        futures = {
            key: self._pool.submit(self._run, key, promql, at, labels)
            for key, promql, labels in asks
            if key not in together
        }
        for i in range(groups):
            group = merged[i::groups]
            mine: dict[str, Future[list[Row] | Values]] = {key: Future() for key, _, _ in group}
            futures.update(mine)
            task = self._pool.submit(self._run_merged, group, at, mine)
            task.add_done_callback(functools.partial(_never_ran, mine))
        return futures

    def _run_merged(
        self, group: Sequence[Ask], at: float, futures: Mapping[str, Future[list[Row] | Values]]
    ) -> None:
        """Ask ``group`` as one query, each part tagged (``QUERY_TAG``) by its place, and
        give each part's future its rows. Where the one query fails, each part is asked
        alone, so that a failure is told of the query it belongs to, as unmerged."""
        try:
            promql = " or ".join(
                f'label_replace({q}, "{QUERY_TAG}", "{i}", "", "")'
                for i, (_, q, _) in enumerate(group)
            )
            shapes = {labels for _, _, labels in group}
            plain = next(iter(shapes)) if len(shapes) == 1 else None
            tagged = tuple(sorted((QUERY_TAG, *plain))) if plain is not None else None
            name = "+".join(key for key, _, _ in group)
            try:
                answer = self._run(name, promql, at, tagged)
            except Exception:
                for key, q, labels in group:
                    try:
                        futures[key].set_result(self._run(key, q, at, labels))
                    except Exception as exc:
                        futures[key].set_exception(exc)
                return
            took = self.last_timings.pop(name, 0.0)
            for (key, _, _), rows in zip(group, _split(answer, len(group)), strict=True):
                self.last_timings[key] = took
                futures[key].set_result(rows)
        finally:
            for future in futures.values():
                if not future.done():  # (a bug above: never leave a read waiting)
                    future.set_exception(RuntimeError("merged query not answered"))

    def _targets(self) -> list[dict[str, Any]]:
        """The scrape targets the store knows; none from a store that does not scrape and
        so has no targets API: VictoriaMetrics' vmselect answers that path HTTP 400
        "unsupported path requested" (its generic answer for a path it does not serve),
        others 404. Any other failure raises."""
        response = self._session.get(
            f"{self.url}/api/v1/targets", params={"state": "active"}, timeout=self.timeout_s
        )
        if response.status_code == 404 or (
            response.status_code == 400
            and response.content.lstrip().startswith(b"unsupported path requested")
        ):
            return []
        if response.status_code != 200:
            raise PrometheusApiClientException(
                f"HTTP Status Code {response.status_code} ({response.content!r})"
            )
        data = response.json().get("data") or {}
        return list(data.get("activeTargets") or [])

    def _label_values(self, label: str, at: float, match: str | None = None) -> list[Any] | None:
        """The values ``label`` took in the lookback before ``at`` (one index read,
        milliseconds), of the series ``match`` selects where given; None where the API
        does not say. Raises what ``requests`` raises."""
        lookback = max(self.settings.telemetry_window_s, 3 * self.settings.telemetry_stale_s)
        params = {"start": f"{at - lookback - 60:.3f}", "end": f"{at:.3f}"}
        if match is not None:
            params["match[]"] = match
        response = self._session.get(
            f"{self.url}/api/v1/label/{label}/values", params=params, timeout=self.timeout_s
        )
        if response.status_code != 200:
            return None
        doc = json.loads(response.content)
        data = doc.get("data") if isinstance(doc, dict) else None  # "[1]": no index
        return data if isinstance(data, list) else None

    def _names(self, at: float) -> frozenset[str] | None:
        """Every metric name with samples in the lookback before ``at``, so that each
        family is queried only for the spellings that exist: no ``or`` of absent
        dialects, no tag to tell them apart, no query at all for a family nobody serves.
        None when the API does not answer (then every spelling is asked for, as before)."""
        try:
            data = self._label_values("__name__", at)
        except (requests.ConnectionError, requests.Timeout) as exc:
            # not there: say so now rather than after every query has timed out too
            raise Unavailable(
                f"Prometheus at {self.url} is not answering ({self._reason(exc)}): {FIX}"
            ) from exc
        except (requests.RequestException, ValueError):
            return None
        if data is None:
            return None
        return frozenset(name for name in data if isinstance(name, str))  # [null], [{}]

    @staticmethod
    def served(family: Family, names: frozenset[str] | None) -> Family:
        """``family`` with only the spellings whose metric exists (see ``_names``)."""
        if names is None:
            return family
        kept = tuple(
            s
            for s in family.spellings
            if (any(re.fullmatch(s.name, n) for n in names) if s.pattern else s.name in names)
        )
        if len(kept) == len(family.spellings):
            return family
        return dataclasses.replace(family, spellings=kept)

    @staticmethod
    def lean(family: Family, groups: Collection[str] | None) -> Family:
        """In a verdicts-only read, and for the readings no view shows (``RULES_ONLY``) in
        any read that names its groups, ``family`` asking only for the rows a rule can
        fire on (``verdict_keep``), where one dialect serves it: with two, our 0 would be
        left out and a peer's non-zero reading of the same GPU would win, where the full
        read shows ours."""
        if groups is None or family.verdict_keep is None or len(family.spellings) != 1:
            return family
        if VERDICTS not in groups and family.key not in RULES_ONLY:
            return family
        return dataclasses.replace(family, keep=family.verdict_keep)

    # -- collect ------------------------------------------------------------------------

    def collect(
        self, nodes: Collection[str] | None = None, *, families: Collection[str] | None = None
    ) -> FleetTelemetry:
        with self._lock:  # one collect at a time shares the pool fairly
            return self._collect(nodes, families)

    def _collect(
        self, nodes: Collection[str] | None, groups: Collection[str] | None
    ) -> FleetTelemetry:
        at = self.clock()
        targets: Future[list[dict[str, Any]]] = self._pool.submit(self._targets)
        fleet = None if nodes is not None else self._pool.submit(self._exporter_nodes, at)
        names = self._names(at)
        # a fleet of a few hundred of our exporters: its node summaries are merged (a
        # larger fleet's stay apart, for Prometheus to evaluate side by side)
        small = fleet is not None and (fleet.result() or MERGE_NODES + 1) <= MERGE_NODES
        if self._summarized(nodes, groups, names):
            assert names is not None and groups is not None
            try:
                return self._collect_summarized(nodes, groups, names, at, targets, small)
            except _SummaryUnreadable:
                pass  # read every GPU and port, as without the summaries
        return self._collect_detail(nodes, groups, names, at, targets, small=small)

    def _exporter_nodes(self, at: float) -> int | None:
        """How many nodes our exporter served in the lookback, or None where the API
        does not say."""
        try:
            data = self._label_values("node", at, EXPORTER_SERIES)
        except (requests.RequestException, ValueError):
            return None
        return None if data is None else len(data)

    # -- a verdicts-only read from the node summaries (telemetry/summary.py) ------------

    def _summarized(
        self,
        nodes: Collection[str] | None,
        groups: Collection[str] | None,
        names: frozenset[str] | None,
    ) -> bool:
        """A verdicts-only read of more than a few nodes, where our exporters publish
        node summaries and alone serve what the health rules read (the summaries fold
        only our series)."""
        if not self.use_summaries or names is None or groups is None:
            return False
        if set(groups) != {VERDICTS} or (nodes is not None and len(nodes) <= DETAIL_NODES):
            return False
        if summary.STAMP not in names:
            return False
        return all(
            s.dialect == KREA
            for f in select(self.families, groups)
            for s in self.served(f, names).spellings
        )

    def _collect_summarized(
        self,
        nodes: Collection[str] | None,
        groups: Collection[str],
        names: frozenset[str],
        at: float,
        targets: Future[list[dict[str, Any]]],
        small: bool,
    ) -> FleetTelemetry:
        """Every node's summaries and freshness (a few thousand rows per reading); the
        nodes no rule can fire on get their freshness and GPU count only, the others are
        read one GPU and port at a time by ``_collect_detail`` (see summary.py)."""
        window, stale_s = self.settings.telemetry_window_s, self.settings.telemetry_stale_s
        fresh = next(f for f in select(self.families, groups) if f.kind == "fresh")
        fresh = self.served(fresh, names)
        asked = self._ask_summaries(at, summary.JUDGED, merge=small)
        fresh_rows = self._pool.submit(self._run, fresh.key, self._builder.query(fresh), at)
        values, taken_at = self._read_summaries(asked)
        try:
            rows = fresh_rows.result()
        except Exception as exc:
            raise _SummaryUnreadable(str(exc)) from exc
        asm = Assembler(window_s=window, collected_at=at, stale_s=stale_s, nodes=nodes)
        asm.add(fresh, rows if isinstance(rows, list) else [])
        try:
            down = {t.node for t in self._down_targets(targets.result(), asm)}
        except Exception:
            down = set()  # (the detail read below says the targets API failed)
        base = asm.build(self.describe())
        policy = self.policy
        clean: dict[str, NodeTelemetry] = {}
        detail: dict[str, str] = {}
        # (a node whose exporter has been failing for longer than the lookback has no
        # freshness row and no summary left: its failing target alone names it)
        for node in sorted(set(values) | set(base.nodes) | down):
            if nodes is not None and node not in nodes:
                continue
            tel, mine, when = base.nodes.get(node), values.get(node), taken_at.get(node)
            why: str | None
            if node in down:
                why = "its exporter is not being scraped"
            elif tel is None or tel.last_sample_at is None:
                why = "no freshness series"
            elif mine is None or when is None:
                why = "no summary"
            elif when + 0.001 < tel.last_sample_at:
                why = "no summary in its newest scrape"
            elif at - when > stale_s:
                why = f"summary taken {units.age(at - when)} ago"
            else:
                why = summary.unclean(mine, policy)
            if why is None and tel is not None and mine is not None:
                clean[node] = dataclasses.replace(tel, gpu_count=int(mine["gpus"]))
            else:
                detail[node] = why or "no freshness series"
        fleet: FleetTelemetry | None = None
        if detail:
            restrict = detail.keys() if len(detail) <= LINK_QUERY_NODES else None
            fleet = self._collect_detail(
                detail.keys(), groups, names, at, targets, restrict, prune=False
            )
        read = {
            n: dataclasses.replace(t, detail_reason=detail.get(n))
            for n, t in (fleet.nodes.items() if fleet is not None else ())
        }
        return FleetTelemetry(
            source=self.describe(),
            collected_at=at,
            window_s=window,
            nodes=MappingProxyType(dict(sorted({**clean, **read}.items()))),
            errors=fleet.errors if fleet is not None else (),
            dialects=(fleet.dialects if fleet is not None else frozenset())
            | (frozenset({KREA}) if clean else frozenset()),
        )

    def _ask_summaries(self, at: float, whats: Iterable[str], *, merge: bool) -> _Asked:
        """The queries of these summaries (names of ``summary.expressions``) and of when
        each node's were taken, started on the pool (milliseconds: one row per node);
        ``merge``: a few queries for all of them (``_submit``)."""
        expressions = summary.expressions(self.settings.telemetry_window_s)
        # (those over a range first: merged, each group gets its share of the long poles)
        ranged = sorted(whats, key=lambda w: "[" not in expressions[w])
        asks: list[Ask] = [(f"summary:{w}", expressions[w], ("node",)) for w in ranged]
        stamp = f"max by (node) (timestamp({summary.STAMP}))"
        asks.append(("summary:taken_at", stamp, ("node",)))
        futures = self._submit(asks, at, merge=merge)
        return _Asked(
            values={w: futures[f"summary:{w}"] for w in whats},
            stamp=futures["summary:taken_at"],
        )

    def _read_summaries(
        self, asked: _Asked
    ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        """({node: {summary: value}}, {node: when its summaries were taken}), or
        ``_SummaryUnreadable``: no exporter publishes them, a query failed."""
        values: dict[str, dict[str, float]] = {}
        try:
            for what, future in asked.values.items():
                for node, value in _by_node(future.result()):
                    values.setdefault(node, {})[what] = value
            taken_at = dict(_by_node(asked.stamp.result()))
        except Exception as exc:
            raise _SummaryUnreadable(str(exc)) from exc
        if not taken_at:
            raise _SummaryUnreadable("no exporter publishes node summaries")
        return values, taken_at

    def _prunable(self, family: Family) -> bool:
        """Whether a read may skip ``family`` on the nodes whose summaries give it
        (summary.PROVEN_EMPTY, PROVEN_FULL, PROVEN_VALUE): a sparse reading (zeros left
        out anyway) or a presence mask with a spelling of ours (a peer's spellings are
        still asked of every node); otherwise served by our exporter alone, with a
        skipped node's value known."""
        if family.key in summary.PROVEN_FULL or (
            family.keep is not None and family.key in summary.PROVEN_EMPTY
        ):
            # the proven nodes' rows of ours would all be left out anyway (sparse), or
            # their ports get all of our bits (a presence mask)
            return any(s.dialect == KREA for s in family.spellings)
        if len(family.spellings) != 1 or family.spellings[0].dialect != KREA:
            return False
        if family.key in summary.PROVEN_VALUE:
            return family.keep is None
        return family.key in summary.PROVEN_EMPTY and (
            family.key in summary.FILLED or family.key in summary.EMPTY_READS_AS_NONE
        )

    def _proven(
        self, asked: _Asked, at: float, keys: Iterable[str]
    ) -> tuple[dict[str, frozenset[str]], dict[str, Mapping[str, float]]]:
        """({family: the nodes whose summaries give it: empty, or one value on every
        GPU}, {node: its summaries}), from summaries taken within
        ``telemetry_stale_s``; raises _SummaryUnreadable (also where a proof reads a
        summary that was not asked for: ``summary.Only``)."""
        values, taken_at = self._read_summaries(asked)
        stale_s = self.settings.telemetry_stale_s
        whats = frozenset(asked.values)
        usable: dict[str, Mapping[str, float]] = {
            node: summary.Only(v, whats)
            for node, v in values.items()
            if "gpus" in v and node in taken_at and at - taken_at[node] <= stale_s
        }
        proven: dict[str, frozenset[str]] = {}
        try:
            for key in keys:
                if key in summary.PROVEN_VALUE:
                    what = summary.PROVEN_VALUE[key]
                    proven[key] = frozenset(n for n, v in usable.items() if what in v)
                else:
                    test = summary.PROVEN_EMPTY.get(key) or summary.PROVEN_FULL[key]
                    proven[key] = frozenset(n for n, v in usable.items() if test(v))
        except summary.Unasked as exc:
            raise _SummaryUnreadable(str(exc)) from exc
        return proven, usable

    @staticmethod
    def _link_suspects(
        proven: Mapping[str, frozenset[str]],
        known: Mapping[str, Mapping[str, float]],
        having: frozenset[str] | None,
    ) -> frozenset[str] | None:
        """The nodes of ``having`` whose summaries do not show every NVLink up with no
        error counted in the window (``Assembler.nodes_needing_links``' reasons), or None
        where the proofs were not read. Only a guess at which nodes the per-link round
        asks of: the round asked early is kept only where it covers them all."""
        keys = ("nvlink_sum_rate", "nvlink_fault_rate", "nvlink_links", "nvlink_links_up")
        if having is None or any(k not in proven for k in keys):
            return None
        clean = frozenset.intersection(*(proven[k] for k in keys))
        return frozenset(
            n
            for n in having
            if n not in clean
            or known[n].get("nvlink_links_up_uniform", -1.0)
            < known[n].get("nvlink_links_uniform", 0.0)
        )

    def _ask_links(
        self,
        later: Sequence[Family],
        nodes: Collection[str] | None,
        suspects: frozenset[str],
        at: float,
    ) -> dict[str, Future[list[Row] | Values]]:
        """The per-link families asked of ``suspects`` (none: nothing to ask)."""
        if not suspects:
            return {}
        asks: list[Ask] = [
            (f.key, self._builder.query(f, nodes, link_nodes=suspects), None) for f in later
        ]
        return self._submit(asks, at, merge={f.key for f in later if _ours(f)})

    # -- the read of every GPU and port -------------------------------------------------

    def _collect_detail(
        self,
        nodes: Collection[str] | None,
        groups: Collection[str] | None,
        names: frozenset[str] | None,
        at: float,
        targets: Future[list[dict[str, Any]]],
        restrict: Collection[str] | None = None,
        prune: bool = True,
        *,
        small: bool = False,
    ) -> FleetTelemetry:
        """``restrict``: our spellings are asked for these nodes only (a node=~ list).
        ``prune``: where the exporters publish node summaries, readings they prove empty on a
        node, or give the one value of for all its GPUs (summary.PROVEN_EMPTY,
        PROVEN_VALUE), are not asked of that node; ``FleetTelemetry.skipped`` says where.
        ``small``: our exporter runs on at most ``MERGE_NODES`` nodes: the node summaries
        are asked merged (``_submit``)."""
        asm = Assembler(
            window_s=self.settings.telemetry_window_s,
            collected_at=at,
            stale_s=self.settings.telemetry_stale_s,
            nodes=nodes,
        )
        chosen = [self.lean(self.served(f, names), groups) for f in select(self.families, groups)]
        by_key = {f.key: f for f in chosen}
        for f in chosen:
            if not f.spellings:
                asm.add(f, [])  # nobody serves it: read, and empty
        chosen = [f for f in chosen if f.spellings]
        few = nodes is not None and len(nodes) <= DETAIL_NODES

        def deferred(f: Family) -> bool:
            """A fallback whose newer form exists: read later, for the nodes without it."""
            if f.fallback_of is None or few or names is None:
                return False
            newer = FAMILY_BY_KEY[f.fallback_of].spellings[0].name
            return newer in names and f.fallback_of in by_key

        first = [f for f in chosen if (few or not f.per_link) and not deferred(f)]
        later = [f for f in chosen if not few and f.per_link]
        fallbacks = [f for f in chosen if deferred(f)]
        # the long poles first: range reads over many series
        first.sort(key=lambda f: f.kind not in ("rate", "present_rate", "min_window"))
        # readings the node summaries can prove empty, node by node: their summaries are
        # asked for first, the readings themselves once it is known where to skip them
        pruned: list[Family] = []
        asked: _Asked | None = None
        skipped: dict[str, frozenset[str]] = {}
        if (
            prune
            and self.use_summaries
            and names is not None
            and summary.STAMP in names
            and not few
            and restrict is None
        ):
            pruned = [f for f in first if self._prunable(f)]
            if pruned:
                asked = self._ask_summaries(at, summary.proving(f.key for f in pruned), merge=small)
                first = [f for f in first if f not in pruned]
        # asked of a few named nodes, our readings' answers are bounded: a few queries
        bounded = few or restrict is not None
        futures = self._submit(
            [
                (f.key, self._builder.query(f, nodes, link_nodes=restrict), value_labels(f))
                for f in first
            ],
            at,
            # (the freshness rows alone where the pruned readings wait for them)
            merge={
                f.key
                for f in first
                if bounded and _ours(f) and not (asked is not None and f.kind == "fresh")
            },
        )
        fills: list[tuple[Family, dict[str, tuple[int, float]]]] = []
        full: list[tuple[Family, dict[str, int]]] = []
        # the per-link round, asked beside the pruned readings of the nodes whose
        # summaries leave their links in question (kept where it covers those that turn
        # out to need them: ``_link_suspects``)
        early: tuple[frozenset[str], dict[str, Future[list[Row] | Values]]] | None = None
        if asked is not None:
            try:
                empty, known = self._proven(asked, at, [f.key for f in pruned])
            except _SummaryUnreadable:
                empty, known = {}, {}  # asked of every node, as without the summaries
            skipped = {k: v for k, v in empty.items() if v}
            # every node with a series of ours has a freshness row (the same scrape, the
            # same lookback): the others are known by name once that read is in
            having = self._fresh_nodes(futures, by_key) if any(empty.values()) else None
            if having is not None and nodes is not None:
                having = having & frozenset(nodes)
            asks: list[Ask] = []
            bounded_keys: set[str] = set()
            for f in pruned:
                skip = empty.get(f.key) or None
                rest = None if having is None or skip is None else having - skip
                if rest is not None and not rest:
                    asm.read.add(f.store)  # every node with its series is proven empty
                else:
                    # the few others by name, else all but the proven ones (a presence
                    # mask: all but, as a peer's masks are asked of every node)
                    few_left = (
                        rest is not None
                        and len(rest) <= LINK_QUERY_NODES
                        and f.key not in summary.PROVEN_FULL
                    )
                    query = (
                        self._builder.query(f, nodes, link_nodes=rest)
                        if few_left
                        else self._builder.query(f, nodes, skip_nodes=skip)
                    )
                    asks.append((f.key, query, value_labels(f)))
                    if few_left and _ours(f):
                        bounded_keys.add(f.key)
                    first.append(f)
                objects = summary.OBJECTS[f.by[0]]
                if skip and f.keep is None and f.key in summary.FILLED:
                    value = summary.FILLED[f.key]
                    fills.append((f, {n: (int(known[n][objects]), value(known[n])) for n in skip}))
                if skip and f.key in summary.PROVEN_FULL:
                    full.append((f, {n: int(known[n][objects]) for n in skip}))
            futures.update(self._submit(asks, at, merge=bounded_keys))
            suspects = self._link_suspects(empty, known, having) if later else None
            if suspects is not None and len(suspects) <= LINK_QUERY_NODES:
                early = (suspects, self._ask_links(later, nodes, suspects, at))

        errors: list[str] = []
        failures: list[BaseException] = []
        self._gather(first, futures, asm, errors, failures)
        if failures and len(failures) == len(first):
            raise Unavailable(
                f"Prometheus at {self.url} is not answering ({self._reason(failures[0])}): {FIX}"
            )
        for f, given in fills:
            asm.fill(f, given)
        for f, ports in full:
            asm.fill_present(f, ports)
        # second round, restricted to the nodes that need it (a bounded node=~ list; past
        # that the fleet-wide read is cheaper): per-link NVLink rows, exact presence masks
        rounds: list[tuple[Family, Collection[str] | None]] = []
        linked: tuple[frozenset[str], dict[str, Future[list[Row] | Values]]] | None = None
        if later:
            need = asm.nodes_needing_links(
                detail=groups is None or bool({NVLINK, VERDICTS} & set(groups))
            )
            if early is not None and need <= early[0]:
                linked = (frozenset(need), early[1]) if need else None
            elif need:
                limited: Collection[str] | None = need if len(need) <= LINK_QUERY_NODES else None
                rounds += [(f, limited) for f in later]
        for f in fallbacks:
            assert f.fallback_of is not None
            lacking = asm.nodes_lacking(f.fallback_of)
            if lacking:
                rounds.append((f, lacking if len(lacking) <= LINK_QUERY_NODES else None))
        for key, partial in sorted(asm.partial_present.items()):
            rounds.append((by_key[key], partial if len(partial) <= LINK_QUERY_NODES else None))
        if rounds:
            round_asks: list[Ask] = []
            for f, restrict in rounds:
                promql = (
                    self._builder.exact_present(f, restrict)
                    if f.kind in ("present", "present_rate")
                    else self._builder.query(f, nodes, link_nodes=restrict)
                )
                round_asks.append((f.key, promql, None))
            futures = self._submit(
                round_asks,
                at,
                merge={f.key for f, restrict in rounds if (few or restrict) and _ours(f)},
            )
        if linked is not None:
            # the rows of the nodes that need their links, as a round asking those alone
            self._gather(later, linked[1], asm, errors, failures, only=linked[0])
        if rounds:
            self._gather([f for f, _ in rounds], futures, asm, errors, failures)
        down: list[TargetDown] = []
        try:
            down = self._down_targets(
                targets.result(), asm, lambda: self._telemetry_jobs(by_key, at)
            )
        except Exception as exc:
            errors.append(f"targets API failed ({self._reason(exc)}): failing scrapes not shown")
        fleet = asm.build(self.describe(), errors=errors, down=down)
        if skipped:
            fleet = dataclasses.replace(fleet, skipped=MappingProxyType(skipped))
        return fleet

    def _telemetry_jobs(self, by_key: Mapping[str, Family], at: float) -> frozenset[str]:
        """The jobs whose targets serve a freshness series on any node: what a fleet read
        learns from its freshness rows, for a read of a few nodes."""
        fresh = next((f for f in by_key.values() if f.kind == "fresh"), None)
        if fresh is None:
            return frozenset()
        rows = self._run("fresh jobs", f"group by (job) ({self._builder.query(fresh)})", at)
        if not isinstance(rows, list):
            return frozenset()
        return frozenset(job for labels, _ in rows if (job := labels.get("job")))

    @staticmethod
    def _fresh_nodes(
        futures: Mapping[str, Future[list[Row] | Values]], by_key: Mapping[str, Family]
    ) -> frozenset[str] | None:
        """The nodes of our exporter's freshness rows (waiting for that query), or None
        where another dialect is read too or the query failed."""
        fresh = next((f for f in by_key.values() if f.kind == "fresh"), None)
        if fresh is None or fresh.key not in futures:
            return None
        if [s.dialect for s in fresh.spellings] != [KREA]:
            return None
        try:
            rows = futures[fresh.key].result()
        except Exception:
            return None  # (the gather reports it)
        if not isinstance(rows, list):
            return None
        return frozenset(n for n in (node_of(labels) for labels, _ in rows) if n)

    def _gather(
        self,
        families: Sequence[Family],
        futures: Mapping[str, Future[list[Row] | Values]],
        asm: Assembler,
        errors: list[str],
        failures: list[BaseException],
        only: Collection[str] | None = None,
    ) -> None:
        """Each family's answer into ``asm``; ``only``: the rows of these nodes alone (rows,
        not ``Values``: the per-link families)."""
        for family in families:
            try:
                rows = futures[family.key].result()
            except Exception as exc:
                failures.append(exc)
                asm.failed.add(family.store)
                errors.append(f"query {family.key} failed: {self._reason(exc)}")
                continue
            if only is not None:
                assert not isinstance(rows, Values), family.key
                rows = [row for row in rows if node_of(row[0]) in only]
            if isinstance(rows, Values):
                asm.add_values(family, rows.labels, rows.rows)
            else:
                asm.add(family, rows)

    def _down_targets(
        self,
        targets: list[dict[str, Any]],
        asm: Assembler,
        fleet_jobs: Callable[[], frozenset[str]] | None = None,
    ) -> list[TargetDown]:
        """Targets Prometheus fails to scrape, mapped to nodes. Only targets of jobs that
        serve telemetry count (a failing kubelet target is not a GPU exporter): the jobs
        of this read's freshness rows, and where the read asks for a few nodes, whose
        rows may all be gone, ``fleet_jobs`` (asked once, only if needed)."""
        out: list[TargetDown] = []
        jobs: frozenset[str] | None = None
        for target in targets:
            if target.get("health") != "down":
                continue
            labels = target.get("labels") or {}
            instance = labels.get("instance") or ""
            job = labels.get("job") or ""
            node = next((labels[n] for n in NODE_LABELS if labels.get(n)), None)
            node = node or asm.instances.get(instance) or instance_host(instance)
            if not node:
                continue
            if job not in asm.jobs and instance not in asm.instances:
                if fleet_jobs is None or asm.nodes is None or node not in asm.nodes:
                    continue
                if jobs is None:
                    jobs = fleet_jobs()
                if job not in jobs:
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
                # the body as text (a proxy's plain-text error page, not its bytes repr)
                detail = eval_bytes(match.group(2))
                try:
                    body = json.loads(detail)
                    detail = body.get("error") or detail
                except (ValueError, TypeError, AttributeError):
                    pass
                first = next(
                    (line.strip() for line in str(detail).splitlines() if line.strip()), ""
                )
                return (
                    f"HTTP {match.group(1)}: {first[:200]}" if first else f"HTTP {match.group(1)}"
                )
            return text.splitlines()[0][:200]
        return short_reason(exc, self.timeout_s)


def eval_bytes(literal: str) -> str:
    """The text inside a ``b'...'`` repr as prometheus-api-client formats error bodies."""
    if len(literal) >= 3 and literal[0] == "b" and literal[1] in "'\"":
        body = literal[2:-1]
        return body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    return literal
