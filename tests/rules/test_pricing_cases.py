"""Cases B14-B19, C13 and C14 (testdata/cases/, copied from ../shared/cases): the vendor-shaped
inputs are mapped onto Usage/Pricing here by hand (the adapters' own translation is tested in
tests/providers) and every expected figure of the case is asserted exactly."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from protocol_py.errors import InvalidValueError
from protocol_py.rules.cost import cost, format_usd, prompt_tokens
from protocol_py.rules.pricing import PricingTable, validate_pricing
from protocol_py.rules.timestamps import parse_timestamp
from protocol_py_gen.model.v1 import Pricing, PricingTier, Usage

CASES = Path(__file__).resolve().parents[2] / "testdata" / "cases"
AT = datetime(2026, 3, 1, 12, tzinfo=UTC)


def _case(case_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CASES / f"{case_id}.json").read_text(encoding="utf-8"))
    assert data["id"] == case_id
    return data


def _rate(text: str | None) -> float | None:
    """A per-million rate as it travels on the wire: a double."""
    return None if text is None else float(text)


def _one_tier(rates: dict[str, str]) -> Pricing:
    return Pricing(
        currency="USD",
        tiers=[
            PricingTier(
                input_per_mtok=float(rates["input"]),
                output_per_mtok=float(rates["output"]),
                cache_read_per_mtok=_rate(rates.get("cache_read")),
                cache_write_per_mtok=_rate(rates.get("cache_write", rates.get("cache_write_5m"))),
                cache_write_1h_per_mtok=_rate(rates.get("cache_write_1h")),
            )
        ],
    )


def _sse_data(lines: list[str], event_type: str) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        if line.startswith("data: "):
            data = json.loads(line[len("data: ") :])
            if data.get("type") == event_type:
                out.append(data)
    return out


def _usage_fields(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens or 0,
        "cache_write_tokens": usage.cache_write_tokens or 0,
        "cache_write_1h_tokens": usage.cache_write_1h_tokens or 0,
        "reasoning_tokens": usage.reasoning_tokens or 0,
        "reasoning_already_counted": bool(usage.reasoning_already_counted),
    }


def _assert_usage(usage: Usage, expected: dict[str, Any]) -> None:
    actual = _usage_fields(usage)
    for key, value in expected.items():
        assert actual[key] == value, key


def _anthropic_usage(start: dict[str, Any], delta: dict[str, Any]) -> Usage:
    """Anthropic: input_tokens already excludes both cache classes (docs/decisions.md#d7);
    output from the last message_delta; cache_creation splits the 1h writes out."""
    split = start.get("cache_creation") or {}
    return Usage(
        input_tokens=start["input_tokens"],
        output_tokens=delta["output_tokens"],
        cache_read_tokens=start.get("cache_read_input_tokens", 0),
        cache_write_tokens=start.get("cache_creation_input_tokens", 0),
        cache_write_1h_tokens=split.get("ephemeral_1h_input_tokens"),
    )


def _openai_usage(chunk: dict[str, Any]) -> Usage:
    """OpenAI-shaped usage: prompt_tokens includes cached tokens (subtracted,
    docs/decisions.md#d7); DeepSeek's hit/miss fields are the one source when present; reasoning
    is inside completion_tokens when prompt + completion == total and outside when
    prompt + completion + reasoning == total."""
    prompt, completion = chunk["prompt_tokens"], chunk["completion_tokens"]
    reasoning = (chunk.get("completion_tokens_details") or {}).get("reasoning_tokens")
    if "prompt_cache_hit_tokens" in chunk:
        cached = chunk["prompt_cache_hit_tokens"]
        fresh = chunk["prompt_cache_miss_tokens"]
    else:
        cached = (chunk.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        fresh = prompt - cached
    counted = None
    if reasoning is not None:
        counted = prompt + completion == chunk["total_tokens"]
        if not counted:
            assert prompt + completion + reasoning == chunk["total_tokens"]
    return Usage(
        input_tokens=fresh,
        output_tokens=completion,
        cache_read_tokens=cached,
        reasoning_tokens=reasoning,
        reasoning_already_counted=counted,
    )


def test_anthropic_cache_categories() -> None:
    case = _case("B14")
    lines = case["input"]["lines"]
    start = _sse_data(lines, "message_start")[0]["message"]["usage"]
    delta = _sse_data(lines, "message_delta")[-1]["usage"]
    usage = _anthropic_usage(start, delta)
    _assert_usage(usage, case["expected"]["usage"])
    result = cost(_one_tier(case["input"]["pricing_per_mtok"]), usage, AT)
    assert result.total_usd() == case["expected"]["cost_usd"]
    assert result.total_usd() != case["expected"]["wrong_cost_usd_if_input_treated_as_total"]
    assert result.total_usd() != case["expected"]["wrong_cost_usd_if_cache_write_double_counted"]


def test_reasoning_inside_output() -> None:
    case = _case("B15")
    usage = _openai_usage(case["input"]["usage_chunk"])
    _assert_usage(usage, case["expected"]["usage"])
    pricing = _one_tier(case["input"]["pricing_per_mtok"])
    result = cost(pricing, usage, AT)
    assert result.total_usd() == case["expected"]["cost_usd"]
    assert result.terms["reasoning"] == 0
    # The equivalent encoding of the note: output 5, reasoning 261, not already counted.
    other = Usage(
        input_tokens=2008, output_tokens=5, reasoning_tokens=261, reasoning_already_counted=False
    )
    assert cost(pricing, other, AT).total_usd() == case["expected"]["cost_usd"]
    # Without the vendor's signal reasoning is billed on top: that is the double count.
    unsignalled = Usage(input_tokens=2008, output_tokens=266, reasoning_tokens=261)
    assert (
        cost(pricing, unsignalled, AT).total_usd()
        == (case["expected"]["wrong_cost_usd_if_double_counted"])
    )


def test_reasoning_outside_output() -> None:
    case = _case("B16")
    usage = _openai_usage(case["input"]["usage_chunk"])
    _assert_usage(usage, case["expected"]["usage"])
    result = cost(_one_tier(case["input"]["pricing_per_mtok"]), usage, AT)
    assert result.total_usd() == case["expected"]["cost_usd"]
    assert (
        format_usd(result.total - result.terms["reasoning"])
        == (case["expected"]["wrong_cost_usd_if_reasoning_dropped"])
    )


def _b17_pricing(tiers: list[dict[str, Any]]) -> Pricing:
    out = []
    for tier in tiers:
        until = tier.get("max_prompt_tokens_inclusive")
        start = tier.get("min_prompt_tokens_exclusive")
        out.append(
            PricingTier(
                input_per_mtok=float(tier["input"]),
                output_per_mtok=float(tier["output"]),
                cache_read_per_mtok=_rate(tier.get("cache_read")),
                # Inclusive max n is the half-open bound n + 1; exclusive min n is from n + 1.
                input_tokens_until=None if until is None else until + 1,
                input_tokens_from=None if start is None else start + 1,
            )
        )
    return Pricing(currency="USD", tiers=out)


@pytest.mark.parametrize("label", ["A", "B", "C"])
def test_long_context_tier(label: str) -> None:
    case = _case("B17")
    table = PricingTable(_b17_pricing(case["input"]["tiers"]))
    raw = case["input"]["usages"][label]
    usage = Usage(
        input_tokens=raw["input_tokens"],
        output_tokens=raw["output_tokens"],
        cache_read_tokens=raw.get("cache_read_tokens"),
    )
    expected = case["expected"][label]
    result = cost(table, usage, AT)
    assert result.tier_index is not None
    assert result.tier_index + 1 == expected["tier"]  # the case numbers tiers from 1
    assert result.total_usd() == expected["cost_usd"]
    for wrong in ("wrong_if_cache_ignored_for_threshold", "wrong_if_marginal_split"):
        if wrong in expected:
            assert result.total_usd() != expected[wrong]
    if "wrong_if_cache_ignored_for_threshold" in expected:
        # Priced at the lower tier (what ignoring cache reads for the threshold would pick).
        index, _ = table.resolve(AT, usage.input_tokens)
        assert index == 0
        low = Pricing(currency="USD", tiers=[table.pricing.tiers[0]])
        low.tiers[0].input_tokens_until = None
        assert cost(low, usage, AT).total_usd() == expected["wrong_if_cache_ignored_for_threshold"]


def test_one_hour_cache_writes() -> None:
    case = _case("B18")
    usage = _anthropic_usage(
        case["input"]["message_start_usage"], case["input"]["message_delta_usage"]
    )
    _assert_usage(usage, case["expected"]["usage"])
    rates = case["input"]["pricing_per_mtok"]
    result = cost(_one_tier(rates), usage, AT)
    assert result.total_usd() == case["expected"]["cost_usd"]
    assert format_usd(result.terms["cache_write_1h"]) == "4"
    assert format_usd(result.terms["cache_write_5m"]) == "3.75"
    # All writes at the 5-minute rate is what a Pricing without the 1h rate gives.
    no_1h = {k: v for k, v in rates.items() if k != "cache_write_1h"}
    assert (
        cost(_one_tier(no_1h), usage, AT).total_usd()
        == case["expected"]["wrong_cost_usd_all_at_5m"]
    )


def test_deepseek_hit_miss() -> None:
    case = _case("B19")
    usage = _openai_usage(case["input"]["usage_chunk"])
    _assert_usage(usage, case["expected"]["usage"])
    result = cost(_one_tier(case["input"]["pricing_per_mtok"]), usage, AT)
    assert result.total_usd() == case["expected"]["cost_usd"]
    assert result.total_usd() != case["expected"]["wrong_cost_usd_aider_bug"]


@pytest.mark.parametrize("numeric", [False, True], ids=["string-rates", "number-rates"])
def test_exact_decimal_strings(numeric: bool) -> None:
    case = _case("C13")
    numbers = {"0.15": 0.15, "0.60": 0.6, "0.10": 0.1, "0.30": 0.3}
    tables = {}
    for model, rates in case["input"]["pricing_json"].items():
        rate = (lambda s: numbers[s]) if numeric else float
        tables[model] = PricingTable(
            Pricing(
                currency="USD",
                tiers=[
                    PricingTier(
                        input_per_mtok=rate(rates["input_per_mtok"]),
                        output_per_mtok=rate(rates["output_per_mtok"]),
                    )
                ],
            )
        )
    got = []
    for row in case["input"]["rows"]:
        table = tables[row["model"]]
        if "stream" in row:
            total = Decimal(0)
            for _ in range(10000):
                total += cost(table, Usage(input_tokens=0, output_tokens=7), AT).total
            got.append(format_usd(total))
        else:
            usage = Usage(input_tokens=row["input"], output_tokens=row["output"])
            got.append(cost(table, usage, AT).total_usd())
    assert got == case["expected"]["costs"]


def test_tier_boundaries_and_timestamps() -> None:
    case = _case("C14")
    first, second = case["input"]["tiers"]
    # Mapped into a partition: the first tier runs until the second begins.
    pricing = Pricing(
        currency="USD",
        tiers=[
            PricingTier(
                effective_until=second["effective_from"],
                input_per_mtok=float(first["input_per_mtok"]),
                output_per_mtok=0.0,
            ),
            PricingTier(
                effective_from=second["effective_from"],
                input_per_mtok=float(second["input_per_mtok"]),
                output_per_mtok=0.0,
            ),
        ],
    )
    table = PricingTable(pricing)
    queries = case["input"]["queries"]
    prices = []
    for query in queries[:3]:
        _, tier = table.resolve(parse_timestamp(query), 0)
        prices.append(tier.input_per_mtok)
    assert prices == [3.0, 2.5, 2.5]  # expected: first, second (boundary), second (truncated)
    with pytest.raises(InvalidValueError) as info:
        parse_timestamp(queries[3])
    assert info.value.rule == "timestamp.naive"
    with pytest.raises(InvalidValueError):
        table.resolve(datetime.fromisoformat(queries[3]), 0)
    headers = case["input"]["headers"]["anthropic-ratelimit-requests-reset"]
    parsed = [parse_timestamp(h) for h in headers]
    assert {p.replace(microsecond=0) for p in parsed} == {datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)}
    assert [p.microsecond for p in parsed] == [0, 120000, 123456]


def test_tiers_as_written_are_not_a_partition() -> None:
    case = _case("C14")
    pricing = Pricing(
        currency="USD",
        tiers=[
            PricingTier(
                effective_from=t["effective_from"],
                input_per_mtok=float(t["input_per_mtok"]),
                output_per_mtok=0.0,
            )
            for t in case["input"]["tiers"]
        ],
    )
    rules = {v.rule for v in validate_pricing(pricing)}
    assert rules == {"pricing.tiers.gap", "pricing.tiers.overlap"}


def test_prompt_tokens_counts_cache_reads_and_writes() -> None:
    usage = Usage(
        input_tokens=150000, cache_read_tokens=60000, cache_write_tokens=5, output_tokens=9
    )
    assert prompt_tokens(usage) == 210005
