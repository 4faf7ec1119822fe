"""TrioReader: a pulsar-client Reader (a non-durable cursor on one topic), read from trio.

A Reader keeps no subscription in Pulsar: it starts at a message id (or at the earliest or
latest one, or where ``seek`` puts it by publish time) and reads on, acknowledging nothing.
That is how a stream queue's consumer reads the stream's topic
(backend/pulsar/queue_types/stream/queues.py): the messages stay for every other reader.

Flow control is by request: at most ``read_ahead`` ``read_next_async`` calls are outstanding,
each a slot that its callback fills; ``receive`` takes the oldest slot once filled and asks
for the next. pulsar-client answers pending reads in the order they were made, from its
receiver queue (``receiver_queue_size``, which bounds what the broker sends ahead), so the
slots fill in topic order. A cancelled ``receive`` takes nothing: the slot stays, and its
message is there for the next call.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import TYPE_CHECKING, Any

import trio

from gateway.pulsar.bridge import NativeCall, TrioWaker, is_ok, keep_thread_state, native_error
from gateway.pulsar.errors import ClosedError, PulsarClientError
from gateway.pulsar.ids import EARLIEST, LATEST, MessageId
from gateway.pulsar.incoming import IncomingMessage

if TYPE_CHECKING:
    from gateway.pulsar.client import PulsarClient

__all__ = ["ReadMessage", "TrioReader", "open_reader"]


class ReadMessage(IncomingMessage):
    """One message a reader read."""

    __slots__ = ()


class _Slot:
    """One outstanding ``read_next_async``: filled on a C++ thread, read on trio's."""

    __slots__ = ("error", "message")

    def __init__(self) -> None:
        self.message: Any = None
        self.error: PulsarClientError | None = None

    @property
    def filled(self) -> bool:
        return self.message is not None or self.error is not None


class TrioReader:
    """Read one topic from trio. Create with :func:`open_reader`."""

    def __init__(self, client: PulsarClient, topic: str, native: Any, read_ahead: int) -> None:
        self._client = client
        self.topic = topic
        self._native = native  # _pulsar.Reader
        self._read_ahead = max(1, read_ahead)
        self._slots: deque[_Slot] = deque()
        self._closed = False
        self._lot = trio.lowlevel.ParkingLot()
        self._waker = TrioWaker(self._wake, client.token)

    def _wake(self) -> None:
        self._lot.unpark_all()

    def _ask(self) -> None:
        """Keep ``read_ahead`` reads outstanding."""
        while len(self._slots) < self._read_ahead and not self._closed:
            slot = _Slot()
            self._slots.append(slot)
            self._native.read_next_async(self._callback_for(slot))

    def _callback_for(self, slot: _Slot) -> Any:
        waker = self._waker

        def done(result: Any, message: Any) -> None:
            try:
                keep_thread_state()
                if is_ok(result):
                    slot.message = message
                else:
                    slot.error = native_error(result, "reading a stream")
                waker.wake()
            except BaseException:
                pass

        return done

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def ready(self) -> bool:
        """Whether ``receive`` would return without waiting."""
        return bool(self._slots) and self._slots[0].filled

    async def receive(self) -> ReadMessage:
        """The next message of the topic (waits for one). Cancellation-safe."""
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._closed:
                raise ClosedError(f"reader of {self.topic} closed")
            self._ask()
            head = self._slots[0]
            if head.filled:
                self._slots.popleft()
                if head.error is not None:
                    raise head.error
                self._ask()
                return ReadMessage(head.message)
            await self._lot.park()

    def receive_nowait(self) -> ReadMessage | None:
        """``receive`` when it need not wait: None when the next message is not read yet, or
        when what comes next is an error (left for ``receive`` to raise)."""
        if self._closed or not self._slots:
            return None
        head = self._slots[0]
        if not head.filled or head.error is not None:
            return None
        self._slots.popleft()
        self._ask()
        return ReadMessage(head.message)

    async def seek(self, timestamp_ms: int) -> None:
        """Move to the first message published at ``timestamp_ms`` or later. Only before the
        first ``receive``: reads already asked for would mix both positions."""
        if self._slots:
            raise RuntimeError("seek after reading")
        call: NativeCall[None] = NativeCall(f"seek {self.topic}", token=self._client.token)
        self._native.seek_async(int(timestamp_ms), call.result_callback)
        await call.wait(self._client.operation_deadline)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._lot.unpark_all()
        call: NativeCall[None] = NativeCall(
            f"close reader of {self.topic}", token=self._client.token
        )
        self._native.close_async(call.result_callback)
        with trio.CancelScope(shield=True), contextlib.suppress(PulsarClientError):
            await call.wait(self._client.operation_deadline)


async def open_reader(
    client: PulsarClient,
    topic: str,
    start: MessageId,
    *,
    inclusive: bool = False,
    read_ahead: int = 100,
) -> TrioReader:
    """A reader of ``topic`` from ``start`` (``EARLIEST``, ``LATEST`` or a message id;
    ``inclusive``: that message first)."""
    import _pulsar

    conf = _pulsar.ReaderConfiguration()
    conf.receiver_queue_size(max(1, read_ahead))
    conf.start_message_id_inclusive(inclusive)
    if start == EARLIEST:
        native_start = _pulsar.MessageId.earliest
    elif start == LATEST:
        native_start = _pulsar.MessageId.latest
    else:
        native_start = start.to_native()

    def close_abandoned(native: Any) -> None:
        native.close_async(lambda _result: None)

    call: NativeCall[Any] = NativeCall(
        f"read {topic}", on_abandoned=close_abandoned, token=client.token
    )
    client.native.create_reader_async_v2(topic, native_start, conf, call.value_or_error_callback)
    native = await call.wait(client.operation_deadline)
    return TrioReader(client, topic, native, read_ahead)
