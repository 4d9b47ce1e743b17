"""Kubernetes resource quantities (``resource.Quantity``): ``8``, ``500m``, ``36Gi``, ``1e3``.

One parser for the product and the simulator. The grammar is the API's
(``k8s.io/apimachinery/pkg/api/resource``)::

    <quantity> ::= <signedNumber><suffix>
    <suffix>   ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI> ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI> ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>

Values are exact (``Decimal``, 28 significant digits: the API caps a quantity at
2^63-1 with three decimals, well inside); ``number`` gives an int when the value is whole, so a GPU
count prints as ``8``, not ``8.0``. The official client's ``kubernetes.utils.parse_quantity``
does the same, but importing ``kubernetes.utils`` imports the whole generated client
(about a second), more than most reads take.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))"  # the signed number
    r"(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[numkMGTPE]?)$",  # the suffix
    re.ASCII,  # "٣" is a digit to Python's \d, not to the API
)


class QuantityError(ValueError):
    """Not a Kubernetes quantity; ``str()`` says which text."""


# a fleet's objects share a handful of quantities; typed, as False == 0 is a cache hit
@functools.lru_cache(maxsize=4096, typed=True)
def parse_quantity(value: str | int | float) -> Decimal:
    """The exact value of a quantity; ``QuantityError`` when it is not one: not the
    grammar, not finite (``nan``, ``inf``), or an exponent beyond what a ``Decimal`` holds
    (``1e99999999``)."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a quantity (not finite)")
        return Decimal(str(value))
    text = str(value).strip()
    m = _QUANTITY.match(text)
    if m is None:
        raise QuantityError(f"{value!r} is not a quantity (e.g. 8, 500m, 36Gi)")
    number, suffix = m.group(1), m.group(2)
    try:
        base = Decimal(number)
    except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
        raise QuantityError(f"{value!r} is not a quantity") from None
    try:
        if suffix in _BINARY:
            return base * _BINARY[suffix]
        if suffix[:1] in ("e", "E"):
            return base.scaleb(int(suffix[1:]))
    except (ArithmeticError, ValueError):  # decimal.Overflow; int() past 4,300 digits
        raise QuantityError(f"{_short(text)} is out of range for a quantity") from None
    return base * _DECIMAL[suffix]


def _short(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def quantity_or_none(value: object) -> Decimal | None:
    """The value, or None when it is absent or not a quantity (readers never fail on one
    bad field)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return parse_quantity(value if isinstance(value, int | float) else str(value))
    except QuantityError:
        return None


def number(value: object) -> int | float | None:
    """A quantity as a plain number: an int when it is whole, else a float; None when
    absent or unparsable."""
    q = quantity_or_none(value)
    if q is None:
        return None
    if q == q.to_integral_value():
        return int(q)
    return float(q)


def as_float(value: object, default: float = 0.0) -> float:
    """A quantity as a float, ``default`` when absent or unparsable (simulator arithmetic
    on requests and capacity)."""
    q = quantity_or_none(value)
    return default if q is None else float(q)


def as_int(value: object) -> int | None:
    """A whole quantity (a GPU count) as an int; None when absent, unparsable or not
    whole."""
    q = quantity_or_none(value)
    if q is None or q != q.to_integral_value():
        return None
    return int(q)


def format_quantity(value: Decimal | int | float) -> str:
    """A value as the API writes it in canonical form for the common cases: whole numbers
    plain (``8``), fractions in milli-units (``500m``); ``QuantityError`` for ``nan``/``inf``."""
    d = value if isinstance(value, Decimal) else Decimal(str(value))
    if not d.is_finite():
        raise QuantityError(f"{value!r} is not a quantity (not finite)")
    if d == d.to_integral_value():
        return str(int(d))
    milli = (d * 1000).to_integral_value()
    return f"{int(milli)}m"
