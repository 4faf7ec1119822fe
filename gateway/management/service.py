"""The management API of one gateway process, wired from its configuration and runtime: the
permission store it reads and writes, the vhost administration, this replica's connections and
the fleet's directory of them, and the HTTP listener (``managementListener``).

It starts once the vhosts are loaded (so that no answer comes from a half-loaded view) and
runs until the gateway stops.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from functools import partial

import trio

from gateway import __version__
from gateway.auth.authenticator import Authenticator
from gateway.auth.authorization import AuthorizingBackend
from gateway.auth.tls_config import certificate_settings_for
from gateway.auth.tls_context import build_server_context
from gateway.backend.interface import Backend
from gateway.backend.vhost_admin import VhostAdmin
from gateway.config import GatewayConfig
from gateway.management.api import ManagementApi
from gateway.management.context import Context
from gateway.management.http import ManagementServer
from gateway.management.users import User, Users
from gateway.metadata.connections import ConnectionDirectory
from gateway.metadata.permissions import ZooKeeperPermissionStore, serving_permissions
from gateway.model.vhost import VhostMapper
from gateway.server.connection_info import LocalConnections
from gateway.server.runtime import GatewayRuntime
from gateway.server.server import GatewayServer, StartupError

log = logging.getLogger("gateway.management")

__all__ = ["run_management"]


async def run_management(
    config: GatewayConfig,
    runtime: GatewayRuntime,
    server: GatewayServer,
    authenticator: Authenticator,
    *,
    node: str,
    readiness: Callable[[], Awaitable[tuple[bool, str]]] | None = None,
    reuse_port: bool = False,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the management API until cancelled; ``task_status`` gets the bound port.
    ``reuse_port``: a worker of ``--workers`` (the workers share the port)."""
    listener = config.managementListener
    assert listener is not None
    tls = (
        build_server_context(certificate_settings_for(config))
        if listener.scheme == "https"
        else None
    )
    mapper = VhostMapper.from_keys(config)
    permissions = ZooKeeperPermissionStore(
        config.configurationStoreServers, session_timeout=config.zookeeper_session_timeout
    )
    replica = runtime.store.replica_id
    directory = ConnectionDirectory(
        config.configurationStoreServers,
        replica,
        session_timeout=config.zookeeper_session_timeout,
    )
    async with serving_permissions(permissions):
        users = Users(
            authenticator,
            permissions,
            superusers=config.superUserRoles,
            monitors=config.managementMonitoringRoles,
            authorization=config.authorizationEnabled,
        )
        authorizing = AuthorizingBackend(
            runtime.backend, permissions, superusers=config.superUserRoles, mapper=mapper
        )

        def backend_for(user: User) -> Backend:
            # As on AMQP: without authorization, or for an administrator, no checks.
            if not config.authorizationEnabled or user.is_admin:
                return runtime.backend
            return authorizing

        local = LocalConnections(server, node)
        started_ms = int(time.time() * 1000)
        context = Context(
            node=node,
            cluster=config.amqpClusterName,
            product_version=config.amqpServerVersion,
            gateway_version=__version__,
            users=users,
            vhosts=VhostAdmin(runtime.admin, runtime.store, mapper, permissions),
            store=runtime.store,
            backend=runtime.backend,
            admin=runtime.admin,
            backend_for=backend_for,
            local=local,
            directory=directory,
            replica=replica,
            started_ms=started_ms,
            listeners=[
                {"node": node, "protocol": "amqp", "ip_address": host, "port": port}
                for host, port in server.bound
            ],
            readiness=readiness,
        )
        http = ManagementServer(
            listener.host, listener.port, ManagementApi(context), tls=tls, reuse_port=reuse_port
        )
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    partial(
                        directory.run,
                        local.records,
                        local.close,
                        {
                            "name": node,
                            "started_ms": started_ms,
                            "os_pid": str(os.getpid()),
                            "management": listener.url,
                        },
                        consumers=local.consumers,
                    )
                )
                try:
                    port = await nursery.start(http.serve)
                except OSError as error:
                    raise StartupError(
                        f"cannot listen on managementListener {listener}: {error.strerror or error}"
                    ) from None
                context.listeners.append(
                    {
                        "node": node,
                        "protocol": listener.scheme,
                        "ip_address": listener.host,
                        "port": port,
                    }
                )
                task_status.started(port)
        finally:
            with trio.CancelScope(shield=True):
                await directory.aclose()
