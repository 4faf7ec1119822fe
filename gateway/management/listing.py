"""What RabbitMQ's list endpoints do with their query string (``rabbit_mgmt_util``):
``sort``/``sort_reverse``, ``columns``, and pagination (``page``, ``page_size``, ``name``,
``use_regex``) — KEDA's scaler asks for ``?page=1&use_regex=true&pagination=false&name=...``.

- ``sort`` is a (dotted) key, sorted on as RabbitMQ does (missing values first); the default
  is the endpoint's own (``vhost`` then ``name`` for queues).
- ``columns`` keeps only the listed (dotted) keys of each item: ``columns=name,messages``.
- With ``page`` the answer is an object (``items``, ``page``, ``page_count``, ``page_size``,
  ``item_count``, ``filtered_count``, ``total_count``); ``page_size`` is at most 500;
  ``name`` filters on a case-insensitive substring, or a case-insensitive regular expression
  with ``use_regex=true``. Without ``page`` nothing is filtered, as in RabbitMQ.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.management.errors import bad_request

__all__ = ["arrange", "select_columns"]

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500


def _get(item: Mapping[str, Any], dotted: str) -> Any:
    value: Any = item
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _sort_key(value: Any) -> tuple[int, Any]:
    # None first, then numbers, then strings: never comparing across kinds.
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, value)
    return (2, str(value))


def select_columns(item: Mapping[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """Only ``columns`` (dotted paths) of ``item``, nested as they were."""
    picked: dict[str, Any] = {}
    for column in columns:
        parts = column.split(".")
        value: Any = item
        for part in parts:
            if not isinstance(value, Mapping) or part not in value:
                break
            value = value[part]
        else:
            target = picked
            for part in parts[:-1]:
                target = target.setdefault(part, {})
            target[parts[-1]] = value
    return picked


def _int_param(query: Mapping[str, str], name: str) -> int | None:
    text = query.get(name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return -1  # refused below with RabbitMQ's message


def arrange(
    items: list[dict[str, Any]], query: Mapping[str, str], default_sort: Sequence[str]
) -> Any:
    """The JSON a list endpoint answers for ``items`` and the request's query string."""
    sort = query.get("sort")
    keys = [sort] if sort else list(default_sort)
    ordered = sorted(items, key=lambda item: [_sort_key(_get(item, key)) for key in keys])
    if query.get("sort_reverse") == "true":
        ordered.reverse()
    columns = [column for column in query.get("columns", "").split(",") if column]
    page = _int_param(query, "page")
    if page is None:
        return [select_columns(item, columns) for item in ordered] if columns else ordered
    size = _int_param(query, "page_size")
    size = DEFAULT_PAGE_SIZE if size is None else size
    if page < 1 or not 0 < size <= MAX_PAGE_SIZE:
        raise bad_request(
            f"Invalid pagination parameters: page number {query.get('page')}, "
            f"page size {query.get('page_size', DEFAULT_PAGE_SIZE)}"
        )
    filtered = _filtered(ordered, query.get("name", ""), query.get("use_regex") == "true")
    start = (page - 1) * size
    if start > len(filtered):
        raise bad_request(
            f"Page out of range, page: {page} page size: {size}, len: {len(filtered)}"
        )
    chosen = filtered[start : start + size]
    if columns:
        chosen = [select_columns(item, columns) for item in chosen]
    return {
        "filtered_count": len(filtered),
        "item_count": len(chosen),
        "items": chosen,
        "page": page,
        "page_count": (len(filtered) + size - 1) // size,
        "page_size": size,
        "total_count": len(ordered),
    }


def _filtered(items: list[dict[str, Any]], name: str, regex: bool) -> list[dict[str, Any]]:
    if not name:
        return items
    if regex:
        try:
            pattern = re.compile(name, re.IGNORECASE)
        except re.error as error:
            raise bad_request(f"invalid regular expression {name!r}: {error}") from None
        return [item for item in items if pattern.search(str(item.get("name", "")))]
    needle = name.lower()
    return [item for item in items if needle in str(item.get("name", "")).lower()]
