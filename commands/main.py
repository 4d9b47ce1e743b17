"""The ``krea-ops`` command: global options, command groups, one-line errors.

Errors print one line on stderr and exit with the contract's codes (2 bad input or
refused, 1 failed, 3 blocked); ``--debug`` shows the traceback instead. A command group
given without its subcommand (``krea-ops nodes``) prints its help and exits 0, as
``krea-ops`` alone does. The conventions every command shares (global options after the
subcommand, click-style help) are in ``commands.conventions``.
"""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import typer

from commands import (
    burst,
    controller,
    conventions,
    dashboard,
    exporter,
    fabric,
    gpus,
    nodes,
    queue,
    sim,
    train,
    version,
)
from krea_ops.errors import EXIT_BAD_INPUT, EXIT_FAILED, KreaError

# Typer may vendor click; reach its exception classes through the public BadParameter.
UsageError: type[Exception] = typer.BadParameter.__mro__[1]
ClickException: type[Exception] = typer.BadParameter.__mro__[2]

app = typer.Typer(
    name="krea-ops",
    no_args_is_help=True,
    help="Operator's console for GPU training clusters on Kubernetes.",
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


@app.callback()
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


version.register(app)
dashboard.register(app)
gpus.register(app)
fabric.register(app)
app.add_typer(nodes.app, name="nodes", rich_help_panel="Fleet")
app.add_typer(queue.app, name="queue", rich_help_panel="Queue")
app.add_typer(burst.app, name="burst", rich_help_panel="Inference")
app.add_typer(train.app, name="train", rich_help_panel="Training")
app.add_typer(exporter.app, name="exporter", rich_help_panel="Services")
app.add_typer(controller.app, name="controller", rich_help_panel="Services")
app.add_typer(sim.app, name="sim", rich_help_panel="Simulator")


@functools.cache
def command() -> Any:
    """The click command tree of ``app`` with the shared conventions applied (built once:
    every ``invoke`` in a process, the tests' included, uses the same tree)."""
    return conventions.apply(typer.main.get_command(app))


def invoke(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code, turning every error into one line."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        result = command().main(args=args, prog_name="krea-ops", standalone_mode=False)
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
    sys.exit(invoke())
