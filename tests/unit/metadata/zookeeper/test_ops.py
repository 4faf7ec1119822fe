"""ops.py: the transaction operations' approximate size."""

from __future__ import annotations

from gateway.metadata.zookeeper.ops import Check, Create, Delete, SetData, op_size


def test_op_size_counts_the_path_and_the_data() -> None:
    assert op_size(Create("/a/b", b"xyz")) == len("/a/b") + 32 + 3
    assert op_size(SetData("/a", b"12")) == len("/a") + 32 + 2
    assert op_size(Delete("/a")) == op_size(Check("/a")) == len("/a") + 32
