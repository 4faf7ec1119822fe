"""pika consumers that record their deliveries, and several connections driven at once.

For tests where more than one consumer (each on a connection of its own) competes for a
queue: who got what, in which order, redelivered or not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingChannel

from tests.support.clients import DEFAULT_TIMEOUT


@dataclass
class Recorder:
    """A consumer's deliveries: (body, redelivered, delivery tag), in order."""

    channel: BlockingChannel
    tag: str = ""
    got: list[tuple[bytes, bool, int]] = field(default_factory=list)

    @property
    def bodies(self) -> list[bytes]:
        return [body for body, _redelivered, _tag in self.got]

    def __call__(self, _ch: Any, method: Any, _props: Any, body: bytes) -> None:
        self.got.append((body, method.redelivered, method.delivery_tag))


def consume(
    channel: BlockingChannel,
    queue: str,
    *,
    prefetch: int = 0,
    auto_ack: bool = False,
    arguments: dict[str, Any] | None = None,
) -> Recorder:
    if prefetch:
        channel.basic_qos(prefetch_count=prefetch)
    recorder = Recorder(channel)
    recorder.tag = channel.basic_consume(
        queue, recorder, auto_ack=auto_ack, arguments=arguments or {}
    )
    return recorder


def pump(
    connections: list[pika.BlockingConnection],
    condition: Callable[[], bool],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    what: str | Callable[[], str] = "condition",
) -> None:
    """Process every connection's events until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {described}")
        for connection in connections:
            if connection.is_open:
                connection.process_data_events(time_limit=0.02)


def settle_window(connections: list[pika.BlockingConnection], seconds: float = 0.5) -> None:
    """Keep every connection's events going for a moment: before asserting that something
    did *not* happen (a waiting consumer got nothing)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for connection in connections:
            if connection.is_open:
                connection.process_data_events(time_limit=0.02)


def publish(channel: BlockingChannel, queue: str, bodies: list[bytes]) -> None:
    """``bodies`` to ``queue`` through the default exchange, each confirmed."""
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish("", queue, body)


def bodies(n: int, prefix: str = "m") -> list[bytes]:
    """``n`` distinct bodies that sort in publish order."""
    return [f"{prefix}{i:03d}".encode() for i in range(n)]
