"""ServerConnection: handshake, channels, content, closing, heartbeats."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands

from gateway.amqp import commands as cmd
from gateway.amqp import events as ev
from gateway.amqp.codec import encode_method_frame, make_method
from gateway.amqp.connection import ConnectionSettings, ConnectionState, ServerConnection
from gateway.amqp.errors import AMQPError, ChannelError, ConnectionException, ReplyCode
from gateway.amqp.fieldtable import table_to_plain
from gateway.amqp.properties import MessageProperties
from tests.support.core_client import (
    PROTOCOL_HEADER,
    Client,
    body,
    decode_frames,
    header,
    heartbeat,
    method,
    open_,
    publish,
    start_ok,
    tune_ok,
)

# Every test here runs with the compiled frame scan, then with the Python path alone.
pytestmark = pytest.mark.usefixtures("both_frame_paths")

# ------------------------------------------------------------------------------- handshake


def test_handshake_transcript_as_pika_sends_it() -> None:
    client = Client(ConnectionSettings(heartbeat=60, channel_max=100, frame_max=131072))
    assert client.send(PROTOCOL_HEADER) == []
    start = client.expect_one(commands.Connection.Start, 0)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.mechanisms == "PLAIN"
    assert start.locales == "en_US"
    props = start.server_properties
    assert props["product"] == "RabbitMQ"
    assert props["version"] == "3.13.7"
    assert props["platform"].startswith("Python ")
    caps = props["capabilities"]
    for name in (
        "publisher_confirms",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "per_consumer_qos",
        "consumer_priorities",
        "authentication_failure_close",
        "direct_reply_to",
        "exchange_exchange_bindings",
    ):
        assert caps[name] is True, name

    [login] = client.send(start_ok())
    assert login == ev.LoginRequested(
        "PLAIN",
        b"\0guest\0guest",
        {
            "product": "pika",
            "platform": "Python",
            "capabilities": {
                "authentication_failure_close": True,
                "basic.nack": True,
                "connection.blocked": True,
                "consumer_cancel_notify": True,
                "publisher_confirms": True,
            },
        },
    )
    assert client.conn.state is ConnectionState.AUTHENTICATING
    assert client.conn.data_to_send() == b""
    client.conn.accept_login("guest")
    tune = client.expect_one(commands.Connection.Tune, 0)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (100, 131072, 60)

    assert client.send(tune_ok(channel_max=100, frame_max=131072, heartbeat_=60)) == []
    assert client.conn.negotiated == (100, 131072, 60)
    assert client.send(open_("/")) == [ev.VhostRequested("/")]
    client.conn.accept_vhost()
    assert client.conn.take_events() == [ev.ConnectionOpened("/", "guest")]
    client.expect_one(commands.Connection.OpenOk, 0)
    assert client.conn.state is ConnectionState.OPEN
    assert client.conn.client_capabilities["connection.blocked"] is True


def test_frames_sent_while_a_decision_is_pending_are_held_then_processed() -> None:
    client = Client()
    client.send(PROTOCOL_HEADER)
    client.received()
    # A pipelining client: everything up to a channel open and a publish in one write.
    events = client.send(
        start_ok()
        + tune_ok()
        + open_("/v")
        + method(1, commands.Channel.Open())
        + publish(1, b"hi")
    )
    assert [type(e) for e in events] == [ev.LoginRequested]
    client.conn.accept_login("u")
    assert client.conn.take_events() == [ev.VhostRequested("/v")]
    client.conn.accept_vhost()
    held = client.conn.take_events()
    assert held[:2] == [ev.ConnectionOpened("/v", "u"), ev.ChannelOpened(1)]
    assert isinstance(held[2], ev.PublishReceived) and held[2].body == b"hi"
    names = [type(v).__name__ for _c, v in client.received()]
    assert names == ["Tune", "OpenOk", "OpenOk"]


def test_a_flood_while_a_decision_is_pending_is_cut_off() -> None:
    client = Client(ConnectionSettings(frame_max=4096))
    client.send(PROTOCOL_HEADER)
    client.send(start_ok())
    assert client.send(b"\x00" * 16384) == []
    assert client.send(b"\x00") == [
        ev.ConnectionTerminated("too much data sent before the handshake finished")
    ]
    assert client.conn.is_closed
    client.conn.accept_login("late")  # harmless
    assert client.conn.take_events() == []


def test_pending_events_also_come_out_of_the_next_receive_data() -> None:
    client = Client()
    client.send(PROTOCOL_HEADER)
    client.send(start_ok() + tune_ok() + open_())
    client.conn.accept_login("u")
    # take_events() not called: the next receive_data returns them first.
    events = client.send(heartbeat.Heartbeat.marshal())
    assert events == [ev.VhostRequested("/")]


def test_wrong_protocol_header_is_answered_with_ours_and_terminated() -> None:
    client = Client()
    events = client.send(b"AMQP\x01\x01\x00\x0a")
    assert events == [
        ev.ConnectionTerminated("unsupported protocol header b'AMQP\\x01\\x01\\x00\\n'")
    ]
    assert client.conn.data_to_send() == PROTOCOL_HEADER
    assert client.conn.is_closed
    assert client.send(b"more") == []


@pytest.mark.parametrize("data", [b"GET / HTTP/1.1\r\n", b"AMQP\x00\x00\x09\x00", b"\x16\x03\x01"])
def test_any_other_header_is_refused(data: bytes) -> None:
    client = Client()
    client.send(data)
    if len(data) < 8:
        assert client.conn.data_to_send() == b""
        client.send(b"\x00" * 5)
    assert client.conn.data_to_send() == PROTOCOL_HEADER
    assert client.conn.is_closed


def test_header_split_byte_by_byte() -> None:
    client = Client()
    for byte in PROTOCOL_HEADER[:-1]:
        client.send(bytes([byte]))
        assert client.conn.data_to_send() == b""
    client.send(PROTOCOL_HEADER[-1:])
    client.expect_one(commands.Connection.Start)


def test_unknown_mechanism_is_503() -> None:
    client = Client()
    client.send(PROTOCOL_HEADER)
    client.received()
    [errored] = client.send(start_ok(mechanism="SCRAM-SHA-256"))
    assert isinstance(errored, ev.ConnectionErrored)
    close = client.expect_connection_close(ReplyCode.COMMAND_INVALID)
    assert close.reply_text == "COMMAND_INVALID - unknown authentication mechanism 'SCRAM-SHA-256'"


def test_refused_login_with_authentication_failure_close_gets_403() -> None:
    client = Client()
    client.send(PROTOCOL_HEADER)
    client.received()
    client.send(start_ok(response="\0u\0wrong"))
    client.conn.refuse_login("Login was refused using authentication mechanism PLAIN")
    close = client.expect_connection_close(ReplyCode.ACCESS_REFUSED)
    assert close.reply_text.startswith("ACCESS_REFUSED - Login was refused")
    assert (close.class_id, close.method_id) == (10, 11)
    assert client.send(method(0, commands.Connection.CloseOk())) == [
        ev.ConnectionClosed(403, close.reply_text, False)
    ]
    assert client.conn.is_closed


def test_refused_login_without_the_capability_just_terminates() -> None:
    client = Client()
    client.send(PROTOCOL_HEADER)
    client.received()
    client.send(start_ok(capabilities={}))
    client.conn.refuse_login("bad password")
    assert client.conn.data_to_send() == b""
    assert client.conn.is_closed
    assert client.conn.take_events() == [ev.ConnectionTerminated("login refused: bad password")]


def test_refused_vhost_is_530() -> None:
    client = Client()
    client.send(PROTOCOL_HEADER)
    client.send(start_ok())
    client.conn.accept_login("guest")
    client.send(tune_ok() + open_("/nope"))
    client.received()
    client.conn.refuse_vhost(ReplyCode.NOT_ALLOWED, "vhost /nope not found")
    close = client.expect_connection_close(ReplyCode.NOT_ALLOWED)
    assert close.reply_text == "NOT_ALLOWED - vhost /nope not found"
    assert (close.class_id, close.method_id) == (10, 40)


@pytest.mark.parametrize(
    ("channel_max", "frame_max", "text"),
    [
        (256, 4095, "negotiated frame_max = 4095 is lower than the minimum allowed value (4096)"),
        (256, 200000, "negotiated frame_max = 200000 is higher than the maximum allowed value"),
        (300, 131072, "negotiated channel_max = 300 is higher than the maximum allowed value"),
    ],
)
def test_tune_ok_outside_what_we_offered_is_530(
    channel_max: int, frame_max: int, text: str
) -> None:
    client = Client(ConnectionSettings(frame_max=131072))
    client.send(PROTOCOL_HEADER)
    client.send(start_ok())
    client.conn.accept_login("guest")
    client.received()
    client.send(tune_ok(channel_max=channel_max, frame_max=frame_max))
    close = client.expect_connection_close(ReplyCode.NOT_ALLOWED)
    assert text in close.reply_text
    assert (close.class_id, close.method_id) == (10, 31)


def test_tune_ok_zero_means_what_we_offered() -> None:
    client = Client(ConnectionSettings(frame_max=65536, channel_max=10))
    client.send(PROTOCOL_HEADER)
    client.send(start_ok())
    client.conn.accept_login("guest")
    client.send(tune_ok(channel_max=0, frame_max=0, heartbeat_=0))
    assert client.conn.negotiated == (10, 65536, 0)


# ------------------------------------------------------------------------------- channels


def test_channel_open_close_by_client() -> None:
    client = Client()
    client.handshake()
    client.open_channel(1)
    events = client.send(
        method(1, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    )
    assert events == [ev.ChannelClosed(1, 200, "bye", True)]
    # Close-Ok waits for the shell, which gives the channel's messages back first.
    assert client.received() == []
    assert client.conn.open_channels == frozenset()
    assert client.conn.accept_channel_close(1)
    client.expect_one(commands.Channel.CloseOk, 1)
    assert not client.conn.accept_channel_close(1)  # answered once
    assert client.received() == []
    client.open_channel(1)  # the number can be reused


def test_until_close_ok_a_channel_closed_by_the_client_discards_everything() -> None:
    """§4.2.4: after Channel.Close only Close-Ok counts; the client's Close-Ok to come is
    ours, so every frame on the channel is dropped, and its number is not free yet."""
    client = Client()
    client.handshake()
    client.open_channel(1)
    close = commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    assert client.send(method(1, close)) == [ev.ChannelClosed(1, 200, "bye", True)]
    in_flight = (
        method(1, commands.Queue.Declare(queue="q"))
        + publish(1, b"x")
        + method(1, commands.Basic.Ack(delivery_tag=1))
        + method(1, close)
        + method(1, commands.Channel.Open())
    )
    assert client.send(in_flight) == []
    assert not client.conn.send_method(1, commands.Basic.QosOk())
    assert not client.conn.send_deliver(1, "ctag", 1, False, "", "q", b"\x00\x00", b"m")
    assert client.received() == []
    assert client.conn.accept_channel_close(1)
    client.expect_one(commands.Channel.CloseOk, 1)
    client.open_channel(1)


def test_no_close_ok_once_the_connection_is_closing() -> None:
    client = Client()
    client.handshake()
    client.open_channel(1)
    close = commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    client.send(method(1, close))
    client.conn.close_connection(ConnectionException(ReplyCode.CONNECTION_FORCED, "shutdown"))
    client.expect_connection_close(320)
    assert not client.conn.accept_channel_close(1)
    assert client.received() == []


def test_server_initiated_channel_close_discards_until_close_ok() -> None:
    client = Client()
    client.handshake()
    client.open_channel(3)
    client.conn.close_channel(
        3, ChannelError(ReplyCode.NOT_FOUND, "no queue 'q' in vhost '/'", 50, 10)
    )
    close = client.expect_channel_close(3, 404)
    assert close.reply_text == "NOT_FOUND - no queue 'q' in vhost '/'"
    assert (close.class_id, close.method_id) == (50, 10)
    # Frames in flight from the client are dropped, even content frames.
    assert client.send(method(3, commands.Queue.Declare(queue="q")) + publish(3, b"x")) == []
    assert not client.conn.send_method(3, commands.Basic.QosOk())
    assert client.conn.data_to_send() == b""
    assert client.send(method(3, commands.Channel.CloseOk())) == [
        ev.ChannelClosed(3, 404, "NOT_FOUND - no queue 'q' in vhost '/'", False)
    ]
    client.open_channel(3)


def test_simultaneous_channel_close() -> None:
    client = Client()
    client.handshake()
    client.open_channel(1)
    client.conn.close_channel(1, ChannelError(ReplyCode.PRECONDITION_FAILED, "x"))
    client.received()
    close = commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    assert client.send(method(1, close)) == []
    client.expect_one(commands.Channel.CloseOk, 1)
    [closed] = client.send(method(1, commands.Channel.CloseOk()))
    assert closed == ev.ChannelClosed(1, 406, "PRECONDITION_FAILED - x", False)


def test_methods_reach_the_shell_as_typed_commands() -> None:
    client = Client()
    client.handshake()
    client.open_channel(1)
    declare = commands.Queue.Declare(queue="q", durable=True, arguments={"x-message-ttl": 1000})
    [received] = client.send(method(1, declare))
    assert isinstance(received, ev.CommandReceived)
    assert received.channel == 1
    assert isinstance(received.command, cmd.QueueDeclare)
    assert received.command.queue == "q"
    assert received.command.durable is True
    assert table_to_plain(dict(received.command.arguments)) == {"x-message-ttl": 1000}
    for value, expected in (
        (commands.Basic.Qos(prefetch_count=10), cmd.BasicQos(prefetch_count=10)),
        (
            commands.Basic.Consume(queue="q", consumer_tag="c"),
            cmd.BasicConsume("q", consumer_tag="c"),
        ),
        (commands.Basic.Cancel(consumer_tag="c"), cmd.BasicCancel("c")),
        (commands.Basic.Get(queue="q"), cmd.BasicGet("q")),
        (commands.Basic.Recover(requeue=True), cmd.BasicRecover(requeue=True)),
        (commands.Basic.RecoverAsync(requeue=True), cmd.BasicRecoverAsync(requeue=True)),
        (commands.Confirm.Select(), cmd.ConfirmSelect()),
        (commands.Tx.Select(), cmd.TxSelect()),
        (commands.Tx.Commit(), cmd.TxCommit()),
        (commands.Tx.Rollback(), cmd.TxRollback()),
        (
            commands.Exchange.Bind(destination="d", source="s", routing_key="k", nowait=True),
            cmd.ExchangeBind("d", "s", "k", nowait=True),
        ),
        (
            commands.Exchange.Unbind(destination="d", source="s", routing_key="k"),
            cmd.ExchangeUnbind("d", "s", "k"),
        ),
    ):
        [got] = client.send(method(1, value))
        assert isinstance(got, ev.CommandReceived) and got.command == expected
    # Entity names come stripped of CR and LF, as RabbitMQ strips them; routing keys do not.
    bind = make_method(commands.Queue.Bind, queue="q\r\n", exchange="x\n", routing_key="k\n")
    [got] = client.send(encode_method_frame(1, bind))
    assert isinstance(got, ev.CommandReceived) and got.command == cmd.QueueBind("q", "x", "k\n")
    bind = make_method(commands.Exchange.Bind, destination="d\r", source="s\n", routing_key="k\n")
    [got] = client.send(encode_method_frame(1, bind))
    assert isinstance(got, ev.CommandReceived)
    assert got.command == cmd.ExchangeBind("d", "s", "k\n")


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (commands.Exchange.Bind(destination="a", source="b"), "exchange.bind"),
    ],
)
def test_methods_the_gateway_does_not_implement_are_refused_by_the_core(
    value: Any, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every method is implemented now; one is taken away to check the core's answer.
    monkeypatch.delitem(cmd._BUILDERS, type(value))
    client = Client()
    client.handshake()
    client.open_channel(1)
    [errored] = client.send(method(1, value))
    assert isinstance(errored, ev.ConnectionErrored)
    close = client.expect_connection_close(ReplyCode.NOT_IMPLEMENTED)
    assert close.reply_text == f"NOT_IMPLEMENTED - {name} is not supported by this gateway"
    assert (close.class_id, close.method_id) == (value.index >> 16, value.index & 0xFFFF)


def test_replies_go_out_unless_the_command_said_nowait() -> None:
    client = Client()
    client.handshake()
    client.open_channel(1)
    assert client.conn.send_reply(1, cmd.QueueBind("q", "x"), cmd.QueueBindOk())
    client.expect_one(commands.Queue.BindOk, 1)
    assert not client.conn.send_reply(1, cmd.QueueBind("q", "x", nowait=True), cmd.QueueBindOk())
    # Recover-Async has no reply at all; Queue.Unbind has no nowait bit, so always one.
    assert not client.conn.send_reply(1, cmd.BasicRecoverAsync(True), cmd.BasicRecoverOk())
    assert client.received() == []
    assert client.conn.send_reply(1, cmd.QueueUnbind("q", "x"), cmd.QueueUnbindOk())
    client.expect_one(commands.Queue.UnbindOk, 1)


def test_a_refusal_names_the_command() -> None:
    client = Client()
    client.handshake()
    client.open_channel(1)
    client.conn.refuse(1, ChannelError(ReplyCode.NOT_FOUND, "no queue"), cmd.QueuePurge("q"))
    close = client.expect_channel_close(1, ReplyCode.NOT_FOUND)
    assert (close.class_id, close.method_id) == (50, 30)
    client.open_channel(2)
    client.conn.refuse(2, AMQPError(ReplyCode.NOT_IMPLEMENTED, "no"), cmd.BasicQos())
    close = client.expect_connection_close(ReplyCode.NOT_IMPLEMENTED)
    assert (close.class_id, close.method_id) == (60, 10)


def test_acks_nacks_rejects() -> None:
    client = Client()
    client.handshake()
    client.open_channel(2)
    events = client.send(
        method(2, commands.Basic.Ack(delivery_tag=7, multiple=True))
        + method(2, commands.Basic.Nack(delivery_tag=8, multiple=False, requeue=True))
        + method(2, commands.Basic.Reject(delivery_tag=2**63 - 1, requeue=False))
    )
    assert events == [
        ev.AckReceived(2, 7, True),
        ev.NackReceived(2, 8, False, True),
        ev.RejectReceived(2, 2**63 - 1, False),
    ]
    # longlong is unsigned in the spec; pamqp packs it signed and cannot send this one.
    top = b"\x01\x00\x02\x00\x00\x00\x0d\x00\x3c\x00\x50" + b"\xff" * 8 + b"\x00\xce"
    assert client.send(top) == [ev.AckReceived(2, 2**64 - 1, False)]


def test_flow_active_true_is_answered_and_active_false_is_540() -> None:
    # RabbitMQ 4's rabbit_channel: Flow-Ok for active=true, and for active=false
    # rabbit_misc:protocol_error(not_implemented, "active=false", []), a connection error.
    client = Client()
    client.handshake()
    client.open_channel(1)
    assert client.send(method(1, commands.Channel.Flow(active=True))) == []
    assert client.expect_one(commands.Channel.FlowOk, 1).active is True
    [errored] = client.send(method(1, commands.Channel.Flow(active=False)))
    assert isinstance(errored, ev.ConnectionErrored)
    close = client.expect_connection_close(ReplyCode.NOT_IMPLEMENTED)
    assert close.reply_text == "NOT_IMPLEMENTED - active=false"
    assert (close.class_id, close.method_id) == (20, 20)


def test_blocked_only_when_the_client_can_hear_it() -> None:
    client = Client()
    client.handshake()
    assert client.conn.send_blocked("low on memory")
    assert client.expect_one(commands.Connection.Blocked, 0).reason == "low on memory"
    assert client.conn.send_unblocked()
    client.expect_one(commands.Connection.Unblocked, 0)

    deaf = Client()
    deaf.handshake(capabilities={})
    assert not deaf.conn.send_blocked("x")
    assert not deaf.conn.send_consumer_cancel(1, "c")
    assert deaf.conn.data_to_send() == b""


def test_consumer_cancel_notification() -> None:
    client = Client()
    client.handshake()
    client.open_channel(1)
    assert client.conn.send_consumer_cancel(1, "ctag")
    cancel = client.expect_one(commands.Basic.Cancel, 1)
    assert cancel.consumer_tag == "ctag" and cancel.nowait is True


def test_queue_declare_ok_with_a_name_pamqp_would_refuse() -> None:
    client = Client()
    client.handshake()
    client.open_channel(1)
    name = "файл=очередь?*"
    assert client.conn.send_reply(1, cmd.QueueDeclare(name), cmd.QueueDeclareOk(name, 3, 1))
    ok = client.expect_one(commands.Queue.DeclareOk, 1)
    assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 3, 1)


# -------------------------------------------------------------------------------- content


def test_publish_is_assembled_over_many_body_frames() -> None:
    client = Client()
    client.handshake(frame_max=4096)
    client.open_channel(1)
    payload = bytes(range(256)) * 100  # 25600 octets → 7 body frames at frame_max 4096
    props = commands.Basic.Properties(
        content_type="application/json",
        delivery_mode=2,
        headers={"n": 1, "s": "x", "nested": {"a": [1, "b"]}},
        message_id="m1",
    )
    data = publish(1, payload, exchange="ex", routing_key="key", properties=props, frame_max=4096)
    # Nothing until the last body frame.
    assert client.send(data[:-10]) == []
    [message] = client.send(data[-10:])
    assert isinstance(message, ev.PublishReceived)
    assert (message.channel, message.exchange, message.routing_key) == (1, "ex", "key")
    assert message.body == payload
    assert message.header == props.marshal()
    assert message.properties.content_type == "application/json"
    assert message.properties.delivery_mode == 2
    assert message.properties.headers_plain() == {"n": 1, "s": "x", "nested": {"a": [1, "b"]}}


def test_empty_body_completes_on_the_header() -> None:
    client = Client()
    client.handshake()
    client.open_channel(1)
    [message] = client.send(publish(1, b"", mandatory=True))
    assert isinstance(message, ev.PublishReceived)
    assert message.body == b"" and message.mandatory is True
    assert message.properties == MessageProperties()


def test_message_larger_than_max_message_size_is_406_and_rest_is_discarded() -> None:
    # RabbitMQ's channel error and wording (rabbit_channel:check_msg_size), at the header.
    client = Client(ConnectionSettings(max_message_size=10_000))
    client.handshake(frame_max=4096)
    client.open_channel(1)
    big = publish(1, b"x" * 10_001, frame_max=4096)
    events = client.send(big)
    assert len(events) == 1 and isinstance(events[0], ev.ChannelErrored)
    assert events[0].error.reply_code == ReplyCode.PRECONDITION_FAILED
    close = client.expect_channel_close(1, ReplyCode.PRECONDITION_FAILED)
    assert close.reply_text == (
        "PRECONDITION_FAILED - message size 10001 is larger than configured max size 10000"
    )
    assert (close.class_id, close.method_id) == (60, 40)
    # Another message on another channel is unaffected.
    client.open_channel(2)
    [ok] = client.send(publish(2, b"small"))
    assert isinstance(ok, ev.PublishReceived)
    assert client.send(method(1, commands.Channel.CloseOk())) == [
        ev.ChannelClosed(1, 406, close.reply_text, False)
    ]


def test_message_of_exactly_max_message_size_is_accepted() -> None:
    client = Client(ConnectionSettings(max_message_size=5000))
    client.handshake(frame_max=4096)
    client.open_channel(1)
    [message] = client.send(publish(1, b"y" * 5000, frame_max=4096))
    assert isinstance(message, ev.PublishReceived) and len(message.body) == 5000


def test_interleaved_content_on_two_channels() -> None:
    client = Client()
    client.handshake(frame_max=4096)
    client.open_channel(1)
    client.open_channel(2)
    one = publish(1, b"a" * 5000, frame_max=4096, routing_key="one")
    two = publish(2, b"b" * 5000, frame_max=4096, routing_key="two")
    frames1 = _split_frames(one)
    frames2 = _split_frames(two)
    interleaved = b"".join(a + b for a, b in zip(frames1, frames2, strict=True))
    events = client.send(interleaved)
    assert [(e.channel, e.routing_key, e.body[:1]) for e in events] == [  # type: ignore[union-attr]
        (1, "one", b"a"),
        (2, "two", b"b"),
    ]


def _split_frames(data: bytes) -> list[bytes]:
    frames = []
    while data:
        size = int.from_bytes(data[3:7], "big")
        frames.append(data[: size + 8])
        data = data[size + 8 :]
    return frames


# -------------------------------------------------------------------------------- output


def test_deliver_replays_the_published_header_and_splits_the_body() -> None:
    client = Client()
    client.handshake(frame_max=4096)
    client.open_channel(1)
    props = commands.Basic.Properties(
        headers={"weird": b"\xff\xfe".decode("latin-1")}, priority=3, timestamp=None
    )
    [message] = client.send(publish(1, b"z" * 9000, properties=props, frame_max=4096))
    assert isinstance(message, ev.PublishReceived)
    client.conn.send_deliver(1, "ctag", 42, True, "ex", "rk", message.header, message.body)
    frames = client.received()
    deliver = frames[0][1]
    assert isinstance(deliver, commands.Basic.Deliver)
    assert (deliver.consumer_tag, deliver.delivery_tag, deliver.redelivered) == ("ctag", 42, True)
    content_header = frames[1][1]
    assert isinstance(content_header, header.ContentHeader)
    assert content_header.body_size == 9000
    assert content_header.properties == props
    bodies = [v for _c, v in frames[2:]]
    assert all(isinstance(b, body.ContentBody) for b in bodies)
    assert [len(b.value) for b in bodies] == [4088, 4088, 824]
    assert b"".join(b.value for b in bodies) == b"z" * 9000


@pytest.mark.parametrize(
    "header_value",
    [
        MessageProperties(content_type="text/plain", delivery_mode=1),
        commands.Basic.Properties(content_type="text/plain", delivery_mode=1),
    ],
)
def test_send_get_ok_and_return_encode_properties_objects(header_value: Any) -> None:
    client = Client()
    client.handshake()
    client.open_channel(1)
    client.conn.send_get_ok(1, 5, False, "", "q", 9, header_value, b"body")
    frames = client.received()
    assert isinstance(frames[0][1], commands.Basic.GetOk)
    assert frames[0][1].message_count == 9
    assert frames[1][1].properties.content_type == "text/plain"
    assert frames[2][1].value == b"body"
    client.conn.send_return(1, 312, "NO_ROUTE", "ex", "rk", header_value, b"")
    frames = client.received()
    assert isinstance(frames[0][1], commands.Basic.Return)
    assert (frames[0][1].reply_code, frames[0][1].reply_text) == (312, "NO_ROUTE")
    assert frames[1][1].body_size == 0
    assert len(frames) == 2  # no body frame for an empty body


def test_publisher_confirms() -> None:
    client = Client()
    client.handshake()
    client.open_channel(1)
    client.conn.send_ack(1, 10, True)
    client.conn.send_nack(1, 11, False)
    frames = client.methods()
    assert isinstance(frames[0][1], commands.Basic.Ack)
    assert (frames[0][1].delivery_tag, frames[0][1].multiple) == (10, True)
    assert isinstance(frames[1][1], commands.Basic.Nack)
    assert (frames[1][1].delivery_tag, frames[1][1].multiple, frames[1][1].requeue) == (
        11,
        False,
        False,
    )


def test_nothing_is_sent_on_unknown_channels() -> None:
    client = Client()
    client.handshake()
    assert not client.conn.send_ack(9, 1, False)
    assert not client.conn.send_deliver(9, "c", 1, False, "", "q", b"\x00\x00", b"")
    assert client.conn.data_to_send() == b""


# -------------------------------------------------------------------------------- closing


def test_graceful_server_close_320() -> None:
    client = Client()
    client.handshake()
    client.open_channel(1)
    shutdown = AMQPError(
        ReplyCode.CONNECTION_FORCED, "broker forced connection closure with reason 'shutdown'"
    )
    client.conn.close_connection(shutdown)
    close = client.expect_connection_close(320)
    assert close.reply_text == (
        "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
    )
    assert client.conn.state is ConnectionState.CLOSING
    # In-flight frames are ignored, outgoing work is dropped.
    assert client.send(publish(1, b"late") + method(1, commands.Basic.Ack(delivery_tag=1))) == []
    assert not client.conn.send_deliver(1, "c", 1, False, "", "q", b"\x00\x00", b"")
    assert client.send(method(0, commands.Connection.CloseOk())) == [
        ev.ConnectionClosed(320, close.reply_text, False)
    ]
    assert client.conn.is_closed
    # Close-Ok came to us: the socket is ours to close (connection.close-ok), at once.
    assert not client.conn.peer_closes_socket
    assert not client.conn.accept_connection_close()  # nothing to answer
    assert client.received() == []


def test_client_close_is_answered() -> None:
    client = Client()
    client.handshake()
    close = commands.Connection.Close(
        reply_code=200, reply_text="Normal shutdown", class_id=0, method_id=0
    )
    assert not client.conn.peer_closes_socket
    assert client.send(method(0, close)) == [ev.ConnectionClosed(200, "Normal shutdown", True)]
    assert client.conn.is_closed
    # Close-Ok waits for the shell, which closes the channels (requeueing) first.
    assert client.received() == []
    assert not client.conn.peer_closes_socket
    assert client.conn.accept_connection_close()
    client.expect_one(commands.Connection.CloseOk, 0)
    assert not client.conn.accept_connection_close()  # answered once
    # Our Close-Ok tells the client to close the socket: the shell waits for it to (RabbitMQ's
    # `closed` state), and what the client still sends is ignored meanwhile.
    assert client.conn.peer_closes_socket
    assert client.send(publish(1, b"late") + method(0, close)) == []
    assert client.conn.data_to_send() == b""


def test_client_close_while_we_are_closing() -> None:
    client = Client()
    client.handshake()
    client.conn.close_connection(AMQPError(ReplyCode.CONNECTION_FORCED, "bye"))
    client.received()
    close = commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    assert client.send(method(0, close)) == [
        ev.ConnectionClosed(320, "CONNECTION_FORCED - bye", False)
    ]
    assert client.received() == []
    assert client.conn.accept_connection_close()
    client.expect_one(commands.Connection.CloseOk, 0)
    # We answered with Close-Ok, so the client closes the socket, as after its own close.
    assert client.conn.peer_closes_socket


def test_close_before_the_header_just_hangs_up() -> None:
    conn = ServerConnection(ConnectionSettings(), 0.0)
    conn.close_connection(AMQPError(ReplyCode.CONNECTION_FORCED, "shutdown"))
    assert conn.is_closed
    assert conn.data_to_send() == b""
    assert conn.take_events() == [ev.ConnectionTerminated("CONNECTION_FORCED - shutdown")]


def test_eof() -> None:
    client = Client()
    client.handshake()
    assert client.send(b"") == [ev.ConnectionTerminated("client closed the connection")]
    assert client.conn.is_closed
    assert client.send(b"") == []


# ------------------------------------------------------------------------------ heartbeats


def test_heartbeats_with_a_fake_clock() -> None:
    client = Client(ConnectionSettings(heartbeat=10, heartbeat_timeout_factor=2))
    assert client.conn.next_deadline() is None
    client.handshake(heartbeat_=10)
    # Open-Ok went out at t=0: the next heartbeat is due after half an interval of silence.
    assert client.conn.next_deadline() == 5
    assert client.conn.handle_timer(4.9) == []
    assert client.conn.data_to_send() == b""
    assert client.conn.handle_timer(5) == []
    assert decode_frames(client.conn.data_to_send())[0][1].name == "Heartbeat"
    assert client.conn.next_deadline() == 10
    # The client keeps talking: its heartbeat at t=9 pushes the timeout to 29.
    client.now = 9
    client.send(heartbeat.Heartbeat.marshal())
    client.conn.handle_timer(10)
    client.conn.data_to_send()
    client.conn.handle_timer(15)
    client.conn.handle_timer(20)
    client.conn.handle_timer(25)
    sent = decode_frames(client.conn.data_to_send())
    assert len(sent) == 3
    assert client.conn.next_deadline() == 29
    assert client.conn.handle_timer(28.9) == []
    assert client.conn.handle_timer(29) == [ev.HeartbeatTimedOut()]
    assert client.conn.is_closed
    assert client.conn.next_deadline() is None


def test_output_postpones_our_heartbeat() -> None:
    client = Client(ConnectionSettings(heartbeat=10))
    client.handshake(heartbeat_=10)
    client.open_channel(1)
    client.now = 4
    client.send(method(1, commands.Basic.Qos(prefetch_count=1)))
    client.conn.send_method(1, commands.Basic.QosOk())
    # Output made between calls counts as sent at the time of the last call (t=4).
    assert client.conn.next_deadline() == 9
    client.conn.handle_timer(5)
    assert decode_frames(client.conn.data_to_send())[0][1].name == "Basic.QosOk"
    client.conn.handle_timer(9)
    assert decode_frames(client.conn.data_to_send())[0][1].name == "Heartbeat"


def test_heartbeat_off_when_client_says_zero() -> None:
    client = Client(ConnectionSettings(heartbeat=10))
    client.handshake(heartbeat_=0)
    assert client.conn.next_deadline() is None
    assert client.conn.handle_timer(1000) == []


def test_client_heartbeat_value_wins() -> None:
    client = Client(ConnectionSettings(heartbeat=0))
    client.handshake(heartbeat_=30)
    assert client.conn.negotiated.heartbeat == 30
    assert client.conn.next_deadline() == 15
