"""Issue 17 item 1: the Pulsar broker goes down under load and comes back.

The broker is a standalone of the test's own on free ports (tests/support/own_stack.py: the
shared one serves every other test), stopped with SIGTERM as an operator stops it or killed
with SIGKILL as in a crash, and started again on its data; the gateway keeps its metadata in
the shared ZooKeeper, which stays up. A publisher with confirms and a consumer with acks run
throughout (tests/faults/outages.py). One broker and one gateway serve both tests (a JVM start
less). bench/faults.py runs the same with longer outages and prints the figures."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.gateway_process import LimitedGatewayProcess, gateway
from tests.faults.outages import through_an_outage
from tests.support.clients import connect, unique
from tests.support.own_stack import OwnStack, own_stack, pulsar_of

pytestmark = pytest.mark.integration

OUTAGE = 3.0  # seconds without a confirm before the broker is started again
REPLY_CODE = re.compile(r"^\d{3} ")


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pulsar-outage")


@pytest.fixture(scope="module")
def broker(directory: Path) -> Iterator[OwnStack]:
    with own_stack(directory / "pulsar") as started:
        yield started


@pytest.fixture(scope="module")
def process(
    broker: OwnStack, pulsar_stack: Any, directory: Path
) -> Iterator[LimitedGatewayProcess]:
    with gateway(pulsar_of(broker, metadata=pulsar_stack), directory) as started:
        yield started


@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_broker_down_and_back_under_load(
    process: LimitedGatewayProcess, broker: OwnStack, how: str
) -> None:
    queue = unique("outage")
    connection = connect(process.port)
    connection.channel().queue_declare(queue, durable=True)
    connection.close()

    figures = through_an_outage(
        process.port,
        queue,
        # SIGTERM as an operator stops it, or SIGKILL as a crash (nothing closed or flushed
        # by the JVM: a confirm for a message the bookie had not written would show here).
        stop=broker.down if how == "stopped" else broker.crash,
        start=broker.up,
        outage=OUTAGE,
        alive=process.alive,
    )
    print(how, figures.describe())
    # The same process served throughout; every confirmed message was delivered (checked by
    # through_an_outage); what the clients were told was a nack or a close with a reply code,
    # never a connection that went silent past the heartbeat.
    assert process.alive()
    assert all(REPLY_CODE.match(close) for close in figures.publisher_closes), figures.describe()
    assert all(REPLY_CODE.match(close) for close in figures.consumer_closes), figures.describe()
