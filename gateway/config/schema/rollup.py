"""The rollup job's keys, the first of the gateway-specific ones."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.keys import Kind, Section, key_metadata
from gateway.config.schema.vhosts import VhostMappingKeys

# Every key of this module is in one section of the documentation.
_GW = Section.GATEWAY


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class RollupKeys(VhostMappingKeys):
    """One section of :class:`~gateway.config.schema.GatewayConfig`, in documentation order."""

    # ---- Gateway-specific ---------------------------------------------------------------
    # The rollup job's keys (`starlight-rabbitmq rollup -c`, docs/rollup.md): it reads the
    # gateway's file for the broker-client keys, so that it uses the same credentials.
    rollupWindowSeconds: tuple[int, ...] = field(
        metadata=key_metadata(
            Kind.SECONDS_LIST,
            "60,3600",
            """Rollup job: the lengths of the event-time windows it sums per vhost, in
            seconds (each length gives its own rows).""",
            _GW,
            ours=True,
        )
    )
    rollupWatermarkSeconds: int = field(
        metadata=key_metadata(
            Kind.INT,
            "120",
            """Rollup job: how late (in event time) a usage event may arrive and still be
            counted; a window's row is written once the watermark passes its end. Later
            events are dropped and counted in the job's log.""",
            _GW,
            ours=True,
            minimum=0,
        )
    )
    rollupTriggerSeconds: int = field(
        metadata=key_metadata(
            Kind.INT,
            "10",
            "Rollup job: seconds between micro-batches.",
            _GW,
            ours=True,
            minimum=1,
        )
    )
    rollupCheckpointLocation: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "rollup/checkpoint",
            """Rollup job: Spark's checkpoint directory (any Hadoop file system URL on a
            cluster). Keep it: it holds the job's position and window state.""",
            _GW,
            ours=True,
        )
    )
    rollupParquetPath: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "rollup/parquet",
            "Rollup job: directory of the Parquet output, partitioned by date. Empty: none.",
            _GW,
            ours=True,
        )
    )
    rollupPostgresUrl: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            """Rollup job: `postgresql://user:password@host:port/database` of the
            PostgreSQL output (upserted per vhost and window). Empty: none.""",
            _GW,
            ours=True,
            secret=True,
        )
    )
    rollupPostgresTable: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "vhost_throughput",
            "Rollup job: the PostgreSQL table (created if missing), `name` or `schema.name`.",
            _GW,
            ours=True,
        )
    )
    rollupSubscription: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "starlight-rollup",
            """Rollup job: the durable subscription that keeps the usage events it has not
            committed from Pulsar's retention (the job's position is in its checkpoint).""",
            _GW,
            ours=True,
        )
    )
