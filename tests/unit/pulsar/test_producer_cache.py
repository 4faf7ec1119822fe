"""ProducerCache's choice of producer for a message (the rest runs against the broker:
tests/integration/pulsar/test_producer_cache.py): a message too large for one Pulsar entry,
payload and metadata, goes through the topic's chunking producer."""

from __future__ import annotations

from typing import cast

import pytest

from gateway.pulsar.client import PulsarClient
from gateway.pulsar.producer import ProducerOptions
from gateway.pulsar.producer_cache import (
    DEFAULT_MAX_MESSAGE_SIZE,
    LARGE_IN_FLIGHT,
    METADATA_ALLOWANCE,
    ProducerCache,
    chunking,
)

MAX = 5 * 1024 * 1024


def cache(max_message_size: int = MAX) -> ProducerCache:
    # No producer is made here: the client is never called.
    return ProducerCache(cast(PulsarClient, object()), max_message_size=max_message_size)


def test_what_fits_one_entry_and_what_does_not() -> None:
    producers = cache()
    assert producers.max_message_size == DEFAULT_MAX_MESSAGE_SIZE == MAX
    assert not producers.is_large(b"x")
    assert not producers.is_large(bytes(MAX // 2), {"big": "y" * (MAX // 4)})
    assert not producers.is_large(bytes(MAX - METADATA_ALLOWANCE))
    assert producers.is_large(bytes(MAX - METADATA_ALLOWANCE + 1))
    assert producers.is_large(bytes(MAX))
    assert producers.is_large(bytes(15_000_000))
    # The properties count too, as pulsar-client counts the metadata (in UTF-8).
    almost = bytes(MAX - METADATA_ALLOWANCE - 100)
    assert not producers.is_large(almost, {"k": "v"})
    assert producers.is_large(almost, {"k": "é" * 60})


def test_a_broker_with_another_maximum() -> None:
    producers = cache(20 * 1024 * 1024)
    assert not producers.is_large(bytes(15_000_000))
    assert producers.is_large(bytes(21 * 1024 * 1024))
    with pytest.raises(ValueError):
        cache(METADATA_ALLOWANCE)


def test_the_chunking_producer_does_not_batch_and_counts_messages() -> None:
    options = chunking(ProducerOptions(batching_enabled=True, producer_name=None))
    assert (options.batching_enabled, options.chunking_enabled) == (False, True)
    assert options.max_pending_messages == LARGE_IN_FLIGHT
    # pulsar-client takes one of its slots per chunk: its own limit is off, ours counts.
    assert options.native_max_pending_messages == 0
    assert cache().large_options == chunking(ProducerOptions())
    with pytest.raises(ValueError):
        ProducerOptions(batching_enabled=True, chunking_enabled=True)


def test_native_pending_limit() -> None:
    from gateway.pulsar.producer import _native_config

    default = _native_config(ProducerOptions(max_pending_messages=7))
    assert default.max_pending_messages() == 7
    unbounded = _native_config(chunking(ProducerOptions()))
    assert unbounded.max_pending_messages() == 0
    assert unbounded.chunking_enabled() and not unbounded.batching_enabled()
    with pytest.raises(ValueError):
        ProducerOptions(native_max_pending_messages=-1)
