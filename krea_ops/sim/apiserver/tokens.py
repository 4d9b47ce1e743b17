"""Bound service-account tokens: the TokenRequest API and their verification.

A real API server signs service-account tokens as JWTs with the key named by
``--service-account-signing-key-file`` and, when it authenticates one, checks the
signature, the expiry, the audience and that the ServiceAccount the token names still
exists with the same uid (pkg/serviceaccount/claims.go ``validator.Validate``): deleting a
ServiceAccount revokes its tokens. The simulator does the same with an RSA key kept in the
state directory (``pki/sa.key``), so tokens survive a restart of ``sim serve`` exactly as
long as the key and the ServiceAccount do.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

# kube-apiserver's --service-account-issuer as kubeadm sets it; the API audiences default to it.
ISSUER = "https://kubernetes.default.svc.cluster.local"
DEFAULT_EXPIRATION_S = 3600
MIN_EXPIRATION_S = 600  # pkg/apis/authentication/validation: "less than 10 minutes"
MAX_EXPIRATION_S = 1 << 32
SA_PREFIX = "system:serviceaccount:"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class ServiceAccountUser:
    """Who a valid token speaks for (the authenticator's ``user.Info``)."""

    namespace: str
    name: str
    uid: str
    credential_id: str
    pod: tuple[str, str] | None = None  # (name, uid) of the pod a token is bound to

    @property
    def username(self) -> str:
        return f"{SA_PREFIX}{self.namespace}:{self.name}"

    @property
    def groups(self) -> list[str]:
        # serviceaccount.MakeGroupNames plus what every authenticated user gets
        return [
            "system:serviceaccounts",
            f"system:serviceaccounts:{self.namespace}",
            "system:authenticated",
        ]

    @property
    def extra(self) -> dict[str, list[str]]:
        """pkg/serviceaccount/util.go ``UserInfo``: the credential id, and the pod of a
        pod-bound token."""
        out = {"authentication.kubernetes.io/credential-id": [f"JTI={self.credential_id}"]}
        if self.pod is not None:
            out["authentication.kubernetes.io/pod-name"] = [self.pod[0]]
            out["authentication.kubernetes.io/pod-uid"] = [self.pod[1]]
        return out


class TokenSigner:
    """Issues and verifies RS256 service-account JWTs.

    The key is made on first use (tests that never ask for a token pay nothing) and kept
    at ``key_path`` when there is one."""

    def __init__(self, key_path: Path | None, clock: Callable[[], Any]) -> None:
        self._key_path = key_path
        self._clock = clock
        self._key: rsa.RSAPrivateKey | None = None
        self._lock = threading.Lock()

    def _now(self) -> int:
        return int(self._clock().timestamp())

    def _private_key(self) -> rsa.RSAPrivateKey:
        with self._lock:
            if self._key is not None:
                return self._key
            path = self._key_path
            if path is not None and path.exists():
                loaded = serialization.load_pem_private_key(path.read_bytes(), None)
                assert isinstance(loaded, rsa.RSAPrivateKey)
                self._key = loaded
            else:
                self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    pem = self._key.private_bytes(
                        serialization.Encoding.PEM,
                        serialization.PrivateFormat.PKCS8,
                        serialization.NoEncryption(),
                    )
                    path.touch(mode=0o600)
                    path.write_bytes(pem)
            return self._key

    def _key_id(self) -> str:
        """The ``kid`` header as kube-apiserver computes it: the unpadded base64url of the
        SHA-256 of the public key's DER (pkg/serviceaccount/jwt.go ``keyIDFromPublicKey``)."""
        der = (
            self._private_key()
            .public_key()
            .public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return _b64(hashlib.sha256(der).digest())

    def issue(
        self,
        namespace: str,
        name: str,
        uid: str,
        audiences: list[str],
        expiration_s: int,
        bound: tuple[str, str, str] | None = None,
    ) -> tuple[str, int]:
        """A signed token and its expiry (Unix seconds); ``bound`` is ("pod" or "secret",
        name, uid) of the object the token lives and dies with."""
        now = self._now()
        exp = now + expiration_s
        header = {"alg": "RS256", "kid": self._key_id()}
        claims = {
            "aud": audiences,
            "exp": exp,
            "iat": now,
            "iss": ISSUER,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": {
                "namespace": namespace,
                "serviceaccount": {"name": name, "uid": uid},
                **({bound[0]: {"name": bound[1], "uid": bound[2]}} if bound else {}),
            },
            "nbf": now,
            "sub": f"{SA_PREFIX}{namespace}:{name}",
        }
        signing_input = (
            _b64(json.dumps(header, separators=(",", ":")).encode())
            + "."
            + _b64(json.dumps(claims, separators=(",", ":")).encode())
        )
        signature = self._private_key().sign(
            signing_input.encode(), padding.PKCS1v15(), hashes.SHA256()
        )
        return f"{signing_input}.{_b64(signature)}", exp

    def claims(self, token: str, audiences: list[str]) -> dict[str, Any] | None:
        """The claims of a token this server signed, for one of ``audiences``, that is in
        its validity window; None for anything else."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            header = json.loads(_unb64(parts[0]))
            claims = json.loads(_unb64(parts[1]))
            signature = _unb64(parts[2])
        except ValueError:
            return None
        if not isinstance(header, dict) or header.get("alg") != "RS256":
            return None
        if not isinstance(claims, dict) or claims.get("iss") != ISSUER:
            return None
        try:
            self._private_key().public_key().verify(
                signature, f"{parts[0]}.{parts[1]}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
        except InvalidSignature:
            return None
        now = self._now()
        exp, nbf = claims.get("exp"), claims.get("nbf", 0)
        if not isinstance(exp, int) or not isinstance(nbf, int) or not nbf <= now < exp:
            return None
        aud = claims.get("aud")
        aud_list = aud if isinstance(aud, list) else [aud]
        if not set(aud_list) & set(audiences):
            return None
        return claims


def service_account_of(claims: dict[str, Any]) -> tuple[str, str, str, str] | None:
    """(namespace, name, uid, jti) named by verified claims."""
    private = claims.get("kubernetes.io")
    if not isinstance(private, dict):
        return None
    sa = private.get("serviceaccount")
    ns = private.get("namespace")
    if not isinstance(sa, dict) or not isinstance(ns, str):
        return None
    name, uid = sa.get("name"), sa.get("uid")
    if not isinstance(name, str) or not isinstance(uid, str):
        return None
    return ns, name, uid, str(claims.get("jti") or "")


def bound_objects(claims: dict[str, Any]) -> list[tuple[str, str, str]]:
    """("pod" or "secret", name, uid) of the objects verified claims are bound to."""
    private = claims.get("kubernetes.io")
    out = []
    for kind in ("pod", "secret"):
        ref = private.get(kind) if isinstance(private, dict) else None
        if isinstance(ref, dict):
            out.append((kind, str(ref.get("name") or ""), str(ref.get("uid") or "")))
    return out
