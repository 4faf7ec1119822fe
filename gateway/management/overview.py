"""The node- and cluster-wide endpoints: ``/api/overview``, ``/api/whoami``,
``/api/cluster-name``, ``/api/nodes``, the health checks and the aliveness test.

A RabbitMQ "node" is a gateway replica here: ``/api/nodes`` lists every live replica that runs
the management API's connection directory (metadata/connections.py), this one with its own
figures, the others with what they published about themselves.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any

import trio

from gateway.amqp import commands as cmd
from gateway.amqp.properties import MessageProperties, encode_properties
from gateway.backend.interface import Message
from gateway.management.context import Call, amqp
from gateway.management.errors import Response, json_response, not_found, unavailable
from gateway.management.users import require_monitor
from gateway.metadata.store import MetadataUnavailable

__all__ = [
    "alarms",
    "aliveness",
    "cluster_name",
    "extensions",
    "node",
    "nodes",
    "overview",
    "replica_info",
    "virtual_host_checks",
    "whoami",
]

ALIVENESS_TIMEOUT = 10.0

EXCHANGE_TYPES = [
    {
        "name": kind,
        "description": f"AMQP {kind} exchange, as per the AMQP specification",
        "enabled": True,
    }
    for kind in ("direct", "fanout", "headers", "topic")
]


def _rate(value: float = 0.0) -> dict[str, float]:
    return {"rate": value}


async def whoami(call: Call) -> Response:
    return json_response(200, {"name": call.user.name, "tags": list(call.user.tags)})


async def cluster_name(call: Call) -> Response:
    return json_response(200, {"name": call.context.cluster})


async def extensions(call: Call) -> Response:
    return json_response(200, [])


def replica_info(call: Call) -> dict[str, Any]:
    """What this replica says about itself in ``/api/nodes`` (also published for the others)."""
    context = call.context
    return _node_entry(context.node, context.started_ms, running=True)


def _node_entry(name: str, started_ms: int, *, running: bool) -> dict[str, Any]:
    uptime = max(0, int(time.time() * 1000) - started_ms) if started_ms else 0
    return {
        "name": name,
        "type": "disc",
        "running": running,
        "uptime": uptime,
        "os_pid": str(os.getpid()) if running else None,
        "processors": os.cpu_count() or 1,
        "mem_alarm": False,
        "disk_free_alarm": False,
        "partitions": [],
        "exchange_types": EXCHANGE_TYPES,
        "rates_mode": "none",
    }


async def nodes(call: Call) -> Response:
    require_monitor(call.user)
    return json_response(200, await _nodes(call))


async def node(call: Call) -> Response:
    require_monitor(call.user)
    for entry in await _nodes(call):
        if entry["name"] == call.params["node"]:
            return json_response(200, entry)
    raise not_found()


async def _nodes(call: Call) -> list[dict[str, Any]]:
    """One entry per live replica (its directory's replica node); replicas should have
    names of their own (amqpNodeName), but two of the same name are still two entries."""
    context = call.context
    found = [replica_info(call)]
    if context.directory is not None:
        try:
            replicas = await context.directory.replicas()
        except MetadataUnavailable as error:
            raise unavailable(error) from None
        for replica in replicas:
            if replica.replica == context.replica:
                continue
            info = dict(replica.info)
            name = str(info.get("name", replica.replica))
            started = int(info.get("started_ms", 0) or 0)
            found.append({**_node_entry(name, started, running=True), **info})
    return sorted(found, key=lambda entry: str(entry["name"]))


async def overview(call: Call) -> Response:
    context = call.context
    vhosts = [
        info
        for info in await call.all_vhosts()
        if call.context.users.may_use(call.user, info.namespace)
    ]
    queues = exchanges = consumers = 0
    for info in vhosts:
        try:
            view = context.store.view(str(info.namespace))
        except KeyError:
            continue  # not open on this replica: nothing to count from here
        queues += len(view.queues)
        exchanges += len(view.exchanges)
        consumers += sum(view.consumers.values())
    connections = [
        record
        for record in context.local.records().values()
        if call.user.is_monitor or record.get("user") == call.user.name
    ]
    python = platform.python_implementation() + " " + platform.python_version()
    return json_response(
        200,
        {
            "management_version": context.product_version,
            "rates_mode": "none",
            "exchange_types": EXCHANGE_TYPES,
            "product_version": context.product_version,
            "product_name": "RabbitMQ",
            "rabbitmq_version": context.product_version,
            "starlight_version": context.gateway_version,
            "cluster_name": context.cluster,
            "erlang_version": platform.python_version(),
            "erlang_full_version": f"{python} ({sys.version.splitlines()[0]})",
            "disable_stats": False,
            "enable_queue_totals": False,
            "message_stats": {},
            "churn_rates": {},
            "queue_totals": {},
            "object_totals": {
                "connections": len(connections),
                "channels": sum(int(record.get("channels", 0)) for record in connections),
                "consumers": consumers,
                "exchanges": exchanges,
                "queues": queues,
            },
            "statistics_db_event_queue": 0,
            "node": context.node,
            "listeners": context.listeners,
            "contexts": [],
        },
    )


async def alarms(call: Call) -> Response:
    """The gateway raises no memory or disk alarms (it blocks publishers on Pulsar's
    back-pressure instead): always ``ok``, as RabbitMQ answers without alarms."""
    return json_response(200, {"status": "ok"})


async def virtual_host_checks(call: Call) -> Response:
    """``ok`` when this replica is ready (docs/observability.md, /readyz); RabbitMQ's 503
    body otherwise."""
    readiness = call.context.readiness
    if readiness is not None:
        ready, text = await readiness()
        if not ready:
            return json_response(
                503, {"status": "failed", "reason": text.strip(), "virtual-hosts": []}
            )
    return json_response(200, {"status": "ok"})


async def aliveness(call: Call) -> Response:
    """RabbitMQ's aliveness test: declare ``aliveness-test`` in the vhost, publish to it and
    get the message back. Here it exercises the same path: metadata, Pulsar write, read."""
    vhost = call.params["vhost"]
    await call.namespace(vhost)
    handle = await call.vhost_for_writes(vhost)
    owner = call.owner()
    await amqp(handle.declare_queue(cmd.QueueDeclare("aliveness-test"), owner))
    body = b"test_message"
    outcome = await amqp(
        handle.publish(Message("", "aliveness-test", encode_properties(MessageProperties()), body))
    )
    await amqp(outcome.stored.durable())
    # The first Get of a queue on this replica starts its reader: the message may take a
    # moment to arrive (a bounded wait, then RabbitMQ's failure body).
    with trio.move_on_after(ALIVENESS_TIMEOUT):
        while True:
            got = await amqp(handle.get(cmd.BasicGet("aliveness-test", no_ack=False), owner))
            if got is not None:
                await amqp(got[0].ack())
                return json_response(200, {"status": "ok"})
            await trio.sleep(0.05)
    return json_response(200, {"status": "failed", "reason": "no message received"})
