"""AMQP 0-9-1's empty queue name: "the last queue declared on this channel", for the
``queue`` field of Queue.Bind/Unbind/Purge/Delete, Basic.Consume and Basic.Get."""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from gateway.amqp import commands as cmd
from gateway.amqp.errors import ReplyCode, amqp_error
from gateway.server.channel_state import SessionChannel

# The commands whose empty queue name means "the last queue declared on the channel".
NamesQueue = TypeVar(
    "NamesQueue",
    cmd.QueueBind,
    cmd.QueueUnbind,
    cmd.QueuePurge,
    cmd.QueueDelete,
    cmd.BasicConsume,
    cmd.BasicGet,
)


def named(state: SessionChannel, command: NamesQueue) -> NamesQueue:
    """``command`` with its queue name filled in: an empty one is the channel's last queue
    declared (404 when there is none, as RabbitMQ)."""
    if command.queue:
        return command
    if not state.last_queue:
        raise amqp_error(ReplyCode.NOT_FOUND, "no previously declared queue")
    return replace(command, queue=state.last_queue)
