"""The compiled frame scan (gateway/amqp/native/frames.c) against the Python path.

What it takes and where it stops, directly; then the property that matters: a connection that
hands its reads to the scan first produces the same events and sends the same bytes as one
that takes every frame in Python, for generated streams of publishes, acks and everything
that can interrupt them (other channels' frames in between, closing channels, malformed and
oversized messages, frames cut anywhere by the socket).
"""

from __future__ import annotations

import datetime
import itertools
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.amqp import events as ev
from gateway.amqp.compiled import FrameScan
from gateway.amqp.connection import ConnectionSettings
from gateway.amqp.fieldtable import FieldDecodeError
from gateway.amqp.properties import MessageProperties, encode_properties, validate_properties
from tests.support.core_client import Client, commands, heartbeat, method, publish
from tests.unit.amqp.conftest import require_frame_scan, require_property_check
from tests.unit.amqp.strategies import message_properties

FRAME_MAX = 4096
MAX_MESSAGE = 10_000
PLAIN = commands.Basic.Properties(delivery_mode=2)
RICH = commands.Basic.Properties(
    content_type="text/plain", headers={"k": "v", "n": [1, 2.5]}, priority=4
)


@pytest.fixture
def scan() -> FrameScan:
    return require_frame_scan()


class Recorded:
    """A connection's scan, counting the bytes it took."""

    def __init__(self, scan: FrameScan) -> None:
        self.scan = scan
        self.taken = 0

    def __call__(self, buffer: Any, pos: int, *rest: Any) -> int:
        end = self.scan(buffer, pos, *rest)
        self.taken += end - pos
        return end


def opened(*, compiled: bool) -> tuple[Client, Recorded | None]:
    settings_ = ConnectionSettings(
        frame_max=FRAME_MAX, max_message_size=MAX_MESSAGE, compiled=compiled
    )
    client = Client(settings_)
    client.handshake(frame_max=FRAME_MAX)
    client.open_channel(1)
    client.open_channel(2)
    client.received()
    recorded = None
    if compiled:
        assert client.conn._scan is not None
        recorded = Recorded(client.conn._scan)
        client.conn._scan = recorded
    return client, recorded


def python_accepts(raw: bytes) -> bool:
    try:
        validate_properties(raw)
    except FieldDecodeError:
        return False
    return True


# ------------------------------------------------------------------------------ directly


def test_a_read_of_publishes_and_acks_is_taken_whole(scan: FrameScan) -> None:
    client, recorded = opened(compiled=True)
    data = b"".join(
        [
            *(publish(1, b"m%d" % i, routing_key=f"k{i % 2}", properties=PLAIN) for i in range(20)),
            *(method(2, commands.Basic.Ack(delivery_tag=i)) for i in range(1, 11)),
            publish(2, b"x" * 9000, properties=PLAIN, frame_max=FRAME_MAX),  # three body frames
        ]
    )
    events = client.send(data)
    assert recorded is not None and recorded.taken == len(data)
    publishes = [e for e in events if isinstance(e, ev.PublishReceived)]
    assert [(e.channel, e.routing_key, e.body) for e in publishes[:2]] == [
        (1, "k0", b"m0"),
        (1, "k1", b"m1"),
    ]
    assert publishes[-1].body == b"x" * 9000 and publishes[-1].properties.delivery_mode == 2
    assert [e for e in events if isinstance(e, ev.AckReceived)] == [
        ev.AckReceived(2, tag, False) for tag in range(1, 11)
    ]


def test_it_stops_where_the_python_path_must_judge(scan: FrameScan) -> None:
    client, _ = opened(compiled=True)
    channels = client.conn._channels
    whole = publish(1, b"body", properties=PLAIN)
    cases: dict[str, bytes] = {
        "a message not whole yet": whole[:-1],
        "an unopened channel": publish(3, b"body", properties=PLAIN),
        "immediate": publish(1, b"b", properties=PLAIN, immediate=True),
        "a nack": method(1, commands.Basic.Nack(delivery_tag=1)),
        "another method": method(1, commands.Basic.Qos(prefetch_count=1)),
        "a heartbeat": heartbeat.Heartbeat.marshal(),
        "too large": publish(1, b"z" * (MAX_MESSAGE + 1), properties=PLAIN, frame_max=FRAME_MAX),
        "a bad frame end": whole[:-1] + b"\x00",
        "an ack of the wrong length": struct.pack(">BHI", 1, 1, 14)
        + method(1, commands.Basic.Ack(delivery_tag=1))[7:-1]
        + b"\x00\xce",
    }
    for why, data in cases.items():
        events: list[ev.Event] = []
        assert scan(data, 0, FRAME_MAX, channels, events) == 0, why
        assert events == [], why
    # Taken up to the first frame it does not take, and no further.
    events = []
    data = whole + cases["a nack"] + whole
    assert scan(data, 0, FRAME_MAX, channels, events) == len(whole)
    assert len(events) == 1


def test_a_malformed_property_list_is_left_to_python(scan: FrameScan) -> None:
    client, recorded = opened(compiled=True)
    good = publish(1, b"b", properties=commands.Basic.Properties(message_id="m", priority=3))
    header_at = 7 + struct.unpack_from(">I", good, 3)[0] + 1
    # The header frame's last octet of the property list dropped, its size kept: a short
    # string now runs into the frame-end octet's place.
    size = struct.unpack_from(">I", good, header_at + 3)[0]
    header = good[header_at : header_at + 7 + size + 1]
    broken = header[:3] + struct.pack(">I", size - 1) + header[7:-2] + b"\xce"
    bad = good[:header_at] + broken + good[header_at + len(header) :]
    client.send(bad)
    assert recorded is not None and recorded.taken == 0
    client.expect_connection_close(502)  # SYNTAX_ERROR, in the Python path's words


@settings(max_examples=500, deadline=None)
@given(message_properties(), st.data())
def test_the_property_check_is_the_python_paths(
    properties: MessageProperties, data: st.DataObject
) -> None:
    check = require_property_check()
    raw = encode_properties(properties)
    assert check(raw) and python_accepts(raw)
    # Cut short, one octet changed, or with octets added: both must agree.
    at = data.draw(st.integers(0, len(raw)))
    variants = [
        raw[:at],
        raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1 :],
        raw[:at] + data.draw(st.binary(min_size=1, max_size=8)) + raw[at:],
    ]
    for variant in variants:
        assert check(variant) == python_accepts(variant), variant


def nested(depth: int) -> bytes:
    """A headers table ``depth`` tables deep (fieldtable.MAX_DEPTH is 64)."""
    table = b"\x00\x00\x00\x00"
    for _ in range(depth):
        entry = b"\x01kF" + table
        table = struct.pack(">I", len(entry)) + entry
    return b"\x20\x00" + table


EDGES = {
    "no flags": b"\x00\x00",
    "one octet": b"\x00",
    "a continuation word, empty": b"\x00\x01\x00\x00",
    "two continuation words": b"\x00\x01\x00\x01\x00\x00",
    "a flag in a continuation word": b"\x00\x01\x00\x02",
    "a high flag in a continuation word": b"\x00\x01\x80\x00",
    "a continuation word cut short": b"\x00\x01\x00",
    "bit 1 of the first word (no property)": b"\x00\x02",
    "delivery mode, its octet missing": b"\x10\x00",
    "a timestamp, 7 of its octets": b"\x00\x40" + b"\x00" * 7,
    "a short string running past the end": b"\x80\x00\x05abc",
    "trailing octets": b"\x80\x00\x01a\x00",
    "an unknown field type": b"\x20\x00\x00\x00\x00\x03\x01kZ",
    "a decimal": b"\x20\x00\x00\x00\x00\x08\x01kD\x02\x00\x00\x00\x05",
    "a void": b"\x20\x00\x00\x00\x00\x03\x01kV",
    "an array of arrays": b"\x20\x00\x00\x00\x00\x0c\x01kA\x00\x00\x00\x05A\x00\x00\x00\x00",
    "a key running past its table": b"\x20\x00\x00\x00\x00\x02\x05k",
    "64 tables deep": nested(64),
    "65 tables deep": nested(65),
    "66 tables deep": nested(66),
}


@pytest.mark.parametrize("raw", EDGES.values(), ids=EDGES.keys())
def test_the_property_check_agrees_at_the_edges(raw: bytes) -> None:
    assert require_property_check()(raw) == python_accepts(raw)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=96))
def test_the_property_check_agrees_on_any_bytes(raw: bytes) -> None:
    assert require_property_check()(raw) == python_accepts(raw)


def test_a_body_frame_is_taken_only_for_its_own_channel(scan: FrameScan) -> None:
    client, recorded = opened(compiled=True)
    ours = frames_of(publish(1, b"a" * 10, properties=PLAIN))
    theirs = frames_of(publish(2, b"b" * 10, properties=PLAIN))
    # Channel 2's method and header, channel 1's method and header, then channel 2's body
    # (as long as channel 1's would be) and channel 1's.
    events = client.send(b"".join([*theirs[:2], *ours[:2], theirs[2], ours[2]]))
    assert [(e.channel, e.body) for e in events if isinstance(e, ev.PublishReceived)] == [
        (2, b"b" * 10),
        (1, b"a" * 10),
    ]
    assert recorded is not None and recorded.taken == 0


def test_a_channel_closing_or_in_a_message_is_left_to_python(scan: FrameScan) -> None:
    client, recorded = opened(compiled=True)
    first = publish(1, b"abc", properties=PLAIN)
    method_end = 7 + struct.unpack_from(">I", first, 3)[0] + 1
    client.send(first[:method_end])  # channel 1 now waits for its content header
    ack = method(1, commands.Basic.Ack(delivery_tag=1))
    client.send(ack)  # 505: a method in the middle of a message
    assert recorded is not None and recorded.taken == 0
    client.expect_connection_close(505)


# -------------------------------------------------------------------- against the Python path


# Empty, small, one whole body frame, just over one, three.
SIZES = [0, 1, 100, FRAME_MAX - 8, FRAME_MAX, 9000]


def rarely(draw: Callable[[Any], Any]) -> bool:
    """One draw in 30: what ends the connection (the rest of the stream is then not read)."""
    return bool(draw(st.integers(0, 29)) == 0)


def publish_action(draw: Callable[[Any], Any], size: int | None = None) -> bytes:
    channel = 3 if rarely(draw) else draw(st.sampled_from([1, 2]))
    if size is None:
        size = MAX_MESSAGE + 5 if rarely(draw) else draw(st.sampled_from(SIZES))
    properties = draw(st.sampled_from([PLAIN, PLAIN, RICH, None, "unique"]))
    if properties == "unique":
        # As most applications publish: an id and a timestamp of its own per message.
        properties = commands.Basic.Properties(
            message_id=f"id-{draw(st.integers(0, 10**9))}",
            timestamp=datetime.datetime.fromtimestamp(draw(st.integers(0, 2**31)), datetime.UTC),
            headers={"task": "t", "retries": draw(st.integers(0, 5))},
        )
    data = publish(
        channel,
        bytes([size % 251]) * size,
        exchange=draw(st.sampled_from(["", "amq.direct", "ex"])),
        routing_key=draw(st.sampled_from(["a", "b", "ключ"])),
        properties=properties,
        frame_max=FRAME_MAX,
        mandatory=draw(st.booleans()),
        immediate=rarely(draw),
    )
    if rarely(draw):
        # Not UTF-8: the exchange's first octet replaced by 0xff.
        at = 7 + 4 + 2 + 1
        if data[at - 1]:
            data = data[:at] + b"\xff" + data[at + 1 :]
    return data


def frames_of(data: bytes) -> list[bytes]:
    frames = []
    while data:
        end = 7 + struct.unpack_from(">I", data, 3)[0] + 1
        frames.append(data[:end])
        data = data[end:]
    return frames


def weave(first: bytes, second: bytes, order: list[bool]) -> bytes:
    """The frames of two publishes merged, each keeping its own order (``order``: take the
    next from ``first``?). §4.2.6 allows that across channels; on one channel it is 505."""
    left, right = frames_of(first), frames_of(second)
    merged = []
    for take_left in order:
        if take_left and left:
            merged.append(left.pop(0))
        elif right:
            merged.append(right.pop(0))
    return b"".join([*merged, *left, *right])


@st.composite
def actions(draw: Callable[[Any], Any]) -> bytes:
    kind = draw(st.integers(0, 11))
    channel = 3 if rarely(draw) else draw(st.sampled_from([1, 2]))
    tag = draw(st.integers(0, 30))
    if kind <= 4:
        return publish_action(draw)
    if kind <= 6:
        return method(channel, commands.Basic.Ack(delivery_tag=tag, multiple=draw(st.booleans())))
    if kind == 7:
        # Bodies of one size, so that a body frame of the wrong channel would fit.
        size = draw(st.sampled_from(SIZES))
        order = draw(st.lists(st.booleans(), min_size=4, max_size=8))
        return weave(publish_action(draw, size), publish_action(draw, size), order)
    if kind == 8:
        return draw(
            st.sampled_from(
                [
                    method(channel, commands.Basic.Nack(delivery_tag=tag)),
                    method(channel, commands.Basic.Reject(delivery_tag=tag)),
                    heartbeat.Heartbeat.marshal(),
                ]
            )
        )
    if kind == 9 and rarely(draw):
        # Channel life: a close of ours answered, the client's own close, channel 3 opened.
        return draw(
            st.sampled_from(
                [
                    method(channel, commands.Channel.CloseOk()),
                    method(
                        channel,
                        commands.Channel.Close(
                            reply_code=200, reply_text="bye", class_id=0, method_id=0
                        ),
                    )
                    + method(channel, commands.Channel.Open()),
                    method(3, commands.Channel.Open()),
                ]
            )
        )
    if kind == 10 and rarely(draw):
        # A truncated or corrupted frame: only the Python path ever judges those.
        frame = method(channel, commands.Basic.Ack(delivery_tag=tag))
        at = draw(st.integers(0, len(frame) - 1))
        return frame[:at] + bytes([frame[at] ^ 0xFF]) + frame[at + 1 :]
    return b""


def transcript(client: Client, chunks: list[bytes]) -> list[tuple[list[object], bytes, str]]:
    steps = []
    for chunk in chunks:
        events = client.send(chunk)
        for event in events:
            if isinstance(event, ev.ChannelClosed) and event.by_client:
                client.conn.accept_channel_close(event.channel)  # as the shell does
        shown = [
            ("CommandReceived", e.channel, e.command) if isinstance(e, ev.CommandReceived) else e
            for e in events
        ]
        steps.append((shown, client.conn.data_to_send(), client.conn.state.value))
    return steps


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(actions(), min_size=1, max_size=25), st.data())
def test_the_scan_changes_no_event_and_no_byte(stream: list[bytes], data: st.DataObject) -> None:
    require_frame_scan()
    whole = b"".join(stream)
    cuts = data.draw(st.lists(st.integers(1, max(1, len(whole) - 1)), max_size=8))
    points = [0, *sorted(set(cuts)), len(whole)]
    chunks = [whole[a:b] for a, b in itertools.pairwise(points) if b > a]
    compiled, _ = opened(compiled=True)
    python, _ = opened(compiled=False)
    assert transcript(compiled, chunks) == transcript(python, chunks)
