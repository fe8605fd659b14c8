"""Exact cost of one usage event (spec: "Cost-computation worked example";
docs/decisions.md#d7, docs/decisions.md#d8).

:func:`cost` prices one :class:`~protocol_py_gen.model.v1.Usage` with the tier (and recurring
window) that :class:`~protocol_py.rules.pricing.PricingTable` resolves, exactly, as
:class:`decimal.Decimal`; :func:`validate_usage` lists every rule a Usage breaks;
:func:`prompt_tokens` is the prompt size that selects a tier.

Units: rates are USD per million tokens (``*_per_mtok``), counts are tokens, amounts are USD.
Protocol 1.2 adds two terms that are not per token (:mod:`protocol_py.rules.fees`): per-request
fees (``requests``: count x USD per request) and explicit-cache storage (``cache_storage``:
token-seconds at USD per million tokens per hour, docs/decisions.md#d29).

Decimal strings (:func:`format_usd`, ``testdata/cases/C13.json``): the exact value in plain
notation, never an exponent; trailing zeros after the decimal point and a bare trailing point
are removed (``"0.00075"``, ``"0.0000001"``, ``"100"``); zero is ``"0"``. Nothing is rounded,
except a storage term that is not a finite decimal (half-even at 10^-18 USD,
docs/decisions.md#d29).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Context, Decimal, Inexact, InvalidOperation, Overflow
from typing import Any

from protocol_py.codec import type_check
from protocol_py.errors import InvalidValueError, Violation
from protocol_py.rules import fees
from protocol_py.rules.pricing import PricingTable, _check_count
from protocol_py.rules.timestamps import _check_aware
from protocol_py_gen.model.v1 import (
    Pricing,
    Usage,
    UsageComponent,
    VendorCost,
)

__all__ = [
    "TERM_NAMES",
    "USAGE_COUNT_FIELDS",
    "CostBreakdown",
    "cost",
    "format_usd",
    "prompt_tokens",
    "validate_usage",
]

TERM_NAMES: tuple[str, ...] = (
    "input",
    "output",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "reasoning",
    "requests",
    "cache_storage",
)
"""The cost terms of docs/decisions.md#d8 (``requests`` and ``cache_storage``: protocol 1.2), in
the order they are rendered."""

# Exact arithmetic: enough precision for any int64 count times any double's shortest repr, and
# Inexact trapped so that a result that would need rounding raises instead of silently rounding.
_EXACT = Context(prec=1000, Emin=-999999, Emax=999999, traps=[Inexact, InvalidOperation, Overflow])
_ZERO = Decimal(0)
_MILLION_EXP = -6


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
    return type_check.with_defaults(usage)


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
    found.extend(Violation(p.path, p.rule, p.message) for p in fees.usage_problems(usage))
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
    """The prompt size that selects a tier (docs/decisions.md#d9): ``input_tokens +
    cache_read_tokens + cache_write_tokens``, absent counts being 0. Unit: tokens.

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
    """Render an exact Decimal in plain notation (testdata/cases/C13.json).

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
    """The exact cost of one usage event (docs/decisions.md#d8).

    Attributes:
        tier_index: Index into ``pricing.tiers`` of the tier applied; None for a free Pricing.
        terms: Every term of :data:`TERM_NAMES`, always present (0 when absent), in USD.
        total: Sum of the terms, in USD, exact.
        free: True when the Pricing is free (every term is 0).
        vendor_cost: The vendor's own price, carried beside the computed figure; never added in.
        components: The usage's vendor-defined counters, sorted by name (then value).
        window_index: Index into the tier's ``windows`` of the recurring window whose rates
            were applied (protocol 1.1); None when the tier's own rates were.
        request_fees: The fee of each ``Usage.request_counts`` entry, by name, in USD (protocol
            1.2); their sum is the ``requests`` term.
    """

    tier_index: int | None
    terms: dict[str, Decimal]
    total: Decimal
    free: bool
    vendor_cost: VendorCost | None = None
    components: list[UsageComponent] = field(default_factory=list)
    window_index: int | None = None
    request_fees: dict[str, Decimal] = field(default_factory=dict)

    def total_usd(self) -> str:
        """The total as an exact decimal string (:func:`format_usd`)."""
        return format_usd(self.total)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"tier_index": int | None, "window_index": int | None,
        "terms": {name: decimal string},
        "total_usd": str, "free": bool, "vendor_cost": {"amount", "unit", "currency"?} | None,
        "components": [{"name": str, "value": int}],
        "request_fees": {name: decimal string}}``."""
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
            "request_fees": {name: format_usd(fee) for name, fee in self.request_fees.items()},
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
        lines.extend(
            f"  request fee {name} = {format_usd(fee)} USD"
            for name, fee in self.request_fees.items()
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
    """Price one usage event exactly (docs/decisions.md#d7, docs/decisions.md#d8; spec
    "Cost-computation worked example").

    The tier is the one matching (``at``, :func:`prompt_tokens`); its rates apply, or, where one
    of its recurring windows holds ``at`` (protocol 1.1), that window's rates over the tier's
    (``window_index``). Terms, each divided by 10^6:
    ``input_tokens * input``, ``output_tokens * output``, ``cache_read_tokens * cache_read``,
    ``(cache_write_tokens - cache_write_1h_tokens) * cache_write``,
    ``cache_write_1h_tokens * (cache_write_1h, or cache_write when absent)``, and
    ``reasoning_tokens * output`` unless ``reasoning_already_counted`` is true; then, not
    divided (protocol 1.2, :mod:`protocol_py.rules.fees`), ``requests``: the sum of each
    request count times the tier's ``price_per_request`` of its name, and ``cache_storage``:
    ``cache_storage_token_seconds * cache_storage_per_mtok_hour / 3600 / 10^6``. Rates become
    Decimals through their shortest repr; arithmetic is exact (nothing is rounded but a
    storage term that is not a finite decimal, docs/decisions.md#d29). A free
    Pricing costs 0 with ``tier_index`` None. ``vendor_cost`` is carried, never added.

    Args:
        pricing: A Pricing (validated here, without the cache-rate presence rule) or a
            :class:`~protocol_py.rules.pricing.PricingTable` built once and reused.
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
            rate the tier does not declare (``cost.rate_missing``, also for a request count or
            storage the tier has no rate for), a broken request-count rule
            (``usage.request_count.*``, ``usage.request_counts.too_many``), or a window zone that
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
    for problem in fees.usage_problems(usage):
        raise InvalidValueError(
            f"{problem.path}: {problem.message}", path=problem.path, rule=problem.rule
        )
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
    tier = table.pricing.tiers[index]
    request_fees = fees.request_fees(usage, tier, index)
    requests_total = _ZERO
    for fee in request_fees.values():
        requests_total = _EXACT.add(requests_total, fee)
    terms["requests"] = requests_total
    terms["cache_storage"] = fees.storage_cost(usage, tier, index)
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
        request_fees=request_fees,
    )
