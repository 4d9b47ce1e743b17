"""The plain-value reading of Prometheus answers, and which families take it."""

from __future__ import annotations

import json

import orjson
import pytest

from krea_ops.telemetry import prometheus
from krea_ops.telemetry.dialects import FAMILY_BY_KEY
from krea_ops.telemetry.prometheus import decode_rows, decode_values, value_labels


def answer(*series: tuple[dict[str, str], str]) -> str:
    """An instant-query answer as Prometheus writes it (compact, labels sorted)."""
    result = [{"metric": dict(sorted(m.items())), "value": [1795995662.346, v]} for m, v in series]
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(body, separators=(",", ":"))


def test_plain_rows_are_read_as_label_values_and_value_text() -> None:
    text = answer(({"node": "n1", "gpu": "0"}, "38"), ({"node": "n-2", "gpu": "7"}, "NaN"))
    assert decode_values(text, ("gpu", "node")) == [("0", "n1", "38"), ("7", "n-2", "NaN")]
    assert decode_values(answer(), ("gpu", "node")) == []
    ports = answer(({"node": "n1", "device": "mlx5_0", "port": "1"}, "4"))
    assert decode_values(ports, ("device", "node", "port")) == [("mlx5_0", "n1", "1", "4")]


def test_any_other_shape_is_left_to_the_json_parser() -> None:
    escaped = answer(({"node": 'n"1', "gpu": "0"}, "38"), ({"node": "n2", "gpu": "1"}, "1"))
    assert decode_values(escaped, ("gpu", "node")) is None
    extra = answer(({"node": "n1", "gpu": "0", "job": "x"}, "38"))
    assert decode_values(extra, ("gpu", "node")) is None
    error = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"})
    assert decode_values(error, ("gpu", "node")) is None
    spaced = json.dumps(json.loads(answer(({"node": "n1", "gpu": "0"}, "38"))))
    assert decode_values(spaced, ("gpu", "node")) is None  # another server's formatting


def _fleet(nodes: int) -> list[tuple[dict[str, str], str]]:
    """Rows of every GPU of ``nodes`` nodes, some labels as awkward as JSON allows."""
    odd = ('quote "q"', '{"metric":{"x":"y"},"value":[1,"2"]}', "back\\slash", "ünï ☃", "]}],")
    return [
        ({"node": f"n{n}", "gpu": str(g), "model": odd[(n + g) % len(odd)]}, str(n * 8 + g))
        for n in range(nodes)
        for g in range(8)
    ]


@pytest.mark.parametrize("slice_chars", [64, 1000, 1 << 17])
def test_large_answers_read_in_slices_give_every_row_as_parsed_whole(
    monkeypatch: pytest.MonkeyPatch, slice_chars: int
) -> None:
    """A large answer is parsed (and matched) a slice of rows at a time, so that no one C
    call holds the GIL for long: the rows are those of parsing it whole, in order, for
    any slice size, with label values that look like rows, and around the rows
    whatever a server adds (VictoriaMetrics' isPartial and stats, warnings)."""
    monkeypatch.setattr(prometheus, "SLICE_CHARS", slice_chars)
    rows = _fleet(600)
    text = answer(*rows)
    assert len(text) > 2 * slice_chars
    content = text.encode()
    whole = orjson.loads(content)["data"]["result"]
    parsed: list[int] = []  # the size of each parse
    loads = orjson.loads

    def counted(data: bytes) -> object:
        parsed.append(len(data))
        return loads(data)

    monkeypatch.setattr(prometheus.orjson, "loads", counted)
    assert decode_rows(content) == whole and len(whole) == 4800
    longest_row = max(len(json.dumps(r, separators=(",", ":")).encode()) for r in whole)
    assert len(parsed) > 1 and max(parsed) <= slice_chars + longest_row + 2, parsed[:5]
    monkeypatch.setattr(prometheus.orjson, "loads", loads)
    doc = json.loads(text)
    vm = {"status": "success", "isPartial": False, "data": doc["data"], "stats": {"n": "1"}}
    warned = {**doc, "warnings": ['{"metric":{"a":"b"},"value":[1,"2"]}]}']}
    for shape in (vm, warned):
        body = json.dumps(shape, separators=(",", ":")).encode()
        assert decode_rows(body) == whole
    plain = answer(*[({"node": m["node"], "gpu": m["gpu"]}, v) for m, v in rows])
    expected = [(m["gpu"], m["node"], v) for m, v in sorted(rows, key=lambda r: r[0]["gpu"])]
    got = decode_values(plain, ("gpu", "node"))
    assert got is not None and sorted(got) == sorted(expected)
    assert got == [(r["metric"]["gpu"], r["metric"]["node"], r["value"][1])
                   for r in json.loads(plain)["data"]["result"]]  # fmt: skip


def test_answers_the_slices_do_not_fit_are_parsed_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus, "SLICE_CHARS", 64)
    spaced = json.dumps(json.loads(answer(*_fleet(20)))).encode()  # another server's spacing
    assert decode_rows(spaced) == json.loads(spaced)["data"]["result"]
    empty = answer().encode()
    assert decode_rows(empty) == []
    error = json.dumps({"status": "error", "errorType": "bad_data", "error": "x" * 500})
    with pytest.raises(KeyError):
        decode_rows(error.encode())


def test_only_one_value_per_gpu_or_port_of_our_exporter_takes_the_plain_path() -> None:
    only_ours = FAMILY_BY_KEY["temperature"]
    ours = type(only_ours)(only_ours.key, only_ours.spellings[:1])
    assert value_labels(ours) == ("gpu", "node")
    assert value_labels(only_ours) is None  # three spellings: rows carry which one
    assert value_labels(FAMILY_BY_KEY["ib_state"]) is None
    ib_ours = type(ours)("ib_state", FAMILY_BY_KEY["ib_state"].spellings[:1], ("device", "port"))
    assert value_labels(ib_ours) == ("device", "node", "port")
    for key in ("gpu_info", "clock_events", "xid_rate", "fresh", "clock_events_known"):
        assert value_labels(FAMILY_BY_KEY[key]) is None, key


def test_a_fault_rate_proven_zero_is_filled_in_only_where_every_gpu_is_there() -> None:
    """A node whose summaries prove its NVLink fault rate 0 is not asked for it: each of
    its GPUs reads 0, unless the read found another number of GPUs than the summary
    counted (one come or gone since): then the reading is unknown, not 0."""
    from krea_ops.telemetry.assemble import Assembler

    asm = Assembler(window_s=300.0, collected_at=1000.0, stale_s=60.0, nodes=None)
    fresh = FAMILY_BY_KEY["fresh"]
    info = FAMILY_BY_KEY["gpu_info"]
    fault = FAMILY_BY_KEY["nvlink_fault_rate"]
    ours_fresh = type(fresh)(fresh.key, fresh.spellings[:1], fresh.by, fresh.kind)
    asm.add(ours_fresh, [({"node": n}, 995.0) for n in ("n1", "n2")])
    asm.add(
        type(info)(info.key, info.spellings[:1], info.by),
        [
            ({"node": n, "gpu": str(g), "uuid": f"GPU-{n}-{g}"}, 1.0)
            for n in ("n1", "n2")
            for g in (0, 1)
        ],
    )
    asm.fill(fault, {"n1": (2, 0.0), "n2": (3, 0.0)})
    nodes = asm.build("test").nodes
    assert [g.nvlink_fault_increase for g in nodes["n1"].gpus] == [0.0, 0.0]
    assert [g.nvlink_fault_increase for g in nodes["n2"].gpus] == [None, None]
    # after a failed read of it, nothing is filled in
    asm = Assembler(window_s=300.0, collected_at=1000.0, stale_s=60.0, nodes=None)
    asm.failed.add(fault.store)
    asm.fill(fault, {"n1": (2, 0.0)})
    assert fault.store not in asm.read


def test_the_fast_gpu_sample_is_the_dataclass() -> None:
    """``gpu_sample`` (the assembler's constructor at fleet scale) gives the object
    ``GpuSample(**values)`` gives, ``__post_init__`` included, and refuses what the
    dataclass refuses."""
    from types import MappingProxyType

    import pytest

    from krea_ops.model import GpuSample, gpu_sample

    cases: list[dict[str, object]] = [
        {"node": "n", "index": 0},
        {"node": "n", "index": 3, "temperature_c": 81.0, "up": True, "sampled_at": 5.0},
        {"node": "n", "index": 1, "nvlink_error_increase": MappingProxyType({"crc_flit": 2.0})},
        {"node": "n", "index": 1, "nvlink_fault_increase": 0.0, "clock_events": frozenset()},
    ]
    for values in cases:
        fast, slow = gpu_sample(values), GpuSample(**values)  # type: ignore[arg-type]
        assert fast == slow and vars(fast) == vars(slow)
    assert gpu_sample(cases[2]).nvlink_fault_increase == 2.0
    with pytest.raises(TypeError):
        gpu_sample({"node": "n", "index": 0, "temprature_c": 80.0})
    with pytest.raises(TypeError):
        gpu_sample({"node": "n"})
    with pytest.raises(AttributeError):  # still frozen
        gpu_sample(cases[0]).temperature_c = 1.0  # type: ignore[misc]
