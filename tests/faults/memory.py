"""Issue 17 item 5, memory is bounded: the scenarios, shared by tests/faults and bench/faults.py.

Each runs against a real gateway process and returns what it measured; the caller asserts or
prints."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import aio_pika
import httpx
import pika

from tests.faults.gateway_process import LimitedGatewayProcess, wait_until
from tests.support.clients import amqp_url, connect, unique

MB = 1024 * 1024
WINDOW = 200  # publishes in flight at once (each awaited for its confirm)


class RssSampler(threading.Thread):
    """The gateway's VmRSS every ``period`` seconds until ``stop()``; ``peak`` is the largest."""

    def __init__(self, process: LimitedGatewayProcess, period: float = 0.05) -> None:
        super().__init__(daemon=True)
        self._process = process
        self._period = period
        self._stopped = threading.Event()
        self.peak = process.rss()

    def run(self) -> None:
        while not self._stopped.wait(self._period):
            self.peak = max(self.peak, self._process.rss())

    def stop(self) -> int:
        self._stopped.set()
        self.join()
        return self.peak


@dataclass
class MemoryFigures:
    published: int
    confirmed: int = 0
    delivered: int = 0
    rss_before: int = 0  # after the warm-up window
    rss_peak: int = 0
    rss_after: int = 0
    seconds: float = 0.0
    blocked: list[str] = field(default_factory=list)

    @property
    def growth(self) -> int:
        return self.rss_peak - self.rss_before

    def describe(self) -> str:
        return (
            f"{self.published} x 10 KB: {self.confirmed} confirmed, {self.delivered} delivered, "
            f"RSS {self.rss_before / MB:.1f} MB -> peak {self.rss_peak / MB:.1f} MB "
            f"(+{self.growth / MB:.1f} MB), after {self.rss_after / MB:.1f} MB, "
            f"{self.published / self.seconds:.0f} msg/s"
        )


async def _unacked_consumer(
    process: LimitedGatewayProcess, count: int, size: int, prefetch: int
) -> MemoryFigures:
    figures = MemoryFigures(published=count)
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    consumer = await aio_pika.connect(amqp_url(process.port))
    publisher = await aio_pika.connect(amqp_url(process.port))
    try:
        consuming = await consumer.channel()
        await consuming.set_qos(prefetch_count=prefetch)
        queue = await consuming.declare_queue(unique("unacked"), durable=True)
        held: list[aio_pika.abc.AbstractIncomingMessage] = []

        async def hold(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            held.append(message)  # never acked: the consumer is stuck

        await queue.consume(hold)
        publishing = await publisher.channel()  # publisher confirms on
        loop = asyncio.get_running_loop()
        started = loop.time()
        sampler: RssSampler | None = None
        for sent in range(0, count, WINDOW):
            batch = min(WINDOW, count - sent)
            confirms = await asyncio.gather(
                *(
                    publishing.default_exchange.publish(
                        aio_pika.Message(body, delivery_mode=2), routing_key=queue.name
                    )
                    for _ in range(batch)
                )
            )
            figures.confirmed += sum(1 for confirm in confirms if confirm is not None)
            if sampler is None:
                # The first window warmed up the producer, the consumer and their buffers.
                figures.rss_before = process.rss()
                sampler = RssSampler(process)
                sampler.start()
        figures.seconds = loop.time() - started
        assert sampler is not None
        figures.rss_peak = sampler.stop()
        # Deliveries past the prefetch would show up here within the wait: give them time.
        await asyncio.sleep(0.5)  # an observation window for what must NOT happen
        figures.delivered = len(held)
        figures.rss_after = process.rss()
    finally:
        await publisher.close()
        await consumer.close()
    return figures


def unacked_consumer(
    process: LimitedGatewayProcess, count: int, size: int = 10 * 1024, prefetch: int = 10
) -> MemoryFigures:
    """A consumer with ``prefetch`` that never acks while ``count`` messages are published
    with confirms, ``WINDOW`` at a time."""
    return asyncio.run(_unacked_consumer(process, count, size, prefetch))


def _stored(web_url: str, process: LimitedGatewayProcess, queue: str) -> int:
    """How many messages Pulsar has taken into the queue's default-exchange topic (the
    broker's counter: the queue's message count scans the backlog, slow for 500 MB)."""
    topic = f"public/{process.namespace}/amq.default__{queue}"
    response = httpx.get(f"{web_url}/admin/v2/persistent/{topic}/stats", timeout=30)
    return int(response.json()["msgInCounter"]) if response.status_code == 200 else 0


def fast_publisher(
    process: LimitedGatewayProcess, web_url: str, count: int, size: int = 10 * 1024
) -> MemoryFigures:
    """One pika publisher without confirms, as fast as its socket takes bytes, nobody consuming;
    then every message must reach Pulsar."""
    import time

    figures = MemoryFigures(published=count)
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    connection = connect(process.port)
    try:
        connection.add_on_connection_blocked_callback(
            lambda _c, method: figures.blocked.append(method.method.reason)
        )
        channel = connection.channel()
        queue = unique("flood")
        channel.queue_declare(queue, durable=True)
        for _ in range(WINDOW):
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
        wait_until(lambda: _stored(web_url, process, queue) >= WINDOW, timeout=60, what="warm-up")
        figures.rss_before = process.rss()
        sampler = RssSampler(process)
        sampler.start()
        started = time.monotonic()
        for _ in range(count):
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
        wait_until(
            lambda: _stored(web_url, process, queue) >= count + WINDOW,
            timeout=120,
            what=f"{count + WINDOW} messages in {queue}",
        )
        figures.seconds = time.monotonic() - started
        figures.rss_peak = sampler.stop()
        figures.confirmed = figures.delivered = _stored(web_url, process, queue) - WINDOW
        figures.rss_after = process.rss()
    finally:
        connection.close()
    return figures
