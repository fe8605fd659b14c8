"""Benchmark: tier and window resolution and exact cost with recurring pricing windows, against
the same pricing without windows, measured in the same run (docs/pricing-windows.md,
"Resolution cost").

Usage: ``.venv/bin/python benchmarks/pricing_windows.py [N] [REPEATS]`` (default N = 200,000,
REPEATS = 5).

Variants, each over the same N (receipt time, usage) events spread over one year:

* ``plain``: DeepSeek's peak rates as two size tiers, no windows (the 1.0 shape);
* ``UTC windows``: the catalog's DeepSeek pricing (peak tier, off-peak windows in UTC), per
  size band;
* ``zone windows``: the same schedule on the America/New_York clock (a zoneinfo conversion per
  lookup);
* ``many windows``: 64 windows per tier, every other 1/128 of the day in a named zone (the
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

from protocol_py.providers.catalog import deepseek_models
from protocol_py.rules.cost import cost, prompt_tokens
from protocol_py.rules.pricing import PricingTable
from protocol_py_gen.model.v1 import Pricing, PricingTier, PricingWindow, Usage

SIZE_SPLIT = 128_000


def _banded(tier: PricingTier) -> Pricing:
    """The tier twice: below and from SIZE_SPLIT prompt tokens (the long band at 2x input)."""
    out = []
    for lo, hi, mult in ((None, SIZE_SPLIT, 1.0), (SIZE_SPLIT, None, 2.0)):
        banded = PricingTier().from_dict(tier.to_dict())
        banded.input_per_mtok = tier.input_per_mtok * mult
        banded.input_tokens_from, banded.input_tokens_until = lo, hi
        out.append(banded)
    return Pricing(currency="USD", tiers=out)


def variants() -> dict[str, Pricing]:
    spec = next(s for s in deepseek_models() if s.id == "deepseek-flash")
    assert spec.pricing is not None
    (peak,) = spec.pricing.tiers
    plain_tier = PricingTier().from_dict(peak.to_dict())
    plain_tier.windows = []
    plain = _banded(plain_tier)
    utc = _banded(peak)
    zoned = _banded(peak)
    for tier in zoned.tiers:
        for w in tier.windows:
            w.time_zone = "America/New_York"
    # Every other 1/128 of the day: 64 windows, the most a tier may have.
    edges = [k * 1440 // 128 for k in range(129)]
    many = Pricing(
        currency="USD",
        tiers=[
            PricingTier(
                input_per_mtok=2.0,
                output_per_mtok=2.0,
                cache_read_per_mtok=0.2,
                cache_write_per_mtok=2.0,
                windows=[
                    PricingWindow(
                        start_minute=edges[k],
                        end_minute=edges[k + 1],
                        time_zone="Europe/London",
                        input_per_mtok=1.0,
                        output_per_mtok=1.0,
                        cache_read_per_mtok=0.1,
                        cache_write_per_mtok=1.0,
                    )
                    for k in range(0, 128, 2)
                ],
            )
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
                acc += table.resolve_window(at, size)[1] or 0
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
