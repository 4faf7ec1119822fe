"""The composition root: a configured gateway, from configuration to a serving process."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, replace

import trio

from gateway import allocator
from gateway.amqp.connection import ConnectionSettings
from gateway.auth.tls_config import tls_settings_for
from gateway.backend.pulsar.backend import PulsarBackend
from gateway.backend.pulsar.batching import batch_settlement
from gateway.backend.pulsar.leader.namespace_leader import FleetDuties
from gateway.backend.pulsar.resources import PulsarResources
from gateway.broker_access import broker_access_with_trust_file
from gateway.config import GatewayConfig
from gateway.metadata.store import MetadataStore, MetadataUnavailable, VhostView
from gateway.metadata.zookeeper import ZooKeeperMetadataStore
from gateway.model.vhost import VhostMapper
from gateway.observability.counters import COUNTERS
from gateway.pulsar.access_check import BrokerAccessError, check_admin, check_binary
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.client import ClientOptions, PulsarClient
from gateway.pulsar.compiled import load as load_compiled
from gateway.pulsar.credentials import (
    BrokerAccess,
    Credentials,
    CredentialsError,
    admin_client,
    client_options,
    load_credentials,
)
from gateway.pulsar.errors import AdminError, NotFound
from gateway.pulsar.producer import ProducerOptions
from gateway.pulsar.producer_cache import ProducerCache, broker_max_message_size
from gateway.server.runtime import GatewayRuntime
from gateway.server.server import StartupError
from gateway.server.settings import ProxyTrust, ServerSettings

log = logging.getLogger("gateway")


def server_settings(config: GatewayConfig) -> ServerSettings:
    """What the protocol core and the shell need, from the values the configuration derives."""
    return ServerSettings(
        listeners=config.amqpListeners,
        proxy_trust=ProxyTrust.parse(config.amqpProxyProtocolTrustedNetworks),
        connection=ConnectionSettings(
            channel_max=config.channel_max,
            frame_max=config.frame_max,
            heartbeat=config.heartbeat,
            heartbeat_timeout_factor=config.amqpHeartbeatTimeoutFactor,
            max_message_size=config.amqpMaxMessageSize,
            mechanisms=config.offered_mechanisms,
            product=config.amqpServerProduct,
            version=config.amqpServerVersion,
            compiled=config.gatewayCompiledHotPath,
        ),
        close_timeout=config.connection_close_timeout,
        handshake_timeout=config.handshake_timeout,
        tls=tls_settings_for(config),
        debug_binary_length=config.amqpDebugBinaryDataLength,
    )


def _broker_clients_settings(
    config: GatewayConfig, files: ExitStack
) -> tuple[BrokerAccess, Credentials, ClientOptions]:
    """What open_gateway builds its Pulsar clients from; StartupError if it is unusable.

    A PKCS#12 trust store becomes a PEM file that ``files`` removes on exit.
    """
    try:
        access = broker_access_with_trust_file(config, files)
        credentials = load_credentials(access)
        options = replace(
            client_options(access, credentials), compiled=config.gatewayCompiledHotPath
        )
    except CredentialsError as error:
        raise StartupError(str(error)) from None
    if access.allow_insecure and (access.binary_tls or access.web_tls):
        log.warning(
            "tlsAllowInsecureConnection=true: the gateway does not verify Pulsar's TLS "
            "certificates (anyone between it and Pulsar can read and change its traffic)"
        )
    return access, credentials, options


async def _check_reachable(
    admin: PulsarAdmin, store: MetadataStore, access: BrokerAccess, credentials: Credentials
) -> None:
    """Fail start-up with one clear line when Pulsar or ZooKeeper cannot be used: unreachable,
    credentials refused, broker certificate not trusted."""
    try:
        await check_admin(admin, access, credentials)
    except BrokerAccessError as error:
        raise StartupError(str(error)) from None
    if isinstance(store, ZooKeeperMetadataStore):
        try:
            await store.connect()
        except MetadataUnavailable as error:
            raise StartupError(str(error)) from None
    try:
        await check_binary(access, credentials)
    except BrokerAccessError as error:
        raise StartupError(str(error)) from None


@asynccontextmanager
async def open_gateway(
    config: GatewayConfig, store: MetadataStore | None = None
) -> AsyncIterator[GatewayRuntime]:
    """The backend on the configured Pulsar and ZooKeeper with its clients, closed on exit.

    ``store`` replaces the ZooKeeper metadata store (tests use the in-memory one).
    """
    files = ExitStack()
    try:
        access, credentials, options = _broker_clients_settings(config, files)
        admin = admin_client(access, credentials)  # opens no connection: nothing to close if
        client = await PulsarClient.create(options)  # the client cannot be built
        log.info(
            "per-message calls into pulsar-client: %s",
            "through the compiled module"
            if options.compiled and load_compiled() is not None
            else "through its Python binding",
        )
        log.info("memory allocator: %s (gatewayMemoryAllocator)", allocator.in_use())
    except BaseException:
        files.close()
        raise
    if store is None:
        store = ZooKeeperMetadataStore(
            config.configurationStoreServers,
            session_timeout=config.zookeeper_session_timeout,
            watch_lag=COUNTERS.metadata_watch_lag.observe,
        )
    try:
        await _check_reachable(admin, store, access, credentials)
        async with trio.open_nursery() as nursery:
            batching = await batch_settlement(admin, config.amqpBatchingEnabled)
            producers = ProducerCache(
                client,
                ProducerOptions(batching_enabled=batching.producers_batch),
                # Larger messages go in chunks (producer_cache.py; docs/reliability.md).
                max_message_size=await broker_max_message_size(admin),
            )
            await nursery.start(producers.run_sweeper)
            resources = PulsarResources(
                client,
                admin,
                producers,
                store,
                nursery,
                batch_index_acks=batching.broker_tracks_indexes,
                lazy_subscriptions=config.amqpLazySubscriptions,
                priority_read_ahead=config.amqpPriorityQueueReadAhead,
            )
            mapper = VhostMapper.from_keys(config)
            backend = PulsarBackend(resources, mapper, auto_create=config.amqpAutoCreateVhosts)
            # Stands for leader of each vhost this replica opens (reaper, cleaner).
            # A candidate for the reaper is one for a session timeout before it goes: a
            # replica back from a partition claims its records again meanwhile
            # (backend/pulsar/leader/namespace_leader.py).
            duties = FleetDuties(resources, grace=config.zookeeper_session_timeout)
            nursery.start_soon(duties.run)
            try:
                yield GatewayRuntime(config, backend, store, admin, client)
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
        files.close()


@asynccontextmanager
async def pulsar_backend(
    config: GatewayConfig, store: MetadataStore | None = None
) -> AsyncIterator[PulsarBackend]:
    """Just the backend of ``open_gateway`` (what tests and tools need)."""
    async with open_gateway(config, store) as runtime:
        yield runtime.backend


# ====================================================================== the fleet

#: Where the metadata lives under the ZooKeeper root (or chroot): reference/002's prefix.
METADATA_PREFIX = "/starlight-rabbitmq"


def fleet_summary(config: GatewayConfig) -> str:
    """One line saying which fleet this replica is in (docs/fleet.md, "What makes a fleet"):
    the ZooKeeper path of its metadata (every replica with the same one shares exchanges,
    queues, bindings and leaders) and the Pulsar namespaces its vhosts are.
    ``amqpClusterName`` is only the label dashboards show; it joins or separates nothing."""
    hosts, slash, chroot = config.configurationStoreServers.partition("/")
    root = f"/{chroot}" if slash else ""
    tenant, namespace = config.amqpDefaultTenant, config.amqpDefaultNamespace
    short = (
        f"<name> = <name>/{namespace}"
        if config.amqpMapShortVhostToTenant
        else f"<name> = {tenant}/<name>"
    )
    return (
        f"fleet: metadata in ZooKeeper {hosts} at {root}{METADATA_PREFIX} "
        f"(chroot {root or 'none'}); vhosts are Pulsar namespaces of {config.brokerServiceURL}: "
        f"/ = {tenant}/{namespace}, {short}, <tenant>/<namespace> = itself; "
        f"replicas with this ZooKeeper path are one fleet "
        f"(amqpClusterName {config.amqpClusterName!r} is a label only)"
    )


# ====================================================================== readiness


@dataclass(frozen=True)
class Readiness:
    """What a replica loaded before accepting connections."""

    vhosts: int
    exchanges: int
    queues: int
    bindings: int
    seconds: float
    # Namespaces with metadata in ZooKeeper whose Pulsar namespace is gone (not loaded).
    skipped: tuple[str, ...] = ()

    def summary(self) -> str:
        return (
            f"ready: loaded {self.vhosts} vhosts ({self.exchanges} exchanges, "
            f"{self.queues} queues, {self.bindings} bindings) in {self.seconds:.3f} s"
        )


async def _live_in_pulsar(admin: PulsarAdmin, namespaces: list[str]) -> set[str]:
    """Those of ``namespaces`` that exist in Pulsar, one admin call per tenant.

    A vhost whose Pulsar namespace was deleted cannot be opened (``open_vhost`` answers 530),
    and its metadata is left behind in ZooKeeper (nothing deletes it yet): loading it would
    only cost start-up time. When Pulsar cannot say, the namespace is loaded anyway.
    """
    live: set[str] = set()
    by_tenant: dict[str, list[str]] = {}
    for namespace in namespaces:
        by_tenant.setdefault(namespace.partition("/")[0], []).append(namespace)
    for tenant, members in by_tenant.items():
        try:
            existing = set(await admin.list_namespaces(tenant))
        except NotFound:
            continue  # the whole tenant is gone
        except AdminError as error:
            log.warning("cannot list the namespaces of tenant %s: %s; loading them", tenant, error)
            existing = set(members)
        live.update(namespace for namespace in members if namespace in existing)
    return live


async def load_every_vhost(runtime: GatewayRuntime, *, concurrency: int = 8) -> Readiness:
    """Open every vhost the metadata store holds, so that the first client of any vhost is
    answered from a complete view (docs/metadata.md: "A replica opens its vhosts before it
    accepts connections"). Raises ``StartupError`` when one cannot be loaded."""
    started = time.perf_counter()
    store = runtime.store
    try:
        stored = await store.list_namespaces()
    except MetadataUnavailable as error:
        raise StartupError(f"cannot list the vhosts in the metadata store: {error}") from None
    live = await _live_in_pulsar(runtime.admin, stored)
    skipped = tuple(namespace for namespace in stored if namespace not in live)
    if skipped:
        log.info(
            "not loading %d vhost(s) whose Pulsar namespace no longer exists (%s%s)",
            len(skipped),
            ", ".join(skipped[:5]),
            ", ..." if len(skipped) > 5 else "",
        )
    views: list[VhostView] = []
    limiter = trio.CapacityLimiter(concurrency)

    async def load(namespace: str) -> None:
        async with limiter:
            try:
                views.append(await store.open(namespace))
            except MetadataUnavailable as error:
                raise StartupError(f"cannot load vhost namespace {namespace}: {error}") from None

    async with trio.open_nursery() as nursery:
        for namespace in sorted(live):
            nursery.start_soon(load, namespace)
    return Readiness(
        vhosts=len(views),
        exchanges=sum(len(view.exchanges) for view in views),
        queues=sum(len(view.queues) for view in views),
        bindings=sum(len(view.bindings) for view in views),
        seconds=time.perf_counter() - started,
        skipped=skipped,
    )
