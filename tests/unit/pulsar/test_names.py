"""Topic-name splitting and REST-path encoding."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.pulsar.names import (
    TopicName,
    is_valid_namespace_part,
    local_name_problem,
    namespace_rest_path,
    quote_segment,
    topic_rest_path,
    topics_list_rest_path,
)


def test_parse_full_name() -> None:
    name = TopicName.parse("persistent://public/default/ex__key")
    assert name == TopicName("persistent", "public", "default", "ex__key")
    assert str(name) == "persistent://public/default/ex__key"


@pytest.mark.parametrize("local", ["a/b", "x\x00y", " ", "\t\n", ".", ".."])
def test_parse_refuses_local_names_pulsar_cannot_handle(local: str) -> None:
    with pytest.raises(ValueError):
        TopicName.parse(f"persistent://t/ns/{local}")
    with pytest.raises(ValueError):
        TopicName.of("t", "ns", local)


def test_partition_names_stay_addressable() -> None:
    name = TopicName.parse("persistent://t/ns/p-partition-3")
    assert name.local == "p-partition-3"
    assert TopicName.parse("non-persistent://t/ns/...").domain == "non-persistent"


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("public", True),
        ("a=b:c.d_e-F9", True),
        ("a b", False),
        ("é", False),
        ("a%b", False),
        ("a+b", False),
        ("a~b", False),
        ("", False),
        (".", False),
        ("..", False),
    ],
)
def test_valid_namespace_parts(name: str, ok: bool) -> None:
    assert is_valid_namespace_part(name) is ok


@pytest.mark.parametrize(
    "bad",
    [
        "my-topic",
        "public/default/x",
        "persistent://public/default",
        "persistent://public//x",
        "persistent:///default/x",
        "persistent://public/default/",
        "http://public/default/x",
    ],
)
def test_parse_refuses_short_or_broken_names(bad: str) -> None:
    with pytest.raises(ValueError):
        TopicName.parse(bad)


def test_rest_path_encodes_every_reserved_character() -> None:
    path = topic_rest_path("persistent://public/t-1/a%b c=d+e?g#h é")
    assert path == "/admin/v2/persistent/public/t-1/a%25b%20c%3Dd%2Be%3Fg%23h%20%C3%A9"


def test_plus_is_not_left_for_urldecoder_to_turn_into_space() -> None:
    # Pulsar decodes path segments with java.net.URLDecoder, where a bare '+' means ' '.
    assert quote_segment("a+b") == "a%2Bb"


def test_namespace_and_list_paths() -> None:
    assert namespace_rest_path("public", "t 1") == "/admin/v2/namespaces/public/t%201"
    assert topics_list_rest_path("public", "ns") == "/admin/v2/persistent/public/ns"
    assert TopicName.of("a", "b", "c", persistent=False).rest_path == (
        "/admin/v2/non-persistent/a/b/c"
    )


@given(st.text(min_size=1).filter(lambda s: local_name_problem(s) is None))
def test_segment_round_trips_and_never_contains_a_separator(local: str) -> None:
    encoded = quote_segment(local)
    assert "/" not in encoded and "+" not in encoded and "?" not in encoded
    assert unquote(encoded) == local
    name = TopicName.parse(f"persistent://t/ns/{local}")
    assert name.local == local
    assert TopicName.parse(str(name)) == name
