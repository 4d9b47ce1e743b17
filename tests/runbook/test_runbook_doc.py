"""Every ``krea-ops`` command the runbook (docs/operations.md) tells an operator to type
is one the CLI accepts: the subcommand exists, and click parses the line with the
command's own parser (every flag known, every choice valid, every argument given). The
commands are parsed, never run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from commands.main import command

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def runbook_commands() -> list[str]:
    """The ``krea-ops ...`` lines of the fenced blocks, and the inline ones that name a
    whole command (they hold a flag or an argument), synopses aside."""
    text = DOC.read_text()
    found: list[str] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.strip()
            if line.startswith("krea-ops "):
                found.append(line)
    for inline in re.findall(r"`(krea-ops [^`]+)`", text):
        inline = " ".join(inline.split())
        if "[" in inline or re.search(r" [A-Z]( |$)", inline):
            continue  # a synopsis ([--flag V], --gpu I), not a line to type
        if " -" in inline or re.search(r" [a-z]+ [A-Za-z0-9/._-]+$", inline):
            found.append(inline)
    return found


def _parse(line: str) -> None:
    words = shlex.split(line, comments=True)[1:]
    cmd: Any = command()
    path = ["krea-ops"]
    while hasattr(cmd, "commands"):  # a group (Typer carries its own copy of click)
        assert words and words[0] in cmd.commands, (
            f"{line}: no command {' '.join(path)} {words[:1]}"
        )
        name = words.pop(0)
        path.append(name)
        cmd = cmd.commands[name]
    try:
        cmd.make_context(" ".join(path), list(words), resilient_parsing=False)
    except Exception as exc:
        if type(exc).__name__ == "Exit":  # --help
            return
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        raise AssertionError(f"{line}: {message}") from None


def test_the_runbook_names_its_commands() -> None:
    lines = runbook_commands()
    for wanted in ("nodes evict", "nodes restore", "train resume", "burst pause", "fabric"):
        assert any(line.startswith(f"krea-ops {wanted}") for line in lines), wanted


@pytest.mark.parametrize("line", runbook_commands())
def test_every_command_in_the_runbook_parses(line: str) -> None:
    _parse(line)
