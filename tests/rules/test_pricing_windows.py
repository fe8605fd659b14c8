"""Recurring pricing windows (:mod:`protocol_py.rules.pricing_windows`).

Override design: a window's rates replace its tier's while it holds the instant, and the tiers
partition (time x prompt size) as in protocol 1.0. Case B20 with its exact figures, a property
test of validation and resolution against a brute-force oracle that never uses the
minute-of-week index (exactly one rate set per instant; overlapping windows detected), the
Python-only rules and limits, DeepSeek's catalog priced at peak and off-peak, and
``protocol-py cost --at`` across a window edge. The language-neutral vectors are in
testdata/conformance/pricing.json and cost.json; what a 1.0 kernel sees is in
tests/rules/test_pricing_windows_compat.py.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from protocol_py.cli import main
from protocol_py.codec import protojson
from protocol_py.errors import InvalidValueError
from protocol_py.providers.catalog import deepseek_models
from protocol_py.providers.reference import reference_models
from protocol_py.rules.cost import cost
from protocol_py.rules.pricing import PricingTable, validate_pricing
from protocol_py.rules.pricing_windows import MAX_TIME_ZONE_LENGTH, MAX_WINDOWS_PER_TIER
from protocol_py.rules.timestamps import parse_timestamp
from protocol_py_gen.model.v1 import (
    Pricing,
    PricingTier,
    PricingWindow,
    PricingWindowDayOfWeek,
    Usage,
)

CASES = Path(__file__).resolve().parents[2] / "testdata" / "cases"
WEEKDAYS = [
    PricingWindowDayOfWeek.MONDAY,
    PricingWindowDayOfWeek.TUESDAY,
    PricingWindowDayOfWeek.WEDNESDAY,
    PricingWindowDayOfWeek.THURSDAY,
    PricingWindowDayOfWeek.FRIDAY,
]
WEEKEND = [PricingWindowDayOfWeek.SATURDAY, PricingWindowDayOfWeek.SUNDAY]


def _minutes(text: str) -> int:
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def _windowed(*windows: PricingWindow, rate: float = 1.0) -> Pricing:
    """A Pricing of one tier (input ``rate``, output 0) with these windows."""
    return Pricing(currency="USD", tiers=[PricingTier(input_per_mtok=rate, windows=list(windows))])


def _rules(pricing: Pricing) -> set[tuple[str, str]]:
    return {(v.path, v.rule) for v in validate_pricing(pricing)}


# ---------------------------------------------------------------------------------------------
# B20
# ---------------------------------------------------------------------------------------------


def _b20_pricing(case: dict[str, Any], zone: str, shift_hours: int, *, literal: bool) -> Pricing:
    """B20 on the clock of ``zone``, ``shift_hours`` ahead of UTC inside the peak windows, Monday
    to Friday. ``literal``: B20's own shape (base-rate tier, peak windows); otherwise the shape
    the proto recommends (peak-rate tier, off-peak windows: their complement)."""
    rates = case["input"]["pricing"]
    peak = [
        (_minutes(lo) + 60 * shift_hours, _minutes(hi) + 60 * shift_hours)
        for lo, hi in rates["peak"]["windows_utc"]
    ]
    edges = [0, *(m for span in peak for m in span), 1440]
    off_peak = [(lo, hi, WEEKDAYS) for lo, hi in zip(edges[::2], edges[1::2], strict=True)]
    off_peak.append((0, 1440, WEEKEND))
    tier_rates, window_rates = ("base", "peak") if literal else ("peak", "base")
    spans = [(lo, hi, WEEKDAYS) for lo, hi in peak] if literal else off_peak

    def rate(name: str, field: str) -> float:
        return float(rates[name][field])

    windows = [
        PricingWindow(
            start_minute=lo,
            end_minute=hi,
            days=days,
            time_zone=zone,
            input_per_mtok=rate(window_rates, "input"),
            output_per_mtok=rate(window_rates, "output"),
            cache_read_per_mtok=rate(window_rates, "cache_read"),
        )
        for lo, hi, days in spans
    ]
    tier = PricingTier(
        input_per_mtok=rate(tier_rates, "input"),
        output_per_mtok=rate(tier_rates, "output"),
        cache_read_per_mtok=rate(tier_rates, "cache_read"),
        windows=windows,
    )
    return Pricing(currency="USD", tiers=[tier])


@pytest.mark.parametrize("literal", [True, False], ids=["base tier, peak windows", "peak tier"])
@pytest.mark.parametrize(("zone", "shift"), [("UTC", 0), ("Asia/Shanghai", 8)])
def test_peak_and_off_peak_costs_are_exact_at_every_listed_instant(
    zone: str, shift: int, literal: bool
) -> None:
    case = json.loads((CASES / "B20.json").read_text(encoding="utf-8"))
    assert case["id"] == "B20"
    pricing = _b20_pricing(case, zone, shift, literal=literal)
    assert validate_pricing(pricing) == []
    table = PricingTable(pricing)
    usage = Usage(
        input_tokens=case["input"]["usage"]["input_tokens"],
        output_tokens=case["input"]["usage"]["output_tokens"],
    )
    got = {
        at: cost(table, usage, parse_timestamp(at)).total_usd()
        for at in case["input"]["timestamps"]
    }
    assert got == case["expected"]
    assert got["2026-08-19T03:59:59Z"] == "0.572"  # the end is exclusive to the minute...
    assert got["2026-08-19T04:00:00Z"] == "0.286"  # ...and 04:00 is already off-peak
    # The tier's own rates apply outside every window: peak in the recommended shape.
    outside = cost(table, usage, parse_timestamp("2026-08-19T02:30:00Z"))
    assert (outside.window_index is None) is (not literal)


# ---------------------------------------------------------------------------------------------
# Property: validation and resolution against a brute-force oracle
# ---------------------------------------------------------------------------------------------

SLOT = 30
"""Every generated boundary is a multiple of 30 minutes, so sampling each slot is exhaustive."""

ZONES = ["UTC", "America/New_York", "Asia/Shanghai", "Europe/London", "Australia/Lord_Howe"]
SPLIT_AT = datetime(2026, 3, 8, 7, tzinfo=UTC)  # New York springs forward at this instant
SPLIT_SIZE = 1000


def _window_holds(window: PricingWindow, iso_day: int, minute: int) -> bool:
    """Does the window hold local (ISO weekday, minute of day)? Straight from the proto text."""
    days = {int(d) for d in window.days} or set(range(1, 8))
    start, end = window.start_minute, window.end_minute
    if start < end:
        return iso_day in days and start <= minute < end
    previous = 7 if iso_day == 1 else iso_day - 1
    return (iso_day in days and minute >= start) or (previous in days and minute < end)


@functools.cache
def _instant(text: str | None) -> datetime | None:
    return None if text is None else parse_timestamp(text)


def _in_rect(tier: PricingTier, at: datetime, size: int) -> bool:
    lo, hi = _instant(tier.effective_from), _instant(tier.effective_until)
    return (
        (lo is None or lo <= at)
        and (hi is None or at < hi)
        and (tier.input_tokens_from is None or tier.input_tokens_from <= size)
        and (tier.input_tokens_until is None or size < tier.input_tokens_until)
    )


def _oracle_valid(pricing: Pricing) -> bool:
    """At most one window of a tier holds every local slot of the week (the tier's own rates
    take the slots none holds), so exactly one rate set applies everywhere."""
    return all(
        sum(_window_holds(w, iso_day, minute) for w in tier.windows) <= 1
        for tier in pricing.tiers
        for iso_day in range(1, 8)
        for minute in range(0, 1440, SLOT)
    )


def _oracle_rates(
    pricing: Pricing, zone: str, at: datetime, size: int
) -> list[tuple[int, int | None]]:
    """Every (tier, window) whose rates could apply: the tiers whose rectangle holds the point,
    each with the window holding its local time, or None."""
    local = at.astimezone(ZoneInfo(zone))
    minute = local.hour * 60 + local.minute
    out: list[tuple[int, int | None]] = []
    for i, tier in enumerate(pricing.tiers):
        if not _in_rect(tier, at, size):
            continue
        holding = [
            j for j, w in enumerate(tier.windows) if _window_holds(w, local.isoweekday(), minute)
        ]
        if holding:
            out.extend((i, j) for j in holding)
        else:
            out.append((i, None))
    return out


@dataclass
class Generated:
    pricing: Pricing
    zone: str
    mutated: str


def _windows_of_run(
    draw: st.DrawFn, lo: int, hi: int, daily: bool, zone: str, *, rate: float
) -> list[PricingWindow]:
    """Windows covering the minutes [lo, hi) of the day (daily) or of the week."""
    if daily:
        if hi - lo == 1440:
            return [
                PricingWindow(start_minute=0, end_minute=1440, time_zone=zone, input_per_mtok=rate)
            ]
        end = hi if hi <= 1440 else hi - 1440
        return [PricingWindow(start_minute=lo, end_minute=end, time_zone=zone, input_per_mtok=rate)]
    out: list[PricingWindow] = []
    at, left = lo % 10080, hi - lo
    while left > 0:
        day, start = divmod(at, 1440)
        crossing = draw(st.booleans())
        longest = (1440 if start == 0 else 1440 - SLOT) if crossing else 1440 - start
        length = min(left, longest)
        end = start + length if start + length <= 1440 else start + length - 1440
        out.append(
            PricingWindow(
                start_minute=start,
                end_minute=end,
                days=[PricingWindowDayOfWeek(day + 1)],
                time_zone=zone,
                input_per_mtok=rate,
            )
        )
        at, left = (at + length) % 10080, left - length
    return out


@st.composite
def generated_pricings(draw: st.DrawFn) -> Generated:
    """A 1.0 partition of (time x size), each tier with disjoint windows on a 30-minute grid
    (some runs of the week left to the tier's own rates), then maybe one mutation."""
    zone = draw(st.sampled_from(ZONES))
    times = (
        [(None, SPLIT_AT.isoformat()), (SPLIT_AT.isoformat(), None)]
        if draw(st.booleans())
        else [(None, None)]
    )
    sizes = [(None, SPLIT_SIZE), (SPLIT_SIZE, None)] if draw(st.booleans()) else [(None, None)]
    tiers: list[PricingTier] = []
    for t_from, t_until in times:
        for s_from, s_until in sizes:
            windows: list[PricingWindow] = []
            mode = draw(st.sampled_from(["none", "daily", "weekly"]))
            if mode != "none":
                daily = mode == "daily"
                cycle = 1440 if daily else 10080
                cuts = sorted(
                    set(draw(st.lists(st.integers(0, cycle // SLOT - 1), min_size=1, max_size=6)))
                )
                starts = [c * SLOT for c in cuts]
                ends = [*starts[1:], starts[0] + cycle]
                for k, (lo, hi) in enumerate(zip(starts, ends, strict=True)):
                    if draw(st.booleans()):  # this run keeps the tier's own rates
                        windows.extend(_windows_of_run(draw, lo, hi, daily, zone, rate=k + 2.0))
            tiers.append(
                PricingTier(
                    effective_from=t_from,
                    effective_until=t_until,
                    input_tokens_from=s_from,
                    input_tokens_until=s_until,
                    input_per_mtok=1.0,
                    output_per_mtok=1.0,
                    windows=windows,
                )
            )
    mutated = draw(st.sampled_from(["none", "shift", "drop", "copy"]))
    windowed = [i for i, t in enumerate(tiers) if t.windows]
    if mutated != "none" and windowed:
        i = draw(st.sampled_from(windowed))
        j = draw(st.integers(0, len(tiers[i].windows) - 1))
        window = tiers[i].windows[j]
        if mutated == "shift":
            field = draw(st.sampled_from(["start_minute", "end_minute"]))
            value = getattr(window, field) + draw(st.sampled_from([-SLOT, SLOT]))
            low, high = (0, 1410) if field == "start_minute" else (SLOT, 1440)
            other = window.end_minute if field == "start_minute" else window.start_minute
            if low <= value <= high and value != other:
                setattr(window, field, value)
            else:
                mutated = "none"
        elif mutated == "drop":
            del tiers[i].windows[j]  # the tier's own rates take its minutes: still valid
        else:
            target = draw(st.integers(0, len(tiers) - 1))
            tiers[target].windows.append(window)  # an overlap when the target is tier i
    return Generated(Pricing(currency="USD", tiers=tiers), zone, mutated)


PROPERTY = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@PROPERTY
@given(
    generated_pricings(),
    st.lists(
        st.datetimes(
            min_value=datetime(2025, 10, 1),
            max_value=datetime(2027, 4, 30),
        ),
        min_size=1,
        max_size=20,
    ),
)
def test_windows_give_exactly_one_rate_set_and_resolve_as_a_brute_force_oracle(
    generated: Generated, naive_instants: list[datetime]
) -> None:
    pricing = generated.pricing
    violations = validate_pricing(pricing)
    event(f"mutation {generated.mutated}, {'invalid' if violations else 'valid'}")
    assert (violations == []) == _oracle_valid(pricing), (generated, violations)
    if generated.mutated in ("none", "drop"):
        assert violations == [], violations  # disjoint windows in a 1.0 partition are valid
    assert {v.rule for v in violations} <= {"pricing.tiers.window.overlap"}, violations
    if violations:
        return
    table = PricingTable(pricing)
    edges = [SPLIT_AT - timedelta(minutes=1), SPLIT_AT, datetime(2026, 11, 1, 6, tzinfo=UTC)]
    for at in [*edges, *(n.replace(tzinfo=UTC) for n in naive_instants)]:
        for size in (0, SPLIT_SIZE - 1, SPLIT_SIZE, 10**9):
            matches = _oracle_rates(pricing, generated.zone, at, size)
            assert len(matches) == 1, (at, size, matches)
            assert table.resolve_window(at, size) == matches[0], (at, size)
            tier, window = matches[0]
            rate = pricing.tiers[tier].input_per_mtok
            if window is not None:
                rate = pricing.tiers[tier].windows[window].input_per_mtok or rate
            billed = cost(table, Usage(input_tokens=size), at).terms["input"]
            assert billed == Decimal(size) * Decimal(repr(rate)) / 10**6, (at, size)


# ---------------------------------------------------------------------------------------------
# Rules that only Python values can break, and the limits
# ---------------------------------------------------------------------------------------------


def test_more_windows_than_the_limit_are_refused_with_one_violation() -> None:
    windows = [
        PricingWindow(start_minute=i * 20, end_minute=i * 20 + 20)
        for i in range(MAX_WINDOWS_PER_TIER + 1)
    ]
    pricing = _windowed(*windows)
    violations = validate_pricing(pricing)
    assert [(v.path, v.rule) for v in violations] == [
        ("pricing.tiers[0].windows", "pricing.tiers.window.too_many")
    ]
    assert "65 windows; at most 64" in violations[0].message
    # At the limit the windows are checked and accepted (the tier's rates take the rest).
    pricing.tiers[0].windows = windows[:MAX_WINDOWS_PER_TIER]
    assert validate_pricing(pricing) == []
    assert PricingTable(pricing).resolve_window(datetime(2026, 1, 1, 21, 20, tzinfo=UTC), 0) == (
        0,
        None,
    )


def test_a_long_zone_name_is_refused_and_shown_truncated() -> None:
    name = "Europe/" + "X" * 10_000
    window = PricingWindow(start_minute=0, end_minute=1440, time_zone=name)
    pricing = _windowed(window)
    (violation,) = validate_pricing(pricing)
    assert (violation.path, violation.rule) == (
        "pricing.tiers[0].windows[0].time_zone",
        "pricing.tiers.window.unknown_zone",
    )
    assert len(violation.message) < MAX_TIME_ZONE_LENGTH + 200
    assert repr(name[:MAX_TIME_ZONE_LENGTH] + "...") in violation.message


@pytest.mark.parametrize("name", ["../../etc/passwd", "/usr/share/zoneinfo/UTC", "utc", "EST5"])
def test_paths_and_unknown_spellings_are_not_zones(name: str) -> None:
    window = PricingWindow(start_minute=0, end_minute=1440, time_zone=name)
    pricing = _windowed(window)
    assert _rules(pricing) == {
        ("pricing.tiers[0].windows[0].time_zone", "pricing.tiers.window.unknown_zone")
    }


def test_more_than_seven_days_is_one_duplicate_day_violation() -> None:
    window = PricingWindow(start_minute=0, end_minute=1440, days=WEEKDAYS * 1000)
    pricing = _windowed(window)
    assert [(v.path, v.rule) for v in validate_pricing(pricing)] == [
        ("pricing.tiers[0].windows[0].days", "pricing.tiers.window.duplicate_day")
    ]


def test_values_of_the_wrong_python_type_are_violations_not_crashes() -> None:
    tier = PricingTier(input_per_mtok=1)
    tier.windows = "every day"  # type: ignore[assignment]
    assert _rules(Pricing(currency="USD", tiers=[tier])) == {
        ("pricing.tiers[0].windows", "pricing.not_pricing")
    }
    tier.windows = [PricingTier()]  # type: ignore[list-item]
    assert _rules(Pricing(currency="USD", tiers=[tier])) == {
        ("pricing.tiers[0].windows[0]", "pricing.not_pricing")
    }
    window = PricingWindow(start_minute="0", end_minute=1440.0, time_zone=5)  # type: ignore[arg-type]
    window.days = "MONDAY"  # type: ignore[assignment]
    tier.windows = [window]
    assert _rules(Pricing(currency="USD", tiers=[tier])) == {
        ("pricing.tiers[0].windows[0].start_minute", "pricing.tiers.window.invalid_time"),
        ("pricing.tiers[0].windows[0].end_minute", "pricing.tiers.window.invalid_time"),
        ("pricing.tiers[0].windows[0].days", "pricing.not_pricing"),
        ("pricing.tiers[0].windows[0].time_zone", "pricing.not_pricing"),
    }


def test_none_in_window_fields_reads_as_the_proto3_default() -> None:
    # start_minute None is 0 (midnight); days None is empty (every day).
    window = PricingWindow(start_minute=None, end_minute=1440, days=None)  # type: ignore[arg-type]
    pricing = _windowed(window)
    assert validate_pricing(pricing) == []
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert PricingTable(pricing).resolve_window(at, 5) == (0, 0)


@pytest.mark.parametrize(
    ("zone", "at"),
    [
        ("America/New_York", datetime(1, 1, 1, 2, tzinfo=UTC)),
        ("Asia/Shanghai", datetime(9999, 12, 31, 23, tzinfo=UTC)),
    ],
)
def test_an_instant_without_a_representable_local_time_is_a_typed_error(
    zone: str, at: datetime
) -> None:
    table = PricingTable(_windowed(PricingWindow(start_minute=0, end_minute=1440, time_zone=zone)))
    with pytest.raises(InvalidValueError) as info:
        table.resolve_window(at, 0)
    assert info.value.rule == "timestamp.out_of_range"
    with pytest.raises(InvalidValueError) as info:
        cost(table, Usage(input_tokens=1), at)
    assert info.value.rule == "timestamp.out_of_range"
    # The table keeps answering ordinary instants.
    assert table.resolve_window(datetime(2026, 1, 1, tzinfo=UTC), 0) == (0, 0)


def test_a_fall_back_hour_occurs_twice_and_both_occurrences_are_in_the_window() -> None:
    ny = "America/New_York"
    table = PricingTable(
        _windowed(PricingWindow(start_minute=60, end_minute=120, time_zone=ny, input_per_mtok=1))
    )
    start = datetime(2026, 11, 1, 4, tzinfo=UTC)  # 00:00 EDT on the fall-back Sunday
    in_window = [
        start + timedelta(minutes=m)
        for m in range(0, 5 * 60)
        if table.resolve_window(start + timedelta(minutes=m), 0) == (0, 0)
    ]
    # 01:00-02:00 local lasts two real hours that day: 05:00Z to 07:00Z.
    assert (in_window[0], in_window[-1], len(in_window)) == (
        datetime(2026, 11, 1, 5, tzinfo=UTC),
        datetime(2026, 11, 1, 6, 59, tzinfo=UTC),
        120,
    )


# ---------------------------------------------------------------------------------------------
# DeepSeek priced exactly, and the CLI
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        ("2026-08-19T02:30:00Z", ("0.3", "1.2", "0.006")),  # Wednesday, peak
        ("2026-08-19T04:00:00Z", ("0.15", "0.6", "0.003")),  # the peak window's exclusive end
        ("2026-08-19T05:59:59Z", ("0.15", "0.6", "0.003")),
        ("2026-08-19T06:00:00Z", ("0.3", "1.2", "0.006")),
        ("2026-08-19T10:00:00Z", ("0.15", "0.6", "0.003")),
        ("2026-08-22T02:30:00Z", ("0.15", "0.6", "0.003")),  # Saturday: off-peak all day
        ("2026-08-24T00:59:00Z", ("0.15", "0.6", "0.003")),  # Monday before 01:00
    ],
)
def test_deepseek_flash_is_priced_at_peak_and_half_off_peak(
    at: str, expected: tuple[str, str, str]
) -> None:
    spec = next(s for s in deepseek_models() if s.id == "deepseek-flash")
    assert spec.pricing is not None
    assert validate_pricing(spec.pricing, caching_supported=True) == []
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=1_000_000)
    breakdown = cost(spec.pricing, usage, parse_timestamp(at))
    terms = breakdown.to_json()["terms"]
    assert (terms["input"], terms["output"], terms["cache_read"]) == expected
    # Peak is the tier's own rates (no window); off-peak is one of its windows.
    assert breakdown.tier_index == 0
    assert (breakdown.window_index is None) is (expected[0] == "0.3")


def test_every_deepseek_model_validates_with_its_caching() -> None:
    for spec in deepseek_models():
        assert spec.pricing is not None and spec.caching is not None
        assert validate_pricing(spec.pricing, caching_supported=spec.caching.supported) == []


def test_deepseek_off_peak_windows_are_exactly_the_complement_of_the_peak_hours() -> None:
    spec = next(s for s in deepseek_models() if s.id == "deepseek-v4-pro")
    assert spec.pricing is not None
    table = PricingTable(spec.pricing)
    monday = datetime(2026, 8, 17, tzinfo=UTC)
    peak_minutes = [
        m
        for m in range(7 * 1440)
        if table.resolve_window(monday + timedelta(minutes=m), 0)[1] is None
    ]
    expected = [
        day * 1440 + minute for day in range(5) for minute in [*range(60, 240), *range(360, 600)]
    ]
    assert peak_minutes == expected


def test_cli_cost_at_resolves_the_window_of_the_instant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every day: 01:00-04:00 UTC peak (the tier's rates), 04:00 to 01:00 the next day (crossing
    # midnight) off-peak (the window's).
    pricing = {
        "currency": "USD",
        "tiers": [
            {
                "inputPerMtok": 0.3,
                "outputPerMtok": 1.2,
                "windows": [
                    {
                        "startMinute": 240,
                        "endMinute": 60,
                        "inputPerMtok": 0.15,
                        "outputPerMtok": 0.6,
                    }
                ],
            },
        ],
    }
    pricing_file = tmp_path / "pricing.json"
    pricing_file.write_text(json.dumps(pricing))
    usage_file = tmp_path / "usage.json"
    usage_file.write_text(json.dumps({"inputTokens": 1_000_000, "outputTokens": 100_000}))
    answers = {}
    for at in ("2026-08-19T03:59:59Z", "2026-08-19T04:00:00Z", "2026-08-19T09:30:00+08:00"):
        argv = ["cost", "--pricing", str(pricing_file), "--usage", str(usage_file), "--json"]
        assert main([*argv, "--at", at]) == 0
        out = json.loads(capsys.readouterr().out)
        answers[at] = out["total_usd"]
    assert answers == {
        "2026-08-19T03:59:59Z": "0.42",
        "2026-08-19T04:00:00Z": "0.21",
        "2026-08-19T09:30:00+08:00": "0.42",  # 01:30 UTC on the Wednesday
    }
    argv = ["cost", "--pricing", str(pricing_file), "--usage", str(usage_file)]
    assert main([*argv, "--at", "2026-08-19T04:00:00Z"]) == 0
    assert "pricing: tier 1, window 1" in capsys.readouterr().out  # numbered from 1


# ---------------------------------------------------------------------------------------------
# Wire and JSON agreement with google's protobuf (upb)
# ---------------------------------------------------------------------------------------------


def test_window_vectors_mean_the_same_to_googles_protobuf(upb: Any) -> None:
    vectors = json.loads(
        (CASES.parent / "conformance" / "pricing.json").read_text(encoding="utf-8")
    )
    upb_pricing = upb.message("model.v1.Pricing")
    checked = 0
    for vector in [*vectors["validation"], *vectors["resolution"]]:
        if not vector["name"].startswith("window"):
            continue
        ours = protojson.decode_or_raise(Pricing, vector["pricing"])
        theirs = json_format.ParseDict(vector["pricing"], upb_pricing())
        assert upb_pricing.FromString(bytes(ours)) == theirs, vector["name"]
        assert Pricing.parse(theirs.SerializeToString()) == ours, vector["name"]
        checked += 1
    assert checked >= 28


@pytest.mark.parametrize(
    ("at", "tier_index", "window_index", "total"),
    [
        ("2026-06-27T12:00:00Z", 0, None, "4.8"),  # a Saturday before the price change
        ("2026-08-19T12:00:00Z", 1, None, "3"),  # Wednesday: the tier's own rates
        ("2026-08-21T23:59:59Z", 1, None, "3"),  # Friday, last second
        ("2026-08-22T00:00:00Z", 1, 0, "1.5"),  # Saturday 00:00 UTC: the weekend window
        ("2026-08-23T23:59:59Z", 1, 0, "1.5"),
        ("2026-08-24T00:00:00Z", 1, None, "3"),  # Monday again
    ],
)
def test_reference_medium_bills_weekends_at_half_price_from_july_2026(
    at: str, tier_index: int, window_index: int | None, total: str
) -> None:
    spec = next(m for m in reference_models() if m.id == "reference-medium")
    assert spec.pricing is not None and spec.caching is not None
    assert validate_pricing(spec.pricing, caching_supported=spec.caching.supported) == []
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    breakdown = cost(spec.pricing, usage, parse_timestamp(at))
    assert (breakdown.tier_index, breakdown.window_index, breakdown.total_usd()) == (
        tier_index,
        window_index,
        total,
    )
