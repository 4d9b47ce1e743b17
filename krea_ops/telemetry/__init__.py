"""Fleet telemetry as snapshots: GPUs, NVLinks and InfiniBand ports of every node.

``open_source(settings, cluster)`` gives a ``TelemetrySource`` (Prometheus, or a direct
scrape of the exporters); ``source.collect(nodes)`` gives a ``krea_ops.model.FleetTelemetry``.
docs/metrics.md ("What krea-ops reads") lists every metric read, per dialect.
"""

from typing import TYPE_CHECKING, Any

from krea_ops.telemetry.prometheus import PrometheusSource
from krea_ops.telemetry.source import TelemetrySource, open_source

if TYPE_CHECKING:
    from krea_ops.telemetry.scrape import ScrapeSource

__all__ = ["PrometheusSource", "ScrapeSource", "TelemetrySource", "open_source"]


def __getattr__(name: str) -> Any:
    # the direct scrape (and prometheus_client's parser) is imported when first used:
    # a read through Prometheus starts ~15 ms sooner
    if name == "ScrapeSource":
        from krea_ops.telemetry.scrape import ScrapeSource

        return ScrapeSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
