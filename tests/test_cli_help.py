"""Every command answers --help (the contract in CLI.md documents each through it)."""

from __future__ import annotations

import pytest
import typer

from commands.main import app, invoke


def _paths(command, prefix=()):  # type: ignore[no-untyped-def]
    yield prefix
    for name, sub in getattr(command, "commands", {}).items():
        yield from _paths(sub, (*prefix, name))


ALL = list(_paths(typer.main.get_command(app)))


def test_the_exporter_commands_of_the_contract_exist() -> None:
    assert {("version",), ("exporter", "run"), ("exporter", "once")} <= set(ALL)


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "krea-ops")
def test_help_renders(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert invoke([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage: krea-ops" in out
