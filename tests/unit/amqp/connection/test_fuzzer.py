"""A bounded run of the structure-aware core fuzzer (tests/support/core_fuzzer.py), and the
regression tests for what it found. The million-input run is ``make fuzz``
(bench/fuzz_core.py); tests/unit/amqp/test_fuzz.py fuzzes the decoders and single frames with
Hypothesis."""

from __future__ import annotations

import struct
from collections import Counter

import pytest

from gateway.amqp import events as ev
from gateway.amqp.connection import ConnectionState, ServerConnection
from gateway.amqp.errors import ReplyCode
from tests.support.core_client import Client
from tests.support.core_fuzzer import (
    SETTINGS,
    Violation,
    check_gateway_output,
    failure_of,
    make_case,
    minimise,
    run_case,
)

# Every test here runs with the compiled frame scan, then with the Python path alone.
pytestmark = pytest.mark.usefixtures("both_frame_paths")

INPUTS = 20_000
# Not the benchmark's first inputs (seed 0 up): the two runs together cover more.
FIRST_SEED = 10_000_000


def test_fuzzed_inputs_never_break_the_cores_promises() -> None:
    kinds: Counter[str] = Counter()
    codes: set[int] = set()
    failures: dict[int, str] = {}
    for seed in range(FIRST_SEED, FIRST_SEED + INPUTS):
        case = make_case(seed)
        try:
            outcome = run_case(case)
        except Exception as error:  # anything escaping the core is a finding
            failures[seed] = f"{type(error).__name__}: {error}"
            continue
        kinds[outcome.kind] += 1
        codes |= outcome.codes
    print(f"\nreply codes reached: {sorted(codes)}")
    for kind, count in kinds.most_common():
        print(f"{count:>7}  {kind}")
    if failures:
        seed, message = next(iter(failures.items()))
        small = minimise(make_case(seed), lambda c: failure_of(c) is not None, budget=500)
        raise AssertionError(
            f"{len(failures)} of {INPUTS} inputs failed; first, input {seed}: {message}\n"
            + small.describe()
        )
    # The generator reaches every error the core itself can find, and the shell's own closes
    # (320, 404): a generator that stopped reaching them would test nothing.
    assert codes >= {320, 403, 404, 406, 501, 502, 503, 504, 505, 530, 540}
    assert kinds["bad protocol header -> our header"] > 0
    assert sum(n for k, n in kinds.items() if k.startswith("no error (state open")) > 0


def test_the_fuzzer_catches_a_core_that_writes_after_a_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fuzzer's checks can fail: with the core's "may I still send?" test broken, the
    shell's deliveries and confirms after a Close are caught."""

    def can_send_while_closing(self: ServerConnection, channel: int) -> bool:
        return self.state in (ConnectionState.OPEN, ConnectionState.CLOSING)

    monkeypatch.setattr(ServerConnection, "_can_send", can_send_while_closing)
    found = [failure_of(make_case(seed)) for seed in range(FIRST_SEED, FIRST_SEED + 3000)]
    assert any(m and "after Connection.Close" in m for m in found)
    assert any(m and "after its Close" in m for m in found)


def test_the_checker_catches_a_close_naming_no_method() -> None:
    """The fuzzer's checks can fail: a Close naming a method that does not exist is caught
    (what the fuzzer found in ``_unopened_channel_frame``, checked on hand-made output)."""
    close = struct.pack(">IH", 0x000A0032, 504) + b"\x00" + struct.pack(">HH", 3262, 14776)
    frame = struct.pack(">BHI", 1, 0, len(close)) + close + b"\xce"
    try:
        check_gateway_output(frame, SETTINGS)
    except Violation as violation:
        assert "names no method" in str(violation)
    else:
        raise AssertionError("a Close naming class 3262 method 14776 passed the checks")


def test_unknown_method_on_an_unopened_channel_names_no_method_in_the_close() -> None:
    """Found by the fuzzer: 504 for a frame on a channel never opened echoed the frame's
    class/method ids into Connection.Close even when they named no method of the spec."""
    client = Client()
    client.handshake()
    payload = struct.pack(">HH", 3262, 14776)
    events = client.send(struct.pack(">BHI", 1, 3, len(payload)) + payload + b"\xce")
    assert any(isinstance(e, ev.ConnectionErrored) for e in events)
    close = client.expect_connection_close(ReplyCode.CHANNEL_ERROR)
    assert (close.class_id, close.method_id) == (0, 0)
    assert "unknown method 3262.14776" in close.reply_text


def test_a_known_method_on_an_unopened_channel_is_still_named() -> None:
    client = Client()
    client.handshake()
    payload = struct.pack(">HHH", 50, 10, 0) + b"\x01q" + b"\x00" + b"\x00\x00\x00\x00"
    client.send(struct.pack(">BHI", 1, 3, len(payload)) + payload + b"\xce")
    close = client.expect_connection_close(ReplyCode.CHANNEL_ERROR)
    assert (close.class_id, close.method_id) == (50, 10)
