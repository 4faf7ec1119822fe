"""TrioConsumer: messages from one or more topics arrive in trio, with bounded buffering.

One TrioConsumer is a set of single-topic pulsar-client consumers (one per topic, all with the
same subscription name) feeding one trio-side buffer: an AMQP queue bound to several topics is
one TrioConsumer. Topics can be added and removed while it runs (queue.bind / queue.unbind).
pulsar-client's own multi-topic consumer is not used: its internal queue keeps feeding the
listener after a pause (measured: up to ``receiver_queue_size`` x topics messages), and its
topic list is fixed at subscribe time.

Messages come from a ``message_listener`` (called on the C++ listener thread). The listener
appends the message to a deque and wakes trio (coalesced, see bridge.py); ``receive()`` takes
from the deque. Nothing leaves the deque unless ``receive()`` returns it, so cancelling a
``receive()`` never loses a message.

The listener is the compiled one (native/listener.c) when it is built (compiled.py): it
queues messages in C without the GIL and wakes trio once per batch, which drains them into the
deque; accessors and acknowledgements of those messages are C calls too. Otherwise it is a
Python listener through pulsar-client's binding, with the GIL for every message. Both keep the
bounds below (the compiled one counts what it queued as buffered).

What bounds memory:

* each topic's C++ receiver queue: at most ``receiver_queue_size`` messages (flow permits go
  back to the broker only as the listener takes messages out of it), and
* the trio-side deque: when it reaches ``buffer_size`` the listener pauses every per-topic
  consumer (``pause_message_listener``) *from inside the listener call*, so the next message
  stays in its C++ queue, and so on back to the broker. ``receive()`` resumes them once the
  deque is down to half. Pausing and resuming happen under one lock, so they cannot cross.

So at most ``buffer_size + topics x receiver_queue_size`` messages sit in the gateway.

With ``ConsumerOptions.priority_of`` the trio-side buffer is ordered instead of first in first
out: ``receive()`` takes the highest priority it holds, the oldest first within one priority
(an AMQP priority queue, gateway/model/priority.py). The priority is computed on the listener
thread, as the message arrives; ``put_back`` returns a message to its place in line.

Messages buffered but not acknowledged when the consumer closes are redelivered by Pulsar
(to other consumers of a Shared subscription at once, to the subscription's next consumer
otherwise). Pulsar does not count such redeliveries in ``redelivery_count``.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import trio

from gateway.priority_buffer import PriorityBuffer
from gateway.pulsar.bridge import (
    NativeCall,
    TrioWaker,
    ignore_result,
    keep_thread_state,
    weakly,
)
from gateway.pulsar.closing import AsyncClosing
from gateway.pulsar.compiled import load as load_compiled
from gateway.pulsar.errors import ClosedError, PulsarClientError
from gateway.pulsar.ids import completes_batch, further, unfinished_batch
from gateway.pulsar.owner import ClientOwner
from gateway.pulsar.priority_level import priority_levels
from gateway.pulsar.received import ListenedMessage, ReceivedMessage, furthest_per_topic

SubscriptionType = Literal["shared", "exclusive", "failover", "key_shared"]
InitialPosition = Literal["latest", "earliest"]

# receive() yields to the scheduler at least this often even when messages are buffered.
_YIELD_EVERY = 16


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    subscription_type: SubscriptionType = "shared"
    # Only used when the subscription does not exist yet (the consumer creates it).
    initial_position: InitialPosition = "latest"
    # The C++ prefetch, per topic. Small keeps a Shared subscription's work spread over its
    # consumers (and bounds memory: see the module docstring).
    receiver_queue_size: int = 100
    # The trio-side bound; None means the same as receiver_queue_size.
    buffer_size: int | None = None
    # pulsar-client's default is 60 s, which makes basic.reject(requeue=true) unusable.
    negative_ack_redelivery_delay_ms: int = 100
    consumer_name: str | None = None
    # Acknowledge messages of a batch one by one (PIP-54). Only for brokers with
    # acknowledgmentAtBatchIndexLevelEnabled=true: any other broker takes such an ack for the
    # whole entry (backend/pulsar/batching.py).
    batch_index_ack: bool = False
    # Orders the trio-side buffer: the priority of a native message (higher first, first in
    # first out among equals). Called on the listener thread: it must be quick, and an
    # exception counts as priority 0.
    priority_of: Callable[[Any], int] | None = None
    # Pulsar's consumer priority level on the subscription (0 is the highest; priority_level.py);
    # None leaves pulsar-client's default, 0.
    priority_level: int | None = None
    # Use the compiled message listener when it is built (compiled.py); False always
    # uses a Python listener through pulsar-client's binding.
    compiled: bool = True

    def __post_init__(self) -> None:
        if self.receiver_queue_size < 0:
            raise ValueError("receiver_queue_size must be >= 0")
        if self.buffer_size is not None and self.buffer_size < 1:
            raise ValueError("buffer_size must be >= 1")

    @property
    def effective_buffer_size(self) -> int:
        return self.buffer_size or max(1, self.receiver_queue_size)


def _native_config(options: ConsumerOptions) -> Any:
    import _pulsar

    conf = _pulsar.ConsumerConfiguration()
    conf.consumer_type(
        {
            "shared": _pulsar.ConsumerType.Shared,
            "exclusive": _pulsar.ConsumerType.Exclusive,
            "failover": _pulsar.ConsumerType.Failover,
            "key_shared": _pulsar.ConsumerType.KeyShared,
        }[options.subscription_type]
    )
    conf.subscription_initial_position(
        _pulsar.InitialPosition.Earliest
        if options.initial_position == "earliest"
        else _pulsar.InitialPosition.Latest
    )
    conf.receiver_queue_size(options.receiver_queue_size)
    conf.negative_ack_redelivery_delay_ms(options.negative_ack_redelivery_delay_ms)
    if options.batch_index_ack:
        conf.batch_index_ack_enabled(True)
    if options.consumer_name:
        conf.consumer_name(options.consumer_name)
    if options.priority_level is not None:
        priority_levels().apply(conf, options.priority_level)
    return conf


class TrioConsumer(AsyncClosing):
    """Receive from trio; acknowledge without waiting. Create with ``PulsarClient.subscribe``."""

    def __init__(self, client: ClientOwner, subscription: str, options: ConsumerOptions) -> None:
        self._client = client
        self.subscription = subscription
        self.options = options
        # topic -> _pulsar.Consumer. Changed on the trio thread under _lock; read under _lock
        # by the listener thread.
        self._natives: dict[str, Any] = {}
        # With the compiled listener: topic -> its tag there (native/listener.c).
        self._tags: dict[str, int] = {}
        # Topics being subscribed (add_topic in progress): a second add_topic of one waits
        # for the first instead of subscribing it twice.
        self._adding: dict[str, trio.Event] = {}
        self._buffer: deque[tuple[Any, Any]] = deque()  # (native consumer, native message)
        # Messages of a batch that ``stop_receiving`` took out of the buffer and did not give
        # back (see there): until ``take_unreceived`` or the close.
        self._kept: list[tuple[Any, Any]] = []
        # Messages the listener handed over after ``stop_receiving``: a listener call already
        # under way when the listeners were paused still completes (pulsar-client does not
        # wait for it), and one arriving then must not be buffered as if receiving went on.
        # Until ``take_unreceived`` or the close (which sends them back to the broker).
        self._late: list[tuple[Any, Any]] = []
        # Per topic, the message ``receive()`` returned last (for a consumer ordered by
        # priority: the one furthest along its topic), whose batch's rest may still be in
        # pulsar-client's receiver queue (``collect_entry_tails``, ``take_batched_read_ahead``).
        # (A message redelivered from further back, taken after part of a batch, hides that
        # batch: its rest then stays in the receiver queue. Comparing positions for every
        # message would cost ~5 µs each.)
        self.last_taken: dict[str, ReceivedMessage] = {}
        # Instead of _buffer when the consumer orders by priority (priority_of).
        self._ordered: PriorityBuffer[tuple[Any, Any]] | None = (
            None if options.priority_of is None else PriorityBuffer()
        )
        self._lock = threading.Lock()
        # The message acknowledged last, until a count has seen the broker apply it: acks
        # are sent in groups (~100 ms) and applied in order, so a count that waits for this
        # one reflects every earlier ack too (backend/pulsar/acks_applied.py).
        self.last_acknowledged: ReceivedMessage | None = None
        self._capacity = options.effective_buffer_size
        self._low_water = self._capacity // 2
        self._paused = False
        self._stopped = False
        self._stop_wanted = False  # stop_receiving was called
        self._closed = False
        self._receives = 0
        self._lot = trio.lowlevel.ParkingLot()
        module = load_compiled() if options.compiled and client.options.compiled else None
        # The compiled listener (native/listener.c), or None: the Python one, _on_message.
        self._listener: Any = None
        self._message_type: type[ReceivedMessage] = ReceivedMessage
        if module is None:
            self._waker = TrioWaker(self._wake_receivers, client.token)
        else:
            # The listener holds the waker: weakly, or this consumer would never be freed.
            self._waker = TrioWaker(weakly(self._drain_listener), client.token)
            self._listener = module.Listener(self._capacity, self._waker.wake)
            self._message_type = ListenedMessage

    # --- listener thread ------------------------------------------------------------------

    def _on_message(self, native_consumer: Any, native_msg: Any) -> None:
        """pulsar-client's message listener: never raises, never blocks for long."""
        try:
            keep_thread_state()
            if self._closed:
                return  # left unacknowledged: the broker redelivers it after the close
            item = (native_consumer, native_msg)
            ordered = self._ordered
            # Outside the lock: priority_of reads the message's properties.
            priority = 0 if ordered is None else self._priority(native_msg)
            with self._lock:
                if self._stopped:
                    # Set aside; woken all the same (``collect_entry_tails`` waits for them).
                    self._late.append(item)
                else:
                    if ordered is None:
                        self._buffer.append(item)
                        size = len(self._buffer)
                    else:
                        ordered.push(item, priority)
                        size = len(ordered)
                    if size >= self._capacity:
                        self._pause(native_consumer)
            self._waker.wake()
        except BaseException:
            pass

    def _priority(self, native_msg: Any) -> int:
        try:
            return self.options.priority_of(native_msg)  # type: ignore[misc]
        except Exception:
            return 0

    def _pause(self, native_consumer: Any) -> None:
        """Under _lock: the buffer is full."""
        if not self._paused:
            self._paused = True
            for native in self._natives.values():
                native.pause_message_listener()
        # Also covers a consumer whose subscribe completed but that is not in _natives yet.
        native_consumer.pause_message_listener()

    # --- trio side ------------------------------------------------------------------------

    def _wake_receivers(self) -> None:
        self._lot.unpark_all()

    def _drain_listener(self) -> None:
        """The compiled listener queued messages: into the buffer with them."""
        if self._closed:
            return
        items = self._listener.drain()
        if not items:
            return
        ordered = self._ordered
        with self._lock:
            if self._stopped:  # queued in C as the listeners were being paused, or since
                self._late.extend(items)  # (woken all the same: ``collect_entry_tails``)
            elif ordered is None:
                self._buffer.extend(items)
            else:
                for item in items:
                    ordered.push(item, self._priority(item[1]))
        self._lot.unpark_all()

    def _listen(self, conf: Any) -> int | None:
        """Set this consumer's listener on a configuration; the compiled listener's tag."""
        if self._listener is not None:
            return int(self._listener.configure(conf))
        # Weakly: pulsar-client's C++ consumer keeps its listener until it destroys the
        # consumer itself, after the close, on its own thread; a bound method there would keep
        # this consumer (its buffer, its native consumers) alive until then.
        conf.message_listener(weakly(self._on_message))
        return None

    def _attach(self, topic: str, native: Any, tag: int | None = None) -> None:
        with self._lock:
            if tag is not None:
                self._listener.attach(tag, native, topic)  # checks the native consumer
                self._tags[topic] = tag
            self._natives[topic] = native
            if self.paused:
                native.pause_message_listener()
        if tag is not None:
            self._drain_listener()  # what it received before it was attached

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(self._natives)

    @property
    def buffered(self) -> int:
        """Messages received from Pulsar and waiting for ``receive()``."""
        ordered = self._ordered
        return len(self._buffer) if ordered is None else len(ordered)

    @property
    def paused(self) -> bool:
        """Whether the listeners are paused because the trio-side buffer is full."""
        return self._paused or (self._listener is not None and self._listener.full)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"consumer {self.subscription!r} closed")

    def _take(self) -> ReceivedMessage:
        ordered = self._ordered
        place = None
        with self._lock:
            if ordered is None:
                native_consumer, native = self._buffer.popleft()
                left = len(self._buffer)
            else:
                place, (native_consumer, native) = ordered.pop_entry()
                left = len(ordered)
            listener = self._listener
            if listener is not None:
                if listener.left(1) and not self._stopped:
                    for each in self._natives.values():
                        each.resume_message_listener()
            elif self._paused and not self._stopped and left <= self._low_water:
                self._paused = False
                for each in self._natives.values():
                    each.resume_message_listener()
        message = self._message_type(native, native_consumer, self, place)
        if place is None:
            self.last_taken[message.topic] = message
        else:
            self._note_taken(message)
        return message

    def _note_taken(self, message: ReceivedMessage) -> None:
        """``message`` left the consumer's hands: the furthest along its topic so far?"""
        before = self.last_taken.get(message.topic)
        if before is None or further(message.batch_position, before.batch_position):
            self.last_taken[message.topic] = message

    def receive_nowait(self) -> ReceivedMessage:
        """A buffered message, or ``trio.WouldBlock``; ClosedError once closed."""
        if self._closed:  # ``_check_open`` raises; not called per message while open
            self._check_open()
        if not (self._buffer or self._ordered):
            raise trio.WouldBlock
        return self._take()

    async def receive(self) -> ReceivedMessage:
        """The next message. Cancellation-safe: a cancelled receive takes nothing.

        Always a cancellation point; a schedule point when it waits, and on every
        ``_YIELD_EVERY``-th message taken straight from the buffer (a scheduling round per
        message cost a large share of receive throughput, as in TrioProducer.submit).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        waited = False
        while True:
            self._check_open()
            if self._buffer or self._ordered:
                break
            waited = True
            await self._lot.park()
        message = self._take()
        self._receives += 1
        if not waited and self._receives % _YIELD_EVERY == 0:
            # A schedule point that cannot raise Cancelled: the message is already ours.
            await trio.lowlevel.cancel_shielded_checkpoint()
        return message

    async def wait_buffered(self, count: int) -> None:
        """Until at least ``count`` messages are buffered (or the buffer is full, or the
        consumer closed): messages known to be on their way have arrived."""
        while self.buffered < count and not self.paused and not self._closed:
            await self._lot.park()

    def __aiter__(self) -> TrioConsumer:
        return self

    async def __anext__(self) -> ReceivedMessage:
        try:
            return await self.receive()
        except ClosedError:
            raise StopAsyncIteration from None

    def acknowledge(self, message: ReceivedMessage) -> None:
        """Fire-and-forget, like AMQP's basic.ack (pulsar-client groups acks for ~100 ms).

        An ack for a topic removed since (or failing in pulsar-client) is dropped: the message
        is redelivered, which is what AMQP promises for unacknowledged messages anyway.
        """
        if self._closed:  # as in ``receive_nowait``
            self._check_open()
        message.send_acknowledgement()
        self.last_acknowledged = message

    def negative_acknowledge(self, message: ReceivedMessage) -> None:
        """Redeliver after ``negative_ack_redelivery_delay_ms`` (to any consumer if Shared)."""
        self._check_open()
        message.send_negative_acknowledgement()

    def put_back(self, message: ReceivedMessage) -> bool:
        """Return a message taken by ``receive()`` (and not acknowledged) to its place in line
        in its priority, for a later ``receive()``: a requeue that keeps it here. Only for a
        consumer ordered by priority that still receives; False (nothing done) otherwise."""
        ordered = self._ordered
        if ordered is None or self._closed or self._stopped or message.place is None:
            return False
        if message.topic not in self._natives:
            return False  # its topic was removed meanwhile: Pulsar redelivers it
        priority = self._priority(message.native)
        with self._lock:
            ordered.restore((message.native_consumer, message.native), priority, message.place)
        if self._listener is not None:
            self._listener.left(-1)  # held again
        self._lot.unpark_all()
        return True

    def stop_receiving(
        self, given_back: Callable[[ReceivedMessage], None] | None = None, *, hand_back: bool = True
    ) -> int:
        """Stop taking new messages and hand the buffered ones back; returns how many. With
        ``hand_back`` false they stay buffered instead, and go back, uncounted, when the
        consumer closes (a negative acknowledgement raises the redelivery count that other
        replicas read as "delivered before"); returns 0.

        For AMQP basic.cancel: deliveries already made can still be acknowledged on this
        consumer, so it stays open; buffered messages are negatively acknowledged so that they
        go to other consumers (each is passed to ``given_back``: Pulsar will count a
        redelivery of a message nobody saw). (Messages already in the C++ receiver queues stay
        there until :meth:`aclose`, which makes the broker redeliver them.)
        """
        self._stop_wanted = True  # also while ``take_batched_read_ahead`` has it stopped
        if self._closed or self._stopped:
            return 0
        if self._listener is not None:
            self._drain_listener()  # what the compiled listener queued goes back too
        with self._lock:
            self._stopped = True
            self._paused = True
            for native in self._natives.values():
                native.pause_message_listener()
            if not hand_back:
                return 0
            returned = self._take_all()
        for item in returned:
            native_consumer, native = item
            message = self._message_type(native, native_consumer, self)
            # A negative acknowledgement sends the whole entry back, and the other messages
            # of a batch may be delivered and unacknowledged: those stay, and go back (without
            # the ones acknowledged by then, where the broker tracks batch indexes) when the
            # consumer closes, unless ``take_unreceived`` takes them first. So does a chunked
            # message, which a negative acknowledgement would not bring back at all
            # (``ReceivedMessage.chunked``).
            if message.in_batch or message.chunked:
                self._kept.append(item)
                continue
            if given_back is not None:
                given_back(message)
            message.send_negative_acknowledgement()
        return len(returned)

    async def collect_entry_tails(self, wait: float) -> None:
        """Stop receiving (as ``take_unreceived``) and bring into the gateway's hands the rest
        of each batch that ``receive()`` returned part of, for ``take_unreceived`` to return,
        on a broker that acknowledges whole entries (backend/pulsar/split_batches.py).

        A batch arrives whole in pulsar-client's receiver queue, but the listener hands it
        over one message at a time and may have been paused halfway (the buffer full, or
        ``stop_receiving``). What is left there cannot be acknowledged, and closing the
        consumer makes Pulsar dispatch the whole entry again, the messages already
        acknowledged with it. So the listener of each such topic is resumed until the batch's
        last message has come, or ``wait`` seconds have passed; what comes with it is set
        aside as well, and goes back at the close."""
        self.stop_receiving(hand_back=False)
        await self._bring_entry_tails(wait)

    async def take_batched_read_ahead(self, wait: float) -> list[ReceivedMessage]:
        """Take out every message read ahead that shares its entry with others (the rest of a
        batch part of which ``receive()`` returned included, brought out of the receiver queue
        as ``collect_entry_tails`` does), oldest first, for the caller to settle (move them by
        copy: backend/pulsar/held_back.py). The other messages read ahead stay: in line, and
        receiving goes on; or, from a consumer stopped (``stop_receiving``), until the close."""
        if self._closed:
            return []
        receiving = not self._stopped
        if receiving:
            self._stop_wanted = False
            with self._lock:
                self._stopped = True  # what the listener hands over meanwhile is set aside
                for native in self._natives.values():
                    native.pause_message_listener()
        await self._bring_entry_tails(wait)
        make = self._message_type
        with self._lock:
            items, self._kept = self._kept, []
            batched = [make(native, native_consumer, self) for native_consumer, native in items]
            taken = [message for message in batched if message.in_batch]
            for message in taken:  # taken out as ``receive()`` takes: their tails are here
                self._note_taken(message)
            stay = [
                item for item, message in zip(items, batched, strict=True) if not message.in_batch
            ]
            if not receiving or self._closed or self._stop_wanted:
                self._kept = stay  # stopped (meanwhile): they go back at the close
                return taken
            ordered = self._ordered
            if ordered is None:
                self._buffer.extend(stay)
            else:
                for item in stay:
                    ordered.push(item, self._priority(item[1]))
            if self._listener is not None:
                self._listener.left(-len(stay))  # held again
            self._stopped = self._paused = False
            for native in self._natives.values():
                native.resume_message_listener()
        self._lot.unpark_all()
        return taken

    def holds_batched(self) -> bool:
        """Whether messages of a batch wait here (read ahead, or the rest of a batch part of
        which ``receive()`` returned, in the receiver queue), for ``take_batched_read_ahead``.
        Reads each buffered message's id: for occasional checks, not per message."""
        make = self._message_type
        with self._lock:
            waiting = list(self._buffer if self._ordered is None else self._ordered)
        if any(make(native, native_consumer, self).in_batch for native_consumer, native in waiting):
            return True
        return any(unfinished_batch(message.batch_position) for message in self.last_taken.values())

    async def _bring_entry_tails(self, wait: float) -> None:
        """Stopped: ``collect_entry_tails``'s work, for each batch the listener handed over
        part of (to ``receive()``, or still here); everything read ahead ends in _kept, the
        listeners paused."""
        if self._listener is not None:
            self._drain_listener()
        with self._lock:
            self._set_aside()
        make = self._message_type
        handed = [*self.last_taken.values(), *(make(n, c, self) for c, n in self._kept)]
        wanted = {
            topic: position
            for topic, position in furthest_per_topic(handed).items()
            if topic in self._natives and unfinished_batch(position)
        }
        seen = len(self._kept)
        with trio.move_on_after(wait):
            while wanted:
                if self._listener is not None:
                    self._drain_listener()
                with self._lock:
                    self._set_aside()
                    for native_consumer, native in self._kept[seen:]:
                        arrived = self._message_type(native, native_consumer, self)
                        wanted_there = wanted.get(arrived.topic)
                        if wanted_there is not None and completes_batch(
                            arrived.batch_position, wanted_there
                        ):
                            del wanted[arrived.topic]
                    seen = len(self._kept)
                    for topic in wanted:
                        native = self._natives.get(topic)  # None: removed meanwhile
                        if native is not None:
                            native.resume_message_listener()
                if wanted:
                    await self._lot.park()
        with self._lock:
            self._set_aside()
            for native in self._natives.values():
                native.pause_message_listener()

    def _set_aside(self) -> None:
        """Under _lock, stopped: the buffer, then what came since the stop, into _kept (the
        order ``take_unreceived`` returns them in)."""
        self._kept.extend(self._take_all())
        if self._listener is not None:
            self._listener.left(len(self._late))
        self._kept.extend(self._late)
        self._late = []

    def take_unreceived(self) -> list[ReceivedMessage]:
        """Stop receiving (``stop_receiving`` without handing back) and take every message
        read ahead that ``receive()`` never returned and that is still in the gateway
        (buffered, kept by ``stop_receiving``, or handed over by a listener call that was
        under way at the stop), oldest first: for the caller to settle
        before it closes the consumer. What pulsar-client's receiver queues still hold is
        not among them (it goes back to the broker at the close)."""
        if self._closed:
            return []
        self.stop_receiving(hand_back=False)
        if self._listener is not None:
            self._drain_listener()  # what the compiled listener queued before the pause
        with self._lock:
            items = self._kept + self._take_all() + self._late
            if self._listener is not None:
                self._listener.left(len(self._late))
            self._kept = []
            self._late = []
        make = self._message_type
        return [make(native, native_consumer, self) for native_consumer, native in items]

    def _take_all(self) -> list[tuple[Any, Any]]:
        """Under _lock: empty the buffer; its items in the order receive() would take them."""
        ordered = self._ordered
        if ordered is None:
            items = list(self._buffer)
            self._buffer.clear()
        else:
            items = list(ordered)
            ordered.clear()
        if self._listener is not None:
            self._listener.left(len(items))
        return items

    async def add_topic(self, topic: str) -> None:
        """Also consume ``topic`` (same subscription name). No-op if already consumed."""
        self._check_open()
        adding = self._adding.get(topic)
        if adding is not None:
            await adding.wait()
            return
        if topic in self._natives:
            return
        adding = self._adding[topic] = trio.Event()
        try:
            native, tag = await _subscribe_one(self, topic)
            if self._closed:  # closed while we were subscribing
                native.close_async(ignore_result)
                self._check_open()
            self._attach(topic, native, tag)
        finally:
            del self._adding[topic]
            adding.set()

    async def remove_topic(self, topic: str) -> int:
        """Stop consuming ``topic``: close its consumer, drop its buffered messages.

        Returns how many buffered messages were dropped; Pulsar redelivers them (and any
        delivered but unacknowledged ones) to the subscription's other consumers. Deliveries
        from this topic can no longer be acknowledged.
        """
        with self._lock:
            native = self._natives.pop(topic, None)
            if native is None:
                return 0

            def elsewhere(item: tuple[Any, Any]) -> bool:
                return bool(item[1].topic_name() != topic)

            if self._ordered is not None:
                dropped = len(self._ordered.keep(elsewhere))
            else:
                kept = deque(filter(elsewhere, self._buffer))
                dropped = len(self._buffer) - len(kept)
                self._buffer = kept
            # What was set aside since a stop goes back with this topic's consumer too.
            self._kept = list(filter(elsewhere, self._kept))
            self.last_taken.pop(topic, None)
            late = list(filter(elsewhere, self._late))
            dropped_late = len(self._late) - len(late)
            self._late = late
            tag = self._tags.pop(topic, None)
            if tag is not None:
                self._listener.left(dropped + dropped_late)
                dropped += self._listener.detach(tag)
        await _finish(self._client, native, f"close consumer {self.subscription!r} on {topic}")
        return dropped

    def mark_closed(self) -> list[Any]:
        """Refuse receives (waiting ones raise ClosedError); the native consumers, to close."""
        self._closed = True
        with self._lock:
            self._take_all()
            self._kept.clear()
            self._late.clear()
            self.last_taken.clear()
            natives = list(self._natives.values())
            self._natives.clear()
            if self._listener is not None:
                self._listener.close()
        self._lot.unpark_all()  # waiting receive() calls raise ClosedError
        return natives

    async def aclose(self) -> None:
        """Close; unacknowledged messages (delivered or buffered) are redelivered by Pulsar."""
        if self._closed:
            return
        natives = self.mark_closed()
        self._client.forget(self)
        await _finish_all(self._client, natives, f"close consumer {self.subscription!r}")

    async def unsubscribe(self) -> None:
        """Close and delete the subscription on every topic (fails if others are attached)."""
        self._check_open()
        natives = self.mark_closed()
        self._client.forget(self)
        await _finish_all(
            self._client, natives, f"unsubscribe {self.subscription!r}", "unsubscribe_async"
        )


async def _finish(client: ClientOwner, native: Any, what: str, method: str = "close_async") -> None:
    call: NativeCall[None] = NativeCall(what, token=client.token)
    getattr(native, method)(call.result_callback)
    with trio.CancelScope(shield=True), contextlib.suppress(ClosedError):
        await call.wait(client.operation_deadline)


async def _finish_all(
    client: ClientOwner, natives: list[Any], what: str, method: str = "close_async"
) -> None:
    """Close (or unsubscribe) several native consumers concurrently; first error wins."""
    errors: list[PulsarClientError] = []

    async def one(native: Any) -> None:
        try:
            await _finish(client, native, what, method)
        except PulsarClientError as exc:
            errors.append(exc)

    with trio.CancelScope(shield=True):
        async with trio.open_nursery() as nursery:
            for native in natives:
                nursery.start_soon(one, native)
    if errors:
        raise errors[0]


async def _subscribe_one(consumer: TrioConsumer, topic: str) -> tuple[Any, int | None]:
    """The native consumer, and its tag in the compiled listener (if that is in use)."""
    client = consumer._client
    conf = _native_config(consumer.options)
    tag = consumer._listen(conf)

    def close_abandoned(native: Any) -> None:
        native.close_async(ignore_result)

    call: NativeCall[Any] = NativeCall(
        f"subscribe {consumer.subscription!r} to {topic}",
        on_abandoned=close_abandoned,
        token=client.token,
    )
    native_client = client.native
    if hasattr(native_client, "subscribe_async_v2"):
        native_client.subscribe_async_v2(
            topic, consumer.subscription, conf, call.value_or_error_callback
        )
    else:  # older pulsar-client without the v2 call
        native_client.subscribe_async(
            topic, consumer.subscription, conf, call.result_value_callback
        )
    try:
        return await call.wait(client.operation_deadline), tag
    except BaseException:
        if tag is not None and not consumer.closed:
            consumer._listener.detach(tag)  # what an abandoned consumer still delivers
        raise


async def subscribe(
    client: ClientOwner,
    topics: str | Sequence[str],
    subscription: str,
    options: ConsumerOptions,
) -> TrioConsumer:
    """One TrioConsumer on one or several topics, with one subscription name on each.

    All-or-nothing: if any topic fails, the ones that succeeded are closed again. No topic at
    all is allowed: the consumer waits for ``add_topic`` (an AMQP queue none of whose topics
    has had a message yet has no subscription in Pulsar; docs/fleet.md, "Lazy subscriptions").
    """
    topic_list = [topics] if isinstance(topics, str) else list(dict.fromkeys(topics))
    consumer = TrioConsumer(client, subscription, options)
    failures: list[BaseException] = []

    async def one(topic: str) -> None:
        try:
            consumer._attach(topic, *await _subscribe_one(consumer, topic))
        except PulsarClientError as exc:
            failures.append(exc)

    try:
        async with trio.open_nursery() as nursery:
            for topic in topic_list:
                nursery.start_soon(one, topic)
    except BaseException:
        await _finish_all(client, consumer.mark_closed(), f"close consumer {subscription!r}")
        raise
    if failures:
        await _finish_all(client, consumer.mark_closed(), f"close consumer {subscription!r}")
        raise failures[0]
    client.adopt(consumer)
    return consumer
