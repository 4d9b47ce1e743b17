"""``krea-ops version``: what is installed, for bug reports and fleet audits."""

from __future__ import annotations

import platform

import typer

from commands.common import OutputOption
from commands.output import OutputFormat, emit, render
from krea_ops import __version__

PACKAGES = (
    "kubernetes",
    "prometheus-client",
    "prometheus-api-client",
    "nvidia-ml-py",
    "textual",
    "typer",
)


def _installed(name: str) -> str | None:
    from importlib import metadata  # (~10 ms: only this command needs it)

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def version(output: OutputFormat = OutputOption) -> None:
    """Print the krea-ops version and the versions of the clients it talks through."""
    row: dict[str, str | None] = {"krea_ops": __version__, "python": platform.python_version()}
    for name in PACKAGES:
        row[name.replace("-", "_")] = _installed(name)
    if output is OutputFormat.table:
        emit(f"krea-ops {__version__}\n")
        return
    emit(render([row], output))


def register(app: typer.Typer) -> None:
    app.command("version", rich_help_panel="Setup")(version)
