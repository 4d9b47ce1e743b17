"""Property-based tests of every parser: malformed and adversarial input gives a value,
None, or one ``BadInput``/``Unavailable`` line, never another exception.

Profile ``ci`` (the default): derandomized, so every run tries the same examples and CI
never flakes on a new one; a bounded number of examples so the whole directory stays
within seconds on a loaded 2-core machine; no per-example deadline (a loaded machine is
slow, not wrong). ``HYPOTHESIS_PROFILE=explore`` runs many more, random examples, to
hunt for new failures by hand (then add each as a regression test).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=150,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "explore",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def one_line(message: str) -> bool:
    """An error an operator reads: non-empty, one line."""
    return bool(message.strip()) and "\n" not in message and "\r" not in message
