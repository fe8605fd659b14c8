"""Runs testdata/conformance/pricing.json and cost.json (format: testdata/conformance/README.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

import pytest

from protocol_py.codec import protojson
from protocol_py.errors import InvalidValueError, ValidationError
from protocol_py.rules.cost import TERM_NAMES, CostBreakdown, cost, format_usd
from protocol_py.rules.pricing import PricingTable, validate_pricing
from protocol_py.rules.timestamps import parse_timestamp
from protocol_py_gen.model.v1 import Pricing, Usage

DATA = Path(__file__).resolve().parents[2] / "testdata" / "conformance"
PRICING = json.loads((DATA / "pricing.json").read_text(encoding="utf-8"))
COST = json.loads((DATA / "cost.json").read_text(encoding="utf-8"))


def _ids(items: list[dict[str, Any]]) -> list[str]:
    return [item["name"] for item in items]


@pytest.mark.parametrize("vector", PRICING["timestamps"], ids=_ids(PRICING["timestamps"]))
def test_timestamp(vector: dict[str, Any]) -> None:
    if "error_rule" in vector:
        with pytest.raises(InvalidValueError) as info:
            parse_timestamp(vector["input"])
        assert info.value.rule == vector["error_rule"]
        return
    parsed = parse_timestamp(vector["input"])
    assert parsed.tzinfo is UTC
    assert parsed.strftime("%Y-%m-%dT%H:%M:%S.%fZ") == vector["expected"]


@pytest.mark.parametrize("vector", PRICING["validation"], ids=_ids(PRICING["validation"]))
def test_validation(vector: dict[str, Any]) -> None:
    pricing = protojson.decode_or_raise(Pricing, vector["pricing"])
    violations = validate_pricing(pricing, caching_supported=vector["caching_supported"])
    actual = {(v.path, v.rule) for v in violations}
    assert actual == {(e["path"], e["rule"]) for e in vector["expected"]}, violations
    for point in vector.get("points", []):  # the point Python names (README: "points")
        assert any(point in v.message for v in violations), (point, violations)
    if vector["expected"]:
        with pytest.raises(ValidationError) as info:
            PricingTable(pricing, caching_supported=vector["caching_supported"])
        assert {(v.path, v.rule) for v in info.value.violations} == actual
    else:
        PricingTable(pricing, caching_supported=vector["caching_supported"])


@pytest.mark.parametrize("vector", PRICING["resolution"], ids=_ids(PRICING["resolution"]))
def test_resolution(vector: dict[str, Any]) -> None:
    pricing = protojson.decode_or_raise(Pricing, vector["pricing"])
    table = PricingTable(pricing)
    for query in vector["queries"]:
        if "error_rule" in query:
            with pytest.raises(InvalidValueError) as info:
                table.resolve(_at(query["at"]), query["prompt_tokens"])
            assert info.value.rule == query["error_rule"], query
            continue
        index, tier = table.resolve(parse_timestamp(query["at"]), query["prompt_tokens"])
        assert index == query["tier_index"], query
        assert tier is pricing.tiers[index]
        if "window_index" in query:  # recurring windows (protocol 1.1)
            at = parse_timestamp(query["at"])
            found = table.resolve_window(at, query["prompt_tokens"])
            assert found == (query["tier_index"], query["window_index"]), query


def _at(text: str) -> datetime:
    """Parse a query time; a naive one is kept naive so that resolve() itself must refuse it."""
    try:
        return parse_timestamp(text)
    except InvalidValueError as exc:
        if exc.rule != "timestamp.naive":
            raise
        return datetime.fromisoformat(text)


def _cost_once(vector: dict[str, Any]) -> CostBreakdown:
    pricing = protojson.decode_or_raise(Pricing, vector["pricing"])
    usage = protojson.decode_or_raise(Usage, vector["usage"])
    table = PricingTable(pricing)
    return cost(table, usage, parse_timestamp(vector["at"]))


@pytest.mark.parametrize("vector", COST["vectors"], ids=_ids(COST["vectors"]))
def test_cost(vector: dict[str, Any]) -> None:
    if "expected_error" in vector:
        with pytest.raises((InvalidValueError, ValidationError)) as info:
            _cost_once(vector)
        err = info.value
        rules = (
            {v.rule for v in err.violations}
            if isinstance(err, ValidationError)
            else {getattr(err, "rule", "")}
        )
        assert vector["expected_error"]["rule"] in rules
        return
    breakdown = _cost_once(vector)
    expected = vector["expected"]
    repeat = vector.get("repeat", 1)
    with localcontext() as ctx:
        ctx.prec = 200  # the test's own sums must not round either
        terms = {name: breakdown.terms[name] * repeat for name in TERM_NAMES}
        total = sum((breakdown.total for _ in range(repeat)), Decimal(0))
        exact_sum = sum(breakdown.terms.values(), Decimal(0))
    assert {name: format_usd(value) for name, value in terms.items()} == expected["terms"]
    assert format_usd(total) == expected["total_usd"]
    assert breakdown.tier_index == expected["tier_index"]
    assert breakdown.window_index == expected.get("window_index")
    assert breakdown.free is expected["free"]
    out = breakdown.to_json()
    if repeat == 1:
        assert out["total_usd"] == expected["total_usd"]
        assert out["terms"] == expected["terms"]
    assert out["vendor_cost"] == expected.get("vendor_cost")
    assert out["components"] == expected.get("components", [])
    assert out["request_fees"] == expected.get("request_fees", {})
    # The total is the exact sum of the terms, and plain notation never uses an exponent.
    assert breakdown.total == exact_sum
    assert "E" not in out["total_usd"] and "e" not in out["total_usd"]
