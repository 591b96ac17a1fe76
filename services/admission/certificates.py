"""A self-signed certificate for the webhook when none is given (``baton up``, demos).

Made with the ``openssl`` CLI if it is on PATH; kept in a directory and reused while
it exists, so a restart serves the same certificate (the one a WebhookConfiguration's
``caBundle`` names). A self-signed certificate is its own CA: ``caBundle`` is
base64 of ``tls.crt``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CERT, KEY = "tls.crt", "tls.key"


class CertificateError(RuntimeError):
    """No certificate could be made (no openssl, or it failed)."""


def self_signed(
    directory: str, *, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), days: int = 365
) -> tuple[str, str]:
    """``(cert, key)`` paths in ``directory``, made there first if missing."""
    folder = Path(directory)
    cert, key = folder / CERT, folder / KEY
    if cert.is_file() and key.is_file():
        return str(cert), str(key)
    openssl = shutil.which("openssl")
    if openssl is None:
        raise CertificateError("the openssl CLI is not on PATH")
    folder.mkdir(parents=True, exist_ok=True)
    names = ",".join(f"IP:{h}" if _is_ip(h) else f"DNS:{h}" for h in hosts)
    done = subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            str(days),
            "-subj",
            f"/CN={hosts[0]}",
            "-addext",
            f"subjectAltName={names}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if done.returncode != 0:
        raise CertificateError(f"openssl failed: {done.stderr.strip()[-300:]}")
    key.chmod(0o600)
    return str(cert), str(key)


def _is_ip(host: str) -> bool:
    parts = host.split(".")
    return ":" in host or (len(parts) == 4 and all(p.isdigit() for p in parts))
