"""Where a node stands on validation, read from the node alone: its last result (the
``krea.ai/validation`` annotation), whether it waits for repair (``krea.ai/needs-repair``),
whether it still carries the pending-validation taint, and, for a node krea-ops evicted
(``krea.ai/evicted-at``), whether it was validated since. What ``nodes show`` and the node
screen show; ``nodes restore`` asks the same question of the same annotations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from krea_ops.kube.times import parse_time
from krea_ops.model import NodeInfo
from krea_ops.runbook.nodes import EVICTED_AT
from krea_ops.validation import (
    NEEDS_REPAIR_LABEL,
    PENDING_TAINT_KEY,
    RESULT_ANNOTATION,
    Validation,
)


@dataclass(frozen=True)
class NodeValidation:
    """A node's validation standing. ``last``: None when the node has none on record, or
    (``unreadable``) an annotation that does not parse; ``needs_repair``: the label's
    value (the failing checks); ``evicted_at``: when krea-ops evicted it, None when it is
    not out."""

    node: str
    last: Validation | None
    unreadable: bool = False
    needs_repair: str | None = None
    pending: bool = False
    evicted_at: float | None = None

    @property
    def since_eviction(self) -> bool | None:
        """Whether the last validation came after the eviction; None when not evicted."""
        if self.evicted_at is None:
            return None
        return self.last is not None and self.last.at >= self.evicted_at

    def as_dict(self) -> dict[str, Any]:
        return {
            "last": None if self.last is None else self.last.as_dict(),
            "unreadable": self.unreadable,
            "needs_repair": self.needs_repair,
            "pending": self.pending,
            "evicted_at": self.evicted_at,
            "since_eviction": self.since_eviction,
        }


def node_validation(info: NodeInfo) -> NodeValidation:
    text = info.annotations.get(RESULT_ANNOTATION)
    last = Validation.from_annotation(info.name, text)
    return NodeValidation(
        node=info.name,
        last=last,
        unreadable=bool(text) and last is None,
        needs_repair=info.labels.get(NEEDS_REPAIR_LABEL),
        pending=any(t.key == PENDING_TAINT_KEY for t in info.taints),
        evicted_at=parse_time(info.annotations.get(EVICTED_AT)),
    )
