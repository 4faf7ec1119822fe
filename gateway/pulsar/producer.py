"""TrioProducer: pipelined sends with in-order confirmations and bounded in-flight messages.

A publisher channel calls :meth:`TrioProducer.submit` (or :meth:`~TrioProducer.send_nowait`)
for each message and gets a :class:`SendHandle` at once; the handle completes when Pulsar has
persisted the message (or failed to). Handles of one producer complete in send order: the C++
producer invokes send callbacks in order, and the trio side drains them from one FIFO, so a
channel can confirm publishes in order (and coalesce them with ``multiple=true``).

Grouped sends (:meth:`TrioProducer.submit_grouped`, what the gateway's publish path uses):
the messages a task submits before it next yields are handed to pulsar-client together, and
only the last of them carries a send callback; its handle stands for the whole group. Pulsar
completes a producer's sends in order and fails every pending one at once (send timeout,
close, quota), so the last message's result is the group's: one call from pulsar-client's I/O
thread into Python per group instead of one per message, which is what made the I/O thread
wait for the GIL (and stop reading the broker's connection) while the trio thread published.
The failures pulsar-client reports synchronously, without queueing the message, are kept out
of a group: a closed producer stays closed (so the last message fails too), the in-flight
limit is ours, and messages above ``GROUP_MAX_BYTES`` (which could exceed the broker's
``maxMessageSize``) are sent one by one. The price: a group fails as a whole, so a failure
nacks messages of it that Pulsar may have stored (publishers then send them again). A message
submitted while nothing is in flight is a group of its own, sent at once: there is no earlier
send to wait behind, and a publisher waiting for each confirm has nothing more to add to it.
Any other group goes once its task yields, through the run's group flusher (group_flusher.py:
a system task, woken without the system calls of ``run_sync_soon``).

With the compiled module (compiled.py) a group is built and sent from C: each message is built
at its submit (so a refused property still fails there), and the group goes to pulsar-client
in one call whose last send's receipt is queued without the GIL; the sender then rings the
run's doorbell (doorbell.py), also without the GIL, once per batch of receipts. A batching
producer is flushed after each group there: the group is one entry, sent at once, not held
for ``batching_max_publish_delay_ms`` (through the binding it is: its ``flush_async``
deadlocks, see ``flush``). Receipts of the sends made through the
binding (plain ``submit``, and a message whose property has a NUL character, which Pulsar's C
API cannot carry) are queued there too, so handles still complete in the order pulsar-client
reported.

Back-pressure: at most ``max_pending_messages`` messages are in flight per producer;
``submit`` waits for a free slot and ``send_nowait`` raises ``trio.WouldBlock``. The C++
producer is configured with the same limit and ``block_if_queue_full=False``, so it never
blocks the trio thread and never sees more than it can queue.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import trio

from gateway.observability.counters import COUNTERS
from gateway.pulsar.bridge import (
    NativeCall,
    TrioWaker,
    ignore_result,
    is_ok,
    keep_thread_state,
    result_name,
    weakly,
)
from gateway.pulsar.closing import AsyncClosing
from gateway.pulsar.compiled import load as load_compiled
from gateway.pulsar.doorbell import doorbell
from gateway.pulsar.errors import ClosedError, PulsarClientError, SendError
from gateway.pulsar.group_flusher import group_flusher
from gateway.pulsar.ids import MessageId
from gateway.pulsar.inflight_slots import InFlightSlots
from gateway.pulsar.nul_properties import with_escaped
from gateway.pulsar.owner import ClientOwner

log = logging.getLogger(__name__)


Compression = Literal["none", "lz4", "zlib", "zstd", "snappy"]

# submit() yields to the scheduler at least this often even when slots are free.
_YIELD_EVERY = 16


# Pulsar send latency (send_async → its callback handled) is timed for one send in SEND_SAMPLE
# (a power of two): starlight_pulsar_send_seconds.
SEND_SAMPLE = 16

# A grouped send covers at most this many messages (the rest start a new group) ...
GROUP_MAX_MESSAGES = 256
# ... and only messages of at most this many payload bytes: pulsar-client refuses a message
# above the broker's maxMessageSize (5 MB by default) synchronously, which a group could not
# tell apart from the others.
GROUP_MAX_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class MessageExtras:
    """What a message may carry besides its payload and properties (Pulsar's message
    metadata); ``NO_EXTRAS``, one shared instance, for a message with none of them."""

    event_timestamp: int | None = None  # milliseconds since the epoch
    partition_key: str | None = None
    ordering_key: str | None = None
    deliver_after_ms: int | None = None


NO_EXTRAS: Final = MessageExtras()


@dataclass(frozen=True, slots=True)
class ProducerOptions:
    # amqpBatchingEnabled. Batching packs messages sent close together into one entry; the
    # delay below is how long a lone message may wait for company, i.e. added confirm latency.
    batching_enabled: bool = True
    batching_max_publish_delay_ms: int = 1
    batching_max_messages: int = 1000
    batching_max_allowed_size_in_bytes: int = 128 * 1024
    # In-flight limit (trio side and C++ side).
    max_pending_messages: int = 1000
    # pulsar-client's own limit, if not the same: it counts each chunk of a chunked message
    # (ProducerImpl::sendAsync takes a slot per chunk) where ours counts messages; 0 is none.
    native_max_pending_messages: int | None = None
    send_timeout_ms: int = 30_000
    compression: Compression = "none"
    # For messages above the broker's maxMessageSize (5 MB by default); needs batching off
    # (producer_cache.py gives such messages a producer of their own).
    chunking_enabled: bool = False
    producer_name: str | None = None
    # Send groups through the compiled module when it is built (compiled.py); False always
    # sends through pulsar-client's binding.
    compiled: bool = True

    def __post_init__(self) -> None:
        if self.max_pending_messages < 1:
            raise ValueError("max_pending_messages must be >= 1")
        if self.batching_enabled and self.chunking_enabled:
            raise ValueError("batching and chunking cannot both be enabled")
        if self.native_max_pending_messages is not None and self.native_max_pending_messages < 0:
            raise ValueError("native_max_pending_messages must be >= 0")


def _native_config(options: ProducerOptions) -> Any:
    import _pulsar

    conf = _pulsar.ProducerConfiguration()
    conf.send_timeout_millis(options.send_timeout_ms)
    native_pending = options.native_max_pending_messages
    conf.max_pending_messages(
        options.max_pending_messages if native_pending is None else native_pending
    )
    conf.block_if_queue_full(False)  # never block the trio thread inside send_async
    conf.batching_enabled(options.batching_enabled)
    conf.batching_max_messages(options.batching_max_messages)
    conf.batching_max_allowed_size_in_bytes(options.batching_max_allowed_size_in_bytes)
    conf.batching_max_publish_delay_ms(options.batching_max_publish_delay_ms)
    conf.chunking_enabled(options.chunking_enabled)
    conf.compression_type(
        {
            "none": _pulsar.CompressionType.NONE,
            "lz4": _pulsar.CompressionType.LZ4,
            "zlib": _pulsar.CompressionType.ZLib,
            "zstd": _pulsar.CompressionType.ZSTD,
            "snappy": _pulsar.CompressionType.SNAPPY,
        }[options.compression]
    )
    if options.producer_name:
        conf.producer_name(options.producer_name)
    return conf


class SendHandle:
    """The future result of one send. Complete on the trio thread, in send order."""

    __slots__ = (
        "_callbacks",
        "_error",
        "_event",
        "_native_id",
        "_producer",
        "_result",
        "_started",
        "_state",
        "_token",
        "compiled",
        "count",
        "messages",
    )

    _PENDING, _OK, _FAILED = 0, 1, 2

    def __init__(self, producer: TrioProducer, *, grouped: bool = False) -> None:
        self._producer = producer
        # How many messages this handle stands for (a group's grow until they are sent) ...
        self.count = 1
        # ... and, for a group not sent yet, the messages themselves (pulsar-client's).
        self.messages: list[Any] | None = [] if grouped else None
        self._state = self._PENDING
        self._result: Any = None  # _pulsar.Result, set on the C++ thread
        self._native_id: Any = None
        self._error: PulsarClientError | None = None
        self._event: trio.Event | None = None
        self._callbacks: list[Callable[[SendHandle], None]] | None = None
        # perf_counter() at send_async for one send in SEND_SAMPLE (0.0: not timed).
        self._started = 0.0
        # Its receipt's token with the compiled sender (0: not used).
        self._token = 0
        # A group built by the compiled module (its messages are compiled.Outgoing).
        self.compiled = False

    # C++ thread (io thread), or the trio thread when send_async fails synchronously.
    def _native_done(self, result: Any, native_id: Any) -> None:
        try:
            keep_thread_state()
            self._result = result
            self._native_id = native_id
            producer = self._producer
            sender = producer._sender
            if sender is None:
                producer._completed.append(self)
                producer._waker.wake()
            else:  # in line with the compiled sends' receipts (module docstring)
                sender.receipt(self._token)
        except BaseException:
            pass

    # Trio thread (TrioProducer._drain), in order.
    def _finish(self) -> None:
        if self._started:
            COUNTERS.pulsar_send_seconds.observe(time.perf_counter() - self._started)
        if is_ok(self._result):
            self._state = self._OK
        else:
            self._state = self._FAILED
            name = result_name(self._result)
            if name == "AlreadyClosed":
                self._error = ClosedError(f"producer on {self._producer.topic} closed")
            else:
                self._error = SendError(name, f"send to {self._producer.topic}")
        self._result = None
        if self._event is not None:
            self._event.set()
        if self._callbacks:
            for callback in self._callbacks:
                callback(self)

    def done(self) -> bool:
        return self._state != self._PENDING

    @property
    def ok(self) -> bool:
        return self._state == self._OK

    @property
    def error(self) -> PulsarClientError | None:
        return self._error

    def result(self) -> MessageId:
        """The message id once done; raises the send error, or RuntimeError if pending (or,
        for a group, which has one id per message and knows only its last)."""
        if self._state == self._OK:
            if self.messages is not None:
                raise RuntimeError("a grouped send has no message id")
            return MessageId.from_native(self._native_id)
        if self._state == self._FAILED:
            assert self._error is not None
            raise self._error
        raise RuntimeError("send still pending")

    async def wait(self) -> MessageId:
        """Wait for the broker's answer. Cancelling the wait does not cancel the send.

        A cancellation point always; a schedule point only if it has to wait (awaiting a run
        of handles that are already done should not cost a scheduling round each).
        """
        await self.durable()
        return self.result()

    async def durable(self) -> None:
        """``wait`` without the message id (reading it from pulsar-client costs four calls
        into C++, and a publisher confirm does not need it)."""
        if self._state == self._PENDING:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        else:
            await trio.lowlevel.checkpoint_if_cancelled()
        if self._state == self._FAILED:
            assert self._error is not None
            raise self._error

    def add_done_callback(self, callback: Callable[[SendHandle], None]) -> None:
        """Call ``callback(handle)`` on the trio thread when done (now, if already done).

        Callbacks run inside the producer's drain: they must be quick and must not raise.
        """
        if self._state != self._PENDING:
            callback(self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)


class TrioProducer(AsyncClosing):
    """A pulsar-client producer driven from trio. Create with ``PulsarClient.create_producer``."""

    def __init__(
        self, client: ClientOwner, native: Any, topic: str, options: ProducerOptions
    ) -> None:
        self._client = client
        self._native = native  # _pulsar.Producer
        self.topic = topic
        self.options = options
        self._slots = InFlightSlots(options.max_pending_messages)
        self._completed: deque[SendHandle] = deque()
        # The compiled module's sender (module docstring), or None: all through the binding.
        wanted = options.compiled and client.options.compiled
        self._compiled = _compiled_for(native, topic) if wanted else None
        self._sender: Any = None
        # With the sender: the handles whose receipt has not come, by token.
        self._pending: dict[int, SendHandle] = {}
        self._tokens = 0
        if self._compiled is None:
            self._waker = TrioWaker(self._drain, client.token)
        else:
            # The sender holds its on_ready: weakly, or this producer would never be freed.
            self._sender = self._compiled.Sender(
                weakly(self._drain_receipts), doorbell(self._compiled)
            )
        self._in_flight = 0
        self._sends = 0  # for sampling the send latency
        self._submits = 0
        # The group being collected (submit_grouped), sent when the submitting task yields.
        self._group: SendHandle | None = None
        self._flusher = group_flusher()
        # The handle of the latest message handed to pulsar-client: ``flush`` waits for it.
        self._last: SendHandle | None = None
        self._closed = False
        # Read by ProducerCache to find idle producers.
        self.last_used = trio.current_time()

    @property
    def in_flight(self) -> int:
        """Messages handed to Pulsar whose handle has not completed yet."""
        return self._in_flight

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def producer_name(self) -> str:
        return str(self._native.producer_name())

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"producer on {self.topic} closed")

    def send_nowait(
        self,
        payload: bytes,
        properties: Mapping[str, str] | None = None,
        extras: MessageExtras = NO_EXTRAS,
    ) -> SendHandle:
        """Start a send without waiting; ``trio.WouldBlock`` when the in-flight limit is hit."""
        self._check_open()
        if not self._slots.take_nowait():
            raise trio.WouldBlock
        return self._start(payload, properties, extras)

    async def submit(
        self,
        payload: bytes,
        properties: Mapping[str, str] | None = None,
        extras: MessageExtras = NO_EXTRAS,
        *,
        sequence_id: int | None = None,
    ) -> SendHandle:
        """Start a send, first waiting for an in-flight slot (back-pressure).

        ``sequence_id``: the message's own, instead of pulsar-client's next one (a broker with
        deduplication on drops a message whose sequence id is not above the highest it stored
        from this producer name; batching must be off, since a batch is judged by its first).

        Always a cancellation point; a schedule point only when it has to wait for a slot and
        on every ``_YIELD_EVERY``-th call. A full trio scheduling round per message cost ~20%
        of publish throughput (measured), and confirmations are drained by ``run_sync_soon``
        callbacks that only need *some* schedule point to run.

        Cancellation before it returns sends nothing; once it returns, the message is with
        pulsar-client and its handle will complete.
        """
        self._submits += 1
        await self._take_slot(always_yield=self._submits % _YIELD_EVERY == 0)
        return self._start(payload, properties, extras, sequence_id)

    async def submit_grouped(
        self, payload: bytes, properties: Mapping[str, str] | None = None
    ) -> SendHandle:
        """``submit``, as one message of a group (module docstring): the handle is the
        group's, and completes (ok or failed) with it. Large messages, and every message of
        a chunking producer, are sent on their own (plain ``submit``)."""
        if len(payload) > GROUP_MAX_BYTES or self.options.chunking_enabled:
            return await self.submit(payload, properties)
        # Waiting for a slot yields, which sends the group collected so far: slots come back.
        await self._take_slot()
        return self._add_to_group(payload, properties)

    async def _take_slot(self, *, always_yield: bool = False) -> None:
        """An in-flight slot, waiting for one if none is free (``always_yield``: through
        ``take``, which yields even when one is); raises if the producer is closed, before
        or while waiting."""
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()
        if always_yield or not self._slots.take_nowait():
            await self._slots.take()
        if self._closed:
            self._slots.give_back()
            self._check_open()

    def submit_grouped_nowait(
        self, payload: bytes, properties: Mapping[str, str] | None = None
    ) -> SendHandle | None:
        """``submit_grouped`` when it need not wait: None (nothing done) when the producer is
        closed, has no free in-flight slot, or the message is not one to group."""
        if self._closed or len(payload) > GROUP_MAX_BYTES or self.options.chunking_enabled:
            return None
        if not self._slots.take_nowait():
            return None
        return self._add_to_group(payload, properties)

    def _add_to_group(self, payload: bytes, properties: Mapping[str, str] | None) -> SendHandle:
        """With a slot taken: the message joins the group being collected."""
        try:
            message, compiled = self._group_message(payload, properties)
        except BaseException:
            self._slots.give_back()
            raise
        group = self._group
        if group is None or group.count >= GROUP_MAX_MESSAGES or group.compiled is not compiled:
            if group is not None:
                self._send_group()
            idle = self._in_flight == 0
            group = self._group = SendHandle(self, grouped=True)
            group.count = 0
            group.compiled = compiled
            self._track(group)
            if not idle:
                # Sent once this task yields: everything submitted until then is one group.
                self._flusher.schedule(self)
            # Stamped once per group, not per message: its messages join it within one step
            # of the trio loop, and a producer with any in flight is never idle anyway.
            self.last_used = trio.current_time()
        else:
            idle = False
        assert group.messages is not None
        group.messages.append(message)
        group.count += 1
        self._in_flight += 1
        if idle:
            # Nothing in flight: no send to wait behind, so this message goes at once, alone
            # (a publisher waiting for each confirm sends nothing more until it comes). The
            # trio loop's round to run_sync_soon was ~0.1 ms of a lone message's confirm.
            self._send_group()
        return group

    def _group_message(
        self, payload: bytes, properties: Mapping[str, str] | None
    ) -> tuple[Any, bool]:
        """A message for a group, and whether the compiled module built it."""
        if self._compiled is not None:
            if properties is not None and type(properties) is not dict:
                properties = dict(properties)
            try:
                return self._compiled.Outgoing(payload, properties), True
            except ValueError:  # a NUL in a property: the binding can send it (docstring)
                pass
        return _build(payload, properties, NO_EXTRAS), False

    def _track(self, handle: SendHandle) -> None:
        """With the compiled sender: give the handle a token to find it by its receipt."""
        if self._sender is not None:
            self._tokens += 1
            handle._token = self._tokens
            self._pending[self._tokens] = handle

    def _send_group(self) -> None:
        """Hand the collected group to pulsar-client: every message without a callback but
        the last, which reports for all (module docstring)."""
        group, self._group = self._group, None
        if group is None or not group.messages:
            return
        messages, group.messages = group.messages, []
        self._sends += 1
        if not self._sends & (SEND_SAMPLE - 1):
            group._started = time.perf_counter()
        self._last = group
        try:
            if group.compiled:
                self._sender.send_group(
                    self._native, group._token, messages, self.options.batching_enabled
                )
                return
            send = self._native.send_async
            last = len(messages) - 1
            for index, message in enumerate(messages):
                send(message, group._native_done if index == last else None)
        except BaseException as error:
            # Not queued (the rest neither): the group fails as a whole.
            log.warning("send of %d messages to %s failed: %s", len(messages), self.topic, error)
            group._native_done(_FAILED_RESULT, None)

    async def send(
        self,
        payload: bytes,
        properties: Mapping[str, str] | None = None,
        extras: MessageExtras = NO_EXTRAS,
    ) -> MessageId:
        """Send one message and wait until it is persisted; SendError/ClosedError otherwise."""
        handle = await self.submit(payload, properties, extras)
        return await handle.wait()

    def _start(
        self,
        payload: bytes,
        properties: Mapping[str, str] | None,
        extras: MessageExtras,
        sequence_id: int | None = None,
    ) -> SendHandle:
        handle = SendHandle(self)
        self._track(handle)
        try:
            message = _build(payload, properties, extras, sequence_id)
        except BaseException:
            self._pending.pop(handle._token, None)
            self._slots.give_back()
            raise
        self._in_flight += 1
        self.last_used = trio.current_time()
        self._sends += 1
        if not self._sends & (SEND_SAMPLE - 1):
            handle._started = time.perf_counter()
        try:
            self._native.send_async(message, handle._native_done)
        except BaseException:
            # Not queued: nothing will call back.
            self._pending.pop(handle._token, None)
            self._in_flight -= 1
            self._slots.give_back()
            raise
        self._last = handle
        return handle

    def _drain(self) -> None:
        """Trio thread: complete handles in the order the C++ producer called back."""
        completed = self._completed
        while completed:
            self._complete(completed.popleft())

    def _drain_receipts(self) -> None:
        """Trio thread, with the compiled sender: the same, from its receipts."""
        pending = self._pending
        for token, result in self._sender.drain():
            handle = pending.pop(token, None)
            if handle is None:
                continue
            if result >= 0:  # from the compiled send; else the handle has it already
                handle._result = _OK_RESULT if result == 0 else _result_named(result)
            self._complete(handle)

    def _complete(self, handle: SendHandle) -> None:
        count = handle.count
        self._in_flight -= count
        self._slots.give_back(count)
        try:
            handle._finish()
        except Exception:
            log.exception("send done-callback failed")
        error = handle._error
        if error is not None and error.result == "Timeout" and not self._closed:
            self._give_up_after_a_timeout()

    def _give_up_after_a_timeout(self) -> None:
        """A send timed out: close this producer so that its owner makes a new one.

        After a bookie restart on a multi-broker Pulsar, a producer whose sends timed out
        stayed connected and timed out every later send too, for minutes, while a new
        producer of the same topic stored at once (tests/faults/test_pulsar_cluster.py). The
        messages still in flight here fail with it (the client gets its nacks and publishes
        them again); ``ProducerCache`` replaces a closed producer on the next send."""
        log.warning("send to %s timed out; replacing its producer", self.topic)
        self._start_close(ignore_result)

    async def flush(self) -> None:
        """Wait until every message handed to this producer so far is stored or failed (the
        sends' own handles carry their errors; this only waits).

        Not pulsar-client's ``flush_async``: its binding keeps the GIL while it takes the
        producer's lock, and pulsar-client's thread takes that lock when a batch is due and
        then needs the GIL for the batch's Python callbacks: the process deadlocked
        (tests/integration/pulsar/test_producer.py, the flush test). Sends complete in
        order, so the latest one completing means all did; a batch being assembled goes out
        after ``batching_max_publish_delay_ms`` by itself.
        """
        self._check_open()
        self._send_group()
        last = self._last
        if last is None or last.done():
            return
        with contextlib.suppress(PulsarClientError):
            await last.durable()

    def mark_closed(self) -> None:
        """Closed with its client (PulsarClient.aclose): refuse further sends."""
        self._closed = True

    def _start_close(self, callback: Callable[[Any], None]) -> None:
        self._send_group()  # handed over first: the close completes it, stored or failed
        self._closed = True
        self._client.forget(self)
        self._native.close_async(callback)

    async def aclose(self) -> None:
        """Close. Messages still in flight complete (persisted, or failed with ClosedError)."""
        if self._closed:
            return
        call: NativeCall[None] = NativeCall(
            f"close producer on {self.topic}", token=self._client.token
        )
        self._start_close(call.result_callback)
        with trio.CancelScope(shield=True), contextlib.suppress(ClosedError):
            await call.wait(self._client.operation_deadline)


def _build(
    payload: bytes,
    properties: Mapping[str, str] | None,
    extras: MessageExtras,
    sequence_id: int | None = None,
) -> Any:
    """A pulsar-client message; raises (TypeError) on anything it refuses."""
    import _pulsar

    builder = _pulsar.MessageBuilder()
    builder.content(payload)
    if properties:
        # Pulsar properties are str -> str; anything else fails here, loudly.
        builder.properties(with_escaped(properties))
    if extras is not NO_EXTRAS:  # the usual case: one test instead of four
        _add_extras(builder, extras)
    if sequence_id is not None:
        builder.sequence_id(sequence_id)
    return builder.build()


def _add_extras(builder: Any, extras: MessageExtras) -> None:
    if extras.event_timestamp is not None:
        builder.event_timestamp(extras.event_timestamp)
    if extras.partition_key is not None:
        builder.partition_key(extras.partition_key)
    if extras.ordering_key is not None:
        builder.ordering_key(extras.ordering_key)
    if extras.deliver_after_ms is not None:
        from datetime import timedelta

        builder.deliver_after(timedelta(milliseconds=extras.deliver_after_ms))


# What a group that pulsar-client refused to queue completes with (result_name gives it).
_FAILED_RESULT = "UnknownError"


class _Ok:
    """A receipt's success, as ``is_ok`` reads pulsar-client's ``Result.Ok``."""

    value = 0
    name = "Ok"


_OK_RESULT: Final = _Ok()


def _result_named(code: int) -> Any:
    """pulsar-client's Result of a C API result code (the same numbering)."""
    import _pulsar

    try:
        return _pulsar.Result(code)
    except ValueError:
        return f"Result{code}"


def _compiled_for(native: Any, topic: str) -> Any:
    """The compiled module, if built and on, and if it reads this producer's topic where the
    binding does (the same check as the listener's, on this object)."""
    module = load_compiled()
    if module is None:
        return None
    import _pulsar

    if not isinstance(native, _pulsar.Producer):
        return None  # a stand-in (unit tests)
    expected = str(native.topic())
    actual = module.producer_topic(native)
    if actual != expected:
        log.warning("producer on %s: compiled sends off (topic read as %r)", topic, actual)
        return None
    return module


async def create_producer(
    client: ClientOwner, topic: str, options: ProducerOptions
) -> TrioProducer:
    def close_abandoned(native: Any) -> None:
        native.close_async(ignore_result)

    call: NativeCall[Any] = NativeCall(
        f"create producer on {topic}", on_abandoned=close_abandoned, token=client.token
    )
    native_client = client.native
    conf = _native_config(options)
    if hasattr(native_client, "create_producer_async_v2"):
        native_client.create_producer_async_v2(topic, conf, call.value_or_error_callback)
    else:  # older pulsar-client without the v2 call
        native_client.create_producer_async(topic, conf, call.result_value_callback)
    native = await call.wait(client.operation_deadline)
    producer = TrioProducer(client, native, topic, options)
    client.adopt(producer)
    return producer
