"""``starlight-rabbitmq permissions set|clear|list``: who may do what in which vhost.

Like ``rabbitmqctl set_permissions|clear_permissions|list_permissions``::

    starlight-rabbitmq permissions set -c gateway.conf --vhost / alice '^alice-.*' '.*' '.*'
    starlight-rabbitmq permissions clear -c gateway.conf --vhost / alice
    starlight-rabbitmq permissions list -c gateway.conf [--vhost /]

The configuration file gives ZooKeeper (``configurationStoreServers``) and the vhost mapping
(a vhost's permissions are kept under its Pulsar namespace, so ``/x`` and ``x`` are the same
vhost). ``list`` prints tab-separated rows after a header row. Errors are one line on stderr;
the exit code is 0 on success, 1 when ZooKeeper cannot be reached or refuses, 2 for a wrong
command line, configuration, vhost or pattern.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence
from typing import Final, TextIO

import trio

from gateway.auth.admin_command import (
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    common_options,
    run_command,
    zookeeper_store,
)
from gateway.auth.authorization import permission_scope
from gateway.config import GatewayConfig
from gateway.metadata.permissions import (
    DEFAULT_PREFIX,
    Access,
    InvalidPermission,
    PermissionEntry,
    Permissions,
    ZooKeeperPermissionStore,
)
from gateway.metadata.store import MetadataUnavailable
from gateway.model.vhost import InvalidVhost, VhostMapper

__all__ = ["run_permissions_command"]

PROG: Final = "starlight-rabbitmq permissions"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Manage per-vhost permissions (configure, write and read regular "
        "expressions over exchange and queue names), as rabbitmqctl does. They apply when "
        "authorizationEnabled=true.",
    )
    common = common_options(
        config_help="the gateway's configuration file (for configurationStoreServers and the "
        "vhost mapping); STARLIGHT_<key> environment variables override it",
        timeout=10.0,
        quiet_help="no informational messages, and no header row in list",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="{set,clear,list}")

    setter = actions.add_parser(
        "set", parents=[common], help="give a user permissions in a vhost (replacing any)"
    )
    setter.add_argument("-p", "--vhost", default="/", help="the vhost (default: /)")
    setter.add_argument("user", help="the principal (what authentication yields)")
    for access in Access:
        setter.add_argument(
            access.value,
            help=f"regular expression of the names the user may {access} ('' for none)",
        )

    clearer = actions.add_parser(
        "clear", parents=[common], help="take a user's permissions in a vhost away"
    )
    clearer.add_argument("-p", "--vhost", default="/", help="the vhost (default: /)")
    clearer.add_argument("user")

    lister = actions.add_parser("list", parents=[common], help="show permissions")
    lister.add_argument(
        "-p", "--vhost", default=None, help="only this vhost (default: every vhost)"
    )
    return parser


def _cell(text: str) -> str:
    # One row per line and one column per tab, whatever is in a name or pattern.
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _row(cells: Sequence[str]) -> str:
    return "\t".join(_cell(cell) for cell in cells)


def _patterns(entry: PermissionEntry) -> list[str]:
    return [entry.permissions.pattern(access) for access in Access]


class _Usage(Exception):
    """Bad input: exit code 2."""


async def _execute(
    args: argparse.Namespace,
    config: GatewayConfig,
    mapper: VhostMapper,
    out: TextIO,
    err: TextIO,
    *,
    prefix: str,
) -> None:
    if not config.authorizationEnabled and not args.quiet:
        print(
            f"{PROG}: note: authorizationEnabled is false in this configuration: the gateway "
            "does not check these permissions until it is true",
            file=err,
        )
    scope = None if args.vhost is None else _scope(mapper, args.vhost)
    store = zookeeper_store(ZooKeeperPermissionStore, config, prefix, args.timeout)
    try:
        if args.action == "set":
            assert scope is not None
            Permissions(args.configure, args.write, args.read)  # a bad pattern: say so first
            if not args.quiet:
                print(
                    f'Setting permissions for user "{args.user}" in vhost "{args.vhost}" '
                    f"({scope}) ...",
                    file=out,
                )
            await store.set(scope, args.user, args.configure, args.write, args.read)
        elif args.action == "clear":
            assert scope is not None
            if not args.quiet:
                print(
                    f'Clearing permissions for user "{args.user}" in vhost "{args.vhost}" '
                    f"({scope}) ...",
                    file=out,
                )
            if not await store.clear(scope, args.user):
                print(
                    f"{PROG}: note: user {args.user!r} had no permissions in vhost {args.vhost!r}",
                    file=err,
                )
        else:
            entries = await store.list(scope)
            if scope is None:
                if not args.quiet:
                    print(_row(["vhost", "user", *Access]), file=out)
                for entry in entries:
                    print(_row([entry.vhost, entry.principal, *_patterns(entry)]), file=out)
            else:
                if not args.quiet:
                    print(_row(["user", *Access]), file=out)
                for entry in entries:
                    print(_row([entry.principal, *_patterns(entry)]), file=out)
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()


def _scope(mapper: VhostMapper, vhost: str) -> str:
    try:
        return permission_scope(mapper, vhost)
    except InvalidVhost as error:
        raise _Usage(f"no such vhost {vhost!r}: {error.reason}") from None


def run_permissions_command(
    argv: Sequence[str],
    *,
    prefix: str = DEFAULT_PREFIX,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``starlight-rabbitmq permissions <argv>``; returns the exit code.

    ``prefix`` is the metadata prefix in ZooKeeper (tests use one of their own).
    """
    return run_command(
        PROG,
        _parser(),
        argv,
        functools.partial(_execute, prefix=prefix),
        failures=[
            ((_Usage, InvalidPermission), EXIT_USAGE),
            (MetadataUnavailable, EXIT_UNAVAILABLE),
        ],
        loggers=["kazoo"],
        stdout=stdout,
        stderr=stderr,
    )


if __name__ == "__main__":
    sys.exit(run_permissions_command(sys.argv[1:]))
