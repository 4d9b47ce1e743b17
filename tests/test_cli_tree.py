"""The console script builds only the command module its command line names: the same
commands, options and help as the whole tree, without importing the others."""

from __future__ import annotations

import subprocess
import sys

import pytest

from commands.main import command, invoke, module_of


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["gpus", "-o", "json"], "gpus"),
        (["--kubeconfig", "/k", "--prometheus", "http://p", "nodes", "list"], "nodes"),
        (["--kubeconfig=/k", "fabric"], "fabric"),
        (["--debug", "queue", "list"], "queue"),
        (["demo", "--nodes", "8"], "dashboard"),
        (["version"], "version"),
        ([], None),
        (["--help"], None),
        (["no-such-command"], None),
        (["--kubeconfig", "gpus"], None),  # the path is "gpus": no subcommand given
    ],
)
def test_module_of_finds_the_subcommand_after_global_options(
    argv: list[str], module: str | None
) -> None:
    assert module_of(argv) == module


@pytest.mark.parametrize(
    "argv",
    [["gpus", "--help"], ["nodes", "list", "--help"], ["fabric", "--help"], ["queue", "--help"]],
)
def test_a_lone_module_gives_the_help_of_the_whole_tree(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert invoke(argv) == 0
    whole = capsys.readouterr().out
    assert invoke(argv, whole=False) == 0
    assert capsys.readouterr().out == whole


def test_the_console_script_imports_only_the_named_module() -> None:
    code = (
        "import sys\n"
        "from commands.main import invoke\n"
        "invoke(['version'], whole=False)\n"
        "print(sorted(m for m in sys.modules if m.startswith('commands.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = out.strip().splitlines()[-1]
    assert "commands.version" in loaded
    for other in ("commands.sim", "commands.train", "commands.controller", "commands.nodes"):
        assert other not in loaded
    assert command("version") is command("version")
