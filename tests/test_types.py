"""The house style says mypy-clean: the core, the commands and the screens type-check."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_mypy_passes_on_the_product() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:]
