"""What a queue type decides, and what it may use of the vhost that holds its queues.

RabbitMQ dispatches each queue operation to the queue's type (``rabbit_queue_type``: classic,
quorum, stream). Here ``PulsarVirtualHost`` does the parts common to every queue (the catalog's
checks, the metadata writes, the subscriptions' records) and asks the queue's ``QueueType`` for
the rest: how the queue is made, counted, deleted, purged, consumed and read by Basic.Get.

A type reaches the vhost only through ``QueueHost``: the machinery of queues read through
Pulsar Shared subscriptions (what classic queues use, and what a quorum-like type would) and
that of queues kept as a log read by readers (``StreamLogs``, what streams use).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.amqp import commands as cmd
from gateway.amqp.fieldtable import Field
from gateway.backend.interface import ConsumerQos, Delivery, Owner, QueueStatus, QueueSubscription
from gateway.metadata.store import QueueCondition, VhostView
from gateway.model.entities import Queue

__all__ = ["ConsumeRequest", "QueueHost", "QueueType", "StreamLogs"]


@dataclass(frozen=True, slots=True)
class ConsumeRequest:
    """A Basic.Consume as the vhost received it: the command, the consumer's prefetch and the
    channel's Basic.Qos (``VirtualHost.consume``)."""

    command: cmd.BasicConsume
    prefetch: int
    qos: ConsumerQos


class StreamLogs(Protocol):
    """The logs of a vhost's streams and this replica's readers of them (stream/queues.py)."""

    async def create(self, queue: str, arguments: Mapping[str, Field]) -> None: ...

    async def status(self, view: VhostView, queue: str) -> QueueStatus: ...

    async def drop(self, queue: str) -> None: ...

    async def consume(
        self, entity: Queue, command: cmd.BasicConsume, qos: ConsumerQos, now_ms: int
    ) -> QueueSubscription: ...


class QueueHost(Protocol):
    """The vhost as a queue type sees it (``PulsarVirtualHost``)."""

    @property
    def name(self) -> str:
        """The vhost's name (for RabbitMQ's error texts)."""
        ...

    @property
    def streams(self) -> StreamLogs: ...

    async def drop_queue(self, name: str, *, condition: QueueCondition | None = None) -> bool: ...

    async def subscribe_own_topic(self, name: str) -> bool:
        """Subscribe a new queue to its own topic if that topic is active; True if it did."""
        ...

    async def subscribed_status(self, view: VhostView, queue: str) -> QueueStatus:
        """Declare-Ok's counts: the ready messages and the consumers on every replica."""
        ...

    async def delete_subscribed(self, command: cmd.QueueDelete) -> int:
        """Queue.Delete with if-unused and if-empty; the ready messages it deleted."""
        ...

    async def purge_subscribed(self, name: str) -> int:
        """Skip every ready message of the queue's subscriptions; how many there were."""
        ...

    async def consume_subscribed(self, entity: Queue, request: ConsumeRequest) -> QueueSubscription:
        """A consumer on the queue's subscriptions (single active or competing)."""
        ...

    async def get_subscribed(self, entity: Queue, owner: Owner) -> tuple[Delivery, int] | None:
        """Basic.Get from the queue's subscriptions."""
        ...


class QueueType(Protocol):
    """What differs per queue type (one implementation per folder of queue_types/)."""

    @property
    def name(self) -> str:
        """RabbitMQ's name of the type (``x-queue-type``)."""
        ...

    @property
    def keeps_log(self) -> bool:
        """The queue's own topic (the default exchange's) is its log, read by readers and
        never subscribed to; messages routed through other exchanges are appended to it by
        the leader (stream/feed.py). False: the queue is its Shared subscriptions."""
        ...

    async def create(self, host: QueueHost, name: str, arguments: Mapping[str, Field]) -> bool:
        """Before a new queue becomes visible: make what it reads; True if it made its
        subscription (or needs none), False if the binder's handshake must decide."""
        ...

    async def status(self, host: QueueHost, view: VhostView, queue: str) -> QueueStatus:
        """Declare-Ok's message and consumer counts."""
        ...

    async def delete(self, host: QueueHost, command: cmd.QueueDelete) -> int:
        """Queue.Delete of an existing queue; Delete-Ok's message count."""
        ...

    async def dropped(self, host: QueueHost, name: str) -> None:
        """After the queue was deleted (on this replica): remove what only the type holds."""
        ...

    async def purge(self, host: QueueHost, entity: Queue) -> int:
        """Queue.Purge; Purge-Ok's message count."""
        ...

    async def consume(
        self, host: QueueHost, entity: Queue, request: ConsumeRequest
    ) -> QueueSubscription:
        """Basic.Consume, after the catalog's checks."""
        ...

    async def get(
        self, host: QueueHost, entity: Queue, owner: Owner
    ) -> tuple[Delivery, int] | None:
        """Basic.Get, after the catalog found the queue."""
        ...
