"""The metadata store in process memory: for unit tests and the in-memory backend.

It follows the same contract as the ZooKeeper store (the contract tests in
tests/integration/metadata run the same functions against both): create-if-absent returns the
winner, deleting a queue or an exchange deletes its bindings (an exchange also its topic keys),
a binding needs its queue and exchange, bindings are told apart by their exact typed arguments,
and ``open`` creates the predeclared exchanges of a vhost.

Several "replicas" share one instance to model a fleet without ZooKeeper: every caller sees
the same views, and a write is visible to all of them when it returns. ``available = False``
simulates losing ZooKeeper: writes raise ``MetadataUnavailable``, views keep being served.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from gateway.metadata.codec import TopicKey, binding_id
from gateway.metadata.errors import MissingEntity
from gateway.metadata.mirror import make_view
from gateway.metadata.store import MetadataUnavailable, VhostView
from gateway.model.entities import PREDECLARED_EXCHANGES, Binding, Exchange, Queue

__all__ = ["MemoryMetadataStore"]


@dataclass(eq=False)
class _Namespace:
    exchanges: dict[str, Exchange] = field(default_factory=dict)
    queues: dict[str, Queue] = field(default_factory=dict)
    # Keyed by the binding's identity (queue, exchange, key, exact arguments), as in ZooKeeper.
    bindings: dict[str, Binding] = field(default_factory=dict)
    topic_keys: set[TopicKey] = field(default_factory=set)
    version: int = 0
    opened: bool = False
    event: trio.Event = field(default_factory=trio.Event)
    snapshot: VhostView | None = None

    def touch(self) -> None:
        self.version += 1
        self.event.set()
        self.event = trio.Event()

    def view(self) -> VhostView:
        if self.snapshot is None or self.snapshot.version != self.version:
            self.snapshot = make_view(
                self.version,
                self.exchanges.values(),
                self.queues.values(),
                self.bindings.values(),
                self.topic_keys,
            )
        return self.snapshot


class MemoryMetadataStore:
    """Implements ``MetadataStore`` with dicts; writes complete at once (they checkpoint, so a
    task that writes in a loop still lets others run)."""

    def __init__(self) -> None:
        self._namespaces: dict[str, _Namespace] = {}
        self.available = True

    def _namespace(self, namespace: str) -> _Namespace:
        state = self._namespaces.get(namespace)
        if state is None:
            state = self._namespaces[namespace] = _Namespace()
        return state

    async def _write(self, namespace: str) -> _Namespace:
        await trio.lowlevel.checkpoint()
        if not self.available:
            raise MetadataUnavailable(
                "the metadata store is unavailable (simulated): metadata changes are refused "
                "until it is back"
            )
        return self._namespace(namespace)

    # ------------------------------------------------------------------ views

    async def open(self, namespace: str) -> VhostView:
        await trio.lowlevel.checkpoint()
        state = self._namespace(namespace)
        if not state.opened:
            missing = [e for e in PREDECLARED_EXCHANGES if e.name not in state.exchanges]
            if missing and not self.available:
                raise MetadataUnavailable(
                    f"cannot open namespace {namespace!r}: the metadata store is unavailable"
                )
            for exchange in missing:
                state.exchanges[exchange.name] = exchange
            if missing:
                state.touch()
            state.opened = True
        return state.view()

    def view(self, namespace: str) -> VhostView:
        state = self._namespaces.get(namespace)
        if state is None or not state.opened:
            raise KeyError(f"namespace {namespace!r} is not open")
        return state.view()

    async def changed(self, namespace: str, since_version: int) -> VhostView:
        state = self._namespace(namespace)
        if state.version > since_version:
            await trio.lowlevel.checkpoint()
        while state.version <= since_version:
            await state.event.wait()
        return state.view()

    # ------------------------------------------------------------------ exchanges

    async def create_exchange(self, namespace: str, exchange: Exchange) -> Exchange:
        state = await self._write(namespace)
        existing = state.exchanges.get(exchange.name)
        if existing is not None:
            return existing
        state.exchanges[exchange.name] = exchange
        state.touch()
        return exchange

    async def delete_exchange(self, namespace: str, name: str) -> bool:
        state = await self._write(namespace)
        if state.exchanges.pop(name, None) is None:
            return False
        for key, binding in list(state.bindings.items()):
            if binding.exchange == name:
                del state.bindings[key]
        state.topic_keys = {key for key in state.topic_keys if key.exchange != name}
        state.touch()
        return True

    # ------------------------------------------------------------------ queues

    async def create_queue(self, namespace: str, queue: Queue) -> Queue:
        state = await self._write(namespace)
        existing = state.queues.get(queue.name)
        if existing is not None:
            return existing
        state.queues[queue.name] = queue
        state.touch()
        return queue

    async def delete_queue(self, namespace: str, name: str) -> bool:
        state = await self._write(namespace)
        if state.queues.pop(name, None) is None:
            return False
        for key, binding in list(state.bindings.items()):
            if binding.queue == name:
                del state.bindings[key]
        state.touch()
        return True

    # ------------------------------------------------------------------ bindings

    async def add_binding(self, namespace: str, binding: Binding) -> bool:
        state = await self._write(namespace)
        if binding.queue not in state.queues:
            raise MissingEntity("queue", binding.queue)
        if binding.exchange not in state.exchanges:
            raise MissingEntity("exchange", binding.exchange)
        key = binding_id(binding)
        if key in state.bindings:
            return False
        state.bindings[key] = binding
        state.touch()
        return True

    async def remove_binding(self, namespace: str, binding: Binding) -> bool:
        state = await self._write(namespace)
        if state.bindings.pop(binding_id(binding), None) is None:
            return False
        state.touch()
        return True

    async def register_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        state = await self._write(namespace)
        key = TopicKey(exchange, routing_key)
        if key in state.topic_keys:
            return False
        state.topic_keys.add(key)
        state.touch()
        return True

    async def aclose(self) -> None:
        """Nothing to release; the store stays usable by the other replicas sharing it."""
        await trio.lowlevel.checkpoint()
