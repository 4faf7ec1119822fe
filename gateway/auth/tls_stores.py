"""PKCS#12 key and trust stores (``tlsEnabledWithKeyStore``) loaded into an ``ssl.SSLContext``.

Python's ssl reads certificates and keys from PEM files only, and trusted CAs also from PEM
text. ``cryptography`` (already a dependency through pyjwt[crypto]) opens the stores:

* the trust store's certificates go in as ``cadata``, in memory;
* the key store's certificate chain and key must go through a file, because
  ``load_cert_chain`` takes nothing else. The key is written encrypted with a one-time random
  password, to a private (0600) temporary file that is removed at once, so the plain key never
  touches the disk.
"""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.hazmat.primitives.serialization.pkcs12 import PKCS12KeyAndCertificates

from gateway.auth.key_files import read_file
from gateway.config import ConfigError

__all__ = ["load_key_store", "load_trust_store"]


def _open_store(path: str, password: str, key: str, what: str) -> PKCS12KeyAndCertificates:
    """The PKCS#12 store at ``path`` that the key ``key`` names (its password: ``key`` +
    ``Password``); a ConfigError naming ``key`` if it cannot be read or opened."""
    data = read_file(path, key, what)
    # An empty password means "none": keytool stores made without -storepass, and ours.
    try:
        return pkcs12.load_pkcs12(data, password.encode("utf-8") if password else None)
    except ValueError:
        raise ConfigError(
            f"{key}: cannot open {path}: not a PKCS#12 store, or {key}Password is wrong", key=key
        ) from None


def load_key_store(context: ssl.SSLContext, path: str, password: str) -> None:
    """The certificate chain and private key of the PKCS#12 store at ``path``."""
    store = _open_store(path, password, "tlsKeyStore", "the key store")
    if store.key is None or store.cert is None:
        raise ConfigError(
            f"tlsKeyStore: {path} holds no private key with its certificate", key="tlsKeyStore"
        )
    once = secrets.token_urlsafe(32).encode()
    pem = store.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(once),
    )
    pem += store.cert.certificate.public_bytes(serialization.Encoding.PEM)
    for extra in store.additional_certs:  # intermediates, sent along with our certificate
        pem += extra.certificate.public_bytes(serialization.Encoding.PEM)
    descriptor, temporary = tempfile.mkstemp(prefix="starlight-tls-", suffix=".pem")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(pem)
        context.load_cert_chain(temporary, password=once)
    except ssl.SSLError as error:
        raise ConfigError(
            f"tlsKeyStore: cannot use the key and certificate of {path}: {error.reason or error}",
            key="tlsKeyStore",
        ) from None
    finally:
        os.unlink(temporary)


def load_trust_store(context: ssl.SSLContext, path: str, password: str) -> None:
    """Trust the CA certificates of the PKCS#12 store at ``path`` for client certificates."""
    store = _open_store(path, password, "tlsTrustStore", "the trust store")
    certificates: list[x509.Certificate] = [entry.certificate for entry in store.additional_certs]
    if store.cert is not None:
        certificates.append(store.cert.certificate)
    if not certificates:
        raise ConfigError(f"tlsTrustStore: {path} holds no certificate", key="tlsTrustStore")
    cadata = "".join(
        certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")
        for certificate in certificates
    )
    try:
        context.load_verify_locations(cadata=cadata)
    except ssl.SSLError as error:
        raise ConfigError(
            f"tlsTrustStore: cannot use the certificates of {path}: {error.reason or error}",
            key="tlsTrustStore",
        ) from None
