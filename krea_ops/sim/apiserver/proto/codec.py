"""The Kubernetes protobuf encoding (``application/vnd.kubernetes.protobuf``), both ways.

What goes over the wire (k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go):
the 4-byte magic ``k8s\\x00``, then a ``runtime.Unknown`` whose ``typeMeta`` names the
apiVersion and kind and whose ``raw`` holds the object's own message. The real server
decodes that into its Go structs and, for a JSON reader, writes them with
``encoding/json``; ``to_json`` follows the same rules (the Go JSON names, ``omitempty``,
pointers, and the types with their own JSON form: Time, MicroTime, Duration,
IntOrString, Quantity, RawExtension, FieldsV1), so an object created over protobuf is
stored as the same JSON a JSON client would have been answered with.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

# Importing the modules registers their descriptors in the default pool.
from krea_ops.sim.apiserver.proto import (  # noqa: F401
    apps_v1_pb2,
    batch_v1_pb2,
    coordination_v1_pb2,
    core_v1_pb2,
    intstr_pb2,
    meta_v1_pb2,
    networking_v1_pb2,
    policy_v1_pb2,
    resource_pb2,
    runtime_pb2,
    runtime_schema_pb2,
    scheduling_v1_pb2,
)
from krea_ops.sim.apiserver.proto.gofields import FIELDS

MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"

_META = "k8s.io.apimachinery.pkg.apis.meta.v1"
_PACKAGES = {
    "v1": "k8s.io.api.core.v1",
    "apps/v1": "k8s.io.api.apps.v1",
    "batch/v1": "k8s.io.api.batch.v1",
    "policy/v1": "k8s.io.api.policy.v1",
    "networking.k8s.io/v1": "k8s.io.api.networking.v1",
    "coordination.k8s.io/v1": "k8s.io.api.coordination.v1",
    "scheduling.k8s.io/v1": "k8s.io.api.scheduling.v1",
    "meta.k8s.io/v1": _META,
}
_TIME = f"{_META}.Time"
_MICRO_TIME = f"{_META}.MicroTime"
_DURATION = f"{_META}.Duration"
_FIELDS_V1 = f"{_META}.FieldsV1"
_VERBS = f"{_META}.Verbs"
_INT_OR_STRING = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
_QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
_RAW_EXTENSION = "k8s.io.apimachinery.pkg.runtime.RawExtension"
_UNKNOWN = "k8s.io.apimachinery.pkg.runtime.Unknown"

_POOL = descriptor_pool.Default()


class ProtoError(ValueError):
    """A body that is not a Kubernetes protobuf object the simulator knows."""


def _class(full_name: str) -> type[Message]:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(full_name))


def message_name(api_version: str, kind: str) -> str | None:
    """The proto message for an apiVersion and kind, or None: the options kinds
    (DeleteOptions, ...) and Status are meta.k8s.io's, served in every group version."""
    for package in (_PACKAGES.get(api_version), _META):
        if package is None:
            continue
        try:
            _POOL.FindMessageTypeByName(f"{package}.{kind}")
        except KeyError:
            continue
        return f"{package}.{kind}"
    return None


def is_protobuf(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() == MEDIA_TYPE


# -- protobuf -> JSON -------------------------------------------------------------------


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf request body as the JSON object a JSON client would have sent."""
    if not body.startswith(MAGIC):
        raise ProtoError("provided data does not appear to be a protobuf message, expected prefix")
    envelope = _class(_UNKNOWN)()
    try:
        envelope.ParseFromString(body[len(MAGIC) :])
    except DecodeError as exc:
        raise ProtoError(str(exc) or "proto: cannot parse invalid wire-format data") from None
    type_meta = envelope.typeMeta  # type: ignore[attr-defined]
    api_version, kind = str(type_meta.apiVersion), str(type_meta.kind)
    name = message_name(api_version, kind)
    if name is None:
        raise ProtoError(f'no kind "{kind}" is registered for version "{api_version}"')
    msg = _class(name)()
    try:
        msg.ParseFromString(envelope.raw)  # type: ignore[attr-defined]
    except DecodeError as exc:
        raise ProtoError(str(exc) or "proto: cannot parse invalid wire-format data") from None
    obj = to_json(msg)
    assert isinstance(obj, dict)
    out: dict[str, Any] = {"kind": kind, "apiVersion": api_version}
    out.update(obj)
    return out


def go_time(seconds: int, nanos: int = 0, micro: bool = False) -> str:
    """metav1.Time / MicroTime's JSON form: RFC 3339 in UTC, seconds or microseconds."""
    moment = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
        seconds=seconds, microseconds=nanos // 1000 if micro else 0
    )
    if micro:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def go_duration(nanos: int) -> str:
    """time.Duration.String(): ``1h2m3.5s``, ``1.5ms``, ``0s``."""
    if nanos == 0:
        return "0s"
    sign, n = ("-", -nanos) if nanos < 0 else ("", nanos)
    if n < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if n >= size:
                return sign + _trim(n / size) + unit
    hours, rest = divmod(n, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    secs = _trim(rest / 1_000_000_000) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}"
    if minutes:
        return f"{sign}{minutes}m{secs}"
    return sign + secs


def _trim(value: float) -> str:
    return f"{value:.9f}".rstrip("0").rstrip(".")


def _raw_json(raw: bytes) -> Any:
    if not raw:
        return None
    if raw.startswith(MAGIC):
        return decode(raw)
    try:
        return json.loads(raw)
    except ValueError:
        raise ProtoError("the embedded object is neither JSON nor protobuf") from None


def _special_to_json(msg: Message, name: str) -> tuple[bool, Any]:
    if name in (_TIME, _MICRO_TIME):
        if not msg.HasField("seconds") and not msg.HasField("nanos"):
            return True, None  # the zero time: Go writes null
        micro = name == _MICRO_TIME
        return True, go_time(msg.seconds, msg.nanos, micro)  # type: ignore[attr-defined]
    if name == _DURATION:
        return True, go_duration(msg.duration)  # type: ignore[attr-defined]
    if name == _INT_OR_STRING:
        if msg.type == 1:  # type: ignore[attr-defined]
            return True, msg.strVal  # type: ignore[attr-defined]
        return True, msg.intVal  # type: ignore[attr-defined]
    if name == _QUANTITY:
        return True, msg.string or "0"  # type: ignore[attr-defined]
    if name == _RAW_EXTENSION:
        return True, _raw_json(msg.raw)  # type: ignore[attr-defined]
    if name == _FIELDS_V1:
        return True, _raw_json(msg.Raw)  # type: ignore[attr-defined]
    if name == _VERBS:
        return True, list(msg.items)  # type: ignore[attr-defined]
    return False, None


def _scalar_zero(field: FieldDescriptor) -> Any:
    if field.type == FieldDescriptor.TYPE_STRING:
        return ""
    if field.type == FieldDescriptor.TYPE_BYTES:
        return None  # a nil []byte
    if field.type == FieldDescriptor.TYPE_BOOL:
        return False
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return 0.0
    return 0


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _spec(desc: Descriptor, field: FieldDescriptor) -> tuple[str, bool, bool]:
    """(json name, omitempty, pointer) of one field."""
    spec = FIELDS.get(desc.full_name, {}).get(field.name)
    if spec is None:
        return field.name, True, field.message_type is not None
    return str(spec[0]), bool(spec[1]), bool(spec[2])


def to_json(msg: Message) -> Any:
    """One message as ``encoding/json`` writes the Go struct it decodes into."""
    desc = msg.DESCRIPTOR
    special, value = _special_to_json(msg, desc.full_name)
    if special:
        return value
    out: dict[str, Any] = {}
    for field in desc.fields:
        json_name, omitempty, pointer = _spec(desc, field)
        value = _field_to_json(msg, field, omitempty, pointer)
        if value is _OMIT:
            continue
        if json_name == "":  # an embedded struct: its fields are the parent's
            if isinstance(value, dict):
                out.update(value)
            continue
        out[json_name] = value
    return out


_OMIT = object()


def _field_to_json(msg: Message, field: FieldDescriptor, omitempty: bool, pointer: bool) -> Any:
    if _is_map(field):
        entries = getattr(msg, field.name)
        if not entries:
            return _OMIT if omitempty else None
        value_field = field.message_type.fields_by_name["value"]
        if value_field.message_type is not None:
            return {k: to_json(v) for k, v in entries.items()}
        return {k: _scalar(value_field, v) for k, v in entries.items()}
    if field.is_repeated:
        items = getattr(msg, field.name)
        if not items:
            return _OMIT if omitempty else None
        if field.message_type is not None:
            return [to_json(v) for v in items]
        return [_scalar(field, v) for v in items]
    present = msg.HasField(field.name)
    if field.message_type is not None:
        if not present and pointer:
            return _OMIT if omitempty else None
        value = to_json(getattr(msg, field.name))
        if omitempty and value is None and pointer:
            return _OMIT
        return value
    if not present:
        if pointer:
            return _OMIT if omitempty else None
        zero = _scalar_zero(field)
        return _OMIT if omitempty else zero
    value = getattr(msg, field.name)
    if omitempty and not pointer and value in ("", 0, False, b""):
        return _OMIT
    return _scalar(field, value)


# -- JSON -> protobuf (answers to a client that accepts only protobuf) ------------------


def encode(obj: dict[str, Any]) -> bytes:
    """An object (or list, or Status) as the protobuf a Go client decodes."""
    api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    name = message_name(api_version, kind)
    if name is None:
        raise ProtoError(f"{api_version}, Kind={kind} has no protobuf encoding")
    msg = _class(name)()
    from_json(msg, obj)
    envelope = _class(_UNKNOWN)()
    envelope.typeMeta.apiVersion = api_version  # type: ignore[attr-defined]
    envelope.typeMeta.kind = kind  # type: ignore[attr-defined]
    envelope.raw = msg.SerializeToString()  # type: ignore[attr-defined]
    envelope.contentEncoding = ""  # type: ignore[attr-defined]
    envelope.contentType = ""  # type: ignore[attr-defined]
    return MAGIC + envelope.SerializeToString()


def _parse_time(text: str) -> tuple[int, int]:
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    delta = moment - epoch
    return delta.days * 86400 + delta.seconds, delta.microseconds * 1000


def _special_from_json(msg: Message, name: str, value: Any) -> bool:
    if name in (_TIME, _MICRO_TIME):
        if value:
            seconds, nanos = _parse_time(str(value))
            msg.seconds = seconds  # type: ignore[attr-defined]
            msg.nanos = nanos if name == _MICRO_TIME else 0  # type: ignore[attr-defined]
        return True
    if name == _INT_OR_STRING:
        if isinstance(value, str):
            msg.type, msg.strVal = 1, value  # type: ignore[attr-defined]
        else:
            msg.type, msg.intVal = 0, int(value or 0)  # type: ignore[attr-defined]
        return True
    if name == _QUANTITY:
        msg.string = str(value)  # type: ignore[attr-defined]
        return True
    if name == _RAW_EXTENSION:
        if value is not None:
            msg.raw = json.dumps(value, separators=(",", ":")).encode()  # type: ignore[attr-defined]
        return True
    if name == _FIELDS_V1:
        msg.Raw = json.dumps(value, separators=(",", ":")).encode()  # type: ignore[attr-defined]
        return True
    if name == _VERBS:
        msg.items.extend(value or [])  # type: ignore[attr-defined]
        return True
    return name == _DURATION  # no served kind carries one


def _scalar_from_json(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64decode(value)
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return float(value)
    return value


def from_json(msg: Message, obj: Any) -> None:
    """Fill ``msg`` from its JSON form; fields the message does not have are dropped."""
    desc = msg.DESCRIPTOR
    if _special_from_json(msg, desc.full_name, obj):
        return
    if not isinstance(obj, dict):
        return
    for field in desc.fields:
        json_name, _, _ = _spec(desc, field)
        value = obj if json_name == "" else obj.get(json_name)
        if value is None:
            continue
        if _is_map(field):
            target = getattr(msg, field.name)
            value_field = field.message_type.fields_by_name["value"]
            for k, v in value.items():
                if value_field.message_type is not None:
                    from_json(target[k], v)
                else:
                    target[k] = _scalar_from_json(value_field, v)
        elif field.is_repeated:
            target = getattr(msg, field.name)
            for v in value:
                if field.message_type is not None:
                    from_json(target.add(), v)
                else:
                    target.append(_scalar_from_json(field, v))
        elif field.message_type is not None:
            sub = getattr(msg, field.name)
            sub.SetInParent()
            from_json(sub, value)
        else:
            setattr(msg, field.name, _scalar_from_json(field, value))
