"""The embedded broker's TLS listeners and certificates."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from adapter.embedded.config import TlsListeners, server_properties, tls_properties
from adapter.embedded.tls import TlsFiles, make_certificates

pytestmark = pytest.mark.unit


# --- the embedded broker's TLS ------------------------------------------------------------
def test_tls_listeners_are_added_beside_the_nodes_own(tmp_path: Path) -> None:
    props = server_properties(
        1, {1: (9092, 9093)}, brokers=1, log_dir=tmp_path, scram_users={},
        authorizer=False, extra={},
    )  # fmt: skip
    files = TlsFiles(tmp_path / "tls")
    out = tls_properties(props, TlsListeners(9094, 9095, files, mutual=True))
    assert out["listeners"] == (
        "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,"
        "SSL://127.0.0.1:9094,SASL_SSL://127.0.0.1:9095"
    )
    assert out["advertised.listeners"].endswith(",SASL_SSL://127.0.0.1:9095")
    assert out["inter.broker.listener.name"] == "PLAINTEXT"
    assert out["ssl.keystore.type"] == out["ssl.truststore.type"] == "PEM"
    assert out["ssl.truststore.location"] == str(files.ca)
    assert out["listener.name.ssl.ssl.client.auth"] == "required"
    assert out["listener.name.sasl_ssl.ssl.client.auth"] == "none"


def test_the_certificates_chain_to_the_ca_and_name_the_host(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.x509.oid import ExtensionOID

    files = make_certificates(tmp_path)
    assert files.complete()
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    chain = x509.load_pem_x509_certificates(files.broker_keystore.read_bytes())
    broker = chain[0]
    broker.verify_directly_issued_by(ca)
    sans = broker.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert b"PRIVATE KEY" in files.broker_keystore.read_bytes()
    assert files.client_key.stat().st_mode & 0o777 == 0o600
    client = x509.load_pem_x509_certificate(files.client_certificate.read_bytes())
    client.verify_directly_issued_by(ca)


def test_expired_certificates_on_request(tmp_path: Path) -> None:
    from cryptography import x509

    files = make_certificates(tmp_path, valid_days=-2)
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    assert ca.not_valid_after_utc < dt.datetime.now(dt.UTC)
