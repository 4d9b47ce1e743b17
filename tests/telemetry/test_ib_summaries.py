"""``fabric`` at fleet scale asks for the IB error counters (eight per port: 320,000
series at 5,000 nodes) only of the nodes whose summaries do not prove them empty, and
still shows every port what the read without the summaries shows.

Four nodes of our exporter, one GPU each, on copies of a sysfs tree (four ports, all
eight error counters at 0), scraped by a real Prometheus:

* ``ib-clean``: as it is: no counter has counted, every port has all eight;
* ``ib-static``: a symbol error counted long before the window: its total is not 0, its
  rate is;
* ``ib-busy``: transmit discards rising in the window (a counter no health rule judges,
  so only the new summary of every counter can tell);
* ``ib-partial``: one port without one counter file: its presence mask is not full.

The port states, speeds and saturation, and the GPUs' NVLink sums, are pruned the same
way (a value every port of a node reports alike is given from the node's summary):

* ``ib-clean``'s ports all read ACTIVE, LinkUp, 100 Gb/s: state, physical state and speed
  come from its summaries; the others' speeds differ, and ``ib-busy`` has a port DOWN;
* ``ib-static``'s GPU has an NVLink replay counted before the window, ``ib-busy``'s an
  NVLink recovery rising in it and a link down.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from krea_ops.health import HealthPolicy, node_reasons
from krea_ops.model import FleetTelemetry
from krea_ops.telemetry import PrometheusSource
from krea_ops.telemetry.dialects import FABRIC
from krea_ops.telemetry.summary import expressions
from tests.conftest import PROCFS_TREE, wait_for
from tests.telemetry.conftest import KreaNode, Prometheus, Target, settings, start_krea_node

NODES = ("ib-clean", "ib-static", "ib-busy", "ib-partial")


@dataclass
class World:
    prom: Prometheus
    at: float

    def clock(self) -> float:
        return self.at


def _counter(tree: Path, device: str, port: str, name: str) -> Path:
    return tree / "class" / "infiniband" / device / "ports" / port / "counters" / name


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for node in NODES:
            trees[node] = Path(tmp) / node
            shutil.copytree(PROCFS_TREE, trees[node], symlinks=True)
        _counter(trees["ib-static"], "mlx4_0", "1", "symbol_error").write_text("7\n")
        _counter(trees["ib-partial"], "hfi1_0", "1", "local_link_integrity_errors").unlink()
        for port in _port_dirs(trees["ib-clean"]):
            (port / "phys_state").write_text("5: LinkUp\n")
            (port / "rate").write_text("100 Gb/sec (4X EDR)\n")
        (_counter(trees["ib-busy"], "mlx4_0", "2", "x").parent.parent / "state").write_text(
            "1: DOWN\n"
        )
        exporters: list[KreaNode] = [start_krea_node(n, trees[n], gpus=1) for n in NODES]
        by_node = {e.node: e for e in exporters}
        by_node["ib-static"].nvml.gpus[0].nvlinks[3].replay = 5
        by_node["ib-busy"].nvml.gpus[0].nvlinks[2].active = False
        prom = Prometheus([Target(e.address, "krea") for e in exporters])
        try:
            prom.wait_scrapes("krea", 2)
            # rate() divides by the whole window: let the history fill it first
            time.sleep(settings().telemetry_window_s + 1)
            busy = _counter(trees["ib-busy"], "mlx5_0", "1", "port_xmit_discards")
            busy.write_text("4\n")
            by_node["ib-busy"].nvml.gpus[0].nvlinks[0].recovery = 2
            changed = expressions(settings().telemetry_window_s)["ib_counted_new"]

            def recorded() -> bool:
                rows = prom.query(f"({changed}) > 0")
                return any(r["metric"].get("node") == "ib-busy" for r in rows)

            wait_for(recorded, timeout=60)
            busy.write_text("9\n")  # and again, so that it rises inside the window
            by_node["ib-busy"].nvml.gpus[0].nvlinks[0].recovery = 5
            wait_for(
                lambda: prom.query('krea_ib_port_discards_transmitted_total{node="ib-busy"} == 9'),
                timeout=60,
            )
            yield World(prom, at=time.time())
        finally:
            prom.stop()
            for e in exporters:
                e.stop()


def _port_dirs(tree: Path) -> list[Path]:
    return sorted((tree / "class" / "infiniband").glob("*/ports/*"))


def _ports(fleet: FleetTelemetry) -> dict[tuple[str, str], object]:
    return {
        (n, p.name): (
            dict(p.errors_total),
            {c: v > 0 for c, v in p.error_rate_per_s.items()},
            {c: v > 0 for c, v in p.error_increase.items()},
            p.state,
            p.phys_state,
            p.rate_bytes_per_s,
            sorted(p.saturated),
        )
        for n, t in fleet.nodes.items()
        for p in t.ib_ports
    }


def _nvlinks(fleet: FleetTelemetry) -> dict[tuple[str, int], object]:
    """What the views show of each GPU's NVLinks (the rising one: whether it rose)."""
    return {
        (n, g.index): (
            g.nvlinks_total,
            g.nvlinks_up,
            g.nvlink_errors_total,
            None
            if g.nvlink_error_increase is None
            else {c: v > 0 for c, v in g.nvlink_error_increase.items()},
        )
        for n, t in fleet.nodes.items()
        for g in t.gpus
    }


@pytest.mark.parametrize("by_name", [True, False], ids=["others-by-name", "all-but-proven"])
def test_fabric_skips_the_ib_error_counters_the_summaries_prove_empty(
    world: World, by_name: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not by_name:  # more nodes left than a name list holds: node!~ the proven ones
        monkeypatch.setattr("krea_ops.telemetry.prometheus.LINK_QUERY_NODES", 0)
    monkeypatch.setattr("krea_ops.telemetry.prometheus.DETAIL_NODES", 0)  # a fleet read
    with PrometheusSource(world.prom.url, settings(), clock=world.clock) as source:
        pruned = source.collect(families=FABRIC)
    with PrometheusSource(
        world.prom.url, settings(), use_summaries=False, clock=world.clock
    ) as plain:
        whole = plain.collect(families=FABRIC)
    assert whole.skipped == {}
    assert set(pruned.nodes) >= set(NODES)
    assert _ports(pruned) == _ports(whole)
    assert _nvlinks(pruned) == _nvlinks(whole)
    skipped = pruned.skipped
    # no counter counted (a missing one counts nothing either) / none rose / all there
    assert skipped["ib_error_total"] == {"ib-clean", "ib-partial"}
    assert skipped["ib_error_rate"] == {"ib-clean", "ib-static", "ib-partial"}
    assert skipped["ib_error_present"] == {"ib-clean", "ib-static", "ib-busy"}
    # every port alike: ib-clean's states and speed; every node's GPU (one each) alike
    assert "ib_state" not in skipped  # (its series names the ports to the read)
    assert skipped["ib_phys_state"] == skipped["ib_rate"] == {"ib-clean"}
    assert skipped["nvlink_links"] == skipped["nvlink_links_up"] == set(NODES)
    assert skipped["ib_saturated"] == set(NODES)
    # no NVLink counter counted / none rose / all four with a rate on every GPU
    assert skipped["nvlink_sum_total"] == {"ib-clean", "ib-partial"}
    assert skipped["nvlink_sum_rate"] == {"ib-clean", "ib-static", "ib-partial"}
    assert skipped["nvlink_sum_present"] == set(NODES)

    ports = {(n, p.name): p for n, t in pruned.nodes.items() for p in t.ib_ports}
    # what an operator reads on the fabric: a clean port's counters are 0, not unknown
    clean = ports[("ib-clean", "mlx4_0/1")]
    assert clean.errors_total == dict.fromkeys(clean.errors_total, 0.0)
    assert len(clean.errors_total) == 8
    assert ports[("ib-static", "mlx4_0/1")].errors_total["symbol_error"] == 7
    assert ports[("ib-busy", "mlx5_0/1")].error_increase["port_xmit_discards"] > 0
    # the port without the counter file: that counter unknown, the other seven 0
    partial = ports[("ib-partial", "hfi1_0/1")].errors_total
    assert "local_link_integrity_errors" not in partial and len(partial) == 7
    # a port's state and speed from its node's summaries, the down port as read
    assert (clean.state, clean.phys_state, clean.rate_bytes_per_s) == ("ACTIVE", "LinkUp", 12.5e9)
    assert ports[("ib-busy", "mlx4_0/2")].state == "DOWN"
    gpus = {n: t.gpus[0] for n, t in pruned.nodes.items()}
    assert (gpus["ib-clean"].nvlinks_total, gpus["ib-clean"].nvlinks_up) == (18, 18)
    assert gpus["ib-busy"].nvlinks_up == 17
    assert gpus["ib-clean"].nvlink_errors_total == 0
    assert gpus["ib-static"].nvlink_errors_total == 5
    assert (gpus["ib-busy"].nvlink_error_increase or {})["recovery"] > 0


def _links(fleet: FleetTelemetry) -> dict[str, object]:
    """Each node's per-link NVLink rows, as ``fabric`` lists them."""
    return {n: sorted(map(repr, t.nvlinks)) for n, t in fleet.nodes.items() if t.nvlinks}


LINK_KEYS = ("nvlink_count", "link_down", "link_total", "link_rate")


@pytest.mark.parametrize("guess", ["summaries", "too-few", "too-many"])
def test_the_per_link_round_goes_out_beside_the_pruned_readings_and_shows_the_same(
    world: World, guess: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-link rows are asked of the nodes whose summaries leave their links in
    question (``ib-busy``: a link down, a recovery rising), in the round of the readings
    the summaries prune, not in a third round after them. Whatever that guess, ``fabric``
    shows every node's links as the read without the summaries does: a guess that misses a
    node that turns out to need its links is asked again, one that names more is shown
    only for the nodes that need them."""
    monkeypatch.setattr("krea_ops.telemetry.prometheus.DETAIL_NODES", 0)  # a fleet read
    real = PrometheusSource._link_suspects
    if guess == "too-few":
        fake = staticmethod(lambda *_a: frozenset())
    else:
        fake = staticmethod(lambda *a: None if real(*a) is None else frozenset(NODES))
    if guess != "summaries":
        monkeypatch.setattr(PrometheusSource, "_link_suspects", fake)
    asked: list[tuple[str, str]] = []
    submit = PrometheusSource._submit

    def recording(self: PrometheusSource, asks: list, at: float, **kw: object) -> object:
        asked.extend((key, promql) for key, promql, _ in asks)
        return submit(self, asks, at, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(PrometheusSource, "_submit", recording)
    with PrometheusSource(world.prom.url, settings(), clock=world.clock) as source:
        pruned = source.collect(families=FABRIC)
    monkeypatch.setattr(PrometheusSource, "_submit", submit)
    with PrometheusSource(
        world.prom.url, settings(), use_summaries=False, clock=world.clock
    ) as plain:
        whole = plain.collect(families=FABRIC)
    assert _links(pruned) == _links(whole)
    assert set(_links(pruned)) == {"ib-busy"}  # its link down, its recovery rising
    assert _nvlinks(pruned) == _nvlinks(whole)
    links = [(key, promql) for key, promql in asked if key in LINK_KEYS]
    # (a node=~ list names each node escaped: ib\\-busy in the query's string)
    named = {n for _, promql in links for n in NODES if n.replace("-", "\\\\-") in promql}
    # each asked once: early of the node in question (or of every node, shown of the
    # one that needs them); a guess naming none asks nothing early, then that one
    assert sorted(k for k, _ in links) == sorted(LINK_KEYS)
    assert named == (set(NODES) if guess == "too-many" else {"ib-busy"})


def _quiet_links(fleet: FleetTelemetry) -> list[str]:
    """Links read that are up and have counted nothing: what no node verdict reads."""
    return [
        f"{node} {link.name}"
        for node, tel in fleet.nodes.items()
        for link in tel.nvlinks
        if link.up is not False
        and not any(link.errors_total.values())
        and not any(link.error_rate_per_s.values())
    ]


@pytest.mark.parametrize("nodes", [NODES, None], ids=["named", "every-node"])
def test_a_verdicts_read_asks_only_for_the_links_in_trouble_and_judges_as_a_full_read(
    world: World, nodes: tuple[str, ...] | None
) -> None:
    """A verdicts-only read of a few nodes (``nodes list`` and ``queue list`` below 65
    nodes, a controller's read of the nodes it acts on) asks for the per-link rows sparse:
    the links down or counting, not every link's zeros (a full read of the same nodes has
    those). Every node's findings are the same as the full read's: the link down beside
    links up on ``ib-busy``, its recovery errors, the replay long before the window on
    ``ib-static`` judged nothing."""
    policy = HealthPolicy.from_settings(settings())
    with PrometheusSource(world.prom.url, settings(), clock=world.clock) as source:
        judged = source.collect(nodes, families={"verdicts"})
        whole = source.collect(nodes)

    def findings(fleet: FleetTelemetry) -> dict[str, list[tuple[str, str]]]:
        return {
            n: [(r.code, r.message) for r in node_reasons(None, fleet.nodes.get(n), policy)]
            for n in NODES
        }

    assert findings(judged) == findings(whole)
    busy = {code for code, _ in findings(judged)["ib-busy"]}
    assert {"nvlink_errors", "nvlink_down"} <= busy, findings(judged)["ib-busy"]
    assert _quiet_links(judged) == []
    assert {link.name for link in judged.nodes["ib-busy"].nvlinks} >= {"gpu0/link0", "gpu0/link2"}
    if nodes is not None:
        assert _quiet_links(whole), "a full read of a few nodes has every link"
