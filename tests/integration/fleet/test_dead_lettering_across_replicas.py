"""Dead-lettering across two replicas: the dead-letter exchange, its queue and binding are
declared on one replica right before a message is rejected on the other, and the letter
still arrives (the metadata view is fleet-wide; a miss is looked up in ZooKeeper)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.gateway_thread import GatewayInThread
from tests.support.thread_replicas import channel_on, pump_until

pytestmark = pytest.mark.integration


def test_a_message_rejected_on_one_replica_reaches_a_dlx_declared_on_the_other(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = replicas
    worker = channel_on(a)
    worker.queue_declare("work", arguments={"x-dead-letter-exchange": "failures"})
    worker.basic_publish("", "work", b"poison")
    held: list[Any] = []
    worker.basic_consume("work", lambda ch, method, p, body: held.append(method))
    pump_until(worker, lambda: bool(held))

    # Declared on b while a holds the message: a's view may not have it yet.
    other = channel_on(b)
    other.exchange_declare("failures", "fanout")
    other.queue_declare("failed")
    other.queue_bind("failed", "failures")
    worker.basic_reject(held[0].delivery_tag, requeue=False)

    received: list[tuple[Any, Any, bytes]] = []
    other.basic_consume(
        "failed", lambda ch, m, properties, body: received.append((m, properties, body))
    )
    pump_until(other, lambda: bool(received))
    method, properties, body = received[0]
    assert (method.exchange, method.routing_key, body) == ("failures", "work", b"poison")
    [death] = properties.headers["x-death"]
    assert (death["queue"], death["reason"], death["count"]) == ("work", "rejected", 1)
    # The original is gone from work once the letter was stored.
    worker.basic_cancel(worker.consumer_tags[0])
    pump_until(other, lambda: other.queue_declare("work", passive=True).method.message_count == 0)
