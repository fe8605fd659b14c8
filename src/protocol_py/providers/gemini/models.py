"""Curated ModelSpecs of the ``gemini`` and ``vertex`` providers (spec: "ModelSpec", "Pricing").

Shared by every model below: context window 1,048,576 tokens, output limit 65,536 tokens; tool
use, parallel calls, vision and documents; all four tool-choice modes; stop sequences (detected
by the adapter, at most :data:`MAX_STOP_SEQUENCES`); caching on both axes: implicit (Gemini
2.5 and later cache transparently; hits are reported as ``cachedContentTokenCount``) and explicit
breakpoints served through ``cachedContents`` (lifetime 3,600 s by default, or one of
:data:`BREAKPOINT_TTLS` on the breakpoint). Thinking replay is left UNSPECIFIED: the adapter's
rule applies (signatures go back on the part they came from; unsigned thought summaries are not
sent; docs/adapters.md "Gemini").

Thinking controls (Google's thinking guide, ai.google.dev/gemini-api/docs/thinking, and the
Vertex "Gemini 3" model pages, as quoted in the issue threads the workspace's Gemini vendor
notes list):

=========================  ============================================  ===========  ==========
model                      control                                       default      off
=========================  ============================================  ===========  ==========
gemini-2.5-pro             budget 128..32,768                            dynamic      never
gemini-2.5-flash           budget 0..24,576                              dynamic      yes (0)
gemini-2.5-flash-lite      budget 512..24,576                            off          yes (0)
gemini-3-pro-preview,      level low, high                               high         never
gemini-3.1-pro-preview
gemini-3-flash-preview     level minimal, low, medium, high              high         never
=========================  ============================================  ===========  ==========

Gemini 3 still accepts a budget "for backwards compatibility" and answers 400 to a request with
both; only the level is declared, so the kernel's validation refuses a budget there.

Prices, USD per million tokens (input / output / cache read; cache storage per million tokens
per hour; batch = 50 % of input and output), read 2026-12-01, each from a secondary source, as
the provenance column says: none was checked against the live pricing page
(ai.google.dev/gemini-api/docs/pricing), which this workplace cannot reach, and the stored
copies of Google's caching pages (ai.google.dev/gemini-api/docs/caching; the Vertex AI
context-cache overview) say storage is billed per hour of lifetime without giving a rate.

- ``genai-prices``: pydantic/genai-prices ``prices/providers/google.yml`` at 47df840 (prices
  checked there between 2025-10-31 and 2026-05): every input, output and cache-read rate.
- ``forum``: the storage rates of 2.5 Pro (4.50) and 2.5 Flash (1.00), from a
  discuss.ai.google.dev thread quoting the pricing page.
- ``assumed``: the storage rates of 2.5 Flash-Lite, 3 / 3.1 Pro and 3 Flash are in none of
  those sources; they are set equal to the rate of the 2.5 model of the same tier (Pro 4.50,
  Flash and Flash-Lite 1.00) so that a cost is never silently zero, and are the first to
  check before a release.

=========================  ============  ==============  ============  =======  ================
model                      input         output          cache read    storage  storage source
=========================  ============  ==============  ============  =======  ================
gemini-2.5-pro             1.25 / 2.50   10.00 / 15.00   0.125 / 0.25  4.50     forum
gemini-2.5-flash           0.30          2.50            0.03          1.00     forum
gemini-2.5-flash-lite      0.10          0.40            0.01          1.00     assumed
gemini-3(.1)-pro-preview   2.00 / 4.00   12.00 / 18.00   0.20 / 0.40   4.50     assumed
gemini-3-flash-preview     0.50          3.00            0.05          1.00     assumed
=========================  ============  ==============  ============  =======  ================

The Pro rows have two tiers: below / from a prompt of 200,000 tokens. 2.5 Flash bills audio
input at 1.00 (no rate slot, below).

The >= 200,000-token tier applies to the whole request (input, output and cache rates). The
cache-write rate is input + cache read: the completion that creates a ``cachedContents`` entry
reports its tokens as ``cache_write_tokens`` (billed at the input price when created) instead of
as a cache read of the same call, so one write token costs both (docs/adapters.md "Gemini",
"Caching"). Audio input of 2.5 Flash (1.00) has no rate slot (one input rate per tier); its
counts arrive as ``prompt_audio_tokens`` components.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from protocol_py_gen.model.v1 import (
    BudgetControl,
    CachingSpec,
    EffortControl,
    ModelSpec,
    Pricing,
    PricingTier,
    ThinkingDisable,
    ThinkingReplay,
    ThinkingSpec,
    TokenRange,
    ToolChoiceMode,
)

__all__ = [
    "BREAKPOINT_TTLS",
    "DEFAULT_CACHE_TTL_S",
    "LONG_PROMPT_TOKENS",
    "MAX_STOP_SEQUENCES",
    "gemini_models",
]

CONTEXT_WINDOW: Final = 1_048_576
"""Input budget of every curated model, tokens."""

MAX_OUTPUT: Final = 65_536
"""Output limit of every curated model, tokens (it caps thoughts and answer together)."""

LONG_PROMPT_TOKENS: Final = 200_000
"""Prompt size from which the Pro models bill the whole request at the higher rates, tokens."""

MAX_STOP_SEQUENCES: Final = 16
"""Most stop sequences one request may carry (the adapter scans every answer delta for each)."""

DEFAULT_CACHE_TTL_S: Final = 3600
"""Lifetime of an explicit cache when the breakpoint names none (Google's default), seconds."""

BREAKPOINT_TTLS: Final = (300, 3600, 86_400)
"""The lifetimes a breakpoint may request, seconds (five minutes, one hour, one day)."""


@dataclass(frozen=True, slots=True)
class _Rates:
    input: float
    output: float
    cache_read: float
    cache_write: float  # input + cache_read, written out (the sum of two doubles is not)
    storage: float  # per million tokens per hour; see the module docstring for its provenance


def _tier(rates: _Rates, *, since: int | None = None, until: int | None = None) -> PricingTier:
    return PricingTier(
        input_per_mtok=rates.input,
        output_per_mtok=rates.output,
        cache_write_per_mtok=rates.cache_write,
        cache_read_per_mtok=rates.cache_read,
        batch_input_per_mtok=rates.input / 2,
        batch_output_per_mtok=rates.output / 2,
        input_tokens_from=since,
        input_tokens_until=until,
        cache_storage_per_mtok_hour=rates.storage,
    )


def _tiers(short: _Rates, long: _Rates | None = None) -> list[PricingTier]:
    if long is None:
        return [_tier(short)]
    return [_tier(short, until=LONG_PROMPT_TOKENS), _tier(long, since=LONG_PROMPT_TOKENS)]


def _budget(low: int, high: int, *, adaptive: bool, off: bool) -> ThinkingSpec:
    return ThinkingSpec(
        supported=True,
        budget=BudgetControl(range=TokenRange(min=low, max=high)),
        adaptive_by_default=adaptive,
        disable=ThinkingDisable.ALWAYS if off else ThinkingDisable.NEVER,
        replay=ThinkingReplay.UNSPECIFIED,
    )


def _levels(levels: Sequence[str]) -> ThinkingSpec:
    return ThinkingSpec(
        supported=True,
        effort=EffortControl(levels=list(levels), default="high"),
        adaptive_by_default=True,
        disable=ThinkingDisable.NEVER,
        replay=ThinkingReplay.UNSPECIFIED,
    )


def _spec(model_id: str, thinking: ThinkingSpec, tiers: list[PricingTier]) -> ModelSpec:
    return ModelSpec(
        id=model_id,
        context_window=CONTEXT_WINDOW,
        max_output_tokens=MAX_OUTPUT,
        supports_tool_use=True,
        supports_vision=True,
        supports_streaming=True,
        supports_parallel_tool_calls=True,
        thinking=thinking,
        caching=CachingSpec(
            supported=True,
            explicit_markers=True,
            implicit_automatic=True,
            breakpoint_ttl_seconds=list(BREAKPOINT_TTLS),
            default_ttl_seconds=DEFAULT_CACHE_TTL_S,
        ),
        pricing=Pricing(currency="USD", tiers=tiers),
        supported_tool_choice_modes=[
            ToolChoiceMode.AUTO,
            ToolChoiceMode.ANY,
            ToolChoiceMode.NONE,
            ToolChoiceMode.SPECIFIC,
        ],
        supports_documents=True,
        supports_stop_sequences=True,
        max_stop_sequences=MAX_STOP_SEQUENCES,
    )


def gemini_models() -> list[ModelSpec]:
    """The curated Gemini 2.5 and 3 models (module docstring), the same on both APIs."""

    def pro3() -> list[PricingTier]:  # storage 4.50 assumed (module docstring)
        return _tiers(_Rates(2.00, 12.00, 0.20, 2.20, 4.50), _Rates(4.00, 18.00, 0.40, 4.40, 4.50))

    return [
        _spec(
            "gemini-2.5-pro",
            _budget(128, 32_768, adaptive=True, off=False),
            _tiers(_Rates(1.25, 10.00, 0.125, 1.375, 4.50), _Rates(2.50, 15.00, 0.25, 2.75, 4.50)),
        ),
        _spec(
            "gemini-2.5-flash",
            _budget(0, 24_576, adaptive=True, off=True),
            _tiers(_Rates(0.30, 2.50, 0.03, 0.33, 1.00)),
        ),
        _spec(
            "gemini-2.5-flash-lite",
            _budget(512, 24_576, adaptive=False, off=True),
            _tiers(_Rates(0.10, 0.40, 0.01, 0.11, 1.00)),  # storage 1.00 assumed
        ),
        _spec("gemini-3-pro-preview", _levels(["low", "high"]), pro3()),
        _spec("gemini-3.1-pro-preview", _levels(["low", "high"]), pro3()),
        _spec(
            "gemini-3-flash-preview",
            _levels(["minimal", "low", "medium", "high"]),
            _tiers(_Rates(0.50, 3.00, 0.05, 0.55, 1.00)),  # storage 1.00 assumed
        ),
    ]
