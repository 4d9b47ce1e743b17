"""Prometheus text exposition (format 0.0.4) with per-series label text cached.

``prometheus_client.generate_latest`` escapes and joins every label set again on every
scrape; for a node's ~1,500 series that is most of the scrape's cost (see
docs/benchmarks.md). A node exporter's series are almost all the same from one scrape
to the next, so the ``name{labels}`` prefix of each series is rendered once and reused.
Output is byte-for-byte what ``generate_latest`` writes for counter and gauge families
(tests/exporters/test_exposition.py); any other family type falls back to it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape_label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


class _FallBack(Exception):
    pass


class CachedTextRenderer:
    """Renders a registry to text, caching each series' ``name{labels} `` prefix."""

    def __init__(self, registry: CollectorRegistry | Collector, max_series: int = 200_000) -> None:
        self._registry = registry
        self._max_series = max_series
        self._prefixes: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        self._lock = threading.Lock()

    def _prefix(self, name: str, labels: dict[str, str]) -> str:
        if not labels:
            return name + " "
        inner = ",".join(f'{k}="{_escape_label_value(v)}"' for k, v in sorted(labels.items()))
        return f"{name}{{{inner}}} "

    def _render(self, families: Iterable) -> str:  # type: ignore[type-arg]
        prefixes = self._prefixes
        if len(prefixes) > self._max_series:
            prefixes.clear()
        out: list[str] = []
        append = out.append
        for family in families:
            kind = family.type
            if kind == "counter":
                name = family.name + "_total"
            elif kind == "gauge":
                name = family.name
            else:
                raise _FallBack
            append(f"# HELP {name} {_escape_help(family.documentation)}\n# TYPE {name} {kind}\n")
            for sample in family.samples:
                if sample.timestamp is not None or sample.exemplar is not None:
                    raise _FallBack
                if sample.name != name:  # e.g. a counter's _created: rare, let the library do it
                    raise _FallBack
                key = (sample.name, tuple(sample.labels.items()))
                prefix = prefixes.get(key)
                if prefix is None:
                    prefix = prefixes[key] = self._prefix(sample.name, sample.labels)
                append(prefix)
                append(floatToGoString(sample.value))
                append("\n")
        return "".join(out)

    def render(self) -> bytes:
        families = list(self._registry.collect())
        with self._lock:
            try:
                return self._render(families).encode("utf-8")
            except _FallBack:
                pass
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Replay(families))
        return generate_latest(registry)


class _Replay:
    """Yields already-collected families again (so a fallback does not scrape twice)."""

    def __init__(self, families: list) -> None:  # type: ignore[type-arg]
        self._families = families

    def collect(self) -> Iterable:  # type: ignore[type-arg]
        return iter(self._families)

    def describe(self) -> list:  # type: ignore[type-arg]
        return []
