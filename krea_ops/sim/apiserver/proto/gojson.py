"""How the real API server reads a built-in kind's JSON: into its Go structs.

The real server decodes a request body with sigs.k8s.io/json (a fork of Go's
``encoding/json``) into the kind's Go struct, then writes the struct back out, so:

- a field the struct does not have is dropped, and reported as ``unknown field "a.b"``
  (``duplicate field "a.b"`` for a key given twice) -- an error under
  ``fieldValidation=Strict``, a warning under ``Warn`` (the default), silent under
  ``Ignore`` (k8s.io/apiserver pkg/endpoints/handlers/create.go);
- a value of the wrong JSON type is an ``UnmarshalTypeError``: ``json: cannot unmarshal
  string into Go struct field DeploymentSpec.spec.replicas of type int32``
  (internal/golang/encoding/json/decode.go in sigs.k8s.io/json);
- Time and MicroTime are parsed with Go's ``time.Parse`` (RFC 3339; MicroTime with exactly
  six fractional digits) and written back in UTC (``...Z``, MicroTime ``.ffffffZ``).

The structs' shape comes from the generated protobuf descriptors of this package and the
Go JSON names of ``gofields.py`` (both from the same upstream release).
"""

from __future__ import annotations

import calendar
import datetime as dt
import functools
import re
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from krea_ops.sim.apiserver.proto import codec
from krea_ops.sim.apiserver.proto.gofields import FIELDS
from krea_ops.sim.apiserver.validation import go_quote

RFC3339 = "2006-01-02T15:04:05Z07:00"
RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"
# k8s.io/apimachinery pkg/api/resource/quantity.go, ErrFormatWrong
QUANTITY_FORMAT_ERROR = (
    "quantities must match the regular expression "
    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: ("int32", -(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: ("int64", -(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: ("uint32", 0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: ("uint64", 0, 2**64 - 1),
}


class JsonObject(dict[str, Any]):
    """A decoded JSON object that remembers the keys it was given more than once
    (Python's ``json`` keeps the last silently, as Go does, but strict decoding
    reports them)."""

    duplicates: tuple[str, ...] = ()

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, Any]]) -> JsonObject:
        obj = cls()
        dups: list[str] = []
        for key, value in pairs:
            if key in obj and key not in dups:
                dups.append(key)
            obj[key] = value
        if dups:
            obj.duplicates = tuple(dups)
        return obj


class GoDecodeError(ValueError):
    """The error Go's decoder stops with (the text after ``cannot be handled as a X: ``)."""


@dataclass
class Decoded:
    obj: dict[str, Any]
    strict: list[str] = field(default_factory=list)  # 'unknown field "a.b"', ...


def decode(obj: dict[str, Any], message: str) -> Decoded:
    """``obj`` as the real server reads it into the Go struct of ``message``."""
    desc = descriptor_pool.Default().FindMessageTypeByName(message)
    walker = _Walker()
    out = walker.struct(obj, desc, "", [], top=True)
    if walker.saved is not None:
        raise GoDecodeError(walker.saved)
    return Decoded(out, walker.strict)


def message_for(api_version: str, kind: str) -> str | None:
    name = codec.message_name(api_version, kind)
    if name is None or not name.endswith("." + kind):
        return None
    return name


# -- the struct shapes -------------------------------------------------------------------


@dataclass(frozen=True)
class _Field:
    proto: FieldDescriptor
    owner: Descriptor  # the Go struct the error names (the outer one for embedded fields)
    go_type: str


@functools.cache
def _json_fields(desc: Descriptor) -> dict[str, _Field]:
    """JSON name -> field, embedded (``json:",inline"``) structs' fields flattened."""
    out: dict[str, _Field] = {}
    specs = FIELDS.get(desc.full_name, {})
    for f in desc.fields:
        spec = specs.get(f.name)
        name, go_type = (str(spec[0]), str(spec[3])) if spec else (f.name, "")
        if name == "" and f.message_type is not None:
            for sub_name, sub in _json_fields(f.message_type).items():
                out.setdefault(sub_name, _Field(sub.proto, desc, sub.go_type))
            continue
        out[name] = _Field(f, desc, go_type)
    return out


def _elem(go_type: str) -> str:
    return go_type[2:] if go_type.startswith("[]") else go_type


def _map_value(go_type: str) -> str:
    if not go_type.startswith("map["):
        return go_type
    depth = 0
    for i, ch in enumerate(go_type):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "]" and depth == 0:
            return go_type[i + 1 :]
    return go_type


def _word(value: Any) -> str:
    """The JSON kind Go's UnmarshalTypeError names."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _number_text(value: float) -> str:
    return repr(value) if isinstance(value, float) else str(value)


class _Walker:
    def __init__(self) -> None:
        self.saved: str | None = None  # Go saves the first type error and goes on
        self.strict: list[str] = []

    def _type_error(self, word: str, go_type: str, owner: Descriptor, stack: list[str]) -> None:
        if self.saved is None:
            self.saved = (
                f"json: cannot unmarshal {word} into Go struct field "
                f"{owner.name}.{'.'.join(stack)} of type {go_type}"
            )

    def _note(self, kind: str, path: str) -> None:
        text = f"{kind} {go_quote(path)}"
        if text not in self.strict:
            self.strict.append(text)

    def struct(
        self,
        obj: dict[str, Any],
        desc: Descriptor,
        path: str,
        stack: list[str],
        top: bool = False,
    ) -> dict[str, Any]:
        fields = _json_fields(desc)
        dups = getattr(obj, "duplicates", ())
        out: dict[str, Any] = {}
        for key, value in obj.items():
            sub_path = f"{path}.{key}" if path else key
            if top and key in ("apiVersion", "kind"):
                if value is not None and not isinstance(value, str):
                    self._type_error(_word(value), "string", desc, [*stack, key])
                    continue
                out[key] = value
                continue
            f = fields.get(key)
            if f is None:
                self._note("unknown field", sub_path)
                continue
            if key in dups:
                self._note("duplicate field", sub_path)
            out[key] = self.value(value, f.proto, f.go_type, f.owner, sub_path, [*stack, key])
        return out

    def value(
        self,
        value: Any,
        f: FieldDescriptor,
        go_type: str,
        owner: Descriptor,
        path: str,
        stack: list[str],
    ) -> Any:
        if value is None:
            return None  # null leaves the Go field as it was
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            if not isinstance(value, dict):
                self._type_error(_word(value), go_type, owner, stack)
                return None
            value_field = f.message_type.fields_by_name["value"]
            dups = getattr(value, "duplicates", ())
            out: dict[str, Any] = {}
            for k, v in value.items():
                if k in dups:
                    self._note("duplicate field", f"{path}.{k}")
                out[k] = self.single(
                    v, value_field, _map_value(go_type), owner, f"{path}.{k}", stack
                )
            return out
        if f.is_repeated:
            if not isinstance(value, list):
                self._type_error(_word(value), go_type, owner, stack)
                return None
            return [
                self.single(v, f, _elem(go_type), owner, f"{path}[{i}]", stack)
                for i, v in enumerate(value)
            ]
        return self.single(value, f, go_type, owner, path, stack)

    def single(
        self,
        value: Any,
        f: FieldDescriptor,
        go_type: str,
        owner: Descriptor,
        path: str,
        stack: list[str],
    ) -> Any:
        if value is None:
            return None
        msg = f.message_type
        if msg is not None:
            name = msg.full_name
            if name in (codec._TIME, codec._MICRO_TIME):
                if not isinstance(value, str):
                    self._type_error(_word(value), "string", owner, stack)
                    return None
                micro = name == codec._MICRO_TIME
                moment = parse_go_time(RFC3339_MICRO if micro else RFC3339, value)
                return format_time(moment, micro)
            if name == codec._INT_OR_STRING:
                if isinstance(value, str):
                    return value
                return self.integer(value, "int32", -(2**31), 2**31 - 1, owner, stack)
            if name == codec._QUANTITY:
                text = value if isinstance(value, str) else _number_text(value)
                if isinstance(value, (bool, list, dict)) or not _QUANTITY_RE.match(text.strip()):
                    raise GoDecodeError(QUANTITY_FORMAT_ERROR)
                return value if isinstance(value, str) else text
            if name in (codec._RAW_EXTENSION, codec._FIELDS_V1):
                return value
            if name in (codec._DURATION,):
                if not isinstance(value, str):
                    self._type_error(_word(value), "string", owner, stack)
                    return None
                return value
            if name == codec._VERBS:
                return value
            if not isinstance(value, dict):
                self._type_error(_word(value), go_type, owner, stack)
                return None
            return self.struct(value, msg, path, stack)
        t = f.type
        if t == FieldDescriptor.TYPE_STRING:
            if not isinstance(value, str):
                self._type_error(_word(value), go_type or "string", owner, stack)
                return None
            return value
        if t == FieldDescriptor.TYPE_BOOL:
            if not isinstance(value, bool):
                self._type_error(_word(value), go_type or "bool", owner, stack)
                return None
            return value
        if t in _INT_RANGES:
            name, low, high = _INT_RANGES[t]
            return self.integer(value, go_type or name, low, high, owner, stack)
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self._type_error(_word(value), go_type or "float64", owner, stack)
                return None
            return value
        if t == FieldDescriptor.TYPE_BYTES:
            if not isinstance(value, str):
                self._type_error(_word(value), "[]uint8", owner, stack)
                return None
            return value
        return value

    def integer(
        self, value: Any, go_type: str, low: int, high: int, owner: Descriptor, stack: list[str]
    ) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self._type_error(_word(value), go_type, owner, stack)
            return None
        if isinstance(value, float) or not low <= value <= high:
            self._type_error(f"number {_number_text(value)}", go_type, owner, stack)
            return None
        return value


# -- Go's time.Parse for the two RFC 3339 layouts -----------------------------------------


class GoTimeError(GoDecodeError):
    pass


def _layout_chunks(layout: str) -> list[tuple[str, str]]:
    """(literal prefix, std element) pairs of the two layouts."""
    chunks = [("", "2006"), ("-", "01"), ("-", "02"), ("T", "15"), (":", "04"), (":", "05")]
    if layout == RFC3339_MICRO:
        chunks.append(("", ".000000"))
    chunks.append(("", "Z07:00"))
    return chunks


def _getnum(s: str, fixed: bool) -> tuple[int, str] | None:
    if not s[:1].isdigit():
        return None
    if not s[1:2].isdigit():
        if fixed:
            return None
        return int(s[0]), s[1:]
    return int(s[:2]), s[2:]


def parse_go_time(layout: str, text: str) -> dt.datetime:
    """Go's ``time.Parse(layout, text)`` for RFC3339 and RFC3339Micro, with Go's errors:
    ``parsing time "x" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "x" as "2006"``."""

    def bad(layout_elem: str, value_elem: str) -> GoTimeError:
        return GoTimeError(
            f"parsing time {go_quote(text)} as {go_quote(layout)}: cannot parse "
            f"{go_quote(value_elem)} as {go_quote(layout_elem)}"
        )

    def out_of_range(what: str) -> GoTimeError:
        return GoTimeError(f"parsing time {go_quote(text)}: {what} out of range")

    value = text
    parts: dict[str, int] = {}
    nanos = 0
    offset = 0
    chunks = _layout_chunks(layout)
    for index, (prefix, std) in enumerate(chunks):
        for ch in prefix:
            if not value or value[0] != ch:
                raise bad(prefix, value)
            value = value[1:]
        hold = value
        if std == "2006":
            if len(value) < 4 or not value[:4].isdigit():
                raise bad(std, hold)
            parts["year"], value = int(value[:4]), value[4:]
        elif std in ("01", "02", "15", "04", "05"):
            got = _getnum(value, std != "15")
            if got is None:
                raise bad(std, hold)
            number, value = got
            limits = {"01": (1, 12, "month"), "02": (0, 31, "day"), "15": (0, 23, "hour")}
            low, high, what = limits.get(std, (0, 59, "minute" if std == "04" else "second"))
            if not low <= number <= high:
                raise out_of_range(what)
            parts[std] = number
            next_std = chunks[index + 1][1] if index + 1 < len(chunks) else ""
            if (
                std == "05"
                and next_std != ".000000"
                and len(value) >= 2
                and value[0] in ".,"
                and value[1].isdigit()
            ):
                n = 2
                while n < len(value) and value[n].isdigit():
                    n += 1
                nanos = int((value[1:n] + "000000000")[:9])
                value = value[n:]
        elif std == ".000000":
            if len(value) < 7 or value[0] not in ".," or not value[1:7].isdigit():
                raise bad(std, hold)
            nanos, value = int(value[1:7]) * 1000, value[7:]
        else:  # Z07:00
            if value[:1] == "Z":
                value = value[1:]
            else:
                if len(value) < 6 or value[3] != ":":
                    raise bad(std, hold)
                sign, hour, minute = value[0], value[1:3], value[4:6]
                if not (hour.isdigit() and minute.isdigit()) or sign not in "+-":
                    raise bad(std, hold)
                if int(hour) > 24:
                    raise out_of_range("time zone offset hour")
                if int(minute) > 60:
                    raise out_of_range("time zone offset minute")
                offset = (int(hour) * 60 + int(minute)) * (1 if sign == "+" else -1)
                value = value[6:]
    if value:
        raise GoTimeError(f"parsing time {go_quote(text)}: extra text: {go_quote(value)}")
    year, month, day = parts["year"], parts["01"], parts["02"]
    if day < 1 or day > calendar.monthrange(year, month)[1]:
        raise out_of_range("day")
    moment = dt.datetime(
        year,
        month,
        day,
        parts["15"],
        parts["04"],
        parts["05"],
        nanos // 1000,
        tzinfo=dt.timezone(dt.timedelta(minutes=offset)),
    )
    return moment.astimezone(dt.UTC)


def format_time(moment: dt.datetime, micro: bool) -> str:
    """metav1.Time / MicroTime's MarshalJSON: UTC, RFC 3339 (MicroTime: six digits)."""
    moment = moment.astimezone(dt.UTC)
    if micro:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
