"""Curated ModelSpecs for the built-in vendor providers (spec: "ModelSpec", "Pricing").

The Gemini models (``gemini`` and ``vertex`` providers) are in
:mod:`protocol_py.providers.gemini.models`, with their sources and dates.

Rates are USD per million tokens (input / output / cache write 5 min / cache write 1 h / cache
read; batch = 50 % of input and output where the vendor offers it). Each row names its source
page and the date the figure was read from it (through the project's reference index; the
page's own date where it shows one). Re-check before relying on a cost: vendors change prices
without notice, and a later price becomes a new tier with ``effective_from``.

OpenAI (Chat Completions). Context window = the 922,000-token input budget, max output 128,000.
Above 272,000 prompt tokens the whole request pays 2x input and cache rates and 1.5x output (a
second prompt-size tier). Effort ladder ``none < low < medium < high < xhigh < max`` (default
medium); gpt-6.2-sol rejects ``none`` (so reasoning cannot be turned off).

================  =====  ======  ======  ====  ======  ===================================
model             input  output  cw 5m   cw1h  read    source, date read
================  =====  ======  ======  ====  ======  ===================================
gpt-6.2-sol       2.00   10.00   2.50    -     0.10    developers.openai.com/api/docs/models/
                                                       gpt-6.2-sol, 2026-11-29
gpt-6-sol         2.00   10.00   2.50    -     0.20    developers.openai.com/api/docs/pricing
                                                       (launch 2026-09-22), 2026-11-29
gpt-6-luna        0.10   0.50    0.125   -     0.01    same page, 2026-11-29
================  =====  ======  ======  ====  ======  ===================================

DeepSeek (``https://api-docs.deepseek.com/quick_start/pricing``, page checked 2026-11-15).
Context 1,000,000, max output 384,000; thinking on by default, switchable off; reasoning must be
replayed on tool-calling turns (THINKING_REPLAY_TOOL_TURNS). Cache writes carry no premium
(billed as cache-miss input). Peak and off-peak (protocol 1.1 pricing windows): the rates below
are the peak (list) rates, billed 01:00-04:00 and 06:00-10:00 UTC, Monday to Friday (09:00-12:00
and 14:00-18:00 Beijing time: the UTC day and the Beijing day agree inside these windows); every
other minute is off-peak at half of every rate. The tier carries the peak rates (what a 1.0
kernel, which ignores windows, bills: an upper bound) and its windows are the off-peak
complement with the half rates: 00:00-01:00, 04:00-06:00 and 10:00-24:00 UTC Monday to Friday,
and all of Saturday and Sunday UTC. Source of the schedule and the half rate:
the DeepSeek provider worker's curated catalog, snapshot of api-docs.deepseek.com taken
2026-09-10 (``../shared/spec/reference-provider-deepseek.txt``, "Catalog"), matching case B20;
the shared material holds no later off-peak figures, so re-check both before relying on a cost.

================  =====  ======  ======  ====  ======  =================================
model             input  output  cw      cw1h  read    off-peak (input/output/cw/read)
================  =====  ======  ======  ====  ======  =================================
deepseek-flash    0.30   1.20    0.30    -     0.006   0.15 / 0.60 / 0.15 / 0.003
deepseek-v4-pro   1.32   3.96    1.32    -     0.044   0.66 / 1.98 / 0.66 / 0.022
================  =====  ======  ======  ====  ======  =================================

Anthropic (``https://platform.claude.com/docs/en/about-claude/pricing`` and the model pages,
read 2026-11-29; effort guide ``/docs/en/build-with-claude/effort``). 5.x models: context
1,000,000, max output 128,000, adaptive thinking with effort ``low < medium < high < xhigh <
max``; Fable 5.1, Opus 5.5 and Sonnet 5.5 cannot switch thinking off through
``thinking.type = disabled`` (declared NEVER), Haiku 5.5 can at effort high or lower.

=================  =====  ======  =====  =====  =====  ==========================================
model              input  output  cw 5m  cw 1h  read   note
=================  =====  ======  =====  =====  =====  ==========================================
claude-fable-5-1   10.00  50.00   12.50  20.00  0.25
claude-opus-5-5    4.00   20.00   5.00   8.00   0.20   default effort medium
claude-sonnet-5-5  2.00   10.00   2.50   4.00   0.20   read 0.10 from 2026-10-07 (time tier)
claude-haiku-5-5   0.10   0.50    0.125  0.20   0.01   prompts >= 100,000 tokens: 0.50 / 2.50 /
                                                       0.625 / 1.00 / 0.05 (size tier)
claude-haiku-4-5   1.00   5.00    1.25   2.00   0.10   200K context, 64K output, budget thinking
                                                       1,024..63,999 tokens
=================  =====  ======  =====  =====  =====  ==========================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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

__all__ = [
    "anthropic_models",
    "deepseek_models",
    "discovered_model",
    "openai_models",
]

_ALL_CHOICES = [
    ToolChoiceMode.AUTO,
    ToolChoiceMode.ANY,
    ToolChoiceMode.NONE,
    ToolChoiceMode.SPECIFIC,
]


@dataclass(frozen=True, slots=True)
class _Rates:
    """One tier's rates in USD per million tokens."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    cache_write_1h: float | None = None
    batch: bool = True


def _tier(
    rates: _Rates,
    *,
    since: str | None = None,
    until: str | None = None,
    tokens_from: int | None = None,
    tokens_until: int | None = None,
    windows: Sequence[PricingWindow] = (),
) -> PricingTier:
    return PricingTier(
        effective_from=since,
        effective_until=until,
        input_per_mtok=rates.input,
        output_per_mtok=rates.output,
        cache_write_per_mtok=rates.cache_write,
        cache_read_per_mtok=rates.cache_read,
        cache_write_1h_per_mtok=rates.cache_write_1h,
        batch_input_per_mtok=rates.input / 2 if rates.batch else None,
        batch_output_per_mtok=rates.output / 2 if rates.batch else None,
        input_tokens_from=tokens_from,
        input_tokens_until=tokens_until,
        windows=list(windows),
    )


def _size_tiers(short: _Rates, long: _Rates, threshold: int) -> list[PricingTier]:
    return [_tier(short, tokens_until=threshold), _tier(long, tokens_from=threshold)]


def _spec(
    model_id: str,
    *,
    context: int,
    output: int,
    thinking: ThinkingSpec,
    caching: CachingSpec,
    tiers: Sequence[PricingTier],
    vision: bool = True,
    documents: bool = False,
) -> ModelSpec:
    return ModelSpec(
        id=model_id,
        context_window=context,
        max_output_tokens=output,
        supports_tool_use=True,
        supports_vision=vision,
        supports_streaming=True,
        supports_parallel_tool_calls=True,
        thinking=thinking,
        caching=caching,
        pricing=Pricing(currency="USD", tiers=list(tiers)),
        supported_tool_choice_modes=list(_ALL_CHOICES),
        supports_documents=documents,
    )


# --- OpenAI ----------------------------------------------------------------------------------

_OPENAI_CACHE = CachingSpec(supported=True, implicit_automatic=True)


def _openai_thinking(levels: list[str], default: str) -> ThinkingSpec:
    return ThinkingSpec(
        supported=True,
        effort=EffortControl(levels=levels, default=default),
        adaptive_by_default=True,
        disable=ThinkingDisable.ALWAYS if "none" in levels else ThinkingDisable.NEVER,
        replay=ThinkingReplay.OMIT,
    )


def _openai_rates(inp: float, out: float, read: float, write: float) -> list[PricingTier]:
    return _size_tiers(
        _Rates(inp, out, write, read),
        _Rates(inp * 2, out * 1.5, write * 2, read * 2),
        272_000,
    )


def openai_models() -> list[ModelSpec]:
    """OpenAI Chat Completions models (context window = the 922,000-token input budget)."""
    full = ["none", "low", "medium", "high", "xhigh", "max"]
    no_none = ["low", "medium", "high", "xhigh", "max"]
    return [
        _spec(
            "gpt-6.2-sol",
            context=922_000,
            output=128_000,
            thinking=_openai_thinking(no_none, "medium"),
            caching=_OPENAI_CACHE,
            tiers=_openai_rates(2.00, 10.00, 0.10, 2.50),
            documents=True,
        ),
        _spec(
            "gpt-6-sol",
            context=922_000,
            output=128_000,
            thinking=_openai_thinking(full, "medium"),
            caching=_OPENAI_CACHE,
            tiers=_openai_rates(2.00, 10.00, 0.20, 2.50),
            documents=True,
        ),
        _spec(
            "gpt-6-luna",
            context=922_000,
            output=128_000,
            thinking=_openai_thinking(full, "medium"),
            caching=_OPENAI_CACHE,
            tiers=_openai_rates(0.10, 0.50, 0.01, 0.125),
            documents=True,
        ),
    ]


# --- DeepSeek --------------------------------------------------------------------------------

_DEEPSEEK_THINKING = ThinkingSpec(
    supported=True,
    effort=EffortControl(levels=["high", "max"], default="high"),
    adaptive_by_default=True,
    disable=ThinkingDisable.ALWAYS,
    replay=ThinkingReplay.TOOL_TURNS,
)


_WEEKDAYS = [
    PricingWindowDayOfWeek.MONDAY,
    PricingWindowDayOfWeek.TUESDAY,
    PricingWindowDayOfWeek.WEDNESDAY,
    PricingWindowDayOfWeek.THURSDAY,
    PricingWindowDayOfWeek.FRIDAY,
]
_WEEKEND = [PricingWindowDayOfWeek.SATURDAY, PricingWindowDayOfWeek.SUNDAY]


# DeepSeek's off-peak windows in UTC minutes after midnight: the complement of the peak hours
# 01:00-04:00 and 06:00-10:00 Monday to Friday, that is 00:00-01:00, 04:00-06:00 and
# 10:00-24:00 on weekdays, and the whole of Saturday and Sunday.
_DEEPSEEK_OFF_PEAK: tuple[tuple[int, int, list[PricingWindowDayOfWeek]], ...] = (
    (0, 60, _WEEKDAYS),
    (240, 360, _WEEKDAYS),
    (600, 1440, _WEEKDAYS),
    (0, 1440, _WEEKEND),
)


def _deepseek_tiers(peak: _Rates) -> list[PricingTier]:
    """One tier at the peak rates, with DeepSeek's off-peak UTC windows at half of every rate."""
    return [
        _tier(
            peak,
            windows=[
                PricingWindow(
                    start_minute=lo,
                    end_minute=hi,
                    days=list(days),
                    input_per_mtok=peak.input / 2,
                    output_per_mtok=peak.output / 2,
                    cache_write_per_mtok=peak.cache_write / 2,
                    cache_read_per_mtok=peak.cache_read / 2,
                )
                for lo, hi, days in _DEEPSEEK_OFF_PEAK
            ],
        )
    ]


def deepseek_models() -> list[ModelSpec]:
    """DeepSeek models: peak rates with off-peak UTC windows (see the module docstring)."""
    cache = CachingSpec(supported=True, implicit_automatic=True)
    return [
        _spec(
            "deepseek-flash",
            context=1_000_000,
            output=384_000,
            thinking=_DEEPSEEK_THINKING,
            caching=cache,
            tiers=_deepseek_tiers(_Rates(0.30, 1.20, 0.30, 0.006, batch=False)),
            vision=True,
        ),
        _spec(
            "deepseek-v4-pro",
            context=1_000_000,
            output=384_000,
            thinking=_DEEPSEEK_THINKING,
            caching=cache,
            tiers=_deepseek_tiers(_Rates(1.32, 3.96, 1.32, 0.044, batch=False)),
            vision=False,
        ),
    ]


# --- Anthropic -------------------------------------------------------------------------------

_ANTHROPIC_CACHE = CachingSpec(supported=True, explicit_markers=True)
_LADDER = ["low", "medium", "high", "xhigh", "max"]


def _adaptive(
    default: str, disable: ThinkingDisable, allowed: list[str] | None = None
) -> ThinkingSpec:
    return ThinkingSpec(
        supported=True,
        effort=EffortControl(levels=list(_LADDER), default=default),
        adaptive_by_default=True,
        disable=disable,
        disable_allowed_efforts=allowed or [],
        replay=ThinkingReplay.ALL,
    )


def anthropic_models() -> list[ModelSpec]:
    """Anthropic Messages models."""
    return [
        _spec(
            "claude-fable-5-1",
            context=1_000_000,
            output=128_000,
            thinking=_adaptive("high", ThinkingDisable.NEVER),
            caching=_ANTHROPIC_CACHE,
            tiers=[_tier(_Rates(10.00, 50.00, 12.50, 0.25, 20.00))],
            documents=True,
        ),
        _spec(
            "claude-opus-5-5",
            context=1_000_000,
            output=128_000,
            thinking=_adaptive("medium", ThinkingDisable.NEVER),
            caching=_ANTHROPIC_CACHE,
            tiers=[_tier(_Rates(4.00, 20.00, 5.00, 0.20, 8.00))],
            documents=True,
        ),
        _spec(
            "claude-sonnet-5-5",
            context=1_000_000,
            output=128_000,
            thinking=_adaptive("high", ThinkingDisable.NEVER),
            caching=_ANTHROPIC_CACHE,
            tiers=[
                _tier(_Rates(2.00, 10.00, 2.50, 0.20, 4.00), until="2026-10-07"),
                _tier(_Rates(2.00, 10.00, 2.50, 0.10, 4.00), since="2026-10-07"),
            ],
            documents=True,
        ),
        _spec(
            "claude-haiku-5-5",
            context=1_000_000,
            output=128_000,
            thinking=_adaptive("medium", ThinkingDisable.CONDITIONAL, ["low", "medium", "high"]),
            caching=_ANTHROPIC_CACHE,
            tiers=_size_tiers(
                _Rates(0.10, 0.50, 0.125, 0.01, 0.20),
                _Rates(0.50, 2.50, 0.625, 0.05, 1.00),
                100_000,
            ),
            documents=True,
        ),
        _spec(
            "claude-haiku-4-5",
            context=200_000,
            output=64_000,
            thinking=ThinkingSpec(
                supported=True,
                budget=BudgetControl(range=TokenRange(min=1024, max=63_999)),
                adaptive_by_default=False,
                disable=ThinkingDisable.ALWAYS,
                replay=ThinkingReplay.ALL,
            ),
            caching=_ANTHROPIC_CACHE,
            tiers=[_tier(_Rates(1.00, 5.00, 1.25, 0.10, 2.00))],
            documents=True,
        ),
    ]


def discovered_model(model_id: str, *, priced_like: Sequence[ModelSpec] | None) -> ModelSpec:
    """Conservative defaults for a model id the upstream lists but the catalog does not know.

    Context 32,768 and output 4,096 tokens, no tool use, no vision or documents, no reasoning
    controls, no caching. Pricing: with ``priced_like`` (the vendor's own endpoint), the highest
    input and output rates of those specs (an upper bound); without it (a self-hosted server
    such as vLLM or Ollama), ``free``.
    """
    tiers = [t for s in priced_like or () if s.pricing is not None for t in s.pricing.tiers]
    if tiers:
        top_in = max(t.input_per_mtok for t in tiers)
        top_out = max(t.output_per_mtok for t in tiers)
        pricing = Pricing(
            currency="USD",
            tiers=[PricingTier(input_per_mtok=top_in, output_per_mtok=top_out)],
        )
    else:
        pricing = Pricing(currency="USD", free=True)
    return ModelSpec(
        id=model_id,
        context_window=32_768,
        max_output_tokens=4_096,
        supports_tool_use=False,
        supports_vision=False,
        supports_streaming=True,
        thinking=ThinkingSpec(supported=False, disable=ThinkingDisable.NEVER),
        caching=CachingSpec(supported=False),
        pricing=pricing,
        supported_tool_choice_modes=[],
        supports_documents=False,
    )
