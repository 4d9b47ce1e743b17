"""Prometheus API answers (krea_ops/telemetry/prometheus.py): whatever a
Prometheus-compatible server answers to the metric-name index, the instant queries, the
targets and the rules APIs (wrong JSON types, NaN and infinite values, labels of any
text, truncated bodies), a collect gives a fleet snapshot whose failed families are one
line each, or ``Unavailable``; never another exception. Readings are finite or None.

The answers come from a real HTTP server on loopback serving the drawn bodies."""

from __future__ import annotations

import dataclasses
import math
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from krea_ops.errors import Unavailable
from krea_ops.model import FleetTelemetry
from krea_ops.settings import Settings
from krea_ops.telemetry.dialects import FAMILIES
from krea_ops.telemetry.prometheus import PrometheusSource
from tests.props.conftest import one_line

NAMES = sorted({s.name for f in FAMILIES for s in f.spellings})
NOW = 1_000_000.0
NODES = ("node-a", "node-b")
QUERY = "/api/v1/query"
FRESH = orjson.dumps(
    {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {
                    "metric": {"node": n, "krea_ops_src": "krea_exporter_build_info"},
                    "value": [NOW, str(NOW)],
                }
                for n in NODES
            ],
        },
    }
)
LABELS = (
    "node",
    "gpu",
    "device",
    "port",
    "link",
    "instance",
    "Hostname",
    "krea_ops_src",
    "counter",
    "job",
)


class _Server(ThreadingHTTPServer):
    # the source asks 8 queries at once: a backlog of 5 drops a SYN, which costs a
    # second's retransmit
    request_queue_size = 64


class Answers:
    """A loopback server answering each API path with the body set for it."""

    def __init__(self) -> None:
        self.bodies: dict[str, bytes] = {}
        self.queries: list[bytes] = [b""]
        outer = self

        class Handler(BaseHTTPRequestHandler):
            # one write per answer: headers and body in separate segments cost a
            # delayed ACK each
            wbufsize = 1 << 16

            def _answer(self) -> None:
                url = urlsplit(self.path)
                form = url.query
                if self.command == "POST":
                    form = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                promql = " ".join(parse_qs(form).get("query", []))
                if url.path == QUERY and "timestamp(" in promql:
                    body = FRESH  # every node fresh, so that its readings count
                elif url.path == QUERY:
                    # each query its own drawn answer, the same one in every run
                    body = outer.queries[zlib.crc32(promql.encode()) % len(outer.queries)]
                else:
                    body = outer.bodies.get(url.path, b"")
                status = 200
                if body.startswith(b"HTTP "):
                    status, body = int(body[5:8]), body[8:]
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.1,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def answers() -> Iterator[Answers]:
    server = Answers()
    yield server
    server.close()


label_values = st.one_of(
    st.sampled_from([*NODES, "0", "1", "mlx5_0", "10.0.0.1:9400", "", *NAMES[:5]]),
    st.text(max_size=10),
)
sample_values = st.one_of(
    st.sampled_from(["NaN", "+Inf", "-Inf", "-1", "1e999", "0", "75.5", "abc", ""]),
    st.floats().map(repr),
    st.integers(-(2**70), 2**70).map(str),
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
series = st.one_of(
    st.fixed_dictionaries(
        {
            "metric": st.builds(
                lambda extra, node: {**extra, **node},
                st.dictionaries(st.sampled_from(LABELS), label_values, max_size=4),
                st.sampled_from(NODES).map(lambda n: {"node": n}) | st.just({}),
            ),
            "value": st.tuples(st.floats(0, 2e9), sample_values).map(list),
        }
    ),
    st.fixed_dictionaries({"metric": json_values, "value": json_values}),
    json_values,
)
query_bodies = st.one_of(
    st.lists(series, max_size=6).map(
        lambda rows: orjson.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": rows}}
        )
    ),
    json_values.map(
        lambda v: orjson.dumps({"status": "success", "data": {"resultType": "vector", "result": v}})
    ),
    json_values.map(orjson.dumps),
    st.sampled_from(
        [
            b"",
            b"{",
            b"null",
            b"HTTP 500{}",
            b'HTTP 400{"status":"error","error":"bad\\nquery"}',
            b"HTTP 503\xff",
        ]
    ),
)
names_bodies = st.one_of(
    st.just(orjson.dumps({"status": "success", "data": NAMES})),
    st.lists(st.sampled_from(NAMES), max_size=12, unique=True).map(
        lambda n: orjson.dumps({"status": "success", "data": n})
    ),
    json_values.map(lambda v: orjson.dumps({"status": "success", "data": v})),
    st.sampled_from([b"", b"[1]", b"HTTP 500", b'{"data":[{"a":1}]}']),
)
targets_bodies = st.one_of(
    st.lists(
        st.fixed_dictionaries(
            {
                "labels": st.dictionaries(st.sampled_from(LABELS), label_values, max_size=3),
                "health": st.sampled_from(["up", "down", 3]),
                "lastError": json_values,
                "scrapeUrl": json_values,
            }
        )
        | json_values,
        max_size=3,
    ).map(lambda t: orjson.dumps({"status": "success", "data": {"activeTargets": t}})),
    json_values.map(lambda v: orjson.dumps({"data": v})),
    st.sampled_from([b"", b"HTTP 500", b"[]"]),
)
rules_bodies = st.one_of(
    json_values.map(lambda v: orjson.dumps({"data": {"groups": v}})),
    json_values.map(lambda v: orjson.dumps({"data": {"groups": [{"rules": v}]}})),
    st.sampled_from([b"", b"[]", b"HTTP 404"]),
)


def _vector(labels: dict[str, str], value: str) -> bytes:
    result = [{"metric": labels, "value": [NOW, value]}]
    return orjson.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def _walk_floats(value: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(value, float):
        yield path, value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _walk_floats(getattr(value, f.name), f"{path}.{f.name}")
    elif isinstance(value, dict) or hasattr(value, "items"):
        for k, v in value.items():
            yield from _walk_floats(v, f"{path}[{k!r}]")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _walk_floats(v, f"{path}[{i}]")


@settings(max_examples=40)  # each example is some fifty HTTP round trips
@given(
    names_bodies,
    st.lists(query_bodies, min_size=1, max_size=4),
    targets_bodies,
    rules_bodies,
    st.booleans(),
)
@example(  # the plain-values fast path: a value that is not a number
    names=orjson.dumps({"status": "success", "data": NAMES}),
    queries=[_vector({"gpu": "0", "node": "node-a"}, "abc")],
    targets=b"",
    rules=b"",
    summaries=False,
)
@example(  # +Inf, as a PromQL division by zero answers
    names=orjson.dumps({"status": "success", "data": NAMES}),
    queries=[_vector({"gpu": "0", "node": "node-a"}, "+Inf")],
    targets=b"",
    rules=b"",
    summaries=False,
)
@example(  # metric names that are not strings
    names=b'{"status":"success","data":[null,{"a":1}]}',
    queries=[b""],
    targets=b"",
    rules=b"",
    summaries=True,
)
def test_any_prometheus_answer(
    answers: Answers,
    names: bytes,
    queries: list[bytes],
    targets: bytes,
    rules: bytes,
    summaries: bool,
) -> None:
    answers.bodies = {
        "/api/v1/label/__name__/values": names,
        "/api/v1/targets": targets,
        "/api/v1/rules": rules,
    }
    answers.queries = queries
    s = Settings(telemetry_timeout_s=5.0)
    with PrometheusSource(answers.url, s, use_summaries=summaries, clock=lambda: NOW) as source:
        for groups in (None, {"verdicts"}, {"gpu", "ib"}):
            try:
                fleet = source.collect(families=groups)
            except Unavailable as exc:
                assert one_line(str(exc)), repr(str(exc))
                continue
            assert isinstance(fleet, FleetTelemetry)
            for error in fleet.errors:
                assert one_line(error), repr(error)
            for path, value in _walk_floats(fleet.nodes):
                assert math.isfinite(value), f"{path} = {value}"


# -- what the properties found, as plain tests ---------------------------------------


TEMPERATURE = ["krea_exporter_build_info", "krea_gpu_temperature_celsius"]


def _collect(answers: Answers, names: list[Any], rows: bytes) -> FleetTelemetry:
    answers.bodies = {
        "/api/v1/label/__name__/values": orjson.dumps({"status": "success", "data": names}),
        "/api/v1/targets": orjson.dumps({"status": "success", "data": {"activeTargets": []}}),
    }
    answers.queries = [rows]
    with PrometheusSource(
        answers.url, Settings(), use_summaries=False, clock=lambda: NOW
    ) as source:
        return source.collect()


@pytest.mark.parametrize("names", [NAMES, TEMPERATURE], ids=["every-name", "temperature"])
@pytest.mark.parametrize("value", ["+Inf", "-Inf", "NaN", "abc"])
def test_a_reading_that_is_not_a_finite_number_is_unknown(
    answers: Answers, names: list[str], value: str
) -> None:
    fleet = _collect(answers, names, _vector({"gpu": "0", "node": "node-a"}, value))
    assert fleet.nodes["node-a"].exporter_up  # read, fresh
    for gpu in fleet.nodes["node-a"].gpus:
        assert gpu.temperature_c is None and gpu.power_w is None


def test_a_finite_reading_is_read(answers: Answers) -> None:
    fleet = _collect(answers, TEMPERATURE, _vector({"gpu": "0", "node": "node-a"}, "71.5"))
    assert fleet.nodes["node-a"].gpus[0].temperature_c == 71.5


def test_metric_names_that_are_not_strings_are_ignored(answers: Answers) -> None:
    fleet = _collect(
        answers, [None, {"a": 1}, *TEMPERATURE], _vector({"gpu": "0", "node": "node-a"}, "70")
    )
    assert fleet.nodes["node-a"].gpus[0].temperature_c == 70


def test_a_name_index_that_is_not_an_object_asks_every_spelling(answers: Answers) -> None:
    answers.bodies = {"/api/v1/label/__name__/values": b"[1]"}
    answers.queries = [_vector({"gpu": "0", "node": "node-a"}, "70")]
    with PrometheusSource(
        answers.url, Settings(), use_summaries=False, clock=lambda: NOW
    ) as source:
        fleet = source.collect()
    assert set(fleet.nodes) == set(NODES)  # read, every spelling asked for
