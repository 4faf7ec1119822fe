"""The rollup job's Pulsar source on the secured stack, with the gateway's own broker-client
keys: a token read from a file (once, on the driver) over TLS to the brokers."""

from __future__ import annotations

from pathlib import Path

import pulsar
from pyspark.sql.streaming.datasource import ReadAllAvailable

from gateway.rollup.pulsar_source import ROW_FIELDS, SourceOptions, UsageEventStreamReader
from gateway.rollup.settings import settings_from_config
from gateway.server.usage_publisher import usage_schema
from tests.integration.secured_pulsar.support import SecuredStack, gateway_config, token_settings
from tests.support.usage_events import event

T0 = 1_767_225_600_000


def test_the_source_reads_with_the_gateways_token_over_tls(
    secured_pulsar: SecuredStack, secured_namespace: str, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(secured_pulsar.superuser_token + "\n")
    config = gateway_config(
        secured_pulsar, secured_namespace, token_settings(secured_pulsar, f"file://{token_file}")
    )
    topic = f"persistent://public/{secured_namespace}/usage-events"
    settings = settings_from_config(config, topic=topic)
    options = SourceOptions.parse(settings.source_options)
    assert options.service_url.startswith("pulsar+ssl://")
    assert options.token == secured_pulsar.superuser_token
    assert options.tls_trust_certs_file == secured_pulsar.ca_cert

    client = pulsar.Client(
        secured_pulsar.broker_url,
        authentication=pulsar.AuthenticationToken(secured_pulsar.superuser_token),
        tls_trust_certs_file_path=secured_pulsar.ca_cert,
    )
    reader = UsageEventStreamReader(options)
    try:
        producer = client.create_producer(topic, schema=usage_schema())
        for i in range(3):
            producer.send(event(i, vhost="v", start_ms=T0 + i))
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        rows = [
            dict(zip(ROW_FIELDS, row, strict=True))
            for part in reader.partitions(start, end)
            for row in reader.read(part)
        ]
        assert [row["event_id"] for row in rows] == ["r1:0", "r1:1", "r1:2"]
        reader.commit(end)
    finally:
        reader.stop()
        client.close()
