"""Unit and property tests of protocol_py.rules.pricing (resolution against a brute-force scan,
partition errors naming a real offending point, typed errors for bad input)."""

from __future__ import annotations

import itertools
import random
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from protocol_py.errors import InvalidValueError, ValidationError
from protocol_py.rules.cost import cost, format_usd, prompt_tokens
from protocol_py.rules.pricing import PricingTable, validate_pricing
from protocol_py.rules.timestamps import parse_timestamp
from protocol_py_gen.model.v1 import Pricing, PricingTier, Usage, UsageComponent, VendorCost

AT = datetime(2026, 3, 1, tzinfo=UTC)
BASE = datetime(2025, 1, 1, tzinfo=UTC)


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _random_partition(rng: random.Random) -> Pricing:
    """A random valid Pricing: time slabs, each split into random prompt-size bands."""
    n_times = rng.randint(0, 3)
    times = sorted(rng.sample(range(1, 400), n_times))
    edges: list[int | None] = [None, *times, None]
    tiers = []
    for lo, hi in itertools.pairwise(edges):
        sizes = sorted(rng.sample(range(1, 500_000), rng.randint(0, 3)))
        s_edges: list[int | None] = [None, *sizes, None]
        for s_lo, s_hi in itertools.pairwise(s_edges):
            tiers.append(
                PricingTier(
                    effective_from=None if lo is None else _iso(BASE + timedelta(days=lo)),
                    effective_until=None if hi is None else _iso(BASE + timedelta(days=hi)),
                    input_tokens_from=s_lo,
                    input_tokens_until=s_hi,
                    input_per_mtok=rng.choice([0.1, 1.25, 3.0, 15.0]),
                    output_per_mtok=rng.choice([0.3, 5.0, 75.0]),
                )
            )
    rng.shuffle(tiers)
    return Pricing(currency="USD", tiers=tiers)


def _brute(pricing: Pricing, at: datetime, size: int) -> list[int]:
    out = []
    for i, t in enumerate(pricing.tiers):
        if t.effective_from is not None and at < parse_timestamp(t.effective_from):
            continue
        if t.effective_until is not None and at >= parse_timestamp(t.effective_until):
            continue
        if t.input_tokens_from is not None and size < t.input_tokens_from:
            continue
        if t.input_tokens_until is not None and size >= t.input_tokens_until:
            continue
        out.append(i)
    return out


def _probe_points(pricing: Pricing, rng: random.Random) -> list[tuple[datetime, int]]:
    times = [BASE - timedelta(days=1000), BASE + timedelta(days=1000)]
    sizes = [0, 10**12]
    for t in pricing.tiers:
        for raw in (t.effective_from, t.effective_until):
            if raw is not None:
                at = parse_timestamp(raw)
                times += [at, at - timedelta(microseconds=1), at + timedelta(seconds=1)]
        for bound in (t.input_tokens_from, t.input_tokens_until):
            if bound is not None:
                sizes += [bound, bound - 1, bound + 1]
    times += [BASE + timedelta(seconds=rng.randint(0, 400 * 86400)) for _ in range(5)]
    sizes += [rng.randint(0, 600_000) for _ in range(5)]
    return [(at, s) for at in times for s in sizes if s >= 0]


@pytest.mark.parametrize("seed", range(40))
def test_resolve_agrees_with_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    pricing = _random_partition(rng)
    assert validate_pricing(pricing) == []
    table = PricingTable(pricing)
    for at, size in _probe_points(pricing, rng):
        matches = _brute(pricing, at, size)
        assert len(matches) == 1, (at, size)
        index, tier = table.resolve(at, size)
        assert index == matches[0], (at, size)
        assert tier is pricing.tiers[index]


_POINT = re.compile(r"at (\S+), prompt size (\d+): ")


@pytest.mark.parametrize("seed", range(40))
def test_broken_partition_names_a_real_offending_point(seed: int) -> None:
    rng = random.Random(1000 + seed)
    pricing = _random_partition(rng)
    if rng.random() < 0.5 or len(pricing.tiers) == 1:
        pricing.tiers.append(rng.choice(pricing.tiers))  # a duplicate overlaps
        expect = "pricing.tiers.overlap"
    else:
        pricing.tiers.pop(rng.randrange(len(pricing.tiers)))  # a hole
        expect = "pricing.tiers.gap"
    violations = validate_pricing(pricing)
    assert {v.rule for v in violations} == {expect}
    for v in violations:
        m = _POINT.match(v.message)
        assert m is not None, v.message
        matches = _brute(pricing, parse_timestamp(m[1]), int(m[2]))
        if expect == "pricing.tiers.gap":
            assert matches == []
        else:
            assert len(matches) >= 2
            assert v.path == f"pricing.tiers[{matches[-1]}]"
    with pytest.raises(ValidationError):
        PricingTable(pricing)


def test_every_violation_is_reported_not_only_the_first() -> None:
    pricing = Pricing(
        currency="eur",
        tiers=[
            PricingTier(input_per_mtok=float("nan"), output_per_mtok=-1.0, batch_input_per_mtok=1),
            PricingTier(effective_from="2026-13-01", input_per_mtok=1, output_per_mtok=1),
        ],
    )
    rules = [v.rule for v in validate_pricing(pricing, caching_supported=True)]
    assert rules.count("pricing.tiers.cache_rate_missing") == 4
    for rule in (
        "pricing.currency_not_usd",
        "pricing.tiers.rate_not_finite",
        "pricing.tiers.rate_negative",
        "pricing.tiers.batch_rates_unpaired",
        "pricing.tiers.effective_from.unparseable",
    ):
        assert rule in rules
    # Bounds are invalid, so no partition noise is added on top.
    assert "pricing.tiers.gap" not in rules
    assert "pricing.tiers.overlap" not in rules


def test_validate_pricing_rejects_a_non_pricing_value() -> None:
    (v,) = validate_pricing("nope")  # type: ignore[arg-type]
    assert v.rule == "pricing.not_pricing"
    pricing = Pricing(currency="USD", tiers=[PricingTier(input_per_mtok=1, output_per_mtok=1)])
    pricing.tiers.append("tier")  # type: ignore[arg-type]
    (v,) = validate_pricing(pricing)
    assert (v.path, v.rule) == ("pricing.tiers[1]", "pricing.not_pricing")
    with pytest.raises(ValidationError):
        PricingTable(pricing)


def test_spec_worked_example() -> None:
    pricing = Pricing(
        currency="USD",
        tiers=[
            PricingTier(
                input_per_mtok=3.00,
                output_per_mtok=15.00,
                cache_read_per_mtok=0.30,
                cache_write_per_mtok=3.75,
            )
        ],
    )
    usage = Usage(input_tokens=412, output_tokens=28, cache_read_tokens=0, cache_write_tokens=0)
    result = cost(pricing, usage, AT)
    assert result.total_usd() == "0.001656"
    assert format_usd(result.terms["input"]) == "0.001236"
    assert format_usd(result.terms["output"]) == "0.00042"
    assert result.to_json()["total_usd"] == "0.001656"
    text = result.render_text()
    assert "pricing: tier 1" in text  # human output numbers tiers from 1
    assert re.search(r"total\s+0\.001656 USD", text)


def test_rates_go_through_their_shortest_repr_not_binary_floats() -> None:
    pricing = Pricing(currency="USD", tiers=[PricingTier(input_per_mtok=0.1, output_per_mtok=0.7)])
    result = cost(pricing, Usage(input_tokens=3, output_tokens=3), AT)
    assert result.terms["input"] == Decimal("0.0000003")
    assert result.total_usd() == "0.0000024"
    assert 3 * 0.1 / 1e6 != 0.0000003  # what float arithmetic would have produced


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("0.000750"), "0.00075"),
        (Decimal("1E-7"), "0.0000001"),
        (Decimal("1E+2"), "100"),
        (Decimal("120"), "120"),
        (Decimal("1.50"), "1.5"),
        (Decimal("-0.0"), "0"),
        (Decimal("0E-12"), "0"),
        (
            Decimal("123456789012345678901234567890.000000000000000000001"),
            "123456789012345678901234567890.000000000000000000001",
        ),
    ],
)
def test_format_usd(value: Decimal, text: str) -> None:
    assert format_usd(value) == text


@pytest.mark.parametrize("bad", [Decimal("NaN"), Decimal("Infinity"), 0.5, "1"])
def test_format_usd_rejects_non_finite_and_non_decimal(bad: object) -> None:
    with pytest.raises(InvalidValueError):
        format_usd(bad)  # type: ignore[arg-type]


def test_vendor_cost_and_components_never_feed_the_total() -> None:
    pricing = Pricing(currency="USD", tiers=[PricingTier(input_per_mtok=1, output_per_mtok=2)])
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=0,
        vendor_cost=VendorCost(amount="999", unit="usd"),
        components=[UsageComponent(name="z", value=1), UsageComponent(name="a", value=9)],
    )
    result = cost(pricing, usage, AT)
    assert result.total_usd() == "1"
    assert result.vendor_cost == VendorCost(amount="999", unit="usd")
    assert [c.name for c in result.components] == ["a", "z"]
    assert "vendor_cost  999 usd" in result.render_text()


def test_free_pricing() -> None:
    table = PricingTable(Pricing(currency="USD", free=True))
    result = cost(table, Usage(input_tokens=10, output_tokens=10), AT)
    assert (result.tier_index, result.total_usd(), result.free) == (None, "0", True)
    assert all(v == 0 for v in result.terms.values())
    with pytest.raises(InvalidValueError) as info:
        table.resolve(AT, 0)
    assert info.value.rule == "pricing.no_tiers"


@pytest.mark.parametrize(
    ("usage", "rule"),
    [
        (Usage(input_tokens=-1, output_tokens=0), "usage.negative"),
        (Usage(input_tokens=0, output_tokens=-1), "usage.negative"),
        (Usage(input_tokens=0, output_tokens=0, cache_read_tokens=-2), "usage.negative"),
        (Usage(input_tokens=0, output_tokens=0, reasoning_tokens=-2), "usage.negative"),
        (
            Usage(input_tokens=0, output_tokens=0, cache_write_tokens=1, cache_write_1h_tokens=2),
            "usage.cache_write_1h_exceeds_cache_write",
        ),
        (
            Usage(input_tokens=0, output_tokens=0, cache_write_1h_tokens=2),
            "usage.cache_write_1h_exceeds_cache_write",
        ),
        (Usage(input_tokens=0, output_tokens=0, cache_read_tokens=5), "cost.rate_missing"),
    ],
)
def test_cost_rejects_bad_usage_with_typed_errors(usage: Usage, rule: str) -> None:
    pricing = Pricing(currency="USD", tiers=[PricingTier(input_per_mtok=1, output_per_mtok=2)])
    with pytest.raises(InvalidValueError) as info:
        cost(pricing, usage, AT)
    assert info.value.rule == rule
    assert info.value.path


def test_cost_rejects_invalid_pricing_and_bad_arguments() -> None:
    bad = Pricing(
        currency="USD", tiers=[PricingTier(input_per_mtok=float("inf"), output_per_mtok=1)]
    )
    with pytest.raises(ValidationError) as info:
        cost(bad, Usage(), AT)
    assert info.value.violations[0].path == "pricing.tiers[0].input_per_mtok"
    good = Pricing(currency="USD", tiers=[PricingTier(input_per_mtok=1, output_per_mtok=1)])
    with pytest.raises(InvalidValueError):
        cost(good, Usage(), datetime(2026, 1, 1))  # naive
    with pytest.raises(InvalidValueError):
        cost(good, Usage(), "2026-01-01")  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError):
        cost(good, {"input_tokens": 1}, AT)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [-1, True, 1.5, "10", None])
def test_resolve_rejects_bad_sizes(size: object) -> None:
    table = PricingTable(
        Pricing(currency="USD", tiers=[PricingTier(input_per_mtok=1, output_per_mtok=1)])
    )
    with pytest.raises(InvalidValueError):
        table.resolve(AT, size)  # type: ignore[arg-type]


@pytest.mark.parametrize("at", [datetime(2026, 1, 1), "2026-01-01T00:00:00Z", 0, None])
def test_resolve_rejects_naive_or_non_datetime(at: object) -> None:
    table = PricingTable(
        Pricing(currency="USD", tiers=[PricingTier(input_per_mtok=1, output_per_mtok=1)])
    )
    with pytest.raises(InvalidValueError):
        table.resolve(at, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2026",
        "2026-01-01T",
        "2026-01-01T00:00:00+",
        "2026-01-01T24:00:00Z",
        "2026-00-01",
        "2026-01-01T00:00:00.Z",
        "\uff12\uff10\uff12\uff16-01-01",
        "2026-01-01T00:00:00Z junk",
    ],
)
def test_parse_timestamp_rejects_garbage(text: str) -> None:
    with pytest.raises(InvalidValueError) as info:
        parse_timestamp(text, path="pricing.tiers[0].effective_from")
    assert info.value.path == "pricing.tiers[0].effective_from"
    assert info.value.rule in {"timestamp.unparseable", "timestamp.out_of_range"}


def test_parse_timestamp_edge_forms() -> None:
    assert parse_timestamp("2016-12-31T23:59:60Z") == datetime(2017, 1, 1, tzinfo=UTC)
    assert parse_timestamp("2026-01-01T05:30+0530") == datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_timestamp("2026-01-01 00:00:00,25+00") == datetime(
        2026, 1, 1, 0, 0, 0, 250000, tzinfo=UTC
    )
    with pytest.raises(InvalidValueError):
        parse_timestamp(20260101)  # type: ignore[arg-type]


def test_prompt_tokens() -> None:
    assert prompt_tokens(Usage(input_tokens=1, output_tokens=100)) == 1
    with pytest.raises(InvalidValueError):
        prompt_tokens(Usage(input_tokens=1, cache_write_tokens=-1))


def test_non_integer_size_bounds_are_violations() -> None:
    tier = PricingTier(input_per_mtok=1, output_per_mtok=1)
    tier.input_tokens_until = "5"  # type: ignore[assignment]
    rules = [v.rule for v in validate_pricing(Pricing(currency="USD", tiers=[tier]))]
    assert rules == ["pricing.tiers.input_tokens_not_integer"]
