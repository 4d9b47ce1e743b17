"""Quantity and timestamp parsing: the one parser the product and the simulator share."""

from __future__ import annotations

from decimal import Decimal

import pytest

from krea_ops.kube.quantity import (
    QuantityError,
    as_float,
    as_int,
    format_quantity,
    number,
    parse_quantity,
)
from krea_ops.kube.times import micro_time, parse_time, rfc3339


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", Decimal(8)),
        ("500m", Decimal("0.5")),
        ("36Gi", Decimal(36 * 2**30)),
        ("1.5Ki", Decimal(1536)),
        ("2k", Decimal(2000)),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        ("+4", Decimal(4)),
        ("-2M", Decimal(-2_000_000)),
        (".5", Decimal("0.5")),
        ("100n", Decimal("1e-7")),
        (8, Decimal(8)),
    ],
)
def test_quantities_parse_to_their_exact_value(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "8 Gi", "8gi", "eight", "1.2.3", "8Kii", "0x10"])
def test_non_quantities_are_refused_with_the_text(text: str) -> None:
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(text)


def test_readers_get_none_or_a_default_for_bad_values_instead_of_failing() -> None:
    assert number("48") == 48 and isinstance(number("48"), int)
    assert number("500m") == 0.5
    assert number(None) is None and number("garbage") is None and number(True) is None
    assert as_int("8") == 8 and as_int("500m") is None and as_int(None) is None
    assert as_float("2Ki") == 2048.0 and as_float("x", 1.5) == 1.5


def test_format_writes_whole_numbers_plain_and_fractions_in_milli_units() -> None:
    assert format_quantity(Decimal(8)) == "8"
    assert format_quantity(Decimal("0.25")) == "250m"
    assert format_quantity(3) == "3"


def test_timestamps_round_trip_and_accept_what_rfc3339_allows() -> None:
    t = 1_795_000_000.0
    assert parse_time(rfc3339(t)) == t
    assert parse_time(micro_time(t + 0.25)) == t + 0.25
    assert parse_time("2026-11-29T21:00:00+02:00") == parse_time("2026-11-29T19:00:00Z")
    assert parse_time("2026-11-29T21:00:00.123456789Z") == pytest.approx(
        parse_time("2026-11-29T21:00:00Z") + 0.123456  # type: ignore[operator]
    )


@pytest.mark.parametrize(
    "text", [None, "", "2026-11-29", "2026-11-29 21:00:00Z", "20261129T210000Z", "yesterday",
             "2026-11-29T21:00:00", "2026-13-29T21:00:00Z"],
)  # fmt: skip
def test_what_is_not_rfc3339_reads_as_unknown(text: str | None) -> None:
    assert parse_time(text) is None
