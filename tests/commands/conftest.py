"""What the write commands' tests share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def audit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The audit log of this test's commands (and no settings file of the user's)."""
    log = tmp_path / "audit" / "audit.jsonl"
    monkeypatch.setenv("KREA_OPS_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("KREA_OPS_AUDIT_LOG", str(log))
    return log
