"""The cached text renderer writes exactly what prometheus_client's generate_latest writes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from krea_ops.exporters.exposition import CachedTextRenderer
from krea_ops.exporters.fakenvml import fake_h200_node
from krea_ops.exporters.infiniband import InfinibandCollector
from krea_ops.exporters.nvml import GpuCollector
from tests.conftest import PROCFS_TREE


class _Tricky:
    """Escapes, odd floats, label order and a family type the renderer does not handle."""

    def __init__(self) -> None:
        self.value = 1.0
        self.with_info = False

    def describe(self) -> list:
        return []

    def collect(self):  # type: ignore[no-untyped-def]
        c = CounterMetricFamily("x_bytes", "help with \\ and\nnewline", labels=["z", "a"])
        c.add_metric(['quote " back \\ nl \n', "v"], self.value)
        yield c
        g = GaugeMetricFamily("g_ratio", "gauge", labels=["b", "a"])
        g.add_metric(["2", "1"], float("inf"))
        g.add_metric(["1", "1"], float("nan"))
        g.add_metric(["0", "0"], 1e21)
        yield g
        yield GaugeMetricFamily("plain", "no labels", value=-0.0)
        if self.with_info:
            yield InfoMetricFamily("build", "info", value={"version": "1"})


class _Static:
    def __init__(self, families: list) -> None:
        self.families = families

    def describe(self) -> list:
        return []

    def collect(self):  # type: ignore[no-untyped-def]
        return iter(self.families)


def test_matches_generate_latest_byte_for_byte_across_scrapes() -> None:
    source = _Tricky()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(source)
    renderer = CachedTextRenderer(registry)
    for value in (1.0, 2.5, 1e-9):
        source.value = value  # cached label text, fresh values
        assert renderer.render() == generate_latest(registry)
    source.with_info = True  # an info family falls back to the library, same output
    assert renderer.render() == generate_latest(registry)


def test_matches_on_a_real_node_scrape() -> None:
    nvml = fake_h200_node(count=2)
    nvml.nvmlInit()
    gpu = GpuCollector(nvml, "n1")
    ib = InfinibandCollector(PROCFS_TREE, "n1")
    try:
        # One collection rendered both ways (energy counters move between two scrapes).
        families = [*gpu.collect(), *ib.collect()]
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Static(families))
        first = CachedTextRenderer(registry).render()
        assert first == generate_latest(registry)
        assert b"krea_gpu_temperature_celsius{" in first and b"krea_ib_state_id{" in first
    finally:
        gpu.close()
        ib.close()
