"""The house style says mypy-clean: the core, the commands and the screens type-check (the
seams between the core and the UI layers with no explicit ``Any``: pyproject.toml), and
the core, the simulator aside, under ``--strict``; the benchmarks type-check too."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def test_mypy_passes_on_the_product_and_the_benchmarks() -> None:
    """The product's packages (pyproject.toml) and benchmarks/; what the benchmarks import
    from elsewhere (tests/) is followed silently: it is checked where it lives."""
    result = _mypy("--follow-imports=silent", "krea_ops", "commands", "screens", "benchmarks")
    assert result.returncode == 0, result.stdout[-4000:]


def test_the_core_passes_mypy_strict() -> None:
    result = _mypy("--strict", "krea_ops", "--exclude", "^krea_ops/sim/")
    assert result.returncode == 0, result.stdout[-4000:]
