"""PROXY protocol version 2: the binary header a load balancer or relay sends before the client's
first byte, saying who the client really is (HAProxy's ``send-proxy-v2``, AWS NLB, the Pulsar
proxy extension's relay).

Sans-IO like the rest of this package: feed bytes, get a :class:`ProxyHeader` once it is
complete. :meth:`ProxyHeaderReader.bytes_needed` says how many more bytes the header needs, so
the shell can read exactly that much and never take the client's AMQP (or TLS) bytes with it.

The format (https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt, section 2.2):

    12-byte signature  \\r\\n\\r\\n\\0\\r\\nQUIT\\n
    1 byte             version (high nibble, must be 2) | command (low nibble: 0 LOCAL, 1 PROXY)
    1 byte             address family (high nibble: 0 UNSPEC, 1 INET, 2 INET6, 3 UNIX)
                       | transport (low nibble: 0 UNSPEC, 1 STREAM, 2 DGRAM)
    2 bytes            length of what follows, big-endian
    addresses          INET: 4+4+2+2 bytes, INET6: 16+16+2+2, UNIX: 108+108
    TLVs               type (1 byte), length (2 bytes, big-endian), value; until the end

Version 1 (a text line ``PROXY TCP4 ...``) is refused: every sender that matters speaks v2.
"""

from __future__ import annotations

import enum
import ipaddress
import struct
from dataclasses import dataclass
from typing import Final

#: The 12 bytes every PROXY v2 header starts with (chosen to be invalid in every protocol).
SIGNATURE: Final = b"\r\n\r\n\x00\r\nQUIT\n"
#: How the text form (version 1) starts.
V1_PREFIX: Final = b"PROXY "
#: Signature, version/command, family/transport, length.
FIXED_SIZE: Final = 16

_ADDRESS_SIZES: Final = {0x1: 12, 0x2: 36, 0x3: 216}  # INET, INET6, UNIX


class Command(enum.Enum):
    #: The sender opened the connection itself (a health check): use the socket's addresses.
    LOCAL = 0x0
    #: Relayed on behalf of a client: the header carries the client's address.
    PROXY = 0x1


class ProxyHeaderError(Exception):
    """The bytes are not a valid PROXY v2 header; the message says why, on one line."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    command: Command
    #: (host, port) of the client, for PROXY over INET/INET6; None for LOCAL, UNSPEC, UNIX.
    source: tuple[str, int] | None = None
    #: (host, port) the client connected to, when ``source`` is set.
    destination: tuple[str, int] | None = None
    #: The client's Unix socket path, for PROXY over UNIX ("" when unnamed).
    source_path: str | None = None
    #: Type-length-value extensions (ALPN, authority, TLS details, ...), as sent.
    tlvs: tuple[tuple[int, bytes], ...] = ()

    @property
    def source_address(self) -> str | None:
        """``host:port`` of the client (the form connection logs use), None if not carried."""
        if self.source is not None:
            return f"{self.source[0]}:{self.source[1]}"
        if self.source_path is not None:
            return f"unix:{self.source_path}"
        return None


def looks_like_proxy_header(data: bytes) -> bool:
    """Whether ``data`` (at least the first 8 bytes of a connection) starts like a PROXY header
    of either version: how an AMQP listener tells this apart from a bad protocol header."""
    return SIGNATURE.startswith(data[: len(SIGNATURE)]) or data.startswith(V1_PREFIX[: len(data)])


def encode(header: ProxyHeader) -> bytes:
    """The wire form of ``header`` (INET/INET6 sources, or LOCAL); for tests and tools."""
    body = b""
    if header.command is Command.LOCAL or header.source is None:
        family = 0x00
    else:
        if header.destination is None:
            raise ValueError("a PROXY header with a source needs a destination")
        src = ipaddress.ip_address(header.source[0])
        dst = ipaddress.ip_address(header.destination[0])
        if src.version != dst.version:
            raise ValueError("source and destination must be the same IP version")
        family = 0x11 if src.version == 4 else 0x21  # INET or INET6, STREAM
        body = src.packed + dst.packed + struct.pack("!HH", header.source[1], header.destination[1])
    for kind, value in header.tlvs:
        body += struct.pack("!BH", kind, len(value)) + value
    return (
        SIGNATURE
        + bytes([0x20 | header.command.value, family])
        + struct.pack("!H", len(body))
        + body
    )


class ProxyHeaderReader:
    """Reads one PROXY v2 header from the start of a stream.

    Errors are raised as soon as the bytes seen cannot start a valid header (a wrong signature
    byte fails at that byte, not after 16), so a client that is not a proxy is told at once.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._total: int | None = None  # header size, once the fixed part is in
        self._header: ProxyHeader | None = None
        #: Bytes fed after the end of the header (the client's own first bytes).
        self.trailing = b""

    @property
    def header(self) -> ProxyHeader | None:
        return self._header

    def bytes_needed(self) -> int:
        """How many more bytes complete the next part of the header (0 once it is done).

        Reading exactly this many never reads past the header."""
        if self._header is not None:
            return 0
        if self._total is None:
            return FIXED_SIZE - len(self._buffer)
        return self._total - len(self._buffer)

    def feed(self, data: bytes) -> ProxyHeader | None:
        """Add bytes; return the header once complete. Raises ProxyHeaderError."""
        if self._header is not None:
            self.trailing += data
            return self._header
        if not data:
            return None
        start = len(self._buffer)
        self._buffer += data
        if start < len(SIGNATURE):
            self._check_signature(start)
        if self._total is None and len(self._buffer) >= FIXED_SIZE:
            self._total = FIXED_SIZE + self._check_fixed_part()
        if self._total is None or len(self._buffer) < self._total:
            return None
        self.trailing = bytes(self._buffer[self._total :])
        self._header = _parse_body(
            self._buffer[12], self._buffer[13], self._buffer[16 : self._total]
        )
        self._buffer = bytearray()
        return self._header

    def _check_signature(self, start: int) -> None:
        seen = bytes(self._buffer[: len(SIGNATURE)])
        if SIGNATURE.startswith(seen):
            return
        if V1_PREFIX.startswith(bytes(self._buffer[: len(V1_PREFIX)])):
            if len(self._buffer) < len(V1_PREFIX):
                return  # could still be v1: say so once it is certain
            raise ProxyHeaderError(
                "PROXY protocol v1 (text) header: only v2 is supported (HAProxy: send-proxy-v2)"
            )
        raise ProxyHeaderError(f"no PROXY protocol v2 header (the connection starts with {seen!r})")

    def _check_fixed_part(self) -> int:
        version_command, family_transport = self._buffer[12], self._buffer[13]
        if version_command >> 4 != 2:
            raise ProxyHeaderError(f"PROXY protocol version {version_command >> 4}, expected 2")
        if version_command & 0x0F not in (0x0, 0x1):
            raise ProxyHeaderError(f"unknown PROXY protocol command {version_command & 0x0F}")
        family = family_transport >> 4
        if family not in (0x0, 0x1, 0x2, 0x3):
            raise ProxyHeaderError(f"unknown PROXY protocol address family {family}")
        (length,) = struct.unpack_from("!H", self._buffer, 14)
        needed = _ADDRESS_SIZES.get(family, 0)
        if version_command & 0x0F == 0x1 and length < needed:
            raise ProxyHeaderError(
                f"PROXY header length {length} is too short for its addresses ({needed} bytes)"
            )
        return int(length)


def _parse_body(version_command: int, family_transport: int, body: bytearray) -> ProxyHeader:
    command = Command(version_command & 0x0F)
    family, transport = family_transport >> 4, family_transport & 0x0F
    address_size = _ADDRESS_SIZES.get(family, 0)
    if command is Command.LOCAL:
        # "The receiver must accept this connection as valid and must use the real connection
        # endpoints and discard the protocol block including the family" (section 2.2).
        return ProxyHeader(command)
    address_block, tlvs = bytes(body[:address_size]), _parse_tlvs(bytes(body[address_size:]))
    if family == 0x0:
        return ProxyHeader(command, tlvs=tlvs)  # UNSPEC: the sender does not know the client
    if transport != 0x1:
        raise ProxyHeaderError(
            f"PROXY header for transport {transport}: only STREAM (TCP) connections are relayed"
        )
    if family == 0x3:
        path = address_block[:108].split(b"\x00", 1)[0]
        return ProxyHeader(command, source_path=path.decode("utf-8", "replace"), tlvs=tlvs)
    width = 4 if family == 0x1 else 16
    source_ip = ipaddress.ip_address(address_block[:width])
    destination_ip = ipaddress.ip_address(address_block[width : 2 * width])
    source_port, destination_port = struct.unpack_from("!HH", address_block, 2 * width)
    return ProxyHeader(
        command,
        source=(str(source_ip), source_port),
        destination=(str(destination_ip), destination_port),
        tlvs=tlvs,
    )


def _parse_tlvs(block: bytes) -> tuple[tuple[int, bytes], ...]:
    tlvs: list[tuple[int, bytes]] = []
    offset = 0
    while offset < len(block):
        if len(block) - offset < 3:
            raise ProxyHeaderError("truncated TLV in the PROXY header")
        kind, length = struct.unpack_from("!BH", block, offset)
        offset += 3
        if offset + length > len(block):
            raise ProxyHeaderError(f"TLV {kind:#04x} overruns the PROXY header")
        tlvs.append((kind, block[offset : offset + length]))
        offset += length
    return tuple(tlvs)
