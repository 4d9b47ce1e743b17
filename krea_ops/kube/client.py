"""Connect to a cluster: kubeconfig (flag, $KUBECONFIG, ~/.kube/config) or in-cluster.

Every failure to connect is one line saying what was wrong and what to do, never a
traceback. What the operator named and we cannot use (no kubeconfig at all, a missing or
corrupt file, a context it does not have) is ``BadInput`` (exit 2); an API server that
does not answer or refuses the credentials, and an in-cluster configuration that does not
load, are ``Unavailable`` (exit 1), as every read command reports them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from krea_ops.errors import BadInput, Unavailable


def kubeconfig_path(explicit: str | None) -> str | None:
    """The kubeconfig file in use: the flag's, else the first of ``$KUBECONFIG``, else
    ``~/.kube/config`` where it exists; None means in-cluster."""
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

    path = kubeconfig_path(kubeconfig)
    # No retries inside urllib3: by default it sends a GET again after a read timeout,
    # three times, so one stalled call costs four timeouts. Cluster.request retries what
    # is worth retrying itself (a 429's Retry-After, a GET hung up on).
    configuration = client.Configuration()
    configuration.retries = False
    if path is None:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            try:
                config.load_incluster_config(client_configuration=configuration)
            except ConfigException as exc:
                raise Unavailable(f"in-cluster configuration failed: {exc}") from None
            return client.ApiClient(configuration)
        raise BadInput(
            "no kubeconfig: pass --kubeconfig, set KUBECONFIG, or create "
            "~/.kube/config (krea-ops sim serve writes one)"
        )
    if not Path(path).is_file():
        raise BadInput(f"kubeconfig {path} does not exist")
    try:
        api = config.new_client_from_config(
            config_file=path, context=context, client_configuration=configuration
        )
    except ConfigException as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid configuration"
        raise BadInput(f"kubeconfig {path}: {first}") from None
    except Exception as exc:  # yaml errors and the like from a corrupt file
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInput(f"kubeconfig {path} could not be read: {first}") from None
    _check_client_certificate(api.configuration, path)
    return api


def _check_client_certificate(configuration: Any, path: str) -> None:
    """Load the kubeconfig's client certificate and key now: a pair that does not load
    otherwise surfaces as an SSL error inside the first request. The message names
    the problem, never the data."""
    import ssl

    cert, key = configuration.cert_file, configuration.key_file
    if not cert and not key:
        return
    try:
        ssl.create_default_context().load_cert_chain(cert, key)
    except (ssl.SSLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or (str(exc).splitlines() or [""])[0][:120]
        raise BadInput(
            f"kubeconfig {path}: its client certificate and key do not load ({reason}); "
            "fix client-certificate(-data) and client-key(-data)"
        ) from None


def check_reachable(api: Any, timeout_s: float = 5.0) -> None:
    """Unavailable (exit 1) with one line if the API server does not answer or refuses."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    host = api.configuration.host
    try:
        client.VersionApi(api).get_code(_request_timeout=timeout_s)
    except ApiException as exc:
        if exc.status in (401, 403):
            raise Unavailable(
                f"the API server at {host} refused the credentials (HTTP {exc.status}); "
                "refresh the kubeconfig's token"
            ) from None
        raise Unavailable(f"the API server at {host} answered HTTP {exc.status}") from None
    except Exception as exc:
        reason = getattr(exc, "reason", None) or exc
        raise Unavailable(
            f"cannot reach the API server at {host}: {str(reason).splitlines()[0][:200]}; "
            "check --kubeconfig/--context"
        ) from None
