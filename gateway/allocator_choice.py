"""Which memory allocator the command runs with (allocator.py), chosen from its configuration
before the gateway's own imports: ``launcher.py`` (the installed command) and ``python -m
gateway.cli`` both call :func:`choose_allocator` first, then the command (``cli.run``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gateway import allocator
from gateway.config import ConfigError, load_config

# The command's subcommands run short jobs of their own: no allocator to choose.
_SUBCOMMANDS = ("permissions", "rollup")


def choose_allocator(arguments: Sequence[str]) -> None:
    """Re-execute the command with the configured allocator preloaded, if it is not yet (see
    ``allocator.use``); return when the process runs with it, or needs none."""
    if arguments[:1] and arguments[0] in _SUBCOMMANDS:
        return
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-c", "--config")
    parser.add_argument("--worker-index")
    known, _ = parser.parse_known_args(list(arguments))
    # A worker inherits its supervisor's allocator; a configuration error (or --help) is the
    # command's to report.
    if known.worker_index is not None:
        return
    try:
        choice = load_config(known.config).gatewayMemoryAllocator
    except ConfigError:
        choice = allocator.SYSTEM
    try:
        allocator.use(choice)
    except allocator.AllocatorUnavailable as error:
        print(f"starlight-rabbitmq: configuration error: {error}", file=sys.stderr)
        sys.exit(2)  # the command's code for a configuration error (cli.py)
