"""Recurring pricing windows: rates that replace a tier's own at recurring local wall-clock
times (protocol 1.1; spec "Pricing"; docs/decisions.md#d9; docs/pricing-windows.md).

A :class:`~protocol_py_gen.model.v1.PricingWindow` is a half-open range of minutes of the local
day (``start_minute`` inclusive, ``end_minute`` exclusive, crossing midnight when the end is
below the start), on some days of the week, on the wall clock of an IANA time zone (absent:
``"UTC"``), carrying rates. Windows live inside one tier and never change which tier matches
(the tiers partition time x prompt size exactly as in protocol 1.0); at an instant one of the
tier's windows holds, that window's rates replace the tier's (a rate the window leaves absent is
the tier's), and elsewhere the tier's own rates apply, so windows cannot leave a gap. The
instant is converted with :mod:`zoneinfo`, so a daylight-saving change needs no rule of its own:
an instant has exactly one local time.

Everything here works on the *minute of the week*: Monday 00:00 local is 0, Sunday 23:59 is
10079 (:data:`MINUTES_PER_WEEK`). A window becomes at most two half-open spans of that axis per
day it starts on (two when it runs past Sunday midnight). Exactly one rate set per instant: the
windows of one tier must not overlap and must follow one zone. Because the check is over local
(day, minute), it holds for every instant in every year whatever the zone's daylight-saving
rules (the instant-to-local map is a function).

Rule ids: ``pricing.tiers.window.too_many``, ``pricing.tiers.window.invalid_time``,
``pricing.tiers.window.empty``, ``pricing.tiers.window.invalid_day``,
``pricing.tiers.window.duplicate_day``, ``pricing.tiers.window.unknown_zone``,
``pricing.tiers.window.mixed_zones`` (a window not in the tier's zone: the zone most of its
windows follow, on a tie the one named first) and ``pricing.tiers.window.overlap`` (two windows
of one tier hold one instant; the message names the instant, its local wall time and zone, and a
prompt size). Overlap is checked among the windows that are valid on their own and follow the
tier's zone even when another window of the tier breaks a rule, so every violation is reported.
The window's rates are checked by :mod:`protocol_py.rules.pricing` with the tier's rate rules.
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
    "local_minute_of_week",
    "parse_windows",
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
"""How many local days after a tier's start are searched for an instant showing an overlap in
an error message (two of every weekday, whatever one daylight-saving day hides). Unit: days."""

_FALLBACK_ANCHOR: Final = datetime(2000, 1, 1, tzinfo=UTC)
"""The anchor of a tier unbounded in time on both sides (as :mod:`protocol_py.rules.pricing`
uses)."""

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
    """A tier's valid windows laid on the minute-of-week axis, for bisection.

    Attributes:
        zone: The wall clock every window of the tier follows (:func:`time_zone`).
        starts: Sorted run starts, ``starts[0] == 0``. Unit: minutes of the week.
        windows: ``windows[k]`` is the index into the tier's ``windows`` of the window holding
            the minutes from ``starts[k]`` to the next start, or -1 where none does (the tier's
            own rates apply).
    """

    zone: tzinfo
    starts: tuple[int, ...]
    windows: tuple[int, ...]

    def window_at(self, at: datetime) -> int | None:
        """The index of the window holding an aware instant, or None for the tier's own rates
        (:func:`local_minute_of_week`, then one bisection).

        Raises:
            InvalidValueError: see :func:`local_minute_of_week`.
        """
        minute = local_minute_of_week(at, self.zone)
        found = self.windows[bisect_right(self.starts, minute) - 1]
        return None if found < 0 else found


def _runs(zone: str, spans: list[tuple[int, int, int]]) -> TierWeek:
    """The :class:`TierWeek` of sorted, disjoint spans, the rest of the week filled with -1."""
    starts: list[int] = []
    windows: list[int] = []
    pos = 0
    for lo, hi, j in spans:
        if lo > pos:
            starts.append(pos)
            windows.append(-1)
        starts.append(lo)
        windows.append(j)
        pos = hi
    if pos < MINUTES_PER_WEEK or not starts:
        starts.append(pos)
        windows.append(-1)
    return TierWeek(time_zone(zone), tuple(starts), tuple(windows))


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
    tier: PricingTier,
    where: str,
    out: list[Violation],
    *,
    span: tuple[datetime | None, datetime | None] = (None, None),
    size: int = 0,
) -> tuple[bool, TierWeek | None]:
    """Check one tier's ``windows`` (schedule fields; the rates are checked by
    :mod:`protocol_py.rules.pricing`) and lay them on the week, appending violations to ``out``.

    Args:
        tier: The tier (its ``None`` fields already read as defaults).
        where: The tier's path, for example ``pricing.tiers[1]``.
        out: Receives every violation.
        span: The tier's half-open time window (None: unbounded), where an overlap's instant is
            looked for.
        size: A prompt size inside the tier, for an overlap's message. Unit: tokens.

    Returns:
        ``(ok, week)``: ``week`` is None for a tier without windows (its own rates apply all
        week) or when ``ok`` is false.
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
    own_spans: dict[int, list[tuple[int, int, int]]] = {}  # of the windows valid on their own
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
        own_spans[j] = _window_spans(window.start_minute, window.end_minute, days, j)
    # The tier's zone is the one most of its windows follow (a tie: the one named first); a
    # window in another zone is mixed_zones, and the overlap check below still runs among the
    # valid windows of the tier's zone, so one broken window never hides an overlap.
    counts = Counter(zone for _, zone in zones)
    tier_zone = max(counts, key=counts.__getitem__) if zones else DEFAULT_TIME_ZONE
    first = next((j for j, zone in zones if zone == tier_zone), 0)
    for j, zone in zones:
        if zone != tier_zone:
            ok = False
            out.append(
                Violation(
                    f"{where}.windows[{j}].time_zone",
                    "pricing.tiers.window.mixed_zones",
                    f"windows[{j}] follows {zone!r} but windows[{first}] follows "
                    f"{tier_zone!r}; every window of a tier uses one time zone",
                )
            )
    in_zone = {j for j, zone in zones if zone == tier_zone}
    spans = [piece for j, pieces in own_spans.items() if j in in_zone for piece in pieces]
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
            both = f"{_clock(lo)} to {_clock(min(hi, reach_end))}"
            out.append(
                Violation(
                    f"{where}.windows[{pair[1]}]",
                    "pricing.tiers.window.overlap",
                    f"{_point(lo, tier_zone, span, size)}: windows[{pair[0]}] and "
                    f"windows[{pair[1]}] both hold local {both}; the windows of one tier must "
                    "not overlap (exactly one rate set per instant)",
                )
            )
        if hi > reach_end:
            reach_end, reach_window = hi, j
    return (True, _runs(tier_zone, spans)) if ok else (False, None)


# ---------------------------------------------------------------------------------------------
# The instant that shows an overlap
# ---------------------------------------------------------------------------------------------


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
    """The first instant in the tier's time window [lo, hi), searching
    :data:`_POINT_SEARCH_DAYS` local days from its anchor, whose local wall time in ``zone`` is
    that minute of the week (a wall time that does not exist that day is skipped; a repeated one
    gives its first occurrence)."""
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
    minute_of_week: int, zone: str, span: tuple[datetime | None, datetime | None], size: int
) -> str:
    clock = f"{_clock(minute_of_week)} {zone}"
    at = _instant(minute_of_week, zone, *span)
    if at is None:
        return (
            f"at local {clock} (no instant of the tier's time window shows it within "
            f"{_POINT_SEARCH_DAYS} days), prompt size {size}"
        )
    return f"at {_format(at)} ({clock}), prompt size {size}"


def _format(at: datetime) -> str:
    text = at.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
