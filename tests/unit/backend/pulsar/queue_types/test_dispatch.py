"""The one dispatch on a queue's type (queue_types/dispatch.py): ``x-queue-type`` picks the
type, RabbitMQ's module names included; no argument, an empty or ``undefined`` one, a quorum
queue and a queue that is gone are read through subscriptions as classic queues are."""

from __future__ import annotations

import pytest

from gateway.amqp.fieldtable import Field, field_from_plain
from gateway.backend.pulsar.queue_types.classic.queue_type import CLASSIC
from gateway.backend.pulsar.queue_types.dispatch import keeps_log, type_of, type_of_queue
from gateway.backend.pulsar.queue_types.interface import QueueType
from gateway.backend.pulsar.queue_types.stream.queue_type import STREAM
from gateway.model.entities import Queue


def _arguments(queue_type: str | None) -> dict[str, Field]:
    return {} if queue_type is None else {"x-queue-type": field_from_plain(queue_type)}


@pytest.mark.parametrize(
    ("named", "expected"),
    [
        (None, CLASSIC),
        ("", CLASSIC),
        ("undefined", CLASSIC),
        ("classic", CLASSIC),
        ("rabbit_classic_queue", CLASSIC),
        ("quorum", CLASSIC),
        ("stream", STREAM),
        ("rabbit_stream_queue", STREAM),
    ],
)
def test_the_type_comes_from_x_queue_type(named: str | None, expected: QueueType) -> None:
    assert type_of(_arguments(named)) is expected


def test_only_a_stream_keeps_a_log() -> None:
    assert keeps_log(Queue("s", durable=True, arguments=_arguments("stream")))
    assert not keeps_log(Queue("q", arguments=_arguments("classic")))
    assert not keeps_log(None)
    assert type_of_queue(None) is CLASSIC
