"""Writing at once (gateway/server/socket_write.py), and a connection that writes both at once
and through its writer task keeping its frames in order, over real sockets."""

from __future__ import annotations

import socket

import trio
import trio.testing
from pamqp import frame

from gateway.auth.authenticator import AcceptAnyone, PeerIdentity
from gateway.backend.unsupported import UnsupportedBackend
from gateway.server.connection import ClientConnection
from gateway.server.settings import ServerSettings
from gateway.server.socket_write import write_now
from tests.support.scripted_client import ScriptedClient, commands


def socket_stream_pair() -> tuple[trio.SocketStream, socket.socket]:
    ours, theirs = socket.socketpair()
    return trio.SocketStream(trio.socket.from_stdlib_socket(ours)), theirs


def tcp_stream_pair() -> tuple[trio.SocketStream, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        peer = socket.create_connection(listener.getsockname())
        ours, _address = listener.accept()
    return trio.SocketStream(trio.socket.from_stdlib_socket(ours)), peer


def served_over(stream: trio.SocketStream) -> ClientConnection:
    return ClientConnection(
        stream, ServerSettings(), AcceptAnyone(), UnsupportedBackend(), PeerIdentity("test:1")
    )


def small_buffers(stream: trio.SocketStream, peer: socket.socket) -> None:
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)


async def test_a_plain_socket_takes_the_bytes_before_trio_runs_anything_else() -> None:
    stream, peer = socket_stream_pair()
    with peer:
        assert write_now(stream, b"abc") == 3
        peer.setblocking(False)
        assert peer.recv(16) == b"abc"  # no checkpoint since the write
        await stream.aclose()


async def test_a_full_socket_takes_what_fits_then_nothing() -> None:
    stream, peer = socket_stream_pair()
    with peer:
        small_buffers(stream, peer)
        data = bytes(1_000_000)
        first = write_now(stream, data)
        assert 0 < first < len(data)
        assert write_now(stream, data[first:]) == 0
        await stream.aclose()


async def test_nothing_is_written_to_a_gone_peer_a_closed_socket_or_another_stream() -> None:
    stream, peer = socket_stream_pair()
    peer.close()
    assert write_now(stream, b"x") == 0  # EPIPE: the writer task meets it and says why
    await stream.aclose()
    assert write_now(stream, b"x") == 0
    memory, _other = trio.testing.memory_stream_pair()
    assert write_now(memory, b"x") == 0


async def send_pieces(client: ScriptedClient, pieces: list[bytes]) -> None:
    for piece in pieces:
        await client.send_raw(piece)
        await trio.sleep(0)


async def test_replies_written_at_once_and_queued_reach_a_slow_client_in_order() -> None:
    """5,376 replies (256 channels opened, each given Basic.Qos 20 times) over TCP with small
    buffers to a client that sends and reads at once: replies go out at once while nothing is
    queued, and queue behind the full socket otherwise."""
    stream, peer = tcp_stream_pair()
    small_buffers(stream, peer)
    client_stream = trio.SocketStream(trio.socket.from_stdlib_socket(peer))
    connection = served_over(stream)
    client = ScriptedClient(client_stream)
    qos = commands.Basic.Qos(prefetch_count=10)
    order = [(c, "OpenOk") for c in range(1, 257)] + [
        (c, "QosOk") for _ in range(20) for c in range(1, 257)
    ]
    burst = b"".join(
        frame.marshal(commands.Channel.Open() if kind == "OpenOk" else qos, c) for c, kind in order
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        await client.handshake()
        frames = [burst[i : i + 2000] for i in range(0, len(burst), 2000)]
        # In pieces while the client reads: flushes then come while the writer has bytes queued.
        nursery.start_soon(send_pieces, client, frames)
        replies = []
        with trio.fail_after(30):
            for _ in order:
                channel, reply = await client.receive()
                replies.append((channel, type(reply).__name__))
        # Every frame whole (a chunk out of order would break one), in the order asked.
        assert replies == order
        await client.send(
            commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
        )
        await client.expect(commands.Connection.CloseOk)
        await client_stream.aclose()
    assert connection.close_reason == "closed by client: 200 "


async def test_bytes_made_while_some_are_queued_wait_behind_them() -> None:
    """A flush while the writer still holds bytes for a full socket queues behind them, even
    when the socket has just made room: written at once, they would overtake the queued ones."""
    stream, peer = tcp_stream_pair()
    small_buffers(stream, peer)
    client_stream = trio.SocketStream(trio.socket.from_stdlib_socket(peer))
    connection = served_over(stream)
    client = ScriptedClient(client_stream)
    first, second = b"a" * 100_000, b"b" * 1_000
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        await client.handshake()
        connection.protocol._write(first)
        await connection.flush()  # part at once, the rest queued: the socket is full
        # Room, read without a trio checkpoint: the writer has not seen it yet.
        received = bytearray(peer.recv(4096))
        connection.protocol._write(second)
        await connection.flush()
        with trio.fail_after(30):
            while len(received) < len(first) + len(second):
                received += await client_stream.receive_some(65536)
        assert bytes(received) == first + second
        nursery.cancel_scope.cancel()


async def test_flush_now_writes_at_once_or_takes_nothing() -> None:
    """``flush_now`` (a publisher confirm sent from a send's done-callback): written before
    any checkpoint while nothing is queued; with the writer's queue at its depth it takes
    nothing, and the bytes go out, in order, with the next ``flush``."""
    stream, peer = tcp_stream_pair()
    small_buffers(stream, peer)
    client_stream = trio.SocketStream(trio.socket.from_stdlib_socket(peer))
    connection = ClientConnection(
        stream,
        ServerSettings(write_queue_depth=1),
        AcceptAnyone(),
        UnsupportedBackend(),
        PeerIdentity("test:1"),
    )
    client = ScriptedClient(client_stream)
    first, second, third = b"a" * 10, b"b" * 100_000, b"c" * 1_000
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        await client.handshake()
        connection.protocol._write(first)
        assert connection.flush_now()
        peer.setblocking(False)
        received = bytearray(peer.recv(4096))  # no checkpoint since flush_now
        assert bytes(received) == first
        connection.protocol._write(second)
        await connection.flush()  # part at once, the rest queued: the socket is full
        connection.protocol._write(third)
        assert not connection.flush_now()  # the queue is at its depth of 1
        await connection.flush()
        with trio.fail_after(30):
            while len(received) < len(first) + len(second) + len(third):
                received += await client_stream.receive_some(65536)
        assert bytes(received) == first + second + third
        nursery.cancel_scope.cancel()
