"""A benchmark's server process (RabbitMQ, the Java gateway, ours): started with its output in
a log file, waited for until it is ready (or said why not, with the log's tail), and stopped.

Every server here is started on loopback ports picked free at run time (``free_port``), so
that two benchmarks, or a benchmark and the test suite, never collide.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["free_port", "log_tail", "port_open", "start_logged", "stop", "wait_ready"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` of a server's log, for the error that says why it did not start."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_logged(
    command: Sequence[str],
    log: Path,
    *,
    cwd: Path | str,
    env: Mapping[str, str] | None = None,
    new_session: bool = True,
) -> subprocess.Popen[bytes]:
    """``command`` started with stdout and stderr in ``log``; in a session of its own unless
    not ``new_session`` (``stop`` then kills what is left of that session too)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            list(command),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=new_session,
        )


def wait_ready(
    proc: subprocess.Popen[bytes],
    ready: Callable[[], bool],
    *,
    log: Path,
    what: str,
    timeout: float,
    error: type[Exception] = RuntimeError,
) -> None:
    """Until ``ready()``; ``error`` naming ``what`` with the log's tail if the process exits
    first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise error(f"{what} exited with {proc.returncode}:\n{log_tail(log)}")
        if time.monotonic() > deadline:
            raise error(f"{what} not ready within {timeout:.0f} s:\n{log_tail(log)}")
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """``sig`` to the process (its orderly shutdown), SIGKILL if it lingers past ``timeout``
    seconds; then whatever is left of its process group (one of its own when started with a
    new session; otherwise there is no group of that number and nothing more is done)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
