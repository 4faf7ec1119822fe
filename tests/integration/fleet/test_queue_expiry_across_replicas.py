"""Queue expiry across two replicas: uses on one replica keep a queue declared on the other,
and the namespace's leader (either replica) deletes it once the fleet stops using it."""

from __future__ import annotations

import time
from typing import Any

import pika.exceptions
import pytest

from tests.support.gateway_thread import GatewayInThread
from tests.support.thread_replicas import channel_on

pytestmark = pytest.mark.integration


DEADLINE = 20.0


def exists(gateway: GatewayInThread, queue: str) -> bool:
    channel = channel_on(gateway)
    try:
        channel.queue_declare(queue, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker as closed:
        assert closed.reply_code == 404
        return False
    finally:
        channel.connection.close()


def test_uses_on_either_replica_renew_the_lease(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = replicas
    channel_on(a).queue_declare("leased", arguments={"x-expires": 1500})
    user: Any = channel_on(b)
    until = time.monotonic() + 4.0  # more than two expiries, used only through b
    while time.monotonic() < until:
        user.basic_get("leased", auto_ack=True)
        user.connection.process_data_events(time_limit=0.25)
    assert exists(a, "leased")
    deadline = time.monotonic() + DEADLINE
    while exists(a, "leased"):
        assert time.monotonic() < deadline, "the unused queue was not deleted"
        time.sleep(0.05)  # polling interval of a condition with a deadline
    assert not exists(b, "leased")
