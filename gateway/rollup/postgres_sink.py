"""The PostgreSQL output: one row per (vhost, window), upserted.

The job writes a window's row once, when the watermark has passed the window's end, and a
replayed batch writes the very same row again: ``INSERT ... ON CONFLICT (vhost, window_seconds,
window_start) DO UPDATE`` with the new values makes the replay a no-op. All rows of a batch go
in one transaction, so a crash leaves either none or all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import psycopg
from psycopg import sql

from gateway.rollup.rows import OUTPUT_COLUMNS

__all__ = ["KEY_COLUMNS", "PostgresSink"]

KEY_COLUMNS: Final = ("vhost", "window_seconds", "window_start")

_TYPES: Final = {
    "vhost": "text",
    "namespace": "text",
    "window_seconds": "integer",
    "window_start": "timestamptz",
    "window_end": "timestamptz",
    "date": "date",
    "replicas": "integer",
}


def _column_type(name: str) -> str:
    return _TYPES.get(name, "bigint")


class PostgresSink:
    def __init__(self, url: str, table: str) -> None:
        self.url = url
        self.table = sql.Identifier(*table.split("."))

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url, connect_timeout=10, application_name="starlight-rollup")

    def create_table(self) -> None:
        columns = sql.SQL(", ").join(
            sql.SQL("{} {} NOT NULL").format(sql.Identifier(name), sql.SQL(_column_type(name)))
            for name in OUTPUT_COLUMNS
        )
        statement = sql.SQL(
            "CREATE TABLE IF NOT EXISTS {table} ({columns}, "
            "updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY ({key}))"
        ).format(
            table=self.table,
            columns=columns,
            key=sql.SQL(", ").join(map(sql.Identifier, KEY_COLUMNS)),
        )
        with self._connect() as connection:
            connection.execute(statement)

    def upsert(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Write ``rows`` (dicts of :data:`OUTPUT_COLUMNS`) in one transaction."""
        if not rows:
            return
        updated = [name for name in OUTPUT_COLUMNS if name not in KEY_COLUMNS]
        statement = sql.SQL(
            "INSERT INTO {table} ({columns}) VALUES ({values}) "
            "ON CONFLICT ({key}) DO UPDATE SET {updates}, updated_at = now()"
        ).format(
            table=self.table,
            columns=sql.SQL(", ").join(map(sql.Identifier, OUTPUT_COLUMNS)),
            values=sql.SQL(", ").join(sql.Placeholder(name) for name in OUTPUT_COLUMNS),
            key=sql.SQL(", ").join(map(sql.Identifier, KEY_COLUMNS)),
            updates=sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(name)) for name in updated
            ),
        )
        with self._connect() as connection, connection.cursor() as cursor:
            cursor.executemany(statement, [dict(row) for row in rows])
