"""One well-behaved client session as bytes, through every path of the connection core.

The opening handshake, two channels, publishes of every shape (split bodies, an empty body,
one body frame, frames of two channels interleaved), settlements, Channel.Flow, a heartbeat,
a message too large for the core's limit, and the closes: the splitting tests cut it at every
point, the fuzzer mutates it.
"""

from __future__ import annotations

import struct

from pamqp import commands

from tests.support.core_client import (
    PROTOCOL_HEADER,
    heartbeat,
    method,
    open_,
    publish,
    start_ok,
    tune_ok,
)


def interleaved() -> bytes:
    """Channel 1's publish with channel 2's whole publish between its method and content
    (frames of different channels may interleave, §4.2.6)."""
    first = publish(1, b"interleaved", routing_key="i1")
    method_end = 7 + struct.unpack_from(">I", first, 3)[0] + 1
    return first[:method_end] + publish(2, b"between", routing_key="i2") + first[method_end:]


HAPPY = b"".join(
    [
        PROTOCOL_HEADER,
        start_ok(),
        tune_ok(frame_max=4096),
        open_("/"),
        method(1, commands.Channel.Open()),
        method(2, commands.Channel.Open()),
        method(1, commands.Queue.Declare(queue="q", arguments={"x-max-length": 10})),
        publish(
            1,
            bytes(range(256)) * 40,
            properties=commands.Basic.Properties(
                content_type="text/plain", headers={"k": "v", "n": [1, 2.5]}, priority=4
            ),
            frame_max=4096,
        ),
        publish(2, b"", routing_key="empty", mandatory=True),
        # One body frame: the header and body are taken right after the method when the same
        # read holds them (connection.py), else frame by frame; the events must not differ.
        publish(2, b"one frame", routing_key="one-frame"),
        publish(1, b"x" * 100, properties=commands.Basic.Properties(delivery_mode=2)),
        interleaved(),
        method(1, commands.Basic.Ack(delivery_tag=1)),
        method(1, commands.Basic.Nack(delivery_tag=2, requeue=False)),
        method(1, commands.Basic.Reject(delivery_tag=3, requeue=True)),
        method(2, commands.Channel.Flow(active=True)),  # Flow-Ok, no event (RabbitMQ 4)
        heartbeat.Heartbeat.marshal(),
        publish(1, b"z" * 30_000, frame_max=4096),  # too large: 406 on channel 1
        method(1, commands.Channel.CloseOk()),
        method(2, commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)),
        method(
            0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        ),
    ]
)
