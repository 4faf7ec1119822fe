"""The typed commands: names normalised as RabbitMQ does, replies encoded for any name."""

from __future__ import annotations

from pamqp import commands

from gateway.amqp import commands as cmd
from gateway.amqp.codec import decode_method, make_method


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


def test_exchange_bind_and_unbind_are_commands() -> None:
    for method, command in (
        (
            make_method(commands.Exchange.Bind, destination="d\r\n", source="s", routing_key="k\n"),
            cmd.ExchangeBind("d", "s", "k\n"),
        ),
        (
            make_method(commands.Exchange.Unbind, destination="d", source="s\n", nowait=True),
            cmd.ExchangeUnbind("d", "s", nowait=True),
        ),
    ):
        assert cmd.command_from(method) == command
        assert (method.index >> 16, method.index & 0xFFFF) == command.METHOD
    for reply, expected in (
        (cmd.ExchangeBindOk(), commands.Exchange.BindOk),
        (cmd.ExchangeUnbindOk(), commands.Exchange.UnbindOk),
    ):
        assert isinstance(decode_method(cmd.encode_reply(reply)), expected)


def test_every_client_method_is_a_command() -> None:
    assert all(cmd.command_from(spec()) is not None for spec in cmd._BUILDERS)


def test_replies_encode_names_pamqp_would_refuse() -> None:
    name = "файл=очередь?*"
    decoded = decode_method(cmd.encode_reply(cmd.QueueDeclareOk(name, 3, 1)))
    assert isinstance(decoded, commands.Queue.DeclareOk)
    assert (decoded.queue, decoded.message_count, decoded.consumer_count) == (name, 3, 1)
    cancel = decode_method(cmd.encode_reply(cmd.BasicCancelOk("ctag")))
    assert isinstance(cancel, commands.Basic.CancelOk) and cancel.consumer_tag == "ctag"
