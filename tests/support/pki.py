"""Certificates and keys made at test time with ``cryptography``: nothing secret is checked in.

A ``Pki`` has a CA, a server certificate for 127.0.0.1/localhost, a client certificate with
CN=alice, and a client certificate from another CA (untrusted). EC P-256 keys keep generation
fast; ``rsa=True`` issues an RSA one where a test needs it.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def new_key(*, use_rsa: bool = False) -> PrivateKey:
    if use_rsa:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


@dataclass(frozen=True)
class Issued:
    certificate: x509.Certificate
    key: PrivateKey
    cert_path: Path
    key_path: Path

    @property
    def serial(self) -> int:
        return self.certificate.serial_number


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Starlight tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write(issued_cert: x509.Certificate, key: PrivateKey, directory: Path, stem: str) -> Issued:
    cert_path = directory / f"{stem}.crt"
    key_path = directory / f"{stem}.key"
    cert_path.write_bytes(issued_cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Issued(issued_cert, key, cert_path, key_path)


class Authority:
    """A self-signed CA that issues server and client certificates into ``directory``."""

    def __init__(self, directory: Path, name: str = "Starlight test CA") -> None:
        self.directory = directory
        self.key = new_key()
        subject = _name(name)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(days=1))
            .not_valid_after(_now() + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        stem = name.lower().replace(" ", "-")
        self.issued = _write(certificate, self.key, directory, stem)
        self.certificate = certificate
        self.cert_path = self.issued.cert_path

    def issue(
        self,
        common_name: str,
        stem: str,
        *,
        server: bool = False,
        use_rsa: bool = False,
        key: PrivateKey | None = None,
    ) -> Issued:
        key = key or new_key(use_rsa=use_rsa)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(days=1))
            .not_valid_after(_now() + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
        return _write(builder.sign(self.key, hashes.SHA256()), key, self.directory, stem)


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: Authority
    server: Issued
    alice: Issued
    #: CN=mallory, signed by a CA the gateway does not trust.
    untrusted: Issued

    def client_context(self, client: Issued | None = None) -> ssl.SSLContext:
        """A client context trusting our CA, presenting ``client``'s certificate if given."""
        context = ssl.create_default_context(cafile=str(self.ca.cert_path))
        if client is not None:
            context.load_cert_chain(str(client.cert_path), str(client.key_path))
        return context

    def key_store(self, password: str = "changeit") -> Path:
        """The server's key and certificate chain as a PKCS#12 key store."""
        path = self.directory / "server.p12"
        path.write_bytes(
            pkcs12.serialize_key_and_certificates(
                b"server",
                self.server.key,
                self.server.certificate,
                [self.ca.certificate],
                serialization.BestAvailableEncryption(password.encode())
                if password
                else serialization.NoEncryption(),
            )
        )
        return path

    def trust_store(self, password: str = "changeit") -> Path:
        """The CA as a Java-style PKCS#12 trust store (certificate entries only)."""
        path = self.directory / "truststore.p12"
        path.write_bytes(
            pkcs12.serialize_java_truststore(
                [pkcs12.PKCS12Certificate(self.ca.certificate, b"ca")],
                serialization.BestAvailableEncryption(password.encode())
                if password
                else serialization.NoEncryption(),
            )
        )
        return path


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = Authority(directory)
    other = Authority(directory, "Other CA")
    return Pki(
        directory=directory,
        ca=ca,
        server=ca.issue("localhost", "server", server=True),
        alice=ca.issue("alice", "alice"),
        untrusted=other.issue("mallory", "mallory"),
    )


# --------------------------------------------------------------------------- token keys


@dataclass(frozen=True)
class TokenKeys:
    """Keys for signing test tokens, and the forms the gateway's keys are given in."""

    secret: bytes
    rsa: rsa.RSAPrivateKey
    ec: ec.EllipticCurvePrivateKey

    def public_pem(self, key: PrivateKey) -> bytes:
        return key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def public_der(self, key: PrivateKey) -> bytes:
        return key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )


@functools.cache
def token_keys() -> TokenKeys:
    """One set per test session: RSA generation is the slow part."""
    return TokenKeys(
        secret=bytes(range(64)),
        rsa=rsa.generate_private_key(public_exponent=65537, key_size=2048),
        ec=ec.generate_private_key(ec.SECP256R1()),
    )
