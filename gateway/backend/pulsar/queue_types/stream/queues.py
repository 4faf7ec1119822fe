"""Stream queues on Pulsar: each stream's log is one topic, read by non-durable readers.

The log is the stream's own topic, the default exchange's ``amq.default__<stream>``, created
with the stream (any stale topic of that name is deleted first) and given two topic
policies: retention from ``x-max-age`` / ``x-max-length-bytes`` (infinite without them, since
no subscription holds the log's messages), and no deletion while inactive. Messages reach it
two ways (docs/compatibility.md, "Stream queues", argues the choice):

- a publish to the default exchange with the stream's name is written there directly (its
  publisher confirm means "in the stream");
- a message routed through any other exchange lands on that exchange's topic, where the
  stream keeps Shared subscriptions exactly as a classic queue does (queue_topics.py): a
  binding made on any replica is honoured as for classic queues. The namespace's leader
  appends them to the log (feed.py).

A consumer is a pulsar-client Reader on the log (reader.py), started from ``x-stream-offset``;
it acknowledges nothing, so its acks, nacks and rejects only give credit back, as on
RabbitMQ. Offsets are the message ids packed into longs (offsets.py).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

import trio

from gateway.amqp import commands as cmd
from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.amqp.fieldtable import Field
from gateway.backend.interface import (
    ConsumerQos,
    Message,
    QueueStatus,
    Stored,
    SubscriptionEnded,
)
from gateway.backend.pulsar.messages import from_pulsar, to_pulsar
from gateway.backend.pulsar.queue_count import broker_ready_count, flush_writes
from gateway.backend.pulsar.queue_topics import QueueTopics
from gateway.backend.pulsar.queue_types.dispatch import keeps_log
from gateway.backend.pulsar.queue_types.stream.copies import DEDUPLICATION, LogCopier
from gateway.backend.pulsar.queue_types.stream.offsets import entry_start, offset_of
from gateway.backend.pulsar.reply_codes import amqp_errors
from gateway.backend.pulsar.resources import PulsarResources
from gateway.metadata.store import VhostView
from gateway.model.entities import Queue, resource
from gateway.model.naming import subscription_for
from gateway.model.streams import (
    FIRST,
    LAST,
    At,
    OffsetSpec,
    Since,
    StreamFilter,
    StreamRetention,
    check_stream_consume,
    parse_offset,
    stream_filter,
    stream_retention,
    with_offset_header,
)
from gateway.pulsar.errors import AdminError, ClosedError, NotFound, PulsarClientError
from gateway.pulsar.ids import EARLIEST, LATEST, MessageId
from gateway.pulsar.reader import ReadMessage, TrioReader, open_reader

log = logging.getLogger("gateway.pulsar.streams")

__all__ = ["PulsarStreamSubscription", "StreamQueues", "retention_policy"]

_MB = 1024 * 1024
# pulsar-client's own default read-ahead of a reader; a consumer's prefetch bounds it.
_MAX_READ_AHEAD = 1000


def retention_policy(retention: StreamRetention) -> dict[str, int]:
    """Pulsar's ``RetentionPolicies`` for a stream: minutes and MB, rounded up (Pulsar's
    units), -1 for no limit. Pulsar, like RabbitMQ, removes whole ledgers (segments) once
    either limit is passed and always keeps the one being written."""
    minutes = -1 if retention.max_age_ms is None else math.ceil(retention.max_age_ms / 60_000)
    size = -1 if retention.max_bytes is None else math.ceil(retention.max_bytes / _MB)
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size}


def stream_of(view: VhostView, queue: str) -> Queue | None:
    entity = view.queues.get(queue)
    return entity if keeps_log(entity) else None


class PulsarStreamDelivery:
    """A message read from a stream: settling it gives credit back, nothing else."""

    __slots__ = ("message",)

    redelivered = False

    def __init__(self, message: Message) -> None:
        self.message = message

    async def ack(self) -> None:
        """Nothing is removed from a stream."""

    def ack_now(self) -> None:
        """As ``ack``."""

    async def reject(self, requeue: bool) -> None:
        """Neither requeued nor dropped (``rabbit_stream_queue:settle``: all credit)."""


class PulsarStreamSubscription:
    """One AMQP consumer of a stream: a Reader on its log."""

    def __init__(
        self,
        queue: str,
        reader: TrioReader,
        start: int | None,
        wanted: StreamFilter | None,
        on_closed: Callable[[PulsarStreamSubscription], Awaitable[None]],
        registration: str,
    ) -> None:
        self.queue = queue
        self._reader = reader
        self._start = start  # skip messages below this offset (a numeric x-stream-offset)
        self._filter = wanted
        self._on_closed = on_closed
        # Its record among the queue's consumers in the metadata store (StreamQueues.consume).
        self.registration = registration
        self.ended = False

    async def receive(
        self, before_wait: Callable[[], Awaitable[None]] | None = None
    ) -> PulsarStreamDelivery:
        while True:
            if self.ended:
                raise SubscriptionEnded(self.queue)
            if before_wait is not None and not self._reader.ready:
                flush, before_wait = before_wait, None
                await flush()
            try:
                read = await self._reader.receive()
            except ClosedError:
                raise SubscriptionEnded(self.queue) from None
            delivery = self._delivery(read)
            if delivery is not None:
                return delivery

    def receive_nowait(self) -> PulsarStreamDelivery | None:
        """A message already read, or None (the next ``receive`` says why, if it was not
        just that nothing is read yet)."""
        while not self.ended:
            read = self._reader.receive_nowait()
            if read is None:
                return None
            delivery = self._delivery(read)
            if delivery is not None:
                return delivery
        return None

    def _delivery(self, read: ReadMessage) -> PulsarStreamDelivery | None:
        """What the consumer gets of ``read``: None if its offset or filter skips it."""
        offset = offset_of(read.message_id)
        if self._start is not None and offset < self._start:
            return None  # earlier messages of the entry a numeric offset starts in
        message = from_pulsar(read.payload, read.properties, "", self.queue)
        if self._filter is not None and not self._filter.admits(message.properties.headers):
            return None
        header = with_offset_header(message.header, offset)
        return PulsarStreamDelivery(replace(message, header=header))

    async def end(self) -> None:
        """The stream was deleted: the next receive raises SubscriptionEnded."""
        self.ended = True
        await self.close()

    async def close(self) -> None:
        """Stop reading; returns once the consumer is unregistered (Cancel-Ok after it)."""
        if not self._reader.closed:
            await self._reader.aclose()
            await self._on_closed(self)


class StreamQueues:
    """The streams of one vhost: their logs, and this replica's consumers of them."""

    def __init__(self, vhost: str, resources: PulsarResources, topics: QueueTopics) -> None:
        self._vhost = vhost
        self._r = resources
        self._topics = topics
        self.log_topic = topics.default_topic
        self._consumers: dict[str, set[PulsarStreamSubscription]] = {}
        self._closing = False

    async def create(self, queue: str, arguments: Mapping[str, Field]) -> None:
        """Make the log of a new stream (before the stream becomes visible)."""
        admin, topic = self._r.admin, self.log_topic(queue)
        where = f"creating the log of stream {resource('queue', queue, self._vhost)}"
        # A log left by an earlier stream of the same name (or written to by publishers
        # since it was deleted) is not this stream's.
        await amqp_errors(admin.delete_topic(topic, force=True), where)
        await amqp_errors(admin.create_topic(topic), where)
        try:
            await admin.set_topic_policy(
                topic, "retention", retention_policy(stream_retention(arguments))
            )
            # The leader's copies of messages routed through exchanges are named after their
            # originals: the broker drops a copy the log already holds (copies.py).
            await admin.set_topic_policy(topic, DEDUPLICATION, True)
            # Without subscriptions the broker would delete the log after a minute idle.
            await admin.set_topic_policy(
                topic,
                "inactiveTopicPolicies",
                {
                    "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
                    "maxInactiveDurationSeconds": 60,
                    "deleteWhileInactive": False,
                },
            )
        except AdminError as error:
            with contextlib.suppress(AdminError):
                await admin.delete_topic(topic, force=True)
            raise ChannelError(
                ReplyCode.PRECONDITION_FAILED,
                f"cannot declare stream {resource('queue', queue, self._vhost)}: Pulsar refused "
                f"its topic policies ({error.reason or error}); stream queues need "
                "topicLevelPoliciesEnabled=true",
            ) from None

    def feeders(self, view: VhostView, queue: str) -> set[str]:
        """The topics through which messages reach the stream's log: its bindings' (and,
        after an unbind, those still draining), never the log itself."""
        return self._topics.read_by(view, queue)

    def copier(self, queue: str, in_flight: int) -> LogCopier:
        """What the leader's feed appends the stream's copies with (copies.py)."""
        return LogCopier(
            self._r, self.log_topic(queue), lambda message: self.append(queue, message), in_flight
        )

    async def subscribed(self, topic: str, queue: str) -> bool:
        """Whether ``queue``'s subscription on ``topic`` exists (False if Pulsar cannot say)."""
        try:
            return subscription_for(queue) in await self._r.admin.list_subscriptions(topic)
        except NotFound:
            return False
        except AdminError as error:
            log.info("subscriptions of %s: %s", topic, error)
            return False

    async def append(self, queue: str, message: Message) -> Stored:
        """Write ``message`` to the end of the stream's log (its exchange and routing key
        kept); the result completes once Pulsar stored it."""
        return await self._r.producers.submit(
            self.log_topic(queue), message.body, to_pulsar(message)
        )

    async def consume(
        self, entity: Queue, command: cmd.BasicConsume, qos: ConsumerQos, now_ms: int
    ) -> PulsarStreamSubscription:
        where = resource("queue", entity.name, self._vhost)
        check_stream_consume(
            where,
            no_ack=command.no_ack,
            consumer_prefetch=qos.consumer,
            channel_prefetch=qos.channel,
        )
        spec = parse_offset(where, command.arguments.get("x-stream-offset"), now_ms)
        wanted = stream_filter(command.arguments)
        # Registered as every queue's consumers are, so that the queue statistics count it
        # (rabbitmq_queue_consumers; RabbitMQ's count of a stream's consumers is every
        # node's). Never exclusive: RabbitMQ does not make a stream's consumer exclusive;
        # and Declare-Ok still says 0 (status), as rabbit_stream_queue:stat does.
        catalog = self._topics.catalog
        registration = await catalog.write(
            self._r.store.add_consumer(catalog.namespace, entity.name, exclusive=False)
        )
        try:
            reader = await amqp_errors(
                self._open(self.log_topic(entity.name), spec, min(qos.consumer, _MAX_READ_AHEAD)),
                f"consuming from {where}",
            )
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._unregister(entity.name, registration)
            raise
        subscription = PulsarStreamSubscription(
            entity.name,
            reader,
            spec.offset if isinstance(spec, At) else None,
            wanted,
            self._closed,
            registration,
        )
        self._consumers.setdefault(entity.name, set()).add(subscription)
        return subscription

    async def _open(self, topic: str, spec: OffsetSpec, read_ahead: int) -> TrioReader:
        client = self._r.client
        if spec == FIRST:
            return await open_reader(client, topic, EARLIEST, read_ahead=read_ahead)
        if spec == LAST:
            # pulsar-client's reader does not start at "latest, inclusive": ask the broker.
            last = await self._r.admin.last_message_id(topic)
            if last.entry_id >= 0:
                start = MessageId(last.ledger_id, last.entry_id)
                return await open_reader(
                    client, topic, start, inclusive=True, read_ahead=read_ahead
                )
            return await open_reader(client, topic, LATEST, read_ahead=read_ahead)
        if isinstance(spec, At):
            start = entry_start(spec.offset)
            return await open_reader(client, topic, start, inclusive=True, read_ahead=read_ahead)
        if isinstance(spec, Since):
            reader = await open_reader(client, topic, EARLIEST, read_ahead=read_ahead)
            try:
                await reader.seek(spec.timestamp_ms)
            except BaseException:
                await reader.aclose()
                raise
            return reader
        return await open_reader(client, topic, LATEST, read_ahead=read_ahead)  # next

    async def _closed(self, subscription: PulsarStreamSubscription) -> None:
        consumers = self._consumers.get(subscription.queue)
        if consumers is not None:
            consumers.discard(subscription)
            if not consumers:
                del self._consumers[subscription.queue]
        if not self._closing:  # closing: the records go with this replica's session
            await self._unregister(subscription.queue, subscription.registration)

    async def _unregister(self, queue: str, registration: str) -> None:
        catalog = self._topics.catalog
        try:
            await self._r.store.remove_consumer(catalog.namespace, queue, registration)
        except Exception as error:  # it goes with our session at the latest
            log.warning("unregistering a consumer of stream '%s' failed: %s", queue, error)

    async def status(self, view: VhostView, queue: str) -> QueueStatus:
        """Declare-Ok's counts: the log's messages and those its feeders hold for it, and no
        consumers (``rabbit_stream_queue:stat``)."""
        feeding = await broker_ready_count(self._r, self.feeders(view, queue), queue)
        return QueueStatus(queue, await self.count(queue) + feeding, 0)

    async def count(self, queue: str) -> int:
        """The messages in the log (RabbitMQ's count of a stream is approximate too), with
        those this replica has sent and Pulsar not yet confirmed."""
        await flush_writes(self._r, [self.log_topic(queue)])
        return await self.stored(queue)

    async def stored(self, queue: str) -> int:
        """The messages in the log (its entries: a producer's batch counts once)."""
        topic = self.log_topic(queue)
        try:
            return await self._r.admin.entries_in(topic)
        except NotFound:
            return 0
        except AdminError as error:
            log.info("counting stream '%s': %s", queue, error)
            return 0

    async def drop(self, queue: str) -> None:
        """The stream was deleted: end this replica's consumers, then delete the log (other
        replicas end theirs when their view has the delete: ``reconcile``)."""
        for subscription in list(self._consumers.pop(queue, ())):
            await subscription.end()
        try:
            await self._r.admin.delete_topic(self.log_topic(queue), force=True)
        except (AdminError, PulsarClientError) as error:
            # A later stream of the same name deletes it first (``create``).
            log.warning("deleting the log of stream '%s' failed: %s", queue, error)

    async def reconcile(self, view: VhostView) -> None:
        """End the consumers of streams deleted on another replica (Basic.Cancel)."""
        for queue in [q for q in self._consumers if stream_of(view, q) is None]:
            for subscription in list(self._consumers.pop(queue, ())):
                await subscription.end()

    async def aclose(self) -> None:
        self._closing = True
        for subscriptions in list(self._consumers.values()):
            for subscription in list(subscriptions):
                await subscription.close()
        self._consumers.clear()
