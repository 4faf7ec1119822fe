"""What one wake-up of an idle event loop costs on this machine, at several message rates.

    .venv/bin/python bench/bench_wakeups.py [--rates 100,1000,10000] [--seconds 4]

A sender thread writes a 100-byte message to a socket pair at a steady rate; a trio task (the
gateway's event loop), an asyncio task (the benchmarks' AMQP client) and a plain blocking
``recv`` in a thread read them one ``recv`` at a time. Printed: the reading thread's CPU µs
per read. Nothing but the loop's own machinery runs per read, so this is the floor of what a
message costs a process each time it has to wake up for it; at low rates the loop sleeps
between messages and every message pays a full wake-up, with the loop's code and data gone
cold (docs/benchmarks.md, "Latency at 1,000 msg/s on a quiet machine").
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time

import trio

MESSAGE = b"x" * 100


def send_at_rate(sock: socket.socket, rate: float, count: int) -> None:
    started = time.perf_counter()
    for i in range(count):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sock.send(MESSAGE)
    sock.close()


async def read_with_trio(sock: socket.socket, sender: threading.Thread) -> tuple[int, float]:
    """Reads until the sender closes; (reads, this thread's CPU seconds)."""
    stream = trio.socket.from_stdlib_socket(sock)
    reads = 0
    started = time.thread_time()
    sender.start()
    while await stream.recv(65536):
        reads += 1
    return reads, time.thread_time() - started


async def read_with_asyncio(sock: socket.socket, sender: threading.Thread) -> tuple[int, float]:
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    reads = 0
    started = time.thread_time()
    sender.start()
    while await loop.sock_recv(sock, 65536):
        reads += 1
    return reads, time.thread_time() - started


def read_blocking(sock: socket.socket, sender: threading.Thread) -> tuple[int, float]:
    """No event loop: a blocking ``recv`` (what a thread of pulsar-client's kind pays)."""
    reads = 0
    started = time.thread_time()
    sender.start()
    while sock.recv(65536):
        reads += 1
    return reads, time.thread_time() - started


def cpu_per_read(loop: str, rate: float, count: int) -> float:
    """CPU µs of the reading thread per read, for ``loop`` "trio", "asyncio" or "blocking"."""
    reader, writer = socket.socketpair()
    sender = threading.Thread(target=send_at_rate, args=(writer, rate, count), daemon=True)
    try:
        if loop == "trio":
            reads, cpu = trio.run(read_with_trio, reader, sender)
        elif loop == "asyncio":
            reads, cpu = asyncio.run(read_with_asyncio(reader, sender))
        else:
            reads, cpu = read_blocking(reader, sender)
    finally:
        reader.close()
    return cpu / max(reads, 1) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="100,1000,10000", help="messages/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per rate")
    args = parser.parse_args()
    print("| messages/s | trio: CPU µs per read | asyncio | blocking recv, no loop |")
    print("| --- | --- | --- | --- |")
    for rate in (float(r) for r in args.rates.split(",")):
        count = int(rate * args.seconds)
        cells = [
            f"{cpu_per_read(loop, rate, count):.0f}" for loop in ("trio", "asyncio", "blocking")
        ]
        print(f"| {rate:,.0f} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
