"""A structure-aware fuzzer for the sans-IO AMQP core (``gateway.amqp.connection``).

Each input is built from a seed (``random.Random``, so any input can be rebuilt from its
number): a protocol header (mostly right), a handshake cut at a random depth (Start-Ok, Tune-Ok,
Open, with valid or odd values), then a random mix of client frames — Channel.Open, Basic.Publish
+ content header + body, acks/nacks/rejects, heartbeats, Close/Close-Ok, any method of the spec
with random arguments, raw frames with random type/channel/size/frame-end — and finally a few
byte-level mutations (flips, cuts, duplicated or inserted runs). A few inputs are plain random
bytes. The bytes are fed to a ``ServerConnection`` at random split points, the shell's decisions
(login, vhost) are answered at random, and a timer may fire.

What must hold for every input (``check`` raises ``Violation`` otherwise):

* no exception at all leaves the core: its documented contract is that errors in what the peer
  sent never raise out of ``receive_data`` (they become Channel.Close / Connection.Close);
* everything the core writes frames correctly (type, size within frame_max, frame-end octet)
  and every method it sends is one of the spec's;
* every Connection.Close / Channel.Close carries a reply code from the spec's table (a hard
  code on Connection.Close — or 403/530 for a refused login/vhost —, a soft one on
  Channel.Close) and class/method ids that are 0/0 or a real method (or, with 540, the
  unknown method it refuses);
* after our Connection.Close the core writes nothing but a Close-Ok (to the client's own
  Close) and heartbeats; after a bad protocol header it writes exactly the header it supports;
* after a Channel.Close on channel n, nothing on n but Close-Ok until n is opened again;
* every ``ConnectionErrored`` event comes with a Connection.Close on the wire, and no event
  follows the connection's end.

``Outcome.kind`` names how an input ended (e.g. ``connection.close 505 UNEXPECTED_FRAME
basic.publish``) for the histogram the benchmark and the tests print.
"""

from __future__ import annotations

import random
import struct
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from gateway.amqp import events as ev
from gateway.amqp.codec import SPECS
from gateway.amqp.commands import Command
from gateway.amqp.connection import ConnectionSettings, ConnectionState, ServerConnection
from gateway.amqp.errors import (
    HARD_CODES,
    SOFT_CODES,
    AMQPError,
    ChannelError,
    ConnectionException,
    ReplyCode,
    code_name,
)
from gateway.amqp.fieldtable import encode_table
from gateway.amqp.framing import PROTOCOL_HEADER

SETTINGS = ConnectionSettings(frame_max=4096, max_message_size=20_000, channel_max=64)

_FRAME = struct.Struct(">BHI")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_CONNECTION_CLOSE = 0x000A0032
_CONNECTION_CLOSE_OK = 0x000A0033
_CHANNEL_CLOSE = 0x00140028
_CHANNEL_CLOSE_OK = 0x00140029
_CHANNEL_OPEN_OK = 0x0014000B
_VALID_CODES = frozenset(int(code) for code in ReplyCode)
_METHOD_IDS = sorted(SPECS)
_METHOD_NAMES = {index: spec.name for index, spec in SPECS.items()}


class Violation(AssertionError):
    """An input broke one of the core's promises."""


@dataclass(frozen=True)
class Case:
    """One fuzz input: the bytes, where they are cut, and the seed of the shell's answers."""

    data: bytes
    cuts: tuple[int, ...]
    answers: int

    def describe(self) -> str:
        return f"data={self.data.hex()}\ncuts={list(self.cuts)}\nanswers={self.answers}\n"


@dataclass
class Outcome:
    kind: str
    codes: set[int] = field(default_factory=set)
    # The Connection.Close reply code written, if any.
    close_code: int | None = None
    # Whether the input reached the shell's channel logic (a method, a message, an ack) before
    # its end: a gateway's answers to those (e.g. a 404 closing a channel) can change what the
    # rest of the input does, so only the others are predicted exactly by the core alone.
    reached_shell: bool = False


# ------------------------------------------------------------------------------ generation


def _frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return _FRAME.pack(frame_type, channel, len(payload)) + payload + b"\xce"


def _shortstr(value: bytes) -> bytes:
    return bytes([len(value)]) + value


def _longstr(value: bytes) -> bytes:
    return _U32.pack(len(value)) + value


_STRINGS = [
    b"",
    b"q",
    b"amq.direct",
    b"amq.topic",
    b"amq.gen-abc",
    b"/",
    b"a" * 255,
    b"\xff\xfe",
    b"nul\x00in",
    "caf\u00e9".encode(),
    b"x-dead-letter",
]
_TABLES = [
    encode_table({}),
    encode_table({"x-max-length": 10}),
    encode_table({"x-queue-type": "stream", "x-message-ttl": -1}),
    encode_table({"x-expires": 0, "x-max-priority": 300}),
    encode_table({"n": [1, 2.5, "s", None, True], "t": {"inner": b"bytes"}}),
    encode_table({"x-match": "any", "x-dead-letter-exchange": "amq.direct"}),
    encode_table(
        {"capabilities": {"authentication_failure_close": True, "connection.blocked": True}}
    ),
    b"\x00\x00\x00\x05\x01aZ\x00\x00",  # unknown field type
    b"\x00\x00\x00\x09",  # longer than what follows
    b"\x00\x00\x00\x03\x01ak",
]
_INTEGER_EDGES = [0, 1, 2, 255, 256, 4095, 4096, 65535, 2**31 - 1, 2**32 - 1, 2**63, 2**64 - 1]


def _integer(rng: random.Random, size: int) -> int:
    limit = (1 << (8 * size)) - 1
    if rng.random() < 0.5:
        return rng.choice(_INTEGER_EDGES) & limit
    return rng.randint(0, min(limit, 100))


def _random_arguments(rng: random.Random, fields: tuple[tuple[str, str], ...]) -> bytes:
    out = bytearray()
    bits: list[bool] = []

    def flush() -> None:
        if bits:
            out.append(sum(1 << i for i, bit in enumerate(bits)))
            bits.clear()

    for _name, amqp_type in fields:
        if amqp_type == "bit":
            bits.append(rng.random() < 0.3)
            if len(bits) == 8:
                flush()
            continue
        flush()
        if amqp_type == "octet":
            out.append(_integer(rng, 1))
        elif amqp_type == "short":
            out += _U16.pack(_integer(rng, 2))
        elif amqp_type == "long":
            out += _U32.pack(_integer(rng, 4))
        elif amqp_type == "longlong":
            out += _U64.pack(_integer(rng, 8))
        elif amqp_type == "shortstr":
            out += _shortstr(rng.choice(_STRINGS))
        elif amqp_type == "longstr":
            out += _longstr(rng.choice(_STRINGS) * rng.choice((1, 1, 3)))
        else:  # table
            out += rng.choice(_TABLES)
    flush()
    return bytes(out)


def _method(rng: random.Random, index: int, channel: int) -> bytes:
    spec = SPECS[index]
    return _frame(1, channel, _U32.pack(index) + _random_arguments(rng, spec.fields))


def _start_ok(rng: random.Random) -> bytes:
    caps = {"authentication_failure_close": rng.random() < 0.7, "connection.blocked": True}
    props = encode_table({"product": "fuzz", "capabilities": caps})
    odd = rng.random() < 0.08  # most handshakes go through, to reach the frames after them
    mechanism = rng.choice([b"AMQPLAIN", b"", b"EXTERNAL", b"\xff"]) if odd else b"PLAIN"
    response = rng.choice([b"\x00guest\x00guest", b"", b"\x00\x00", b"guest"])
    locale = rng.choice([b"en_US", b"", b"xx"])
    payload = (
        _U32.pack(0x000A000B)
        + props
        + _shortstr(mechanism)
        + _longstr(response)
        + _shortstr(locale)
    )
    return _frame(1, 0, payload)


def _tune_ok(rng: random.Random) -> bytes:
    if rng.random() < 0.9:
        channel_max, frame_max, heartbeat = rng.choice([0, 64, 16]), rng.choice([0, 4096]), 0
    else:
        channel_max = rng.choice([0, 1, 64, 65, 2047, 65535])
        frame_max = rng.choice([0, 4096, 4095, 131072, 8, 2**32 - 1])
        heartbeat = rng.choice([0, 1, 60, 65535])
    return _frame(
        1, 0, _U32.pack(0x000A001F) + struct.pack(">HIH", channel_max, frame_max, heartbeat)
    )


def _open(rng: random.Random) -> bytes:
    vhost = rng.choice([b"other", b"", b"\xff"]) if rng.random() < 0.05 else b"/"
    return _frame(1, 0, _U32.pack(0x000A0028) + _shortstr(vhost) + b"\x00\x00")


def _properties(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.4:
        return b"\x00\x00"
    if roll < 0.6:  # content-type + headers
        return b"\xa0\x00" + _shortstr(b"text/plain") + rng.choice(_TABLES)
    if roll < 0.75:  # delivery-mode + priority
        return b"\x18\x00" + bytes([rng.choice([1, 2, 3]), rng.choice([0, 9, 255])])
    if roll < 0.85:  # continuation flag: a second flags word
        return b"\x00\x01\x00\x00"
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 12)))


def _publish(rng: random.Random, channel: int) -> bytes:
    exchange = rng.choice([b"", b"amq.direct", b"amq.topic", b"nope", b"\xff"])
    routing_key = rng.choice([b"rk", b"", b"a" * 255])
    flags = rng.choice([0, 0, 0, 1, 2, 3])
    method = _frame(
        1,
        channel,
        _U32.pack(0x003C0028)
        + b"\x00\x00"
        + _shortstr(exchange)
        + _shortstr(routing_key)
        + bytes([flags]),
    )
    size = rng.choice([0, 1, 10, 4088, 4089, 9000, 20_000, 20_001, 2**40])
    class_id = 60 if rng.random() < 0.9 else rng.choice([0, 50, 61])
    weight = 0 if rng.random() < 0.95 else 1
    content_header = _frame(
        2, channel, struct.pack(">HHQ", class_id, weight, size) + _properties(rng)
    )
    body = bytearray()
    remaining = min(size, 25_000)
    chunk = rng.choice([4088, 4088, 1000, 4089])
    while remaining > 0 and len(body) < 30_000:
        part = min(chunk, remaining)
        body += _frame(3, channel, b"b" * part)
        remaining -= part
        if rng.random() < 0.05:
            break  # a body left short of the announced size
    if rng.random() < 0.05:
        body += _frame(3, channel, b"extra")  # more body than announced
    return method + content_header + bytes(body)


def _raw_frame(rng: random.Random, channel: int) -> bytes:
    frame_type = rng.choice([1, 2, 3, 8, 0, 4, 9, 255, rng.randrange(256)])
    payload = bytes(rng.randrange(256) for _ in range(rng.randint(0, 24)))
    size = (
        len(payload) if rng.random() < 0.8 else rng.choice([0, 4097, 2**32 - 1, len(payload) + 1])
    )
    end = b"\xce" if rng.random() < 0.8 else bytes([rng.randrange(256)])
    return _FRAME.pack(frame_type, channel, size) + payload + end


def _channel(rng: random.Random, opened: list[int]) -> int:
    roll = rng.random()
    if opened and roll < 0.75:
        return rng.choice(opened)
    if roll < 0.9:
        return rng.choice([1, 2, 3])
    return rng.choice([0, 64, 65, 65535, rng.randrange(65536)])


def _operation(rng: random.Random, opened: list[int]) -> bytes:
    channel = _channel(rng, opened)
    roll = rng.random()
    if roll < 0.14:
        if channel not in opened:
            opened.append(channel)
        return _frame(1, channel, _U32.pack(0x0014000A) + _shortstr(rng.choice([b"", b"", b"x"])))
    if roll < 0.36:
        return _publish(rng, channel)
    if roll < 0.46:
        index = rng.choice([0x003C0050, 0x003C0078, 0x003C005A])
        return _method(rng, index, channel)
    if roll < 0.70:
        return _method(rng, rng.choice(_METHOD_IDS), channel)
    if roll < 0.74:
        return _frame(8, rng.choice([0, 0, channel]), b"")
    if roll < 0.78:
        index = rng.choice([_CHANNEL_CLOSE, _CHANNEL_CLOSE_OK, 0x00140014])  # Close, Close-Ok, Flow
        return _method(rng, index, channel)
    if roll < 0.81:
        return _method(rng, rng.choice([_CONNECTION_CLOSE, _CONNECTION_CLOSE_OK]), 0)
    if roll < 0.85:  # a content frame with no method before it
        if rng.random() < 0.5:
            return _frame(2, channel, struct.pack(">HHQ", 60, 0, 3) + b"\x00\x00")
        return _frame(3, channel, b"orphan")
    return _raw_frame(rng, channel)


def _header(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.96:
        return PROTOCOL_HEADER
    return rng.choice(
        [
            b"AMQP\x00\x00\x09\x00",
            b"AMQP\x01\x01\x00\x0a",
            b"AMQP\x00\x01\x00\x00",
            b"GET / HTTP/1.1\r\n\r\n",
            b"PROXY TCP4 10.0.0.1 10.0.0.2 1 2\r\n",
            b"\r\n\r\n\x00\r\nQUIT\n",
            bytes(rng.randrange(256) for _ in range(8)),
        ]
    )


def _mutate(rng: random.Random, data: bytearray) -> None:
    for _ in range(rng.choice([0, 0, 0, 1, 1, 2, 4])):
        if not data:
            return
        roll = rng.random()
        position = rng.randrange(len(data))
        if roll < 0.5:
            data[position] = rng.randrange(256)
        elif roll < 0.65:
            del data[position:]
        elif roll < 0.8:
            end = min(len(data), position + rng.randint(1, 40))
            data[position:position] = data[position:end]
        elif roll < 0.9:
            data[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            del data[position : position + rng.randint(1, 16)]


def make_case(seed: int) -> Case:
    """The input number ``seed`` (deterministic: a failing input is rebuilt from its number)."""
    rng = random.Random(seed)
    if rng.random() < 0.05:
        tail = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
        data = bytearray((PROTOCOL_HEADER if rng.random() < 0.7 else b"") + tail)
    else:
        data = bytearray(_header(rng))
        depth = rng.choice([0, 1, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3])
        steps: list[Callable[[random.Random], bytes]] = [_start_ok, _tune_ok, _open]
        for step in steps[:depth]:
            data += step(rng)
        opened: list[int] = []
        if depth == 3 and rng.random() < 0.8:  # most inputs get as far as an open channel
            data += _frame(1, 1, _U32.pack(0x0014000A) + b"\x00")
            opened.append(1)
        for _ in range(rng.randint(0, 10)):
            data += _operation(rng, opened)
        mutable = bytearray(data[8:])
        _mutate(rng, mutable)
        data[8:] = mutable
    cuts = tuple(sorted(rng.randrange(len(data) + 1) for _ in range(rng.choice([0, 1, 2, 4]))))
    return Case(bytes(data), cuts, rng.randrange(2**32))


# ------------------------------------------------------------------------------ checking

COMMANDS = typing.get_args(Command)
_TERMINAL = (ev.ConnectionTerminated, ev.ConnectionClosed, ev.HeartbeatTimedOut)
_SHELL_WORK = (
    ev.CommandReceived,
    ev.PublishReceived,
    ev.AckReceived,
    ev.NackReceived,
    ev.RejectReceived,
    ev.UpdateSecretRequested,
)


class _Checker:
    """Reads everything the core writes and every event it returns, in order."""

    def __init__(self, settings: ConnectionSettings, *, content_allowed: bool = False) -> None:
        self.settings = settings
        # A whole gateway (not the bare core) answers publishes and gets with content.
        self.content_allowed = content_allowed
        self.reached_shell = False
        self.output = bytearray()
        self.parsed = 0
        self.connection_close: tuple[int, int, int] | None = None
        self.closing_channels: set[int] = set()
        self.open_channels: set[int] = set()
        self.channel_closes_written: set[int] = set()
        self.erroring_channels: set[int] = set()
        self.channel_codes: set[int] = set()
        self.bad_header = False
        self.ended = False
        self.errored: list[AMQPError] = []
        self.kind = ""

    def take_output(self, data: bytes) -> None:
        if not self.output and data.startswith(b"AMQP"):
            self.bad_header = True  # the only output that is not a frame (§4.2.2)
        self.output += data
        if self.bad_header:
            if bytes(self.output) != PROTOCOL_HEADER:
                raise Violation(f"after a bad header wrote {bytes(self.output)!r}")
            return
        self._parse()

    def _parse(self) -> None:
        data = self.output
        while True:
            position = self.parsed
            if len(data) - position < 8:
                return
            frame_type, channel, size = _FRAME.unpack_from(data, position)
            end = position + 7 + size
            if size > self.settings.frame_max - 8:
                raise Violation(f"wrote a frame of {size} octets")
            if len(data) <= end:
                raise Violation("wrote a partial frame")
            if data[end] != 0xCE:
                raise Violation("wrote a frame without its frame-end octet")
            self._frame(frame_type, channel, bytes(data[position + 7 : end]))
            self.parsed = end + 1

    def _frame(self, frame_type: int, channel: int, payload: bytes) -> None:
        if frame_type == 8:
            if channel != 0 or payload:
                raise Violation("wrote a malformed heartbeat")
            return
        if frame_type in (2, 3) and self.content_allowed:
            if self.connection_close is not None or channel in self.closing_channels:
                raise Violation(f"wrote content on channel {channel} after a Close")
            return
        if frame_type != 1:
            raise Violation(f"wrote a frame of type {frame_type} (no content was asked for)")
        if len(payload) < 4:
            raise Violation("wrote a method frame without a method id")
        (index,) = _U32.unpack_from(payload)
        if index not in SPECS:
            raise Violation(f"wrote unknown method {index:#x}")
        if self.connection_close is not None:
            if index != _CONNECTION_CLOSE_OK or channel != 0:
                raise Violation(f"wrote {_METHOD_NAMES[index]} after Connection.Close")
            return
        if channel in self.closing_channels:
            if index == _CHANNEL_OPEN_OK:
                self.closing_channels.discard(channel)
            elif index != _CHANNEL_CLOSE_OK:
                raise Violation(
                    f"wrote {_METHOD_NAMES[index]} on channel {channel} after its Close"
                )
        if index == _CONNECTION_CLOSE:
            if channel != 0:
                raise Violation("wrote Connection.Close on a channel")
            code, class_id, method_id = _close_fields(payload)
            if code not in HARD_CODES | {ReplyCode.ACCESS_REFUSED, ReplyCode.NOT_ALLOWED}:
                raise Violation(f"Connection.Close with reply code {code}")
            _check_ids(code, class_id, method_id)
            self.connection_close = (code, class_id, method_id)
        elif index == _CHANNEL_CLOSE:
            code, class_id, method_id = _close_fields(payload)
            if code not in SOFT_CODES:
                raise Violation(f"Channel.Close with reply code {code}")
            _check_ids(code, class_id, method_id)
            self.closing_channels.add(channel)
            self.channel_closes_written.add(channel)
            self.channel_codes.add(code)
            if not self.kind:
                self.kind = (
                    f"channel.close {code} {code_name(code)} {_ids_name(class_id, method_id)}"
                )

    def take_events(self, events: list[ev.Event]) -> None:
        for event in events:
            if self.ended:
                raise Violation(f"event {event!r} after the connection ended")
            if isinstance(event, ev.ConnectionErrored):
                error = event.error
                if error.reply_code not in _VALID_CODES:
                    raise Violation(f"ConnectionErrored with reply code {error.reply_code}")
                self.errored.append(error)
            elif isinstance(event, _TERMINAL):
                self.ended = True
            elif isinstance(event, ev.ChannelOpened):
                self.open_channels.add(event.channel)
            elif isinstance(event, ev.ChannelClosed):
                self.open_channels.discard(event.channel)
                self.erroring_channels.discard(event.channel)
            elif isinstance(event, ev.ChannelErrored):
                if event.error.reply_code not in SOFT_CODES:
                    raise Violation(f"ChannelErrored with reply code {event.error.reply_code}")
                if event.channel not in self.channel_closes_written:
                    raise Violation(f"ChannelErrored({event.channel}) without a Channel.Close")
                self.erroring_channels.add(event.channel)
            elif isinstance(event, _SHELL_WORK):
                self._shell_work(event)

    def _shell_work(self, event: ev.Event) -> None:
        """What is handed to the shell comes from an open channel and is well formed."""
        channel: int = getattr(event, "channel", 0)
        if channel and (channel not in self.open_channels or channel in self.erroring_channels):
            raise Violation(f"{type(event).__name__} on channel {channel}, which is not open")
        if isinstance(event, ev.PublishReceived):
            event.properties  # noqa: B018 - promised never to fail once the event is out
            if len(event.body) > self.settings.max_message_size:
                raise Violation(f"a message of {len(event.body)} octets got through")
        elif isinstance(event, ev.CommandReceived) and not isinstance(event.command, COMMANDS):
            raise Violation(f"handed the shell {type(event.command).__name__}")
        if not self.errored:
            self.reached_shell = True


def _close_fields(payload: bytes) -> tuple[int, int, int]:
    try:
        (code,) = _U16.unpack_from(payload, 4)
        text_length = payload[6]
        class_id, method_id = struct.unpack_from(">HH", payload, 7 + text_length)
    except (struct.error, IndexError):
        raise Violation("wrote a truncated Close") from None
    if 7 + text_length + 4 != len(payload):
        raise Violation("wrote a Close with trailing octets")
    payload[7 : 7 + text_length].decode("utf-8")
    if code not in _VALID_CODES:
        raise Violation(f"reply code {code} is not in the spec's table")
    return code, class_id, method_id


def _check_ids(code: int, class_id: int, method_id: int) -> None:
    # 540 for an unknown method names that method (class/method ids echoed, as the Close
    # must name "the method that caused the exception"): the only ids outside the spec.
    if code == ReplyCode.NOT_IMPLEMENTED:
        return
    if (class_id, method_id) != (0, 0) and (class_id << 16 | method_id) not in SPECS:
        raise Violation(f"Close names no method: class {class_id}, method {method_id}")


def _ids_name(class_id: int, method_id: int) -> str:
    return _METHOD_NAMES.get(class_id << 16 | method_id, "-")


def _chunks(case: Case) -> Iterator[bytes]:
    start = 0
    for cut in case.cuts:
        yield case.data[start:cut]
        start = cut
    yield case.data[start:]


def run_case(
    case: Case, settings: ConnectionSettings = SETTINGS, *, like_a_gateway: bool = False
) -> Outcome:
    """Feed ``case`` to a fresh core; raise ``Violation`` (or whatever escaped) on a broken
    promise, else return how the connection ended.

    ``like_a_gateway`` predicts what a gateway that lets everyone in does with the same bytes
    sent at once: every login and vhost accepted, no timer, no EOF."""
    rng = random.Random(case.answers)
    # The shell's own actions draw from a stream of their own, so that adding or changing
    # them leaves every input's other random choices as they were.
    shell = random.Random(case.answers ^ 0x5E11)
    now = 0.0
    conn = ServerConnection(settings, now)
    checker = _Checker(settings)
    refused_by_shell = False
    for chunk in _chunks(case):
        if not chunk:
            continue
        now += rng.choice([0.0, 0.5, 30.0])
        events = conn.receive_data(chunk, now)
        while True:
            # Output first: an event may refer to what was written in the same call.
            checker.take_output(conn.data_to_send())
            checker.take_events(events)
            answered = _answer(conn, rng, 1.0 if like_a_gateway else 0.93)
            if not answered:
                break
            refused_by_shell = refused_by_shell or answered == "refused"
            events = conn.take_events()
        if not like_a_gateway and shell.random() < 0.15:
            refused_by_shell = _shell_acts(conn, shell, checker) or refused_by_shell
            checker.take_output(conn.data_to_send())
            checker.take_events(conn.take_events())
        if rng.random() < 0.1 and not like_a_gateway:
            now += rng.choice([1.0, 200.0])
            events = conn.handle_timer(now)
            checker.take_output(conn.data_to_send())
            checker.take_events(events)
    if rng.random() < 0.5 and not like_a_gateway:
        events = conn.receive_data(b"", now)
        checker.take_output(conn.data_to_send())
        checker.take_events(events)
    return _outcome(conn, checker, refused_by_shell)


def _shell_acts(conn: ServerConnection, rng: random.Random, checker: _Checker) -> bool:
    """Do what a gateway's shell does on its own between reads: deliver, confirm, close a
    channel (404, as for a deleted queue) or the connection (320, as on shutdown). The core
    must refuse to write any of it once a channel or the connection is closing. Returns True
    when that was a Connection.Close written by the shell."""
    channels = sorted(conn.open_channels) or [1]
    channel = rng.choice(channels)
    roll = rng.random()
    if roll < 0.4:
        body = b"d" * rng.choice([0, 10, 4088, 5000, 9000])
        header = rng.choice([b"\x00\x00", b"\x10\x00\x02"])  # none / delivery-mode 2
        if conn.send_deliver(channel, "ctag", rng.randint(1, 9), False, "", "q", header, body):
            checker.content_allowed = True
    elif roll < 0.6:
        conn.send_ack(channel, rng.randint(1, 9), rng.random() < 0.3)
    elif roll < 0.85:
        conn.close_channel(channel, ChannelError(ReplyCode.NOT_FOUND, "no queue 'q'", 60, 20))
    else:
        was_closing = conn.state in (ConnectionState.CLOSING, ConnectionState.CLOSED)
        conn.close_connection(ConnectionException(ReplyCode.CONNECTION_FORCED, "shutdown"))
        return not was_closing and conn.state is ConnectionState.CLOSING
    return False


def _answer(conn: ServerConnection, rng: random.Random, accept_rate: float) -> str:
    """Answer what the core asked the shell (as the gateway's shell would), at random."""
    state = conn.state
    if state is ConnectionState.AUTHENTICATING:
        if rng.random() < accept_rate:
            conn.accept_login("guest")
            return "accepted"
        conn.refuse_login("bad credentials")
        return "refused"
    if state is ConnectionState.VHOST_CHECK:
        if rng.random() < accept_rate:
            conn.accept_vhost()
            return "accepted"
        conn.refuse_vhost(ReplyCode.NOT_ALLOWED, "no access to this vhost")
        return "refused"
    return ""


def _outcome(conn: ServerConnection, checker: _Checker, refused: bool) -> Outcome:
    wrote_close = checker.connection_close is not None
    if len(checker.errored) > 1:
        raise Violation(f"{len(checker.errored)} ConnectionErrored events")
    if checker.errored and not wrote_close:
        raise Violation(f"ConnectionErrored({checker.errored[0]!r}) without a Connection.Close")
    if wrote_close and not checker.errored and not refused:
        raise Violation("Connection.Close written with no ConnectionErrored event")
    if wrote_close and conn.state not in (ConnectionState.CLOSING, ConnectionState.CLOSED):
        raise Violation(f"Connection.Close written but the state is {conn.state.value}")
    codes = set(checker.channel_codes)
    close_code = None if checker.connection_close is None else checker.connection_close[0]
    if checker.bad_header:
        kind = "bad protocol header -> our header"
    elif checker.connection_close is not None:
        code, class_id, method_id = checker.connection_close
        codes.add(code)
        kind = f"connection.close {code} {code_name(code)} {_ids_name(class_id, method_id)}"
    elif checker.kind:
        kind = checker.kind
    elif conn.state is ConnectionState.CLOSED:
        kind = "closed without a reply code (EOF, refused login, timeout)"
    else:
        kind = f"no error (state {conn.state.value})"
    return Outcome(kind, codes, close_code, checker.reached_shell)


def check_gateway_output(data: bytes, settings: ConnectionSettings) -> int | None:
    """Check what a whole gateway wrote on one connection (the same promises as the core's,
    content frames allowed); return the Connection.Close reply code, if one was written."""
    checker = _Checker(settings, content_allowed=True)
    checker.take_output(data)
    if checker.parsed != len(checker.output) and not checker.bad_header:
        raise Violation(f"the gateway's output ends in a partial frame: {data[checker.parsed :]!r}")
    return None if checker.connection_close is None else checker.connection_close[0]


def minimise(case: Case, fails: Callable[[Case], bool], budget: int = 3000) -> Case:
    """Shrink a failing input: drop the cuts, then delete ever smaller runs of octets."""
    if fails(Case(case.data, (), case.answers)):
        case = Case(case.data, (), case.answers)
    size = max(1, len(case.data) // 2)
    while size >= 1 and budget > 0:
        position = 0
        while position < len(case.data) and budget > 0:
            shorter = case.data[:position] + case.data[position + size :]
            candidate = Case(
                shorter, tuple(c for c in case.cuts if c <= len(shorter)), case.answers
            )
            budget -= 1
            if fails(candidate):
                case = candidate
            else:
                position += size
        size //= 2
    return case


def failure_of(case: Case) -> str | None:
    """The broken promise (or escaped exception) for ``case``; None when it holds."""
    try:
        run_case(case)
    except Exception as error:  # the point: anything at all that escapes is a finding
        return f"{type(error).__name__}: {error}"
    return None
