"""What every dashboard screen shares: the data kinds it needs and how it receives them.

Screens never fetch: the app's workers read from the core ``Hub`` and hand each result
to ``update_data`` on the UI thread. A screen lists the kinds it shows in ``KINDS`` so
the app refreshes only those (plus ``fleet``, which the header needs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from textual.screen import Screen

if TYPE_CHECKING:
    from screens.app import KreaOpsApp


class DataScreen(Screen[None]):
    KINDS: ClassVar[tuple[str, ...]] = ("fleet",)
    """Data kinds this screen shows (``fleet``, ``queue``, ``burst``, ``training``,
    ``pods:<node>``)."""
    HELP: ClassVar[str] = ""
    """One paragraph for the help screen: what this screen shows."""
    ACTIONS_COMING: ClassVar[tuple[tuple[str, str], ...]] = ()
    """(key, action) pairs the runbook issue will add here; shown in help as coming."""

    @property
    def krea(self) -> KreaOpsApp:
        from screens.app import KreaOpsApp

        assert isinstance(self.app, KreaOpsApp)
        return self.app

    def kinds(self) -> tuple[str, ...]:
        return self.KINDS

    def update_data(self, kind: str, data: Any) -> None:
        """New data of ``kind`` arrived (UI thread). Screens override."""

    def data_failed(self, kind: str, error: str) -> None:
        """A read of ``kind`` failed; the app shows the error in the footer. Screens
        may grey their stale parts."""

    def start_filter(self) -> bool:
        """``/`` was pressed: open this screen's filter; False if it has none."""
        return False

    def on_screen_resume(self) -> None:
        # show what arrived while another screen was on top
        for kind in self.kinds():
            data = self.krea.data.get(kind)
            if data is not None:
                self.update_data(kind, data)
