#!/usr/bin/env python3
"""Generate the Grafana dashboards of dashboards/ from the panel lists below.

    .venv/bin/python scripts/dashboards.py            # rewrite dashboards/*.json
    .venv/bin/python scripts/dashboards.py --check    # exit 1 if a file differs

Written in Python rather than by hand so that every query joins on ``rabbitmq_identity_info``
the same way (RabbitMQ's own dashboards do: ``* on(instance, job) group_left(...)
rabbitmq_identity_info{...}``), and so that tests/integration/observability evaluates exactly
these queries on a real Prometheus. Each panel is (title, what it answers, queries, unit).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARDS_DIR = Path(__file__).resolve().parents[1] / "dashboards"

# The join every query makes: series of the selected cluster and replicas only, labelled with
# rabbitmq_node (and rabbitmq_cluster) from the identity series of the same scrape target.
JOIN = (
    " * on(instance, job) group_left(rabbitmq_cluster, rabbitmq_node) "
    'rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", '
    'rabbitmq_node=~"$rabbitmq_node"}'
)
RATE = "$__rate_interval"


def joined(expression: str) -> str:
    return f"({expression}){JOIN}"


def rate(metric: str, selector: str = "") -> str:
    return joined(f"rate({metric}{selector}[{RATE}])")


@dataclass(frozen=True)
class Panel:
    title: str
    description: str  # the question it answers
    queries: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"


def stat(title: str, description: str, query: str, unit: str = "short") -> Panel:
    return Panel(title, description, ((query, ""),), unit, "stat")


def series(title: str, description: str, *queries: tuple[str, str], unit: str = "short") -> Panel:
    return Panel(title, description, tuple(queries), unit)


VHOST = '{vhost=~"$vhost"}'

OVERVIEW: tuple[Panel, ...] = (
    stat(
        "Incoming messages / s",
        "Messages published to the fleet per second (Basic.Publish received).",
        f"sum({rate('rabbitmq_global_messages_received_total')})",
        "ops",
    ),
    stat(
        "Outgoing messages / s",
        "Messages delivered by the fleet per second (Basic.Deliver and Basic.Get-Ok).",
        f"sum({rate('rabbitmq_global_messages_delivered_total')})",
        "ops",
    ),
    stat(
        "Replicas",
        "Gateway replicas scraped in this cluster.",
        'count(rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", '
        'rabbitmq_node=~"$rabbitmq_node"})',
    ),
    stat("Connections", "Open AMQP connections.", f"sum({joined('rabbitmq_connections')})"),
    stat("Channels", "Open channels.", f"sum({joined('rabbitmq_channels')})"),
    stat("Consumers", "Basic.Consume consumers.", f"sum({joined('rabbitmq_global_consumers')})"),
    stat(
        "Publishers",
        "Channels that have published.",
        f"sum({joined('rabbitmq_global_publishers')})",
    ),
    stat(
        "Queues",
        "Queues (counted by each vhost's leader replica, so once each).",
        f"sum({joined('rabbitmq_queues')})",
    ),
    stat(
        "Ready messages",
        "Messages waiting in queues (Pulsar backlog less unacknowledged, refreshed every 15 s).",
        f"sum({joined('rabbitmq_queue_messages_ready')})",
    ),
    stat(
        "Unacknowledged messages",
        "Messages delivered and not yet acknowledged.",
        f"sum({joined('rabbitmq_queue_messages_unacked')})",
    ),
    series(
        "Messages published / s per replica",
        "Which replicas take the publish load.",
        (
            f"sum by (rabbitmq_node) ({rate('rabbitmq_global_messages_received_total')})",
            "{{rabbitmq_node}}",
        ),
        unit="ops",
    ),
    series(
        "Messages delivered / s per replica",
        "Deliveries to consumers (manual and automatic ack) per replica.",
        (
            "sum by (rabbitmq_node) ("
            f"{rate('rabbitmq_global_messages_delivered_consume_manual_ack_total')} + "
            f"{rate('rabbitmq_global_messages_delivered_consume_auto_ack_total')})",
            "{{rabbitmq_node}}",
        ),
        unit="ops",
    ),
    series(
        "Messages confirmed / s per replica",
        "Publisher confirms sent (Basic.Ack to publishers).",
        (
            f"sum by (rabbitmq_node) ({rate('rabbitmq_global_messages_confirmed_total')})",
            "{{rabbitmq_node}}",
        ),
        unit="ops",
    ),
    series(
        "Messages routed / s per replica",
        "Published messages that reached at least one queue.",
        (
            f"sum by (rabbitmq_node) ({rate('rabbitmq_global_messages_routed_total')})",
            "{{rabbitmq_node}}",
        ),
        unit="ops",
    ),
    series(
        "Unroutable messages / s",
        "Published to no queue: returned (mandatory) or dropped.",
        (f"sum({rate('rabbitmq_global_messages_unroutable_returned_total')})", "returned"),
        (f"sum({rate('rabbitmq_global_messages_unroutable_dropped_total')})", "dropped"),
        unit="ops",
    ),
    series(
        "Acknowledged and redelivered / s",
        "Client acknowledgements, and deliveries marked redelivered.",
        (f"sum({rate('rabbitmq_global_messages_acknowledged_total')})", "acknowledged"),
        (f"sum({rate('rabbitmq_global_messages_redelivered_total')})", "redelivered"),
        unit="ops",
    ),
    series(
        "Basic.Get / s",
        "Polling: messages fetched with Basic.Get, and gets that found the queue empty.",
        (f"sum({rate('rabbitmq_global_messages_delivered_get_auto_ack_total')})", "auto ack"),
        (f"sum({rate('rabbitmq_global_messages_delivered_get_manual_ack_total')})", "manual ack"),
        (f"sum({rate('rabbitmq_global_messages_get_empty_total')})", "empty"),
        unit="ops",
    ),
    series(
        "Messages published / s per vhost",
        "Which vhosts (tenants) publish.",
        (
            f"sum by (vhost) ({rate('starlight_vhost_messages_published_total', VHOST)})",
            "{{vhost}}",
        ),
        unit="ops",
    ),
    series(
        "Messages delivered / s per vhost",
        "Which vhosts consume.",
        (
            f"sum by (vhost) ({rate('starlight_vhost_messages_delivered_total', VHOST)})",
            "{{vhost}}",
        ),
        unit="ops",
    ),
    series(
        "Published bytes / s per vhost",
        "Body bytes published per vhost.",
        (f"sum by (vhost) ({rate('starlight_vhost_published_bytes_total', VHOST)})", "{{vhost}}"),
        unit="Bps",
    ),
    series(
        "Connections per vhost",
        "Open connections per vhost.",
        (f"sum by (vhost) ({joined('starlight_vhost_connections' + VHOST)})", "{{vhost}}"),
    ),
    series(
        "Ready messages per queue (top 10)",
        "The deepest queues.",
        (
            f"topk(10, sum by (vhost, queue) ({joined('rabbitmq_queue_messages_ready' + VHOST)}))",
            "{{vhost}} {{queue}}",
        ),
    ),
    series(
        "Connections opened and closed / s",
        "Connection churn (clients reconnecting in a loop show here).",
        (f"sum({rate('rabbitmq_connections_opened_total')})", "opened"),
        (f"sum({rate('rabbitmq_connections_closed_total')})", "closed"),
        unit="ops",
    ),
)

FLEET: tuple[Panel, ...] = (
    stat(
        "Replicas ready",
        "Replicas whose every readiness check passes (/readyz 200).",
        f"sum(min by (rabbitmq_node) ({joined('starlight_ready')}))",
    ),
    series(
        "Readiness checks failing",
        "Per replica, the /readyz checks that fail (listening, zookeeper, pulsar, metadata, "
        "not_draining): 0 everywhere is healthy.",
        (
            f"sum by (rabbitmq_node, check) (1 - {joined('starlight_ready')})",
            "{{rabbitmq_node}} {{check}}",
        ),
    ),
    series(
        "ZooKeeper session connected",
        "1 while a replica's ZooKeeper session is connected.",
        (joined("starlight_zookeeper_connected"), "{{rabbitmq_node}}"),
    ),
    series(
        "Metadata watch lag",
        "Seconds from a metadata write on one replica (an exchange or queue declared, a "
        "binding with arguments) to another replica's view showing it, from the znode's "
        "ZooKeeper mtime: how stale a replica's view can be. Seconds mean a replica that was "
        "disconnected from ZooKeeper and caught up.",
        (
            "histogram_quantile(0.5, sum by (le) "
            f"({rate('starlight_metadata_watch_lag_seconds_bucket')}))",
            "p50",
        ),
        (
            "histogram_quantile(0.99, sum by (le) "
            f"({rate('starlight_metadata_watch_lag_seconds_bucket')}))",
            "p99",
        ),
        unit="s",
    ),
    series(
        "Namespaces led per replica",
        "How the leader-elected work (reaper, cleaner, reconciler, queue stats) spreads.",
        (f"sum by (rabbitmq_node) ({joined('starlight_leader')})", "{{rabbitmq_node}}"),
    ),
    series(
        "Leaders per namespace",
        "Exactly 1 for every namespace; 0 means nobody does its cleanup, 2 a split.",
        (f"sum by (pulsar_namespace) ({joined('starlight_leader')})", "{{pulsar_namespace}}"),
    ),
    series(
        "Leader rounds / s by job",
        "Reaper, cleaner and reconciler rounds done.",
        (f"sum by (task) ({rate('starlight_leader_rounds_total')})", "{{task}}"),
        unit="ops",
    ),
    series(
        "Leader round failures / s",
        "Rounds that failed (ZooKeeper or Pulsar unavailable).",
        (f"sum({rate('starlight_leader_round_failures_total')}) or vector(0)", "failures"),
        unit="ops",
    ),
    series(
        "Queues and subscriptions removed by leaders",
        "Reaper deletions (dead exclusive owners, abandoned auto-delete queues) and cleaner "
        "subscription removals, over the range.",
        (f"sum(increase(starlight_leader_removals_total[$__range]){JOIN}) or vector(0)", "removed"),
    ),
    series(
        "Process memory per replica",
        "Resident memory of each gateway process.",
        (joined("rabbitmq_process_resident_memory_bytes"), "{{rabbitmq_node}}"),
        unit="bytes",
    ),
    series(
        "File descriptors available",
        "Descriptors left before the process limit.",
        (joined("rabbitmq_process_max_fds - rabbitmq_process_open_fds"), "{{rabbitmq_node}}"),
    ),
    series(
        "Uptime per replica",
        "Seconds since each replica started (restarts show as drops).",
        (joined("rabbitmq_erlang_uptime_seconds"), "{{rabbitmq_node}}"),
        unit="s",
    ),
    series(
        "Usage events / s",
        "Usage events published to Pulsar for the rollup, and failed attempts (kept for the "
        "next window).",
        (f"sum({rate('starlight_usage_events_published_total')})", "published"),
        (f"sum({rate('starlight_usage_event_failures_total')})", "failed"),
        unit="ops",
    ),
)

PULSAR: tuple[Panel, ...] = (
    series(
        "Publish → confirm latency",
        "Seconds from Basic.Publish to its Basic.Ack (stored in Pulsar), sampled 1 in 16.",
        (
            "histogram_quantile(0.5, sum by (le) "
            f"({rate('starlight_publish_confirm_seconds_bucket')}))",
            "p50",
        ),
        (
            "histogram_quantile(0.99, sum by (le) "
            f"({rate('starlight_publish_confirm_seconds_bucket')}))",
            "p99",
        ),
        unit="s",
    ),
    series(
        "Publish → confirm latency p99 per replica",
        "Which replica's path to Pulsar is slow.",
        (
            "histogram_quantile(0.99, sum by (le, rabbitmq_node) "
            f"({rate('starlight_publish_confirm_seconds_bucket')}))",
            "{{rabbitmq_node}}",
        ),
        unit="s",
    ),
    series(
        "Pulsar send latency",
        "Seconds from the gateway's send to Pulsar's answer (sampled 1 in 16): the Pulsar part "
        "of publish → confirm.",
        (
            "histogram_quantile(0.5, sum by (le) "
            f"({rate('starlight_pulsar_send_seconds_bucket')}))",
            "p50",
        ),
        (
            "histogram_quantile(0.99, sum by (le) "
            f"({rate('starlight_pulsar_send_seconds_bucket')}))",
            "p99",
        ),
        unit="s",
    ),
    series(
        "Unconfirmed publishes / s",
        "Published on confirm channels minus confirmed, per second: above 0 for long means "
        "Pulsar is not keeping up.",
        (
            f"sum({rate('rabbitmq_global_messages_received_confirm_total')}) - "
            f"sum({rate('rabbitmq_global_messages_confirmed_total')})",
            "unconfirmed",
        ),
        unit="ops",
    ),
    series(
        "Blocked connections",
        "Connections whose publish waits on Pulsar (back-pressure; Connection.Blocked sent).",
        (
            f"sum by (rabbitmq_node) ({joined('starlight_blocked_connections')})",
            "{{rabbitmq_node}}",
        ),
    ),
    series(
        "Connections blocked / s",
        "How often back-pressure starts.",
        (f"sum({rate('starlight_connection_blocked_total')}) or vector(0)", "blocked"),
        unit="ops",
    ),
    series(
        "Pulsar producers and consumers",
        "Pulsar clients the replicas hold open (producers per topic, consumers per binding).",
        (
            f"sum by (rabbitmq_node) ({joined('starlight_pulsar_producers')})",
            "{{rabbitmq_node}} producers",
        ),
        (
            f"sum by (rabbitmq_node) ({joined('starlight_pulsar_consumers')})",
            "{{rabbitmq_node}} consumers",
        ),
    ),
    series(
        "AMQP bytes in / out per replica",
        "Client traffic on the wire.",
        (
            f"sum by (rabbitmq_node) ({rate('rabbitmq_connection_incoming_bytes_total')})",
            "{{rabbitmq_node}} in",
        ),
        (
            f"sum by (rabbitmq_node) ({rate('rabbitmq_connection_outgoing_bytes_total')})",
            "{{rabbitmq_node}} out",
        ),
        unit="Bps",
    ),
    series(
        "Protocol errors / s by reply code",
        "Channel.Close / Connection.Close sent for an error (404 not found, 406 precondition, "
        "...).",
        (
            f"sum by (reply_code) ({rate('starlight_protocol_errors_total')}) or vector(0)",
            "{{reply_code}}",
        ),
        unit="ops",
    ),
    series(
        "Authentication failures / s by mechanism",
        "Refused logins.",
        (
            f"sum by (mechanism) ({rate('starlight_auth_failures_total')}) or vector(0)",
            "{{mechanism}}",
        ),
        unit="ops",
    ),
)


def variables() -> list[dict[str, Any]]:
    datasource = {"type": "prometheus", "uid": "${datasource}"}

    def query(name: str, label: str, definition: str, include_all: bool) -> dict[str, Any]:
        return {
            "name": name,
            "label": label,
            "type": "query",
            "datasource": datasource,
            "definition": definition,
            "query": {"query": definition, "refId": f"{name}-variable"},
            "refresh": 2,
            "includeAll": include_all,
            "multi": include_all,
            "allValue": ".*" if include_all else None,
            "current": {},
            "sort": 1,
        }

    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
        },
        query(
            "rabbitmq_cluster",
            "Cluster",
            "label_values(rabbitmq_identity_info, rabbitmq_cluster)",
            False,
        ),
        query(
            "rabbitmq_node",
            "Replica",
            'label_values(rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster"}, '
            "rabbitmq_node)",
            True,
        ),
        query("vhost", "Vhost", "label_values(starlight_vhost_connections, vhost)", True),
    ]


def dashboard(uid: str, title: str, panels: tuple[Panel, ...]) -> dict[str, Any]:
    built: list[dict[str, Any]] = []
    x = y = 0
    for index, panel in enumerate(panels):
        width, height = (4, 4) if panel.kind == "stat" else (12, 8)
        if x + width > 24:
            x, y = 0, y + height
        built.append(
            {
                "id": index + 1,
                "type": panel.kind,
                "title": panel.title,
                "description": panel.description,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"x": x, "y": y, "w": width, "h": height},
                "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
                "targets": [
                    {
                        "refId": chr(ord("A") + number),
                        "expr": expression,
                        "legendFormat": legend,
                        "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    }
                    for number, (expression, legend) in enumerate(panel.queries)
                ],
            }
        )
        x += width
    return {
        "uid": uid,
        "title": title,
        "tags": ["starlight-rabbitmq", "rabbitmq", "pulsar"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": variables()},
        "panels": built,
    }


DASHBOARDS: dict[str, dict[str, Any]] = {
    "gateway-overview.json": dashboard(
        "starlight-gateway-overview", "Starlight for RabbitMQ: Gateway overview", OVERVIEW
    ),
    "fleet-metadata.json": dashboard(
        "starlight-fleet-metadata", "Starlight for RabbitMQ: Fleet & metadata", FLEET
    ),
    "pulsar-path.json": dashboard(
        "starlight-pulsar-path", "Starlight for RabbitMQ: Pulsar path", PULSAR
    ),
}


def render(content: dict[str, Any]) -> str:
    return json.dumps(content, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name, content in DASHBOARDS.items():
        path = DASHBOARDS_DIR / name
        text = render(content)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date: {', '.join(stale)} (run scripts/dashboards.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
