"""Errors the console reports to an operator as one line with an exit code.

Exit codes follow the command contract: 1 failed, 2 bad input or refused, 3 blocked.
"""

from __future__ import annotations

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_BLOCKED = 3


class KreaError(Exception):
    """An error with a one-line message meant for the operator."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class BadInput(KreaError):
    """The operator asked for something that cannot be done as given (exit code 2)."""

    exit_code = EXIT_BAD_INPUT


class Unavailable(KreaError):
    """Something the command reads from is not there or refused: an API server that does
    not answer, a Prometheus that is down, RBAC that forbids a list, a CRD that is not
    installed (exit code 1). The message names the part and the fix."""

    exit_code = EXIT_FAILED
