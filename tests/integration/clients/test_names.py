"""Names with CR and LF, as RabbitMQ treats them (``rabbit_channel:strip_cr_lf``).

Declare, delete, bind and unbind strip CR and LF from queue and exchange names; publish,
consume, get and purge take names as they come, so there ``a\\nb`` is not ``ab``. pamqp (so
pika, aio-pika, kombu) refuses to send such names; the Java client sends them. The frames are
built here without pamqp's name check (``codec.make_method``).
"""

from __future__ import annotations

from typing import Any

import trio
from pamqp import commands

from gateway.amqp.codec import encode_method_frame, make_method
from tests.integration.clients.conftest import Running
from tests.support.clients import unique
from tests.support.scripted_client import ScriptedClient


class Client:
    def __init__(self, scripted: ScriptedClient) -> None:
        self.scripted = scripted
        self.channel = 0

    async def open(self) -> None:
        self.channel += 1
        await self.scripted.open_channel(self.channel)

    async def call(self, cls: type, reply: type, **values: Any) -> Any:
        await self.scripted.send_raw(encode_method_frame(self.channel, make_method(cls, **values)))
        return await self.scripted.expect(reply, self.channel)

    async def refused(self, cls: type, **values: Any) -> tuple[int, str]:
        close = await self.call(cls, commands.Channel.Close, **values)
        await self.scripted.send(commands.Channel.CloseOk(), self.channel)
        await self.open()
        return close.reply_code, close.reply_text


def run(running: Running, scenario: Any) -> None:
    async def main() -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", running.port)
        scripted = ScriptedClient(stream)
        await scripted.handshake()
        client = Client(scripted)
        await client.open()
        await scenario(client)
        await stream.aclose()

    trio.run(main)


def test_declare_delete_bind_and_unbind_strip_cr_and_lf(running: Running) -> None:
    queue, exchange = unique("q"), unique("x")

    async def scenario(c: Client) -> None:
        Q, X = commands.Queue, commands.Exchange
        declared = await c.call(Q.Declare, Q.DeclareOk, queue=f"{queue[:2]}\r\n{queue[2:]}\n")
        assert declared.queue == queue
        await c.call(Q.Declare, Q.DeclareOk, queue=queue, passive=True)
        await c.call(X.Declare, X.DeclareOk, exchange=f"{exchange}\n", exchange_type="direct")
        await c.call(X.Declare, X.DeclareOk, exchange=exchange, passive=True)
        await c.call(
            Q.Bind, Q.BindOk, queue=f"\r{queue}", exchange=f"{exchange}\r\n", routing_key="k"
        )
        await c.call(
            Q.Unbind, Q.UnbindOk, queue=f"{queue}\n", exchange=f"\n{exchange}", routing_key="k"
        )
        await c.call(X.Delete, X.DeleteOk, exchange=f"{exchange}\n")
        assert (await c.refused(X.Declare, exchange=exchange, passive=True))[0] == 404
        await c.call(Q.Delete, Q.DeleteOk, queue=f"{queue}\r")
        assert (await c.refused(Q.Declare, queue=queue, passive=True))[0] == 404
        # Only line breaks: nothing is left, so the server names the queue.
        named = await c.call(Q.Declare, Q.DeclareOk, queue="\r\n", exclusive=True)
        assert named.queue.startswith("amq.gen-")

    run(running, scenario)


def test_get_consume_and_purge_take_names_as_they_are(running: Running) -> None:
    queue = unique("q")

    async def scenario(c: Client) -> None:
        await c.call(commands.Queue.Declare, commands.Queue.DeclareOk, queue=queue)
        missing = (404, f"NOT_FOUND - no queue '{queue}\n' in vhost '/'")
        assert await c.refused(commands.Basic.Get, queue=f"{queue}\n") == missing
        assert await c.refused(commands.Queue.Purge, queue=f"{queue}\n") == missing
        assert await c.refused(commands.Basic.Consume, queue=f"{queue}\n") == missing

    run(running, scenario)
