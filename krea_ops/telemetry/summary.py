"""Per-node summaries of our exporter's readings, kept by Prometheus recording rules, so
that a verdicts-only read (``nodes list``, the node-health controller) need not touch
every GPU's and port's series at read time.

At 4,096 nodes a verdicts-only read touches ~20 readings x 32,768 GPUs or ports (and
262,144 IB error counters): several seconds of Prometheus CPU, whatever the query shape
(docs/benchmarks.md). The rules below fold each reading to one value per node (hottest
GPU, lowest margin, any slowdown bit, fault and error rates summed, ports not active...),
so the read is ~20 x 4,096 rows. ``unclean()`` says from them whether a rule could fire
on a node at all; only the nodes where one could (and the nodes the rules do not cover:
another exporter, a stale or missing summary) are read per GPU and per port, by the
usual read, and judged by the usual rules. A clean node's verdict is therefore OK with
nothing skipped that could have fired.

Reads that show every GPU (``gpus``, ``fabric``, the dashboard) use them too: a reading
a node's summaries prove empty there (``PROVEN_EMPTY``: NVLink faults, ECC, row remaps,
XIDs) or give the one value of for all its GPUs (``PROVEN_VALUE``: memory size, power
limit, XID monitoring) is asked only of the other nodes, and the skipped GPUs get what
the read would have given them.

The window of the rates is part of every recorded name (``krea_node:nvlink_faults_rate:5m``):
the read uses the summaries only when they exist for ``telemetry_window_s``, carry this
version's ``fingerprint`` and Prometheus' rules API calls every rule healthy (a failing
rule's series vanish, which would read as "nothing wrong"); otherwise it reads as
before. ``deploy/prometheus/krea-ops-node-summary.yaml`` is ``rule_text(300)``;
``python -m krea_ops.telemetry.rules --window 600`` prints the group for another window.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from operator import itemgetter

import yaml

from krea_ops.health import (
    IB_ERROR_COUNTERS,
    SLOWDOWN_EVENTS,
    XMIT_WAIT_BYTES_PER_TICK,
    HealthPolicy,
)
from krea_ops.telemetry.dialects import CLOCK_EVENT_BITS, FAMILY_BY_KEY, KREA

PREFIX = "krea_node:"
# per-GPU intermediates some summaries fold (computed once per evaluation, not per rule)
GPU_PREFIX = "krea_gpu:"
# How often Prometheus evaluates the group: a summary is at most this much older than
# the samples it folds (the read checks its age against telemetry_stale_s).
DEFAULT_INTERVAL_S = 30.0


def window_text(seconds: float) -> str:
    """``300`` -> ``5m``, ``10`` -> ``10s``: the window as Prometheus writes a duration,
    and as it appears in the recorded names."""
    s = max(1, round(seconds))
    return f"{s // 60}m" if s % 60 == 0 else f"{s}s"


def _krea(key: str, counter: str | None = None) -> str:
    """The selector of our spelling of a family (``counter``: one of its per-counter
    spellings), from the family tables, so that the rules read what the read reads."""
    for s in FAMILY_BY_KEY[key].spellings:
        if s.dialect != KREA or (counter is not None and dict(s.const).get("counter") != counter):
            continue
        return s.selector()
    raise KeyError(f"{key} has no krea spelling for {counter}")


def _slowdown_filter(mask: str) -> str:
    """The GPUs whose clock-event bitmask has a slowdown bit the health rules judge set.
    PromQL has no bitwise and; a run of adjacent bits lo..hi is set somewhere iff
    ``mask % (2 * hi) >= lo``, which needs only vector-scalar arithmetic (a binary
    operation between two vectors costs a join over every GPU)."""
    runs: list[list[int]] = []
    for name, bit in CLOCK_EVENT_BITS:
        if name not in SLOWDOWN_EVENTS:
            continue
        if runs and runs[-1][-1] * 2 == bit:
            runs[-1].append(bit)
        else:
            runs.append([bit])
    return " or ".join(f"{mask} % {run[-1] * 2} >= {run[0]}" for run in runs)


def _ib_errors_rising(w: str) -> str:
    """The ports where an IB error counter the health rules judge rose in the window.
    Filtered before the ``or``: rate() drops the names, so the counters of one port
    share a label set, and an ``or`` of the unfiltered rates joins 262 k series at
    4,096 nodes (2.6 s of CPU here, against 1.2 s)."""
    counters = (*IB_ERROR_COUNTERS, "link_downed")
    return " or ".join(f"rate({_krea('ib_error_rate', c)}[{w}]) > 0" for c in counters)


def gpu_expressions(window_s: float) -> dict[str, str]:
    """Per-GPU intermediate (without prefix and window) -> PromQL: recorded before the
    summaries, which fold it twice (a sum and a count) without a second rate() over
    the 98 k fault counters of 4,096 nodes."""
    w = window_text(window_s)
    return {"nvlink_fault_rate": f"sum by (node, gpu) (rate({_krea('nvlink_fault_rate')}[{w}]))"}


def gpu_record_name(what: str, window_s: float) -> str:
    return f"{GPU_PREFIX}{what}:{window_text(window_s)}"


def expressions(window_s: float) -> dict[str, str]:
    """Summary name (without prefix and window) -> PromQL over our exporter's series."""
    w = window_text(window_s)
    xid = _krea("xid_rate")
    faults = gpu_record_name("nvlink_fault_rate", window_s)
    saturable = "|".join((*IB_ERROR_COUNTERS, "link_downed", "port_xmit_wait"))
    return {
        # GPUs the exporter reports, and whether NVML answers for every one of them
        "gpus": f"count by (node) ({_krea('gpu_info')})",
        "gpus_up_min": f"min by (node) ({_krea('gpu_info')})",
        "temperature_max": f"max by (node) ({_krea('temperature')})",
        "margin_min": f"min by (node) ({_krea('slowdown_margin')})",
        # GPUs serving the bitmask (an older exporter does not), and the slowdown bits set
        "clock_masks": f"count by (node) ({_krea('clock_mask')})",
        "slowdown_gpus": f"count by (node) ({_slowdown_filter(_krea('clock_mask'))})",
        "xid_last_max": f"max by (node) ({_krea('xid_last')})",
        # XID counters that rose in the window, or were created in it (the first XID)
        "xids_new": f"count by (node) (rate({xid}[{w}]) > 0 or ({xid} unless {xid} offset {w}))",
        "ecc_uncorrected_rate": f"sum by (node) (rate({_krea('ecc_uncorrected_rate')}[{w}]))",
        "row_remap_max": (
            "max by (node) ({__name__=~"
            f'"{_krea("row_remap_pending")}|{_krea("row_remap_failed")}"' + "})"
        ),
        "nvlink_faults_rate": f"sum by (node) ({faults})",
        # GPUs with a fault rate at all: where all have one and the sum is 0, each is 0
        "nvlink_fault_gpus": f"count by (node) ({faults})",
        # GPUs serving the per-GPU NVLink series (an older exporter does not), links down
        "nvlink_gpus": f"count by (node) ({_krea('nvlink_links')})",
        "nvlinks_down": (f"sum by (node) ({_krea('nvlink_links')} - {_krea('nvlink_links_up')})"),
        "ib_ports_not_active": f"count by (node) ({_krea('ib_state')} != 4 != 5)",
        "ib_error_ports": f"count by (node) ({_ib_errors_rising(w)})",
        "ib_saturated_max": (f'max by (node) ({_krea("ib_saturated")}{{counter=~"{saturable}"}})'),
        "ib_congestion_max": (
            f"max by (node) (rate({_krea('ib_xmit_wait')}[{w}]) * "
            f"{XMIT_WAIT_BYTES_PER_TICK:g} / {_krea('ib_rate')})"
        ),
        # readings every GPU of a node reports alike (set once, by the hardware or an
        # admin): the node's value, only where each of its GPUs reports that same value
        **{f"{key}_uniform": _uniform(key, window_s) for key in UNIFORM},
    }


# Per-GPU readings that are one value for every GPU of a node in practice: a view shows
# each GPU's, but where a node's summary says they all read the same, the read takes the
# node's value instead of asking Prometheus for every GPU's (docs/metrics.md).
UNIFORM = ("memory_total", "power_limit", "xid_monitored")


def _uniform(key: str, window_s: float) -> str:
    """The node's value of reading ``key`` where its GPUs all report it and agree
    (``gpus``, recorded before in the same group, is their count)."""
    m = _krea(key)
    gpus = record_name("gpus", window_s)
    return f"max by (node) ({m}) == min by (node) ({m}) and count by (node) ({m}) == {gpus}"


def record_name(what: str, window_s: float) -> str:
    return f"{PREFIX}{what}:{window_text(window_s)}"


def names(window_s: float) -> dict[str, str]:
    """Summary -> its recorded metric name for this window."""
    return {what: record_name(what, window_s) for what in expressions(window_s)}


def recorded(window_s: float) -> dict[str, str]:
    """Every recorded name of the group -> its expression, in evaluation order (the
    per-GPU intermediates first: a rule reads the results of the rules before it)."""
    out = {gpu_record_name(w, window_s): e for w, e in gpu_expressions(window_s).items()}
    out.update({record_name(w, window_s): e for w, e in expressions(window_s).items()})
    return out


def fingerprint(window_s: float) -> int:
    """A checksum of every recorded name and expression. The rule group records it as
    ``krea_node:rules:<window>`` (one series): most summaries have no series at all on
    a healthy fleet (nothing rose, nothing is set), so only this says that the rules
    Prometheus runs are the ones this krea-ops would write; with any other set (an
    older or newer krea-ops' rules, one rule missing) the read does not use them."""
    text = "\n".join(f"{n}={e}" for n, e in sorted(recorded(window_s).items()))
    return zlib.crc32(text.encode())


def sentinel(window_s: float) -> str:
    return record_name("rules", window_s)


def rule_group(window_s: float, interval_s: float = DEFAULT_INTERVAL_S) -> dict[str, object]:
    """The Prometheus rule file (``groups:``) recording every summary for ``window_s``."""
    rules = [{"record": name, "expr": expr} for name, expr in recorded(window_s).items()]
    rules.append({"record": sentinel(window_s), "expr": f"vector({fingerprint(window_s)})"})
    group = {
        "name": f"krea-ops-node-summary-{window_text(window_s)}",
        "interval": window_text(interval_s),
        "rules": rules,
    }
    return {"groups": [group]}


def rule_text(window_s: float, interval_s: float = DEFAULT_INTERVAL_S) -> str:
    head = (
        "# Per-node summaries krea-ops reads instead of every GPU's series (nodes list,\n"
        "# node health). Generated: python -m krea_ops.telemetry.rules "
        f"--window {window_s:g} --interval {interval_s:g}\n"
        "# The window must match krea-ops' telemetry_window_s (docs/operations.md).\n"
    )
    return head + yaml.safe_dump(rule_group(window_s, interval_s), sort_keys=False, width=1000)


def _zero(values: Mapping[str, float], what: str) -> bool:
    """Absent: no series, so nothing rose or is set."""
    v = values.get(what)
    return v is None or v == 0


# Readings a view (``gpus``, the dashboard) reads GPU by GPU that a node's summaries can
# prove empty: read key -> whether these summaries prove it 0 on every GPU of the node
# (``xid_last``: no XID to show). The read then asks Prometheus for the reading on the
# other nodes only (by name, or ``node!~`` the proven ones), a few rows instead of a rate
# over every GPU's counters.
PROVEN_EMPTY: Mapping[str, Callable[[Mapping[str, float]], bool]] = {
    "nvlink_fault_rate": lambda v: (
        _zero(v, "nvlink_faults_rate") and v.get("nvlink_fault_gpus") == v.get("gpus")
    ),
    "ecc_uncorrected_rate": lambda v: _zero(v, "ecc_uncorrected_rate"),
    "row_remap_pending": lambda v: (v.get("row_remap_max") or 0.0) < 0.5,
    "row_remap_failed": lambda v: (v.get("row_remap_max") or 0.0) < 0.5,
    "xid_last": lambda v: (v.get("xid_last_max") or 0.0) <= 0,
    "xid_rate": lambda v: _zero(v, "xids_new"),
}
# readings a node's summaries give the value of, for every GPU (see UNIFORM)
PROVEN_VALUE: Mapping[str, str] = {key: f"{key}_uniform" for key in UNIFORM}
# the summaries those read (``gpus``: the node has a summary at all)
PROVING = (
    "gpus",
    "nvlink_faults_rate",
    "nvlink_fault_gpus",
    "ecc_uncorrected_rate",
    "row_remap_max",
    "xid_last_max",
    "xids_new",
    *PROVEN_VALUE.values(),
)
# Where a view reads a reading whole (no ``keep``), a skipped node's GPUs must show what
# the read would have: reading -> that value from the node's summaries. A fault rate of 0
# (every GPU has one: nvlink_fault_gpus), or the node's one value of a reading set once
# per GPU. xid_last's 0 reads as "no XID" either way (EMPTY_READS_AS_NONE); ECC and row
# remapping are skipped only where the read leaves their zeros out anyway.
FILLED: Mapping[str, Callable[[Mapping[str, float]], float]] = {
    "nvlink_fault_rate": lambda v: 0.0,
    **{key: itemgetter(what) for key, what in PROVEN_VALUE.items()},
}
EMPTY_READS_AS_NONE = frozenset({"xid_last"})
# the summaries ``unclean()`` judges a node by (the others serve only the view reads;
# the names are the same for every window)
JUDGED = tuple(
    w for w in expressions(300.0) if w not in ("nvlink_fault_gpus", *PROVEN_VALUE.values())
)


def unclean(values: Mapping[str, float], p: HealthPolicy) -> str | None:
    """Why a health rule could fire on a node with these summaries (its GPUs and ports
    must then be read and judged one by one), or None: no GPU or IB rule can fire there.
    A summary that is missing where one must exist, or not a number, is a reason too:
    this errs towards reading the node, never towards calling it clean."""
    gpus = values.get("gpus")
    if gpus is None or not gpus > 0:
        return "no GPU count"

    def at_least(what: str, floor: float) -> bool:
        v = values.get(what)
        return v is not None and v >= floor

    def zero(what: str) -> bool:
        return _zero(values, what)

    checks = (
        (at_least("gpus_up_min", 1.0), "a GPU is not answering NVML"),
        (at_least("clock_masks", gpus), "not every GPU serves the clock-event bitmask"),
        (at_least("nvlink_gpus", gpus), "not every GPU serves its NVLink series"),
        (
            (t := values.get("temperature_max")) is not None and t < min(p.warm_c, p.hot_c),
            "a GPU is warm or hot, or its temperature is unknown",
        ),
        (
            (m := values.get("margin_min")) is not None and m >= p.slowdown_margin_c and m > 0,
            "a GPU is near its slowdown temperature, or its margin is unknown",
        ),
        (zero("slowdown_gpus"), "a GPU's clocks are held down"),
        # (the proofs a view read skips these readings by: one definition of "nothing")
        (PROVEN_EMPTY["xid_last"](values), "a recent XID"),
        (PROVEN_EMPTY["xid_rate"](values), "an XID in the window"),
        (PROVEN_EMPTY["ecc_uncorrected_rate"](values), "uncorrectable ECC errors in the window"),
        (PROVEN_EMPTY["row_remap_pending"](values), "a row remap pending or failed"),
        # (not PROVEN_EMPTY's: a GPU without NVLink has no fault rate and no fault either)
        (zero("nvlink_faults_rate"), "NVLink recovery/CRC errors in the window"),
        ((d := values.get("nvlinks_down")) is None or d <= 0, "an NVLink is down"),
        (zero("ib_ports_not_active"), "an IB port is not active"),
        (zero("ib_error_ports"), "IB errors in the window"),
        (zero("ib_saturated_max"), "a saturated IB counter"),
        (
            (c := values.get("ib_congestion_max")) is None or c < p.xmit_wait_ratio_suspect,
            "IB congestion",
        ),
    )
    return next((why for ok, why in checks if not ok), None)
