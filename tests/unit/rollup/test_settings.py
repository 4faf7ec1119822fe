"""The rollup job's settings, from the gateway's configuration file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, config_from_text
from gateway.observability.usage_event import DEFAULT_TOPIC
from gateway.rollup.pulsar_source import SourceOptions
from gateway.rollup.settings import settings_from_config

BASE = (
    "brokerServiceURL=pulsar://127.0.0.1:6650\n"
    "brokerWebServiceURL=http://127.0.0.1:8080\n"
    "configurationStoreServers=127.0.0.1:2181\n"
)


def test_defaults() -> None:
    settings = settings_from_config(config_from_text(BASE, {}))
    assert settings.topic == DEFAULT_TOPIC
    assert settings.window_seconds == (60, 3600)
    assert settings.watermark_seconds == 120
    assert settings.parquet_path == "rollup/parquet"
    assert settings.postgres_url == ""
    options = SourceOptions.parse(settings.source_options)
    assert options.service_url == "pulsar://127.0.0.1:6650"
    assert options.subscription == "starlight-rollup"
    assert options.token == ""


def test_windows_are_whole_seconds_sorted_and_distinct() -> None:
    config = config_from_text(BASE + "rollupWindowSeconds=3600, 300,60,300\n", {})
    assert config.rollupWindowSeconds == (60, 300, 3600)
    for bad in ("", "1m", "0", "-5", "1.5"):
        with pytest.raises(ConfigError, match="rollupWindowSeconds"):
            config_from_text(BASE + f"rollupWindowSeconds={bad}\n", {})


def test_the_token_is_read_once_on_the_driver(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("eyJhbGciOiJIUzI1NiJ9.e30.c2ln\n")
    config = config_from_text(
        BASE
        + "brokerClientAuthenticationPlugin=token\n"
        + f"brokerClientAuthenticationParameters=file://{token_file}\n",
        {},
    )
    settings = settings_from_config(config, topic="persistent://t/n/events")
    assert settings.topic == "persistent://t/n/events"
    assert settings.source_options["token"] == "eyJhbGciOiJIUzI1NiJ9.e30.c2ln"
    # Never in a log line.
    assert "eyJ" not in repr(settings)


def test_a_missing_token_file_is_a_configuration_error(tmp_path: Path) -> None:
    config = config_from_text(
        BASE
        + "brokerClientAuthenticationPlugin=token\n"
        + f"brokerClientAuthenticationParameters=file://{tmp_path / 'absent'}\n",
        {},
    )
    with pytest.raises(ConfigError, match="brokerClientAuthenticationParameters"):
        settings_from_config(config)


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("rollupParquetPath=\n", "rollupParquetPath"),
        ("rollupSubscription=\n", "rollupSubscription"),
        ("rollupPostgresTable=drop table x\n", "rollupPostgresTable"),
        ("rollupPostgresUrl=mysql://h/db\n", "rollupPostgresUrl"),
    ],
)
def test_settings_the_job_cannot_run_with_name_their_key(extra: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_config(config_from_text(BASE + extra, {}))
    assert caught.value.key == key
    assert key in str(caught.value)


def test_a_postgres_password_stays_out_of_the_settings_repr() -> None:
    config = config_from_text(
        BASE + "rollupPostgresUrl=postgresql://rollup:s3cret@db:5432/metrics\n", {}
    )
    assert "s3cret" not in repr(settings_from_config(config))


def test_source_options_are_checked() -> None:
    with pytest.raises(ValueError, match="missing option"):
        SourceOptions.parse({"serviceUrl": "pulsar://h:6650"})
    with pytest.raises(ValueError, match="startingOffsets"):
        SourceOptions.parse(
            {"serviceUrl": "u", "topic": "t", "subscription": "s", "startingOffsets": "middle"}
        )
