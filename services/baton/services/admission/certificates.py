"""A self-signed certificate for the webhook when none is given (``baton up``, demos,
clusters without cert-manager).

Made in Python (``cryptography``: an ECDSA P-256 key, SHA-256), kept in a directory
and reused while it exists, so a restart serves the same certificate (the one a
WebhookConfiguration's ``caBundle`` names). A self-signed certificate is its own CA:
``caBundle`` is base64 of ``tls.crt``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CERT, KEY = "tls.crt", "tls.key"
_KEY_USAGE = x509.KeyUsage(
    digital_signature=True, key_cert_sign=True, crl_sign=False, content_commitment=False,
    key_encipherment=False, data_encipherment=False, key_agreement=False,
    encipher_only=False, decipher_only=False,
)  # fmt: skip


class CertificateError(RuntimeError):
    """No certificate could be made (a directory we cannot write, no hosts)."""


def self_signed(
    directory: str,
    *,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    days: int = 365,
    routes: bool = False,
) -> tuple[str, str]:
    """``(cert, key)`` paths in ``directory``, made there first if missing. ``routes``:
    usable as a client too (NATS servers of one cluster dial each other with it)."""
    folder = Path(directory)
    cert, key = folder / CERT, folder / KEY
    if cert.is_file() and key.is_file():
        return str(cert), str(key)
    if not hosts or not all(hosts):
        raise CertificateError(f"no host names for the certificate: {hosts!r}")
    cert_pem, key_pem = make(hosts, days=days, now=dt.datetime.now(dt.UTC), routes=routes)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _write(key, key_pem, mode=0o600)
        _write(cert, cert_pem, mode=0o644)
    except OSError as exc:
        raise CertificateError(f"{folder}: cannot write the certificate ({exc.strerror})") from exc
    return str(cert), str(key)


def make(
    hosts: tuple[str, ...], *, days: int, now: dt.datetime, routes: bool = False
) -> tuple[bytes, bytes]:
    """PEM ``(certificate, private key)`` valid for ``hosts`` (DNS names or IPs), from
    a minute before ``now`` for ``days`` days; its own CA. ``routes``: for client
    authentication as well as server."""
    usages = [ExtendedKeyUsageOID.SERVER_AUTH]
    if routes:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    public = private.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_KEY_USAGE, critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(private, hashes.SHA256())
    )
    key_pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write(path: Path, data: bytes, *, mode: int) -> None:
    """Atomically, so a reader never sees half a key."""
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(partial, path)
