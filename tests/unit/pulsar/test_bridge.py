"""The thread-to-trio bridge and the producer/consumer bookkeeping, with fake native objects.

No Pulsar here: "native" producers and consumers are stand-ins that record calls, and "C++
threads" are plain threads calling the callbacks the way pulsar-client would.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, cast

import _pulsar
import pytest
import trio
import trio.testing

from gateway.pulsar.bridge import NativeCall, TrioWaker
from gateway.pulsar.client import ClientOptions, PulsarClient
from gateway.pulsar.consumer import ConsumerOptions, TrioConsumer
from gateway.pulsar.errors import ClosedError, PulsarClientError, SendError
from gateway.pulsar.producer import ProducerOptions, SendHandle, TrioProducer
from gateway.pulsar.received import ReceivedMessage


@dataclass(frozen=True)
class FakeResult:
    name: str


OK = FakeResult("Ok")


@dataclass(frozen=True)
class FakeError:  # like _pulsar.Error
    error: FakeResult
    message: str


class FakeClient:
    """What TrioProducer/TrioConsumer need from PulsarClient."""

    def __init__(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.operation_deadline = 5.0
        self.options = ClientOptions(compiled=False)
        self.forgotten: list[object] = []

    def forget(self, child: object) -> None:
        self.forgotten.append(child)

    def adopt(self, child: object) -> None:
        pass


def in_thread(fn: Any, *args: Any) -> None:
    thread = threading.Thread(target=fn, args=args)
    thread.start()
    thread.join()


# --- TrioWaker ------------------------------------------------------------------------------


async def test_waker_coalesces_and_loses_nothing() -> None:
    items: deque[int] = deque()
    seen: list[int] = []
    drains = 0

    def drain() -> None:
        nonlocal drains
        drains += 1
        while items:
            seen.append(items.popleft())

    waker = TrioWaker(drain)

    def produce() -> None:
        for i in range(5000):
            items.append(i)
            waker.wake()

    await trio.to_thread.run_sync(produce)
    with trio.fail_after(5):
        while len(seen) < 5000:
            await trio.sleep(0.001)
    assert seen == list(range(5000))
    assert 1 <= drains < 5000


def test_waker_after_the_run_is_over_does_not_raise() -> None:
    wakers: list[TrioWaker] = []

    async def main() -> None:
        wakers.append(TrioWaker(lambda: None))

    trio.run(main)
    in_thread(wakers[0].wake)  # RunFinishedError is swallowed
    wakers[0].wake()


async def test_waker_survives_a_failing_drain(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    def drain() -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("bug in a drain")

    waker = TrioWaker(drain)
    waker.wake()
    await trio.testing.wait_all_tasks_blocked()
    waker.wake()  # still usable
    await trio.testing.wait_all_tasks_blocked()
    assert calls == 2
    assert "drain callback failed" in caplog.text


# --- NativeCall -----------------------------------------------------------------------------


async def test_native_call_callback_shapes() -> None:
    ok: NativeCall[None] = NativeCall("close")
    in_thread(ok.result_callback, OK)
    await ok.wait(1)

    failed: NativeCall[None] = NativeCall("close")
    in_thread(failed.result_callback, FakeResult("AlreadyClosed"))
    with pytest.raises(ClosedError):
        await failed.wait(1)

    v1: NativeCall[str] = NativeCall("create")
    in_thread(v1.result_value_callback, OK, "producer")
    assert await v1.wait(1) == "producer"

    v2: NativeCall[str] = NativeCall("subscribe")
    in_thread(v2.value_or_error_callback, FakeError(FakeResult("TopicNotFound"), "no topic"))
    with pytest.raises(PulsarClientError) as info:
        await v2.wait(1)
    assert info.value.result == "TopicNotFound"
    assert "no topic" in str(info.value)


async def test_native_call_callbacks_never_raise() -> None:
    call: NativeCall[Any] = NativeCall("x")
    call.result_callback(object())  # no .name: becomes an error outcome, no exception
    call.result_value_callback(None, None)
    call.value_or_error_callback(object())


async def test_native_call_timeout_and_abandoned_result_is_cleaned_up(
    autojump_clock: trio.abc.Clock,
) -> None:
    cleaned: list[str] = []
    call: NativeCall[str] = NativeCall("create producer", on_abandoned=cleaned.append)
    with pytest.raises(PulsarClientError) as info:
        await call.wait(3)
    assert info.value.result == "Timeout"
    in_thread(call.value_or_error_callback, "late producer")
    await trio.testing.wait_all_tasks_blocked()
    assert cleaned == ["late producer"]


async def test_native_call_cancelled_wait_cleans_up_late_value() -> None:
    cleaned: list[str] = []
    call: NativeCall[str] = NativeCall("subscribe", on_abandoned=cleaned.append)
    with trio.move_on_after(0.01):
        await call.wait()
    call.value_or_error_callback("late consumer")
    await trio.testing.wait_all_tasks_blocked()
    assert cleaned == ["late consumer"]


# --- TrioProducer bookkeeping ---------------------------------------------------------------


@dataclass
class FakeProducer:
    callbacks: list[Any] = field(default_factory=list)
    closes: int = 0

    def send_async(self, message: Any, callback: Any) -> None:
        self.callbacks.append(callback)

    def close_async(self, callback: Any) -> None:
        self.closes += 1

    def complete(self, results: list[FakeResult]) -> None:
        """Call back in order from another thread, as the C++ I/O thread does."""

        def run() -> None:
            for index, result in enumerate(results):
                self.callbacks.pop(0)(result, _pulsar.MessageId(-1, 7, index, -1))

        in_thread(run)


def make_producer(limit: int) -> tuple[TrioProducer, FakeProducer]:
    native = FakeProducer()
    client = cast(PulsarClient, FakeClient())
    options = ProducerOptions(max_pending_messages=limit)
    return TrioProducer(client, native, "persistent://t/ns/x", options), native


async def test_handles_complete_in_order_and_free_slots() -> None:
    producer, native = make_producer(limit=3)
    handles = [producer.send_nowait(b"x") for _ in range(3)]
    with pytest.raises(trio.WouldBlock):
        producer.send_nowait(b"x")
    order: list[int] = []

    def recorder(i: int) -> Any:
        return lambda _handle: order.append(i)

    for i, handle in enumerate(handles):
        handle.add_done_callback(recorder(i))
    native.complete([OK, FakeResult("ProducerQueueIsFull"), FakeResult("AlreadyClosed")])
    with trio.fail_after(5):
        await handles[0].wait()
    await trio.testing.wait_all_tasks_blocked()
    assert order == [0, 1, 2]
    assert producer.in_flight == 0
    assert handles[0].ok
    assert handles[0].result() == (7, 0, -1, -1)
    with pytest.raises(SendError) as info:
        handles[1].result()
    assert info.value.result == "ProducerQueueIsFull"
    with pytest.raises(ClosedError):
        await handles[2].wait()
    producer.send_nowait(b"x")  # slots are back


async def test_a_send_timeout_closes_the_producer_for_a_new_one() -> None:
    """A producer whose send timed out is closed (ProducerCache makes a new one): on a
    multi-broker Pulsar one kept timing out every later send after a bookie restart."""
    producer, native = make_producer(limit=3)
    handles = [producer.send_nowait(b"x") for _ in range(2)]
    native.complete([FakeResult("Timeout")])
    with trio.fail_after(5), pytest.raises(SendError):
        await handles[0].wait()
    await trio.testing.wait_all_tasks_blocked()
    assert producer.closed and native.closes == 1
    with pytest.raises(ClosedError):
        producer.send_nowait(b"x")
    assert not handles[1].done()  # the close fails it, from pulsar-client's side


async def test_submit_waits_for_a_slot_and_cancel_sends_nothing() -> None:
    producer, native = make_producer(limit=1)
    first = await producer.submit(b"1")
    with trio.move_on_after(0.05) as scope:
        await producer.submit(b"2")
    assert scope.cancelled_caught and len(native.callbacks) == 1
    got: list[SendHandle] = []

    async def second() -> None:
        got.append(await producer.submit(b"2"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        assert not got  # blocked at the limit
        native.complete([OK])
    assert first.ok and len(got) == 1 and producer.in_flight == 1


async def test_bad_properties_give_the_slot_back() -> None:
    producer, native = make_producer(limit=1)
    with pytest.raises(TypeError):
        producer.send_nowait(b"x", {"k": 1})  # type: ignore[dict-item]
    assert producer.in_flight == 0 and not native.callbacks
    producer.send_nowait(b"x")


# --- TrioConsumer flow control --------------------------------------------------------------


@dataclass
class FakeConsumer:
    topic: str = "persistent://t/ns/q"
    paused: bool = False
    pauses: int = 0
    resumes: int = 0
    acked: list[Any] = field(default_factory=list)
    nacked: list[Any] = field(default_factory=list)

    def pause_message_listener(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_message_listener(self) -> None:
        self.paused = False
        self.resumes += 1

    def acknowledge_async(self, message: Any, callback: Any) -> None:
        self.acked.append(message)

    def negative_acknowledge(self, message: Any) -> None:
        self.nacked.append(message)

    def close_async(self, callback: Any) -> None:
        in_thread(callback, OK)


@dataclass(frozen=True)
class FakeMessageId:
    index: int
    size: int

    def batch_index(self) -> int:
        return self.index

    def serialize(self) -> bytes:
        # As pulsar-client serializes an id (ledger 1, entry 2; a batched message's batch
        # index 4 and batch size 6): not a chunked message's.
        batch = b"" if self.index < 0 else bytes([0x20, self.index, 0x30, self.size])
        return bytes.fromhex("08011002") + batch


@dataclass(frozen=True)
class FakeMessage:
    n: int
    topic: str = "persistent://t/ns/q"
    batch_index: int = -1  # -1: an entry of its own
    batch_size: int = 4  # of its batch, when it is in one

    def topic_name(self) -> str:
        return self.topic

    def message_id(self) -> FakeMessageId:
        return FakeMessageId(self.batch_index, self.batch_size)


def make_consumer(buffer_size: int) -> tuple[TrioConsumer, FakeConsumer]:
    client = cast(PulsarClient, FakeClient())
    consumer = TrioConsumer(
        client,
        "q",
        ConsumerOptions(receiver_queue_size=4, buffer_size=buffer_size),
    )
    native = FakeConsumer()
    consumer._attach(native.topic, native)
    return consumer, native


async def test_listener_pauses_at_capacity_and_receive_resumes_at_half() -> None:
    consumer, native = make_consumer(buffer_size=4)

    def listener_thread() -> None:
        # A paused pulsar-client listener is not called again; emulate that.
        for n in range(10):
            if native.paused:
                break
            consumer._on_message(native, FakeMessage(n))

    in_thread(listener_thread)
    assert consumer.buffered == 4 and native.paused and native.pauses >= 1
    got = [await consumer.receive()]
    assert native.paused and consumer.paused  # 3 left: above half
    got.append(await consumer.receive())
    assert not native.paused and not consumer.paused  # down to half: resumed
    assert native.resumes == 1
    assert [m.native.n for m in got] == [0, 1]
    got[0].ack()
    got[1].nack()
    assert native.acked == [got[0].native] and native.nacked == [got[1].native]


async def test_cancelled_receive_takes_nothing() -> None:
    consumer, native = make_consumer(buffer_size=4)
    with trio.move_on_after(0.01) as scope:
        await consumer.receive()
    assert scope.cancelled_caught
    consumer._on_message(native, FakeMessage(1))
    with trio.CancelScope() as cancelled:
        cancelled.cancel()
        await consumer.receive()  # cancelled before taking anything
    assert consumer.buffered == 1
    assert (await consumer.receive()).native.n == 1


async def test_close_wakes_receivers_and_drops_late_messages() -> None:
    consumer, native = make_consumer(buffer_size=4)
    errors: list[BaseException] = []

    async def waiter() -> None:
        try:
            await consumer.receive()
        except ClosedError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        consumer.mark_closed()
    assert len(errors) == 1
    consumer._on_message(native, FakeMessage(9))  # after close: not buffered
    assert consumer.buffered == 0
    with pytest.raises(ClosedError):
        consumer.acknowledge(cast(Any, None))


async def test_stop_receiving_nacks_the_buffer_and_stays_paused() -> None:
    consumer, native = make_consumer(buffer_size=10)
    for n in range(3):
        consumer._on_message(native, FakeMessage(n))
    assert consumer.stop_receiving() == 3
    assert native.paused and [m.n for m in native.nacked] == [0, 1, 2]
    assert consumer.stop_receiving() == 0


async def test_stop_receiving_keeps_batched_messages_unacknowledged() -> None:
    """A negative ack would send the batch's whole entry back, with its delivered and still
    unacknowledged messages: batched messages wait for the consumer's close instead."""
    consumer, native = make_consumer(buffer_size=10)
    consumer._on_message(native, FakeMessage(0))
    consumer._on_message(native, FakeMessage(1, batch_index=3))
    given_back: list[ReceivedMessage] = []
    assert consumer.stop_receiving(given_back.append) == 2
    assert [m.n for m in native.nacked] == [0]
    assert native.acked == []
    # Told which messages go back undelivered (Pulsar will count their redelivery).
    assert [cast(Any, received.native).n for received in given_back] == [0]


@pytest.mark.parametrize("hand_back", [True, False])
async def test_a_listener_call_finishing_after_the_stop_is_not_buffered(hand_back: bool) -> None:
    """pulsar-client does not wait for a listener call under way when the listener is paused:
    the message it hands over after the stop is set aside (CI: ``buffered`` was 1 after
    ``stop_receiving``), and ``take_unreceived`` returns it after the older ones."""
    consumer, native = make_consumer(buffer_size=10)
    consumer._on_message(native, FakeMessage(0))
    consumer.stop_receiving(hand_back=hand_back)
    consumer._on_message(native, FakeMessage(1))  # the call that was already under way
    assert consumer.buffered == (0 if hand_back else 1)
    with pytest.raises(trio.WouldBlock):
        if hand_back:
            consumer.receive_nowait()
        else:
            assert consumer.receive_nowait().native.n == 0
            consumer.receive_nowait()
    assert [m.native.n for m in consumer.take_unreceived()] == [1]
    assert consumer.take_unreceived() == []


async def test_take_unreceived_returns_the_buffer_before_late_messages() -> None:
    consumer, native = make_consumer(buffer_size=10)
    for n in range(2):
        consumer._on_message(native, FakeMessage(n))
    consumer.stop_receiving(hand_back=False)
    consumer._on_message(native, FakeMessage(2))
    assert [m.native.n for m in consumer.take_unreceived()] == [0, 1, 2]


async def test_removing_a_topic_after_the_stop_drops_what_it_set_aside() -> None:
    consumer, native = make_consumer(buffer_size=10)
    other = FakeConsumer(topic="persistent://t/ns/other")
    consumer._attach(other.topic, other)
    consumer._on_message(native, FakeMessage(0, batch_index=0))
    consumer.stop_receiving()  # keeps the batched message
    consumer._on_message(native, FakeMessage(1))
    consumer._on_message(other, FakeMessage(2, topic=other.topic))
    await consumer.remove_topic(native.topic)  # its consumer closes: they go back with it
    assert [m.native.n for m in consumer.take_unreceived()] == [2]


def test_keep_thread_state_takes_one_reference_per_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.pulsar import bridge

    taken: list[int] = []
    monkeypatch.setattr(bridge, "_ensure_gil_state", lambda: taken.append(threading.get_ident()))
    monkeypatch.setattr(bridge, "_kept", threading.local())
    started = threading.Barrier(2)  # both threads alive at once: distinct thread idents

    def callbacks() -> None:
        started.wait(timeout=10)
        for _ in range(3):
            bridge.keep_thread_state()

    threads = [threading.Thread(target=callbacks) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(taken) == sorted(thread.ident for thread in threads if thread.ident)
