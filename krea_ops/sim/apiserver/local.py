"""Start a simulated API server in this process: for tests, the demo and ``sim serve``."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from krea_ops.sim.apiserver.http import HttpFront
from krea_ops.sim.apiserver.server import ApiServer
from krea_ops.sim.common.kubeconfig import new_token, write_kubeconfig
from krea_ops.sim.common.tls import ensure_certificate, server_context


@functools.lru_cache(maxsize=1)
def _bundled() -> tuple[dict[str, Any], ...]:
    from krea_ops.sim.apiserver.validation import bundled_crds

    return tuple(bundled_crds())


def bundled_crds() -> list[dict[str, Any]]:
    """The Kueue and JobSet CRDs, parsed once per process (they are 2.4 MB of YAML)."""
    return list(_bundled())


class LocalApiServer:
    """An ApiServer with its HTTP front on a free loopback port and a kubeconfig for it.

    ``with LocalApiServer(state_dir) as sim: client = sim.api_client()``
    """

    def __init__(
        self,
        state_dir: Path | str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        crds: bool = True,
        kubeconfig_out: Path | str | None = None,
        **server_options: Any,
    ) -> None:
        self._tmp = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="krea-sim-")
            state_dir = self._tmp.name
        self.state_dir = Path(state_dir)
        self.token = token or new_token()
        self.api = ApiServer(
            self.state_dir,
            crds=bundled_crds() if crds else None,
            token=self.token,
            **server_options,
        )
        try:
            self.ca_cert, key = ensure_certificate(self.state_dir / "pki", (host,))
            self.front = HttpFront(self.api, host, port, server_context(self.ca_cert, key))
        except Exception:
            self.api.close()
            raise
        self.url = self.front.url
        self.kubeconfig = write_kubeconfig(
            kubeconfig_out or self.state_dir / "kubeconfig",
            self.url,
            self.token,
            self.ca_cert.read_bytes(),
        )

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` configured for this server."""
        from krea_ops.sim.common.kubeconfig import bearer_client

        return bearer_client(self.url, self.token, self.ca_cert)

    def close(self) -> None:
        self.front.stop()
        self.api.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> LocalApiServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
