"""Drive a ServerConnection like a client would, and read what it sends back.

Client frames are built with pamqp and the server's output is decoded with pamqp, not with
the gateway's own codec, so that a codec bug cannot hide by being on both sides.
"""

from __future__ import annotations

from typing import Any

from pamqp import base, body, commands, frame, header, heartbeat

from gateway.amqp import events as ev
from gateway.amqp.connection import ConnectionSettings, ServerConnection

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

CLIENT_CAPABILITIES: dict[str, Any] = {
    "authentication_failure_close": True,
    "basic.nack": True,
    "connection.blocked": True,
    "consumer_cancel_notify": True,
    "publisher_confirms": True,
}


def method(channel: int, value: base.Frame) -> bytes:
    return frame.marshal(value, channel)


def start_ok(
    response: str = "\0guest\0guest",
    mechanism: str = "PLAIN",
    capabilities: dict[str, Any] | None = None,
) -> bytes:
    caps = CLIENT_CAPABILITIES if capabilities is None else capabilities
    props = {"product": "pika", "platform": "Python", "capabilities": caps}
    return method(
        0,
        commands.Connection.StartOk(
            client_properties=props, mechanism=mechanism, response=response
        ),
    )


def tune_ok(channel_max: int = 256, frame_max: int = 131072, heartbeat_: int = 0) -> bytes:
    return method(
        0,
        commands.Connection.TuneOk(
            channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat_
        ),
    )


def open_(vhost: str = "/") -> bytes:
    return method(0, commands.Connection.Open(virtual_host=vhost))


def publish(
    channel: int,
    body_: bytes,
    exchange: str = "amq.direct",
    routing_key: str = "rk",
    properties: commands.Basic.Properties | None = None,
    frame_max: int = 131072,
    mandatory: bool = False,
    immediate: bool = False,
) -> bytes:
    """Basic.Publish + content header + body frames split at ``frame_max`` (as pika does)."""
    parts = [
        method(
            channel,
            commands.Basic.Publish(
                exchange=exchange,
                routing_key=routing_key,
                mandatory=mandatory,
                immediate=immediate,
            ),
        ),
        frame.marshal(header.ContentHeader(0, len(body_), properties), channel),
    ]
    chunk = frame_max - 8
    for start in range(0, len(body_), chunk):
        parts.append(frame.marshal(body.ContentBody(body_[start : start + chunk]), channel))
    return b"".join(parts)


def decode_frames(data: bytes) -> list[tuple[int, Any]]:
    """Split the server's output into (channel, pamqp frame object); all bytes must parse."""
    frames: list[tuple[int, Any]] = []
    if data.startswith(b"AMQP"):
        frames.append((0, data[:8]))
        data = data[8:]
    while data:
        consumed, channel, value = frame.unmarshal(data)
        frames.append((channel, value))
        data = data[consumed:]
    return frames


class Client:
    """A ServerConnection with a fake clock and a transcript of what it sent."""

    def __init__(self, settings: ConnectionSettings | None = None, now: float = 0.0) -> None:
        self.now = now
        self.conn = ServerConnection(settings or ConnectionSettings(), now)
        self.events: list[ev.Event] = []

    def send(self, data: bytes) -> list[ev.Event]:
        events = self.conn.receive_data(data, self.now)
        self.events.extend(events)
        return events

    def received(self) -> list[tuple[int, Any]]:
        return decode_frames(self.conn.data_to_send())

    def methods(self) -> list[tuple[int, Any]]:
        return [(c, v) for c, v in self.received() if isinstance(v, base.Frame)]

    def expect_one(self, kind: type, channel: int | None = None) -> Any:
        got = self.received()
        assert len(got) == 1, got
        ch, value = got[0]
        assert isinstance(value, kind), value
        if channel is not None:
            assert ch == channel
        return value

    def handshake(
        self,
        *,
        heartbeat_: int = 0,
        frame_max: int = 131072,
        capabilities: dict[str, Any] | None = None,
    ) -> None:
        self.send(PROTOCOL_HEADER)
        self.expect_one(commands.Connection.Start)
        [login] = self.send(start_ok(capabilities=capabilities))
        assert isinstance(login, ev.LoginRequested)
        self.conn.accept_login("guest")
        self.expect_one(commands.Connection.Tune)
        self.send(tune_ok(frame_max=frame_max, heartbeat_=heartbeat_))
        [vhost] = self.send(open_())
        assert isinstance(vhost, ev.VhostRequested)
        self.conn.accept_vhost()
        assert self.conn.take_events() == [ev.ConnectionOpened("/", "guest")]
        self.expect_one(commands.Connection.OpenOk)

    def open_channel(self, channel: int = 1) -> None:
        assert self.send(method(channel, commands.Channel.Open())) == [ev.ChannelOpened(channel)]
        self.expect_one(commands.Channel.OpenOk, channel)

    def expect_connection_close(self, code: int) -> commands.Connection.Close:
        frames = [v for _c, v in self.received() if isinstance(v, commands.Connection.Close)]
        assert len(frames) == 1, frames
        close: commands.Connection.Close = frames[0]
        assert close.reply_code == code, (close.reply_code, close.reply_text)
        return close

    def expect_channel_close(self, channel: int, code: int) -> commands.Channel.Close:
        frames = [(c, v) for c, v in self.received() if isinstance(v, commands.Channel.Close)]
        assert len(frames) == 1, frames
        ch, close = frames[0]
        assert ch == channel
        assert close.reply_code == code, (close.reply_code, close.reply_text)
        return close  # type: ignore[no-any-return]


__all__ = [
    "PROTOCOL_HEADER",
    "Client",
    "body",
    "commands",
    "decode_frames",
    "header",
    "heartbeat",
    "method",
    "open_",
    "publish",
    "start_ok",
    "tune_ok",
]
