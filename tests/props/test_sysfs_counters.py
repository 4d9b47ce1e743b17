"""InfiniBand sysfs files (krea_ops/exporters/infiniband.py): whatever text a counter,
state, rate or lifespan file holds, a scrape answers. A counter's series is its decimal
value (times its multiplier) or absent; garbage costs only that file's series and counts
in ``krea_ib_read_errors_total``; every exported value is finite and never negative."""

from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from krea_ops.exporters.infiniband import InfinibandCollector

ERRORS = "krea_ib_read_errors_total"
# counter file -> (sample name, multiplier)
COUNTERS = {
    "counters/symbol_error": ("krea_ib_symbol_error_total", 1),
    "counters/port_xmit_wait": ("krea_ib_port_transmit_wait_total", 1),
    "counters/port_rcv_data": ("krea_ib_port_data_received_bytes_total", 4),
}
DECIMAL = re.compile(rb"\s*[0-9]{1,19}\s*")

counter_text = st.one_of(
    st.integers(min_value=0, max_value=2**64 - 1).map(lambda n: f"{n}\n".encode()),
    st.integers(min_value=-(2**70), max_value=-1).map(lambda n: f"{n}\n".encode()),
    st.sampled_from(
        [b"N/A (no PMA)\n", b"", b"\n", b"nan\n", b"inf\n", b"1.5\n", b"0x10\n", b"9" * 80]
    ),
    st.floats().map(lambda f: f"{f}\n".encode()),
    st.text(max_size=20).map(lambda t: t.encode()),
    st.binary(max_size=70),
)
state_text = st.one_of(
    st.sampled_from([b"4: ACTIVE\n", b"1: DOWN\n", b"N/A\n", b"-1: X\n", b"ACTIVE\n", b""]),
    st.builds(
        lambda n, t: f"{n}: {t}\n".encode(), st.integers(-(2**70), 2**70), st.text(max_size=8)
    ),
    st.binary(max_size=40),
)
rate_text = st.one_of(
    st.sampled_from([b"100 Gb/sec (4X EDR)\n", b"N/A\n", b"nan Gb/sec\n", b"-5 Gb/sec\n", b""]),
    st.builds(lambda f: f"{f} Gb/sec (4X HDR)\n".encode(), st.floats()),
    st.binary(max_size=40),
)


def _tree(root: Path, files: dict[str, bytes]) -> None:
    port = root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    for sub in ("counters", "hw_counters"):
        (port / sub).mkdir(parents=True)
    (port / "link_layer").write_bytes(b"InfiniBand\n")
    for rel, content in files.items():
        (port / rel).write_bytes(content)


def _scrape(collector: InfinibandCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()  # what a scraper reads must parse
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def _value(samples: dict, name: str, **labels: str) -> float | None:  # type: ignore[type-arg]
    hits = [
        v
        for (n, ls), v in samples.items()
        if n == name and all(dict(ls).get(k) == x for k, x in labels.items())
    ]
    assert len(hits) <= 1
    return hits[0] if hits else None


def _check(samples: dict, files: dict[str, bytes], errors_before: dict[str, float]) -> None:  # type: ignore[type-arg]
    for (name, _labels), value in samples.items():
        assert math.isfinite(value) and value >= 0, (name, value)
    for rel, (name, mult) in COUNTERS.items():
        content = files[rel]
        got = _value(samples, name)
        errkey = f"mlx5_0/ports/1/{rel}"
        errors = _value(samples, ERRORS, file=errkey) or 0
        if DECIMAL.fullmatch(content):
            assert got == float(int(content) * mult), (rel, content, got)
            assert errors == errors_before.get(errkey, 0)
        elif not re.search(rb"[0-9]", content):
            assert got is None, (rel, content, got)
            if b"N/A" not in content:
                assert errors == errors_before.get(errkey, 0) + 1, (rel, content)


files_strategy = st.fixed_dictionaries(
    {
        **{rel: counter_text for rel in COUNTERS},
        "hw_counters/lifespan": counter_text,
        "hw_counters/rx_write_requests": counter_text,
        "state": state_text,
        "phys_state": state_text,
        "rate": rate_text,
    }
)


@given(files_strategy, files_strategy)
@example(
    {
        **dict.fromkeys(COUNTERS, b"1\n"),
        "hw_counters/lifespan": b"10\n",
        "hw_counters/rx_write_requests": b"0\n",
        "state": b"4: ACTIVE\n",
        "phys_state": b"5: LinkUp\n",
        "rate": b"1e308 Gb/sec\n",
    },
    {
        **dict.fromkeys(COUNTERS, b"2\n"),
        "hw_counters/lifespan": b"10\n",
        "hw_counters/rx_write_requests": b"0\n",
        "state": b"4: ACTIVE\n",
        "phys_state": b"5: LinkUp\n",
        "rate": b"100 Gb/sec\n",
    },
)
def test_any_sysfs_text_scrapes(first: dict[str, bytes], second: dict[str, bytes]) -> None:
    """Two scrapes: the second after every file is rewritten in place (cached
    descriptors, the unchanged-file shortcut)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _tree(root, first)
        collector = InfinibandCollector(root, "n1", rediscover_s=3600)
        try:
            samples = _scrape(collector)
            _check(samples, first, {})
            before = {dict(ls)["file"]: v for (n, ls), v in samples.items() if n == ERRORS}
            port = root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
            for rel, content in second.items():
                with open(port / rel, "r+b") as fh:
                    fh.truncate(0)
                    fh.write(content)
            _check(_scrape(collector), second, before)
        finally:
            collector.close()
