"""Per-node summaries of our exporter's readings, so that a verdicts-only read
(``nodes list``, the node-health controller) need not touch every GPU's and port's
series at read time.

At 4,096 nodes a verdicts-only read touches ~20 readings x 32,768 GPUs or ports (and
262,144 IB error counters): several seconds of Prometheus CPU, whatever the query shape
(docs/benchmarks.md). Our exporter publishes, with every scrape, one series per node and
reading folding that scrape's readings (``krea_node_*``: the hottest GPU, the lowest
margin, the GPUs slowed down, the sums of the fault counters...: ``model.NODE_FOLDS``,
krea_ops/exporters/folds.py), so the read is ~20 x 4,096 rows. ``unclean()`` says from
them whether a rule could fire on a node at all; only the nodes where one could (and the
nodes the summaries do not cover: another exporter, an older one, a summary missing from
the node's newest scrape) are read per GPU and per port, by the usual read, and judged by
the usual rules. A clean node's verdict is therefore OK with nothing skipped that could
have fired.

The summaries are read at the same instant as the readings and come from the same
scrape, so a summary is never older than the readings a full read would judge. (Until
2026-12 Prometheus recording rules folded the readings every 30 s; in between, a node
could read "clean by its summary" for up to 30 s after its GPUs showed an uncorrectable
ECC error.) A fault counter's sum "rose" when it changed at all in the window: a reset or
a GPU gone reads as a change, towards reading the node.

Reads that show every GPU (``gpus``, ``fabric``, the dashboard) use them too: a reading
a node's summaries prove empty there (``PROVEN_EMPTY``: NVLink faults, ECC, row remaps,
XIDs) or give the one value of for all its GPUs (``PROVEN_VALUE``: memory size, power
limit, XID monitoring) is asked only of the other nodes, and the skipped GPUs get what
the read would have given them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from operator import itemgetter

from krea_ops.health import XMIT_WAIT_BYTES_PER_TICK, HealthPolicy
from krea_ops.model import NODE_FOLDS, NVLINK_COUNTERS
from krea_ops.telemetry.dialects import FAMILY_BY_KEY, IB_ERROR_COUNTERS, KREA


def window_text(seconds: float) -> str:
    """``300`` -> ``5m``, ``10`` -> ``10s``: the window as Prometheus writes a duration."""
    s = max(1, round(seconds))
    return f"{s // 60}m" if s % 60 == 0 else f"{s}s"


def _krea(key: str) -> str:
    """The selector of our spelling of a family, from the family tables, so that the
    summaries read what the read reads."""
    for s in FAMILY_BY_KEY[key].spellings:
        if s.dialect == KREA:
            return s.selector()
    raise KeyError(f"{key} has no krea spelling")


def _now(key: str) -> str:
    return f"max by (node) ({NODE_FOLDS[key]})"


def _changed(key: str, w: str) -> str:
    """Per node, whether the summed counter changed in the window: any change inside it,
    a change across its start (the sample before it differs from the newest), or a
    first appearance above zero in it (an exporter just started)."""
    t = NODE_FOLDS[key]
    return (
        f"count by (node) (changes({t}[{w}]) > 0 or {t} != {t} offset {w} "
        f"or ({t} unless {t} offset {w}) > 0)"
    )


def expressions(window_s: float) -> dict[str, str]:
    """Summary name -> PromQL over our exporter's per-node series (one row per node)."""
    w = window_text(window_s)
    return {
        # GPUs the exporter reports, and whether NVML answers for every one of them
        "gpus": _now("gpus"),
        "gpus_up_min": _now("gpus_up_min"),
        "temperature_max": _now("temperature_max"),
        "margin_min": _now("margin_min"),
        # GPUs serving the bitmask (an older exporter does not), and the slowdown bits set
        "clock_masks": _now("clock_masks"),
        "slowdown_gpus": _now("slowdown_gpus"),
        "xid_last_max": _now("xid_last_max"),
        # the XID counters rose in the window, or one was created in it (the first XID)
        "xids_new": _changed("xids", w),
        "ecc_uncorrected_rate": _changed("ecc_uncorrected", w),
        "row_remap_max": _now("row_remap_max"),
        "nvlink_faults_rate": _changed("nvlink_faults", w),
        # GPUs with a fault counter at all: where all have one and none changed, each is 0
        "nvlink_fault_gpus": _now("nvlink_fault_gpus"),
        # GPUs serving the per-GPU NVLink series (an older exporter does not), links down
        "nvlink_gpus": _now("nvlink_gpus"),
        "nvlinks_down": _now("nvlinks_down"),
        "ib_ports_not_active": _now("ib_ports_not_active"),
        "ib_error_ports": _changed("ib_errors", w),
        "ib_saturated_max": _now("ib_saturated_max"),
        # every error counter a port view shows (transmit discards too), whether any rose
        # in the window, and whether every port serves every one of them
        "ib_counted_now": _now("ib_counted"),
        "ib_counted_new": _changed("ib_counted", w),
        "ib_error_series": _now("ib_error_series"),
        "ib_ports": _now("ib_ports"),
        # a rate per port: one series per port (8 per node), read live like the rest
        "ib_congestion_max": (
            f"max by (node) (rate({_krea('ib_xmit_wait')}[{w}]) * "
            f"{XMIT_WAIT_BYTES_PER_TICK:g} / {_krea('ib_rate')})"
        ),
        "ib_saturated_any": _now("ib_saturated_any"),
        # every NVLink error counter of the per-GPU sums, whether any rose in the window
        "nvlink_counted_now": _now("nvlink_counted"),
        "nvlink_counted_new": _changed("nvlink_counted", w),
        # the per-GPU NVLink counter series at every scrape of the window, where it holds
        # two or more (a rate needs two samples: what the presence of one means)
        "nvlink_error_series": (
            f"max by (node) (min_over_time({NODE_FOLDS['nvlink_error_series']}[{w}]) and "
            f"count_over_time({NODE_FOLDS['nvlink_error_series']}[{w}]) > 1)"
        ),
        # readings every GPU (port) of a node reports alike (set once, by the hardware or
        # an admin, or what a healthy node reads on each): the node's value, only where
        # each of its GPUs (ports) reports that same value
        **{f"{key}_uniform": _now(f"{key}_uniform") for key in (*UNIFORM, *UNIFORM_PORTS)},
    }


# Per-GPU readings that are one value for every GPU of a node in practice: a view shows
# each GPU's, but where a node's summary says they all read the same, the read takes the
# node's value instead of asking Prometheus for every GPU's (docs/metrics.md).
UNIFORM = ("memory_total", "power_limit", "xid_monitored", "nvlink_links", "nvlink_links_up")
# the same of every InfiniBand port of a node: link up, at one speed (not the state: its
# series names the ports, so that a read knows them before any rate has two samples)
UNIFORM_PORTS = ("ib_phys_state", "ib_rate")
# the series that says when a node's summaries were taken (the scrape's time)
STAMP = NODE_FOLDS["gpus"]


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
    # the port error rows of ``fabric`` and ``nodes show``: no counter of any port has
    # counted (the totals), none rose in the window (the rates). "ib_counted_now" must be
    # there: an exporter from before this fold proves nothing.
    "ib_error_total": lambda v: v.get("ib_counted_now") == 0,
    "ib_error_rate": lambda v: "ib_counted_now" in v and _zero(v, "ib_counted_new"),
    # (the port views') no counter of any port is stuck at its maximum
    "ib_saturated": lambda v: v.get("ib_saturated_any") == 0,
    # the per-GPU NVLink sums per counter: none has counted, none rose in the window
    "nvlink_sum_total": lambda v: v.get("nvlink_counted_now") == 0,
    "nvlink_sum_rate": lambda v: "nvlink_counted_now" in v and _zero(v, "nvlink_counted_new"),
}


# Presence readings a node's summaries prove full: every port of the node serves every
# counter of the family (``ib_error_present``: which error counters a port has, so that
# an absent sparse row reads 0, not unknown). The read asks the other nodes only and
# gives each port of these the whole set, where it found as many ports as the summary
# counted (``OBJECTS``). Reading -> the proof.
# the summary counting the objects a filled or full reading is given on, by what the
# reading is read per (``Family.by[0]``): GPUs or ports
OBJECTS = {"gpu": "gpus", "device": "ib_ports"}


def _every(per_what: str, series: str, per: int) -> Callable[[Mapping[str, float]], bool]:
    """Whether ``series`` counts ``per`` of each object the node has (``OBJECTS``)."""
    objects = OBJECTS[per_what]

    def proves(v: Mapping[str, float]) -> bool:
        n = v.get(objects)
        return n is not None and n > 0 and v.get(series) == n * per

    return proves


PROVEN_FULL: Mapping[str, Callable[[Mapping[str, float]], bool]] = {
    "ib_error_present": _every("device", "ib_error_series", len(IB_ERROR_COUNTERS)),
    # every GPU serves every per-GPU NVLink counter, with a rate (two samples) in the window
    "nvlink_sum_present": _every("gpu", "nvlink_error_series", len(NVLINK_COUNTERS)),
}
# readings a node's summaries give the value of, for every GPU (see UNIFORM)
PROVEN_VALUE: Mapping[str, str] = {key: f"{key}_uniform" for key in (*UNIFORM, *UNIFORM_PORTS)}
# the summaries the port views' IB proofs read (PROVEN_EMPTY's and PROVEN_FULL's)
IB_PROOFS = ("ib_counted_now", "ib_counted_new", "ib_error_series", "ib_ports", "ib_saturated_any")
# the summaries the per-GPU NVLink sums' proofs read
NVLINK_PROOFS = ("nvlink_counted_now", "nvlink_counted_new", "nvlink_error_series")
# The summaries each proof above reads (and FILLED's values): a read asks only those of
# the readings it skips, besides ``gpus`` and the objects a skipped node's rows are
# given on (``OBJECTS``). A proof that reads a summary not named here is not trusted: it
# raises (``Only``), and the read asks every node instead (tests/telemetry/test_summary.py
# runs every proof on just what it names).
PROOF_READS: Mapping[str, tuple[str, ...]] = {
    "nvlink_fault_rate": ("nvlink_faults_rate", "nvlink_fault_gpus"),
    "ecc_uncorrected_rate": ("ecc_uncorrected_rate",),
    "row_remap_pending": ("row_remap_max",),
    "row_remap_failed": ("row_remap_max",),
    "xid_last": ("xid_last_max",),
    "xid_rate": ("xids_new",),
    "ib_error_total": ("ib_counted_now",),
    "ib_error_rate": ("ib_counted_now", "ib_counted_new"),
    "ib_saturated": ("ib_saturated_any",),
    "nvlink_sum_total": ("nvlink_counted_now",),
    "nvlink_sum_rate": ("nvlink_counted_now", "nvlink_counted_new"),
    "ib_error_present": ("ib_error_series",),
    "nvlink_sum_present": ("nvlink_error_series",),
    **{key: (what,) for key, what in PROVEN_VALUE.items()},
}


def proving(keys: Iterable[str]) -> tuple[str, ...]:
    """The summaries a read that skips these readings asks for (see ``PROOF_READS``)."""
    out = {"gpus"}
    for key in keys:
        out.update(PROOF_READS[key])
        out.add(OBJECTS[FAMILY_BY_KEY[key].by[0]])
    return tuple(sorted(out))


# the summaries every proof reads (``gpus``: the node has a summary at all)
PROVING = proving(PROOF_READS)


class Unasked(LookupError):
    """A proof read a summary its read did not ask for (``PROOF_READS`` is wrong)."""


class Only(Mapping[str, float]):
    """A node's summaries as a proof sees them: reading one that was not asked for raises
    ``Unasked`` instead of reading as absent (which a proof takes as 0)."""

    def __init__(self, values: Mapping[str, float], asked: Collection[str]) -> None:
        self._values = values
        self._asked = asked

    def _check(self, key: object) -> None:
        if key not in self._asked:
            raise Unasked(f"summary {key} was not asked for")

    def __getitem__(self, key: str) -> float:
        self._check(key)
        return self._values[key]

    def __contains__(self, key: object) -> bool:
        self._check(key)
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return (k for k in self._values if k in self._asked)

    def __len__(self) -> int:
        return sum(1 for _ in self)


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
# the summaries only the view reads' proofs read (``unclean()`` judges none of them)
PROOF_ONLY = ("nvlink_fault_gpus", *IB_PROOFS, *NVLINK_PROOFS, *PROVEN_VALUE.values())
# the summaries ``unclean()`` judges a node by (the names are the same for every window)
JUDGED = tuple(w for w in expressions(300.0) if w not in PROOF_ONLY)


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
