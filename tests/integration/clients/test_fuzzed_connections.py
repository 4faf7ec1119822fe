"""A thousand fuzzed connections against a real gateway on loopback (issue 17, item 7).

The inputs are the core fuzzer's (tests/support/core_fuzzer.py), sent over TCP in the pieces
the input says, then the client half-closes. The gateway (its real server, shell and the
in-memory backend, on a socket) must answer each one correctly and hang up, stay up, and serve
a normal pika client afterwards. Where the input never reached the channel logic, the bare core
predicts the answer exactly: the gateway must close with the same reply code.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import Counter
from collections.abc import Iterator

import pika
import pytest

from gateway.amqp.framing import PROTOCOL_HEADER
from gateway.backend.memory import MemoryBackend
from gateway.server.address import Listener
from gateway.server.settings import ServerSettings
from tests.support.core_fuzzer import SETTINGS, check_gateway_output, make_case, run_case
from tests.support.gateway_thread import GatewayInThread

CONNECTIONS = 1_000
FIRST_SEED = 20_000_000
ANSWER_DEADLINE = 15.0


@pytest.fixture
def gateway() -> Iterator[GatewayInThread]:
    settings = ServerSettings(listeners=(Listener("amqp", "127.0.0.1", 0),), connection=SETTINGS)
    with GatewayInThread(settings, backend=MemoryBackend()) as running:
        yield running


def exchange(port: int, pieces: list[bytes]) -> tuple[bytes, bool]:
    """Send ``pieces``, half-close, and read until the gateway hangs up; also say whether it
    hung up with a reset (TCP resets a connection closed with client data still unread, and
    the reset may discard some of the answer: such connections are only counted)."""
    reset = False
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_DEADLINE) as sock:
        try:
            for piece in pieces:
                if piece:
                    sock.sendall(piece)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            reset = True  # the gateway already hung up on a bad header or a framing error
        deadline = time.monotonic() + ANSWER_DEADLINE
        received = bytearray()
        while True:
            assert time.monotonic() < deadline, "the gateway did not hang up"
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                reset = True
                break
            if not chunk:
                break
            received += chunk
    return bytes(received), reset


def test_a_thousand_fuzzed_connections(
    gateway: GatewayInThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    kinds: Counter[str] = Counter()
    predicted_exactly = 0
    resets = 0
    for seed in range(FIRST_SEED, FIRST_SEED + CONNECTIONS):
        case = make_case(seed)
        expected = run_case(case, like_a_gateway=True)
        ends = (*case.cuts, len(case.data))
        pieces = [case.data[a:b] for a, b in zip((0, *case.cuts), ends, strict=True)]
        received, reset = exchange(gateway.port, pieces)
        where = f"input {seed}: {case.describe()}"
        if reset:
            resets += 1
            assert PROTOCOL_HEADER.startswith(received[:8]) or received[:1] == b"\x01", where
        elif expected.kind.startswith("bad protocol header"):
            assert received == PROTOCOL_HEADER, where
        else:
            if len(case.data) >= 8:
                assert received, f"no answer at all; {where}"
            code = check_gateway_output(received, SETTINGS)  # raises on a broken promise
            if expected.close_code is not None and not expected.reached_shell:
                assert code == expected.close_code, f"closed with {code}; {where}"
                predicted_exactly += 1
        kinds[expected.kind] += 1
    print(f"\n{predicted_exactly} of {CONNECTIONS} closes predicted exactly by the core")
    print(f"{resets} connections ended in a TCP reset (closed with client data unread)")
    for kind, count in kinds.most_common(15):
        print(f"{count:>6}  {kind}")
    assert predicted_exactly > CONNECTIONS // 4

    # Still up, and a normal client is served.
    connection = pika.BlockingConnection(
        pika.ConnectionParameters(host="127.0.0.1", port=gateway.port, connection_attempts=1)
    )
    channel = connection.channel()
    queue = channel.queue_declare("after-the-fuzz").method.queue
    channel.basic_publish("", queue, b"still serving")
    deadline = time.monotonic() + 10
    while (got := channel.basic_get(queue, auto_ack=True))[0] is None:
        assert time.monotonic() < deadline, "the message never came back"
    assert got[2] == b"still serving"
    connection.close()
    # No traceback or error logged for any of it: bad input is the client's problem.
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
