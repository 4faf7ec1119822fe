"""Vhost mapping keys (reference/001): the Pulsar tenant and namespace of a vhost."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.keys import Kind, Section, key_metadata
from gateway.config.schema.tls import TlsKeys

# Every key of this module is in one section of the documentation.
_VH = Section.VHOST_MAPPING


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class VhostMappingKeys(TlsKeys):
    """One section of :class:`~gateway.config.schema.GatewayConfig`, in documentation order."""

    # ---- Vhost mapping (reference/001) --------------------------------------------------
    amqpDefaultTenant: str = field(
        metadata=key_metadata(
            Kind.PULSAR_NAME,
            "public",
            "Pulsar tenant used to map the vhost `/` and short vhosts.",
            _VH,
        )
    )
    amqpDefaultNamespace: str = field(
        metadata=key_metadata(
            Kind.PULSAR_NAME,
            "default",
            """Pulsar namespace used to map the vhost `/` (and short vhosts when
            amqpMapShortVhostToTenant is true).""",
            _VH,
        )
    )
    amqpMapShortVhostToTenant: bool = field(
        metadata=key_metadata(
            Kind.BOOL,
            "false",
            """Map a short vhost `x` (no slash inside) to the namespace
            `x/<amqpDefaultNamespace>` instead of `<amqpDefaultTenant>/x`.""",
            _VH,
        )
    )
