"""The fleet GPU heatmap in a headless app: what renders, where the cursor goes, what it posts.

pytest-asyncio is not a dependency, so each test drives its own ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable
from typing import Any

from rich.style import Style
from textual.app import App, ComposeResult
from textual.message import Message
from textual.pilot import Pilot
from textual.strip import Strip

from krea_ops.model import Severity
from screens.widgets.heatmap import (
    BAND_LEVELS,
    METRICS,
    GpuHeatmap,
    HeatRow,
    Metric,
    band_class,
    cell_class,
    compact_number,
    percent,
)

SIZE = (100, 30)
TEMPERATURE = METRICS["temperature"]
TENSOR = METRICS["tensor"]


class CountingHeatmap(GpuHeatmap):
    """Records which rows had a strip built and how many lines the compositor asked for."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.built: list[str] = []
        self.lines_rendered = 0

    def render_line(self, y: int) -> Strip:
        self.lines_rendered += 1
        return super().render_line(y)

    def _build_row_strip(self, row: HeatRow, width: int, cursor: bool) -> Strip:
        self.built.append(row.key)
        return super()._build_row_strip(row, width, cursor)

    def reset_counts(self) -> None:
        self.built.clear()
        self.lines_rendered = 0


class HeatmapApp(App[None]):
    def __init__(self, heatmap: GpuHeatmap) -> None:
        super().__init__()
        self.heatmap = heatmap

    def compose(self) -> ComposeResult:
        yield self.heatmap

    def on_mount(self) -> None:
        self.heatmap.focus()


def fleet(
    n: int, gpus: int = 8, temp: Callable[[int, int], float | None] | None = None
) -> list[HeatRow]:
    """``n`` healthy nodes at 50-70 °C, named like the simulator names them."""

    def default(i: int, g: int) -> float | None:
        return 50.0 + (i * 7 + g * 3) % 20

    value = temp or default
    return [
        HeatRow(
            key=f"gpu-node-{i:04d}",
            label=f"gpu-node-{i:04d}",
            severity=Severity.OK,
            values=tuple(value(i, g) for g in range(gpus)),
        )
        for i in range(n)
    ]


def run(
    test: Callable[[Pilot[None], GpuHeatmap, list[Message]], Awaitable[None]],
    heatmap: GpuHeatmap | None = None,
) -> None:
    messages: list[Message] = []
    widget = heatmap or CountingHeatmap()
    app = HeatmapApp(widget)

    async def main() -> None:
        async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
            await pilot.pause()
            await test(pilot, widget, messages)

    asyncio.run(main())


def line_of(heatmap: GpuHeatmap, key: str) -> Strip:
    """The strip the user sees for ``key`` (which must be on screen)."""
    position = heatmap.ordered_keys.index(key)
    y = position + 1 - round(heatmap.scroll_y)
    assert 1 <= y < heatmap.scrollable_content_region.height, f"{key} is off screen"
    return heatmap.render_line(y)


def cell_segments(heatmap: GpuHeatmap, key: str) -> list[tuple[str, Style]]:
    """(text, style) of each GPU cell on ``key``'s line, left to right."""
    strip = line_of(heatmap, key)
    start = heatmap.label_width + 1 + 3 + 1
    cells = []
    for i in range(heatmap._columns):
        x = start + i * 4
        piece = list(strip.crop(x, x + 3))
        assert len(piece) == 1, piece
        cells.append((piece[0].text, piece[0].style or Style()))
    return cells


def of_type(messages: list[Message], kind: type[Message]) -> list[Any]:
    """Messages of ``kind``, each once (the hook sees a message again at every bubble)."""
    unique = {id(m): m for m in messages if isinstance(m, kind)}
    return list(unique.values())


# --- pure helpers -------------------------------------------------------------------------


def test_cell_text_fits_three_characters() -> None:
    cases = {81.4: "81", 100: "100", 999.4: "999", 1234: "1k", 99_400: "99k"}
    cases |= {99_600: ".1M", 2.5e6: "2M", -12: "-12", 0.2: "0", 1e20: "999"}
    assert {v: compact_number(v) for v in cases} == cases
    assert (percent(0.95), percent(1.0), percent(0.004)) == ("95", "100", "0")


def test_unknown_never_gets_a_band_and_low_is_bad_metrics_invert() -> None:
    for metric in METRICS.values():
        assert cell_class(metric, None) == "gpu-heatmap--unknown"
        assert cell_class(metric, math.nan) == "gpu-heatmap--unknown"
    # A real zero is a value: zero tensor activity is the worst band, not "unknown".
    assert cell_class(TENSOR, 0.0) == f"gpu-heatmap--band-{BAND_LEVELS - 1}"
    assert cell_class(TENSOR, 0.9) == "gpu-heatmap--band-0"
    assert cell_class(TEMPERATURE, 40.0) == "gpu-heatmap--band-0"
    assert cell_class(TEMPERATURE, 90.0) == f"gpu-heatmap--band-{BAND_LEVELS - 1}"
    assert cell_class(METRICS["util"], 0.0).startswith("gpu-heatmap--scale-")
    assert {band_class(TEMPERATURE, b) for b in range(5)} == {
        f"gpu-heatmap--band-{i}" for i in range(5)
    }


# --- rendering --------------------------------------------------------------------------


def test_4096_rows_render_only_the_visible_lines() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        assert isinstance(heatmap, CountingHeatmap)
        heatmap.sort_mode = "name"
        heatmap.reset_counts()
        heatmap.set_rows(fleet(4096))
        await pilot.pause()
        page = heatmap.scrollable_content_region.height - 1  # minus the header line
        keys = heatmap.ordered_keys
        assert heatmap.row_count == 4096 and heatmap.virtual_size.height == 4097
        assert sorted(heatmap.built) == sorted(keys[:page])
        assert heatmap.lines_rendered <= 2 * SIZE[1]

        heatmap.reset_counts()
        await pilot.press("end")
        await pilot.pause()
        assert heatmap.cursor_key == keys[-1]
        assert set(heatmap.built) <= set(keys[-page:])
        assert len(heatmap.built) <= page
        assert len(heatmap._line_cache) <= 2 * page + 1

    run(check)


def test_one_changed_row_out_of_4096_rerenders_only_its_line() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        assert isinstance(heatmap, CountingHeatmap)
        rows = fleet(4096)
        heatmap.sort_mode = "name"
        heatmap.set_rows(rows)
        await pilot.pause()
        visible, hidden = rows[5], rows[3000]
        rows[5] = dataclasses.replace(visible, values=(88.0, *visible.values[1:]))
        rows[3000] = dataclasses.replace(hidden, values=(89.0, *hidden.values[1:]))
        heatmap.reset_counts()
        heatmap.set_rows(rows)
        await pilot.pause()
        assert heatmap.built == [visible.key]
        assert heatmap.lines_rendered == 1
        assert cell_segments(heatmap, visible.key)[0][0] == " 88"

        # In attention order a hotter node moves up; still only its strip is rebuilt.
        heatmap.sort_mode = "attention"
        await pilot.press("home")  # the cursor followed gpu-node-0000 down; back to the top
        rows[7] = dataclasses.replace(rows[7], values=(95.0, *rows[7].values[1:]))
        heatmap.reset_counts()
        heatmap.set_rows(rows)
        await pilot.pause()
        assert heatmap.ordered_keys[0] == rows[7].key
        assert heatmap.scroll_y == 0  # at the top the view stays there: the new worst shows
        assert heatmap.built == [rows[7].key]

    run(check)


def test_unknown_cells_are_never_styled_like_a_value() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        rows = [
            HeatRow("a", "a", Severity.UNKNOWN, (None, math.nan, None, None)),
            HeatRow("b", "b", Severity.OK, (40.0, 70.0, 76.0, 80.0)),
        ]
        for metric in METRICS.values():
            heatmap.metric = metric
            heatmap.set_rows(rows)
            await pilot.pause()
            unknown = cell_segments(heatmap, "a")
            assert {text for text, _ in unknown} == {"  ?"}
            value_backgrounds = {
                heatmap.get_component_rich_style(cls).bgcolor
                for cls in heatmap.COMPONENT_CLASSES
                if "--band-" in cls or "--scale-" in cls
            }
            assert all(style.bgcolor not in value_backgrounds for _, style in unknown)
        heatmap.metric = TEMPERATURE
        await pilot.pause()
        known = cell_segments(heatmap, "b")
        assert [text for text, _ in known] == [" 40", " 70", " 76", " 80"]
        # four bands of temperature, four different colours, green for the coolest
        assert len({style.bgcolor for _, style in known}) == 4
        assert known[0][1] == heatmap.get_component_rich_style("gpu-heatmap--band-0")

    run(check)


def test_metric_switch_changes_cells_and_legend() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        heatmap.set_rows([HeatRow("n1", "n1", Severity.OK, (71.4, 45.0))])
        await pilot.pause()
        assert [t for t, _ in cell_segments(heatmap, "n1")] == [" 71", " 45"]
        assert heatmap.legend_text().plain.startswith("GPU temperature °C")

        heatmap.metric = TENSOR
        heatmap.set_rows([HeatRow("n1", "n1", Severity.OK, (0.42, 0.05))])
        await pilot.pause()
        cells = cell_segments(heatmap, "n1")
        assert [t for t, _ in cells] == [" 42", "  5"]
        worst = heatmap.get_component_rich_style(f"gpu-heatmap--band-{BAND_LEVELS - 1}")
        assert cells[1][1] == worst  # 5% tensor activity is the red end
        legend = heatmap.legend_text().plain
        assert legend.startswith("Tensor-core activity %") and "<10" in legend
        assert "? unknown" in legend

    run(check)


# --- cursor, keys, mouse, messages -------------------------------------------------------


def test_cursor_keeps_its_key_when_rows_reorder() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, messages: list[Message]) -> None:
        rows = fleet(50)
        heatmap.set_rows(rows)
        await pilot.pause()
        await pilot.press("down", "down", "down")
        key = heatmap.ordered_keys[3]
        assert heatmap.cursor_key == key
        assert [m.key for m in of_type(messages, GpuHeatmap.Highlighted)][-1] == key

        messages.clear()
        moved = [dataclasses.replace(r, severity=Severity.BAD) if r.key == key else r for r in rows]
        heatmap.set_rows(list(reversed(moved)))
        await pilot.pause()
        assert heatmap.ordered_keys[0] == key  # BAD sorts first
        assert (heatmap.cursor_key, heatmap.cursor_row) == (key, 0)
        assert line_of(heatmap, key).text.startswith(key)
        cursor_bg = heatmap.get_component_rich_style("gpu-heatmap--cursor").bgcolor
        first_segment = next(iter(line_of(heatmap, key)))
        assert first_segment.style is not None and first_segment.style.bgcolor == cursor_bg
        assert of_type(messages, GpuHeatmap.Highlighted) == []

        # When its row goes away the cursor lands on the row now in its place.
        heatmap.set_rows([r for r in moved if r.key != key])
        await pilot.pause()
        assert heatmap.cursor_key == heatmap.ordered_keys[0]
        assert [m.key for m in of_type(messages, GpuHeatmap.Highlighted)] == [heatmap.cursor_key]

    run(check)


def test_cursor_row_keeps_its_screen_line_when_scrolled_into_the_fleet() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        rows = fleet(4096, temp=lambda i, g: 40.0 + (i * 37 % 4096) / 100)
        heatmap.set_rows(rows)
        await pilot.pause()
        await pilot.press("pagedown", "pagedown", "pagedown", "up", "up", "up")
        key = heatmap.cursor_key
        assert key is not None
        screen_line = heatmap.ordered_keys.index(key) - round(heatmap.scroll_y)
        assert screen_line > 0 and heatmap.scroll_y > 0

        hotter = [
            dataclasses.replace(r, values=tuple(v + 0.3 for v in r.values if v is not None))
            if r.key == key
            else r
            for r in rows
        ]
        before = heatmap.cursor_row
        assert before is not None
        heatmap.set_rows(hotter)
        await pilot.pause()
        after = heatmap.cursor_row
        assert heatmap.cursor_key == key and after is not None and after != before
        assert after - round(heatmap.scroll_y) == screen_line
        assert line_of(heatmap, key).text.startswith(key)

    run(check)


def test_enter_and_double_click_post_node_selected() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, messages: list[Message]) -> None:
        heatmap.set_rows(fleet(40))
        await pilot.pause()
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        keys = heatmap.ordered_keys
        assert [m.key for m in of_type(messages, GpuHeatmap.NodeSelected)] == [keys[2]]

        await pilot.click(GpuHeatmap, offset=(2, 5))  # line 5 = row 4 under the header
        await pilot.pause()
        assert heatmap.cursor_key == keys[4]
        assert len(of_type(messages, GpuHeatmap.NodeSelected)) == 1
        await pilot.double_click(GpuHeatmap, offset=(2, 6))
        await pilot.pause()
        assert of_type(messages, GpuHeatmap.NodeSelected)[-1].key == keys[5]

    run(check)


def test_paging_keeps_the_cursor_on_screen() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        heatmap.set_rows(fleet(500))
        await pilot.pause()
        page = heatmap.scrollable_content_region.height - 1
        for key, expected in [("pagedown", page), ("pagedown", 2 * page), ("up", 2 * page - 1)]:
            await pilot.press(key)
            await pilot.pause()
            assert heatmap.cursor_row == expected
            top = round(heatmap.scroll_y)
            assert top <= expected < top + page
        await pilot.press("end")
        await pilot.pause()
        assert heatmap.cursor_row == 499 and heatmap.scroll_y == heatmap.max_scroll_y
        await pilot.press("home")
        await pilot.pause()
        assert (heatmap.cursor_row, heatmap.scroll_y) == (0, 0)

    run(check)


# --- filter and sort -----------------------------------------------------------------------


def test_filter_narrows_rows_by_label_or_note() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        rows = fleet(4096)
        rows[1234] = dataclasses.replace(
            rows[1234], severity=Severity.BAD, note="GPU 2 XID 79: fell off the bus"
        )
        heatmap.set_rows(rows)
        await pilot.pause()
        heatmap.filter_text = "NODE-01"
        await pilot.pause()
        assert heatmap.row_count == 100  # gpu-node-0100 .. gpu-node-0199
        assert heatmap.virtual_size.height == 101
        assert all(k.startswith("gpu-node-01") for k in heatmap.ordered_keys)
        assert heatmap.cursor_key in heatmap.ordered_keys
        assert heatmap.total_count == 4096

        heatmap.filter_text = "xid 79"
        await pilot.pause()
        assert heatmap.ordered_keys == ("gpu-node-1234",)
        assert "XID 79" in line_of(heatmap, "gpu-node-1234").text

        heatmap.filter_text = "no such node"
        await pilot.pause()
        assert heatmap.row_count == 0 and heatmap.cursor_key is None
        assert "no node matches" in heatmap.render_line(1).text

        heatmap.filter_text = ""
        await pilot.pause()
        assert heatmap.row_count == 4096

    run(check)


def test_sort_modes() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        rows = [
            HeatRow("n10", "gpu-node-10", Severity.OK, (60.0, 91.0)),
            HeatRow("n9", "gpu-node-9", Severity.OK, (62.0, 61.0)),
            HeatRow("n2", "gpu-node-2", Severity.SUSPECT, (50.0, 52.0)),
            HeatRow("nx", "gpu-node-x", Severity.OK, (None, None)),
        ]
        heatmap.set_rows(rows)
        heatmap.sort_mode = "name"
        assert heatmap.ordered_keys == ("n2", "n9", "n10", "nx")
        heatmap.sort_mode = "value"
        assert heatmap.ordered_keys == ("n10", "n9", "n2", "nx")  # hottest first, unknown last
        heatmap.sort_mode = "attention"
        assert heatmap.ordered_keys == ("n2", "n10", "n9", "nx")
        heatmap.metric = Metric("cool", "lower is worse", (55.0,), False, compact_number)
        heatmap.sort_mode = "value"
        assert heatmap.ordered_keys == ("n2", "n10", "n9", "nx")  # coolest first now
        try:
            heatmap.sort_mode = "random"  # type: ignore[assignment]
        except ValueError as err:
            assert "attention" in str(err)
        else:
            raise AssertionError("an unknown sort mode was accepted")
        await pilot.pause()

    run(check)


def test_a_new_sort_shows_the_top_of_the_new_order_but_a_refresh_keeps_the_place() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        rows = fleet(500)
        heatmap.set_rows(rows)
        await pilot.pause()
        heatmap.move_cursor_to("gpu-node-0300")
        await pilot.pause()
        assert heatmap.scroll_y > 0
        # a data refresh that reorders nothing keeps the operator where they were
        heatmap.set_rows([dataclasses.replace(r, note="refreshed") for r in rows])
        await pilot.pause()
        assert heatmap.cursor_key == "gpu-node-0300"
        # another order asked for: its top, the cursor on its first row
        heatmap.sort_mode = "value"
        await pilot.pause()
        assert heatmap.scroll_y == 0 and heatmap.cursor_row == 0
        assert heatmap.cursor_key == heatmap.ordered_keys[0]
        heatmap.move_cursor_to(heatmap.ordered_keys[250])
        heatmap.metric = METRICS["margin"]  # the value order changes with the metric
        await pilot.pause()
        assert heatmap.scroll_y == 0 and heatmap.cursor_key == heatmap.ordered_keys[0]

    run(check)


def test_the_filter_takes_a_verdict_word_as_the_verdict() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        rows = fleet(40)
        rows[3] = dataclasses.replace(rows[3], severity=Severity.BAD, note="GPU 1 at 90 °C")
        rows[7] = dataclasses.replace(rows[7], severity=Severity.SUSPECT, note="IB errors")
        rows[9] = dataclasses.replace(rows[9], note="not bad at all")  # OK, "bad" in its note
        heatmap.set_rows(rows)
        for text, keys in (
            ("bad", ("gpu-node-0003",)),
            ("BAD", ("gpu-node-0003",)),
            ("sus", ("gpu-node-0007",)),
            ("suspect", ("gpu-node-0007",)),
            ("unk", ()),
            ("not bad", ("gpu-node-0009",)),  # any other text: names and reasons
        ):
            heatmap.filter_text = text
            await pilot.pause()
            assert heatmap.ordered_keys == keys, text
        heatmap.filter_text = "ok"
        await pilot.pause()
        assert heatmap.row_count == 38  # every OK node, the one with "bad" in its note too

    run(check)


def test_worst_first_tensor_activity_ranks_busy_but_idle_gpus_before_idle_ones() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        tensor = METRICS["tensor"]
        heatmap.metric = tensor
        heatmap.set_rows(
            [
                # values: tensor activity; ranks: busy time minus tensor activity
                HeatRow("idle", "gpu-node-1", Severity.OK, (0.0, 0.0), ranks=(0.0, 0.0)),
                HeatRow("wasted", "gpu-node-2", Severity.OK, (0.05, 0.6), ranks=(0.95, 0.3)),
                HeatRow("working", "gpu-node-3", Severity.OK, (0.7, 0.65), ranks=(0.25, 0.3)),
            ]
        )
        heatmap.sort_mode = "value"
        await pilot.pause()
        assert heatmap.ordered_keys == ("wasted", "working", "idle")

    run(check)


class KeyRecordingHeatmap(CountingHeatmap):
    """Records, for each ``down`` handled, whether a spread apply was still under way."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.down_while_applying: list[bool] = []

    def action_cursor_down(self) -> None:
        self.down_while_applying.append(self.applying)
        super().action_cursor_down()


async def until_applied(pilot: Pilot[None], heatmap: GpuHeatmap) -> None:
    for _ in range(2000):
        if not heatmap.applying:
            return
        await pilot.pause(0.005)
    raise AssertionError("the apply never finished")


def refreshed(rows: list[HeatRow], step: int, bad_every: int) -> list[HeatRow]:
    """Every row's values moved by ``step``; every ``bad_every``-th row BAD."""
    return [
        dataclasses.replace(
            r,
            values=tuple(v + step for v in r.values if v is not None),
            severity=Severity.BAD if i % bad_every == 0 else Severity.OK,
            note="hot" if i % bad_every == 0 else "",
        )
        for i, r in enumerate(rows)
    ]


def test_a_5000_node_refresh_is_spread_over_turns_and_a_key_does_not_wait_for_it() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        assert isinstance(heatmap, KeyRecordingHeatmap)
        rows = fleet(5000)
        heatmap.set_rows(rows)
        await pilot.pause()
        new = refreshed(rows, 1, 97)
        new.append(HeatRow("gpu-node-9999", "gpu-node-9999", Severity.OK, (60.0,) * 8))
        del new[17]
        heatmap.apply_rows(new)
        assert heatmap.applying  # one chunk in, the rest still to come
        assert heatmap.get_row(new[0].key) == new[0]
        assert heatmap.get_row(rows[4999].key) == rows[4999]
        await pilot.press("down")
        assert heatmap.down_while_applying == [True]  # handled between chunks
        await until_applied(pilot, heatmap)
        assert heatmap.total_count == 5000
        assert all(heatmap.get_row(r.key) == r for r in new)
        assert "gpu-node-0017" not in heatmap.ordered_keys
        bad = [r.key for r in new if r.severity is Severity.BAD]
        assert set(heatmap.ordered_keys[: len(bad)]) == set(bad)  # worst first
        await pilot.press("home")
        assert "hot" in line_of(heatmap, heatmap.ordered_keys[0]).text

    run(check, KeyRecordingHeatmap())


def test_a_refresh_replaced_or_refiltered_while_spread_ends_as_if_applied_at_once() -> None:
    async def check(pilot: Pilot[None], heatmap: GpuHeatmap, _: list[Message]) -> None:
        rows = fleet(3000)
        heatmap.sort_mode = "name"
        heatmap.set_rows(rows)
        await pilot.pause()
        first = refreshed(rows, 1, 50)
        first.append(HeatRow("gpu-node-8888", "gpu-node-8888", Severity.OK, (60.0,) * 8))
        heatmap.apply_rows(first)
        assert heatmap.applying
        # the next read arrives before the first is in: the first's new row, set already
        # but never placed, and its removed row are what the second says they are
        second = refreshed(rows, 2, 41)
        heatmap.apply_rows(second)
        # and the operator types a filter while it is spread
        heatmap.filter_text = "bad"
        await until_applied(pilot, heatmap)
        assert heatmap.total_count == 3000
        assert "gpu-node-8888" not in heatmap.ordered_keys
        assert heatmap.ordered_keys == tuple(
            sorted(r.key for r in second if r.severity is Severity.BAD)
        )
        heatmap.filter_text = ""
        await pilot.pause()
        assert heatmap.row_count == 3000
        assert all(heatmap.get_row(r.key) == r for r in second)
        # a row that turns BAD in the last chunk, with the filter set after the first
        third = refreshed(rows, 3, 10**6)  # only row 0 BAD
        third[2999] = dataclasses.replace(third[2999], severity=Severity.BAD)
        heatmap.apply_rows(third)
        heatmap.filter_text = "bad"
        await until_applied(pilot, heatmap)
        assert heatmap.ordered_keys == ("gpu-node-0000", "gpu-node-2999")

    run(check)
