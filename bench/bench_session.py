"""Micro-benchmark of the channel logic per message: the core and the session, no network.

    .venv/bin/python bench/bench_session.py [MESSAGES]

Bytes go into a real ``ServerConnection`` and its events into a real ``AMQPSession`` over the
in-memory backend, as the trio shell does, minus the sockets: what a publish, a Basic.Get and
an ack cost in the gateway's own Python. It drives the session only through wire bytes, so the
same script measures any two versions of the code (``PYTHONPATH=<other checkout>``) and their
ratio means something on a busy machine. Prints CPU µs per message (this process's CPU time,
which other processes disturb less than the clock does), best of several runs (noise only ever
makes numbers worse). MESSAGES (default 20,000) are published, then got and acked: a cost
that grows with the queue's length (an in-memory count walking the queue used to make a Get
~1 ms at 20,000) shows as a difference between two counts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import trio
from pamqp import body, commands, frame, header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.amqp import events as ev
from gateway.amqp.connection import ConnectionSettings, ServerConnection
from gateway.amqp.errors import AMQPError
from gateway.backend.interface import Owner
from gateway.backend.memory import MemoryBackend
from gateway.server.session import AMQPSession

N = 20_000
ROUNDS = 5
BODY = b"x" * 1024
PROPS = commands.Basic.Properties(content_type="application/json", delivery_mode=2)
PUBLISH_FRAMES = (
    frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
    + frame.marshal(header.ContentHeader(0, len(BODY), PROPS), 1)
    + frame.marshal(body.ContentBody(BODY), 1)
)
GET_FRAME = frame.marshal(commands.Basic.Get(queue="q"), 1)


class Link:
    """What the session needs from its connection, without a socket."""

    def __init__(self, protocol: ServerConnection, nursery: trio.Nursery) -> None:
        self.protocol = protocol
        self.owner = Owner("bench", "guest")
        self.nursery = nursery

    async def flush(self) -> None:
        self.protocol.data_to_send()

    async def fail(self, channel: int, error: AMQPError) -> None:
        raise error


async def feed(conn: ServerConnection, session: AMQPSession, data: bytes) -> None:
    for event in conn.receive_data(data, 0.0):
        await session.handle(event)
    conn.data_to_send()


async def opened(nursery: trio.Nursery) -> tuple[ServerConnection, AMQPSession]:
    conn = ServerConnection(ConnectionSettings(), 0.0)
    conn.receive_data(b"AMQP\x00\x00\x09\x01", 0.0)
    start_ok = commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\0guest\0guest"
    )
    conn.receive_data(frame.marshal(start_ok, 0), 0.0)
    conn.accept_login("guest")
    tune_ok = commands.Connection.TuneOk(channel_max=16, frame_max=131072, heartbeat=0)
    conn.receive_data(
        frame.marshal(tune_ok, 0) + frame.marshal(commands.Connection.Open(virtual_host="/"), 0),
        0.0,
    )
    conn.accept_vhost()
    conn.take_events()
    vhost = await MemoryBackend().open_vhost("/", "guest")
    session = AMQPSession(vhost, Link(conn, nursery))
    await feed(conn, session, frame.marshal(commands.Channel.Open(), 1))
    await feed(conn, session, frame.marshal(commands.Queue.Declare(queue="q"), 1))
    return conn, session


async def publish_n(conn: ServerConnection, session: AMQPSession) -> None:
    for _ in range(N):
        await feed(conn, session, PUBLISH_FRAMES)


async def get_and_ack_n(conn: ServerConnection, session: AMQPSession) -> None:
    for tag in range(1, N + 1):
        await feed(conn, session, GET_FRAME)
        ack = commands.Basic.Ack(delivery_tag=tag)
        await feed(conn, session, frame.marshal(ack, 1))


def check_no_errors(conn: ServerConnection) -> None:
    for event in conn.take_events():
        if isinstance(event, ev.ChannelErrored | ev.ConnectionErrored):
            raise SystemExit(f"the benchmark itself failed: {event}")


async def measure() -> dict[str, float]:
    best = {"publish": float("inf"), "get + ack": float("inf")}
    async with trio.open_nursery() as nursery:
        for _ in range(ROUNDS):
            conn, session = await opened(nursery)
            phases: list[
                tuple[str, Callable[[ServerConnection, AMQPSession], Coroutine[Any, Any, None]]]
            ] = [("publish", publish_n), ("get + ack", get_and_ack_n)]
            for name, phase in phases:
                started = time.process_time()
                await phase(conn, session)
                elapsed = time.process_time() - started
                best[name] = min(best[name], elapsed / N * 1e6)
            check_no_errors(conn)
            await session.close()
    return best


def main() -> None:
    global N
    if len(sys.argv) > 1:
        N = int(sys.argv[1])
    print(f"Python {sys.version.split()[0]}, body {len(BODY)} B, {N} messages, best of {ROUNDS}")
    for name, micros in trio.run(measure).items():
        print(f"{name:<40} {micros:8.2f} µs/message")


if __name__ == "__main__":
    main()
