"""Pricing rules, tier resolution and exact cost (spec: "Pricing", "Cost-computation worked
example"; DESIGN D7, D8, D9).

Three things live here:

* :func:`validate_pricing` checks a :class:`~protocol_py_gen.model.v1.Pricing` against every
  Pricing rule and returns the list of :class:`~protocol_py.errors.Violation` (DESIGN D13).
* :class:`PricingTable` is a validated Pricing indexed for lookup: :meth:`PricingTable.resolve`
  returns the one tier matching a (receipt time, prompt size) pair in O(log n), and
  :meth:`PricingTable.resolve_window` the recurring window of that tier whose rates replace the
  tier's at that instant (protocol 1.1; :mod:`protocol_py.rules.pricing_windows`,
  docs/pricing-windows.md).
* :func:`cost` prices one :class:`~protocol_py_gen.model.v1.Usage` exactly, as
  :class:`decimal.Decimal`, and :func:`format_usd` renders the figure as a plain decimal string.

Units: rates are USD per million tokens (``*_per_mtok``), counts are tokens, times are ISO 8601 /
RFC 3339 strings on the wire and timezone-aware :class:`datetime.datetime` values in Python.

Decimal strings (:func:`format_usd`, case C13): the exact value in plain notation, never an
exponent; trailing zeros after the decimal point and a bare trailing point are removed
(``"0.00075"``, ``"0.0000001"``, ``"100"``); zero is ``"0"``. Nothing is rounded.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from decimal import Context, Decimal, Inexact, InvalidOperation, Overflow
from typing import Any

from protocol_py.codec import protojson
from protocol_py.errors import InvalidValueError, ValidationError, Violation
from protocol_py.rules.pricing_windows import MAX_WINDOWS_PER_TIER, TierWeek, parse_windows
from protocol_py_gen.model.v1 import (
    Pricing,
    PricingTier,
    PricingWindow,
    Usage,
    UsageComponent,
    VendorCost,
)

__all__ = [
    "RATE_FIELDS",
    "TERM_NAMES",
    "CostBreakdown",
    "PricingTable",
    "cost",
    "format_usd",
    "parse_timestamp",
    "prompt_tokens",
    "validate_pricing",
    "validate_usage",
]

TERM_NAMES: tuple[str, ...] = (
    "input",
    "output",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "reasoning",
)
"""The cost terms of DESIGN D8, in the order they are rendered."""

RATE_FIELDS: tuple[str, ...] = (
    "input_per_mtok",
    "output_per_mtok",
    "cache_write_per_mtok",
    "cache_read_per_mtok",
    "batch_input_per_mtok",
    "batch_output_per_mtok",
    "cache_write_1h_per_mtok",
)
"""The PricingTier rate fields (proto field names; USD per million tokens). A PricingWindow
carries the same fields (protocol 1.1), each replacing the tier's while the window applies."""

# Exact arithmetic: enough precision for any int64 count times any double's shortest repr, and
# Inexact trapped so that a result that would need rounding raises instead of silently rounding.
_EXACT = Context(prec=1000, Emin=-999999, Emax=999999, traps=[Inexact, InvalidOperation, Overflow])
_ZERO = Decimal(0)
_MILLION_EXP = -6

# ---------------------------------------------------------------------------------------------
# Timestamps
# ---------------------------------------------------------------------------------------------

_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_DATETIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?"
    r"(?:(?P<z>[Zz])|(?P<sign>[+-])(?P<oh>\d{2})(?::?(?P<om>\d{2}))?)?",
    re.ASCII,
)


def parse_timestamp(value: str, *, path: str = "") -> datetime:
    """Parse an ISO 8601 / RFC 3339 date or date-time into an aware UTC datetime (DESIGN D9).

    Accepted forms, exactly (ISO 8601 extended format, a superset of RFC 3339): a date
    ``YYYY-MM-DD`` (meaning 00:00 UTC of that day) or a date-time
    ``YYYY-MM-DD(T|t|space)HH:MM[:SS[(.|,)fraction]]`` followed by ``Z``/``z`` or an offset
    ``+HH:MM`` / ``+HHMM`` / ``+HH``. The fraction may have any number of digits; digits beyond
    microseconds are truncated, never rounded and never an error (case C14). Not accepted:
    surrounding whitespace, the basic format (``20260701T000000Z``), week and ordinal dates
    (``2026-W27-3``, ``2026-182``), an hour without minutes (``2026-07-01T00Z``) and hour
    ``24``. A leap second ``:60`` (RFC 3339) reads as the next second. The result is identical
    on every supported Python version (no use of :meth:`datetime.fromisoformat`).

    Args:
        value: The text.
        path: Field path used in error messages, for example ``pricing.tiers[0].effective_from``.

    Returns:
        A timezone-aware datetime in UTC.

    Raises:
        InvalidValueError: the text is not a date or date-time (rule ``timestamp.unparseable``),
            names an impossible date or time (``timestamp.out_of_range``), or is a date-time
            without an offset (``timestamp.naive``: never read as local time or as UTC).
    """
    where = path or "timestamp"
    if not isinstance(value, str):
        raise InvalidValueError(
            f"{where}: expected an ISO 8601 string, got {type(value).__name__}",
            path=path,
            rule="timestamp.unparseable",
        )
    text = value
    if text != text.strip():
        raise InvalidValueError(
            f"{where}: {value!r} has leading or trailing whitespace; give the timestamp alone",
            path=path,
            rule="timestamp.unparseable",
        )
    try:
        m = _DATE_RE.fullmatch(text)
        if m is not None:
            return datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=UTC)
        m = _DATETIME_RE.fullmatch(text)
        if m is None:
            raise InvalidValueError(
                f"{where}: {value!r} is not an ISO 8601 date or date-time",
                path=path,
                rule="timestamp.unparseable",
            )
        if m["z"] is None and m["sign"] is None:
            raise InvalidValueError(
                f"{where}: {value!r} is a date-time without a UTC offset; add 'Z' or an offset "
                "such as '+00:00' (naive times are never read as local time)",
                path=path,
                rule="timestamp.naive",
            )
        micro = int(((m[7] or "") + "000000")[:6])
        if m["z"] is not None:
            tz: timezone = UTC
        else:
            oh, om = int(m["oh"]), int(m["om"] or 0)
            if oh > 23 or om > 59:
                raise InvalidValueError(
                    f"{where}: {value!r} has an impossible UTC offset",
                    path=path,
                    rule="timestamp.out_of_range",
                )
            delta = timedelta(hours=oh, minutes=om)
            tz = timezone(-delta if m["sign"] == "-" else delta)
        second = int(m[6] or 0)
        leap = second == 60  # RFC 3339 allows a leap second; fold it onto the next second.
        parsed = datetime(
            int(m[1]),
            int(m[2]),
            int(m[3]),
            int(m[4]),
            int(m[5]),
            59 if leap else second,
            micro,
            tzinfo=tz,
        )
        if leap:
            parsed += timedelta(seconds=1)
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        if isinstance(exc, InvalidValueError):
            raise
        raise InvalidValueError(
            f"{where}: {value!r} is out of range: {exc}", path=path, rule="timestamp.out_of_range"
        ) from None


def _format_time(at: datetime) -> str:
    text = at.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _check_aware(at: object, what: str) -> datetime:
    if not isinstance(at, datetime):
        raise InvalidValueError(
            f"{what}: expected a timezone-aware datetime, got {type(at).__name__}",
            path=what,
            rule="timestamp.not_datetime",
        )
    if at.tzinfo is None or at.utcoffset() is None:
        raise InvalidValueError(
            f"{what}: {at.isoformat()} is a naive datetime; pass a timezone-aware one",
            path=what,
            rule="timestamp.naive",
        )
    return at


def _check_count(value: object, what: str, rule_prefix: str = "usage") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidValueError(
            f"{what}: expected an integer token count, got {type(value).__name__}",
            path=what,
            rule=f"{rule_prefix}.not_integer",
        )
    if value < 0:
        raise InvalidValueError(
            f"{what}: token count {value} is negative", path=what, rule=f"{rule_prefix}.negative"
        )
    return value


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Bounds:
    """A tier's parsed half-open rectangle; None is unbounded on that side. ``week``: the
    tier's recurring windows (:mod:`protocol_py.rules.pricing_windows`), None when it has none."""

    t_from: datetime | None
    t_until: datetime | None
    s_from: int | None
    s_until: int | None
    week: TierWeek | None = None

    def contains(self, at: datetime, size: int) -> bool:
        return (
            (self.t_from is None or self.t_from <= at)
            and (self.t_until is None or at < self.t_until)
            and (self.s_from is None or self.s_from <= size)
            and (self.s_until is None or size < self.s_until)
        )


def _tier_bounds(tier: PricingTier, where: str, out: list[Violation]) -> _Bounds | None:
    """Parse one tier's bounds, appending violations; None when any bound is invalid."""
    ok = True
    times: dict[str, datetime | None] = {}
    for name in ("effective_from", "effective_until"):
        raw = getattr(tier, name)
        times[name] = None
        if raw is None:
            continue
        try:
            times[name] = parse_timestamp(raw, path=f"{where}.{name}")
        except InvalidValueError as exc:
            ok = False
            kind = "naive" if exc.rule == "timestamp.naive" else "unparseable"
            if exc.rule == "timestamp.out_of_range":
                kind = "unparseable"
            message = str(exc).removeprefix(f"{where}.{name}: ")
            out.append(Violation(f"{where}.{name}", f"pricing.tiers.{name}.{kind}", message))
    t_from, t_until = times["effective_from"], times["effective_until"]
    if t_from is not None and t_until is not None and not t_from < t_until:
        ok = False
        out.append(
            Violation(
                f"{where}.effective_until",
                "pricing.tiers.time_window_empty",
                f"effective_from {tier.effective_from!r} must be before effective_until "
                f"{tier.effective_until!r} (the window is half-open)",
            )
        )
    s_from, s_until = tier.input_tokens_from, tier.input_tokens_until
    for name, value in (("input_tokens_from", s_from), ("input_tokens_until", s_until)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            ok = False
            out.append(
                Violation(
                    f"{where}.{name}",
                    "pricing.tiers.input_tokens_not_integer",
                    f"{name} must be an integer token count, got {type(value).__name__}",
                )
            )
        elif value is not None and value < 0:
            ok = False
            out.append(
                Violation(
                    f"{where}.{name}",
                    "pricing.tiers.input_tokens_negative",
                    f"{name} {value} is negative (a prompt size is >= 0 tokens)",
                )
            )
    typed = all(
        v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (s_from, s_until)
    )
    if typed and s_from is not None and s_until is not None and not s_from < s_until:
        ok = False
        out.append(
            Violation(
                f"{where}.input_tokens_until",
                "pricing.tiers.size_window_empty",
                f"input_tokens_from {s_from} must be below input_tokens_until {s_until} "
                "(the window is half-open)",
            )
        )
    elif typed and s_from is None and s_until is not None and s_until <= 0:
        # sizes start at 0: [0, 0) matches no prompt (found by tests/reliability fuzzing; such
        # a tier was accepted and then won resolution at size 0 over the tier that matched)
        ok = False
        out.append(
            Violation(
                f"{where}.input_tokens_until",
                "pricing.tiers.size_window_empty",
                f"input_tokens_until {s_until} leaves no prompt size (sizes start at 0 and the "
                "window is half-open)",
            )
        )
    size = s_from if typed and s_from is not None and s_from >= 0 else 0
    windows_ok, week = parse_windows(tier, where, out, span=(t_from, t_until), size=size)
    return _Bounds(t_from, t_until, s_from, s_until, week) if ok and windows_ok else None


def _check_rate_values(
    rates: PricingTier | PricingWindow, where: str, out: list[Violation]
) -> None:
    """Each present rate finite and >= 0."""
    for name in RATE_FIELDS:
        value = getattr(rates, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            out.append(
                Violation(
                    f"{where}.{name}",
                    "pricing.tiers.rate_not_finite",
                    f"{name} must be a number, got {type(value).__name__}",
                )
            )
        elif not math.isfinite(value):
            out.append(
                Violation(
                    f"{where}.{name}",
                    "pricing.tiers.rate_not_finite",
                    f"{name} is {value}; every rate must be a finite USD-per-million-token value",
                )
            )
        elif value < 0:
            out.append(
                Violation(
                    f"{where}.{name}",
                    "pricing.tiers.rate_negative",
                    f"{name} is {value}; every rate must be >= 0",
                )
            )


def _check_rate_set(
    tier: PricingTier, where: str, caching_supported: bool | None, out: list[Violation]
) -> None:
    """The presence rules of a rate set: cache rates with caching, 1h with 5m, batch paired."""
    has_write = tier.cache_write_per_mtok is not None
    has_read = tier.cache_read_per_mtok is not None
    if caching_supported is True:
        for name, present in (
            ("cache_write_per_mtok", has_write),
            ("cache_read_per_mtok", has_read),
        ):
            if not present:
                out.append(
                    Violation(
                        f"{where}.{name}",
                        "pricing.tiers.cache_rate_missing",
                        f"{name} must be present because the model's caching.supported is true",
                    )
                )
    elif caching_supported is False:
        for name, present in (
            ("cache_write_per_mtok", has_write),
            ("cache_read_per_mtok", has_read),
        ):
            if present:
                out.append(
                    Violation(
                        f"{where}.{name}",
                        "pricing.tiers.cache_rate_unexpected",
                        f"{name} must be absent because the model's caching.supported is false",
                    )
                )
    if tier.cache_write_1h_per_mtok is not None:
        if caching_supported is False:
            out.append(
                Violation(
                    f"{where}.cache_write_1h_per_mtok",
                    "pricing.tiers.cache_write_1h_without_caching",
                    "cache_write_1h_per_mtok must be absent because the model's caching.supported "
                    "is false",
                )
            )
        elif not has_write:
            out.append(
                Violation(
                    f"{where}.cache_write_1h_per_mtok",
                    "pricing.tiers.cache_write_1h_without_cache_write",
                    "cache_write_1h_per_mtok needs cache_write_per_mtok (the 5-minute rate) too",
                )
            )
    if (tier.batch_input_per_mtok is None) != (tier.batch_output_per_mtok is None):
        missing = (
            "batch_output_per_mtok"
            if tier.batch_output_per_mtok is None
            else ("batch_input_per_mtok")
        )
        out.append(
            Violation(
                f"{where}.{missing}",
                "pricing.tiers.batch_rates_unpaired",
                "batch_input_per_mtok and batch_output_per_mtok must be both present or both "
                f"absent; {missing} is missing",
            )
        )


def _check_rates(
    tier: PricingTier, where: str, caching_supported: bool | None, out: list[Violation]
) -> None:
    """The tier's rates, then each window's: its own values, and, when the tier's rate set is
    sound, the window's effective set (its rates over the tier's) with the presence rules. With
    caching a window may leave its cache rates absent (the tier's apply); without caching it
    must not declare any."""
    _check_rate_values(tier, where, out)
    before = len(out)
    _check_rate_set(tier, where, caching_supported, out)
    tier_sound = len(out) == before
    windows = tier.windows
    if not isinstance(windows, list) or len(windows) > MAX_WINDOWS_PER_TIER:
        return  # reported by pricing_windows.parse_windows
    for j, window in enumerate(windows):
        if not isinstance(window, PricingWindow):
            continue
        at = f"{where}.windows[{j}]"
        _check_rate_values(window, at, out)
        if not tier_sound:
            continue
        effective = PricingTier(
            **{
                name: getattr(tier, name) if (own := getattr(window, name)) is None else own
                for name in RATE_FIELDS
            }
        )
        if caching_supported is True:
            # The tier has both cache rates (it is sound), so the window's effective set has too.
            _check_rate_set(effective, at, None, out)
        else:
            _check_rate_set(effective, at, caching_supported, out)


def _time_cells(bounds: list[_Bounds]) -> list[tuple[datetime | None, datetime | None]]:
    """The compressed time axis: consecutive half-open cells covering all time."""
    points = sorted({b for x in bounds for b in (x.t_from, x.t_until) if b is not None})
    edges: list[datetime | None] = [None, *points, None]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def _size_cells(bounds: list[_Bounds]) -> list[tuple[int, int | None]]:
    """The compressed prompt-size axis: consecutive half-open cells covering [0, inf)."""
    points = sorted({b for x in bounds for b in (x.s_from, x.s_until) if b is not None and b > 0})
    edges: list[int | None] = [0, *points, None]
    return [(edges[i] or 0, edges[i + 1]) for i in range(len(edges) - 1)]


def _time_point(cell: tuple[datetime | None, datetime | None]) -> datetime | None:
    """A concrete time inside the cell, or None when the cell is empty."""
    lo, hi = cell
    if lo is not None:
        return lo
    if hi is None:
        return datetime(2000, 1, 1, tzinfo=UTC)
    earliest = datetime.min.replace(tzinfo=UTC)
    if hi <= earliest:
        return None
    try:
        return hi - timedelta(days=1)
    except OverflowError:
        return earliest


def _size_in(b: _Bounds, size: int) -> bool:
    return (b.s_from is None or b.s_from <= size) and (b.s_until is None or size < b.s_until)


def _partition_violations(bounds: list[_Bounds], path: str) -> list[Violation]:
    out: list[Violation] = []
    seen_overlaps: set[tuple[int, ...]] = set()
    for t_cell in _time_cells(bounds):
        at = _time_point(t_cell)
        if at is None:
            continue
        in_time = [
            i
            for i, b in enumerate(bounds)
            if (b.t_from is None or b.t_from <= at) and (b.t_until is None or at < b.t_until)
        ]
        for s_lo, _s_hi in _size_cells(bounds):
            matching = tuple(i for i in in_time if _size_in(bounds[i], s_lo))
            where = f"at {_format_time(at)}, prompt size {s_lo}"
            if not matching:
                out.append(
                    Violation(f"{path}.tiers", "pricing.tiers.gap", f"{where}: no tier matches")
                )
            elif len(matching) > 1 and matching not in seen_overlaps:
                seen_overlaps.add(matching)
                names = ", ".join(str(i) for i in matching[:-1]) + f" and {matching[-1]}"
                out.append(
                    Violation(
                        f"{path}.tiers[{matching[-1]}]",
                        "pricing.tiers.overlap",
                        f"{where}: tiers {names} all match"
                        if len(matching) > 2
                        else f"{where}: tiers {names} both match",
                    )
                )
    return out


def validate_pricing(
    pricing: Pricing, *, caching_supported: bool | None = None, path: str = "pricing"
) -> list[Violation]:
    """Check a Pricing against every rule of the spec's "Pricing" section (DESIGN D8, D9).

    Rules (rule ids in parentheses): currency is ``"USD"`` (``pricing.currency_not_usd``); at
    least one tier unless ``free`` (``pricing.tiers.empty``); every rate finite
    (``pricing.tiers.rate_not_finite``) and >= 0 (``pricing.tiers.rate_negative``); cache read
    and write rates present iff ``caching_supported`` (``pricing.tiers.cache_rate_missing`` /
    ``pricing.tiers.cache_rate_unexpected``); the 1h write rate only with caching and with the
    5-minute write rate (``pricing.tiers.cache_write_1h_without_caching`` /
    ``..._without_cache_write``); batch rates paired (``pricing.tiers.batch_rates_unpaired``);
    time bounds parse (``pricing.tiers.effective_from.unparseable``,
    ``pricing.tiers.effective_from.naive``, same for ``effective_until``); size bounds >= 0
    (``pricing.tiers.input_tokens_negative``); each lower bound below its upper bound
    (``pricing.tiers.time_window_empty``, ``pricing.tiers.size_window_empty``; an absent
    ``input_tokens_from`` counts as 0, so ``input_tokens_until: 0`` alone is empty); the tiers
    partition the whole (time x prompt size) plane (``pricing.tiers.overlap``,
    ``pricing.tiers.gap``, each message naming a concrete point of the offending cell); recurring
    windows (protocol 1.1): each tier's windows valid, in one zone and pairwise disjoint, so
    exactly one rate set applies at every instant (``pricing.tiers.window.*``, an overlap naming
    an instant, its local wall time and zone, and a prompt size;
    :mod:`protocol_py.rules.pricing_windows`), and each window's rates under the tier's rate rules
    at
    the window's path (a window rate left absent is the tier's). Windows never take part in the
    tier partition: it is the 1.0 rule, so a 1.0 reader that ignores windows sees a valid
    Pricing. The partition is checked only when every tier's bounds and windows are valid. A
    free Pricing with tiers is checked the same way.

    Args:
        pricing: The Pricing message.
        caching_supported: The model's ``caching.supported``; None skips the cache-rate
            presence rule (the 1h-rate rule then only needs the 5-minute rate).
        path: Field path prefix of every violation.

    Returns:
        Every violation, in field order; empty when the Pricing is valid.
    """
    out: list[Violation] = []
    if not isinstance(pricing, Pricing):
        return [
            Violation(
                path, "pricing.not_pricing", f"expected Pricing, got {type(pricing).__name__}"
            )
        ]
    pricing = protojson.with_defaults(pricing)
    for name, expected in (("currency", str), ("free", bool), ("tiers", list)):
        if not isinstance(getattr(pricing, name), expected):
            out.append(
                Violation(
                    f"{path}.{name}",
                    "pricing.not_pricing",
                    f"{name} must be a {expected.__name__}, got "
                    f"{type(getattr(pricing, name)).__name__}",
                )
            )
    if out:
        return out
    if pricing.currency != "USD":
        out.append(
            Violation(
                f"{path}.currency",
                "pricing.currency_not_usd",
                f'currency is {pricing.currency!r}; protocol 1.x requires "USD"',
            )
        )
    if not pricing.tiers:
        if not pricing.free:
            out.append(
                Violation(
                    f"{path}.tiers",
                    "pricing.tiers.empty",
                    "a Pricing that is not free needs at least one tier",
                )
            )
        return out
    bounds: list[_Bounds] = []
    all_ok = True
    for i, tier in enumerate(pricing.tiers):
        where = f"{path}.tiers[{i}]"
        if not isinstance(tier, PricingTier):
            out.append(
                Violation(
                    where, "pricing.not_pricing", f"expected PricingTier, got {type(tier).__name__}"
                )
            )
            all_ok = False
            continue
        _check_rates(tier, where, caching_supported, out)
        parsed = _tier_bounds(tier, where, out)
        if parsed is None:
            all_ok = False
        else:
            bounds.append(parsed)
    if all_ok:
        out.extend(_partition_violations(bounds, path))
    return out


# ---------------------------------------------------------------------------------------------
# Table and resolution
# ---------------------------------------------------------------------------------------------


def _rate(value: float | None) -> Decimal | None:
    """A rate's exact Decimal from its shortest repr (DESIGN D8); never float arithmetic."""
    return None if value is None else Decimal(repr(float(value)))


@dataclass(frozen=True, slots=True)
class _Rates:
    input: Decimal
    output: Decimal
    cache_read: Decimal | None
    cache_write: Decimal | None
    cache_write_1h: Decimal | None


def _rates(tier: PricingTier, window: PricingWindow | None = None) -> _Rates:
    """The exact rates of a tier (its None fields already read as defaults), or of one of its
    windows: each rate the window declares, else the tier's."""

    def pick(name: str) -> float | None:
        own = None if window is None else getattr(window, name)
        value: float | None = getattr(tier, name) if own is None else own
        return value

    return _Rates(
        input=Decimal(repr(float(pick("input_per_mtok") or 0))),
        output=Decimal(repr(float(pick("output_per_mtok") or 0))),
        cache_read=_rate(pick("cache_read_per_mtok")),
        cache_write=_rate(pick("cache_write_per_mtok")),
        cache_write_1h=_rate(pick("cache_write_1h_per_mtok")),
    )


class PricingTable:
    """A validated Pricing indexed for O(log n) tier resolution (DESIGN D9).

    The index is the sorted list of the tiers' distinct time boundaries; for every time slab
    between two boundaries, the sorted size boundaries and the tier of each size cell. A lookup
    is two bisections; for a tier with windows, one conversion to local time and a third
    bisection over the tier's week (:class:`~protocol_py.rules.pricing_windows.TierWeek`) find the
    window whose rates apply. Each tier's and window's effective rates are converted to exact
    Decimals once, here.

    Attributes:
        pricing: The Pricing the table was built from.
    """

    __slots__ = (
        "_rates",
        "_slab_sizes",
        "_slab_tiers",
        "_time_points",
        "_weeks",
        "_window_rates",
        "pricing",
    )

    def __init__(self, pricing: Pricing, *, caching_supported: bool | None = None) -> None:
        """Validate and index ``pricing``.

        Raises:
            ValidationError: the Pricing breaks any rule of :func:`validate_pricing`; every
                violation is listed.
        """
        violations = [
            v
            for v in validate_pricing(pricing, caching_supported=caching_supported)
            if v.severity == "error"
        ]
        if violations:
            raise ValidationError(violations, "pricing")
        pricing = protojson.with_defaults(pricing)  # a None rate is the proto3 default, 0
        self.pricing = pricing
        valid: list[_Bounds] = []
        for tier in pricing.tiers:
            parsed = _tier_bounds(tier, "", [])
            if parsed is None:  # pragma: no cover - validate_pricing already rejected it
                raise InvalidValueError("pricing tier bounds are invalid", rule="pricing.invalid")
            valid.append(parsed)
        self._rates = [_rates(t) for t in pricing.tiers]
        self._weeks: list[TierWeek | None] = [b.week for b in valid]
        self._window_rates: list[list[_Rates]] = [
            [_rates(t, w) for w in t.windows] for t in pricing.tiers
        ]
        cells = _time_cells(valid) if valid else []
        # _time_points[k] is the start of slab k+1; slab 0 is everything before the first point.
        self._time_points: list[datetime] = [lo for lo, _hi in cells if lo is not None]
        self._slab_sizes: list[list[int]] = []
        self._slab_tiers: list[list[int]] = []
        for t_cell in cells:
            at = _time_point(t_cell)
            starts: list[int] = []
            tiers: list[int] = []
            if at is not None:
                active = sorted(
                    (
                        (b.s_from or 0, i)
                        for i, b in enumerate(valid)
                        if (b.t_from is None or b.t_from <= at)
                        and (b.t_until is None or at < b.t_until)
                    ),
                )
                for s_from, i in active:
                    starts.append(s_from)
                    tiers.append(i)
            self._slab_sizes.append(starts)
            self._slab_tiers.append(tiers)

    def resolve(self, at: datetime, prompt_tokens: int) -> tuple[int, PricingTier]:
        """Return the one tier matching (receipt time, prompt size), in O(log n).

        Args:
            at: The moment the usage event was received; timezone-aware.
            prompt_tokens: The prompt size in tokens (:func:`prompt_tokens`), >= 0.

        Returns:
            ``(index into pricing.tiers, the tier)``.

        Raises:
            InvalidValueError: ``at`` is naive or not a datetime (``timestamp.naive``), the size is
                negative or not an integer (``usage.negative``), or the Pricing is free with no
                tiers (``pricing.no_tiers``).
        """
        at = _check_aware(at, "at")
        size = _check_count(prompt_tokens, "prompt_tokens")
        if not self._slab_tiers:
            raise InvalidValueError(
                "pricing has no tiers (a free model); there is nothing to resolve",
                path="pricing.tiers",
                rule="pricing.no_tiers",
            )
        index = self._lookup(at, size)
        return index, self.pricing.tiers[index]

    def resolve_window(self, at: datetime, prompt_tokens: int) -> tuple[int, int | None]:
        """Return the tier matching (receipt time, prompt size) and the window of that tier
        whose rates apply at ``at`` (protocol 1.1), in O(log n) plus one bisection over the
        tier's week.

        Args:
            at: The moment the usage event was received; timezone-aware.
            prompt_tokens: The prompt size in tokens (:func:`prompt_tokens`), >= 0.

        Returns:
            ``(index into pricing.tiers, index into that tier's windows)``; the window index is
            None when no window holds ``at`` (the tier's own rates apply).

        Raises:
            InvalidValueError: as :meth:`resolve`, and ``timestamp.out_of_range`` when the
                tier's window zone cannot represent ``at``'s local time within years 1..9999.
        """
        index, _tier = self.resolve(at, prompt_tokens)
        return index, self._window_of(index, at)

    def _lookup(self, at: datetime, size: int) -> int:
        """The tier index for an already-checked aware time and size >= 0."""
        slab = bisect_right(self._time_points, at)
        return self._slab_tiers[slab][bisect_right(self._slab_sizes[slab], size) - 1]

    def _window_of(self, index: int, at: datetime) -> int | None:
        week = self._weeks[index]
        return None if week is None else week.window_at(at)

    def _rates_of(self, index: int, window: int | None = None) -> _Rates:
        return self._rates[index] if window is None else self._window_rates[index][window]


# ---------------------------------------------------------------------------------------------
# Cost
# ---------------------------------------------------------------------------------------------


def _usage(usage: object) -> Usage:
    """``usage`` checked to be a Usage, with ``None`` in its plain fields read as their proto3
    default (0), as on the wire."""
    if not isinstance(usage, Usage):
        raise InvalidValueError(
            f"usage: expected Usage, got {type(usage).__name__}", path="usage", rule="usage.type"
        )
    if (
        type(usage.input_tokens) is int
        and type(usage.output_tokens) is int
        and type(usage.components) is list
        and not usage.components
    ):
        return usage  # the common case: nothing to default (the optional counts may be None)
    return protojson.with_defaults(usage)


def _check_consistent(usage: Usage, *, out: int, write: int, write_1h: int, reasoning: int) -> None:
    """The Usage consistency rules between counts (tokens)."""
    if write_1h > write:
        raise InvalidValueError(
            f"usage.cache_write_1h_tokens: {write_1h} exceeds cache_write_tokens {write} (the 1h "
            "writes are a subset of all cache writes)",
            path="usage.cache_write_1h_tokens",
            rule="usage.cache_write_1h_exceeds_cache_write",
        )
    if usage.reasoning_already_counted is True and reasoning > out:
        raise InvalidValueError(
            f"usage.reasoning_tokens: {reasoning} exceeds output_tokens {out}, yet "
            "reasoning_already_counted says the output includes them (inconsistent usage)",
            path="usage.reasoning_tokens",
            rule="usage.reasoning_exceeds_output",
        )


USAGE_COUNT_FIELDS: tuple[str, ...] = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "reasoning_tokens",
)
"""The token counts of a Usage that :func:`validate_usage` checks (tokens, each >= 0)."""


def validate_usage(usage: Usage) -> list[Violation]:
    """Every rule violation of a Usage that :func:`cost` would refuse, not only the first: a
    negative or non-integer count (``usage.negative`` / ``usage.not_integer``, components
    included), ``cache_write_1h_tokens`` above ``cache_write_tokens``
    (``usage.cache_write_1h_exceeds_cache_write``), ``reasoning_tokens`` above
    ``output_tokens`` with ``reasoning_already_counted`` (``usage.reasoning_exceeds_output``).
    An absent count reads as 0. Paths start with ``usage.``; messages do not repeat the path.

    Raises:
        InvalidValueError: ``usage`` is not a Usage (``usage.type``).
    """
    usage = _usage(usage)
    found: list[Violation] = []

    def check(path: str, value: object) -> int:
        try:
            return _check_count(value, path)
        except InvalidValueError as exc:
            found.append(_as_violation(exc))
            return 0

    counts = {
        name: check(f"usage.{name}", getattr(usage, name) or 0) for name in USAGE_COUNT_FIELDS
    }
    for i, item in enumerate(usage.components if isinstance(usage.components, list) else []):
        if isinstance(item, UsageComponent):
            check(f"usage.components[{i}].value", item.value)
    if not found:
        try:
            _check_consistent(
                usage,
                out=counts["output_tokens"],
                write=counts["cache_write_tokens"],
                write_1h=counts["cache_write_1h_tokens"],
                reasoning=counts["reasoning_tokens"],
            )
        except InvalidValueError as exc:
            found.append(_as_violation(exc))
    return found


def _as_violation(exc: InvalidValueError) -> Violation:
    message = str(exc).removeprefix(f"{exc.path}: ")
    return Violation(exc.path, exc.rule, message)


def prompt_tokens(usage: Usage) -> int:
    """The prompt size that selects a tier (DESIGN D9): ``input_tokens + cache_read_tokens +
    cache_write_tokens``, absent counts being 0. Unit: tokens.

    Raises:
        InvalidValueError: ``usage`` is not a Usage (``usage.type``); a count is negative or
            not an integer (``usage.negative`` / ``usage.not_integer``).
    """
    usage = _usage(usage)
    return (
        _check_count(usage.input_tokens, "usage.input_tokens")
        + _check_count(usage.cache_read_tokens or 0, "usage.cache_read_tokens")
        + _check_count(usage.cache_write_tokens or 0, "usage.cache_write_tokens")
    )


def format_usd(value: Decimal) -> str:
    """Render an exact Decimal in plain notation (case C13).

    No exponent, no rounding; trailing zeros after the point are removed, and zero is ``"0"``:
    ``Decimal("0.000750") -> "0.00075"``, ``Decimal("1E-7") -> "0.0000001"``,
    ``Decimal("1E+2") -> "100"``.

    Raises:
        InvalidValueError: the value is NaN or infinite, or not a Decimal.
    """
    if not isinstance(value, Decimal):
        raise InvalidValueError(
            f"expected a Decimal, got {type(value).__name__}", rule="decimal.not_decimal"
        )
    if not value.is_finite():
        raise InvalidValueError(f"{value} is not a finite amount", rule="decimal.not_finite")
    if value.is_zero():
        return "0"
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


@dataclass(frozen=True)
class CostBreakdown:
    """The exact cost of one usage event (DESIGN D8).

    Attributes:
        tier_index: Index into ``pricing.tiers`` of the tier applied; None for a free Pricing.
        terms: Every term of :data:`TERM_NAMES`, always present (0 when absent), in USD.
        total: Sum of the terms, in USD, exact.
        free: True when the Pricing is free (every term is 0).
        vendor_cost: The vendor's own price, carried beside the computed figure; never added in.
        components: The usage's vendor-defined counters, sorted by name (then value).
        window_index: Index into the tier's ``windows`` of the recurring window whose rates
            were applied (protocol 1.1); None when the tier's own rates were.
    """

    tier_index: int | None
    terms: dict[str, Decimal]
    total: Decimal
    free: bool
    vendor_cost: VendorCost | None = None
    components: list[UsageComponent] = field(default_factory=list)
    window_index: int | None = None

    def total_usd(self) -> str:
        """The total as an exact decimal string (:func:`format_usd`)."""
        return format_usd(self.total)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"tier_index": int | None, "window_index": int | None,
        "terms": {name: decimal string},
        "total_usd": str, "free": bool, "vendor_cost": {"amount", "unit", "currency"?} | None,
        "components": [{"name": str, "value": int}]}``."""
        vendor: dict[str, Any] | None = None
        if self.vendor_cost is not None:
            vendor = {"amount": self.vendor_cost.amount, "unit": self.vendor_cost.unit}
            if self.vendor_cost.currency is not None:
                vendor["currency"] = self.vendor_cost.currency
        return {
            "tier_index": self.tier_index,
            "window_index": self.window_index,
            "terms": {name: format_usd(self.terms[name]) for name in TERM_NAMES},
            "total_usd": self.total_usd(),
            "free": self.free,
            "vendor_cost": vendor,
            "components": [{"name": c.name, "value": c.value} for c in self.components],
        }

    def render_text(self) -> str:
        """A human-readable table of the breakdown, for ``protocol-py cost``."""
        # human output numbers tiers and windows from 1 (``tier_index``/``window_index`` stay
        # zero-based in to_json)
        tier = "free" if self.free else f"tier {(self.tier_index or 0) + 1}"
        if self.window_index is not None:
            tier += f", window {self.window_index + 1}"
        rows = [(name, format_usd(self.terms[name])) for name in TERM_NAMES]
        rows.append(("total", self.total_usd()))
        width = max(len(name) for name, _ in rows)
        lines = [f"pricing: {tier}"]
        lines.extend(f"  {name.ljust(width)}  {value} USD" for name, value in rows)
        if self.vendor_cost is not None:
            currency = f" ({self.vendor_cost.currency})" if self.vendor_cost.currency else ""
            lines.append(
                f"  vendor_cost  {self.vendor_cost.amount} {self.vendor_cost.unit}{currency}"
                " (reported by the vendor, not used)"
            )
        lines.extend(f"  component {c.name} = {c.value}" for c in self.components)
        return "\n".join(lines)


def _components(usage: Usage) -> list[UsageComponent]:
    items = usage.components
    if not isinstance(items, list):
        raise InvalidValueError(
            f"usage.components: expected a list of UsageComponent, got {type(items).__name__}",
            path="usage.components",
            rule="usage.type",
        )
    for i, item in enumerate(items):
        where = f"usage.components[{i}]"
        if not isinstance(item, UsageComponent):
            raise InvalidValueError(
                f"{where}: expected UsageComponent, got {type(item).__name__}",
                path=where,
                rule="usage.type",
            )
        if not isinstance(item.name, str):
            raise InvalidValueError(
                f"{where}.name: expected str, got {type(item.name).__name__}",
                path=f"{where}.name",
                rule="usage.type",
            )
        _check_count(item.value, f"{where}.value")
    return sorted(items, key=lambda c: (c.name, c.value))


def _term(tokens: int, rate: Decimal | None, rate_field: str, tier_index: int) -> Decimal:
    if tokens == 0:
        return _ZERO
    if rate is None:
        raise InvalidValueError(
            f"pricing.tiers[{tier_index}].{rate_field} is absent but the usage bills {tokens} "
            "tokens at it",
            path=f"pricing.tiers[{tier_index}].{rate_field}",
            rule="cost.rate_missing",
        )
    return _EXACT.multiply(Decimal(tokens), rate).scaleb(_MILLION_EXP, _EXACT)


def cost(pricing: Pricing | PricingTable, usage: Usage, at: datetime) -> CostBreakdown:
    """Price one usage event exactly (DESIGN D7, D8; spec "Cost-computation worked example").

    The tier is the one matching (``at``, :func:`prompt_tokens`); its rates apply, or, where one
    of its recurring windows holds ``at`` (protocol 1.1), that window's rates over the tier's
    (``window_index``). Terms, each divided by 10^6:
    ``input_tokens * input``, ``output_tokens * output``, ``cache_read_tokens * cache_read``,
    ``(cache_write_tokens - cache_write_1h_tokens) * cache_write``,
    ``cache_write_1h_tokens * (cache_write_1h, or cache_write when absent)``, and
    ``reasoning_tokens * output`` unless ``reasoning_already_counted`` is true. Rates become
    Decimals through their shortest repr; arithmetic is exact (nothing is rounded). A free
    Pricing costs 0 with ``tier_index`` None. ``vendor_cost`` is carried, never added.

    Args:
        pricing: A Pricing (validated here, without the cache-rate presence rule) or a
            :class:`PricingTable` built once and reused.
        usage: The usage event. Units: tokens.
        at: The moment the usage event was received; timezone-aware.

    Returns:
        The :class:`CostBreakdown`.

    Raises:
        ValidationError: ``pricing`` is an invalid Pricing.
        InvalidValueError: a negative or non-integer count (``usage.negative``),
            ``cache_write_1h_tokens`` above ``cache_write_tokens``
            (``usage.cache_write_1h_exceeds_cache_write``), ``reasoning_tokens`` above
            ``output_tokens`` with ``reasoning_already_counted`` true
            (``usage.reasoning_exceeds_output``), a naive ``at``, or tokens billed at a
            rate the tier does not declare (``cost.rate_missing``), or a window zone that
            cannot represent ``at``'s local time (``timestamp.out_of_range``).
    """
    table = pricing if isinstance(pricing, PricingTable) else PricingTable(pricing)
    usage = _usage(usage)
    inp = _check_count(usage.input_tokens, "usage.input_tokens")
    out = _check_count(usage.output_tokens, "usage.output_tokens")
    read = _check_count(usage.cache_read_tokens or 0, "usage.cache_read_tokens")
    write = _check_count(usage.cache_write_tokens or 0, "usage.cache_write_tokens")
    write_1h = _check_count(usage.cache_write_1h_tokens or 0, "usage.cache_write_1h_tokens")
    reasoning = _check_count(usage.reasoning_tokens or 0, "usage.reasoning_tokens")
    _check_consistent(usage, out=out, write=write, write_1h=write_1h, reasoning=reasoning)
    at = _check_aware(at, "at")
    components = _components(usage)
    if table.pricing.free:
        return CostBreakdown(
            tier_index=None,
            terms=dict.fromkeys(TERM_NAMES, _ZERO),
            total=_ZERO,
            free=True,
            vendor_cost=usage.vendor_cost,
            components=components,
        )
    if not table._slab_tiers:
        table.resolve(at, inp + read + write)  # raises the typed "no tiers" error
    index = table._lookup(at, inp + read + write)
    window = table._window_of(index, at)
    rates = table._rates_of(index, window)
    write_1h_rate = rates.cache_write_1h if rates.cache_write_1h is not None else rates.cache_write
    write_1h_field = (
        "cache_write_1h_per_mtok" if rates.cache_write_1h is not None else "cache_write_per_mtok"
    )
    billed_reasoning = 0 if usage.reasoning_already_counted is True else reasoning
    terms = {
        "input": _term(inp, rates.input, "input_per_mtok", index),
        "output": _term(out, rates.output, "output_per_mtok", index),
        "cache_read": _term(read, rates.cache_read, "cache_read_per_mtok", index),
        "cache_write_5m": _term(write - write_1h, rates.cache_write, "cache_write_per_mtok", index),
        "cache_write_1h": _term(write_1h, write_1h_rate, write_1h_field, index),
        "reasoning": _term(billed_reasoning, rates.output, "output_per_mtok", index),
    }
    total = _ZERO
    for value in terms.values():
        total = _EXACT.add(total, value)
    return CostBreakdown(
        tier_index=index,
        window_index=window,
        terms=terms,
        total=total,
        free=False,
        vendor_cost=usage.vendor_cost,
        components=components,
    )
