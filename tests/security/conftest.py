"""What the security tests share: a simulated API server whose admin credentials are
distinctive random strings (a bearer token, and a client certificate and key carried in
the kubeconfig as data), so a test can look for them in everything krea-ops writes."""

from __future__ import annotations

import base64
import datetime as dt
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from krea_ops.sim.apiserver.local import LocalApiServer


@dataclass
class Credentials:
    """The kubeconfig in use and every form its secrets could leak in."""

    sim: LocalApiServer
    kubeconfig: Path
    token: str
    forms: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, secret: str) -> None:
        """``secret`` itself, its base64, and slices of both (a message that cuts a long
        value short still leaks what it shows)."""
        for label, text in ((name, secret), (f"{name} (base64)", _b64(secret))):
            self.forms[label] = text
            for i in range(0, max(len(text) - 24, 1), max(len(text) // 4, 1)):
                self.forms[f"{label}[{i}:{i + 24}]"] = text[i : i + 24]

    def leaks(self, text: str) -> list[str]:
        return sorted(label for label, form in self.forms.items() if form in text)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def client_certificate() -> tuple[str, str]:
    """A fresh EC key and a self-signed certificate for it, PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ops-admin")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem.decode()


def _pem_body(pem: str) -> str:
    return "".join(line for line in pem.splitlines() if not line.startswith("-----"))


@pytest.fixture
def creds(tmp_path: Path) -> Iterator[Credentials]:
    token = "kreaLeakCanary" + secrets.token_urlsafe(32)
    sim = LocalApiServer(tmp_path / "state", token=token)
    cert_pem, key_pem = client_certificate()
    config = yaml.safe_load(sim.kubeconfig.read_text())
    user = config["users"][0]["user"]
    user["client-certificate-data"] = _b64(cert_pem)
    user["client-key-data"] = _b64(key_pem)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    found = Credentials(sim, path, token)
    found.add("token", token.removeprefix("kreaLeakCanary"))
    found.add("client key", _pem_body(key_pem))
    found.add("client certificate", _pem_body(cert_pem))
    found.forms["client-key-data"] = user["client-key-data"]
    found.forms["client-certificate-data"] = user["client-certificate-data"]
    try:
        yield found
    finally:
        sim.close()
