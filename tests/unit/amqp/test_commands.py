"""The typed commands: names normalised as RabbitMQ does, replies encoded for any name."""

from __future__ import annotations

from pamqp import commands

from gateway.amqp import commands as cmd
from gateway.amqp.codec import decode_method


def test_strip_cr_lf() -> None:
    assert cmd.strip_cr_lf("a\r\nb\n") == "ab"
    assert cmd.strip_cr_lf("plain") == "plain"


def test_defaults_are_the_specs() -> None:
    declare = cmd.QueueDeclare("q")
    assert (declare.passive, declare.durable, declare.exclusive, declare.auto_delete) == (
        False,
        False,
        False,
        False,
    )
    assert declare.nowait is False and dict(declare.arguments) == {}


def test_tx_methods_are_commands_always_answered() -> None:
    for method, command in (
        (commands.Tx.Select(), cmd.TxSelect()),
        (commands.Tx.Commit(), cmd.TxCommit()),
        (commands.Tx.Rollback(), cmd.TxRollback()),
    ):
        assert cmd.command_from(method) == command
        assert command.nowait is False  # Tx has no nowait bit: Select-Ok & co always go
        assert (method.index >> 16, method.index & 0xFFFF) == command.METHOD
    for reply, expected in (
        (cmd.TxSelectOk(), commands.Tx.SelectOk),
        (cmd.TxCommitOk(), commands.Tx.CommitOk),
        (cmd.TxRollbackOk(), commands.Tx.RollbackOk),
    ):
        assert isinstance(decode_method(cmd.encode_reply(reply)), expected)


def test_unimplemented_methods_have_no_command() -> None:
    assert cmd.command_from(commands.Exchange.Bind(destination="a", source="b")) is None


def test_replies_encode_names_pamqp_would_refuse() -> None:
    name = "файл=очередь?*"
    decoded = decode_method(cmd.encode_reply(cmd.QueueDeclareOk(name, 3, 1)))
    assert isinstance(decoded, commands.Queue.DeclareOk)
    assert (decoded.queue, decoded.message_count, decoded.consumer_count) == (name, 3, 1)
    cancel = decode_method(cmd.encode_reply(cmd.BasicCancelOk("ctag")))
    assert isinstance(cancel, commands.Basic.CancelOk) and cancel.consumer_tag == "ctag"
