"""Benchmark: tier resolution + exact cost for many usage events on a 6-tier pricing.

Usage: ``.venv/bin/python benchmarks/pricing.py [N] [REPEATS]`` (default N = 1,000,000,
REPEATS = 3).

Prints the median wall time of each variant over REPEATS runs and its ratio against a bare
float formula (fixed rates, no tier lookup, no validation, no Decimal) measured in the same run.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from protocol_py.rules.cost import cost, prompt_tokens
from protocol_py.rules.pricing import PricingTable
from protocol_py_gen.model.v1 import Pricing, PricingTier, Usage


def six_tiers() -> Pricing:
    """Two time windows x three prompt-size bands."""
    tiers = []
    windows: tuple[tuple[str | None, str | None, float], ...] = (
        (None, "2026-01-01", 1.0),
        ("2026-01-01", None, 0.8),
    )
    for start, until, scale in windows:
        for lo, hi, mult in (
            (None, 200_000, 1.0),
            (200_000, 1_000_000, 2.0),
            (1_000_000, None, 4.0),
        ):
            tiers.append(
                PricingTier(
                    input_per_mtok=3.0 * scale * mult,
                    output_per_mtok=15.0 * scale * mult,
                    cache_read_per_mtok=0.3 * scale * mult,
                    cache_write_per_mtok=3.75 * scale * mult,
                    input_tokens_from=lo,
                    input_tokens_until=hi,
                    effective_from=start,
                    effective_until=until,
                )
            )
    return Pricing(currency="USD", tiers=tiers)


def make_events(n: int) -> list[tuple[Usage, datetime]]:
    rng = random.Random(7)
    base = datetime(2025, 6, 1, tzinfo=UTC)
    out = []
    for _ in range(n):
        usage = Usage(
            input_tokens=rng.randint(0, 1_500_000),
            output_tokens=rng.randint(0, 8_000),
            cache_read_tokens=rng.randint(0, 50_000),
            cache_write_tokens=rng.randint(0, 5_000),
        )
        out.append((usage, base + timedelta(seconds=rng.randint(0, 365 * 86400))))
    return out


def timed(fn: Callable[[], object], repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    table = PricingTable(six_tiers())
    events = make_events(n)

    def float_formula() -> float:
        total = 0.0
        for u, _at in events:
            total += (
                u.input_tokens * 3.0
                + u.output_tokens * 15.0
                + (u.cache_read_tokens or 0) * 0.3
                + (u.cache_write_tokens or 0) * 3.75
            ) / 1e6
        return total

    def resolve_only() -> int:
        acc = 0
        for u, at in events:
            acc += table.resolve(at, prompt_tokens(u))[0]
        return acc

    def resolve_and_cost() -> object:
        last = None
        for u, at in events:
            last = cost(table, u, at)
        return last

    base = timed(float_formula, repeats)
    res = timed(resolve_only, repeats)
    full = timed(resolve_and_cost, repeats)
    print(f"pricing benchmark: {n:,} usage events, 6-tier pricing, median of {repeats} runs")
    for label, secs in (
        ("bare float formula", base),
        ("resolve (tier lookup)", res),
        ("resolve + exact cost", full),
    ):
        per = secs / n * 1e9
        print(f"  {label:<24} {secs:8.3f} s {per:8.0f} ns/event {secs / base:6.1f}x")


if __name__ == "__main__":
    main()
