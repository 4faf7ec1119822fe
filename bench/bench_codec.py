"""Micro-benchmark of the per-message protocol work: fast paths against pamqp.

    .venv/bin/python bench/bench_codec.py

Prints µs per message (best of several runs, so background noise only ever makes numbers
worse) and the speed-up. "core" rows are the whole sans-IO path the gateway runs per message:
framing, state checks, the event object — what a publish/deliver/ack really costs.
"""

from __future__ import annotations

import datetime
import struct
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

from pamqp import body, commands, frame, header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.amqp import events as ev
from gateway.amqp.connection import ConnectionSettings, ServerConnection
from gateway.amqp.fastpath import (
    decode_ack,
    decode_content_header,
    decode_publish,
    encode_deliver,
)
from gateway.amqp.properties import decode_properties, validate_properties

FRAME_MAX = 131072
BODY = b"x" * 1024
PROPS = commands.Basic.Properties(
    content_type="application/json",
    delivery_mode=2,
    headers={"x-trace-id": "4bf92f3577b34da6", "attempt": 1},
    message_id="0d4b6b3e-8a45-4f3c-9c55-7c0d6b1d9c11",
    timestamp=datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
)
PUBLISH = commands.Basic.Publish(exchange="orders", routing_key="order.created.eu")
PUBLISH_FRAMES = (
    frame.marshal(PUBLISH, 1)
    + frame.marshal(header.ContentHeader(0, len(BODY), PROPS), 1)
    + frame.marshal(body.ContentBody(BODY), 1)
)
PUBLISH_PAYLOAD = struct.pack(">I", PUBLISH.index) + PUBLISH.marshal()
HEADER_PAYLOAD = header.ContentHeader(0, len(BODY), PROPS).marshal()
RAW_PROPS = PROPS.marshal()
ACK = commands.Basic.Ack(delivery_tag=123456, multiple=False)
ACK_FRAME = frame.marshal(ACK, 1)
ACK_PAYLOAD = ACK_FRAME[7:-1]


def opened_connection(*, compiled: bool = True) -> ServerConnection:
    """Open, channel 1 open; ``compiled``: reads go to the compiled frame scan first (when
    built: gateway/amqp/compiled.py)."""
    conn = ServerConnection(ConnectionSettings(frame_max=FRAME_MAX, compiled=compiled), 0.0)
    conn.receive_data(b"AMQP\x00\x00\x09\x01", 0.0)
    conn.receive_data(
        frame.marshal(
            commands.Connection.StartOk(client_properties={}, mechanism="PLAIN", response="\0u\0p"),
            0,
        ),
        0.0,
    )
    conn.accept_login("u")
    conn.receive_data(
        frame.marshal(
            commands.Connection.TuneOk(channel_max=16, frame_max=FRAME_MAX, heartbeat=0), 0
        )
        + frame.marshal(commands.Connection.Open(virtual_host="/"), 0),
        0.0,
    )
    conn.accept_vhost()
    conn.receive_data(frame.marshal(commands.Channel.Open(), 1), 0.0)
    conn.take_events()
    conn.data_to_send()
    return conn


# ------------------------------------------------------------------------------ publish


def ours_publish() -> None:
    decode_publish(PUBLISH_PAYLOAD)
    _c, _w, _size, raw = decode_content_header(HEADER_PAYLOAD)
    validate_properties(raw)


def pamqp_publish() -> None:
    data = PUBLISH_FRAMES
    for _ in range(3):
        consumed, _channel, _value = frame.unmarshal(data)
        data = data[consumed:]


CORE = opened_connection()


def core_publish() -> None:
    [event] = CORE.receive_data(PUBLISH_FRAMES, 0.0)
    assert isinstance(event, ev.PublishReceived)


def lazy_properties() -> None:
    decode_properties(RAW_PROPS)


# ------------------------------------------------------------------------------ deliver

DELIVER = commands.Basic.Deliver(
    consumer_tag="ctag-1", delivery_tag=42, exchange="orders", routing_key="order.created.eu"
)


def ours_deliver() -> None:
    encode_deliver(1, "ctag-1", 42, False, "orders", "order.created.eu", RAW_PROPS, BODY, FRAME_MAX)


def pamqp_deliver() -> None:
    b"".join(
        (
            frame.marshal(
                commands.Basic.Deliver(
                    consumer_tag="ctag-1",
                    delivery_tag=42,
                    exchange="orders",
                    routing_key="order.created.eu",
                ),
                1,
            ),
            frame.marshal(header.ContentHeader(0, len(BODY), PROPS), 1),
            frame.marshal(body.ContentBody(BODY), 1),
        )
    )


def core_deliver() -> None:
    CORE.send_deliver(1, "ctag-1", 42, False, "orders", "order.created.eu", RAW_PROPS, BODY)
    CORE.data_to_send()


# ---------------------------------------------------------------------------------- ack


def ours_ack() -> None:
    decode_ack(ACK_PAYLOAD)


def pamqp_ack() -> None:
    frame.unmarshal(ACK_FRAME)


def core_ack() -> None:
    CORE.receive_data(ACK_FRAME, 0.0)


# A read as a busy publisher's or consumer's socket hands it over: tens of messages at once.
READ_MESSAGES = 50
PUBLISH_READ = PUBLISH_FRAMES * READ_MESSAGES
# As most applications publish: a message id and a timestamp of each message's own.
UNIQUE_READ = b"".join(
    frame.marshal(PUBLISH, 1)
    + frame.marshal(
        header.ContentHeader(
            0,
            len(BODY),
            commands.Basic.Properties(
                content_type="application/json",
                delivery_mode=2,
                headers={"x-trace-id": f"{n:016x}", "attempt": 1},
                message_id=f"0d4b6b3e-8a45-4f3c-9c55-{n:012d}",
                timestamp=datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
                + datetime.timedelta(seconds=n),
            ),
        ),
        1,
    )
    + frame.marshal(body.ContentBody(BODY), 1)
    for n in range(READ_MESSAGES)
)
ACK_READ = b"".join(
    frame.marshal(commands.Basic.Ack(delivery_tag=tag), 1) for tag in range(1, READ_MESSAGES + 1)
)
CORE_PYTHON = opened_connection(compiled=False)


def per_message(conn: ServerConnection, read: bytes) -> Callable[[], None]:
    def run() -> None:
        events = conn.receive_data(read, 0.0)
        assert len(events) == READ_MESSAGES

    return run


# -------------------------------------------------------------------------------- driver


def per_call_us(func: Callable[[], None], repeat: int = 7, min_time: float = 0.2) -> float:
    timer = timeit.Timer(func)
    number, _elapsed = timer.autorange()
    number = max(number, int(number * min_time / 0.2))
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


ROWS: list[tuple[str, Callable[[], None], Callable[[], None] | None]] = [
    ("publish decode (method+header+props check)", ours_publish, pamqp_publish),
    ("deliver encode (method+header+body frames)", ours_deliver, pamqp_deliver),
    ("ack decode", ours_ack, pamqp_ack),
    ("core: receive_data(publish, 3 frames)", core_publish, None),
    ("core: send_deliver + data_to_send", core_deliver, None),
    ("core: receive_data(ack frame)", core_ack, None),
    ("lazy properties decode (typed)", lazy_properties, None),
]
# (name, compiled scan, Python path): µs per message of one read of READ_MESSAGES.
READ_ROWS = [
    (f"core: a read of {READ_MESSAGES} publishes", PUBLISH_READ),
    ("core: ... each with an id of its own", UNIQUE_READ),
    (f"core: a read of {READ_MESSAGES} acks", ACK_READ),
]


def main() -> None:
    print(f"Python {sys.version.split()[0]}, body {len(BODY)} B, properties {len(RAW_PROPS)} B")
    print(f"{'operation':<46} {'ours µs':>9} {'pamqp µs':>9} {'speed-up':>9}")
    print("-" * 76)
    for name, ours, theirs in ROWS:
        ours_us = per_call_us(ours)
        if theirs is None:
            print(f"{name:<46} {ours_us:>9.2f} {'':>9} {'':>9}")
            continue
        theirs_us = per_call_us(theirs)
        print(f"{name:<46} {ours_us:>9.2f} {theirs_us:>9.2f} {theirs_us / ours_us:>8.1f}x")
    scan = "built" if CORE._scan is not None else "NOT built: both columns are the Python path"
    print(f"\nper message of a read ({'compiled frame scan ' + scan})")
    print(f"{'operation':<46} {'scan µs':>9} {'Python µs':>9} {'speed-up':>9}")
    print("-" * 76)
    for name, read in READ_ROWS:
        scan_us = per_call_us(per_message(CORE, read)) / READ_MESSAGES
        python_us = per_call_us(per_message(CORE_PYTHON, read)) / READ_MESSAGES
        print(f"{name:<46} {scan_us:>9.2f} {python_us:>9.2f} {python_us / scan_us:>8.1f}x")


if __name__ == "__main__":
    main()
