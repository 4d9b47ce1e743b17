"""``python -m krea_ops.telemetry.rules [--window S] [--interval S]``: print the
Prometheus recording rules of the node summaries (see ``summary.py``) for a window."""

from __future__ import annotations

import argparse
import sys

from krea_ops.telemetry.summary import DEFAULT_INTERVAL_S, rule_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m krea_ops.telemetry.rules",
        description="Print the Prometheus recording rules of krea-ops' node summaries.",
    )
    parser.add_argument("--window", type=float, default=300.0, help="seconds (default 300)")
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds")
    parser.error = lambda message: parser.exit(2, f"error: {message}\n")  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    if args.window <= 0 or args.interval <= 0:
        parser.error("--window and --interval must be positive")
    sys.stdout.write(rule_text(args.window, args.interval))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
