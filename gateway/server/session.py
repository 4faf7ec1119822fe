"""The channel logic behind one connection: what happens to exchange/queue/basic methods.

``ClientConnection`` hands every channel-level event to a ``Session``. A session raises
``AMQPError`` subclasses to refuse something; the connection turns a ``ChannelError`` into
Channel.Close and any other ``AMQPError`` into Connection.Close.
"""

from __future__ import annotations

from typing import Protocol

from gateway.amqp import events as ev
from gateway.amqp.errors import AMQPError, ReplyCode


class Session(Protocol):
    async def handle(self, event: ev.Event) -> None: ...

    async def channel_closed(self, channel: int) -> None:
        """The server closed ``channel`` after an error: drop its work (consumers, unacked)."""
        ...

    async def close(self) -> None:
        """The connection is gone: release everything it held."""
        ...


class UnsupportedSession:
    """A session with no backend: channels open and close, every other method is refused.

    RabbitMQ answers a method it does not implement with a 540 NOT_IMPLEMENTED connection
    error; answering nothing would leave clients waiting forever for a reply.
    """

    async def handle(self, event: ev.Event) -> None:
        if isinstance(event, ev.MethodReceived):
            name = event.method.name.lower()
            raise AMQPError(
                ReplyCode.NOT_IMPLEMENTED,
                f"NOT_IMPLEMENTED - {name} is not supported yet",
                class_id=event.method.index >> 16,
                method_id=event.method.index & 0xFFFF,
            )

    async def channel_closed(self, channel: int) -> None:
        return None

    async def close(self) -> None:
        return None
