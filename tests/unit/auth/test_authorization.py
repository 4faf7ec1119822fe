"""The authorization rules, on the memory backend: who may open a vhost, and which access each
operation needs (RabbitMQ's table, in RabbitMQ's order of checks)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.amqp import commands as cmd
from gateway.amqp.errors import AMQPError, ReplyCode
from gateway.amqp.fieldtable import Field
from gateway.auth.authorization import AuthorizingBackend, AuthorizingVirtualHost
from gateway.backend.interface import Message, Owner, VirtualHost
from gateway.backend.memory import MemoryBackend
from gateway.metadata.permissions import Access, MemoryPermissionStore, Permissions
from gateway.model.vhost import InvalidVhost, VhostMapper

USER = "u"
ADMIN = "admin"
SCOPE = "public/default"  # vhost "/" with the default mapping
OWNER = Owner("conn-u", USER)
ADMIN_OWNER = Owner("conn-admin", ADMIN)
EMPTY_HEADER = b"\x00\x00"  # property flags: no properties
SERVER_NAMED = "amq.gen-JzTY20BRgKO-HjmUJj0wLg"

Need = tuple[Access, str, str]  # access, resource kind, resource name


async def _declare_exchange(
    vhost: VirtualHost, name: str, arguments: dict[str, Field] | None = None
) -> None:
    await vhost.declare_exchange(cmd.ExchangeDeclare(name, "direct", arguments=arguments or {}))


async def _declare_queue(
    vhost: VirtualHost,
    name: str,
    owner: Owner = OWNER,
    *,
    passive: bool = False,
    arguments: dict[str, Field] | None = None,
) -> Any:
    return await vhost.declare_queue(
        cmd.QueueDeclare(name, passive=passive, arguments=arguments or {}), owner
    )


async def _world() -> MemoryBackend:
    """Exchanges x, y, ae, dlx and xae (whose alternate exchange is ae), y bound to x with key
    k; queue q bound to x with key k, holding one message."""
    backend = MemoryBackend()
    admin = await backend.open_vhost("/", ADMIN)
    for name in ("x", "y", "ae", "dlx"):
        await _declare_exchange(admin, name)
    await admin.bind_exchange(cmd.ExchangeBind("y", "x", "k"))
    await _declare_exchange(admin, "xae", {"alternate-exchange": Field("S", "ae")})
    await _declare_queue(admin, "q", ADMIN_OWNER)
    await admin.bind_queue(cmd.QueueBind("q", "x", "k"), ADMIN_OWNER)
    await admin.publish(Message("", "q", EMPTY_HEADER, b"m"))
    return backend


def _grant(needs: list[Need]) -> Permissions:
    """Exactly the names in ``needs`` for each access, nothing else."""

    def pattern(access: Access) -> str:
        names = [re.escape(name) for kind_access, _, name in needs if kind_access is access]
        return f"^({'|'.join(names)})$" if names else ""

    return Permissions(*(pattern(access) for access in Access))


async def _as_user(permissions: Permissions) -> tuple[VirtualHost, MemoryPermissionStore]:
    store = MemoryPermissionStore()
    store.put(SCOPE, USER, permissions)
    backend = AuthorizingBackend(await _world(), store, superusers=[ADMIN])
    return await backend.open_vhost("/", USER), store


def _refusal(access: Access, kind: str, name: str) -> str:
    return f"ACCESS_REFUSED - {access} access to {kind} '{name}' in vhost '/' refused for user 'u'"


@dataclass(frozen=True)
class Case:
    id: str
    run: Callable[[VirtualHost], Awaitable[Any]]
    needs: list[Need]
    # With every permission granted: refused anyway, 406 naming an argument the gateway does
    # not implement (docs/compatibility.md). The permissions are still checked first.
    not_implemented: str | None = None


CASES = [
    Case(
        "exchange.declare",
        lambda v: _declare_exchange(v, "new"),
        [(Access.CONFIGURE, "exchange", "new")],
    ),
    Case(
        "exchange.declare existing",
        lambda v: _declare_exchange(v, "x"),
        [(Access.CONFIGURE, "exchange", "x")],
    ),
    Case(
        "exchange.declare creating with an alternate exchange",
        lambda v: _declare_exchange(v, "new", arguments={"alternate-exchange": Field("S", "ae")}),
        [
            (Access.CONFIGURE, "exchange", "new"),
            (Access.READ, "exchange", "new"),
            (Access.WRITE, "exchange", "ae"),
        ],
    ),
    Case(
        "exchange.declare existing with an alternate exchange",
        lambda v: _declare_exchange(v, "xae", arguments={"alternate-exchange": Field("S", "ae")}),
        [(Access.CONFIGURE, "exchange", "xae")],
    ),
    Case(
        "exchange.declare passive",
        lambda v: v.declare_exchange(cmd.ExchangeDeclare("x", "direct", passive=True)),
        [],
    ),
    Case(
        "exchange.delete",
        lambda v: v.delete_exchange(cmd.ExchangeDelete("x", if_unused=False)),
        [(Access.CONFIGURE, "exchange", "x")],
    ),
    Case(
        "exchange.delete missing (idempotent, still checked)",
        lambda v: v.delete_exchange(cmd.ExchangeDelete("nope", if_unused=False)),
        [(Access.CONFIGURE, "exchange", "nope")],
    ),
    Case("queue.declare", lambda v: _declare_queue(v, "new"), [(Access.CONFIGURE, "queue", "new")]),
    Case(
        "queue.declare server-named",
        lambda v: _declare_queue(v, SERVER_NAMED),
        [(Access.CONFIGURE, "queue", SERVER_NAMED)],
    ),
    Case(
        "queue.declare creating with a dead-letter exchange",
        lambda v: _declare_queue(v, "new", arguments={"x-dead-letter-exchange": Field("S", "dlx")}),
        [
            (Access.CONFIGURE, "queue", "new"),
            (Access.READ, "queue", "new"),
            (Access.WRITE, "exchange", "dlx"),
        ],
    ),
    Case(
        "queue.declare creating with the default exchange as DLX",
        lambda v: _declare_queue(v, "new", arguments={"x-dead-letter-exchange": Field("S", "")}),
        [
            (Access.CONFIGURE, "queue", "new"),
            (Access.READ, "queue", "new"),
            (Access.WRITE, "exchange", "amq.default"),
        ],
    ),
    Case("queue.declare passive", lambda v: _declare_queue(v, "q", passive=True), []),
    Case(
        "queue.delete",
        lambda v: v.delete_queue(cmd.QueueDelete("q", if_unused=False, if_empty=False), OWNER),
        [(Access.CONFIGURE, "queue", "q")],
    ),
    Case(
        "queue.purge",
        lambda v: v.purge_queue(cmd.QueuePurge("q"), OWNER),
        [(Access.READ, "queue", "q")],
    ),
    Case(
        "queue.bind",
        lambda v: v.bind_queue(cmd.QueueBind("q", "x", "k2"), OWNER),
        [(Access.WRITE, "queue", "q"), (Access.READ, "exchange", "x")],
    ),
    Case(
        "queue.unbind",
        lambda v: v.unbind_queue(cmd.QueueUnbind("q", "x", "k"), OWNER),
        [(Access.WRITE, "queue", "q"), (Access.READ, "exchange", "x")],
    ),
    Case(
        # rabbit_channel:binding_action_with_checks: write on the destination, read on the
        # source, whatever kind the destination is.
        "exchange.bind",
        lambda v: v.bind_exchange(cmd.ExchangeBind("y", "x", "k2")),
        [(Access.WRITE, "exchange", "y"), (Access.READ, "exchange", "x")],
    ),
    Case(
        "exchange.unbind",
        lambda v: v.unbind_exchange(cmd.ExchangeUnbind("y", "x", "k")),
        [(Access.WRITE, "exchange", "y"), (Access.READ, "exchange", "x")],
    ),
    Case(
        "basic.publish",
        lambda v: v.publish(Message("x", "k", EMPTY_HEADER, b"m")),
        [(Access.WRITE, "exchange", "x")],
    ),
    Case(
        "basic.publish to the default exchange",
        lambda v: v.publish(Message("", "q", EMPTY_HEADER, b"m")),
        [(Access.WRITE, "exchange", "amq.default")],
    ),
    Case(
        "basic.consume",
        lambda v: v.consume(cmd.BasicConsume("q", exclusive=False), OWNER),
        [(Access.READ, "queue", "q")],
    ),
    Case("basic.get", lambda v: v.get(cmd.BasicGet("q"), OWNER), [(Access.READ, "queue", "q")]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
async def test_allowed_with_exactly_what_the_table_says(case: Case) -> None:
    vhost, _ = await _as_user(_grant(case.needs))
    if case.not_implemented is not None:
        with pytest.raises(AMQPError) as refused:
            await case.run(vhost)
        assert str(refused.value) == case.not_implemented
        return
    result = await case.run(vhost)
    if hasattr(result, "close"):
        await result.close()


@pytest.mark.parametrize("case", [c for c in CASES if c.needs], ids=lambda case: case.id)
async def test_each_missing_access_is_refused_by_name(case: Case) -> None:
    for missing in case.needs:
        vhost, _ = await _as_user(_grant([need for need in case.needs if need != missing]))
        with pytest.raises(AMQPError) as refused:
            await case.run(vhost)
        assert refused.value.reply_code == ReplyCode.ACCESS_REFUSED
        assert refused.value.reply_text == _refusal(*missing)
        assert not refused.value.is_hard  # Channel.Close, the connection lives on


@pytest.mark.parametrize("case", [c for c in CASES if c.needs], ids=lambda case: case.id)
async def test_with_nothing_granted_the_first_check_is_reported(case: Case) -> None:
    # RabbitMQ's order: e.g. Queue.Bind reports the queue (write) before the exchange (read).
    vhost, _ = await _as_user(Permissions("", "", ""))
    with pytest.raises(AMQPError) as refused:
        await case.run(vhost)
    assert refused.value.reply_text == _refusal(*case.needs[0])


async def test_a_refused_operation_changes_nothing() -> None:
    vhost, _ = await _as_user(Permissions("", "", ""))
    inner = vhost.inner if isinstance(vhost, AuthorizingVirtualHost) else vhost
    with pytest.raises(AMQPError):
        await vhost.delete_queue(cmd.QueueDelete("q", if_unused=False, if_empty=False), OWNER)
    with pytest.raises(AMQPError):
        await vhost.get(cmd.BasicGet("q"), OWNER)
    status = await _declare_queue(inner, "q", passive=True)
    assert status.message_count == 1


@pytest.mark.parametrize(
    ("run", "text"),
    [
        (
            lambda v: _declare_exchange(v, ""),
            "ACCESS_REFUSED - operation not permitted on the default exchange",
        ),
        (
            lambda v: v.delete_exchange(cmd.ExchangeDelete("", if_unused=False)),
            "ACCESS_REFUSED - operation not permitted on the default exchange",
        ),
        (
            lambda v: v.delete_exchange(cmd.ExchangeDelete("amq.direct", if_unused=False)),
            "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed",
        ),
    ],
    ids=["declare default", "delete default", "delete amq.direct"],
)
async def test_name_rules_come_before_permissions(
    run: Callable[[VirtualHost], Awaitable[Any]], text: str
) -> None:
    # rabbit_channel refuses these names before it checks any permission.
    vhost, _ = await _as_user(Permissions("", "", ""))
    with pytest.raises(AMQPError) as refused:
        await run(vhost)
    assert refused.value.reply_text == text


async def test_creating_an_amq_exchange_is_checked_before_its_name() -> None:
    # rabbit_channel checks configure before the reserved-prefix rule for a new exchange.
    vhost, _ = await _as_user(Permissions("", "", ""))
    with pytest.raises(AMQPError) as refused:
        await _declare_exchange(vhost, "amq.new")
    assert refused.value.reply_text == _refusal(Access.CONFIGURE, "exchange", "amq.new")
    vhost, _ = await _as_user(Permissions(".*", "", ""))
    with pytest.raises(AMQPError) as refused:
        await _declare_exchange(vhost, "amq.new")
    assert "reserved prefix 'amq.*'" in refused.value.reply_text


async def test_binding_to_the_default_exchange_is_refused_for_its_name() -> None:
    vhost, _ = await _as_user(Permissions("", "^q$", ""))
    with pytest.raises(AMQPError) as refused:
        await vhost.bind_queue(cmd.QueueBind("q", "", "q"), OWNER)
    assert refused.value.reply_text == (
        "ACCESS_REFUSED - operation not permitted on the default exchange"
    )


@pytest.mark.parametrize(
    ("command", "granted", "text"),
    [
        # As the source: write on the destination first, then the name, before any read.
        (cmd.ExchangeBind("y", "", "k"), "^y$", "operation not permitted on the default exchange"),
        (
            cmd.ExchangeUnbind("y", "", "k"),
            "^y$",
            "operation not permitted on the default exchange",
        ),
        # As the destination: its write is checked as amq.default's, then the name.
        (
            cmd.ExchangeBind("", "x", "k"),
            "",
            "write access to exchange 'amq.default' in vhost '/' refused for user 'u'",
        ),
        (
            cmd.ExchangeBind("", "x", "k"),
            "^amq\\.default$",
            "operation not permitted on the default exchange",
        ),
    ],
)
async def test_exchange_bindings_of_the_default_exchange(
    command: cmd.ExchangeBind | cmd.ExchangeUnbind, granted: str, text: str
) -> None:
    vhost, _ = await _as_user(Permissions("", granted, ""))
    with pytest.raises(AMQPError) as refused:
        if isinstance(command, cmd.ExchangeBind):
            await vhost.bind_exchange(command)
        else:
            await vhost.unbind_exchange(command)
    assert refused.value.reply_code == ReplyCode.ACCESS_REFUSED
    assert refused.value.reply_text == f"ACCESS_REFUSED - {text}"


# ---------------------------------------------------------------------------- vhost access


async def test_no_entry_means_no_vhost() -> None:
    store = MemoryPermissionStore()
    store.put("public/other", USER, Permissions.everything())  # another vhost does not count
    backend = AuthorizingBackend(MemoryBackend(), store)
    with pytest.raises(AMQPError) as refused:
        await backend.open_vhost("/", USER)
    error = refused.value
    assert error.reply_code == ReplyCode.NOT_ALLOWED and error.is_hard
    assert error.reply_text == "NOT_ALLOWED - access to vhost '/' refused for user 'u'"
    assert (error.class_id, error.method_id) == (10, 40)  # Connection.Open


async def test_an_entry_of_empty_patterns_opens_the_vhost_and_nothing_else() -> None:
    vhost, _ = await _as_user(Permissions("", "", ""))
    assert vhost.name == "/"
    with pytest.raises(AMQPError, match="access to queue 'q'"):
        await vhost.get(cmd.BasicGet("q"), OWNER)


async def test_aliases_of_a_vhost_share_its_permissions() -> None:
    store = MemoryPermissionStore()
    store.put("public/x", USER, Permissions.everything())
    backend = AuthorizingBackend(MemoryBackend(), store)
    for alias in ("x", "/x", "public/x", "/public/x"):
        await backend.open_vhost(alias, USER)
    with pytest.raises(AMQPError, match="access to vhost '/y' refused"):
        await backend.open_vhost("/y", USER)


async def test_the_mapping_is_the_configured_one() -> None:
    store = MemoryPermissionStore()
    store.put("x/default", USER, Permissions.everything())
    mapper = VhostMapper(map_short_vhost_to_tenant=True)
    backend = AuthorizingBackend(MemoryBackend(mapper), store, mapper=mapper)
    await backend.open_vhost("x", USER)


async def test_an_impossible_vhost_is_refused_as_not_found() -> None:
    backend = AuthorizingBackend(MemoryBackend(), MemoryPermissionStore(), superusers=[ADMIN])
    for user in (USER, ADMIN):
        with pytest.raises(InvalidVhost):
            await backend.open_vhost("/a/b/c", user)


async def test_superusers_need_no_entry_and_are_not_checked() -> None:
    inner = await _world()
    backend = AuthorizingBackend(inner, MemoryPermissionStore(), superusers=["root", ADMIN])
    vhost = await backend.open_vhost("/", "root")
    assert not isinstance(vhost, AuthorizingVirtualHost)  # nothing to pay per operation
    await vhost.delete_queue(cmd.QueueDelete("q", if_unused=False, if_empty=False), OWNER)
    other = await backend.open_vhost("/elsewhere", "root")
    await _declare_queue(other, "anything")


# ---------------------------------------------------------------------------- live changes


async def test_changes_apply_to_the_next_operation_of_an_open_vhost() -> None:
    vhost, store = await _as_user(Permissions.everything())
    await vhost.publish(Message("x", "k", EMPTY_HEADER, b"1"))
    store.put(SCOPE, USER, Permissions(".*", "^$", ".*"))
    with pytest.raises(AMQPError, match="write access to exchange 'x'"):
        await vhost.publish(Message("x", "k", EMPTY_HEADER, b"2"))
    assert await vhost.get(cmd.BasicGet("q"), OWNER) is not None
    store.put(SCOPE, USER, Permissions.everything())
    await vhost.publish(Message("x", "k", EMPTY_HEADER, b"3"))
    # Without an entry every operation is refused; the vhost stays open (as in RabbitMQ,
    # which checks the vhost at Connection.Open only).
    assert store.remove(SCOPE, USER)
    with pytest.raises(AMQPError) as refused:
        await vhost.get(cmd.BasicGet("q"), OWNER)
    assert refused.value.reply_code == ReplyCode.ACCESS_REFUSED


# ---------------------------------------------------------------------------- patterns


@pytest.mark.parametrize(
    ("pattern", "name", "allowed"),
    [
        (".*", "anything", True),
        (".*", "", True),
        ("", "anything", False),  # "" means "^$"
        ("", "", True),
        ("^$", "q", False),
        ("foo", "a-foo-b", True),  # a search, like re:run: not anchored
        ("^foo", "a-foo", False),
        ("^foo$", "foo", True),
        ("^foo$", "foo2", False),
        ("^(q1|q2)$", "q2", True),
        (r"^amq\.gen-", SERVER_NAMED, True),
        (r"^amq\.gen-", "amqXgen-", False),
        ("^amq.default$", "amq.default", True),
        ("ü", "naïve-ü", True),
    ],
)
def test_patterns_match_like_rabbitmq(pattern: str, name: str, allowed: bool) -> None:
    permissions = Permissions(pattern, pattern, pattern)
    for access in Access:
        assert permissions.allows(access, name) is allowed
        assert permissions.allows(access, name) is allowed  # and again, from the memo


def test_each_access_has_its_own_pattern() -> None:
    permissions = Permissions("^c$", "^w$", "^r$")
    assert [permissions.allows(access, "w") for access in Access] == [False, True, False]
    assert permissions.pattern(Access.READ) == "^r$"


def test_a_bad_pattern_is_refused_by_name() -> None:
    from gateway.metadata.permissions import InvalidPermission

    with pytest.raises(InvalidPermission) as bad:
        Permissions(".*", "(unclosed", ".*")
    assert bad.value.access is Access.WRITE
    assert "invalid write pattern '(unclosed'" in str(bad.value)


def test_the_memo_is_bounded_and_stays_right() -> None:
    from gateway.metadata.permissions import DECISION_CACHE_SIZE

    permissions = Permissions("^even-[0-9]*[02468]$", "", "")
    for index in range(DECISION_CACHE_SIZE * 2 + 3):
        assert permissions.allows(Access.CONFIGURE, f"even-{index}") is (index % 2 == 0)
    assert len(permissions._decisions[Access.CONFIGURE]) <= DECISION_CACHE_SIZE


def test_equality_ignores_the_memo() -> None:
    a, b = Permissions(".*", "", "^q$"), Permissions(".*", "", "^q$")
    a.allows(Access.READ, "q")
    assert a == b and hash(a) == hash(b)
    assert a != Permissions(".*", "", "^r$")
