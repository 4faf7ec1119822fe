"""Issue 17 items 1-3, outages: clients kept busy while something under the gateway goes away,
shared by tests/faults and bench/faults.py.

A ``Publisher`` publishes numbered persistent messages with confirms, one at a time, and
reconnects when its connection is closed; a ``Consumer`` acks whatever it gets and reconnects
likewise. Both record what they saw (confirms with their time, nacks, close codes) so that a
test can assert that every confirmed number was delivered and say how long recovery took."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pika
import pika.exceptions

from tests.faults.gateway_process import wait_until
from tests.support.clients import connect

HEARTBEAT = 2  # seconds: a gateway that stops answering is noticed by pika within ~2 of these
RECONNECT_PAUSE = 0.1  # between a refused connection attempt and the next


def _describe(error: BaseException) -> str:
    """``"<code> <text>"`` for a close the client was told about, else the exception's kind."""
    args: tuple[object, ...] = getattr(error, "args", ())
    if len(args) == 2 and isinstance(args[0], int):
        return f"{args[0]} {args[1]}"
    if args and isinstance(args[0], BaseException):
        return _describe(args[0])
    return f"{type(error).__name__}: {error}"


@dataclass
class ClientLog:
    """What one client saw, in order."""

    closes: list[str] = field(default_factory=list)  # reply codes / errors that ended connections
    lost: list[str] = field(default_factory=list)  # heartbeat timeouts, streams lost silently
    lock: threading.Lock = field(default_factory=threading.Lock)

    def closed(self, error: BaseException) -> None:
        with self.lock:
            if isinstance(
                error, (pika.exceptions.AMQPHeartbeatTimeout, pika.exceptions.StreamLostError)
            ):
                self.lost.append(_describe(error))
            self.closes.append(_describe(error))


class _Client(threading.Thread):
    def __init__(self, port: int, queue: str, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.port = port
        self.queue = queue
        self.log = ClientLog()
        self.stopping = threading.Event()
        self.failure: BaseException | None = None

    def stop(self, timeout: float = 30.0) -> None:
        self.stopping.set()
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} did not stop within {timeout} s"
        if self.failure is not None:
            raise AssertionError(f"{self.name} failed") from self.failure

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    connection = connect(
                        self.port, heartbeat=HEARTBEAT, blocked_connection_timeout=None
                    )
                except pika.exceptions.AMQPConnectionError as error:
                    self.log.closed(error)
                    self.stopping.wait(RECONNECT_PAUSE)
                    continue
                try:
                    self.serve(connection)
                except (pika.exceptions.AMQPError, ConnectionError) as error:
                    self.log.closed(error)
                finally:
                    if connection.is_open:
                        with contextlib.suppress(pika.exceptions.AMQPError):
                            connection.close()
        except BaseException as error:  # reported by stop()
            self.failure = error

    def serve(self, connection: pika.BlockingConnection) -> None:
        raise NotImplementedError


class Publisher(_Client):
    """Publishes ``b"<n>"`` persistent messages with confirms, waiting for each confirm."""

    def __init__(self, port: int, queue: str, *, first: int = 1, name: str = "publisher") -> None:
        super().__init__(port, queue, name)
        self.sent = first - 1  # numbers from ``first`` on: publishers on one queue differ
        self.confirmed: dict[int, float] = {}  # number -> when its confirm came
        self.nacked: list[int] = []
        self.unknown: list[int] = []  # outstanding when the connection closed
        self.pending_since: float | None = None  # when the publish now waiting was sent
        self.blocked = 0  # Connection.Blocked received

    def serve(self, connection: pika.BlockingConnection) -> None:
        connection.add_on_connection_blocked_callback(self._on_blocked)
        channel = connection.channel()
        channel.confirm_delivery()
        while not self.stopping.is_set():
            self.sent += 1
            number = self.sent
            self.pending_since = time.monotonic()
            try:
                channel.basic_publish(
                    "", self.queue, str(number).encode(), pika.BasicProperties(delivery_mode=2)
                )
            except pika.exceptions.NackError:
                self.nacked.append(number)
            except BaseException:
                self.unknown.append(number)
                raise
            else:
                self.confirmed[number] = time.monotonic()
            finally:
                self.pending_since = None

    def _on_blocked(self, _connection: object, _method: object) -> None:
        self.blocked += 1

    def last_confirm(self) -> float:
        return max(self.confirmed.values(), default=0.0)

    def first_confirm_after(self, moment: float) -> float | None:
        later = [when for when in list(self.confirmed.values()) if when > moment]
        return min(later, default=None)

    def stalled_for(self) -> float:
        """Seconds since the last confirm."""
        return time.monotonic() - self.last_confirm()


class Consumer(_Client):
    """Consumes the queue with manual acks (prefetch 100), acking everything."""

    def __init__(self, port: int, queue: str, *, name: str = "consumer") -> None:
        super().__init__(port, queue, name)
        self.received: dict[int, float] = {}  # number -> when it (last) came
        self.deliveries = 0

    def serve(self, connection: pika.BlockingConnection) -> None:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=100)

        def on_message(
            ch: pika.adapters.blocking_connection.BlockingChannel,
            method: pika.spec.Basic.Deliver,
            _properties: pika.BasicProperties,
            body: bytes,
        ) -> None:
            self.received[int(body)] = time.monotonic()
            self.deliveries += 1
            ch.basic_ack(method.delivery_tag)

        channel.basic_consume(self.queue, on_message)
        while not self.stopping.is_set():
            connection.process_data_events(time_limit=0.2)

    def received_after(self, moment: float) -> int:
        return sum(1 for when in list(self.received.values()) if when > moment)


@dataclass
class OutageFigures:
    """What a publisher and a consumer went through during one outage."""

    outage_seconds: float  # from stop() called to start() returned
    recovery_seconds: float  # from the service back to the first confirm of a new publish
    confirmed: int
    nacked: int
    nacked_delivered: int  # nacked yet stored: a nack means "not known to be stored"
    unknown: int
    blocked: int  # Connection.Blocked the publisher received
    delivered: int
    duplicates: int
    publisher_closes: list[str]
    consumer_closes: list[str]

    def describe(self) -> str:
        return (
            f"outage {self.outage_seconds:.1f} s; first confirm {self.recovery_seconds:.2f} s "
            f"after recovery; {self.confirmed} confirmed, {self.nacked} nacked "
            f"({self.nacked_delivered} of them delivered all the same), "
            f"{self.unknown} unconfirmed at a close, {self.blocked} Connection.Blocked, "
            f"{self.delivered} delivered "
            f"({self.duplicates} duplicates); publisher saw {self.publisher_closes or 'no close'}, "
            f"consumer saw {self.consumer_closes or 'no close'}"
        )


def through_an_outage(
    port: int,
    queue: str,
    *,
    stop: Callable[[], None],
    start: Callable[[], None],
    outage: float,
    after: int = 200,
    alive: Callable[[], bool] = lambda: True,
) -> OutageFigures:
    """Publish and consume on ``queue`` through ``gateway:port`` while ``stop()`` takes a
    service away until the publisher has had no confirm for ``outage`` seconds, and
    ``start()`` brings it back; then publish ``after`` more and wait until every confirmed
    message was delivered. ``alive()`` is checked while the service is away."""
    publisher = Publisher(port, queue)
    consumer = Consumer(port, queue)
    publisher.start()
    consumer.start()
    try:
        wait_until(lambda: len(publisher.confirmed) >= 100, timeout=60, what="100 confirms")
        wait_until(lambda: len(consumer.received) >= 50, timeout=60, what="50 deliveries")
        went_down = time.monotonic()
        stop()
        wait_until(
            lambda: publisher.stalled_for() >= outage,
            timeout=outage + 60,
            what=f"the publisher without a confirm for {outage} s",
        )
        assert alive(), "the gateway died during the outage"
        start()
        back = time.monotonic()
        wait_until(
            lambda: publisher.first_confirm_after(back) is not None,
            timeout=120,
            what="a confirm after the service came back",
        )
        first = publisher.first_confirm_after(back)
        assert first is not None
        confirmed_then = len(publisher.confirmed)
        wait_until(
            lambda: len(publisher.confirmed) >= confirmed_then + after,
            timeout=120,
            what=f"{after} more confirms",
        )
        publisher.stop()
        wait_until(
            lambda: set(publisher.confirmed) <= set(consumer.received),
            timeout=120,
            what="every confirmed message delivered",
        )
        assert consumer.received_after(back) > 0, "the consumer did not resume"
    finally:
        publisher.stopping.set()
        consumer.stopping.set()
        publisher.join(30)
        consumer.join(30)
    for client in (publisher, consumer):
        if client.failure is not None:
            raise AssertionError(f"{client.name} failed") from client.failure
    return OutageFigures(
        outage_seconds=back - went_down,
        recovery_seconds=first - back,
        confirmed=len(publisher.confirmed),
        nacked=len(publisher.nacked),
        nacked_delivered=len(set(publisher.nacked) & set(consumer.received)),
        unknown=len(publisher.unknown),
        blocked=publisher.blocked,
        delivered=len(consumer.received),
        duplicates=consumer.deliveries - len(consumer.received),
        publisher_closes=publisher.log.closes,
        consumer_closes=consumer.log.closes,
    )
