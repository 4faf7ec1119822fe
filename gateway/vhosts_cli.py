"""``starlight-rabbitmq vhosts add|delete|list``: vhosts as ``rabbitmqctl add_vhost``,
``delete_vhost`` and ``list_vhosts`` manage them, on the Pulsar namespaces they map to::

    starlight-rabbitmq vhosts add    -c gateway.conf orders
    starlight-rabbitmq vhosts delete -c gateway.conf orders [--force]
    starlight-rabbitmq vhosts list   -c gateway.conf

The configuration file gives Pulsar's admin API (``brokerWebServiceURL`` and the broker-client
credentials), ZooKeeper (``configurationStoreServers``) and the vhost mapping. The work is
``gateway/backend/vhost_admin.py``'s, the same the management API's ``/api/vhosts`` does.
Errors are one line on stderr; exit codes: 0 done, 1 Pulsar or ZooKeeper unreachable or
refusing, 2 a wrong command line, configuration or vhost name, 3 refused (no such vhost, or it
has queues and ``--force`` was not given).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Final, TextIO

import trio

from gateway.auth.admin_command import (
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    common_options,
    run_command,
    zookeeper_store,
)
from gateway.backend.vhost_admin import (
    VhostAdmin,
    VhostError,
    VhostInUse,
    VhostInvalid,
    VhostNotFound,
)
from gateway.broker_access import broker_access_with_trust_file
from gateway.config import ConfigError, GatewayConfig
from gateway.metadata.permissions import DEFAULT_PREFIX, ZooKeeperPermissionStore
from gateway.metadata.store import MetadataUnavailable
from gateway.metadata.zookeeper import ZooKeeperMetadataStore
from gateway.model.vhost import VhostMapper
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.credentials import (
    CredentialsError,
    admin_client,
    load_credentials,
)

__all__ = ["run_vhosts_command"]

PROG: Final = "starlight-rabbitmq vhosts"
EXIT_REFUSED: Final = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Manage vhosts (the Pulsar tenant/namespace each maps to), as rabbitmqctl "
        "add_vhost / delete_vhost / list_vhosts do.",
    )
    common = common_options(
        config_help="the gateway's configuration file (Pulsar's admin API and credentials, "
        "configurationStoreServers, the vhost mapping); STARLIGHT_<key> environment variables "
        "override it",
        timeout=30.0,
        quiet_help="no informational messages",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="{add,delete,list}")
    adder = actions.add_parser(
        "add", parents=[common], help="create a vhost: its Pulsar tenant (if missing) and namespace"
    )
    adder.add_argument("vhost", help="the vhost: /, name or tenant/namespace")
    deleter = actions.add_parser(
        "delete", parents=[common], help="delete a vhost: its namespace, topics and metadata"
    )
    deleter.add_argument("vhost")
    deleter.add_argument(
        "--force",
        action="store_true",
        help="delete it even when it has queues (their messages are lost)",
    )
    lister = actions.add_parser("list", parents=[common], help="show the vhosts")
    lister.set_defaults(vhost=None)
    return parser


def _admin_for(config: GatewayConfig, files: ExitStack) -> PulsarAdmin:
    """The admin client the gateway itself would use (app.py's broker-client keys)."""
    try:
        access = broker_access_with_trust_file(config, files)
        return admin_client(access, load_credentials(access))
    except CredentialsError as error:
        raise ConfigError(str(error)) from None


async def _execute(
    args: argparse.Namespace,
    config: GatewayConfig,
    mapper: VhostMapper,
    out: TextIO,
    err: TextIO,
    *,
    prefix: str,
) -> None:
    with ExitStack() as files:
        admin = _admin_for(config, files)
        store = zookeeper_store(ZooKeeperMetadataStore, config, prefix, args.timeout)
        permissions = zookeeper_store(ZooKeeperPermissionStore, config, prefix, args.timeout)
        vhosts = VhostAdmin(admin, store, mapper, permissions)
        try:
            # A bad name is said before anything is asked of Pulsar.
            namespace = None if args.vhost is None else vhosts.namespace_of(args.vhost)
            if args.action == "add":
                if not args.quiet:
                    print(f'Adding vhost "{args.vhost}" ({namespace}) ...', file=out)
                if not await vhosts.add(args.vhost):
                    print(f"{PROG}: note: vhost {args.vhost!r} exists already", file=err)
            elif args.action == "delete":
                if not args.quiet:
                    print(f'Deleting vhost "{args.vhost}" ({namespace}) ...', file=out)
                await vhosts.delete(args.vhost, force=args.force)
            else:
                if not args.quiet:
                    print("name\tnamespace", file=out)
                for info in await vhosts.list():
                    print(f"{info.name}\t{info.namespace}", file=out)
        finally:
            with trio.CancelScope(shield=True):
                await store.aclose()
                await permissions.aclose()
                await admin.aclose()


def run_vhosts_command(
    argv: Sequence[str],
    *,
    prefix: str = DEFAULT_PREFIX,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``starlight-rabbitmq vhosts <argv>``; returns the exit code. ``prefix`` is the
    metadata prefix in ZooKeeper (tests use one of their own)."""
    return run_command(
        PROG,
        _parser(),
        argv,
        functools.partial(_execute, prefix=prefix),
        failures=[
            (VhostInvalid, EXIT_USAGE),
            ((VhostNotFound, VhostInUse), EXIT_REFUSED),
            ((VhostError, MetadataUnavailable), EXIT_UNAVAILABLE),
        ],
        loggers=["kazoo", "httpx", "httpcore"],
        stdout=stdout,
        stderr=stderr,
    )


if __name__ == "__main__":
    sys.exit(run_vhosts_command(sys.argv[1:]))
