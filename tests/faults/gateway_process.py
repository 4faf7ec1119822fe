"""A real gateway process for the fault tests, and what they read of it: its resident memory,
its CPU time, its open descriptors (all from /proc), and AMQP handshakes done by hand, cheap
enough to open thousands of connections from one test."""

from __future__ import annotations

import resource
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pamqp import commands, frame

from tests.support.gateway_process import GatewayProcess, free_port, write_stack_config
from tests.support.pulsar_gateway import fresh_namespace

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


class LimitedGatewayProcess(GatewayProcess):
    """A ``GatewayProcess`` whose open-files limit is ``nofile`` (None: inherited)."""

    def __init__(self, *args: Any, nofile: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.nofile = nofile
        self.before_exec = self._limit
        self.namespace = ""  # the vhost / 's Pulsar namespace, in tenant public

    def _limit(self) -> None:  # runs in the child, between fork and exec
        if self.nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def rss(self) -> int:
        """Resident memory in bytes (VmRSS)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime + stime
        return ticks / 100.0

    def open_descriptors(self) -> int:
        return len(list(Path(f"/proc/{self.pid}/fd").iterdir()))

    def peer_ports(self) -> set[int]:
        """The remote ports of the TCP connections the gateway holds a descriptor for (its
        sockets' inodes matched against /proc/net/tcp): what it has accepted, exactly, where
        a descriptor count also moves with its Pulsar and ZooKeeper connections."""
        return self._tcp_ports(column=2)

    def local_ports(self) -> set[int]:
        """The local ports of its TCP sockets: a proxy told a peer's port knows whether the
        connection is this process's."""
        return self._tcp_ports(column=1)

    def _tcp_ports(self, column: int) -> set[int]:
        inodes = set()
        for link in Path(f"/proc/{self.pid}/fd").iterdir():
            try:
                target = link.readlink().name
            except FileNotFoundError:
                continue  # closed while listing
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
        ports = set()
        for line in Path(f"/proc/{self.pid}/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[column].rsplit(":", 1)[1], 16))
        return ports

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@contextmanager
def gateway(
    stack: Any, directory: Path, *, extra: str = "", nofile: int | None = None
) -> Iterator[LimitedGatewayProcess]:
    """A ready gateway on a namespace of its own, killed afterwards."""
    with fresh_namespace(stack) as namespace:
        port = free_port()
        config = write_stack_config(directory, stack, port=port, namespace=namespace, extra=extra)
        process = LimitedGatewayProcess("gateway", config, port, nofile=nofile)
        process.namespace = namespace
        try:
            process.start()
            process.wait_ready()
            yield process
        finally:
            process.close()


def _read_frame(sock: socket.socket, buffer: bytearray) -> Any:
    while True:
        if len(buffer) >= 7:
            try:
                used, _channel, value = frame.unmarshal(bytes(buffer))
            except Exception:  # pamqp: not a whole frame yet
                pass
            else:
                del buffer[:used]
                return value
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the gateway hung up during the handshake")
        buffer.extend(chunk)


def open_amqp(port: int, *, timeout: float = 30.0) -> socket.socket:
    """A connection opened on vhost ``/`` as guest, by hand, heartbeats off: it stays idle."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        buffer = bytearray()
        sock.sendall(PROTOCOL_HEADER)
        start = _read_frame(sock, buffer)
        assert isinstance(start, commands.Connection.Start), start
        sock.sendall(
            frame.marshal(
                commands.Connection.StartOk(
                    client_properties={"product": "fault-test"},
                    mechanism="PLAIN",
                    response="\0guest\0guest",
                    locale="en_US",
                ),
                0,
            )
        )
        tune = _read_frame(sock, buffer)
        assert isinstance(tune, commands.Connection.Tune), tune
        sock.sendall(
            frame.marshal(
                commands.Connection.TuneOk(
                    channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0
                ),
                0,
            )
            + frame.marshal(commands.Connection.Open(virtual_host="/"), 0)
        )
        opened = _read_frame(sock, buffer)
        assert isinstance(opened, commands.Connection.OpenOk), opened
    except BaseException:
        sock.close()
        raise
    return sock


def close_amqp(sock: socket.socket) -> None:
    """Connection.Close, wait for Close-Ok, hang up."""
    try:
        sock.sendall(
            frame.marshal(
                commands.Connection.Close(
                    reply_code=200, reply_text="bye", class_id=0, method_id=0
                ),
                0,
            )
        )
        buffer = bytearray()
        while not isinstance(_read_frame(sock, buffer), commands.Connection.CloseOk):
            pass
    finally:
        sock.close()


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)  # polling interval of a condition with a deadline
