"""The package as a user installs it: ``make dist``'s wheel in a fresh virtualenv, run from a
directory outside the checkout (so nothing is imported from the repository), against the local
stack.

The wheel is built the way ``make dist`` builds it (``python -m build``: the sdist, then the
wheel from that sdist), so a file the sdist or the wheel forgets is missing here too.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway_process import free_port, write_stack_config
from tests.support.pulsar_gateway import fresh_namespace

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
VERSION: str = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]

#: Building takes ~15 s; installing the dependencies (pulsar-client, pyjwt[crypto], ...) into
#: an empty virtualenv from pip's cache ~1 min, from PyPI itself a few minutes on a slow line.
BUILD_TIMEOUT = 300.0
INSTALL_TIMEOUT = 600.0
GATEWAY_START_TIMEOUT = 90.0


@dataclass(frozen=True)
class InstalledWheel:
    wheel: Path
    venv: Path
    #: An empty directory outside the repository, the cwd of everything run from the venv.
    elsewhere: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def command(self) -> Path:
        return self.venv / "bin" / "starlight-rabbitmq"

    def run(self, *args: str | Path, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(arg) for arg in args],
            cwd=self.elsewhere,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _clean_env() -> dict[str, str]:
    """This process's environment without what would put the checkout or the test venv on the
    installed gateway's path."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP"}
    }
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> InstalledWheel:
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheel = dist / f"starlight_rabbitmq-{VERSION}-py3-none-any.whl"
    assert wheel.is_file(), sorted(p.name for p in dist.iterdir())
    assert (dist / f"starlight_rabbitmq-{VERSION}.tar.gz").is_file()

    venv = root / "venv"
    elsewhere = root / "cwd"
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = InstalledWheel(wheel=wheel, venv=venv, elsewhere=elsewhere)
    # Dependencies come from PyPI through pip's own cache (~/.cache/pip), as a user's would.
    pip = installed.run(
        venv / "bin" / "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        wheel,
        timeout=INSTALL_TIMEOUT,
    )
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return installed


def test_version_from_the_installed_command(installed: InstalledWheel) -> None:
    result = installed.run(installed.command, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["starlight-rabbitmq", VERSION], result.stdout


def test_the_installed_package_is_imported_not_the_checkout(installed: InstalledWheel) -> None:
    result = installed.run(installed.python, "-c", "import gateway; print(gateway.__file__)")
    assert result.returncode == 0, result.stderr
    location = Path(result.stdout.strip()).resolve()
    assert location.is_relative_to(installed.venv.resolve()), location
    assert not location.is_relative_to(REPO), location


def test_the_wheel_carries_the_native_sources_and_they_build(installed: InstalledWheel) -> None:
    """What ``make install`` does for the checkout, done from the installed package: both
    compiled modules build from the C sources inside the wheel and load (keyed by those
    sources, so a module built from the checkout's identical sources is reused)."""
    for module in ("gateway.pulsar.compiled", "gateway.amqp.compiled"):
        result = installed.run(installed.python, "-m", module, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "in use" in result.stdout, result.stdout + result.stderr
    check = installed.run(
        installed.python,
        "-c",
        "from gateway.amqp.compiled import frame_scan, module_path;"
        "print(module_path() is not None, frame_scan() is not None)",
    )
    assert check.stdout.split() == ["True", "True"], check.stdout + check.stderr


@pytest.fixture
def namespace(pulsar_stack: Any) -> Iterator[str]:
    with fresh_namespace(pulsar_stack) as name:
        yield name


def _wait_listening(process: subprocess.Popen[str], port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the gateway exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)  # polling interval of a wait with a deadline
    raise AssertionError(f"the gateway did not listen on {port} within {timeout} s")


def test_smoke_publish_and_get_through_the_installed_gateway(
    installed: InstalledWheel, pulsar_stack: Any, namespace: str, tmp_path: Path
) -> None:
    # The modules built in the test above (or by `make install`: same sources, same key).
    for module in ("gateway.pulsar.compiled", "gateway.amqp.compiled"):
        installed.run(installed.python, "-m", module, timeout=300)
    port = free_port()
    config = write_stack_config(
        tmp_path,
        pulsar_stack,
        port=port,
        namespace=namespace,
    )
    log = tmp_path / "gateway.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [str(installed.command), "-c", str(config)],
            cwd=installed.elsewhere,
            env=_clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        try:
            _wait_listening(process, port, GATEWAY_START_TIMEOUT)
        except AssertionError as error:
            raise AssertionError(f"{error}; its log:\n{log.read_text()[-4000:]}") from None
        # The reference README's smoke script (declare, publish, get, delete) as a client.
        smoke = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "smoke_pika.py"), str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr + log.read_text()[-4000:]
        assert "received message: test" in smoke.stdout, smoke.stdout
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
    text = log.read_text()
    # The installed package's modules ran, not the checkout's, and with the compiled path.
    assert "per-message calls into pulsar-client: through the compiled module" in text, text
    assert re.search(r"gateway\.server: listening on", text), text
