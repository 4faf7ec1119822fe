"""Known AMQP traffic (pika), and what the client saw of it, for exact counter checks."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pika
import pika.exceptions

QUEUE = "metered"
PUBLISHED = 20
RETURNED = 3
DROPPED = 2
GET_AUTO = 3
GET_MANUAL = 2
NACKED = 5
BODY = 100


def body(index: int) -> bytes:
    return f"{index:04d}".encode().ljust(BODY, b".")


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))


def publish(port: int) -> None:
    """PUBLISHED routed messages, RETURNED mandatory unroutable ones, DROPPED unroutable
    non-mandatory ones; all on one confirm channel."""
    connection = connect(port)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare(QUEUE)
    for index in range(PUBLISHED):
        channel.basic_publish("", QUEUE, body(index))
    for _ in range(RETURNED):
        try:
            channel.basic_publish("", "no-such-queue", b"r" * 10, mandatory=True)
        except pika.exceptions.UnroutableError:
            pass
        else:
            raise AssertionError("a mandatory unroutable publish was not returned")
    for _ in range(DROPPED):
        channel.basic_publish("", "no-such-queue", b"d" * 10)
    connection.close()


@dataclass
class Seen:
    """What the consuming client saw: the gateway must have counted exactly this."""

    get_auto: int = 0
    get_manual: int = 0
    get_empty: int = 0
    consumed: int = 0
    redelivered: int = 0
    acknowledged: int = 0
    bytes_delivered: int = 0


def consume(port: int, timeout: float = 60.0) -> Seen:
    """GET_AUTO auto-ack gets, GET_MANUAL manual gets (acked), then a consumer that nacks
    NACKED deliveries (requeued) and acks everything else until all PUBLISHED were acked;
    then one get on the empty queue."""
    seen = Seen()
    deadline = time.monotonic() + timeout
    connection = connect(port)
    channel = connection.channel()
    settled: set[bytes] = set()

    def get(auto_ack: bool) -> None:
        while time.monotonic() < deadline:
            method, _props, payload = channel.basic_get(QUEUE, auto_ack=auto_ack)
            if method is None:
                seen.get_empty += 1
                time.sleep(0.05)
                continue
            seen.bytes_delivered += len(payload)
            seen.redelivered += int(method.redelivered)
            if auto_ack:
                seen.get_auto += 1
            else:
                seen.get_manual += 1
                channel.basic_ack(method.delivery_tag)
                seen.acknowledged += 1
            settled.add(payload)
            return
        raise AssertionError("basic.get found nothing in time")

    for _ in range(GET_AUTO):
        get(True)
    for _ in range(GET_MANUAL):
        get(False)
    channel.basic_qos(prefetch_count=50)
    nacked = 0
    for method, _props, payload in channel.consume(QUEUE, inactivity_timeout=1.0):
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(settled)} of {PUBLISHED} settled in time")
        if method is None:
            continue
        seen.consumed += 1
        seen.bytes_delivered += len(payload)
        seen.redelivered += int(method.redelivered)
        if nacked < NACKED and not method.redelivered:
            channel.basic_nack(method.delivery_tag, requeue=True)
            nacked += 1
            continue
        channel.basic_ack(method.delivery_tag)
        seen.acknowledged += 1
        settled.add(payload)
        if len(settled) == PUBLISHED:
            break
    channel.cancel()
    method, _props, _payload = channel.basic_get(QUEUE, auto_ack=True)
    assert method is None, "the queue should be empty"
    seen.get_empty += 1
    connection.close()
    return seen
