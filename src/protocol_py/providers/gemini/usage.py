"""Gemini ``usageMetadata`` -> Usage (docs/adapters.md "Gemini", usage table).

Gemini counts (ai.google.dev/api/generate-content#UsageMetadata): ``promptTokenCount``
includes ``cachedContentTokenCount``; ``thoughtsTokenCount`` is outside
``candidatesTokenCount``; ``toolUsePromptTokenCount`` (results of server-side tools) is
prompt input outside ``promptTokenCount``; ``totalTokenCount`` = prompt + candidates +
toolUsePrompt + thoughts. The disjoint protocol categories (docs/decisions.md#d7):

- ``input_tokens`` = prompt - cached + toolUsePrompt (the cached part never twice);
- ``cache_read_tokens`` = cached, when sent (implicit hits and explicit ``cachedContents``);
- ``output_tokens`` = candidates (0 when absent: nothing generated);
- ``reasoning_tokens`` = thoughts, billed on top of output (``reasoning_already_counted``
  unset), unless the total shows the older convention (total = prompt + candidates +
  toolUsePrompt: thoughts inside candidates), which sets it true;
- ``vendor_total_tokens`` only when the total matches neither form;
- components: ``tool_use_prompt_tokens`` and one ``<kind>_<modality>_tokens`` counter per
  non-TEXT modality of ``promptTokensDetails`` (prompt), ``cacheTokensDetails`` (cache),
  ``candidatesTokensDetails`` (candidates) and ``toolUsePromptTokensDetails``
  (tool_use_prompt), sorted by name.

Explicit caching: the completion that created a ``cachedContents`` entry (the adapter's own
side call, :mod:`protocol_py.providers.gemini.caching`) also carries what creating it cost:
``cache_write_tokens`` = the cache's ``totalTokenCount`` (those tokens are then not counted as
a cache read of this completion, so the prompt size of docs/decisions.md#d9 stays the vendor's
prompt), and
``cache_storage_token_seconds`` = tokens x the TTL set (protocol 1.2, docs/decisions.md#d29).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from protocol_py.providers.http import events as ev
from protocol_py_gen.model.v1 import Usage, UsageComponent

__all__ = ["COUNT_KEYS", "CacheCharge", "has_counts", "map_gemini_usage"]

COUNT_KEYS: Final = (
    "promptTokenCount",
    "cachedContentTokenCount",
    "candidatesTokenCount",
    "toolUsePromptTokenCount",
    "thoughtsTokenCount",
    "totalTokenCount",
)
"""The ``usageMetadata`` members that are token counts; an object with none of them (Vertex's
first events carry only ``trafficType``) reports no usage."""

_DETAILS: Final = (
    ("promptTokensDetails", "prompt"),
    ("cacheTokensDetails", "cache"),
    ("candidatesTokensDetails", "candidates"),
    ("toolUsePromptTokensDetails", "tool_use_prompt"),
)


@dataclass(frozen=True, slots=True)
class CacheCharge:
    """A ``cachedContents`` entry the adapter created for this completion.

    Attributes:
        tokens: The cache's ``usageMetadata.totalTokenCount``.
        ttl_seconds: The lifetime set at creation, in seconds.
    """

    tokens: int
    ttl_seconds: int


def has_counts(raw: Mapping[str, Any]) -> bool:
    """Whether a ``usageMetadata`` object holds any token count."""
    return any(raw.get(key) is not None for key in COUNT_KEYS)


def _components(raw: Mapping[str, Any], tool_use: int | None) -> list[UsageComponent]:
    out: dict[str, int] = {}
    if tool_use is not None:
        out["tool_use_prompt_tokens"] = tool_use
    for key, kind in _DETAILS:
        details = raw.get(key)
        if not isinstance(details, list):
            continue
        for entry in details:
            if not isinstance(entry, dict):
                continue
            modality = entry.get("modality")
            if not isinstance(modality, str) or not modality or modality == "TEXT":
                continue
            count = ev.usage_count(entry, "tokenCount", f"usageMetadata.{key}[].tokenCount")
            if count is None:
                continue
            name = f"{kind}_{modality.lower()}_tokens"
            out[name] = out.get(name, 0) + count
    return [UsageComponent(name=name, value=out[name]) for name in sorted(out)]


def map_gemini_usage(raw: Mapping[str, Any], cache: CacheCharge | None = None) -> Usage:
    """Map one ``usageMetadata`` object (the last one that had counts) to a Usage.

    Counts go through :func:`~protocol_py.providers.http.events.usage_count` (a negative,
    fractional or non-numeric figure is dropped with a warning). A cached count above the
    prompt count is kept as the cache read and the input is 0 (never negative).
    """
    prompt = ev.usage_count(raw, "promptTokenCount", "usageMetadata.promptTokenCount") or 0
    cached = ev.usage_count(raw, "cachedContentTokenCount", "usageMetadata.cachedContentTokenCount")
    candidates = ev.usage_count(raw, "candidatesTokenCount", "usageMetadata.candidatesTokenCount")
    tool_use = ev.usage_count(
        raw, "toolUsePromptTokenCount", "usageMetadata.toolUsePromptTokenCount"
    )
    thoughts = ev.usage_count(raw, "thoughtsTokenCount", "usageMetadata.thoughtsTokenCount")
    total = ev.usage_count(raw, "totalTokenCount", "usageMetadata.totalTokenCount")
    output = candidates or 0
    input_tokens = max(0, prompt - (cached or 0)) + (tool_use or 0)
    on_top = prompt + output + (tool_use or 0) + (thoughts or 0)
    inside = prompt + output + (tool_use or 0)
    already: bool | None = None
    vendor_total: int | None = None
    if total is not None and total != on_top:
        if thoughts and total == inside:
            already = True  # the older convention: thoughts inside candidatesTokenCount
        else:
            vendor_total = total
    reasoning = thoughts
    if already:
        reasoning = ev.counted_reasoning(output, thoughts, "usageMetadata.thoughtsTokenCount")
        if reasoning is None:
            already = None
    cache_read = cached
    cache_write: int | None = None
    storage: int | None = None
    if cache is not None:
        cache_write = cache.tokens
        cache_read = max(0, (cached or 0) - cache.tokens)
        storage = cache.tokens * cache.ttl_seconds
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=reasoning,
        reasoning_already_counted=already,
        vendor_total_tokens=vendor_total,
        components=_components(raw, tool_use),
        cache_storage_token_seconds=storage,
    )
