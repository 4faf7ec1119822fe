"""Rules applied to a message as it is published (gateway/model/publishing.py)."""

from __future__ import annotations

import pytest

from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.amqp.properties import MessageProperties, encode_properties
from gateway.model.publishing import check_user_id


def header(**properties: object) -> bytes:
    return encode_properties(MessageProperties(**properties))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "raw",
    [b"", header(), header(content_type="text/plain", app_id="a"), header(user_id="guest")],
)
def test_no_user_id_or_the_connections_user_passes(raw: bytes) -> None:
    check_user_id(raw, "guest")


def test_another_user_id_is_406_in_rabbitmqs_words() -> None:
    with pytest.raises(ChannelError) as refused:
        check_user_id(header(user_id="mallory", priority=1), "guest")
    assert refused.value.reply_code == ReplyCode.PRECONDITION_FAILED
    assert refused.value.reply_text == (
        "PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated user was 'guest'"
    )


def test_a_user_id_that_is_not_utf8_is_refused_readably() -> None:
    with pytest.raises(ChannelError) as refused:
        check_user_id(header(user_id=b"\xffx"), "guest")
    assert "set to '\ufffdx'" in refused.value.reply_text
