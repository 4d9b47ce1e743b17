"""Kubernetes ``Status`` errors, shaped and worded as the real API server returns them."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error response: HTTP code, Status reason, message and optional details."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        if not self.reason:
            del body["reason"]  # StatusReasonUnknown (""), omitted as Status omits it
        return body


def _resource(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_resource(group, plural)} "{name}" not found',
        {"name": name, "group": group, "kind": plural},
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_resource(group, plural)} "{name}" already exists',
        {"name": name, "group": group, "kind": plural},
    )


def conflict(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_resource(group, plural)} "{name}": the object '
        "has been modified; please apply your changes to the latest version and try again",
        {"name": name, "group": group, "kind": plural},
    )


def precondition_failed(
    group: str, plural: str, namespace: str, name: str, detail: str
) -> ApiError:
    """A delete whose ``preconditions`` (uid, resourceVersion) the object does not meet:
    the storage layer's invalid-object error, as a 409 Conflict."""
    key = "/".join(p for p in ("/registry", plural, namespace, name) if p)
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_resource(group, plural)} "{name}": StorageError: '
        f"invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: "
        f"Precondition failed: {detail}",
        {"name": name, "group": group, "kind": plural},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(group: str, kind: str, name: str, errors: list[Any]) -> ApiError:
    qualified = f"{kind}.{group}" if group else kind
    causes = [{"reason": e.type, "message": e.message, "field": e.field} for e in errors]
    listed = ", ".join(str(e) for e in errors)
    message = f'{qualified} "{name}" is invalid: ' + (f"[{listed}]" if len(errors) > 1 else listed)
    return ApiError(
        422, "Invalid", message, {"name": name, "group": group, "kind": kind, "causes": causes}
    )


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(accepted: list[str]) -> ApiError:
    """negotiation.NewUnsupportedMediaTypeError: a PATCH whose Content-Type is not one of
    the patch types the resource accepts."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def forbidden(group: str, plural: str, name: str, why: str) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f'{_resource(group, plural)} "{name}" is forbidden: {why}',
        {"name": name, "group": group, "kind": plural},
    )


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)
