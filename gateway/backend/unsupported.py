"""A backend that serves vhosts but no entities: every operation is refused with 540.

It lets the protocol layers run end to end (handshake, channels, qos, confirms) before a real
backend is configured; RabbitMQ answers what it does not implement with 540 NOT_IMPLEMENTED,
and answering nothing would leave clients waiting forever.
"""

from __future__ import annotations

from typing import Any, NoReturn

from gateway.amqp.errors import ReplyCode, amqp_error
from gateway.backend.replies import ReplyRegistry


def _refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise amqp_error(ReplyCode.NOT_IMPLEMENTED, "no message backend is configured yet")


class UnsupportedVirtualHost:
    def __init__(self, name: str) -> None:
        self.name = name
        self.replies = ReplyRegistry()

    async def declare_exchange(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    async def send_reply(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    async def delete_exchange(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    async def declare_queue(self, *args: Any, **kwargs: Any) -> Any:
        _refuse()

    async def delete_queue(self, *args: Any, **kwargs: Any) -> int:
        _refuse()

    async def purge_queue(self, *args: Any, **kwargs: Any) -> int:
        _refuse()

    async def bind_queue(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    async def unbind_queue(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    async def bind_exchange(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    async def unbind_exchange(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    async def publish(self, *args: Any, **kwargs: Any) -> Any:
        _refuse()

    async def consume(self, *args: Any, **kwargs: Any) -> Any:
        _refuse()

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        _refuse()

    async def release(self, *args: Any, **kwargs: Any) -> None:
        return None


class UnsupportedBackend:
    async def open_vhost(self, vhost: str, user: str) -> UnsupportedVirtualHost:
        return UnsupportedVirtualHost(vhost)
