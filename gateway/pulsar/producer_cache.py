"""One producer per topic, created on first use and closed when idle.

A gateway publishes to many topics (one per exchange, or per exchange and routing key), most
of them rarely. Creating a Pulsar producer costs a lookup and a round trip, so producers are
kept, and a sweeper task closes those that have sent nothing for ``idle_timeout`` seconds and
have nothing in flight.

Concurrent first use of one topic creates one producer: the first caller creates it, the others
wait for that attempt (and try themselves if it failed or was cancelled).

The sweeper and ``get()`` cannot race: ``get()`` stamps ``last_used`` before it returns (no
checkpoint in between), and the sweeper removes a producer from the map before it starts
closing it, so a later ``get()`` makes a new one.

Large messages. pulsar-client refuses a message whose payload and metadata exceed the
broker's ``maxMessageSize`` (5 MiB by default) unless its producer splits it into chunks
(PIP-37), and a chunking producer cannot batch. So a message too large for one entry goes
through a second producer of its topic, non-batched and chunking, made on first need and
idled out like the others; the topic's ordinary producer keeps its batching and grouped sends.
The size is only looked at on the paths that already send large messages one by one (the
grouped hot path never takes a message above ``GROUP_MAX_BYTES``).

Two producers of one topic store their messages in whatever order their sends complete, and
AMQP promises that the messages one channel publishes reach a queue in publish order (0-9-1
§4.7; RabbitMQ's "Message ordering guarantees"). So a send through one of a topic's two
producers first waits until everything handed to the other one is stored (or failed): a large
message after small ones waits for them, a small message after a large one waits for it. A
connection publishes one message after the other (it awaits a publish that cannot be handed
over at once before it reads the next), so a channel's messages to a topic are stored in
publish order. That wait costs only around large messages; between small ones nothing
changes. (Across channels AMQP promises no order, but they get this one too.)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import replace

import trio

from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.client import PulsarClient
from gateway.pulsar.errors import AdminError, ClosedError
from gateway.pulsar.producer import ProducerOptions, SendHandle, TrioProducer

log = logging.getLogger(__name__)

# Pulsar's default maxMessageSize: what the gateway assumes when it cannot read the broker's.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
# What pulsar-client puts in a message's metadata besides its properties (producer name,
# sequence id, publish time, sizes, a chunk's uuid and numbers), rounded up generously.
METADATA_ALLOWANCE = 1024
# Per property in the metadata: its protobuf framing, rounded up.
PROPERTY_OVERHEAD = 8
# Large messages in flight per topic: each may be up to amqpMaxMessageSize, all in memory.
LARGE_IN_FLIGHT = 16


def chunking(options: ProducerOptions) -> ProducerOptions:
    """The options of a topic's producer of large messages: ``options`` without batching,
    with chunking, and a small in-flight limit of messages (pulsar-client's own, counted in
    chunks, left unbounded: ours bounds the messages)."""
    return replace(
        options,
        batching_enabled=False,
        chunking_enabled=True,
        max_pending_messages=LARGE_IN_FLIGHT,
        native_max_pending_messages=0,
    )


class _Creating:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = trio.Event()


class ProducerCache:
    def __init__(
        self,
        client: PulsarClient,
        options: ProducerOptions | None = None,
        *,
        idle_timeout: float = 60.0,
        sweep_interval: float | None = None,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    ) -> None:
        """``max_message_size``: the broker's ``maxMessageSize`` (larger messages are sent
        in chunks, module docstring)."""
        if idle_timeout <= 0:
            raise ValueError("idle_timeout must be > 0")
        if max_message_size <= METADATA_ALLOWANCE:
            raise ValueError(f"max_message_size must be > {METADATA_ALLOWANCE}")
        self._client = client
        self.options = options or ProducerOptions()
        self.large_options = chunking(self.options)
        self.idle_timeout = idle_timeout
        self.sweep_interval = sweep_interval or max(0.01, idle_timeout / 4)
        self.max_message_size = max_message_size
        # A payload up to this size fits one entry whatever its properties (AMQP headers come
        # in one frame, far below half of any maxMessageSize); above it ``is_large`` counts.
        self._fits = max_message_size // 2
        self._entries: dict[str, TrioProducer | _Creating] = {}
        # The topics' producers of large messages (module docstring).
        self._large: dict[str, TrioProducer | _Creating] = {}
        self._closed = False
        self.created = 0  # producers created so far (for metrics and tests)
        self.idled_out = 0  # producers closed by the sweeper

    @property
    def producers(self) -> Mapping[str, TrioProducer]:
        """The topics' ordinary producers."""
        return {t: p for t, p in self._entries.items() if isinstance(p, TrioProducer)}

    @property
    def large_producers(self) -> Mapping[str, TrioProducer]:
        """The topics' producers of large messages (chunking)."""
        return {t: p for t, p in self._large.items() if isinstance(p, TrioProducer)}

    def is_large(self, payload: bytes, properties: Mapping[str, str] | None = None) -> bool:
        """Whether the message is too large for one Pulsar entry: pulsar-client's own test
        (``ProducerImpl::sendAsync``: payload and metadata above the broker's
        ``maxMessageSize``), with the metadata estimated from above."""
        size = len(payload)
        if size <= self._fits:
            return False
        size += METADATA_ALLOWANCE
        if properties:
            for key, value in properties.items():
                size += len(key.encode()) + len(value.encode()) + PROPERTY_OVERHEAD
        return size > self.max_message_size

    def __len__(self) -> int:
        return len(self.producers)

    async def get(self, topic: str) -> TrioProducer:
        """The topic's producer, creating it if needed. Raises what creation raises."""
        return await self._get(self._entries, topic, self.options)

    async def _get(
        self, entries: dict[str, TrioProducer | _Creating], topic: str, options: ProducerOptions
    ) -> TrioProducer:
        """``get`` from ``entries`` (the ordinary producers or the large messages' ones)."""
        while True:
            if self._closed:
                raise ClosedError("producer cache closed")
            entry = entries.get(topic)
            if isinstance(entry, TrioProducer) and not entry.closed:
                # Before the checkpoint, so the sweeper cannot take it meanwhile (sending
                # sets it again).
                entry.last_used = trio.current_time()
                await trio.lowlevel.checkpoint_if_cancelled()
                return entry
            if isinstance(entry, _Creating):
                await entry.done.wait()
                continue  # created (take it), or failed (try ourselves)
            creating = _Creating()
            entries[topic] = creating
            try:
                producer = await self._client.create_producer(topic, options)
            except BaseException:
                if entries.get(topic) is creating:
                    del entries[topic]
                raise
            finally:
                creating.done.set()
            if self._closed:
                await producer.aclose()
                raise ClosedError("producer cache closed")
            entries[topic] = producer
            self.created += 1
            producer.last_used = trio.current_time()
            return producer

    async def submit(
        self, topic: str, payload: bytes, properties: Mapping[str, str] | None = None
    ) -> SendHandle:
        """``get(topic)`` then ``submit_grouped`` (the handle completes with the messages
        submitted with it before this task yields: producer.py); retries once if the
        producer closed under us. A message too large for one entry goes through the topic's
        chunking producer, each after what the other producer has in flight (module
        docstring)."""
        if len(payload) > self._fits and self.is_large(payload, properties):
            return await self._submit_large(topic, payload, properties)
        if self._large:
            await _after(self._large.get(topic))
        entry = self._entries.get(topic)
        if type(entry) is TrioProducer and not entry.closed:
            # The hot path, without get()'s extra coroutine and checkpoint (submit() has its
            # own). Should the sweeper close this idle producer while submit() waits for a
            # slot, submit() raises ClosedError and the path below makes a new one.
            try:
                return await entry.submit_grouped(payload, properties)
            except ClosedError:
                if self._closed:
                    raise
                self._discard(topic, entry)
        for attempt in (1, 2):
            producer = await self.get(topic)
            try:
                return await producer.submit_grouped(payload, properties)
            except ClosedError:
                if attempt == 2 or self._closed:
                    raise
                self._discard(topic, producer)
        raise AssertionError("unreachable")

    async def _submit_large(
        self, topic: str, payload: bytes, properties: Mapping[str, str] | None
    ) -> SendHandle:
        """``submit`` through the topic's chunking producer, once everything handed to its
        ordinary producer is stored or failed."""
        await _after(self._entries.get(topic))
        for attempt in (1, 2):
            producer = await self._get(self._large, topic, self.large_options)
            try:
                return await producer.submit(payload, properties)
            except ClosedError:
                if attempt == 2 or self._closed:
                    raise
                self._discard(topic, producer, self._large)
        raise AssertionError("unreachable")

    async def flush(self, topic: str) -> None:
        """Wait until every message handed to the topic's producers so far is stored or
        failed (their handles carry the errors)."""
        for entries in (self._entries, self._large):
            producer = entries.get(topic)
            if type(producer) is TrioProducer and producer.in_flight and not producer.closed:
                with contextlib.suppress(ClosedError):
                    await producer.flush()

    def submit_now(
        self, topic: str, payload: bytes, properties: Mapping[str, str] | None = None
    ) -> SendHandle | None:
        """``submit`` when it need not wait (the topic's producer is open and has a free
        slot): the message joins its group; None, with nothing done, otherwise."""
        entry = self._entries.get(topic)
        if type(entry) is TrioProducer:  # a closed one says None itself
            if self._large and topic in self._large:
                return None  # maybe after a large message still in flight: ``submit`` waits
            # The producer stamps its last use itself when the message joins a group; the
            # sweeper cannot close it meanwhile (no checkpoint, and then it has one in flight).
            # A message it does not group (above GROUP_MAX_BYTES) goes the awaited way, which
            # looks at its size.
            return entry.submit_grouped_nowait(payload, properties)
        return None

    def _discard(
        self,
        topic: str,
        producer: TrioProducer,
        entries: dict[str, TrioProducer | _Creating] | None = None,
    ) -> None:
        entries = self._entries if entries is None else entries
        if entries.get(topic) is producer:
            del entries[topic]

    async def sweep(self) -> int:
        """Close producers idle for ``idle_timeout`` with nothing in flight; returns how many."""
        now = trio.current_time()
        idle = [
            (entries, topic, p)
            for entries in (self._entries, self._large)
            for topic, p in entries.items()
            if isinstance(p, TrioProducer)
            and (p.closed or (p.in_flight == 0 and now - p.last_used >= self.idle_timeout))
        ]
        for entries, topic, _producer in idle:
            del entries[topic]  # before any checkpoint: get() now creates a new one
        for _entries, _topic, producer in idle:
            if not producer.closed:
                self.idled_out += 1
                try:
                    await producer.aclose()
                except Exception:
                    log.warning("closing idle producer on %s failed", producer.topic, exc_info=True)
        return len(idle)

    async def run_sweeper(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run in a nursery for the cache's lifetime."""
        task_status.started()
        while not self._closed:
            await trio.sleep(self.sweep_interval)
            await self.sweep()

    async def aclose(self) -> None:
        """Close every producer (in-flight sends complete or fail first)."""
        self._closed = True
        producers = [*self.producers.values(), *self.large_producers.values()]
        self._entries.clear()
        self._large.clear()
        with trio.CancelScope(shield=True):
            for producer in producers:
                try:
                    await producer.aclose()
                except Exception:
                    log.warning("closing producer on %s failed", producer.topic, exc_info=True)


async def broker_max_message_size(admin: PulsarAdmin) -> int:
    """The broker's ``maxMessageSize`` (a super-user call); Pulsar's default when it cannot
    be read. A broker that allows more only means larger chunks than needed; one that allows
    less refuses a message between the two (its publisher gets a nack, or a channel error)."""
    try:
        configuration = await admin.broker_configuration()
        size = int(configuration.get("maxMessageSize", DEFAULT_MAX_MESSAGE_SIZE))
    except (AdminError, ValueError) as error:
        log.warning(
            "cannot read the broker's maxMessageSize (%s): messages above %d octets are sent "
            "in chunks",
            error,
            DEFAULT_MAX_MESSAGE_SIZE,
        )
        return DEFAULT_MAX_MESSAGE_SIZE
    if size <= METADATA_ALLOWANCE:
        return DEFAULT_MAX_MESSAGE_SIZE
    return size


async def _after(other: TrioProducer | _Creating | None) -> None:
    """Wait until everything handed to ``other`` (a topic's other producer) is stored or
    failed: what a send through one of a topic's two producers waits for (module docstring)."""
    if type(other) is TrioProducer and other.in_flight and not other.closed:
        with contextlib.suppress(ClosedError):  # closed meanwhile: its sends are done
            await other.flush()
