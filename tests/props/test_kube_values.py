"""Kubernetes quantities and timestamps (krea_ops/kube/quantity.py, times.py): every
object the console reads goes through these two, so any text or JSON value gives a value
or None (``QuantityError`` from the strict parser), and both round-trip."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import Decimal

from hypothesis import example, given
from hypothesis import strategies as st

from krea_ops.kube.quantity import (
    QuantityError,
    as_float,
    as_int,
    format_quantity,
    number,
    parse_quantity,
    quantity_or_none,
)
from krea_ops.kube.times import micro_time, parse_time, rfc3339

# JSON values an API object's field can hold, wrong types included.
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)

# Quantity-shaped text: a number, then any suffix, exponents huge and tiny included.
quantity_like = st.builds(
    lambda sign, digits, frac, suffix: f"{sign}{digits}{frac}{suffix}",
    st.sampled_from(["", "+", "-"]),
    st.from_regex(r"\d{1,30}", fullmatch=True),
    st.sampled_from(["", ".", ".5", ".000000001"]),
    st.one_of(
        st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ei"]),
        st.integers(min_value=-(10**12), max_value=10**12).map(lambda e: f"e{e}"),
        st.from_regex(r"E[+-]?\d{1,6000}", fullmatch=True),
    ),
)


@given(st.one_of(quantity_like, st.text(max_size=60), json_scalars))
@example("1e99999999")  # beyond Decimal's exponent range
@example("1e" + "9" * 5000)  # beyond int()'s digit limit
@example(float("inf"))
@example(float("nan"))
@example(True)
def test_a_quantity_is_a_value_or_quantity_error(value: object) -> None:
    try:
        parsed = parse_quantity(value)  # type: ignore[arg-type]
    except QuantityError as exc:
        assert "\n" not in str(exc)
        assert quantity_or_none(value) is None
        assert number(value) is None and as_int(value) is None
        return
    assert isinstance(parsed, Decimal)
    assert parsed.is_finite(), f"{value!r} parsed as {parsed}"
    num = number(value)
    assert num is not None
    assert isinstance(as_float(value), float)
    if isinstance(num, int):
        assert as_int(value) == num
    else:
        assert as_int(value) is None


@given(json_values)
def test_readers_never_fail_on_one_bad_field(value: object) -> None:
    for read in (quantity_or_none, number, as_int):
        result = read(value)
        assert result is None or isinstance(result, int | float | Decimal)
        if isinstance(result, float | Decimal):
            assert math.isfinite(result)
    assert math.isfinite(as_float(value, default=0.0))


@given(st.integers(min_value=-(10**15), max_value=10**15), st.integers(min_value=0, max_value=3))
def test_format_parse_round_trip(units: int, milli_digits: int) -> None:
    """Whole numbers and milli-units (what the API itself writes) survive the round trip."""
    value = Decimal(units).scaleb(-milli_digits)
    text = format_quantity(value)
    assert parse_quantity(text) == value
    assert format_quantity(parse_quantity(text)) == text


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_format_quantity_of_any_float(value: float) -> None:
    """A quantity is finite: formatting a non-finite float is a ``QuantityError``, not an
    OverflowError from deep inside."""
    try:
        text = format_quantity(value)
    except QuantityError:
        assert not math.isfinite(value)
        return
    assert parse_quantity(text) is not None


timestamps = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


@given(timestamps)
def test_rfc3339_round_trips(stamp: datetime) -> None:
    unix = stamp.timestamp()
    assert parse_time(rfc3339(unix)) == math.floor(unix)
    micro = parse_time(micro_time(unix))
    assert micro is not None and abs(micro - unix) < 1e-5


@given(st.one_of(json_values, st.text(max_size=40), st.from_regex(r"\d{4}-\d\d-\d\d[Tt ].{0,30}")))
@example("0001-01-01T00:00:00+01:00")  # before year 1 in UTC
@example("9999-12-31T23:59:59-01:00")  # after year 9999 in UTC
@example(["2026-11-29T21:00:00Z"])  # a list where a string belongs (unhashable)
@example({"time": "2026-11-29T21:00:00Z"})
def test_a_timestamp_is_seconds_or_none(value: object) -> None:
    result = parse_time(value)  # type: ignore[arg-type]
    assert result is None or (isinstance(result, float) and math.isfinite(result))
