"""dashboards/rollup-throughput.json against the real table: every panel's and variable's SQL
runs on PostgreSQL (Grafana's macros expanded as Grafana does) over rows the sink wrote."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.rollup.postgres_sink import PostgresSink
from gateway.rollup.rows import OUTPUT_COLUMNS
from tests.support.postgres import PostgresServer, running_postgres

DASHBOARD = Path(__file__).resolve().parents[3] / "dashboards" / "rollup-throughput.json"
START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with running_postgres() as server:
        yield server


def row(vhost: str, minute: int, published: int, peak: int) -> dict[str, Any]:
    start = START + timedelta(minutes=minute)
    values: dict[str, Any] = dict.fromkeys(OUTPUT_COLUMNS, 0)
    values.update(
        vhost=vhost,
        namespace=f"public/{vhost.strip('/')}",
        window_seconds=60,
        window_start=start,
        window_end=start + timedelta(minutes=1),
        published_messages=published,
        published_bytes=published * 100,
        routed_messages=published,
        delivered_messages=published // 2,
        peak_connections=peak,
        events=6,
        replicas=1,
        batch_id=1,
        date=start.date(),
    )
    return values


def expand(sql: str) -> str:
    """Grafana's macros and this dashboard's variables, as Grafana would substitute them."""
    sql = re.sub(
        r"\$__timeFilter\((\w+)\)",
        r"\1 BETWEEN '2026-01-01T00:00:00Z' AND '2026-01-02T00:00:00Z'",
        sql,
    )
    return sql.replace("$window", "60").replace("$vhost", "'a','/b'")


def every_query(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable["query"]
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            yield f"panel {panel['title']!r}", target["rawSql"]


def test_every_query_of_the_dashboard_runs_on_the_rollup_table(postgres: PostgresServer) -> None:
    sink = PostgresSink(postgres.url, "vhost_throughput")
    sink.create_table()
    sink.upsert([row("a", 0, 600, 3), row("a", 1, 1200, 5), row("/b", 0, 60, 1)])
    dashboard = json.loads(DASHBOARD.read_text())
    results = {}
    with psycopg.connect(postgres.url) as connection:
        for name, sql in every_query(dashboard):
            results[name] = connection.execute(expand(sql)).fetchall()
            assert results[name], f"{name} returned nothing"
    # Per-second rates: 600 messages in a 60 s window are 10/s.
    published = results["panel 'Published messages/s per vhost'"]
    assert (START, "a", 10.0) in [tuple(record) for record in published]
    totals = {
        record[0]: record for record in results["panel 'Totals over the time range per vhost'"]
    }
    assert totals["a"][2] == 1800 and totals["/b"][2] == 60


def test_the_dashboard_is_importable_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "starlight-rollup-throughput"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
