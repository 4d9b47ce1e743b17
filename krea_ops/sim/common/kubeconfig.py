"""Clients and kubeconfigs for a simulated control plane, embedded or upstream: an official
``ApiClient`` with a bearer token, a new token, and the admin kubeconfig (mode 0600).
"""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path
from typing import Any

import yaml


def bearer_client(url: str, token: str, ca_cert: Path) -> Any:
    """An official ``kubernetes.client.ApiClient`` for ``url`` with a bearer token,
    trusting ``ca_cert``."""
    from kubernetes import client

    config = client.Configuration()
    config.host = url
    config.api_key = {"authorization": f"Bearer {token}"}
    config.ssl_ca_cert = str(ca_cert)
    return client.ApiClient(config)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def kubeconfig(
    url: str,
    token: str,
    *,
    ca_pem: bytes | None = None,
    name: str = "krea-sim",
    namespace: str = "default",
) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": f"{name}-admin", "user": {"token": token}}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": name, "user": f"{name}-admin", "namespace": namespace},
            }
        ],
        "current-context": name,
    }


def write_kubeconfig(path: Path | str, url: str, token: str, ca_pem: bytes | None = None) -> Path:
    """Write a kubeconfig readable only by its owner (it holds the token)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(kubeconfig(url, token, ca_pem=ca_pem), f, sort_keys=False)
    os.replace(tmp, target)
    return target
