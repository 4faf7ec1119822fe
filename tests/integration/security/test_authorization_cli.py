"""``starlight-rabbitmq permissions set|clear|list`` against the real ZooKeeper.

Most tests call the function with a ZooKeeper prefix of their own (deleted afterwards); one
runs ``python -m gateway.auth.permissions_cli`` as a process, under the production prefix, in
a vhost of its own that it removes again.
"""

from __future__ import annotations

import io
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from kazoo.client import KazooClient

from gateway.auth.permissions_cli import run_permissions_command
from gateway.metadata.paths import encode_name
from gateway.metadata.permissions import PermissionEntry, Permissions, ZooKeeperPermissionStore
from tests.conftest import REPO_DIR, StackEndpoints
from tests.support.zookeeper import kazoo_client, unique_prefix

pytestmark = pytest.mark.integration


@pytest.fixture
def zk(pulsar_stack: StackEndpoints) -> Iterator[KazooClient]:
    with kazoo_client(pulsar_stack.zookeeper) as client:
        yield client


@pytest.fixture
def prefix(zk: KazooClient) -> Iterator[str]:
    name = unique_prefix()
    yield name
    zk.delete(name, recursive=True)


def _write_config(path: Path, zookeeper: str, extra: str = "") -> Path:
    path.write_text(
        f"configurationStoreServers={zookeeper}\n"
        "brokerServiceURL=pulsar://127.0.0.1:6650\n"
        "brokerWebServiceURL=http://127.0.0.1:8080\n" + extra,
        encoding="utf-8",
    )
    return path


@pytest.fixture
def config(tmp_path: Path, pulsar_stack: StackEndpoints) -> Path:
    return _write_config(tmp_path / "gateway.conf", pulsar_stack.zookeeper)


class Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code = code
        self.out = out
        self.err = err

    @property
    def rows(self) -> list[list[str]]:
        return [line.split("\t") for line in self.out.splitlines()]


def _run(prefix: str, *argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = run_permissions_command(list(argv), prefix=prefix, stdout=out, stderr=err)
    return Result(code, out.getvalue(), err.getvalue())


def _stored(zookeeper: str, prefix: str, vhost: str | None = None) -> list[PermissionEntry]:
    async def read() -> list[PermissionEntry]:
        async with ZooKeeperPermissionStore(zookeeper, prefix=prefix) as store:
            return await store.list(vhost)

    return trio.run(read)


def test_set_list_clear(prefix: str, config: Path, pulsar_stack: StackEndpoints) -> None:
    c = str(config)
    done = _run(prefix, "set", "-c", c, "--vhost", "/", "alice", "^alice-.*", ".*", "")
    assert done.code == 0, done.err
    assert done.out == 'Setting permissions for user "alice" in vhost "/" (public/default) ...\n'
    assert _run(prefix, "set", "-c", c, "bob", "", "", "^in$").code == 0  # --vhost is / by default
    assert _stored(pulsar_stack.zookeeper, prefix, "public/default") == [
        PermissionEntry("public/default", "alice", Permissions("^alice-.*", ".*", "")),
        PermissionEntry("public/default", "bob", Permissions("", "", "^in$")),
    ]

    listed = _run(prefix, "list", "-c", c, "--vhost", "/")
    assert listed.code == 0
    assert listed.rows == [
        ["user", "configure", "write", "read"],
        ["alice", "^alice-.*", ".*", ""],
        ["bob", "", "", "^in$"],
    ]
    # Replacing is a set again; -q drops the header (and the messages).
    assert _run(prefix, "set", "-q", "-c", c, "-p", "/", "alice", "", "", "").out == ""
    assert _run(prefix, "list", "-q", "-c", c, "-p", "/").rows == [
        ["alice", "", "", ""],
        ["bob", "", "", "^in$"],
    ]

    cleared = _run(prefix, "clear", "-c", c, "--vhost", "/", "alice")
    assert cleared.code == 0
    assert (
        cleared.out == 'Clearing permissions for user "alice" in vhost "/" (public/default) ...\n'
    )
    assert [e.principal for e in _stored(pulsar_stack.zookeeper, prefix)] == ["bob"]
    again = _run(prefix, "clear", "-c", c, "alice")
    assert again.code == 0 and "had no permissions" in again.err


def test_list_every_vhost_and_aliases(prefix: str, config: Path) -> None:
    c = str(config)
    assert _run(prefix, "set", "-c", c, "-p", "/x", "u", ".*", "", "").code == 0
    assert _run(prefix, "set", "-c", c, "-p", "t/n", "CN=a,O=tab\there", "", ".*", "").code == 0
    assert _run(prefix, "set", "-c", c, "-p", "/", "v", "", "", ".*").code == 0
    # x, /x and public/x are one vhost (one Pulsar namespace): one set of permissions.
    assert _run(prefix, "list", "-q", "-c", c, "-p", "x").rows == [["u", ".*", "", ""]]
    assert _run(prefix, "list", "-q", "-c", c, "-p", "public/x").rows == [["u", ".*", "", ""]]
    listed = _run(prefix, "list", "-c", c)
    assert listed.rows == [
        ["vhost", "user", "configure", "write", "read"],
        ["public/default", "v", "", "", ".*"],
        ["public/x", "u", ".*", "", ""],
        ["t/n", "CN=a,O=tab\\there", "", ".*", ""],  # a tab in a name cannot split a row
    ]


def test_the_mapping_follows_the_configuration(
    prefix: str, tmp_path: Path, pulsar_stack: StackEndpoints
) -> None:
    mapped = _write_config(
        tmp_path / "mapped.conf",
        pulsar_stack.zookeeper,
        "amqpDefaultTenant=acme\namqpMapShortVhostToTenant=true\n",
    )
    assert _run(prefix, "set", "-c", str(mapped), "-p", "/", "u", "", "", "").code == 0
    assert _run(prefix, "set", "-c", str(mapped), "-p", "shop", "u", "", "", "").code == 0
    assert [e.vhost for e in _stored(pulsar_stack.zookeeper, prefix)] == [
        "acme/default",
        "shop/default",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["set", "u", ".*", "(", ".*"], "invalid write pattern '(': missing ), unterminated"),
        (["set", "u", "*", "", ""], "invalid configure pattern '*'"),
        (["set", "-p", "/a/b/c", "u", "", "", ""], "no such vhost '/a/b/c': 3 segments"),
        (["clear", "-p", "bad vhost", "u"], "no such vhost 'bad vhost': character(s) ' '"),
        (["list", "-p", "//"], "no such vhost '//': empty segment"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    prefix: str, config: Path, pulsar_stack: StackEndpoints, argv: list[str], message: str
) -> None:
    action, *rest = argv
    result = _run(prefix, action, "-c", str(config), *rest)
    assert result.code == 2
    lines = [line for line in result.err.splitlines() if "note:" not in line]
    assert len(lines) == 1 and lines[0].startswith("starlight-rabbitmq permissions: ")
    assert message in lines[0]
    assert result.out == ""
    assert _stored(pulsar_stack.zookeeper, prefix) == []


def test_usage_and_configuration_errors_exit_2(prefix: str, tmp_path: Path) -> None:
    assert _run(prefix, "set", "only-a-user").code == 2  # argparse: missing arguments
    assert _run(prefix, "frobnicate").code == 2
    assert _run(prefix).code == 2
    missing = tmp_path / "missing.conf"
    missing.write_text("brokerServiceURL=pulsar://127.0.0.1:6650\n", encoding="utf-8")
    result = _run(prefix, "list", "-c", str(missing))
    assert result.code == 2
    assert "configuration error: missing required key" in result.err
    assert "configurationStoreServers" in result.err
    assert len(result.err.splitlines()) == 1


def test_unreachable_zookeeper_is_one_line_and_exit_1(prefix: str, tmp_path: Path) -> None:
    nowhere = _write_config(tmp_path / "nowhere.conf", "127.0.0.1:1")
    for argv in (["list"], ["set", "u", "", "", ""], ["clear", "u"]):
        action, *rest = argv
        result = _run(prefix, action, "-q", "-c", str(nowhere), "--timeout", "1", *rest)
        assert result.code == 1
        assert result.err == (
            "starlight-rabbitmq permissions: cannot connect to ZooKeeper at 127.0.0.1:1 within "
            "1 s: Connection time-out\n"
        )


def test_authorization_off_is_pointed_out(
    prefix: str, config: Path, tmp_path: Path, pulsar_stack: StackEndpoints
) -> None:
    result = _run(prefix, "list", "-c", str(config))
    assert "authorizationEnabled is false" in result.err
    enabled = _write_config(
        tmp_path / "enabled.conf",
        pulsar_stack.zookeeper,
        "authenticationEnabled=true\nauthorizationEnabled=true\ntokenSecretKey="
        "data:;base64,c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA==\n",
    )
    quiet = _run(prefix, "list", "-c", str(enabled))
    assert quiet.code == 0, quiet.err
    assert quiet.err == ""


def test_as_a_process(zk: KazooClient, config: Path, pulsar_stack: StackEndpoints) -> None:
    vhost = f"/t-cli-{uuid.uuid4().hex[:8]}"
    scope = f"public/{vhost[1:]}"
    command = [sys.executable, "-m", "gateway.auth.permissions_cli"]

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *argv, "-c", str(config)],
            capture_output=True,
            text=True,
            cwd=REPO_DIR,
            timeout=60,
            check=False,
        )

    try:
        assert run("set", "-p", vhost, "proc-user", ".*", ".*", ".*").returncode == 0
        listed = run("list", "-p", vhost)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines()[1:] == ["proc-user\t.*\t.*\t.*"]
        assert run("clear", "-p", vhost, "proc-user").returncode == 0
        assert run("list", "-q", "-p", vhost).stdout == ""
        bad = run("set", "-p", vhost, "proc-user", "(", "", "")
        assert bad.returncode == 2 and "invalid configure pattern" in bad.stderr
    finally:
        zk.delete(f"/starlight-rabbitmq/permissions/{encode_name(scope)}", recursive=True)
