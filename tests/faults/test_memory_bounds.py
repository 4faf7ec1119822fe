"""Issue 17 item 5: memory stays bounded under a stuck consumer and a flooding publisher, and the
size limits hold end to end (bench/faults.py runs the same scenarios ten times longer).

The bounds are far below what keeping the messages would take (5,000 x 10 KB = 49 MB): a
gateway that queued them in memory fails here. Frame and message limits of the bare AMQP core
(frame_max exactly / one over, max_message_size exactly / one over) are in
tests/unit/amqp/connection/test_protocol_errors.py and tests/unit/amqp/test_connection.py, the
oversized frame over TCP in tests/integration/clients/test_clients_protocol.py; here a 1 MiB
message goes through Pulsar in frames of exactly frame_max."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.faults.gateway_process import LimitedGatewayProcess, gateway
from tests.faults.memory import MB, fast_publisher, unacked_consumer
from tests.support.clients import channel_closed, connect, unique

pytestmark = pytest.mark.integration

MESSAGES = 5_000
# Two thirds of what the messages weigh: a gateway that held them all grows past 49 MB. The
# flooding publisher's growth was 9-26 MB in 7 runs on 2026-11-29 (pulsar-client's producer
# queue and the allocator's retained pages), over the earlier half (24 MB) in 2 of them.
GROWTH_BOUND = 32 * MB
MAX_MESSAGE = MB
FRAME_MAX = 131_072


@pytest.fixture
def process(pulsar_stack: Any, tmp_path: Path) -> Iterator[LimitedGatewayProcess]:
    with gateway(pulsar_stack, tmp_path, extra=f"amqpMaxMessageSize={MAX_MESSAGE}\n") as started:
        yield started


def test_a_consumer_that_never_acks_holds_only_its_prefetch(
    process: LimitedGatewayProcess,
) -> None:
    figures = unacked_consumer(process, MESSAGES)
    print(figures.describe())
    assert figures.confirmed == MESSAGES
    assert figures.delivered == 10
    assert figures.growth < GROWTH_BOUND, figures.describe()


def test_a_publisher_faster_than_pulsar_is_slowed_down_not_buffered(
    process: LimitedGatewayProcess, pulsar_stack: Any
) -> None:
    figures = fast_publisher(process, pulsar_stack.web_url, MESSAGES)
    print(figures.describe(), "blocked:", figures.blocked)
    assert figures.delivered == MESSAGES
    assert figures.growth < GROWTH_BOUND, figures.describe()


def test_a_message_of_the_size_limit_in_frames_of_frame_max_and_one_octet_more(
    process: LimitedGatewayProcess,
) -> None:
    body = bytes(range(256)) * (MAX_MESSAGE // 256)
    connection = connect(process.port, frame_max=FRAME_MAX)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        queue = unique("large")
        channel.queue_declare(queue)
        # pika cuts the body into frames of exactly frame_max octets (header and end included).
        channel.basic_publish("", queue, body, pika.BasicProperties(), mandatory=True)
        method, _properties, got = channel.basic_get(queue, auto_ack=True)
        assert method is not None and got == body
        with channel_closed(406):
            channel.basic_publish("", queue, body + b"!")
        # The channel is closed, the connection goes on, and nothing of the refused message
        # was stored.
        method, _properties, got = connection.channel().basic_get(queue, auto_ack=True)
        assert method is None, got[:20]
        assert process.alive()
    finally:
        connection.close()
