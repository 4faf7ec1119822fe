"""What one gateway process holds once started (``app.open_gateway`` builds it): the shell's
monitoring and the management API read it without importing the composition root."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.backend.pulsar.backend import PulsarBackend
from gateway.config import GatewayConfig
from gateway.metadata.store import MetadataStore
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.client import PulsarClient

__all__ = ["GatewayRuntime"]


@dataclass(frozen=True)
class GatewayRuntime:
    """What one gateway process holds: the backend, and the clients under it that start-up
    needs directly (loading every vhost before accepting connections)."""

    config: GatewayConfig
    backend: PulsarBackend
    store: MetadataStore
    admin: PulsarAdmin
    client: PulsarClient
