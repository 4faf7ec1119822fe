"""backend/catalog.py over the memory store: store errors turned into RabbitMQ's replies,
lookups (predeclared exchanges, misses asked of the store, exclusive access), publish targets,
alternate exchanges, routing, unbinding's idempotence and auto-delete exchanges. Declares and
deletes end to end: tests/integration (both backends)."""

from __future__ import annotations

import pytest
import trio

from gateway.amqp import commands as cmd
from gateway.amqp.errors import AMQPError, ChannelError, ReplyCode
from gateway.amqp.fieldtable import Field
from gateway.backend.catalog import Catalog
from gateway.backend.interface import Message, Owner
from gateway.metadata.errors import ConsumerConflict, MissingEntity
from gateway.metadata.memory import MemoryMetadataStore
from gateway.metadata.store import MetadataUnavailable
from gateway.model.entities import Binding, Exchange, ExchangeBinding, ExchangeType, Queue

NS = "t/n"
ALICE = Owner("conn-1", "alice")
BOB = Owner("conn-2", "bob")


async def _catalog() -> tuple[Catalog, MemoryMetadataStore]:
    store = MemoryMetadataStore()
    await store.open(NS)
    return Catalog("/", NS, store), store


async def _raise(error: Exception) -> None:
    await trio.lowlevel.checkpoint()
    raise error


async def test_store_errors_become_rabbitmq_replies() -> None:
    catalog, _ = await _catalog()
    with pytest.raises(ChannelError) as missing:
        await catalog.write(_raise(MissingEntity("queue", "q")))
    assert missing.value.reply_code == ReplyCode.NOT_FOUND
    assert "no queue 'q' in vhost '/'" in missing.value.reply_text
    with pytest.raises(ChannelError) as conflict:
        await catalog.write(_raise(ConsumerConflict("q")))
    assert conflict.value.reply_code == ReplyCode.ACCESS_REFUSED
    assert "in exclusive use" in conflict.value.reply_text
    with pytest.raises(AMQPError) as unavailable:
        await catalog.write(_raise(MetadataUnavailable("ZooKeeper is away")))
    assert unavailable.value.reply_code == ReplyCode.INTERNAL_ERROR
    assert "metadata store unavailable, try again: ZooKeeper is away" in (
        unavailable.value.reply_text
    )


async def test_lookups() -> None:
    catalog, store = await _catalog()
    view = catalog.view
    assert catalog.exchange(view, "amq.direct") is not None  # predeclared
    assert catalog.exchange(view, "none") is None
    with pytest.raises(ChannelError) as missing:
        catalog.require_exchange(view, "none")
    assert missing.value.reply_code == ReplyCode.NOT_FOUND

    await store.create_queue(NS, Queue("mine", exclusive=True, owner=ALICE.connection_id))
    view = catalog.view
    assert catalog.queue(view, "mine", ALICE).name == "mine"
    with pytest.raises(ChannelError) as locked:
        catalog.queue(view, "mine", BOB)
    assert locked.value.reply_code == ReplyCode.RESOURCE_LOCKED
    assert catalog.owned_by(ALICE) == ["mine"] and catalog.owned_by(BOB) == []


async def test_misses_are_asked_of_the_store_and_unavailable_means_missing() -> None:
    catalog, store = await _catalog()
    await store.create_queue(NS, Queue("q"))
    assert await catalog.has_queue("q")
    assert (await catalog.find_queue("q", ALICE)).name == "q"
    store.available = False  # the store cannot be asked: the view's answer stands
    assert not await catalog.has_queue("other")
    with pytest.raises(ChannelError) as missing:
        await catalog.find_queue("other", ALICE)
    assert missing.value.reply_code == ReplyCode.NOT_FOUND
    assert await catalog.find_exchange("none") is None
    with pytest.raises(ChannelError):
        await catalog.require_fresh_exchange("none")


async def test_publish_targets_and_alternate_exchanges() -> None:
    catalog, store = await _catalog()
    await store.create_exchange(NS, Exchange("hidden", ExchangeType.FANOUT, internal=True))
    await store.create_exchange(NS, Exchange("ae", ExchangeType.FANOUT))
    with_ae = Exchange("x", ExchangeType.DIRECT, arguments={"alternate-exchange": Field("S", "ae")})
    dangling = Exchange(
        "y", ExchangeType.DIRECT, arguments={"alternate-exchange": Field("S", "no")}
    )
    not_a_name = Exchange("z", ExchangeType.DIRECT, arguments={"alternate-exchange": Field("I", 1)})
    for exchange in (with_ae, dangling, not_a_name):
        await store.create_exchange(NS, exchange)
    view = catalog.view
    with pytest.raises(ChannelError) as refused:
        catalog.publish_target(view, "hidden")
    assert refused.value.reply_code == ReplyCode.ACCESS_REFUSED
    assert "cannot publish to internal exchange 'hidden'" in refused.value.reply_text
    assert catalog.publish_target(view, "x") == with_ae
    alternate = catalog.alternate(view, with_ae)
    assert alternate is not None and alternate.name == "ae"
    assert catalog.alternate(view, dangling) is None  # a missing one routes nothing
    assert catalog.alternate(view, not_a_name) is None


async def test_routes() -> None:
    catalog, store = await _catalog()
    await store.create_queue(NS, Queue("a"))
    await store.create_queue(NS, Queue("b"))
    await store.add_binding(NS, Binding("b", "amq.direct", "key"))
    view = catalog.view
    default = catalog.require_exchange(view, "")
    direct = catalog.require_exchange(view, "amq.direct")

    def message(exchange: str, key: str) -> Message:
        return Message(exchange, key, b"\x00\x00", b"body")

    assert catalog.routes(view, default, message("", "a")) == {"a"}
    assert catalog.routes(view, default, message("", "none")) == set()
    assert catalog.routes(view, direct, message("amq.direct", "key")) == {"b"}
    assert catalog.router(view, direct) is catalog.router(view, direct)  # cached per version
    await store.add_binding(NS, Binding("a", "amq.direct", "key"))
    view = catalog.view
    assert catalog.routes(view, direct, message("amq.direct", "key")) == {"a", "b"}


async def test_bindings() -> None:
    catalog, store = await _catalog()
    await store.create_queue(NS, Queue("q"))
    with pytest.raises(ChannelError) as default:
        await catalog.binding(cmd.QueueBind("q", "", "q"), ALICE)
    assert default.value.reply_code == ReplyCode.ACCESS_REFUSED
    with pytest.raises(ChannelError) as missing:
        await catalog.binding(cmd.QueueBind("q", "none", "k"), ALICE)
    assert missing.value.reply_code == ReplyCode.NOT_FOUND
    binding, target = await catalog.binding(cmd.QueueBind("q", "amq.direct", "k"), ALICE)
    assert binding == Binding("q", "amq.direct", "k") and target.name == "amq.direct"

    # Queue.Unbind is idempotent: nothing to unbind is not an error.
    assert await catalog.unbinding(cmd.QueueUnbind("none", "amq.direct", "k"), ALICE) is None
    assert await catalog.unbinding(cmd.QueueUnbind("q", "none", "k"), ALICE) is None
    await catalog.add_binding(binding)
    assert await catalog.unbinding(cmd.QueueUnbind("q", "amq.direct", "k"), ALICE) == binding


async def test_an_auto_delete_exchange_goes_with_its_last_binding() -> None:
    catalog, store = await _catalog()
    await store.create_queue(NS, Queue("q"))
    await store.create_exchange(NS, Exchange("temp", ExchangeType.DIRECT, auto_delete=True))
    first, second = Binding("q", "temp", "a"), Binding("q", "temp", "b")
    await catalog.add_binding(first)
    await catalog.add_binding(second)
    assert await catalog.remove_binding(first)
    assert "temp" in catalog.view.exchanges  # one binding left
    assert await catalog.remove_binding(second)
    assert "temp" not in catalog.view.exchanges
    assert not await catalog.remove_binding(second)  # gone already


# ------------------------------------------------------------------ exchange bindings


async def test_exchange_binding_checks_in_rabbitmq_order() -> None:
    catalog, store = await _catalog()
    await store.create_exchange(NS, Exchange("h", ExchangeType.HEADERS))
    default = "operation not permitted on the default exchange"
    for command, code, text in (
        (cmd.ExchangeBind("", "h"), ReplyCode.ACCESS_REFUSED, default),
        (cmd.ExchangeBind("h", ""), ReplyCode.ACCESS_REFUSED, default),
        (cmd.ExchangeBind("nope", "none"), ReplyCode.NOT_FOUND, "no exchange 'none' in vhost '/'"),
        (cmd.ExchangeBind("nope", "h"), ReplyCode.NOT_FOUND, "no exchange 'nope' in vhost '/'"),
        (
            cmd.ExchangeBind("h", "h", arguments={"x-match": Field("S", "most")}),
            ReplyCode.PRECONDITION_FAILED,
            'Invalid x-match field value <<"most">>; expected all, any, all-with-x, or any-with-x',
        ),
    ):
        with pytest.raises(ChannelError) as refused:
            await catalog.exchange_binding(command)
        assert refused.value.reply_code == code and text in refused.value.reply_text
    binding = await catalog.exchange_binding(cmd.ExchangeBind("h", "amq.direct", "k"))
    assert binding == ExchangeBinding("amq.direct", "h", "k")


async def test_exchange_unbinding_is_idempotent() -> None:
    catalog, store = await _catalog()
    await store.create_exchange(NS, Exchange("d", ExchangeType.FANOUT))
    binding = ExchangeBinding("amq.direct", "d", "k")
    assert await catalog.add_exchange_binding(binding)
    assert await catalog.exchange_unbinding(cmd.ExchangeUnbind("d", "amq.direct", "k")) == binding
    assert await catalog.remove_exchange_binding(binding)
    assert not await catalog.remove_exchange_binding(binding)
    assert await catalog.exchange_unbinding(cmd.ExchangeUnbind("d", "missing", "k")) is None
    with pytest.raises(ChannelError):
        await catalog.exchange_unbinding(cmd.ExchangeUnbind("", "amq.direct", "k"))


async def test_routing_follows_exchange_bindings_and_alternates() -> None:
    catalog, store = await _catalog()
    await store.create_queue(NS, Queue("q"))
    await store.create_queue(NS, Queue("caught"))
    await store.create_exchange(NS, Exchange("ae", ExchangeType.FANOUT))
    ae = {"alternate-exchange": Field("S", "ae")}
    await store.create_exchange(NS, Exchange("mid", ExchangeType.DIRECT, arguments=ae))
    await catalog.add_binding(Binding("q", "mid", "k"))
    await catalog.add_binding(Binding("caught", "ae"))
    await catalog.add_exchange_binding(ExchangeBinding("amq.fanout", "mid"))
    fanout = catalog.exchange(catalog.view, "amq.fanout")
    assert fanout is not None
    assert catalog.destinations(
        catalog.view, fanout, Message("amq.fanout", "k", b"\x00\x00", b"")
    ) == {"q"}
    assert catalog.destinations(
        catalog.view, fanout, Message("amq.fanout", "x", b"\x00\x00", b"")
    ) == {"caught"}
    # An exchange's own routes are its queue bindings only.
    assert (
        catalog.routes(catalog.view, fanout, Message("amq.fanout", "k", b"\x00\x00", b"")) == set()
    )


async def test_auto_delete_counts_bindings_as_source_and_cascades() -> None:
    catalog, store = await _catalog()
    for name in ("top", "middle", "sink"):
        await store.create_exchange(NS, Exchange(name, ExchangeType.FANOUT, auto_delete=True))
    await store.create_queue(NS, Queue("q"))
    await catalog.add_exchange_binding(ExchangeBinding("top", "middle"))
    await catalog.add_exchange_binding(ExchangeBinding("middle", "sink"))
    await catalog.add_binding(Binding("q", "middle"))
    # sink is only a destination: removing its binding deletes nothing but what it is the
    # source of... middle keeps q's binding, sink stays.
    assert await catalog.remove_exchange_binding(ExchangeBinding("middle", "sink"))
    assert {"top", "middle", "sink"} <= set(catalog.view.exchanges)
    # middle's last binding as source goes: middle goes, and top (whose last binding was to
    # middle) goes with it.
    assert await catalog.remove_binding(Binding("q", "middle"))
    assert "middle" not in catalog.view.exchanges and "top" not in catalog.view.exchanges
    assert "sink" in catalog.view.exchanges
    # Deleting a destination: its sources may go (auto-delete, no binding left).
    await store.create_exchange(NS, Exchange("upper", ExchangeType.FANOUT, auto_delete=True))
    await catalog.add_exchange_binding(ExchangeBinding("upper", "sink"))
    await catalog.delete_exchange(cmd.ExchangeDelete("sink"))
    assert "upper" not in catalog.view.exchanges
    # if-unused looks only at what it is the source of.
    await store.create_exchange(NS, Exchange("a", ExchangeType.FANOUT))
    await store.create_exchange(NS, Exchange("b", ExchangeType.FANOUT))
    await catalog.add_exchange_binding(ExchangeBinding("a", "b"))
    with pytest.raises(ChannelError) as in_use:
        await catalog.delete_exchange(cmd.ExchangeDelete("a", if_unused=True))
    assert in_use.value.reply_code == ReplyCode.PRECONDITION_FAILED
    await catalog.delete_exchange(cmd.ExchangeDelete("b", if_unused=True))
    assert catalog.view.exchange_bindings == frozenset()
