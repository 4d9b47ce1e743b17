"""The node-summary clean test: a node is left unread only when no health rule could
fire on it (krea_ops/telemetry/summary.py)."""

from __future__ import annotations

import re

import pytest

from krea_ops.health import HealthPolicy
from krea_ops.model import NODE_FOLDS
from krea_ops.telemetry.dialects import FAMILY_BY_KEY
from krea_ops.telemetry.summary import (
    FILLED,
    JUDGED,
    OBJECTS,
    PROVEN_EMPTY,
    PROVEN_FULL,
    PROVEN_VALUE,
    PROVING,
    Only,
    Unasked,
    expressions,
    proving,
    unclean,
)

POLICY = HealthPolicy(hot_c=78.0, warm_c=75.0, slowdown_margin_c=5.0, xmit_wait_ratio_suspect=0.2)

# a healthy 8-GPU node: only the dense summaries have rows, the sparse ones none
CLEAN = {
    "gpus": 8.0,
    "gpus_up_min": 1.0,
    "temperature_max": 74.0,
    "margin_min": 12.0,
    "clock_masks": 8.0,
    "nvlink_gpus": 8.0,
    "nvlinks_down": 0.0,
    "ecc_uncorrected_rate": 0.0,
    "row_remap_max": 0.0,
    "nvlink_faults_rate": 0.0,
    "ib_saturated_max": 0.0,
    "ib_congestion_max": 0.05,
}


def test_a_healthy_node_is_clean() -> None:
    assert unclean(CLEAN, POLICY) is None


@pytest.mark.parametrize(
    ("what", "value", "why"),
    [
        ("gpus", None, "no GPU count"),
        ("gpus", 0.0, "no GPU count"),
        ("gpus_up_min", 0.0, "a GPU is not answering NVML"),
        ("gpus_up_min", None, "a GPU is not answering NVML"),
        ("clock_masks", 7.0, "not every GPU serves the clock-event bitmask"),
        ("nvlink_gpus", None, "not every GPU serves its NVLink series"),
        ("temperature_max", 75.0, "a GPU is warm or hot, or its temperature is unknown"),
        ("temperature_max", None, "a GPU is warm or hot, or its temperature is unknown"),
        ("margin_min", 4.9, "a GPU is near its slowdown temperature, or its margin is unknown"),
        ("slowdown_gpus", 1.0, "a GPU's clocks are held down"),
        ("xid_last_max", 79.0, "a recent XID"),
        ("xids_new", 1.0, "an XID in the window"),
        ("ecc_uncorrected_rate", 0.01, "uncorrectable ECC errors in the window"),
        ("row_remap_max", 1.0, "a row remap pending or failed"),
        ("nvlink_faults_rate", 0.003, "NVLink recovery/CRC errors in the window"),
        ("nvlinks_down", 1.0, "an NVLink is down"),
        ("ib_ports_not_active", 1.0, "an IB port is not active"),
        ("ib_error_ports", 2.0, "IB errors in the window"),
        ("ib_saturated_max", 1.0, "a saturated IB counter"),
        ("ib_congestion_max", 0.2, "IB congestion"),
        ("ib_congestion_max", float("nan"), "IB congestion"),
    ],
)
def test_each_summary_a_rule_could_fire_on_makes_the_node_read(
    what: str, value: float | None, why: str
) -> None:
    values = dict(CLEAN)
    if value is None:
        values.pop(what, None)
    else:
        values[what] = value
    assert unclean(values, POLICY) == why


# what a clean node's exporter says of its four IB ports, for the port views' proofs
PORTS_CLEAN = {
    "ib_counted_now": 0.0,
    "ib_error_series": 32.0,
    "ib_ports": 4.0,
    "ib_saturated_any": 0.0,
    # and of its GPUs' NVLink sums: nothing counted, 4 counters a GPU all window long
    "nvlink_counted_now": 0.0,
    "nvlink_error_series": 32.0,
}


def test_a_clean_node_proves_every_skippable_reading_empty() -> None:
    full = {**CLEAN, "nvlink_fault_gpus": 8.0, **PORTS_CLEAN}
    assert all(proves(full) for proves in PROVEN_EMPTY.values())
    assert all(proves(full) for proves in PROVEN_FULL.values())
    assert set(PROVING) <= set(expressions(300.0))


CHANGES: list[tuple[dict[str, float | None], list[str]]] = [
    ({"nvlink_faults_rate": 0.003}, ["nvlink_fault_rate"]),
    # a GPU without a fault rate (no NVLink, a link's read failing): its 0 is unknown
    ({"nvlink_fault_gpus": 7.0}, ["nvlink_fault_rate"]),
    ({"nvlink_fault_gpus": None}, ["nvlink_fault_rate"]),
    ({"ecc_uncorrected_rate": 0.01}, ["ecc_uncorrected_rate"]),
    ({"row_remap_max": 1.0}, ["row_remap_pending", "row_remap_failed"]),
    ({"xid_last_max": 79.0}, ["xid_last"]),
    ({"xids_new": 1.0}, ["xid_rate"]),
    # an IB counter counted once, long ago: its total is not 0, nothing rose
    ({"ib_counted_now": 7.0}, ["ib_error_total"]),
    ({"ib_counted_new": 1.0}, ["ib_error_rate"]),
    # an exporter from before the fold: nothing is proven by its absence
    ({"ib_counted_now": None}, ["ib_error_total", "ib_error_rate"]),
    # a port without one of its counter files, a port more than counted, no port
    ({"ib_error_series": 31.0}, ["ib_error_present"]),
    ({"ib_ports": 5.0}, ["ib_error_present"]),
    ({"ib_ports": None}, ["ib_error_present"]),
    ({"ib_ports": 0.0, "ib_error_series": 0.0}, ["ib_error_present"]),
    # a counter stuck at its maximum (any counter: the port views show each)
    ({"ib_saturated_any": 1.0}, ["ib_saturated"]),
    ({"ib_saturated_any": None}, ["ib_saturated"]),
    # an NVLink counter counted long ago; one rose in the window; an older exporter
    ({"nvlink_counted_now": 3.0}, ["nvlink_sum_total"]),
    ({"nvlink_counted_new": 1.0}, ["nvlink_sum_rate"]),
    ({"nvlink_counted_now": None}, ["nvlink_sum_total", "nvlink_sum_rate"]),
    # a GPU's counter missing at a scrape of the window (or one scrape in it), a GPU
    # more than counted
    ({"nvlink_error_series": 31.0}, ["nvlink_sum_present"]),
    ({"nvlink_error_series": None}, ["nvlink_sum_present"]),
    ({"gpus": 9.0}, ["nvlink_fault_rate", "nvlink_sum_present"]),
]


def _changed(changes: dict[str, float | None]) -> dict[str, float]:
    values = {**CLEAN, "nvlink_fault_gpus": 8.0, **PORTS_CLEAN}
    for what, value in changes.items():
        if value is None:
            values.pop(what)
        else:
            values[what] = value
    return values


@pytest.mark.parametrize(("changes", "still_read"), CHANGES)
def test_a_summary_above_zero_keeps_its_reading_read(
    changes: dict[str, float | None], still_read: list[str]
) -> None:
    values = _changed(changes)
    failing = [k for k, proves in PROVEN_EMPTY.items() if not proves(values)]
    failing += [k for k, proves in PROVEN_FULL.items() if not proves(values)]
    assert failing == still_read


def test_unclean_judges_by_the_judged_summaries_and_every_summary_is_read() -> None:
    """``nodes list`` asks Prometheus for ``JUDGED`` only: ``unclean()`` must read nothing
    else, and every summary serves one read or the other."""

    class Spy(dict[str, float]):
        def __init__(self, values: dict[str, float]) -> None:
            super().__init__(values)
            self.seen: set[str] = set()

        def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
            self.seen.add(key)
            return super().get(key, default)

        def __getitem__(self, key: str) -> float:
            self.seen.add(key)
            return super().__getitem__(key)

    values = Spy(CLEAN)
    assert unclean(values, POLICY) is None  # a clean node: every check is made
    assert values.seen <= set(JUDGED), values.seen - set(JUDGED)
    assert set(JUDGED) | set(PROVING) == set(expressions(300.0))


def test_the_summaries_read_the_exporters_node_series_for_the_window() -> None:
    """Every summary but the congestion rate (a rate per port) is one series per node our
    exporter publishes; the counters are asked whether they changed in the window."""
    read = expressions(45.0)
    used = {n for e in read.values() for n in re.findall(r"\bkrea_node_[a-z_]+", e)}
    assert used == set(NODE_FOLDS.values())
    assert (
        "changes(krea_node_gpu_ecc_uncorrected_errors_total[45s])" in (read["ecc_uncorrected_rate"])
    )
    assert "offset 45s" in read["xids_new"] and "[45s]" in read["ib_congestion_max"]
    assert [w for w, e in read.items() if "krea_node_" not in e] == ["ib_congestion_max"]


def test_thresholds_are_the_policys() -> None:
    assert unclean({**CLEAN, "temperature_max": 74.9}, POLICY) is None
    assert unclean({**CLEAN, "margin_min": 5.0}, POLICY) is None
    # a margin threshold of 0 still leaves a margin of 0 (at slowdown) to the rules
    at_zero = HealthPolicy(slowdown_margin_c=0.0)
    assert unclean({**CLEAN, "margin_min": 0.0}, at_zero) is not None
    assert unclean({**CLEAN, "temperature_max": 76.0}, HealthPolicy(warm_c=80.0)) is None


def test_the_series_that_names_the_ports_is_asked_of_every_node() -> None:
    """A young exporter's ports have no rate yet (two samples in the window): only their
    state names them to a fleet read, so it is never given from a summary (the one-truth
    test saw every port missing from ``fabric`` in its first round when it was)."""
    from krea_ops.telemetry.summary import FILLED, PROVEN_VALUE

    assert "ib_state" not in PROVEN_VALUE and "ib_state" not in FILLED
    assert "gpu_info" not in PROVEN_VALUE and "gpu_info" not in FILLED


@pytest.mark.parametrize("changes", [c for c, _ in CHANGES] + [{}], ids=str)
def test_each_proof_reads_only_the_summaries_its_read_asks_for(
    changes: dict[str, float | None],
) -> None:
    """A read that skips a reading asks only for the summaries its proof reads
    (``proving``): each proof, and each skipped node's filled value, on just those gives
    what it gives on every summary; reading another raises rather than reads as 0."""
    values = _changed(changes)
    values.update({f"{k}_uniform": 1.0 for k in PROVEN_VALUE})
    proofs = {**PROVEN_EMPTY, **PROVEN_FULL}
    for key in (*proofs, *PROVEN_VALUE):
        only = Only(values, proving([key]))
        if key in proofs:
            assert proofs[key](only) == proofs[key](values), key
        else:
            assert (PROVEN_VALUE[key] in only) == (PROVEN_VALUE[key] in values), key
        if key in FILLED:
            assert FILLED[key](only) == FILLED[key](values), key
        objects = OBJECTS[FAMILY_BY_KEY[key].by[0]]
        assert only.get(objects) == values.get(objects), key
    with pytest.raises(Unasked):
        PROVEN_EMPTY["ecc_uncorrected_rate"](Only(values, proving(["xid_rate"])))


def test_a_view_asks_for_fewer_summaries_than_there_are() -> None:
    """``gpus`` skips none of the port readings: it asks for none of their summaries."""
    gpu = proving(["nvlink_fault_rate", "ecc_uncorrected_rate", "memory_total", "xid_last"])
    assert not {"ib_counted_now", "ib_ports", "nvlink_counted_now"} & set(gpu)
    assert {"gpus", "nvlink_faults_rate", "nvlink_fault_gpus", "xid_last_max"} <= set(gpu)
    assert set(proving(PROVEN_EMPTY)) <= set(PROVING)
