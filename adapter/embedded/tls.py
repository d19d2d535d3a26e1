"""Certificates of the embedded broker's TLS listeners: a throw-away CA made when an instance
starts with ``tls=True``, the broker's certificate (for ``127.0.0.1`` and ``localhost``) and a
client certificate for mutual TLS, all PEM files under the instance's ``tls/`` folder::

    ca.pem          the CA certificate: what clients trust (librdkafka ``ssl.ca.location``,
                    Spark ``kafka.ssl.truststore.location`` with ``truststore.type=PEM``)
    broker.pem      the broker's private key (PKCS#8) and certificate chain (Kafka's PEM keystore)
    client.pem      a client certificate signed by the same CA (mutual TLS)
    client.key      its private key (librdkafka ``ssl.key.location``)

The CA's own key is never written: nothing can be signed with it after the start.  The files
are kept across restarts (clients keep trusting the same CA) and made again on a fresh start.
Needs the ``cryptography`` package (``pip install 'rmq-kafka-adapter[tls]'``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapter.embedded.jars import EmbeddedKafkaError

__all__ = ["TlsFiles", "make_certificates"]

#: how long the generated certificates are valid (a throw-away CA: short is fine)
VALID_DAYS = 30


@dataclass(frozen=True)
class TlsFiles:
    """Where an instance's PEM files are."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def broker_keystore(self) -> Path:
        return self.directory / "broker.pem"

    @property
    def client_certificate(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"

    def complete(self) -> bool:
        return all(
            p.is_file()
            for p in (self.ca, self.broker_keystore, self.client_certificate, self.client_key)
        )


def _crypto() -> Any:
    try:
        from cryptography import x509
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise EmbeddedKafkaError(
            "the embedded broker's TLS listeners need the 'cryptography' package: "
            "pip install 'rmq-kafka-adapter[tls]'"
        ) from exc
    return x509


def make_certificates(
    directory: Path,
    *,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    valid_days: int = VALID_DAYS,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
) -> TlsFiles:
    """Make a new CA, the broker's and a client's certificate under ``directory`` (replacing
    what was there); ``now``/``valid_days`` set their validity (a negative ``valid_days``
    makes certificates that have already expired)."""
    x509 = _crypto()
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    start = now() - dt.timedelta(days=1)
    end = now() + dt.timedelta(days=valid_days)
    if end <= start:
        start = end - dt.timedelta(days=1)

    def name(cn: str) -> Any:
        return x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "rmq-kafka embedded"),
                x509.NameAttribute(NameOID.COMMON_NAME, cn),
            ]
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("rmq-kafka embedded CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, usage: Any, sans: list[Any]) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    sans: list[Any] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    broker_key, broker_cert = leaf("localhost", ExtendedKeyUsageOID.SERVER_AUTH, sans)
    client_key, client_cert = leaf("client", ExtendedKeyUsageOID.CLIENT_AUTH, [])

    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    clear = serialization.NoEncryption()
    files = TlsFiles(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files.ca.write_bytes(ca_cert.public_bytes(pem))
    _write_private(
        files.broker_keystore,
        broker_key.private_bytes(pem, pkcs8, clear)
        + broker_cert.public_bytes(pem)
        + ca_cert.public_bytes(pem),
    )
    files.client_certificate.write_bytes(client_cert.public_bytes(pem))
    _write_private(files.client_key, client_key.private_bytes(pem, pkcs8, clear))
    return files


def _write_private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)
