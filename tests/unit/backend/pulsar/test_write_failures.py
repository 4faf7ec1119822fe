"""A publish's ``Stored`` fails with the AMQP error (write_failures.py): the server's watch of
writes without confirms needs no Pulsar; a full queue's refusal passes as it is; the messages
of one grouped send keep sharing one ``Stored`` (confirms and the watch rely on it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio

from gateway.amqp.errors import AMQPError, ChannelError, ConnectionException, ReplyCode
from gateway.backend.interface import AlreadyStored, PublishOutcome
from gateway.backend.overflow import QueueFull, RefusedStored
from gateway.backend.pulsar.write_failures import AMQPStored, PublishFailures
from gateway.pulsar.errors import SendError


class Handle:
    """A Pulsar send handle as the watch of writes sees it (gateway/pulsar/producer.py)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.ok = error is None
        self.callbacks: list[Callable[[Any], None]] = []

    def done(self) -> bool:
        return True

    async def durable(self) -> None:
        if self.error is not None:
            raise self.error

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self.callbacks.append(callback)


def test_a_message_pulsar_finds_too_big_fails_with_406() -> None:
    stored = AMQPStored(Handle(SendError("MessageTooBig", "send to t")))
    error = stored.error
    assert isinstance(error, ChannelError)
    assert error.reply_code == ReplyCode.PRECONDITION_FAILED
    assert "publishing" in str(error)


def test_a_timeout_fails_the_connection_and_durable_raises_it() -> None:
    stored = AMQPStored(Handle(SendError("Timeout", "send to t")))

    async def main() -> None:
        with pytest.raises(ConnectionException) as raised:
            await stored.durable()
        assert raised.value.reply_code == ReplyCode.INTERNAL_ERROR

    trio.run(main)


def test_a_full_queue_refusal_is_not_translated() -> None:
    stored = AMQPStored(RefusedStored(["q"]))
    assert not hasattr(stored, "add_done_callback")  # the watch awaits it instead

    async def main() -> None:
        with pytest.raises(QueueFull):
            await stored.durable()

    trio.run(main)


def test_the_handle_reports_to_its_callbacks_with_the_translation() -> None:
    handle = Handle(SendError("MessageTooBig"))
    stored = AMQPStored(handle)
    seen: list[BaseException | None] = []
    stored.add_done_callback(lambda done: seen.append(done.error))
    for callback in handle.callbacks:
        callback(handle)
    assert len(seen) == 1 and isinstance(seen[0], AMQPError)
    assert AMQPStored(Handle()).error is None and AMQPStored(Handle()).ok


def test_one_group_keeps_one_stored() -> None:
    failures = PublishFailures()
    group, other = Handle(), Handle()
    first = failures.outcome(PublishOutcome(True, group))
    assert failures.outcome(PublishOutcome(True, group)) is first
    assert failures.outcome(PublishOutcome(False, group)).stored is not first.stored
    assert failures.outcome(PublishOutcome(True, other)).stored is not first.stored
    nothing = PublishOutcome(False, AlreadyStored())
    assert failures.outcome(nothing) is nothing


def test_a_routed_write_shares_its_groups_outcome() -> None:
    failures = PublishFailures()
    group, other = Handle(), Handle()
    first = failures.routed(group)
    assert first.routed and isinstance(first.stored, AMQPStored)
    assert failures.routed(group) is first
    assert failures.outcome(PublishOutcome(True, group)) is first
    unrouted = failures.outcome(PublishOutcome(False, group))
    assert failures.routed(group) is not unrouted and failures.routed(group).routed
    assert failures.routed(other).stored is not first.stored
