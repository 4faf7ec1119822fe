"""The identity in a verified TLS client certificate: its subject's common name.

``ssl.SSLObject.getpeercert()`` returns an empty dict (or None) when the peer's certificate was
not verified, so only a certificate signed by a trusted CA ever yields a name here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["common_name"]


def common_name(peer_certificate: dict[str, Any] | None) -> str | None:
    """The subject CN of a verified certificate, None when there is none or it is ambiguous.

    A subject with several CNs is refused rather than guessed at: which one RabbitMQ or another
    gateway would pick is not something a security decision should depend on.
    """
    if not peer_certificate:
        return None
    names = [
        value
        for rdn in peer_certificate.get("subject", ())
        for attribute, value in rdn
        if attribute == "commonName"
    ]
    if len(names) != 1 or not isinstance(names[0], str) or not names[0]:
        return None
    return names[0]
