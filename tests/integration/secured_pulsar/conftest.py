"""The secured Pulsar profile (token + TLS authentication, authorization, TLS-only ports) for
the tests of the gateway against it.

`secured_pulsar` starts `python3 scripts/stack.py up --profile secured` once per session if it
is not up, and stops it at the end only if this session started it, exactly as `pulsar_stack`
does for the default stack (which it never touches). Its start time is printed in the session's
output, since it is what this directory adds to `make test`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.integration.secured_pulsar.support import SecuredStack
from tests.support.pulsar_gateway import namespace_of_its_own
from tests.support.stack_script import load_stack_module

TENANT = "public"


@pytest.fixture(scope="session")
def secured_pulsar(request: pytest.FixtureRequest) -> Iterator[SecuredStack]:
    stack = load_stack_module()
    began = time.monotonic()
    started_here: bool = stack.ensure_up(profile=stack.SECURED)
    if started_here:
        _report(request, f"secured Pulsar profile started in {time.monotonic() - began:.1f} s")
    try:
        yield SecuredStack.from_info(stack.secured_info())
    finally:
        if started_here:
            stack.down(profile=stack.SECURED)


def _report(request: pytest.FixtureRequest, line: str) -> None:
    """A line in the session's output (output capture is suspended, or it would be hidden)."""
    manager = request.config.pluginmanager
    reporter, capture = manager.get_plugin("terminalreporter"), manager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


@pytest.fixture(scope="module")
def secured_namespace(secured_pulsar: SecuredStack) -> Iterator[str]:
    """``public/t-<random>`` created with the superuser token; afterwards deleted with
    everything in it, and the gateway's metadata of it removed from ZooKeeper."""
    with (
        secured_pulsar.admin_http() as admin,
        namespace_of_its_own(admin, secured_pulsar.zookeeper, TENANT) as name,
    ):
        yield name
