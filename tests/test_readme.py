"""The README's two fresh-machine commands stay true, and CI runs exactly the test one."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```sh\n(.+?)\n```", text, flags=re.S)[:2]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    _main_job, test_command = _readme_commands()
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines
    assert "pytest" in test_command


def test_main_job_command_names_existing_paths_and_a_real_command() -> None:
    main_job, _ = _readme_commands()
    assert "krea-ops" in main_job
    for token in main_job.split():
        if token.startswith("tests/fixtures/"):
            assert (ROOT / token).is_dir(), token


def test_train_advise_runs_as_the_readme_shows_it() -> None:
    """Found: ``train advise`` as the README's command table showed it failed on a missing
    option. The row gives the options it needs; with numbers in their places it runs."""
    from tests.conftest import cli

    text = (ROOT / "README.md").read_text()
    [shown] = re.findall(r"`(train advise[^`]*)`", text)
    args = shown.replace(" S ", " 30 ").replace(" N", " 512").split()
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Checkpoint every ")
