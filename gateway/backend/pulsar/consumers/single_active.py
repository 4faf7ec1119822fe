"""A consumer of a single-active-consumer queue on Pulsar, one of a line kept fleet-wide.

RabbitMQ's rules are model/consumers.py's; the line is the metadata store's (every consumer of
the queue on every replica, in registration order, at most one active: docs/metadata.md). Each
consumer here follows the line through the store's view and acts for itself:

- **waiting**: it has no Pulsar consumer at all, so Pulsar dispatches nothing to it;
- when no consumer is active and the rules pick this one, its replica asks the store to make
  it active (a compare-and-set on the line as ZooKeeper has it: two replicas cannot both win),
  then subscribes and delivers until it stops being active. Pulsar dispatches to it what the
  previous active consumer left: first what that one held unacknowledged (its Pulsar consumer
  closed before its record went), then the rest, in each topic's order;
- **leaving** (Basic.Cancel, channel or connection closed): the session has given back its
  unacknowledged messages; its Pulsar consumer closes (what it read ahead goes back too), and
  only then does its record go, so that the next active one finds everything back in the
  queue. A replica that dies loses its records with its ZooKeeper session, later, after the
  session timeout: the next consumer becomes active then;
- **stepping down** (a quorum queue's active consumer when one of higher priority waits): it
  gets no new message, and once what it delivered is settled, it closes its Pulsar consumer and
  goes back to waiting; the other one is then made active by its replica;
- **paused**: while the replica cannot reach ZooKeeper, an active consumer delivers nothing
  (its session may be expiring, after which another replica makes another consumer active);
  when the connection is back it goes on, or, if the session expired meanwhile, closes its
  Pulsar consumer and joins the line again at the back.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol

import trio

from gateway.amqp import commands as cmd
from gateway.backend.catalog import Catalog
from gateway.backend.interface import ConsumerQos, SubscriptionEnded
from gateway.backend.pulsar.consumers.interface import ConsumerHost
from gateway.backend.pulsar.delivery import PulsarDelivery, PulsarQueueSubscription
from gateway.backend.pulsar.queue_types.interface import ConsumeRequest
from gateway.metadata.errors import MissingEntity
from gateway.metadata.roles import Consumers, Lifecycle, Views
from gateway.metadata.store import MetadataUnavailable, VhostView
from gateway.model.arguments import queue_type_named
from gateway.model.consumers import (
    LinePlace,
    Standing,
    consumer_credit,
    consumer_priority,
    preempting,
    successor,
)
from gateway.model.entities import Queue

__all__ = ["SINGLE_ACTIVE", "SingleActiveConsumers", "SingleActiveSubscription", "join_line"]

log = logging.getLogger("gateway.pulsar.single_active")

# Opens the queue's Pulsar consumer once this one is active.
OpenConsumer = Callable[[], Awaitable[PulsarQueueSubscription]]
# After close: unregisters the consumer (and deletes an auto-delete queue it left unused).
Gone = Callable[[str], Awaitable[None]]


async def join_line(
    catalog: Catalog,
    queue: Queue,
    command: cmd.BasicConsume,
    qos: ConsumerQos,
    open_consumer: OpenConsumer,
    gone: Gone,
    nursery: trio.Nursery,
) -> SingleActiveSubscription:
    """Register a consumer of ``queue`` (a single-active-consumer queue) at the back of its
    line, and follow the line in ``nursery`` until the consumer closes."""
    credit = consumer_credit(0 if command.no_ack else qos.consumer)
    standing = Standing(consumer_priority(command.arguments), credit)
    store = catalog.store
    registration = await catalog.write(
        store.add_consumer(catalog.namespace, queue.name, exclusive=False, standing=standing)
    )
    line = SingleActiveSubscription(
        store,
        catalog.namespace,
        queue.name,
        queue_type_named(queue.arguments),
        standing,
        registration,
        open_consumer,
        gone,
    )
    nursery.start_soon(line.follow)
    return line


class LineStore(Consumers, Lifecycle, Views, Protocol):
    """What a consumer in line uses of the metadata store: the line's records, whether the
    store can be written now, and the view that shows the line."""


class SingleActiveSubscription:
    """What ``PulsarVirtualHost.consume`` returns for a single-active-consumer queue."""

    def __init__(
        self,
        store: LineStore,
        namespace: str,
        queue: str,
        queue_type: str,
        standing: Standing,
        registration: str,
        open_consumer: OpenConsumer,
        gone: Gone,
    ) -> None:
        self.queue = queue
        self._store = store
        self._namespace = namespace
        self._type = queue_type
        self._standing = standing
        self.registration: str | None = registration
        self._open = open_consumer
        self._gone = gone
        self._serving: PulsarQueueSubscription | None = None
        self._stepping_down = False
        self._paused = False
        self.ended = False
        self.closed = False
        # Set and replaced whenever something a receive waits for changes.
        self._changed = trio.Event()
        # The receive in progress on the Pulsar consumer, cancelled to stop delivering.
        self._receiving: trio.CancelScope | None = None
        self._follower = trio.CancelScope()
        self._nursery: trio.Nursery | None = None  # follow()'s, for turns taken on settle
        # One turn of the line at a time (a view change and a reconnection may both ask).
        self._turn = trio.Lock()

    @property
    def active(self) -> bool:
        """Whether this consumer is delivering (active, not paused or stepping down)."""
        return self._serving is not None and not (self._stepping_down or self._paused)

    @property
    def activity_status(self) -> str:
        """RabbitMQ's ``activity_status`` (backend/interface.py ``TakesTurns``): waiting
        while paused or stepping down too, as it delivers nothing then."""
        return "single_active" if self.active else "waiting"

    def _signal(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _stop_receiving(self) -> None:
        if self._receiving is not None:
            self._receiving.cancel()
        self._signal()

    # ------------------------------------------------------------------ the client's side

    async def receive(
        self, before_wait: Callable[[], Awaitable[None]] | None = None
    ) -> PulsarDelivery:
        while True:
            if self.ended:
                raise SubscriptionEnded(self.queue)
            serving = self._serving
            if serving is not None and self.active:
                with trio.CancelScope() as scope:
                    self._receiving = scope
                    try:
                        return await serving.receive(before_wait)
                    finally:
                        self._receiving = None
                continue  # stopped meanwhile: wait for the next turn
            if before_wait is not None:
                flush, before_wait = before_wait, None
                await flush()
                continue
            await self._changed.wait()

    def receive_nowait(self) -> PulsarDelivery | None:
        """A message already here while this consumer is the active one (no receive is in
        progress then, so there is nothing for ``_stop_receiving`` to cancel)."""
        serving = self._serving
        if self.ended or serving is None or not self.active:
            return None
        return serving.receive_nowait()

    async def close(self) -> None:
        """Stop (the session gave back what the client held): the Pulsar consumer closes
        first, so that its messages are back in the queue before the record goes and the next
        consumer becomes active. A turn of the line under way (an activation sent to the
        store, say) is let finish first: the record it leaves is the one to remove."""
        if self.closed:
            return
        self.closed = True
        self._stop_receiving()
        with trio.CancelScope(shield=True):
            async with self._turn:
                await self._stop_serving()
                registration, self.registration = self.registration, None
                if registration is not None:
                    await self._gone(registration)
        self._follower.cancel()
        self._signal()

    # ------------------------------------------------------------------ the line

    async def follow(self) -> None:
        """Follow the line until closed (run in the vhost's nursery once registered)."""
        with self._follower:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._follow_connection)
                await self._follow_view()
                nursery.cancel_scope.cancel()

    async def _follow_view(self) -> None:
        view = self._store.view(self._namespace)
        while not self.closed:
            await self._take_turn(view)
            try:
                view = await self._store.changed(self._namespace, view.version)
            except MetadataUnavailable:
                return  # the store closed: so is the gateway

    async def _follow_connection(self) -> None:
        """Pause while the store cannot be written (see the module docstring)."""
        store = self._store
        while not self.closed:
            await store.wait_connected(False)
            self._paused = True
            self._stop_receiving()
            await store.wait_connected(True)
            self._paused = False
            self._signal()
            await self._take_turn(store.view(self._namespace))

    async def _take_turn(self, view: VhostView) -> None:
        async with self._turn:
            try:
                await self._step(view)
            except MetadataUnavailable as error:
                # Taken again at the next change of the view, or once reconnected.
                log.info("single active consumer of '%s': %s", self.queue, error)
            except Exception:
                log.warning(
                    "single active consumer of '%s' failed to follow its line",
                    self.queue,
                    exc_info=True,
                )

    async def _step(self, view: VhostView) -> None:
        log.debug(
            "consumer %s of '%s': line %s, serving %s",
            self.registration,
            self.queue,
            view.lines.get(self.queue),
            self._serving is not None,
        )
        if self.closed:
            return
        if self.queue not in view.queues:
            self.ended = True  # deleted: the session sends Basic.Cancel
            await self._stop_serving()
            return
        registration = self.registration
        if registration is None or not self._store.in_line(self._namespace, registration):
            await self._rejoin()
            return
        line = view.lines.get(self.queue, ())
        mine = next((p for p in line if p.consumer == registration), None)
        if mine is None:
            # Still ours, missing from this view only: being replaced. A change of state
            # creates the new record and deletes the old (zookeeper/lines.py); the old one's
            # deletion event can reach this replica's view before its own transaction's
            # answer puts the new one there. The next view has it.
            return
        if not mine.active:
            if self._serving is not None:
                await self._stop_serving()  # stepped down
            if successor(line, self._type) == mine and not self._paused:
                await self._activate()
            return
        if self._serving is None and not self._paused and not self._stepping_down:
            await self._start_serving()
        # Once started, stepping down goes on even if the other one left meanwhile (as
        # rabbit_fifo's quiescing consumer does): it ends when the deliveries are settled.
        if self._stepping_down or preempting(line, self._type) is not None:
            await self._step_down()

    async def _rejoin(self) -> None:
        """Our record is gone while we still run: the session expired (its records went
        with it; the store says so, not a view that may lag). Whatever we delivered from is
        given back, and we join at the back."""
        await self._stop_serving()
        if not self._store.connected:
            return
        log.info("single active consumer of '%s' lost its place; joining again", self.queue)
        try:
            self.registration = await self._store.add_consumer(
                self._namespace, self.queue, exclusive=False, standing=self._standing
            )
        except MissingEntity:
            self.ended = True
            self._signal()

    async def _activate(self) -> None:
        def pick(places: Sequence[LinePlace]) -> LinePlace | None:
            return successor(places, self._type)

        if await self._store.activate_consumer(self._namespace, self.queue, pick):
            log.debug("consumer %s of '%s' is now the active one", self.registration, self.queue)
            await self._start_serving()

    async def _start_serving(self) -> None:
        serving = await self._open()
        with trio.CancelScope(shield=True):
            if self.closed or self._serving is not None:
                await serving.close()
                return
        serving.on_idle = self._idle
        self._serving = serving
        self._stepping_down = False
        self._signal()

    async def _stop_serving(self) -> None:
        serving, self._serving = self._serving, None
        self._stop_receiving()
        if serving is not None:
            await serving.close()

    async def _step_down(self) -> None:
        """A quorum queue's consumer of higher priority waits: no new deliveries; once the
        client settled what it holds, back to waiting."""
        self._stepping_down = True
        self._stop_receiving()
        serving = self._serving
        if serving is not None and serving.outstanding:
            return  # ``_idle`` takes the turn again when the last one is settled
        await self._stop_serving()
        if self.registration is not None:
            await self._store.deactivate_consumer(self._namespace, self.queue, self.registration)
        self._stepping_down = False

    def _idle(self) -> None:
        """The client settled the last delivery it held."""
        if self._stepping_down and not self.closed and self._nursery is not None:
            self._nursery.start_soon(self._take_turn, self._store.view(self._namespace))


class SingleActiveConsumers:
    """The consumer strategy of a single-active-consumer queue: each consumer joins the line
    (``join_line``), with a Pulsar consumer only while it is the head."""

    async def consume(
        self, host: ConsumerHost, entity: Queue, request: ConsumeRequest
    ) -> SingleActiveSubscription:
        queue = entity.name

        async def open_consumer() -> PulsarQueueSubscription:
            return await host.open_active_consumer(queue, request.prefetch)

        async def gone(registration: str) -> None:
            await host.line_consumer_gone(queue, registration)

        command, qos, nursery = request.command, request.qos, host.nursery
        return await join_line(host.catalog, entity, command, qos, open_consumer, gone, nursery)


SINGLE_ACTIVE: Final = SingleActiveConsumers()
