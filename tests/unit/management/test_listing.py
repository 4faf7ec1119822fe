"""gateway/management/listing.py: sort, columns and pagination as rabbit_mgmt_util."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.management.errors import ApiError
from gateway.management.listing import arrange, select_columns

ITEMS: list[dict[str, Any]] = [
    {"name": "b", "vhost": "/", "messages": 2, "message_stats": {"publish": 5}},
    {"name": "a", "vhost": "x", "messages": None},
    {"name": "Work.1", "vhost": "/", "messages": 10},
]


def names(result: Any) -> list[str]:
    items = result["items"] if isinstance(result, dict) else result
    return [item["name"] for item in items]


def test_default_sort_then_a_sort_key_and_reverse() -> None:
    assert names(arrange(ITEMS, {}, ["vhost", "name"])) == ["Work.1", "b", "a"]
    assert names(arrange(ITEMS, {"sort": "messages"}, ["name"])) == ["a", "b", "Work.1"]
    reverse = {"sort": "messages", "sort_reverse": "true"}
    assert names(arrange(ITEMS, reverse, ["name"])) == ["Work.1", "b", "a"]


def test_columns_keep_dotted_paths_nested() -> None:
    assert select_columns(ITEMS[0], ["name", "message_stats.publish", "nope.x"]) == {
        "name": "b",
        "message_stats": {"publish": 5},
    }
    assert arrange(ITEMS, {"columns": "name"}, ["name"]) == [
        {"name": "Work.1"},
        {"name": "a"},
        {"name": "b"},
    ]


def test_a_page_is_an_object_and_name_filters_only_with_it() -> None:
    assert names(arrange(ITEMS, {"name": "zzz"}, ["name"])) == ["Work.1", "a", "b"]
    page = arrange(ITEMS, {"page": "1", "page_size": "2", "name": "W"}, ["name"])
    assert page == {
        "filtered_count": 1,
        "item_count": 1,
        "items": [ITEMS[2]],
        "page": 1,
        "page_count": 1,
        "page_size": 2,
        "total_count": 3,
    }
    regex = {"page": "1", "use_regex": "true", "name": "^work\\.[0-9]$"}
    assert names(arrange(ITEMS, regex, ["name"])) == ["Work.1"]  # case-insensitive
    second = arrange(ITEMS, {"page": "2", "page_size": "2"}, ["name"])
    assert (names(second), second["page_count"]) == (["b"], 2)


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ({"page": "0"}, "Invalid pagination parameters: page number 0, page size 100"),
        ({"page": "1", "page_size": "501"}, "Invalid pagination parameters"),
        ({"page": "x"}, "Invalid pagination parameters: page number x"),
        ({"page": "3", "page_size": "2"}, "Page out of range, page: 3 page size: 2, len: 3"),
        ({"page": "1", "use_regex": "true", "name": "("}, "invalid regular expression '('"),
    ],
)
def test_bad_parameters_are_400(query: dict[str, str], reason: str) -> None:
    with pytest.raises(ApiError) as caught:
        arrange(ITEMS, query, ["name"])
    assert caught.value.status == 400
    assert reason in str(caught.value.reason)
