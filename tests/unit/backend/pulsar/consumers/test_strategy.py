"""The one pick of a queue's consumer strategy (consumers/strategy.py): a single-active line
with ``x-single-active-consumer`` true, competing consumers otherwise; each strategy goes to
the vhost's side of it."""

from __future__ import annotations

from typing import Any, cast

import trio

from gateway.amqp import commands as cmd
from gateway.amqp.fieldtable import field_from_plain
from gateway.backend.interface import NO_QOS
from gateway.backend.pulsar.consumers.interface import ConsumerHost
from gateway.backend.pulsar.consumers.single_active import SINGLE_ACTIVE
from gateway.backend.pulsar.consumers.strategy import COMPETING, strategy_of
from gateway.backend.pulsar.queue_types.interface import ConsumeRequest
from gateway.model.entities import Queue


def test_single_active_consumer_queues_have_a_line() -> None:
    assert strategy_of({"x-single-active-consumer": field_from_plain(True)}) is SINGLE_ACTIVE
    assert strategy_of({"x-single-active-consumer": field_from_plain(False)}) is COMPETING
    assert strategy_of({}) is COMPETING


def test_competing_consumers_are_the_hosts() -> None:
    entity, request = Queue("q"), ConsumeRequest(cmd.BasicConsume("q"), 5, NO_QOS)
    asked: list[tuple[Queue, ConsumeRequest]] = []

    class Host:
        async def consume_competing(self, entity: Queue, request: ConsumeRequest) -> Any:
            asked.append((entity, request))
            return "subscription"

    async def main() -> None:
        got = await COMPETING.consume(cast(ConsumerHost, Host()), entity, request)
        assert got == "subscription"

    trio.run(main)
    assert asked == [(entity, request)]
