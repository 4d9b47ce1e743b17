"""A passing validation recorded on a node, as ``krea-ops nodes validate`` leaves it in the
node's ``krea.ai/validation`` annotation: for tests whose subject is not validation but
which restore a node krea-ops evicted (``nodes restore`` refuses one with no passing
validation since its eviction, unless ``--force``)."""

from __future__ import annotations

import time
from typing import Any

from krea_ops.kube.cluster import Cluster
from krea_ops.validation import RESULT_ANNOTATION, Check, Validation

CHECKS = (
    Check("dcgm", True, "12 tests passed"),
    Check("nccl", True, "bus bandwidth 476.0 GB/s", 476.0, "GB/s", 450.0, "nominal"),
)


def passing(node: str, at: float | None = None) -> Validation:
    """A quick validation of ``node`` that passed at ``at`` (now when None)."""
    return Validation(node, "quick", time.time() if at is None else at, CHECKS,
                      job="krea-ops/test")  # fmt: skip


def pass_validation(target: Cluster | Any, node: str, at: float | None = None) -> Validation:
    """Record a passing validation of ``node`` at ``at`` (now when None: call it after the
    eviction) on the node. ``target``: the product's :class:`Cluster`, or a simulated API
    server (anything with ``api_client()``)."""
    return record_validation(target, passing(node, at))


def record_validation(target: Cluster | Any, v: Validation) -> Validation:
    """Put ``v`` in its node's ``krea.ai/validation`` annotation (a merge patch), where
    ``nodes validate`` records its result."""
    if not isinstance(target, Cluster):
        with target.api_client() as api:
            return record_validation(Cluster(api, timeout_s=30), v)
    answer = target.request(
        f"patch node {v.node}",
        "PATCH",
        f"/api/v1/nodes/{v.node}",
        body={"metadata": {"annotations": {RESULT_ANNOTATION: v.annotation()}}},
        content_type="application/merge-patch+json",
    )
    assert answer.ok, (answer.status, answer.body)
    return v
