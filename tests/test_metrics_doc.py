"""docs/metrics.md names every metric the exporter serves; alert rules use only real ones."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from krea_ops.exporters.fakenvml import fake_h200_node
from krea_ops.exporters.infiniband import InfinibandCollector
from krea_ops.exporters.nvml import GpuCollector
from krea_ops.exporters.server import Exporter, nvml_unavailable_metrics
from krea_ops.model import NODE_FOLDS
from tests.conftest import PROCFS_TREE, ROOT, wait_for


@pytest.fixture(scope="module")
def served_names() -> Iterator[set[str]]:
    """Sample names of a scrape that shows every kind of series: healthy GPUs, a lost
    GPU, an XID, NVML-unavailable notes, InfiniBand with hw_counters and saturation."""
    nvml = fake_h200_node(count=3)
    nvml.nvmlInit()
    gpu = GpuCollector(nvml, "n1", gpm_interval_s=0.05, event_wait_ms=20)
    gpu.start()
    ib = InfinibandCollector(PROCFS_TREE, "n1")
    exporter = Exporter(node="n1", collectors=[gpu, ib], notes=nvml_unavailable_metrics("n1", "x"))
    try:
        nvml.inject_xid(0, 79)
        nvml.gpus[2].lost = True

        def scrape_with_xid() -> str | None:
            text = exporter.scrape().decode()
            return text if "krea_gpu_xid_last{" in text and "tensor_active_ratio{" in text else None

        text = wait_for(scrape_with_xid, timeout=20)
        yield {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    finally:
        exporter.close()


def test_every_served_metric_is_documented(served_names: set[str]) -> None:
    doc = (ROOT / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"`(krea_[a-z0-9_]+)", doc))
    assert len(served_names) > 60
    assert sorted(served_names - documented) == []


def test_alert_rules_use_only_served_metrics(served_names: set[str]) -> None:
    rules = yaml.safe_load((ROOT / "deploy/prometheus/krea-ops-rules.yaml").read_text())
    used = {
        name
        for group in rules["groups"]
        for rule in group["rules"]
        for name in re.findall(r"\b(krea_[a-z0-9_]+)", rule["expr"])
    }
    assert used, "the rules should reference krea metrics"
    assert sorted(used - served_names) == []


def test_node_summaries_read_only_served_metrics(served_names: set[str]) -> None:
    """The node summaries read our exporter's per-node folds and the port series of the
    congestion rate: each name they read exists in a scrape."""
    from krea_ops.telemetry.summary import expressions

    used = {n for e in expressions(300.0).values() for n in re.findall(r"\bkrea_[a-z0-9_]+", e)}
    assert len(used) > 15
    # (the scrape has a lost GPU: a reading all GPUs share has no node value then)
    uniform = {n for k, n in NODE_FOLDS.items() if k.endswith("_uniform")}
    assert sorted(used - served_names - uniform) == []
    assert uniform <= used
