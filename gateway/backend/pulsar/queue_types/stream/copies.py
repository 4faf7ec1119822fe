"""The leader's copies of the messages routed to a stream through exchanges: each appended to
the stream's log once, even when a leader dies between storing a copy and acknowledging its
original (feed.py).

Pulsar's producer deduplication does it (the log's topic policy ``deduplicationEnabled``, set
when the stream is created): the broker keeps, per producer name, the highest sequence id it
has stored, and drops a message whose sequence id is not above it (answering the send as if
stored, with no message id). The feed copies the messages of each source topic (an exchange
topic the stream is bound to) through a producer named after that topic, the same name on every
replica, with the original's offset in its topic as sequence id (offsets.py: the
position packed into a long, increasing along the topic). The next leader receives again the
originals whose acknowledgement was lost and sends their copies again under the same name and
the same ids: the broker drops those already in the log and stores the others.

Why that is sound, and where it stops:

- The feed reads its subscriptions with an *exclusive* consumer (feed.py): Pulsar then
  delivers a topic's messages in their order, also when it delivers them again (it rewinds a
  lone consumer's cursor to the first unacknowledged message). Through a Shared subscription a
  redelivered message could come after a later one, and the broker would drop it as below the
  highest id: it would be lost.
- Only one producer of a name can be connected to a topic (Pulsar answers ``ProducerBusy``):
  a next leader waits until the old leader's producers are gone, so two leaders never append
  the same source topic at once.
- Batching is off for these producers: the broker judges a batch by its first sequence id, so a
  batch holding old and new copies would be dropped whole.
- The broker decides, never the feed: a copy whose id lies between what the broker stored and
  what it was still writing when the old producer left is answered with an error, which
  pulsar-client retries (reconnecting) until the broker knows.
- A message whose position does not fit the packing (a ledger past 2**20 entries or an id past
  2**32, a batch past 2**11 messages) has no exact offset: it is copied through the replica's
  ordinary producer of the log, after every copy in flight is stored, and waited for before the
  next: its order is kept, and it may be appended twice after a crash (as before).
- Pulsar forgets a producer name's highest id once it has been disconnected for
  ``brokerDeduplicationProducerInactivityTimeoutMinutes`` (6 hours by default): an original
  still unacknowledged after that long without a leader may be appended again.
"""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace

import trio

from gateway.backend.interface import Message, Stored
from gateway.backend.pulsar.messages import to_pulsar
from gateway.backend.pulsar.queue_types.stream.offsets import exact_offset
from gateway.backend.pulsar.resources import PulsarResources
from gateway.pulsar.errors import AdminError, PulsarClientError
from gateway.pulsar.ids import MessageId
from gateway.pulsar.producer import SendHandle, TrioProducer

log = logging.getLogger("gateway.pulsar.stream_feed")

__all__ = ["DEDUPLICATION", "LogCopier", "copier_name"]

# The log's topic policy that turns the broker's deduplication on.
DEDUPLICATION = "deduplicationEnabled"
# How long a feed waits for the broker to apply that policy (it goes through the namespace's
# system topic), polling the topic's statistics; after that it feeds without (at least once).
DEDUPLICATION_WAIT = 10.0
_POLL = 0.1
# A source topic's producer is closed after this long without a copy to send (when another
# one is opened): Pulsar keeps its name's highest id for hours after (module docstring).
IDLE = 300.0


def copier_name(source_topic: str) -> str:
    """The producer name of the copies from ``source_topic`` (the same on every replica;
    unique among one log's source topics)."""
    digest = hashlib.blake2b(source_topic.encode(), digest_size=12).hexdigest()
    return f"starlight-feed-{digest}"


class LogCopier:
    """Appends the copies of one stream's feed to its log, a producer per source topic."""

    def __init__(
        self,
        resources: PulsarResources,
        log_topic: str,
        fallback: Callable[[Message], Awaitable[Stored]],
        in_flight: int,
    ) -> None:
        self._r = resources
        self.log_topic = log_topic
        self._fallback = fallback  # the replica's ordinary producer of the log
        self._in_flight = in_flight
        self._producers: dict[str, TrioProducer] = {}
        self._pending: deque[Stored] = deque()  # copies sent, in order, not known stored
        self.deduplicated = False

    async def start(self) -> None:
        """Make sure the broker deduplicates the log (a stream created before the feed
        named its copies has no such policy: set it), waiting until it does."""
        admin = self._r.admin
        try:
            if await self._deduplicating():
                self.deduplicated = True
                return
            await admin.set_topic_policy(self.log_topic, DEDUPLICATION, True)
            with trio.move_on_after(DEDUPLICATION_WAIT):
                while not await self._deduplicating():
                    await trio.sleep(_POLL)
                self.deduplicated = True
        except AdminError as error:
            log.warning("deduplication of %s: %s", self.log_topic, error)
        if not self.deduplicated:
            log.warning(
                "the broker does not deduplicate %s: copies of messages whose acknowledgement "
                "a leader's death loses may be appended twice",
                self.log_topic,
            )

    async def _deduplicating(self) -> bool:
        stats = await self._r.admin.topic_stats(self.log_topic)
        return stats.raw.get("deduplicationStatus") == "Enabled"

    async def copy(self, source_topic: str, position: MessageId, message: Message) -> Stored:
        """Send the copy of ``message`` (read at ``position`` of ``source_topic``); the
        result completes once the log holds it (or held it already)."""
        if not self.deduplicated:
            return await self._fallback(message)  # at least once, in order (one producer)
        while self._pending and self._pending[0].done():
            self._pending.popleft()
        sequence = exact_offset(position)
        if sequence is None:
            return await self._copy_unnamed(message)
        producer = self._producers.get(source_topic)
        if producer is None or producer.closed:
            await self._close_idle()
            producer = await self._producer(source_topic)
        handle: SendHandle = await producer.submit(
            message.body, to_pulsar(message), sequence_id=sequence
        )
        self._pending.append(handle)
        return handle

    async def _copy_unnamed(self, message: Message) -> Stored:
        """Through the ordinary producer, in order: after every copy in flight, and stored
        before the next."""
        for earlier in list(self._pending):
            await earlier.durable()
        self._pending.clear()
        stored = await self._fallback(message)
        await stored.durable()
        return stored

    async def _producer(self, source_topic: str) -> TrioProducer:
        """The named producer of ``source_topic``'s copies. Pulsar refuses it
        (``ProducerBusy``) while the previous leader's is still connected: the feed tries
        again later."""
        options = replace(
            self._r.producers.options,
            producer_name=copier_name(source_topic),
            batching_enabled=False,
            max_pending_messages=self._in_flight,
        )
        producer = await self._r.client.create_producer(self.log_topic, options)
        self._producers[source_topic] = producer
        return producer

    async def _close_idle(self) -> None:
        """Close the producers of source topics that sent nothing for ``IDLE`` (a stream
        bound to a topic exchange meets new routing keys as long as it lives)."""
        now = trio.current_time()
        for source_topic, producer in list(self._producers.items()):
            if producer.in_flight == 0 and now - producer.last_used >= IDLE:
                await self._close(source_topic)

    async def _close(self, source_topic: str) -> None:
        producer = self._producers.pop(source_topic, None)
        if producer is not None:
            try:
                await producer.aclose()
            except PulsarClientError as error:
                log.debug("closing the copier of %s: %s", source_topic, error)

    async def aclose(self) -> None:
        for source_topic in list(self._producers):
            await self._close(source_topic)
