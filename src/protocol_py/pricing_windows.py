"""Recurring pricing windows: a tier bounded by local wall-clock time (protocol 1.1; spec
"Pricing"; DESIGN D9; docs/pricing-windows.md).

A :class:`~protocol_py_gen.model.v1.PricingWindow` is a half-open range of minutes of the local
day (``start_minute`` inclusive, ``end_minute`` exclusive, crossing midnight when the end is
below the start), on some days of the week, on the wall clock of an IANA time zone (absent:
``"UTC"``). A tier with windows applies at an instant only when the instant's local
(day of week, minute) lies in one of them. The instant is converted with :mod:`zoneinfo`, so a
daylight-saving change needs no rule of its own: an instant has exactly one local time.

Everything here works on the *minute of the week*: Monday 00:00 local is 0, Sunday 23:59 is
10079 (:data:`MINUTES_PER_WEEK`). A window becomes at most two half-open spans of that axis per
day it starts on (two when it runs past Sunday midnight). The partition rule across windows:
within one (time window x prompt-size window) cell, the windowed tiers of the cell (a tier
without windows counts as the whole week) cover every minute of the week exactly once, and all
their windows follow one zone. Because the check is over local (day, minute), it holds for
every instant in every year whatever the zone's daylight-saving rules (the instant-to-local map
is a function), and it needs no time-zone database; mixed zones in one cell are rejected
instead of compared across transitions (see docs/pricing-windows.md for why).

Rule ids: ``pricing.tiers.window.too_many``, ``pricing.tiers.window.invalid_time``,
``pricing.tiers.window.empty``, ``pricing.tiers.window.invalid_day``,
``pricing.tiers.window.duplicate_day``, ``pricing.tiers.window.unknown_zone``,
``pricing.tiers.window.mixed_zones``, ``pricing.tiers.window.overlap`` (two windows of one
tier), and ``pricing.tiers.gap`` / ``pricing.tiers.overlap`` across the tiers of a cell.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Final

from protocol_py.errors import InvalidValueError, Violation
from protocol_py_gen.model.v1 import PricingTier, PricingWindow

__all__ = [
    "DEFAULT_TIME_ZONE",
    "MAX_TIME_ZONE_LENGTH",
    "MAX_WINDOWS_PER_TIER",
    "MINUTES_PER_DAY",
    "MINUTES_PER_WEEK",
    "TierWeek",
    "WeekSchedule",
    "cell_violations",
    "local_minute_of_week",
    "parse_windows",
    "schedule_for",
    "time_zone",
]

MINUTES_PER_DAY: Final = 1440
"""Minutes in a local day; ``end_minute`` 1440 is the next midnight. Unit: minutes."""

MINUTES_PER_WEEK: Final = 7 * MINUTES_PER_DAY
"""Length of the minute-of-week axis (Monday 00:00 local is 0). Unit: minutes."""

MAX_WINDOWS_PER_TIER: Final = 64
"""Most windows one tier may declare (rule ``pricing.tiers.window.too_many``). Bounds the work of
validation and indexing: each window is at most 14 spans of the week. Unit: windows."""

MAX_TIME_ZONE_LENGTH: Final = 64
"""Longest accepted ``time_zone`` name (the longest IANA name is about 30). A longer value is
rejected as ``pricing.tiers.window.unknown_zone`` and shown truncated. Unit: characters."""

DEFAULT_TIME_ZONE: Final = "UTC"
"""The zone of a window whose ``time_zone`` is absent."""

_POINT_SEARCH_DAYS: Final = 15
"""How many local days after a cell's start are searched for an instant showing a gap or an
overlap in an error message (two of every weekday, whatever one daylight-saving day hides)."""

_FALLBACK_ANCHOR: Final = datetime(2000, 1, 1, tzinfo=UTC)
"""The anchor of a cell unbounded in time on both sides (as :mod:`protocol_py.pricing` uses)."""

_DAY_NAMES: Final = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
# Entries of the tz search path that are not IANA zone names (machine-specific links).
_NOT_ZONES: Final = frozenset({"localtime", "posixrules"})
_ZONE_NAME_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*", re.ASCII)


# ---------------------------------------------------------------------------------------------
# Zones and the minute of the week
# ---------------------------------------------------------------------------------------------


@functools.cache
def _zone_names() -> frozenset[str]:
    """The IANA names known to zoneinfo (system database and the ``tzdata`` package), once."""
    return frozenset(zoneinfo.available_timezones() - _NOT_ZONES)


@functools.lru_cache(maxsize=64)
def time_zone(name: str) -> tzinfo:
    """The tzinfo of an IANA zone name; ``"UTC"`` is :data:`datetime.UTC`.

    Raises:
        InvalidValueError: the name is not a zone of the IANA database available here (rule
            ``pricing.tiers.window.unknown_zone``); the message shows at most
            :data:`MAX_TIME_ZONE_LENGTH` characters of it.
    """
    if name == DEFAULT_TIME_ZONE:
        return UTC
    if (
        len(name) > MAX_TIME_ZONE_LENGTH
        or _ZONE_NAME_RE.fullmatch(name) is None
        or name not in _zone_names()
    ):
        shown = name[:MAX_TIME_ZONE_LENGTH] + ("..." if len(name) > MAX_TIME_ZONE_LENGTH else "")
        raise InvalidValueError(
            f"time_zone {shown!r} is not an IANA time zone name (for example 'UTC', "
            "'Asia/Shanghai', 'America/New_York')",
            path="time_zone",
            rule="pricing.tiers.window.unknown_zone",
        )
    return zoneinfo.ZoneInfo(name)


def local_minute_of_week(at: datetime, zone: tzinfo) -> int:
    """The local (day of week, minute) of an instant as one number: Monday 00:00 is 0, Sunday
    23:59 is 10079. Seconds and fractions are dropped (03:59:59 is minute 03:59).

    Args:
        at: A timezone-aware instant.
        zone: The wall clock (:func:`time_zone`).

    Raises:
        InvalidValueError: the local time falls outside the years 1..9999 that Python can
            represent (rule ``timestamp.out_of_range``).
    """
    try:
        local = at.astimezone(zone)
    except OverflowError:
        raise InvalidValueError(
            f"at: {at.isoformat()} has no local time in {zone} within years 1..9999",
            path="at",
            rule="timestamp.out_of_range",
        ) from None
    return local.weekday() * MINUTES_PER_DAY + local.hour * 60 + local.minute


def _clock(minute_of_week: int) -> str:
    day, minute = divmod(minute_of_week % MINUTES_PER_WEEK, MINUTES_PER_DAY)
    return f"{_DAY_NAMES[day]} {minute // 60:02d}:{minute % 60:02d}"


# ---------------------------------------------------------------------------------------------
# One tier's windows
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TierWeek:
    """A tier's valid windows on the minute-of-week axis.

    Attributes:
        zone: The IANA name every window of the tier follows.
        spans: Half-open ``(start, end, window index)`` spans, 0 <= start < end <= 10080,
            sorted, pairwise disjoint. Unit: minutes of the week.
    """

    zone: str
    spans: tuple[tuple[int, int, int], ...]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _window_spans(start: int, end: int, days: list[int], index: int) -> list[tuple[int, int, int]]:
    """The spans of one window: per starting day, the part before Sunday midnight and the part
    that wraps onto Monday."""
    length = end - start if end > start else MINUTES_PER_DAY - start + end
    out: list[tuple[int, int, int]] = []
    for day in days or range(1, 8):
        lo = (day - 1) * MINUTES_PER_DAY + start
        hi = lo + length
        if hi <= MINUTES_PER_WEEK:
            out.append((lo, hi, index))
        else:
            out.append((lo, MINUTES_PER_WEEK, index))
            out.append((0, hi - MINUTES_PER_WEEK, index))
    return out


def _check_days(days: object, where: str, out: list[Violation]) -> list[int] | None:
    if not isinstance(days, list):
        out.append(
            Violation(
                f"{where}.days",
                "pricing.not_pricing",
                f"days must be a list, got {type(days).__name__}",
            )
        )
        return None
    if len(days) > 7:
        out.append(
            Violation(
                f"{where}.days",
                "pricing.tiers.window.duplicate_day",
                f"days lists {len(days)} entries; a week has 7 days and none may repeat",
            )
        )
        return None
    seen: set[int] = set()
    ok = True
    for k, day in enumerate(days):
        if not _is_int(day) or not 1 <= day <= 7:
            ok = False
            known = _is_int(day) and day == 0
            shown = int(day) if _is_int(day) else type(day).__name__
            out.append(
                Violation(
                    f"{where}.days[{k}]",
                    "pricing.tiers.window.invalid_day" if known else "enum.unknown_value",
                    f"days[{k}] is {shown}; a day is DAY_OF_WEEK_MONDAY (1) .. "
                    "DAY_OF_WEEK_SUNDAY (7)",
                )
            )
        elif int(day) in seen:
            ok = False
            out.append(
                Violation(
                    f"{where}.days[{k}]",
                    "pricing.tiers.window.duplicate_day",
                    f"days[{k}] repeats {_DAY_NAMES[int(day) - 1]}",
                )
            )
        else:
            seen.add(int(day))
    return [int(d) for d in days] if ok else None


_MINUTE_RANGES: Final = (
    ("start_minute", 0, MINUTES_PER_DAY - 1, ""),
    ("end_minute", 1, MINUTES_PER_DAY, " (1440 is the next midnight)"),
)
"""Each minute field's inclusive range, and what the message adds."""


def _check_minutes(window: PricingWindow, where: str, out: list[Violation]) -> bool:
    start, end = window.start_minute, window.end_minute
    ok = True
    for name, low, high, note in _MINUTE_RANGES:
        value = getattr(window, name)
        if not _is_int(value) or not low <= value <= high:
            ok = False
            shown = value if _is_int(value) else type(value).__name__
            out.append(
                Violation(
                    f"{where}.{name}",
                    "pricing.tiers.window.invalid_time",
                    f"{name} is {shown}; it must be {low}..{high} minutes after local "
                    f"midnight{note}",
                )
            )
    if ok and start == end:
        ok = False
        out.append(
            Violation(
                f"{where}.end_minute",
                "pricing.tiers.window.empty",
                f"start_minute and end_minute are both {start}; the window is half-open and "
                "would be empty (a whole day is 0 to 1440)",
            )
        )
    return ok


def _check_zone(window: PricingWindow, where: str, out: list[Violation]) -> str | None:
    name = window.time_zone
    if name is None:
        return DEFAULT_TIME_ZONE
    if not isinstance(name, str):
        out.append(
            Violation(
                f"{where}.time_zone",
                "pricing.not_pricing",
                f"time_zone must be a str, got {type(name).__name__}",
            )
        )
        return None
    try:
        time_zone(name)
    except InvalidValueError as exc:
        out.append(Violation(f"{where}.time_zone", exc.rule, str(exc)))
        return None
    return name


def parse_windows(
    tier: PricingTier, where: str, out: list[Violation]
) -> tuple[bool, TierWeek | None]:
    """Check one tier's ``windows`` and lay them on the week, appending violations to ``out``.

    Args:
        tier: The tier (its ``None`` fields already read as defaults).
        where: The tier's path, for example ``pricing.tiers[1]``.
        out: Receives every violation.

    Returns:
        ``(ok, week)``: ``week`` is None for a tier without windows (it applies all week) or when
        ``ok`` is false.
    """
    windows = tier.windows
    if not isinstance(windows, list):
        out.append(
            Violation(
                f"{where}.windows",
                "pricing.not_pricing",
                f"windows must be a list, got {type(windows).__name__}",
            )
        )
        return False, None
    if not windows:
        return True, None
    if len(windows) > MAX_WINDOWS_PER_TIER:
        out.append(
            Violation(
                f"{where}.windows",
                "pricing.tiers.window.too_many",
                f"the tier declares {len(windows)} windows; at most {MAX_WINDOWS_PER_TIER} are "
                "allowed",
            )
        )
        return False, None
    ok = True
    zones: list[tuple[int, str]] = []
    spans: list[tuple[int, int, int]] = []
    for j, window in enumerate(windows):
        at = f"{where}.windows[{j}]"
        if not isinstance(window, PricingWindow):
            out.append(
                Violation(
                    at,
                    "pricing.not_pricing",
                    f"expected PricingWindow, got {type(window).__name__}",
                )
            )
            ok = False
            continue
        minutes_ok = _check_minutes(window, at, out)
        days = _check_days(window.days, at, out)
        zone = _check_zone(window, at, out)
        if zone is not None:
            zones.append((j, zone))
        if not minutes_ok or days is None or zone is None:
            ok = False
            continue
        spans.extend(_window_spans(window.start_minute, window.end_minute, days, j))
    first_zone = zones[0][1] if zones else DEFAULT_TIME_ZONE
    for j, zone in zones:
        if zone != first_zone:
            ok = False
            out.append(
                Violation(
                    f"{where}.windows[{j}].time_zone",
                    "pricing.tiers.window.mixed_zones",
                    f"windows[{j}] follows {zone!r} but windows[{zones[0][0]}] follows "
                    f"{first_zone!r}; every window of a tier uses one time zone",
                )
            )
    if not ok:
        return False, None
    spans.sort()
    reported: set[tuple[int, int]] = set()
    reach_end, reach_window = 0, -1
    for lo, hi, j in spans:
        if (
            lo < reach_end
            and (pair := (min(j, reach_window), max(j, reach_window))) not in reported
        ):
            reported.add(pair)
            ok = False
            out.append(
                Violation(
                    f"{where}.windows[{pair[1]}]",
                    "pricing.tiers.window.overlap",
                    f"windows[{pair[0]}] and windows[{pair[1]}] both contain local "
                    f"{_clock(lo)} {first_zone}; the windows of one tier must not overlap",
                )
            )
        if hi > reach_end:
            reach_end, reach_window = hi, j
    return (True, TierWeek(first_zone, tuple(spans))) if ok else (False, None)


# ---------------------------------------------------------------------------------------------
# The tiers of one cell
# ---------------------------------------------------------------------------------------------


def _sweep(
    weeks: list[tuple[int, TierWeek | None]],
) -> list[tuple[int, int, tuple[int, ...]]]:
    """Cut the week into maximal runs covered by the same set of tiers.

    Args:
        weeks: ``(tier index, week)``; a None week covers the whole week.

    Returns:
        ``(start, end, sorted tier indices)`` runs, consecutive, covering [0, 10080).
    """
    events: list[tuple[int, int, int]] = []
    for tier, week in weeks:
        spans = ((0, MINUTES_PER_WEEK, 0),) if week is None else week.spans
        for lo, hi, _j in spans:
            events.append((lo, 1, tier))
            events.append((hi, -1, tier))
    events.sort()
    active: Counter[int] = Counter()
    runs: list[tuple[int, int, tuple[int, ...]]] = []
    pos, k = 0, 0
    while pos < MINUTES_PER_WEEK:
        while k < len(events) and events[k][0] == pos:
            active[events[k][2]] += events[k][1]
            k += 1
        nxt = events[k][0] if k < len(events) else MINUTES_PER_WEEK
        cover = tuple(sorted(t for t, n in active.items() if n > 0))
        if runs and runs[-1][2] == cover:
            runs[-1] = (runs[-1][0], nxt, cover)
        else:
            runs.append((pos, nxt, cover))
        pos = nxt
    return runs


def _anchor(lo: datetime | None, hi: datetime | None) -> datetime:
    if lo is not None:
        return lo
    if hi is None:
        return _FALLBACK_ANCHOR
    try:
        return hi - timedelta(days=_POINT_SEARCH_DAYS - 1)
    except OverflowError:
        return datetime.min.replace(tzinfo=UTC)


def _instant(
    minute_of_week: int, zone: str, lo: datetime | None, hi: datetime | None
) -> datetime | None:
    """The first instant in the cell [lo, hi), searching :data:`_POINT_SEARCH_DAYS` local days
    from its anchor, whose local wall time in ``zone`` is that minute of the week (a wall time
    that does not exist that day is skipped; a repeated one gives its first occurrence)."""
    tz = time_zone(zone)
    start = _anchor(lo, hi)
    day, minute = divmod(minute_of_week, MINUTES_PER_DAY)
    try:
        first: date = start.astimezone(tz).date()
        for d in range(_POINT_SEARCH_DAYS):
            when = first + timedelta(days=d)
            if when.weekday() != day:
                continue
            wall = datetime.combine(when, time(minute // 60, minute % 60))
            at = wall.replace(tzinfo=tz).astimezone(UTC)
            if at.astimezone(tz).replace(tzinfo=None) != wall:
                continue  # this wall time does not exist that day (clocks jumped forward)
            if at >= start and (hi is None or at < hi):
                return at
    except OverflowError:
        return None
    return None


def _point(
    minute_of_week: int, zone: str, cell: tuple[datetime | None, datetime | None], size: int
) -> str:
    clock = f"{_clock(minute_of_week)} {zone}"
    at = _instant(minute_of_week, zone, *cell)
    if at is None:
        return (
            f"at local {clock} (no instant of this cell's time range shows it within "
            f"{_POINT_SEARCH_DAYS} days; windows must cover the whole week), prompt size {size}"
        )
    return f"at {_format(at)} ({clock}), prompt size {size}"


def _format(at: datetime) -> str:
    text = at.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def cell_violations(
    weeks: list[tuple[int, TierWeek | None]],
    cell: tuple[datetime | None, datetime | None],
    size: int,
    path: str,
    seen: set[tuple[int, ...]],
) -> list[Violation]:
    """The partition violations of one (time window x size window) cell holding windowed tiers.

    Args:
        weeks: ``(tier index, week)`` of every tier matching the cell, at least one windowed.
        cell: The cell's half-open time range; None is unbounded.
        size: A prompt size inside the cell (for the message). Unit: tokens.
        path: The Pricing's path.
        seen: Tier sets already reported as overlapping or mixing zones (updated).

    Returns:
        ``pricing.tiers.window.mixed_zones`` when the windowed tiers follow different zones;
        otherwise one ``pricing.tiers.gap`` naming the first uncovered local minute of the week
        (and how many more uncovered runs there are), and one ``pricing.tiers.overlap`` per new
        set of tiers matching the same minute, each with an instant of the cell that shows it.
    """
    zoned = [(t, w) for t, w in weeks if w is not None]
    zone = zoned[0][1].zone
    other = [(t, w.zone) for t, w in zoned if w.zone != zone]
    if other:
        key = (-1, *(t for t, _ in weeks))
        if key in seen:
            return []
        seen.add(key)
        j, other_zone = other[-1]
        return [
            Violation(
                f"{path}.tiers[{j}].windows[0].time_zone",
                "pricing.tiers.window.mixed_zones",
                f"at {_format(_anchor(*cell))}, prompt size {size}: tier {zoned[0][0]} "
                f"follows {zone!r} but tier {j} follows {other_zone!r}; the windowed tiers "
                "sharing a cell must use one time zone",
            )
        ]
    out: list[Violation] = []
    runs = _sweep(weeks)
    gaps = [(lo, hi) for lo, hi, cover in runs if not cover]
    if gaps:
        lo, hi = gaps[0]
        more = f" (and {len(gaps) - 1} more uncovered runs)" if len(gaps) > 1 else ""
        out.append(
            Violation(
                f"{path}.tiers",
                "pricing.tiers.gap",
                f"{_point(lo, zone, cell, size)}: no tier matches local {_clock(lo)} to "
                f"{_clock(hi)}{more}",
            )
        )
    for lo, hi, cover in runs:
        if len(cover) < 2 or cover in seen:
            continue
        seen.add(cover)
        names = ", ".join(str(i) for i in cover[:-1]) + f" and {cover[-1]}"
        verb = "all match" if len(cover) > 2 else "both match"
        out.append(
            Violation(
                f"{path}.tiers[{cover[-1]}]",
                "pricing.tiers.overlap",
                f"{_point(lo, zone, cell, size)}: tiers {names} {verb} local {_clock(lo)} to "
                f"{_clock(hi)}",
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class WeekSchedule:
    """The tier of every local minute of the week in one validated cell: a bisection.

    Attributes:
        zone: The wall clock (:func:`time_zone`).
        starts: Sorted run starts, ``starts[0] == 0``. Unit: minutes of the week.
        tiers: ``tiers[k]`` applies from ``starts[k]`` to the next start.
    """

    zone: tzinfo
    starts: tuple[int, ...]
    tiers: tuple[int, ...]

    def tier_at(self, at: datetime) -> int:
        """The tier index at an aware instant (:func:`local_minute_of_week`, then bisection).

        Raises:
            InvalidValueError: see :func:`local_minute_of_week`.
        """
        minute = local_minute_of_week(at, self.zone)
        return self.tiers[bisect_right(self.starts, minute) - 1]


def schedule_for(weeks: list[tuple[int, TierWeek | None]]) -> WeekSchedule:
    """The :class:`WeekSchedule` of a cell that :func:`cell_violations` accepted.

    Raises:
        InvalidValueError: the cell does not cover the week exactly once (rule
            ``pricing.invalid``; never happens after validation).
    """
    zone = next(w.zone for _t, w in weeks if w is not None)
    runs = _sweep(weeks)
    if any(len(cover) != 1 for _lo, _hi, cover in runs):  # pragma: no cover - validated before
        raise InvalidValueError("pricing windows do not partition the week", rule="pricing.invalid")
    return WeekSchedule(
        time_zone(zone), tuple(lo for lo, _hi, _c in runs), tuple(c[0] for _lo, _hi, c in runs)
    )
