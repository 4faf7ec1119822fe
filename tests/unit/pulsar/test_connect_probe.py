"""The hand-written CONNECT and the broker's answers to it (captured from Pulsar 4.0.8)."""

from __future__ import annotations

import pytest

from gateway.pulsar.connect_probe import ConnectAnswer, connect_frame, parse_answer

# What a Pulsar 4.0.8 broker answered to connect_frame("token", <good / bad token>).
CONNECTED = bytes.fromhex(
    "0000002b0000002708031a230a1250756c73617220536572766572342e302e381015188080c0022206200128013001"
)
AUTH_ERROR = bytes.fromhex(
    "0000002d00000029080e722508ffffffffffffffffff0110031a164661696c656420746f2061757468656e"
    "746963617465"
)


def test_connect_frame() -> None:
    frame = connect_frame("token", b"jwt")
    total, command = int.from_bytes(frame[:4], "big"), int.from_bytes(frame[4:8], "big")
    assert (total, command) == (len(frame) - 4, len(frame) - 8)
    assert frame[8:10] == b"\x08\x02"  # BaseCommand.type = CONNECT
    assert b"\x1a\x03jwt" in frame  # auth_data
    assert b"\x2a\x05token" in frame  # auth_method_name
    anonymous = connect_frame(None, b"")
    assert b"token" not in anonymous and b"\x1a" not in anonymous[10:]


def test_broker_answers() -> None:
    assert parse_answer(CONNECTED[4:]) == ConnectAnswer(connected=True)
    assert parse_answer(AUTH_ERROR[4:]) == ConnectAnswer(
        connected=False, error="AuthenticationError", message="Failed to authenticate"
    )
    with pytest.raises(ValueError, match="unexpected answer"):
        parse_answer(bytes.fromhex("00000002") + b"\x08\x13")  # PING
    with pytest.raises(ValueError):
        parse_answer(CONNECTED[4:-3])  # truncated
