"""Benchmark: tier resolution and exact cost with recurring windows, against the same pricing
without windows, measured in the same run (docs/pricing-windows.md, "Resolution cost").

Usage: ``python benchmarks/pricing_windows.py [N] [REPEATS]`` (default N = 200,000,
REPEATS = 5).

Variants, each over the same N (receipt time, usage) events spread over one year:

* ``plain``: DeepSeek's rates as two size tiers, no windows (the 1.0 shape);
* ``UTC windows``: the catalog's DeepSeek pricing (peak and off-peak windows in UTC), per size
  band;
* ``zone windows``: the same schedule on the America/New_York clock (a zoneinfo conversion per
  lookup);
* ``many windows``: 64 windows per tier, 2 x 64 alternating runs per day in a named zone (the
  largest schedule a tier may declare), to show the lookup stays logarithmic.

Prints the median wall time of each variant over REPEATS runs, ns per event, and its ratio to
``plain``.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from protocol_py.pricing import PricingTable, cost, prompt_tokens
from protocol_py.providers.catalog import deepseek_models
from protocol_py_gen.model.v1 import Pricing, PricingTier, PricingWindow, Usage

SIZE_SPLIT = 128_000


def _banded(tiers: list[PricingTier]) -> Pricing:
    """Each tier twice: below and from SIZE_SPLIT prompt tokens (the long band at 2x input)."""
    out = []
    for tier in tiers:
        for lo, hi, mult in ((None, SIZE_SPLIT, 1.0), (SIZE_SPLIT, None, 2.0)):
            out.append(
                PricingTier(
                    input_per_mtok=tier.input_per_mtok * mult,
                    output_per_mtok=tier.output_per_mtok,
                    cache_read_per_mtok=tier.cache_read_per_mtok,
                    cache_write_per_mtok=tier.cache_write_per_mtok,
                    input_tokens_from=lo,
                    input_tokens_until=hi,
                    windows=[
                        PricingWindow(
                            start_minute=w.start_minute,
                            end_minute=w.end_minute,
                            days=list(w.days),
                            time_zone=w.time_zone,
                        )
                        for w in tier.windows
                    ],
                )
            )
    return Pricing(currency="USD", tiers=out)


def variants() -> dict[str, Pricing]:
    spec = next(s for s in deepseek_models() if s.id == "deepseek-flash")
    assert spec.pricing is not None
    off_peak, peak = spec.pricing.tiers
    plain = _banded(
        [
            PricingTier(
                input_per_mtok=peak.input_per_mtok,
                output_per_mtok=peak.output_per_mtok,
                cache_read_per_mtok=peak.cache_read_per_mtok,
                cache_write_per_mtok=peak.cache_write_per_mtok,
            )
        ]
    )
    utc = _banded([off_peak, peak])
    zoned = _banded([off_peak, peak])
    for tier in zoned.tiers:
        for w in tier.windows:
            w.time_zone = "America/New_York"
    # 128 runs per day alternating between two tiers: 64 windows each, the most a tier may have.
    edges = [k * 1440 // 128 for k in range(129)]
    many = Pricing(
        currency="USD",
        tiers=[
            PricingTier(
                input_per_mtok=rate,
                output_per_mtok=rate,
                cache_read_per_mtok=rate / 10,
                cache_write_per_mtok=rate,
                windows=[
                    PricingWindow(
                        start_minute=edges[k], end_minute=edges[k + 1], time_zone="Europe/London"
                    )
                    for k in range(parity, 128, 2)
                ],
            )
            for parity, rate in ((0, 1.0), (1, 2.0))
        ],
    )
    return {"plain": plain, "UTC windows": utc, "zone windows": zoned, "many windows": many}


def make_events(n: int) -> list[tuple[Usage, datetime]]:
    rng = random.Random(11)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        (
            Usage(
                input_tokens=rng.randint(0, 300_000),
                output_tokens=rng.randint(0, 8_000),
                cache_read_tokens=rng.randint(0, 50_000),
                cache_write_tokens=0,
            ),
            base + timedelta(seconds=rng.randint(0, 365 * 86400)),
        )
        for _ in range(n)
    ]


def interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each function; the functions run round-robin, so that a change in the
    machine's load during the run hits every variant alike."""
    runs: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            runs[name].append(time.perf_counter() - t0)
    return {name: statistics.median(values) for name, values in runs.items()}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    events = make_events(n)
    sized = [(prompt_tokens(u), at) for u, at in events]
    fns: dict[str, Callable[[], object]] = {}
    for label, pricing in variants().items():
        table = PricingTable(pricing)

        def resolve_only(table: PricingTable = table) -> int:
            acc = 0
            for size, at in sized:
                acc += table.resolve(at, size)[0]
            return acc

        def resolve_and_cost(table: PricingTable = table) -> object:
            last = None
            for u, at in events:
                last = cost(table, u, at)
            return last

        fns[f"resolve {label}"] = resolve_only
        fns[f"cost {label}"] = resolve_and_cost
    medians = interleaved(fns, repeats)
    print(f"pricing windows benchmark: {n:,} usage events, median of {repeats} interleaved runs")
    print(
        f"  {'variant':<14} {'resolve ns/event':>17} {'ratio':>6}"
        f" {'cost ns/event':>14} {'ratio':>6}"
    )
    base_resolve, base_cost = medians["resolve plain"], medians["cost plain"]
    for label in variants():
        res, full = medians[f"resolve {label}"], medians[f"cost {label}"]
        print(
            f"  {label:<14} {res / n * 1e9:17.0f} {res / base_resolve:6.2f}"
            f" {full / n * 1e9:14.0f} {full / base_cost:6.2f}"
        )


if __name__ == "__main__":
    main()
