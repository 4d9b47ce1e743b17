"""Every command answers --help (the contract in CLI.md documents each through it), and
the help reads the way click and Typer users know it at 80 columns: every flag name whole,
one ``[default: …]`` per flag, click's type names (TEXT, INTEGER, PATH, the choice list)
and none on a flag, the global options listed once, prose filled to the width."""

from __future__ import annotations

import itertools
import re

import pytest

from commands.conventions import GLOBAL_OPTIONS
from commands.main import command, invoke
from tests.conftest import cli


def _paths(cmd, prefix=()):  # type: ignore[no-untyped-def]
    yield prefix
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _paths(sub, (*prefix, name))


ALL = list(_paths(command()))
IDS = [" ".join(p) or "krea-ops" for p in ALL]
# How Typer 0.29 writes types (``<str>``, ``<int range>``), which click users do not know.
TYPER_TYPES = re.compile(r"<(str|bool|int|float|path|file|dir)( range)?>")


def _command(path: tuple[str, ...]):  # type: ignore[no-untyped-def]
    cmd = command()
    for name in path:
        cmd = cmd.commands[name]
    return cmd


@pytest.fixture
def help_of(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "80")

    def render(path: tuple[str, ...]) -> str:
        capsys.readouterr()
        assert invoke([*path, "--help"]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        return out

    return render


def test_the_exporter_commands_of_the_contract_exist() -> None:
    assert {("version",), ("exporter", "run"), ("exporter", "once")} <= set(ALL)


@pytest.mark.parametrize("path", ALL, ids=IDS)
def test_help_fits_80_columns_with_every_flag_whole(path, help_of) -> None:  # type: ignore[no-untyped-def]
    out = help_of(path)
    assert f"Usage: krea-ops {' '.join(path)}".rstrip() in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out  # rich's mark for a cut cell
    for param in _command(path).params:
        for flag in [*param.opts, *param.secondary_opts]:
            if flag.startswith("-"):
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", out), flag


@pytest.mark.parametrize("path", ALL, ids=IDS)
def test_types_are_shown_as_click_shows_them(path, help_of) -> None:  # type: ignore[no-untyped-def]
    out = help_of(path)
    assert not TYPER_TYPES.search(out), TYPER_TYPES.search(out)
    for line in out.splitlines():
        # a flag takes no value, so no type follows it
        if re.match(r"│\s+(--debug|--help|--api-only|--read-only)\s", line):
            assert not re.search(r"\b(BOOLEAN|TEXT|bool)\b", line), line


def test_types_of_the_kinds_we_use(help_of) -> None:  # type: ignore[no-untyped-def]
    gpus = help_of(("gpus",))
    assert re.search(r"│ --node +TEXT ", gpus)
    assert re.search(r"│ --output +-o +FORMAT ", gpus)
    fabric = help_of(("fabric",))
    assert re.search(r"│ --kind +\[all\|ib\|nvlink\] ", fabric)
    assert re.search(r"│ --top +INTEGER RANGE \[x>=0\] ", fabric)
    assert re.search(r"│ --state +PATH ", help_of(("demo",)))
    assert re.search(r"│ --gpu +INTEGER ", help_of(("sim", "inject")))
    show = help_of(("nodes", "show"))
    assert "Usage: krea-ops nodes show [OPTIONS] NODE " in show
    assert re.search(r"│ \* +node +TEXT ", show)


@pytest.mark.parametrize("path", ALL, ids=IDS)
def test_one_default_per_flag(path: tuple[str, ...]) -> None:
    # Typer appends "[default: X]" to every option with a default other than None or
    # False; a help text that also says "(default: X)" shows it twice.
    for param in _command(path).params:
        shown = param.default not in (None, False) and getattr(param, "show_default", True)
        if shown:
            assert "default" not in (getattr(param, "help", "") or ""), param.opts


@pytest.mark.parametrize("path", ALL, ids=IDS)
def test_the_global_options_are_listed_once(path, help_of) -> None:  # type: ignore[no-untyped-def]
    out = help_of(path)
    assert out.count("Global options") == 1
    for name in GLOBAL_OPTIONS:
        assert len(re.findall(rf"│ --{name}(?![\w-])", out)) == 1, name


@pytest.mark.parametrize("path", ALL, ids=IDS)
def test_prose_is_filled_to_the_width(path, help_of) -> None:  # type: ignore[no-untyped-def]
    # The description (between the usage line and the first panel) wraps at the
    # terminal, not at the source's line breaks: only a paragraph's last line is short.
    lines = help_of(path).splitlines()
    start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    out_lines = [line.rstrip() for line in lines[start:end]]
    for line, after in itertools.pairwise(out_lines):
        if line and after:  # not a paragraph's last line
            assert len(line) >= 60, (line, after)


def test_the_console_script_at_80_columns(help_of) -> None:  # type: ignore[no-untyped-def]
    # As a user runs it: COLUMNS=80 krea-ops train advise --help (the longest flag of the
    # contract), and a group alone, in a fresh process.
    result = cli("train", "advise", "--help", env={"COLUMNS": "80"})
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.rstrip() == help_of(("train", "advise")).rstrip()
    assert "--failures-per-1000-node-days " in result.stdout
    alone = cli("nodes", env={"COLUMNS": "80"})
    assert (alone.returncode, alone.stderr) == (0, "")
    assert alone.stdout.rstrip() == help_of(("nodes",)).rstrip()
