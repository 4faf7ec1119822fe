"""The queue statistics round: gauges from subscription statistics, and a round over many
queues that never holds the trio thread for the whole vhost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from gateway.backend.pulsar.queue_stats import QUEUES_PER_TURN, QueueStatsRefresher
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.metadata.store import VhostView
from gateway.model.entities import Queue
from gateway.observability.counters import COUNTERS
from gateway.pulsar.admin import PulsarAdmin
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
    return QueueStatsRefresher(cast(PulsarVirtualHost, vhost), admin, NS), vhost


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
