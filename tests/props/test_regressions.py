"""Each input the property tests of this directory found failing, as a plain test."""

from __future__ import annotations

import pytest

from krea_ops.kube.quantity import QuantityError, format_quantity, number, parse_quantity
from krea_ops.kube.times import parse_time


@pytest.mark.parametrize("text", ["1e99999999", "1e" + "9" * 5000, "2E-99999999"])
def test_an_exponent_out_of_range_is_not_a_quantity(text: str) -> None:
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity(text)
    assert number(text) is None


def test_non_finite_floats_are_not_quantities() -> None:
    for value in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(QuantityError):
            parse_quantity(value)
        with pytest.raises(QuantityError):
            format_quantity(value)
        assert number(value) is None


def test_false_is_not_the_quantity_zero_even_after_zero() -> None:
    assert parse_quantity(0) == 0
    with pytest.raises(QuantityError):
        parse_quantity(False)


def test_unicode_digits_are_not_a_quantity() -> None:
    with pytest.raises(QuantityError):
        parse_quantity("٣")


def test_a_timestamp_field_holding_a_list_is_no_time() -> None:
    assert parse_time(["2026-11-29T21:00:00Z"]) is None  # type: ignore[arg-type]
