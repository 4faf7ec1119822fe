"""What the rollup job runs with, taken from the gateway's configuration file.

The job reads the same file as the gateway (``starlight-rabbitmq rollup -c gateway.conf``): the
broker-client keys give it the gateway's Pulsar credentials, and the ``rollup*`` keys its own
settings. Credentials are resolved here, on the driver (a token file is read once); executors
get the token itself and the paths of the TLS files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from gateway.broker_access import broker_access
from gateway.config import ConfigError, GatewayConfig
from gateway.pulsar.credentials import CredentialsError, load_credentials, trust_file

__all__ = ["RollupSettings", "settings_from_config"]

# `name` or `schema.name`, unquoted PostgreSQL identifiers.
_TABLE_RE: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


@dataclass(frozen=True, slots=True)
class RollupSettings:
    topic: str
    subscription: str
    window_seconds: tuple[int, ...]
    watermark_seconds: int
    trigger_seconds: int
    checkpoint_location: str
    parquet_path: str  # "" = no Parquet output
    postgres_url: str  # "" = no PostgreSQL output
    postgres_table: str
    #: The options of the Pulsar source (pulsar_source.SourceOptions), credentials included.
    source_options: dict[str, str]

    def __repr__(self) -> str:
        # Never print the token or the database password.
        return (
            f"RollupSettings(topic={self.topic!r}, windows={self.window_seconds}, "
            f"watermark={self.watermark_seconds}s, trigger={self.trigger_seconds}s, "
            f"checkpoint={self.checkpoint_location!r}, parquet={self.parquet_path!r}, "
            f"postgres={'yes' if self.postgres_url else 'no'})"
        )


def settings_from_config(config: GatewayConfig, topic: str | None = None) -> RollupSettings:
    """ConfigError (naming the key) for a setting the job cannot run with."""
    if not config.rollupParquetPath and not config.rollupPostgresUrl:
        raise ConfigError(
            "rollupParquetPath and rollupPostgresUrl are both empty: the rollup job needs "
            "at least one output",
            key="rollupParquetPath",
        )
    if not config.rollupSubscription:
        raise ConfigError("rollupSubscription: must not be empty", key="rollupSubscription")
    if not _TABLE_RE.match(config.rollupPostgresTable):
        raise ConfigError(
            f"rollupPostgresTable: {config.rollupPostgresTable!r} is not name or schema.name "
            "(letters, digits, _)",
            key="rollupPostgresTable",
        )
    if config.rollupPostgresUrl and not config.rollupPostgresUrl.startswith(
        ("postgresql://", "postgres://")
    ):
        raise ConfigError(
            "rollupPostgresUrl: expected postgresql://user:password@host:port/database",
            key="rollupPostgresUrl",
        )
    if config.brokerClientTlsEnabledWithKeyStore:
        raise ConfigError(
            "brokerClientTlsEnabledWithKeyStore: the rollup job's executors need a PEM file; "
            "set brokerClientTrustCertsFilePath instead",
            key="brokerClientTlsEnabledWithKeyStore",
        )
    access = broker_access(config)
    try:
        credentials = load_credentials(access)
        trust = trust_file(access) if access.binary_tls else ""
    except CredentialsError as error:
        raise ConfigError(str(error), key=access.params_key) from None
    # Where the replicas publish (--topic overrides it).
    topic = topic or config.usageEventsTopic
    options = {
        "serviceUrl": config.brokerServiceURL,
        "topic": topic,
        "subscription": config.rollupSubscription,
        "token": credentials.token or "",
        "tlsCertFile": credentials.cert_file or "",
        "tlsKeyFile": credentials.key_file or "",
        "tlsTrustCertsFile": trust,
        "tlsAllowInsecureConnection": str(access.allow_insecure).lower(),
        "tlsHostnameVerification": str(access.verify_hostname).lower(),
    }
    return RollupSettings(
        topic=topic,
        subscription=config.rollupSubscription,
        window_seconds=config.rollupWindowSeconds,
        watermark_seconds=config.rollupWatermarkSeconds,
        trigger_seconds=config.rollupTriggerSeconds,
        checkpoint_location=config.rollupCheckpointLocation,
        parquet_path=config.rollupParquetPath,
        postgres_url=config.rollupPostgresUrl,
        postgres_table=config.rollupPostgresTable,
        source_options=options,
    )
