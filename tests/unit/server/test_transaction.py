"""transaction.py: what a tx channel holds until Tx.Commit, and the bound on it."""

from __future__ import annotations

import pytest

from gateway.amqp.errors import AMQPError
from gateway.backend.interface import Message
from gateway.server.transaction import MAX_TX_BYTES, MESSAGE_OVERHEAD, Transaction


def message(size: int) -> Message:
    return Message("", "q", b"\x00\x00", b"x" * size)


def test_take_empties_the_transaction_for_the_next_one() -> None:
    tx: Transaction[str] = Transaction()
    tx.hold_publish(message(10), mandatory=True)
    tx.hold_settlement({1: "a", 2: "b"}, None)
    tx.hold_settlement({}, True)  # an ack of a forgotten tag settles nothing: not kept
    tx.hold_settlement({3: "c"}, False)
    assert tx.held_entries() == {1: "a", 2: "b", 3: "c"}
    publishes, settlements = tx.take()
    assert [(p.message.body, p.mandatory) for p in publishes] == [(b"x" * 10, True)]
    assert [(s.entries, s.requeue) for s in settlements] == [
        ({1: "a", 2: "b"}, None),
        ({3: "c"}, False),
    ]
    assert tx.take() == ([], []) and tx.held_bytes == 0


def test_a_transaction_over_the_limit_is_refused_with_406() -> None:
    tx: Transaction[str] = Transaction()
    body = MAX_TX_BYTES // 4
    for _ in range(3):
        tx.hold_publish(message(body), mandatory=False)
    with pytest.raises(AMQPError) as refused:
        tx.hold_publish(message(body), mandatory=False)
    assert refused.value.reply_code == 406
    assert str(MAX_TX_BYTES) in refused.value.reply_text
    assert len(tx.publishes) == 3 and tx.held_bytes == 3 * (body + MESSAGE_OVERHEAD)
    tx.take()
    tx.hold_publish(message(body), mandatory=False)  # the next transaction starts from zero
