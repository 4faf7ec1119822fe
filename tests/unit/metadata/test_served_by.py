"""served_by.py: a store's method that is its part's method, and every use of it in the
ZooKeeper store naming a part the store holds (a store that is never connected: no ZooKeeper)."""

from __future__ import annotations

import inspect

from gateway.metadata.served_by import served_by
from gateway.metadata.zookeeper import ZooKeeperMetadataStore


class Greeter:
    def __init__(self, name: str) -> None:
        self.name = name

    async def greet(self, whom: str, *, loud: bool = False) -> str:
        """Says hello."""
        text = f"{self.name} greets {whom}"
        return text.upper() if loud else text


class Host:
    greet = served_by("_greeter", Greeter.greet)

    def __init__(self) -> None:
        self._greeter = Greeter("host")


async def test_the_method_is_the_parts_bound_method() -> None:
    host = Host()
    assert await host.greet("you", loud=True) == "HOST GREETS YOU"
    assert host.greet.__self__ is host._greeter
    assert inspect.iscoroutinefunction(host.greet)
    assert str(inspect.signature(host.greet)) == "(whom: 'str', *, loud: 'bool' = False) -> 'str'"
    assert host.greet.__doc__ == "Says hello."


def test_the_first_lookup_keeps_the_bound_method_on_the_store() -> None:
    host = Host()
    first = host.greet
    assert vars(host)["greet"] is first
    assert host.greet is first
    assert Host().greet is not first  # each store its own


def test_on_the_class_it_is_the_descriptor() -> None:
    assert isinstance(Host.greet, served_by)
    assert Host.greet.part == "_greeter"


def test_every_method_the_zookeeper_store_serves_is_one_of_a_part_it_holds() -> None:
    store = ZooKeeperMetadataStore("127.0.0.1:1")  # never connected
    served = {
        name: member
        for name, member in vars(ZooKeeperMetadataStore).items()
        if isinstance(member, served_by)
    }
    assert len(served) > 20
    for name, member in served.items():
        part = getattr(store, member.part)
        assert getattr(type(part), member.method.__name__) is member.method, name
        assert getattr(store, name).__self__ is part
