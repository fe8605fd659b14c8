"""Charges that are not per token (protocol 1.2): per-request fees and explicit-cache storage.

- **Per-request fees.** ``PricingTier.request_rates`` (``RequestRate{name, price_per_request}``,
  USD per request) price the ``Usage.request_counts`` of the same name (``RequestCount{name,
  count}``), for example Anthropic's web search at USD 0.01 per search. The fees belong to the
  tier resolved for the usage (receipt time, prompt size; docs/decisions.md#d9) and apply at
  every instant of it: a recurring window does not override them. The term is
  ``sum(count x price_per_request)``, exact (docs/decisions.md#d8).
- **Cache storage.** ``PricingTier.cache_storage_per_mtok_hour`` (USD per million tokens per
  hour) prices ``Usage.cache_storage_token_seconds`` (cached tokens x lifetime in seconds,
  docs/decisions.md#d29): ``token_seconds x rate / 3600 / 10^6``. That quotient is the one cost
  figure that may not be a finite decimal (a lifetime that is not a multiple of 9 seconds can
  give thirds); it is exact whenever it is a finite decimal and otherwise rounded half-even to
  :data:`STORAGE_PLACES` decimal places (10^-18 USD), far below any invoice's unit.

A non-zero count or storage figure that the resolved tier has no rate for is an error
(``cost.rate_missing``), never billed as 0.

Rules of the declarations (:func:`tier_violations`, paths below the tier):
``pricing.tiers.request_rate.name_invalid`` (``request_rates[i].name``: empty, longer than
:data:`MAX_NAME_BYTES`, or outside ``[a-z0-9_]``), ``pricing.tiers.request_rate.name_duplicate``,
``pricing.tiers.request_rates.too_many`` (above :data:`MAX_RATES`), and the tier's rate rules
``pricing.tiers.rate_not_finite`` / ``pricing.tiers.rate_negative`` on
``request_rates[i].price_per_request`` and ``cache_storage_per_mtok_hour``, with
``pricing.tiers.cache_storage_without_caching`` for a storage rate on a model that does not
cache.

Rules of a usage event (:func:`usage_problems`; the stream checker prefixes ``stream.``, cost
raises them as they are): ``usage.negative`` (a negative count or storage figure),
``usage.request_count.name_invalid``, ``usage.request_count.name_duplicate``,
``usage.request_counts.too_many``.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_EVEN, Context, Decimal, Inexact, InvalidOperation, Overflow
from typing import Any, Final, NamedTuple

from protocol_py.errors import InvalidValueError, Violation
from protocol_py_gen.model.v1 import PricingTier, RequestCount, RequestRate, Usage

__all__ = [
    "MAX_COUNTS",
    "MAX_NAME_BYTES",
    "MAX_RATES",
    "STORAGE_PLACES",
    "UsageProblem",
    "request_fees",
    "storage_cost",
    "tier_violations",
    "usage_problems",
]

MAX_NAME_BYTES: Final = 64
"""Longest RequestRate / RequestCount name, in bytes."""

MAX_RATES: Final = 16
"""Most request rates on one tier."""

MAX_COUNTS: Final = 16
"""Most request counts on one usage event."""

STORAGE_PLACES: Final = 18
"""Decimal places (of USD) to which a storage term that is not a finite decimal is rounded."""

_NAME = re.compile(r"[a-z0-9_]+")
_EXACT = Context(prec=1000, Emin=-999999, Emax=999999, traps=[Inexact, InvalidOperation, Overflow])
_ROUNDED = Context(prec=1000, Emin=-999999, Emax=999999, traps=[InvalidOperation, Overflow])
_STORAGE_DIVISOR = Decimal(3600 * 10**6)
_STORAGE_QUANTUM = Decimal(1).scaleb(-STORAGE_PLACES)
_ZERO = Decimal(0)
_SHOWN_CHARS: Final = 40


def _shown(name: str) -> str:
    if len(name) <= _SHOWN_CHARS:
        return repr(name)
    return repr(name[:_SHOWN_CHARS]) + f"... ({len(name)} characters)"


def _name_ok(name: object) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name.encode()) <= MAX_NAME_BYTES
        and _NAME.fullmatch(name) is not None
    )


def _rate_violation(value: object, where: str, what: str) -> Violation | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return Violation(
            where,
            "pricing.tiers.rate_not_finite",
            f"{what} must be a number, got {type(value).__name__}",
        )
    if not math.isfinite(value):
        return Violation(
            where, "pricing.tiers.rate_not_finite", f"{what} is {value}; it must be finite"
        )
    if value < 0:
        return Violation(
            where, "pricing.tiers.rate_negative", f"{what} is {value}; it must be >= 0"
        )
    return None


def tier_violations(
    tier: PricingTier, where: str, caching_supported: bool | None
) -> list[Violation]:
    """Check one tier's request rates and storage rate (rules: module docstring).

    Args:
        tier: The tier.
        where: Its path (``pricing.tiers[1]``).
        caching_supported: The model's ``caching.supported``; None skips the storage-without-
            caching rule (as for the cache rates).

    Returns:
        Every violation, in field order.
    """
    out: list[Violation] = []
    rates = tier.request_rates
    if not isinstance(rates, list):
        rates = []
        out.append(
            Violation(
                f"{where}.request_rates",
                "pricing.not_pricing",
                f"request_rates must be a list, got {type(tier.request_rates).__name__}",
            )
        )
    seen: set[str] = set()
    for i, rate in enumerate(rates):
        at = f"{where}.request_rates[{i}]"
        if not isinstance(rate, RequestRate):
            out.append(
                Violation(
                    at, "pricing.not_pricing", f"expected RequestRate, got {type(rate).__name__}"
                )
            )
            continue
        name = rate.name
        if not _name_ok(name):
            out.append(
                Violation(
                    f"{at}.name",
                    "pricing.tiers.request_rate.name_invalid",
                    f"request rate name {_shown(str(name))} must be 1 to {MAX_NAME_BYTES} bytes "
                    "of [a-z0-9_]",
                )
            )
        elif name in seen:
            out.append(
                Violation(
                    f"{at}.name",
                    "pricing.tiers.request_rate.name_duplicate",
                    f"request rate {name!r} is declared more than once in this tier",
                )
            )
        else:
            seen.add(name)
        found = _rate_violation(
            rate.price_per_request, f"{at}.price_per_request", "price_per_request"
        )
        if found is not None:
            out.append(found)
    if len(rates) > MAX_RATES:
        out.append(
            Violation(
                f"{where}.request_rates",
                "pricing.tiers.request_rates.too_many",
                f"{len(rates)} request rates in one tier, above the limit of {MAX_RATES}",
            )
        )
    storage = tier.cache_storage_per_mtok_hour
    if storage is not None:
        at = f"{where}.cache_storage_per_mtok_hour"
        found = _rate_violation(storage, at, "cache_storage_per_mtok_hour")
        if found is not None:
            out.append(found)
        if caching_supported is False:
            out.append(
                Violation(
                    at,
                    "pricing.tiers.cache_storage_without_caching",
                    "cache_storage_per_mtok_hour must be absent because the model's "
                    "caching.supported is false",
                )
            )
    return out


class UsageProblem(NamedTuple):
    """One broken usage rule: the field path (``usage.request_counts[1].count``), the rule id
    without its ``stream.`` prefix (``usage.negative``) and a message."""

    path: str
    rule: str
    message: str


def usage_problems(usage: Usage) -> list[UsageProblem]:
    """Check a usage event's request counts and storage figure (rules: module docstring).

    Returns:
        Every problem, in field order; empty when they are valid.
    """
    problems: list[UsageProblem] = []
    counts = usage.request_counts
    if not isinstance(counts, list):
        problems.append(
            UsageProblem(
                "usage.request_counts",
                "usage.type",
                f"expected a list of RequestCount, got {type(counts).__name__}",
            )
        )
        counts = []
    seen: set[str] = set()
    for i, item in enumerate(counts):
        at = f"usage.request_counts[{i}]"
        if not isinstance(item, RequestCount):
            problems.append(
                UsageProblem(at, "usage.type", f"expected RequestCount, got {type(item).__name__}")
            )
            continue
        if not _name_ok(item.name):
            problems.append(
                UsageProblem(
                    f"{at}.name",
                    "usage.request_count.name_invalid",
                    f"request count name {_shown(str(item.name))} must be 1 to "
                    f"{MAX_NAME_BYTES} bytes of [a-z0-9_]",
                )
            )
        elif item.name in seen:
            problems.append(
                UsageProblem(
                    f"{at}.name",
                    "usage.request_count.name_duplicate",
                    f"request count {item.name!r} appears more than once",
                )
            )
        else:
            seen.add(item.name)
        if isinstance(item.count, bool) or not isinstance(item.count, int):
            problems.append(
                UsageProblem(
                    f"{at}.count",
                    "usage.not_integer",
                    f"expected an integer count, got {type(item.count).__name__}",
                )
            )
        elif item.count < 0:
            problems.append(
                UsageProblem(
                    f"{at}.count", "usage.negative", f"request count {item.count} is negative"
                )
            )
    if len(counts) > MAX_COUNTS:
        problems.append(
            UsageProblem(
                "usage.request_counts",
                "usage.request_counts.too_many",
                f"{len(counts)} request counts, above the limit of {MAX_COUNTS}",
            )
        )
    storage = usage.cache_storage_token_seconds
    if storage is not None:
        if isinstance(storage, bool) or not isinstance(storage, int):
            problems.append(
                UsageProblem(
                    "usage.cache_storage_token_seconds",
                    "usage.not_integer",
                    f"expected an integer, got {type(storage).__name__}",
                )
            )
        elif storage < 0:
            problems.append(
                UsageProblem(
                    "usage.cache_storage_token_seconds",
                    "usage.negative",
                    f"cache_storage_token_seconds {storage} is negative",
                )
            )
    return problems


def _check(usage: Usage) -> None:
    for problem in usage_problems(usage):
        raise InvalidValueError(
            f"{problem.path}: {problem.message}", path=problem.path, rule=problem.rule
        )


def _decimal(value: Any) -> Decimal:
    return Decimal(repr(float(value)))


def request_fees(usage: Usage, tier: PricingTier, tier_index: int) -> dict[str, Decimal]:
    """The fee of each request count of ``usage`` at ``tier``'s request rates, by name, in the
    order of ``usage.request_counts``, each ``count x price_per_request`` exactly (USD).

    Raises:
        InvalidValueError: a broken usage rule (:func:`usage_problems`), or a non-zero count
            whose name the tier has no rate for (``cost.rate_missing``, naming
            ``pricing.tiers[i].request_rates``).
    """
    _check(usage)
    prices = {rate.name: rate.price_per_request for rate in tier.request_rates}
    fees: dict[str, Decimal] = {}
    for item in usage.request_counts:
        if item.count == 0:
            fees[item.name] = _ZERO
            continue
        price = prices.get(item.name)
        if price is None:
            where = f"pricing.tiers[{tier_index}].request_rates"
            raise InvalidValueError(
                f"{where} has no rate named {item.name!r} but the usage bills {item.count} "
                "request(s) at it",
                path=where,
                rule="cost.rate_missing",
            )
        fees[item.name] = _EXACT.multiply(Decimal(item.count), _decimal(price))
    return fees


def storage_cost(usage: Usage, tier: PricingTier, tier_index: int) -> Decimal:
    """The explicit-cache storage term of ``usage`` at ``tier``:
    ``cache_storage_token_seconds x cache_storage_per_mtok_hour / 3600 / 10^6`` USD, exact when
    it is a finite decimal, otherwise rounded half-even to :data:`STORAGE_PLACES` places.

    Raises:
        InvalidValueError: a broken usage rule, or storage billed on a tier without
            ``cache_storage_per_mtok_hour`` (``cost.rate_missing``).
    """
    _check(usage)
    token_seconds = usage.cache_storage_token_seconds or 0
    if token_seconds == 0:
        return _ZERO
    rate = tier.cache_storage_per_mtok_hour
    if rate is None:
        where = f"pricing.tiers[{tier_index}].cache_storage_per_mtok_hour"
        raise InvalidValueError(
            f"{where} is absent but the usage bills {token_seconds} token-seconds of cache "
            "storage at it",
            path=where,
            rule="cost.rate_missing",
        )
    product = _EXACT.multiply(Decimal(token_seconds), _decimal(rate))
    try:
        return _EXACT.divide(product, _STORAGE_DIVISOR)
    except Inexact:
        quotient = _ROUNDED.divide(product, _STORAGE_DIVISOR)
        return quotient.quantize(_STORAGE_QUANTUM, rounding=ROUND_HALF_EVEN, context=_ROUNDED)
