"""Issue 17 item 1: the Pulsar broker goes down under load and comes back.

The broker is a standalone of the test's own on free ports (tests/faults/own_stack.py: the
shared one serves every other test), stopped with SIGTERM as an operator stops it and started
again on its data; the gateway keeps its metadata in the shared ZooKeeper, which stays up. A
publisher with confirms and a consumer with acks run throughout (tests/faults/outages.py).
bench/faults.py runs the same with a longer outage and prints the figures."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.gateway_process import LimitedGatewayProcess, gateway
from tests.faults.outages import through_an_outage
from tests.faults.own_stack import OwnStack, own_stack, pulsar_of
from tests.support.clients import connect, unique

pytestmark = pytest.mark.integration

OUTAGE = 3.0  # seconds without a confirm before the broker is started again
REPLY_CODE = re.compile(r"^\d{3} ")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[OwnStack]:
    with own_stack(tmp_path / "pulsar") as started:
        yield started


@pytest.fixture
def process(broker: OwnStack, pulsar_stack: Any, tmp_path: Path) -> Iterator[LimitedGatewayProcess]:
    with gateway(pulsar_of(broker, metadata=pulsar_stack), tmp_path) as started:
        yield started


def test_broker_down_and_back_under_load(process: LimitedGatewayProcess, broker: OwnStack) -> None:
    queue = unique("outage")
    connection = connect(process.port)
    connection.channel().queue_declare(queue, durable=True)
    connection.close()

    figures = through_an_outage(
        process.port,
        queue,
        stop=broker.down,
        start=broker.up,
        outage=OUTAGE,
        alive=process.alive,
    )
    print(figures.describe())
    # The same process served throughout; every confirmed message was delivered (checked by
    # through_an_outage); what the clients were told was a nack or a close with a reply code,
    # never a connection that went silent past the heartbeat.
    assert process.alive()
    assert all(REPLY_CODE.match(close) for close in figures.publisher_closes), figures.describe()
    assert all(REPLY_CODE.match(close) for close in figures.consumer_closes), figures.describe()
