"""The usage-event contract: round trip, validation, and the declared Pulsar schema."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.observability.usage_event import (
    AVRO_SCHEMA,
    COUNTER_FIELDS,
    MalformedUsageEvent,
    UsageEvent,
)


def event(**changes: object) -> UsageEvent:
    fields: dict[str, object] = {
        "event_id": "gw-1:7",
        "replica": "gw-1",
        "sequence": 7,
        "vhost": "/",
        "namespace": "public/default",
        "window_start_ms": 1_000,
        "window_end_ms": 6_000,
        "published_messages": 3,
        "published_bytes": 300,
    }
    fields.update(changes)
    return UsageEvent(**fields)  # type: ignore[arg-type]


counts = st.integers(min_value=0, max_value=2**53)


@given(published=counts, delivered=counts, peak=counts, vhost=st.text())
def test_json_round_trip(published: int, delivered: int, peak: int, vhost: str) -> None:
    original = event(
        published_messages=published,
        delivered_messages=delivered,
        peak_connections=peak,
        vhost=vhost,
    )
    assert UsageEvent.from_json(original.to_json()) == original


def test_counter_fields_are_the_summed_quantities() -> None:
    assert "published_messages" in COUNTER_FIELDS
    assert "peak_connections" in COUNTER_FIELDS
    assert not {"sequence", "window_start_ms", "schema_version", "event_id"} & set(COUNTER_FIELDS)


@pytest.mark.parametrize(
    ("payload", "complaint"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_garbage_is_refused(payload: bytes, complaint: str) -> None:
    with pytest.raises(MalformedUsageEvent, match=complaint):
        UsageEvent.from_json(payload)


def _mutated(**changes: object) -> bytes:
    data = json.loads(event().to_json())
    data.update(changes)
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    ("payload", "complaint"),
    [
        (_mutated(schema_version=2), "schema_version 2"),
        (_mutated(extra=1), "unknown field"),
        (_mutated(published_messages=-1), "negative"),
        (_mutated(published_messages="3"), "published_messages: expected int"),
        (_mutated(routed_messages=True), "routed_messages: expected int"),
        (_mutated(window_end_ms=0), "window ends"),
        (_mutated(event_id=""), "must not be empty"),
    ],
)
def test_bad_fields_are_named(payload: bytes, complaint: str) -> None:
    with pytest.raises(MalformedUsageEvent, match=complaint):
        UsageEvent.from_json(payload)


def test_missing_field_is_named() -> None:
    data = json.loads(event().to_json())
    del data["vhost"]
    with pytest.raises(MalformedUsageEvent, match=r"missing field.*vhost"):
        UsageEvent.from_json(json.dumps(data))


def test_avro_schema_lists_every_field_once() -> None:
    names = [f["name"] for f in AVRO_SCHEMA["fields"]]
    assert names == list(json.loads(event().to_json()))
    types = {f["name"]: f["type"] for f in AVRO_SCHEMA["fields"]}
    assert types["vhost"] == "string"
    assert types["published_bytes"] == "long"
