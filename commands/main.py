"""The ``krea-ops`` command: global options, command groups, one-line errors.

Errors print one line on stderr and exit with the contract's codes (2 bad input or
refused, 1 failed, 3 blocked); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence

import typer

from commands import burst, dashboard, exporter, fabric, gpus, nodes, queue, sim, train, version
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
        help="kubeconfig path (default: $KUBECONFIG, ~/.kube/config, in-cluster)",
    ),
    context: str = typer.Option(None, "--context", help="kubeconfig context"),
    prometheus: str = typer.Option(
        None,
        "--prometheus",
        help="Prometheus URL (default: $KREA_OPS_PROMETHEUS_URL, cluster ConfigMap)",
    ),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks on errors"),
) -> None:
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
app.add_typer(sim.app, name="sim", rich_help_panel="Simulator")


def invoke(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code, turning every error into one line."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="krea-ops", standalone_mode=False)
    except UsageError as exc:
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
