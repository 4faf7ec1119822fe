"""PROXY protocol v2 on real listeners (TCP and Unix socket), as HAProxy and the Pulsar proxy
extension's relay use them. No Pulsar needed: the protocol layers only."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from gateway.amqp.proxy_protocol import Command, ProxyHeader, encode
from gateway.server.address import Listener
from gateway.server.settings import ProxyTrust, ServerSettings
from tests.support.gateway_thread import GatewayInThread
from tests.support.scripted_client import PROTOCOL_HEADER, ScriptedClient, commands

CLIENT = ProxyHeader(Command.PROXY, source=("203.0.113.5", 41234), destination=("10.0.0.1", 5672))


@pytest.fixture
def socket_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # Short: a Unix socket path has at most 107 bytes.
    directory = Path(f"/tmp/sl-{os.getpid()}-{id(tmp_path_factory)}")
    directory.mkdir()
    yield str(directory / "amqp.sock")
    for entry in directory.iterdir():
        entry.unlink()
    directory.rmdir()


def gateway(trust: tuple[str, ...], *listeners: Listener) -> GatewayInThread:
    settings = ServerSettings(listeners=listeners, proxy_trust=ProxyTrust.parse(trust))
    return GatewayInThread(settings)


async def open_connection(stream: trio.abc.Stream, preamble: bytes) -> ScriptedClient:
    client = ScriptedClient(stream)
    await client.send_raw(preamble + PROTOCOL_HEADER)
    await client.expect(commands.Connection.Start)
    await client.send(
        commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0u\0p", locale="en_US"
        )
    )
    await client.expect(commands.Connection.Tune)
    await client.send(commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0))
    await client.send(commands.Connection.Open(virtual_host="/"))
    await client.expect(commands.Connection.OpenOk)
    await client.send(
        commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    await client.expect(commands.Connection.CloseOk)
    return client


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def opened_peers(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage().split()[2]
        for r in caplog.records
        if r.getMessage().startswith("connection opened")
    ]


def test_tcp_listener_trusting_loopback_takes_the_client_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.connection")
    with gateway(("127.0.0.1/32",), Listener("amqp", "127.0.0.1", 0)) as running:

        async def main() -> None:
            stream = await trio.open_tcp_stream("127.0.0.1", running.port)
            async with stream:
                await open_connection(stream, encode(CLIENT))

        trio.run(main)
    assert opened_peers(caplog) == ["peer=203.0.113.5:41234"]


def test_untrusted_tcp_peer_sending_a_header_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.connection")
    with gateway(("10.0.0.0/8",), Listener("amqp", "127.0.0.1", 0)) as running:

        async def main() -> bytes:
            stream = await trio.open_tcp_stream("127.0.0.1", running.port)
            async with stream:
                await stream.send_all(encode(CLIENT) + PROTOCOL_HEADER)
                data = b""
                with trio.fail_after(10):
                    while chunk := await stream.receive_some():
                        data += chunk
                return data

        assert trio.run(main) == PROTOCOL_HEADER
        wait_until(lambda: any("connection closed" in r.getMessage() for r in caplog.records))
    [line] = [r.getMessage() for r in caplog.records if "connection closed" in r.getMessage()]
    assert line.startswith("connection closed peer=127.0.0.1:")
    assert "PROXY protocol header from a peer not in amqpProxyProtocolTrustedNetworks" in line


def test_unix_listener_trusted_for_proxy_headers(
    socket_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.connection")
    listener = Listener("amqp+unix", "", 0, socket_path)
    with gateway(("unix",), listener) as running:
        assert stat.S_IMODE(os.stat(socket_path).st_mode) == 0o600
        assert [str(address) for address in running.server.listening] == [
            f"amqp+unix://{socket_path}"
        ]

        async def main() -> None:
            stream = await trio.open_unix_socket(socket_path)
            async with stream:
                await open_connection(stream, encode(CLIENT))

        trio.run(main)
    assert opened_peers(caplog) == ["peer=203.0.113.5:41234"]
    # Stopping removes the socket file: nobody connects to a dead socket.
    assert not os.path.exists(socket_path)


def test_a_stale_socket_file_is_replaced(socket_path: str) -> None:
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(socket_path)
    stale.close()  # leaves the file behind, as a killed process would
    with gateway(("unix",), Listener("amqp+unix", "", 0, socket_path)):
        assert stat.S_ISSOCK(os.stat(socket_path).st_mode)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def haproxy_in_front(tmp_path: Path) -> Iterator[tuple[GatewayInThread, int]]:
    """Debian's HAProxy with `send-proxy-v2` (and health checks) in front of a gateway that
    trusts 127.0.0.1/32: the layout of the Helm chart's load-balancer tests."""
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.path.exists(haproxy):
        pytest.skip("haproxy is not installed (make test-tools installs it)")
    with gateway(("127.0.0.1/32",), Listener("amqp", "127.0.0.1", 0)) as running:
        front = free_port()
        config = tmp_path / "haproxy.cfg"
        config.write_text(
            "defaults\n"
            "  mode tcp\n"
            "  timeout connect 5s\n"
            "  timeout client 60s\n"
            "  timeout server 60s\n"
            "frontend amqp\n"
            f"  bind 127.0.0.1:{front}\n"
            "  default_backend gateways\n"
            "backend gateways\n"
            f"  server gw1 127.0.0.1:{running.port} send-proxy-v2 check inter 100ms\n"
        )
        process = subprocess.Popen(
            [haproxy, "-db", "-f", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:

            def accepting() -> bool:
                assert process.poll() is None, process.communicate()[0]
                try:
                    socket.create_connection(("127.0.0.1", front), timeout=1).close()
                    return True
                except OSError:
                    return False

            wait_until(accepting, timeout=20)
            yield running, front
        finally:
            process.terminate()
            process.wait(10)


def test_haproxy_send_proxy_v2_gives_the_gateway_the_client_address(
    haproxy_in_front: tuple[GatewayInThread, int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.connection")
    _running, front = haproxy_in_front

    async def main() -> str:
        stream = await trio.open_tcp_stream("127.0.0.1", front)
        async with stream:
            host, port = stream.socket.getsockname()[:2]
            await open_connection(stream, b"")  # HAProxy adds the header
            return f"peer={host}:{port}"

    client = trio.run(main)
    wait_until(lambda: client in opened_peers(caplog))
    # HAProxy's health checks (with send-proxy-v2: a PROXY LOCAL header, then a close, every
    # 100 ms) are accepted and logged at DEBUG only.
    wait_until(
        lambda: any(
            r.levelno == logging.DEBUG and r.getMessage().startswith("connection closed")
            for r in caplog.records
        ),
        timeout=10,
    )
    assert not [r for r in caplog.records if "PROXY protocol header" in r.getMessage()]
