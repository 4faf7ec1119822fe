"""A throwaway PostgreSQL server (Debian's postgresql package) on a free loopback port.

``initdb`` into a temporary directory, ``postgres`` on 127.0.0.1, trust authentication, stopped
and removed afterwards. PostgreSQL refuses to run as root, so under root (CI) both run as the
``postgres`` system user the package creates.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class PostgresServer:
    port: int
    data_dir: Path

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _server_user() -> dict[str, Any]:
    """Popen arguments that run a command as ``postgres`` when we are root (signals then reach
    the server itself, not a wrapper such as runuser)."""
    if os.geteuid() != 0:
        return {}
    user = pwd.getpwnam("postgres")
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


@contextlib.contextmanager
def running_postgres(timeout: float = 60.0) -> Iterator[PostgresServer]:
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (scripts/debian_packages.sh installs it)")
    base = Path(tempfile.mkdtemp(prefix="starlight-pg-"))
    data_dir = base / "data"
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(base, user.pw_uid, user.pw_gid)
    subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(data_dir), "-U", "postgres", "--auth=trust"],
        check=True,
        capture_output=True,
        cwd=base,
        **_server_user(),
    )
    port = _free_port()
    log_file = open(base / "server.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [
            *(str(bin_dir / "postgres"), "-D", str(data_dir)),
            *("-h", "127.0.0.1", "-p", str(port)),
            *("-k", str(base)),  # its Unix socket, not /var/run/postgresql
            *("-c", "fsync=off"),
        ],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        cwd=base,
        **_server_user(),
    )
    try:
        _wait_ready(port, server, base / "server.log", timeout)
        yield PostgresServer(port, data_dir)
    finally:
        server.send_signal(signal.SIGINT)  # "fast" shutdown: no waiting for clients
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log_file.close()
        shutil.rmtree(base, ignore_errors=True)


def _wait_ready(port: int, server: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"postgres exited ({server.returncode}): {log.read_text()[-2000:]}")
        try:
            with psycopg.connect(
                f"postgresql://postgres@127.0.0.1:{port}/postgres", connect_timeout=2
            ):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
