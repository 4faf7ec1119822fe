"""``/api/vhosts``, ``/api/permissions`` and ``/api/users``.

Vhosts are created and deleted by ``gateway/backend/vhost_admin.py`` (the code of
``starlight-rabbitmq vhosts``); over HTTP a delete takes the vhost's queues with it, as
RabbitMQ's does (the command asks for ``--force`` instead). Permissions are the gateway's own
permission store (docs/authorization.md), keyed by namespace, shown under the vhost's name.
There is no user database (principals come from JWTs and certificates): users are listed as
far as the configuration and the permissions name them, and cannot be created or deleted.
"""

from __future__ import annotations

from typing import Any

from gateway.backend.vhost_admin import VhostError, VhostInfo, VhostInvalid, VhostNotFound
from gateway.management.context import Call
from gateway.management.errors import (
    Response,
    bad_request,
    json_response,
    not_authorised,
    not_found,
    unavailable,
)
from gateway.management.listing import arrange
from gateway.management.users import require_admin
from gateway.metadata.permissions import Access, InvalidPermission, PermissionEntry
from gateway.metadata.store import MetadataUnavailable
from gateway.model.vhost import Namespace

__all__ = [
    "delete_permission",
    "delete_user",
    "delete_vhost",
    "get_permission",
    "get_user",
    "get_vhost",
    "list_permissions",
    "list_users",
    "list_vhosts",
    "put_permission",
    "put_user",
    "put_vhost",
    "user_permissions",
    "vhost_permissions",
]


def _vhost_json(call: Call, info: VhostInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "description": "",
        "tags": [],
        "default_queue_type": "classic",
        "metadata": {"description": "", "tags": []},
        "tracing": False,
        "cluster_state": {call.context.node: "running"},
        # Not in RabbitMQ's JSON: what the vhost is in Pulsar.
        "pulsar_namespace": str(info.namespace),
    }


async def list_vhosts(call: Call) -> Response:
    users = call.context.users
    visible = [info for info in await call.all_vhosts() if users.may_see(call.user, info.namespace)]
    return json_response(
        200, arrange([_vhost_json(call, i) for i in visible], call.query, ["name"])
    )


async def _existing(call: Call) -> VhostInfo:
    vhosts = call.context.vhosts
    try:
        namespace = await vhosts.exists(call.params["vhost"])
    except (VhostInvalid, VhostNotFound):
        namespace = None
    except VhostError as error:
        raise unavailable(error) from None
    if namespace is None:
        raise not_found()
    return VhostInfo(vhosts.name_of(namespace), namespace)


async def get_vhost(call: Call) -> Response:
    info = await _existing(call)
    if not call.context.users.may_see(call.user, info.namespace):
        raise not_authorised("User not authorised to access virtual host")
    return json_response(200, _vhost_json(call, info))


async def put_vhost(call: Call) -> Response:
    require_admin(call.user)
    call.body()  # description, tags, default_queue_type: accepted, not kept
    try:
        created = await call.context.vhosts.add(call.params["vhost"])
    except VhostInvalid as error:
        raise bad_request(str(error)) from None
    except VhostError as error:
        raise unavailable(error) from None
    return Response(201 if created else 204, content_type=None)


async def delete_vhost(call: Call) -> Response:
    require_admin(call.user)
    try:
        await call.context.vhosts.delete(call.params["vhost"], force=True)
    except (VhostInvalid, VhostNotFound):
        raise not_found() from None
    except VhostError as error:
        raise unavailable(error) from None
    return Response(204, content_type=None)


# ---------------------------------------------------------------------- permissions


def _permission_json(call: Call, entry: PermissionEntry) -> dict[str, Any]:
    try:
        vhost = call.context.vhosts.name_of(Namespace.parse(entry.vhost))
    except ValueError:
        vhost = entry.vhost
    return {
        "user": entry.principal,
        "vhost": vhost,
        **{access.value: entry.permissions.pattern(access) for access in Access},
    }


async def _entries(call: Call, namespace: str | None = None) -> list[PermissionEntry]:
    try:
        return await call.context.users.permissions.list(namespace)
    except MetadataUnavailable as error:
        raise unavailable(error) from None


async def list_permissions(call: Call) -> Response:
    require_admin(call.user)
    items = [_permission_json(call, entry) for entry in await _entries(call)]
    return json_response(200, arrange(items, call.query, ["vhost", "user"]))


async def vhost_permissions(call: Call) -> Response:
    require_admin(call.user)
    info = await _existing(call)
    items = [_permission_json(call, e) for e in await _entries(call, str(info.namespace))]
    return json_response(200, arrange(items, call.query, ["vhost", "user"]))


async def user_permissions(call: Call) -> Response:
    require_admin(call.user)
    name = call.params["user"]
    items = [_permission_json(call, e) for e in await _entries(call) if e.principal == name]
    return json_response(200, arrange(items, call.query, ["vhost", "user"]))


async def get_permission(call: Call) -> Response:
    require_admin(call.user)
    info = await _existing(call)
    for entry in await _entries(call, str(info.namespace)):
        if entry.principal == call.params["user"]:
            return json_response(200, _permission_json(call, entry))
    raise not_found()


async def put_permission(call: Call) -> Response:
    require_admin(call.user)
    info = await _existing(call)
    body = call.body()
    missing = [access.value for access in Access if access.value not in body]
    if missing:
        raise bad_request("[" + ",".join(f"{{key_missing,{key}}}" for key in missing) + "]")
    patterns = {access.value: body[access.value] for access in Access}
    if not all(isinstance(pattern, str) for pattern in patterns.values()):
        raise bad_request("configure, write and read must be strings")
    user = call.params["user"]
    store = call.context.users.permissions
    existed = store.lookup(str(info.namespace), user) is not None
    try:
        await store.set(str(info.namespace), user, **patterns)
    except InvalidPermission as error:
        raise bad_request(str(error)) from None
    except MetadataUnavailable as error:
        raise unavailable(error) from None
    return Response(204 if existed else 201, content_type=None)


async def delete_permission(call: Call) -> Response:
    require_admin(call.user)
    info = await _existing(call)
    try:
        cleared = await call.context.users.permissions.clear(
            str(info.namespace), call.params["user"]
        )
    except MetadataUnavailable as error:
        raise unavailable(error) from None
    if not cleared:
        raise not_found()
    return Response(204, content_type=None)


# ---------------------------------------------------------------------- users


async def _known_users(call: Call) -> dict[str, dict[str, Any]]:
    users = call.context.users
    names = {entry.principal for entry in await _entries(call)}
    names.update(users.named())
    return {name: {"name": name, "tags": list(users.tags_of(name)), "limits": {}} for name in names}


async def list_users(call: Call) -> Response:
    require_admin(call.user)
    items = list((await _known_users(call)).values())
    return json_response(200, arrange(items, call.query, ["name"]))


async def get_user(call: Call) -> Response:
    require_admin(call.user)
    found = (await _known_users(call)).get(call.params["user"])
    if found is None:
        raise not_found()
    return json_response(200, found)


NO_USER_DATABASE = (
    "users are not stored by Starlight for RabbitMQ: a user is the principal of a JWT "
    "(tokenAuthClaim) or a client certificate; give it permissions with "
    "PUT /api/permissions/{vhost}/{user}, and tags with superUserRoles or "
    "managementMonitoringRoles"
)


async def put_user(call: Call) -> Response:
    require_admin(call.user)
    raise bad_request(NO_USER_DATABASE)


async def delete_user(call: Call) -> Response:
    require_admin(call.user)
    raise bad_request(NO_USER_DATABASE)
