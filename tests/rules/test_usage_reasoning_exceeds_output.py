"""Reasoning counted inside the output cannot exceed it: pricing rejects such a usage
(``usage.reasoning_exceeds_output``), the order checker (docs/decisions.md#d12) such a usage event
(``stream.usage.reasoning_exceeds_output``)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from protocol_py.errors import InvalidValueError, StreamOrderError
from protocol_py.rules.accumulate import accumulate
from protocol_py.rules.cost import cost
from protocol_py_gen.model.v1 import (
    Pricing,
    PricingTier,
    Stop,
    StopReason,
    StreamEvent,
    Usage,
)

AT = datetime(2026, 7, 1, tzinfo=UTC)
PRICING = Pricing(currency="USD", tiers=[PricingTier(input_per_mtok=1.0, output_per_mtok=2.0)])


def test_cost_rejects_reasoning_above_output_when_counted_inside_it() -> None:
    usage = Usage(
        input_tokens=1, output_tokens=10, reasoning_tokens=50, reasoning_already_counted=True
    )
    with pytest.raises(InvalidValueError) as info:
        cost(PRICING, usage, AT)
    assert info.value.rule == "usage.reasoning_exceeds_output"
    assert info.value.path == "usage.reasoning_tokens"
    assert "50" in str(info.value) and "10" in str(info.value)


@pytest.mark.parametrize("counted", [None, False])
def test_cost_prices_reasoning_above_output_when_billed_separately(counted: bool | None) -> None:
    usage = Usage(
        input_tokens=0, output_tokens=10, reasoning_tokens=50, reasoning_already_counted=counted
    )
    assert cost(PRICING, usage, AT).total == Decimal("0.00012")  # (10 + 50) * 2 / 1e6


def test_cost_accepts_reasoning_equal_to_output_when_counted() -> None:
    usage = Usage(
        input_tokens=0, output_tokens=50, reasoning_tokens=50, reasoning_already_counted=True
    )
    assert cost(PRICING, usage, AT).total == Decimal("0.0001")


def test_stream_rejects_usage_with_reasoning_above_counted_output() -> None:
    events = [
        StreamEvent(
            usage=Usage(
                input_tokens=1,
                output_tokens=10,
                reasoning_tokens=11,
                reasoning_already_counted=True,
            )
        ),
        StreamEvent(stop=Stop(reason=StopReason.END_TURN)),
    ]
    with pytest.raises(StreamOrderError) as info:
        accumulate(events)
    assert info.value.rule == "stream.usage.reasoning_exceeds_output"
    assert info.value.index == 0
