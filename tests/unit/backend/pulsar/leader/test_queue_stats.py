"""The queue statistics round: gauges from subscription statistics, and a round over many
queues that never holds the trio thread for the whole vhost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import trio

from gateway.backend.pulsar.leader.queue_stats import (
    QUEUE_STATS_INTERVAL,
    QUEUES_PER_TURN,
    WALK_SHARE,
    QueueStatsRefresher,
)
from gateway.backend.pulsar.leader.scope import LeaderScope
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.metadata.store import VhostView
from gateway.model.entities import Queue
from gateway.observability.counters import COUNTERS
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.errors import NotFound
from tests.support.turns import turns_during

NS = "public/stats"


@dataclass
class Catalog:
    view: VhostView


@dataclass
class QuietVhost:
    """Queues without a live topic (lazy subscriptions: nothing was published to them)."""

    catalog: Catalog
    topics_asked: list[str] = field(default_factory=list)

    def live_topics(self, view: VhostView, queue: str) -> set[str]:
        self.topics_asked.append(queue)
        return set()


def _refresher(queues: int) -> tuple[QueueStatsRefresher, QuietVhost]:
    view = VhostView(queues={f"q{i}": Queue(f"q{i}") for i in range(queues)})
    vhost = QuietVhost(Catalog(view))
    admin = cast(PulsarAdmin, cast(Any, object()))  # never called: no queue has a topic
    scope = LeaderScope(cast(PulsarVirtualHost, vhost), cast(Any, None), admin, NS)
    return QueueStatsRefresher(scope), vhost


async def test_a_round_over_many_queues_lets_other_tasks_run() -> None:
    queues = 5 * QUEUES_PER_TURN
    refresher, vhost = _refresher(queues)
    _, turns = await turns_during(refresher.refresh())
    # Without the turns, the other task would not run once while 5,000 queues are walked.
    assert turns >= queues // QUEUES_PER_TURN - 1
    assert len(vhost.topics_asked) == queues
    assert refresher.calls == 0
    gauges = COUNTERS.queues.pop(NS)
    assert len(gauges) == queues
    assert {(g.ready, g.messages) for g in gauges.values()} == {(0, 0)}


@dataclass
class SlowAdmin:
    """Every topic's statistics take ``seconds`` to come (others may run meanwhile)."""

    seconds: float

    async def topic_stats(self, topic: str) -> Any:
        await trio.sleep(self.seconds)
        raise NotFound(404, "GET", f"/admin/v2/{topic}/stats", "Topic not found")


@dataclass
class LiveVhost(QuietVhost):
    def live_topics(self, view: VhostView, queue: str) -> set[str]:
        self.topics_asked.append(queue)
        return {f"persistent://public/stats/{queue}"}


async def test_the_walks_busy_time_leaves_out_its_awaits() -> None:
    view = VhostView(queues={f"q{i}": Queue(f"q{i}") for i in range(3)})
    admin = cast(PulsarAdmin, cast(Any, SlowAdmin(0.2)))
    vhost = cast(PulsarVirtualHost, LiveVhost(Catalog(view)))
    refresher = QueueStatsRefresher(
        LeaderScope(vhost, cast(Any, None), admin, NS), calls_per_second=1000.0
    )
    started = trio.current_time()
    await refresher.refresh()
    assert trio.current_time() - started >= 0.6  # three statistics awaited
    assert 0.0 < refresher.busy < 0.3
    COUNTERS.queues.pop(NS)


def test_a_long_walk_is_followed_by_a_longer_pause() -> None:
    refresher, _ = _refresher(0)
    assert refresher.pause_after_walk() == QUEUE_STATS_INTERVAL
    refresher.busy = 0.01
    assert refresher.pause_after_walk() == QUEUE_STATS_INTERVAL
    refresher.busy = 10.0  # a million queues: the walk takes at most WALK_SHARE of the time
    pause = refresher.pause_after_walk()
    assert refresher.busy / (refresher.busy + pause) == pytest.approx(WALK_SHARE)
