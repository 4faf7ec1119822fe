"""The composition root: a configured gateway, from configuration to a serving process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from gateway.amqp.connection import ConnectionSettings
from gateway.backend.pulsar.backend import PulsarBackend
from gateway.backend.pulsar.resources import PulsarResources
from gateway.config import GatewayConfig
from gateway.metadata.store import MetadataStore, MetadataUnavailable
from gateway.metadata.zookeeper import ZooKeeperMetadataStore
from gateway.model.vhost import VhostMapper
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.client import ClientOptions, PulsarClient
from gateway.pulsar.errors import AdminError
from gateway.pulsar.producer import ProducerOptions
from gateway.pulsar.producer_cache import ProducerCache
from gateway.server.server import StartupError
from gateway.server.settings import ListenAddress, ServerSettings


def server_settings(config: GatewayConfig) -> ServerSettings:
    """Translate configuration keys into what the protocol core and the shell need."""
    return ServerSettings(
        listeners=tuple(
            ListenAddress(listener.scheme, listener.host, listener.port)
            for listener in config.amqpListeners
        ),
        connection=ConnectionSettings(
            channel_max=config.amqpSessionCountLimit,
            frame_max=config.amqpNetworkBufferSize,
            heartbeat=config.amqpHeartbeatDelay,
            heartbeat_timeout_factor=config.amqpHeartbeatTimeoutFactor,
            max_message_size=config.amqpMaxMessageSize,
            mechanisms=tuple(config.amqpAuthenticationMechanisms),
        ),
        close_timeout=config.amqpConnectionCloseTimeout / 1000,
        handshake_timeout=config.amqpHandshakeTimeoutMs / 1000,
        debug_binary_length=config.amqpDebugBinaryDataLength,
    )


def _broker_token(config: GatewayConfig) -> str | None:
    """The JWT for a token-authenticated Pulsar (``token:xxx`` or ``file:///...`` forms)."""
    if config.broker_client_auth_kind != "token":
        return None
    params = config.effective_broker_client_authentication_parameters
    if params.startswith("token:"):
        return params[len("token:") :]
    if params.startswith("file://"):
        with open(params[len("file://") :], encoding="utf-8") as token_file:
            return token_file.read().strip()
    return params


async def _check_reachable(admin: PulsarAdmin, store: MetadataStore, config: GatewayConfig) -> None:
    """Fail start-up with one clear line when Pulsar or ZooKeeper cannot be reached."""
    try:
        await admin.request("GET", "/admin/v2/clusters")
    except AdminError as error:
        raise StartupError(
            f"cannot reach the Pulsar admin API at {config.brokerWebServiceURL}: {error}"
        ) from None
    if isinstance(store, ZooKeeperMetadataStore):
        try:
            await store.connect()
        except MetadataUnavailable as error:
            raise StartupError(str(error)) from None


@asynccontextmanager
async def pulsar_backend(
    config: GatewayConfig, store: MetadataStore | None = None
) -> AsyncIterator[PulsarBackend]:
    """The backend on the configured Pulsar and ZooKeeper, closed on exit.

    ``store`` replaces the ZooKeeper metadata store (tests use the in-memory one).
    """
    token = _broker_token(config)
    tls_trust = config.brokerClientTrustCertsFilePath or None
    client = await PulsarClient.create(
        ClientOptions(
            service_url=config.brokerServiceURL,
            auth_token=token,
            tls_trust_certs_file_path=tls_trust,
            tls_validate_hostname=config.tlsHostnameVerificationEnabled,
        )
    )
    admin = PulsarAdmin(config.brokerWebServiceURL, auth_token=token, tls=tls_trust)
    if store is None:
        store = ZooKeeperMetadataStore(
            config.configurationStoreServers, session_timeout=config.zookeeper_session_timeout
        )
    try:
        await _check_reachable(admin, store, config)
        async with trio.open_nursery() as nursery:
            producers = ProducerCache(
                client, ProducerOptions(batching_enabled=config.amqpBatchingEnabled)
            )
            await nursery.start(producers.run_sweeper)
            resources = PulsarResources(client, admin, producers, store, nursery)
            mapper = VhostMapper(
                config.amqpDefaultTenant,
                config.amqpDefaultNamespace,
                config.amqpMapShortVhostToTenant,
            )
            backend = PulsarBackend(resources, mapper)
            try:
                yield backend
            finally:
                with trio.CancelScope(shield=True):
                    await backend.aclose()
                    await producers.aclose()
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
            await admin.aclose()
            await client.aclose()
