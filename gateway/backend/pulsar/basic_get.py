"""Basic.Get on Pulsar: one small consumer per queue serves the Gets of a burst.

None is created per call (a Pulsar consumer costs a round trip to open), and it goes when idle
so that it does not hold messages back from the queue's other consumers. Get-Ok's
message_count is counted by the broker on the first Get of a burst, then counted down.

A getter starts reading ahead one message per topic. A client that polls (a run of Gets,
each asked with nothing it got left unsettled) then gets a hot one reading ahead
``GET_HOT_READ_AHEAD``: its Gets are answered from memory instead of each waiting on
pulsar-client's refill, which costs a flow permit and a dispatch per message.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from gateway.amqp.errors import AMQPError
from gateway.backend.interface import SubscriptionEnded
from gateway.backend.pulsar.delivery import PulsarDelivery, PulsarQueueSubscription
from gateway.backend.pulsar.held_until_closed import HeldUntilClosed

log = logging.getLogger("gateway.pulsar.vhost")

# Messages per topic the Basic.Get consumer reads ahead. Each Get takes the one read ahead and
# the next waits for pulsar-client's refill (a flow permit, the broker's dispatch: ~2 ms of a
# Get's latency). Reading ahead 5 halved that, but a retired getter whose client still holds
# a message stays connected with free permits, and Pulsar dispatched the messages it handed
# back to it again, out of reach of the queue's new consumer (the Java client's settlement
# scenario "get, then consume with prefetch 1" stalled): one it is.
GET_READ_AHEAD = 1
# What a hot getter reads ahead per topic (module docstring): flow permits go back in batches
# of half of it. The swap happens only with nothing outstanding, so what a client holds never
# keeps the hot getter open (see HOT_AFTER); it closes after GETTER_IDLE like any other.
GET_HOT_READ_AHEAD = 32
# Gets in a row, each asked with nothing got from the getter left unsettled, after which the
# getter is swapped for a hot one. A client holding a Get's message across a Basic.Consume
# (the Java client's "get, then consume with prefetch 1") does so on its first Gets, with a
# getter reading ahead one; a hot getter retired while its client holds a message keeps what
# its pulsar-client queue holds (up to GET_HOT_READ_AHEAD) until that message is settled.
HOT_AFTER = 8
# How long Basic.Get waits for a message on its way from Pulsar before answering Get-Empty.
GET_WAIT = 0.25
# How long after its getter gave a message back (a reject with requeue, a channel's close) a
# Get waits for it: Pulsar redelivers a negative acknowledgement after the consumer's delay
# (100 ms), which pulsar-client sends from a timer (delivery_records.NACKS_SENT_AFTER).
RETURN_WAIT = 1.0
# A Basic.Get consumer unused this long is closed (its prefetched messages go back).
GETTER_IDLE = 1.0
# Get-Ok's message_count: counted by the broker on the first Basic.Get of a burst, then
# counted down by each Get; counted again when older than this (others publish and consume
# meanwhile) or when a Get finds a message the count said was not there.
GET_COUNT_FRESH = 1.0


class BasicGetConsumers:
    """The Basic.Get consumers of one vhost's queues."""

    def __init__(
        self,
        start_soon: Callable[[Callable[[], Awaitable[None]]], None],
        open_consumer: Callable[[str, int], Awaitable[PulsarQueueSubscription]],
        count_ready: Callable[[str], Awaitable[int]],
    ) -> None:
        self._start_soon = start_soon
        # open_consumer(queue, read_ahead): a consumer of every topic of the queue, reading
        # ahead by that many messages per topic.
        self._open_consumer = open_consumer
        # count_ready(queue): the queue's ready messages (Queue.Declare-Ok's count).
        self._count_ready = count_ready
        #: Per queue, its Basic.Get consumer.
        self.by_queue: dict[str, PulsarQueueSubscription] = {}
        #: Per queue, when its consumer last served a Get (trio time).
        self.used: dict[str, float] = {}
        #: Per queue: (messages left at the last Basic.Get, when the broker last counted them).
        self.left_after_get: dict[str, tuple[int, float]] = {}
        #: Per queue, Gets in a row asked with nothing outstanding (HOT_AFTER).
        self.settled_gets: dict[str, int] = {}
        #: The hot getters (GET_HOT_READ_AHEAD), among ``by_queue``.
        self.hot: set[PulsarQueueSubscription] = set()
        #: Per queue, its getters taken out of ``by_queue`` and not closed yet (retired ones
        #: waiting for their deliveries to be settled, or closing): ``end`` closes them too.
        #: Once closed, a getter is no longer ``hot`` either.
        self.leaving: HeldUntilClosed[PulsarQueueSubscription] = HeldUntilClosed(
            start_soon, self.hot.discard
        )
        # Per queue, the Gets under way (a getter is swapped only when no other is).
        self._getting: dict[str, int] = {}
        # Per queue, a swap for a hot getter under way (set when done).
        self._heating: dict[str, trio.Event] = {}
        self._sweeping = False

    async def get(
        self, queue: str, recheck_queue: Callable[[], Awaitable[object]]
    ) -> tuple[PulsarDelivery, int] | None:
        """One message of ``queue`` and the count left, or None (Get-Empty).
        ``recheck_queue`` raises the channel error if the queue went meanwhile."""
        getting = self._getting
        getting[queue] = getting.get(queue, 0) + 1
        try:
            return await self._get(queue, recheck_queue)
        finally:
            if getting[queue] == 1:
                del getting[queue]
            else:
                getting[queue] -= 1

    async def _get(
        self, queue: str, recheck_queue: Callable[[], Awaitable[object]]
    ) -> tuple[PulsarDelivery, int] | None:
        getter = self.by_queue.get(queue)
        if getter is not None and not getter.closed and self._polled(queue, getter):
            await self._heat(queue, getter)
            getter = self.by_queue.get(queue)
        if getter is None or getter.closed:
            if getter is not None:
                self.hot.discard(getter)
            getter = await self._open_consumer(queue, GET_READ_AHEAD)
            self.by_queue[queue] = getter
            if not self._sweeping:
                self._sweeping = True
                self._start_soon(self._sweep)
        self.used[queue] = trio.current_time()
        await getter.filled()  # a priority queue's getter reads the queue first
        delivery = getter.receive_nowait()
        if delivery is None:
            try:
                with trio.move_on_after(_wait_for(getter)):
                    delivery = await getter.receive()
            except SubscriptionEnded:
                # Retired while we waited (a consumer of the queue started), or the queue
                # went (404, as a Get arriving a moment later would find).
                await recheck_queue()
        if delivery is None:
            self.left_after_get.pop(queue, None)
            return None
        return delivery, await self._messages_left(queue, fallback=getter.consumer.buffered)

    def _polled(self, queue: str, getter: PulsarQueueSubscription) -> bool:
        """Count this Get in the queue's run of Gets asked with nothing outstanding; whether
        the run is long enough for a cold ``getter`` to be swapped for a hot one now."""
        if getter.outstanding:
            self.settled_gets.pop(queue, None)
            return False
        settled = self.settled_gets[queue] = self.settled_gets.get(queue, 0) + 1
        return settled >= HOT_AFTER and getter not in self.hot and self._getting[queue] == 1

    async def _heat(self, queue: str, cold: PulsarQueueSubscription) -> None:
        """Swap the queue's cold getter, with nothing outstanding, for a hot one. The cold
        one is closed first, so that what it read ahead goes back to Pulsar (not counted as
        a redelivery) and the hot one reads it in its place in line. It stays in
        ``by_queue`` meanwhile: a Basic.Consume or the queue's deletion that retires it
        meanwhile leaves the hot one unused (closed), and ``end`` waits for the swap."""
        done = self._heating[queue] = trio.Event()
        try:
            await cold.close()
            if self.by_queue.get(queue) is not cold:
                return
            hot = await self._open_consumer(queue, GET_HOT_READ_AHEAD)
            if self.by_queue.get(queue) is not cold:
                await hot.close()
                return
            self.by_queue[queue] = hot
            self.hot.add(hot)
        finally:
            del self._heating[queue]
            done.set()

    async def _messages_left(self, queue: str, *, fallback: int) -> int:
        """Get-Ok's message_count: the messages ready in ``queue`` after the one just taken.

        Counting asks the broker (two admin calls per topic of the queue), so a burst of Gets
        counts once and then counts down. The message just taken is outstanding, so a fresh
        count leaves it out. Should counting fail, the message is not lost over it: the
        answer is then what the Get consumer has buffered (a lower bound)."""
        now = trio.current_time()
        known = self.left_after_get.get(queue)
        if known is not None and known[0] > 0 and now - known[1] < GET_COUNT_FRESH:
            left = known[0] - 1
            self.left_after_get[queue] = (left, known[1])
            return left
        try:
            left = await self._count_ready(queue)
        except AMQPError as error:
            log.warning("Get-Ok message_count for '%s' not counted: %s", queue, error)
            return fallback
        self.left_after_get[queue] = (left, now)
        return left

    async def close(self, queue: str) -> None:
        """Retire the queue's Basic.Get consumer: what it prefetched goes back to the queue
        at once, and it closes when the messages it handed out are settled."""
        getter = self._forget(queue)
        if getter is None:
            return
        if not getter.outstanding:
            # Nothing of it is held by a client: closed before this returns, with what it
            # read ahead still buffered, so that all of that is back in the queue (uncounted,
            # in its place in line) before the caller's consumer subscribes. Handed back by
            # negative acknowledgements instead, each topic's share would come back at its
            # own timer's tick while the new consumer already reads (a priority queue's
            # consumer got a lower priority first: the Java client's "get, then consume with
            # prefetch 1"), and each message's redelivery count would rise (other replicas
            # read it as "delivered before").
            await getter.close()
            return
        getter.retire(self._start_soon)

    async def end(self, queue: str) -> None:
        """The queue was deleted: its Basic.Get consumers, the current one and those retired
        or closing, are closed before this returns, so before the queue's subscriptions are
        removed. A retired getter still open then (waiting for a client to settle what it got,
        or its close running in the background) was disconnected by the removal, and
        pulsar-client subscribed it again, creating the subscription anew: a queue declared
        again under the name shared it, and its read-ahead held the new queue's first message
        until it closed, after the second had been got (Basic.Get returned "2" before "1":
        amqp091-go's TestRabbitMQQueueNackMultipleRequeue, issue 34). Their deliveries still
        unsettled can no longer be settled, as a deleted queue's consumers' cannot."""
        self._forget(queue)
        heating = self._heating.get(queue)
        if heating is not None:
            await heating.wait()  # its hot getter is closed unused by then (``_heat``)
        for leaving in self.leaving.of(queue):
            await leaving.end()  # one closing already: until it is closed

    def _forget(self, queue: str) -> PulsarQueueSubscription | None:
        """Drop the queue's current getter and what is kept about its Gets; the getter, if
        there was one, is held in ``leaving`` until it is closed (and returned)."""
        getter = self.by_queue.pop(queue, None)
        self.used.pop(queue, None)
        self.left_after_get.pop(queue, None)
        self.settled_gets.pop(queue, None)
        if getter is not None:
            self.leaving.hold(queue, getter)
        return getter

    async def _sweep(self) -> None:
        try:
            while self.by_queue:
                await trio.sleep(GETTER_IDLE / 2)
                now = trio.current_time()
                for queue, used in list(self.used.items()):
                    getter = self.by_queue.get(queue)
                    # Not while its client holds messages it got: a new getter could not
                    # see what this one's read-ahead took meanwhile (one message per topic)
                    # until they are settled.
                    if now - used >= GETTER_IDLE and (getter is None or not getter.outstanding):
                        await self.close(queue)
        finally:
            self._sweeping = False

    async def aclose(self) -> None:
        for getter in list(self.by_queue.values()):
            await getter.close()
        self.by_queue.clear()
        self.hot.clear()


def _wait_for(getter: PulsarQueueSubscription) -> float:
    """How long a Get waits for a message from ``getter``: ``GET_WAIT``, or longer while one it
    gave back is on its way again. RabbitMQ has a requeued message back in the queue at once,
    and a Get right after the requeue finds it (the Java client's RequeueOnClose; a Get after
    a channel's close missed it under load when Pulsar's redelivery took over GET_WAIT)."""
    nacked = getter.last_nack
    if nacked is None:
        return GET_WAIT
    return max(GET_WAIT, nacked + RETURN_WAIT - trio.current_time())
