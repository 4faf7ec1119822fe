"""The ``starlight-rabbitmq`` command as a user runs it: a real process, real signals."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

from gateway.allocator import find_jemalloc
from tests.support.cli import COMMAND, REPO, free_port, run, wait_for_port, write_config


@contextlib.contextmanager
def running_gateway(config: Path, port: int) -> Iterator[subprocess.Popen[str]]:
    """The command on ``config``, once it listens on ``port``; killed afterwards if it runs."""
    process = subprocess.Popen(
        [*COMMAND, "-c", str(config)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_port(port, process)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


@pytest.fixture
def gateway_process(
    tmp_path: Path, pulsar_stack: object
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    with running_gateway(write_config(tmp_path, port=port), port) as process:
        yield process, port


def test_help_names_the_config_option() -> None:
    result = run(["--help"])
    assert result.returncode == 0
    assert "-c FILE, --config FILE" in result.stdout


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ("amqpListenerz=amqp://127.0.0.1:1\n", "amqpListenerz"),
        ("amqpHeartbeatDelay=soon\n", "amqpHeartbeatDelay"),
        ("amqpBatchingEnabled=maybe\n", "amqpBatchingEnabled"),
        ("gatewayMemoryAllocator=tcmalloc\n", "gatewayMemoryAllocator"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(tmp_path: Path, extra: str, named: str) -> None:
    result = run(["-c", str(write_config(tmp_path, extra))])
    assert result.returncode == 2
    assert named in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_config_file_is_a_clear_error(tmp_path: Path) -> None:
    result = run(["-c", str(tmp_path / "nope.conf")])
    assert result.returncode == 2
    assert "nope.conf" in result.stderr
    assert "Traceback" not in result.stderr


def test_taken_port_is_a_clear_error(tmp_path: Path, pulsar_stack: object) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run(["-c", str(write_config(tmp_path, port=port))])
    assert result.returncode == 1
    assert f"amqp://127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.integration
def test_sigterm_closes_clients_with_320_and_exits_0(
    gateway_process: tuple[subprocess.Popen[str], int],
) -> None:
    process, port = gateway_process
    connection = pika.BlockingConnection(
        pika.ConnectionParameters(host="127.0.0.1", port=port, connection_attempts=1)
    )
    connection.channel()
    os.kill(process.pid, signal.SIGTERM)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)
    assert closed.value.reply_code == 320
    output, _ = process.communicate(timeout=20)
    assert process.returncode == 0, output
    assert "connection opened" in output
    assert "connection closed" in output
    assert "Traceback" not in output


def test_unreachable_pulsar_is_a_clear_error(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    config.write_text(
        config.read_text().replace("http://127.0.0.1:8080", f"http://127.0.0.1:{free_port()}")
    )
    result = run(["-c", str(config)])
    assert result.returncode == 1
    assert "cannot reach the Pulsar admin API" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_open_gateway_other_machines_reach_is_refused(tmp_path: Path) -> None:
    # Authentication off (the reference's default) on a wildcard address: anyone could log in
    # with any credentials, which RabbitMQ allows from loopback only (issue 37 item 5).
    config = write_config(tmp_path)
    config.write_text(config.read_text().replace("amqp://127.0.0.1:", "amqp://0.0.0.0:"))
    result = run(["-c", str(config)])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    for key in ("amqpListeners", "authenticationEnabled", "amqpAllowUnauthenticatedRemote"):
        assert key in line


def test_an_open_gateway_that_is_allowed_says_so_loudly(tmp_path: Path) -> None:
    # Stopped before it binds anything: its Pulsar admin API is not there (a clear error).
    config = write_config(tmp_path, "amqpAllowUnauthenticatedRemote=true\n")
    config.write_text(
        config.read_text()
        .replace("amqp://127.0.0.1:", "amqp://0.0.0.0:")
        .replace("http://127.0.0.1:8080", f"http://127.0.0.1:{free_port()}")
    )
    result = run(["-c", str(config)])
    assert result.returncode == 1
    assert "WARNING" in result.stderr
    assert "AUTHENTICATION IS OFF on amqp://0.0.0.0:" in result.stderr
    assert "cannot reach the Pulsar admin API" in result.stderr


def test_stop_on_stdin_close_stops_when_the_parent_goes(
    tmp_path: Path, pulsar_stack: object
) -> None:
    """What the Pulsar proxy extension relies on: its end of the pipe closing (the JVM exiting,
    even killed) stops the gateway, which then exits cleanly."""
    port = free_port()
    process = subprocess.Popen(
        [*COMMAND, "-c", str(write_config(tmp_path, port=port)), "--stop-on-stdin-close"],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_port(port, process)
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        process.wait(timeout=30)
        output = process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
    assert "standard input closed (the supervising process is gone): shutting down" in output


@pytest.mark.parametrize(("choice", "jemalloc"), [("auto", True), ("system", False)])
def test_the_gateway_runs_on_the_allocator_it_is_told(
    tmp_path: Path, pulsar_stack: object, choice: str, jemalloc: bool
) -> None:
    """jemalloc (Debian's libjemalloc2, which `make test` installs) where the system has it:
    the command re-executes itself with it preloaded, as the same process."""
    assert find_jemalloc() is not None, "no jemalloc library: scripts/debian_packages.sh"
    port = free_port()
    config = write_config(tmp_path, f"gatewayMemoryAllocator={choice}\n", port=port)
    with running_gateway(config, port) as process:
        maps = Path(f"/proc/{process.pid}/maps").read_text()
        assert ("libjemalloc" in maps) is jemalloc
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        assert process.stdout is not None
        output = process.stdout.read()
    named = "jemalloc" if jemalloc else "the C library's"
    assert f"memory allocator: {named} (gatewayMemoryAllocator)" in output
