"""pika clients for the fleet tests: consumers that run in threads of their own, so that
several consumers on several replicas take their share at the same time."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from typing import Any

import httpx
import pika
import pika.exceptions

from gateway.model.naming import encode_local_name, subscription_for
from tests.support.clients import connect


class Consumer(threading.Thread):
    """A pika consumer of ``queue`` on the gateway at ``port`` with ``prefetch``; acks each
    message as it records it (``ack=False``: holds every message unacknowledged)."""

    def __init__(self, name: str, port: int, queue: str, *, prefetch: int, ack: bool = True):
        super().__init__(name=name, daemon=True)
        self.port = port
        self.queue = queue
        self.prefetch = prefetch
        self.ack = ack
        self.bodies: list[bytes] = []
        self.redelivered: list[bool] = []
        self.error: BaseException | None = None
        self.consuming = threading.Event()
        self._stop_requested = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        connection: pika.BlockingConnection | None = None
        try:
            connection = connect(self.port)
            channel = connection.channel()
            channel.basic_qos(prefetch_count=self.prefetch)

            def on_message(channel: Any, method: Any, properties: Any, body: bytes) -> None:
                with self._lock:
                    self.bodies.append(body)
                    self.redelivered.append(bool(method.redelivered))
                if self.ack:
                    channel.basic_ack(method.delivery_tag)

            channel.basic_consume(self.queue, on_message)
            self.consuming.set()  # Consume-Ok came back
            while not self._stop_requested.is_set():
                connection.process_data_events(time_limit=0.05)
        except BaseException as error:  # reported to the test by the assertions on .error
            self.error = error
        finally:
            self.consuming.set()
            if connection is not None and connection.is_open:
                with contextlib.suppress(pika.exceptions.AMQPError):
                    connection.close()

    def received(self) -> list[bytes]:
        with self._lock:
            return list(self.bodies)

    def wait_consuming(self, timeout: float = 30.0) -> Consumer:
        assert self.consuming.wait(timeout), f"{self.name} did not start consuming"
        assert self.error is None, f"{self.name}: {self.error!r}"
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self._stop_requested.set()
        self.join(timeout)


def wait_until(condition: Any, *, timeout: float, what: Any) -> None:
    """Poll ``condition()`` (the consumers advance in their own threads) until a deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout} s: {described}")
        time.sleep(0.02)  # the polling interval of a condition with a deadline, not a sync


def wait_known(
    connection: pika.BlockingConnection, queue: str = "", *, exchange: str = "", timeout: float = 10
) -> None:
    """Until the connection's gateway knows ``queue`` (or ``exchange``): a passive declare
    stops failing with 404. A change reaches the other replicas through ZooKeeper within
    milliseconds, not at once (docs/fleet.md); this waits out that window where a test's next
    step needs the entity on a replica other than the one that made it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            channel = connection.channel()
            if exchange:
                channel.exchange_declare(exchange, passive=True)
            else:
                channel.queue_declare(queue, passive=True)
            channel.close()
            return
        except pika.exceptions.ChannelClosedByBroker as closed:
            if closed.reply_code != 404 or time.monotonic() > deadline:
                raise


def wait_subscription_consumers(
    web_url: str,
    namespace: str,
    binding: tuple[str, str | None],
    queue: str,
    count: int,
    timeout: float = 30,
) -> None:
    """Until Pulsar reports ``count`` consumers on ``queue``'s subscription of the topic of
    ``binding`` (exchange, routing key) in ``public/<namespace>``: every replica's consumer
    is attached, so a Shared subscription can spread what is published next over all of
    them. A replica learns of a binding made elsewhere through ZooKeeper, a moment later."""
    topic = encode_local_name(*binding)
    url = f"{web_url}/admin/v2/persistent/public/{namespace}/{topic}/stats"
    subscription = subscription_for(queue)

    def attached() -> int:
        response = httpx.get(url, timeout=5)
        if response.status_code == 404:
            return 0
        response.raise_for_status()
        found = response.json().get("subscriptions", {}).get(subscription, {})
        return len(found.get("consumers", []))

    wait_until(
        lambda: attached() >= count,
        timeout=timeout,
        what=lambda: f"{attached()} of {count} consumers on {topic}/{subscription}",
    )


def observe_window(seconds: float) -> None:
    """Let the consumers run for a moment before asserting that something did *not* happen
    (a duplicate delivery): the absence of an event has no condition to wait on."""
    time.sleep(seconds)


def tally(consumers: list[Consumer]) -> Counter[bytes]:
    counts: Counter[bytes] = Counter()
    for consumer in consumers:
        counts.update(consumer.received())
    return counts
