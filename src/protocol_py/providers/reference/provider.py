"""The built-in offline provider ``reference``: deterministic, no network, every event kind.

It is the embedded default of ``protocol-py serve`` and the provider the test suite runs the
server adapter against. It declares three models that pass capability validation:

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

Behaviour (all deterministic for a given request and cache state):

* Tokenizer: :func:`tokenize` splits text into runs of word characters, runs of whitespace and
  single other characters; the tokens concatenate back to the text. The prompt is rendered to
  text segment by segment (context sections, the tool list, each message; see
  :func:`prompt_segments`) and its token count is what CountTokens answers (method TOKENIZER)
  and what ``usage`` reports as the prompt size (``input_tokens + cache_read_tokens +
  cache_write_tokens``).
* Prompt caching (caching models only): an in-process cache of prompt prefixes (hash chains
  over segments, at most 4,096 entries, least recently used evicted). The cacheable prefix is
  everything up to the furthest cache breakpoint when the model takes explicit markers and the
  request places some, otherwise every segment but the last message. Tokens of the longest
  previously seen prefix are reported as ``cache_read_tokens``, the rest of the cacheable
  prefix as ``cache_write_tokens``, and the remainder as ``input_tokens`` (DESIGN D7).
* Thinking: ``reference-large`` thinks unless ``disable_thinking`` is true (more sentences at
  higher effort); ``reference-medium`` thinks only with ``thinking_budget_tokens`` (truncated to
  the budget). Thinking deltas are followed by a ``thinking_signature``
  (``b"refsig:" + sha256 hex``). When the model reasoned this turn, ``usage.reasoning_tokens``
  is the thinking token count and ``reasoning_already_counted`` is true (output tokens include
  it); when it did not (no budget, thinking disabled, no thinking support) both are unset.
* Tool call trigger: when tools are declared, the model supports tool use, tool choice is not
  NONE, and the last user message's text contains ``use tool`` (any case) or names a declared
  tool as a word, or tool choice is ANY/SPECIFIC. The tool is the SPECIFIC one, else the first
  one named in the text, else the first declared. Its arguments are built from the tool's input
  schema (each property gets a value of its type; an ``enum`` gets its first value) and are
  streamed as JSON fragments of 7 characters; the stop reason is TOOL_USE. A last user message
  carrying a ``tool_result`` is answered with a summary of the result.
* Signed tool calls (protocol 1.1, per-call vendor data): when the last user message contains
  ``signed tool`` (any case) the tool call trigger fires as for ``use tool``, and the call (id
  ``toolu_refsig_...``) carries one ``VendorData`` on its ``tool_call_start`` at location
  :data:`SIGNATURE_LOCATION` (value ``b"refcall:" + sha256 hex``). Like Gemini 3, the provider
  requires it back: a request whose history holds a ``toolu_refsig_`` tool_use block without
  that exact entry fails with INVALID_REQUEST naming the block.
* Paused turns (protocol 1.1): when the last user message contains ``pause turn`` (any case)
  and no tool call or stop sequence applies, the answer stops halfway with
  ``Stop{PAUSE_TURN, model_affirmed, vendor_reason "pause_turn"}``. A request ending with that
  paused assistant message (sent back as is, no message after it) continues the same turn:
  the rest of the answer, no new thinking, END_TURN.
* Stop sequences: the first position in the answer text where any stop sequence starts ends
  the text just before it, with ``Stop{STOP_SEQUENCE, matched_stop_sequence}`` (no tool call).
* ``max_output_tokens`` (the request's, else the configured ``max_tokens``, else the model's):
  thinking and text are cut at the limit with ``Stop{MAX_TOKENS}``; a tool call whose arguments
  do not fit is not started.
* Configuration (:data:`CONFIG_SCHEMA`, ``additionalProperties: false`` at every level):
  ``api_key`` (accepted, never used or shown), ``base_url`` (an ``uri``, reported in stream
  metadata ``attrs`` with its userinfo and query values replaced by ``***``), ``max_tokens``
  (integer cap on output), ``pace_tokens_per_second`` (number > 0: sleep between deltas, for
  demos), and ``simulate_error`` ``{kind, after_events}`` (end every stream with that ModelError
  after that many events, for testing a kernel's error handling).
* Render: payload type ``reference.echo`` (the payload as UTF-8 text) and ``reference.repeat``
  (JSON ``{"text": str, "times": int}``, ``times >= 0``, at most :data:`MAX_RENDER_CHARS`
  characters: the text repeated, a test aid for reply sizes), answered in the requested format
  (Markdown: ASCII punctuation backslash-escaped; otherwise plain text).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import operator
import re
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import betterproto2

from protocol_py.bounded_text import quote_value
from protocol_py.codec import wire
from protocol_py.codec.structs import dumps, from_struct, to_struct
from protocol_py.provider import JSONValue, Provider, ProviderError
from protocol_py.providers.http.url import redact_url
from protocol_py.server.offload import OFFLOAD_MIN_BYTES, run_cpu
from protocol_py.version import PACKAGE_VERSION
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, ContextSection, Message, Role, VendorData
from protocol_py_gen.model.v1 import (
    BudgetControl,
    CachingSpec,
    Capabilities,
    CountTokensRequest,
    CountTokensResponse,
    EffortControl,
    ErrorKind,
    ModelError,
    ModelSpec,
    Pricing,
    PricingTier,
    PricingWindow,
    PricingWindowDayOfWeek,
    RenderFormat,
    RenderRequest,
    RenderResponse,
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    StreamMetadata,
    StreamStart,
    TextDelta,
    ThinkingDelta,
    ThinkingDisable,
    ThinkingReplay,
    ThinkingSignature,
    ThinkingSpec,
    TokenCountMethod,
    TokenRange,
    ToolCallDelta,
    ToolCallDone,
    ToolCallStart,
    ToolChoiceMode,
    ToolDeclaration,
    Usage,
)

LARGE: Final = "reference-large"
MEDIUM: Final = "reference-medium"
SMALL: Final = "reference-small"

FRAGMENT_CHARS: Final = 7
"""Size of each streamed tool-argument fragment, in characters."""

TOKENS_PER_DELTA: Final = 3
"""Tokens per text or thinking delta."""

CACHE_ENTRIES: Final = 4096
"""Capacity of the in-process prompt-prefix cache (entries, LRU)."""

CACHE_BYTES: Final = 1024 * 1024
"""Most bytes the prompt-prefix cache holds (1 MiB), each entry counted as its key (the model
id, a NUL and a 32-byte SHA-256 digest) plus :data:`CACHE_ENTRY_OVERHEAD_BYTES`; the least
recently used entries are dropped first. Model ids come from the provider's own model list,
so entries are small and :data:`CACHE_ENTRIES` is usually the bound reached first."""

CACHE_ENTRY_OVERHEAD_BYTES: Final = 120
"""Bytes one prompt-prefix cache entry holds besides its key's contents: the bytes object's
header, the OrderedDict node and the dict slot (CPython 3.11, 64-bit)."""

_TOKEN_RE: Final = re.compile(r"\w+|\s+|[^\w\s]", re.UNICODE)

MAX_RENDER_CHARS: Final = 64 * 1024 * 1024
"""Largest ``reference.repeat`` result, in characters (64 Mi: enough to exceed the default
maximum message size, so reply limits stay testable)."""

MARKDOWN_ESCAPE_CHUNK_CHARS: Final = 32 * 1024
"""Characters escaped in one uninterrupted step of a Markdown render (32 Ki: a few milliseconds
of the interpreter even when every character is punctuation). Between steps the worker thread
checks whether the call was cancelled (deadline or cancel) and lets the event loop run."""

_MARKDOWN_TABLE: Final[dict[int, str]] = {
    c: "\\" + chr(c) for c in range(0x21, 0x7F) if not chr(c).isalnum()
}


def markdown_escape(text: str) -> str:
    """``text`` as CommonMark that displays literally: every ASCII punctuation character is
    backslash-escaped."""
    return text.translate(_MARKDOWN_TABLE)


_ONE_OBJECT_JOB: Final = OFFLOAD_MIN_BYTES
"""Size hint given to :func:`run_cpu` for a Render step that builds one large string: in a
worker thread, but without the collector pause (and ``gc.freeze``) meant for jobs building
many objects, which would keep refused replies alive."""


class _RenderCancelledError(Exception):
    """The Render call that started a chunked escape was cancelled: the worker stops."""


def _escape_in_chunks(text: str, stop: threading.Event) -> str:
    """:func:`markdown_escape` of ``text``, :data:`MARKDOWN_ESCAPE_CHUNK_CHARS` at a time,
    raising :class:`_RenderCancelledError` at the first checkpoint after ``stop`` is set."""
    parts = []
    for start in range(0, len(text), MARKDOWN_ESCAPE_CHUNK_CHARS):
        if stop.is_set():
            raise _RenderCancelledError
        parts.append(text[start : start + MARKDOWN_ESCAPE_CHUNK_CHARS].translate(_MARKDOWN_TABLE))
    return "".join(parts)


async def _markdown_escape_off_loop(text: str) -> str:
    """:func:`markdown_escape` in a worker thread, in checkpointed chunks: cancelling the
    awaiting task stops the worker within one chunk."""
    stop = threading.Event()
    try:
        return await run_cpu(_ONE_OBJECT_JOB, _escape_in_chunks, text, stop)
    finally:
        stop.set()


MAX_REPEAT_PAYLOAD_BYTES: Final = 1024 * 1024
"""Largest ``reference.repeat`` Render payload, bytes (1 MiB): it carries one text and a count,
and parsing a bigger JSON document (a 60 MiB one of nested lists took 5 s and 1.6 GB) would
hold the event loop."""


def _repeat(payload: bytes) -> tuple[str, int]:
    """The ``reference.repeat`` payload's ``(text, times)``, checked (see ``render``)."""
    usage = 'expected JSON {"text": str, "times": int}'
    if len(payload) > MAX_REPEAT_PAYLOAD_BYTES:
        raise ValueError(
            f"payload: {len(payload)} bytes, over the {MAX_REPEAT_PAYLOAD_BYTES}-byte bound of "
            f"reference.repeat (MAX_REPEAT_PAYLOAD_BYTES); {usage}"
        )
    try:
        spec = json.loads(payload)
    except ValueError:
        raise ValueError(f"payload: not JSON; {usage}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"payload: not a JSON object; {usage}")
    text, times = spec.get("text"), spec.get("times")
    if not isinstance(text, str):
        raise ValueError(f"payload.text: missing or not a string; {usage}")
    if isinstance(times, bool) or not isinstance(times, int):
        raise ValueError(f"payload.times: missing or not an integer; {usage}")
    if times < 0:
        raise ValueError(f"payload.times: must be >= 0, got {times}")
    if len(text) * times > MAX_RENDER_CHARS:
        raise ValueError(f"payload.times: the result would exceed {MAX_RENDER_CHARS} characters")
    return text, times


CONFIG_SCHEMA: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "reference provider configuration",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "api_key": {
            "type": "string",
            "description": "Accepted and ignored (the reference provider needs no credentials); "
            "a secret-like key, so its value never appears in logs or errors.",
        },
        "base_url": {
            "type": "string",
            "format": "uri",
            "description": "Reported in stream metadata attrs with its userinfo and query "
            "values replaced by ***; never connected to.",
        },
        "max_tokens": {
            "type": "integer",
            "minimum": 1,
            "description": "Output cap (tokens) when a request sets no max_output_tokens.",
        },
        "pace_tokens_per_second": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "Stream at this many tokens per second (demos). Default: no delay.",
        },
        "simulate_error": {
            "type": "object",
            "additionalProperties": False,
            "required": ["kind"],
            "properties": {
                "kind": {
                    "type": "string",
                    "enum": [k.name.lower() for k in ErrorKind if k is not ErrorKind.UNSPECIFIED],
                },
                "after_events": {"type": "integer", "minimum": 0},
            },
            "description": "End every stream with this ModelError after after_events events.",
        },
    },
}
"""The JSON Schema (draft 2020-12) of the reference provider's Configure config."""


def tokenize(text: str) -> list[str]:
    """Split ``text`` into the reference tokenizer's tokens.

    Tokens are runs of word characters, runs of whitespace and single other characters; their
    concatenation is ``text`` exactly.
    """
    return _TOKEN_RE.findall(text)


TOKEN_COUNT_CHUNK_CHARS: Final = 256 * 1024
"""Characters counted per regex call (256 Ki): a long text is counted chunk by chunk, cut where
whitespace meets non-whitespace (always a token boundary), so no single call holds the
interpreter for long (issue 8 item 4)."""

_BOUNDARY_RE: Final = re.compile(r"\S(?=\s)|\s(?=\S)")


def _chunks_at_boundaries(text: str) -> Iterator[tuple[int, int]]:
    """``(start, end)`` spans covering ``text``, about :data:`TOKEN_COUNT_CHUNK_CHARS` long,
    each ending where whitespace meets non-whitespace (no token or word crosses a span)."""
    size = len(text)
    pos = 0
    while pos < size:
        cut = pos + TOKEN_COUNT_CHUNK_CHARS
        boundary = _BOUNDARY_RE.search(text, cut, cut + TOKEN_COUNT_CHUNK_CHARS)
        end = boundary.end() if boundary is not None and cut < size else size
        yield pos, end
        pos = end


def count_text_tokens(text: str) -> int:
    """Number of reference tokens in ``text``."""
    if len(text) <= TOKEN_COUNT_CHUNK_CHARS:
        return len(_TOKEN_RE.findall(text))
    return sum(len(_TOKEN_RE.findall(text, a, b)) for a, b in _chunks_at_boundaries(text))


def _count_words(text: str) -> int:
    """``len(text.split())``, a chunk at a time (see :data:`TOKEN_COUNT_CHUNK_CHARS`)."""
    if len(text) <= TOKEN_COUNT_CHUNK_CHARS:
        return len(text.split())
    return sum(len(text[a:b].split()) for a, b in _chunks_at_boundaries(text))


def _block_text(block: ContentBlock) -> str:
    if block.text is not None:
        return block.text.text
    if block.tool_use is not None:
        use = block.tool_use
        return f"<tool_use {use.id} {use.name} {dumps(from_struct(use.input))}>"
    if block.tool_result is not None:
        result = block.tool_result
        inner = "".join(_block_text(b) for b in result.content)
        marker = " error" if result.is_error else ""
        return f"<tool_result {result.tool_use_id}{marker}>{inner}</tool_result>"
    if block.thinking is not None:
        return f"<thinking>{block.thinking.text}</thinking>"
    if block.redacted_thinking is not None:
        return f"<redacted_thinking {len(block.redacted_thinking.data)} bytes>"
    if block.image is not None:
        return f"<image {block.image.media_type} {len(block.image.data)} bytes>"
    if block.document is not None:
        return f"<document {block.document.media_type} {len(block.document.data)} bytes>"
    return ""


_Span = tuple[str, int, int]
"""``(text, start, end)``: the characters ``text[start:end]``, not copied out."""


def _strip_span(text: str) -> tuple[int, int]:
    """``(start, end)`` such that ``text[start:end] == text.strip()``, found
    :data:`TOKEN_COUNT_CHUNK_CHARS` characters at a time from each end (no copy of the whole
    text: issue 8 item 4)."""
    size, step = len(text), TOKEN_COUNT_CHUNK_CHARS
    start = 0
    while start < size:
        piece = text[start : start + step]
        kept = piece.lstrip()
        start += len(piece) - len(kept)
        if kept:
            break
    end = size
    while end > start:
        piece = text[max(start, end - step) : end]
        kept = piece.rstrip()
        end -= len(piece) - len(kept)
        if kept:
            break
    return start, end


def _spans_slice(spans: Sequence[_Span], a: int, b: int) -> str:
    """Characters ``[a, b)`` of the concatenation of ``spans`` (only they are copied)."""
    out: list[str] = []
    offset = 0
    for text, start, end in spans:
        size = end - start
        if b <= offset:
            break
        if a < offset + size:
            out.append(text[start + max(a - offset, 0) : start + min(b - offset, size)])
        offset += size
    return "".join(out)


def _spans_find(spans: Sequence[_Span], needle: str, total: int) -> int:
    """``concatenation.find(needle)`` for a non-empty ``needle``, searched in windows of
    :data:`TOKEN_COUNT_CHUNK_CHARS` characters overlapping by ``len(needle) - 1``."""
    step = TOKEN_COUNT_CHUNK_CHARS
    for at in range(0, total, step):
        pos = _spans_slice(spans, at, at + step + len(needle) - 1).find(needle)
        if pos != -1:
            return at + pos
    return -1


def _spans_tokens(spans: Sequence[_Span], end: int, count: int) -> list[str]:
    """The first ``count`` reference tokens of the concatenation's first ``end`` characters:
    tokenized from a prefix doubled in length until it holds ``count + 1`` tokens (every token
    but a prefix's last is a token of the whole) or all ``end`` characters."""
    size = 64 * 1024
    while True:
        piece = _spans_slice(spans, 0, min(size, end))
        tokens = [m.group() for m in itertools.islice(_TOKEN_RE.finditer(piece), count + 1)]
        if size >= end:
            return tokens[:count]
        if len(tokens) > count:
            return tokens[:count]
        size *= 2


def _plain_text(blocks: list[ContentBlock]) -> str:
    return "".join(b.text.text for b in blocks if b.text is not None)


def _section_text(section: ContextSection) -> str:
    body = "".join(_block_text(b) for b in section.content)
    return f"[context {section.provider}/{section.label}]\n{body}\n"


def _tools_text(tools: list[ToolDeclaration]) -> str:
    lines = [f"{t.name}: {t.description} {dumps(from_struct(t.input_schema))}" for t in tools]
    return "[tools]\n" + "\n".join(lines) + "\n"


def _message_parts(message: Message) -> tuple[str, ...]:
    """The rendered message as parts, never joined: a 60 MiB text block stays the block's own
    string (one join copied it whole, one long hold of the interpreter: issue 8 item 4)."""
    role = "assistant" if message.role is Role.ASSISTANT else "user"
    return (f"[{role}]\n", *(_block_text(b) for b in message.content), "\n")


def count_parts_tokens(parts: Sequence[str]) -> int:
    """:func:`count_text_tokens` of ``"".join(parts)``, without joining: each part counted on
    its own, less one wherever a part's last character and the next part's first form one
    token (both word characters or both whitespace: the run continues across the seam)."""
    total = 0
    last = ""
    for part in parts:
        if not part:
            continue
        total += count_text_tokens(part)
        if last and _TOKEN_RE.fullmatch(last + part[0]) is not None:
            total -= 1
        last = part[-1]
    return total


def _utf8_pieces(parts: Sequence[str]) -> Iterator[bytes]:
    """The UTF-8 bytes of ``"".join(parts)``, :data:`TOKEN_COUNT_CHUNK_CHARS` characters at a
    time (for hashing without one long encode)."""
    step = TOKEN_COUNT_CHUNK_CHARS
    for part in parts:
        for at in range(0, len(part), step):
            yield part[at : at + step].encode("utf-8")


def _contains_lowered(text: str, needle: str) -> bool:
    """``needle in text.lower()`` for an ASCII ``needle``, lowered
    :data:`TOKEN_COUNT_CHUNK_CHARS` characters at a time, consecutive chunks overlapping by
    ``len(needle) - 1`` (a match spans at most ``len(needle)`` characters of ``text``; lowering
    depends on context only for a final sigma, which never lowers to ASCII), so no single call
    holds the interpreter for long (issue 8 item 4)."""
    if len(text) <= TOKEN_COUNT_CHUNK_CHARS:
        return needle in text.lower()
    overlap = len(needle) - 1
    return any(
        needle in text[max(0, at - overlap) : at + TOKEN_COUNT_CHUNK_CHARS].lower()
        for at in range(0, len(text), TOKEN_COUNT_CHUNK_CHARS)
    )


@dataclass(frozen=True, slots=True)
class PromptSegment:
    """One cacheable unit of the rendered prompt.

    Attributes:
        kind: ``"context"``, ``"tools"`` or ``"message"``.
        index: Index of the section or message (0 for the tool list).
        parts: The rendered text, in parts (a message's text blocks are not joined).
        tokens: Its reference token count.
    """

    kind: str
    index: int
    parts: tuple[str, ...]
    tokens: int

    @property
    def text(self) -> str:
        """The rendered text (the parts joined: one copy of them all)."""
        return "".join(self.parts)


def prompt_segments(
    messages: list[Message],
    tools: list[ToolDeclaration],
    assembled_context: list[ContextSection],
) -> list[PromptSegment]:
    """Render a request's input as segments: context sections, the tool list, each message."""
    segments = [
        PromptSegment("context", i, (text,), count_text_tokens(text))
        for i, text in enumerate(_section_text(s) for s in assembled_context)
    ]
    if tools:
        text = _tools_text(tools)
        segments.append(PromptSegment("tools", 0, (text,), count_text_tokens(text)))
    segments.extend(
        PromptSegment("message", i, parts, count_parts_tokens(parts))
        for i, parts in enumerate(_message_parts(m) for m in messages)
    )
    return segments


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


@dataclass(slots=True)
class _Config:
    base_url: str | None = None
    max_tokens: int | None = None
    pace: float | None = None
    error_kind: ErrorKind | None = None
    error_after: int = 0


@dataclass(slots=True)
class _Plan:
    """What a completion will emit, computed before streaming."""

    thinking: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    tool: tuple[str, str, str] | None = None  # (id, name, arguments JSON)
    signed: bool = False  # the tool call carries vendor data (SIGNATURE_LOCATION)
    stop: Stop = field(default_factory=lambda: Stop(reason=StopReason.END_TURN))


def _chunks(tokens: list[str], size: int = TOKENS_PER_DELTA) -> Iterator[tuple[str, int]]:
    for i in range(0, len(tokens), size):
        part = tokens[i : i + size]
        yield "".join(part), len(part)


def _example_value(schema: Mapping[str, Any], name: str, prompt: str) -> JSONValue:
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type")
    if kind == "string":
        return _example_string(name, prompt)
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    if kind == "array":
        items = schema.get("items")
        return [_example_value(items, name, prompt)] if isinstance(items, Mapping) else []
    if kind == "object":
        return _example_object(schema, prompt)
    return None


_PROPER_NAME_RE = re.compile(r"(?<![.?!]\s)(?<!^)\b([A-Z][^\W_]*)")
"""A capitalised word that does not start the text or a sentence (a name like ``Paris``)."""

MAX_EXAMPLE_STRING_CHARS: Final = 40
"""Longest string argument the reference provider makes up from the prompt, characters."""


def _example_string(name: str, prompt: str) -> str:
    """A plausible, deterministic string argument: the word after the property's name in the
    prompt (``city Oslo`` -> ``Oslo``), else the first capitalised word that does not start a
    sentence (``weather in Paris?`` -> ``Paris``), else the property's name itself."""
    after = re.search(rf"\b{re.escape(name)}\b[\s:=]+([^\W_]+)", prompt, re.IGNORECASE)
    found = after or _PROPER_NAME_RE.search(prompt)
    return found.group(1)[:MAX_EXAMPLE_STRING_CHARS] if found else name


def _example_object(schema: Mapping[str, Any], prompt: str) -> dict[str, JSONValue]:
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return {}
    return {
        str(k): _example_value(v if isinstance(v, Mapping) else {}, str(k), prompt)
        for k, v in props.items()
    }


SIGNATURE_LOCATION: Final = "reference.tool_call.signature"
"""``VendorData.location`` of the reference provider's per-call signature (signed tool calls)."""

SIGNED_CALL_PREFIX: Final = "toolu_refsig_"
"""Id prefix of the reference provider's signed tool calls."""


def _call_signature(call_id: str, name: str) -> bytes:
    """The vendor data value of a signed reference tool call."""
    return b"refcall:" + hashlib.sha256(f"{call_id}\0{name}".encode()).hexdigest()[:32].encode()


def _check_signed_calls(messages: list[Message]) -> None:
    """Refuse a history whose signed tool calls lost their vendor data (as Gemini 3 does).

    Raises:
        ProviderError: INVALID_REQUEST naming the first tool_use block at fault.
    """
    for i, message in enumerate(messages):
        for j, block in enumerate(message.content):
            use = block.tool_use
            if use is None or not use.id.startswith(SIGNED_CALL_PREFIX):
                continue
            want = _call_signature(use.id, use.name)
            if not any(
                v.location == SIGNATURE_LOCATION and bytes(v.value) == want for v in use.vendor_data
            ):
                raise ProviderError(
                    ModelError(
                        kind=ErrorKind.INVALID_REQUEST,
                        message=f"messages[{i}].content[{j}].tool_use.vendor_data: the "
                        f"{SIGNATURE_LOCATION} entry of signed tool call {use.id[:64]!r} is "
                        "missing or altered; send the block back with its vendor data unmodified",
                        retryable=False,
                    )
                )


def _last_user(messages: list[Message]) -> Message | None:
    for message in reversed(messages):
        if message.role is Role.USER:
            return message
    return None


class ReferenceProvider(Provider):
    """The offline, deterministic reference provider (see the module docstring for behaviour)."""

    name = "reference"
    version = PACKAGE_VERSION
    source = "protocol-py/builtin/reference"

    def __init__(self) -> None:
        self._config = _Config()
        # one bytes key per entry (model id, NUL, digest): few small objects, which a large
        # request's transient objects around them would otherwise keep from being freed
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._cache_bytes = 0
        self._cache_lock = threading.Lock()
        self._requests = 0

    # -- declaration --------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        """Three models (see the module docstring) and :data:`CONFIG_SCHEMA`; no hook points."""
        return Capabilities(models=reference_models(), config_schema=to_struct(CONFIG_SCHEMA))

    def config_schema(self) -> Mapping[str, JSONValue]:
        """:data:`CONFIG_SCHEMA`."""
        return CONFIG_SCHEMA

    async def configure(self, config: Mapping[str, JSONValue]) -> None:
        """Apply a config that passed :data:`CONFIG_SCHEMA`; all at once, or not at all."""
        new = _Config()
        base_url = config.get("base_url")
        new.base_url = base_url if isinstance(base_url, str) else None
        max_tokens = config.get("max_tokens")
        new.max_tokens = max_tokens if isinstance(max_tokens, int) else None
        pace = config.get("pace_tokens_per_second")
        new.pace = float(pace) if isinstance(pace, int | float) else None
        sim = config.get("simulate_error")
        if isinstance(sim, Mapping):
            kind = str(sim.get("kind", "")).upper()
            if kind not in ErrorKind.__members__ or kind == "UNSPECIFIED":
                raise ValueError(f"simulate_error.kind: unknown error kind {kind.lower()!r}")
            new.error_kind = ErrorKind[kind]
            after = sim.get("after_events", 0)
            new.error_after = after if isinstance(after, int) else 0
        self._config = new

    # -- counting -----------------------------------------------------------------------------

    def count_input_tokens(self, request: StreamCompletionRequest) -> int:
        """Exact reference-tokenizer count of the rendered prompt, as :meth:`count_tokens`."""
        segments = prompt_segments(
            list(request.messages), list(request.tools), list(request.assembled_context)
        )
        return sum(s.tokens for s in segments)

    async def count_tokens(self, request: CountTokensRequest) -> CountTokensResponse:
        """Exact reference-tokenizer count of the rendered prompt (method TOKENIZER)."""
        segments = await run_cpu(
            wire.wire_size(request),
            prompt_segments,
            list(request.messages),
            list(request.tools),
            list(request.assembled_context),
        )
        return CountTokensResponse(
            input_tokens=sum(s.tokens for s in segments), method=TokenCountMethod.TOKENIZER
        )

    async def render(self, request: RenderRequest) -> RenderResponse:
        """Render ``reference.echo`` or ``reference.repeat`` payloads.

        ``reference.echo``: the payload as UTF-8 text (invalid bytes replaced).
        ``reference.repeat``: JSON ``{"text": str, "times": int}`` with ``times`` an integer
        ``>= 0`` and at most :data:`MAX_RENDER_CHARS` characters in the result.

        The answer is in the requested format: ``RENDER_FORMAT_MARKDOWN`` gives CommonMark in
        which every ASCII punctuation character is backslash-escaped (the text displays
        literally), also at most :data:`MAX_RENDER_CHARS` characters once escaped (checked
        before the result is built); ``PLAIN_TEXT`` and ``UNSPECIFIED`` give plain text.
        Large steps run in a worker thread; the escaping goes
        :data:`MARKDOWN_ESCAPE_CHUNK_CHARS` at a time and stops at the next chunk when the
        call is cancelled (deadline or cancel).

        Raises:
            ValueError: an unknown payload type (``payload_type: ...``) or a malformed
                ``reference.repeat`` payload, or a result over :data:`MAX_RENDER_CHARS`; the
                message starts with the field path (``payload``, ``payload.text``,
                ``payload.times``).
        """
        if request.payload_type == "reference.echo":
            text = await run_cpu(
                min(len(request.payload), _ONE_OBJECT_JOB),
                request.payload.decode,
                "utf-8",
                errors="replace",
            )
            times, field = 1, "payload"
        elif request.payload_type == "reference.repeat":
            text, times = _repeat(request.payload)
            field = "payload.times"
        else:
            raise ValueError(
                f"payload_type: unknown payload type {quote_value(request.payload_type)}"
            )
        if request.format == RenderFormat.MARKDOWN:
            # Escaping is per character, so the unit is escaped once (off the loop, in
            # cancellable chunks) and the size of the escaped result known before repeating.
            text = await _markdown_escape_off_loop(text)
            if len(text) * times > MAX_RENDER_CHARS:
                raise ValueError(
                    f"{field}: the Markdown result (punctuation backslash-escaped) would be "
                    f"{len(text) * times} characters, more than {MAX_RENDER_CHARS}"
                )
        if times != 1:
            text = await run_cpu(min(len(text) * times, _ONE_OBJECT_JOB), operator.mul, text, times)
        if request.format == RenderFormat.MARKDOWN:
            return RenderResponse(text=text, format=RenderFormat.MARKDOWN)
        return RenderResponse(text=text, format=RenderFormat.PLAIN_TEXT)

    def _prepare(
        self, request: StreamCompletionRequest, spec: ModelSpec, limit: int
    ) -> tuple[int, int, int, _Plan, str]:
        """(prompt tokens, cache read, cache write, plan, request digest) of one completion."""
        segments = prompt_segments(
            list(request.messages), list(request.tools), list(request.assembled_context)
        )
        prompt_tokens = sum(s.tokens for s in segments)
        with self._cache_lock:
            cache_read, cache_write = self._cache_usage(request, spec, segments)
        _check_signed_calls(list(request.messages))
        plan = self._plan(request, spec, limit)
        # sha256 of the encoding, hashed part by part: no 60 MB encode or join (issue 8 item 4)
        digest = wire.sha256_of(request).hexdigest()[:12]
        return prompt_tokens, cache_read, cache_write, plan, digest

    # -- caching ------------------------------------------------------------------------------

    def _cache_usage(
        self, request: StreamCompletionRequest, spec: ModelSpec, segments: list[PromptSegment]
    ) -> tuple[int, int]:
        """Return (cache_read_tokens, cache_write_tokens) and record the cacheable prefix."""
        if spec.caching is None or not spec.caching.supported or not segments:
            return 0, 0
        end = len(segments) - 1 if segments[-1].kind == "message" else len(segments)
        if spec.caching.explicit_markers and request.cache_breakpoints:
            end = 0
            for bp in request.cache_breakpoints:
                kind, value = betterproto2.which_one_of(bp, "position")
                if kind == "after_assembled_context":
                    pos = sum(1 for s in segments if s.kind == "context")
                elif kind == "after_tools":
                    pos = sum(1 for s in segments if s.kind in ("context", "tools"))
                elif kind == "after_message_index" and isinstance(value, int):
                    pos = next(
                        (
                            i + 1
                            for i, s in enumerate(segments)
                            if s.kind == "message" and s.index == value
                        ),
                        0,
                    )
                else:
                    pos = 0
                end = max(end, pos)
        digest = b""
        read = 0
        prefix_tokens = 0
        hit = True
        model = spec.id.encode("utf-8") + b"\0"
        cache = self._cache
        for segment in segments[:end]:
            # sha256(digest + text as UTF-8), hashed a piece at a time (no 60 MB encode)
            chain = hashlib.sha256(digest)
            for piece in _utf8_pieces(segment.parts):
                chain.update(piece)
            digest = chain.digest()
            prefix_tokens += segment.tokens
            key = model + digest
            if hit and key in cache:
                cache.move_to_end(key)
                read = prefix_tokens
                continue
            hit = False
            if key not in cache:
                cache[key] = None
                self._cache_bytes += len(key) + CACHE_ENTRY_OVERHEAD_BYTES
        written = prefix_tokens - read
        while cache and (len(cache) > CACHE_ENTRIES or self._cache_bytes > CACHE_BYTES):
            dropped, _ = cache.popitem(last=False)
            self._cache_bytes -= len(dropped) + CACHE_ENTRY_OVERHEAD_BYTES
        return read, written

    @property
    def cache_bytes(self) -> int:
        """Bytes the prompt-prefix cache holds now (see :data:`CACHE_BYTES`)."""
        return self._cache_bytes

    # -- generation ---------------------------------------------------------------------------

    def _plan(self, request: StreamCompletionRequest, spec: ModelSpec, limit: int) -> _Plan:
        params = request.params
        last = _last_user(list(request.messages))
        blocks = list(last.content) if last is not None else []
        # the prompt is raw[lo:hi] (raw.strip()), copied out only where a tool needs it
        raw = _plain_text(blocks)
        lo, hi = _strip_span(raw)
        results = [b.tool_result for b in blocks if b.tool_result is not None]
        plan = _Plan()

        # Thinking.
        thinking = spec.thinking
        think_text = ""
        if thinking is not None and thinking.supported:
            disabled = params is not None and params.disable_thinking is True
            count = _count_words(raw)  # split() ignores the whitespace strip() removes
            words = f"{count} word" if count == 1 else f"{count} words"
            if thinking.effort is not None and not disabled:
                effort = (params.thinking_effort if params else None) or thinking.effort.default
                steps = max(1, thinking.effort.levels.index(effort) + 1)
                lines = [
                    f"The user wrote {words}; reasoning at effort {effort}.",
                    "I should answer directly and deterministically.",
                    "Check whether a tool is needed or a stop sequence applies.",
                    "Keep the answer short and restate the request.",
                ]
                think_text = " ".join(lines[:steps])
            elif thinking.budget is not None and not disabled:
                budget = params.thinking_budget_tokens if params else None
                if budget is None:
                    budget = thinking.budget.default
                if budget:
                    text = (
                        f"The user wrote {words}; reasoning with a budget of "
                        f"{budget} tokens. I should answer directly and deterministically."
                    )
                    think_text = "".join(tokenize(text)[:budget])
        think_tokens = tokenize(think_text)

        # Tool call decision.
        tools = list(request.tools)
        choice = params.tool_choice if params is not None else None
        mode = choice.mode if choice is not None else ToolChoiceMode.AUTO
        tool: ToolDeclaration | None = None
        prompt = ""
        if tools and spec.supports_tool_use and mode is not ToolChoiceMode.NONE and not results:
            prompt = raw[lo:hi]
            lowered = prompt.lower()
            named = [t for t in tools if re.search(rf"\b{re.escape(t.name.lower())}\b", lowered)]
            if mode is ToolChoiceMode.SPECIFIC and choice is not None:
                tool = next((t for t in tools if t.name == choice.tool_name), tools[0])
            elif named:
                tool = named[0]
            elif "use tool" in lowered or "signed tool" in lowered or mode is ToolChoiceMode.ANY:
                tool = tools[0]

        # Answer text.
        if results:
            summary = " ".join(_plain_text(list(r.content)) for r in results).strip()
            answer = f"The tool returned: {summary[:200]}. That completes the request."
        elif tool is not None:
            answer = f"I will call the tool {tool.name} to answer this."
        else:
            answer = ""
        # the answer is spans: the echo of a long prompt is never built whole (issue 8 item 4)
        spans: list[_Span] = [(answer, 0, len(answer))]
        if not results and tool is None:
            head = f"This is {spec.id}, the offline reference model. You wrote: "
            tail = (
                " Here is a deterministic answer: every word above was counted, and nothing "
                "was sent over the network."
            )
            spans = [(head, 0, len(head)), (raw, lo, hi), (tail, 0, len(tail))]
        total = sum(end - start for _, start, end in spans)
        stops = list(params.stop_sequences) if params is not None else []
        matched: str | None = None
        cut = total
        for seq in stops:
            pos = _spans_find(spans, seq, total) if seq else -1
            if pos != -1 and pos < cut:
                cut, matched = pos, seq
        pausing = False
        if _contains_lowered(raw, "pause turn") and tool is None and matched is None:
            last_message = request.messages[-1] if request.messages else None
            if (
                last_message is not None and last_message.role is Role.ASSISTANT
            ):  # the paused turn, sent back: continue it
                answer = _spans_slice(spans, 0, cut)
                spans, cut = [(answer, 0, len(answer))], len(answer)
                done = _plain_text(list(last_message.content))
                if answer.startswith(done):
                    answer = answer[len(done) :]
                    spans, cut = [(answer, 0, len(answer))], len(answer)
                think_tokens = []
            else:
                pausing = True
        if pausing:
            text_tokens = tokenize(_spans_slice(spans, 0, cut))
            text_tokens = text_tokens[: len(text_tokens) // 2]
        else:
            # the answer echoes the prompt: only the tokens the output limit can take are needed
            text_tokens = _spans_tokens(spans, cut, limit + 1)

        # Output limit: thinking first, then text, then the tool call.
        budget_left = limit
        if len(think_tokens) > budget_left:
            plan.thinking = think_tokens[:budget_left]
            plan.stop = Stop(reason=StopReason.MAX_TOKENS, model_affirmed=True)
            return plan
        plan.thinking = think_tokens
        budget_left -= len(think_tokens)
        if len(text_tokens) > budget_left:
            plan.text = text_tokens[:budget_left]
            plan.stop = Stop(reason=StopReason.MAX_TOKENS, model_affirmed=True)
            return plan
        plan.text = text_tokens
        budget_left -= len(text_tokens)
        if matched is not None:
            plan.stop = Stop(
                reason=StopReason.STOP_SEQUENCE, matched_stop_sequence=matched, model_affirmed=True
            )
            return plan
        if tool is not None:
            args = dumps(_example_object(from_struct(tool.input_schema), prompt))
            if count_text_tokens(args) > budget_left:
                plan.stop = Stop(reason=StopReason.MAX_TOKENS, model_affirmed=True)
                return plan
            plan.signed = _contains_lowered(raw, "signed tool")
            call_id = (SIGNED_CALL_PREFIX if plan.signed else "toolu_ref_") + hashlib.sha256(
                (tool.name + args + str(len(request.messages))).encode()
            ).hexdigest()[:16]
            plan.tool = (call_id, tool.name, args)
            plan.stop = Stop(reason=StopReason.TOOL_USE, model_affirmed=True)
            return plan
        if pausing:
            plan.stop = Stop(
                reason=StopReason.PAUSE_TURN, model_affirmed=True, vendor_reason="pause_turn"
            )
            return plan
        plan.stop = Stop(reason=StopReason.END_TURN, model_affirmed=True)
        return plan

    def _spec(self, model_id: str) -> ModelSpec:
        for spec in reference_models():
            if spec.id == model_id:
                return spec
        raise ProviderError(
            ModelError(
                kind=ErrorKind.NOT_FOUND,
                message=f"model_id: unknown model {model_id!r}",
                retryable=False,
            )
        )

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        """Stream one deterministic completion (see the module docstring)."""
        config = self._config
        spec = self._spec(request.model_id)
        params = request.params
        limit = spec.max_output_tokens
        if params is not None and params.max_output_tokens is not None:
            limit = params.max_output_tokens
        elif config.max_tokens is not None:
            limit = min(limit, config.max_tokens)
        # tokenizing, prefix hashing and the request digest are CPU work: off the event loop
        # for a large request (issue 8 item 4)
        prompt_tokens, cache_read, cache_write, plan, digest = await run_cpu(
            wire.wire_size(request), self._prepare, request, spec, limit
        )
        self._requests += 1
        request_id = f"req_ref_{self._requests:06d}_{digest}"

        emitted = 0

        def simulated() -> StreamEvent | None:
            if config.error_kind is not None and emitted >= config.error_after:
                return StreamEvent(
                    error=ModelError(
                        kind=config.error_kind,
                        message=f"simulated {config.error_kind.name.lower()} error "
                        "(reference provider config simulate_error)",
                        retryable=config.error_kind
                        in (ErrorKind.RATE_LIMITED, ErrorKind.OVERLOADED, ErrorKind.TRANSIENT),
                        provider_request_id=request_id,
                    )
                )
            return None

        async def pace(tokens: int) -> None:
            if config.pace is not None:
                await asyncio.sleep(tokens / config.pace)

        # never verbatim: userinfo and query values (credentials) become *** (issue 9 item 4)
        attrs = {"base_url": redact_url(config.base_url)} if config.base_url else {}
        events: list[tuple[StreamEvent, int]] = [
            (StreamEvent(stream_start=StreamStart(provider_request_id=request_id)), 0),
            (
                StreamEvent(
                    metadata=StreamMetadata(
                        actual_model=spec.id,
                        live_context_window=spec.context_window,
                        live_max_output_tokens=limit,
                        attrs=attrs,
                    )
                ),
                0,
            ),
        ]
        for text, n in _chunks(plan.thinking):
            events.append((StreamEvent(thinking_delta=ThinkingDelta(text=text)), n))
        if plan.thinking:
            signature = (
                b"refsig:"
                + hashlib.sha256("".join(plan.thinking).encode()).hexdigest()[:32].encode()
            )
            events.append(
                (StreamEvent(thinking_signature=ThinkingSignature(signature=signature)), 0)
            )
        for text, n in _chunks(plan.text):
            events.append((StreamEvent(text_delta=TextDelta(text=text)), n))
        tool_tokens = 0
        if plan.tool is not None:
            call_id, name, args = plan.tool
            tool_tokens = count_text_tokens(args)
            vendor_data = (
                [VendorData(location=SIGNATURE_LOCATION, value=_call_signature(call_id, name))]
                if plan.signed
                else []
            )
            start = ToolCallStart(id=call_id, name=name, vendor_data=vendor_data)
            events.append((StreamEvent(tool_call_start=start), 0))
            for i in range(0, len(args), FRAGMENT_CHARS):
                fragment = args[i : i + FRAGMENT_CHARS]
                events.append(
                    (
                        StreamEvent(
                            tool_call_delta=ToolCallDelta(id=call_id, arguments_fragment=fragment)
                        ),
                        count_text_tokens(fragment),
                    )
                )
            events.append((StreamEvent(tool_call_done=ToolCallDone(id=call_id)), 0))
        reasoned = bool(plan.thinking)  # reasoning is reported only when it happened
        caching_on = spec.caching is not None and spec.caching.supported
        usage = Usage(
            input_tokens=prompt_tokens - cache_read - cache_write,
            output_tokens=len(plan.thinking) + len(plan.text) + tool_tokens,
            cache_read_tokens=cache_read if caching_on else None,
            cache_write_tokens=cache_write if caching_on else None,
            reasoning_tokens=len(plan.thinking) if reasoned else None,
            reasoning_already_counted=True if reasoned else None,
        )
        events.append((StreamEvent(usage=usage), 0))
        events.append((StreamEvent(stop=plan.stop), 0))

        for event, tokens in events:
            failure = simulated()
            if failure is not None:
                yield failure
                return
            if tokens:
                await pace(tokens)
            yield event
            emitted += 1
