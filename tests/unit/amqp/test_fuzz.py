"""Fuzzing: random and mutated input ends in events or an AMQP error, never an exception."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.amqp import events as ev
from gateway.amqp.codec import SPECS, decode_method
from gateway.amqp.connection import ConnectionSettings, ConnectionState
from gateway.amqp.errors import AMQPError
from gateway.amqp.fastpath import (
    decode_ack,
    decode_content_header,
    decode_nack,
    decode_publish,
    decode_reject,
)
from gateway.amqp.fieldtable import FieldDecodeError, decode_table, skip_table
from gateway.amqp.properties import decode_properties, validate_properties
from tests.support.client_session import HAPPY
from tests.support.core_client import Client, commands, method, publish

# Every test here runs with the compiled frame scan, then with the Python path alone.
pytestmark = pytest.mark.usefixtures("both_frame_paths")

METHOD_IDS = sorted(SPECS)
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def opened() -> Client:
    client = Client(ConnectionSettings(frame_max=4096, max_message_size=10_000))
    client.handshake(frame_max=4096)
    client.open_channel(1)
    client.received()
    return client


def check_outcome(client: Client, events: list[ev.Event]) -> None:
    """Whatever happened is consistent: a hard error means a Close was queued."""
    output = client.conn.data_to_send()
    if any(isinstance(e, ev.ConnectionErrored) for e in events):
        assert client.conn.state in (ConnectionState.CLOSING, ConnectionState.CLOSED)
        assert b"\x00\x0a\x00\x32" in output  # a Connection.Close went out
    if any(isinstance(e, ev.ChannelErrored) for e in events):
        assert b"\x00\x14\x00\x28" in output  # a Channel.Close went out


frame_types = st.sampled_from([1, 2, 3, 8]) | st.integers(0, 255)
channels = st.sampled_from([0, 1, 2, 300]) | st.integers(0, 65535)


@st.composite
def method_payloads(draw: st.DrawFn) -> bytes:
    index = draw(st.sampled_from(METHOD_IDS) | st.integers(0, 2**32 - 1))
    return struct.pack(">I", index) + draw(st.binary(max_size=64))


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    frame_type = draw(frame_types)
    if frame_type == 1:
        payload = draw(method_payloads())
    elif frame_type == 2:
        payload = struct.pack(">HHQ", 60, 0, draw(st.integers(0, 20_000))) + draw(
            st.binary(max_size=40)
        )
    else:
        payload = draw(st.binary(max_size=64))
    size = draw(st.just(len(payload)) | st.integers(0, 2**32 - 1))
    end = draw(st.just(b"\xce") | st.binary(min_size=1, max_size=1))
    return struct.pack(">BHI", frame_type, draw(channels), size) + payload + end


@FUZZ
@given(st.lists(frames(), max_size=8))
def test_structured_random_frames(stream: list[bytes]) -> None:
    client = opened()
    events = client.send(b"".join(stream))
    check_outcome(client, events)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_after_the_handshake(data: bytes) -> None:
    client = opened()
    check_outcome(client, client.send(data))


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_from_the_start(data: bytes) -> None:
    client = Client()
    client.send(b"AMQP\x00\x00\x09\x01" + data)
    client.conn.data_to_send()


MUTATION_BASE = HAPPY[8:]  # everything after the protocol header


@FUZZ
@given(
    st.lists(
        st.tuples(st.integers(0, len(MUTATION_BASE) - 1), st.integers(0, 255)),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, len(MUTATION_BASE)),
)
def test_mutated_transcript(flips: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(MUTATION_BASE)
    for position, value in flips:
        data[position] = value
    client = Client(ConnectionSettings(frame_max=4096, max_message_size=20_000))
    events = client.send(b"AMQP\x00\x00\x09\x01")
    for chunk in (bytes(data[:cut]), bytes(data[cut:])):
        events = client.send(chunk)
        for event in events:
            if isinstance(event, ev.LoginRequested):
                client.conn.accept_login("guest")
            elif isinstance(event, ev.VhostRequested):
                client.conn.accept_vhost()
        events += client.conn.take_events()
        check_outcome(client, events)


@FUZZ
@given(st.integers(1, 20), st.binary(max_size=40), st.data())
def test_mutated_publish(channel: int, body: bytes, data: st.DataObject) -> None:
    client = opened()
    frames_ = bytearray(
        publish(1, body, properties=commands.Basic.Properties(headers={"a": [1, "x"]}))
        + method(1, commands.Basic.Ack(delivery_tag=channel))
    )
    position = data.draw(st.integers(0, len(frames_) - 1))
    frames_[position] = data.draw(st.integers(0, 255))
    check_outcome(client, client.send(bytes(frames_)))


# ----------------------------------------------------------------------- the decoders alone


@FUZZ
@given(method_payloads())
def test_decode_method_raises_only_amqp_errors(payload: bytes) -> None:
    with contextlib.suppress(AMQPError):
        decode_method(payload)


@FUZZ
@given(st.binary(max_size=64))
def test_fast_decoders_raise_only_amqp_errors(tail: bytes) -> None:
    for decoder, index in (
        (decode_publish, 0x003C0028),
        (decode_ack, 0x003C0050),
        (decode_nack, 0x003C0078),
        (decode_reject, 0x003C005A),
    ):
        with contextlib.suppress(AMQPError):
            decoder(struct.pack(">I", index) + tail)
    with contextlib.suppress(AMQPError):
        decode_content_header(tail)


@FUZZ
@given(st.binary(max_size=128))
def test_validated_properties_always_decode(raw: bytes) -> None:
    try:
        validate_properties(raw)
    except FieldDecodeError:
        try:
            decode_properties(raw)
        except FieldDecodeError:
            return
        raise AssertionError("validate refused what decode accepts") from None
    decode_properties(raw)  # must not raise


@FUZZ
@given(st.binary(max_size=128))
def test_skip_table_agrees_with_decode_table(raw: bytes) -> None:
    try:
        stop = skip_table(raw, 0, len(raw))
    except FieldDecodeError:
        skipped = None
    else:
        skipped = stop
    try:
        _table, decoded = decode_table(raw)
    except FieldDecodeError:
        decoded = None
    assert skipped == decoded


def test_deeply_nested_tables_are_refused_not_a_recursion_error() -> None:
    inner = b""
    for _ in range(5000):
        inner = b"\x01aF" + struct.pack(">I", len(inner)) + inner
    table = struct.pack(">I", len(inner)) + inner
    for check in (lambda: decode_table(table), lambda: skip_table(table, 0, len(table))):
        try:
            check()
        except FieldDecodeError as error:
            assert "nested too deeply" in str(error)
        else:
            raise AssertionError("accepted 5000 levels of nesting")
