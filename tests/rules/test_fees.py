"""Per-request fees and explicit-cache storage (protocol 1.2, protocol_py.rules.fees)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from protocol_py.errors import InvalidValueError, Violation
from protocol_py.rules.fees import (
    MAX_COUNTS,
    MAX_RATES,
    UsageProblem,
    request_fees,
    storage_cost,
    tier_violations,
    usage_problems,
)
from protocol_py_gen.model.v1 import PricingTier, RequestCount, RequestRate, Usage

TIER = PricingTier(
    input_per_mtok=3,
    output_per_mtok=15,
    request_rates=[
        RequestRate(name="web_search", price_per_request=0.01),
        RequestRate(name="code_execution_hours", price_per_request=0.05),
    ],
    cache_storage_per_mtok_hour=4.5,
)


def counts(**by_name: int) -> Usage:
    return Usage(request_counts=[RequestCount(name=n, count=c) for n, c in by_name.items()])


# -- request fees ------------------------------------------------------------------------------


def test_each_count_is_billed_at_its_rate_exactly() -> None:
    fees = request_fees(counts(web_search=3, code_execution_hours=7), TIER, 0)
    assert fees == {"web_search": Decimal("0.03"), "code_execution_hours": Decimal("0.35")}
    # 0.1 + 0.2 style binary error never appears: 1,000,001 searches at 0.01
    assert request_fees(counts(web_search=1_000_001), TIER, 0) == {
        "web_search": Decimal("10000.01")
    }


def test_a_zero_count_needs_no_rate_and_a_non_zero_one_does() -> None:
    assert request_fees(counts(image_generation=0), TIER, 2) == {"image_generation": Decimal(0)}
    with pytest.raises(InvalidValueError) as caught:
        request_fees(counts(web_search=1, image_generation=2), TIER, 2)
    assert caught.value.rule == "cost.rate_missing"
    assert caught.value.path == "pricing.tiers[2].request_rates"
    assert str(caught.value).startswith(
        "pricing.tiers[2].request_rates has no rate named 'image_generation' but the usage "
        "bills 2 request(s) at it"
    )


@pytest.mark.parametrize(
    ("usage", "problem"),
    [
        (
            counts(web_search=-1),
            UsageProblem(
                "usage.request_counts[0].count", "usage.negative", "request count -1 is negative"
            ),
        ),
        (
            Usage(request_counts=[RequestCount(name="Web Search", count=1)]),
            UsageProblem(
                "usage.request_counts[0].name",
                "usage.request_count.name_invalid",
                "request count name 'Web Search' must be 1 to 64 bytes of [a-z0-9_]",
            ),
        ),
        (
            Usage(request_counts=[RequestCount(name="", count=1)]),
            UsageProblem(
                "usage.request_counts[0].name",
                "usage.request_count.name_invalid",
                "request count name '' must be 1 to 64 bytes of [a-z0-9_]",
            ),
        ),
        (
            Usage(
                request_counts=[
                    RequestCount(name="web_search", count=1),
                    RequestCount(name="web_search", count=2),
                ]
            ),
            UsageProblem(
                "usage.request_counts[1].name",
                "usage.request_count.name_duplicate",
                "request count 'web_search' appears more than once",
            ),
        ),
        (
            Usage(cache_storage_token_seconds=-5),
            UsageProblem(
                "usage.cache_storage_token_seconds",
                "usage.negative",
                "cache_storage_token_seconds -5 is negative",
            ),
        ),
    ],
)
def test_broken_usage_rules_are_named_and_cost_refuses_them(
    usage: Usage, problem: UsageProblem
) -> None:
    assert usage_problems(usage) == [problem]
    with pytest.raises(InvalidValueError) as caught:
        request_fees(usage, TIER, 0)
    assert (caught.value.path, caught.value.rule) == (problem.path, problem.rule)


def test_more_counts_than_the_limit() -> None:
    usage = Usage(
        request_counts=[RequestCount(name=f"f{i}", count=1) for i in range(MAX_COUNTS + 1)]
    )
    assert usage_problems(usage) == [
        UsageProblem(
            "usage.request_counts",
            "usage.request_counts.too_many",
            "17 request counts, above the limit of 16",
        )
    ]


# -- storage -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token_seconds", "rate", "expected"),
    [
        (1_000_000 * 3600, 4.5, "4.5"),  # a million tokens for an hour at 4.50
        (200_000 * 300, 4.5, "0.075"),  # 200k tokens for five minutes
        (9, 1.0, "0.0000000025"),  # a multiple of 9 seconds: a finite decimal, exact
        (100_000 * 300, 1.0, "0.008333333333333333"),  # 1/120: rounded half-even, 18 places
        (2400, 1.0, "0.000000666666666667"),  # 2/3 x 10^-6: the 19th digit rounds up
        (0, 4.5, "0"),
    ],
)
def test_storage_cost(token_seconds: int, rate: float, expected: str) -> None:
    tier = PricingTier(cache_storage_per_mtok_hour=rate)
    value = storage_cost(Usage(cache_storage_token_seconds=token_seconds), tier, 0)
    assert (format(value.normalize(), "f") if value else "0") == expected


def test_storage_without_a_rate_is_an_error_and_absent_storage_costs_nothing() -> None:
    assert storage_cost(Usage(), PricingTier(), 0) == 0
    with pytest.raises(InvalidValueError) as caught:
        storage_cost(Usage(cache_storage_token_seconds=60), PricingTier(), 1)
    assert (caught.value.path, caught.value.rule) == (
        "pricing.tiers[1].cache_storage_per_mtok_hour",
        "cost.rate_missing",
    )


# -- declarations ------------------------------------------------------------------------------


def test_valid_tier_declarations() -> None:
    assert tier_violations(TIER, "pricing.tiers[0]", True) == []
    assert tier_violations(PricingTier(), "pricing.tiers[0]", False) == []


def test_every_broken_tier_declaration_is_reported() -> None:
    tier = PricingTier(
        request_rates=[
            RequestRate(name="web_search", price_per_request=0.01),
            RequestRate(name="web_search", price_per_request=-1),
            RequestRate(name="web-fetch", price_per_request=float("nan")),
        ],
        cache_storage_per_mtok_hour=float("inf"),
    )
    found = tier_violations(tier, "pricing.tiers[3]", False)
    assert [(v.path, v.rule) for v in found] == [
        ("pricing.tiers[3].request_rates[1].name", "pricing.tiers.request_rate.name_duplicate"),
        ("pricing.tiers[3].request_rates[1].price_per_request", "pricing.tiers.rate_negative"),
        ("pricing.tiers[3].request_rates[2].name", "pricing.tiers.request_rate.name_invalid"),
        ("pricing.tiers[3].request_rates[2].price_per_request", "pricing.tiers.rate_not_finite"),
        ("pricing.tiers[3].cache_storage_per_mtok_hour", "pricing.tiers.rate_not_finite"),
        (
            "pricing.tiers[3].cache_storage_per_mtok_hour",
            "pricing.tiers.cache_storage_without_caching",
        ),
    ]
    assert found[1] == Violation(
        "pricing.tiers[3].request_rates[1].price_per_request",
        "pricing.tiers.rate_negative",
        "price_per_request is -1; it must be >= 0",
    )


def test_more_request_rates_than_the_limit() -> None:
    tier = PricingTier(
        request_rates=[RequestRate(name=f"f{i}", price_per_request=1) for i in range(MAX_RATES + 1)]
    )
    assert [(v.path, v.rule) for v in tier_violations(tier, "t", None)] == [
        ("t.request_rates", "pricing.tiers.request_rates.too_many")
    ]
