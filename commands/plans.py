"""What every write command does with its plan, once: ``--dry-run`` prints it (as text, or
as data with ``-o json|yaml``), a refused plan is exit 2, otherwise it asks (``--yes``
skips it; stdin that is not a terminal refuses with exit 2; more than one node: type the
count), hands the plan to the console's one executor, prints what ran and exits 0, 1
(failed or stopped) or 3 (blocked).

``nodes evict|restore``, ``burst pause|unpause|migrate`` and ``train launch|resume`` build
their plans through the console and call :func:`run_plan`; each says in one function what
a blocked run leaves behind.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from commands.output import OutputFormat, emit, render
from krea_ops.errors import EXIT_BLOCKED, BadInput, KreaError

if TYPE_CHECKING:
    from krea_ops.console import Console
    from krea_ops.runbook.execute import RunResult
    from krea_ops.runbook.plan import Plan


# what follows a run: data fields, text, and the error to exit with (None: exit 0)
After = tuple[dict[str, Any], str, "KreaError | None"]


class PlanFormat(enum.StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


PlanOutput = typer.Option(
    PlanFormat.table,
    "--output",
    "-o",
    metavar="FORMAT",
    help="table (the plan as text), json or yaml (the plan, and what ran, as data)",
    case_sensitive=False,
)
DryRunOption = typer.Option(
    False, "--dry-run", help="print the plan (every API call, the preflight) and change nothing"
)
YesOption = typer.Option(False, "--yes", "-y", help="do not ask; needed when stdin is no terminal")


def plan_text(plan: Plan) -> str:
    return "\n".join(plan.lines()) + "\n"


def confirm(plan: Plan) -> None:
    """Ask on the terminal; BadInput (exit 2) when there is none or the answer is no."""
    if not sys.stdin.isatty():
        raise BadInput(
            f"{plan.action} writes to the cluster and stdin is not a terminal to confirm on: "
            "pass --yes to run it (--dry-run shows the plan); nothing was changed"
        )
    count = len(plan.nodes)
    if count > 1:
        typed = typer.prompt(f"This acts on {count} nodes. Type {count} to go on", default="")
        if typed.strip() != str(count):
            raise BadInput("not confirmed; nothing was changed")
    elif not typer.confirm("Go on?", default=False):
        raise BadInput("not confirmed; nothing was changed")


def result_text(result: RunResult) -> str:
    out = []
    for step in result.steps:
        out.append(f"{step.index}. {step.status}: {step.description}")
        out.extend(f"     {line}" for line in step.lines)
    out.append(f"Result: {result.status}")
    return "\n".join(out) + "\n"


def blocked_plainly(result: RunResult) -> str:
    """The one line of a blocked run that leaves nothing particular behind."""
    return (
        f"{result.plan.action} blocked: {'; '.join(result.blocked)} "
        "(run the command again to go on)"
    )


def exit_for(result: RunResult, blocked: Callable[[RunResult], str] = blocked_plainly) -> None:
    """Exit 1 for a run that failed or stopped, 3 (with ``blocked``'s line) for one a
    budget or a wait held; return for one that is done."""
    plan = result.plan
    if result.stopped:
        raise KreaError(f"{plan.action} stopped: {result.stopped}")
    if result.failed:
        raise KreaError(f"{plan.action} failed: {'; '.join(result.failed)}")
    if result.blocked:
        raise KreaError(blocked(result), exit_code=EXIT_BLOCKED)


def run_plan(
    console: Console,
    plan: Plan,
    *,
    dry_run: bool,
    yes: bool,
    output: PlanFormat,
    blocked: Callable[[RunResult], str] = blocked_plainly,
    dry_data: Callable[[PlanFormat], str] | None = None,
    after: Callable[[RunResult], After] | None = None,
) -> None:
    """Print, ask, run, report. ``dry_data``: what ``--dry-run -o json|yaml`` prints
    instead of the plan as data (``train launch``: the JobSet itself). ``after``: what
    follows a run that is done (``nodes validate`` waits for its Jobs): its fields join
    the data printed, its text follows the result's, and its error is raised last."""
    data = output is not PlanFormat.table
    if dry_run:
        if data:
            text = (
                dry_data(output)
                if dry_data is not None
                else render([plan.as_dict()], OutputFormat(output.value))
            )
        else:
            text = plan_text(plan)
        emit(text)
        if plan.refused:
            raise BadInput(plan.refused)
        return
    if not data:
        emit(plan_text(plan))
    if plan.refused:
        raise BadInput(f"{plan.refused}; nothing was changed")
    if not yes and not plan.writes_nothing:
        confirm(plan)
    result = console.execute(plan)
    fields: dict[str, Any] = {}
    text, error = "", None
    if after is not None and result.status == "done":
        if not data:
            emit(result_text(result))
        fields, text, error = after(result)
        if not data:
            emit(text)
    elif not data:
        emit(result_text(result))
    if data:
        row = {"plan": plan.as_dict(), "result": result.as_dict(), **fields}
        emit(render([row], OutputFormat(output.value)))
    exit_for(result, blocked)
    if error is not None:
        raise error
