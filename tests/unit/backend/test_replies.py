"""The direct reply-to registry: generated names, local delivery, forwarding, dropping."""

from __future__ import annotations

import trio

from gateway.backend.interface import Message
from gateway.backend.replies import REPLY_BUFFER, REPLY_PREFIX, ReplyRegistry


def reply(name: str, body: bytes = b"r") -> Message:
    return Message("", name, b"\x00\x00", body)


def test_names_carry_the_replica_and_are_unique() -> None:
    async def main() -> None:
        registry = ReplyRegistry()
        first, second = await registry.register("t1"), await registry.register("t2")
        assert first.name != second.name
        for consumer in (first, second):
            assert consumer.name.startswith(REPLY_PREFIX)
            assert ReplyRegistry.replica_of(consumer.name) == registry.replica
            assert registry.is_local(consumer.name) and registry.alive(consumer.name)
        assert not ReplyRegistry().is_local(first.name)

    trio.run(main)


def test_replica_of_names_that_are_not_generated() -> None:
    assert ReplyRegistry.replica_of("amq.rabbitmq.reply-to") == ""
    assert ReplyRegistry.replica_of(REPLY_PREFIX + "no-token") == ""
    assert ReplyRegistry.replica_of("orders") == ""


def test_a_local_reply_reaches_its_consumer_and_a_gone_one_is_dropped() -> None:
    async def main() -> None:
        registry = ReplyRegistry()
        consumer = await registry.register("t")
        await registry.send(consumer.name, reply(consumer.name, b"one"))
        assert consumer.outbox.receive_nowait().body == b"one"
        registry.unregister(consumer)
        assert not registry.alive(consumer.name)
        await registry.send(consumer.name, reply(consumer.name))  # dropped, no error

    trio.run(main)


def test_a_requester_that_does_not_keep_up_loses_replies_beyond_the_buffer() -> None:
    async def main() -> None:
        registry = ReplyRegistry()
        consumer = await registry.register("t")
        for n in range(REPLY_BUFFER + 5):
            registry.deliver(consumer.name, reply(consumer.name, str(n).encode()))
        assert consumer.outbox.statistics().current_buffer_used == REPLY_BUFFER

    trio.run(main)


def test_other_replicas_names_are_forwarded_and_listen_runs_first() -> None:
    forwarded: list[str] = []
    calls: list[str] = []

    async def forward(name: str, message: Message) -> None:
        forwarded.append(name)

    async def listen() -> None:
        calls.append("listen")

    async def main() -> None:
        registry = ReplyRegistry(forward=forward, listen=listen)
        await registry.register("t")
        assert calls == ["listen"]
        elsewhere = (await ReplyRegistry().register("t")).name
        await registry.send(elsewhere, reply(elsewhere))
        assert forwarded == [elsewhere]

    trio.run(main)
