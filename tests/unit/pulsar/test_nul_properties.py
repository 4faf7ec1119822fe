"""Properties with NUL characters survive a C API that cuts strings at the first NUL."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.pulsar.nul_properties import ESCAPED_KEY, restored, with_escaped

texts = st.text(alphabet=st.sampled_from("ab\0é-"), max_size=6)


def cut(text: str) -> str:
    return text.split("\0", 1)[0]


def as_c_api_reads(properties: dict[str, str]) -> dict[str, str]:
    """What Pulsar's C API gives back of what the binding wrote: every key and value cut at
    its first NUL (a later cut key overwriting an earlier one, as in a std::map walk)."""
    return {cut(key): cut(value) for key, value in sorted(properties.items())}


@given(st.dictionaries(texts.filter(lambda key: not key.startswith(ESCAPED_KEY)), texts))
def test_what_was_written_is_what_is_read_by_either_path(properties: dict[str, str]) -> None:
    written = dict(with_escaped(properties))
    assert restored(dict(written)) == properties  # the binding reads strings whole
    assert restored(as_c_api_reads(written)) == properties  # and the C API cut them


def test_properties_without_nul_are_left_as_they_are() -> None:
    properties = {"a": "b"}
    assert with_escaped(properties) is properties
    assert restored({"a": "b"}) == {"a": "b"}


def test_an_unreadable_escaped_key_is_left_alone() -> None:
    assert restored({ESCAPED_KEY: "not json", "a": "b"}) == {"a": "b"}
