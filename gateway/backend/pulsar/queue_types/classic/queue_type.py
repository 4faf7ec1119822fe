"""The classic queue type: every operation is the vhost's Shared-subscription machinery
(queue_subscriptions.py, delivery.py, basic_get.py); consumers follow a strategy of
consumers/ (single active, priority-ordered reads, or competing)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gateway.amqp import commands as cmd
from gateway.amqp.fieldtable import Field
from gateway.backend.interface import Delivery, Owner, QueueStatus, QueueSubscription
from gateway.backend.pulsar.queue_types.interface import ConsumeRequest, QueueHost
from gateway.metadata.store import VhostView
from gateway.model.entities import Queue

__all__ = ["CLASSIC", "ClassicQueueType"]


class ClassicQueueType:
    name: Final = "classic"
    keeps_log: Final = False

    async def create(self, host: QueueHost, name: str, arguments: Mapping[str, Field]) -> bool:
        # A publisher of this replica that knows the key and sees the queue writes at once:
        # its subscription exists before anyone can see the queue.
        return await host.subscribe_own_topic(name)

    async def status(self, host: QueueHost, view: VhostView, queue: str) -> QueueStatus:
        return await host.subscribed_status(view, queue)

    async def delete(self, host: QueueHost, command: cmd.QueueDelete) -> int:
        return await host.delete_subscribed(command)

    async def dropped(self, host: QueueHost, name: str) -> None:
        """Its subscriptions went with the vhost's records of them."""

    async def purge(self, host: QueueHost, entity: Queue) -> int:
        return await host.purge_subscribed(entity.name)

    async def consume(
        self, host: QueueHost, entity: Queue, request: ConsumeRequest
    ) -> QueueSubscription:
        return await host.consume_subscribed(entity, request)

    async def get(
        self, host: QueueHost, entity: Queue, owner: Owner
    ) -> tuple[Delivery, int] | None:
        return await host.get_subscribed(entity, owner)


CLASSIC: Final = ClassicQueueType()
