"""Gemini ``streamGenerateContent?alt=sse`` body -> StreamEvents (docs/adapters.md "Gemini").

Pure: consumes parsed SSE events (with :data:`~protocol_py.providers.http.sse.OTHER_LINE` lines,
``SSEParser(other_lines=True)``) and never does I/O. Implements the translation contract of
``fixtures/vendor/README.md`` and docs/decisions.md#d6, #d7 and #d10 to #d12 for Gemini's wire:

- Framing: each event is one ``data:`` line holding one whole ``GenerateContentResponse``; CR
  LF line ends; no ``event:`` field and no ``[DONE]``: the stream ends with the body. Text
  parts carry only their new text; ``usageMetadata`` is cumulative and only the last object
  that holds counts is used (earlier ones are provisional; Vertex sends counts only at the end).
  So ``usage`` and ``stop`` are held until the end of the body.
- Lines outside the event-stream grammar are never ignored: a JSON value spread over such lines
  (Google's raw ``{"error": ...}`` object after HTTP 200, also after a STOP event; an array
  ``[{...}, {...}]`` from a proxy that dropped ``alt=sse``) is read by a bounded scanner
  (:data:`MAX_RAW_JSON_BYTES` per value): an error object is one terminal classified error, a
  response object is translated like an event, anything else is a TRANSIENT error.
- ``stream_start`` = ``responseId`` (Gemini sends no request-id header), ``metadata`` once at
  the first event: ``actual_model`` = ``modelVersion``, ``service_tier`` =
  ``usageMetadata.serviceTier``, attr ``gemini.traffic_type`` (Vertex).
- Parts of ``candidates[0].content.parts`` in order: a thought part (``thought: true``) ->
  thinking_delta (its ``thoughtSignature``, if any, closes the thinking block); a text part ->
  text_delta; a ``functionCall`` -> tool_call_start (vendor data: the part's signature and the
  vendor's call id, :mod:`~protocol_py.providers.gemini.parts`), one tool_call_delta with the
  arguments object as compact JSON (none for ``{}``), tool_call_done. Vertex's streamed
  arguments (``willContinue``, ``partialArgs[{jsonPath, stringValue|numberValue|boolValue|
  nullValue}]``, closed by ``{}`` or by the end of the response) are assembled and sent as one
  delta when the call closes. Other parts (inline data, code execution, server tools) emit
  nothing.
- A signed text part: with a kernel of protocol 1.2 (``text_vendor_data``) a text_delta with
  ``new_block`` and ``vendor_data`` [``gemini.part.thought_signature``], its text possibly
  empty, so the part is its own TextBlock and its signature goes back on it. For a kernel of
  1.0/1.1 the 1.1 encoding: a thinking_signature when that text block closes (at the next
  non-text part, another signed text part, or the end), which a 1.1 accumulator keeps as a
  signature-only ThinkingBlock right after the text.
- Stop sequences are detected here (Gemini's STOP does not say which sequence matched, so the
  adapter does not send them): answer text is held back by the length of the longest sequence
  minus one, and at the first match the text before it is emitted, then the usage reported so
  far and ``stop{STOP_SEQUENCE, matched_stop_sequence, model_affirmed false}``; the upstream
  call is then closed.
- Finish: STOP -> END_TURN (affirmed), or TOOL_USE (not affirmed) when the response called a
  function; MAX_TOKENS -> MAX_TOKENS; SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII,
  IMAGE_SAFETY, IMAGE_PROHIBITED_CONTENT, IMAGE_RECITATION, MODEL_ARMOR -> a MODERATION
  safety_notice, then CONTENT_FILTERED (affirmed); MALFORMED_FUNCTION_CALL and
  UNEXPECTED_TOOL_CALL -> a TRANSIENT, retryable error (never an empty success); any other value
  -> END_TURN not affirmed (docs/decisions.md#d11). ``promptFeedback.blockReason`` -> a
  MODERATION notice (scope prompt) and CONTENT_FILTERED. The body ending with neither ->
  TRANSIENT error.
- Every terminal error first emits the usage reported so far (reported usage is never dropped).
- Bounds (docs/server.md limits table; a breach is a TRANSIENT, retryable error naming the
  bound, docs/decisions.md#d31): at most :data:`MAX_PARTS_PER_EVENT` parts in one response
  object (checked before any of them is translated), :data:`MAX_FUNCTION_CALLS` function calls
  in one response, and a ``thoughtSignature`` of at most :data:`MAX_SIGNATURE_BYTES` (the
  VendorData value limit of protocol 1.1, ``rules/vendor_data.py``, which every signature must
  fit to travel back to the vendor on its part).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from protocol_py.providers.gemini.errors import classify_gemini_error
from protocol_py.providers.gemini.parts import (
    CALL_ID_PREFIX,
    FUNCTION_CALL_ID,
    THOUGHT_SIGNATURE,
)
from protocol_py.providers.gemini.usage import CacheCharge, has_counts, map_gemini_usage
from protocol_py.providers.http import events as ev
from protocol_py.providers.http import vendor_json
from protocol_py.providers.http.call_ids import CallIds
from protocol_py.providers.http.errors import transient_error
from protocol_py.providers.http.sse import OTHER_LINE, SSEEvent
from protocol_py.rules.vendor_data import MAX_VALUE_BYTES
from protocol_py_gen.content.v1 import VendorData
from protocol_py_gen.model.v1 import (
    ErrorKind,
    ModelError,
    SafetyKind,
    SafetyNotice,
    Stop,
    StopReason,
    StreamEvent,
    StreamMetadata,
)

__all__ = [
    "MAX_FUNCTION_CALLS",
    "MAX_PARTS_PER_EVENT",
    "MAX_RAW_JSON_BYTES",
    "MAX_SIGNATURE_BYTES",
    "GeminiStreamTranslator",
    "map_finish_reason",
]

MAX_RAW_JSON_BYTES: Final = 1024 * 1024
"""Largest JSON value read from lines outside the event-stream grammar (1 MiB, characters);
more is a TRANSIENT error."""

MAX_PARTS_PER_EVENT: Final = 4096
"""Most ``parts`` in one response object (one SSE event); more end the stream with a TRANSIENT
error before any part of that event is translated. Gemini sends one to a few parts per event,
tens when 2.5 Flash puts parallel calls in one event."""

MAX_FUNCTION_CALLS: Final = 1024
"""Most function calls in one response (all its events together); the next one ends the stream
with a TRANSIENT error."""

MAX_SIGNATURE_BYTES: Final = MAX_VALUE_BYTES
"""Largest ``thoughtSignature``, UTF-8 bytes (64 KiB, the VendorData value limit); a larger one
ends the stream with a TRANSIENT error. Signatures seen in recordings reach about 6 KB."""

MAX_STREAMED_ARGUMENT_PATHS: Final = 4096
"""Most distinct ``jsonPath`` values one streamed (Vertex ``partialArgs``) call may set."""

FILTER_REASONS: Final = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
        "MODEL_ARMOR",
    }
)
"""Finish reasons that mean a content filter stopped the response (CONTENT_FILTERED)."""

ERROR_REASONS: Final = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"})
"""Finish reasons that end the response without a usable answer: a classified error."""


def map_finish_reason(reason: str, *, called: bool) -> Stop:
    """Gemini's ``finishReason`` as a Stop (the reasons of :data:`ERROR_REASONS` excluded).

    ``called``: the response holds at least one function call (STOP is then TOOL_USE, an
    inference of the adapter, so not affirmed).
    """
    if reason == "STOP":
        if called:
            return Stop(reason=StopReason.TOOL_USE, model_affirmed=False, vendor_reason=reason)
        return Stop(reason=StopReason.END_TURN, model_affirmed=True, vendor_reason=reason)
    if reason == "MAX_TOKENS":
        return Stop(reason=StopReason.MAX_TOKENS, model_affirmed=True, vendor_reason=reason)
    if reason in FILTER_REASONS:
        return Stop(reason=StopReason.CONTENT_FILTERED, model_affirmed=True, vendor_reason=reason)
    return Stop(reason=StopReason.END_TURN, model_affirmed=False, vendor_reason=reason)


class _RawJson:
    """Reads JSON values written over lines outside the event-stream grammar.

    Feed it line by line; it returns each top-level value as soon as it is complete (each
    element of a top-level array separately). Raises ValueError for text that is not JSON or
    a value above :data:`MAX_RAW_JSON_BYTES`.
    """

    _OUTSIDE = re.compile(r'["{}\[\]]')
    _INSIDE = re.compile(r'["\\]')

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._size = 0
        self._depth = 0
        self._base = 0  # 1 inside a top-level array: its elements are the values
        self._in_string = False

    def feed(self, line: str) -> list[Any]:
        out: list[Any] = []
        text = line + "\n"
        pos = 0
        n = len(text)
        while pos < n:
            if self._depth == self._base:  # between values
                ch = text[pos]
                if ch.isspace() or (self._base and ch == ","):
                    pos += 1
                    continue
                if self._base and ch == "]":
                    self._base = self._depth = 0
                    pos += 1
                    continue
                if ch == "[" and not self._base:
                    self._base = self._depth = 1
                    pos += 1
                    continue
                if ch != "{":
                    raise ValueError("text that is not a JSON object")
                start = pos
            else:
                start = pos
            while pos < n:
                if self._in_string:
                    found = self._INSIDE.search(text, pos)
                    if found is None:
                        pos = n
                        break
                    pos = found.end()
                    if found.group() == "\\":
                        pos += 1  # the escaped character
                    else:
                        self._in_string = False
                    continue
                found = self._OUTSIDE.search(text, pos)
                if found is None:
                    pos = n
                    break
                pos = found.end()
                ch = found.group()
                if ch == '"':
                    self._in_string = True
                elif ch in "{[":
                    self._depth += 1
                else:
                    self._depth -= 1
                    if self._depth == self._base:
                        break
            piece = text[start:pos]
            self._parts.append(piece)
            self._size += len(piece)
            if self._size > MAX_RAW_JSON_BYTES:
                raise ValueError(f"a JSON value of more than {MAX_RAW_JSON_BYTES} characters")
            if self._depth == self._base and not self._in_string:
                value = vendor_json.loads("".join(self._parts))
                self._parts, self._size = [], 0
                out.append(value)
        return out


class _StopScan:
    """Answer text held back until it cannot be the start of a stop sequence."""

    def __init__(self, sequences: Sequence[str]) -> None:
        self.sequences = [s for s in sequences if s]
        self._keep = max((len(s) for s in self.sequences), default=1) - 1
        self._held = ""

    def push(self, text: str) -> tuple[str, str | None]:
        """(text that may be emitted now, the sequence matched or None)."""
        combined = self._held + text
        best: tuple[int, str] | None = None
        for seq in self.sequences:
            at = combined.find(seq)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, seq)
        if best is not None:
            self._held = ""
            return combined[: best[0]], best[1]
        cut = max(0, len(combined) - self._keep)
        self._held = combined[cut:]
        return combined[:cut], None

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


class _StreamedCall:
    """A Vertex function call whose arguments stream as ``partialArgs``."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self.args: dict[str, Any] = {}
        self.paths = 0

    def add(self, partial: Sequence[Any]) -> str | None:
        """Apply ``partialArgs`` entries; an error message or None."""
        for item in partial:
            if not isinstance(item, dict):
                continue
            path = item.get("jsonPath")
            if not isinstance(path, str):
                return "a partialArgs entry without jsonPath"
            keys = _json_path(path)
            if keys is None:
                return f"a partialArgs jsonPath the adapter cannot read ({path[:80]!r})"
            if "stringValue" in item:
                value: Any = item["stringValue"]
                append = True
            elif "numberValue" in item:
                value, append = item["numberValue"], False
            elif "boolValue" in item:
                value, append = item["boolValue"], False
            elif "nullValue" in item:
                value, append = None, False
            else:
                continue
            self.paths += 1
            if self.paths > MAX_STREAMED_ARGUMENT_PATHS:
                return f"more than {MAX_STREAMED_ARGUMENT_PATHS} streamed argument values"
            problem = _assign(self.args, keys, value, append)
            if problem is not None:
                return problem
        return None


_PATH_PART = re.compile(r"\.([A-Za-z_$][\w$-]*)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]|\[\"([^\"]*)\"\]")


def _json_path(path: str) -> list[str | int] | None:
    """``$.a.b[0]['c']`` -> ``["a", "b", 0, "c"]``; None for anything else."""
    if not path.startswith("$"):
        return None
    keys: list[str | int] = []
    pos = 1
    while pos < len(path):
        match = _PATH_PART.match(path, pos)
        if match is None:
            return None
        name, index, quoted, dquoted = match.groups()
        if index is not None:
            keys.append(int(index))
        else:
            keys.append(name if name is not None else (quoted or dquoted or ""))
        pos = match.end()
    return keys or None


def _assign(root: dict[str, Any], keys: list[str | int], value: Any, append: bool) -> str | None:
    node: Any = root
    for depth, key in enumerate(keys):
        last = depth == len(keys) - 1
        nxt: Any = None if last else ([] if isinstance(keys[depth + 1], int) else {})
        if isinstance(key, int):
            if not isinstance(node, list) or key > len(node):
                return "a partialArgs index out of order"
            if key == len(node):
                node.append(nxt if not last else None)
        elif not isinstance(node, dict):
            return "a partialArgs path through a non-object"
        elif key not in node:
            node[key] = nxt
        if last:
            current = node[key]
            if append and isinstance(current, str) and isinstance(value, str):
                node[key] = current + value
            else:
                node[key] = value
            return None
        if node[key] is None:
            node[key] = nxt
        node = node[key]
    return None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _blocked_categories(ratings: object) -> str:
    if not isinstance(ratings, list):
        return ""
    names = [
        r["category"]
        for r in ratings
        if isinstance(r, dict) and r.get("blocked") is True and isinstance(r.get("category"), str)
    ]
    return ",".join(names)


class GeminiStreamTranslator:
    """Stateful translator for one Gemini / Vertex response body (module docstring).

    Args:
        call_ids: Issues tool-call ids unique within the conversation (default: a response
            without history, fresh ids ``gemini_<ULID>``).
        text_vendor_data: The kernel speaks protocol 1.2: text-part signatures travel as
            ``TextDelta.vendor_data``; otherwise as the 1.1 thinking_signature encoding.
        stop_sequences: The request's stop sequences (detected here, never sent upstream).
        cache: A ``cachedContents`` entry created for this call, charged in its usage.
    """

    def __init__(
        self,
        *,
        call_ids: CallIds | None = None,
        text_vendor_data: bool = True,
        stop_sequences: Sequence[str] = (),
        cache: CacheCharge | None = None,
    ) -> None:
        self._ids = call_ids or CallIds(prefix=CALL_ID_PREFIX)
        self._text_vendor_data = text_vendor_data
        self._stops = _StopScan(stop_sequences) if any(stop_sequences) else None
        self._cache = cache
        self._started = False
        self.request_id = ""
        self._usage: Mapping[str, Any] | None = None
        self._finish: str | None = None
        self._finish_message: str | None = None
        self._blocked = ""
        self._prompt_block: tuple[str, str | None, str] | None = None
        self._called = False
        self._calls = 0
        self._text_open = False
        self._pending_signature: str | None = None
        self._streamed: _StreamedCall | None = None
        self._raw = _RawJson()
        self.finished = False

    # -- the Translator protocol ------------------------------------------------------------

    def on_event(self, sse: SSEEvent) -> list[StreamEvent]:
        """Translate one SSE event (or one line outside the grammar, event OTHER_LINE)."""
        if self.finished:
            return []
        out: list[StreamEvent] = []
        if sse.event == OTHER_LINE:
            try:
                values = self._raw.feed(sse.data)
            except ValueError as exc:
                return self._fail(
                    out, transient_error(f"upstream sent {exc} outside the event stream")
                )
            for value in values:
                self._value(out, value, raw=True)
                if self.finished:
                    break
            return out
        data = sse.data.strip()
        if not data:
            return out
        try:
            obj = vendor_json.loads(data)
        except ValueError as exc:
            return self._fail(out, transient_error(vendor_json.malformed_event_message(exc)))
        if isinstance(obj, list):
            for item in obj:
                self._value(out, item, raw=False)
                if self.finished:
                    break
        else:
            self._value(out, obj, raw=False)
        return out

    def on_json(self, body: object) -> list[StreamEvent]:
        """A whole JSON body (HTTP 2xx, no line break): an error object, a response object or
        an array of them, then the end of the body."""
        if self.finished:
            return []
        out: list[StreamEvent] = []
        for item in body if isinstance(body, list) else [body]:
            self._value(out, item, raw=True)
            if self.finished:
                return out
        return out + self.on_eof()

    def on_eof(self) -> list[StreamEvent]:
        """The body ended: the held usage and stop (or the error the response ended in)."""
        if self.finished:
            return []
        out: list[StreamEvent] = []
        self._close_streamed(out)
        if self.finished:
            return out
        self._close_text(out)
        if self._prompt_block is not None:
            block, message, categories = self._prompt_block
            attrs = {"gemini.scope": "prompt", "gemini.block_reason": block}
            if categories:
                attrs["gemini.blocked_categories"] = categories
            out.append(self._notice(message, attrs))
            self._finish_ok(
                out,
                Stop(reason=StopReason.CONTENT_FILTERED, model_affirmed=True, vendor_reason=block),
            )
            return out
        reason = self._finish
        if reason is None:
            return self._fail(out, transient_error("upstream stream ended before a finishReason"))
        if reason in ERROR_REASONS:
            message = self._finish_message or f"Gemini ended the response with {reason}"
            return self._fail(
                out,
                ModelError(
                    kind=ErrorKind.TRANSIENT,
                    message=message,
                    retryable=True,
                    vendor_code=reason,
                ),
            )
        if reason in FILTER_REASONS:
            attrs = {"gemini.scope": "response", "gemini.finish_reason": reason}
            if self._blocked:
                attrs["gemini.blocked_categories"] = self._blocked
            out.append(self._notice(self._finish_message, attrs))
        self._finish_ok(out, map_finish_reason(reason, called=self._called))
        return out

    def on_failure(self, error: ModelError) -> list[StreamEvent]:
        """End the stream with ``error`` (a stall, a cut connection): the usage reported so
        far, then the error."""
        return self._fail([], error)

    # -- response objects -------------------------------------------------------------------

    def _value(self, out: list[StreamEvent], value: Any, *, raw: bool) -> None:
        if not isinstance(value, dict):
            self._fail(out, transient_error("upstream sent a JSON value that is not an object"))
            return
        if "error" in value:
            self._fail(out, classify_gemini_error(value, request_id=self.request_id or None))
            return
        if raw and not {"candidates", "usageMetadata", "promptFeedback"} & value.keys():
            self._fail(out, transient_error("upstream sent a JSON object outside the stream"))
            return
        self._response(out, value)

    def _response(self, out: list[StreamEvent], obj: Mapping[str, Any]) -> None:
        usage = obj.get("usageMetadata")
        if not self._started:
            self._started = True
            self._start(out, obj, usage if isinstance(usage, dict) else {})
        if isinstance(usage, dict) and has_counts(usage):
            self._usage = usage
        feedback = obj.get("promptFeedback")
        if isinstance(feedback, dict) and _str(feedback.get("blockReason")):
            self._prompt_block = (
                feedback["blockReason"],
                _str(feedback.get("blockReasonMessage")),
                _blocked_categories(feedback.get("safetyRatings")),
            )
        candidates = obj.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            return
        candidate = candidates[0]
        if not isinstance(candidate, dict):
            return
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list) and len(parts) > MAX_PARTS_PER_EVENT:
            self._fail(
                out,
                transient_error(
                    f"upstream sent {len(parts)} parts in one response object, above the "
                    f"limit of {MAX_PARTS_PER_EVENT} (MAX_PARTS_PER_EVENT)"
                ),
            )
            return
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict):
                self._part(out, part)
            if self.finished:
                return
        reason = _str(candidate.get("finishReason"))
        if reason is not None:
            self._finish = reason
            self._finish_message = _str(candidate.get("finishMessage"))
            self._blocked = _blocked_categories(candidate.get("safetyRatings"))

    def _start(
        self, out: list[StreamEvent], obj: Mapping[str, Any], usage: Mapping[str, Any]
    ) -> None:
        request_id = _str(obj.get("responseId"))
        if request_id:
            self.request_id = request_id
            out.append(ev.start(request_id))
        model = _str(obj.get("modelVersion"))
        tier = _str(usage.get("serviceTier"))
        traffic = _str(usage.get("trafficType"))
        if model or tier or traffic:
            out.append(
                ev.metadata(
                    StreamMetadata(
                        actual_model=model,
                        service_tier=tier,
                        attrs={"gemini.traffic_type": traffic} if traffic else {},
                    )
                )
            )

    # -- parts ------------------------------------------------------------------------------

    def _part(self, out: list[StreamEvent], part: Mapping[str, Any]) -> None:
        signature = _str(part.get("thoughtSignature"))
        if signature is not None and len(signature) * 4 > MAX_SIGNATURE_BYTES:
            size = len(signature.encode("utf-8", "surrogatepass"))
            if size > MAX_SIGNATURE_BYTES:
                self._fail(
                    out,
                    transient_error(
                        f"upstream sent a thoughtSignature of {size} bytes, above the limit "
                        f"of {MAX_SIGNATURE_BYTES} bytes a signature can travel back in "
                        "(MAX_SIGNATURE_BYTES, the VendorData value limit)"
                    ),
                )
                return
        call = part.get("functionCall")
        if isinstance(call, dict):
            self._close_text(out)
            self._function_call(out, call, signature)
            return
        text = part.get("text")
        if not isinstance(text, str):
            if signature and not any(k in part for k in ("inlineData", "fileData")):
                text = ""  # a part that carries only a signature
            else:
                return  # inline data, code execution, server tools: no protocol slot
        self._close_streamed(out)
        if self.finished:
            return
        if part.get("thought") is True:
            self._close_text(out)
            if text:
                out.append(ev.thinking(text))
            if signature:
                out.append(ev.signature(signature))
            return
        self._text(out, text, signature)

    def _text(self, out: list[StreamEvent], text: str, signature: str | None) -> None:
        if signature is not None:
            if self._text_vendor_data:
                self._flush_held(out)
                emit, matched = self._scan(text)
                entry = VendorData(location=THOUGHT_SIGNATURE, value=signature.encode("utf-8"))
                out.append(ev.signed_text(emit, [entry]))
                self._text_open = True
                if matched is not None:
                    self._stop_sequence(out, matched)
                return
            if self._pending_signature is not None:
                self._close_text(out)  # a second signed part: the first one's block ends
            self._pending_signature = signature
        emit, matched = self._scan(text)
        if emit:
            out.append(ev.text(emit))
        if text or signature is not None:
            self._text_open = True
        if matched is not None:
            self._stop_sequence(out, matched)

    def _scan(self, text: str) -> tuple[str, str | None]:
        if self._stops is None or not text:
            return text, None
        return self._stops.push(text)

    def _flush_held(self, out: list[StreamEvent]) -> None:
        if self._stops is not None:
            held = self._stops.flush()
            if held:
                out.append(ev.text(held))

    def _close_text(self, out: list[StreamEvent]) -> None:
        """The open text block ends: text held for stop sequences, then (1.1 encoding) the
        signature of its signed part."""
        self._flush_held(out)
        if self._pending_signature is not None:
            out.append(ev.signature(self._pending_signature))
            self._pending_signature = None
        self._text_open = False

    def _function_call(
        self, out: list[StreamEvent], call: Mapping[str, Any], signature: str | None
    ) -> None:
        streamed = self._streamed
        name = _str(call.get("name"))
        partial = call.get("partialArgs")
        if streamed is not None:
            if not call:
                self._close_streamed(out)
                return
            if name is None and isinstance(partial, list):
                problem = streamed.add(partial)
                if problem is not None:
                    self._fail(out, transient_error(f"tool call {streamed.call_id!r}: {problem}"))
                return
            self._close_streamed(out)  # a new call begins: the streamed one is complete
            if self.finished:
                return
        if not call:
            return  # a closing {} without an open streamed call
        if name is None:
            self._fail(out, transient_error("upstream sent a functionCall without a name"))
            return
        self._calls += 1
        if self._calls > MAX_FUNCTION_CALLS:
            self._fail(
                out,
                transient_error(
                    f"upstream sent more than {MAX_FUNCTION_CALLS} function calls in one "
                    "response (MAX_FUNCTION_CALLS)"
                ),
            )
            return
        args = call.get("args")
        if args is not None and not isinstance(args, dict):
            self._fail(out, transient_error(f"functionCall {name!r}: args is not an object"))
            return
        vendor_id = _str(call.get("id"))
        issued = self._ids.issue(vendor_id)
        call_id = issued.id
        # the vendor's id goes back to it when it names this call alone: kept as the kernel id,
        # or replaced only because the history already used it (never a duplicate in-response)
        replay_id = issued.vendor_id or (vendor_id if call_id == vendor_id else None)
        vendor_data: list[VendorData] = []
        if signature:
            vendor_data.append(
                VendorData(location=THOUGHT_SIGNATURE, value=signature.encode("utf-8"))
            )
        if replay_id:
            vendor_data.append(
                VendorData(location=FUNCTION_CALL_ID, value=replay_id.encode("utf-8"))
            )
        self._called = True
        out.append(ev.tool_start(call_id, name, vendor_data))
        if call.get("willContinue") is True and not args:
            self._streamed = _StreamedCall(call_id)
            if isinstance(partial, list):
                problem = self._streamed.add(partial)
                if problem is not None:
                    self._fail(out, transient_error(f"tool call {call_id!r}: {problem}"))
            return
        if args:
            out.append(ev.tool_delta(call_id, _compact(args)))
        out.append(ev.tool_done(call_id))

    def _close_streamed(self, out: list[StreamEvent]) -> None:
        streamed, self._streamed = self._streamed, None
        if streamed is None:
            return
        if streamed.args:
            out.append(ev.tool_delta(streamed.call_id, _compact(streamed.args)))
        out.append(ev.tool_done(streamed.call_id))

    # -- endings ----------------------------------------------------------------------------

    def _notice(self, message: str | None, attrs: dict[str, str]) -> StreamEvent:
        return StreamEvent(
            safety_notice=SafetyNotice(kind=SafetyKind.MODERATION, message=message, attrs=attrs)
        )

    def _usage_event(self, out: list[StreamEvent]) -> None:
        if self._usage is not None or self._cache is not None:
            out.append(StreamEvent(usage=map_gemini_usage(self._usage or {}, self._cache)))

    def _finish_ok(self, out: list[StreamEvent], stop: Stop) -> None:
        self._usage_event(out)
        out.append(StreamEvent(stop=stop))
        self.finished = True

    def _stop_sequence(self, out: list[StreamEvent], matched: str) -> None:
        if self._pending_signature is not None:
            out.append(ev.signature(self._pending_signature))
            self._pending_signature = None
        self._finish_ok(
            out,
            Stop(
                reason=StopReason.STOP_SEQUENCE,
                matched_stop_sequence=matched,
                model_affirmed=False,
            ),
        )

    def _fail(self, out: list[StreamEvent], err: ModelError) -> list[StreamEvent]:
        if not self.finished:
            self._flush_held(out)
            if self._pending_signature is not None:  # the signature is whole: keep it
                out.append(ev.signature(self._pending_signature))
                self._pending_signature = None
            if not err.provider_request_id and self.request_id:
                err.provider_request_id = self.request_id
            self._usage_event(out)
            out.append(ev.error(err))
            self.finished = True
        return out


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
