"""gateway/server/connection_info.py: RabbitMQ's connection names."""

from __future__ import annotations

import pytest

from gateway.server.connection_info import connection_name, split_address


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:5555", ("127.0.0.1", 5555)),
        ("::1:5555", ("::1", 5555)),
        ("unix:x", ("unix:x", None)),
    ],
)
def test_split_address(address: str, expected: tuple[str, int | None]) -> None:
    assert split_address(address) == expected


def test_names_are_rabbitmqs() -> None:
    assert (
        connection_name("10.0.0.1:41000", ("10.0.0.2", 5672)) == "10.0.0.1:41000 -> 10.0.0.2:5672"
    )
    assert connection_name("unix:/run/gw.sock", None) == "unix:/run/gw.sock -> unix"
