"""Where the metadata lives in ZooKeeper, and how names become znode names.

Layout (docs/metadata.md has the whole picture)::

    <prefix>/vhosts/<namespace>                       {"v":1,"buckets":256}
    <prefix>/vhosts/<namespace>/exchanges/<bb>/<exchange>        exchange JSON
    <prefix>/vhosts/<namespace>/exchanges/<bb>/<exchange>/<binding id>   (ref, empty)
    <prefix>/vhosts/<namespace>/queues/<bb>/<queue>              queue JSON
    <prefix>/vhosts/<namespace>/queues/<bb>/<queue>/<binding id>         (ref, empty)
    <prefix>/vhosts/<namespace>/bindings/<bb>/<binding id>       binding JSON
    <prefix>/vhosts/<namespace>/exchange-bindings/<bb>/,<source>,<destination>,<key>  JSON
    <prefix>/vhosts/<namespace>/exchanges/<bb>/<exchange>/,<source>,<destination>,<key>  (ref)
    <prefix>/vhosts/<namespace>/topic-keys/<bb>/<exchange>,<key>         (empty)
    <prefix>/vhosts/<namespace>/owners/<bb>/<queue>              EPHEMERAL: owner JSON
    <prefix>/vhosts/<namespace>/consumers/<bb>/<queue>,<replica>,<n>     EPHEMERAL (empty)
    <prefix>/vhosts/<namespace>/consumers/<bb>/<queue>,!         EPHEMERAL: exclusive consumer
    <prefix>/vhosts/<namespace>/drains/<bb>/<queue>,<topic>      drain JSON
    <prefix>/vhosts/<namespace>/leader/c_<sequence>              EPHEMERAL: a candidate
    <prefix>/vhosts/<namespace>/deliveries/<replica>             a replica's delivery record

``<bb>`` is a bucket: two hex digits of a CRC-32 of the child's name. Buckets keep every
folder that a watch lists small: ZooKeeper watches are one-shot and only say "the children
changed", so a replica re-lists the folder after every change. One flat folder of 100,000
queues would cost every replica a 2 MB listing per declare; a bucket of it costs 1/256 of that.
In the folders that hold records *about* a queue (owners, consumers, drains) the bucket is that
of the queue's name, the part before the first ``,``: listing one bucket finds every record of
one queue, which is what a queue delete and a consumer check need.

Names: a znode name cannot contain ``/``, cannot be ``.``, ``..`` or empty, and ZooKeeper
refuses control characters and some Unicode ranges. AMQP names are any UTF-8 up to 255 octets.
``encode_name`` keeps printable ASCII except ``/``, ``%`` and ``,`` as it is (so ordinary names
stay readable in ``zkCli``) and writes every other octet of the UTF-8 (surrogatepass) encoding
as ``%XX``; ``.`` and ``..`` get their first dot escaped, and the empty name is ``%`` alone
(which no other name encodes to). ``,`` is escaped because it separates the parts of compound
names (binding ids, topic keys). The encoding is exact and canonical: ``decode_name`` refuses
any text that ``encode_name`` would not have produced.
"""

from __future__ import annotations

import enum
import re
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, NamedTuple

__all__ = [
    "BUCKETS",
    "Folder",
    "Layout",
    "ParsedBinding",
    "ParsedExchangeBinding",
    "bucket_for",
    "bucket_of",
    "decode_binding_id",
    "decode_exchange_binding_id",
    "decode_name",
    "decode_topic_key",
    "encode_binding_id",
    "encode_exchange_binding_id",
    "encode_name",
    "encode_topic_key",
    "is_exchange_binding_id",
    "plain_binding_id",
]

# Part of the on-disk format (recorded in the namespace node): changing it is a migration.
BUCKETS: Final = 256

_EMPTY: Final = "%"
SEPARATOR: Final = ","
# Printable ASCII but "%" (the escape), "," (the separator) and "/" (the path separator).
_PLAIN: Final = re.compile(r"[!-$&-+\-.0-~]+")
_PLAIN_CHARS: Final = frozenset(chr(c) for c in range(0x21, 0x7F)) - {"%", ",", "/"}
_ESCAPE: Final = re.compile(r"%([0-9A-F]{2})")


class Folder(enum.StrEnum):
    """The folders under a namespace; the value is the znode name."""

    EXCHANGES = "exchanges"
    QUEUES = "queues"
    BINDINGS = "bindings"
    # Exchange-to-exchange bindings (Exchange.Bind): ids start with "," (see
    # encode_exchange_binding_id), so that their refs under an exchange node never read as
    # a queue binding's.
    EXCHANGE_BINDINGS = "exchange-bindings"
    TOPIC_KEYS = "topic-keys"
    # Records about a queue, bucketed by the queue's name (see bucket_for).
    OWNERS = "owners"
    CONSUMERS = "consumers"
    DRAINS = "drains"

    @property
    def by_queue(self) -> bool:
        return self in _BY_QUEUE


_BY_QUEUE: Final = frozenset({Folder.OWNERS, Folder.CONSUMERS, Folder.DRAINS})
# The folder of the namespace's leader election (not mirrored: only candidates read it).
LEADER: Final = "leader"
# The folder of the replicas' delivery records (not mirrored: followed on its own).
DELIVERIES: Final = "deliveries"


def encode_name(text: str) -> str:
    """A znode name for ``text``: compact (ASCII names are unchanged) and reversible."""
    if not text:
        return _EMPTY
    if _PLAIN.fullmatch(text) and text != "." and text != "..":
        return text
    raw = text.encode("utf-8", "surrogatepass")
    parts: list[str] = []
    for index, octet in enumerate(raw):
        char = chr(octet)
        if char in _PLAIN_CHARS and not (index == 0 and char == "." and text in (".", "..")):
            parts.append(char)
        else:
            parts.append(f"%{octet:02X}")
    return "".join(parts)


def decode_name(encoded: str) -> str:
    """The name ``encode_name`` turned into ``encoded``; ValueError for anything else."""
    if encoded == _EMPTY:
        return ""
    if _PLAIN.fullmatch(encoded):
        # Plain text is its own canonical encoding, but for the two dot names.
        if encoded == "." or encoded == "..":
            raise ValueError(f"not a canonically encoded name: {encoded!r}")
        return encoded
    raw = bytearray()
    position = 0
    for match in _ESCAPE.finditer(encoded):
        raw += encoded[position : match.start()].encode("ascii", "strict")
        raw.append(int(match.group(1), 16))
        position = match.end()
    raw += encoded[position:].encode("ascii", "strict")
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as error:
        raise ValueError(f"not an encoded name: {encoded!r}") from error
    if encode_name(text) != encoded:
        raise ValueError(f"not a canonically encoded name: {encoded!r}")
    return text


def bucket_of(child: str) -> str:
    """The bucket of an (encoded) child name: stable across processes and versions."""
    return f"{zlib.crc32(child.encode('ascii')) % BUCKETS:02x}"


def bucket_for(folder: Folder, child: str) -> str:
    """The bucket of ``child`` in ``folder``: by the whole name, or by its first part (an
    encoded name, which never contains ``,``): in the folders of records about a queue, by
    the queue's name; for topic keys, by the exchange's, so that one listing gives every key
    of an exchange (a new pattern binding reads them from ZooKeeper, see sync_topic_keys)."""
    if folder.by_queue or folder is Folder.TOPIC_KEYS:
        return bucket_of(child.split(SEPARATOR, 1)[0])
    return bucket_of(child)


class ParsedBinding(NamedTuple):
    queue: str
    exchange: str
    routing_key: str
    # The digest of the binding's arguments; None when it has none (then the name is the
    # whole binding and its data never needs to be read).
    arguments_digest: str | None


def encode_binding_id(
    queue: str, exchange: str, routing_key: str, arguments_digest: str | None
) -> str:
    """``<queue>,<exchange>,<key>[,<digest>]``: the binding's znode name, and its identity."""
    parts = [encode_name(queue), encode_name(exchange), encode_name(routing_key)]
    if arguments_digest is not None:
        parts.append(arguments_digest)
    return SEPARATOR.join(parts)


# A binding id of three plain names and no digest (nearly every binding): one match checks
# all three parts, where decode_name would match each (loading a million bindings decodes
# a million ids).
_PLAIN_BINDING: Final = re.compile(r"([!-$&-+\-.0-~]+),([!-$&-+\-.0-~]+),([!-$&-+\-.0-~]+)")
_DOT_NAMES: Final = frozenset({".", ".."})


def plain_binding_id(child: str) -> tuple[str, str, str] | None:
    """(queue, exchange, key) when ``child`` is a binding id of three plain names without a
    digest (each name is then its own encoding); None for any other text."""
    match = _PLAIN_BINDING.fullmatch(child)
    if match is None:
        return None
    queue, exchange, key = match.groups()
    if queue in _DOT_NAMES or exchange in _DOT_NAMES or key in _DOT_NAMES:
        return None
    return queue, exchange, key


def decode_binding_id(child: str) -> ParsedBinding:
    plain = plain_binding_id(child)
    if plain is not None:
        return ParsedBinding(*plain, None)
    parts = child.split(SEPARATOR)
    if len(parts) == 3:
        digest = None
    elif len(parts) == 4 and parts[3]:
        digest = parts[3]
    else:
        raise ValueError(f"not a binding id: {child!r}")
    queue, exchange, key = (decode_name(part) for part in parts[:3])
    return ParsedBinding(queue, exchange, key, digest)


class ParsedExchangeBinding(NamedTuple):
    source: str
    destination: str
    routing_key: str
    arguments_digest: str | None


def encode_exchange_binding_id(
    source: str, destination: str, routing_key: str, arguments_digest: str | None
) -> str:
    """``,<source>,<destination>,<key>[,<digest>]``: an exchange binding's znode name and
    identity. The leading ``,`` sets it apart from a queue binding's id (which starts with an
    encoded queue name, never empty: ``%`` is the empty name), so the refs under an exchange
    node (both kinds of binding) are told apart by their first character."""
    parts = ["", encode_name(source), encode_name(destination), encode_name(routing_key)]
    if arguments_digest is not None:
        parts.append(arguments_digest)
    return SEPARATOR.join(parts)


def is_exchange_binding_id(child: str) -> bool:
    return child.startswith(SEPARATOR)


def decode_exchange_binding_id(child: str) -> ParsedExchangeBinding:
    parts = child.split(SEPARATOR)
    if len(parts) == 4 and not parts[0]:
        digest = None
    elif len(parts) == 5 and not parts[0] and parts[4]:
        digest = parts[4]
    else:
        raise ValueError(f"not an exchange binding id: {child!r}")
    source, destination, key = (decode_name(part) for part in parts[1:4])
    return ParsedExchangeBinding(source, destination, key, digest)


def encode_topic_key(exchange: str, routing_key: str) -> str:
    return encode_name(exchange) + SEPARATOR + encode_name(routing_key)


def decode_topic_key(child: str) -> tuple[str, str]:
    exchange, separator, key = child.partition(SEPARATOR)
    if not separator:
        raise ValueError(f"not a topic key: {child!r}")
    return decode_name(exchange), decode_name(key)


@lru_cache(maxsize=4096)
def _namespace_path(prefix: str, namespace: str) -> str:
    # Every node path starts with it: encode each namespace once, not once per znode.
    return f"{prefix}/vhosts/{encode_name(namespace)}"


@dataclass(frozen=True, slots=True)
class Layout:
    """Paths under one prefix (``/starlight-rabbitmq`` in production, unique ones in tests)."""

    prefix: str = "/starlight-rabbitmq"

    def __post_init__(self) -> None:
        if not self.prefix.startswith("/") or self.prefix.endswith("/") or "//" in self.prefix:
            raise ValueError(f"the prefix must be an absolute path, not {self.prefix!r}")

    @property
    def vhosts(self) -> str:
        return f"{self.prefix}/vhosts"

    def namespace(self, namespace: str) -> str:
        return _namespace_path(self.prefix, namespace)

    def folder(self, namespace: str, folder: Folder) -> str:
        return f"{self.namespace(namespace)}/{folder.value}"

    def bucket(self, namespace: str, folder: Folder, bucket: str) -> str:
        return f"{self.namespace(namespace)}/{folder.value}/{bucket}"

    def node(self, namespace: str, folder: Folder, child: str) -> str:
        return f"{self.namespace(namespace)}/{folder.value}/{bucket_for(folder, child)}/{child}"

    def leader(self, namespace: str) -> str:
        return f"{self.namespace(namespace)}/{LEADER}"

    def deliveries(self, namespace: str) -> str:
        return f"{self.namespace(namespace)}/{DELIVERIES}"

    def skeleton(self, namespace: str) -> list[str]:
        """Every folder a namespace needs, parents first (creating them in this order in one
        session is safe: ZooKeeper applies one session's requests in order)."""
        root = self.namespace(namespace)
        elements = self.prefix.split("/")[1:]
        ancestors = ["/" + "/".join(elements[: depth + 1]) for depth in range(len(elements))]
        return [
            *ancestors,
            self.vhosts,
            root,
            *(f"{root}/{folder.value}" for folder in Folder),
            f"{root}/{LEADER}",
            f"{root}/{DELIVERIES}",
        ]
