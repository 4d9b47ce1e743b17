"""Rows of every family -> one ``FleetTelemetry`` (the only code that knows the model).

Both sources hand their rows here, so Prometheus and a direct scrape give the same
snapshot for the same data. Per object (GPU, link, port) the spelling listed first in its
family wins, so our exporter's value beats a peer's. Sparse families (errors, down links)
leave zeros out; they are filled back in only where a dense family proves the counter
exists, and never when the sparse read itself failed. A value that is not a finite
number (NaN, ±Inf: a PromQL division by zero, a garbled answer) is no reading: None in
the snapshot, never a number.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from math import isfinite
from types import MappingProxyType
from typing import Any

from krea_ops import units
from krea_ops.model import (
    NVLINK_COUNTERS,
    FleetTelemetry,
    GpuSample,
    IbPortSample,
    NodeTelemetry,
    NvLinkSample,
    gpu_sample,
    window_increase,
)
from krea_ops.telemetry.dialects import (
    DCGM,
    IB_PHYS_STATES,
    IB_STATES,
    ID_LABELS,
    KREA,
    NAME,
    NODE_EXPORTER,
    SRC,
    Family,
    Row,
    decode_clock_mask,
    node_of,
    state_name,
)

_INTS: dict[str, int | None] = {}  # label text -> int: GPU, link and XID numbers repeat


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return _INTS[text]
    except KeyError:
        pass
    try:
        value: int | None = int(text) if text else None
    except ValueError:
        value = None
    if len(_INTS) < 10_000:
        _INTS[text] = value
    return value


_MISSING: Any = object()


@dataclass
class _Obj:
    # reading -> the winning value, and the rank of the spelling it came from
    # (_DIALECT_RANK x 1000 + the spelling's place; the lowest wins, rows of one summing
    # family from one dialect add up): two dicts, so a sample reads ``values`` as is
    values: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    dicts: dict[str, dict[Any, dict[str, float]]] = field(default_factory=dict)


@dataclass
class _NodeAcc:
    gpus: dict[int, _Obj] = field(default_factory=dict)
    links: dict[tuple[int, int], _Obj] = field(default_factory=dict)
    ports: dict[tuple[str, str], _Obj] = field(default_factory=dict)
    fresh: float | None = None
    dialects: set[str] = field(default_factory=set)


_DIALECT_RANK = {KREA: 0, DCGM: 1, NODE_EXPORTER: 1}


# families whose reading is a dict keyed by a sub-label even where the label is absent
_KEYED = frozenset({"xid_rate", "xid_count", "gpu_down", "clock_events"})


def folds_simply(family: Family) -> bool:
    """One value per GPU or per port, folded by the object's label values alone
    (``_add_simple``, ``add_values``): most rows of a fleet read."""
    return (
        family.kind not in ("fresh", "present", "present_rate")
        and family.store != "gpu_info"
        and family.store not in _KEYED
        and family.by in (("gpu",), ("device", "port"))
        and not any(s.pattern or s.const for s in family.spellings)
    )


def _pick(
    hit: tuple[_NodeAcc, _Obj], key: str, rank: int, dialect: str, value: float, summing: bool
) -> None:
    """Fold one value into an object's reading ``key``: the best-ranked spelling wins;
    values of one dialect add up in a summing family."""
    acc, obj = hit
    acc.dialects.add(dialect)
    values, ranks = obj.values, obj.ranks
    before = ranks.get(key)
    if before is None or rank // 1000 < before // 1000 or (not summing and rank < before):
        values[key] = value
        ranks[key] = rank
    elif summing and rank // 1000 == before // 1000:
        values[key] += value


@dataclass(frozen=True)
class TargetDown:
    """A scrape target Prometheus (or we) could not scrape, already mapped to a node."""

    node: str
    error: str
    last_sample_at: float | None = None


class Assembler:
    """Collects the rows of every family, then builds the snapshot (see module doc)."""

    def __init__(
        self,
        *,
        window_s: float,
        collected_at: float,
        stale_s: float,
        nodes: Collection[str] | None = None,
    ) -> None:
        self.window_s = window_s
        self.collected_at = collected_at
        self.stale_s = stale_s
        self.nodes = set(nodes) if nodes is not None else None
        self._acc: dict[str, _NodeAcc] = {}
        self._node_cache: dict[tuple[str, ...], str | None] = {}
        # (node, gpu label) / (node, device, port) -> (node acc, object) or None: the
        # objects of the fast path in add(), so a row costs a few dict lookups
        self._objs: dict[tuple[str | None, ...], tuple[_NodeAcc, _Obj] | None] = {}
        self.dialects: set[str] = set()
        self.instances: dict[str, str] = {}  # instance -> node, learnt from fresh rows
        self.jobs: set[str] = set()  # jobs that served any family
        # families whose read failed: their absence must not be taken for zeros
        self.failed: set[str] = set()
        # families read (rows handed to add(), maybe none): those not read are unknown
        self.read: set[str] = set()
        # presence family -> nodes with an object that has some but not all spellings
        self.partial_present: dict[str, set[str]] = {}

    def _node(self, labels: Mapping[str, str]) -> str | None:
        node = labels.get("node")
        if node:  # our exporter and most relabelling set it: the fast path
            return node
        key = tuple(labels.get(n, "") for n in ID_LABELS)
        try:
            return self._node_cache[key]
        except KeyError:
            found = node_of(labels)
            self._node_cache[key] = found
            return found

    def _acc_for(self, node: str) -> _NodeAcc:
        acc = self._acc.get(node)
        if acc is None:
            acc = self._acc[node] = _NodeAcc()
        return acc

    def note_fresh(self, node: str, t: float) -> None:
        """The time of a node's newest sample, known without a fresh family (a scrape)."""
        if self.nodes is not None and node not in self.nodes:
            return
        acc = self._acc_for(node)
        if acc.fresh is None or t > acc.fresh:
            acc.fresh = t

    def add(self, family: Family, rows: Iterable[Row]) -> None:
        """Fold one family's rows in. Rows of nodes not asked for are skipped. A row
        without ``krea_ops_src`` is of the family's only spelling."""
        self.read.add(family.store)
        if family.kind in ("present", "present_rate"):
            for labels, value in rows:
                if not isfinite(value):  # a mask of +Inf is no mask
                    continue
                node = self._node(labels)
                if node and (self.nodes is None or node in self.nodes):
                    self._fold_present(family, self._acc_for(node), labels, value)
            return
        # per spelling name: (spelling, rank across dialects, dialect)
        info = {
            s.name: (s, _DIALECT_RANK[s.dialect] * 1000 + i, s.dialect)
            for i, s in enumerate(family.spellings)
        }
        only = next(iter(info.values())) if len(info) == 1 else None
        key = family.store
        fresh = family.kind == "fresh"
        # (summing, keyed by a sub-label even when it is absent)
        flags = (family.agg in ("sum", "count"), key in _KEYED)
        if folds_simply(family):
            self._add_simple(family, rows, info, only, flags[0])
            return
        wanted = self.nodes
        seen: set[str] = set()
        node_of_row = self._node
        for labels, value in rows:
            if not isfinite(value):  # NaN, or +Inf from a division: no reading
                continue
            node = node_of_row(labels)
            if node is None or (wanted is not None and node not in wanted):
                continue
            src = labels.get(SRC)
            found = only if src is None else info.get(src)
            if found is None:
                continue
            spelling, rank, dialect = found
            acc = self._acc_for(node)
            if dialect not in acc.dialects:
                acc.dialects.add(dialect)
            seen.add(dialect)
            if fresh:
                if acc.fresh is None or value > acc.fresh:
                    acc.fresh = value
                instance = labels.get("instance")
                if instance:
                    self.instances[instance] = node
                job = labels.get("job")
                if job:
                    self.jobs.add(job)
                continue
            implied = (
                spelling.labels_of(labels.get(NAME, "")) if spelling.pattern else spelling.const
            )
            if implied:
                labels = {**labels, **dict(implied)}
            self._fold(family, acc, labels, key, rank, dialect, value * spelling.scale, flags)
        self.dialects |= seen

    def _add_simple(
        self,
        family: Family,
        rows: Iterable[Row],
        info: Mapping[str, tuple[Any, int, str]],
        only: tuple[Any, int, str] | None,
        summing: bool,
    ) -> None:
        """``add()`` for one value per GPU or per port (most rows of a fleet): the same
        folding as ``_fold()``, with the objects looked up by their label values."""
        key = family.store
        wanted = self.nodes
        gpu_side = family.by[0] == "gpu"
        objs = self._objs
        node_of_row = self._node
        seen: set[str] = set()
        for labels, value in rows:
            if not isfinite(value):  # NaN, or +Inf from a division: no reading
                continue
            node = labels.get("node") or node_of_row(labels)
            if node is None or (wanted is not None and node not in wanted):
                continue
            src = labels.get(SRC)
            found = only if src is None else info.get(src)
            if found is None:
                continue
            spelling, rank, dialect = found
            okey = (
                (node, labels.get("gpu"))
                if gpu_side
                else (node, labels.get("device"), labels.get("port"))
            )
            hit = objs.get(okey, _MISSING)
            if hit is _MISSING:
                hit = self._simple_obj(family, node, okey, labels)
            if hit is None:
                continue
            seen.add(dialect)
            _pick(hit, key, rank, dialect, value * spelling.scale, summing)
        self.dialects |= seen

    def add_values(
        self, family: Family, order: Sequence[str], rows: Sequence[Sequence[str]]
    ) -> None:
        """``add()`` for the rows of a one-spelling family on the simple path (one value
        per GPU or per port, see ``_add_simple``), decoded straight from Prometheus'
        answer: each row is the values of the labels ``order`` names, then the value's
        text. At fleet scale most rows come this way; no label dict is built per row."""
        self.read.add(family.store)
        spelling = family.spellings[0]
        dialect = spelling.dialect
        rank = _DIALECT_RANK[dialect] * 1000
        key = family.store
        summing = family.agg in ("sum", "count")
        wanted = self.nodes
        objs = self._objs
        at = [order.index(name) for name in ("node", *family.by)]
        i_node, i_a = at[0], at[1]
        i_b = at[2] if len(at) > 2 else -1
        gpu_side = family.by[0] == "gpu"
        scale = spelling.scale
        for row in rows:
            try:
                value = float(row[-1])
            except ValueError:  # not a number: no reading, as in _run
                continue
            if not isfinite(value):
                continue
            node = row[i_node]
            if wanted is not None and node not in wanted:
                continue
            okey = (node, row[i_a]) if gpu_side else (node, row[i_a], row[i_b])
            hit = objs.get(okey, _MISSING)
            if hit is _MISSING:
                hit = self._simple_obj(family, node, okey, dict(zip(order, row[:-1], strict=True)))
            if hit is None:
                continue
            obj = hit[1]
            if key in obj.ranks:
                _pick(hit, key, rank, dialect, value * scale, summing)
            else:  # the object's first value of it (nearly every row): nothing to rank
                obj.values[key] = value * scale
                obj.ranks[key] = rank
                hit[0].dialects.add(dialect)
        if rows:
            self.dialects.add(dialect)

    def _simple_obj(
        self,
        family: Family,
        node: str,
        okey: tuple[str | None, ...],
        labels: Mapping[str, str],
    ) -> tuple[_NodeAcc, _Obj] | None:
        acc = self._acc_for(node)
        obj, _ = self._obj(family, acc, labels)
        hit = self._objs[okey] = None if obj is None else (acc, obj)
        return hit

    def _obj(self, family: Family, acc: _NodeAcc, labels: Mapping[str, str]) -> tuple[Any, Any]:
        """(object, sub-key) for a row: a GPU, a link or a port, and what is left of ``by``."""
        by = family.by
        if by[0] == "gpu":
            gpu = _int(labels.get("gpu"))
            if gpu is None:
                return None, None
            if len(by) > 1 and by[1] == "link":
                link = _int(labels.get("link"))
                if link is None:
                    return None, None
                obj = acc.links.get((gpu, link))
                if obj is None:
                    obj = acc.links[(gpu, link)] = _Obj()
                return obj, labels.get("counter")
            obj = acc.gpus.get(gpu)
            if obj is None:
                obj = acc.gpus[gpu] = _Obj()
            return obj, (labels.get(by[1]) if len(by) > 1 else None)
        port_key = (labels.get("device") or "", labels.get("port") or "")
        if not port_key[0] or not port_key[1]:
            return None, None
        obj = acc.ports.get(port_key)
        if obj is None:
            obj = acc.ports[port_key] = _Obj()
        return obj, (labels.get(by[2]) if len(by) > 2 else labels.get("counter"))

    def _fold(
        self,
        family: Family,
        acc: _NodeAcc,
        labels: Mapping[str, str],
        key: str,
        rank: int,
        dialect: str,
        value: float,
        flags: tuple[bool, bool],
    ) -> None:
        obj, sub = self._obj(family, acc, labels)
        if obj is None:
            return
        if key == "gpu_info":
            for name in family.by[1:]:
                if labels.get(name) and name not in obj.labels:
                    obj.labels[name] = labels[name]
            if dialect == KREA:  # ours is krea_gpu_up: the value says whether NVML answers
                before = obj.ranks.get("gpu_up")
                if before is None or rank < before:
                    obj.values["gpu_up"] = value
                    obj.ranks["gpu_up"] = rank
            return
        summing, keyed = flags
        if sub is not None or keyed:
            # a reading keyed by a sub-label (counter, xid, reason): one dict per dialect
            per = obj.dicts.setdefault(key, {})
            d = per.setdefault(dialect, {})
            sub_key = sub if sub is not None else ""
            d[sub_key] = d.get(sub_key, 0.0) + value if summing else value
            return
        _pick((acc, obj), key, rank, dialect, value, summing)

    def _fold_present(
        self, family: Family, acc: _NodeAcc, labels: Mapping[str, str], mask: float
    ) -> None:
        obj, _ = self._obj(family, acc, labels)
        if obj is None:
            return
        bits = int(mask)
        counted = labels.get(SRC)
        if counted in _DIALECT_RANK:
            # the count form: how many of the dialect's spellings exist. All of them: all
            # bits; fewer: which ones is asked again (partial_present), none assumed.
            spellings = [i for i, s in enumerate(family.spellings) if s.dialect == counted]
            if bits < len(spellings):
                node = self._node(labels)
                if node:
                    self.partial_present.setdefault(family.key, set()).add(node)
                return
            bits = sum(1 << i for i in spellings)
        self._set_present(family, acc, obj, bits)

    def _set_present(self, family: Family, acc: _NodeAcc, obj: _Obj, bits: int) -> None:
        for i, spelling in enumerate(family.spellings):
            if bits & (1 << i):
                self.dialects.add(spelling.dialect)
                acc.dialects.add(spelling.dialect)
                per = obj.dicts.setdefault(family.key, {})
                per.setdefault(spelling.dialect, {})[dict(spelling.const).get("counter", "")] = 1.0

    @staticmethod
    def _objects(family: Family, acc: _NodeAcc) -> Mapping[Any, _Obj]:
        """The GPUs or the ports of a node, by what ``family`` is read per."""
        return acc.gpus if family.by[0] == "gpu" else acc.ports

    def fill_present(self, family: Family, given: Mapping[str, int]) -> None:
        """A presence mask over GPUs or ports that the node summaries prove full on these
        nodes ({node: objects counted}: every one serves every spelling of ours), which
        was therefore not read there: all of our bits on each of theirs the read found,
        where it found as many as the summary counted (one come or gone since: left as
        read, without them). Not after a failed read."""
        if family.store in self.failed:
            return
        self.read.add(family.store)
        ours = sum(1 << i for i, s in enumerate(family.spellings) if s.dialect == KREA)
        for node, count in given.items():
            acc = self._acc.get(node)
            if acc is None or len(objects := self._objects(family, acc)) != count:
                continue
            for obj in objects.values():
                self._set_present(family, acc, obj, ours)

    def fill(self, family: Family, given: Mapping[str, tuple[int, float]]) -> None:
        """A per-GPU or per-port reading of ours that the node summaries give for every
        GPU (port) of these nodes ({node: (objects counted, the value)}: 0 where they
        prove it empty, the node's value where all report the same), which was therefore
        not read there: that value on each of theirs the read found, where it found as
        many as the summary counted (one come or gone since: the reading stays unknown).
        Not after a failed read."""
        if family.store in self.failed:
            return
        self.read.add(family.store)
        key, rank = family.store, _DIALECT_RANK[KREA] * 1000
        for node, (count, value) in given.items():
            acc = self._acc.get(node)
            if acc is None or len(objects := self._objects(family, acc)) != count:
                continue
            for obj in objects.values():
                if key not in obj.ranks:
                    obj.values[key] = value
                    obj.ranks[key] = rank
            acc.dialects.add(KREA)

    def nodes_lacking(self, key: str) -> set[str]:
        """Nodes where our exporter serves a GPU without a reading of family ``key``
        (an exporter from before that reading), after a read of it."""

        def ours_without(obj: _Obj) -> bool:  # (a GPU NVML lost answers nothing at all)
            up = obj.values.get("gpu_up")
            ours = obj.ranks.get("gpu_up", 1000) < 1000
            return up is not None and ours and up >= 0.5 and key not in obj.values

        return {
            name
            for name, acc in self._acc.items()
            if (self.nodes is None or name in self.nodes)
            and any(ours_without(obj) for obj in acc.gpus.values())
        }

    def nodes_needing_links(self, *, detail: bool) -> set[str]:
        """Nodes whose per-link NVLink rows are still to be read: those whose exporter
        serves no per-GPU sums (an older one: the links are the only source), and with
        ``detail`` those whose sums rose in the window or with a link not up."""
        out: set[str] = set()
        for name, acc in self._acc.items():
            if not acc.gpus or (self.nodes is not None and name not in self.nodes):
                continue
            sums = False
            answering = False
            for obj in acc.gpus.values():
                values = obj.values
                # any per-GPU NVLink series of ours says the exporter serves the sums
                if "nvlink_sum_present" in obj.dicts or not {
                    "nvlink_fault_rate",
                    "nvlink_links",
                }.isdisjoint(values):
                    sums = True
                up = values.get("gpu_up")
                if up is not None and up >= 0.5 and obj.ranks["gpu_up"] < 1000:  # ours, answering
                    answering = True
                if not detail:
                    continue
                rates = obj.dicts.get("nvlink_sum_rate")
                if rates and any(v > 0 for d in rates.values() for v in d.values()):
                    out.add(name)
                    break
                fault = values.get("nvlink_fault_rate")
                if fault is not None and fault > 0:
                    out.add(name)
                    break
                links, links_up = values.get("nvlink_links"), values.get("nvlink_links_up")
                if links is not None and links_up is not None and links_up < links:
                    out.add(name)
                    break
            if answering and not sums:
                out.add(name)
        return out

    # -- building -----------------------------------------------------------------------

    def build(
        self,
        source: str,
        *,
        errors: Sequence[str] = (),
        down: Iterable[TargetDown] = (),
        window_s: float | None = None,
    ) -> FleetTelemetry:
        window = self.window_s if window_s is None else window_s
        down_by_node: dict[str, list[TargetDown]] = {}
        for t in down:
            if self.nodes is not None and t.node not in self.nodes:
                continue
            down_by_node.setdefault(t.node, []).append(t)
            self._acc_for(t.node)
        nodes: dict[str, NodeTelemetry] = {}
        for name in sorted(self._acc):
            acc = self._acc[name]
            nodes[name] = self._build_node(name, acc, down_by_node.get(name, []), window)
        return FleetTelemetry(
            source=source,
            collected_at=self.collected_at,
            window_s=window,
            nodes=MappingProxyType(nodes),
            errors=tuple(errors),
            dialects=frozenset(self.dialects),
        )

    def _build_node(
        self, name: str, acc: _NodeAcc, down: list[TargetDown], window: float
    ) -> NodeTelemetry:
        last = acc.fresh
        for t in down:
            if t.last_sample_at is not None and (last is None or t.last_sample_at > last):
                last = t.last_sample_at
        age = None if last is None else max(0.0, self.collected_at - last)
        stale = age is not None and age > self.stale_s
        errors = [t.error for t in down]
        if stale:
            errors.append(f"last sample {units.age(age)} ago")
        has_data = bool(acc.gpus or acc.ports or acc.links)
        if down or stale:
            exporter_up: bool | None = False
        elif last is not None or has_data:
            exporter_up = True
        else:
            exporter_up = None
        if last is None and not down and has_data:
            # data without a freshness series (a dialect we read but do not time): unknown
            errors.append("no sample timestamp: freshness unknown")
            stale = True
        # readings of a node whose exporter is down or stale are from before it went
        # away (range functions still see them): drop them all, keep the GPU identities
        readings = not stale and not down
        gpus = tuple(
            self._gpu(name, idx, acc.gpus[idx], acc, last, window, readings)
            for idx in sorted(acc.gpus)
        )
        nvlinks: tuple[NvLinkSample, ...] = ()
        ports: tuple[IbPortSample, ...] = ()
        if readings:
            nvlinks = tuple(
                self._link(name, key, acc.links[key], acc, window) for key in sorted(acc.links)
            )
            ports = tuple(
                self._port(name, key, acc.ports[key], window) for key in sorted(acc.ports)
            )
        else:
            ports = tuple(IbPortSample(node=name, device=d, port=p) for d, p in sorted(acc.ports))
        return NodeTelemetry(
            node=name,
            exporter_up=exporter_up,
            last_sample_at=last,
            age_s=age,
            stale=stale,
            error="; ".join(errors) or None,
            gpus=gpus,
            nvlinks=nvlinks,
            ib_ports=ports,
        )

    @staticmethod
    def _best(per: Mapping[str, dict[Any, float]] | None) -> dict[Any, float] | None:
        """The dict of the best-ranked dialect (ours first)."""
        if not per:
            return None
        for dialect in (KREA, DCGM, NODE_EXPORTER):
            if dialect in per:
                return per[dialect]
        return None

    def _gpu(
        self,
        node: str,
        index: int,
        obj: _Obj,
        acc: _NodeAcc,
        last: float | None,
        window: float,
        readings: bool,
    ) -> GpuSample:
        labels = obj.labels
        uuid = labels.get("uuid") or labels.get("UUID")
        model = labels.get("model") or labels.get("modelName")
        if not readings:
            return gpu_sample(
                {
                    "node": node,
                    "index": index,
                    "uuid": uuid,
                    "model": model,
                    "pci_bus_id": labels.get("pci_bus_id"),
                    "sampled_at": last,
                }
            )
        p = obj.values
        # (written out, not through helpers: this runs for each of 32,768 GPUs at 4,096
        # nodes, and most GPUs of a fleet-wide read have no keyed readings at all)
        dicts = obj.dicts
        if dicts:
            best = self._best
            down, active = best(dicts.get("gpu_down")), best(dicts.get("clock_events"))
            rates, counts = best(dicts.get("xid_rate")), best(dicts.get("xid_count"))
        else:
            down = active = rates = counts = None
        clock: frozenset[str] | None = None
        mask = p.get("clock_mask")
        if mask is not None and obj.ranks["clock_mask"] < 1000:  # our bitmask
            clock = decode_clock_mask(mask)
        elif ("clock_events_known" in dicts and self._got("clock_events")) or active:
            clock = frozenset(r for r, v in (active or {}).items() if v > 0)
        elif mask is not None:
            clock = decode_clock_mask(mask)
        xid_last = p.get("xid_last")
        if xid_last is not None and xid_last <= 0:
            xid_last = None  # DCGM reads 0 until the first XID
        xid: dict[int, float] | None = None
        if rates is not None or (p.get("xid_monitored", 0.0) >= 0.5 and self._got("xid_rate")):
            xid = {int(k): v * window for k, v in (rates or {}).items() if _int(k) is not None}
        elif counts is not None:
            xid = {int(k): v for k, v in counts.items() if _int(k) is not None}
        ecc_rate = p.get("ecc_uncorrected_rate")
        if dicts or acc.links or "nvlink_count" in p or "nvlink_links" in p:
            nvlink_total, nvlink_increase, links, links_up = self._gpu_nvlink(
                acc, index, obj, p, window
            )
        else:  # (nearly every GPU of a fleet-wide read: no per-link or per-counter rows)
            nvlink_total = nvlink_increase = links = links_up = None
        up, pending, failed = p.get("gpu_up"), p.get("row_remap_pending"), p.get("row_remap_failed")
        fault_rate = p.get("nvlink_fault_rate")  # (else the sample sums the counters)
        # every field, in GpuSample's order: gpu_sample() then copies no defaults
        return gpu_sample(
            {
                "node": node,
                "index": index,
                "uuid": uuid,
                "model": model,
                "pci_bus_id": labels.get("pci_bus_id"),
                "up": None if up is None else up >= 0.5,
                "down_reason": next(iter(sorted(down)), None) if down else None,
                "temperature_c": p.get("temperature"),
                "temperature_min_window_c": p.get("temperature_min"),
                "memory_temperature_c": p.get("memory_temperature"),
                "slowdown_margin_c": p.get("slowdown_margin"),
                "power_w": p.get("power"),
                "power_limit_w": p.get("power_limit"),
                "sm_clock_hz": p.get("sm_clock"),
                "sm_clock_max_hz": p.get("sm_clock_max"),
                "util_ratio": p.get("util"),
                "tensor_active_ratio": p.get("tensor_active"),
                "sm_active_ratio": p.get("sm_active"),
                "memory_used_bytes": p.get("memory_used"),
                "memory_total_bytes": p.get("memory_total"),
                "clock_events": clock,
                "xid_last": int(xid_last) if xid_last is not None else None,
                "xid_increase": MappingProxyType(xid) if xid is not None else None,
                "ecc_uncorrected_increase": None if ecc_rate is None else ecc_rate * window,
                "row_remap_pending": None if pending is None else pending >= 0.5,
                "row_remap_failed": None if failed is None else failed >= 0.5,
                "nvlink_errors_total": nvlink_total,
                "nvlink_error_increase": (
                    None if nvlink_increase is None else MappingProxyType(nvlink_increase)
                ),
                "nvlink_fault_increase": None if fault_rate is None else fault_rate * window,
                "sampled_at": last,
                "nvlinks_total": links,
                "nvlinks_up": links_up,
            }
        )

    def _gpu_nvlink(
        self, acc: _NodeAcc, gpu: int, obj: _Obj, p: Mapping[str, float], window: float
    ) -> tuple[float | None, dict[str, float] | None, int | None, int | None]:
        """(errors summed over links and counters, increase per counter, links, links up)
        of a GPU: from our exporter's per-GPU sums where it serves them, else from the
        per-link rows."""
        counters = self._best(obj.dicts.get("nvlink_sum_present"))
        if counters:
            total: float | None = None
            if self._got("nvlink_sum_total"):
                totals = self._best(obj.dicts.get("nvlink_sum_total")) or {}
                total = sum(totals.get(c, 0.0) for c in counters)
            increase: dict[str, float] | None = None
            if self._got("nvlink_sum_rate"):
                rates = self._best(obj.dicts.get("nvlink_sum_rate")) or {}
                increase = {c: rates.get(c, 0.0) * window for c in sorted(counters)}
        else:
            total, increase = self._gpu_links(acc, gpu, p.get("nvlink_count"), window)
        links, up = p.get("nvlink_links"), p.get("nvlink_links_up")
        if links is None and "nvlink_count" in p:
            links = p["nvlink_count"]
            down = self._links_down(acc, gpu) if self._got("link_down") else None
            up = None if down is None else links - down
        return (
            total,
            increase,
            None if links is None else int(links),
            None if links is None or up is None else int(up),
        )

    def _got(self, key: str) -> bool:
        """The family was read and its read worked: an absent sparse row means 0."""
        return key in self.read and key not in self.failed

    @staticmethod
    def _links_down(acc: _NodeAcc, gpu: int) -> int:
        return sum(
            1
            for (g, _), obj in acc.links.items()
            if g == gpu and obj.values.get("link_down", 1.0) < 0.5
        )

    def _gpu_links(
        self, acc: _NodeAcc, gpu: int, count: float | None, window: float
    ) -> tuple[float | None, dict[str, float] | None]:
        """(errors summed over links and counters, increase per counter) of a GPU, from
        its per-link rows; zeros where it reports links and the read worked."""
        reports = count is not None
        total = 0.0 if reports and self._got("link_total") else None
        increase = (
            dict.fromkeys(NVLINK_COUNTERS, 0.0) if reports and self._got("link_rate") else None
        )
        for (g, _link), obj in acc.links.items():
            if g != gpu:
                continue
            totals = self._best(obj.dicts.get("link_total"))
            if totals:
                total = (total or 0.0) + sum(totals.values())
            rates = self._best(obj.dicts.get("link_rate"))
            if rates:
                increase = increase if increase is not None else {}
                for counter, rate in rates.items():
                    increase[counter] = increase.get(counter, 0.0) + rate * window
        if increase is not None:
            increase = dict(sorted(increase.items()))
        return total, increase

    def _link(
        self, node: str, key: tuple[int, int], obj: _Obj, acc: _NodeAcc, window: float
    ) -> NvLinkSample:
        gpu, link = key
        totals = dict(self._best(obj.dicts.get("link_total")) or {})
        rates = dict(self._best(obj.dicts.get("link_rate")) or {})
        gpu_obj = acc.gpus.get(gpu)
        # Sparse reads leave out zeros: on a GPU that reports its links (our exporter
        # reports all four counters of each), a counter this link does not show is 0.
        reports = gpu_obj is not None and (
            "nvlink_count" in gpu_obj.values or "nvlink_links" in gpu_obj.values
        )
        if reports:
            for counter in NVLINK_COUNTERS:
                if self._got("link_total"):
                    totals.setdefault(counter, 0.0)
                if self._got("link_rate"):
                    rates.setdefault(counter, 0.0)
        if totals and window > 0:  # as for IB ports: the window's rate, at most the value
            rates = {
                c: window_increase(r, totals.get(c), window) / window for c, r in rates.items()
            }
        up: bool | None = None
        if "link_down" in obj.values:
            up = obj.values["link_down"] >= 0.5
        elif reports and self._got("link_down"):
            # the GPU reports link states and this link was not among the down ones
            up = True
        return NvLinkSample(
            node=node,
            gpu=gpu,
            link=link,
            up=up,
            errors_total=MappingProxyType(dict(sorted(totals.items()))),
            error_rate_per_s=MappingProxyType(dict(sorted(rates.items()))),
        )

    def _port(self, node: str, key: tuple[str, str], obj: _Obj, window: float) -> IbPortSample:
        device, port = key
        p = obj.values
        present = obj.dicts.get("ib_error_present") or {}
        dialect = next((d for d in (KREA, NODE_EXPORTER) if d in present), None)
        totals: dict[str, float] = {}
        rates: dict[str, float] = {}
        if dialect is None and "ib_error_present" not in self.read:
            # which counters exist was not asked (a verdicts-only read): the sparse rows
            # that came back stand; the counters they leave out are unknown, not 0
            sparse = obj.dicts.get("ib_error_rate") or {}
            dialect = next((d for d in (KREA, NODE_EXPORTER) if d in sparse), None)
            if dialect is not None:
                rates = dict(sparse[dialect])
                totals = dict(obj.dicts.get("ib_error_total", {}).get(dialect) or {})
        elif dialect is not None:
            counters = present[dialect]
            if self._got("ib_error_total"):
                totals = dict.fromkeys(counters, 0.0)
            totals.update(
                (c, v)
                for c, v in (obj.dicts.get("ib_error_total", {}).get(dialect) or {}).items()
                if c in counters
            )
            # a zero rate needs two samples in the window; the data rates prove there were
            if ("ib_rx" in p or "ib_xmit_wait" in p) and self._got("ib_error_rate"):
                rates = dict.fromkeys(counters, 0.0)
            rates.update(
                (c, v)
                for c, v in (obj.dicts.get("ib_error_rate", {}).get(dialect) or {}).items()
                if c in counters
            )
        saturated = self._best(obj.dicts.get("ib_saturated")) or {}
        # the window's count and rate of a counter are one number (count = rate x window),
        # and never more than the counter holds (most counters of a fleet count nothing)
        increase = {c: v * window for c, v in sorted(rates.items())}
        for c, n in increase.items():
            if n and (held := window_increase(rates[c], totals.get(c), window)) < n:
                increase[c], rates[c] = held, held / window
        return IbPortSample(
            node=node,
            device=device,
            port=port,
            state=state_name(p.get("ib_state"), IB_STATES),
            phys_state=state_name(p.get("ib_phys_state"), IB_PHYS_STATES),
            rate_bytes_per_s=p.get("ib_rate"),
            rx_bytes_per_s=p.get("ib_rx"),
            tx_bytes_per_s=p.get("ib_tx"),
            xmit_wait_per_s=p.get("ib_xmit_wait"),
            errors_total=MappingProxyType(dict(sorted(totals.items()))),
            error_rate_per_s=MappingProxyType(dict(sorted(rates.items()))),
            error_increase=MappingProxyType(increase),
            saturated=frozenset(c for c, v in saturated.items() if v > 0),
        )
