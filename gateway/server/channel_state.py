"""The session's records of one connection: what it needs from the connection
(``SessionLink``), its channels (``SessionChannel``), their consumers and their
unacknowledged deliveries. Plain data with the prefetch arithmetic of ``amqp/deliveries.py``;
the behaviour is ``session.py``'s and its collaborators'."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from gateway.amqp.connection import ServerConnection
from gateway.amqp.deliveries import DeliveryTags, Prefetch
from gateway.amqp.errors import AMQPError
from gateway.backend.interface import Delivery, Owner, QueueSubscription
from gateway.backend.replies import ReplyConsumer
from gateway.server.confirms import ConfirmQueue
from gateway.server.transaction import Transaction
from gateway.server.write_watch import WriteWatch


class SessionLink(Protocol):
    """What the session needs from its connection."""

    protocol: ServerConnection
    owner: Owner
    nursery: trio.Nursery

    async def flush(self) -> None: ...

    def flush_now(self) -> bool:
        """``flush`` without waiting; False, with nothing taken, if it would have to wait."""
        ...

    async def fail(self, channel: int, error: AMQPError) -> None:
        """Close ``channel`` (soft error) or the connection (hard error) from a background task."""
        ...


@dataclass(eq=False)
class Consumer:
    tag: str
    queue: str
    no_ack: bool
    prefetch: int  # 0 = unlimited (Basic.Qos global=false at the time of Basic.Consume)
    subscription: QueueSubscription
    # As Basic.Consume asked, for the management API's /api/consumers.
    exclusive: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    # Set when its delivery loop has ended (None until the loop is started): a consumer's
    # subscription closes only after that, or a message the loop was handing over as the
    # consumer was cancelled would be given back while the subscription closes under it.
    loop_ended: trio.Event | None = None
    unacked: int = 0
    # Its queue ended while this connection's Queue.Delete of it was under way: its
    # Basic.Cancel waits for that delete's outcome (declarations.py ``queue_delete``).
    ended: bool = False


@dataclass(eq=False, slots=True)  # one per delivery in ack mode: slots make and read it faster
class Unacked:
    delivery: Delivery
    consumer: Consumer | None  # None for Basic.Get


@dataclass(eq=False)
class SessionChannel:
    """The session's side of one open channel: its consumers, the deliveries not yet settled
    (their tags and the prefetch credit are ``amqp.deliveries``' sans-IO rules), confirms."""

    number: int
    tags: DeliveryTags[Unacked] = field(default_factory=DeliveryTags)
    prefetch: Prefetch = field(default_factory=Prefetch)
    consumers: dict[str, Consumer] = field(default_factory=dict)
    confirms: ConfirmQueue | None = None
    # Without confirms: the watch that closes the channel when a write fails (write_watch.py).
    writes: WriteWatch | None = None
    tx: Transaction[Unacked] | None = None  # in tx mode (Tx.Select): what commit applies
    last_queue: str = ""  # for the empty queue name meaning "the last one declared here"
    credit_changed: trio.Event = field(default_factory=trio.Event)
    # Tasks waiting in ``wait_for_credit``: without any, a settlement has nobody to wake
    # (the common case, an ack per delivery with credit to spare), and ``signal_credit``
    # does nothing rather than replace an Event per ack.
    credit_waiters: int = 0
    # Consumers cancelled while deliveries of theirs were unacknowledged (consuming.py
    # ``basic_cancel``): their subscriptions close once those are settled, or with the channel.
    retired: list[Consumer] = field(default_factory=list)
    publisher: bool = False  # has published: one of rabbitmq_global_publishers
    reply: ReplyConsumer | None = None  # its amq.rabbitmq.reply-to consumer (backend/replies.py)

    def signal_credit(self) -> None:
        if self.credit_waiters:
            self.credit_changed.set()
            self.credit_changed = trio.Event()

    def consumers_unacked(self) -> int:
        # A cancelled consumer's unacknowledged deliveries count too (RabbitMQ's limiter
        # hears of them when they are settled).
        return sum(c.unacked for c in self.consumers.values()) + sum(
            c.unacked for c in self.retired
        )

    def has_credit(self, consumer: Consumer) -> bool:
        return self.prefetch.allows(
            consumer.no_ack, consumer.prefetch, consumer.unacked, self.consumers_unacked
        )

    async def wait_for_credit(self, consumer: Consumer) -> None:
        while not self.has_credit(consumer):
            self.credit_waiters += 1
            try:
                await self.credit_changed.wait()
            finally:
                self.credit_waiters -= 1
