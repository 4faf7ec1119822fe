"""However the client's bytes are cut, the core produces the same events and the same bytes."""

from __future__ import annotations

import itertools
import struct
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from gateway.amqp import events as ev
from gateway.amqp.connection import ConnectionSettings, ServerConnection
from tests.support.client_session import HAPPY
from tests.support.core_client import (
    PROTOCOL_HEADER,
    method,
    open_,
    publish,
    start_ok,
    tune_ok,
)

# Every test here runs with the compiled frame scan, then with the Python path alone.
pytestmark = pytest.mark.usefixtures("both_frame_paths")

SETTINGS = ConnectionSettings(frame_max=4096, max_message_size=20_000)


BROKEN = b"".join(
    [
        PROTOCOL_HEADER,
        start_ok(),
        tune_ok(frame_max=4096),
        open_("/"),
        method(1, commands.Channel.Open()),
        publish(1, b"x" * 5000, frame_max=4096),
        method(1, commands.Channel.Open()),  # 504: the rest is ignored but Close-Ok
        publish(1, b"ignored"),
        method(0, commands.Connection.CloseOk()),
        b"trailing garbage that is never read",
    ]
)

OUT_OF_SYNC = b"".join(
    [
        PROTOCOL_HEADER,
        start_ok(),
        tune_ok(frame_max=4096),
        open_("/"),
        method(1, commands.Channel.Open()),
        struct.pack(">BHI", 1, 1, 5) + b"\x00\x14\x00\x0a\x00\x00",  # bad frame end
        method(1, commands.Channel.Open()),
    ]
)


def comparable(event: ev.Event) -> object:
    # Commands compare by value; the tuple names the event for the kinds check below.
    if isinstance(event, ev.CommandReceived):
        return ("CommandReceived", event.channel, event.command)
    return event


def run(chunks: list[bytes]) -> tuple[list[object], bytes]:
    conn = ServerConnection(SETTINGS, 0.0)
    events: list[ev.Event] = []
    output: list[bytes] = []

    def handle(batch: list[ev.Event]) -> None:
        queue = deque(batch)
        while queue:
            event = queue.popleft()
            events.append(event)
            if isinstance(event, ev.LoginRequested):
                conn.accept_login("guest")
                queue.extend(conn.take_events())
            elif isinstance(event, ev.VhostRequested):
                conn.accept_vhost()
                queue.extend(conn.take_events())

    for chunk in chunks:
        handle(conn.receive_data(chunk, 0.0))
        output.append(conn.data_to_send())
    return [comparable(e) for e in events], b"".join(output)


def split_at(data: bytes, offsets: list[int]) -> list[bytes]:
    cuts = [0, *sorted(set(offsets)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(cuts) if b > a]


TRANSCRIPTS = {"happy": HAPPY, "broken": BROKEN, "out_of_sync": OUT_OF_SYNC}
EXPECTED = {name: run([data]) for name, data in TRANSCRIPTS.items()}


def test_the_happy_transcript_does_what_it_says() -> None:
    events, _output = EXPECTED["happy"]
    kinds = [e[0] if isinstance(e, tuple) else type(e).__name__ for e in events]
    assert kinds == [
        "LoginRequested",
        "VhostRequested",
        "ConnectionOpened",
        "ChannelOpened",
        "ChannelOpened",
        "CommandReceived",
        "PublishReceived",
        "PublishReceived",
        "PublishReceived",
        "PublishReceived",
        "PublishReceived",
        "PublishReceived",
        "AckReceived",
        "NackReceived",
        "RejectReceived",
        "ChannelErrored",
        "ChannelClosed",
        "ChannelClosed",
        "ConnectionClosed",
    ]
    routed = [(e.channel, e.routing_key) for e in events if isinstance(e, ev.PublishReceived)]
    assert routed[-2:] == [(2, "i2"), (1, "i1")]  # the interleaved pair, channel 2's first
    assert EXPECTED["broken"][0][-2:] == [
        ev.ConnectionErrored(
            EXPECTED["broken"][0][-2].error  # type: ignore[union-attr]
        ),
        ev.ConnectionClosed(504, "CHANNEL_ERROR - second 'channel.open' seen", False),
    ]
    assert isinstance(EXPECTED["out_of_sync"][0][-1], ev.ConnectionTerminated)


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_one_byte_at_a_time(name: str) -> None:
    data = TRANSCRIPTS[name]
    assert run([data[i : i + 1] for i in range(len(data))]) == EXPECTED[name]


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_split_in_two_at_every_offset(name: str) -> None:
    data = TRANSCRIPTS[name]
    # The happy transcript is ~50 kB: every offset in its first 2 kB (the handshake and all
    # small frames), then every 7th offset, which still lands inside every frame header.
    offsets = [*range(1, min(len(data), 2048)), *range(2048, len(data), 7)]
    for offset in offsets:
        assert run([data[:offset], data[offset:]]) == EXPECTED[name], offset


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_random_cuts(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(TRANSCRIPTS)))
    transcript = TRANSCRIPTS[name]
    offsets = data.draw(st.lists(st.integers(1, len(transcript) - 1), max_size=40))
    assert run(split_at(transcript, offsets)) == EXPECTED[name]
