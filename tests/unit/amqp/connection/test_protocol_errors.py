"""Every protocol error the core detects: send the bad bytes, read the Close we send back."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from pamqp import commands

from gateway.amqp import events as ev
from gateway.amqp.connection import ConnectionSettings, ConnectionState
from gateway.amqp.errors import ReplyCode
from tests.support.core_client import (
    PROTOCOL_HEADER,
    Client,
    header,
    method,
    publish,
    start_ok,
    tune_ok,
)

# Every test here runs with the compiled frame scan, then with the Python path alone.
pytestmark = pytest.mark.usefixtures("both_frame_paths")


def raw_frame(frame_type: int, channel: int, payload: bytes, end: bytes = b"\xce") -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + end


def content_header(channel: int, size: int, class_id: int = 60, weight: int = 0) -> bytes:
    return raw_frame(2, channel, struct.pack(">HHQH", class_id, weight, size, 0))


def queue_declare_payload(name: bytes) -> bytes:
    return struct.pack(">IH", 0x0032000A, 0) + bytes([len(name)]) + name + b"\x00" + b"\x00" * 4


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes
    code: int
    # class/method ids expected in the Close (None = don't care)
    ids: tuple[int, int] | None = None
    text: str | None = None
    # Setup: open channel 1 (and nothing else) unless told otherwise.
    setup: Callable[[Client], None] | None = None
    fatal: bool = False  # framing error: the connection stops reading


def _open_and_start_publish(client: Client) -> None:
    client.open_channel(1)
    client.send(method(1, commands.Basic.Publish(exchange="", routing_key="q")))


def _open_and_send_header(client: Client) -> None:
    _open_and_start_publish(client)
    client.send(content_header(1, 10))


HARD_CASES = [
    Case(
        "frame larger than frame_max is refused from its header alone",
        struct.pack(">BHI", 3, 1, 4097),
        ReplyCode.FRAME_ERROR,
        fatal=True,
    ),
    Case("bad frame-end octet", raw_frame(1, 1, b"\x00\x14\x00\x0a\x00", b"\xcd"), 501, fatal=True),
    Case("unknown frame type", raw_frame(4, 1, b"abc"), 501, fatal=True),
    Case("heartbeat on a non-zero channel", raw_frame(8, 1, b""), 501, (0, 0)),
    Case("heartbeat with a payload", raw_frame(8, 0, b"x"), 501),
    Case(
        "second channel.open",
        method(1, commands.Channel.Open()),
        ReplyCode.CHANNEL_ERROR,
        (20, 10),
        "CHANNEL_ERROR - second 'channel.open' seen",
    ),
    Case(
        "channel number above channel_max",
        method(257, commands.Channel.Open()),
        ReplyCode.NOT_ALLOWED,
        (20, 10),
        "NOT_ALLOWED - channel number 257 exceeds the negotiated channel_max (256)",
    ),
    Case(
        "method on a channel that is not open",
        method(5, commands.Queue.Declare(queue="q")),
        ReplyCode.CHANNEL_ERROR,
        (50, 10),
        "CHANNEL_ERROR - expected 'channel.open' on channel 5",
    ),
    Case(
        "content header on a channel that is not open",
        content_header(5, 1),
        ReplyCode.CHANNEL_ERROR,
    ),
    Case(
        "connection method on a non-zero channel",
        method(1, commands.Connection.Blocked(reason="x")),
        ReplyCode.COMMAND_INVALID,
        (10, 60),
        "COMMAND_INVALID - connection.blocked is only allowed on channel 0",
    ),
    Case(
        "channel-level method on channel 0",
        method(0, commands.Queue.Declare(queue="q")),
        ReplyCode.CHANNEL_ERROR,
        (50, 10),
        "CHANNEL_ERROR - unexpected method queue.declare in connection state open",
    ),
    Case(
        "connection method out of order",
        method(0, commands.Connection.TuneOk(channel_max=1, frame_max=4096, heartbeat=0)),
        ReplyCode.CHANNEL_ERROR,
        (10, 31),
    ),
    Case("content frame on channel 0", content_header(0, 1), ReplyCode.UNEXPECTED_FRAME),
    Case(
        "content header after a method without content",
        method(1, commands.Basic.Qos(prefetch_count=1)) + content_header(1, 1),
        ReplyCode.UNEXPECTED_FRAME,
        (0, 0),
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead",
    ),
    Case(
        "body frame where a content header is expected",
        raw_frame(3, 1, b"abc"),
        ReplyCode.UNEXPECTED_FRAME,
        (60, 40),
        setup=_open_and_start_publish,
    ),
    Case(
        "method frame where a content header is expected",
        method(1, commands.Basic.Qos()),
        ReplyCode.UNEXPECTED_FRAME,
        (60, 40),
        setup=_open_and_start_publish,
    ),
    Case(
        "method frame where a body is expected",
        method(1, commands.Basic.Qos()),
        ReplyCode.UNEXPECTED_FRAME,
        (60, 40),
        "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
        setup=_open_and_send_header,
    ),
    Case(
        "content header where a body is expected",
        content_header(1, 10),
        ReplyCode.UNEXPECTED_FRAME,
        setup=_open_and_send_header,
    ),
    Case(
        "body frame larger than what is left of the body",
        raw_frame(3, 1, b"x" * 11),
        ReplyCode.FRAME_ERROR,
        (60, 40),
        "FRAME_ERROR - content body frame exceeds remaining content size",
        setup=_open_and_send_header,
    ),
    Case(
        "content header of another class",
        content_header(1, 1, class_id=50),
        ReplyCode.UNEXPECTED_FRAME,
        setup=_open_and_start_publish,
    ),
    Case(
        "content header with a non-zero weight",
        content_header(1, 1, weight=1),
        ReplyCode.UNEXPECTED_FRAME,
        setup=_open_and_start_publish,
    ),
    Case(
        "malformed content header properties",
        raw_frame(2, 1, struct.pack(">HHQH", 60, 0, 0, 0x8000) + b"\x05ab"),
        ReplyCode.SYNTAX_ERROR,
        (60, 40),
        setup=_open_and_start_publish,
    ),
    Case(
        "content header too short",
        raw_frame(2, 1, struct.pack(">HHQ", 60, 0, 0)),
        ReplyCode.FRAME_ERROR,
        setup=_open_and_start_publish,
    ),
    Case(
        "unknown class and method",
        raw_frame(1, 1, struct.pack(">HH", 70, 10)),
        ReplyCode.NOT_IMPLEMENTED,
        (70, 10),
    ),
    Case(
        "publish with immediate=true",
        publish(1, b"x", immediate=True),
        ReplyCode.NOT_IMPLEMENTED,
        (60, 40),
        "NOT_IMPLEMENTED - immediate=true",
    ),
    Case(
        "a server-to-client method from the client",
        method(1, commands.Basic.Deliver(consumer_tag="c", delivery_tag=1, routing_key="r")),
        ReplyCode.COMMAND_INVALID,
        (60, 60),
    ),
    Case(
        "method payload cut short",
        raw_frame(1, 1, queue_declare_payload(b"q")[:-3]),
        ReplyCode.FRAME_ERROR,
        (50, 10),
    ),
    Case(
        "short string running past the frame",
        raw_frame(1, 1, struct.pack(">IH", 0x0032000A, 0) + b"\x40abc"),
        ReplyCode.FRAME_ERROR,
        (50, 10),
    ),
    Case(
        "trailing octets after the arguments",
        raw_frame(1, 1, queue_declare_payload(b"q") + b"\x00"),
        ReplyCode.FRAME_ERROR,
        (50, 10),
    ),
    Case(
        "invalid UTF-8 in a queue name",
        raw_frame(1, 1, queue_declare_payload(b"\xff\xfe")),
        ReplyCode.SYNTAX_ERROR,
        (50, 10),
    ),
    Case(
        "invalid UTF-8 in a publish routing key",
        raw_frame(1, 1, struct.pack(">IH", 0x003C0028, 0) + b"\x00\x01\xff\x00"),
        ReplyCode.SYNTAX_ERROR,
        (60, 40),
    ),
    Case(
        "basic.publish too short",
        raw_frame(1, 1, struct.pack(">IH", 0x003C0028, 0)),
        ReplyCode.FRAME_ERROR,
        (60, 40),
    ),
    Case(
        "basic.ack of the wrong length",
        raw_frame(1, 1, struct.pack(">IQ", 0x003C0050, 1)),
        ReplyCode.FRAME_ERROR,
        (60, 80),
    ),
    Case(
        "method frame without a method id",
        raw_frame(1, 1, b"\x00\x3c"),
        ReplyCode.FRAME_ERROR,
    ),
    Case(
        "malformed table in arguments",
        raw_frame(
            1,
            1,
            struct.pack(">IH", 0x0032000A, 0) + b"\x01q\x00" + struct.pack(">I", 3) + b"\x01aZ",
        ),
        ReplyCode.FRAME_ERROR,
        (50, 10),
    ),
]


@pytest.mark.parametrize("case", HARD_CASES, ids=[c.name for c in HARD_CASES])
def test_hard_errors_close_the_connection(case: Case) -> None:
    client = Client(ConnectionSettings(frame_max=4096))
    client.handshake(frame_max=4096)
    if case.setup is None:
        client.open_channel(1)
    else:
        case.setup(client)
    client.received()
    events = client.send(case.data)
    errored = [e for e in events if isinstance(e, ev.ConnectionErrored)]
    assert len(errored) == 1, events
    close = client.expect_connection_close(case.code)
    assert errored[0].error.reply_code == case.code
    assert close.reply_text == errored[0].error.reply_text
    if case.ids is not None:
        assert (close.class_id, close.method_id) == case.ids, close.reply_text
    if case.text is not None:
        assert close.reply_text == case.text
    assert close.reply_text.startswith(ReplyCode(case.code).name + " - ")
    if case.fatal:
        # Out of sync: nothing more is read; the shell flushes the Close and hangs up.
        assert isinstance(events[-1], ev.ConnectionTerminated)
        assert client.conn.is_closed
        return
    assert client.conn.state is ConnectionState.CLOSING
    # After a hard error only Close-Ok counts: everything else is discarded silently.
    assert client.send(method(1, commands.Channel.Open()) + publish(2, b"x")) == []
    assert client.conn.data_to_send() == b""
    assert client.send(method(0, commands.Connection.CloseOk())) == [
        ev.ConnectionClosed(case.code, close.reply_text, False)
    ]
    assert client.conn.is_closed


def test_frame_too_large_is_refused_before_the_payload_arrives() -> None:
    client = Client(ConnectionSettings(frame_max=4096))
    client.handshake(frame_max=4096)
    client.open_channel(1)
    # Only 7 octets of a 1 GB frame: refused at once, nothing is buffered.
    events = client.send(struct.pack(">BHI", 3, 1, 1 << 30))
    assert [type(e) for e in events] == [ev.ConnectionErrored, ev.ConnectionTerminated]
    assert "exceeds frame_max" in client.expect_connection_close(501).reply_text


def test_frame_of_exactly_frame_max_payload_is_tolerated() -> None:
    # RabbitMQ allows 8 octets of slack for clients that forget the frame overhead.
    client = Client(ConnectionSettings(frame_max=4096))
    client.handshake(frame_max=4096)
    client.open_channel(1)
    client.send(method(1, commands.Basic.Publish(routing_key="q")) + content_header(1, 4096))
    [message] = client.send(raw_frame(3, 1, b"x" * 4096))
    assert isinstance(message, ev.PublishReceived)


def test_frames_before_open_ok_on_a_channel_are_505() -> None:
    client = Client()
    client.send(PROTOCOL_HEADER)
    client.send(start_ok())
    client.conn.accept_login("u")
    client.send(tune_ok())
    client.received()
    client.send(method(1, commands.Channel.Open()))
    close = client.expect_connection_close(ReplyCode.UNEXPECTED_FRAME)
    assert "before the connection is open" in close.reply_text


def test_soft_error_leaves_other_channels_alone() -> None:
    client = Client(ConnectionSettings(max_message_size=3))
    client.handshake()
    client.open_channel(1)
    client.open_channel(2)
    [errored] = client.send(publish(1, b"four"))
    assert isinstance(errored, ev.ChannelErrored) and errored.channel == 1
    client.expect_channel_close(1, ReplyCode.PRECONDITION_FAILED)
    [ok] = client.send(method(2, commands.Basic.Qos(prefetch_count=1)))
    assert isinstance(ok, ev.CommandReceived)
    assert client.conn.state is ConnectionState.OPEN


def test_too_large_message_body_frames_are_discarded_even_split() -> None:
    client = Client(ConnectionSettings(max_message_size=100, frame_max=4096))
    client.handshake(frame_max=4096)
    client.open_channel(1)
    data = publish(1, b"q" * 9000, frame_max=4096)
    events = []
    for i in range(0, len(data), 1000):
        events += client.send(data[i : i + 1000])
    assert [type(e) for e in events] == [ev.ChannelErrored]
    client.expect_channel_close(1, 406)
    assert client.conn.state is ConnectionState.OPEN


def test_garbage_content_header_frame_type_ordering() -> None:
    # A header frame for a publish whose properties are well formed but carry a bad table.
    client = Client()
    client.handshake()
    client.open_channel(1)
    props = struct.pack(">H", 0x2000) + struct.pack(">I", 2) + b"\x01a"
    client.send(method(1, commands.Basic.Publish(routing_key="q")))
    client.send(raw_frame(2, 1, struct.pack(">HHQ", 60, 0, 0) + props))
    client.expect_connection_close(ReplyCode.SYNTAX_ERROR)


def test_header_class_id_helper_sanity() -> None:
    # The helper builds what pamqp builds for an empty property list.
    assert content_header(1, 5)[7:-1] == header.ContentHeader(0, 5).marshal()


def _start_ok_of_payload(size: int) -> bytes:
    """A Start-Ok whose frame payload is exactly ``size`` octets (a long JWT as password)."""
    empty = start_ok(response="\0u\0")
    padding = size - (len(empty) - 8)
    return start_ok(response="\0u\0" + "j" * padding)


def test_before_tune_ok_frames_are_limited_to_the_initial_frame_max() -> None:
    # rabbit_reader before Tune-Ok: frame_max is initial_frame_max, 8192 since RabbitMQ 4.1.
    client = Client()  # frame_max offered later: 2 MB
    client.send(PROTOCOL_HEADER)
    client.received()
    events = client.send(_start_ok_of_payload(8193))
    assert [type(e) for e in events] == [ev.ConnectionErrored, ev.ConnectionTerminated]
    assert "exceeds frame_max (8192 octets" in client.expect_connection_close(501).reply_text


def test_before_tune_ok_a_frame_of_the_initial_frame_max_is_accepted() -> None:
    client = Client()
    client.send(PROTOCOL_HEADER)
    client.received()
    [login] = client.send(_start_ok_of_payload(8192))
    assert isinstance(login, ev.LoginRequested)
    client.conn.accept_login("u")
    client.send(tune_ok(frame_max=131072))
    client.send(method(0, commands.Connection.Open(virtual_host="/")))
    client.conn.accept_vhost()
    assert client.conn.take_events() == [ev.ConnectionOpened("/", "u")]
    client.received()
    client.open_channel(1)
    # After Tune-Ok the negotiated frame_max applies.
    client.send(method(1, commands.Basic.Publish(routing_key="q")) + content_header(1, 100_000))
    [message] = client.send(raw_frame(3, 1, b"x" * 100_000))
    assert isinstance(message, ev.PublishReceived)
