"""NATS JWTs (``nats.io/v2`` claims), encoded and checked with ``nkeys``: pure.

A NATS JWT is ``header.payload.signature``, each base64url without padding; the header
is ``{"typ":"JWT","alg":"ed25519-nkey"}``; the signature is the issuer's nkey (``iss``,
a public key) over ``header.payload``. ``jti`` is, as NATS makes it, the base32 (no
padding) SHA-512/256 of the claims with an empty ``jti``.

The auth callout reads one kind (``authorization_request``, signed by the server) and
writes two (``user``, inside an ``authorization_response``, both signed by the issuer
account's key); see ADR-26.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import nacl.exceptions
import nacl.signing
import nkeys

HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
REQUEST_AUDIENCE = "nats-authorization-request"  # the server's requests are for this


class InvalidJwt(ValueError):
    """Not a NATS JWT, a bad signature, or not the kind expected; says which."""


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise InvalidJwt(f"not base64url ({exc})") from exc


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def jti(claims: dict[str, Any]) -> str:
    digest = hashlib.new("sha512_256", _compact({**claims, "jti": ""})).digest()
    return base64.b32encode(digest).decode().rstrip("=")


def verify(public: str, data: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is the nkey ``public``'s (``U``, ``A``, ``N``...) over ``data``."""
    try:
        raw = base64.b32decode(public + "=" * (-len(public) % 8))
    except (ValueError, TypeError):
        return False
    if len(raw) != 35 or nkeys.crc16(bytearray(raw[:-2])) != int.from_bytes(raw[-2:], "little"):
        return False
    try:
        nacl.signing.VerifyKey(raw[1:33]).verify(data, signature)
    except (nacl.exceptions.BadSignatureError, ValueError, TypeError):
        return False
    return True


def encode(claims: dict[str, Any], pair: Any) -> str:
    """``claims`` signed by ``pair`` (an ``nkeys`` key pair): ``iss`` is set to its public
    key and ``jti`` computed; everything else (``iat``, ``exp``, ``sub``...) is the caller's."""
    body = {**claims, "iss": pair.public_key.decode()}
    body["jti"] = jti(body)
    signing = f"{b64(_compact(HEADER))}.{b64(_compact(body))}"
    return f"{signing}.{b64(pair.sign(signing.encode()))}"


def decode(token: str, *, kind: str, issuer_prefix: str = "") -> dict[str, Any]:
    """The claims of ``token`` once its signature by its ``iss`` checks out and its
    ``nats.type`` is ``kind``; ``issuer_prefix``: what ``iss`` must start with ("N": a
    server, "A": an account). ``InvalidJwt`` says what is wrong."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise InvalidJwt("not a JWT (expected header.payload.signature)")
    try:
        header = json.loads(unb64(parts[0]))
        claims = json.loads(unb64(parts[1]))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidJwt(f"not JSON ({exc})") from exc
    if not isinstance(header, dict) or header.get("alg") != HEADER["alg"]:
        raise InvalidJwt(f"not a NATS JWT (alg {header.get('alg')!r})")
    if not isinstance(claims, dict):
        raise InvalidJwt("claims are not an object")
    issuer = claims.get("iss")
    if not isinstance(issuer, str) or not issuer.startswith(issuer_prefix):
        raise InvalidJwt(f"issuer {issuer!r} is not a {issuer_prefix or 'public'} key")
    if not verify(issuer, f"{parts[0]}.{parts[1]}".encode(), unb64(parts[2])):
        raise InvalidJwt(f"bad signature by {issuer}")
    nats = claims.get("nats")
    if not isinstance(nats, dict) or nats.get("type") != kind:
        found = nats.get("type") if isinstance(nats, dict) else None
        raise InvalidJwt(f"a {found!r} JWT, not {kind!r}")
    return claims
