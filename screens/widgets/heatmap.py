"""Fleet GPU heatmap: one line per node, one coloured cell per GPU, for thousands of nodes.

``GpuHeatmap`` is a Line-API ``ScrollView`` (the toolong model): ``render_line`` builds a
``Strip`` only for the rows on screen, and an LRU cache keyed by (row key, row version,
width, metric, cursor) means a data tick re-renders only the visible rows that changed.
``set_rows`` diffs by row key, so a 4,096-node fleet with a few changed nodes costs one
O(n) bookkeeping pass and a handful of strips. Filtering and sorting happen here, over
the full row set, because at fleet scale they are cheap and the screen stays simple.

Cell colours are component classes (``gpu-heatmap--band-0`` healthiest ..
``gpu-heatmap--band-4`` worst, ``gpu-heatmap--scale-0..4`` for metrics that are not a
health signal, ``gpu-heatmap--unknown``), styled with theme variables in ``DEFAULT_CSS``
so app stylesheets can override them. Call ``set_rows`` (at once) or ``apply_rows``
(spread over turns of the event loop, for a refresh) on the UI thread.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Region, Size, Spacing
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from krea_ops.model import Severity

SortMode = Literal["attention", "name", "value"]
SORT_MODES: tuple[SortMode, ...] = get_args(SortMode)

CELL_WIDTH = 3
"""Characters of value text per GPU cell; each cell is followed by a one-space gap."""
BADGE_WIDTH = 3
BAND_LEVELS = 5
"""Colour levels: ``band-0`` (healthiest) .. ``band-4`` (worst); metrics with fewer bands
are spread over them so that every metric's worst band is the same red."""
UNKNOWN_TEXT = "?"

_BADGES: dict[Severity, tuple[str, str]] = {
    Severity.OK: ("ok", "gpu-heatmap--sev-ok"),
    Severity.SUSPECT: ("SUS", "gpu-heatmap--sev-suspect"),
    Severity.UNKNOWN: ("UNK", "gpu-heatmap--sev-unknown"),
    Severity.BAD: ("BAD", "gpu-heatmap--sev-bad"),
}
_DIGITS = re.compile(r"(\d+)")
_DONE = object()


@dataclass(frozen=True)
class HeatRow:
    """One node's line: its verdict and one value per GPU for the chosen metric."""

    key: str
    """Stable row key (the node name); the cursor follows it across reorders."""
    label: str
    """Shown at the left, truncated to the label width."""
    severity: Severity
    """The node's verdict."""
    values: tuple[float | None, ...]
    """One per GPU, the chosen metric in its base unit (ratios 0-1); ``None``: unknown."""
    note: str = ""
    """The first reason, shown truncated at the right."""
    ranks: tuple[float | None, ...] | None = None
    """What "worst first" ranks the row by, one per GPU, highest worst; None: the values,
    in the metric's direction. (Tensor activity ranks by busy time minus tensor
    activity, so a busy GPU whose tensor cores idle comes before an idle one.)"""


@dataclass(frozen=True)
class Metric:
    """How one GPU metric is banded, coloured, sorted and printed."""

    name: str
    """Stable id: ``temperature``, ``tensor``, ``util``, ``margin``, ``nvlink``."""
    title: str
    """Legend title, with the unit shown in the cells."""
    bands: tuple[float, ...]
    """Ascending thresholds; a value ``v`` is in band ``bisect_right(bands, v)``."""
    high_is_bad: bool
    """True: the highest band is the worst and "worst first" sorts high values first.
    False: low values are worst (and sort first)."""
    fmt: Callable[[float], str]
    """Cell text, at most ``CELL_WIDTH`` characters."""
    neutral: bool = False
    """Not a health signal (GPU busy time): cells use the ``scale`` classes, so no value
    looks healthy or broken; sorting still uses ``high_is_bad``."""


def compact_number(value: float, width: int = CELL_WIDTH) -> str:
    """``value`` rounded into at most ``width`` characters: ``81``, ``-12``, ``4k``, ``.2M``.

    Beyond what fits it saturates at nines rather than lie with a truncated number.
    """
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    room = width - len(sign)
    text = f"{magnitude:.0f}"
    if len(text) <= room:
        return sign + text
    for suffix, divisor in (("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12)):
        scaled = magnitude / divisor
        whole = f"{scaled:.0f}"
        if whole != "0" and len(whole) + 1 <= room:
            return sign + whole + suffix
        tenths = f"{scaled:.1f}".removeprefix("0")
        if tenths.startswith(".") and tenths != ".0" and len(tenths) + 1 <= room:
            return sign + tenths + suffix
    return sign + "9" * room


def percent(ratio: float) -> str:
    """A 0-1 ratio as a whole percentage without the sign: ``0.95`` -> ``95``."""
    return compact_number(ratio * 100)


METRICS: dict[str, Metric] = {
    "temperature": Metric(
        "temperature", "GPU temperature °C", (65.0, 75.0, 78.0, 85.0), True, compact_number
    ),
    "tensor": Metric("tensor", "Tensor-core activity %", (0.1, 0.3, 0.6), False, percent),
    "util": Metric(
        "util", "GPU utilization % (busy time)", (0.25, 0.5, 0.75), False, percent, neutral=True
    ),
    "margin": Metric(
        "margin", "Thermal slowdown margin °C", (5.0, 10.0, 20.0), False, compact_number
    ),
    "nvlink": Metric("nvlink", "NVLink errors in window", (1.0, 10.0, 100.0), True, compact_number),
}
"""The dashboard's metrics by name; ``dataclasses.replace`` one to use other thresholds."""


def band_index(metric: Metric, value: float | None) -> int | None:
    """The band ``0..len(metric.bands)`` of ``value`` (ascending), ``None`` if unknown."""
    if value is None or math.isnan(value):
        return None
    return bisect_right(metric.bands, value)


def band_class(metric: Metric, band: int | None) -> str:
    """The component class that colours ``band`` of ``metric``."""
    if band is None:
        return "gpu-heatmap--unknown"
    count = len(metric.bands)
    if metric.neutral:
        return f"gpu-heatmap--scale-{_spread(band, count)}"
    badness = band if metric.high_is_bad else count - band
    return f"gpu-heatmap--band-{_spread(badness, count)}"


def cell_class(metric: Metric, value: float | None) -> str:
    """The component class of a cell holding ``value``; unknown never gets a band."""
    return band_class(metric, band_index(metric, value))


def _spread(level: int, top: int) -> int:
    return round(level * (BAND_LEVELS - 1) / top) if top else 0


def _fit(text: str, width: int, *, right: bool = False) -> str:
    """``text`` padded or cut (with an ellipsis) to exactly ``width`` cells."""
    if width <= 0:
        return ""
    if cell_len(text) > width:
        return set_cell_size(text, width - 1) + "…"
    return set_cell_size(text, width) if not right else " " * (width - cell_len(text)) + text


def _natural_key(label: str) -> tuple[str | int, ...]:
    """``gpu-node-9`` sorts before ``gpu-node-10``."""
    return tuple(
        int(part) if odd else part.casefold()
        for odd, part in zip(itertools.cycle((False, True)), _DIGITS.split(label), strict=False)
    )


class _Entry:
    """A row plus what sorting, filtering and the line cache derive from it."""

    __slots__ = ("haystack", "name_key", "row", "version", "worst_for", "worst_rank")

    # what ``/`` takes as a verdict rather than text: "bad" shows the BAD nodes only
    VERDICT_WORDS: ClassVar[dict[str, Severity]] = {
        "bad": Severity.BAD,
        "sus": Severity.SUSPECT,
        "suspect": Severity.SUSPECT,
        "unk": Severity.UNKNOWN,
        "unknown": Severity.UNKNOWN,
        "ok": Severity.OK,
    }

    def __init__(self, row: HeatRow, version: int) -> None:
        self.row = row
        self.version = version
        self.haystack = f"{row.label}\n{row.note}".casefold()
        self.name_key = _natural_key(row.label)
        self.worst_for: Metric | None = None
        self.worst_rank = math.inf

    def set(self, row: HeatRow, version: int) -> None:
        old = self.row
        self.row = row
        self.version = version
        # a refresh changes a node's values, rarely its name or note: the derived keys
        # are rebuilt only for what changed (5,000 rows a refresh at fleet scale)
        if row.label != old.label:
            self.name_key = _natural_key(row.label)
        if row.label != old.label or row.note != old.note:
            self.haystack = f"{row.label}\n{row.note}".casefold()
        if row.values != old.values or row.ranks != old.ranks:
            self.worst_for = None
            self.worst_rank = math.inf

    def rank(self, metric: Metric) -> float:
        """Ascending sort key of the row's worst value: worst first, unknown last."""
        if self.worst_for is not metric:
            ranks = self.row.ranks
            values = self.row.values if ranks is None else ranks
            known = [v for v in values if v is not None and not math.isnan(v)]
            if not known:
                self.worst_rank = math.inf
            elif metric.high_is_bad or ranks is not None:
                self.worst_rank = -max(known)
            else:
                self.worst_rank = min(known)
            self.worst_for = metric
        return self.worst_rank


class GpuHeatmap(ScrollView, can_focus=True):
    """One line per node: label, verdict badge, a cell per GPU coloured by band, a note.

    Keys: up/down/pageup/pagedown/home/end move the cursor, enter opens the node.
    """

    ALLOW_SELECT = False
    """A double click opens the node rather than selecting text."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "cursor_page_up", "Page up", show=False),
        Binding("pagedown", "cursor_page_down", "Page down", show=False),
        Binding("home", "cursor_first", "First", show=False),
        Binding("end", "cursor_last", "Last", show=False),
        Binding("enter", "select_cursor", "Open node", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "gpu-heatmap--header",
        "gpu-heatmap--label",
        "gpu-heatmap--note",
        "gpu-heatmap--cursor",
        "gpu-heatmap--unknown",
        *(cls for _, cls in _BADGES.values()),
        *(f"gpu-heatmap--band-{i}" for i in range(BAND_LEVELS)),
        *(f"gpu-heatmap--scale-{i}" for i in range(BAND_LEVELS)),
    }

    DEFAULT_CSS = """
    GpuHeatmap {
        height: 1fr;
        background: $surface;
        & > .gpu-heatmap--header { background: $panel; color: $text-muted; text-style: bold; }
        & > .gpu-heatmap--label { color: $text; }
        & > .gpu-heatmap--note { color: $text-muted; }
        & > .gpu-heatmap--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus > .gpu-heatmap--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
        & > .gpu-heatmap--sev-ok { color: $text-success; }
        & > .gpu-heatmap--sev-suspect { color: $text-warning; text-style: bold; }
        & > .gpu-heatmap--sev-unknown { color: $text-muted; text-style: bold; }
        & > .gpu-heatmap--sev-bad { color: $text-error; text-style: bold; }
        & > .gpu-heatmap--band-0 { background: $success 25%; color: auto 90%; }
        & > .gpu-heatmap--band-1 { background: $success 60%; color: auto 90%; }
        & > .gpu-heatmap--band-2 { background: $warning 50%; color: auto 90%; }
        & > .gpu-heatmap--band-3 { background: $warning; color: auto 90%; }
        & > .gpu-heatmap--band-4 { background: $error; color: auto 90%; text-style: bold; }
        & > .gpu-heatmap--scale-0 { background: $primary 10%; color: auto 90%; }
        & > .gpu-heatmap--scale-1 { background: $primary 30%; color: auto 90%; }
        & > .gpu-heatmap--scale-2 { background: $primary 50%; color: auto 90%; }
        & > .gpu-heatmap--scale-3 { background: $primary 70%; color: auto 90%; }
        & > .gpu-heatmap--scale-4 { background: $primary; color: auto 90%; }
        & > .gpu-heatmap--unknown { background: $panel; color: $text-disabled; }
    }
    """

    APPLY_CHUNK: ClassVar[int] = 500
    """Rows ``apply_rows`` applies per turn of the event loop: a few milliseconds."""

    metric: reactive[Metric] = reactive(METRICS["temperature"], init=False, repaint=False)
    """The metric the rows' values are in; sets the bands, colours, cell text and legend."""
    filter_text: reactive[str] = reactive("", init=False, repaint=False)
    """Show only rows whose label or note contains this (case-insensitive); empty: all."""
    sort_mode: reactive[SortMode] = reactive("attention", init=False, repaint=False)
    """``attention``: worst verdict, then worst value, then name; ``name``: natural order
    of labels; ``value``: worst value first (per ``Metric.high_is_bad``)."""

    class Highlighted(Message):
        """The cursor moved to another row."""

        def __init__(self, key: str, heatmap: GpuHeatmap) -> None:
            self.key = key
            self.heatmap = heatmap
            super().__init__()

        @property
        def control(self) -> GpuHeatmap:
            return self.heatmap

    class NodeSelected(Message):
        """Enter (or a double click) on a row: open that node."""

        def __init__(self, key: str, heatmap: GpuHeatmap) -> None:
            self.key = key
            self.heatmap = heatmap
            super().__init__()

        @property
        def control(self) -> GpuHeatmap:
            return self.heatmap

    def __init__(
        self,
        *,
        metric: Metric | None = None,
        label_width: int = 16,
        show_header: bool = True,
        cache_size: int = 1024,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
        disabled: bool = False,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes, disabled=disabled)
        if metric is not None:
            self.set_reactive(GpuHeatmap.metric, metric)
        self.label_width = label_width
        self.show_header = show_header
        self._entries: dict[str, _Entry] = {}
        self._order: list[str] = []
        self._position: dict[str, int] = {}
        self._columns = 0
        self._cursor_key: str | None = None
        self._versions = itertools.count()
        # Stale versions simply age out; the cache only ever needs the visible rows.
        self._line_cache: LRUCache[tuple[object, ...], Strip] = LRUCache(cache_size)
        self._pending_apply: Iterator[None] | None = None
        self._owed_reorder = False

    # --- public API -----------------------------------------------------------------------

    @property
    def cursor_key(self) -> str | None:
        """Key of the row under the cursor, ``None`` when no row is shown."""
        return self._cursor_key

    @property
    def cursor_row(self) -> int | None:
        """Position of the cursor among the shown rows."""
        return None if self._cursor_key is None else self._position.get(self._cursor_key)

    @property
    def row_count(self) -> int:
        """Rows shown (after the filter)."""
        return len(self._order)

    @property
    def total_count(self) -> int:
        """Rows known, filtered or not."""
        return len(self._entries)

    @property
    def ordered_keys(self) -> tuple[str, ...]:
        """Keys of the shown rows, top to bottom."""
        return tuple(self._order)

    def get_row(self, key: str) -> HeatRow | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.row

    def set_rows(self, rows: Iterable[HeatRow]) -> None:
        """Replace the row set, diffing by key: rows absent from ``rows`` are removed.

        Only lines whose row changed are re-rendered; the order is rebuilt only when a row
        was added or removed or a changed row's sort position or filter match changed.
        The cursor stays on its key. An apply still spread over the event loop by
        ``apply_rows`` is dropped: these rows replace it.
        """
        self._drop_apply()
        for _ in self._applying(rows):
            pass

    def apply_rows(self, rows: Sequence[HeatRow]) -> None:
        """``set_rows`` spread over turns of the event loop, ``APPLY_CHUNK`` rows a turn.

        A refresh of a 5,000-node fleet where every row changed costs the UI thread tens
        of milliseconds, more while a worker holds the GIL; applied in one go, a key
        pressed meanwhile waits for all of it. Spread, it waits for one chunk. The rows
        already applied show their new values as soon as a line is drawn; rows added and
        removed, the order and the filter take effect when the last chunk is in. The
        first rows a heatmap gets, and a row set of one chunk or less, are applied at
        once (the first paint shows the whole fleet). A newer apply, or ``set_rows``,
        replaces one still under way."""
        if not self._entries or len(rows) <= self.APPLY_CHUNK:
            self.set_rows(rows)
            return
        self._drop_apply()
        steps = self._applying(rows, chunk=self.APPLY_CHUNK)
        self._pending_apply = steps
        self._apply_step(steps)

    @property
    def applying(self) -> bool:
        """Whether an ``apply_rows`` is still spread over the event loop."""
        return self._pending_apply is not None

    def _apply_step(self, steps: Iterator[None]) -> None:
        if steps is not self._pending_apply:
            return  # (replaced by a newer apply)
        if next(steps, _DONE) is _DONE:
            self._pending_apply = None
        else:
            self.call_later(self._next_apply_step, steps)

    async def _next_apply_step(self, steps: Iterator[None]) -> None:
        # A message already queued here is handled without the event loop turning, so a
        # key still on its way through the app would wait for every chunk: let it in.
        await asyncio.sleep(0)
        self._apply_step(steps)

    def _drop_apply(self) -> None:
        """Forget an apply under way. The rows it already set stay; its unfinished
        bookkeeping (a new row not yet placed, a changed line not yet redrawn) is owed to
        the next apply (``_owed_reorder``), which rebuilds the order and redraws the view."""
        self._pending_apply = None

    def _applying(self, rows: Iterable[HeatRow], *, chunk: int = 0) -> Iterator[None]:
        """The diff of ``set_rows``, yielding after every ``chunk`` rows (0: never)."""
        entries = self._entries
        placement = self._placement()
        seen: set[str] = set()
        changed: list[str] = []
        structural = self._owed_reorder
        # dropped before its end, a spread apply owes the next one a reorder: the rows it
        # set are in ``entries``, their lines and places not yet refreshed
        self._owed_reorder = bool(chunk)
        columns = 0
        for count, row in enumerate(rows, 1):
            key = row.key
            seen.add(key)
            columns = max(columns, len(row.values))
            entry = entries.get(key)
            if entry is None:
                entries[key] = _Entry(row, next(self._versions))
                structural = True
            elif entry.row is not row and entry.row != row:
                if structural:  # (the order is rebuilt anyway: no need to compare places)
                    entry.set(row, next(self._versions))
                else:
                    before = placement(entry)
                    entry.set(row, next(self._versions))
                    structural = before != placement(entry)
                changed.append(key)
            if chunk and count % chunk == 0:
                yield
                # a filter, sort or metric changed meanwhile reordered what was set so
                # far; the rest is placed by what holds now
                placement = self._placement()
        if len(entries) != len(seen):
            for key in [k for k in entries if k not in seen]:
                del entries[key]
            structural = True
        if columns != self._columns:
            self._columns = columns
            self._line_cache.clear()
            structural = True
        if structural:
            yield from self._reordering(chunk=chunk)
        else:
            for key in changed:
                position = self._position.get(key)
                if position is not None:
                    self._refresh_row(position)
        self._owed_reorder = False

    def move_cursor_to(self, key: str) -> bool:
        """Put the cursor on ``key`` and scroll to it; False if that row is not shown."""
        position = self._position.get(key)
        if position is None:
            return False
        self._set_cursor(position)
        return True

    def legend_text(self) -> Text:
        """The current metric's title and one coloured swatch per band, plus unknown."""
        metric = self.metric
        fmt = metric.fmt
        bands = metric.bands
        legend = Text(metric.title, style="bold")
        legend.append("  ")
        for band in range(len(bands) + 1):
            if band == 0:
                label = f"<{fmt(bands[0])}" if bands else "all"
            elif band == len(bands):
                label = f"≥{fmt(bands[-1])}"
            else:
                label = f"{fmt(bands[band - 1])}–{fmt(bands[band])}"
            legend.append(f" {label} ", style=self._style(band_class(metric, band)))
            legend.append(" ")
        legend.append(f" {UNKNOWN_TEXT} unknown ", style=self._style("gpu-heatmap--unknown"))
        return legend

    # --- reactives ------------------------------------------------------------------------

    def validate_sort_mode(self, mode: str) -> SortMode:
        if mode not in SORT_MODES:
            raise ValueError(f"sort_mode must be one of {', '.join(SORT_MODES)}, not {mode!r}")
        return mode  # type: ignore[return-value]

    def watch_metric(self) -> None:
        if self.sort_mode == "name":
            self.refresh()
        else:
            self._reorder(to_top=True)

    def watch_filter_text(self) -> None:
        self._reorder()

    def watch_sort_mode(self) -> None:
        self._reorder(to_top=True)

    def notify_style_update(self) -> None:
        # Theme switches and focus changes restyle the component classes.
        super().notify_style_update()
        self._line_cache.clear()

    # --- ordering and cursor ----------------------------------------------------------------

    def _placement(self) -> Callable[[_Entry], tuple[object, ...]]:
        """Where an entry goes: ``(False,)`` if the filter hides it, else ``(True, *sort
        key)``. Reactives are read once here, not per row: their lookup dominates at 4,096."""
        needle = self.filter_text.strip().casefold()
        verdict = _Entry.VERDICT_WORDS.get(needle)
        mode = self.sort_mode
        metric = self.metric

        def placement(entry: _Entry) -> tuple[object, ...]:
            row = entry.row
            if verdict is not None:
                if row.severity is not verdict:
                    return (False,)
            elif needle and needle not in entry.haystack:
                return (False,)
            if mode == "name":
                return (True, entry.name_key, row.key)
            rank = entry.rank(metric)
            if mode == "value":
                return (True, rank, -row.severity, entry.name_key, row.key)
            return (True, -row.severity, rank, entry.name_key, row.key)

        return placement

    @property
    def _header_lines(self) -> int:
        return 1 if self.show_header else 0

    @property
    def _fixed_width(self) -> int:
        """Cells every line needs before the note."""
        return self.label_width + 1 + BADGE_WIDTH + 1 + self._columns * (CELL_WIDTH + 1)

    def _reorder(self, *, to_top: bool = False) -> None:
        """Rebuild the order. A data refresh keeps the row under the cursor where the
        operator looks; ``to_top`` (the operator asked for another order) shows the top
        of the new order, cursor on its first row: the worst, in a "worst first" sort."""
        for _ in self._reordering(to_top=to_top):
            pass

    def _placement_inputs(self) -> tuple[object, ...]:
        return (self.filter_text, self.sort_mode, self.metric)

    def _reordering(self, *, to_top: bool = False, chunk: int = 0) -> Iterator[None]:
        """``_reorder``, yielding after placing every ``chunk`` rows (0: never). A filter,
        sort or metric changed meanwhile starts the placing again under what holds now."""
        entries = list(self._entries.values())
        placed: list[tuple[tuple[object, ...], str]] = []
        inputs = self._placement_inputs()
        placement = self._placement()
        count = 0
        while count < len(entries):
            entry = entries[count]
            count += 1
            if (place := placement(entry))[0]:
                placed.append((place, entry.row.key))
            if chunk and count % chunk == 0:
                yield
                if self._placement_inputs() != inputs:
                    inputs, placement = self._placement_inputs(), self._placement()
                    placed.clear()
                    count = 0
        placed.sort()
        order = [key for _, key in placed]
        # where the operator looks now, keys pressed while placing included
        was_on_screen = self._cursor_on_screen()
        old_position = self.cursor_row
        top = round(self.scroll_y)
        screen_line = 0 if old_position is None else old_position - top
        if order != self._order:
            self._order = order
            self._position = {key: i for i, key in enumerate(order)}
        self.virtual_size = Size(self._fixed_width, len(order) + self._header_lines)
        if to_top:
            self.scroll_to(y=0, animate=False, immediate=True)
            if order:
                self._set_cursor(0)
        elif self._cursor_key not in self._position:
            self._cursor_key = None
            if order:
                self._set_cursor(min(old_position or 0, len(order) - 1), scroll=was_on_screen)
        elif was_on_screen:
            if top > 0:
                # The row being looked at keeps its screen line; the fleet reflows around
                # it. At the top the view stays put instead, so nodes that turn bad (and
                # sort first) appear where the operator is looking.
                position = self._position[self._cursor_key]
                self.scroll_to(y=position - screen_line, animate=False, immediate=True)
            self._scroll_to_cursor()
        self.refresh()

    def _set_cursor(self, position: int, *, scroll: bool = True) -> None:
        if not self._order:
            return
        position = max(0, min(position, len(self._order) - 1))
        key = self._order[position]
        old = self.cursor_row
        if key != self._cursor_key:
            self._cursor_key = key
            if old is not None:
                self._refresh_row(old)
            self._refresh_row(position)
            self.post_message(self.Highlighted(key, self))
        if scroll:
            self._scroll_to_cursor()

    def _scroll_to_cursor(self) -> None:
        position = self.cursor_row
        if position is None:
            return
        header = self._header_lines
        self.scroll_to_region(
            Region(0, position + header, 1, 1),
            spacing=Spacing(header, 0, 0, 0),
            animate=False,
            x_axis=False,
            immediate=True,
        )

    def _page_rows(self) -> int:
        return max(1, self.scrollable_content_region.height - self._header_lines)

    def _cursor_on_screen(self) -> bool:
        position = self.cursor_row
        if position is None:
            return False
        top = round(self.scroll_y)
        return top <= position < top + self._page_rows()

    def _refresh_row(self, position: int) -> None:
        top = round(self.scroll_y)
        if top <= position < top + self._page_rows():
            self.refresh_line(position + self._header_lines)

    def action_cursor_down(self) -> None:
        self._move_by(1)

    def action_cursor_up(self) -> None:
        self._move_by(-1)

    def action_cursor_page_down(self) -> None:
        self._move_by(self._page_rows())

    def action_cursor_page_up(self) -> None:
        self._move_by(-self._page_rows())

    def action_cursor_first(self) -> None:
        self._set_cursor(0)

    def action_cursor_last(self) -> None:
        self._set_cursor(len(self._order) - 1)

    def action_select_cursor(self) -> None:
        if self._cursor_key is not None:
            self.post_message(self.NodeSelected(self._cursor_key, self))

    def _move_by(self, delta: int) -> None:
        position = self.cursor_row
        self._set_cursor(0 if position is None else position + delta)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < self._header_lines:
            return
        position = round(self.scroll_y) + offset.y - self._header_lines
        if position >= len(self._order):
            return
        self._set_cursor(position)
        if event.chain >= 2:
            self.action_select_cursor()

    # --- rendering --------------------------------------------------------------------------

    def _style(self, component: str, *, partial: bool = False) -> Style:
        return self.get_component_rich_style(component, partial=partial, default=Style())

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        line_width = max(width, self._fixed_width)
        header = self._header_lines
        if y < header:
            strip = self._header_strip(line_width)
        else:
            position = scroll_y + y - header
            if position < len(self._order):
                strip = self._row_strip(self._order[position], line_width)
            elif position == 0:
                strip = self._empty_strip(line_width)
            else:
                return Strip.blank(width, self.rich_style)
        if scroll_x == 0 and strip.cell_length == width:
            return strip
        # Strips are never narrower than the view, so no padding style is needed (and
        # ``rich_style`` walks the DOM: it is the costliest call in a scroll repaint).
        return strip.crop_extend(scroll_x, scroll_x + width, None)

    def _row_strip(self, key: str, width: int) -> Strip:
        entry = self._entries[key]
        cursor = key == self._cursor_key
        cache_key = (key, entry.version, width, self.metric, cursor)
        strip = self._line_cache.get(cache_key)
        if strip is None:
            strip = self._build_row_strip(entry.row, width, cursor)
            self._line_cache[cache_key] = strip
        return strip

    def _build_row_strip(self, row: HeatRow, width: int, cursor: bool) -> Strip:
        metric = self.metric
        base = self._style("gpu-heatmap--cursor") if cursor else self.rich_style
        badge, badge_class = _BADGES[row.severity]
        gap = Segment(" ", base)
        label_style = base + self._style("gpu-heatmap--label", partial=True)
        segments = [
            Segment(_fit(row.label, self.label_width), label_style),
            gap,
            Segment(_fit(badge, BADGE_WIDTH), base + self._style(badge_class, partial=True)),
            gap,
        ]
        for value in row.values:
            band = band_index(metric, value)
            text = UNKNOWN_TEXT if band is None else metric.fmt(value)  # type: ignore[arg-type]
            style = self._style(band_class(metric, band))
            segments.append(Segment(_fit(text, CELL_WIDTH, right=True), style))
            segments.append(gap)
        missing = self._columns - len(row.values)
        if missing > 0:
            segments.append(Segment(" " * missing * (CELL_WIDTH + 1), base))
        note_width = width - self._fixed_width
        if note_width > 0:
            note_style = base + self._style("gpu-heatmap--note", partial=True)
            segments.append(Segment(_fit(row.note, note_width), note_style))
        return Strip(segments, max(width, self._fixed_width))

    def _header_strip(self, width: int) -> Strip:
        gpus = "".join(_fit(str(i), CELL_WIDTH, right=True) + " " for i in range(self._columns))
        text = f"{_fit('node', self.label_width)} {'':<{BADGE_WIDTH}} {gpus}reason"
        return Strip([Segment(_fit(text, width), self._style("gpu-heatmap--header"))], width)

    def _empty_strip(self, width: int) -> Strip:
        text = f"no node matches “{self.filter_text}”" if self._entries else "no nodes yet"
        style = self.rich_style + self._style("gpu-heatmap--note", partial=True)
        return Strip([Segment(_fit(text, width), style)], width)


__all__ = [
    "BAND_LEVELS",
    "METRICS",
    "SORT_MODES",
    "GpuHeatmap",
    "HeatRow",
    "Metric",
    "SortMode",
    "band_class",
    "band_index",
    "cell_class",
    "compact_number",
    "percent",
]
