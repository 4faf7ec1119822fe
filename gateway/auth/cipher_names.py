"""``tlsCiphers`` names, as Java (IANA) spells them, turned into what OpenSSL accepts.

Pulsar's configuration uses the IANA names (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``); OpenSSL,
and so Python's ``ssl``, uses its own (``ECDHE-RSA-AES128-GCM-SHA256``). The translation is
mechanical for the AEAD and CBC suites anyone still configures; an OpenSSL name is taken as it
is. Whether OpenSSL knows the result is checked by the caller, one name at a time.

TLS 1.3 suites (``TLS_AES_128_GCM_SHA256``) have the same name in both worlds, but Python's ssl
cannot restrict them individually (there is no ``set_ciphersuites``): the caller can only allow
TLS 1.3 as a whole or not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["CipherPlan", "is_tls13_suite", "openssl_name", "plan_ciphers"]

_IANA_RE: Final = re.compile(r"TLS_(?P<kx>[A-Z0-9_]+?)_WITH_(?P<cipher>[A-Z0-9_]+)_(?P<mac>SHA\d*)")
_BLOCK_RE: Final = re.compile(r"(?P<algo>AES|ARIA|CAMELLIA)_(?P<bits>\d+)_(?P<mode>GCM|CBC|CCM)")
_TLS13_RE: Final = re.compile(r"TLS_(AES|CHACHA20|SM4)_[A-Z0-9_]+")


def is_tls13_suite(name: str) -> bool:
    """``TLS_AES_128_GCM_SHA256`` and friends: TLS 1.3 suites have no key exchange part."""
    return "_WITH_" not in name and _TLS13_RE.fullmatch(name) is not None


def openssl_name(name: str) -> str:
    """The OpenSSL spelling of a TLS 1.2-or-older suite; other names are returned unchanged."""
    match = _IANA_RE.fullmatch(name)
    if match is None:
        return name
    kx, cipher, mac = match["kx"], match["cipher"], match["mac"]
    # RSA key exchange has no prefix in OpenSSL's names (AES128-GCM-SHA256).
    prefix = "" if kx == "RSA" else kx.replace("_", "-") + "-"
    if cipher == "CHACHA20_POLY1305":
        return f"{prefix}CHACHA20-POLY1305"  # the PRF hash is not part of OpenSSL's name
    block = _BLOCK_RE.fullmatch(cipher)
    if block is None:
        return name
    algo = f"{block['algo']}{block['bits']}"
    if block["mode"] == "CBC":
        return f"{prefix}{algo}-{mac}"  # CBC is implied: ECDHE-RSA-AES128-SHA
    if block["mode"] == "CCM":
        return f"{prefix}{algo}-CCM"
    return f"{prefix}{algo}-GCM-{mac}"


@dataclass(frozen=True)
class CipherPlan:
    #: OpenSSL names for ``SSLContext.set_ciphers`` (TLS 1.2 and older); empty: none listed.
    tls12: tuple[str, ...]
    #: TLS 1.3 suites listed (empty: none; TLS 1.3 then cannot be negotiated, as in Java).
    tls13: tuple[str, ...]


def plan_ciphers(names: tuple[str, ...]) -> CipherPlan:
    tls13 = tuple(name for name in names if is_tls13_suite(name))
    tls12 = tuple(openssl_name(name) for name in names if not is_tls13_suite(name))
    return CipherPlan(tls12=tls12, tls13=tls13)
