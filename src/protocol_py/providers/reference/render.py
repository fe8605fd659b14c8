"""Render of the reference provider: ``reference.echo`` and ``reference.repeat`` payloads.

Payload type ``reference.echo`` (the payload as UTF-8 text) and ``reference.repeat`` (JSON
``{"text": str, "times": int}``, ``times >= 0``, at most :data:`MAX_RENDER_CHARS` characters:
the text repeated, a test aid for reply sizes), answered in the requested format (Markdown:
ASCII punctuation backslash-escaped; otherwise plain text). A Markdown render is escaped in a
worker thread :data:`MARKDOWN_ESCAPE_CHUNK_CHARS` characters at a time and stops at the next
chunk when its call is cancelled.
"""

from __future__ import annotations

import json
import operator
import threading
from typing import Final

from protocol_py.bounded_text import quote_value
from protocol_py.server.offload import OFFLOAD_MIN_BYTES, run_cpu
from protocol_py_gen.model.v1 import RenderFormat, RenderRequest, RenderResponse

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
and parsing a much bigger JSON document (deeply nested lists) would hold the event loop for
seconds; a larger payload is refused before it is parsed."""


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
    except RecursionError:  # the C scanner's own nesting limit (about 1,000 levels)
        raise ValueError(f"payload: JSON nested too deeply; {usage}") from None
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
    if times > MAX_RENDER_CHARS:  # even of an empty text: never a repeat count past the bound
        raise ValueError(f"payload.times: more than {MAX_RENDER_CHARS} (MAX_RENDER_CHARS)")
    if len(text) * times > MAX_RENDER_CHARS:
        raise ValueError(f"payload.times: the result would exceed {MAX_RENDER_CHARS} characters")
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"payload.text: holds a lone surrogate (U+{ord(text[exc.start]):04X} at "
                f"character {exc.start}), which UTF-8 cannot carry"
            ) from None
    return text, times


async def render_payload(request: RenderRequest) -> RenderResponse:
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
        raise ValueError(f"payload_type: unknown payload type {quote_value(request.payload_type)}")
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


__all__ = [
    "MARKDOWN_ESCAPE_CHUNK_CHARS",
    "MAX_RENDER_CHARS",
    "MAX_REPEAT_PAYLOAD_BYTES",
    "markdown_escape",
    "render_payload",
]
