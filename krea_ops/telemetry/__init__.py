"""Fleet telemetry as snapshots: GPUs, NVLinks and InfiniBand ports of every node.

``open_source(settings, cluster)`` gives a ``TelemetrySource`` (Prometheus, or a direct
scrape of the exporters); ``source.collect(nodes)`` gives a ``krea_ops.model.FleetTelemetry``.
docs/metrics.md ("What krea-ops reads") lists every metric read, per dialect.
"""

from krea_ops.telemetry.prometheus import PrometheusSource
from krea_ops.telemetry.scrape import ScrapeSource
from krea_ops.telemetry.source import TelemetrySource, open_source

__all__ = ["PrometheusSource", "ScrapeSource", "TelemetrySource", "open_source"]
