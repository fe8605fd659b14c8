"""OpenAI-compatible Chat Completions stream -> StreamEvents (OpenAI, Azure, DeepSeek, vLLM,
Ollama, Groq, Mistral, xAI).

Implements the translation contract of ``testdata/vendor/README.md`` and docs/decisions.md#d7,
docs/decisions.md#d10 to docs/decisions.md#d12.
The translator is pure: it consumes already-parsed SSE events
(:mod:`protocol_py.providers.http.sse`) and the
response headers, and returns the StreamEvents to emit. It never does I/O.

Mapping summary:

- ``stream_start``: the request-id header (``x-request-id`` by default) at the first SSE event;
  without it the first non-empty chunk ``id``. Never an empty id.
- ``metadata`` once, from the first chunk in which any of ``model``, ``system_fingerprint``,
  ``service_tier`` is non-empty, carrying those that are (empty values are never emitted).
  Normally that is the first chunk; when a vendor's first chunks leave them all empty, metadata
  comes with the first later chunk that has one (docs/decisions.md#d12 allows metadata anywhere
  before the terminal event), and a stream that never names them has no metadata (except rate
  limits).
- ``delta.content`` (string, or Mistral's array of ``text``/``thinking`` parts) -> text/thinking
  deltas; ``delta.reasoning_content`` / ``delta.reasoning`` (configurable) -> thinking deltas;
  ``delta.refusal`` -> text deltas and stop REFUSAL. Empty strings are never emitted.
- Tool calls (keying rule, in this order for each ``tool_calls`` entry):

  1. The entry's slot is its ``index``; an entry without ``index`` takes its position in that
     chunk's ``tool_calls`` array.
  2. An entry whose ``id`` belongs to a call still open at another slot continues that call
     (never a second tool_call_start for one call), unless the entry names a function whose
     name differs from the call's or the call's arguments are already a whole JSON object:
     then it is a second call under the same id (two calls, never one). An entry that
     continues a call already closed ends the stream with a TRANSIENT error.
  3. An entry with an ``id`` different from the id of the call open at its slot closes that
     call (a call that never got a name is a TRANSIENT error then, one that got only an id is
     ignored with a warning) and opens a new one; a repeated id or name continues it (B02),
     and the name is set once, never concatenated.
  4. An entry without ``id`` continues the call open at its slot, or opens one; an entry with
     no id, no name and no arguments at a slot with no open call is ignored with a warning. A
     call that has no id yet adopts the first id that arrives for its slot before it starts; a
     real id arriving for a call that already started continues it.
  5. tool_call_start is emitted once the call has both its id and its name; fragments that came
     before are held and emitted right after it, in order. A named call without an id waits
     for one more entry of its slot: when that entry brings no id either (the server sends
     none), or the call is closed first, it starts anyway. The id the kernel sees is chosen
     then (:mod:`protocol_py.providers.http.call_ids`): the vendor's when it is free in the
     conversation, else a fresh ``call_<ULID>``, the vendor's kept as
     ``openai.tool_call.id`` vendor data when the history already used it.

  Arguments fragments are forwarded as received (empty ones skipped); every open call is
  closed, in index order, when ``finish_reason`` arrives (its arguments checked, B04; with
  ``length``, arguments cut by the output limit close as they are and the stop is MAX_TOKENS).
- Text, reasoning and argument fragments pass through a surrogate joiner (the halves of a
  character split between two chunks are joined; a half that never pairs is U+FFFD).
- OpenRouter's ``reasoning_details`` entries are merged by ``index`` and emitted, when the
  reasoning ends, as ``vendor_block`` events of vendor ``openai`` (to a kernel of 1.2 or
  later); a ``signature`` in them is a thinking_signature.
- Per-call vendor data (protocol 1.1, B03): an entry's ``extra_content`` object (Gemini's
  ``{"google": {"thought_signature": ...}}``, which may come in an entry of its own after the
  arguments) is kept for its call, later objects' members overriding earlier ones, and emitted
  on that call's ``tool_call_done`` as one ``VendorData`` at location
  ``openai.tool_call.extra_content`` (compact JSON text, member order kept). An entry carrying
  only ``extra_content`` never opens a call of its own. A value above
  ``vendor_data.MAX_VALUE_BYTES`` ends the stream with a PERMANENT error (never cut).
- ``usage`` (top-level or ``x_groq.usage``) is kept until ``[DONE]``/end of body; a later
  ``usage: null`` never erases it (``testdata/vendor/README.md``, rule 6). Usage and stop are
  emitted at ``[DONE]``.
- ``data: {"error": ...}`` or an ``event: error`` SSE event is one terminal error.
- Every failure (vendor error, cut or stalled body, malformed chunk) emits the usage the vendor
  already reported (a usage chunk, or usage beside the error) as a ``usage`` event right before
  the ``error`` event: reported usage is never dropped.
- A ``moderation`` object (OpenAI's moderation option) with a flagged result becomes one
  ``safety_notice`` (MODERATION) per side; unflagged results produce nothing.
- End of body without ``finish_reason`` -> TRANSIENT error, keeping what was streamed. So is
  ``data: [DONE]`` when no ``finish_reason`` arrived (the turn's end was never reported), unless
  the endpoint is configured with ``done_ends_turn`` (then END_TURN / TOOL_USE, model_affirmed
  false).
- A whole JSON body (HTTP 2xx, not an event stream) goes to :meth:`on_json`.

Usage table (disjoint categories):

=====================  ========================================================================
input_tokens           ``prompt_cache_miss_tokens`` (DeepSeek) else ``prompt_tokens`` minus
                       ``cached_tokens`` and ``cache_write_tokens``
cache_read_tokens      ``prompt_cache_hit_tokens`` (DeepSeek) else
                       ``prompt_tokens_details.cached_tokens`` (only when reported)
cache_write_tokens     ``prompt_tokens_details.cache_write_tokens`` (only when reported)
output_tokens          ``completion_tokens`` (never reduced)
reasoning_tokens       ``completion_tokens_details.reasoning_tokens`` (only when reported)
reasoning_already...   true when reasoning is inside completion: decided by ``total_tokens``
                       (prompt + completion == total -> true; + reasoning == total -> unset),
                       else by the endpoint setting (default true: OpenAI, DeepSeek)
vendor_cost            xAI ``cost_in_usd_ticks`` verbatim, unit ``xai_ticks_1e10``; else
                       OpenRouter's ``cost`` (USD), unit ``usd``
vendor_total_tokens    ``total_tokens`` only when it differs from the sum of the parts
=====================  ========================================================================

Every vendor count is read through ``_events.usage_count``: a negative, fractional or
non-numeric figure is dropped (treated as absent) with a warning, never emitted (docs/adapters.md
"Usage normalisation").

Stop table: ``stop`` -> END_TURN (STOP_SEQUENCE when ``choices[].stop_reason`` is a string,
the matched sequence as reported by vLLM; REFUSAL when refusal text arrived; TOOL_USE when tool
calls arrived, model_affirmed false), ``length``/``model_length`` -> MAX_TOKENS,
``tool_calls``/``function_call`` -> TOOL_USE, ``content_filter`` -> CONTENT_FILTERED, anything
else -> END_TURN with model_affirmed false. ``vendor_reason`` is always the raw value. DeepSeek's
``insufficient_system_resource`` finish reason is a terminal OVERLOADED error instead, held (like
a stop) until ``[DONE]`` or the end of the body so that the usage chunk after it comes first.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from protocol_py.providers.http import events as ev
from protocol_py.providers.http import vendor_json
from protocol_py.providers.http.call_ids import OPENAI_TOOL_CALL_ID, CallIds, vendor_id_entry
from protocol_py.providers.http.errors import (
    classify_error_object,
    lower_headers,
    openai_rate_limits,
    transient_error,
)
from protocol_py.providers.http.request import kernel_speaks
from protocol_py.providers.http.sse import SSEEvent
from protocol_py.rules.vendor_block import vendor_block_problems
from protocol_py.rules.vendor_data import MAX_VALUE_BYTES, OPENAI_EXTRA_CONTENT
from protocol_py_gen.content.v1 import VendorData
from protocol_py_gen.model.v1 import (
    ErrorKind,
    ModelError,
    RateLimitSnapshot,
    SafetyKind,
    SafetyNotice,
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    StreamMetadata,
    Usage,
    VendorCost,
)

__all__ = ["OpenAIStreamTranslator", "map_openai_finish", "map_openai_usage"]

_log = logging.getLogger("protocol_py.providers")

_JSON = json.JSONDecoder()

_FINISH: Mapping[str, StopReason] = {
    "stop": StopReason.END_TURN,
    "eos": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "model_length": StopReason.MAX_TOKENS,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "content_filter": StopReason.CONTENT_FILTERED,
}


def map_openai_finish(
    finish_reason: str | None,
    *,
    choice_stop_reason: object = None,
    refusal_seen: bool = False,
    tool_calls_seen: bool = False,
) -> Stop:
    """Map an OpenAI-compatible ``finish_reason`` to a Stop (docs/decisions.md#d11, case B21).

    Args:
        finish_reason: The raw finish reason, or None when the stream ended without one.
        choice_stop_reason: vLLM's ``choices[].stop_reason``: a string is the matched stop
            sequence; an integer is a stop-token id (natural end of turn).
        refusal_seen: Refusal text arrived (``delta.refusal``).
        tool_calls_seen: At least one tool call arrived.
    """
    if finish_reason is None:
        reason = StopReason.TOOL_USE if tool_calls_seen else StopReason.END_TURN
        return Stop(reason=reason, model_affirmed=False)
    mapped = _FINISH.get(finish_reason)
    if mapped is None:
        return Stop(reason=StopReason.END_TURN, model_affirmed=False, vendor_reason=finish_reason)
    if mapped == StopReason.END_TURN:
        if isinstance(choice_stop_reason, str) and choice_stop_reason:
            return Stop(
                reason=StopReason.STOP_SEQUENCE,
                matched_stop_sequence=choice_stop_reason,
                model_affirmed=True,
                vendor_reason=finish_reason,
            )
        if refusal_seen:
            return Stop(reason=StopReason.REFUSAL, model_affirmed=True, vendor_reason=finish_reason)
        if tool_calls_seen:
            return Stop(
                reason=StopReason.TOOL_USE, model_affirmed=False, vendor_reason=finish_reason
            )
    return Stop(reason=mapped, model_affirmed=True, vendor_reason=finish_reason)


def map_openai_usage(
    raw: Mapping[str, Any],
    *,
    reasoning_in_completion: bool | None = None,
    rate_limits: Sequence[RateLimitSnapshot] = (),
) -> Usage:
    """Map an OpenAI-compatible ``usage`` object to Usage (fixtures README usage table).

    Args:
        raw: The vendor's usage object.
        reasoning_in_completion: The endpoint's convention when ``total_tokens`` cannot decide
            it: True (OpenAI, DeepSeek), False (reasoning billed on top), None = decide from
            ``total_tokens``, falling back to True.
        rate_limits: Snapshots from the response headers.
    """
    prompt = ev.usage_count(raw, "prompt_tokens", "usage.prompt_tokens") or 0
    completion = ev.usage_count(raw, "completion_tokens", "usage.completion_tokens") or 0
    total = ev.usage_count(raw, "total_tokens", "usage.total_tokens")
    pdetails = raw.get("prompt_tokens_details")
    pdetails = pdetails if isinstance(pdetails, dict) else {}
    cdetails = raw.get("completion_tokens_details")
    cdetails = cdetails if isinstance(cdetails, dict) else {}

    hit = ev.usage_count(raw, "prompt_cache_hit_tokens", "usage.prompt_cache_hit_tokens")
    miss = ev.usage_count(raw, "prompt_cache_miss_tokens", "usage.prompt_cache_miss_tokens")
    cache_write = ev.usage_count(
        pdetails, "cache_write_tokens", "usage.prompt_tokens_details.cache_write_tokens"
    )
    cache_read: int | None
    if hit is not None or miss is not None:
        cache_read = hit
        input_tokens = miss if miss is not None else max(0, prompt - (hit or 0))
    else:
        cache_read = ev.usage_count(
            pdetails, "cached_tokens", "usage.prompt_tokens_details.cached_tokens"
        )
        if cache_read is None:
            cache_read = ev.usage_count(raw, "cached_tokens", "usage.cached_tokens")
        input_tokens = max(0, prompt - (cache_read or 0) - (cache_write or 0))

    reasoning = ev.usage_count(
        cdetails, "reasoning_tokens", "usage.completion_tokens_details.reasoning_tokens"
    )
    if reasoning is None:
        reasoning = ev.usage_count(raw, "reasoning_tokens", "usage.reasoning_tokens")
    counted: bool | None = None
    if reasoning is not None:
        if reasoning_in_completion is not None:
            counted = reasoning_in_completion
        elif total is not None and prompt + completion == total:
            counted = True
        elif total is not None and prompt + completion + reasoning == total:
            counted = False
        else:
            counted = True
    if counted:
        reasoning = ev.counted_reasoning(
            completion, reasoning, "usage.completion_tokens_details.reasoning_tokens"
        )
        if reasoning is None:
            counted = None
    usage = Usage(
        input_tokens=input_tokens,
        output_tokens=completion,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=reasoning,
        reasoning_already_counted=True if counted else None,
        rate_limits=list(rate_limits),
    )
    ticks = ev.usage_count(raw, "cost_in_usd_ticks", "usage.cost_in_usd_ticks")
    if ticks is not None:
        usage.vendor_cost = VendorCost(amount=str(ticks), unit="xai_ticks_1e10")
    else:
        amount = _usd_amount(raw.get("cost"))
        if amount is not None:  # OpenRouter: the request's price in USD (credits)
            usage.vendor_cost = VendorCost(amount=amount, unit="usd", currency="USD")
    if total is not None:
        parts = input_tokens + (cache_read or 0) + (cache_write or 0) + completion
        if reasoning is not None and not counted:
            parts += reasoning
        if parts != total:
            usage.vendor_total_tokens = total
    return usage


OPENAI_VENDOR = "openai"
"""The adapter family name on the vendor blocks this translator writes (VendorBlock.vendor)."""

_DETAIL_TEXT = frozenset({"text", "summary", "data"})
"""reasoning_details members whose streamed pieces are joined (the others: latest value)."""


def _separate(owner: _Call, name: str | None) -> bool:
    """Whether an entry carrying ``owner``'s vendor id at another slot is a different call
    (two calls under one id): it names a function, and the name differs from ``owner``'s or
    ``owner``'s arguments are already a whole JSON object (rule 2)."""
    if not owner.name or not name:
        return False
    if name != owner.name:
        return True
    joined = "".join(owner.fragments).strip()
    if not joined:
        return False
    try:
        return isinstance(vendor_json.loads(joined), dict)
    except ValueError:
        return False


def _usd_amount(value: object) -> str | None:
    """A vendor's USD price (a JSON number, finite, >= 0) as an exact decimal string of the
    number as sent (``0.00066`` -> ``"0.00066"``), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return format(Decimal(repr(value)), "f")


@dataclass
class _Call:
    index: int
    vendor_id: str = ""  # the id the vendor sent (routing); empty when it sent none (yet)
    id: str = ""  # the kernel id, issued when the call starts
    name: str = ""
    started: bool = False
    closed: bool = False
    entries: int = 0
    pending: list[str] = field(default_factory=list)
    fragments: list[str] = field(default_factory=list)
    extra_content: dict[str, Any] = field(default_factory=dict)


class OpenAIStreamTranslator:
    """Stateful translator for one Chat Completions stream (one response).

    Usage: call :meth:`on_event` for every SSE event, then :meth:`on_eof` when the body ends.
    Both return the StreamEvents to emit, in order; after a terminal event (stop or error)
    both return []. ``finished`` tells whether the terminal event was emitted.

    Args:
        headers: The response headers (any case).
        request_id_header: The header carrying the vendor request id.
        reasoning_fields: Delta fields carrying reasoning text, in priority order.
        reasoning_in_completion: See :func:`map_openai_usage`.
        done_ends_turn: ``data: [DONE]`` without any ``finish_reason`` ends the turn
            successfully (END_TURN, or TOOL_USE after tool calls, model_affirmed false)
            instead of the default TRANSIENT error (Configure ``compat.done_without_finish``).
        request: The request this stream answers: its history's tool-call ids are never
            reused (:mod:`protocol_py.providers.http.call_ids`). None: no history.
    """

    def __init__(
        self,
        headers: Mapping[str, str],
        *,
        request_id_header: str = "x-request-id",
        reasoning_fields: Sequence[str] = ("reasoning_content", "reasoning"),
        reasoning_in_completion: bool | None = None,
        done_ends_turn: bool = False,
        request: StreamCompletionRequest | None = None,
    ) -> None:
        h = lower_headers(headers)
        self._done_ends_turn = done_ends_turn
        self._content_type = h.get("content-type", "").split(";")[0].strip()
        self._header_request_id = h.get(request_id_header.lower(), "").strip()
        self._rate_limits = openai_rate_limits(h)
        self._reasoning_fields = tuple(reasoning_fields)
        self._reasoning_in_completion = reasoning_in_completion
        self._start_decided = False
        self._meta_decided = False
        self.request_id = self._header_request_id
        self._calls: dict[int, _Call] = {}
        self._open: dict[int, _Call] = {}
        self._by_vendor_id: dict[str, _Call] = {}
        self._ids = CallIds.from_request(request, prefix="call_")
        self._joiner = ev.SurrogateJoiner()
        self._tool_channels: dict[object, _Call] = {}
        self._details: dict[int, dict[str, Any]] = {}
        self._vendor_blocks = kernel_speaks(request, 2)
        self._tool_calls_seen = False
        self._refusal_seen = False
        self._finish: str | None = None
        self._choice_stop_reason: object = None
        self._usage: dict[str, Any] | None = None
        self.finished = False
        self._pending_error: ModelError | None = None
        self._moderated: set[str] = set()

    # -- public ---------------------------------------------------------------------------

    def on_event(self, sse: SSEEvent) -> list[StreamEvent]:
        """Translate one SSE event."""
        if self.finished:
            return []
        data = sse.data.strip()
        if not data:
            return []  # control-only or empty-data block (C10)
        out: list[StreamEvent] = []
        if sse.event == "error":
            self._decide_start(out, None)
            return self._fail(out, self._error_from_data(data))
        if sse.event not in ("message", ""):
            return []  # unknown event types on an OpenAI-compatible stream carry no content
        if data == "[DONE]":
            self._decide_start(out, None)
            if self._pending_error is not None:
                return self._fail(out, self._pending_error)
            if self._finish is None and not self._done_ends_turn:
                return self._fail(
                    out,
                    transient_error(
                        "upstream sent [DONE] without a finish_reason", request_id=self.request_id
                    ),
                )
            return self._succeed(out)
        try:
            # json.loads without its whitespace scans: ``data`` is already stripped (JSON's
            # whitespace is a subset of str.strip's), so only trailing data can remain
            if vendor_json.json_depth_exceeds(data):
                raise vendor_json.VendorJSONDepthError
            chunk, end = _JSON.raw_decode(data)
            if end != len(data):
                raise ValueError("extra data after the JSON value")
        except ValueError as exc:
            self._decide_start(out, None)
            return self._fail(
                out,
                transient_error(
                    vendor_json.malformed_event_message(exc), request_id=self.request_id
                ),
            )
        if not isinstance(chunk, dict):
            return []
        if not self._start_decided:
            self._decide_start(out, chunk)
        usage = chunk.get("usage")
        if not isinstance(usage, dict):
            xg = chunk.get("x_groq")
            usage = xg.get("usage") if isinstance(xg, dict) else None
        if isinstance(usage, dict):
            self._usage = usage  # read first: usage beside an error is kept
        if chunk.get("error") is not None:
            return self._fail(out, self._error_from_obj(chunk))
        if self._pending_error is not None:
            return out  # after an error finish reason only the usage chunk still counts
        if not self._meta_decided:
            self._decide_metadata(out, chunk)
        moderation = chunk.get("moderation")
        if isinstance(moderation, dict):
            self._moderation(out, moderation)
        choices = chunk.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if not isinstance(choice, dict):
                    continue
                index = choice.get("index")
                if (type(index) is int and index == 0) or ev.as_int(index) in (0, None):
                    self._choice(out, choice)
                    if self.finished:
                        break
        return out

    def on_json(self, body: object) -> list[StreamEvent]:
        """A whole JSON response body (HTTP 2xx, not an event stream).

        An error object (``{"error": ...}`` or vLLM's ``{"object": "error", ...}``) becomes its
        classified terminal error (an integer ``code``/``status`` in 100-599 counts as the HTTP
        status). A whole ``chat.completion`` (a server that ignored ``stream: true``) is
        translated as if streamed in one chunk: its message's reasoning, content, refusal and
        tool calls, then usage and stop. Anything else is a PERMANENT error.
        """
        if self.finished:
            return []
        out: list[StreamEvent] = []
        if not isinstance(body, dict):
            body = {}
        if body.get("error") is not None or body.get("object") == "error":
            self._decide_start(out, None)
            return self._fail(out, self._error_from_obj(body))
        choices = body.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(first, dict) or not isinstance(first.get("message"), dict):
            self._decide_start(out, None)
            return self._fail(
                out,
                ModelError(
                    kind=ErrorKind.PERMANENT,
                    message="upstream answered a JSON body that is neither a chat completion "
                    f"nor an error object (content-type {self._content_type or 'none'!r})",
                    retryable=False,
                ),
            )
        chunk = {key: value for key, value in body.items() if key != "choices"}
        chunk["choices"] = [
            {
                "index": 0,
                "delta": first["message"],
                "finish_reason": first.get("finish_reason"),
                "stop_reason": first.get("stop_reason"),
            }
        ]
        out.extend(self.on_event(SSEEvent(event="message", data=json.dumps(chunk))))
        out.extend(self.on_eof())
        return out

    def on_eof(self) -> list[StreamEvent]:
        """The body ended (without ``[DONE]`` when the stream is still open)."""
        if self.finished:
            return []
        out: list[StreamEvent] = []
        if self._pending_error is not None:
            return self._fail(out, self._pending_error)
        if self._finish is not None:
            return self._succeed(out)
        return self._fail(
            out,
            transient_error(
                "upstream stream ended before finish_reason", request_id=self.request_id
            ),
        )

    # -- internals ------------------------------------------------------------------------

    def _decide_start(self, out: list[StreamEvent], chunk: Mapping[str, Any] | None) -> None:
        if self._start_decided:
            return
        if self._header_request_id:
            self._start_decided = True
            out.append(ev.start(self._header_request_id))
            return
        if chunk is None:
            self._start_decided = True
            return
        cid = ev.as_str(chunk.get("id"))
        if cid:
            self._start_decided = True
            self.request_id = cid
            out.append(ev.start(cid))
        elif ev.as_str(chunk.get("model")) or chunk.get("choices"):
            self._start_decided = True  # content before any id: no stream_start

    def _decide_metadata(self, out: list[StreamEvent], chunk: Mapping[str, Any]) -> None:
        if self._meta_decided:
            return
        meta = StreamMetadata(
            actual_model=ev.as_str(chunk.get("model")),
            system_fingerprint=ev.as_str(chunk.get("system_fingerprint")),
            service_tier=ev.as_str(chunk.get("service_tier")),
        )
        if meta.actual_model or meta.system_fingerprint or meta.service_tier:
            self._meta_decided = True
            out.append(ev.metadata(meta))

    def _choice(self, out: list[StreamEvent], choice: Mapping[str, Any]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning_seen = False
            for name in self._reasoning_fields:
                value = delta.get(name)
                if isinstance(value, str) and value:
                    self._emit_thinking(out, value)
                    reasoning_seen = True
                    break
            details = delta.get("reasoning_details")
            if isinstance(details, list) and details:
                self._reasoning_details(out, details, text_seen=reasoning_seen)
            content = delta.get("content")
            refusal = delta.get("refusal")
            calls = delta.get("tool_calls")
            if self._details and (
                (isinstance(content, str) and content)
                or (isinstance(content, list) and content)
                or (isinstance(refusal, str) and refusal)
                or (isinstance(calls, list) and calls)
            ):
                self._emit_details(out)  # the reasoning ended: its entries, whole, in place
            self._content(out, content)
            if isinstance(refusal, str) and refusal:
                self._refusal_seen = True
                self._emit_text(out, refusal)
            if isinstance(calls, list):
                for pos, call in enumerate(calls):
                    if isinstance(call, dict):
                        self._tool_call(out, pos, call)
        finish = choice.get("finish_reason")
        if isinstance(finish, str) and finish:
            if finish == "insufficient_system_resource":
                # held until [DONE] or the end of the body: the usage chunk that follows is
                # emitted before the error
                self._pending_error = ModelError(
                    kind=ErrorKind.OVERLOADED,
                    message="the vendor interrupted generation: insufficient system resource",
                    retryable=True,
                    vendor_code=finish,
                    provider_request_id=self.request_id or None,
                )
                return
            self._finish = finish
            self._choice_stop_reason = choice.get("stop_reason")
            self._flush_text(out)
            self._emit_details(out)
            self._close_calls(out)

    def _moderation(self, out: list[StreamEvent], moderation: Mapping[str, Any]) -> None:
        """A flagged moderation result becomes one safety_notice per side (input, output)."""
        for side in ("input", "output"):
            block = moderation.get(side)
            results = block.get("results") if isinstance(block, dict) else None
            if not isinstance(results, list) or side in self._moderated:
                continue
            flagged = [r for r in results if isinstance(r, dict) and r.get("flagged") is True]
            if not flagged:
                continue
            self._moderated.add(side)
            categories = sorted(
                {
                    name
                    for r in flagged
                    if isinstance(r.get("categories"), dict)
                    for name, hit in r["categories"].items()
                    if hit is True
                }
            )
            model = ev.as_str(block.get("model")) if isinstance(block, dict) else None
            attrs = {"side": side, "categories": ",".join(categories)}
            if model:
                attrs["model"] = model
            out.append(
                StreamEvent(
                    safety_notice=SafetyNotice(
                        kind=SafetyKind.MODERATION,
                        message=f"the vendor's moderation flagged the {side}",
                        attrs=attrs,
                    )
                )
            )

    def _content(self, out: list[StreamEvent], content: object) -> None:
        if isinstance(content, str):
            if content:
                self._emit_text(out, content)
            return
        if not isinstance(content, list):
            return
        for part in content:
            if isinstance(part, str):
                if part:
                    self._emit_text(out, part)
                continue
            if not isinstance(part, dict):
                continue
            ptype = part.get("type")
            if ptype == "text":
                value = part.get("text")
                if isinstance(value, str) and value:
                    self._emit_text(out, value)
            elif ptype == "thinking":
                inner = part.get("thinking")
                items = inner if isinstance(inner, list) else [inner]
                for item in items:
                    value = item.get("text") if isinstance(item, dict) else item
                    if isinstance(value, str) and value:
                        self._emit_thinking(out, value)

    def _emit_text(self, out: list[StreamEvent], value: str) -> None:
        """A text delta, a character split across deltas joined first (SurrogateJoiner)."""
        value = self._joiner.feed("text", value)
        if value:
            out.append(ev.text(value))

    def _emit_thinking(self, out: list[StreamEvent], value: str) -> None:
        value = self._joiner.feed("thinking", value)
        if value:
            out.append(ev.thinking(value))

    def _text_of(self, channel: object, value: str) -> str:
        return self._joiner.feed(channel, value)

    def _flush_text(self, out: list[StreamEvent]) -> None:
        """Half a character still held at the end of the text or thinking: U+FFFD."""
        for channel in self._joiner.channels():
            held = self._joiner.flush(channel)
            if channel == "text":
                out.append(ev.text(held))
            elif channel == "thinking":
                out.append(ev.thinking(held))
            else:
                call = self._tool_channels.get(channel)
                if call is not None and call.started and not call.closed:
                    call.fragments.append(held)
                    out.append(ev.tool_delta(call.id, held))

    def _reasoning_details(
        self, out: list[StreamEvent], details: list[Any], *, text_seen: bool
    ) -> None:
        """OpenRouter's ``reasoning_details`` entries: merged by ``index`` (text pieces joined,
        other members kept as the latest value), kept whole for replay; their text becomes
        thinking when no plain reasoning field carried it, and a signature closes the thinking
        block as a thinking_signature."""
        for pos, raw in enumerate(details):
            if not isinstance(raw, dict):
                continue
            index = ev.as_int(raw.get("index"))
            key = index if index is not None else len(self._details) + pos
            entry = self._details.get(key)
            if entry is None:
                entry = self._details[key] = {}
            for member, value in raw.items():
                if member in _DETAIL_TEXT and isinstance(value, str):
                    entry[member] = entry.get(member, "") + value
                else:
                    entry[member] = value
            text = raw.get("text") if raw.get("type") == "reasoning.text" else raw.get("summary")
            if not text_seen and isinstance(text, str) and text:
                self._emit_thinking(out, text)
            signature = raw.get("signature")
            if isinstance(signature, str) and signature:
                held = self._joiner.flush("thinking")
                if held:
                    out.append(ev.thinking(held))
                out.append(ev.signature(signature))

    def _emit_details(self, out: list[StreamEvent]) -> None:
        """The merged reasoning_details entries, each a vendor_block (protocol 1.2) of type
        ``reasoning.<kind>``: sent back verbatim as the assistant message's reasoning_details
        (to a kernel of protocol 1.2 or later; an older kernel could not keep them)."""
        if not self._vendor_blocks:
            self._details.clear()
            return
        for key in sorted(self._details):
            entry = self._details[key]
            kind = entry.get("type")
            data = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode()
            event = ev.vendor_block(OPENAI_VENDOR, kind if isinstance(kind, str) else "", data)
            assert event.vendor_block is not None
            problems = vendor_block_problems(event.vendor_block)
            if problems or not str(kind).startswith("reasoning."):
                _log.warning("a reasoning_details entry of type %r not kept", str(kind)[:64])
                continue
            out.append(event)
        self._details.clear()

    def _tool_call(self, out: list[StreamEvent], pos: int, raw: Mapping[str, Any]) -> None:
        """Route one ``tool_calls`` entry to its call (keying rule: module docstring)."""
        index = ev.as_int(raw.get("index"))
        if index is None:
            index = pos
        call_id = ev.as_str(raw.get("id"))
        fn = raw.get("function")
        fn = fn if isinstance(fn, dict) else {}
        name = ev.as_str(fn.get("name"))
        args = fn.get("arguments")
        if isinstance(args, dict):
            args = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        call = self._open.get(index)
        extra = raw.get("extra_content")
        if call is None and not call_id and not name and not args:
            if not isinstance(extra, dict):
                # an entry with no id, no name and no arguments at a slot with no open call
                # (a local server's stray entry after a finished answer): never a phantom call
                _log.warning("a tool_calls entry with no id, name or arguments ignored")
                return
            # Only vendor data, at a slot with no open call: it belongs to the latest open call
            # (never a phantom call); with no call open it has nowhere to go (B03).
            if not self._open:
                _log.warning(
                    "extra_content outside any open tool call ignored (keys: %s)",
                    ", ".join(sorted(str(k)[:40] for k in extra)[:8]),
                )
                return
            call = self._open[max(self._open)]
        if call_id and not (call is not None and call.vendor_id == call_id):
            owner = self._by_vendor_id.get(call_id)
            if owner is not None and owner is not call and not _separate(owner, name):
                if owner.closed:
                    self._fail(
                        out,
                        ModelError(
                            kind=ErrorKind.TRANSIENT,
                            message=f"tool call {call_id!r} continued after it was closed",
                            retryable=True,
                        ),
                    )
                    return
                if call is None:
                    self._open[index] = owner  # later id-less entries here continue it too
                call = owner  # a known id at another index continues its call (rule 2)
            elif call is not None and call.vendor_id and call_id != call.vendor_id:
                self._close(out, call)  # a new id on the same index opens a new call (rule 3)
                if self.finished:
                    return
                call = None
        if call is None:
            call = _Call(index=index)
            self._calls[index] = call
            self._open[index] = call
            self._tool_calls_seen = True
        if call_id and not call.vendor_id and not call.started:
            call.vendor_id = call_id  # adopted: the call had none and has not started (rule 4)
        if call_id and (call.vendor_id == call_id or call_id not in self._by_vendor_id):
            self._by_vendor_id[call_id] = call  # (a started call keeps its id in events)
        if name and not call.name:
            call.name = name  # the name is set once, never concatenated (B02)
        if isinstance(extra, dict):
            call.extra_content.update(extra)  # opaque per-call vendor data (B03)
        if isinstance(args, str) and args:
            channel = ("tool", id(call))
            self._tool_channels[channel] = call
            args = self._text_of(channel, args)
            call.fragments.append(args)
            if call.started:
                out.append(ev.tool_delta(call.id, args))
            else:
                call.pending.append(args)
        call.entries += 1
        if call.name and (call.vendor_id or call.entries >= 2):
            self._start(out, call)  # a named call waits one more entry for its id (rule 5)

    def _start(self, out: list[StreamEvent], call: _Call) -> None:
        """Emit tool_call_start and the held fragments, under the call's kernel id: the
        vendor's id when it is free in the conversation, else a fresh one
        (:mod:`protocol_py.providers.http.call_ids`)."""
        if call.started or not call.name:
            return
        issued = self._ids.issue(call.vendor_id or None)
        call.id = issued.id
        call.started = True
        vendor_data: list[VendorData] = []
        if issued.vendor_id is not None:
            vendor_data.append(vendor_id_entry(OPENAI_TOOL_CALL_ID, issued.vendor_id))
        out.append(ev.tool_start(call.id, call.name, vendor_data))
        for fragment in call.pending:
            out.append(ev.tool_delta(call.id, fragment))
        call.pending.clear()

    def _close(self, out: list[StreamEvent], call: _Call) -> None:
        for index in [i for i, c in self._open.items() if c is call]:
            del self._open[index]
        call.closed = True
        self._start(out, call)
        channel = ("tool", id(call))
        if self._tool_channels.pop(channel, None) is not None:
            held = self._joiner.flush(channel)
            if held and call.started:
                call.fragments.append(held)
                out.append(ev.tool_delta(call.id, held))
        if not call.started:
            if not call.fragments and not call.extra_content:
                # an id and nothing else (no name, no arguments): a stray entry, not a call
                _log.warning(
                    "a tool_calls entry with id %r and no name or arguments ignored",
                    call.vendor_id[:64],
                )
                return
            self._fail(
                out,
                ModelError(
                    kind=ErrorKind.TRANSIENT,
                    message=f"tool call {call.vendor_id or f'at index {call.index}'!r} arrived "
                    "without a function name",
                    retryable=True,
                ),
            )
            return
        problem = ev.check_tool_arguments(call.id, call.fragments)
        if problem is not None and not self._output_limited():
            self._fail(out, problem)
            return
        # (arguments cut by the output limit: closed as they are; the stop says MAX_TOKENS and
        # the accumulator keeps the call out of the message)
        vendor_data: list[VendorData] = []
        if call.extra_content:
            value = json.dumps(call.extra_content, ensure_ascii=False, separators=(",", ":"))
            encoded = value.encode()
            if len(encoded) > MAX_VALUE_BYTES:
                self._fail(
                    out,
                    ModelError(
                        kind=ErrorKind.PERMANENT,
                        message=f"tool call {call.id!r}: extra_content is {len(encoded)} bytes, "
                        f"above the vendor data limit of {MAX_VALUE_BYTES}",
                        retryable=False,
                    ),
                )
                return
            vendor_data.append(VendorData(location=OPENAI_EXTRA_CONTENT, value=encoded))
        out.append(ev.tool_done(call.id, vendor_data))

    def _output_limited(self) -> bool:
        """Whether the finish reason says the output limit cut the turn (MAX_TOKENS)."""
        return self._finish is not None and _FINISH.get(self._finish) == StopReason.MAX_TOKENS

    def _close_calls(self, out: list[StreamEvent]) -> None:
        for index in sorted(self._open):
            if self.finished:
                return
            call = self._open.get(index)
            if call is not None and not call.closed:
                self._close(out, call)

    def _succeed(self, out: list[StreamEvent]) -> list[StreamEvent]:
        self._close_calls(out)
        if self.finished:
            return out
        if self._usage is not None:
            out.append(StreamEvent(usage=self._mapped_usage()))
        elif self._rate_limits:
            out.append(ev.metadata(StreamMetadata(rate_limits=list(self._rate_limits))))
        out.append(
            StreamEvent(
                stop=map_openai_finish(
                    self._finish,
                    choice_stop_reason=self._choice_stop_reason,
                    refusal_seen=self._refusal_seen,
                    tool_calls_seen=self._tool_calls_seen,
                )
            )
        )
        self.finished = True
        return out

    def on_failure(self, error: ModelError) -> list[StreamEvent]:
        """End the stream with ``error`` (a stall, a cut connection): the usage the vendor
        already reported, then the error (a pending vendor error finish reason wins)."""
        return self._fail([], self._pending_error or error)

    def _fail(self, out: list[StreamEvent], err: ModelError) -> list[StreamEvent]:
        if not self.finished:
            if not err.provider_request_id and self.request_id:
                err.provider_request_id = self.request_id
            if self._usage is not None:
                out.append(StreamEvent(usage=self._mapped_usage()))
            out.append(ev.error(err))
            self.finished = True
        return out

    def _mapped_usage(self) -> Usage:
        assert self._usage is not None
        return map_openai_usage(
            self._usage,
            reasoning_in_completion=self._reasoning_in_completion,
            rate_limits=self._rate_limits,
        )

    def _error_from_data(self, data: str) -> ModelError:
        try:
            obj = vendor_json.loads(data)
        except ValueError:
            obj = {"error": {"message": data[:500]}}
        return self._error_from_obj(obj)

    def _error_from_obj(self, obj: object) -> ModelError:
        return classify_error_object(obj, request_id=self.request_id or None)
