"""Vhost mapping keys (reference/001): the Pulsar tenant and namespace of a vhost."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.keys import _VH, Kind, _key
from gateway.config.schema.tls import TlsKeys


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class VhostMappingKeys(TlsKeys):
    """One section of :class:`~gateway.config.schema.GatewayConfig`, in documentation order."""

    # ---- Vhost mapping (reference/001) --------------------------------------------------
    amqpDefaultTenant: str = field(
        metadata=_key(
            Kind.PULSAR_NAME,
            "public",
            "Pulsar tenant used to map the vhost `/` and short vhosts.",
            _VH,
        )
    )
    amqpDefaultNamespace: str = field(
        metadata=_key(
            Kind.PULSAR_NAME,
            "default",
            """Pulsar namespace used to map the vhost `/` (and short vhosts when
            amqpMapShortVhostToTenant is true).""",
            _VH,
        )
    )
    amqpMapShortVhostToTenant: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Map a short vhost `x` (no slash inside) to the namespace
            `x/<amqpDefaultNamespace>` instead of `<amqpDefaultTenant>/x`.""",
            _VH,
        )
    )
