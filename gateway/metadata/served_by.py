"""``served_by``: a store method that is one of its parts' methods, under the role's name.

The ZooKeeper store is assembled from parts (zookeeper/transactions.py, leadership.py, …), and
most of the roles' methods (roles.py) are one part's method as it is. Writing each of them out
again in the store, signature and docstring and a call that passes every argument on, made one
metadata feature touch the protocol, the part and the store for nothing: here the store names
the part's method instead, and the signature callers and mypy see is the part's own::

    class ZooKeeperMetadataStore:
        lead = served_by("_leadership", Leadership.lead)
        live_replicas = served_by("_leadership", Leadership.replicas)

``store.lead`` is then ``store._leadership.lead``, a bound method of the part (so that
``inspect`` and ``trio`` see a coroutine function, as with a method of the store's own). The
parts are made with the store and never replaced, so the first lookup keeps the bound method on
the store (as ``functools.cached_property`` does): a later call costs what a call of the part's
method costs, less than the hand-written method that passed the call on did.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MethodType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

Part = TypeVar("Part")
P = ParamSpec("P")
R = TypeVar("R")


class served_by(Generic[Part, P, R]):  # lower case, like property: a kind of attribute
    """The method ``method`` of the part the store holds in its attribute ``part``."""

    __slots__ = ("method", "name", "part")

    def __init__(self, part: str, method: Callable[Concatenate[Part, P], R]) -> None:
        self.part = part
        self.method = method
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, store: None, owner: type) -> served_by[Part, P, R]: ...

    @overload
    def __get__(self, store: object, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(self, store: object, owner: type | None = None) -> Any:
        if store is None:  # looked up on the class: the descriptor itself (for tests)
            return self
        bound = MethodType(self.method, getattr(store, self.part))
        vars(store)[self.name] = bound  # found there from now on, before this descriptor
        return bound
