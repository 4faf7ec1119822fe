"""TrioConsumer: a pulsar-client consumer whose messages arrive in trio, with bounded buffering.

Messages come from a ``message_listener`` (called on the C++ listener thread). The listener
appends the message to a deque and wakes trio (coalesced, see bridge.py); ``receive()`` takes
from the deque. Nothing leaves the deque unless ``receive()`` returns it, so cancelling a
``receive()`` never loses a message.

What bounds memory (per consumer):

* the C++ receiver queue: at most ``receiver_queue_size`` messages (flow permits are only
  given back to the broker as the listener takes messages out of it), and
* the trio-side deque: when it reaches ``buffer_size`` the listener pauses itself
  (``pause_message_listener``) *from inside the listener call*, so the next message stays in
  the C++ queue, and so on back to the broker. ``receive()`` resumes it once the deque is down
  to half. Pausing and resuming happen under one lock, so a pause and a resume cannot cross.

So at most ``receiver_queue_size + buffer_size`` messages sit in the gateway for one consumer.
For a multi-topic consumer the C++ client has one more queue (``receiver_queue_size``) between
the per-topic consumers and the listener, which pausing does not stop; the bound is then
``buffer_size + receiver_queue_size`` on the trio side plus each topic's own queue (see
docs/pulsar-layer.md for the measurement).

Messages buffered but not acknowledged when the consumer closes are redelivered by Pulsar
(to other consumers of a Shared subscription at once, to this subscription's next consumer
otherwise).
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import trio

from gateway.pulsar.bridge import NativeCall, TrioWaker, ignore_result
from gateway.pulsar.errors import ClosedError
from gateway.pulsar.ids import MessageId

if TYPE_CHECKING:
    from gateway.pulsar.client import PulsarClient

SubscriptionType = Literal["shared", "exclusive", "failover", "key_shared"]
InitialPosition = Literal["latest", "earliest"]


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    subscription_type: SubscriptionType = "shared"
    # Only used when the subscription does not exist yet (the consumer creates it).
    initial_position: InitialPosition = "latest"
    # The C++ prefetch. Small keeps a Shared subscription's work spread over its consumers.
    receiver_queue_size: int = 100
    # The trio-side bound; None means the same as receiver_queue_size.
    buffer_size: int | None = None
    # pulsar-client's default is 60 s, which makes basic.reject(requeue=true) unusable.
    negative_ack_redelivery_delay_ms: int = 100
    consumer_name: str | None = None
    max_total_receiver_queue_size_across_partitions: int = 50_000

    def __post_init__(self) -> None:
        if self.receiver_queue_size < 0:
            raise ValueError("receiver_queue_size must be >= 0")
        if self.buffer_size is not None and self.buffer_size < 1:
            raise ValueError("buffer_size must be >= 1")

    @property
    def effective_buffer_size(self) -> int:
        return self.buffer_size or max(1, self.receiver_queue_size)


def _native_config(options: ConsumerOptions, listener: Any) -> Any:
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
    conf.max_total_receiver_queue_size_across_partitions(
        options.max_total_receiver_queue_size_across_partitions
    )
    conf.negative_ack_redelivery_delay_ms(options.negative_ack_redelivery_delay_ms)
    if options.consumer_name:
        conf.consumer_name(options.consumer_name)
    conf.message_listener(listener)
    return conf


class ReceivedMessage:
    """One message from Pulsar. Properties are str -> str (Pulsar's only kind)."""

    __slots__ = ("_consumer", "native")

    def __init__(self, native: Any, consumer: TrioConsumer) -> None:
        self.native = native  # _pulsar.Message
        self._consumer = consumer

    @property
    def payload(self) -> bytes:
        return bytes(self.native.data())

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.native.properties())

    @property
    def message_id(self) -> MessageId:
        return MessageId.from_native(self.native.message_id())

    @property
    def topic(self) -> str:
        """The topic it came from (matters for multi-topic consumers)."""
        return str(self.native.topic_name())

    @property
    def redelivery_count(self) -> int:
        """How often Pulsar redelivered it (Shared/Key_Shared only; kept in broker memory)."""
        return int(self.native.redelivery_count())

    @property
    def publish_timestamp(self) -> int:
        """Milliseconds since the epoch, set by the producer's client library."""
        return int(self.native.publish_timestamp())

    @property
    def event_timestamp(self) -> int:
        """Milliseconds; 0 when the producer set none."""
        return int(self.native.event_timestamp())

    def ack(self) -> None:
        self._consumer.acknowledge(self)

    def nack(self) -> None:
        self._consumer.negative_acknowledge(self)

    def __repr__(self) -> str:
        return f"ReceivedMessage({self.topic!r}, {self.message_id})"


class TrioConsumer:
    """Receive from trio; acknowledge without waiting. Create with ``PulsarClient.subscribe``."""

    def __init__(
        self,
        client: PulsarClient,
        topics: tuple[str, ...],
        subscription: str,
        options: ConsumerOptions,
    ) -> None:
        self._client = client
        self.topics = topics
        self.subscription = subscription
        self.options = options
        self._native: Any = None  # _pulsar.Consumer, once subscribed
        self._buffer: deque[Any] = deque()
        self._lock = threading.Lock()
        self._capacity = options.effective_buffer_size
        self._low_water = self._capacity // 2
        self._paused = False
        self._stopped = False
        self._closed = False
        self._lot = trio.lowlevel.ParkingLot()
        self._waker = TrioWaker(self._wake_receivers, client.token)

    # --- listener thread ------------------------------------------------------------------

    def _on_message(self, native_consumer: Any, native_msg: Any) -> None:
        """pulsar-client's message listener: never raises, never blocks for long."""
        try:
            if self._closed:
                return  # left unacknowledged: the broker redelivers it after the close
            with self._lock:
                self._buffer.append(native_msg)
                if not self._paused and len(self._buffer) >= self._capacity:
                    self._paused = True
                    native_consumer.pause_message_listener()
            self._waker.wake()
        except BaseException:
            pass

    # --- trio side ------------------------------------------------------------------------

    def _wake_receivers(self) -> None:
        self._lot.unpark_all()

    def _attach(self, native: Any) -> None:
        self._native = native

    @property
    def buffered(self) -> int:
        """Messages received from Pulsar and waiting for ``receive()``."""
        return len(self._buffer)

    @property
    def paused(self) -> bool:
        """Whether the listener is paused because the trio-side buffer is full."""
        return self._paused

    @property
    def closed(self) -> bool:
        return self._closed

    def _take(self) -> ReceivedMessage:
        with self._lock:
            native = self._buffer.popleft()
            if self._paused and not self._stopped and len(self._buffer) <= self._low_water:
                self._paused = False
                self._native.resume_message_listener()
        return ReceivedMessage(native, self)

    def receive_nowait(self) -> ReceivedMessage:
        """A buffered message, or ``trio.WouldBlock``; ClosedError once closed."""
        if self._closed:
            raise ClosedError(f"consumer {self.subscription!r} closed")
        if not self._buffer:
            raise trio.WouldBlock
        return self._take()

    async def receive(self) -> ReceivedMessage:
        """The next message. Cancellation-safe: a cancelled receive takes nothing."""
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._closed:
                raise ClosedError(f"consumer {self.subscription!r} closed")
            if self._buffer:
                break
            await self._lot.park()
        message = self._take()
        # A schedule point that cannot raise Cancelled: the message is already ours.
        await trio.lowlevel.cancel_shielded_checkpoint()
        return message

    def __aiter__(self) -> TrioConsumer:
        return self

    async def __anext__(self) -> ReceivedMessage:
        try:
            return await self.receive()
        except ClosedError:
            raise StopAsyncIteration from None

    def acknowledge(self, message: ReceivedMessage) -> None:
        """Fire-and-forget, like AMQP's basic.ack (pulsar-client groups acks for ~100 ms)."""
        if self._closed:
            raise ClosedError(f"consumer {self.subscription!r} closed")
        self._native.acknowledge_async(message.native, ignore_result)

    def negative_acknowledge(self, message: ReceivedMessage) -> None:
        """Redeliver after ``negative_ack_redelivery_delay_ms`` (to any consumer if Shared)."""
        if self._closed:
            raise ClosedError(f"consumer {self.subscription!r} closed")
        self._native.negative_acknowledge(message.native)

    def stop_receiving(self) -> int:
        """Stop taking new messages and hand the buffered ones back; returns how many.

        For AMQP basic.cancel: deliveries already made can still be acknowledged on this
        consumer, so it stays open; buffered messages are negatively acknowledged so that they
        go to other consumers. (Messages already in the C++ receiver queue stay there until
        :meth:`aclose`, which makes the broker redeliver them.)
        """
        if self._closed or self._stopped:
            return 0
        with self._lock:
            self._stopped = True
            if not self._paused:
                self._paused = True
                self._native.pause_message_listener()
            returned = list(self._buffer)
            self._buffer.clear()
        for native in returned:
            self._native.negative_acknowledge(native)
        return len(returned)

    def _mark_closed(self) -> None:
        self._closed = True
        with self._lock:
            self._buffer.clear()
        self._lot.unpark_all()  # waiting receive() calls raise ClosedError

    async def aclose(self) -> None:
        """Close; unacknowledged messages (delivered or buffered) are redelivered by Pulsar."""
        if self._closed:
            return
        self._mark_closed()
        self._client._forget(self)
        await self._finish(f"close consumer {self.subscription!r}", "close_async")

    async def unsubscribe(self) -> None:
        """Close and delete the subscription (fails if other consumers are attached)."""
        if self._closed:
            raise ClosedError(f"consumer {self.subscription!r} closed")
        self._mark_closed()
        self._client._forget(self)
        await self._finish(f"unsubscribe {self.subscription!r}", "unsubscribe_async")

    async def _finish(self, what: str, method: str) -> None:
        call: NativeCall[None] = NativeCall(what, token=self._client.token)
        getattr(self._native, method)(call.result_callback)
        with trio.CancelScope(shield=True), contextlib.suppress(ClosedError):
            await call.wait(self._client.operation_deadline)

    async def __aenter__(self) -> TrioConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def subscribe(
    client: PulsarClient,
    topics: str | Sequence[str],
    subscription: str,
    options: ConsumerOptions,
) -> TrioConsumer:
    """Subscribe one consumer to one topic or a list of topics (one subscription name each)."""
    topic_list = (topics,) if isinstance(topics, str) else tuple(topics)
    if not topic_list:
        raise ValueError("subscribe needs at least one topic")
    consumer = TrioConsumer(client, topic_list, subscription, options)
    conf = _native_config(options, consumer._on_message)

    def close_abandoned(native: Any) -> None:
        consumer._closed = True
        native.close_async(ignore_result)

    call: NativeCall[Any] = NativeCall(
        f"subscribe {subscription!r} to {', '.join(topic_list)}",
        on_abandoned=close_abandoned,
        token=client.token,
    )
    native_client = client.native
    if hasattr(native_client, "subscribe_async_v2"):
        target: str | list[str] = topic_list[0] if len(topic_list) == 1 else list(topic_list)
        native_client.subscribe_async_v2(target, subscription, conf, call.value_or_error_callback)
    elif len(topic_list) == 1:  # older pulsar-client without the v2 call
        native_client.subscribe_async(topic_list[0], subscription, conf, call.result_value_callback)
    else:
        native_client.subscribe_async_topics(
            list(topic_list), subscription, conf, call.result_value_callback
        )
    native = await call.wait(client.operation_deadline)
    consumer._attach(native)
    client._adopt(consumer)
    return consumer
