"""A Duration held as a timedelta is encoded, written and read as protobuf defines it, negative
ones included: the wire encoding and the proto3-JSON string agree with upb's
(``Duration.FromTimedelta``, ``json_format``) for any timedelta in Duration's range, and every
duration string upb writes reads back.

https://protobuf.dev/reference/protobuf/google.protobuf/#duration
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from google.protobuf import duration_pb2, json_format  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol_py.codec import durations, protojson, wire
from protocol_py.codec.durations import MAX_SECONDS
from protocol_py.errors import ValidationError
from protocol_py_gen.google.protobuf import Duration
from protocol_py_gen.model.v1 import ModelError, RateLimitSnapshot

RANGE = datetime.timedelta(seconds=MAX_SECONDS)
TIMEDELTAS = st.timedeltas(min_value=-RANGE, max_value=RANGE)

EDGES = [
    datetime.timedelta(0),
    datetime.timedelta(microseconds=1),
    datetime.timedelta(microseconds=-1),
    datetime.timedelta(seconds=-1.5),
    datetime.timedelta(days=-1, microseconds=1),
    datetime.timedelta(microseconds=20),
    datetime.timedelta(seconds=3),
    datetime.timedelta(seconds=-3),
    datetime.timedelta(milliseconds=-250),
    RANGE,
    -RANGE,
]


def upb_duration(delta: datetime.timedelta) -> Any:
    found = duration_pb2.Duration()
    found.FromTimedelta(delta)
    return found


def check(delta: datetime.timedelta) -> None:
    expected = upb_duration(delta)
    assert durations.split(delta) == (expected.seconds, expected.nanos)
    assert durations.encode(delta) == expected.SerializeToString()
    text = json_format.MessageToDict(expected)
    assert durations.to_json(delta) == text
    assert durations.from_json(text) == delta
    # through the codec: a field of an event, on the wire and in JSON
    error = ModelError(retry_after=delta)
    data = wire.encode(error)
    assert duration_pb2.Duration.FromString(data[2:]).ToTimedelta() == delta
    assert wire.decode(ModelError, data) == error
    assert protojson.encode(error) == {"retryAfter": text}
    assert protojson.decode_or_raise(ModelError, {"retryAfter": text}) == error


@pytest.mark.parametrize("delta", EDGES, ids=str)
def test_edge_durations_agree_with_upb(delta: datetime.timedelta) -> None:
    check(delta)


@settings(max_examples=300, deadline=None)
@given(TIMEDELTAS)
def test_any_duration_in_range_agrees_with_upb(delta: datetime.timedelta) -> None:
    check(delta)


def test_a_negative_duration_is_encoded_with_one_sign_unlike_betterproto2() -> None:
    delta = datetime.timedelta(seconds=-1.5)
    assert durations.split(delta) == (-1, -500_000_000)
    betterproto2 = Duration.from_timedelta(delta)
    assert (betterproto2.seconds, betterproto2.nanos) == (-1, 500_000_000)  # reads as -0.5 s
    snapshot = wire.encode(RateLimitSnapshot(resets_after=delta))
    assert duration_pb2.Duration.FromString(snapshot[2:]).ToTimedelta() == delta


@pytest.mark.parametrize(
    ("text", "delta"),
    [
        ("1s", datetime.timedelta(seconds=1)),
        ("-0s", datetime.timedelta(0)),
        ("0.5s", datetime.timedelta(milliseconds=500)),
        ("-0.000000001s", datetime.timedelta(0)),  # below a microsecond: toward zero
        ("1.000001999s", datetime.timedelta(seconds=1, microseconds=1)),
        ("315576000000s", RANGE),
    ],
)
def test_duration_strings_upb_accepts_read_toward_zero(
    text: str, delta: datetime.timedelta
) -> None:
    upb = json_format.Parse(f'"{text}"', duration_pb2.Duration())
    assert upb.ToTimedelta() == delta
    assert durations.from_json(text) == delta


@pytest.mark.parametrize(
    "text",
    ["", "1", "s", "1.s", "+1s", "1.5 s", "0x1s", "1.0000000001s", "315576000001s", "1e3s", "-s"],
)
def test_malformed_or_out_of_range_duration_strings_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        durations.from_json(text)
    with pytest.raises(ValidationError) as raised:
        protojson.decode_or_raise(ModelError, {"retryAfter": text})
    assert "retry_after" in str(raised.value)


def test_a_long_duration_string_is_quoted_cut() -> None:
    with pytest.raises(ValueError) as raised:
        durations.from_json("9" * 100_000 + "s")
    assert len(str(raised.value)) < 300


def test_a_duration_field_holding_something_else_is_refused_by_the_encoder() -> None:
    with pytest.raises(TypeError):
        durations.encode(3.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        wire.encode(ModelError(retry_after=3.5))  # type: ignore[arg-type]
