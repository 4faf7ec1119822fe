"""The PROXY protocol v2 reader: whole, byte at a time, split anywhere, and refusals."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.proxy_protocol import (
    SIGNATURE,
    Command,
    ProxyHeader,
    ProxyHeaderError,
    ProxyHeaderReader,
    encode,
    looks_like_proxy_header,
)

AMQP = b"AMQP\x00\x00\x09\x01"

# HAProxy's send-proxy-v2 for 192.0.2.7:40001 -> 127.0.0.1:5672, written out by hand from the
# specification (section 2.2) rather than with encode(), so both are checked against it.
HAPROXY_TCP4 = (
    b"\r\n\r\n\x00\r\nQUIT\n"  # signature
    b"\x21"  # version 2, command PROXY
    b"\x11"  # AF_INET, STREAM
    b"\x00\x0c"  # 12 bytes follow
    b"\xc0\x00\x02\x07"  # 192.0.2.7
    b"\x7f\x00\x00\x01"  # 127.0.0.1
    b"\x9c\x41"  # 40001
    b"\x16\x28"  # 5672
)


def read_all(data: bytes) -> tuple[ProxyHeader | None, bytes]:
    reader = ProxyHeaderReader()
    header = reader.feed(data)
    return header, reader.trailing


def read_in_pieces(data: bytes, cuts: list[int]) -> tuple[ProxyHeader | None, bytes]:
    reader = ProxyHeaderReader()
    header = None
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        header = reader.feed(data[start:cut]) or header
        start = cut
    return header, reader.trailing


def test_haproxy_tcp4_header() -> None:
    header, trailing = read_all(HAPROXY_TCP4 + AMQP)
    assert header == ProxyHeader(
        Command.PROXY, source=("192.0.2.7", 40001), destination=("127.0.0.1", 5672)
    )
    assert header.source_address == "192.0.2.7:40001"
    assert trailing == AMQP
    assert encode(header) == HAPROXY_TCP4


def test_tcp6_header_with_tlvs() -> None:
    sent = ProxyHeader(
        Command.PROXY,
        source=("2001:db8::1", 1234),
        destination=("::1", 5671),
        tlvs=((0x01, b"amqp"), (0x04, b"")),  # ALPN, NOOP
    )
    header, trailing = read_all(encode(sent))
    assert header == sent
    assert header.source_address == "2001:db8::1:1234"
    assert trailing == b""


def test_local_command_carries_no_client() -> None:
    header, _ = read_all(encode(ProxyHeader(Command.LOCAL)))
    assert header == ProxyHeader(Command.LOCAL)
    assert header.source_address is None


def test_local_command_ignores_whatever_address_block_it_has() -> None:
    data = SIGNATURE + b"\x20\x11" + struct.pack("!H", 5) + b"junk!"
    header, trailing = read_all(data + AMQP)
    assert header == ProxyHeader(Command.LOCAL)
    assert trailing == AMQP


def test_unix_source() -> None:
    body = b"/run/client.sock".ljust(108, b"\x00") + b"/run/server.sock".ljust(108, b"\x00")
    data = SIGNATURE + b"\x21\x31" + struct.pack("!H", len(body)) + body
    header, _ = read_all(data)
    assert header is not None
    assert header.source_address == "unix:/run/client.sock"


def test_unspec_proxy_keeps_the_socket_address() -> None:
    data = SIGNATURE + b"\x21\x00\x00\x00"
    header, _ = read_all(data)
    assert header == ProxyHeader(Command.PROXY)
    assert header.source_address is None


def test_bytes_needed_never_reads_past_the_header() -> None:
    reader = ProxyHeaderReader()
    data = HAPROXY_TCP4
    taken = 0
    while (needed := reader.bytes_needed()) > 0:
        reader.feed(data[taken : taken + needed])
        taken += needed
    assert taken == len(HAPROXY_TCP4)
    assert reader.header is not None and reader.trailing == b""


def test_byte_at_a_time() -> None:
    reader = ProxyHeaderReader()
    results = [reader.feed(bytes([byte])) for byte in HAPROXY_TCP4]
    assert results[:-1] == [None] * (len(HAPROXY_TCP4) - 1)
    assert results[-1] is not None and results[-1].source == ("192.0.2.7", 40001)


def test_every_split_point() -> None:
    data = HAPROXY_TCP4 + AMQP
    for cut in range(len(data) + 1):
        header, trailing = read_in_pieces(data, [cut])
        assert header is not None and header.source == ("192.0.2.7", 40001), cut
        assert trailing == AMQP, cut


addresses4 = st.ip_addresses(v=4).map(str)
addresses6 = st.ip_addresses(v=6).map(str)
ports = st.integers(0, 65535)
tlvs = st.lists(st.tuples(st.integers(0, 255), st.binary(max_size=40)), max_size=4).map(tuple)
headers = st.one_of(
    st.builds(ProxyHeader, st.just(Command.LOCAL)),
    st.builds(
        lambda s, d, sp, dp, t: ProxyHeader(Command.PROXY, (s, sp), (d, dp), tlvs=t),
        addresses4,
        addresses4,
        ports,
        ports,
        tlvs,
    ),
    st.builds(
        lambda s, d, sp, dp, t: ProxyHeader(Command.PROXY, (s, sp), (d, dp), tlvs=t),
        addresses6,
        addresses6,
        ports,
        ports,
        tlvs,
    ),
)


@given(headers, st.binary(max_size=20), st.lists(st.integers(0, 400), max_size=6))
def test_round_trip_split_anywhere(header: ProxyHeader, after: bytes, cuts: list[int]) -> None:
    data = encode(header) + after
    got, trailing = read_in_pieces(data, [min(cut, len(data)) for cut in cuts])
    assert got == header
    assert trailing == after


@given(st.binary(min_size=1, max_size=64))
def test_garbage_is_refused_or_waits_never_crashes(data: bytes) -> None:
    reader = ProxyHeaderReader()
    try:
        header = reader.feed(data)
    except ProxyHeaderError as error:
        assert "\n" not in str(error)
        return
    # Accepted bytes are a prefix of a header: the signature, so far.
    assert data[: len(SIGNATURE)] == SIGNATURE[: len(data)] or data == b"PROXY "[: len(data)]
    assert header is None or data.startswith(SIGNATURE)


def test_amqp_instead_of_a_header_fails_at_the_first_byte() -> None:
    reader = ProxyHeaderReader()
    with pytest.raises(ProxyHeaderError, match="no PROXY protocol v2 header"):
        reader.feed(b"A")


def test_version_1_is_refused_with_a_hint() -> None:
    reader = ProxyHeaderReader()
    assert reader.feed(b"PROX") is None
    with pytest.raises(ProxyHeaderError, match=r"v1 .* send-proxy-v2"):
        reader.feed(b"Y TCP4 1.2.3.4 5.6.7.8 1 2\r\n")


@pytest.mark.parametrize(
    ("fixed", "body", "message"),
    [
        (b"\x11\x11", b"", "version 1, expected 2"),
        (b"\x22\x11", b"", "unknown PROXY protocol command 2"),
        (b"\x21\x41", b"", "unknown PROXY protocol address family 4"),
        (b"\x21\x11", b"\x00" * 11, "too short for its addresses"),
        (b"\x21\x12", b"\x00" * 12, "only STREAM"),
        (b"\x21\x11", b"\x00" * 12 + b"\x01\x00", "truncated TLV"),
        (b"\x21\x11", b"\x00" * 12 + b"\x01\x00\x05ab", "overruns"),
    ],
)
def test_bad_headers(fixed: bytes, body: bytes, message: str) -> None:
    data = SIGNATURE + fixed + struct.pack("!H", len(body)) + body
    with pytest.raises(ProxyHeaderError, match=message):
        read_all(data)


def test_a_prefix_of_version_1_waits() -> None:
    assert ProxyHeaderReader().feed(b"PRO") is None


def test_looks_like_proxy_header() -> None:
    assert looks_like_proxy_header(SIGNATURE[:8])
    assert looks_like_proxy_header(b"PROXY TC")
    assert not looks_like_proxy_header(AMQP)
