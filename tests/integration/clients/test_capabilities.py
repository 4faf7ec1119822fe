"""Connection.Start advertises exactly what the gateway implements."""

from __future__ import annotations

from collections.abc import Iterator

import pika
import pytest

from gateway.amqp.capabilities import SERVER_CAPABILITIES
from gateway.backend.memory import MemoryBackend
from tests.support.clients import connect
from tests.support.gateway_thread import GatewayInThread

IMPLEMENTED = {
    "publisher_confirms",  # Confirm.Select, acks after Pulsar stored the message
    "basic.nack",  # Basic.Nack both ways
    "consumer_cancel_notify",  # Basic.Cancel when a queue is deleted under a consumer
    "connection.blocked",  # Connection.Blocked while Pulsar holds publishes back
    "per_consumer_qos",  # Basic.Qos global=false is per consumer
    "consumer_priorities",  # x-priority on Basic.Consume (test_consumer_priorities.py)
    "authentication_failure_close",  # Connection.Close 403 on a refused login
    "direct_reply_to",  # amq.rabbitmq.reply-to (test_direct_reply_to.py)
    "exchange_exchange_bindings",  # Exchange.Bind/Unbind (test_exchange_bindings.py)
}


@pytest.fixture(scope="module")
def connection() -> Iterator[pika.BlockingConnection]:
    with GatewayInThread(backend=MemoryBackend()) as gateway:
        opened = connect(gateway.port)
        yield opened
        if opened.is_open:
            opened.close()


def test_exactly_the_implemented_capabilities(connection: pika.BlockingConnection) -> None:
    advertised = connection._impl.server_capabilities
    assert advertised == dict.fromkeys(IMPLEMENTED, True)
    assert dict.fromkeys(IMPLEMENTED, True) == SERVER_CAPABILITIES
