"""A minimal AMQP client for tests that must send exact frames (or exact garbage).

It speaks through pamqp, not through the gateway's own codec, so that a bug in our codec
cannot hide itself by being on both sides of the conversation.
"""

from __future__ import annotations

from typing import Any

import trio
from pamqp import commands, frame, header, heartbeat
from pamqp.exceptions import UnmarshalingException

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FrameValue = Any


class ScriptedClient:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._buffer = bytearray()
        self.closed = False

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send(self, value: FrameValue, channel: int = 0) -> None:
        await self.stream.send_all(frame.marshal(value, channel))

    async def receive(self) -> tuple[int, FrameValue]:
        """The next frame from the server as (channel, pamqp object); EOFError when closed."""
        while True:
            if self._buffer:
                try:
                    consumed, channel, value = frame.unmarshal(bytes(self._buffer))
                except UnmarshalingException:
                    pass  # pamqp cannot tell "short" from "garbage": read more and retry
                else:
                    del self._buffer[:consumed]
                    return channel, value
            data = await self.stream.receive_some(65536)
            if not data:
                self.closed = True
                raise EOFError(f"server closed the connection; unparsed: {bytes(self._buffer)!r}")
            self._buffer += data

    async def receive_raw(self) -> tuple[int, int, bytes]:
        """The next frame undecoded: (frame type, channel, payload) — for byte-exact checks."""
        while len(self._buffer) < 7 or len(self._buffer) < 8 + int.from_bytes(
            self._buffer[3:7], "big"
        ):
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("server closed the connection")
            self._buffer += data
        size = int.from_bytes(self._buffer[3:7], "big")
        frame_type, channel = self._buffer[0], int.from_bytes(self._buffer[1:3], "big")
        payload = bytes(self._buffer[7 : 7 + size])
        del self._buffer[: 8 + size]
        return frame_type, channel, payload

    async def expect(self, kind: type, channel: int | None = None) -> Any:
        """Receive frames, skipping heartbeats, until one arrives; it must be of ``kind``."""
        while True:
            got_channel, value = await self.receive()
            if isinstance(value, heartbeat.Heartbeat) and kind is not heartbeat.Heartbeat:
                continue
            assert isinstance(value, kind), f"expected {kind.__name__}, got {value!r}"
            if channel is not None:
                assert got_channel == channel, f"{value!r} on channel {got_channel}, not {channel}"
            return value

    async def read_until_eof(self) -> list[FrameValue]:
        frames = []
        try:
            while True:
                frames.append((await self.receive())[1])
        except EOFError:
            return frames

    async def handshake(
        self,
        *,
        heartbeat_interval: int = 0,
        vhost: str = "/",
        capabilities: dict[str, Any] | None = None,
        frame_max: int = 131072,
    ) -> commands.Connection.Tune:
        await self.send_raw(PROTOCOL_HEADER)
        start = await self.expect(commands.Connection.Start)
        assert b"PLAIN" in start.mechanisms.encode() if isinstance(start.mechanisms, str) else True
        caps = {"authentication_failure_close": True} if capabilities is None else capabilities
        await self.send(
            commands.Connection.StartOk(
                client_properties={"product": "scripted", "capabilities": caps},
                mechanism="PLAIN",
                response="\0guest\0guest",
            )
        )
        tune = await self.expect(commands.Connection.Tune)
        await self.send(
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=frame_max, heartbeat=heartbeat_interval
            )
        )
        await self.send(commands.Connection.Open(virtual_host=vhost))
        await self.expect(commands.Connection.OpenOk)
        return tune

    async def open_channel(self, channel: int = 1) -> None:
        await self.send(commands.Channel.Open(), channel)
        await self.expect(commands.Channel.OpenOk, channel)


__all__ = ["PROTOCOL_HEADER", "ScriptedClient", "commands", "header", "heartbeat"]
