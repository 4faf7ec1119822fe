"""One /metrics for the N worker processes of ``--workers N``: the sum of theirs.

Each worker counts in its own memory and serves its own exposition on a loopback port; the
supervisor reads them all at scrape time and adds the samples up, series by series (same
name, same labels), so that Prometheus sees one replica whose counts are the workers' total,
exactly what one process would have counted. A few series are not amounts and are not
summed: identity and build info (the supervisor's own), limits and uptime (the largest), and
yes/no gauges (a check passes only if it passes in every worker).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Final

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

__all__ = ["SummedExposition"]

#: Families replaced by the supervisor's own (one replica, one identity).
OWN: Final = frozenset({"rabbitmq_identity_info", "rabbitmq_build_info"})
#: Families whose samples are the largest of the workers', not their sum.
LARGEST: Final = frozenset(
    {
        "rabbitmq_resident_memory_limit_bytes",
        "rabbitmq_process_max_fds",
        "rabbitmq_disk_space_available_bytes",
        "rabbitmq_disk_space_available_limit_bytes",
        "rabbitmq_erlang_uptime_seconds",
        "starlight_leader",
    }
)
#: Families whose samples are the smallest (1 only if 1 in every worker).
SMALLEST: Final = frozenset({"starlight_ready", "starlight_zookeeper_connected"})


class SummedExposition(Collector):
    """A collector over worker expositions (text format), plus ``own`` families."""

    def __init__(self, texts: Iterable[str], own: Iterable[Metric]) -> None:
        self._texts = list(texts)
        self._own = list(own)

    def collect(self) -> Iterator[Metric]:
        yield from self._own
        merged: dict[str, Metric] = {}
        values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
        for text in self._texts:
            for family in text_string_to_metric_families(text):
                if family.name in OWN:
                    continue
                if family.name not in merged:
                    merged[family.name] = Metric(family.name, family.documentation, family.type)
                    values[family.name] = {}
                series = values[family.name]
                combine = _combiner(family.name)
                for sample in family.samples:
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    previous = series.get(key)
                    series[key] = (
                        sample.value if previous is None else combine(previous, sample.value)
                    )
        for name, family in merged.items():
            for (sample_name, labels), value in values[name].items():
                family.add_sample(sample_name, dict(labels), value)
            yield family


def _combiner(name: str) -> Callable[[float, float], float]:
    if name in LARGEST:
        return max
    if name in SMALLEST:
        return min
    return operator.add
