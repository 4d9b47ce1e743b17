"""The krea-ops dashboard: one Textual app over the core's ``Console``.

Data flow (house style): every read runs in a thread worker, one exclusive worker per
data kind (``fleet``, ``queue``, ``burst``, ``training``, ``node:<name>``), so reads of a
kind never overlap; workers post one typed message per kind (``FleetLoaded``,
``NodeLoaded``, ...) or ``DataFailed`` and never touch widgets. A one-second tick starts
a read for each kind the visible screen needs once its refresh interval has passed and
no read of it is in flight, and starts nothing while a modal (help, confirm) is open.
The fleet read asks only for the telemetry the visible screen shows (``FAMILIES``) and
the verdicts the header counts. A failed read keeps the last good data on screen, greyed, with
the error in the footer line; nothing crashes.

Navigation (k9s): ``:`` command mode (``:queue``, ``:node gpu-node-003``), the command
palette (ctrl+p), ``/`` filter, ``?`` help, Esc back, digits jump to screens. Read-only
mode hides every action.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, Static
from textual.worker import Worker, WorkerState, get_current_worker

from krea_ops import units
from krea_ops.console import ConsoleActions, ConsoleReads, FleetScope
from krea_ops.daemon_pool import DaemonPool
from krea_ops.errors import KreaError
from krea_ops.fleet import FleetSnapshot
from screens.base import DataScreen
from screens.gcpolicy import frozen_after, release
from screens.messages import (
    ActionDone,
    ActionFailed,
    BurstLoaded,
    ControllersLoaded,
    DataFailed,
    FleetLoaded,
    Loaded,
    NodeLoaded,
    PlanReady,
    QueueLoaded,
    TrainingLoaded,
    ValidationSeen,
    ValidationWaitFailed,
    node_key,
)

if TYPE_CHECKING:
    from krea_ops.runbook.plan import Plan
    from krea_ops.validation import Validation


def training_loaded(console: Any) -> TrainingLoaded:
    """The runs, what node-health recorded of their restarts, and their statuses: a
    console that cannot read those (no state yet is fine; an error is said) still shows
    the runs."""
    runs = console.training()
    restarts: Any = None
    restarts_error = statuses_error = None
    statuses: Any = None
    history = getattr(console, "restart_history", None)
    if history is not None:
        try:
            restarts = history(runs)
        except KreaError as exc:
            restarts_error = str(exc)
    read = getattr(console, "run_statuses", None)
    if read is not None:
        try:
            statuses = read()
        except KreaError as exc:
            statuses_error = str(exc)
    return TrainingLoaded(runs, restarts, restarts_error, statuses, statuses_error)


SCREENS_ORDER = ("fleet", "fabric", "queue", "burst", "training")
SLOW_READ_S = 10.0  # a read in flight this long (or 3 refreshes) is said to be slow
VALIDATION_POLL_S = 2.0  # seconds between looks at the validation Jobs waited for
SCREEN_TITLES = {
    "fleet": "Fleet",
    "fabric": "Fabric",
    "queue": "Queue",
    "burst": "Burst",
    "training": "Training",
}


class StatusBar(Static):
    """Cluster, context, telemetry source, data age, and the fleet's verdict counts."""


class ErrorLine(Static):
    """The last read error (one line), empty when every source answers."""


class CommandBar(Input):
    """``:`` command mode. Focus is set at once and never selects the text: keys typed
    right after ``:`` (already queued) must land in the bar, in order."""


class ScreensProvider(Provider):
    """Command palette: jump to a screen or open a node."""

    async def discover(self) -> Hits:
        app = self.app
        assert isinstance(app, KreaOpsApp)
        for name in SCREENS_ORDER:
            yield DiscoveryHit(
                f"Go to {SCREEN_TITLES[name]}",
                lambda n=name: app.go(n),  # type: ignore[misc]
                help=f":{name}",
            )

    async def search(self, query: str) -> Hits:
        app = self.app
        assert isinstance(app, KreaOpsApp)
        matcher = self.matcher(query)
        for name in SCREENS_ORDER:
            text = f"Go to {SCREEN_TITLES[name]}"
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), lambda n=name: app.go(n))  # type: ignore[misc]
        fleet = app.fleet_snapshot()
        if fleet is None:
            return
        shown = 0
        for view in fleet.views:
            text = f"Open node {view.info.name}"
            score = matcher.match(text)
            if score > 0:
                name = view.info.name
                yield Hit(
                    score,
                    matcher.highlight(text),
                    lambda n=name: app.open_node(n),  # type: ignore[misc]
                    help=str(view.verdict.severity),
                )
                shown += 1
                if shown >= 50:
                    return


class KreaOpsApp(App[None]):
    CSS_PATH: ClassVar[list[str | Any]] = ["styles/app.tcss"]
    TITLE = "krea-ops"
    COMMANDS = App.COMMANDS | {ScreensProvider}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help"),
        Binding("colon", "command_mode", "Command", key_display=":"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("escape", "go_back", "Back", show=False),
        Binding("r", "refresh_now", "Refresh"),
        Binding("1", "go('fleet')", "Fleet", show=False),
        Binding("2", "go('fabric')", "Fabric", show=False),
        Binding("3", "go('queue')", "Queue", show=False),
        Binding("4", "go('burst')", "Burst", show=False),
        Binding("5", "go('training')", "Training", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        console: ConsoleReads,
        *,
        refresh_s: float = 5.0,
        read_only: bool = False,
        clock: Callable[[], float] = time.time,
        title: str | None = None,
        slow_read_s: float = SLOW_READ_S,
    ) -> None:
        super().__init__()
        self.session = console
        # the loop's executor once mounted: Textual's thread workers run on it
        self.threads = DaemonPool(name="dashboard")
        self.refresh_s = max(0.5, float(refresh_s))
        self.read_only = read_only
        self.clock = clock
        self.slow_read_s = slow_read_s
        if title:
            self.sub_title = title
        self.data: dict[str, Loaded] = {}
        # reads replaced by newer ones, freed by the next read's worker: dropping the last
        # reference to a 5,000-node snapshot frees about a million objects, ~40 ms the
        # UI thread would spend instead of drawing
        self._retired: list[Loaded] = []
        self.errors: dict[str, str] = {}
        self.updated_at: dict[str, float] = {}
        self.took_s: dict[str, float] = {}
        self._started: dict[str, float] = {}
        self._in_flight: set[str] = set()
        self._paused = False
        # validations this dashboard started or waits for: node -> (Job, what its pod does)
        self.validating: dict[str, tuple[str, str]] = {}
        # results that came while the dashboard waited (the node's read may lag them)
        self.validations: dict[str, Validation] = {}

    # -- layout ---------------------------------------------------------------------

    def get_default_screen(self) -> DataScreen:
        from screens.fleet import FleetScreen

        return FleetScreen()

    def compose(self) -> ComposeResult:
        yield from ()

    def on_mount(self) -> None:
        # every worker thread (reads, actions) from a pool quitting does not wait for, but
        # for the writes it holds (krea_ops/daemon_pool.py): q over a stalled API server
        # or Prometheus quits at once, not after the read's timeout
        asyncio.get_running_loop().set_default_executor(self.threads)
        self.set_interval(1.0, self._tick)
        self.call_after_refresh(self._tick)

    def screen_chrome(self) -> ComposeResult:
        """The header, footer and command bar every screen composes around its body."""
        with Horizontal(id="status"):
            yield StatusBar(id="status-bar")
        yield ErrorLine(id="error-line")
        yield CommandBar(
            placeholder=":fleet :fabric :queue :burst :training :node NAME",
            id="command",
            select_on_focus=False,
        )
        yield Footer()

    # -- screens ---------------------------------------------------------------------

    def make_screen(self, name: str) -> DataScreen:
        if name == "fleet":
            from screens.fleet import FleetScreen

            return FleetScreen()
        if name == "fabric":
            from screens.fabric import FabricScreen

            return FabricScreen()
        if name == "queue":
            from screens.queue import QueueScreen

            return QueueScreen()
        if name == "burst":
            from screens.burst import BurstScreen

            return BurstScreen()
        if name == "training":
            from screens.training import TrainingScreen

            return TrainingScreen()
        raise KeyError(name)

    def go(self, name: str) -> None:
        """Show a top-level screen: back to the fleet, then the screen on top of it."""
        if name not in SCREENS_ORDER:
            self.notify(f"no screen {name!r}", severity="warning")
            return
        while len(self.screen_stack) > 1:
            self.pop_screen()
        if name != "fleet":
            self.push_screen(self.make_screen(name))
        self.call_after_refresh(self._tick)

    def open_node(self, node: str) -> None:
        from screens.node import NodeScreen

        self.push_screen(NodeScreen(node))
        self.call_after_refresh(self._tick)

    def action_go(self, name: str) -> None:
        self.go(name)

    def action_go_back(self) -> None:
        bar = self._command_bar()
        if bar is not None and bar.display:
            bar.display = False
            return
        if isinstance(self.screen, ModalScreen):
            self.screen.dismiss(None)
            return
        if len(self.screen_stack) > 1:
            self.pop_screen()

    def action_help(self) -> None:
        from screens.dialogs import HelpScreen

        if not isinstance(self.screen, ModalScreen):
            self.push_screen(HelpScreen(self.help_sections()))

    def help_sections(self) -> list[tuple[str, list[tuple[str, str]]]]:
        """(title, [(key, what)]) for the help screen: the app's keys, the screen's keys,
        and the screen's runbook actions (hidden in read-only mode)."""
        app_keys = [
            ("?", "this help"),
            (":", "command mode: fleet, fabric, queue, burst, training, node NAME, quit"),
            ("ctrl+p", "command palette: screens and nodes"),
            ("/", "filter the current list"),
            ("Esc", "back, close the filter or dialog"),
            ("1-5", "Fleet, Fabric, Queue, Burst, Training"),
            ("r", "refresh now"),
            ("q", "quit"),
        ]
        sections = [("Everywhere", app_keys)]
        screen = self.screen
        if isinstance(screen, DataScreen):
            keys = []
            action_keys = {k for k, _ in screen.ACTIONS}  # listed under Actions, or hidden
            for b in screen.BINDINGS:
                if isinstance(b, Binding) and b.key in action_keys:
                    continue
                if isinstance(b, Binding):
                    keys.append((b.key_display or b.key, b.description))
                elif isinstance(b, tuple):
                    keys.append((b[0], b[2] if len(b) > 2 else b[1]))
            title = getattr(screen, "SCREEN_TITLE", type(screen).__name__)
            if keys:
                sections.append((title, keys))
            if screen.ACTIONS and self.actions is not None:
                sections.append(("Actions", list(screen.ACTIONS)))
        return sections

    # -- command mode and filter -----------------------------------------------------

    def _command_bar(self) -> CommandBar | None:
        try:
            return self.screen.query_one("#command", CommandBar)
        except Exception:
            return None

    def action_command_mode(self) -> None:
        bar = self._command_bar()
        if bar is None:
            return
        bar.value = ""
        bar.display = True
        self.screen.set_focus(bar)  # now, not after the keys already queued

    @on(Input.Submitted, "#command")
    def _command(self, event: Input.Submitted) -> None:
        event.stop()
        bar = event.input
        bar.display = False
        self.run_command(event.value)

    def run_command(self, text: str) -> None:
        words = text.strip().lstrip(":").split()
        if not words:
            return
        verb, args = words[0].lower(), words[1:]
        aliases = {"nodes": "fleet", "gpus": "fleet", "ib": "fabric", "q": "queue"}
        verb = aliases.get(verb, verb)
        if verb in SCREENS_ORDER:
            self.go(verb)
        elif verb in ("node", "no") and args:
            snapshot = self.fleet_snapshot()
            if snapshot is not None and snapshot.view(args[0]) is None:
                # the last fleet read has no such node: say so, open nothing
                self.notify(
                    f"no node {args[0]} in the fleet (krea-ops nodes list shows them)",
                    severity="warning",
                )
            else:
                self.open_node(args[0])
        elif verb in ("quit", "q!", "exit"):
            self.exit()
        elif verb == "help":
            self.action_help()
        elif verb == "refresh":
            self.action_refresh_now()
        else:
            self.notify(f"unknown command: {text.strip()}", severity="warning")

    def action_filter(self) -> None:
        screen = self.screen
        if isinstance(screen, DataScreen) and not screen.start_filter():
            self.notify("this screen has no filter", severity="information")

    # -- data ------------------------------------------------------------------------

    def _reader(self, key: str) -> Callable[[], Loaded]:
        """What reads ``key`` on a worker thread: one console call, its typed message."""
        console = self.session
        if key.startswith("node:"):
            name = key.split(":", 1)[1]
            return lambda: NodeLoaded(console.node(name))
        if key == "fleet":
            scope = FleetScope.of(families=self.wanted_families())
            return lambda: FleetLoaded(console.fleet(scope), scope)
        if key == "queue":
            return lambda: QueueLoaded(console.queue())
        if key == "burst":
            return lambda: BurstLoaded(console.burst())
        if key == "training":
            return lambda: training_loaded(console)
        if key == "controllers":
            read = console.controllers  # type: ignore[attr-defined]
            return lambda: ControllersLoaded(read())
        raise KeyError(key)

    def wanted_kinds(self) -> list[str]:
        """``fleet`` and ``controllers`` (the header shows them) and what the visible
        screen shows. A console that cannot read the controllers' Leases (a recorded
        fleet) leaves them out."""
        kinds = ["fleet"]
        if callable(getattr(self.session, "controllers", None)):
            kinds.append("controllers")
        screen = self.screen
        if isinstance(screen, DataScreen):
            kinds += [k for k in screen.kinds() if k not in kinds]
        return kinds

    def wanted_families(self) -> frozenset[str] | None:
        """The telemetry the visible screen shows, and the verdicts (the header counts
        them): only these are read each refresh (None: every family)."""
        screen = self.screen
        wanted = screen.FAMILIES if isinstance(screen, DataScreen) else ("verdicts",)
        return None if wanted is None else frozenset({"verdicts", *wanted})

    def latest(self, key: str) -> Loaded | None:
        """The last read of ``key`` that arrived (screens fill from it when shown)."""
        return self.data.get(key)

    def fleet_snapshot(self) -> FleetSnapshot | None:
        loaded = self.data.get("fleet")
        return loaded.snapshot if isinstance(loaded, FleetLoaded) else None

    @property
    def paused(self) -> bool:
        """Refresh pauses while a modal (help, a confirm dialog) is open."""
        return isinstance(self.screen, ModalScreen)

    def _tick(self) -> None:
        self._update_status()
        if self.paused:
            return
        now = time.monotonic()
        for kind in self.wanted_kinds():
            if kind in self._in_flight:
                continue
            last = self._started.get(kind)
            due = last is None or now - last >= self.refresh_s
            if not due and kind == "fleet":
                # a screen that shows more than the last read held (the heatmap after the
                # queue screen) gets its read now, not after the interval
                loaded = self.data.get("fleet")
                if isinstance(loaded, FleetLoaded):
                    due = not loaded.scope.covers(self.wanted_families())
            if due:
                self.load(kind)

    def load(self, kind: str) -> None:
        """Start a read of ``kind`` unless one is in flight (never two at once)."""
        if kind in self._in_flight:
            return
        self._in_flight.add(kind)
        self._started[kind] = time.monotonic()
        read = self._reader(kind)
        # the visible screens' work on the result, done here on the worker (pure: what
        # each preparer needs of its screen is captured now, on the UI thread)
        prepare = [
            p
            for screen in self.screen_stack
            if isinstance(screen, DataScreen) and kind in screen.kinds()
            if (p := screen.preparer(kind)) is not None
        ]

        retired, self._retired = self._retired, []

        def work() -> None:
            # (their last references: freed here, off the UI thread, a few objects at a
            # time: screens/gcpolicy.py)
            release(retired)
            start = time.perf_counter()
            try:
                # (no full collection walks the snapshot while it is built, nor after:
                # screens/gcpolicy.py)
                with frozen_after():
                    message = read()
                    for step in prepare:
                        step(message)
            except Exception as exc:  # one line in the footer, never a crash
                text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self.post_message(DataFailed(kind, text, self.clock()))
                return
            message.took_s = time.perf_counter() - start
            message.at = self.clock()
            self.post_message(message)

        self.run_worker(
            work,
            name=f"load-{kind}",
            group=f"load-{kind}",
            thread=True,
            exclusive=True,
            exit_on_error=False,
            description=f"reading {kind}",
        )

    def action_refresh_now(self) -> None:
        for kind in self.wanted_kinds():
            self._started.pop(kind, None)
        self._tick()

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        key = message.key
        self._in_flight.discard(key)
        if self._telemetry_lost(message):
            return
        replaced = self.data.get(key)
        if replaced is not None and replaced is not message:
            self._retired.append(replaced)
        self.data[key] = message
        self.updated_at[key] = message.at
        self.took_s[key] = message.took_s
        self.errors.pop(key, None)
        if isinstance(message, FleetLoaded):
            # the nodes came, telemetry may not have: that is an error to show, too
            error = message.snapshot.telemetry_error
            if error:
                self.errors["telemetry"] = error
            else:
                self.errors.pop("telemetry", None)
        for screen in self.screen_stack:
            if isinstance(screen, DataScreen) and key in screen.kinds():
                with contextlib.suppress(NoMatches):  # not composed yet: on_mount catches up
                    screen.update_data(message)
        self._update_status()

    def _telemetry_lost(self, message: Loaded) -> bool:
        """A fleet read whose nodes came but whose telemetry did not (Prometheus down,
        slow or erroring), after one that had it: the last good view stays on screen,
        greyed, its age growing in the header, the error in the footer line (a fleet of
        UNKNOWN would hide every reading the operator had a moment ago)."""
        if not isinstance(message, FleetLoaded):
            return False
        snapshot, before = message.snapshot, self.data.get(message.key)
        if snapshot.telemetry is not None or not snapshot.telemetry_error:
            return False
        if not isinstance(before, FleetLoaded) or before.snapshot.telemetry is None:
            return False
        self.errors["telemetry"] = snapshot.telemetry_error
        for screen in self.screen_stack:
            if isinstance(screen, DataScreen) and message.key in screen.kinds():
                with contextlib.suppress(NoMatches):
                    screen.data_failed(message.key, snapshot.telemetry_error)
        self._update_status()
        return True

    def on_data_failed(self, message: DataFailed) -> None:
        self._in_flight.discard(message.key)
        self.errors[message.key] = message.error
        for screen in self.screen_stack:
            if isinstance(screen, DataScreen) and message.key in screen.kinds():
                with contextlib.suppress(NoMatches):
                    screen.data_failed(message.key, message.error)
        self._update_status()

    # -- runbook actions ----------------------------------------------------------------

    @property
    def actions(self) -> ConsoleActions | None:
        """The console's writes; None in read-only mode or on a console without them."""
        if self.read_only or not isinstance(self.session, ConsoleActions):
            return None
        return self.session

    def can_act(self, title: str) -> bool:
        """True if actions are available; otherwise says why, once, and False."""
        if self.actions is not None:
            return True
        why = "read-only mode" if self.read_only else "this console has no cluster to act on"
        self.notify(f"{title}: not available ({why})", severity="warning")
        return False

    def start_action(
        self,
        title: str,
        make_plan: Callable[[ConsoleActions], Plan],
        then: Callable[[Plan], None] | None = None,
    ) -> None:
        """Plan an action on a worker (nothing is written), then show the plan in the
        confirm dialog; the executor runs it only after Run. ``then`` follows on the UI
        thread once the plan ran to the end, or had nothing to do (``nodes validate``
        waits for its Jobs then, new or already running)."""
        actions = self.actions
        if actions is None or not self.can_act(title):
            return
        self.notify(f"{title}: planning (reading the cluster; nothing is written yet)…")
        self._action_worker(
            title, f"planning {title}", lambda: PlanReady(title, make_plan(actions), then)
        )

    def _action_worker(
        self, title: str, description: str, work: Callable[[], Message], *, writes: bool = False
    ) -> None:
        """Run ``work`` (a plan or a run; it blocks on the API) on the one action worker
        and post its message, or ``ActionFailed`` with the error's first line. ``writes``:
        quitting waits for it to end (``threads.held``); a read is abandoned."""

        def run() -> None:
            with self.threads.held() if writes else contextlib.nullcontext():
                try:
                    message = work()
                except Exception as exc:  # BadInput, Unavailable, RBAC: one line
                    message = ActionFailed(title, _first_line(exc))
            self.post_message(message)

        self.run_worker(
            run, group="action", thread=True, exclusive=True, exit_on_error=False,
            description=description,
        )  # fmt: skip

    @on(PlanReady)
    def _plan_ready(self, message: PlanReady) -> None:
        from screens.dialogs import ConfirmScreen, OutcomeScreen

        plan, title, then = message.plan, message.title, message.then
        if plan.writes_nothing and not plan.refused:
            self.push_screen(OutcomeScreen(f"{title}: nothing to do", plan.lines(), ok=True))
            if then is not None:
                then(plan)
            return

        def decided(run: bool | None) -> None:
            if run:
                self._execute(title, plan, then)

        self.push_screen(
            ConfirmScreen(
                title, plan.lines(), nodes=len(plan.nodes), numbered=False, refused=plan.refused
            ),
            decided,
        )

    def _execute(self, title: str, plan: Plan, then: Callable[[Plan], None] | None = None) -> None:
        actions = self.actions
        if actions is None:
            return

        self.notify(f"{title}: running…")
        self._action_worker(
            title,
            f"running {title}",
            lambda: ActionDone(title, actions.execute(plan), then),
            writes=True,
        )

    @on(ActionDone)
    def _action_done(self, message: ActionDone) -> None:
        from screens.dialogs import OutcomeScreen

        result = message.result
        lines = [f"{s.index}. {s.description}: {s.status}" for s in result.steps]
        for step in result.steps:
            lines.extend(f"     {line}" for line in step.lines)
        if result.blocked:
            lines.append("Still there (what holds them):")
            lines.extend(f"  {line}" for line in result.blocked)
        lines.extend(f"Failed: {line}" for line in result.failed)
        if result.stopped:
            lines.append(f"Stopped: {result.stopped}")
        lines.append(f"Audit: run {result.run_id}")
        ok = result.status == "done"
        self.push_screen(OutcomeScreen(f"{message.title}: {result.status}", lines, ok=ok))
        self.action_refresh_now()
        if ok and message.then is not None:
            message.then(result.plan)

    # -- validations: the Jobs a plan started, waited for in the background ---------------

    def wait_for_validations(self, jobs: Mapping[str, str]) -> None:
        """Wait on a worker for the validation Jobs ``jobs`` (node -> namespace/name) that
        a ``nodes validate`` plan started (or found running): each result is recorded on
        its node as it comes (``Console.validation_wait``) and said here. The UI never
        blocks; the wait stops at the validation's timeout, or when the app closes."""
        actions = self.actions
        jobs = {n: j for n, j in jobs.items() if n not in self.validating}
        if actions is None or not jobs:
            return
        self.validating.update((n, (j, "started")) for n, j in jobs.items())
        spec = actions.validation_spec()
        # the Job is cut at its deadline and then judged: a little longer than that
        timeout_s = spec.timeout_s + 120.0
        self.notify(
            f"validate {', '.join(jobs)}: waiting for {', '.join(jobs.values())} "
            f"(up to {units.duration(spec.timeout_s)}); the result is recorded on the node"
        )
        self._refresh_validation(jobs)

        def wait() -> None:
            worker = get_current_worker()
            left = dict(jobs)
            deadline = time.monotonic() + timeout_s
            seen: dict[str, str] = {}
            try:
                while left:
                    # one look (timeout 0): judges and records each Job that finished
                    # (quitting waits for a look to end, not for the Jobs)
                    with self.threads.held():
                        done, running = actions.validation_wait(left, timeout_s=0)
                    for node in done:
                        left.pop(node, None)
                    over = not left or worker.is_cancelled or time.monotonic() >= deadline
                    if done or running != seen or over:
                        self.post_message(ValidationSeen(done, running, ended=over))
                    seen = running
                    if over:
                        return
                    pause = time.monotonic() + VALIDATION_POLL_S
                    while time.monotonic() < pause and not worker.is_cancelled:
                        time.sleep(0.2)
            except Exception as exc:  # the API server gone, RBAC: one line
                self.post_message(ValidationWaitFailed(tuple(left), _first_line(exc)))

        self.run_worker(
            wait, group="validation-wait", thread=True, exclusive=False, exit_on_error=False,
            description=f"waiting for validation of {', '.join(jobs)}",
        )  # fmt: skip

    @on(ValidationSeen)
    def _validation_seen(self, message: ValidationSeen) -> None:
        for node, v in message.done.items():
            self.validating.pop(node, None)
            self.validations[node] = v
            if v.passed:
                self.notify(f"validate {node}: {v.summary()}", title="validation passed")
            else:
                self.notify(
                    f"validate {node}: {v.summary()}; labelled krea.ai/needs-repair",
                    title="validation FAILED",
                    severity="error",
                    timeout=30,
                )
        for node, what in message.running.items():
            if node in self.validating:
                self.validating[node] = (self.validating[node][0], what)
        if message.ended:
            for node in list(message.running):
                job, what = self.validating.pop(node, ("?", "?"))
                self.notify(
                    f"validate {node}: {job} still running ({what}) at the timeout; "
                    f"krea-ops nodes validate {node} waits for it",
                    severity="warning",
                    timeout=30,
                )
        self._refresh_validation({**message.done, **message.running})

    @on(ValidationWaitFailed)
    def _validation_wait_failed(self, message: ValidationWaitFailed) -> None:
        for node in message.nodes:
            self.validating.pop(node, None)
        self.notify(
            f"validate {', '.join(message.nodes)}: waiting stopped: {message.error} (the Job "
            "runs on; krea-ops nodes validate waits for it and records the result)",
            severity="error",
            timeout=30,
        )
        self._refresh_validation(dict.fromkeys(message.nodes))

    def _refresh_validation(self, nodes: Mapping[str, object]) -> None:
        """The screens showing these nodes redraw their validation, and the nodes are read
        again (a result was written on them)."""
        for screen in self.screen_stack:
            if isinstance(screen, DataScreen):
                with contextlib.suppress(NoMatches):
                    screen.validation_changed(set(nodes))
        for node in nodes:
            key = node_key(node)
            if key in self.wanted_kinds():
                self._started.pop(key, None)
        self.call_after_refresh(self._tick)

    @on(ActionFailed)
    def _action_failed(self, message: ActionFailed) -> None:
        self.notify(f"{message.title}: {message.error}", severity="error", timeout=15)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place worker errors land (a loader raising past its own handler)."""
        worker = event.worker
        if event.state == WorkerState.ERROR and worker.group.startswith("load-"):
            kind = worker.group.removeprefix("load-")
            self._in_flight.discard(kind)
            self.errors[kind] = f"{type(worker.error).__name__}: {worker.error}"
            self._update_status()
        elif event.state == WorkerState.CANCELLED and worker.group.startswith("load-"):
            self._in_flight.discard(worker.group.removeprefix("load-"))

    def data_age(self, kind: str) -> float | None:
        at = self.updated_at.get(kind)
        return None if at is None else max(0.0, self.clock() - at)

    def is_stale(self, kind: str) -> bool:
        """Older than three refresh intervals, or the last read failed (for the fleet:
        its telemetry too)."""
        age = self.data_age(kind)
        failed = kind in self.errors or (kind == "fleet" and "telemetry" in self.errors)
        return failed or (age is not None and age > 3 * self.refresh_s)

    def _update_status(self) -> None:
        try:  # no screen yet, or shutting down: nothing to update
            screen = self.screen
            bar = screen.query_one("#status-bar", StatusBar)
            line = screen.query_one("#error-line", ErrorLine)
        except Exception:
            return
        from screens.text import status_text

        bar.update(status_text(self))
        bar.set_class(self.is_stale("fleet"), "-stale")
        errors = [f"{kind}: {error}" for kind, error in sorted(self.errors.items())]
        errors += self._slow_reads()
        line.update(" | ".join(errors))
        line.display = bool(errors)

    def _slow_reads(self) -> list[str]:
        """Reads in flight for longer than they should take: an API server or Prometheus
        that went away without refusing (a partition, a hung process) makes a read wait
        for its timeouts, and the data only ages meanwhile. Said, not just greyed."""
        now = time.monotonic()
        slow_after = max(self.slow_read_s, 3 * self.refresh_s)
        out = []
        for kind in sorted(self._in_flight):
            started = self._started.get(kind)
            if started is not None and now - started >= slow_after and kind not in self.errors:
                out.append(
                    f"{kind}: no answer for {now - started:.0f} s (the API server or "
                    "Prometheus is slow or unreachable; still trying)"
                )
        return out

    async def on_unmount(self) -> None:
        self.session.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__
