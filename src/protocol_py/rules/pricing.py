"""Pricing rules and tier resolution (spec: "Pricing"; docs/decisions.md#d8,
docs/decisions.md#d9, docs/decisions.md#d13).

* :func:`validate_pricing` checks a :class:`~protocol_py_gen.model.v1.Pricing` against every
  Pricing rule and returns the list of :class:`~protocol_py.errors.Violation`.
* :class:`PricingTable` is a validated Pricing indexed for lookup: :meth:`PricingTable.resolve`
  returns the one tier matching a (receipt time, prompt size) pair in O(log n), and
  :meth:`PricingTable.resolve_window` the recurring window of that tier whose rates replace the
  tier's at that instant (protocol 1.1; :mod:`protocol_py.rules.pricing_windows`,
  docs/pricing-windows.md).

The exact cost of a usage event is :func:`protocol_py.rules.cost.cost`; tier bounds are parsed
by :func:`protocol_py.rules.timestamps.parse_timestamp`.

Units: rates are USD per million tokens (``*_per_mtok``), prompt sizes are tokens, times are
ISO 8601 / RFC 3339 strings on the wire and timezone-aware :class:`datetime.datetime` values in
Python.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from protocol_py.codec import type_check
from protocol_py.errors import InvalidValueError, ValidationError, Violation
from protocol_py.rules import fees
from protocol_py.rules.pricing_windows import MAX_WINDOWS_PER_TIER, TierWeek, parse_windows
from protocol_py.rules.timestamps import _check_aware, _format_time, parse_timestamp
from protocol_py_gen.model.v1 import (
    Pricing,
    PricingTier,
    PricingWindow,
)

__all__ = [
    "RATE_FIELDS",
    "PricingTable",
    "validate_pricing",
]

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
        # sizes start at 0: [0, 0) matches no prompt; accepted, such a tier would win resolution
        # at size 0 over the tier that matches
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
    """Check a Pricing against every rule of the spec's "Pricing" section (docs/decisions.md#d8,
    docs/decisions.md#d9).

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
    Pricing. Protocol 1.2: each tier's request rates and cache-storage rate
    (:func:`protocol_py.rules.fees.tier_violations`: ``pricing.tiers.request_rate.*``,
    ``pricing.tiers.request_rates.too_many``, ``pricing.tiers.cache_storage_without_caching``
    and the rate rules). The partition is checked only when every tier's bounds and windows are
    valid. A free Pricing with tiers is checked the same way.

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
    pricing = type_check.with_defaults(pricing)
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
        out.extend(fees.tier_violations(tier, where, caching_supported))
        parsed = _tier_bounds(tier, where, out)
        if parsed is None:
            all_ok = False
        else:
            bounds.append(parsed)
    if all_ok:
        out.extend(_partition_violations(bounds, path))
    return out


def _rate(value: float | None) -> Decimal | None:
    """A rate's exact Decimal from its shortest repr (docs/decisions.md#d8); never float
    arithmetic."""
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
    """A validated Pricing indexed for O(log n) tier resolution (docs/decisions.md#d9).

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
        pricing = type_check.with_defaults(pricing)  # a None rate is the proto3 default, 0
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
            prompt_tokens: The prompt size in tokens
                (:func:`protocol_py.rules.cost.prompt_tokens`), >= 0.

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
            prompt_tokens: The prompt size in tokens
                (:func:`protocol_py.rules.cost.prompt_tokens`), >= 0.

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
