"""The three models the reference provider declares, each passing capability validation.

``reference-large``
    Adaptive thinking with an effort ladder (``low``, ``medium``, ``high``, ``max``; default
    ``high``) and a CONDITIONAL off switch (``disable_thinking`` accepted at ``low`` and
    ``medium``); explicit and implicit prompt caching; tool use; prompt-size pricing tiers
    (below / from 200,000 prompt tokens).
``reference-medium``
    A token-budget reasoning control (range 1,024-32,000, no default: it does not reason unless
    a budget is given; can always be disabled); implicit prompt caching; tool use; time pricing
    tiers (a price change on 2026-07-01, from when Saturday and Sunday UTC are billed at half
    price through a protocol 1.1 pricing window: the tier's own rates are the weekday ones, so a
    1.0 kernel's figure is an upper bound).
``reference-small``
    A plain model: no thinking, no caching, no tools, one pricing tier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from protocol_py_gen.model.v1 import (
    BudgetControl,
    CachingSpec,
    EffortControl,
    ModelSpec,
    Pricing,
    PricingTier,
    PricingWindow,
    PricingWindowDayOfWeek,
    ThinkingDisable,
    ThinkingReplay,
    ThinkingSpec,
    TokenRange,
    ToolChoiceMode,
)

LARGE: Final = "reference-large"
MEDIUM: Final = "reference-medium"
SMALL: Final = "reference-small"


def _tier(
    input_rate: float,
    output_rate: float,
    *,
    cache_write: float | None = None,
    cache_read: float | None = None,
    cache_write_1h: float | None = None,
    effective_from: str | None = None,
    effective_until: str | None = None,
    input_tokens_from: int | None = None,
    input_tokens_until: int | None = None,
    windows: Sequence[PricingWindow] = (),
) -> PricingTier:
    """A tier; ``windows``: its recurring pricing windows (protocol 1.1)."""
    return PricingTier(
        input_per_mtok=input_rate,
        output_per_mtok=output_rate,
        cache_write_per_mtok=cache_write,
        cache_read_per_mtok=cache_read,
        cache_write_1h_per_mtok=cache_write_1h,
        batch_input_per_mtok=input_rate / 2,
        batch_output_per_mtok=output_rate / 2,
        effective_from=effective_from,
        effective_until=effective_until,
        input_tokens_from=input_tokens_from,
        input_tokens_until=input_tokens_until,
        windows=list(windows),
    )


def _weekend_half_price() -> PricingWindow:
    """reference-medium from 2026-07-01: Saturday and Sunday UTC at half of the weekday rates."""
    return PricingWindow(
        start_minute=0,
        end_minute=1440,
        days=[PricingWindowDayOfWeek.SATURDAY, PricingWindowDayOfWeek.SUNDAY],
        input_per_mtok=0.25,
        output_per_mtok=1.25,
        cache_write_per_mtok=0.3125,
        cache_read_per_mtok=0.025,
    )


def reference_models() -> list[ModelSpec]:
    """The three ModelSpecs the reference provider declares (see the module docstring)."""
    all_modes = [
        ToolChoiceMode.AUTO,
        ToolChoiceMode.ANY,
        ToolChoiceMode.NONE,
        ToolChoiceMode.SPECIFIC,
    ]
    large = ModelSpec(
        id=LARGE,
        context_window=1_000_000,
        max_output_tokens=64_000,
        supports_tool_use=True,
        supports_vision=True,
        supports_streaming=True,
        supports_parallel_tool_calls=False,
        supports_documents=True,
        thinking=ThinkingSpec(
            supported=True,
            effort=EffortControl(levels=["low", "medium", "high", "max"], default="high"),
            adaptive_by_default=True,
            disable=ThinkingDisable.CONDITIONAL,
            disable_allowed_efforts=["low", "medium"],
            replay=ThinkingReplay.ALL,
        ),
        caching=CachingSpec(supported=True, explicit_markers=True, implicit_automatic=True),
        pricing=Pricing(
            currency="USD",
            tiers=[
                _tier(
                    3.0,
                    15.0,
                    cache_write=3.75,
                    cache_read=0.3,
                    cache_write_1h=6.0,
                    input_tokens_until=200_000,
                ),
                _tier(
                    6.0,
                    22.5,
                    cache_write=7.5,
                    cache_read=0.6,
                    cache_write_1h=12.0,
                    input_tokens_from=200_000,
                ),
            ],
        ),
        supported_tool_choice_modes=all_modes,
    )
    medium = ModelSpec(
        id=MEDIUM,
        context_window=200_000,
        max_output_tokens=32_000,
        supports_tool_use=True,
        supports_vision=False,
        supports_streaming=True,
        supports_parallel_tool_calls=False,
        supports_documents=False,
        thinking=ThinkingSpec(
            supported=True,
            budget=BudgetControl(range=TokenRange(min=1024, max=32_000)),
            adaptive_by_default=False,
            disable=ThinkingDisable.ALWAYS,
            replay=ThinkingReplay.TOOL_TURNS,
        ),
        caching=CachingSpec(supported=True, implicit_automatic=True),
        pricing=Pricing(
            currency="USD",
            tiers=[
                _tier(0.8, 4.0, cache_write=1.0, cache_read=0.08, effective_until="2026-07-01"),
                _tier(
                    0.5,
                    2.5,
                    cache_write=0.625,
                    cache_read=0.05,
                    effective_from="2026-07-01",
                    windows=[_weekend_half_price()],
                ),
            ],
        ),
        supported_tool_choice_modes=[ToolChoiceMode.AUTO, ToolChoiceMode.NONE],
    )
    small = ModelSpec(
        id=SMALL,
        context_window=32_000,
        max_output_tokens=4_096,
        supports_tool_use=False,
        supports_vision=False,
        supports_streaming=True,
        supports_documents=False,
        thinking=ThinkingSpec(supported=False),
        caching=CachingSpec(supported=False),
        pricing=Pricing(currency="USD", tiers=[_tier(0.1, 0.4)]),
    )
    return [large, medium, small]


__all__ = ["LARGE", "MEDIUM", "SMALL", "reference_models"]
