"""What every dashboard screen shares: the data kinds it needs and how it receives them.

Screens never fetch: the app's workers read from the core ``Hub`` and hand each result
to ``update_data`` on the UI thread. A screen lists the kinds it shows in ``KINDS`` so
the app refreshes only those (plus ``fleet``, which the header needs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual import on
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Input

from krea_ops.model import Severity

if TYPE_CHECKING:
    from collections.abc import Callable

    from screens.app import KreaOpsApp
    from screens.messages import Loaded


class DataScreen(Screen[None]):
    """A screen with a filter composes an ``Input`` with id ``filter`` (hidden by
    app.tcss), names the widget focus returns to in ``FILTER_FOCUS`` and narrows its rows
    in ``apply_filter``; opening, Enter, Esc and focus are handled here, once."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "escape", "Clear filter / back", show=False),
    ]
    FILTER_FOCUS: ClassVar[str | None] = None
    """Selector of the widget that gets focus back when the filter is closed."""
    KINDS: ClassVar[tuple[str, ...]] = ("fleet",)
    """Data kinds this screen shows (``fleet``, ``queue``, ``burst``, ``training``,
    ``node:<name>``)."""
    FAMILIES: ClassVar[tuple[str, ...] | None] = ("verdicts",)
    """The telemetry families the fleet read needs while this screen is shown
    (``telemetry.dialects.GROUPS``; None: every family). The verdicts are always read."""
    HELP: ClassVar[str] = ""
    """One paragraph for the help screen: what this screen shows."""
    ACTIONS: ClassVar[tuple[tuple[str, str], ...]] = ()
    """(key, action) pairs of the runbook actions this screen offers; listed in help
    unless the dashboard is read-only or its console cannot write."""

    @property
    def krea(self) -> KreaOpsApp:
        from screens.app import KreaOpsApp

        assert isinstance(self.app, KreaOpsApp)
        return self.app

    def kinds(self) -> tuple[str, ...]:
        return self.KINDS

    def preparer(self, kind: str) -> Callable[[Loaded], None] | None:
        """Work on a read of ``kind`` to do on the worker thread, before the message is
        posted (UI thread, when the read starts): a pure function of the message and of
        what this method captured now, storing its results in ``loaded.prepared`` for
        ``update_data``. At 5,000 nodes building the rows of a view is a few hundred ms:
        on the UI thread that is a stall every refresh. None: nothing to prepare."""
        return None

    def update_data(self, loaded: Loaded) -> None:
        """A read of one of this screen's kinds arrived (UI thread). Screens override and
        pick the messages they show by type."""

    def data_failed(self, kind: str, error: str) -> None:
        """A read of ``kind`` failed; the app shows the error in the footer. Screens
        may grey their stale parts."""

    def validation_changed(self, nodes: set[str]) -> None:
        """A validation the dashboard waits for moved on (a pod's phase, a result, the
        wait ended) for these nodes (UI thread). Screens that show it redraw it."""

    def apply_filter(self, text: str) -> None:
        """Narrow the rows to those matching ``text`` ("" shows all). Screens with a
        filter override."""

    def _filter_box(self) -> Input | None:
        try:
            return self.query_one("#filter", Input)
        except NoMatches:
            return None

    def _refocus(self) -> None:
        if self.FILTER_FOCUS:
            self.query_one(self.FILTER_FOCUS).focus()

    def start_filter(self) -> bool:
        """``/`` was pressed: open this screen's filter; False if it has none."""
        box = self._filter_box()
        if box is None:
            return False
        box.display = True
        self.set_focus(box)  # now: keys already queued must land in the box
        return True

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.apply_filter(event.value.strip())

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        event.stop()
        event.input.display = bool(event.value)  # a kept filter stays visible
        self._refocus()

    def action_escape(self) -> None:
        """Esc clears an open filter first, then goes back as everywhere else."""
        box = self._filter_box()
        if box is not None and (box.display or box.value):
            box.value = ""
            box.display = False
            self.apply_filter("")
            self._refocus()
            return
        self.krea.action_go_back()

    # -- node actions (the node screen's node, the fleet screen's cursor) ---------------

    def action_node(self) -> str | None:
        """The node ``e`` and ``R`` act on; None: none here."""
        return None

    def action_evict(self) -> None:
        node = self.action_node()
        if node is None:
            self.notify("no node selected", severity="warning")
            return
        from screens.dialogs import ReasonScreen

        def reasoned(reason: str | None) -> None:
            if reason:
                self.krea.start_action(
                    f"evict {node}", lambda actions: actions.plan_evict([node], reason=reason)
                )

        if self.krea.can_act(f"evict {node}"):
            question, value = self._evict_prompt(node)
            self.app.push_screen(ReasonScreen(f"Evict {node}", **question, value=value), reasoned)

    def _evict_prompt(self, node: str) -> tuple[dict[str, str], str]:
        """The reason box of ``e``: filled with what the screen already calls the node
        (a BAD or SUSPECT verdict's reasons), and, when the node is already out (its
        evicted-by), who took it out, when and why, before anything is planned."""
        from krea_ops.runbook.nodes import EVICTED_AT, EVICTED_BY, EVICTED_REASON

        snapshot = self.krea.fleet_snapshot()
        view = snapshot.view(node) if snapshot is not None else None
        if view is None:
            return {}, ""
        value = ""
        if view.verdict.severity in (Severity.BAD, Severity.SUSPECT) and view.verdict.reasons:
            value = view.verdict.reasons[0].message
        notes = view.info.annotations
        if EVICTED_BY not in notes:
            return {}, value
        question = (
            f"{node} is already out: taken out by {notes[EVICTED_BY]} at "
            f"{notes.get(EVICTED_AT, '?')}: {notes.get(EVICTED_REASON, '?')}. That stays the "
            "first reason; why evict it again? (added to it in the audit log, the node's "
            "annotations and Events)"
        )
        return {"question": question}, value

    def action_restore(self) -> None:
        node = self.action_node()
        if node is None:
            self.notify("no node selected", severity="warning")
            return
        self.krea.start_action(f"restore {node}", lambda actions: actions.plan_restore([node]))

    def on_screen_resume(self) -> None:
        # show what arrived while another screen was on top
        for kind in self.kinds():
            loaded = self.krea.latest(kind)
            if loaded is not None:
                self.update_data(loaded)
