"""``protocol-py version`` and ``capabilities``: the version line, the capabilities table (width,
tiers numbered from 1, the recurring window and prompt-size range that apply now)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pytest

from protocol_py.cli import TABLE_WIDTH
from protocol_py.cli.inspect import _tier_place, capabilities_table
from protocol_py.providers.catalog import deepseek_models
from protocol_py.providers.reference.provider import reference_models
from protocol_py.version import PACKAGE_VERSION, PROTOCOL_VERSION
from protocol_py_gen.model.v1 import PricingTier

from ..support.servers import CONSOLE_SCRIPT
from ._console import OFF_PEAK, PEAK, _pricing_text


def test_dash_dash_version_prints_package_and_protocol() -> None:
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert (done.returncode, done.stdout) == (
        0,
        f"protocol-py {PACKAGE_VERSION} (protocol {PROTOCOL_VERSION})\n",
    )


def test_capabilities_table_fits_100_columns_and_numbers_tiers_from_1() -> None:
    rows = capabilities_table(reference_models())
    for row in rows:
        print(f"{len(row):3d} {row}")
    assert max(len(r) for r in rows) <= 100
    pricing = [r.strip() for r in rows if r.strip().startswith("pricing (USD):")]
    assert len(pricing) == 3
    large = " ".join(" ".join(rows[rows.index(next(r for r in rows if "(tier" in r)) :]).split())
    assert large.startswith(  # by prompt size: tier 1 at 0 tokens, and the range it covers
        "pricing (USD): $3 in / $15 out / $0.3 cache read per Mtok (tier 1 of 2: prompts below "
        "200,000 tokens) reference-medium"
    )
    assert "tier 0" not in "\n".join(rows)
    # the thinking summary is wrapped, not cut: every word of it is still there
    large = rows[1 : rows.index(next(r for r in rows if r.strip().startswith("pricing")))]
    words = " ".join(" ".join(large).split())
    assert (
        "effort low/medium/high/max (default high), adaptive, off: conditional at low/medium"
        in (" ".join(words.split("explicit+implicit", 1)[1].split()))
    )


def test_capabilities_table_wraps_within_a_narrow_width() -> None:
    rows = capabilities_table(reference_models(), width=80)
    assert max(len(r) for r in rows) <= 80


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        (  # inside window 3 (10:00-24:00 Mon-Fri): its rates, then the tier's outside windows
            OFF_PEAK,
            "pricing (USD): now (window 3 of 4 recurring windows): $0.15 in / $0.6 out / $0.003 "
            "cache read per Mtok; outside: $0.3 in / $1.2 out / $0.006 cache read per Mtok",
        ),
        (  # peak hours: the tier's own rates, and that the tier has 4 windows
            PEAK,
            "pricing (USD): now (outside its 4 recurring windows): $0.3 in / $1.2 out / $0.006 "
            "cache read per Mtok",
        ),
    ],
)
def test_capabilities_shows_the_rates_that_apply_now_and_the_window_count(
    at: datetime, expected: str
) -> None:
    rows = capabilities_table(deepseek_models(), at=at)
    assert max(len(r) for r in rows) <= TABLE_WIDTH
    assert _pricing_text(rows) == expected


def _medium_pricing_line(at: datetime) -> str:
    rows = capabilities_table(reference_models(), at=at)
    assert max(len(r) for r in rows) <= TABLE_WIDTH
    start = rows.index(next(r for r in rows if r.startswith("reference-medium"))) + 1
    text = []
    for row in rows[start:]:
        if not row.startswith(" "):
            break
        text.append(row.strip())
    return " ".join(text)


def test_capabilities_says_1_recurring_window_in_the_singular() -> None:
    """It said "outside its 1 recurring windows" (reference-medium: weekends at half price)."""
    tuesday = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    saturday = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    assert _medium_pricing_line(tuesday) == (
        "pricing (USD): now (tier 2 of 2, outside its 1 recurring window): $0.5 in / $2.5 out / "
        "$0.05 cache read per Mtok"
    )
    assert _medium_pricing_line(saturday).startswith(
        "pricing (USD): now (tier 2 of 2, window 1 of 1 recurring window): $0.25 in / $1.25 out"
    )


def test_capabilities_names_the_prompt_size_range_of_a_size_based_tier() -> None:
    """It said "(tier 1 of 2 now)" for reference-large, whose tiers split by prompt size."""
    rows = capabilities_table(reference_models())
    large = " ".join(" ".join(rows[3:5]).split())
    assert large == (
        "pricing (USD): $3 in / $15 out / $0.3 cache read per Mtok (tier 1 of 2: prompts below "
        "200,000 tokens)"
    )
    by_size = [
        PricingTier(input_tokens_until=200_000),
        PricingTier(input_tokens_from=200_000, input_tokens_until=1_000_000),
        PricingTier(input_tokens_from=1_000_000),
    ]
    assert _tier_place(by_size, 1) == "tier 2 of 3: prompts from 200,000 to below 1,000,000 tokens"
    assert _tier_place(by_size, 2) == "tier 3 of 3: prompts from 1,000,000 tokens"
    by_time = [
        PricingTier(effective_until="2026-07-01T00:00:00Z"),
        PricingTier(effective_from="2026-07-01T00:00:00Z"),
    ]
    assert _tier_place(by_time, 1) == "tier 2 of 2 now"
    assert _tier_place(by_time, 1, now=False) == "tier 2 of 2"
    assert _tier_place(by_size[:1], 0) == ""
