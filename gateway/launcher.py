"""The ``starlight-rabbitmq`` command's first step, before the gateway's own imports: the
memory allocator (allocator.py, chosen by allocator_choice.py), which can only be chosen by
re-executing the command, so it is done before anything else is loaded (importing the gateway
takes ~0.7 s of CPU)."""

from __future__ import annotations

import sys
from typing import NoReturn

from gateway.allocator_choice import choose_allocator


def run() -> NoReturn:
    choose_allocator(sys.argv[1:])
    from gateway.cli import run as run_command

    run_command()
