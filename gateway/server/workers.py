"""``--workers N``: one supervisor process and N worker processes, each a full gateway replica.

A trio gateway uses one core. To use more on one host, the supervisor (the process the user
started) runs N workers, each a fresh interpreter (``python -m gateway.cli ... --worker-index
I --worker-fd F``) with its own Pulsar client and ZooKeeper session: exactly the replica a
separate host would run. Fresh interpreters rather than ``fork``: pulsar-client's C++ threads
and kazoo's threads do not survive a fork, so nothing may be created before the split.

The workers bind the same listener addresses with SO_REUSEPORT (``listeners.py``) and the
kernel spreads connections over them. The supervisor never touches a client connection.

Each worker gets one end of a socketpair (``WorkerLink``):

- the worker writes ``ready <port>`` once it listens (after loading every vhost), which tells
  the supervisor that its start-up worked, and on which loopback port the worker serves its own
  /metrics and /readyz (0: none); the supervisor serves ``metricsListener`` with the sum of
  the workers' metrics (``gateway/server/supervisor_metrics.py``);
- the worker reads EOF when the supervisor is gone (killed with SIGKILL, say), and stops
  gracefully rather than serving on unsupervised.

The supervisor:

- starts the N workers; if one fails before its first ``ready`` the whole command fails with
  that worker's exit code (its one-line error is already on stderr): a bad configuration
  should not be retried forever;
- afterwards restarts a worker that exits while no stop was asked for, after 0.5 s, doubling
  up to 30 s while it keeps failing (reset once a worker has stayed up for a while), and logs
  each exit and restart;
- forwards SIGTERM and SIGINT to every worker (a first one drains with Connection.Close 320, a
  second stops at once, as in a single-process gateway), waits for them all, and exits 0 when
  every worker stopped cleanly.

Workers run in a process group of their own, so Ctrl-C in a terminal (which signals the whole
foreground group) reaches them once, through the supervisor, not twice.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import trio

log = logging.getLogger("gateway.workers")

READY = b"ready"


def parse_ready(line: bytes) -> int | None:
    """The metrics port of a worker's ``ready [<port>]`` line; None if it is not one."""
    words = line.split()
    if not words or words[0] != READY:
        return None
    if len(words) > 1 and words[1].isdigit():
        return int(words[1])
    return 0


# A worker started this recently that dies again is failing, not crashing once in a while.
STABLE_AFTER = 30.0


@dataclass(frozen=True)
class Backoff:
    """Delay before restarting a worker after ``failures`` consecutive failures (>= 1)."""

    first: float = 0.5
    factor: float = 2.0
    limit: float = 30.0

    def delay(self, failures: int) -> float:
        return min(self.limit, self.first * self.factor ** max(0, failures - 1))


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class WorkerLink:
    """The worker's end of its socketpair with the supervisor."""

    def __init__(self, index: int, fd: int) -> None:
        self.index = index
        self._stdlib_socket = socket.socket(fileno=fd)
        # Wrapped on first use: a trio socket belongs to the trio run that uses it.
        self._trio_socket: trio.socket.SocketType | None = None

    def _socket(self) -> trio.socket.SocketType:
        if self._trio_socket is None:
            self._trio_socket = trio.socket.from_stdlib_socket(self._stdlib_socket)
        return self._trio_socket

    async def ready(self, metrics_port: int = 0) -> None:
        """Tell the supervisor that this worker listens (and where its metrics are)."""
        # OSError: the supervisor is gone, and wait_supervisor_gone() says so.
        with contextlib.suppress(OSError):
            await self._socket().send(b"ready %d\n" % metrics_port)

    async def wait_supervisor_gone(self) -> None:
        """Return when the supervisor's end closes: it exited, or was killed."""
        while True:
            try:
                data = await self._socket().recv(256)
            except OSError:
                return
            if not data:
                return

    def close(self) -> None:
        """Close the link (outside trio too: the process is about to exit)."""
        self._stdlib_socket.close()


# (index, fd of the worker's end of the link) -> the worker's command line.
CommandFactory = Callable[[int, int], Sequence[str]]


@dataclass
class _Worker:
    index: int
    process: trio.Process | None = None
    pid: int | None = None
    # Consecutive failures, for the backoff.
    failures: int = 0
    ever_ready: bool = False
    # The signals forwarded to the current process (a worker still starting may die of one).
    forwarded: set[int] = field(default_factory=set)
    # Where the current process serves its /metrics and /readyz (0: nowhere, or not ready).
    metrics_port: int = 0


class Supervisor:
    """Runs ``count`` workers until a signal stops them; ``run()`` returns the exit code."""

    def __init__(
        self,
        count: int,
        command: CommandFactory,
        *,
        backoff: Backoff | None = None,
        stable_after: float = STABLE_AFTER,
    ) -> None:
        if count < 1:
            raise ValueError("at least one worker")
        self._count = count
        self._command = command
        self._backoff = backoff or Backoff()
        self._stable_after = stable_after
        self._workers = [_Worker(index) for index in range(count)]
        self._stopping = False
        self._stop_event = trio.Event()
        # The exit code when a worker failed to start the first time (the command fails).
        self._startup_failure: int | None = None
        self._unclean = False
        self.all_ready = trio.Event()

    @property
    def pids(self) -> list[int | None]:
        return [worker.pid for worker in self._workers]

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def metrics_ports(self) -> list[int]:
        """The loopback metrics port of each worker that is ready now (0: not ready)."""
        return [worker.metrics_port for worker in self._workers]

    async def run(self) -> int:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._forward_signals)
            async with trio.open_nursery() as workers:
                for worker in self._workers:
                    workers.start_soon(self._supervise, worker)
            nursery.cancel_scope.cancel()
        if self._startup_failure is not None:
            return self._startup_failure
        return 1 if self._unclean else 0

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask every worker to stop (as a signal to the supervisor does)."""
        if not self._stopping:
            self._stopping = True
            self._stop_event.set()
        for worker in self._workers:
            self._signal(worker, signum)

    async def _forward_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if self._stopping:
                    log.warning("second %s: telling the workers to stop at once", name)
                else:
                    log.info("%s received: stopping %d worker(s)", name, self._count)
                self.stop(signum)

    def _signal(self, worker: _Worker, signum: int) -> None:
        process = worker.process
        if process is None or process.returncode is not None:
            return
        worker.forwarded.add(signum)
        # ProcessLookupError: it exited between the check and the signal; wait() reports it.
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signum)

    async def _supervise(self, worker: _Worker) -> None:
        while not self._stopping:
            returncode, ready, uptime = await self._run_once(worker)
            if self._stopping:
                self._record_stopped(worker, returncode)
                return
            if not worker.ever_ready and not self.all_ready.is_set():
                # It never started: the configuration, a port or a server is wrong; retrying
                # would only repeat the error line forever.
                log.error(
                    "worker %d failed to start (%s): stopping the others",
                    worker.index,
                    describe_exit(returncode),
                )
                self._startup_failure = returncode if returncode > 0 else 1
                self.stop()
                return
            worker.failures = 1 if ready and uptime >= self._stable_after else worker.failures + 1
            delay = self._backoff.delay(worker.failures)
            log.warning(
                "worker %d (pid %s) exited unexpectedly (%s); restarting it in %.1f s",
                worker.index,
                worker.pid,
                describe_exit(returncode),
                delay,
            )
            with trio.move_on_after(delay):
                await self._stop_event.wait()

    def _record_stopped(self, worker: _Worker, returncode: int) -> None:
        # A worker still starting when the signal came may die of it before it could install
        # its handlers: it had no clients to drain, so that is a clean stop too.
        clean = returncode == 0 or -returncode in worker.forwarded
        if not clean:
            self._unclean = True
            log.warning(
                "worker %d (pid %s) did not stop cleanly: %s",
                worker.index,
                worker.pid,
                describe_exit(returncode),
            )

    async def _run_once(self, worker: _Worker) -> tuple[int, bool, float]:
        """Start the worker, wait until it exits: (return code, was it ready, seconds up)."""
        ours, theirs = socket.socketpair()
        try:
            process = await trio.lowlevel.open_process(
                list(self._command(worker.index, theirs.fileno())),
                pass_fds=(theirs.fileno(),),
                # Not in our process group: a terminal's Ctrl-C reaches them only through us.
                process_group=0,
                stdin=subprocess.DEVNULL,
            )
        except OSError as error:
            ours.close()
            log.error("cannot start worker %d: %s", worker.index, error)
            return 1, False, 0.0
        finally:
            theirs.close()
        worker.process = process
        worker.pid = process.pid
        worker.forwarded = set()
        log.info("worker %d started (pid %d)", worker.index, process.pid)
        if self._stopping:
            self._signal(worker, signal.SIGTERM)
        link = trio.socket.from_stdlib_socket(ours)
        link_done = trio.Event()
        ready_at = math.inf
        try:
            async with trio.open_nursery() as nursery:

                async def receive() -> bytes:
                    try:
                        return await link.recv(256)
                    except OSError:
                        return b""  # reset by a dying worker: its exit code tells the rest

                async def wait_ready() -> None:
                    try:
                        await follow_link()
                    finally:
                        link_done.set()

                async def follow_link() -> None:
                    nonlocal ready_at
                    data = b""
                    while not data.endswith(b"\n"):
                        chunk = await receive()
                        if not chunk:
                            return  # it closed its end: it is exiting
                        data += chunk
                    ready_at = time.monotonic()
                    worker.metrics_port = parse_ready(data) or 0
                    worker.ever_ready = True
                    log.info("worker %d ready (pid %d)", worker.index, process.pid)
                    if all(other.ever_ready for other in self._workers):
                        if not self.all_ready.is_set():
                            log.info(
                                "all %d workers ready (pids %s)",
                                self._count,
                                " ".join(str(pid) for pid in self.pids),
                            )
                        self.all_ready.set()
                    # Keep our end open (and drained): closing it tells the worker to stop.
                    while await receive():
                        pass

                nursery.start_soon(wait_ready)
                returncode = await process.wait()
                # Its end of the link closed with it: read what it wrote before it died (a
                # "ready" still counts), unless a child of its own keeps the link open.
                with trio.move_on_after(1.0):
                    await link_done.wait()
                nursery.cancel_scope.cancel()
        finally:
            worker.metrics_port = 0
            link.close()
            if process.returncode is None:
                # Cancelled (the supervisor itself is being torn down): leave no orphan.
                with trio.CancelScope(shield=True):
                    process.kill()
                    await process.wait()
        ready = ready_at < math.inf
        return returncode, ready, (time.monotonic() - ready_at) if ready else 0.0


def worker_command(
    executable: str,
    *,
    config: str | None,
    log_level: str,
    index: int,
    fd: int,
) -> list[str]:
    """The command line of worker ``index``: this command again, as one worker."""
    command = [executable, "-m", "gateway.cli"]
    if config is not None:
        # The worker starts in our directory, but an absolute path survives a later chdir.
        command += ["-c", os.path.abspath(config)]
    command += ["--log-level", log_level, "--worker-index", str(index), "--worker-fd", str(fd)]
    return command
