"""`starlight-rabbitmq rollup`: what it refuses before Spark is started."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BASE = (
    "brokerServiceURL=pulsar://127.0.0.1:6650\n"
    "brokerWebServiceURL=http://127.0.0.1:8080\n"
    "configurationStoreServers=127.0.0.1:2181\n"
)


def rollup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.rollup", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_configuration_without_any_output_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "gateway.conf"
    config.write_text(BASE + "rollupParquetPath=\n")
    result = rollup("-c", str(config))
    assert result.returncode == 2
    assert "configuration error: rollupParquetPath and rollupPostgresUrl" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_database_is_one_line_before_spark_starts(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "gateway.conf"
    config.write_text(BASE + f"rollupPostgresUrl=postgresql://u@127.0.0.1:{port}/db\n")
    result = rollup("-c", str(config))
    assert result.returncode == 1
    assert "cannot use rollupPostgresUrl" in result.stderr
    assert "Traceback" not in result.stderr
    assert "SparkContext" not in result.stderr


def test_bad_spark_settings_are_refused() -> None:
    result = rollup("--conf", "no-equals-sign")
    assert result.returncode == 2
    assert "expected KEY=VALUE" in result.stderr
