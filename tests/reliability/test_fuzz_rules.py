"""The rules under random input: random ModelSpecs and Pricings (hypothesis, bounded) through
validation and tier resolution, against a brute-force cell check.

The oracle here is independent of :mod:`protocol_py.rules.pricing`: every tier is a box of half-open
integer intervals, one per :class:`Dimension`; the grid is every point where some tier boundary
starts a cell (plus one point below all boundaries), so every cell of the plane has a point in it,
and a point's verdict is simply the list of tiers whose box contains it. From that:

* a gap exists iff some grid point matches no tier; an overlap iff some point matches two;
* ``validate_pricing`` / ``validate_model_spec`` must report ``pricing.tiers.gap`` /
  ``pricing.tiers.overlap`` exactly then, and the point each message names must really be a gap (no
  tier) or an overlap (exactly the tiers it lists);
* for a valid Pricing, ``PricingTable.resolve`` returns, at every grid point and at the points just
  below each boundary, the unique tier that contains it; an invalid one cannot be built.

Time coordinates are whole days after :data:`EPOCH`, written in several equivalent ISO 8601 forms (a
date, ``Z``, a ``+02:00`` offset); prompt sizes are token counts. A third tier dimension (e.g.
recurring time-of-day windows) is added by appending a :class:`Dimension` with its fields, its wire
encoding and how a point is passed to ``resolve``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from protocol_py.errors import ValidationError
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.rules.capabilities import validate_model_spec
from protocol_py.rules.pricing import PricingTable, validate_pricing
from protocol_py_gen.model.v1 import CachingSpec, ModelSpec, Pricing, PricingTier

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
MAX_DAY = 12
"""Time boundaries are drawn from days 0..MAX_DAY after EPOCH."""
SIZES = (0, 1, 2, 1000, 32_000, 128_000, 200_000, 1_000_000)
"""Prompt-size boundaries are drawn from these token counts."""
MAX_TIERS = 7
"""Tiers of an independently drawn Pricing; a drawn partition has up to 4 x 3 = 12."""
MAX_ANY_TIERS = 16
EXAMPLES = 200
"""Hypothesis examples per property (bounded: the whole module runs in seconds)."""

Interval = tuple[int | None, int | None]
"""A half-open [lo, hi) interval of a dimension; None is unbounded on that side."""


def _time_text(day: int, form: int) -> str:
    at = EPOCH + timedelta(days=day)
    if form == 0:
        return at.date().isoformat()  # a date means 00:00 UTC (docs/decisions.md#d9)
    if form == 1:
        return at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return (at + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S+02:00")  # the same instant


@dataclass(frozen=True)
class Dimension:
    """One tier dimension: its proto fields, domain floor, boundary values and encoding."""

    name: str
    from_field: str
    until_field: str
    floor: int | None
    """The smallest coordinate (0 tokens), or None for an unbounded axis (time)."""
    boundaries: Sequence[int]
    encode: Callable[[int, int], Any]
    """(coordinate, form) -> the wire value of a bound."""


DIMENSIONS: tuple[Dimension, ...] = (
    Dimension(
        "time",
        "effective_from",
        "effective_until",
        None,
        range(MAX_DAY + 1),
        _time_text,
    ),
    Dimension(
        "prompt_size",
        "input_tokens_from",
        "input_tokens_until",
        0,
        SIZES,
        lambda value, _form: value,
    ),
)


def _resolve_args(point: tuple[int, ...]) -> tuple[datetime, int]:
    """A grid point as ``PricingTable.resolve`` arguments (extend with a new dimension)."""
    day, size = point
    return EPOCH + timedelta(days=day), size


# --- the oracle ------------------------------------------------------------------------------


def _contains(interval: Interval, x: int) -> bool:
    lo, hi = interval
    return (lo is None or lo <= x) and (hi is None or x < hi)


def _axis_points(dim: Dimension, boxes: Sequence[Sequence[Interval]], d: int) -> list[int]:
    """One point in every cell of axis ``d``: each boundary, and one below all of them."""
    bounds = {b for box in boxes for b in box[d] if b is not None}
    low = dim.floor if dim.floor is not None else min(bounds, default=0) - 1
    return sorted({low, *(b for b in bounds if dim.floor is None or b >= dim.floor)})


def _grid(boxes: Sequence[Sequence[Interval]]) -> list[tuple[int, ...]]:
    axes = [_axis_points(dim, boxes, d) for d, dim in enumerate(DIMENSIONS)]
    return list(itertools.product(*axes))


def _matching(boxes: Sequence[Sequence[Interval]], point: tuple[int, ...]) -> list[int]:
    return [
        i
        for i, box in enumerate(boxes)
        if all(_contains(box[d], point[d]) for d in range(len(DIMENSIONS)))
    ]


@dataclass
class Verdict:
    gaps: list[tuple[int, ...]]
    overlaps: list[tuple[int, ...]]


def _verdict(boxes: Sequence[Sequence[Interval]]) -> Verdict:
    verdict = Verdict([], [])
    for point in _grid(boxes):
        hits = _matching(boxes, point)
        if not hits:
            verdict.gaps.append(point)
        elif len(hits) > 1:
            verdict.overlaps.append(point)
    return verdict


# --- generators -------------------------------------------------------------------------------


@st.composite
def _partition(draw: st.DrawFn) -> list[list[Interval]]:
    """A valid partition: time cut into slabs, each slab's prompt sizes cut into cells."""
    cuts = sorted(draw(st.sets(st.sampled_from(DIMENSIONS[0].boundaries), max_size=3)))
    edges: list[int | None] = [None, *cuts, None]
    boxes: list[list[Interval]] = []
    for lo, hi in itertools.pairwise(edges):
        sizes = sorted(draw(st.sets(st.sampled_from(SIZES[1:]), max_size=2)))
        size_edges: list[int | None] = [None if draw(st.booleans()) else 0, *sizes, None]
        for s_lo, s_hi in itertools.pairwise(size_edges):
            boxes.append([(lo, hi), (s_lo, s_hi)])
    return boxes


@st.composite
def _mutated(draw: st.DrawFn) -> list[list[Interval]]:
    """A partition, sometimes broken: a tier dropped (gap), one widened (overlap), a bound
    moved, or a random tier added."""
    boxes = draw(_partition())
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(["drop", "widen", "move", "add"]))
        if op == "drop" and len(boxes) > 1:
            boxes.pop(draw(st.integers(0, len(boxes) - 1)))
        elif op == "widen":
            i = draw(st.integers(0, len(boxes) - 1))
            d = draw(st.integers(0, len(DIMENSIONS) - 1))
            lo, hi = boxes[i][d]
            boxes[i][d] = (None, hi) if draw(st.booleans()) else (lo, None)
        elif op == "move":
            i = draw(st.integers(0, len(boxes) - 1))
            d = draw(st.integers(0, len(DIMENSIONS) - 1))
            lo, hi = boxes[i][d]
            value = draw(st.sampled_from(DIMENSIONS[d].boundaries))
            if draw(st.booleans()) and (hi is None or value < hi):
                boxes[i][d] = (value, hi)
            elif lo is None or value > lo:
                boxes[i][d] = (lo, value)
        elif op == "add" and len(boxes) < MAX_TIERS:
            boxes.append([draw(_interval(dim)) for dim in DIMENSIONS])
    return boxes[:MAX_TIERS] if len(boxes) > MAX_TIERS else boxes


@st.composite
def _interval(draw: st.DrawFn, dim: Dimension) -> Interval:
    lo = draw(st.none() | st.sampled_from(dim.boundaries))
    above = [b for b in dim.boundaries if lo is None or b > lo]
    hi = draw(st.none() | st.sampled_from(above)) if above else None
    return (lo, hi)


def _tier(box: Sequence[Interval], forms: Sequence[int], rates: tuple[float, float]) -> PricingTier:
    tier = PricingTier(input_per_mtok=rates[0], output_per_mtok=rates[1])
    for d, dim in enumerate(DIMENSIONS):
        lo, hi = box[d]
        if lo is not None:
            setattr(tier, dim.from_field, dim.encode(lo, forms[d]))
        if hi is not None:
            setattr(tier, dim.until_field, dim.encode(hi, forms[d]))
    return tier


_RATES = st.tuples(
    st.sampled_from([0.0, 0.1, 3.0, 15.0, 1e-9]), st.sampled_from([0.0, 0.4, 15.0, 75.0])
)


@st.composite
def _pricing(draw: st.DrawFn) -> tuple[list[list[Interval]], Pricing]:
    independent = st.lists(
        st.tuples(*(_interval(dim) for dim in DIMENSIONS)).map(list),
        min_size=1,
        max_size=MAX_TIERS,
    )
    boxes = draw(st.one_of(_partition(), _mutated(), independent))
    tiers = [
        _tier(box, draw(st.lists(st.integers(0, 2), min_size=2, max_size=2)), draw(_RATES))
        for box in boxes
    ]
    return boxes, Pricing(currency="USD", tiers=tiers)


TRIED: dict[str, int] = {  # printed by test_generator_reaches_every_verdict (pytest -s)
    "pricing": 0,
    "valid": 0,
    "gap": 0,
    "overlap": 0,
    "empty_tier": 0,
    "spec": 0,
}

_AT = re.compile(r"at (\S+), prompt size (\d+)")


def _named_point(message: str) -> tuple[int, ...]:
    """The grid point a gap/overlap message names, as oracle coordinates."""
    match = _AT.search(message)
    assert match is not None, message
    at = datetime.fromisoformat(match.group(1).replace("Z", "+00:00"))
    return ((at - EPOCH) // timedelta(days=1), int(match.group(2)))


def _empty_tiers(boxes: Sequence[Sequence[Interval]]) -> list[int]:
    """Tiers whose box holds no point of the domain (e.g. ``input_tokens_until: 0``)."""
    return [
        i
        for i, box in enumerate(boxes)
        for d, dim in enumerate(DIMENSIONS)
        if dim.floor is not None and box[d][1] is not None and box[d][1] <= (box[d][0] or 0)
    ]


def _check_partition_verdict(boxes: list[list[Interval]], violations: list[Any]) -> Verdict | None:
    """Assert the validator's verdict equals the oracle's; None when a tier is empty (the
    partition is then not checked, as documented)."""
    empty = _empty_tiers(boxes)
    if empty:
        assert sorted((v.path, v.rule) for v in violations) == sorted(
            (f"pricing.tiers[{i}].input_tokens_until", "pricing.tiers.size_window_empty")
            for i in empty
        )
        return None
    verdict = _verdict(boxes)
    rules = [v.rule for v in violations]
    assert ("pricing.tiers.gap" in rules) == bool(verdict.gaps), (verdict, rules)
    assert ("pricing.tiers.overlap" in rules) == bool(verdict.overlaps), (verdict, rules)
    assert set(rules) <= {"pricing.tiers.gap", "pricing.tiers.overlap"}, rules
    for v in violations:
        point = _named_point(v.message)
        hits = _matching(boxes, point)
        if v.rule == "pricing.tiers.gap":
            assert hits == [], (v.message, hits)
        else:
            named = [int(i) for i in re.findall(r"\d+", v.message.split("tiers", 1)[1])]
            assert hits == named, (v.message, hits)
    return verdict


def _probe_points(boxes: list[list[Interval]]) -> list[tuple[int, ...]]:
    """Grid points plus the points just below each boundary (the last coordinate of a cell)."""
    points = set(_grid(boxes))
    for point in list(points):
        for d, dim in enumerate(DIMENSIONS):
            below = point[d] - 1
            if dim.floor is None or below >= dim.floor:
                points.add((*point[:d], below, *point[d + 1 :]))
    return sorted(points)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(_pricing())
def test_random_pricing_partition_verdict_matches_brute_force_cells(
    case: tuple[list[list[Interval]], Pricing],
) -> None:
    boxes, pricing = case
    TRIED["pricing"] += 1
    verdict = _check_partition_verdict(boxes, validate_pricing(pricing))
    if verdict is None:
        TRIED["empty_tier"] += 1
        with pytest.raises(ValidationError):
            PricingTable(pricing)
        return
    TRIED["gap"] += bool(verdict.gaps)
    TRIED["overlap"] += bool(verdict.overlaps)
    if verdict.gaps or verdict.overlaps:
        with pytest.raises(ValidationError):
            PricingTable(pricing)
        return
    TRIED["valid"] += 1
    table = PricingTable(pricing)
    for point in _probe_points(boxes):
        (expected,) = _matching(boxes, point)
        index, tier = table.resolve(*_resolve_args(point))
        assert index == expected, point
        assert tier == pricing.tiers[expected]


_BASE_SPEC = ReferenceProvider().capabilities().models[0]


@settings(
    max_examples=EXAMPLES // 2,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    _pricing(),
    st.booleans(),
    st.lists(st.booleans(), min_size=MAX_ANY_TIERS, max_size=MAX_ANY_TIERS),
)
def test_random_model_spec_pricing_rules_match_the_oracle(
    case: tuple[list[list[Interval]], Pricing], caching: bool, cache_rates: list[bool]
) -> None:
    boxes, pricing = case
    TRIED["spec"] += 1
    assert len(pricing.tiers) <= MAX_ANY_TIERS
    for tier, has_cache in zip(pricing.tiers, cache_rates, strict=False):
        if has_cache:
            tier.cache_read_per_mtok = 0.3
            tier.cache_write_per_mtok = 3.75
    spec = ModelSpec.parse(bytes(_BASE_SPEC))
    spec.caching = CachingSpec(supported=caching, implicit_automatic=caching)
    spec.pricing = pricing
    violations = validate_model_spec(spec)
    assert all(v.path.startswith("pricing") for v in violations), violations
    cache_rules = [v for v in violations if v.rule.startswith("pricing.tiers.cache_rate")]
    expected_cache = []
    for i, has_cache in enumerate(cache_rates[: len(pricing.tiers)]):
        if caching and not has_cache:
            expected_cache += [
                (f"pricing.tiers[{i}].cache_write_per_mtok", "pricing.tiers.cache_rate_missing"),
                (f"pricing.tiers[{i}].cache_read_per_mtok", "pricing.tiers.cache_rate_missing"),
            ]
        elif not caching and has_cache:
            expected_cache += [
                (f"pricing.tiers[{i}].cache_write_per_mtok", "pricing.tiers.cache_rate_unexpected"),
                (f"pricing.tiers[{i}].cache_read_per_mtok", "pricing.tiers.cache_rate_unexpected"),
            ]
    assert [(v.path, v.rule) for v in cache_rules] == expected_cache
    partition = [v for v in violations if v not in cache_rules]
    _check_partition_verdict(boxes, partition)


FIND = settings(database=None, max_examples=500, phases=[Phase.generate])
"""No shrinking: the first example found is enough."""


@pytest.mark.parametrize("verdict", ["valid", "gap", "overlap", "empty_tier"])
def test_generator_reaches_every_verdict(verdict: str) -> None:
    """The generated Pricings include valid partitions, gaps, overlaps and empty tiers (so the
    properties above test every branch); also prints the inputs tried so far."""

    def reaches(case: tuple[list[list[Interval]], Pricing]) -> bool:
        boxes = case[0]
        if _empty_tiers(boxes):
            return verdict == "empty_tier"
        found = _verdict(boxes)
        return {
            "valid": not found.gaps and not found.overlaps,
            "gap": bool(found.gaps),
            "overlap": bool(found.overlaps),
        }.get(verdict, False)

    boxes, pricing = find(_pricing(), reaches, settings=FIND)
    assert len(pricing.tiers) == len(boxes) >= 1
    print(f"\nfuzz rules: inputs tried so far {TRIED}")


def test_tier_with_input_tokens_until_zero_is_empty_and_never_resolves() -> None:
    """Found by the fuzzing above: ``input_tokens_until: 0`` without a lower bound matches no
    prompt size; it was accepted and then won resolution at size 0 over the tier that matched."""
    pricing = Pricing(
        currency="USD",
        tiers=[
            PricingTier(input_per_mtok=1.0, output_per_mtok=2.0),
            PricingTier(input_per_mtok=9.0, output_per_mtok=9.0, input_tokens_until=0),
        ],
    )
    assert [(v.path, v.rule) for v in validate_pricing(pricing)] == [
        ("pricing.tiers[1].input_tokens_until", "pricing.tiers.size_window_empty")
    ]
    with pytest.raises(ValidationError):
        PricingTable(pricing)
