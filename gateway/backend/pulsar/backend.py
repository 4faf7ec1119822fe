"""The Pulsar backend: opens vhosts onto existing Pulsar namespaces (or, with
``amqpAutoCreateVhosts``, onto namespaces it creates on first use)."""

from __future__ import annotations

import logging

from gateway.amqp.errors import ReplyCode, amqp_error
from gateway.backend.pulsar.resources import PulsarResources
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.backend.vhost_admin import VhostAdmin, VhostError
from gateway.model.vhost import VhostMapper
from gateway.pulsar.errors import AdminError

log = logging.getLogger("gateway.pulsar.backend")


class PulsarBackend:
    def __init__(
        self, resources: PulsarResources, mapper: VhostMapper, *, auto_create: bool = False
    ) -> None:
        self._resources = resources
        self._mapper = mapper
        # amqpAutoCreateVhosts: an unknown vhost is created as `vhosts add` creates it.
        self._auto_create = auto_create
        self._vhosts: dict[str, PulsarVirtualHost] = {}

    async def open_vhost(self, vhost: str, user: str) -> PulsarVirtualHost:
        namespace = self._mapper.namespace_for(vhost)  # 530 for a name Pulsar cannot have
        key = str(namespace)
        opened = self._vhosts.get(key)
        if opened is not None and not opened.deleted:
            return opened
        try:
            exists = await self._resources.admin.namespace_exists(
                namespace.tenant, namespace.namespace
            )
        except AdminError as error:
            raise amqp_error(
                ReplyCode.NOT_ALLOWED, f"vhost {vhost} cannot be checked: {error}", 10, 40
            ) from None
        if not exists and self._auto_create:
            await self._create(vhost)
        elif not exists:
            # RabbitMQ refuses an unknown vhost the same way (rabbit_reader: "vhost x not
            # found"), with the reason here: the namespace an operator would have to create.
            raise amqp_error(
                ReplyCode.NOT_ALLOWED,
                f"vhost {vhost} not found: Pulsar namespace {key} does not exist",
                10,
                40,
            )
        await self._resources.store.open(key)
        # Another connection may have opened it while we waited.
        opened = self._vhosts.get(key)
        if opened is None or opened.deleted:
            opened = self._vhosts[key] = PulsarVirtualHost(vhost, namespace, self._resources)
            opened.records.start(self._resources.nursery)
            self._resources.nursery.start_soon(opened.follow)
            log.info("vhost %s opened on namespace %s", vhost, key)
        return opened

    async def _create(self, vhost: str) -> None:
        """What `starlight-rabbitmq vhosts add` does (vhost_admin.py): the tenant when
        missing, the namespace, its metadata. Two connections (or replicas) racing both
        succeed: Pulsar's 409 for the second is "exists", which is all either wanted."""
        admin = VhostAdmin(self._resources.admin, self._resources.store, self._mapper)
        try:
            if await admin.add(vhost):
                log.info("vhost %s created on its first connection (amqpAutoCreateVhosts)", vhost)
        except VhostError as error:
            raise amqp_error(
                ReplyCode.NOT_ALLOWED, f"vhost {vhost} not found: {error}", 10, 40
            ) from None

    def held_by_queue(self) -> dict[tuple[str, str], int]:
        """(namespace, queue) -> messages this replica's clients hold unacknowledged (the
        rabbitmq_queue_messages_unacked of this replica; read at scrape time)."""
        held: dict[tuple[str, str], int] = {}
        for key, vhost in self._vhosts.items():
            for queue, count in vhost.held().items():
                if count:
                    held[(key, queue)] = count
        return held

    async def aclose(self) -> None:
        for vhost in self._vhosts.values():
            await vhost.aclose()
