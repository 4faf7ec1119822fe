"""Consumers of an AMQP queue on Pulsar: one TrioConsumer over the queue's subscriptions.

A queue is a set of Shared subscriptions, one per topic it is bound to (reference/002), all
with the queue's subscription name; an AMQP consumer is one ``TrioConsumer`` on all of them.
Deliveries are acknowledged on the Pulsar consumer they came from.

Requeueing a message that shares its Pulsar entry with others (a producer batch) cannot use
Pulsar's negative acknowledgement: that sends the whole entry back, with the messages of the
batch that were acknowledged already or are still held by a client (pulsar-client and the
broker know entries, and batch indexes only for acknowledgements, if at all). So such a
message is written again, to the queue's own topic (the default exchange's, which only this
queue reads) and marked requeued, and once Pulsar has stored the copy the original is
acknowledged. The copy comes back with ``redelivered=true``, after what is already waiting in
that topic: as with Pulsar's negative acknowledgement, a requeued message does not keep its
place (RabbitMQ puts it back where it was when it can).

A chunked message (one above the broker's maxMessageSize, stored as several entries by the
publishing replica's chunking producer: producer_cache.py) cannot go back by a negative
acknowledgement either: that brings back only its last chunk, which the consumer drops as
incomplete (``ReceivedMessage.chunked``). Closing its consumer gives it back whole, so it stays
unacknowledged for up to ``CHUNKED_RETURN_GRACE``: a consumer that closes meanwhile (its channel
closing, a cancelled consumer whose last delivery it was) gives it back; one that stays gets
it copied as above. Not a copy at once: Pulsar 4.0 may begin to dispatch the copy's chunks to
the consumer that is about to close, and a Shared subscription whose chunked message was cut
that way stalls (Pulsar's ``SharedConsumerAssignor`` keeps sending the rest to the closed
consumer; docs/reliability.md, "Large messages").
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

import trio

from gateway.backend.interface import Message, SubscriptionEnded
from gateway.backend.pulsar.held_back import HeldBack
from gateway.backend.pulsar.message_ttl import DeadLetter, QueueExpiry, enqueued_at
from gateway.backend.pulsar.messages import REFUSED_BY, REQUEUED, from_pulsar, refused_by
from gateway.backend.pulsar.redeliveries import Redeliveries, key_of
from gateway.backend.pulsar.split_batches import moved_in_order
from gateway.bounded import remember
from gateway.model.dead_letter import Reason
from gateway.model.naming import decode_local_name
from gateway.pulsar.consumer import TrioConsumer
from gateway.pulsar.errors import ClosedError, PulsarClientError
from gateway.pulsar.received import ReceivedMessage, furthest_per_topic

log = logging.getLogger("gateway.pulsar.delivery")

# Decides whether a message that arrived belongs to the queue: headers exchanges share one
# topic among all their bindings, and an unbound topic still draining carries later messages
# that are not the queue's (the filter is applied on delivery).
Admits = Callable[[Message, ReceivedMessage], bool]
# Before a consumer that gave messages back closes: until they are in the fleet's delivery
# record and Pulsar has the negative acknowledgements (delivery_records.py); the float is
# when the last one was made (trio time).
Returned = Callable[[float], Awaitable[None]]


class Copy(NamedTuple):
    """A copy of a message written back to its queue (a requeue inside a batch, a move)."""

    message: Message
    # When the original entered the queue (ms): the copy keeps its expiry.
    enqueued: int
    # Marked requeued: delivered next with redelivered=true.
    requeued: bool


# Writes copies to the queue's own topic, in their order; returns once all are stored.
RequeueCopies = Callable[[str, Sequence[Copy]], Awaitable[None]]
# How many messages a new consumer of a priority queue should find to read (the queue's
# messages Pulsar has not dispatched to its other consumers, on any replica:
# consumers/priority_reads.py).
Fill = Callable[["PulsarQueueSubscription"], Awaitable[int]]
# The longest a new consumer of a priority queue waits to have read them before its first
# delivery (another consumer may take some meanwhile: the count is a moment's).
FILL_WAIT = 1.0
# How long a requeued chunked message waits for its consumer to close (and give it back whole)
# before it is copied instead (module docstring): a channel's close or a cancelled consumer's
# last settlement closes it within milliseconds.
CHUNKED_RETURN_GRACE = 1.0
# How long a closing subscription waits for its two-step settlements (a copy stored, then the
# original acknowledged) to finish before it closes its Pulsar consumer anyway: a copy's send
# gives up after pulsar-client's send timeout (30 s); the session's cleanup allows 10 s.
TWO_STEP_WAIT = 5.0
# How long a closing consumer waits for the rest of a batch it delivered part of to come out of
# pulsar-client's receiver queue, where the batch arrived whole (split_batches.py): a listener
# round, milliseconds; without it the whole entry comes back, duplicates of what was settled.
ENTRY_TAIL_WAIT = 1.0
# Starts a task in the background (the vhost's nursery).
Spawn = Callable[[Callable[[], Awaitable[None]]], None]


def exchange_and_key(topic: str) -> tuple[str, str | None] | None:
    """``naming.decode_local_name`` of a full topic name, remembered: it is asked for every
    message received, of the same few topics."""
    try:
        return _decoded_topics[topic]
    except KeyError:
        pass
    decoded = decode_local_name(topic.rsplit("/", 1)[-1])
    remember(_decoded_topics, topic, decoded, _DECODED_TOPICS)
    return decoded


_decoded_topics: dict[str, tuple[str, str | None] | None] = {}
_DECODED_TOPICS = 4096


def _topic_order(received: ReceivedMessage) -> tuple[str, tuple[int, int, int], int]:
    position = received.batch_position
    return received.topic, position.entry, position.batch_index


def message_of(received: ReceivedMessage, properties: Mapping[str, str]) -> Message:
    return message_in(received.topic, received.payload, properties)


def message_in(topic: str, payload: bytes, properties: Mapping[str, str]) -> Message:
    """The AMQP message of a Pulsar message of ``topic``."""
    decoded = exchange_and_key(topic) or ("", topic.rsplit("/", 1)[-1])
    return from_pulsar(payload, properties, decoded[0], decoded[1] or "")


class PulsarDelivery:
    __slots__ = ("_key", "_received", "_settled", "_subscription", "message", "redelivered")

    def __init__(
        self,
        subscription: PulsarQueueSubscription,
        received: ReceivedMessage,
        message: Message,
        requeued_copy: bool = False,
    ):
        self._subscription = subscription
        self._received = received
        self._settled = False
        self.message = message
        self._key, seen = subscription.redeliveries.delivered(subscription.queue, received)
        self.redelivered = seen or requeued_copy
        subscription.delivery_made(received.topic)

    @property
    def received(self) -> ReceivedMessage:
        """The Pulsar message (its topic and id: the stream feed names its copy by them)."""
        return self._received

    @property
    def _consumer(self) -> TrioConsumer:
        return self._subscription.consumer

    def _settle(self, *, requeued: bool) -> None:
        if self._settled:
            return
        self._settled = True
        if not requeued:
            self._subscription.redeliveries.settled(self._key)
        self._subscription.delivery_settled(self._received.topic)

    async def ack(self) -> None:
        self.ack_now()

    def ack_now(self) -> None:
        # ``_settle(requeued=False)`` then ``_acknowledge``, inlined: once per message.
        subscription = self._subscription
        received = self._received
        if not self._settled:
            self._settled = True
            subscription.redeliveries.settled(self._key)
            subscription.delivery_settled(received.topic)
        try:
            subscription.consumer.acknowledge(received)
        except (ClosedError, PulsarClientError):
            log.debug("ack after consumer close on %s", received.topic)

    def _acknowledge(self) -> None:
        self._subscription.acknowledge(self._received)

    async def reject(self, requeue: bool) -> None:
        if self._settled:
            return
        if requeue and self._subscription.prioritized and self._consumer.put_back(self._received):
            # A priority queue's consumer keeps it, at its place in line in its priority:
            # delivered again before anything of lower priority and anything of its own that
            # came after it (RabbitMQ requeues into the message's own priority queue, at its
            # position), marked redelivered (it stays in ``redeliveries``).
            self._settle(requeued=True)
            return
        if requeue and (
            self._received.in_batch or self._subscription.held_through_a_purge(self._received)
        ):
            await self._requeue_copy()
            return
        if requeue and self._received.chunked:
            spawn = self._subscription.spawn
            if spawn is None:
                await self._requeue_copy()
                return
            # Settled now (a retired consumer closes once its last delivery is), still
            # known as delivered (its return comes back redelivered): module docstring.
            self._settle(requeued=True)
            spawn(self._return_chunked)
            return
        self._settle(requeued=requeue)
        if not requeue:
            await self.drop("rejected")
            return
        self._subscription.negative_acknowledge(self._received)

    async def drop(self, reason: Reason) -> None:
        """The message leaves the queue for ``reason``: dead-lettered first if the queue
        says so, and acknowledged only once the dead letter is stored. If it could not be,
        the original goes back to the queue (delivered again), never lost."""
        subscription = self._subscription
        with subscription.two_step():
            await self._dead_letter_then_acknowledge(reason)

    async def _dead_letter_then_acknowledge(self, reason: Reason) -> None:
        subscription = self._subscription
        try:
            await subscription.dead_letter(subscription.queue, self.message, reason)
        except Exception as error:
            log.warning(
                "dead-lettering a message of '%s' failed (%s); it stays in the queue",
                subscription.queue,
                error,
            )
            subscription.negative_acknowledge(self._received)
            return
        self._acknowledge()

    def expires_at(self) -> int | None:
        """When the message expires in its queue (ms since the epoch), if it does."""
        expiry = self._subscription.expiry
        received = self._received
        return None if expiry is None else expiry.deadline(received, received.properties)

    def unread(self) -> None:
        """Never handed to a client (the TTL sweep only looked): forgotten here, and given
        back when the consumer closes, not marked redelivered."""
        self._settle(requeued=False)

    async def _return_chunked(self) -> None:
        """A chunked message rejected with requeue, in the background: given back by its
        consumer's close if that comes within ``CHUNKED_RETURN_GRACE``, else copied."""
        subscription = self._subscription
        with trio.move_on_after(CHUNKED_RETURN_GRACE):
            await subscription.close_done.wait()
            return  # closed: Pulsar gives it back, whole
        with subscription.two_step():
            if await self._stored_copy("chunked", "it comes back when its consumer closes"):
                self._acknowledge()

    async def _stored_copy(self, kind: str, otherwise: str) -> bool:
        """Store the requeued copy of this message in its queue; False (logged, with what
        happens ``otherwise``) if it could not be."""
        subscription = self._subscription
        received = self._received
        try:
            copy = Copy(self.message, enqueued_at(received, received.properties), True)
            await subscription.requeue_copies(subscription.queue, [copy])
        except Exception as error:
            log.warning(
                "requeueing a %s message of '%s' by copy failed (%s); %s",
                kind,
                subscription.queue,
                error,
                otherwise,
            )
            return False
        return True

    async def _requeue_copy(self) -> None:
        """Requeue one message of a batch (or a chunked one): a copy goes in, then the
        original goes out.

        Counted as settled only once the original is acknowledged: a retired consumer closes
        when its last delivery is settled, and closing before that acknowledgement would
        give the whole entry back (duplicates of the others of the batch)."""
        self._settled = True  # the original is done with (the copy is marked requeued)
        with self._subscription.two_step():
            await self._copy_then_acknowledge()

    async def _copy_then_acknowledge(self) -> None:
        try:
            if await self._stored_copy("batched", "the whole batch comes back"):
                self._acknowledge()
            else:
                # Pulsar's way then, which gives the message back with the rest of its entry
                # (duplicates, but nothing lost).
                self._subscription.negative_acknowledge(self._received)
        finally:
            self._subscription.redeliveries.settled(self._key)
            self._subscription.delivery_settled(self._received.topic)


class PulsarQueueSubscription:
    """One AMQP consumer (or the Basic.Get fetcher) of one queue."""

    def __init__(
        self,
        queue: str,
        consumer: TrioConsumer,
        admits: Admits,
        on_closed: Callable[[PulsarQueueSubscription], None],
        redeliveries: Redeliveries,
        requeue_copies: RequeueCopies,
        dead_letter: DeadLetter,
        *,
        exclusive: bool = False,
        expiry: QueueExpiry | None = None,
        returned: Returned | None = None,
        fill: Fill | None = None,
        priority: int = 0,
        spawn: Spawn | None = None,
        held_back: HeldBack | None = None,
    ) -> None:
        """``spawn``: starts background work (a requeued chunked message's return); without
        it such a message is copied back at once. ``held_back``: the watch over batches read
        ahead while the client is at its prefetch limit (held_back.py), for a consumer with
        one."""
        self.queue = queue
        self.spawn = spawn
        self.priority = priority  # its consumer priority (x-priority)
        self._returned = returned
        # When this consumer last gave a message back (trio time), if it did.
        self._last_nack: float | None = None
        self.expiry = expiry
        self.requeue_copies = requeue_copies
        self.dead_letter = dead_letter
        self.consumer = consumer
        self.exclusive = exclusive
        self._admits = admits
        self._on_closed = on_closed
        self.redeliveries = redeliveries
        # Deliveries handed out and not yet acknowledged or rejected, in all and per topic.
        self.outstanding = 0
        self._outstanding_from: dict[str, int] = {}
        self._held_back = held_back
        # Called when the last outstanding delivery is settled (a single active consumer
        # stepping down waits for it: consumers/single_active.py).
        self.on_idle: Callable[[], None] | None = None
        # Set once retired (a Basic.Get consumer no longer used): runs the async work of
        # letting go of it, topic by topic as their deliveries are settled.
        self._retired: Callable[[Callable[[], Awaitable[None]]], None] | None = None
        self.ended = False
        self.closed = False
        # Set once closed (``close`` called again meanwhile waits for it); ``left`` once it is
        # no longer one of the queue's consumers (``leave``).
        self._close_done = trio.Event()
        self.left = False
        # Two-step settlements under way (``two_step``) and the event set when none is left.
        self._two_steps = 0
        self._no_two_steps = trio.Event()
        self._no_two_steps.set()
        # A priority queue's consumer orders what it reads ahead (priority.py); before its
        # first delivery it reads the queue's backlog, up to its window.
        self.prioritized = consumer.options.priority_of is not None
        self._fill = fill
        # Per topic: its last entry when the queue was purged on this replica (purge_queue).
        self.purged_at: dict[str, tuple[int, int]] = {}

    @contextlib.contextmanager
    def two_step(self) -> Iterator[None]:
        """Around a settlement in two steps, a copy stored and then the original acknowledged
        (requeue by copy, dead-lettering): the close waits for it. A Pulsar consumer closed
        between the two steps drops the acknowledgement, and Pulsar gives the original back
        beside its copy: a message the client settled, delivered again (found by the
        settlement property test on a broker with batch-index acknowledgements)."""
        if not self._two_steps:
            # A new event only when the first begins: a close already waiting holds the
            # current one, which must be set when the last of them ends.
            self._no_two_steps = trio.Event()
        self._two_steps += 1
        try:
            yield
        finally:
            self._two_steps -= 1
            if not self._two_steps:
                self._no_two_steps.set()

    def held_through_a_purge(self, received: ReceivedMessage) -> bool:
        """Whether ``received`` was read before a purge of its queue here. RabbitMQ's purge
        leaves unacknowledged messages to their holders, and a requeue brings them back;
        Pulsar's skip-all moved the subscription's cursor past them, so a negative
        acknowledgement would bring nothing back: such a message is requeued by copy."""
        at = self.purged_at.get(received.topic)
        if at is None:
            return False
        message_id = received.message_id
        return (message_id.ledger_id, message_id.entry_id) <= at

    async def filled(self) -> None:
        """Once, before the first delivery of a priority queue's consumer: wait until it has
        read the messages ready in the queue (up to its window), or ``FILL_WAIT``, so that
        the first delivery is the highest priority of them all, as on RabbitMQ, and not
        whichever message Pulsar sent first."""
        fill, self._fill = self._fill, None
        if fill is None:
            return
        with trio.move_on_after(FILL_WAIT):
            try:
                target = await fill(self)
            except Exception as error:  # the order of a first few deliveries is at stake only
                log.warning("counting what '%s' has to read failed: %s", self.queue, error)
                return
            await self.consumer.wait_buffered(
                min(target, self.consumer.options.effective_buffer_size)
            )

    async def receive(
        self, before_wait: Callable[[], Awaitable[None]] | None = None
    ) -> PulsarDelivery:
        if self._fill is not None:
            await self.filled()
        while True:
            if self.ended:
                raise SubscriptionEnded(self.queue)
            if before_wait is not None and not self.consumer.buffered:
                await before_wait()
            try:
                received = await self.consumer.receive()
            except ClosedError:
                raise SubscriptionEnded(self.queue) from None
            delivery = self._admit(received)
            if delivery is not None:
                return delivery

    def receive_nowait(self) -> PulsarDelivery | None:
        """A message already here, or None (none, or the subscription ended or closed: the
        next ``receive`` says which)."""
        if self.ended or self.closed:
            return None
        while True:
            try:
                received = self.consumer.receive_nowait()
            except (trio.WouldBlock, ClosedError):
                return None
            delivery = self._admit(received)
            if delivery is not None:
                return delivery

    def _belongs(
        self, received: ReceivedMessage, properties: Mapping[str, str], message: Message
    ) -> bool:
        return self._admits(message, received) and not (
            REFUSED_BY in properties and self.queue in refused_by(properties)
        )

    def _admit(self, received: ReceivedMessage) -> PulsarDelivery | None:
        topic, payload, properties = received.contents()
        message = message_in(topic, payload, properties)
        if not self._belongs(received, properties, message):
            # Not for this queue (another binding's headers, unbound or purged): done with it.
            self.redeliveries.settled(key_of(self.queue, received))
            self.consumer.acknowledge(received)
            return None
        if self.expiry is not None and self.expiry.expired(received, properties):
            # Never delivered (RabbitMQ's guarantee); dead-lettered if the queue says so.
            self.redeliveries.settled(key_of(self.queue, received))
            self.expiry.drop(self.consumer, received, message)
            return None
        return PulsarDelivery(self, received, message, REQUEUED in properties)

    def _given_back(self, received: ReceivedMessage) -> None:
        self.redeliveries.given_back(self.queue, received)

    def acknowledge(self, received: ReceivedMessage) -> None:
        """Done with ``received`` (Pulsar forgets it)."""
        try:
            self.consumer.acknowledge(received)
        except (ClosedError, PulsarClientError):
            # The consumer is gone, so Pulsar redelivers the message: what AMQP promises
            # for a message whose ack did not arrive.
            log.debug("ack after consumer close on %s", received.topic)

    @property
    def last_nack(self) -> float | None:
        """When this consumer last gave a message back (trio time), if it did."""
        return self._last_nack

    def negative_acknowledge(self, received: ReceivedMessage) -> None:
        """Give ``received`` back to the queue (Pulsar redelivers it, counted, after the
        consumer's negative-ack delay)."""
        self._last_nack = trio.current_time()
        try:
            self.consumer.negative_acknowledge(received)
        except (ClosedError, PulsarClientError):
            log.debug("reject after consumer close on %s", received.topic)

    def delivery_made(self, topic: str) -> None:
        self.outstanding += 1
        self._outstanding_from[topic] = self._outstanding_from.get(topic, 0) + 1
        if self._held_back is not None:
            self._held_back.delivery_made(self)

    @property
    def consuming(self) -> bool:
        """Still one of the queue's consumers: not closed, left (cancelled) or retired."""
        return not (self.closed or self.left or self.ended) and self._retired is None

    def delivery_settled(self, topic: str) -> None:
        self.outstanding -= 1
        left = self._outstanding_from[topic] - 1
        if left:
            self._outstanding_from[topic] = left
            return
        del self._outstanding_from[topic]
        if self._retired is not None:
            self._let_go(self._retired, topic)
        if self.on_idle is not None and not self.outstanding:
            self.on_idle()

    def retire(
        self, spawn: Callable[[Callable[[], Awaitable[None]]], None], *, hand_back: bool = True
    ) -> None:
        """Stop fetching and give back what was fetched and not handed out: a retired
        Basic.Get consumer closes each topic's Pulsar consumer once the deliveries made from
        that topic are settled, and closes altogether once all are. (Closing a Pulsar consumer
        earlier would make Pulsar redeliver messages a client still holds; keeping one longer
        would keep the message its read-ahead took meanwhile from every other consumer.)
        ``spawn`` starts the async work in the background. Without ``hand_back`` what was
        fetched stays until its topic's consumer closes (``TrioConsumer.stop_receiving``),
        except messages of batches, which are moved on at once either way."""
        if self._retired is not None:
            return
        self._retired = spawn
        if not self.closed:
            self.consumer.stop_receiving(self._given_back, hand_back=hand_back)
        if self.outstanding == 0:
            spawn(self.close)
            return

        # Closing waits for its deliveries' settlement; what it read ahead of batches goes on
        # to the queue's other consumers now, or it would wait as long (held_back.py): a
        # Basic.Get consumer retired by a Basic.Consume, or a cancelled consumer.
        async def move_on() -> None:
            await self.move_on_batches()

        spawn(move_on)
        for topic in self.consumer.topics:
            if topic not in self._outstanding_from:
                self._let_go(spawn, topic)

    def _let_go(self, spawn: Callable[[Callable[[], Awaitable[None]]], None], topic: str) -> None:
        """Retired, and nothing is outstanding from ``topic`` any more."""
        if self.outstanding == 0:
            spawn(self.close)
            return

        async def remove() -> None:
            await self.remove_topic(topic)

        spawn(remove)

    async def add_topic(self, topic: str) -> None:
        if not self.closed:
            await self.consumer.add_topic(topic)

    async def remove_topic(self, topic: str) -> None:
        if not self.closed:
            with trio.move_on_after(TWO_STEP_WAIT):  # as ``close``
                await self._no_two_steps.wait()
            await self.consumer.remove_topic(topic)

    async def move_on_batches(self) -> int:
        """Move what the consumer read ahead of batches to the queue's own topic, one message
        at a time (each copy an entry of its own, so that no batch forms again), for the
        queue's other consumers (held_back.py); how many. A close waits for it.

        Not cancelled with the task that started it (the channel's, whose connection may be
        lost meanwhile): cancelled while the consumer's listener is paused for the batches'
        tails, it would stay paused; cancelled between a copy and its original's
        acknowledgement, the whole batch came back beside the copies (the Java client's
        settle-on-close scenario, a cancelled consumer's read-ahead moved as the connection
        was lost). Every wait in it is bounded."""
        with self.two_step(), trio.CancelScope(shield=True):
            taken = await self.consumer.take_batched_read_ahead(ENTRY_TAIL_WAIT)
            taken.sort(key=_topic_order)  # a priority consumer's read-ahead is in its order
            for received in taken:
                await self.move_to_queue_topic([received])
        return len(taken)

    async def end(self) -> None:
        """The queue was deleted: the next receive raises SubscriptionEnded."""
        self.ended = True
        await self.close()

    def leave(self) -> None:
        """No longer one of the queue's consumers (unregistered; an auto-delete queue may go),
        while the deliveries it made can still be settled (Basic.Cancel: ``retire``)."""
        if not self.left:
            self.left = True
            self._on_closed(self)

    @property
    def close_done(self) -> trio.Event:
        """Set once closed: every message it held is back with Pulsar."""
        return self._close_done

    async def close(self) -> None:
        if self.closed:
            # Closing already (a retired consumer whose last delivery was settled): the
            # caller gets on once its messages are given back.
            await self._close_done.wait()
            return
        self.closed = True
        try:
            await self._close()
        finally:
            self._close_done.set()

    async def _close(self) -> None:
        self.leave()
        with trio.move_on_after(TWO_STEP_WAIT):
            await self._no_two_steps.wait()
        if self.expiry is not None:
            await self.expiry.idle()
        if not self.consumer.options.batch_index_ack and not self.ended:
            await self._complete_split_batches()
        if self._returned is not None and self._last_nack is not None:
            # Closing drops negative acknowledgements pulsar-client has not sent yet, and
            # Pulsar does not count what a closed consumer held (delivery_records.py).
            await self._returned(self._last_nack)
        await self.consumer.aclose()

    async def _complete_split_batches(self) -> None:
        """Move the rest of each batch part of which was delivered, so that the broker does not
        dispatch the whole batch again at the close (split_batches.py)."""
        await self.consumer.collect_entry_tails(ENTRY_TAIL_WAIT)
        unreceived = self.consumer.take_unreceived()
        if not unreceived:
            return
        positions = [(received.topic, received.batch_position) for received in unreceived]
        taken = furthest_per_topic(self.consumer.last_taken.values())
        moved = moved_in_order(positions, taken)
        await self.move_to_queue_topic([unreceived[number] for number in moved])

    async def move_to_queue_topic(self, moved: Sequence[ReceivedMessage]) -> None:
        """Copies of ``moved`` to the queue's own topic, in their order (those that are not the
        queue's, as ``_admit`` finds, are not copied), then the originals acknowledged. If the
        copies could not all be stored within ``TWO_STEP_WAIT``, the originals stay (their
        batches come back whole: duplicates, no loss). The write and the acknowledgements
        are one step that the caller's cancellation does not split (``move_on_batches``)."""
        copies: list[Copy] = []
        for received in moved:
            properties = received.properties
            message = message_of(received, properties)
            if self._belongs(received, properties, message):
                # Delivered before, or itself a requeued copy (read ahead after the moved ones).
                seen = REQUEUED in properties or self.redeliveries.seen(self.queue, received)
                copies.append(Copy(message, enqueued_at(received, properties), seen))
        if copies and not await self._moved_copies_stored(copies):
            return
        for received in moved:
            self.acknowledge(received)

    async def _moved_copies_stored(self, copies: list[Copy]) -> bool:
        with trio.CancelScope(shield=True), trio.move_on_after(TWO_STEP_WAIT):
            try:
                await self.requeue_copies(self.queue, copies)
                return True
            except Exception as error:
                log.warning(
                    "moving the rest of a batch of '%s' failed (%s); the whole batch comes back",
                    self.queue,
                    error,
                )
        return False
