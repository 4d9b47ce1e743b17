"""Custom-resource validation, defaulting and pruning, worded as the real API server words it.

This is the apiextensions-apiserver's handling of a custom resource, rebuilt for the
simulator (target: Kubernetes 1.32):

* ``validate_against_schema`` walks an ``openAPIV3Schema`` the way kube-openapi's
  ``SchemaValidator`` does (type, schemaProps, string, format, number, slice, enum, object,
  in that order, with the same paths such as ``spec.resourceGroups[0].flavors[1].name``) and
  converts each failure the way ``kubeOpenAPIResultToFieldErrors`` does, then adds the
  ``x-kubernetes-list-type`` set/map uniqueness checks (``FieldValueDuplicate``);
* ``apply_defaults`` is structural defaulting followed by
  ``PruneNonNullableNullsWithoutDefaults``;
* ``prune`` drops fields the schema does not declare (keeping ``apiVersion``/``kind``/
  ``metadata`` of the resource root and of embedded resources, and everything under
  ``x-kubernetes-preserve-unknown-fields``);
* ``evaluate_cel_rules`` evaluates ``x-kubernetes-validations`` with the pure-Python CEL
  implementation from the ``cel-python`` distribution (module ``celpy``).  That module is
  optional: without it CEL rules are skipped and ``CEL_AVAILABLE`` is False.  A rule that
  does not compile is skipped and recorded in ``SKIPPED_CEL_RULES``.  Transition rules
  (those that use ``oldSelf``) run only on update, for values that correlate with the old
  object (object properties, list-type map items by key, list-type set items by value).
  Not implemented: validation ratcheting of unchanged values, the Kubernetes CEL extension
  libraries (quantity(), url(), ip(), the strings/lists extensions beyond what celpy has)
  and CEL cost limits; none of the bundled Kueue/JobSet rules need them;
* ``validate_custom_resource`` chains schema, list-type and CEL validation with the real
  server's short-circuit (no CEL after a type/required/enum/length/count error);
* ``validate_name`` / ``validate_object_meta`` are apimachinery's name, label, annotation
  and finalizer checks.

Messages follow apimachinery ``field.Error.ErrorBody`` as of 1.32: Go ``%q`` for strings,
``%v`` for numbers and booleans and ``%#v`` for composite values (so a duplicate list-map
key reads ``Duplicate value: map[string]interface {}{"name":"a"}``), and the 1.32 wording
``Too long: may not be more than N bytes``.
"""

from __future__ import annotations

import base64
import copy
import datetime as _dt
import ipaddress
import re
import threading
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources
from typing import Any

import yaml

__all__ = [
    "CEL_AVAILABLE",
    "SKIPPED_CEL_RULES",
    "CrdVersion",
    "FieldError",
    "apply_defaults",
    "bundled_crds",
    "evaluate_cel_rules",
    "load_crd_versions",
    "prune",
    "prune_with_report",
    "validate_against_schema",
    "validate_custom_resource",
    "validate_name",
    "validate_object_meta",
]


# --------------------------------------------------------------------------- field errors


@dataclass(frozen=True)
class FieldError:
    """One ``StatusCause``: reason (``FieldValue…``), field path and ``ErrorBody`` message."""

    type: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


_TYPE_WORDS = {
    "FieldValueNotFound": "Not found",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "InternalError": "Internal error",
    "FieldValueTypeInvalid": "Invalid value",
}
_NO_VALUE_TYPES = {
    "FieldValueRequired",
    "FieldValueForbidden",
    "FieldValueTooLong",
    "InternalError",
}
_OMIT = object()  # apimachinery's omitValue


def go_quote(s: str) -> str:
    """Go's ``strconv.Quote``."""
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def go_float(f: float) -> str:
    """Go's ``%v`` of a float64 (``strconv.FormatFloat(f, 'g', -1, 64)``)."""
    if f != f:
        return "NaN"
    if f in (float("inf"), float("-inf")):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "-0" if str(f).startswith("-") else "0"
    sign, digit_tuple, exp = Decimal(repr(float(f))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    exp = int(exp) + (len(digit_tuple) - len(digits))
    nd = len(digits)
    dp = nd + exp  # position of the decimal point
    x = dp - 1
    neg = "-" if sign else ""
    if x < -4 or x >= 6:  # shortest formatting: %e when exp < -4 || exp >= eprec (6)
        mant = digits[0] + ("." + digits[1:] if nd > 1 else "")
        return f"{neg}{mant}e{'+' if x >= 0 else '-'}{abs(x):02d}"
    if dp <= 0:
        return f"{neg}0.{'0' * -dp}{digits}"
    if dp >= nd:
        return f"{neg}{digits}{'0' * (dp - nd)}"
    return f"{neg}{digits[:dp]}.{digits[dp:]}"


def _go_v(value: Any) -> str:
    """``%v`` of a simple value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    return str(value)


def go_sharp_v(value: Any, top: bool = True) -> str:
    """Go's ``%#v`` of an unstructured JSON value held in an ``interface{}``."""
    if value is None:
        return "interface {}(nil)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, dict):
        items = ", ".join(
            f"{go_quote(str(k))}:{go_sharp_v(v, False)}" for k, v in sorted(value.items())
        )
        return "map[string]interface {}{" + items + "}"
    if isinstance(value, (list, tuple)):
        return "[]interface {}{" + ", ".join(go_sharp_v(v, False) for v in value) + "}"
    return repr(value)


def error_body(type_: str, value: Any = "", detail: str = "") -> str:
    """apimachinery ``field.Error.ErrorBody`` (1.32)."""
    word = _TYPE_WORDS.get(type_, f"<unknown error {go_quote(type_)}>")
    if type_ in _NO_VALUE_TYPES or value is _OMIT:
        s = word
    elif value is None:
        s = f"{word}: {go_quote('null')}"
    elif isinstance(value, str):
        s = f"{word}: {go_quote(value)}"
    elif isinstance(value, (bool, int, float)):
        s = f"{word}: {_go_v(value)}"
    else:
        s = f"{word}: {go_sharp_v(value)}"
    if detail:
        s += f": {detail}"
    return s


def _err(type_: str, path: str, value: Any = "", detail: str = "") -> FieldError:
    return FieldError(type_, path or "<nil>", error_body(type_, value, detail))


def _required(path: str, detail: str = "") -> FieldError:
    return _err("FieldValueRequired", path, "", detail)


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    return _err("FieldValueInvalid", path, value, detail)


def _forbidden(path: str, detail: str) -> FieldError:
    return _err("FieldValueForbidden", path, "", detail)


def _too_long(path: str, max_len: int) -> FieldError:
    if max_len >= 0:
        detail = f"may not be more than {max_len} {'byte' if max_len == 1 else 'bytes'}"
    else:
        detail = "value is too long"
    return _err("FieldValueTooLong", path, "", detail)


def _too_many(path: str, actual: int, max_items: int) -> FieldError:
    if max_items >= 0:
        detail = f"must have at most {max_items} {'item' if max_items == 1 else 'items'}"
    else:
        detail = "has too many items"
    return _err("FieldValueTooMany", path, actual if actual >= 0 else _OMIT, detail)


def _not_supported(path: str, value: Any, supported: list[str]) -> FieldError:
    detail = ""
    if supported:
        detail = "supported values: " + ", ".join(go_quote(v) for v in supported)
    return _err("FieldValueNotSupported", path, value, detail)


# --------------------------------------------------------------------------- JSON helpers

_NUMERIC = (int, float)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _go_format_of(value: Any) -> str:
    """The format kube-openapi infers from a decoded JSON value (``schemaInfoForType``)."""
    if isinstance(value, bool):
        return ""
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    return ""


def _is_number(value: Any) -> bool:
    return isinstance(value, _NUMERIC) and not isinstance(value, bool)


def _json_equal(a: Any, b: Any) -> bool:
    """Equality of decoded JSON values, keeping booleans apart from numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _go_key(value: Any) -> Any:
    """A hashable key that compares the way Go compares interface{} scalars / JSON text."""
    if isinstance(value, (dict, list, tuple)):
        import json

        return ("json", json.dumps(value, sort_keys=True, separators=(",", ":")))
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value)
    return (type(value).__name__, value)


def _schema_types(schema: dict[str, Any]) -> list[str]:
    if schema.get("x-kubernetes-int-or-string"):
        return ["integer", "string"]
    t = schema.get("type")
    if not t:
        return []
    return [t] if isinstance(t, str) else list(t)


# --------------------------------------------------------------------------- formats

_DATE_TIME_RE = re.compile(r"^(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(z|[+-]\d{2}:\d{2})$")
_UUID_RES = {
    "uuid": re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"),
    "uuid3": re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$"),
    "uuid4": re.compile(
        r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$"
    ),
    "uuid5": re.compile(
        r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$"
    ),
}
# strfmt's hostname rule, without its \p{L}/\p{S} (Unicode letters/symbols) classes
_HOSTNAME_RE = re.compile(
    r"^([a-zA-Z0-9]((-?[a-zA-Z0-9]{0,62})?)|"
    r"([a-zA-Z0-9](([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)(\.)){1,}([a-zA-Z]){2,63})$"
)
_MAC_RE = re.compile(
    r"^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})$|^([0-9A-Fa-f]{2}[:-]){7}([0-9A-Fa-f]{2})$|"
    r"^([0-9A-Fa-f]{4}\.){2}[0-9A-Fa-f]{4}$|^([0-9A-Fa-f]{4}\.){3}[0-9A-Fa-f]{4}$"
)
_DURATION_RE = re.compile(
    r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$|^0$|"
    r"^\d+\s*(ns|us|ms|s|m|h|d|w|nanoseconds?|microseconds?|milliseconds?|seconds?|minutes?|"
    r"hours?|days?|weeks?)$"
)


def _is_date(s: str) -> bool:
    try:
        _dt.datetime.strptime(s, "%Y-%m-%d")
    except ValueError:
        return False
    return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", s))


def _is_date_time(s: str) -> bool:
    if len(s) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _DATE_TIME_RE.match(parts[1])
    if m is None:
        return False
    return m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _is_byte(s: str) -> bool:
    try:
        base64.b64decode(s, validate=True)
    except ValueError:
        return False
    return True


def _is_ip(s: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(s).version == version
    except ValueError:
        return False


def _is_cidr(s: str) -> bool:
    try:
        ipaddress.ip_network(s, strict=False)
    except ValueError:
        return False
    return "/" in s


_FORMAT_CHECKS: dict[str, Any] = {
    "datetime": _is_date_time,
    "date": _is_date,
    "byte": _is_byte,
    "ipv4": lambda s: _is_ip(s, 4),
    "ipv6": lambda s: _is_ip(s, 6),
    "cidr": _is_cidr,
    "mac": lambda s: bool(_MAC_RE.match(s)),
    "hostname": lambda s: len(s) <= 255 and bool(_HOSTNAME_RE.match(s)),
    "uuid": lambda s: bool(_UUID_RES["uuid"].match(s)),
    "uuid3": lambda s: bool(_UUID_RES["uuid3"].match(s)),
    "uuid4": lambda s: bool(_UUID_RES["uuid4"].match(s)),
    "uuid5": lambda s: bool(_UUID_RES["uuid5"].match(s)),
    "bsonobjectid": lambda s: bool(re.fullmatch(r"[0-9a-fA-F]{24}", s)),
    "email": lambda s: bool(re.fullmatch(r"[^@\s]+@[^@\s]+", s)),
    "uri": lambda s: bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^/", s)),
    "duration": lambda s: bool(_DURATION_RE.match(s)),
    "password": lambda s: True,
    "hexcolor": lambda s: bool(re.fullmatch(r"#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})", s)),
    "rgbcolor": lambda s: bool(
        re.fullmatch(r"rgb\(\s*(\d{1,3})\s*,\s*(\d{1,3})\s*,\s*(\d{1,3})\s*\)", s)
    ),
    "ssn": lambda s: bool(re.fullmatch(r"\d{3}[- ]?\d{2}[- ]?\d{4}", s)),
    "isbn": lambda s: True,
    "isbn10": lambda s: True,
    "isbn13": lambda s: True,
    "creditcard": lambda s: True,
}


def _supported_format(fmt: str | None) -> str | None:
    """The registry name of a format the CRD validator keeps (others are stripped)."""
    if not fmt:
        return None
    key = fmt.replace("-", "").replace("_", "").lower()
    return key if key in _FORMAT_CHECKS else None


# --------------------------------------------------------------------------- regexes

_regex_cache: dict[str, re.Pattern[str] | None] = {}


def _go_regex_to_python(pattern: str) -> str:
    """RE2 to ``re``: ``$`` (outside a class) means end of text, as ``\\z`` does."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append(r"\Z" if nxt == "z" else ch + nxt)
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "]" or pattern[i + 1 : i + 3] == "^]":
                j = i + (3 if pattern[i + 1] == "^" else 2)
                out.append(pattern[i:j])
                i = j
                continue
        elif ch == "$":
            out.append(r"\Z")
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _compile_pattern(pattern: str) -> re.Pattern[str] | None:
    """Compile an ECMA/RE2 ``pattern`` for Python's ``re`` (None when it cannot)."""
    if pattern in _regex_cache:
        return _regex_cache[pattern]
    py = _go_regex_to_python(pattern)
    try:
        compiled: re.Pattern[str] | None = re.compile(py)
    except re.error:
        compiled = None
    _regex_cache[pattern] = compiled
    return compiled


# --------------------------------------------------------------------------- schema walk


# kube-openapi collects errors as (kind, go-openapi name, value, message, extra); they are
# turned into field errors by _convert, as kubeOpenAPIResultToFieldErrors does.
_Raw = tuple[str, str, Any, str, Any]


def _in_body(name: str) -> str:
    return f"{name} in body"


def _validate_node(data: Any, schema: Any, path: str, out: list[_Raw]) -> None:
    if not isinstance(schema, dict):
        return
    if data is None:
        _type_check(data, schema, path, out)
        _enum_check(data, schema, path, out)
        return
    _type_check(data, schema, path, out)
    _schema_props(data, schema, path, out)
    if isinstance(data, str):
        _string_check(data, schema, path, out)
        _format_check(data, schema, path, out)
    if _is_number(data):
        _number_check(data, schema, path, out)
    if isinstance(data, (list, tuple)):
        _slice_check(data, schema, path, out)
    _enum_check(data, schema, path, out)
    if isinstance(data, dict):
        _object_check(data, schema, path, out)


def _type_check(data: Any, schema: dict[str, Any], path: str, out: list[_Raw]) -> None:
    types = _schema_types(schema)
    fmt_name = schema.get("format") if _supported_format(schema.get("format")) else None
    if not types and not fmt_name:
        return
    if data is None:
        if types and "null" not in types and not schema.get("nullable"):
            out.append(
                (
                    "type",
                    path,
                    "null",
                    f'{_in_body(path)} must be of type {",".join(types)}: "null"',
                    None,
                )
            )
        return
    sch_type = _json_type(data)
    go_fmt = _go_format_of(data)
    is_float_int = sch_type == "number" and float(data).is_integer() and "integer" in types
    is_int_float = sch_type == "integer" and "number" in types
    if (
        not isinstance(data, (str, list, tuple))
        and fmt_name
        and not (sch_type in types or go_fmt == fmt_name or is_float_int or is_int_float)
    ):
        out.append(
            (
                "type",
                path,
                go_fmt,
                f"{_in_body(path)} must be of type {fmt_name}: {go_quote(go_fmt)}",
                None,
            )
        )
        return
    if (
        "number" not in types
        and "integer" not in types
        and fmt_name
        and isinstance(data, (str, list, tuple))
    ):
        return
    if not (sch_type in types or is_float_int or is_int_float):
        out.append(
            (
                "type",
                path,
                sch_type,
                f"{_in_body(path)} must be of type {','.join(types)}: {go_quote(sch_type)}",
                None,
            )
        )


def _schema_props(data: Any, schema: dict[str, Any], path: str, out: list[_Raw]) -> None:
    any_of = schema.get("anyOf")
    if any_of:
        best: list[_Raw] | None = None
        ok = False
        for sub in any_of:
            r: list[_Raw] = []
            _validate_node(data, sub, path, r)
            if not r:
                ok, best = True, None
                break
            if best is None or len(r) < len(best):
                best = r
        if not ok:
            out.append(
                (
                    "composite",
                    path,
                    "",
                    f"{go_quote(path)} must validate at least one schema (anyOf)",
                    None,
                )
            )
        if best:
            out.extend(best)
    one_of = schema.get("oneOf")
    if one_of:
        valid = 0
        best = None
        for sub in one_of:
            r = []
            _validate_node(data, sub, path, r)
            if not r:
                valid += 1
                best = None
                continue
            if valid == 0 and (best is None or len(r) < len(best)):
                best = r
        if valid != 1:
            extra = "Found none valid" if valid == 0 else f"Found {valid} valid alternatives"
            out.append(
                (
                    "composite",
                    path,
                    "",
                    f"{go_quote(path)} must validate one and only one schema (oneOf). {extra}",
                    None,
                )
            )
            if best:
                out.extend(best)
    all_of = schema.get("allOf")
    if all_of:
        valid = 0
        for sub in all_of:
            r = []
            _validate_node(data, sub, path, r)
            valid += not r
            out.extend(r)
        if valid != len(all_of):
            extra = ". None validated" if valid == 0 else ""
            out.append(
                (
                    "composite",
                    path,
                    "",
                    f"{go_quote(path)} must validate all the schemas (allOf){extra}",
                    None,
                )
            )
    not_schema = schema.get("not")
    if isinstance(not_schema, dict):
        r = []
        _validate_node(data, not_schema, path, r)
        if not r:
            out.append(
                (
                    "composite",
                    path,
                    "",
                    f"{go_quote(path)} must not validate the schema (not)",
                    None,
                )
            )


def _string_check(data: str, schema: dict[str, Any], path: str, out: list[_Raw]) -> None:
    # kube-openapi's stringValidator stops at the first failure: maxLength, minLength, pattern
    max_len = schema.get("maxLength")
    if max_len is not None and len(data) > max_len:
        out.append(
            (
                "tooLong",
                path,
                int(max_len),
                f"{_in_body(path)} should be at most {max_len} chars long",
                None,
            )
        )
        return
    min_len = schema.get("minLength")
    if min_len is not None and len(data) < min_len:
        out.append(
            (
                "invalid",
                path,
                data,
                f"{_in_body(path)} should be at least {min_len} chars long",
                None,
            )
        )
        return
    pattern = schema.get("pattern")
    if pattern:
        compiled = _compile_pattern(pattern)
        if compiled is not None and not compiled.search(data):
            out.append(("invalid", path, data, f"{_in_body(path)} should match '{pattern}'", None))


def _format_check(data: str, schema: dict[str, Any], path: str, out: list[_Raw]) -> None:
    key = _supported_format(schema.get("format"))
    if key is not None and not _FORMAT_CHECKS[key](data):
        out.append(
            (
                "type",
                path,
                data,
                f"{_in_body(path)} must be of type {schema['format']}: {go_quote(data)}",
                None,
            )
        )


def _number_check(data: float, schema: dict[str, Any], path: str, out: list[_Raw]) -> None:
    multiple = schema.get("multipleOf")
    if multiple is not None and multiple > 0:
        if isinstance(data, int):
            bad = data % int(multiple) != 0
            shown = str(int(multiple))
        else:
            q = (1 / multiple * data) if multiple < 1 else data / multiple
            bad = not float(q).is_integer()
            shown = go_float(float(multiple))
        if bad:
            out.append(
                ("invalid", path, data, f"{_in_body(path)} should be a multiple of {shown}", None)
            )
    for key, excl_key, inclusive_word, exclusive_word, below in (
        ("minimum", "exclusiveMinimum", "greater than or equal to", "greater than", True),
        ("maximum", "exclusiveMaximum", "less than or equal to", "less than", False),
    ):
        bound = schema.get(key)
        if bound is None:
            continue
        exclusive = bool(schema.get(excl_key))
        if isinstance(data, int):
            b: float = int(bound)
            shown = str(int(bound))
        else:
            b = float(bound)
            shown = go_float(float(bound))
        if below:
            failed = data <= b if exclusive else data < b
        else:
            failed = data >= b if exclusive else data > b
        if failed:
            word = exclusive_word if exclusive else inclusive_word
            out.append(("invalid", path, data, f"{_in_body(path)} should be {word} {shown}", None))


def _slice_check(
    data: list[Any] | tuple[Any, ...], schema: dict[str, Any], path: str, out: list[_Raw]
) -> None:
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(data):
            _validate_node(item, items, f"{path}[{i}]", out)
    elif isinstance(items, list):
        for i, sub in enumerate(items[: len(data)]):
            _validate_node(data[i], sub, f"{path}[{i}]", out)
    size = len(data)
    min_items = schema.get("minItems")
    if min_items is not None and size < min_items:
        out.append(
            (
                "invalid",
                path,
                size,
                f"{_in_body(path)} should have at least {min_items} items",
                None,
            )
        )
    max_items = schema.get("maxItems")
    if max_items is not None and size > max_items:
        out.append(
            (
                "tooMany",
                path,
                size,
                f"{_in_body(path)} should have at most {max_items} items",
                int(max_items),
            )
        )
    if schema.get("uniqueItems"):
        seen: list[Any] = []
        for item in data:
            if any(_json_equal(item, s) for s in seen):
                out.append(
                    ("invalid", path, "", f"{_in_body(path)} shouldn't contain duplicates", None)
                )
                break
            seen.append(item)


def _enum_check(data: Any, schema: dict[str, Any], path: str, out: list[_Raw]) -> None:
    enum = schema.get("enum")
    if not enum:
        return
    if data is not None and any(_json_equal(data, v) for v in enum):
        return
    out.append(("enum", path, data, f"{_in_body(path)} should be one of {enum}", list(enum)))


def _object_check(data: dict[str, Any], schema: dict[str, Any], path: str, out: list[_Raw]) -> None:
    n = len(data)
    min_props = schema.get("minProperties")
    if min_props is not None and n < min_props:
        out.append(
            (
                "invalid",
                path,
                n,
                f"{_in_body(path)} should have at least {min_props} properties",
                None,
            )
        )
        return
    max_props = schema.get("maxProperties")
    if max_props is not None and n > max_props:
        out.append(
            (
                "tooMany",
                path,
                n,
                f"{_in_body(path)} should have at most {max_props} properties",
                int(max_props),
            )
        )
        return
    props: dict[str, Any] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    if additional is False:
        for key in data:
            if key not in props:
                out.append(
                    ("invalid", path, key, f"{path}.{key} in body is a forbidden property", None)
                )
    elif isinstance(additional, dict):
        for key, value in data.items():
            if key not in props:
                _validate_node(value, additional, f"{path}.{key}", out)
    for name, sub in props.items():
        if name in data:
            _validate_node(data[name], sub, f"{path}.{name}" if path else name, out)
    for name in schema.get("required") or []:
        if name not in data:
            out.append(("required", f"{path}.{name}", "", "", None))


def _convert(raw: list[_Raw], root: str) -> list[FieldError]:
    """kube-openapi results to field errors, as ``kubeOpenAPIResultToFieldErrors`` does."""
    errors: list[FieldError] = []
    for kind, name, value, message, extra in raw:
        path = "" if name == "." else name.removeprefix(".")
        if kind == "required":
            errors.append(_required(path))
        elif kind == "enum":
            supported = [v if isinstance(v, str) else _json_marshal(v) for v in extra]
            errors.append(_not_supported(path, value, supported))
        elif kind == "tooLong":
            errors.append(_too_long(path, value))
        elif kind == "tooMany":
            errors.append(_too_many(path, value, extra))
        elif kind == "type":
            errors.append(_err("FieldValueTypeInvalid", path, value, message))
        elif kind == "composite":  # not a *Validation: reported at the root path
            errors.append(_invalid(root, "", message))
        else:
            errors.append(_invalid(path, value, message))
    return errors


def validate_against_schema(obj: Any, schema: dict[str, Any], root: str = "") -> list[FieldError]:
    """Validate ``obj`` against an ``openAPIV3Schema`` as the API server does.

    First the OpenAPI checks (kube-openapi semantics and messages), then the
    ``x-kubernetes-list-type`` set/map uniqueness checks and the apiVersion/kind presence of
    embedded resources.  ``root`` is the field path of ``obj`` inside its resource ("" for
    the resource itself); an error about the value at ``root`` itself, when ``root`` is "",
    carries the field ``<nil>`` as the real server's does.  Defaults should be applied (and
    unknown fields pruned) first.
    """
    raw: list[_Raw] = []
    _validate_node(obj, schema, root, raw)
    errors = _convert(raw, root)
    errors += _validate_list_types(obj, schema, root)
    errors += _validate_embedded(obj, schema, root, not root)
    return errors


def _json_marshal(value: Any) -> str:
    import json

    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------- field.Path


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _index(path: str, i: int) -> str:
    return f"{path}[{i}]"


def _key(path: str, key: str) -> str:
    return f"{path}[{key}]"


def _sub_schema(schema: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, bool]:
    """The schema of property ``key`` and whether it came from ``additionalProperties``."""
    props = schema.get("properties") or {}
    if key in props:
        return props[key], False
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        return additional, True
    return None, False


# --------------------------------------------------------------------------- list types


def _validate_list_types(obj: Any, schema: dict[str, Any], path: str) -> list[FieldError]:
    """``structurallisttype.ValidateListSetsAndMaps``."""
    errors: list[FieldError] = []
    _list_types_walk(obj, schema, path, errors)
    return errors


def _list_types_walk(obj: Any, schema: Any, path: str, errors: list[FieldError]) -> None:
    if not isinstance(schema, dict):
        return
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for k, v in obj.items():
                _list_types_walk(v, additional, _key(path, k), errors)
        for k, sub in props.items():
            if k in obj:
                _list_types_walk(obj[k], sub, _child(path, k), errors)
    elif isinstance(obj, list):
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            for i in _non_unique(obj):
                errors.append(_err("FieldValueDuplicate", _index(path, i), obj[i]))
        elif list_type == "map":
            errors.extend(_validate_list_map(path, schema, obj))
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(obj):
                _list_types_walk(item, items, _index(path, i), errors)


def _non_unique(values: list[Any]) -> list[int]:
    """Indices of the second appearance of each repeated value (``validateListSet``)."""
    if len(values) <= 1:
        return []
    seen: dict[Any, int] = {}
    out: list[int] = []
    for i, v in enumerate(values):
        k = _go_key(v)
        seen[k] = seen.get(k, 0) + 1
        if seen[k] == 2:
            out.append(i)
    return out


_UNSPECIFIED = ("<unspecified>", None)


def _validate_list_map(path: str, schema: dict[str, Any], obj: list[Any]) -> list[FieldError]:
    for i, x in enumerate(obj):
        if x is not None and not isinstance(x, dict):
            return [_invalid(_index(path, i), x, "must be an object for an array of list-type map")]
    if len(obj) <= 1:
        return []
    key_fields: list[str] = list(schema.get("x-kubernetes-list-map-keys") or [])
    errors: list[FieldError] = []
    if len(key_fields) == 1:
        kf = key_fields[0]
        keys = [_UNSPECIFIED if x is None or kf not in x else x[kf] for x in obj]
        for i in _non_unique(keys):
            value = {} if keys[i] == _UNSPECIFIED else {kf: keys[i]}
            errors.append(_err("FieldValueDuplicate", _index(path, i), value))
        return errors
    compound = [{k: x[k] for k in key_fields if x is not None and k in x} for x in obj]
    for i in _non_unique(compound):
        errors.append(_err("FieldValueDuplicate", _index(path, i), compound[i]))
    return errors


# --------------------------------------------------------------------------- embedded resources


def _validate_embedded(obj: Any, schema: Any, path: str, is_root: bool) -> list[FieldError]:
    """apiVersion/kind presence in ``x-kubernetes-embedded-resource`` objects."""
    errors: list[FieldError] = []
    if not isinstance(schema, dict):
        return errors
    if isinstance(obj, dict):
        if schema.get("x-kubernetes-embedded-resource") and not is_root:
            for k in ("apiVersion", "kind"):
                if k not in obj:
                    errors.append(_required(_child(path, k), "must not be empty"))
                elif not isinstance(obj[k], str):
                    errors.append(_invalid(_child(path, k), obj[k], "must be a string"))
        for k, v in obj.items():
            sub, from_additional = _sub_schema(schema, k)
            if sub is not None:
                where = _key(path, k) if from_additional else _child(path, k)
                errors.extend(_validate_embedded(v, sub, where, False))
    elif isinstance(obj, list):
        items = schema.get("items")
        for i, item in enumerate(obj):
            errors.extend(_validate_embedded(item, items, _index(path, i), False))
    return errors


# --------------------------------------------------------------------------- defaulting


def apply_defaults(obj: Any, schema: dict[str, Any]) -> Any:
    """Structural defaulting; returns a new object.

    Missing fields (and non-nullable ``null`` ones) get their schema ``default`` (itself
    defaulted further down), then ``null`` fields that are neither nullable nor defaulted are
    dropped, as the API server does before validation.
    """
    out = copy.deepcopy(obj)
    _default(out, schema)
    _prune_nulls(out, schema)
    return out


def _non_nullable_null(value: Any, schema: Any) -> bool:
    return value is None and isinstance(schema, dict) and not schema.get("nullable")


def _default(x: Any, schema: Any) -> None:
    if not isinstance(schema, dict):
        return
    if isinstance(x, dict):
        props: dict[str, Any] = schema.get("properties") or {}
        for k, prop in props.items():
            if not isinstance(prop, dict) or "default" not in prop or prop["default"] is None:
                continue
            if k not in x or _non_nullable_null(x[k], prop):
                x[k] = copy.deepcopy(prop["default"])
        additional = schema.get("additionalProperties")
        for k in list(x):
            if k in props:
                _default(x[k], props[k])
            elif isinstance(additional, dict):
                if _non_nullable_null(x[k], additional) and additional.get("default") is not None:
                    x[k] = copy.deepcopy(additional["default"])
                _default(x[k], additional)
    elif isinstance(x, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return
        for i, v in enumerate(x):
            if _non_nullable_null(v, items) and items.get("default") is not None:
                x[i] = copy.deepcopy(items["default"])
            _default(x[i], items)


def _prune_nulls(x: Any, schema: Any) -> None:
    """``PruneNonNullableNullsWithoutDefaults``."""
    if not isinstance(schema, dict):
        return
    if isinstance(x, dict):
        props: dict[str, Any] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for k in list(x):
            sub = props.get(k)
            if sub is None and isinstance(additional, dict):
                sub = additional
            if not isinstance(sub, dict):
                continue
            if x[k] is None and sub.get("default") is None and not sub.get("nullable"):
                del x[k]
            else:
                _prune_nulls(x[k], sub)
    elif isinstance(x, list):
        items = schema.get("items")
        for v in x:
            _prune_nulls(v, items)


# --------------------------------------------------------------------------- pruning

_META_FIELDS = ("apiVersion", "kind", "metadata")


def prune(obj: Any, schema: dict[str, Any], *, is_resource_root: bool = True) -> Any:
    """Drop the fields ``schema`` does not declare; returns a new object.

    Unknown fields survive under ``x-kubernetes-preserve-unknown-fields``; ``apiVersion``,
    ``kind`` and ``metadata`` of the resource root and of embedded resources are kept as they
    are (the server coerces ``metadata`` separately).
    """
    return prune_with_report(obj, schema, is_resource_root=is_resource_root)[0]


def prune_with_report(
    obj: Any, schema: dict[str, Any], *, is_resource_root: bool = True
) -> tuple[Any, list[str]]:
    """``prune`` plus the paths of what was dropped (``spec.foo``, ``spec.items[0].bar``),
    in the form the server needs for ``fieldValidation=Strict|Warn``
    (``unknown field "spec.foo"``)."""
    out = copy.deepcopy(obj)
    pruned: list[str] = []
    _prune(out, schema, "", is_resource_root, pruned)
    return out, pruned


def _prune(x: Any, schema: Any, path: str, is_root: bool, pruned: list[str]) -> None:
    if isinstance(schema, dict) and schema.get("x-kubernetes-preserve-unknown-fields"):
        _skip_prune(x, schema, path, pruned)
        return
    if isinstance(x, dict):
        if not isinstance(schema, dict):
            for k in list(x):
                pruned.append(_child(path, k))
                del x[k]
            return
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        props = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for k in list(x):
            v = x[k]
            if (
                (is_root or embedded)
                and k in _META_FIELDS
                and (isinstance(v, dict) if k == "metadata" else isinstance(v, str))
            ):
                continue
            if k in props:
                _prune(v, props[k], _child(path, k), False, pruned)
            elif isinstance(additional, dict):
                _prune(v, additional, _child(path, k), False, pruned)
            elif additional is True:
                continue
            else:
                pruned.append(_child(path, k))
                del x[k]
    elif isinstance(x, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        for i, v in enumerate(x):
            _prune(v, items, _index(path, i), False, pruned)


def _skip_prune(x: Any, schema: dict[str, Any], path: str, pruned: list[str]) -> None:
    if isinstance(x, dict):
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        props = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for k, v in x.items():
            if embedded and k in _META_FIELDS:
                continue
            if k in props:
                _prune(v, props[k], _child(path, k), False, pruned)
            elif isinstance(additional, dict):
                _prune(v, additional, _child(path, k), False, pruned)
    elif isinstance(x, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, v in enumerate(x):
                _skip_prune(v, items, _index(path, i), pruned)


# --------------------------------------------------------------------------- CEL

#: Rules that could not be compiled (or could not run at all), as (rule, reason); skipped.
SKIPPED_CEL_RULES: list[tuple[str, str]] = []
_cel_lock = threading.Lock()
_cel_cache: dict[str, Any] = {}  # rule text -> compiled program, or None when skipped
_cel_env: Any = None
_MISSING = object()
_OLD_SELF_RE = re.compile(r"\boldSelf\b")


def _cel_module() -> Any:
    """The ``celpy`` module and a shared environment, imported on first use (or None)."""
    global _cel_env
    try:
        import celpy
    except ImportError:  # pragma: no cover - exercised only without the optional package
        return None
    if _cel_env is None:
        _cel_env = celpy.Environment()
    return celpy


def _cel_available() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("celpy") is not None
    except (ImportError, ValueError):  # pragma: no cover
        return False


#: Whether CEL rules are evaluated (the optional ``cel-python`` package is installed).
CEL_AVAILABLE = _cel_available()


def _cel_program(rule: str) -> Any:
    with _cel_lock:
        if rule in _cel_cache:
            return _cel_cache[rule]
        celpy = _cel_module()
        program = None
        if celpy is None:
            SKIPPED_CEL_RULES.append((rule, "celpy (cel-python) is not installed"))
        else:
            try:
                program = _cel_env.program(_cel_env.compile(rule))
            except Exception as exc:  # celpy raises its own parse/compile errors
                SKIPPED_CEL_RULES.append((rule, f"{type(exc).__name__}: {exc}".strip()))
        _cel_cache[rule] = program
        return program


def _cel_eval_error(exc: Exception) -> str:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    if len(args) >= 2 and args[1] is KeyError:
        m = re.search(r"'([^']*)'", str(args[0]))
        return f"no such key: {m.group(1) if m else args[0]}"
    if len(args) >= 2 and args[1] is TypeError:
        return "no such overload"
    return str(args[0]) if args else str(exc)


def _rule_path(path: str, field_path: str) -> str:
    """``path`` extended by a rule's ``fieldPath`` (``.a.b``, ``['k']``, ``[0]``)."""
    for m in re.finditer(r"\.([^.\[\]]+)|\['([^']*)'\]|\[(\d+)\]", field_path):
        if m.group(1) is not None:
            path = _child(path, m.group(1))
        elif m.group(2) is not None:
            path = _key(path, m.group(2)) if "." in m.group(2) else _child(path, m.group(2))
        else:
            path = _index(path, int(m.group(3)))
    return path


def evaluate_cel_rules(
    obj: Any, schema: dict[str, Any], old: Any = _MISSING, root: str = ""
) -> list[FieldError]:
    """Evaluate the ``x-kubernetes-validations`` rules of ``schema`` over ``obj``.

    ``old`` is the stored object on update (omit it, or pass None, on create): transition
    rules (those using ``oldSelf``) only run where a value correlates with the old object.
    A failing rule is ``FieldValueInvalid`` at the rule's path with the value being the
    schema type (``spec: Invalid value: "object": <message>``); rules on the resource root
    report at ``<nil>`` as the real server does.  Rules that do not compile are skipped and
    recorded in ``SKIPPED_CEL_RULES``; without ``celpy`` every rule is skipped.
    """
    if old is None:
        old = _MISSING
    errors: list[FieldError] = []
    if not CEL_AVAILABLE:
        return errors
    _cel_walk(obj, old, schema, root, errors)
    return errors


def _cel_walk(value: Any, old: Any, schema: Any, path: str, errors: list[FieldError]) -> None:
    if not isinstance(schema, dict) or value is None:
        return
    rules = schema.get("x-kubernetes-validations")
    if rules:
        _cel_check(value, old, schema, rules, path, errors)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        # schema order (alphabetical in generated CRDs) keeps the error order stable
        for k in [k for k in props if k in value] + [k for k in value if k not in props]:
            old_k = old.get(k, _MISSING) if isinstance(old, dict) else _MISSING
            if k in props:
                _cel_walk(value[k], old_k, props[k], _child(path, k), errors)
            elif isinstance(additional, dict):
                _cel_walk(value[k], old_k, additional, _key(path, k), errors)
    elif isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return
        list_type = schema.get("x-kubernetes-list-type")
        keys = list(schema.get("x-kubernetes-list-map-keys") or [])
        for i, v in enumerate(value):
            old_v: Any = _MISSING
            if isinstance(old, list):
                if list_type == "map" and isinstance(v, dict):
                    ident = [v.get(k) for k in keys]
                    old_v = next(
                        (
                            o
                            for o in old
                            if isinstance(o, dict) and [o.get(k) for k in keys] == ident
                        ),
                        _MISSING,
                    )
                elif list_type == "set":
                    old_v = next((o for o in old if _json_equal(o, v)), _MISSING)
            _cel_walk(v, old_v, items, _index(path, i), errors)


def _cel_check(
    value: Any,
    old: Any,
    schema: dict[str, Any],
    rules: list[dict[str, Any]],
    path: str,
    errors: list[FieldError],
) -> None:
    celpy = _cel_module()
    if celpy is None:  # pragma: no cover
        return
    sch_type = schema.get("type") or ""
    activation: dict[str, Any] | None = None
    for rule in rules:
        text = str(rule.get("rule") or "")
        if not text:
            continue
        program = _cel_program(text)
        if program is None:
            continue
        transition = bool(_OLD_SELF_RE.search(text))
        if transition and old is _MISSING:
            continue
        if activation is None:
            activation = {"self": celpy.json_to_cel(value)}
        act = dict(activation)
        if transition:
            act["oldSelf"] = celpy.json_to_cel(old)
        where = _rule_path(path, str(rule.get("fieldPath") or ""))
        rule_string = (rule.get("message") or "").strip() or text.strip()
        try:
            result = program.evaluate(act)
        except Exception as exc:  # celpy's CELEvalError
            detail = _cel_eval_error(exc)
            if detail == "no such overload":
                detail = (
                    f"'{detail}': call arguments did not match a supported operator, "
                    f"function or macro signature for rule: {rule_string}"
                )
            else:
                detail = f"{detail} evaluating rule: {rule_string}"
            errors.append(_invalid(where, sch_type, detail))
            continue
        if bool(result) and isinstance(result, celpy.celtypes.BoolType):
            continue
        message = (rule.get("message") or "").strip() or f"failed rule: {text.strip()}"
        expr = rule.get("messageExpression")
        if expr:
            msg_program = _cel_program(str(expr))
            if msg_program is not None:
                try:
                    produced = msg_program.evaluate(act)
                    if isinstance(produced, str) and produced.strip():
                        message = str(produced)
                except Exception:  # fall back to message
                    pass
        errors.append(_cel_error(where, sch_type, message, rule.get("reason")))


def _cel_error(path: str, value: Any, detail: str, reason: str | None) -> FieldError:
    if reason == "FieldValueForbidden":
        return _forbidden(path, detail)
    if reason == "FieldValueRequired":
        return _required(path, detail)
    if reason == "FieldValueDuplicate":
        return _err("FieldValueDuplicate", path, value)
    return _invalid(path, value, detail)


_BLOCKING = {
    "FieldValueNotSupported",
    "FieldValueRequired",
    "FieldValueTooLong",
    "FieldValueTooMany",
    "FieldValueTypeInvalid",
}


def validate_custom_resource(
    obj: dict[str, Any], schema: dict[str, Any], old: dict[str, Any] | None = None
) -> list[FieldError]:
    """Schema, list-type and CEL validation of a whole (pruned, defaulted) custom resource,
    in the order and with the short-circuit the real server uses: when the OpenAPI checks
    found a type/required/enum/length/count error, CEL rules are not run and one
    ``<nil>: Invalid value: "null": some validation rules were not checked…`` is added.
    Metadata is validated separately (``validate_object_meta``)."""
    errors = validate_against_schema(obj, schema)
    if any(e.type in _BLOCKING for e in errors):
        errors.append(
            _invalid(
                "",
                None,
                "some validation rules were not checked because the "
                "object was invalid; correct the existing errors to complete "
                "validation",
            )
        )
        return errors
    return errors + evaluate_cel_rules(obj, schema, old if old is not None else _MISSING)


# --------------------------------------------------------------------------- names

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_ERR = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric "
    "characters or '-', and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_ERR = (
    "a lowercase RFC 1123 subdomain must consist of lower case "
    "alphanumeric characters, '-' or '.', and must start and end with an "
    "alphanumeric character"
)
_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_ERR = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or "
    "'-', start with an alphabetic character, and end with an alphanumeric "
    "character"
)
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME_ERR = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character"
)
_LABEL_VALUE_FMT = "(" + _QUALIFIED_NAME_FMT + ")?"
_LABEL_VALUE_ERR = (
    "a valid label must be an empty string or consist of alphanumeric "
    "characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character"
)

_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL_RE = re.compile(_DNS1035_LABEL_FMT)
_QUALIFIED_NAME_RE = re.compile(_QUALIFIED_NAME_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)

TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024


def _max_len_error(n: int) -> str:
    return f"must be no more than {n} characters"


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """apimachinery's ``RegexError``, quirks included: each example is followed by
    ``', '`` and joined with ``' or '`` (so ``'a',  or 'b', regex used ...``)."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _fullmatch(regex: re.Pattern[str], value: str) -> bool:
    return regex.fullmatch(value) is not None


def is_dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append(_max_len_error(63))
    if not _fullmatch(_DNS1123_LABEL_RE, value):
        if _fullmatch(_DNS1123_SUBDOMAIN_RE, value):
            errs.append("must not contain dots")
        else:
            errs.append(_regex_error(_DNS1123_LABEL_ERR, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value.encode()) > 253:
        errs.append(_max_len_error(253))
    if not _fullmatch(_DNS1123_SUBDOMAIN_RE, value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append(_max_len_error(63))
    if not _fullmatch(_DNS1035_LABEL_RE, value):
        errs.append(_regex_error(_DNS1035_LABEL_ERR, _DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def is_valid_path_segment_name(value: str) -> list[str]:
    for bad in (".", ".."):
        if value == bad:
            return [f"may not be '{bad}'"]
    return [f"may not contain '{bad}'" for bad in ("/", "%") if bad in value]


def is_qualified_name(value: str) -> list[str]:
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_ERR, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name.encode()) > 63:  # Go's len counts bytes
        errs.append("name part " + _max_len_error(63))
    if not _fullmatch(_QUALIFIED_NAME_RE, name):
        errs.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_ERR, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def is_valid_label_value(value: str) -> list[str]:
    errs = []
    if len(value.encode()) > 63:  # Go's len counts bytes
        errs.append(_max_len_error(63))
    if not _fullmatch(_LABEL_VALUE_RE, value):
        errs.append(
            _regex_error(_LABEL_VALUE_ERR, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errs


_NAME_RULES = {
    "dns1123-subdomain": is_dns1123_subdomain,
    "dns1123-label": is_dns1123_label,
    "dns1035-label": is_dns1035_label,
    "path-segment": is_valid_path_segment_name,
}


def validate_name(name: str, rule: str, prefix: bool = False) -> list[str]:
    """apimachinery's ``ValidateNameFunc`` messages for ``rule`` (``dns1123-subdomain``,
    ``dns1123-label``, ``dns1035-label``, ``path-segment``); ``prefix`` validates a
    ``generateName`` (a trailing '-' is allowed, masked as upstream does)."""
    try:
        check = _NAME_RULES[rule]
    except KeyError:
        raise ValueError(f"unknown name rule {rule!r}") from None
    if prefix and rule != "path-segment" and len(name) > 1 and name.endswith("-"):
        name = name[:-2] + "a"  # apimachinery's maskTrailingDash
    return check(name)


def validate_object_meta(
    meta: dict[str, Any], name_rule: str, namespaced: bool
) -> list[FieldError]:
    """``ValidateObjectMetaAccessor`` for a resource's ``metadata``."""
    errors: list[FieldError] = []
    if not isinstance(meta, dict):
        return [_err("FieldValueTypeInvalid", "metadata", _json_type(meta), "must be an object")]
    generate = meta.get("generateName") or ""
    name = meta.get("name") or ""
    if generate:
        for msg in validate_name(generate, name_rule, prefix=True):
            errors.append(_invalid("metadata.generateName", generate, msg))
    if not name:
        if not generate:
            errors.append(_required("metadata.name", "name or generateName is required"))
    else:
        for msg in validate_name(name, name_rule):
            errors.append(_invalid("metadata.name", name, msg))
    namespace = meta.get("namespace") or ""
    if namespaced:
        if not namespace:
            errors.append(_required("metadata.namespace"))
        else:
            for msg in is_dns1123_label(namespace):
                errors.append(_invalid("metadata.namespace", namespace, msg))
    elif namespace:
        errors.append(_forbidden("metadata.namespace", "not allowed on this type"))
    generation = meta.get("generation")
    if isinstance(generation, (int, float)) and _is_number(generation) and generation < 0:
        errors.append(
            _invalid("metadata.generation", generation, "must be greater than or equal to 0")
        )
    labels = meta.get("labels") or {}
    if isinstance(labels, dict):
        for k, v in labels.items():
            for msg in is_qualified_name(str(k)):
                errors.append(_invalid("metadata.labels", k, msg))
            for msg in is_valid_label_value("" if v is None else str(v)):
                errors.append(_invalid("metadata.labels", v, msg))
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, dict):
        for k in annotations:
            for msg in is_qualified_name(str(k).lower()):
                errors.append(_invalid("metadata.annotations", k, msg))
        size = sum(
            len(str(k).encode()) + len(str(v or "").encode()) for k, v in annotations.items()
        )
        if size > TOTAL_ANNOTATION_SIZE_LIMIT:
            errors.append(_too_long("metadata.annotations", TOTAL_ANNOTATION_SIZE_LIMIT))
    finalizers = meta.get("finalizers") or []
    if isinstance(finalizers, list):
        for f in finalizers:
            for msg in is_qualified_name(str(f)):
                errors.append(_invalid("metadata.finalizers", f, msg))
        if "orphan" in finalizers and "foregroundDeletion" in finalizers:
            errors.append(
                _invalid(
                    "metadata.finalizers",
                    finalizers,
                    "finalizer orphan and foregroundDeletion cannot be both set",
                )
            )
    return errors


# --------------------------------------------------------------------------- CRDs


@dataclass(frozen=True)
class CrdVersion:
    """One version of a CustomResourceDefinition, flattened for the server."""

    group: str
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    namespaced: bool
    version: str
    served: bool
    storage: bool
    schema: dict[str, Any] | None
    status_subresource: bool
    scale_subresource: dict[str, Any] | None
    printer_columns: list[dict[str, Any]] = field(default_factory=list)
    list_kind: str = ""
    deprecated: bool = False
    deprecation_warning: str | None = None
    crd_name: str = ""


def load_crd_versions(crd: dict[str, Any]) -> list[CrdVersion]:
    """The versions of an ``apiextensions.k8s.io/v1`` CustomResourceDefinition dict."""
    spec = crd["spec"]
    names = spec["names"]
    kind = names["kind"]
    out = []
    for v in spec["versions"]:
        subresources = v.get("subresources") or {}
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        out.append(
            CrdVersion(
                group=spec["group"],
                kind=kind,
                plural=names["plural"],
                singular=names.get("singular") or kind.lower(),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                version=v["name"],
                served=bool(v.get("served", True)),
                storage=bool(v.get("storage", False)),
                schema=schema,
                status_subresource="status" in subresources,
                scale_subresource=subresources.get("scale"),
                printer_columns=list(v.get("additionalPrinterColumns") or []),
                list_kind=names.get("listKind") or f"{kind}List",
                deprecated=bool(v.get("deprecated", False)),
                deprecation_warning=v.get("deprecationWarning"),
                crd_name=(crd.get("metadata") or {}).get("name", ""),
            )
        )
    return out


_bundled: list[dict[str, Any]] | None = None
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def bundled_crds() -> list[dict[str, Any]]:
    """The CRDs shipped in ``krea_ops/sim/crds/`` (Kueue and JobSet); fresh copies."""
    global _bundled
    if _bundled is None:
        crds: list[dict[str, Any]] = []
        folder = resources.files("krea_ops.sim") / "crds"
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".yaml"):
                docs = yaml.load_all(entry.read_text(encoding="utf-8"), Loader=_YAML_LOADER)
                crds.extend(
                    d
                    for d in docs
                    if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"
                )
        _bundled = crds
    return copy.deepcopy(_bundled)


# --------------------------------------------------------------------------- Lease

_LEASE_STRATEGIES = ("OldestEmulationVersion",)


def validate_lease(obj: dict[str, Any]) -> list[FieldError]:
    """``ValidateLeaseSpec`` (kubernetes pkg/apis/coordination/validation/validation.go),
    the path of the strategy's errors (``spec.strategy.strategy``) included."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    out: list[FieldError] = []
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, int) and duration <= 0:
        out.append(_invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if isinstance(transitions, int) and transitions < 0:
        out.append(
            _invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
        )
    strategy = spec.get("strategy")
    if isinstance(strategy, str):
        if "/" not in strategy:
            if strategy not in _LEASE_STRATEGIES:
                out.append(
                    _not_supported("spec.strategy.strategy", strategy, list(_LEASE_STRATEGIES))
                )
        else:
            for msg in is_qualified_name(strategy):
                out.append(_invalid("spec.strategy.strategy", strategy, msg))
    if spec.get("preferredHolder") and not spec.get("strategy"):
        out.append(
            _forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined")
        )
    return out
