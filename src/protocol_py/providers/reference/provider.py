"""The reference provider: deterministic completions, prompt caching and configuration.

It is the embedded default of ``protocol-py serve`` and the provider the test suite runs the
server adapter against. Its models are :mod:`~protocol_py.providers.reference.models`, its
token counts :mod:`~protocol_py.providers.reference.tokenizer`, its Render
:mod:`~protocol_py.providers.reference.render`.

Behaviour (all deterministic for a given request and cache state):

* Prompt caching (caching models only): an in-process cache of prompt prefixes (hash chains
  over segments, at most 4,096 entries, least recently used evicted). The cacheable prefix is
  everything up to the furthest cache breakpoint when the model takes explicit markers and the
  request places some, otherwise every segment but the last message. Tokens of the longest
  previously seen prefix are reported as ``cache_read_tokens``, the rest of the cacheable
  prefix as ``cache_write_tokens``, and the remainder as ``input_tokens``
  (``docs/decisions.md#d7``).
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
"""

import asyncio
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import betterproto2

from protocol_py.codec import wire
from protocol_py.codec.structs import dumps, from_struct, to_struct
from protocol_py.provider import JSONValue, Provider, ProviderError
from protocol_py.providers.http.url import redact_url
from protocol_py.providers.reference.models import reference_models
from protocol_py.providers.reference.render import render_payload
from protocol_py.providers.reference.tokenizer import (
    TOKEN_COUNT_CHUNK_CHARS,
    PromptSegment,
    _contains_lowered,
    _count_words,
    _plain_text,
    _Span,
    _spans_find,
    _spans_slice,
    _spans_tokens,
    _strip_span,
    _utf8_pieces,
    count_prompt_tokens,
    count_spans_tokens,
    count_text_tokens,
    prompt_segments,
    tokenize,
)
from protocol_py.server.offload import checkpoint, run_cpu
from protocol_py.version import PACKAGE_VERSION
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import Message, Role, VendorData
from protocol_py_gen.model.v1 import (
    Capabilities,
    CountTokensRequest,
    CountTokensResponse,
    ErrorKind,
    ModelError,
    ModelSpec,
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
    ThinkingSignature,
    TokenCountMethod,
    ToolCallDelta,
    ToolCallDone,
    ToolCallStart,
    ToolChoiceMode,
    ToolDeclaration,
    Usage,
)

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


MAX_NAME_LOOKUPS: Final = 128
"""Most names one completion looks up in its prompt, count: the declared tools' names (to
choose the tool named in the prompt), then the string properties' names of the chosen tool's
schema (for the word after each). A tool past the bound is never chosen by name; a string
property past it takes the proper name or its own name. Each lookup is one search of the
lowered :data:`LOOKUP_PROMPT_CHARS`, so a completion's lookups cost at most this many
searches whatever the prompt's length and the tools' and schemas' sizes."""

MAX_LOOKUP_CANDIDATES: Final = 4096
"""Most places where a looked-up name occurs that one completion examines (word boundaries,
the word after), count, over all its lookups; later lookups find nothing. A name found as a
part of other words all along the prompt (``e`` in ``ee ee ee ...``) costs one step each."""

LOOKUP_PROMPT_CHARS: Final = TOKEN_COUNT_CHUNK_CHARS
"""Characters at the start of the prompt (the last user message) the name lookups and the
proper-name search read (256 Ki): a name written only after them is not found. The trigger
phrases ("use tool", "signed tool", "pause turn") are looked for in the whole prompt."""


class _PromptLookups:
    """The name lookups of one completion in its prompt (see :data:`MAX_NAME_LOOKUPS`): the
    first :data:`LOOKUP_PROMPT_CHARS` characters, lowered once; the proper name searched for
    at most once."""

    __slots__ = ("_lowered", "_proper", "candidates", "left", "text")

    def __init__(self, prompt: str) -> None:
        # one character past the bound: whether a name ending at the bound ends a word
        self.text = prompt[: LOOKUP_PROMPT_CHARS + 1]
        lowered = self.text.lower()
        # a case mapping that changes lengths would shift every offset: matched as written
        self._lowered = lowered if len(lowered) == len(self.text) else self.text
        self._proper: str | None = None
        self.left = MAX_NAME_LOOKUPS
        self.candidates = MAX_LOOKUP_CANDIDATES

    def occurrences(self, name: str) -> Iterator[int]:
        """Start offsets of ``name`` in the text between word boundaries, matched
        case-insensitively by ``str.find`` (no pattern is built from either string); nothing
        once :data:`MAX_NAME_LOOKUPS` lookups were made or :data:`MAX_LOOKUP_CANDIDATES`
        places examined. Counts one lookup, and one candidate per place found."""
        if self.left <= 0 or not name:
            return
        self.left -= 1
        checkpoint()  # a cancelled worker step stops between lookups
        word, text, lowered, end = name.lower(), self.text, self._lowered, LOOKUP_PROMPT_CHARS
        at = lowered.find(word, 0, end)
        while at >= 0 and self.candidates > 0:
            self.candidates -= 1
            if _word_at(text, word, at):
                yield at
            at = lowered.find(word, at + 1, end)

    def names(self, name: str) -> bool:
        """Whether the text holds ``name`` as a word (one lookup)."""
        return next(self.occurrences(name), -1) >= 0

    def word_after(self, name: str) -> str:
        """The letters/digits run after ``name`` and at least one of whitespace, ``:`` or
        ``=`` (``city: Oslo`` -> ``Oslo``), matched case-insensitively, at most
        :data:`MAX_EXAMPLE_STRING_CHARS` characters; ``""`` when there is none (one lookup)."""
        text, size = self.text, len(name.lower())
        for at in self.occurrences(name):
            i = at + size
            separators = _SEPARATORS.match(text, i)  # always matches (maybe nothing)
            j = separators.end() if separators is not None else i
            if j == i:
                continue
            k = j
            while k < len(text) and k - j < MAX_EXAMPLE_STRING_CHARS and text[k].isalnum():
                k += 1
            if k > j:
                return text[j:k]
        return ""

    def proper_name(self) -> str:
        """The first capitalised word that does not start the text or a sentence, at most
        :data:`MAX_EXAMPLE_STRING_CHARS` characters; ``""`` when there is none (searched for
        once per completion)."""
        if self._proper is None:
            text = self.text[:LOOKUP_PROMPT_CHARS]
            found = _search_windows(_PROPER_NAME_RE, text, MAX_EXAMPLE_STRING_CHARS)
            self._proper = found.group(1)[:MAX_EXAMPLE_STRING_CHARS] if found else ""
        return self._proper


def _example_value(schema: Mapping[str, Any], name: str, prompt: _PromptLookups) -> JSONValue:
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


_SEPARATORS = re.compile(r"[\s:=]*")
"""What may stand between a property's name and its value in the prompt (``city: Oslo``)."""

_PROPER_NAME_RE = re.compile(r"(?<![.?!]\s)(?<!^)\b([A-Z][^\W_]*)")
"""A capitalised word that does not start the text or a sentence (a name like ``Paris``)."""

MAX_EXAMPLE_STRING_CHARS: Final = 40
"""Longest string argument the reference provider makes up from the prompt, characters."""


def _example_string(name: str, prompt: _PromptLookups) -> str:
    """A plausible, deterministic string argument: the word after the property's name in the
    prompt (``city Oslo`` -> ``Oslo``), else the first capitalised word that does not start a
    sentence (``weather in Paris?`` -> ``Paris``), else the property's name itself."""
    return prompt.word_after(name) or prompt.proper_name() or name


def _search_windows(pattern: re.Pattern[str], text: str, keep: int) -> re.Match[str] | None:
    """``pattern.search(text)`` for a pattern whose match the caller reads only ``keep``
    characters of, one window of :data:`TOKEN_COUNT_CHUNK_CHARS` starting positions (plus
    ``keep`` characters to match into) per call, so no call scans a long text whole; the
    lookbehinds still see the characters before a window. The match found starts where the
    whole-text search's does; it may end sooner, past its first ``keep`` characters."""
    step = TOKEN_COUNT_CHUNK_CHARS
    for at in range(0, len(text), step):
        found = pattern.search(text, at, min(len(text), at + step + keep))
        if found is not None and found.start() < at + step:
            return found
    return None


def _is_word_char(c: str) -> bool:
    """Whether ``c`` is a word character as ``re``'s Unicode ``\\w`` counts it."""
    return c.isalnum() or c == "_"


def _word_at(text: str, word: str, start: int) -> bool:
    """Whether ``text[start:start + len(word)] == word`` stands between word boundaries."""
    end = start + len(word)
    if _is_word_char(word[0]) == (start > 0 and _is_word_char(text[start - 1])):
        return False
    return _is_word_char(word[-1]) != (end < len(text) and _is_word_char(text[end]))


def _example_object(schema: Mapping[str, Any], prompt: _PromptLookups) -> dict[str, JSONValue]:
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

    def count_input_tokens_bounded(
        self, request: StreamCompletionRequest, bound: int
    ) -> tuple[int, bool] | None:
        """The exact count, stopped once it exceeds ``bound`` tokens
        (:func:`~protocol_py.providers.reference.tokenizer.count_prompt_tokens`). A subclass
        that overrides :meth:`count_input_tokens` alone gets its own count, whole."""
        if type(self).count_input_tokens is not ReferenceProvider.count_input_tokens:
            return super().count_input_tokens_bounded(request, bound)
        return count_prompt_tokens(
            list(request.messages),
            list(request.tools),
            list(request.assembled_context),
            stop_above=bound,
        )

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
        """Render ``reference.echo`` or ``reference.repeat`` payloads
        (:func:`~protocol_py.providers.reference.render.render_payload`)."""
        return await render_payload(request)

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
        # sha256 of the encoding, hashed part by part: no whole encode or join of a large one
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
        lookups = _PromptLookups("")
        if tools and spec.supports_tool_use and mode is not ToolChoiceMode.NONE and not results:
            prompt = raw[lo:hi]
            lookups = _PromptLookups(prompt)
            named = [t for t in tools if lookups.names(t.name)]
            if mode is ToolChoiceMode.SPECIFIC and choice is not None:
                tool = next((t for t in tools if t.name == choice.tool_name), tools[0])
            elif named:
                tool = named[0]
            elif (
                _contains_lowered(prompt, "use tool")
                or _contains_lowered(prompt, "signed tool")
                or mode is ToolChoiceMode.ANY
            ):
                tool = tools[0]

        # Answer text.
        if results:
            summary = " ".join(_plain_text(list(r.content)) for r in results).strip()
            answer = f"The tool returned: {summary[:200]}. That completes the request."
        elif tool is not None:
            answer = f"I will call the tool {tool.name} to answer this."
        else:
            answer = ""
        # the answer is spans: the echo of a long prompt is never built whole
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
            # half the answer's tokens, of which the output limit takes at most ``limit``:
            # counted and cut a chunk at a time, never tokenized whole
            half = count_spans_tokens(spans, cut) // 2
            text_tokens = _spans_tokens(spans, cut, min(half, limit + 1))
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
            args = dumps(_example_object(from_struct(tool.input_schema), lookups))
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
        # for a large request
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

        # never verbatim: userinfo and query values (credentials) become ***
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


__all__ = [
    "CACHE_BYTES",
    "CACHE_ENTRIES",
    "CACHE_ENTRY_OVERHEAD_BYTES",
    "CONFIG_SCHEMA",
    "FRAGMENT_CHARS",
    "MAX_EXAMPLE_STRING_CHARS",
    "SIGNATURE_LOCATION",
    "SIGNED_CALL_PREFIX",
    "TOKENS_PER_DELTA",
    "ReferenceProvider",
]
