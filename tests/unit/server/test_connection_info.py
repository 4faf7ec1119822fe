"""gateway/server/connection_info.py: RabbitMQ's connection names, and a consumer as
``/api/consumers`` describes it."""

from __future__ import annotations

import pytest

from gateway.amqp import commands as cmd
from gateway.amqp.fieldtable import Field
from gateway.backend.interface import Owner
from gateway.backend.memory import MemoryBackend
from gateway.server.channel_state import Consumer
from gateway.server.connection_info import connection_name, consumer_info, split_address


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:5555", ("127.0.0.1", 5555)),
        ("::1:5555", ("::1", 5555)),
        ("unix:x", ("unix:x", None)),
    ],
)
def test_split_address(address: str, expected: tuple[str, int | None]) -> None:
    assert split_address(address) == expected


def test_names_are_rabbitmqs() -> None:
    assert (
        connection_name("10.0.0.1:41000", ("10.0.0.2", 5672)) == "10.0.0.1:41000 -> 10.0.0.2:5672"
    )
    assert connection_name("unix:/run/gw.sock", None) == "unix:/run/gw.sock -> unix"


async def test_a_consumer_is_described_as_rabbitmq_lists_it() -> None:
    """``consumer_info``: RabbitMQ's /api/consumers fields of a session's consumer; the
    activity of a single-active-consumer queue's consumers is the backend's (memory here)."""
    vhost = await MemoryBackend().open_vhost("/", "guest")
    owner = Owner("c1", "guest")
    await vhost.declare_queue(cmd.QueueDeclare("work"), owner)
    line = {"x-single-active-consumer": Field("t", True)}
    await vhost.declare_queue(cmd.QueueDeclare("line", arguments=line), owner)
    command = cmd.BasicConsume("work", "w", arguments={"x-priority": Field("I", 5)})
    worker = Consumer(
        "w", "work", False, 3, await vhost.consume(command, owner), arguments=command.arguments
    )
    assert consumer_info(2, worker) == {
        "consumer_tag": "w",
        "queue": "work",
        "channel": 2,
        "ack_required": True,
        "prefetch_count": 3,
        "exclusive": False,
        "active": True,
        "activity_status": "up",
        "arguments": {"x-priority": 5},
    }
    first, second = [
        Consumer(tag, "line", True, 0, await vhost.consume(cmd.BasicConsume("line", tag), owner))
        for tag in ("a", "b")
    ]
    described = [consumer_info(1, c) for c in (first, second)]
    assert [(d["active"], d["activity_status"], d["ack_required"]) for d in described] == [
        (True, "single_active", False),
        (False, "waiting", False),
    ]
    await first.subscription.close()
    assert consumer_info(1, second)["activity_status"] == "single_active"
