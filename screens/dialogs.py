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

    def __init__(self, title: str, plan: list[str], *, nodes: int = 1) -> None:
        super().__init__()
        self.title_text = title
        self.plan = plan
        self.nodes = nodes

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="confirm-body"):
            yield Static(Text(self.title_text, style="bold"))
            yield Static("\n".join(f"{i}. {step}" for i, step in enumerate(self.plan, 1)))
            if self.nodes > 1:
                yield Static(f"This affects {self.nodes} nodes: type {self.nodes} to confirm.")
                yield Input(placeholder=str(self.nodes), id="confirm-count")
            with Horizontal():
                yield Button("Cancel", id="cancel", variant="primary")
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
