"""Tx.Select, Tx.Commit and Tx.Rollback for one connection's session.

As RabbitMQ's rabbit_channel: publishes and settlements of a tx channel wait for Tx.Commit
(``transaction.py`` holds them; ``publishing.py`` and ``acknowledgements.py`` hand them over);
tx and confirm modes exclude each other (406, RabbitMQ's texts).
"""

from __future__ import annotations

import logging

from gateway.amqp import commands as cmd
from gateway.amqp.errors import ReplyCode, amqp_error
from gateway.server.acknowledgements import Acknowledgements
from gateway.server.channel_state import SessionChannel, SessionLink, Unacked
from gateway.server.publishing import Publishing
from gateway.server.transaction import Transaction

log = logging.getLogger("gateway.session")


class TxCommands:
    def __init__(
        self, link: SessionLink, publishing: Publishing, acknowledgements: Acknowledgements
    ) -> None:
        self._protocol = link.protocol
        self._publishing = publishing
        self._acknowledgements = acknowledgements

    def tx_select(self, state: SessionChannel, command: cmd.TxSelect) -> None:
        if state.confirms is not None:
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, "cannot switch from confirm to tx mode")
        if state.tx is None:  # a second Tx.Select keeps the open transaction, as RabbitMQ does
            state.tx = Transaction()
        self._protocol.send_reply(state.number, command, cmd.TxSelectOk())

    async def tx_commit(self, state: SessionChannel, command: cmd.TxCommit) -> None:
        """Publish the held messages in order, then apply the held settlements, then answer
        once every message is durable (RabbitMQ's Commit-Ok waits for the queues too). A
        refused publish (a missing exchange) closes the channel naming Tx.Commit."""
        tx = _transaction(state)
        if state.number not in self._protocol.open_channels:
            # Refused meanwhile (a publish over the limit read in the same batch): the channel
            # is closing, and its transaction dies with it, uncommitted.
            return
        publishes, settlements = tx.take()
        route = self._publishing.route
        try:
            stored = [
                (await route(state.number, held.message, held.mandatory)).stored
                for held in publishes
            ]
        except BaseException:
            # Refused before its settlements: their deliveries are still unacknowledged and
            # go back to the queue when the channel closes.
            for settlement in settlements:
                state.tags.restore(settlement.entries)
            raise
        for settlement in settlements:
            await self._acknowledgements.apply(
                state, list(settlement.entries.values()), settlement.requeue
            )
        for one in stored:
            try:
                await one.durable()
            except Exception as error:
                # RabbitMQ's text when a queue refused a message of the commit.
                log.warning("tx.commit on channel %d: a write failed: %s", state.number, error)
                raise amqp_error(ReplyCode.PRECONDITION_FAILED, "partial tx completion") from error
        self._protocol.send_reply(state.number, command, cmd.TxCommitOk())

    def tx_rollback(self, state: SessionChannel, command: cmd.TxRollback) -> None:
        """Drop the held messages; the held settlements' deliveries become unacknowledged
        again (RabbitMQ puts them back on the channel: not requeued, settle them again)."""
        tx = _transaction(state)
        state.tags.restore(tx.held_entries())
        tx.take()
        self._protocol.send_reply(state.number, command, cmd.TxRollbackOk())


def _transaction(state: SessionChannel) -> Transaction[Unacked]:
    if state.tx is None:
        raise amqp_error(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")
    return state.tx
