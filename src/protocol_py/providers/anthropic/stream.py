"""Anthropic Messages stream -> StreamEvents.

Implements the translation contract of ``testdata/vendor/README.md`` and docs/decisions.md#d6,
docs/decisions.md#d7 and docs/decisions.md#d10 to docs/decisions.md#d12 for ``POST /v1/messages``
with ``stream: true``. Pure: consumes parsed SSE events and the response headers, never does
I/O.

Mapping summary:

- ``stream_start`` from the ``request-id`` header at the first SSE event (the message id is not
  a request id: without the header there is none).
- ``metadata`` once at ``message_start``: ``actual_model`` = ``message.model``,
  ``service_tier`` = ``message.usage.service_tier``.
- Content blocks by ``index``: ``text_delta`` -> text, ``thinking_delta`` -> thinking,
  ``signature_delta`` -> the block's signature (assigned, emitted once as thinking_signature at
  ``content_block_stop``), ``redacted_thinking`` -> one redacted_thinking event with ``data``
  verbatim at ``content_block_start``, ``tool_use`` -> tool_call_start at
  start (under the kernel id of :mod:`protocol_py.providers.http.call_ids`, the vendor's id kept
  as ``anthropic.tool_use.id`` vendor data when it had to be replaced),
  ``input_json_delta.partial_json`` fragments forwarded as received (empty ones skipped),
  tool_call_done at ``content_block_stop``. Any other block type (``server_tool_use`` and the
  ``*_tool_result`` kinds, which the vendor executes itself, ``compaction``) is assembled and
  emitted whole at ``content_block_stop`` as one ``vendor_block`` (protocol 1.2); a text block's
  ``citations_delta`` entries are sent when it ends as an empty text_delta carrying
  ``anthropic.text.citations`` vendor data. Both only to a kernel of 1.2 or later
  (``kernel_protocol_version``); never a client tool call.
- Text, thinking and tool-argument fragments pass through a surrogate joiner: the halves of a
  character split between two deltas are joined (a half that never pairs is U+FFFD).
- A tool call whose arguments do not parse at ``content_block_stop`` is held open: when the
  stop reason is the output limit (``max_tokens``, ``model_context_window_exceeded``) it is
  closed as it is before usage and a MAX_TOKENS stop (the accumulator keeps it out of the
  message); otherwise it is the TRANSIENT malformed-arguments error.
- ``ping`` is ignored; ``event: error`` is one terminal error.
- Usage: ``message_start.usage`` updated field by field by ``message_delta.usage`` (cumulative,
  last value wins); ``usage.server_tool_use`` counters become UsageComponents and, for the
  billed ones (:data:`SERVER_TOOL_FEES`), RequestCounts (protocol 1.2). When
  ``usage.iterations`` is present (server-side compaction) the event carries the sum over the
  iterations.
- Usage and stop are emitted at ``message_stop``. Blocks the vendor left open (no
  ``content_block_stop``) are closed first, in index order, exactly as ``content_block_stop``
  would close them (a tool call's arguments are checked, then tool_call_done; a thinking block's
  signature is emitted); a ``content_block_start`` on an index whose block is still open closes
  that block the same way first. So the output always satisfies the event order.
- End of body before ``message_stop`` -> TRANSIENT error ("upstream stream ended before
  message_stop"), keeping what was streamed. Any terminal error first emits the signature of
  an open thinking block whose ``signature_delta`` already arrived (the block is then
  replayable); an unsigned thinking block of such a turn never gets a signature event (B09).
  Then the usage reported so far (``message_start`` merged with any ``message_delta``) is
  emitted as a ``usage`` event before the ``error``: reported usage is never dropped.
- A whole JSON body (HTTP 2xx, not an event stream) goes to :meth:`on_json`.

Usage table: input_tokens = ``input_tokens`` (already excludes cache), cache_read_tokens =
``cache_read_input_tokens``, cache_write_tokens = max(``cache_creation_input_tokens``,
``cache_creation.ephemeral_5m_input_tokens`` + ``ephemeral_1h_input_tokens``),
cache_write_1h_tokens = ``cache_creation.ephemeral_1h_input_tokens``, output_tokens =
``output_tokens``, reasoning_tokens = ``output_tokens_details.thinking_tokens`` with
reasoning_already_counted true. Each only when reported (0 counts as reported); a negative,
fractional or non-numeric count is dropped with a warning (docs/adapters.md).

Stop table: end_turn -> END_TURN, max_tokens and model_context_window_exceeded -> MAX_TOKENS,
tool_use -> TOOL_USE, stop_sequence -> STOP_SEQUENCE with ``matched_stop_sequence``, refusal ->
REFUSAL, pause_turn -> PAUSE_TURN (protocol 1.1: the turn is paused, not complete; the kernel
sends the paused content back as the last message to continue it); any unknown value -> END_TURN
with model_affirmed false.
``stop_sequence`` with a null (or non-string) ``stop_sequence`` -> END_TURN, model_affirmed
false, vendor_reason ``stop_sequence``: the contract sets ``matched_stop_sequence`` exactly when
the reason is STOP_SEQUENCE (the checker rejects STOP_SEQUENCE without it), so the adapter cannot
report STOP_SEQUENCE without knowing which sequence matched; the END_TURN it reports instead is
its own inference, hence model_affirmed false (docs/decisions.md#d11), and vendor_reason keeps the
raw value.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol_py.providers.http import events as ev
from protocol_py.providers.http import vendor_json
from protocol_py.providers.http.call_ids import ANTHROPIC_TOOL_USE_ID, CallIds, vendor_id_entry
from protocol_py.providers.http.errors import (
    anthropic_rate_limits,
    classify_error_object,
    lower_headers,
    transient_error,
)
from protocol_py.providers.http.request import kernel_speaks
from protocol_py.providers.http.sse import SSEEvent
from protocol_py.rules.vendor_block import vendor_block_problems
from protocol_py.rules.vendor_data import ANTHROPIC_TEXT_CITATIONS, MAX_VALUE_BYTES
from protocol_py_gen.content.v1 import VendorData
from protocol_py_gen.model.v1 import (
    ErrorKind,
    ModelError,
    RateLimitSnapshot,
    RequestCount,
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    StreamMetadata,
    Usage,
    UsageComponent,
)

__all__ = ["AnthropicStreamTranslator", "map_anthropic_stop", "map_anthropic_usage"]

_STOP: Mapping[str, StopReason] = {
    "end_turn": StopReason.END_TURN,
    "max_tokens": StopReason.MAX_TOKENS,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "tool_use": StopReason.TOOL_USE,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "refusal": StopReason.REFUSAL,
    "pause_turn": StopReason.PAUSE_TURN,
}

_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def map_anthropic_stop(stop_reason: str | None, stop_sequence: object = None) -> Stop:
    """Map Anthropic's ``stop_reason`` (+ ``stop_sequence``) to a Stop
    (docs/decisions.md#d11, case B21)."""
    if stop_reason is None:
        return Stop(reason=StopReason.END_TURN, model_affirmed=False)
    mapped = _STOP.get(stop_reason)
    if mapped is None:
        return Stop(reason=StopReason.END_TURN, model_affirmed=False, vendor_reason=stop_reason)
    if mapped == StopReason.STOP_SEQUENCE:
        if not isinstance(stop_sequence, str):
            return Stop(reason=StopReason.END_TURN, model_affirmed=False, vendor_reason=stop_reason)
        return Stop(
            reason=mapped,
            matched_stop_sequence=stop_sequence,
            model_affirmed=True,
            vendor_reason=stop_reason,
        )
    return Stop(reason=mapped, model_affirmed=True, vendor_reason=stop_reason)


def map_anthropic_usage(
    raw: Mapping[str, Any], *, rate_limits: list[RateLimitSnapshot] | None = None
) -> Usage:
    """Map a merged Anthropic usage object (start + deltas, or iteration sums) to Usage.

    Counts go through :func:`~protocol_py.providers.http.events.usage_count`: a negative,
    fractional or non-numeric figure is dropped (absent; 0 for the required input/output
    counts) with a warning. The cache-write categories are made consistent (docs/adapters.md
    "Usage normalisation"): ``cache_write_tokens`` = max(``cache_creation_input_tokens``,
    ``ephemeral_5m_input_tokens`` + ``ephemeral_1h_input_tokens``), present when any of the
    three is; ``cache_write_1h_tokens`` = ``ephemeral_1h_input_tokens`` as reported. The result
    always passes the StreamAccumulator's usage checks and :func:`protocol_py.rules.cost.cost`.
    """
    input_tokens = ev.usage_count(raw, "input_tokens", "usage.input_tokens") or 0
    output_tokens = ev.usage_count(raw, "output_tokens", "usage.output_tokens") or 0
    total_write = ev.usage_count(
        raw, "cache_creation_input_tokens", "usage.cache_creation_input_tokens"
    )
    creation = raw.get("cache_creation")
    five_min = one_hour = None
    if isinstance(creation, dict):
        five_min = ev.usage_count(
            creation, "ephemeral_5m_input_tokens", "usage.cache_creation.ephemeral_5m_input_tokens"
        )
        one_hour = ev.usage_count(
            creation, "ephemeral_1h_input_tokens", "usage.cache_creation.ephemeral_1h_input_tokens"
        )
    cache_write: int | None = None
    if total_write is not None or five_min is not None or one_hour is not None:
        cache_write = max(total_write or 0, (five_min or 0) + (one_hour or 0))
    details = raw.get("output_tokens_details")
    thinking = (
        ev.usage_count(details, "thinking_tokens", "usage.output_tokens_details.thinking_tokens")
        if isinstance(details, dict)
        else None
    )
    thinking = ev.counted_reasoning(
        output_tokens, thinking, "usage.output_tokens_details.thinking_tokens"
    )
    counts, components = _server_tool_counts(raw.get("server_tool_use"))
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=ev.usage_count(
            raw, "cache_read_input_tokens", "usage.cache_read_input_tokens"
        ),
        cache_write_tokens=cache_write,
        cache_write_1h_tokens=one_hour,
        reasoning_tokens=thinking,
        reasoning_already_counted=True if thinking is not None else None,
        rate_limits=list(rate_limits or []),
        components=components,
        request_counts=counts,
    )


SERVER_TOOL_FEES: Mapping[str, str] = {
    "web_search_requests": "web_search",
    "web_fetch_requests": "web_fetch",
}
"""``usage.server_tool_use`` counters billed per request -> the ``RequestCount`` name they are
reported under (protocol 1.2), priced by the tier's ``request_rates`` of that name."""

_MAX_COMPONENTS = 16
"""Most ``usage.server_tool_use`` counters reported as UsageComponents."""


def _server_tool_counts(raw: object) -> tuple[list[RequestCount], list[UsageComponent]]:
    """``usage.server_tool_use`` (for example ``{"web_search_requests": 3}``): every counter as
    a UsageComponent of its own name (a 1.1 kernel keeps it), and the billed ones
    (:data:`SERVER_TOOL_FEES`) also as RequestCounts (protocol 1.2, priced per request)."""
    if not isinstance(raw, dict):
        return [], []
    counts: list[RequestCount] = []
    components: list[UsageComponent] = []
    for key in sorted(raw)[:_MAX_COMPONENTS]:
        if not isinstance(key, str) or not _COUNTER_NAME.fullmatch(key):
            continue
        value = ev.usage_count(raw, key, f"usage.server_tool_use.{key}")
        if value is None:
            continue
        components.append(UsageComponent(name=key, value=value))
        fee = SERVER_TOOL_FEES.get(key)
        if fee is not None:
            counts.append(RequestCount(name=fee, count=value))
    return counts, components


_COUNTER_NAME = re.compile(r"[a-z0-9_]{1,64}")


_CREATION_KEYS = ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")


def _sum_iterations(iterations: list[Any]) -> dict[str, Any]:
    total: dict[str, Any] = {}
    creation: dict[str, int] = {}
    thinking: int | None = None
    for item in iterations:
        if not isinstance(item, dict):
            continue
        for key in _USAGE_KEYS:
            value = ev.usage_count(item, key, f"usage.iterations[].{key}")
            if value is not None:
                total[key] = total.get(key, 0) + value
        parts = item.get("cache_creation")
        if isinstance(parts, dict):
            for key in _CREATION_KEYS:
                value = ev.usage_count(parts, key, f"usage.iterations[].cache_creation.{key}")
                if value is not None:
                    creation[key] = creation.get(key, 0) + value
        details = item.get("output_tokens_details")
        if isinstance(details, dict):
            value = ev.usage_count(
                details, "thinking_tokens", "usage.iterations[].output_tokens_details"
            )
            if value is not None:
                thinking = (thinking or 0) + value
    if creation:
        total["cache_creation"] = creation
    if thinking is not None:
        total["output_tokens_details"] = {"thinking_tokens": thinking}
    return total


ANTHROPIC_VENDOR = "anthropic"
"""The adapter family name on the vendor blocks this translator writes (VendorBlock.vendor)."""

MAX_CITATIONS_BYTES = MAX_VALUE_BYTES
"""Largest citations list kept on one text block (a VendorData value), in bytes."""

_KNOWN_BLOCKS = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})
_OUTPUT_LIMITS = frozenset({"max_tokens", "model_context_window_exceeded"})
"""Stop reasons that say the output limit cut the turn: a tool call's arguments may be cut."""

_log = logging.getLogger("protocol_py.providers")


@dataclass
class _Block:
    kind: str
    call_id: str = ""
    signature: str = ""
    fragments: list[str] = field(default_factory=list)
    raw: dict[str, Any] | None = None  # a vendor-owned block, assembled from its events
    citations: list[Any] | None = None  # a text block's citations (None: the block has none)
    text_seen: bool = False


class AnthropicStreamTranslator:
    """Stateful translator for one Anthropic Messages stream.

    Call :meth:`on_event` for each SSE event and :meth:`on_eof` when the body ends; both return
    the StreamEvents to emit and nothing after the terminal event (``finished``).

    Args:
        headers: The response headers (any case).
        request: The request this stream answers: its history's tool-call ids are never
            reused (:mod:`protocol_py.providers.http.call_ids`), and its
            ``kernel_protocol_version`` decides whether 1.2 events (vendor blocks, citations)
            are sent. None: no history, a 1.1 kernel.
    """

    def __init__(
        self, headers: Mapping[str, str], *, request: StreamCompletionRequest | None = None
    ) -> None:
        h = lower_headers(headers)
        self.request_id = h.get("request-id", "").strip()
        self._ids = CallIds.from_request(request, prefix="toolu_")
        self._joiner = ev.SurrogateJoiner()
        self._held: list[_Block] = []  # tool calls closed with arguments that do not parse
        self._v12 = kernel_speaks(request, 2)
        self._rate_limits = anthropic_rate_limits(h)
        self._started = False
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self._stop_sequence: object = None
        self.finished = False

    def on_event(self, sse: SSEEvent) -> list[StreamEvent]:
        """Translate one SSE event."""
        if self.finished:
            return []
        data = sse.data.strip()
        if not data:
            return []
        out: list[StreamEvent] = []
        if not self._started:
            self._started = True
            if self.request_id:
                out.append(ev.start(self.request_id))
        try:
            obj = vendor_json.loads(data)
        except ValueError as exc:
            if sse.event == "error" and not isinstance(exc, vendor_json.VendorJSONDepthError):
                obj = {"type": "error", "error": {"message": data[:500]}}
            else:
                return self._fail(out, transient_error(vendor_json.malformed_event_message(exc)))
        if not isinstance(obj, dict):
            return out
        etype = obj.get("type") if isinstance(obj.get("type"), str) else sse.event
        if sse.event == "error" or etype == "error":
            return self._fail(out, classify_error_object(obj, request_id=self.request_id or None))
        handler = _HANDLERS.get(str(etype))
        if handler is not None:
            handler(self, out, obj)
        return out

    def on_json(self, body: object) -> list[StreamEvent]:
        """A whole JSON response body (HTTP 2xx, not an event stream).

        ``{"type": "error", ...}`` (or any object with ``error``) becomes its classified
        terminal error; a whole ``{"type": "message", ...}`` (a non-streamed answer) is
        translated block by block as if streamed: metadata, each content block, usage, stop.
        Anything else is a PERMANENT error.
        """
        if self.finished:
            return []
        out: list[StreamEvent] = []
        if not self._started:
            self._started = True
            if self.request_id:
                out.append(ev.start(self.request_id))
        if not isinstance(body, dict):
            body = {}
        if body.get("type") == "error" or body.get("error") is not None:
            return self._fail(out, classify_error_object(body, request_id=self.request_id or None))
        content = body.get("content")
        if body.get("type") != "message" or not isinstance(content, list):
            return self._fail(
                out,
                ModelError(
                    kind=ErrorKind.PERMANENT,
                    message="upstream answered a JSON body that is neither a message nor an "
                    "error object",
                    retryable=False,
                ),
            )
        self._message_start(out, {"message": {**body, "content": []}})
        for index, block in enumerate(content):
            if self.finished:
                return out
            self._block_start(out, {"index": index, "content_block": block})
            if not self.finished:
                self._block_stop(out, {"index": index})
        if self.finished:
            return out
        self._message_delta(
            out,
            {
                "delta": {
                    "stop_reason": body.get("stop_reason"),
                    "stop_sequence": body.get("stop_sequence"),
                }
            },
        )
        self._message_stop(out, {})
        return out

    def on_eof(self) -> list[StreamEvent]:
        """The body ended; without ``message_stop`` that is a TRANSIENT error."""
        if self.finished:
            return []
        return self._fail([], transient_error("upstream stream ended before message_stop"))

    # -- handlers -------------------------------------------------------------------------

    def _message_start(self, out: list[StreamEvent], obj: Mapping[str, Any]) -> None:
        message = obj.get("message")
        if not isinstance(message, dict):
            return
        usage = message.get("usage")
        if isinstance(usage, dict):
            self._usage.update(usage)
        model = ev.as_str(message.get("model"))
        tier = ev.as_str(usage.get("service_tier")) if isinstance(usage, dict) else None
        if model or tier:
            out.append(ev.metadata(StreamMetadata(actual_model=model, service_tier=tier)))

    def _block_start(self, out: list[StreamEvent], obj: Mapping[str, Any]) -> None:
        index = ev.as_int(obj.get("index"))
        block = obj.get("content_block")
        if index is None or not isinstance(block, dict):
            return
        btype = str(block.get("type"))
        previous = self._blocks.pop(index, None)
        if previous is not None:
            self._close_block(out, previous)  # index reused without content_block_stop
            if self.finished:
                return
        entry = _Block(kind=btype)
        self._blocks[index] = entry
        if btype == "text":
            if "citations" in block:
                entry.citations = []
            value = block.get("text")
            if isinstance(value, str) and value:
                self._text(out, entry, value)
        elif btype == "thinking":
            value = block.get("thinking")
            if isinstance(value, str) and value:
                self._thinking(out, value)
            sig = block.get("signature")
            if isinstance(sig, str) and sig:
                entry.signature = sig
        elif btype == "redacted_thinking":
            data = block.get("data")
            if isinstance(data, str) and data:
                out.append(ev.redacted(data))
        elif btype == "tool_use":
            vendor_id = ev.as_str(block.get("id"))
            name = ev.as_str(block.get("name"))
            if vendor_id is None or name is None:
                self._fail(out, transient_error(f"tool_use block {index} without id or name"))
                return
            issued = self._ids.issue(vendor_id)
            entry.call_id = issued.id
            kept = (
                [vendor_id_entry(ANTHROPIC_TOOL_USE_ID, issued.vendor_id)]
                if issued.vendor_id is not None
                else []
            )
            out.append(ev.tool_start(issued.id, name, kept))
            initial = block.get("input")
            if isinstance(initial, dict) and initial:
                fragment = json.dumps(initial, ensure_ascii=False, separators=(",", ":"))
                entry.fragments.append(fragment)
                out.append(ev.tool_delta(issued.id, fragment))
        else:
            # server_tool_use, *_tool_result, compaction, ...: the vendor's own block, kept
            # whole and sent back verbatim (protocol 1.2 vendor_block); never a client call
            entry.raw = dict(block)

    def _text(self, out: list[StreamEvent], entry: _Block, value: str) -> None:
        value = self._joiner.feed("text", value)
        if not value:
            return
        if not entry.text_seen and entry.citations is not None and self._v12:
            out.append(ev.text_block(value))  # its own block: the citations belong to it
        else:
            out.append(ev.text(value))
        entry.text_seen = True

    def _thinking(self, out: list[StreamEvent], value: str) -> None:
        value = self._joiner.feed("thinking", value)
        if value:
            out.append(ev.thinking(value))

    def _block_delta(self, out: list[StreamEvent], obj: Mapping[str, Any]) -> None:
        index = ev.as_int(obj.get("index"))
        delta = obj.get("delta")
        if index is None or not isinstance(delta, dict):
            return
        entry = self._blocks.get(index)
        dtype = delta.get("type")
        if entry is not None and entry.raw is not None:
            self._vendor_delta(out, index, entry, delta)
        elif dtype == "text_delta":
            value = delta.get("text")
            if isinstance(value, str) and value:
                if entry is None:
                    entry = self._blocks[index] = _Block(kind="text")
                self._text(out, entry, value)
        elif dtype == "citations_delta":
            citation = delta.get("citation")
            if entry is not None and entry.kind == "text" and citation is not None:
                if entry.citations is None:
                    entry.citations = []
                entry.citations.append(citation)
        elif dtype == "thinking_delta":
            value = delta.get("thinking")
            if isinstance(value, str) and value:
                self._thinking(out, value)
        elif dtype == "signature_delta":
            sig = delta.get("signature")
            if isinstance(sig, str) and entry is not None:
                entry.signature = sig  # assigned, as the vendor SDK does (B06)
        elif dtype == "input_json_delta":
            value = delta.get("partial_json")
            if entry is None and isinstance(value, str) and value:
                self._fail(
                    out,
                    transient_error(f"input_json_delta for block {index}, which was never started"),
                )
            elif isinstance(value, str) and value and entry is not None and entry.call_id:
                value = self._joiner.feed(("tool", entry.call_id), value)
                if value:
                    entry.fragments.append(value)
                    out.append(ev.tool_delta(entry.call_id, value))

    def _vendor_delta(
        self, out: list[StreamEvent], index: int, entry: _Block, delta: Mapping[str, Any]
    ) -> None:
        """A delta of a vendor-owned block: ``input_json_delta`` fragments assemble its
        ``input``, ``compaction_delta`` pieces its ``content``; other kinds are ignored."""
        assert entry.raw is not None
        dtype = delta.get("type")
        if dtype == "input_json_delta":
            value = delta.get("partial_json")
            if isinstance(value, str) and value:
                entry.fragments.append(value)
        elif dtype == "compaction_delta":
            value = delta.get("content")
            if isinstance(value, str):
                before = entry.raw.get("content")
                entry.raw["content"] = (before if isinstance(before, str) else "") + value
        else:
            _log.warning(
                "a %r delta of the vendor block %d (%s) ignored",
                str(dtype)[:64],
                index,
                entry.kind[:64],
            )

    def _block_stop(self, out: list[StreamEvent], obj: Mapping[str, Any]) -> None:
        index = ev.as_int(obj.get("index"))
        entry = self._blocks.pop(index, None) if index is not None else None
        if entry is None:
            return
        self._close_block(out, entry)

    def _close_block(self, out: list[StreamEvent], entry: _Block) -> None:
        """Finish one block: a thinking block's signature, a tool call's done (args checked),
        a text block's citations, a vendor-owned block emitted whole."""
        if entry.kind == "thinking":
            held = self._joiner.flush("thinking")
            if held:
                out.append(ev.thinking(held))
            if entry.signature:
                out.append(ev.signature(entry.signature))
        elif entry.kind == "text":
            held = self._joiner.flush("text")
            if held:
                self._text(out, entry, held)
            if entry.citations and self._v12:
                self._citations(out, entry.citations)
        elif entry.call_id:
            held = self._joiner.flush(("tool", entry.call_id))
            if held:
                entry.fragments.append(held)
                out.append(ev.tool_delta(entry.call_id, held))
            problem = ev.check_tool_arguments(entry.call_id, entry.fragments)
            if problem is not None:
                # held open until the stop says why: cut by the output limit (MAX_TOKENS, the
                # call closed as it is) or malformed (a TRANSIENT error)
                self._held.append(entry)
                return
            out.append(ev.tool_done(entry.call_id))
        elif entry.raw is not None:
            self._vendor_block(out, entry)

    def _citations(self, out: list[StreamEvent], citations: list[Any]) -> None:
        value = json.dumps(citations, ensure_ascii=False, separators=(",", ":")).encode()
        if len(value) > MAX_CITATIONS_BYTES:
            _log.warning("citations of %d bytes not kept (limit %d)", len(value), MAX_VALUE_BYTES)
            return
        out.append(
            ev.text_vendor_data([VendorData(location=ANTHROPIC_TEXT_CITATIONS, value=value)])
        )

    def _vendor_block(self, out: list[StreamEvent], entry: _Block) -> None:
        assert entry.raw is not None
        raw = entry.raw
        if entry.fragments:
            joined = "".join(entry.fragments)
            try:
                raw["input"] = vendor_json.loads(joined) if joined.strip() else {}
            except ValueError:
                _log.warning("the %s block's input is not valid JSON: not kept", entry.kind[:64])
                return
        if not self._v12:
            return  # a kernel of 1.1 has no slot for it (StreamCompletionRequest, 1.2)
        data = json.dumps(raw, ensure_ascii=False, separators=(",", ":")).encode()
        event = ev.vendor_block(ANTHROPIC_VENDOR, entry.kind, data)
        assert event.vendor_block is not None
        problems = vendor_block_problems(event.vendor_block)
        if problems:  # a type name outside the rules, or over MAX_DATA_BYTES: never cut
            _log.warning("a %r block not kept: %s", entry.kind[:64], problems[0].message)
            return
        out.append(event)

    def _message_delta(self, out: list[StreamEvent], obj: Mapping[str, Any]) -> None:
        delta = obj.get("delta")
        if isinstance(delta, dict):
            reason = delta.get("stop_reason")
            if isinstance(reason, str) and reason:
                self._stop_reason = reason
                self._stop_sequence = delta.get("stop_sequence")
        usage = obj.get("usage")
        if isinstance(usage, dict):
            iterations = usage.get("iterations")
            if isinstance(iterations, list) and iterations:
                summed = _sum_iterations(iterations)
                for key in (*_USAGE_KEYS, "cache_creation", "output_tokens_details"):
                    if key in summed:
                        self._usage[key] = summed[key]
                if isinstance(usage.get("server_tool_use"), dict):
                    self._usage["server_tool_use"] = usage["server_tool_use"]
            else:
                for key, value in usage.items():
                    if value is not None:
                        self._usage[key] = value

    def _message_stop(self, out: list[StreamEvent], obj: Mapping[str, Any]) -> None:
        for index in sorted(self._blocks):  # blocks the vendor left open close here, in order
            self._close_block(out, self._blocks.pop(index))
            if self.finished:
                return
        if self._held:
            if self._stop_reason not in _OUTPUT_LIMITS:
                entry = self._held[0]
                problem = ev.check_tool_arguments(entry.call_id, entry.fragments)
                assert problem is not None
                self._fail(out, problem)
                return
            # the output limit cut these calls: closed as they are (the stop says MAX_TOKENS
            # and the accumulator keeps them out of the message), never a retryable error
            for entry in self._held:
                out.append(ev.tool_done(entry.call_id))
            self._held.clear()
        out.append(
            StreamEvent(usage=map_anthropic_usage(self._usage, rate_limits=self._rate_limits))
        )
        out.append(StreamEvent(stop=map_anthropic_stop(self._stop_reason, self._stop_sequence)))
        self.finished = True

    def _fail(self, out: list[StreamEvent], err: ModelError) -> list[StreamEvent]:
        if not self.finished:
            for index in sorted(self._blocks):  # keep a signature that already arrived
                entry = self._blocks[index]
                if entry.kind == "thinking" and entry.signature:
                    out.append(ev.signature(entry.signature))
                    entry.signature = ""
            if not err.provider_request_id and self.request_id:
                err.provider_request_id = self.request_id
            if self._usage:  # reported usage is never dropped: usage, then the error
                usage = map_anthropic_usage(self._usage, rate_limits=self._rate_limits)
                out.append(StreamEvent(usage=usage))
            out.append(ev.error(err))
            self.finished = True
        return out

    def on_failure(self, error: ModelError) -> list[StreamEvent]:
        """End the stream with ``error`` (a stall, a cut connection): an open thinking block's
        signature, the usage reported so far, then the error."""
        return self._fail([], error)


_HANDLERS = {
    "message_start": AnthropicStreamTranslator._message_start,
    "content_block_start": AnthropicStreamTranslator._block_start,
    "content_block_delta": AnthropicStreamTranslator._block_delta,
    "content_block_stop": AnthropicStreamTranslator._block_stop,
    "message_delta": AnthropicStreamTranslator._message_delta,
    "message_stop": AnthropicStreamTranslator._message_stop,
}
