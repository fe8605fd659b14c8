"""Incremental server-sent events (SSE) parser following the WHATWG event-stream rules.

Spec: WHATWG HTML "Server-sent events", section "Parsing an event stream" and "Interpreting an
event stream". Used by the vendor adapters (:mod:`protocol_py.providers`) to read
``text/event-stream`` response bodies byte-for-byte.

Rules implemented (and where common readers fail, cases C09, C10, B22):

- Lines end at CR LF, a lone LF or a lone CR, including a CR LF pair split across two chunks.
  Nothing else ends a line: U+2028, U+2029 and U+0085 stay inside the data (unlike
  ``str.splitlines`` and httpx's ``aiter_lines``).
- One leading UTF-8 byte-order mark (EF BB BF) is stripped, even when its bytes arrive in
  separate chunks.
- A line starting with ``:`` is a comment (keep-alive) and is ignored.
- ``field:value`` with one leading space after the colon removed; a line without a colon is a
  field with an empty value.
- ``data`` lines are joined with ``\\n``; ``event`` sets the type; ``id`` sets the last event
  id unless the value contains NUL; ``retry`` is kept only when it is all ASCII digits.
- A blank line dispatches the block. A block without any ``data`` field dispatches nothing
  (id-only, retry-only, event-only and comment-only blocks produce no event).
- At end of stream an unterminated block is discarded (WHATWG), see :meth:`SSEParser.close`.

Other lines (opt-in, ``SSEParser(other_lines=True)``): a vendor that writes something outside
the event-stream grammar into an event stream (Gemini sends a raw JSON error object, one member
per line, after HTTP 200) would have it ignored as unknown fields. With ``other_lines`` each
line whose field name is not ``data``, ``event``, ``id`` or ``retry`` and that is not a comment
is dispatched at once, in body order, as an :class:`SSEEvent` whose ``event`` is
:data:`OTHER_LINE` and whose ``data`` is the whole line; :meth:`SSEParser.close` then also
dispatches an unterminated last line that is such a line. Without it nothing changes.

Bytes are decoded as UTF-8 per line with replacement of invalid sequences, as the spec says,
and never silently: an event whose ``data``, ``event`` or other line held an invalid sequence is
dispatched with ``invalid_utf8`` set (docs/decisions.md#d34: the vendor adapters end the stream
with a TRANSIENT error there). Lines are decoded only once whole, so a multi-byte character split
across two network chunks is never invalid.

Bounds: a line longer than :data:`MAX_SSE_LINE_BYTES` (terminated or still
pending: an upstream that never sends a newline) and an event whose ``data`` lines add up to
more than :data:`MAX_SSE_EVENT_BYTES` raise :class:`SSELimitError` from :meth:`SSEParser.feed`
as soon as the limit is passed, so the parser never holds more than about that much; the
events completed before stay valid. WHATWG sets no limit; a reader must (HTML spec: user agents
may impose implementation-specific limits).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MAX_SSE_EVENT_BYTES",
    "MAX_SSE_LINE_BYTES",
    "OTHER_LINE",
    "SSEEvent",
    "SSELimitError",
    "SSEParser",
    "aiter_sse",
]

_BOM = b"\xef\xbb\xbf"

MAX_SSE_LINE_BYTES: Final = 16 * 1024 * 1024
"""Longest SSE line, in bytes of the body (16 MiB), terminator excluded; a longer line (or a
pending partial line past it) raises :class:`SSELimitError`."""

MAX_SSE_EVENT_BYTES: Final = 16 * 1024 * 1024
"""Largest SSE event, in bytes (16 MiB): the sum of its ``data`` lines' lengths; more raises
:class:`SSELimitError`."""


OTHER_LINE: Final = ""
"""The ``SSEEvent.event`` of a line outside the event-stream grammar (``other_lines``); no
dispatched event has this type otherwise (an event without a type is ``"message"``)."""


class SSELimitError(ValueError):
    """A line or event passed :data:`MAX_SSE_LINE_BYTES` / :data:`MAX_SSE_EVENT_BYTES`.

    The message names the limit and its size in bytes, never the line's content.
    """


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched server-sent event.

    Attributes:
        event: The event type (``event:`` field); ``"message"`` when the block set none.
        data: The data buffer: every ``data:`` line of the block joined with ``\\n``.
        id: The last event id in force when the event was dispatched ("" when none was set).
        retry: The reconnection time in milliseconds from the most recent valid ``retry:``
            field, or None.
        invalid_utf8: True when a ``data``, ``event`` or other line of the event held bytes
            that are not UTF-8 (each invalid sequence became U+FFFD in ``data`` / ``event``).
    """

    event: str
    data: str
    id: str = ""
    retry: int | None = None
    invalid_utf8: bool = False


_set_event = vars(SSEEvent)["event"].__set__
_set_data = vars(SSEEvent)["data"].__set__
_set_id = vars(SSEEvent)["id"].__set__
_set_retry = vars(SSEEvent)["retry"].__set__
_set_invalid = vars(SSEEvent)["invalid_utf8"].__set__


def _new_event(
    event: str, data: str, last_id: str, retry: int | None, invalid: bool = False
) -> SSEEvent:
    """``SSEEvent(event, data, last_id, retry, invalid)`` through its slots' descriptors: the
    same frozen instance, about twice as fast as the frozen dataclass's ``__init__`` (one per
    event)."""
    new = object.__new__(SSEEvent)
    _set_event(new, event)
    _set_data(new, data)
    _set_id(new, last_id)
    _set_retry(new, retry)
    _set_invalid(new, invalid)
    return new


def _decode(raw: bytes) -> tuple[str, bool]:
    """``raw`` as UTF-8 with invalid sequences replaced (U+FFFD), and whether any was."""
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace"), True


class SSEParser:
    """Push parser: feed it body bytes in any chunking, get whole events back.

    Splitting the same bytes at any points yields the same events (the tests check every split
    point). The parser keeps at most one partial line between calls.

    Args:
        other_lines: Also dispatch lines outside the event-stream grammar as :data:`OTHER_LINE`
            events (module docstring).
    """

    __slots__ = (
        "_bom_checked",
        "_buf",
        "_clean",
        "_data",
        "_data_bytes",
        "_event",
        "_has_data",
        "_invalid",
        "_last_id",
        "_other_lines",
        "_pending_cr",
        "_retry",
    )

    def __init__(self, *, other_lines: bool = False) -> None:
        self._other_lines = other_lines
        self._buf = bytearray()
        self._clean = 0
        self._bom_checked = False
        self._pending_cr = False
        self._data: list[str] = []
        self._data_bytes = 0
        self._has_data = False
        self._invalid = False
        self._event = ""
        self._last_id = ""
        self._retry: int | None = None

    @property
    def last_event_id(self) -> str:
        """The last event id set by an ``id:`` field ("" when none)."""
        return self._last_id

    @property
    def retry(self) -> int | None:
        """The most recent valid ``retry:`` value in milliseconds, or None."""
        return self._retry

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume ``chunk`` and return the events it completed, in order.

        Raises:
            SSELimitError: a line or an event passed its bound (module docstring); the events
                this chunk completed before that point are lost with the stream, those returned
                by earlier calls stay valid.
        """
        out: list[SSEEvent] = []
        if not chunk:
            return out
        buf = self._buf
        buf += chunk
        if not self._bom_checked:
            if len(buf) < 3 and _BOM.startswith(bytes(buf)):
                return out  # could still become a BOM: wait for more bytes
            self._bom_checked = True
            if buf.startswith(_BOM):
                del buf[:3]
        start = 0
        if self._pending_cr:
            # The previous chunk ended in CR: a LF right here belongs to that line terminator.
            self._pending_cr = False
            if buf[:1] == b"\n":
                start = 1
        n = len(buf)
        # The bytes kept from the previous call hold no terminator: search only the new ones,
        # and each later search runs once per terminator found (linear time overall).
        clean = max(start, self._clean)
        cr = buf.find(b"\r", clean)
        if cr < 0:
            # Fast path: no CR in the new bytes (every vendor ends lines with LF alone), so the
            # complete lines are everything up to the last LF, split at once.
            last = buf.rfind(b"\n", start)
            if last >= 0:
                self._lines(bytes(buf[start:last]).split(b"\n"), out)
                start = last + 1
            del buf[:start]
            self._clean = len(buf)
            if self._clean > MAX_SSE_LINE_BYTES:
                raise _too_long()
            return out
        lf = buf.find(b"\n", clean)
        while start < n:
            if cr != -1 and cr < start:
                cr = buf.find(b"\r", start)
            if lf != -1 and lf < start:
                lf = buf.find(b"\n", start)
            if cr < 0 and lf < 0:
                break
            if cr < 0 or (0 <= lf < cr):
                end, nxt = lf, lf + 1
            else:
                end = cr
                if cr + 1 < n:
                    nxt = cr + 2 if buf[cr + 1] == 0x0A else cr + 1
                else:
                    nxt = cr + 1
                    self._pending_cr = True
            if end - start > MAX_SSE_LINE_BYTES:
                raise _too_long()
            self._line(bytes(buf[start:end]), out)
            start = nxt
        del buf[:start]
        self._clean = len(buf)
        if self._clean > MAX_SSE_LINE_BYTES:
            raise _too_long()
        return out

    def close(self) -> list[SSEEvent]:
        """Signal end of stream. An unterminated block is discarded (WHATWG); returns [], or
        with ``other_lines`` the unterminated last line when it is an other line."""
        out: list[SSEEvent] = []
        if self._other_lines and self._buf:
            self._line(bytes(self._buf), out)
            out = [e for e in out if e.event == OTHER_LINE]
        self._buf.clear()
        self._clean = 0
        self._reset_block()
        return out

    @property
    def has_partial(self) -> bool:
        """True when bytes or fields of an unterminated block are pending (a truncated body)."""
        return bool(self._buf) or self._has_data

    def _reset_block(self) -> None:
        self._data = []
        self._data_bytes = 0
        self._has_data = False
        self._invalid = False
        self._event = ""

    def _lines(self, lines: list[bytes], out: list[SSEEvent]) -> None:
        """:meth:`_line` for each of ``lines``, with the blank and ``data:`` lines (nearly all
        of a vendor stream) handled inline: the same results, fewer calls per event."""
        for raw in lines:
            if not raw:
                if self._has_data:
                    data = self._data
                    out.append(
                        _new_event(
                            self._event or "message",
                            data[0] if len(data) == 1 else "\n".join(data),
                            self._last_id,
                            self._retry,
                            self._invalid,
                        )
                    )
                    self._data = []
                    self._data_bytes = 0
                    self._has_data = False
                self._invalid = False
                self._event = ""
            elif raw.startswith(b"data:") and len(raw) <= MAX_SSE_LINE_BYTES:
                # the ASCII "data:" prefix decodes alone: decoding the value by itself is the
                # same as decoding the whole line and splitting at the colon
                self._data_bytes += len(raw)
                if self._data_bytes > MAX_SSE_EVENT_BYTES:
                    self._reset_block()
                    raise _event_too_long()
                start = 6 if raw[5:6] == b" " else 5
                try:
                    self._data.append(raw[start:].decode("utf-8"))
                except UnicodeDecodeError:
                    self._data.append(raw[start:].decode("utf-8", errors="replace"))
                    self._invalid = True
                self._has_data = True
            else:
                if len(raw) > MAX_SSE_LINE_BYTES:
                    raise _too_long()
                self._line(raw, out)

    def _line(self, raw: bytes, out: list[SSEEvent]) -> None:
        if not raw:
            if self._has_data:
                out.append(
                    SSEEvent(
                        event=self._event or "message",
                        data="\n".join(self._data),
                        id=self._last_id,
                        retry=self._retry,
                        invalid_utf8=self._invalid,
                    )
                )
            self._reset_block()
            return
        line, invalid = _decode(raw)
        if line[0] == ":":
            return
        name, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data_bytes += len(raw)
            if self._data_bytes > MAX_SSE_EVENT_BYTES:
                self._reset_block()
                raise _event_too_long()
            self._data.append(value)
            self._has_data = True
            self._invalid = self._invalid or invalid
        elif name == "event":
            self._event = value
            self._invalid = self._invalid or invalid
        elif name == "id":
            if "\x00" not in value:
                self._last_id = value
        elif name == "retry":
            if value and value.isascii() and value.isdigit():
                self._retry = int(value)
        elif self._other_lines:
            out.append(_new_event(OTHER_LINE, line, self._last_id, self._retry, invalid))
        # any other field name is ignored


def _event_too_long() -> SSELimitError:
    return SSELimitError(f"SSE event too long: its data lines exceed {MAX_SSE_EVENT_BYTES} bytes")


def _too_long() -> SSELimitError:
    return SSELimitError(
        f"SSE line too long: more than {MAX_SSE_LINE_BYTES} bytes without a newline"
    )


async def aiter_sse(chunks: AsyncIterable[bytes]) -> AsyncIterator[SSEEvent]:
    """Parse an async byte stream (for example httpx ``Response.aiter_bytes()``) into events.

    Args:
        chunks: The response body in arbitrary chunks.

    Yields:
        Each dispatched :class:`SSEEvent`, as soon as its terminating blank line arrives.
    """
    parser = SSEParser()
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
    parser.close()
