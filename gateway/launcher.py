"""The ``starlight-rabbitmq`` command's first step, before the gateway's own imports: the
memory allocator (allocator.py), which can only be chosen by re-executing the command, so it is
done before anything else is loaded (importing the gateway takes ~0.7 s of CPU)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from gateway import allocator
from gateway.config import ConfigError, load_config

# The command's subcommands run short jobs of their own: no allocator to choose.
_SUBCOMMANDS = ("permissions", "rollup")


def run() -> NoReturn:
    arguments = sys.argv[1:]
    if arguments[:1] and arguments[0] in _SUBCOMMANDS:
        _run_command()
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-c", "--config")
    parser.add_argument("--worker-index")
    known, _ = parser.parse_known_args(arguments)
    # A worker inherits its supervisor's allocator; a configuration error (or --help) is the
    # command's to report.
    if known.worker_index is None:
        try:
            choice = load_config(known.config).gatewayMemoryAllocator
        except ConfigError:
            choice = allocator.SYSTEM
        try:
            allocator.use(choice)
        except allocator.AllocatorUnavailable as error:
            print(f"starlight-rabbitmq: configuration error: {error}", file=sys.stderr)
            sys.exit(2)  # the command's code for a configuration error (cli.py)
    _run_command()


def _run_command() -> NoReturn:
    from gateway.cli import run as run_command

    run_command()
