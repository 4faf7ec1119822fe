"""``starlight-rabbitmq --workers N``: one command, N worker replicas on one port."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from tests.support.clients import connect, get_bodies
from tests.support.fleet import Fleet
from tests.support.fleet_clients import wait_known, wait_until
from tests.support.gateway_process import COMMAND, REPO, write_config

pytestmark = pytest.mark.integration

OPENED = re.compile(r"worker-(\d+)\[(\d+)\] gateway\.connection: connection opened")


def _closed_by_broker(connection: pika.BlockingConnection, timeout: float) -> int:
    """Process events until the gateway closes the connection; its reply code."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.05)
    except pika.exceptions.ConnectionClosedByBroker as closed:
        return int(closed.reply_code)
    raise AssertionError("the gateway did not close the connection")


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (reaped by whoever adopted it, eventually)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in status


def test_three_workers_share_one_port_and_stop_with_320(fleet: Fleet) -> None:
    gateway = fleet.start("workers", "--workers", "3").wait_ready()
    assert len(gateway.worker_pids) == 3

    connections = [connect(gateway.port) for _ in range(30)]
    try:
        opened = gateway.wait_for(OPENED.pattern, count=30)
        per_worker = {pid: 0 for pid in gateway.worker_pids}
        for match in opened:
            per_worker[int(match.group(2))] += 1
        print(f"connections per worker pid: {per_worker}")
        # The kernel hashes each connection's addresses onto a worker: 30 connections all
        # missing one of three workers has a probability of about 1e-5.
        assert all(count > 0 for count in per_worker.values()), per_worker

        # A round trip through whichever workers these connections landed on. A declare
        # reaches the other workers through ZooKeeper within milliseconds, not at once
        # (docs/fleet.md): wait until the publisher's and the getter's workers know the queue.
        declarer = connections[0].channel()
        declarer.queue_declare("round-trip", durable=True)
        for connection in connections[1:3]:
            wait_known(connection, "round-trip")
        publisher = connections[1].channel()
        publisher.confirm_delivery()
        publisher.basic_publish("", "round-trip", b"there and back", mandatory=True)
        assert get_bodies(connections[2].channel(), "round-trip", 1, timeout=30) == [
            b"there and back"
        ]

        gateway.signal(signal.SIGTERM)
        codes = [_closed_by_broker(connection, timeout=20) for connection in connections]
        assert codes == [320] * len(connections)
        code = gateway.wait_exit(timeout=30)
        assert code == 0, "\n".join(gateway.output()[-40:])
    finally:
        for connection in connections:
            if connection.is_open:
                connection.close()
    output = "\n".join(gateway.output())
    assert "stopped (exit code 0)" in output
    assert "Traceback" not in output
    for pid in gateway.worker_pids:
        assert _gone(pid)


def test_a_worker_that_dies_is_restarted(fleet: Fleet) -> None:
    gateway = fleet.start("workers", "--workers", "2").wait_ready()
    victim = min(gateway.worker_pids)
    mark = len(gateway.output())
    os.kill(victim, signal.SIGKILL)  # by the pid the supervisor logged for it
    [exited] = gateway.wait_for(
        rf"worker (\d+) \(pid {victim}\) exited unexpectedly \(killed by SIGKILL\); "
        r"restarting it in",
        start=mark,
    )
    index = exited.group(1)
    [ready] = gateway.wait_for(rf"worker {index} ready \(pid (\d+)\)", start=mark, timeout=60)
    replacement = int(ready.group(1))
    assert replacement != victim
    assert replacement in gateway.worker_pids

    # Both workers serve again: the port never stopped answering (the other worker had it).
    channel = connect(gateway.port).channel()
    channel.queue_declare("after-restart", durable=True)
    gateway.signal(signal.SIGTERM)
    assert gateway.wait_exit(timeout=30) == 0


def test_workers_stop_when_their_supervisor_is_killed(fleet: Fleet) -> None:
    gateway = fleet.start("workers", "--workers", "2").wait_ready()
    workers = gateway.worker_pids
    client = connect(gateway.port)
    gateway.signal(signal.SIGKILL)
    # Each worker reads EOF on its link to the supervisor and drains like on SIGTERM.
    assert _closed_by_broker(client, timeout=30) == 320
    gateway.wait_for(r"the supervisor is gone: shutting down", count=len(workers))
    wait_until(
        lambda: all(_gone(pid) for pid in workers),
        timeout=30,
        what=lambda: f"workers still running: {[p for p in workers if not _gone(p)]}",
    )


def _run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        COMMAND + args, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_a_taken_port_is_one_line_with_workers(tmp_path: Path, pulsar_stack: Any) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = write_config(
            tmp_path,
            port=port,
            namespace="default",
            zookeeper=pulsar_stack.zookeeper,
            web_url=pulsar_stack.web_url,
            broker_url=pulsar_stack.broker_url,
        )
        result = _run(["-c", str(config), "--workers", "3"])
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"starlight-rabbitmq: cannot start: cannot listen on amqp://127.0.0.1:{port}: "
        "Address already in use"
    ]
