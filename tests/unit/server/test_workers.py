"""The ``--workers`` supervisor and the hand-built listeners, without Pulsar or ZooKeeper.

The supervisor runs stand-in workers (a few lines of Python speaking the worker's side of the
link) so that start-up failures, crashes, restarts and stops are exercised in a second each;
``tests/integration/fleet`` runs the real gateway workers. Sockets are on loopback only.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import trio

from gateway.auth.authenticator import AcceptAnyone
from gateway.backend.unsupported import UnsupportedBackend
from gateway.cli import parse_args
from gateway.server.address import Listener
from gateway.server.listeners import bind_tcp, start_listening
from gateway.server.server import GatewayServer, StartupError
from gateway.server.settings import ServerSettings
from gateway.server.workers import (
    Backoff,
    Supervisor,
    WorkerLink,
    describe_exit,
    parse_ready,
    worker_command,
)

# A stand-in worker: argv = mode, link fd, scratch directory, worker index.
FAKE_WORKER = r"""
import os, signal, socket, sys
mode, fd, scratch, index = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
link = socket.socket(fileno=fd)
if mode == "fail":
    sys.exit(3)
if mode == "crash-once":
    marker = os.path.join(scratch, f"crashed-{index}")
    if not os.path.exists(marker):
        open(marker, "w").close()
        link.sendall(b"ready\n")
        sys.exit(9)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, lambda *_: os._exit(7))
elif mode != "no-handler":
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
with open(os.path.join(scratch, f"pid-{index}-{os.getpid()}"), "w"):
    pass
link.sendall(b"ready\n")
# Until the supervisor goes away (EOF) or a signal ends us.
while link.recv(64):
    pass
sys.exit(0)
"""

FAST = Backoff(first=0.01, factor=2.0, limit=0.05)


def fake_workers(
    scratch: Path, mode: str | Callable[[int], str]
) -> Callable[[int, int], Sequence[str]]:
    def command(index: int, fd: int) -> list[str]:
        chosen = mode(index) if callable(mode) else mode
        return [sys.executable, "-c", FAKE_WORKER, chosen, str(fd), str(scratch), str(index)]

    return command


# ============================================================== pure parts


def test_backoff_doubles_up_to_its_limit() -> None:
    backoff = Backoff(first=0.5, factor=2.0, limit=30.0)
    assert [backoff.delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff.delay(100) == 30.0


def test_describe_exit() -> None:
    assert describe_exit(0) == "exit code 0"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"


def test_worker_command_runs_this_command_as_one_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    command = worker_command("/py", config="g.conf", log_level="DEBUG", index=2, fd=7)
    assert command == [
        "/py",
        "-m",
        "gateway.cli",
        "-c",
        str(tmp_path / "g.conf"),
        "--log-level",
        "DEBUG",
        "--worker-index",
        "2",
        "--worker-fd",
        "7",
    ]


def test_workers_option() -> None:
    assert parse_args([]).workers == 1
    assert parse_args(["--workers", "4"]).workers == 4
    with pytest.raises(SystemExit):
        parse_args(["--workers", "0"])
    with pytest.raises(SystemExit):
        parse_args(["--worker-index", "1"])  # without --worker-fd


# ============================================================== the link


async def test_worker_link_reports_ready_and_sees_the_supervisor_go() -> None:
    ours, theirs = socket.socketpair()
    link = WorkerLink(0, theirs.detach())
    supervisor_end = trio.socket.from_stdlib_socket(ours)
    with trio.fail_after(5):
        await link.ready(4321)
        line = await supervisor_end.recv(64)
        assert line == b"ready 4321\n"
        assert parse_ready(line) == 4321
        assert parse_ready(b"ready\n") == 0  # a worker without a metrics listener
        assert parse_ready(b"hello\n") is None
        supervisor_end.close()
        await link.wait_supervisor_gone()
    link.close()


# ============================================================== the supervisor


async def test_all_workers_start_and_stop_cleanly(tmp_path: Path) -> None:
    supervisor = Supervisor(3, fake_workers(tmp_path, "serve"), backoff=FAST)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            codes: list[int] = []

            async def run() -> None:
                codes.append(await supervisor.run())

            nursery.start_soon(run)
            await supervisor.all_ready.wait()
            pids = supervisor.pids
            assert len(set(pids)) == 3
            supervisor.stop()
    assert codes == [0]
    assert len(list(tmp_path.glob("pid-*"))) == 3


async def test_a_worker_that_cannot_start_fails_the_command_with_its_code(
    tmp_path: Path,
) -> None:
    supervisor = Supervisor(
        3, fake_workers(tmp_path, lambda i: "fail" if i == 1 else "serve"), backoff=FAST
    )
    with trio.fail_after(30):
        code = await supervisor.run()
    assert code == 3
    assert not supervisor.all_ready.is_set()


async def test_a_worker_that_dies_after_start_is_restarted(tmp_path: Path) -> None:
    supervisor = Supervisor(
        2, fake_workers(tmp_path, lambda i: "crash-once" if i == 0 else "serve"), backoff=FAST
    )
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            codes: list[int] = []

            async def run() -> None:
                codes.append(await supervisor.run())

            nursery.start_soon(run)
            # Worker 0's first incarnation says ready and exits 9; the second one stays.
            while not list(tmp_path.glob("pid-0-*")):
                await trio.sleep(0.01)
            await supervisor.all_ready.wait()
            first_pid = supervisor.pids[0]
            assert first_pid is not None
            assert (tmp_path / f"pid-0-{first_pid}").exists()
            assert (tmp_path / "crashed-0").exists()
            supervisor.stop()
    assert codes == [0]


async def test_a_worker_killed_by_the_forwarded_signal_stopped_cleanly(tmp_path: Path) -> None:
    # A worker still starting has no handler yet, and dies of SIGTERM: nothing to drain.
    supervisor = Supervisor(2, fake_workers(tmp_path, "no-handler"), backoff=FAST)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            codes: list[int] = []

            async def run() -> None:
                codes.append(await supervisor.run())

            nursery.start_soon(run)
            await supervisor.all_ready.wait()
            supervisor.stop()
    assert codes == [0]


async def test_a_worker_that_stops_badly_makes_the_exit_code_1(tmp_path: Path) -> None:
    supervisor = Supervisor(
        2, fake_workers(tmp_path, lambda i: "stubborn" if i == 1 else "serve"), backoff=FAST
    )
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            codes: list[int] = []

            async def run() -> None:
                codes.append(await supervisor.run())

            nursery.start_soon(run)
            await supervisor.all_ready.wait()
            supervisor.stop()
    assert codes == [1]


async def test_cancelling_the_supervisor_leaves_no_worker_behind(tmp_path: Path) -> None:
    supervisor = Supervisor(2, fake_workers(tmp_path, "serve"), backoff=FAST)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(supervisor.run)
            await supervisor.all_ready.wait()
            pids = [pid for pid in supervisor.pids if pid is not None]
            nursery.cancel_scope.cancel()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# ============================================================== listeners


async def test_reuse_port_sockets_share_a_port_and_others_are_refused() -> None:
    first = await bind_tcp("127.0.0.1", 0, reuse_port=True)
    port = first[0].getsockname()[1]
    second = await bind_tcp("127.0.0.1", port, reuse_port=True)
    listeners = [start_listening(sock) for sock in first + second]
    try:
        with pytest.raises(OSError) as refused:
            await bind_tcp("127.0.0.1", port, reuse_port=False)
        assert refused.value.errno == errno.EADDRINUSE
    finally:
        for listener in listeners:
            await listener.aclose()


async def test_a_bound_server_refuses_connections_until_it_serves() -> None:
    settings = ServerSettings(listeners=(Listener("amqp", "127.0.0.1", 0),))
    server = GatewayServer(settings, AcceptAnyone(), UnsupportedBackend())
    [(host, port)] = await server.bind()
    assert port != 0
    with pytest.raises(OSError):
        await trio.open_tcp_stream(host, port)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            assert await nursery.start(server.serve) == [(host, port)]
            stream = await trio.open_tcp_stream(host, port)
            await stream.aclose()
            server.request_stop()


async def test_a_taken_port_is_a_startup_error_naming_the_listener() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        for reuse_port in (False, True):
            address = Listener("amqp", "127.0.0.1", port)
            server = GatewayServer(
                ServerSettings(listeners=(address,)),
                AcceptAnyone(),
                UnsupportedBackend(),
                reuse_port=reuse_port,
            )
            with pytest.raises(StartupError, match=f"amqp://127.0.0.1:{port}"):
                await server.bind()
    finally:
        holder.close()
