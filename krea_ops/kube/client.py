"""Connect to a cluster: kubeconfig (flag, $KUBECONFIG, ~/.kube/config) or in-cluster.

Every failure to connect is a ``BadInput`` with one line saying what was wrong and what
to do, never a traceback: a missing or corrupt kubeconfig, an unknown context, an API
server that does not answer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from krea_ops.errors import BadInput


def _kubeconfig_path(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    env = os.environ.get("KUBECONFIG")
    if env:
        return env.split(os.pathsep)[0]
    default = Path.home() / ".kube" / "config"
    return str(default) if default.exists() else None


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ApiClient for the configured cluster (not yet contacted)."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    path = _kubeconfig_path(kubeconfig)
    if path is None:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            try:
                config.load_incluster_config()
            except ConfigException as exc:
                raise BadInput(f"in-cluster configuration failed: {exc}") from None
            return client.ApiClient()
        raise BadInput(
            "no kubeconfig: pass --kubeconfig, set KUBECONFIG, or create "
            "~/.kube/config (krea-ops sim serve writes one)"
        )
    if not Path(path).is_file():
        raise BadInput(f"kubeconfig {path} does not exist")
    try:
        return config.new_client_from_config(config_file=path, context=context)
    except ConfigException as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid configuration"
        raise BadInput(f"kubeconfig {path}: {first}") from None
    except Exception as exc:  # yaml errors and the like from a corrupt file
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInput(f"kubeconfig {path} could not be read: {first}") from None


def check_reachable(api: Any, timeout_s: float = 5.0) -> None:
    """Fail with one line if the API server does not answer."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        client.VersionApi(api).get_code(_request_timeout=timeout_s)
    except ApiException as exc:
        if exc.status in (401, 403):
            raise BadInput(
                f"API server {api.configuration.host} refused the credentials (HTTP {exc.status})"
            ) from None
        raise BadInput(f"API server {api.configuration.host} answered HTTP {exc.status}") from None
    except Exception as exc:
        reason = getattr(exc, "reason", None) or exc
        raise BadInput(
            f"cannot reach the API server at {api.configuration.host}: "
            f"{str(reason).splitlines()[0][:200]}"
        ) from None
