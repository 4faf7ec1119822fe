"""What the ``permissions`` and ``vhosts`` commands share: their common options, the
configuration and vhost mapping they start from, their ZooKeeper stores, and quiet libraries.

Both are short-lived administration commands that talk to the gateway's ZooKeeper with the
gateway's own configuration file; each says what went wrong once, in one line.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Final, TextIO, TypeVar

import trio

from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.model.vhost import VhostMapper

__all__ = [
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "common_options",
    "quiet_loggers",
    "run_command",
    "start_command",
    "zookeeper_store",
]

_Store = TypeVar("_Store")

#: What a command does once started: (args, config, mapper, stdout, stderr).
Execute = Callable[
    [argparse.Namespace, GatewayConfig, VhostMapper, TextIO, TextIO], Awaitable[None]
]
#: The errors a command says in one line, in the order they are matched, with their exit codes.
Failures = Sequence[tuple[type[Exception] | tuple[type[Exception], ...], int]]

# The exit codes both commands give (the vhosts command has one more, for a refusal).
EXIT_OK: Final = 0
#: ZooKeeper (or Pulsar) cannot be reached, or refuses.
EXIT_UNAVAILABLE: Final = 1
#: A wrong command line or configuration.
EXIT_USAGE: Final = 2


def common_options(*, config_help: str, timeout: float, quiet_help: str) -> argparse.ArgumentParser:
    """The parent parser of every action: ``-c/--config``, ``--timeout``, ``-q/--quiet``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-c", "--config", metavar="FILE", help=config_help)
    common.add_argument(
        "--timeout",
        type=float,
        default=timeout,
        metavar="SECONDS",
        help=f"give up when ZooKeeper does not answer within this time (default: {timeout:g})",
    )
    common.add_argument("-q", "--quiet", action="store_true", help=quiet_help)
    return common


def start_command(
    prog: str, parser: argparse.ArgumentParser, argv: Sequence[str], err: TextIO
) -> tuple[argparse.Namespace, GatewayConfig, VhostMapper] | int:
    """The parsed arguments, the configuration file they name and its vhost mapping; or the
    exit code when there is nothing to run: argparse's own (it has printed the usage and the
    error, or the help), or EXIT_USAGE once a wrong configuration is said on ``err``."""
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    try:
        config = load_config(args.config)
        mapper = VhostMapper.from_keys(config)
    except (ConfigError, ValueError) as error:
        print(f"{prog}: configuration error: {error}", file=err)
        return EXIT_USAGE
    return args, config, mapper


def run_command(
    prog: str,
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    execute: Execute,
    *,
    failures: Failures,
    loggers: Sequence[str],
    stdout: TextIO | None,
    stderr: TextIO | None,
) -> int:
    """Start the command (start_command) and run ``execute`` in trio with ``loggers``
    quiet; returns the exit code: EXIT_OK, EXIT_USAGE for a wrong configuration, or that of
    the first of ``failures`` the error raised is one of; the error is said in one line on
    stderr (any other propagates)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    started = start_command(prog, parser, argv, err)
    if isinstance(started, int):
        return started
    args, config, mapper = started
    try:
        with quiet_loggers(*loggers):
            trio.run(execute, args, config, mapper, out, err)
    except ConfigError as error:
        print(f"{prog}: configuration error: {error}", file=err)
        return EXIT_USAGE
    except Exception as error:
        for kinds, code in failures:
            if isinstance(error, kinds):
                print(f"{prog}: {error}", file=err)
                return code
        raise
    return EXIT_OK


def zookeeper_store(
    kind: Callable[..., _Store], config: GatewayConfig, prefix: str, timeout: float
) -> _Store:
    """A ZooKeeper-backed store of ``kind`` on the configuration's servers, under ``prefix``,
    giving up on connecting and on each request after the command's ``timeout``."""
    return kind(
        config.configurationStoreServers,
        prefix=prefix,
        session_timeout=config.zookeeper_session_timeout,
        connect_timeout=timeout,
        request_timeout=timeout,
    )


@contextmanager
def quiet_loggers(*names: str) -> Iterator[None]:
    """Silence the named libraries' loggers (kazoo logs every failed connection attempt, httpx
    every request) for the command's run; their levels come back after."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
