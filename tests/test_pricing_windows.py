"""Recurring pricing windows (issue 11 item 2; src/protocol_py/pricing_windows.py).

Case B20 with its exact figures, a property test of validation and resolution against a
brute-force oracle that never uses the minute-of-week index, the Python-only rules and limits,
DeepSeek's catalog priced at peak and off-peak, and ``protocol-py cost --at`` across a window
edge. The language-neutral vectors are in testdata/conformance/pricing.json and cost.json.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from protocol_py import protojson
from protocol_py.cli import main
from protocol_py.errors import InvalidValueError
from protocol_py.pricing import PricingTable, cost, parse_timestamp, validate_pricing
from protocol_py.pricing_windows import MAX_TIME_ZONE_LENGTH, MAX_WINDOWS_PER_TIER
from protocol_py.providers.catalog import deepseek_models
from protocol_py.providers.reference import reference_models
from protocol_py_gen.model.v1 import (
    Pricing,
    PricingTier,
    PricingWindow,
    PricingWindowDayOfWeek,
    Usage,
)

CASES = Path(__file__).resolve().parent.parent / "testdata" / "cases"
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


def _windowed(*tiers: tuple[float, list[PricingWindow]]) -> Pricing:
    """A Pricing of ``(input rate, windows)`` tiers (output rate 0, no other bounds)."""
    return Pricing(
        currency="USD",
        tiers=[PricingTier(input_per_mtok=rate, windows=windows) for rate, windows in tiers],
    )


def _rules(pricing: Pricing) -> set[tuple[str, str]]:
    return {(v.path, v.rule) for v in validate_pricing(pricing)}


# ---------------------------------------------------------------------------------------------
# B20
# ---------------------------------------------------------------------------------------------


def _b20_pricing(case: dict[str, Any], zone: str, shift_hours: int) -> Pricing:
    """B20's peak windows (given in UTC) on the clock of ``zone``, ``shift_hours`` ahead of UTC
    inside the windows, Monday to Friday; the base tier is their complement."""
    rates = case["input"]["pricing"]
    peak = [
        (_minutes(lo) + 60 * shift_hours, _minutes(hi) + 60 * shift_hours)
        for lo, hi in rates["peak"]["windows_utc"]
    ]
    base_windows = [PricingWindow(start_minute=0, end_minute=1440, days=WEEKEND, time_zone=zone)]
    edges = [0, *(m for span in peak for m in span), 1440]
    for lo, hi in zip(edges[::2], edges[1::2], strict=True):
        base_windows.append(
            PricingWindow(start_minute=lo, end_minute=hi, days=WEEKDAYS, time_zone=zone)
        )

    def tier(name: str, windows: list[PricingWindow]) -> PricingTier:
        return PricingTier(
            input_per_mtok=float(rates[name]["input"]),
            output_per_mtok=float(rates[name]["output"]),
            cache_read_per_mtok=float(rates[name]["cache_read"]),
            windows=windows,
        )

    peak_windows = [
        PricingWindow(start_minute=lo, end_minute=hi, days=WEEKDAYS, time_zone=zone)
        for lo, hi in peak
    ]
    return Pricing(currency="USD", tiers=[tier("base", base_windows), tier("peak", peak_windows)])


@pytest.mark.parametrize(("zone", "shift"), [("UTC", 0), ("Asia/Shanghai", 8)])
def test_b20_peak_and_off_peak_costs_are_exact_at_every_listed_instant(
    zone: str, shift: int
) -> None:
    case = json.loads((CASES / "B20.json").read_text(encoding="utf-8"))
    assert case["id"] == "B20"
    pricing = _b20_pricing(case, zone, shift)
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


def _holders(pricing: Pricing, at: datetime, size: int, iso_day: int, minute: int) -> int:
    """How many (tier, window) pairs hold the point; an unwindowed tier is one pair."""
    count = 0
    for tier in pricing.tiers:
        if not _in_rect(tier, at, size):
            continue
        if not tier.windows:
            count += 1
        else:
            count += sum(_window_holds(w, iso_day, minute) for w in tier.windows)
    return count


def _oracle_valid(pricing: Pricing) -> bool:
    """Exactly one holder for every local slot of the week in every (time x size) cell."""
    instants = [SPLIT_AT - timedelta(days=1), SPLIT_AT]
    for at in instants:
        for size in (0, SPLIT_SIZE):
            for iso_day in range(1, 8):
                for minute in range(0, 1440, SLOT):
                    if _holders(pricing, at, size, iso_day, minute) != 1:
                        return False
    return True


def _oracle_tier(pricing: Pricing, zone: str, at: datetime, size: int) -> list[int]:
    local = at.astimezone(ZoneInfo(zone))
    minute = local.hour * 60 + local.minute
    return [
        i
        for i, tier in enumerate(pricing.tiers)
        if _in_rect(tier, at, size)
        and (
            not tier.windows
            or any(_window_holds(w, local.isoweekday(), minute) for w in tier.windows)
        )
    ]


@dataclass
class Generated:
    pricing: Pricing
    zone: str
    mutated: str


def _windows_of_run(
    draw: st.DrawFn, lo: int, hi: int, daily: bool, zone: str
) -> list[PricingWindow]:
    """Windows covering the minutes [lo, hi) of the day (daily) or of the week."""
    if daily:
        if hi - lo == 1440:
            return [PricingWindow(start_minute=0, end_minute=1440, time_zone=zone)]
        return [
            PricingWindow(
                start_minute=lo, end_minute=hi if hi <= 1440 else hi - 1440, time_zone=zone
            )
        ]
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
            )
        )
        at, left = (at + length) % 10080, left - length
    return out


@st.composite
def generated_pricings(draw: st.DrawFn) -> Generated:
    """A partition of (time x size x local week) on a 30-minute grid, then maybe one mutation."""
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

            def tier(windows: list[PricingWindow], rate: float) -> PricingTier:
                return PricingTier(
                    effective_from=t_from,  # noqa: B023 - built and used in this iteration
                    effective_until=t_until,  # noqa: B023
                    input_tokens_from=s_from,  # noqa: B023
                    input_tokens_until=s_until,  # noqa: B023
                    input_per_mtok=rate,
                    output_per_mtok=rate,
                    windows=windows,
                )

            mode = draw(st.sampled_from(["all week", "daily", "weekly"]))
            if mode == "all week":
                tiers.append(tier([], 1.0))
                continue
            daily = mode == "daily"
            cycle = 1440 if daily else 10080
            cuts = sorted(
                set(draw(st.lists(st.integers(0, cycle // SLOT - 1), min_size=1, max_size=6)))
            )
            starts = [c * SLOT for c in cuts]
            runs = [
                (lo, hi) for lo, hi in zip(starts, [*starts[1:], starts[0] + cycle], strict=True)
            ]
            count = draw(st.integers(1, min(3, len(runs))))
            owner = [draw(st.integers(0, count - 1)) for _ in runs]
            per_tier: list[list[PricingWindow]] = [[] for _ in range(count)]
            for (lo, hi), k in zip(runs, owner, strict=True):
                per_tier[k].extend(_windows_of_run(draw, lo, hi, daily, zone))
            tiers.extend(tier(ws, float(k + 2)) for k, ws in enumerate(per_tier) if ws)
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
            del tiers[i].windows[j]
            if not tiers[i].windows:
                del tiers[i]
        else:
            target = draw(st.integers(0, len(tiers) - 1))
            if target == i or not tiers[target].windows:
                mutated = "none"
            else:
                tiers[target].windows.append(window)
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
def test_windows_partition_and_resolution_match_a_brute_force_oracle(
    generated: Generated, naive_instants: list[datetime]
) -> None:
    pricing = generated.pricing
    violations = validate_pricing(pricing)
    event(f"mutation {generated.mutated}, {'invalid' if violations else 'valid'}")
    assert (violations == []) == _oracle_valid(pricing), (generated, violations)
    if generated.mutated == "none":
        assert violations == [], violations  # an unmutated partition is always valid
    if violations:
        return
    table = PricingTable(pricing)
    edges = [SPLIT_AT - timedelta(minutes=1), SPLIT_AT, datetime(2026, 11, 1, 6, tzinfo=UTC)]
    for at in [*edges, *(n.replace(tzinfo=UTC) for n in naive_instants)]:
        for size in (0, SPLIT_SIZE - 1, SPLIT_SIZE, 10**9):
            matches = _oracle_tier(pricing, generated.zone, at, size)
            assert len(matches) == 1, (at, size, matches)
            assert table.resolve(at, size)[0] == matches[0], (at, size)


# ---------------------------------------------------------------------------------------------
# Rules that only Python values can break, and the limits
# ---------------------------------------------------------------------------------------------


def test_more_windows_than_the_limit_are_refused_with_one_violation() -> None:
    windows = [
        PricingWindow(start_minute=i * 20, end_minute=i * 20 + 20)
        for i in range(MAX_WINDOWS_PER_TIER + 1)
    ]
    pricing = _windowed((1, windows))
    violations = validate_pricing(pricing)
    assert [(v.path, v.rule) for v in violations] == [
        ("pricing.tiers[0].windows", "pricing.tiers.window.too_many")
    ]
    assert "65 windows; at most 64" in violations[0].message
    # At the limit the windows are checked (and here leave the rest of the day uncovered).
    pricing.tiers[0].windows = windows[:MAX_WINDOWS_PER_TIER]
    assert _rules(pricing) == {("pricing.tiers", "pricing.tiers.gap")}


def test_a_long_zone_name_is_refused_and_shown_truncated() -> None:
    name = "Europe/" + "X" * 10_000
    window = PricingWindow(start_minute=0, end_minute=1440, time_zone=name)
    pricing = _windowed((1, [window]))
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
    pricing = _windowed((1, [window]))
    assert _rules(pricing) == {
        ("pricing.tiers[0].windows[0].time_zone", "pricing.tiers.window.unknown_zone")
    }


def test_more_than_seven_days_is_one_duplicate_day_violation() -> None:
    window = PricingWindow(start_minute=0, end_minute=1440, days=WEEKDAYS * 1000)
    pricing = _windowed((1, [window]))
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
    pricing = _windowed((1, [window]))
    assert validate_pricing(pricing) == []
    assert PricingTable(pricing).resolve(datetime(2026, 1, 1, tzinfo=UTC), 5)[0] == 0


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
    table = PricingTable(
        _windowed((1, [PricingWindow(start_minute=0, end_minute=1440, time_zone=zone)]))
    )
    with pytest.raises(InvalidValueError) as info:
        table.resolve(at, 0)
    assert info.value.rule == "timestamp.out_of_range"
    with pytest.raises(InvalidValueError) as info:
        cost(table, Usage(input_tokens=1), at)
    assert info.value.rule == "timestamp.out_of_range"
    # The table keeps answering ordinary instants.
    assert table.resolve(datetime(2026, 1, 1, tzinfo=UTC), 0)[0] == 0


def test_a_fall_back_hour_occurs_twice_and_both_occurrences_are_in_the_window() -> None:
    ny = "America/New_York"
    table = PricingTable(
        _windowed(
            (2, [PricingWindow(start_minute=120, end_minute=60, time_zone=ny)]),
            (1, [PricingWindow(start_minute=60, end_minute=120, time_zone=ny)]),
        )
    )
    start = datetime(2026, 11, 1, 4, tzinfo=UTC)  # 00:00 EDT on the fall-back Sunday
    in_window = [
        start + timedelta(minutes=m)
        for m in range(0, 5 * 60)
        if table.resolve(start + timedelta(minutes=m), 0)[0] == 1
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


def test_every_deepseek_model_validates_with_its_caching() -> None:
    for spec in deepseek_models():
        assert spec.pricing is not None and spec.caching is not None
        assert validate_pricing(spec.pricing, caching_supported=spec.caching.supported) == []


def test_cli_cost_at_resolves_the_window_of_the_instant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every day: 01:00-04:00 UTC peak, 04:00 to 01:00 the next day (crossing midnight) off-peak.
    pricing = {
        "currency": "USD",
        "tiers": [
            {
                "inputPerMtok": 0.15,
                "outputPerMtok": 0.6,
                "windows": [{"startMinute": 240, "endMinute": 60}],
            },
            {
                "inputPerMtok": 0.3,
                "outputPerMtok": 1.2,
                "windows": [{"startMinute": 60, "endMinute": 240, "timeZone": "UTC"}],
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
        answers[at] = (out["tier_index"], out["total_usd"])
    assert answers == {
        "2026-08-19T03:59:59Z": (1, "0.42"),
        "2026-08-19T04:00:00Z": (0, "0.21"),
        "2026-08-19T09:30:00+08:00": (1, "0.42"),  # 01:30 UTC on the Wednesday
    }


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
        if not vector["name"].startswith("window:"):
            continue
        ours = protojson.decode_or_raise(Pricing, vector["pricing"])
        theirs = json_format.ParseDict(vector["pricing"], upb_pricing())
        assert upb_pricing.FromString(bytes(ours)) == theirs, vector["name"]
        assert Pricing.parse(theirs.SerializeToString()) == ours, vector["name"]
        checked += 1
    assert checked >= 25


@pytest.mark.parametrize(
    ("at", "tier_index", "total"),
    [
        ("2026-06-27T12:00:00Z", 0, "4.8"),  # a Saturday before the price change: no windows
        ("2026-08-19T12:00:00Z", 1, "3"),  # Wednesday
        ("2026-08-21T23:59:59Z", 1, "3"),  # Friday, last second
        ("2026-08-22T00:00:00Z", 2, "1.5"),  # Saturday 00:00 UTC: the weekend window
        ("2026-08-23T23:59:59Z", 2, "1.5"),
        ("2026-08-24T00:00:00Z", 1, "3"),  # Monday again
    ],
)
def test_reference_medium_bills_weekends_at_half_price_from_july_2026(
    at: str, tier_index: int, total: str
) -> None:
    spec = next(m for m in reference_models() if m.id == "reference-medium")
    assert spec.pricing is not None and spec.caching is not None
    assert validate_pricing(spec.pricing, caching_supported=spec.caching.supported) == []
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    breakdown = cost(spec.pricing, usage, parse_timestamp(at))
    assert (breakdown.tier_index, breakdown.total_usd()) == (tier_index, total)
