"""Evict pods through the Eviction subresource (``policy/v1``), as ``kubectl drain`` does.

``evict`` makes one call and says what happened in a typed outcome; it never raises for an
answer the server gives. The API server's answers (``pkg/registry/core/pod/storage/
eviction.go``):

- 201 with a ``Success`` Status: the pod is being deleted (``EVICTED``);
- 429 ``TooManyRequests`` with a ``DisruptionBudget`` cause: "Cannot evict pod as it would
  violate the pod's disruption budget.", the cause naming the budget ("The disruption
  budget inference needs 2 healthy pods and has 2 currently", or "... is still being
  processed by the server." with ``Retry-After: 10`` while the disruption controller has
  not yet seen the budget's spec) (``BLOCKED``); a 429 without that cause is the server
  shedding load (``THROTTLED``);
- 404: the pod is gone already; 409 on a UID precondition: the pod of that name is a new
  one, so the pod meant is gone (``GONE``);
- anything else, e.g. 500 "This pod has more than one PodDisruptionBudget, which the
  eviction subresource does not support." or 403 (``FAILED``).

``evict_until`` retries ``BLOCKED`` and ``THROTTLED`` with jittered backoff, 1 s doubling
to 30 s, never sooner than a ``Retry-After``, until a deadline. It keeps no state between
calls, so a drain runs one per pod on a thread pool (``evict_all``).
"""

from __future__ import annotations

import dataclasses
import enum
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from krea_ops.errors import Unavailable
from krea_ops.kube.cluster import ApiAnswer, Cluster

FIRST_DELAY_S = 1.0
MAX_DELAY_S = 30.0
JITTER = 0.2  # ± this share of each delay, so evictions blocked together spread out
CONCURRENCY = 8

_BUDGET = re.compile(r"^The disruption budget (\S+) ")
# A UID precondition the pod of that name no longer meets: the eviction REST handler,
# which first adds the DisruptionTarget condition to the pod it read (1.31+: "the UID in
# the precondition (A) does not match the UID in record (B). The object might have been
# deleted and then recreated"), or the delete it then makes ("Precondition failed: UID in
# precondition: A, UID in object meta: B").
_UID_MISMATCH = ("the UID in the precondition", "UID in precondition")


class Outcome(enum.StrEnum):
    EVICTED = "evicted"
    BLOCKED = "blocked"  # a PodDisruptionBudget allows no disruption now
    THROTTLED = "throttled"  # the API server is shedding load
    GONE = "gone"  # no such pod (any more)
    FAILED = "failed"


RETRIED = frozenset({Outcome.BLOCKED, Outcome.THROTTLED})


@dataclass(frozen=True)
class EvictionResult:
    namespace: str
    name: str
    outcome: Outcome
    message: str = ""  # the server's words (ours when it could not be reached)
    budget: str | None = None  # the PodDisruptionBudget the server named
    retry_after_s: float | None = None
    http_status: int | None = None
    attempts: int = 1

    @property
    def done(self) -> bool:
        """The pod will not run any more: evicted, or not there to evict."""
        return self.outcome in (Outcome.EVICTED, Outcome.GONE)

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.name}"

    def summary(self) -> str:
        """One line: ``pod ml/inf-1 blocked by PodDisruptionBudget inference: ...``."""
        if self.outcome is Outcome.BLOCKED and self.budget:
            return f"pod {self.pod} blocked by PodDisruptionBudget {self.budget}: {self.message}"
        text = f"pod {self.pod} {self.outcome.value}"
        return f"{text}: {self.message}" if self.message else text


def _retry_after(answer: ApiAnswer) -> float | None:
    """Seconds from the ``Retry-After`` header (the API server sends whole seconds), else
    from the Status's ``details.retryAfterSeconds``."""
    if answer.retry_after:
        try:
            return max(float(answer.retry_after), 0.0)
        except ValueError:
            pass
    seconds = ((answer.body or {}).get("details") or {}).get("retryAfterSeconds")
    return float(seconds) if isinstance(seconds, int | float) and seconds > 0 else None


def _budget_cause(answer: ApiAnswer) -> tuple[bool, str | None, str]:
    """(a budget refused, its name, the cause's message) from a 429's Status."""
    causes = ((answer.body or {}).get("details") or {}).get("causes") or []
    for cause in causes:
        if isinstance(cause, dict) and cause.get("reason") == "DisruptionBudget":
            text = str(cause.get("message") or "")
            m = _BUDGET.match(text)
            return True, (m.group(1) if m else None), text
    return False, None, ""


def evict(
    cluster: Cluster,
    namespace: str,
    name: str,
    *,
    uid: str | None = None,
    grace_period_s: int | None = None,
    dry_run: bool = False,
) -> EvictionResult:
    """One eviction request. ``uid`` makes it evict only that pod, not a successor that
    took its name (a StatefulSet's or a JobSet's pods come back under the same name)."""
    options: dict[str, Any] = {}
    if uid:
        options["preconditions"] = {"uid": uid}
    if grace_period_s is not None:
        options["gracePeriodSeconds"] = grace_period_s
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if options:
        body["deleteOptions"] = options
    path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/eviction"
    try:
        answer = cluster.request(
            f"evict pod {namespace}/{name}",
            "POST",
            path,
            body=body,
            query={"dryRun": "All" if dry_run else None},
        )
    except Unavailable as exc:
        return EvictionResult(namespace, name, Outcome.FAILED, str(exc))

    def result(outcome: Outcome, message: str, budget: str | None = None) -> EvictionResult:
        return EvictionResult(
            namespace, name, outcome, message, budget, _retry_after(answer), answer.status
        )

    status = (answer.body or {}).get("status")
    if answer.ok and status != "Failure":
        return result(Outcome.EVICTED, "")
    message = answer.message or answer.reason or f"HTTP {answer.status}"
    if answer.status == 429:
        refused, budget, cause = _budget_cause(answer)
        if refused:
            return result(Outcome.BLOCKED, f"{message} {cause}".strip(), budget)
        return result(Outcome.THROTTLED, message)
    if answer.status == 404:
        return result(Outcome.GONE, message)
    if answer.status == 409 and uid and any(text in message for text in _UID_MISMATCH):
        return result(Outcome.GONE, f"replaced by a new pod of the same name ({message})")
    return result(Outcome.FAILED, message)


def backoff(attempt: int, rng: random.Random) -> float:
    """The wait after the ``attempt``-th refusal: 1 s doubling to 30 s, ± 20 %."""
    base = min(MAX_DELAY_S, FIRST_DELAY_S * 2.0 ** (attempt - 1))
    return min(MAX_DELAY_S, base * (1 + JITTER * (2 * rng.random() - 1)))


def evict_until(
    cluster: Cluster,
    namespace: str,
    name: str,
    *,
    deadline: float,
    uid: str | None = None,
    grace_period_s: int | None = None,
    dry_run: bool = False,
    cancel: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] | None = None,
    rng: random.Random | None = None,
) -> EvictionResult:
    """Evict, retrying budget refusals and load shedding until ``deadline`` (on
    ``clock``'s scale) or ``cancel`` is set; the last result, with how many calls it
    took. A ``Retry-After`` longer than the backoff is waited out in full."""
    rng = rng or random.Random()
    pause = sleep or (cancel.wait if cancel is not None else time.sleep)
    attempt = 0
    while True:
        attempt += 1
        result = evict(
            cluster, namespace, name, uid=uid, grace_period_s=grace_period_s, dry_run=dry_run
        )
        result = dataclasses.replace(result, attempts=attempt)
        remaining = deadline - clock()
        if result.outcome not in RETRIED or remaining <= 0:
            return result
        if cancel is not None and cancel.is_set():
            return result
        delay = max(backoff(attempt, rng), result.retry_after_s or 0.0)
        pause(min(delay, remaining))
        if cancel is not None and cancel.is_set():
            return result


def evict_all(
    cluster: Cluster,
    pods: Iterable[tuple[str, str, str | None]],
    *,
    deadline: float,
    concurrency: int = CONCURRENCY,
    grace_period_s: int | None = None,
    dry_run: bool = False,
    cancel: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[EvictionResult]:
    """Evict ``(namespace, name, uid)`` pods in parallel, each retried until
    ``deadline``; results in the order given."""
    todo = list(pods)
    if not todo:
        return []

    def one(item: tuple[str, str, str | None]) -> EvictionResult:
        namespace, name, uid = item
        return evict_until(
            cluster,
            namespace,
            name,
            deadline=deadline,
            uid=uid,
            grace_period_s=grace_period_s,
            dry_run=dry_run,
            cancel=cancel,
            clock=clock,
        )

    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(todo)))) as pool:
        return list(pool.map(one, todo))
