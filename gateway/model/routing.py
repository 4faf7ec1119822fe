"""Exchange routing: direct, fanout, topic and headers matching, and a Router per exchange.

Topic matching is RabbitMQ's (``rabbit_db_topic_exchange``): a routing key is split at every
``.`` into words, the empty key being *no* words (``split_topic_key(<<>>) -> []``) and ``a.``
being ``a`` and an empty word; in a binding key the whole word ``*`` matches exactly one word
(possibly empty) and the whole word ``#`` zero or more words; any other word, including ``a*``
or ``#a``, matches itself literally.

Headers matching is RabbitMQ's (``rabbit_exchange_type_headers``): ``x-match`` is ``all``
(also when absent), ``any``, ``all-with-x`` or ``any-with-x``; binding arguments whose names
start with ``x-`` are ignored except by the ``-with-x`` modes (``x-match`` itself always is); a
binding argument of type void matches the mere presence of the header; values compare as
Erlang terms (``gateway.model.values``): ``1`` and ``1.0`` match, ``1`` and ``"1"`` do not.
With no arguments left, ``all`` matches every message and ``any`` none.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.amqp.fieldtable import Field
from gateway.model.entities import Binding, Exchange, ExchangeType
from gateway.model.naming import topic_for
from gateway.model.values import erlang_key, erlang_term, type_name
from gateway.model.vhost import Namespace

__all__ = [
    "HeadersPattern",
    "Router",
    "TopicPattern",
    "XMatch",
    "binding_topics",
    "compile_headers",
    "compile_topic",
    "headers_match",
    "patterns_matching",
    "publish_topic",
    "split_words",
    "topic_matches",
    "topics_matching",
    "validate_binding",
]

_HASH: Final = "#"
_STAR: Final = "*"


# ---------------------------------------------------------------------------------- topic


def split_words(key: str) -> tuple[str, ...]:
    """RabbitMQ's word split: ``""`` → ``()``, ``"a."`` → ``("a", "")``."""
    return tuple(key.split(".")) if key else ()


def _normalise(words: tuple[str, ...]) -> tuple[str, ...]:
    # A run of wildcards with k stars matches exactly k words, or at least k when it holds a
    # "#": rewrite it as k stars and at most one "#". "#.#" becomes "#" and "#.*" "*.#", which
    # keeps the segments between "#"s non-empty.
    out: list[str] = []
    run_stars = 0
    run_hash = False
    for word in (*words, None):
        if word == _STAR:
            run_stars += 1
        elif word == _HASH:
            run_hash = True
        else:
            out.extend([_STAR] * run_stars)
            if run_hash:
                out.append(_HASH)
            run_stars, run_hash = 0, False
            if word is not None:
                out.append(word)
    return tuple(out)


def _match_at(segment: tuple[str, ...], words: Sequence[str], start: int) -> bool:
    for offset, expected in enumerate(segment):
        if expected != _STAR and words[start + offset] != expected:
            return False
    return True


@dataclass(frozen=True, slots=True)
class TopicPattern:
    """A compiled binding key. Matching is linear in the key for every pattern shape except
    ``#`` between literals, where it is O(words * segment length) at worst — no backtracking
    over several ``#``: each segment between ``#``s is placed at its leftmost fit, which is
    optimal because a segment matches a fixed number of words."""

    pattern: str
    # "literal" (no wildcard: string equality), "all" (only "#"s), "fixed" (stars, no "#"),
    # "glob" (at least one "#" and something else).
    shape: str
    segments: tuple[tuple[str, ...], ...]
    min_words: int

    def matches(self, routing_key: str) -> bool:
        if self.shape == "literal":
            return routing_key == self.pattern
        if self.shape == "all":
            return True
        return self.matches_words(split_words(routing_key))

    def matches_words(self, words: Sequence[str]) -> bool:
        """Match a key already split with ``split_words`` (split once, match many)."""
        shape = self.shape
        if shape == "all":
            return True
        if shape == "literal" or shape == "fixed":
            segment = self.segments[0]
            return len(words) == len(segment) and _match_at(segment, words, 0)
        count = len(words)
        if count < self.min_words:
            return False
        segments = self.segments
        prefix, suffix = segments[0], segments[-1]
        if not _match_at(prefix, words, 0):
            return False
        end = count - len(suffix)
        if not _match_at(suffix, words, end):
            return False
        position = len(prefix)
        for segment in segments[1:-1]:
            size = len(segment)
            while position + size <= end and not _match_at(segment, words, position):
                position += 1
            if position + size > end:
                return False
            position += size
        return True


@lru_cache(maxsize=16384)
def compile_topic(pattern: str) -> TopicPattern:
    """Compile a topic binding key once; cached because bindings repeat."""
    words = _normalise(split_words(pattern))
    if _HASH not in words and _STAR not in words:
        return TopicPattern(pattern, "literal", (words,), len(words))
    if _HASH not in words:
        return TopicPattern(pattern, "fixed", (words,), len(words))
    segments: list[tuple[str, ...]] = [()]
    for word in words:
        if word == _HASH:
            segments.append(())
        else:
            segments[-1] = (*segments[-1], word)
    if all(not segment for segment in segments):
        return TopicPattern(pattern, "all", tuple(segments), 0)
    return TopicPattern(pattern, "glob", tuple(segments), sum(map(len, segments)))


def topic_matches(pattern: str, routing_key: str) -> bool:
    return compile_topic(pattern).matches(routing_key)


def topics_matching(pattern: str, existing_keys: Iterable[str]) -> list[str]:
    """The routing keys (of existing ``<exchange>__<key>`` topics) a new binding covers."""
    compiled = compile_topic(pattern)
    return [key for key in existing_keys if compiled.matches(key)]


def patterns_matching(routing_key: str, bindings: Iterable[Binding]) -> list[Binding]:
    """The topic bindings a newly used routing key falls under."""
    words = split_words(routing_key)
    return [b for b in bindings if compile_topic(b.routing_key).matches_words(words)]


# -------------------------------------------------------------------------------- headers


class XMatch(enum.StrEnum):
    ALL = "all"
    ANY = "any"
    ALL_WITH_X = "all-with-x"
    ANY_WITH_X = "any-with-x"


_X_MATCH: Final = "x-match"
_MODES: Final = frozenset(mode.value for mode in XMatch)


def validate_binding(exchange_type: ExchangeType, arguments: Mapping[str, Field]) -> None:
    """Queue.Bind's argument check; only headers exchanges have one (an invalid ``x-match``),
    answered 406 with RabbitMQ's text (``validate_binding`` → ``binding_invalid`` →
    ``precondition_failed`` in rabbit_channel)."""
    if exchange_type is not ExchangeType.HEADERS:
        return
    field = arguments.get(_X_MATCH)
    if field is None:
        return
    if field.kind == "S":
        if field.value in _MODES:
            return
        raise ChannelError(
            ReplyCode.PRECONDITION_FAILED,
            f"Invalid x-match field value {erlang_term(field)}; "
            "expected all, any, all-with-x, or any-with-x",
        )
    raise ChannelError(
        ReplyCode.PRECONDITION_FAILED,
        f"Invalid x-match field type {type_name(field.kind)} (value {erlang_term(field)}); "
        "expected longstr",
    )


@dataclass(frozen=True, slots=True)
class HeadersPattern:
    """A compiled headers binding: the mode and ``(header, value key or None for void)``."""

    mode: XMatch
    required: tuple[tuple[str, tuple[Any, ...] | None], ...]

    def matches(self, headers: Mapping[str, Field] | None) -> bool:
        headers = headers or {}
        if self.mode is XMatch.ALL or self.mode is XMatch.ALL_WITH_X:
            for name, expected in self.required:
                value = headers.get(name)
                if value is None or (expected is not None and erlang_key(value) != expected):
                    return False
            return True
        for name, expected in self.required:
            value = headers.get(name)
            if value is not None and (expected is None or erlang_key(value) == expected):
                return True
        return False


def compile_headers(arguments: Mapping[str, Field]) -> HeadersPattern:
    field = arguments.get(_X_MATCH)
    mode = XMatch.ALL
    if field is not None and field.kind == "S" and field.value in _MODES:
        mode = XMatch(field.value)
    with_x = mode is XMatch.ALL_WITH_X or mode is XMatch.ANY_WITH_X
    required = tuple(
        (name, None if value.kind == "V" else erlang_key(value))
        for name, value in arguments.items()
        if name != _X_MATCH and (with_x or not name.startswith("x-"))
    )
    return HeadersPattern(mode, required)


def headers_match(arguments: Mapping[str, Field], headers: Mapping[str, Field] | None) -> bool:
    return compile_headers(arguments).matches(headers)


# ----------------------------------------------------------------------------------- trie


class _TrieNode:
    __slots__ = ("children", "greedy", "hash", "queues", "star")

    def __init__(self, greedy: bool = False) -> None:
        self.children: dict[str, _TrieNode] = {}
        self.star: _TrieNode | None = None
        self.hash: _TrieNode | None = None
        self.queues: set[str] = set()
        # The node reached by a "#": it may swallow any number of further words.
        self.greedy = greedy


class _TopicTrie:
    """All wildcard binding keys of an exchange in one word trie, like RabbitMQ's
    (``rabbit_db_topic_exchange`` trie_match): routing walks the key's words once per
    reachable node instead of trying every pattern. Keys are normalised first (``#.#`` is
    ``#``), a ``#`` node swallows one word at a time, and each (node, word position) is visited
    at most once: O(nodes * words) at worst, whatever the number of ``#``s."""

    __slots__ = ("_root",)

    def __init__(self, patterns: Iterable[tuple[str, Iterable[str]]]) -> None:
        self._root = _TrieNode()
        for pattern, queues in patterns:
            node = self._root
            for word in _normalise(split_words(pattern)):
                if word == _STAR:
                    node.star = node.star or _TrieNode()
                    node = node.star
                elif word == _HASH:
                    node.hash = node.hash or _TrieNode(greedy=True)
                    node = node.hash
                else:
                    node = node.children.setdefault(word, _TrieNode())
            node.queues.update(queues)

    def match(self, words: Sequence[str]) -> set[str]:
        found: set[str] = set()
        count = len(words)
        seen: set[tuple[int, int]] = set()
        stack: list[tuple[_TrieNode, int]] = [(self._root, 0)]
        while stack:
            node, position = stack.pop()
            mark = (id(node), position)
            if mark in seen:
                continue
            seen.add(mark)
            if node.hash is not None:
                # "#" matching zero words; the greedy node then takes one word at a time.
                stack.append((node.hash, position))
            if node.greedy and position < count:
                stack.append((node, position + 1))
            if position == count:
                found |= node.queues
                continue
            child = node.children.get(words[position])
            if child is not None:
                stack.append((child, position + 1))
            if node.star is not None:
                stack.append((node.star, position + 1))
        return found


# --------------------------------------------------------------------------------- router


class Router:
    """The bindings of one exchange, compiled for routing. Immutable: ``with_binding`` and
    ``without_binding`` return a new Router (bindings change rarely, messages often).

    The default exchange's bindings are implicit (every queue, keyed by its own name): build
    its Router from ``Binding(q, "", q)`` for the queues of the vhost.
    """

    __slots__ = ("_all", "_bindings", "_exact", "_headers", "_patterns", "exchange_type")

    def __init__(self, exchange_type: ExchangeType, bindings: Iterable[Binding] = ()) -> None:
        self.exchange_type = exchange_type
        self._bindings: frozenset[Binding] = frozenset(bindings)
        exact: dict[str, set[str]] = {}
        patterns: dict[str, set[str]] = {}
        headers: list[tuple[HeadersPattern, str]] = []
        for binding in self._bindings:
            if exchange_type is ExchangeType.TOPIC:
                compiled = compile_topic(binding.routing_key)
                if compiled.shape == "literal":
                    exact.setdefault(binding.routing_key, set()).add(binding.queue)
                else:
                    patterns.setdefault(binding.routing_key, set()).add(binding.queue)
            elif exchange_type is ExchangeType.DIRECT:
                exact.setdefault(binding.routing_key, set()).add(binding.queue)
            elif exchange_type is ExchangeType.HEADERS:
                headers.append((compile_headers(binding.arguments), binding.queue))
        self._exact = {key: frozenset(queues) for key, queues in exact.items()}
        self._patterns = _TopicTrie(patterns.items()) if patterns else None
        self._headers = tuple(headers)
        self._all = frozenset(binding.queue for binding in self._bindings)

    @property
    def bindings(self) -> frozenset[Binding]:
        return self._bindings

    def with_binding(self, binding: Binding) -> Router:
        return Router(self.exchange_type, self._bindings | {binding})

    def without_binding(self, binding: Binding) -> Router:
        return Router(self.exchange_type, self._bindings - {binding})

    def route(self, routing_key: str, headers: Mapping[str, Field] | None = None) -> set[str]:
        """The queues a message with this routing key and these headers reaches."""
        kind = self.exchange_type
        if kind is ExchangeType.FANOUT:
            return set(self._all)
        if kind is ExchangeType.HEADERS:
            return {queue for pattern, queue in self._headers if pattern.matches(headers)}
        queues = set(self._exact.get(routing_key, ()))
        if self._patterns is not None:
            queues |= self._patterns.match(split_words(routing_key))
        return queues

    def patterns_matching(self, routing_key: str) -> list[Binding]:
        """The bindings of this (topic) exchange that a newly used routing key falls under."""
        return patterns_matching(routing_key, self._bindings)


# ------------------------------------------------------------------------- topic choice


def publish_topic(namespace: Namespace, exchange: Exchange, routing_key: str) -> str:
    """The topic a message published to ``exchange`` with ``routing_key`` is written to."""
    return topic_for(namespace, exchange.name, routing_key if exchange.type.keyed else None)


def binding_topics(
    namespace: Namespace,
    exchange: Exchange,
    binding: Binding,
    existing_keys: Iterable[str] = (),
) -> list[str]:
    """The topics a binding subscribes to now.

    Direct: the one ``<exchange>__<key>`` topic. Fanout and headers: the exchange's topic.
    Topic: a binding key without wildcards names one topic; with wildcards it covers each
    routing key in ``existing_keys`` (those with a topic already, from
    ``naming.keys_for_exchange``) that it matches — and, later, every new key it matches
    (``patterns_matching``).
    """
    kind = exchange.type
    if kind is ExchangeType.FANOUT or kind is ExchangeType.HEADERS:
        return [topic_for(namespace, exchange.name, None)]
    if kind is ExchangeType.DIRECT or compile_topic(binding.routing_key).shape == "literal":
        return [topic_for(namespace, exchange.name, binding.routing_key)]
    return [
        topic_for(namespace, exchange.name, key)
        for key in topics_matching(binding.routing_key, existing_keys)
    ]
