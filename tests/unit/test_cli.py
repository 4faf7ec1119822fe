"""gateway/cli.py: ``starlight-rabbitmq --help`` lists every subcommand, and each subcommand
keeps its own ``--help``."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from gateway import cli


def _help(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """What ``argv --help`` prints; its exit code is 0 (argparse's exit, or a subcommand's
    runner returning argparse's code)."""
    try:
        code = cli.main(argv)
    except SystemExit as stopped:
        code = stopped.code
    assert code == 0
    return capsys.readouterr().out


def test_the_subcommands_are_the_dispatched_ones() -> None:
    assert set(cli.SUBCOMMANDS) == {"rollup", "permissions", "vhosts"}


def test_help_lists_every_subcommand_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(capsys, ["--help"])
    commands = out.split("\ncommands:\n", 1)[1]
    for name, summary in cli.SUBCOMMANDS.items():
        assert re.search(rf"^  {name} +{re.escape(summary)}$", commands, re.MULTILINE), name
    # The gateway's own options are still there.
    assert "--workers N" in out


@pytest.mark.parametrize("name", sorted(cli.SUBCOMMANDS))
def test_each_subcommand_keeps_its_own_help(capsys: pytest.CaptureFixture[str], name: str) -> None:
    out = _help(capsys, [name, "--help"])
    assert out.startswith(f"usage: starlight-rabbitmq {name} ")


def test_the_installed_command_prints_the_list() -> None:
    # As the console script runs it: launcher.py (the allocator first), then the cli.
    done = subprocess.run(
        [sys.executable, "-c", "from gateway.launcher import run; run()", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert all(f"\n  {name} " in done.stdout for name in cli.SUBCOMMANDS)
