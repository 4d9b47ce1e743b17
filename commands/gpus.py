"""``krea-ops gpus``: one row per GPU with temperature, busy time next to tensor activity,
errors and a verdict."""

from __future__ import annotations

import functools
from enum import StrEnum
from typing import Any

import typer

from commands import fmt
from commands.common import OutputOption, read_fleet
from commands.output import Formatter, OutputFormat, emit, render
from krea_ops import units
from krea_ops.errors import Unavailable
from krea_ops.fleet import FleetSnapshot, GpuEntry, gpu_entries
from krea_ops.health import busy_idle_gap
from krea_ops.model import Severity


class GpuSort(StrEnum):
    verdict = "verdict"
    temperature = "temperature"
    tensor = "tensor"
    util = "util"
    node = "node"


COLUMNS = [
    "node",
    "index",
    "temperature_c",
    "slowdown_margin_c",
    "power_w",
    "util_ratio",
    "tensor_active_ratio",
    "memory_used_bytes",
    "xid_last",
    "nvlink_errors",
    "verdict",
]
WIDE = [
    "node",
    "index",
    "model",
    "temperature_c",
    "temperature_min_window_c",
    "slowdown_margin_c",
    "power_w",
    "power_limit_w",
    "util_ratio",
    "tensor_active_ratio",
    "sm_active_ratio",
    "memory_used_bytes",
    "xid_last",
    "nvlink_errors",
    "clock_events",
    "age_s",
    "verdict",
    "reasons",
]
HEADERS = {
    "index": "GPU",
    "temperature_c": "TEMP",
    "temperature_min_window_c": "TEMP-MIN",
    "slowdown_margin_c": "MARGIN",
    "power_w": "POWER",
    "power_limit_w": "LIMIT",
    "util_ratio": "BUSY",
    "tensor_active_ratio": "TENSOR",
    "sm_active_ratio": "SM",
    "memory_used_bytes": "MEM",
    "xid_last": "XID",
    "nvlink_errors": "NVL-ERR",
    "clock_events": "CLOCK-EVENTS",
    "age_s": "AGE",
}
FORMATS: dict[str, Formatter] = {
    "temperature_c": units.celsius,
    "temperature_min_window_c": units.celsius,
    "slowdown_margin_c": units.celsius,
    "power_w": units.watts,
    "power_limit_w": units.watts,
    "util_ratio": units.percent,
    "tensor_active_ratio": units.percent,
    "sm_active_ratio": units.percent,
    "memory_used_bytes": units.size,
    "nvlink_errors": units.count,
    "age_s": units.age,
    "reasons": fmt.first_reason,
}


_NO_SAMPLE = dict.fromkeys(  # the keys of a row from uuid to sampled_at, in order
    (
        "uuid",
        "model",
        "pci_bus_id",
        "up",
        "temperature_c",
        "temperature_min_window_c",
        "memory_temperature_c",
        "slowdown_margin_c",
        "power_w",
        "power_limit_w",
        "util_ratio",
        "tensor_active_ratio",
        "sm_active_ratio",
        "memory_used_bytes",
        "memory_total_bytes",
        "clock_events",
        "xid_last",
        "xid_counts",
        "nvlink_errors",
        "sampled_at",
    )
)


@functools.lru_cache(maxsize=256)  # a fleet's GPUs share a handful of event sets
def _events(events: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted(events))


def gpu_row(entry: GpuEntry, now: float) -> dict[str, Any]:
    g = entry.sample
    verdict = entry.verdict
    if g is None:  # (one branch per row, not one per key: 32,768 rows at 4,096 nodes)
        tel = entry.view.telemetry
        row = {
            "node": entry.node,
            "index": entry.index,
            **_NO_SAMPLE,
            "age_s": round(tel.age_s, 1) if tel is not None and tel.age_s is not None else None,
            "verdict": verdict.severity.name,
            "reasons": [r.message for r in verdict.reasons],
            "doubtful": [],
            "doubt": None,
        }
        row["model"] = entry.view.info.labels.get("nvidia.com/gpu.product")
        return row
    sampled = g.sampled_at
    if sampled is not None:
        age: float | None = round(now - sampled, 1)
    else:
        tel = entry.view.telemetry
        age = round(tel.age_s, 1) if tel is not None and tel.age_s is not None else None
    xid = g.xid_increase
    return {
        "node": entry.node,
        "index": entry.index,
        "uuid": g.uuid,
        "model": g.model,
        "pci_bus_id": g.pci_bus_id,
        "up": g.up,
        "temperature_c": g.temperature_c,
        "temperature_min_window_c": g.temperature_min_window_c,
        "memory_temperature_c": g.memory_temperature_c,
        "slowdown_margin_c": g.slowdown_margin_c,
        "power_w": g.power_w,
        "power_limit_w": g.power_limit_w,
        "util_ratio": g.util_ratio,
        "tensor_active_ratio": g.tensor_active_ratio,
        "sm_active_ratio": g.sm_active_ratio,
        "memory_used_bytes": g.memory_used_bytes,
        "memory_total_bytes": g.memory_total_bytes,
        "clock_events": None if g.clock_events is None else list(_events(g.clock_events)),
        "xid_last": g.xid_last,
        "xid_counts": (
            None if xid is None else {str(k): v for k, v in sorted(xid.items())} if xid else {}
        ),
        "nvlink_errors": entry.nvlink_errors,
        "sampled_at": fmt.iso(sampled),
        "age_s": age,
        "verdict": verdict.severity.name,
        "reasons": [r.message for r in verdict.reasons],
        # readings that contradict each other (health.activity_doubt): not facts
        "doubtful": sorted(entry.doubt.fields) if entry.doubt else [],
        "doubt": entry.doubt.message if entry.doubt else None,
    }


def marked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table rows with each doubtful reading printed with a ``?`` (JSON keeps the
    numbers and says which in ``doubtful``)."""
    out = []
    for row in rows:
        if row.get("doubtful"):
            row = dict(row)
            for key in row["doubtful"]:
                if row.get(key) is not None:
                    row[key] = f"{FORMATS[key](row[key])}?"
        out.append(row)
    return out


def _text_or(format_value: Formatter) -> Formatter:
    return lambda v: v if isinstance(v, str) else format_value(v)


# FORMATS for rows that went through marked(): a marked reading is already text
MARKED_FORMATS: dict[str, Formatter] = {k: _text_or(f) for k, f in FORMATS.items()}


def gpu_rows(snapshot: FleetSnapshot) -> list[dict[str, Any]]:
    return [gpu_row(e, snapshot.collected_at) for e in gpu_entries(snapshot)]


def _sort(rows: list[dict[str, Any]], by: GpuSort) -> list[dict[str, Any]]:
    def num(row: dict[str, Any], key: str, missing: float) -> float:
        v = row.get(key)
        return missing if v is None else float(v)

    order = {s.name: s.value for s in Severity}
    if by is GpuSort.node:
        return sorted(rows, key=lambda r: (r["node"], r["index"]))
    if by is GpuSort.temperature:
        return sorted(rows, key=lambda r: (-num(r, "temperature_c", -1e9), r["node"], r["index"]))
    if by is GpuSort.util:
        return sorted(rows, key=lambda r: (-num(r, "util_ratio", -1e9), r["node"], r["index"]))
    if by is GpuSort.tensor:
        # wasted first: the most busy time above tensor activity (an input-bound GPU
        # reads 100 % busy with idle tensor cores); an idle GPU is merely free
        def wasted(r: dict[str, Any]) -> tuple[float, float, str, int]:
            gap = busy_idle_gap(r.get("util_ratio"), r.get("tensor_active_ratio"))
            return (-gap if gap is not None else 1e9, num(r, "tensor_active_ratio", 1e9),
                    r["node"], r["index"])  # fmt: skip

        return sorted(rows, key=wasted)
    return sorted(rows, key=lambda r: (-order[r["verdict"]], r["node"], r["index"]))


def attention_lines(rows: list[dict[str, Any]], label: Any, limit: int = 20) -> str:
    """Below a table: the reasons for each row that is not OK, and readings that
    contradict each other (the table has no room)."""
    flagged = [r for r in rows if (r["verdict"] != "OK" and r.get("reasons")) or r.get("doubt")]
    lines = []
    for r in flagged[:limit]:
        said = [*(r["reasons"] if r["verdict"] != "OK" else ()), *filter(None, [r.get("doubt")])]
        lines.append(f"{label(r)}: {r['verdict']}: {'; '.join(said)}")
    if len(flagged) > limit:
        lines.append(f"... and {len(flagged) - limit} more (-o wide or -o json shows all)")
    return ("\n" + "\n".join(lines) + "\n") if lines else ""


def source_line(snapshot: FleetSnapshot) -> str:
    src = snapshot.source or "no telemetry"
    return f"telemetry: {src}, window {snapshot.policy.window_text}\n" + skipped_line(snapshot)


def skipped_line(snapshot: FleetSnapshot) -> str:
    """Where the node summaries spared the read some readings (docs/metrics.md): how many
    nodes were still asked for them. A user who just saw an error counter move knows
    the summaries lag it by up to one rule evaluation."""
    from krea_ops.telemetry.summary import PROVEN_EMPTY

    tel = snapshot.telemetry
    skipped = {k: v for k, v in (tel.skipped if tel else {}).items() if k in PROVEN_EMPTY}
    if tel is None or not skipped:
        return ""
    proven = frozenset.intersection(*skipped.values()) & tel.nodes.keys()
    total = len(tel.nodes)
    # (a read that asks for fewer readings, ``fabric``'s, names only those it skipped)
    names = list(dict.fromkeys(SKIPPED_NAMES[k] for k in SKIPPED_NAMES if k in skipped))
    names += [k for k in skipped if k not in SKIPPED_NAMES]
    what = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return (
        f"node summaries: {what} asked of "
        f"{total - len(proven):,} of {total:,} nodes (the others' summaries prove them 0)\n"
    )


# what the skipped-readings line calls each reading the summaries can prove empty
SKIPPED_NAMES = {
    "nvlink_fault_rate": "NVLink faults",
    "xid_last": "XIDs",
    "xid_rate": "XIDs",
    "ecc_uncorrected_rate": "ECC",
    "row_remap_pending": "row remapping",
    "row_remap_failed": "row remapping",
    "ib_error_total": "IB errors",
    "ib_error_rate": "IB errors",
    "nvlink_sum_total": "NVLink errors",
    "nvlink_sum_rate": "NVLink errors",
    "ib_saturated": "IB saturation",
}


def register(app: typer.Typer) -> None:
    @app.command("gpus", rich_help_panel="Fleet")
    def gpus(
        ctx: typer.Context,
        node: str = typer.Option(None, "--node", help="only this node"),
        selector: str = typer.Option(
            None, "--selector", "-l", help="only nodes matching this label selector"
        ),
        sort: GpuSort = typer.Option(
            GpuSort.verdict,
            "--sort",
            metavar="KEY",
            help="verdict (worst first), temperature (hottest first), tensor (busy time "
            "furthest above tensor activity first: the wasted GPUs), util (busiest first) "
            "or node",
            case_sensitive=False,
        ),
        output: OutputFormat = OutputOption,
    ) -> None:
        """One row per GPU: temperature, slowdown margin, power, GPU utilization (busy
        time) next to tensor-core activity, memory, XIDs, NVLink errors and a verdict."""
        snapshot = read_fleet(ctx, node=node, selector=selector, families=("gpu",))
        if snapshot.telemetry_error:
            raise Unavailable(snapshot.telemetry_error)
        rows = _sort(gpu_rows(snapshot), sort)
        policy = snapshot.policy
        tabular = output in (OutputFormat.table, OutputFormat.wide)
        text = render(
            marked(rows) if tabular else rows,
            output,
            columns=COLUMNS,
            wide_columns=WIDE,
            headers=HEADERS,
            formats=MARKED_FORMATS,
            styles={
                "verdict": fmt.verdict_style(),
                "temperature_c": fmt.temperature_style(policy.hot_c, policy.warm_c),
            },
        )
        if output is OutputFormat.table:
            text = source_line(snapshot) + text
            text += attention_lines(rows, lambda r: f"{r['node']}/gpu{r['index']}")
        emit(text)
        if snapshot.telemetry and snapshot.telemetry.errors:
            for line in snapshot.telemetry.errors:
                typer.echo(f"warning: {line}", err=True)
