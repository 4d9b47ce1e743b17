"""The ``krea-ops`` command: global options, command groups, one-line errors.

Errors print one line on stderr and exit with the contract's codes (2 bad input or
refused, 1 failed, 3 blocked); ``--debug`` shows the traceback instead. A command group
given without its subcommand (``krea-ops nodes``) prints its help and exits 0, as
``krea-ops`` alone does. The conventions every command shares (global options after the
subcommand, click-style help) are in ``commands.conventions``.
"""

from __future__ import annotations

import functools
import gc
import importlib
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import typer

import commands
from commands import conventions
from krea_ops.errors import EXIT_BAD_INPUT, EXIT_FAILED, KreaError

# Typer may vendor click; reach its exception classes through the public BadParameter.
UsageError: type[Exception] = typer.BadParameter.__mro__[1]
ClickException: type[Exception] = typer.BadParameter.__mro__[2]


def main_callback(
    ctx: typer.Context,
    kubeconfig: str = typer.Option(
        None,
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig path (default: $KUBECONFIG, ~/.kube/config, in-cluster)",
    ),
    context: str = typer.Option(None, "--context", metavar="NAME", help="kubeconfig context"),
    prometheus: str = typer.Option(
        None,
        "--prometheus",
        metavar="URL",
        help="Prometheus URL, http://HOST:PORT (default: $KREA_OPS_PROMETHEUS_URL, then "
        "ConfigMap krea-ops/krea-ops-config)",
    ),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks on errors"),
) -> None:
    """Options here may also follow the subcommand (``krea-ops gpus --context c``)."""
    ctx.obj = {
        "kubeconfig": kubeconfig,
        "context": context,
        "prometheus_url": prometheus,
        "debug": debug or None,
    }


# The command modules in help order: the commands each registers at the top level, or
# the name, help panel and ``app`` attribute of its group.
TOP_LEVEL = {
    "version": ("version",),
    "dashboard": ("dashboard", "demo"),
    "gpus": ("gpus",),
    "fabric": ("fabric",),
}
GROUPS = {
    "nodes": "Fleet",
    "queue": "Queue",
    "burst": "Inference",
    "train": "Training",
    "exporter": "Services",
    "controller": "Services",
    "sim": "Simulator",
}
# a global option that takes a value (``--kubeconfig PATH``), to find the subcommand
VALUED_GLOBALS = frozenset({"--kubeconfig", "--context", "--prometheus"})


def build(module: str | None = None) -> typer.Typer:
    """The Typer app with every command module, or with ``module``'s commands only: a
    command line that names its subcommand imports and builds that one alone (the other
    modules' imports and click objects are ~60 ms of a read command's start-up)."""
    app = typer.Typer(
        name="krea-ops",
        no_args_is_help=True,
        help="Operator's console for GPU training clusters on Kubernetes.",
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
    )
    app.callback()(main_callback)
    for name in (*TOP_LEVEL, *GROUPS):
        if module is not None and name != module:
            continue
        loaded = importlib.import_module(f"commands.{name}")
        if name in GROUPS:
            app.add_typer(loaded.app, name=name, rich_help_panel=GROUPS[name])
        else:
            loaded.register(app)
    return app


@functools.cache
def command(module: str | None = None) -> Any:
    """The click command tree with the shared conventions applied, of every module or of
    ``module``'s alone (each built once: every ``invoke`` in a process, the tests'
    included, uses the same tree)."""
    return conventions.apply(typer.main.get_command(build(module)))


def module_of(args: Sequence[str]) -> str | None:
    """The command module the subcommand of ``args`` lives in, or None (no subcommand,
    help asked of the whole CLI, or a name that is not ours: the full tree answers)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return None
        if arg.startswith("-"):
            i += 2 if arg in VALUED_GLOBALS else 1
            continue
        if arg in GROUPS:
            return arg
        return next((m for m, names in TOP_LEVEL.items() if arg in names), None)
    return None


def invoke(argv: Sequence[str] | None = None, *, whole: bool = True) -> int:
    """Run the CLI and return its exit code, turning every error into one line.
    ``whole``: with every command module (the tests' tree); else with the subcommand's
    module only where the command line names one (``run``: one command per process)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    tree = command() if whole else command(module_of(args))
    try:
        result = tree.main(args=args, prog_name="krea-ops", standalone_mode=False)
    except UsageError as exc:
        # A group without its subcommand: the help is already on stdout (Typer prints it
        # while raising; it tells this case apart by the class name too). It answered
        # what was asked, so it is no error line and exit 0, as for `krea-ops` alone.
        if type(exc).__name__ == "NoArgsIsHelpError":
            message = exc.format_message()  # type: ignore[attr-defined]
            if message:  # a formatter that returns the help instead of printing it
                print(message)
            return 0
        ctx = getattr(exc, "ctx", None)
        path = ctx.command_path if ctx is not None else "krea-ops"
        print(f"error: {exc.format_message()} (see {path} --help)", file=sys.stderr)  # type: ignore[attr-defined]
        return EXIT_BAD_INPUT
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        return EXIT_FAILED
    except ClickException as exc:
        print(f"error: {exc.format_message()}", file=sys.stderr)  # type: ignore[attr-defined]
        return int(getattr(exc, "exit_code", EXIT_FAILED))
    except KreaError as exc:
        if debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            traceback.print_exc()
        print(
            f"error: unexpected {type(exc).__name__}: {exc} (rerun with --debug)", file=sys.stderr
        )
        return EXIT_FAILED
    return result if isinstance(result, int) else 0


def run() -> None:
    """The console script: one command, then the process ends. Every object still alive
    is frozen before it does (``gc.freeze``), or the interpreter's last act is a full
    collection walking all of them, the modules' included: 0.08 s of a 64-node
    ``fabric``'s 0.6 s (docs/benchmarks.md, "The exit, frozen"). Nothing then depends on a
    collection: files are closed by the commands that opened them, and ``atexit``
    handlers still run."""
    commands.ONE_SHOT = True
    code = invoke(whole=False)
    gc.freeze()
    sys.exit(code)
