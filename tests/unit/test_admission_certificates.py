"""The webhook's self-signed certificate, made in Python: its names, its CA bit, its key."""

import datetime as dt
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509

from baton.services.admission.certificates import CertificateError, make, self_signed

pytestmark = pytest.mark.unit


def test_the_certificate_names_every_host_and_is_its_own_ca(tmp_path: Path) -> None:
    hosts = ("baton-admission.baton-system.svc", "127.0.0.1", "localhost")
    cert_path, key_path = self_signed(str(tmp_path / "tls"), hosts=hosts, days=2)
    cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [hosts[0], "localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.issuer == cert.subject
    assert cert.not_valid_after_utc - cert.not_valid_before_utc < dt.timedelta(days=2, hours=1)
    assert stat.S_IMODE(Path(key_path).stat().st_mode) == 0o600
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)  # the key matches the certificate
    client = ssl.create_default_context(cadata=Path(cert_path).read_text())
    assert client.cert_store_stats()["x509_ca"] == 1  # usable as caBundle


def test_an_existing_certificate_is_kept(tmp_path: Path) -> None:
    first = self_signed(str(tmp_path), hosts=("localhost",))
    before = Path(first[0]).read_bytes()
    assert self_signed(str(tmp_path), hosts=("other",)) == first
    assert Path(first[0]).read_bytes() == before


def test_no_certificate_without_a_writable_directory_or_hosts(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(CertificateError, match="cannot write the certificate"):
        self_signed(str(blocked / "tls"), hosts=("localhost",))
    with pytest.raises(CertificateError, match="no host names"):
        self_signed(str(tmp_path / "tls"), hosts=())


def test_validity_starts_a_minute_early_for_clock_skew() -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    cert = x509.load_pem_x509_certificate(make(("a",), days=1, now=now)[0])
    assert cert.not_valid_before_utc == now - dt.timedelta(minutes=1)
