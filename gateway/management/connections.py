"""``/api/connections``, ``/api/channels`` and ``/api/consumers``, fleet-wide.

Any replica lists every replica's connections and consumers: its own from memory (current to
the moment), the others' from their records in ZooKeeper (metadata/connections.py: written
within a second of a change). ``DELETE /api/connections/{name}`` closes a connection
wherever it is: at once when it is this replica's, through a close request the owner watches
otherwise; the client gets Connection.Close 320 ``CONNECTION_FORCED - <X-Reason>`` as from
RabbitMQ.

Who sees what is RabbitMQ's: administrators and monitoring users every connection and
consumer, management users those of their own connections; only administrators close other
users' connections.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from gateway.management.context import Call, Context
from gateway.management.errors import (
    ApiError,
    Response,
    json_response,
    not_authorised,
    not_found,
    unavailable,
)
from gateway.management.listing import arrange
from gateway.metadata.connections import ConnectionDirectory, RemoteConnection, RemoteConsumers
from gateway.metadata.store import MetadataUnavailable

__all__ = [
    "close_connection",
    "connection_channels",
    "consumer_json",
    "get_connection",
    "held_at_most",
    "list_channels",
    "list_connections",
    "list_consumers",
    "queue_consumers",
]

#: RabbitMQ's reason when DELETE /api/connections/{name} has no X-Reason header.
DEFAULT_REASON = "Closed via management plugin"
#: /api/consumers' order without ``sort`` (RabbitMQ's default keys, vhost and name, are no
#: consumer's: its order is its statistics tables'; this one is stable).
CONSUMERS_SORT = ("queue.vhost", "queue.name", "channel_details.name", "consumer_tag")


class _Held:
    """A connection and where it lives."""

    def __init__(self, replica: str, connection: str, info: Mapping[str, Any], local: bool):
        self.replica = replica
        self.connection = connection
        self.info = info
        self.local = local

    def shown(self) -> dict[str, Any]:
        return {key: value for key, value in self.info.items() if not key.startswith("_")}


_Remote = TypeVar("_Remote", RemoteConnection, RemoteConsumers)


async def _other_replicas(
    context: Context, read: Callable[[ConnectionDirectory], Awaitable[list[_Remote]]]
) -> list[_Remote]:
    """The other replicas' records that ``read`` lists from the fleet's directory (none
    without one); 503 when ZooKeeper cannot answer."""
    if context.directory is None:
        return []
    try:
        entries = await read(context.directory)
    except MetadataUnavailable as error:
        raise unavailable(error) from None
    return [entry for entry in entries if entry.replica != context.replica]


async def _all(call: Call) -> list[_Held]:
    context = call.context
    held = [
        _Held(context.replica, connection, info, True)
        for connection, info in context.local.records().items()
    ]
    held.extend(
        _Held(entry.replica, entry.connection, entry.info, False)
        for entry in await _other_replicas(context, lambda directory: directory.connections())
    )
    if call.user.is_monitor:
        return held
    return [entry for entry in held if entry.info.get("user") == call.user.name]


async def _vhost_filter(call: Call) -> Callable[[str], bool] | None:
    """For a path with a vhost (404 when it does not exist): whether a connection's vhost
    is that one (under any of its spellings, ``/x`` or ``x``); None without one."""
    if "vhost" not in call.params:
        return None
    namespace = await call.namespace(call.params["vhost"])
    names = {call.vhost_name(namespace)}
    mapper = call.context.vhosts.mapper
    return lambda vhost: _same_vhost(mapper, vhost, namespace, names)


async def _visible(call: Call) -> list[_Held]:
    vhost = await _vhost_filter(call)
    found = await _all(call)
    if vhost is not None:
        found = [entry for entry in found if vhost(str(entry.info.get("vhost", "")))]
    return found


def _same_vhost(mapper: Any, vhost: str, namespace: Any, names: set[str]) -> bool:
    if vhost in names:
        return True
    try:
        return bool(mapper.namespace_for(vhost) == namespace)
    except Exception:
        return False


async def list_connections(call: Call) -> Response:
    items = [entry.shown() for entry in await _visible(call)]
    return json_response(200, arrange(items, call.query, ["name"]))


async def _named(call: Call) -> _Held:
    name = call.params["name"]
    for entry in await _all(call):
        if entry.info.get("name") == name:
            return entry
    raise not_found()


async def get_connection(call: Call) -> Response:
    return json_response(200, (await _named(call)).shown())


async def close_connection(call: Call) -> Response:
    entry = await _named(call)
    if not call.user.is_admin and entry.info.get("user") != call.user.name:
        raise not_authorised("User not authorised to access object")
    reason = call.request.headers.get("x-reason") or DEFAULT_REASON
    context = call.context
    if entry.local:
        await context.local.close(entry.connection, reason)
        return Response(204, content_type=None)
    assert context.directory is not None  # a remote entry came from it
    try:
        done = await context.directory.request_close(
            entry.replica, entry.connection, reason, call.user.name
        )
    except MetadataUnavailable as error:
        raise unavailable(error) from None
    if not done and any(
        other.connection == entry.connection and other.replica == entry.replica
        for other in await _all(call)
    ):
        raise ApiError(
            503,
            "service_unavailable",
            f"replica {entry.replica} did not act on the close request in time",
        )
    return Response(204, content_type=None)


def channel_json(connection: Mapping[str, Any], number: int) -> dict[str, Any]:
    """RabbitMQ's ``/api/channels`` entry for channel ``number`` of ``connection``."""
    return {
        "name": f"{connection.get('name')} ({number})",
        "number": number,
        "node": connection.get("node"),
        "user": connection.get("user"),
        "user_who_performed_action": connection.get("user"),
        "vhost": connection.get("vhost"),
        "state": "running",
        "connection_details": {
            "name": connection.get("name"),
            "peer_host": connection.get("peer_host"),
            "peer_port": connection.get("peer_port"),
        },
    }


def _channels(entries: list[_Held]) -> list[dict[str, Any]]:
    return [
        channel_json(entry.info, int(number))
        for entry in entries
        for number in entry.info.get("_channel_numbers", ())
    ]


async def list_channels(call: Call) -> Response:
    return json_response(200, arrange(_channels(await _visible(call)), call.query, ["name"]))


async def connection_channels(call: Call) -> Response:
    return json_response(200, arrange(_channels([await _named(call)]), call.query, ["name"]))


def consumer_json(about: Mapping[str, Any], consumer: Mapping[str, Any]) -> dict[str, Any]:
    """RabbitMQ's ``/api/consumers`` entry for ``consumer`` (its record's compact form,
    server/connection_info.py) of the connection ``about`` describes."""
    number = consumer.get("channel")
    return {
        "arguments": consumer.get("arguments", {}),
        "ack_required": consumer.get("ack_required"),
        "active": consumer.get("active"),
        "activity_status": consumer.get("activity_status"),
        "channel_details": {
            "connection_name": about.get("name"),
            "name": f"{about.get('name')} ({number})",
            "node": about.get("node"),
            "number": number,
            "peer_host": about.get("peer_host"),
            "peer_port": about.get("peer_port"),
            "user": about.get("user"),
        },
        "consumer_tag": consumer.get("consumer_tag"),
        "exclusive": consumer.get("exclusive"),
        "prefetch_count": consumer.get("prefetch_count"),
        "queue": {"name": consumer.get("queue"), "vhost": about.get("vhost")},
    }


Group = tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]


async def _groups(call: Call) -> list[Group]:
    """Every consumer of the fleet with its connection: this replica's from memory, the
    others' from their records (at most a second behind)."""
    context = call.context
    groups: list[Group] = [
        (group.about, group.consumers) for group in context.local.consumers().values()
    ]
    groups.extend(
        (entry.about, entry.consumers)
        for entry in await _other_replicas(context, lambda directory: directory.consumers())
    )
    return groups


async def queue_consumers(call: Call) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(namespace, queue) -> the queue's consumers across the fleet, in ``/api/consumers``'
    shape (a queue's ``consumer_details``, and what its consumers may hold)."""
    mapper = call.context.vhosts.mapper
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for about, consumers in await _groups(call):
        try:
            namespace = str(mapper.namespace_for(str(about.get("vhost", "/"))))
        except Exception:
            continue  # a vhost name no longer valid: no queue of it is listed
        for consumer in consumers:
            key = (namespace, str(consumer.get("queue")))
            found.setdefault(key, []).append(consumer_json(about, consumer))
    for listed in found.values():
        listed.sort(key=lambda c: (c["channel_details"]["name"], c["consumer_tag"]))
    return found


def held_at_most(consumers: Sequence[Mapping[str, Any]]) -> float:
    """The most deliveries ``consumers`` (one queue's) may hold unacknowledged: the sum of
    their prefetch counts; a no-ack consumer holds none, one without a limit any number."""
    most = 0.0
    for consumer in consumers:
        if consumer.get("ack_required"):
            most += consumer.get("prefetch_count") or math.inf
    return most


async def list_consumers(call: Call) -> Response:
    """Every consumer of the fleet; a management user sees those of their own connections
    (RabbitMQ's ``filter_user``)."""
    vhost = await _vhost_filter(call)
    groups = await _groups(call)
    items = [
        consumer_json(about, consumer)
        for about, consumers in groups
        if (call.user.is_monitor or about.get("user") == call.user.name)
        and (vhost is None or vhost(str(about.get("vhost", ""))))
        for consumer in consumers
    ]
    return json_response(200, arrange(items, call.query, CONSUMERS_SORT))
