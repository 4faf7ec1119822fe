"""What the channel logic may ask of a backend, in AMQP terms.

Every method raises ``gateway.amqp.errors.AMQPError`` (via ``amqp_error``) with RabbitMQ's
reply code and text when it refuses: the channel logic passes those through unchanged, so the
backend alone decides what is a 404, a 405 or a 406.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gateway.amqp import commands as cmd
from gateway.backend.message import Message as Message  # re-exported (moved there)
from gateway.backend.replies import ReplyRegistry


@dataclass(frozen=True)
class QueueStatus:
    name: str
    message_count: int
    consumer_count: int
    # The declare created the queue (rabbitmq_queues_created_total counts these).
    created: bool = False


class Delivery(Protocol):
    """One message handed to a consumer (or to Basic.Get) and not yet settled."""

    @property
    def message(self) -> Message: ...

    @property
    def redelivered(self) -> bool: ...

    async def ack(self) -> None:
        """The message is done with: remove it from the queue."""
        ...

    def ack_now(self) -> None:
        """``ack``, as a plain call: no backend waits to acknowledge (Pulsar groups its
        acknowledgements itself), and a read's acks are settled in one pass without a
        coroutine each."""
        ...

    async def reject(self, requeue: bool) -> None:
        """Give the message back to the queue (``requeue``) or drop it."""
        ...


class QueueSubscription(Protocol):
    """A consumer's supply of messages from one queue.

    The channel logic pulls one message at a time, and only while the consumer has prefetch
    credit, so the backend never has to know about Basic.Qos.
    """

    async def receive(self, before_wait: Callable[[], Awaitable[None]] | None = None) -> Delivery:
        """The next message; ``before_wait`` runs first if it has to wait for one (the
        channel flushes then, so a burst of deliveries goes out in one write)."""
        ...

    def receive_nowait(self) -> Delivery | None:
        """A message that is already here, or None. The channel takes a consumer's messages
        through it in one pass while the consumer has credit, instead of one per scheduling
        round: with publishers keeping the gateway busy, one per round starved consumers
        (docs/benchmarks.md, "Consumer starvation"). A backend may always answer None
        (then every message comes through ``receive``)."""
        ...

    async def close(self) -> None:
        """Stop receiving; deliveries not yet settled go back to the queue."""
        ...


@runtime_checkable
class TakesTurns(Protocol):
    """A subscription whose consumer delivers only while its turn lasts: a consumer of a
    single-active-consumer queue. Any other consumer is always active (RabbitMQ's ``up``)."""

    @property
    def activity_status(self) -> str:
        """RabbitMQ's ``activity_status`` of the consumer (``/api/consumers``):
        ``"single_active"`` while it is the queue's active consumer, ``"waiting"`` while it
        waits in line."""
        ...


def activity_status(subscription: QueueSubscription) -> str:
    """RabbitMQ's ``activity_status`` of a consumer: ``up``, ``single_active`` or
    ``waiting``."""
    return subscription.activity_status if isinstance(subscription, TakesTurns) else "up"


class ReceivesByWaiting:
    """For a subscription that hands messages over only through ``receive``."""

    def receive_nowait(self) -> None:
        return None


class SubscriptionEnded(Exception):
    """Raised by ``QueueSubscription.receive`` when the queue went away under the consumer
    (deleted here or on another replica): the client is sent Basic.Cancel."""


class Stored(Protocol):
    """The durability of one published message, for its publisher confirm."""

    def done(self) -> bool:
        """True once ``durable`` would return (or raise) without blocking."""
        ...

    async def durable(self) -> None:
        """Return when every copy is durable; raise if any failed."""
        ...


# ``add_done_callback`` of a ``Stored`` that reports its outcome: the callback is called with
# the ``Stored`` once done (in the producer's drain, on the trio thread).
DoneCallbacks = Callable[[Callable[[Any], None]], None]


def done_callbacks(stored: Stored) -> DoneCallbacks | None:
    """How to be told when ``stored`` is done, if it reports its outcome to callbacks (a
    Pulsar send handle, gateway/pulsar/producer.py, whose ``error`` then says how it ended);
    None for one that is only awaited (``durable``)."""
    report: DoneCallbacks | None = getattr(stored, "add_done_callback", None)
    return report


class AlreadyStored:
    """For a message that needs no write (it was routed nowhere): confirmed at once."""

    def done(self) -> bool:
        return True

    async def durable(self) -> None:
        return None


@dataclass(frozen=True)
class PublishOutcome:
    """What happened to a published message.

    ``routed`` is known at once (it decides Basic.Return for mandatory messages); ``stored``
    completes when every queue's copy is durable — the publisher confirm waits on it.
    """

    routed: bool
    stored: Stored = field(default_factory=AlreadyStored)


@dataclass(frozen=True)
class ConsumerQos:
    """The channel's Basic.Qos when a consumer starts: ``consumer`` is the per-consumer
    prefetch (``global=false``), ``channel`` the channel-wide one (``global=true``); 0 is
    none. Stream queues refuse consumers by them (model/streams.py)."""

    consumer: int = 0
    channel: int = 0


NO_QOS = ConsumerQos()


@dataclass(frozen=True)
class Owner:
    """The connection on whose behalf an operation runs (exclusive queues belong to one)."""

    connection_id: str
    user: str


class VirtualHost(Protocol):
    """One vhost's exchanges, queues, bindings and messages."""

    name: str
    # The direct reply-to consumers of this vhost on this replica (backend/replies.py).
    replies: ReplyRegistry

    # Each entity operation takes the client's command as the core decoded it (names already
    # normalised by the channel logic: never empty, CR/LF stripped), and reads what it needs.

    async def declare_exchange(self, command: cmd.ExchangeDeclare) -> None: ...

    async def delete_exchange(self, command: cmd.ExchangeDelete) -> None: ...

    async def declare_queue(self, command: cmd.QueueDeclare, owner: Owner) -> QueueStatus:
        """``command.queue`` is never empty here: the channel logic names server-named
        queues."""
        ...

    async def delete_queue(self, command: cmd.QueueDelete, owner: Owner) -> int:
        """Returns how many messages the queue held."""
        ...

    async def purge_queue(self, command: cmd.QueuePurge, owner: Owner) -> int: ...

    async def bind_queue(self, command: cmd.QueueBind, owner: Owner) -> None: ...

    async def unbind_queue(self, command: cmd.QueueUnbind, owner: Owner) -> None: ...

    async def bind_exchange(self, command: cmd.ExchangeBind) -> None:
        """Exchange.Bind: from Bind-Ok on, on every replica, what ``command.source`` routes
        with the binding goes on to ``command.destination`` (RabbitMQ's e2e bindings)."""
        ...

    async def unbind_exchange(self, command: cmd.ExchangeUnbind) -> None:
        """Exchange.Unbind (idempotent); what was routed before stays in its queues."""
        ...

    async def publish(self, message: Message, *, mandatory: bool = False) -> PublishOutcome:
        """Route and store; returns once routed (and back-pressure allows the next one).

        ``mandatory``: the client is told if the message is unroutable, so a backend whose
        view of the bindings may lag (another replica bound a moment ago) should make sure
        before saying so. Must be cancellation-safe: a cancelled publish has sent nothing, so
        it can be retried.
        """
        ...

    def publish_now(self, message: Message, *, mandatory: bool = False) -> PublishOutcome | None:
        """``publish``, when it can be done without waiting (the common case: a known
        exchange that routes the message, room to write it); None, with nothing done,
        when it cannot, and ``publish`` must be awaited. Raises what ``publish`` would."""
        ...

    async def send_reply(self, message: Message) -> None:
        """A direct reply (default exchange, routing key ``amq.rabbitmq.reply-to.*``): to its
        requester through ``replies``, wherever it is; dropped if it is gone."""
        ...

    async def consume(
        self,
        command: cmd.BasicConsume,
        owner: Owner,
        *,
        prefetch: int = 0,
        qos: ConsumerQos = NO_QOS,
    ) -> QueueSubscription:
        """A new consumer on ``command.queue``; 403 if someone holds it exclusively, and vice
        versa; 406 for consumer ``arguments`` the backend does not implement
        (``x-consumer-timeout``; ``x-priority`` where it cannot honour it).

        ``prefetch`` is the most unacknowledged deliveries the client will take (0: no
        limit); a backend may size what it reads ahead by it. ``qos`` is the channel's
        Basic.Qos, which a stream queue's consumer must have set."""
        ...

    async def get(self, command: cmd.BasicGet, owner: Owner) -> tuple[Delivery, int] | None:
        """One message and how many remain after it, or None when the queue is empty."""
        ...

    async def release(self, owner: Owner) -> None:
        """``owner``'s connection is gone: its exclusive queues go with it."""
        ...


class Backend(Protocol):
    async def open_vhost(self, vhost: str, user: str) -> VirtualHost:
        """The vhost for Connection.Open; raises 530 NOT_ALLOWED when it cannot be used."""
        ...
