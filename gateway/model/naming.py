"""Reversible names: exchanges/routing keys → Pulsar topics, queues → Pulsar subscriptions.

The reference (reference/000-002) names the topic of an exchange after the exchange and, when a
routing key is part of the name, joins the two with a double underscore: ``<exchange>__<key>``.
The default exchange is ``amq.default``. AMQP names are shortstrs — any UTF-8 up to 255 octets
(RabbitMQ "deliberately does not enforce the other constraints on names", rabbit_channel
``check_name``) — while Pulsar is much stricter, so names are escaped. docs/mapping.md has the
whole scheme with examples; in short:

- Characters kept as they are: ``A-Z a-z 0-9 . - :`` and ``_``. Every other character becomes
  ``=XX`` per UTF-8 octet (upper-case hex), like quoted-printable. ``=`` itself is ``=3D``.
  ``%`` is not used as the escape: Pulsar's admin REST API URL-decodes topic and subscription
  names, and names containing ``%`` have been decoded twice by its clients and handlers
  (apache/pulsar#2910, #18435); ``=`` is in Pulsar's allowed set and never decoded.
- In the exchange part (and in the queue part of a subscription) an ``_`` is escaped when it
  follows a literal ``_`` or ends the name, so the part never contains ``__`` and never ends
  with ``_``. The first ``__`` of a topic name is therefore always the separator, and the key
  after it may contain anything (``a__b`` keys stay readable).
- Pulsar gives some names a meaning: a local name containing ``-partition-`` is read as a
  partition of a partitioned topic (Java ``TopicName.getPartitionIndex`` looks at what follows
  the last ``-partition-``; the C++ client ``stoi``s what follows the last ``-``), names
  starting with ``__`` are system topics (``__change_events``,
  ``__transaction_buffer_snapshot``), names ending in ``__transaction_pending_ack`` are
  transaction stores (``SystemTopicNames``), ``.``/``..`` are not usable as ZooKeeper path
  elements, and subscriptions starting with ``pulsar.`` collide with the broker's own cursors
  (``pulsar.dedup``, ``pulsar.repl.<cluster>``). The encoder escapes one character to break
  each of these patterns; see ``_escape_part``.

Every encoded name is canonical: ``parse_topic`` decodes a name and re-encodes the result, and
refuses a name whose re-encoding differs (a native Pulsar topic that merely looks like ours).

Length: Pulsar has no limit on topic or subscription names (apache/pulsar#12023), so names are
never truncated or hashed and the mapping stays exactly reversible. The longest local name is
3 x 255 (every octet escaped) for the exchange, 2 for ``__``, 3 x 255 for the key: 1532 characters.
"""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Final

from gateway.model.vhost import Namespace

__all__ = [
    "DEFAULT_EXCHANGE_TOPIC",
    "SEPARATOR",
    "decode_local_name",
    "encode_local_name",
    "keys_for_exchange",
    "parse_subscription",
    "parse_topic",
    "server_named_queue",
    "subscription_for",
    "topic_for",
]

# The default exchange ("") on the Pulsar side (reference/002 names it so).
DEFAULT_EXCHANGE_TOPIC: Final = "amq.default"
# Between the exchange and the routing key, and between a queue and its binding generation.
SEPARATOR: Final = "__"
_PERSISTENT: Final = "persistent://"
_ESCAPE: Final = "="
# Characters that never need escaping (``_`` is handled on its own).
_PLAIN: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-:")
_FAST_PART: Final = re.compile(r"[A-Za-z0-9.:-]*")
_ESCAPE_SEQ: Final = re.compile(r"=([0-9A-F]{2})")
_PARTITION_MARK: Final = "-partition"
_PENDING_ACK: Final = "transaction_pending_ack"
_GENERATION: Final = re.compile(r"0|[1-9][0-9]*")
# Server-named queues: "amq.gen-" + 16 random octets in url-safe base64 without padding,
# which is RabbitMQ's rabbit_guid:binary(rabbit_guid:gen_secure(), "amq.gen").
_SERVER_NAMED_PREFIX: Final = "amq.gen-"
_GUID_OCTETS: Final = 16


def _escape_char(ch: str) -> str:
    return "".join(f"={octet:02X}" for octet in ch.encode("utf-8"))


def _escape_part(text: str, *, head: bool, subscription: bool = False) -> str:
    """Escape one part of a name.

    ``head`` is the exchange part of a topic (or the queue part of a subscription): there an
    ``_`` after a literal ``_``, or at the end, is escaped so that the part holds no ``__`` and
    cannot end with ``_``. In any part a ``-`` that would complete ``-partition-`` is escaped,
    so no name contains it. A tail part (the routing key) ending with
    ``transaction_pending_ack`` has its last character escaped, so no topic ends with
    ``__transaction_pending_ack``. A head that is ``.`` or ``..``, or a subscription head
    starting with ``pulsar.``, has its first character escaped.
    """
    if _FAST_PART.fullmatch(text) and _PARTITION_MARK + "-" not in text:
        # The common case (``orders.created``, ``my-exchange``): nothing to escape.
        if head and (text in (".", "..") or (subscription and text.startswith("pulsar."))):
            return _ESCAPE + f"{ord(text[0]):02X}" + text[1:]
        return text
    out: list[str] = []
    last = len(text) - 1
    literal_underscore = False  # whether the previous output character is a literal "_"
    for i, ch in enumerate(text):
        if ch in _PLAIN:
            if ch == "-" and "".join(out[-10:]).endswith(_PARTITION_MARK):
                out.append("=2D")
            else:
                out.append(ch)
            literal_underscore = False
        elif ch == "_":
            if head and (literal_underscore or i == last):
                out.append("=5F")
                literal_underscore = False
            else:
                out.append("_")
                literal_underscore = True
        else:
            out.append(_escape_char(ch))
            literal_underscore = False
    if head:
        if text in (".", ".."):
            out[0] = "=2E"
        elif subscription and text.startswith("pulsar."):
            out[0] = "=70"
    elif text.endswith(_PENDING_ACK):
        out[-1] = "=6B"
    return "".join(out)


def _unescape(part: str) -> str | None:
    """Undo ``=XX`` escapes; None when the result is not UTF-8 or a stray ``=`` remains."""
    raw = bytearray()
    position = 0
    for match in _ESCAPE_SEQ.finditer(part):
        literal = part[position : match.start()]
        if _ESCAPE in literal:
            return None
        raw += literal.encode("utf-8")
        raw.append(int(match.group(1), 16))
        position = match.end()
    tail = part[position:]
    if _ESCAPE in tail:
        return None
    raw += tail.encode("utf-8")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _check_text(what: str, text: str) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be str, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} is not encodable as UTF-8: {text!r}") from exc


@lru_cache(maxsize=65536)
def encode_local_name(exchange: str, routing_key: str | None = None) -> str:
    """The local topic name: ``<exchange>`` or, with a routing key, ``<exchange>__<key>``.

    ``exchange`` ``""`` is the default exchange (``amq.default``). ``routing_key`` None means
    the exchange's single topic (fanout, headers); ``""`` is the empty routing key and is kept
    (``<exchange>__``), so decoding is exact.
    """
    _check_text("exchange", exchange)
    if exchange == "":
        head = DEFAULT_EXCHANGE_TOPIC
    elif exchange == DEFAULT_EXCHANGE_TOPIC:
        # The literal name "amq.default" must not take the default exchange's topic.
        head = "amq=2Edefault"
    else:
        head = _escape_part(exchange, head=True)
    if routing_key is None:
        return head
    _check_text("routing key", routing_key)
    return head + SEPARATOR + _escape_part(routing_key, head=False)


@lru_cache(maxsize=65536)
def decode_local_name(local_name: str) -> tuple[str, str | None] | None:
    """``(exchange, routing_key)`` of one of our local names; None for any other name."""
    head, sep, tail = local_name.partition(SEPARATOR)
    if not head:
        return None
    if head == DEFAULT_EXCHANGE_TOPIC:
        exchange: str | None = ""
    else:
        exchange = _unescape(head)
    if exchange is None:
        return None
    routing_key: str | None = None
    if sep:
        routing_key = _unescape(tail)
        if routing_key is None:
            return None
    # Only the canonical spelling is ours: "a=5Fb" decodes but "a_b" is how we write it.
    if encode_local_name(exchange, routing_key) != local_name:
        return None
    return exchange, routing_key


def topic_for(namespace: Namespace, exchange: str, routing_key: str | None = None) -> str:
    """``persistent://tenant/ns/<local name>`` for an exchange and optional routing key.

    Direct and topic exchanges put the routing key in the name (reference/002); fanout and
    headers exchanges pass None.
    """
    return f"{_PERSISTENT}{namespace}/{encode_local_name(exchange, routing_key)}"


def parse_topic(full_name: str) -> tuple[Namespace, str, str | None]:
    """The inverse of ``topic_for``; ValueError for a name ``topic_for`` cannot produce."""
    if not full_name.startswith(_PERSISTENT):
        raise ValueError(f"not a persistent topic: {full_name!r}")
    parts = full_name[len(_PERSISTENT) :].split("/")
    if len(parts) != 3:
        raise ValueError(f"not persistent://tenant/namespace/topic: {full_name!r}")
    namespace = Namespace.parse(f"{parts[0]}/{parts[1]}")
    decoded = decode_local_name(parts[2])
    if decoded is None:
        raise ValueError(f"not a topic of this gateway: {full_name!r}")
    return namespace, decoded[0], decoded[1]


def keys_for_exchange(exchange: str, topic_names: Iterable[str]) -> dict[str, str]:
    """Which of ``topic_names`` carry a routing key of ``exchange``: ``{key: topic name}``.

    For topic-exchange discovery: given the topics of a namespace (full or local names), the
    keys already in use. Names of other exchanges, keyless names and foreign topics (including
    partitions, ``…-partition-N``, which we never create) are skipped.
    """
    found: dict[str, str] = {}
    for name in topic_names:
        local = name.rsplit("/", 1)[-1] if name.startswith(_PERSISTENT) else name
        decoded = decode_local_name(local)
        if decoded is not None and decoded[0] == exchange and decoded[1] is not None:
            found[decoded[1]] = name
    return found


@lru_cache(maxsize=65536, typed=True)
def subscription_for(queue: str, generation: int = 0) -> str:
    """The Pulsar subscription of ``queue`` on one bound topic: ``<queue>__<generation>``.

    A queue has one Shared subscription per topic it is bound to (reference/002), so the
    subscription name only needs the queue. ``generation`` distinguishes successive bindings
    of the same (queue, topic): after an unbind the old subscription lives on until what was
    routed before the unbind is acknowledged, and a rebind meanwhile must start a new
    subscription at the current end of the topic instead of reviving the old one (whose
    backlog holds messages published while the queue was unbound). docs/mapping.md describes
    how the metadata store picks generations.
    """
    _check_text("queue", queue)
    if queue == "":
        raise ValueError("a queue name is never empty here (server-named queues get a name)")
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise ValueError(f"generation must be a non-negative int, not {generation!r}")
    return _escape_part(queue, head=True, subscription=True) + SEPARATOR + str(generation)


def parse_subscription(name: str) -> tuple[str, int] | None:
    """``(queue, generation)`` of one of our subscription names; None for any other name."""
    head, sep, tail = name.partition(SEPARATOR)
    if not head or not sep or not _GENERATION.fullmatch(tail):
        return None
    queue = _unescape(head)
    if not queue:
        return None
    generation = int(tail)
    if subscription_for(queue, generation) != name:
        return None
    return queue, generation


def server_named_queue(random_bytes: Callable[[int], bytes] = secrets.token_bytes) -> str:
    """A queue name like RabbitMQ's: ``amq.gen-`` + 22 url-safe base64 characters."""
    octets = random_bytes(_GUID_OCTETS)
    if len(octets) != _GUID_OCTETS:
        raise ValueError(f"random_bytes returned {len(octets)} octets, not {_GUID_OCTETS}")
    return _SERVER_NAMED_PREFIX + base64.urlsafe_b64encode(octets).rstrip(b"=").decode("ascii")
