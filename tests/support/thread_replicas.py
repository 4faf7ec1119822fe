"""Two gateway replicas in threads of the test process, on one Pulsar namespace and one
ZooKeeper (each with its own ZooKeeper session and view), and blocking channels on them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pika

from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_gateway import backend_factory, fresh_namespace, stack_config


@contextmanager
def two_replicas(stack: Any) -> Iterator[tuple[GatewayInThread, GatewayInThread]]:
    """Two replicas on a fresh namespace of ``stack`` (removed afterwards)."""
    with fresh_namespace(stack) as namespace:
        config = stack_config(stack.web_url, stack.broker_url, stack.zookeeper, namespace)
        with (
            GatewayInThread(backend_factory=backend_factory(config)) as a,
            GatewayInThread(backend_factory=backend_factory(config)) as b,
        ):
            yield a, b


def channel_on(gateway: GatewayInThread) -> Any:
    params = pika.ConnectionParameters(host="127.0.0.1", port=gateway.port)
    return pika.BlockingConnection(params).channel()


def pump_until(channel: Any, condition: Any, timeout: float = 15.0) -> None:
    """Process ``channel``'s connection's events until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        channel.connection.process_data_events(time_limit=0.05)
