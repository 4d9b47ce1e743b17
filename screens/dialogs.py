"""Modal dialogs: the help screen (every key) and the confirm dialog for actions."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss_help", "Close"),
        Binding("question_mark", "dismiss_help", "Close"),
        Binding("q", "dismiss_help", "Close"),
    ]

    def __init__(self, sections: list[tuple[str, list[tuple[str, str]]]]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            for title, keys in self.sections:
                table = Table(title=title, title_justify="left", box=None, show_header=False)
                table.add_column(style="bold", no_wrap=True)
                table.add_column()
                for key, what in keys:
                    table.add_row(key, what)
                yield Static(table)
            yield Static(Text("Esc closes this help.", style="dim"))

    def action_dismiss_help(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """Shows a plan (one line per API call) and asks to confirm. Starts on Cancel; when
    the plan touches more than one node the operator types the count to confirm."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self,
        title: str,
        plan: list[str],
        *,
        nodes: int = 1,
        numbered: bool = True,
        refused: str | None = None,
    ) -> None:
        super().__init__()
        self.title_text = title
        self.plan = plan
        self.nodes = nodes
        self.numbered = numbered  # False: the lines are numbered already (a runbook Plan)
        self.refused = refused  # why this plan must not run: shown, with Cancel alone

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="confirm-body"):
            yield Static(Text(self.title_text, style="bold"))
            if self.numbered:
                yield Static("\n".join(f"{i}. {step}" for i, step in enumerate(self.plan, 1)))
            else:
                yield Static(Text("\n".join(self.plan)), id="confirm-plan")
            if self.refused:
                yield Static(Text(f"Refused: {self.refused}", style="bold red"))
            elif self.nodes > 1:
                yield Static(f"This affects {self.nodes} nodes: type {self.nodes} to confirm.")
                yield Input(placeholder=str(self.nodes), id="confirm-count")
            with Horizontal():
                yield Button("Cancel", id="cancel", variant="primary")
                if not self.refused:
                    yield Button("Run", id="run", variant="error")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "run":
            if self.nodes > 1:
                typed = self.query_one("#confirm-count", Input).value.strip()
                if typed != str(self.nodes):
                    self.notify(f"type {self.nodes} to confirm", severity="warning")
                    return
            self.dismiss(True)
        else:
            self.dismiss(False)

    def action_cancel(self) -> None:
        self.dismiss(False)


class ReasonScreen(ModalScreen[str | None]):
    """Asks one line before an action is planned: why (the audit's ``--reason``, by
    default), or what the action needs (a new run's name); Esc cancels, an empty answer
    is not accepted."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self,
        title: str,
        *,
        question: str = "Why? (recorded in the audit log, the node's annotations and Events)",
        placeholder: str = "e.g. GPU 3 at 88 C",
        value: str = "",
        needed: str = "a reason is needed",
    ) -> None:
        super().__init__()
        self.title_text = title
        self.question = question
        self.placeholder = placeholder
        self.value = value
        self.needed = needed

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="confirm-body"):
            yield Static(Text(self.title_text, style="bold"))
            yield Static(self.question)
            yield Input(value=self.value, placeholder=self.placeholder, id="reason")
            yield Static(
                Text("Enter plans the action (nothing is written yet); Esc cancels.", style="dim")
            )

    def on_mount(self) -> None:
        self.query_one("#reason", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        answer = event.value.strip()
        if not answer:
            self.notify(self.needed, severity="warning")
            return
        self.dismiss(answer)

    def action_cancel(self) -> None:
        self.dismiss(None)


class OutcomeScreen(ModalScreen[None]):
    """What an action did, step by step (and what held it, when a budget did)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("enter", "close", "Close"),
    ]

    def __init__(self, title: str, lines: list[str], *, ok: bool) -> None:
        super().__init__()
        self.title_text = title
        self.lines = lines
        self.ok = ok

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="confirm-body"):
            yield Static(Text(self.title_text, style="bold" if self.ok else "bold red"))
            yield Static(Text("\n".join(self.lines)), id="outcome")
            yield Static(Text("Esc or Enter closes.", style="dim"))

    def action_close(self) -> None:
        self.dismiss(None)
