"""Queue depth gauges (rabbitmq_queue_messages_ready/_unacked, rabbitmq_queue_consumers) from
Pulsar's subscription statistics, refreshed in the background by the leader of each namespace.

Never per scrape, never from every replica: one replica (the namespace's leader) walks the
queues of the namespace at most every ``interval`` seconds, with at most ``calls_per_second``
admin calls (one topic's stats answer for every queue subscribed to it). 100,000 queues cost
100,000 / ``calls_per_second`` seconds per refresh, spread out, whatever the scrape rate; the
exported gauges are as old as the last refresh. The walk itself (the queues' topics looked up in
the view) costs the leader's trio thread in proportion to the queues, so it takes at most
``WALK_SHARE`` of that thread's time: a vhost of a million queues is walked less often. Only
the leader exports its namespace's queues, so a fleet's sum counts each queue once (RabbitMQ's
queue leader reports its queue likewise).

Messages is the subscriptions' backlog (every message not acknowledged; Pulsar counts backlog
entries: with batching on, a batch counts once); ready is that backlog less what Pulsar has
dispatched to the replicas' consumers (so messages a replica read ahead but no client holds yet
count in neither ready nor unacked); consumers come from the metadata store (every replica's
AMQP consumers, a stream's too), not from Pulsar (which sees one consumer per binding). A
stream's messages are those in its log (besides any its leader has still to feed to it).
Unacked is not from here: each replica exports what its own clients hold
(PulsarBackend.held_by_queue).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

import trio

from gateway.backend.pulsar.leader.scope import LeaderDuty, LeaderScope
from gateway.backend.pulsar.queue_types.stream.queues import stream_of
from gateway.model.naming import subscription_for
from gateway.observability.counters import COUNTERS, QueueGauge
from gateway.pulsar.admin_stats import TopicStats
from gateway.pulsar.errors import NotFound

log = logging.getLogger("gateway.queue_stats")

__all__ = ["QueueStatsRefresher"]

QUEUE_STATS_INTERVAL = 15.0
QUEUE_STATS_CALLS_PER_SECOND = 50.0
# A round yields to the other tasks after this many queues: with lazy subscriptions most
# queues have no live topic, so the walk would otherwise never await, and at a million queues
# it held the leader's trio thread (its clients, its metadata events) for seconds.
QUEUES_PER_TURN = 1000
# The walk's share of the leader's time at most: a walk that took its trio thread W seconds
# (its awaits left out) is followed by a pause of at least W * (1 - share) / share. The walk
# costs in proportion to the vhost (~10 µs a queue here): 15 s apart, a million queues would
# keep the leader's thread busy most of the time; so large a vhost gets older gauges instead.
# (RabbitMQ likewise tells operators of many queues to lengthen collect_statistics_interval.)
WALK_SHARE = 0.1


class QueueStatsRefresher(LeaderDuty):
    def __init__(
        self,
        scope: LeaderScope,
        *,
        interval: float = QUEUE_STATS_INTERVAL,
        calls_per_second: float = QUEUE_STATS_CALLS_PER_SECOND,
    ) -> None:
        super().__init__(scope)
        self._interval = interval
        self._pause = 1.0 / calls_per_second
        self.calls = 0  # admin calls made (tests check the bound)
        self.busy = 0.0  # seconds the last walk held the trio thread (its awaits left out)

    def pause_after_walk(self) -> float:
        """Seconds until the next walk: the interval, or longer after a long walk."""
        return max(self._interval, self.busy * (1.0 - WALK_SHARE) / WALK_SHARE)

    async def run(self) -> None:
        COUNTERS.leading.add(self._namespace)
        try:
            while True:
                try:
                    await self.refresh()
                except KeyError:
                    return  # the namespace was closed here
                except Exception as error:
                    log.info("queue stats of %s not refreshed: %s", self._namespace, error)
                await trio.sleep(self.pause_after_walk())
        finally:
            COUNTERS.leading.discard(self._namespace)
            COUNTERS.queues.pop(self._namespace, None)

    async def refresh(self) -> None:
        view = self._vhost.catalog.view
        topics: dict[str, TopicStats | None] = {}
        gauges: dict[str, QueueGauge] = {}
        busy = _Stopwatch()
        for walked, queue in enumerate(list(view.queues), start=1):
            if walked % QUEUES_PER_TURN == 0:
                with busy.stopped():
                    await trio.lowlevel.checkpoint()
            subscription = subscription_for(queue)
            ready = messages = 0
            for topic in sorted(self._vhost.live_topics(view, queue)):
                if topic not in topics:
                    with busy.stopped():
                        topics[topic] = await self._stats(topic)
                stats = topics[topic]
                found = None if stats is None else stats.subscriptions.get(subscription)
                if found is not None:
                    ready += max(0, found.msg_backlog - found.unacked_messages)
                    messages += found.msg_backlog
            if stream_of(view, queue) is not None:
                # A stream's messages are its log's (rabbit_stream_queue reports them as
                # messages and as ready), besides those still to be fed to it.
                self.calls += 1
                with busy.stopped():
                    stored = await self._vhost.streams.stored(queue)
                    await trio.sleep(self._pause)
                ready, messages = ready + stored, messages + stored
            gauges[queue] = QueueGauge(ready, messages, view.consumers.get(queue, 0))
        COUNTERS.queues[self._namespace] = gauges
        self.busy = busy.seconds()

    async def _stats(self, topic: str) -> TopicStats | None:
        self.calls += 1
        try:
            return await self._admin.topic_stats(topic)
        except NotFound:
            return None  # no message was ever published there: nothing waits
        finally:
            await trio.sleep(self._pause)


class _Stopwatch:
    """Running from its creation, stopped inside ``stopped()`` (while the walk awaits and
    other tasks run)."""

    def __init__(self) -> None:
        self._counted = 0.0
        self._since = time.perf_counter()

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        self._counted += time.perf_counter() - self._since
        try:
            yield
        finally:
            self._since = time.perf_counter()

    def seconds(self) -> float:
        return self._counted + time.perf_counter() - self._since
