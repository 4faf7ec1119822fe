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
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import trio

from gateway.pulsar.client import PulsarClient
from gateway.pulsar.errors import ClosedError
from gateway.pulsar.producer import ProducerOptions, SendHandle, TrioProducer

log = logging.getLogger(__name__)


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
    ) -> None:
        if idle_timeout <= 0:
            raise ValueError("idle_timeout must be > 0")
        self._client = client
        self.options = options or ProducerOptions()
        self.idle_timeout = idle_timeout
        self.sweep_interval = sweep_interval or max(0.01, idle_timeout / 4)
        self._entries: dict[str, TrioProducer | _Creating] = {}
        self._closed = False
        self.created = 0  # producers created so far (for metrics and tests)
        self.idled_out = 0  # producers closed by the sweeper

    @property
    def producers(self) -> Mapping[str, TrioProducer]:
        return {t: p for t, p in self._entries.items() if isinstance(p, TrioProducer)}

    def __len__(self) -> int:
        return len(self.producers)

    async def get(self, topic: str) -> TrioProducer:
        """The topic's producer, creating it if needed. Raises what creation raises."""
        while True:
            if self._closed:
                raise ClosedError("producer cache closed")
            entry = self._entries.get(topic)
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
            self._entries[topic] = creating
            try:
                producer = await self._client.create_producer(topic, self.options)
            except BaseException:
                if self._entries.get(topic) is creating:
                    del self._entries[topic]
                raise
            finally:
                creating.done.set()
            if self._closed:
                await producer.aclose()
                raise ClosedError("producer cache closed")
            self._entries[topic] = producer
            self.created += 1
            producer.last_used = trio.current_time()
            return producer

    async def submit(
        self, topic: str, payload: bytes, properties: Mapping[str, str] | None = None
    ) -> SendHandle:
        """``get(topic)`` then ``submit_grouped`` (the handle completes with the messages
        submitted with it before this task yields: producer.py); retries once if the
        producer closed under us."""
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

    def submit_now(
        self, topic: str, payload: bytes, properties: Mapping[str, str] | None = None
    ) -> SendHandle | None:
        """``submit`` when it need not wait (the topic's producer is open and has a free
        slot): the message joins its group; None, with nothing done, otherwise."""
        entry = self._entries.get(topic)
        if type(entry) is TrioProducer and not entry.closed:
            # The producer stamps its last use itself when the message joins a group; the
            # sweeper cannot close it meanwhile (no checkpoint, and then it has one in flight).
            return entry.submit_grouped_nowait(payload, properties)
        return None

    def _discard(self, topic: str, producer: TrioProducer) -> None:
        if self._entries.get(topic) is producer:
            del self._entries[topic]

    async def sweep(self) -> int:
        """Close producers idle for ``idle_timeout`` with nothing in flight; returns how many."""
        now = trio.current_time()
        idle = [
            (topic, p)
            for topic, p in self._entries.items()
            if isinstance(p, TrioProducer)
            and (p.closed or (p.in_flight == 0 and now - p.last_used >= self.idle_timeout))
        ]
        for topic, _producer in idle:
            del self._entries[topic]  # before any checkpoint: get() now creates a new one
        for _topic, producer in idle:
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
        producers = list(self.producers.values())
        self._entries.clear()
        with trio.CancelScope(shield=True):
            for producer in producers:
                try:
                    await producer.aclose()
                except Exception:
                    log.warning("closing producer on %s failed", producer.topic, exc_info=True)
