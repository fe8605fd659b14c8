"""Bounds of protocol 1.1 per-call vendor data (protocol_py.rules.vendor_data), at and past each
limit, in the stream checker and in request validation."""

from __future__ import annotations

import pytest

from protocol_py.errors import StreamOrderError
from protocol_py.rules.accumulate import accumulate
from protocol_py.rules.stream_order import StreamOrderChecker
from protocol_py.rules.vendor_data import (
    MAX_ENTRIES,
    MAX_LOCATION_BYTES,
    MAX_VALUE_BYTES,
    vendor_data_problems,
)
from protocol_py_gen.content.v1 import VendorData
from protocol_py_gen.model.v1 import (
    Stop,
    StopReason,
    StreamEvent,
    ToolCallDone,
    ToolCallStart,
)


def call(start: list[VendorData], done: list[VendorData]) -> list[StreamEvent]:
    return [
        StreamEvent(tool_call_start=ToolCallStart(id="c", name="f", vendor_data=start)),
        StreamEvent(tool_call_done=ToolCallDone(id="c", vendor_data=done)),
        StreamEvent(stop=Stop(reason=StopReason.TOOL_USE)),
    ]


def test_value_at_the_limit_is_kept_verbatim_and_one_byte_more_is_rejected() -> None:
    value = bytes(range(256)) * (MAX_VALUE_BYTES // 256)
    assert len(value) == MAX_VALUE_BYTES == 65_536
    folded = accumulate(call([VendorData(location="a.b", value=value)], []))
    (block,) = folded.message.content
    assert block.tool_use is not None and block.tool_use.vendor_data[0].value == value
    with pytest.raises(StreamOrderError) as info:
        accumulate(call([], [VendorData(location="a.b", value=value + b"x")]))
    assert (info.value.index, info.value.rule) == (
        1,
        "stream.tool_call.vendor_data.value_too_large",
    )
    assert "65537 bytes, above the limit of 65536" in str(info.value)


def test_location_at_the_limit_passes_and_one_byte_more_is_invalid() -> None:
    ok = "a" * MAX_LOCATION_BYTES
    assert vendor_data_problems([VendorData(location=ok, value=b"v")]) == []
    (problem,) = vendor_data_problems([VendorData(location=ok + "a", value=b"v")])
    assert problem.rule == "location_invalid"
    assert len(problem.message) < 200  # the location is quoted bounded, not echoed whole


def test_entry_count_limit_counts_start_and_done_together() -> None:
    entries = [VendorData(location=f"l.{i}", value=b"v") for i in range(MAX_ENTRIES)]
    folded = accumulate(call(entries[:5], entries[5:]))
    (block,) = folded.message.content
    assert block.tool_use is not None
    assert [v.location for v in block.tool_use.vendor_data] == [f"l.{i}" for i in range(8)]
    checker = StreamOrderChecker()
    events = call(entries[:5], [*entries[5:], VendorData(location="l.x", value=b"v")])
    checker.check(events[0])
    with pytest.raises(StreamOrderError) as info:
        checker.check(events[1])
    assert info.value.rule == "stream.tool_call.vendor_data.too_many"


def test_every_problem_is_reported_in_entry_order() -> None:
    problems = vendor_data_problems(
        [
            VendorData(location="", value=b""),
            VendorData(location="UPPER", value=b"v"),
            VendorData(location="ok", value=b"v"),
            VendorData(location="ok", value=b"v"),
        ]
    )
    assert [(p.entry, p.rule) for p in problems] == [
        (0, "location_empty"),
        (0, "value_empty"),
        (1, "location_invalid"),
        (3, "location_duplicate"),
    ]
