"""The stream queue type, as RabbitMQ's ``rabbit_stream_queue`` behaves: the log is made with
the stream, Basic.Get and Queue.Purge are refused, Queue.Delete ignores if-unused and
if-empty, and Declare-Ok counts the log's messages and no consumers."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Final

from gateway.amqp import commands as cmd
from gateway.amqp.fieldtable import Field
from gateway.backend.interface import Delivery, Owner, QueueStatus, QueueSubscription
from gateway.backend.pulsar.queue_types.interface import ConsumeRequest, QueueHost
from gateway.metadata.store import VhostView
from gateway.model.entities import Queue, resource
from gateway.model.streams import refuse_get, refuse_purge

__all__ = ["STREAM", "StreamQueueType"]


class StreamQueueType:
    name: Final = "stream"
    keeps_log: Final = True

    async def create(self, host: QueueHost, name: str, arguments: Mapping[str, Field]) -> bool:
        # The stream's topic is its log (queues.py): made now, and nobody subscribes to it.
        await host.streams.create(name, arguments)
        return True

    async def status(self, host: QueueHost, view: VhostView, queue: str) -> QueueStatus:
        return await host.streams.status(view, queue)  # rabbit_stream_queue:stat: no consumers

    async def delete(self, host: QueueHost, command: cmd.QueueDelete) -> int:
        # rabbit_stream_queue:delete ignores if-unused and if-empty.
        await host.drop_queue(command.queue)
        return 0

    async def dropped(self, host: QueueHost, name: str) -> None:
        await host.streams.drop(name)

    async def purge(self, host: QueueHost, entity: Queue) -> int:
        raise refuse_purge(resource("queue", entity.name, host.name))

    async def consume(
        self, host: QueueHost, entity: Queue, request: ConsumeRequest
    ) -> QueueSubscription:
        now_ms = int(time.time() * 1000)
        return await host.streams.consume(entity, request.command, request.qos, now_ms)

    async def get(
        self, host: QueueHost, entity: Queue, owner: Owner
    ) -> tuple[Delivery, int] | None:
        raise refuse_get(resource("queue", entity.name, host.name))


STREAM: Final = StreamQueueType()
