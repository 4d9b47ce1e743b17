"""Where telemetry comes from: the interface both sources implement, and how one is chosen.

``open_source(settings, cluster)`` picks, in order: ``settings.prometheus_url``
(``--prometheus`` / ``KREA_OPS_PROMETHEUS_URL``), the cluster's ConfigMap
``krea-ops/krea-ops-config`` key ``prometheusURL``, then a direct scrape of the exporters
listed in its key ``exporters`` (JSON node -> URL).
"""

from __future__ import annotations

import abc
import socket
from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

import requests

from krea_ops.errors import Unavailable
from krea_ops.model import FleetTelemetry
from krea_ops.settings import Settings

if TYPE_CHECKING:
    from krea_ops.health import HealthPolicy
    from krea_ops.kube.cluster import Cluster

NO_SOURCE = (
    "no Prometheus: pass --prometheus URL, set KREA_OPS_PROMETHEUS_URL, "
    "or set prometheusURL/exporters in ConfigMap krea-ops/krea-ops-config"
)


class TelemetrySource(Protocol):
    """A fleet snapshot on demand. One object is meant to be kept and asked repeatedly.
    ``PrometheusSource`` and ``ScrapeSource`` implement it; anything with these methods
    (a test's recorded fleet) is a source too."""

    @abc.abstractmethod
    def collect(
        self, nodes: Collection[str] | None = None, *, families: Collection[str] | None = None
    ) -> FleetTelemetry:
        """The fleet (``nodes=None``) or only the named nodes. Nodes with no data at all
        are absent from the result; the caller reports them as unknown. ``families``:
        only these groups of readings (``dialects.GROUPS``: ``gpu``, ``nvlink``, ``ib``,
        ``ib_detail``; None: all); fields of groups not read are None / empty."""

    @abc.abstractmethod
    def describe(self) -> str:
        """``prometheus http://...`` or ``scrape of N exporters``."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> TelemetrySource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_source(
    settings: Settings, cluster: Cluster | None, policy: HealthPolicy | None = None
) -> TelemetrySource:
    """The telemetry source the settings and the cluster name; Unavailable if none.
    ``policy``: the health rules the caller judges by (the node summaries decide with
    them which nodes need a GPU-by-GPU read); default the settings' own."""
    from krea_ops.telemetry.prometheus import PrometheusSource

    if settings.prometheus_url:
        return PrometheusSource(settings.prometheus_url, settings, policy=policy)
    if cluster is not None:
        config = cluster.ops_config()
        if config.prometheus_url:
            return PrometheusSource(config.prometheus_url, settings, policy=policy)
        if config.exporters:
            # (the direct scrape and prometheus_client's parser: only where it is used)
            from krea_ops.telemetry.scrape import ScrapeSource

            return ScrapeSource(config.exporters, settings)
    raise Unavailable(NO_SOURCE)


def short_reason(exc: BaseException, timeout_s: float) -> str:
    """One short phrase for an HTTP failure: ``connection refused``, ``timed out after 10 s``."""
    text = str(exc)
    low = text.lower()
    if isinstance(exc, (requests.Timeout, socket.timeout)) or "timed out" in low:
        return f"timed out after {timeout_s:g} s"
    if "connection refused" in low or isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if "name or service not known" in low or "nodename nor servname" in low:
        return "host name not resolved"
    if "temporary failure in name resolution" in low or "failed to resolve" in low:
        return "host name not resolved"
    if "connection reset" in low or "remotedisconnected" in low or "connection aborted" in low:
        return "connection reset"
    if "incompleteread" in low or isinstance(exc, requests.exceptions.ChunkedEncodingError):
        # the body ended before its Content-Length (a proxy or Prometheus hung up midway)
        return "the answer was cut short"
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS error"
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:200]
