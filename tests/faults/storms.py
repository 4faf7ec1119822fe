"""Issue 17 item 6, connection storms: the scenarios, shared by tests/faults and bench/faults.py.

Connections are opened by hand (``open_amqp``: the whole handshake, heartbeats off), which is
cheap enough for thousands from one process; a normal pika client runs publish + get round trips
in the meantime (``served_during``)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tests.faults.gateway_process import (
    PROTOCOL_HEADER,
    LimitedGatewayProcess,
    close_amqp,
    open_amqp,
)
from tests.support.clients import connect, unique

T = TypeVar("T")
KB = 1024


@dataclass
class Served:
    """The normal client's round trips while a storm went on."""

    round_trips: int
    slowest: float


def served_during(port: int, storm: Callable[[], T]) -> tuple[T, Served]:
    """Run ``storm`` in a thread while a pika client publishes and gets its message back, over
    and over; any failure of the client raises here. At least one round trip starts after the
    storm did."""
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(storm())
        except BaseException as error:
            failure.append(error)

    connection = connect(port)
    try:
        channel = connection.channel()
        queue = unique("served")
        channel.queue_declare(queue)
        thread = threading.Thread(target=run, daemon=True)
        round_trips, slowest = 0, 0.0
        thread.start()
        while thread.is_alive() or round_trips == 0:
            started = time.monotonic()
            body = f"round trip {round_trips}".encode()
            channel.basic_publish("", queue, body)
            got = None
            while got is None:  # the message may take a moment through Pulsar
                _method, _properties, got = channel.basic_get(queue, auto_ack=True)
                if got is None:
                    connection.process_data_events(time_limit=0.01)
                    if time.monotonic() - started > 30:
                        raise AssertionError(f"round trip {round_trips} got nothing in 30 s")
            assert got == body
            round_trips += 1
            slowest = max(slowest, time.monotonic() - started)
        thread.join()
    finally:
        connection.close()
    if failure:
        raise failure[0]
    return result[0], Served(round_trips, slowest)


def bursts(port: int, total: int, burst: int = 50) -> int:
    """``total`` connections opened ``burst`` at a time, then closed: half with
    Connection.Close, half by hanging up. Returns how many were opened."""
    opened = 0
    while opened < total:
        held = [open_amqp(port) for _ in range(min(burst, total - opened))]
        for index, sock in enumerate(held):
            if index % 2:
                sock.close()
            else:
                close_amqp(sock)
        opened += len(held)
    return opened


@dataclass
class IdleFigures:
    connections: int
    rss_before: int
    rss_held: int
    descriptors_before: int
    descriptors_held: int

    @property
    def per_connection(self) -> float:
        return (self.rss_held - self.rss_before) / self.connections

    def describe(self) -> str:
        return (
            f"{self.connections} idle connections: RSS "
            f"+{(self.rss_held - self.rss_before) / KB:.0f} KB = "
            f"{self.per_connection / KB:.1f} KB each; descriptors "
            f"{self.descriptors_before} -> {self.descriptors_held}"
        )


def hold_idle(
    process: LimitedGatewayProcess, count: int
) -> tuple[IdleFigures, list[socket.socket]]:
    """``count`` opened connections that then say nothing; the caller closes them."""
    rss_before, fds_before = process.rss(), process.open_descriptors()
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            held.append(open_amqp(process.port))
    except BaseException:
        for sock in held:
            sock.close()
        raise
    figures = IdleFigures(count, rss_before, process.rss(), fds_before, process.open_descriptors())
    return figures, held


@dataclass
class LorisFigures:
    slow: int
    silent: int
    slow_served: int = 0
    silent_closed: int = 0


def slow_loris(
    port: int, slow: int, silent: int, byte_delay: float, handshake_timeout: float
) -> LorisFigures:
    """``slow`` connections send the protocol header one octet every ``byte_delay`` seconds and
    must get Connection.Start; ``silent`` ones send nothing and must be hung up on once the
    handshake timeout has passed."""
    figures = LorisFigures(slow, silent)
    slow_socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(slow)]
    silent_socks = [
        socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(silent)
    ]
    try:
        for octet in range(len(PROTOCOL_HEADER)):
            for sock in slow_socks:
                sock.sendall(PROTOCOL_HEADER[octet : octet + 1])
            time.sleep(byte_delay)  # the slowness under test, not a synchronisation
        for sock in slow_socks:
            # Connection.Start: a method frame (type 1) on channel 0.
            if sock.recv(7)[:3] == b"\x01\x00\x00":
                figures.slow_served += 1
        for sock in silent_socks:
            sock.settimeout(handshake_timeout + 30)
            try:
                if sock.recv(1) == b"":
                    figures.silent_closed += 1
            except ConnectionResetError:
                figures.silent_closed += 1
    finally:
        for sock in slow_socks + silent_socks:
            sock.close()
    return figures
