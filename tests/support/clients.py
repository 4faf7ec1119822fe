"""Helpers for driving the gateway with real AMQP clients (pika, aio-pika, kombu) in tests.

Nothing here sleeps to synchronise: every wait is on a condition, with a deadline, while the
client keeps processing its I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import aio_pika
import aiormq
import pika
import pika.exceptions
from kombu.connection import Connection as KombuConnection
from pika.adapters.blocking_connection import BlockingChannel

DEFAULT_TIMEOUT = 10.0

# Expired messages leave a queue's count within their TTL (rounded up to a second) + the
# leader's sweep interval (1 s) + a round's work; generous for a loaded machine.
COUNT_DEADLINE = 20.0


def unique(prefix: str) -> str:
    """A fresh name, so that tests sharing a gateway (and a namespace) never collide."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def connect(port: int, vhost: str = "/", **params: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            host="127.0.0.1", port=port, virtual_host=vhost, connection_attempts=1, **params
        )
    )


def amqp_url(port: int, vhost: str = "/") -> str:
    """``amqp://`` URL for aio-pika and kombu (the vhost percent-encoded, ``/`` as ``%2F``)."""
    from urllib.parse import quote

    return f"amqp://guest:guest@127.0.0.1:{port}/{quote(vhost, safe='')}"


def wait_for(
    condition: Callable[[], bool],
    connection: pika.BlockingConnection | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    what: str | Callable[[], str] = "condition",
) -> None:
    """Process the connection's events until ``condition()`` holds; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {described}")
        if connection is not None:
            connection.process_data_events(time_limit=0.05)
        else:
            time.sleep(0.02)  # polling interval of a condition with a deadline, not a sync


def observe(connection: pika.BlockingConnection, seconds: float = 0.3) -> None:
    """Keep processing events for a short window: used before asserting that something
    did *not* happen (nothing more delivered), giving the gateway a chance to do it."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        connection.process_data_events(time_limit=left)


def get_bodies(
    channel: BlockingChannel, queue: str, count: int, *, timeout: float = DEFAULT_TIMEOUT
) -> list[bytes]:
    """Basic.Get (auto-ack) until ``count`` messages came; fail after ``timeout``."""
    bodies: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(bodies) < count:
        _, _, body = channel.basic_get(queue, auto_ack=True)
        if body is not None:
            bodies.append(body)
        elif time.monotonic() > deadline:
            raise AssertionError(f"only {len(bodies)} of {count} messages from {queue!r}")
    return bodies


def drain(channel: BlockingChannel, queue: str) -> list[bytes]:
    """Basic.Get (auto-ack) until the queue answers Get-Empty."""
    bodies: list[bytes] = []
    while (message := channel.basic_get(queue, auto_ack=True))[2] is not None:
        bodies.append(message[2])
    return bodies


def wait_for_message(
    channel: BlockingChannel, queue: str, *, auto_ack: bool = True, timeout: float = DEFAULT_TIMEOUT
) -> tuple[Any, pika.BasicProperties, bytes]:
    """The next message of ``queue`` by Basic.Get, waiting for it (dead letters arrive
    asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        method, properties, body = channel.basic_get(queue, auto_ack=auto_ack)
        if method is not None:
            return method, properties, body
        assert time.monotonic() < deadline, f"nothing arrived in {queue}"


def confirmed_channel(connection: pika.BlockingConnection) -> BlockingChannel:
    """A new channel of ``connection`` in confirm mode."""
    channel = connection.channel()
    channel.confirm_delivery()
    return channel


def message_count(channel: BlockingChannel, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def wait_for_count(
    channel: BlockingChannel, queue: str, expected: int, *, timeout: float = DEFAULT_TIMEOUT
) -> int:
    """Passive-declare until Declare-Ok reports ``expected`` messages (Pulsar's backlog
    figures settle shortly after the writes); returns the last count seen."""
    deadline = time.monotonic() + timeout
    while (count := message_count(channel, queue)) != expected:
        if time.monotonic() > deadline:
            return count
        channel.connection.process_data_events(time_limit=0.1)
    return count


def assert_count_reaches(
    channel: BlockingChannel, queue: str, expected: int, *, timeout: float = COUNT_DEADLINE
) -> None:
    """Until Declare-Ok reports ``expected`` messages; unlike :func:`wait_for_count`, fails
    after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (count := message_count(channel, queue)) != expected:
        assert time.monotonic() < deadline, f"{queue} counts {count}, not {expected}"
        channel.connection.process_data_events(time_limit=0.1)


def aio_pika_outcomes(port: int, arguments: dict[str, Any], bodies: list[bytes]) -> list[str]:
    """Declare a queue with ``arguments`` with aio-pika and publish ``bodies`` to it, confirms
    on (aio-pika's default): "ack" or "nack" for each."""
    queue = unique("q")

    async def scenario() -> list[str]:
        outcomes = []
        connection = await aio_pika.connect(amqp_url(port))
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue(queue, arguments=arguments)
            for body in bodies:
                try:
                    await channel.default_exchange.publish(aio_pika.Message(body), queue)
                    outcomes.append("ack")
                except aiormq.exceptions.DeliveryError:
                    outcomes.append("nack")
        return outcomes

    return asyncio.run(asyncio.wait_for(scenario(), 30))


def drain_kombu(connection: KombuConnection, until: Any, timeout: float = 10.0) -> None:
    """kombu's event loop until ``until()`` holds, with a deadline."""
    deadline = time.monotonic() + timeout
    while not until():
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("timed out draining kombu events")
        with contextlib.suppress(TimeoutError):
            connection.drain_events(timeout=min(left, 0.2))


@contextmanager
def channel_closed(code: int, text: str | None = None) -> Iterator[None]:
    """The block must end with Channel.Close ``code`` (and ``text`` in the reply text)."""
    try:
        yield
    except pika.exceptions.ChannelClosedByBroker as closed:
        assert (closed.reply_code, closed.reply_text) == (code, text or closed.reply_text), (
            closed.reply_code,
            closed.reply_text,
        )
    else:
        raise AssertionError(f"expected Channel.Close {code}")


@contextmanager
def connection_closed(code: int, text: str | None = None) -> Iterator[None]:
    """The block must end with Connection.Close ``code`` (and ``text`` in the reply text)."""
    try:
        yield
    except pika.exceptions.ConnectionClosedByBroker as closed:
        assert (closed.reply_code, closed.reply_text) == (code, text or closed.reply_text), (
            closed.reply_code,
            closed.reply_text,
        )
    else:
        raise AssertionError(f"expected Connection.Close {code}")


def round_trip(channel: BlockingChannel) -> None:
    """A synchronous method, so that an asynchronous error (after a publish or an ack)
    surfaces in the block that caused it."""
    channel.exchange_declare("amq.direct", passive=True)


def collect(
    connection: pika.BlockingConnection,
    expected: dict[str, int],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    settle: float = 0.3,
) -> dict[str, list[bytes]]:
    """Consume (auto-ack) from every queue of ``expected`` on one channel until each has
    delivered its expected number of messages, then for ``settle`` seconds more (so that
    anything extra shows up), and return the bodies per queue, in delivery order."""
    channel = connection.channel()
    got: dict[str, list[bytes]] = {queue: [] for queue in expected}
    for queue in expected:
        channel.basic_consume(
            queue,
            lambda _ch, _m, _p, body, queue=queue: got[queue].append(body),
            auto_ack=True,
        )
    wait_for(
        lambda: all(len(got[q]) >= n for q, n in expected.items()),
        connection,
        timeout=timeout,
        what=lambda: f"deliveries {expected}, got { {q: len(b) for q, b in got.items()} }",
    )
    observe(connection, settle)
    channel.close()
    return got


# Seconds a SelectFlow that timed out waits for the gateway's Close-Ok.
CLOSE_GRACE = 5.0


class SelectFlow:
    """A pika ``SelectConnection`` (the callback-style adapter) driven until ``finish()`` is
    called from one of its callbacks, or until ``timeout`` (a failure).

    ``run(start)`` opens the connection and a channel, calls ``start(channel)``, and runs the
    I/O loop. Callbacks record what they saw in ``events``.
    """

    def __init__(self, port: int, *, vhost: str = "/", timeout: float = 20.0) -> None:
        self.events: list[Any] = []
        self.timeout = timeout
        self.failure: str | None = None
        self.close_reason: BaseException | None = None
        self._start: Callable[[Any], None] | None = None
        self._finished = False
        self.connection = pika.SelectConnection(
            pika.ConnectionParameters(
                host="127.0.0.1", port=port, virtual_host=vhost, connection_attempts=1
            ),
            on_open_callback=self._opened,
            on_open_error_callback=self._open_failed,
            on_close_callback=self._closed,
        )

    def _opened(self, connection: Any) -> None:
        connection.channel(on_open_callback=self._channel_opened)

    def _channel_opened(self, channel: Any) -> None:
        assert self._start is not None
        try:
            self._start(channel)
        except Exception as error:  # reported by run(), not swallowed by pika's loop
            self.failure = f"start failed: {error!r}"
            self.finish()

    def _open_failed(self, _connection: Any, error: BaseException) -> None:
        self.failure = f"connection failed: {error!r}"
        self.connection.ioloop.stop()

    def _closed(self, _connection: Any, reason: BaseException) -> None:
        self.close_reason = reason
        if not self._finished and self.failure is None:
            self.failure = f"connection closed early: {reason!r}"
        self.connection.ioloop.stop()

    def _timed_out(self) -> None:
        self.failure = f"timed out after {self.timeout}s; events so far: {self.events!r}"
        self.finish()
        # pika waits for Close-Ok without a deadline: a gateway that never answers must fail
        # the test, not hang it.
        self.connection.ioloop.call_later(CLOSE_GRACE, self._close_timed_out)

    def _close_timed_out(self) -> None:
        self.failure = f"{self.failure}; the gateway did not answer Connection.Close either"
        self.connection.ioloop.stop()

    def finish(self) -> None:
        """Done: close the connection, which stops the loop."""
        self._finished = True
        if self.connection.is_open:
            self.connection.close()
        elif self.connection.is_closed:
            self.connection.ioloop.stop()

    def run(self, start: Callable[[Any], None]) -> list[Any]:
        self._start = start
        timer = self.connection.ioloop.call_later(self.timeout, self._timed_out)
        self.connection.ioloop.start()
        self.connection.ioloop.remove_timeout(timer)
        if self.failure is not None:
            raise AssertionError(self.failure)
        return self.events
