"""Bounded upstream response bodies: content decoding with a cap on every decoded step.

A hostile (or broken) upstream can send a compression bomb: 1 MiB of gzip that expands to
1 GiB, or gzip inside gzip, where one 64 KiB network read expands to gigabytes in a single
decompression call. httpx's own decoders expand each network chunk whole,
so the adapters never use them (:meth:`httpx.Response.aiter_bytes`, ``aread``, ``.content``):

* :func:`decoded_body` reads the raw body (:meth:`httpx.Response.aiter_raw`) and undoes the
  ``Content-Encoding`` itself (RFC 9110 section 8.4: ``gzip``/``x-gzip``, ``deflate``,
  ``identity``; at most :data:`MAX_CONTENT_CODINGS` stacked), never producing more than
  :data:`DECODE_STEP_BYTES` decoded bytes per decompression step, so the memory a body can take
  is bounded by what the reader keeps, whatever the compression ratio;
* :func:`read_capped` reads at most ``limit`` DECODED bytes (an error body:
  :data:`MAX_ERROR_BODY_BYTES`) and stops reading there.

An encoding it cannot undo (``br``, ``zstd``, ``compress``, anything unknown, or too many
stacked) and corrupt compressed data raise :class:`httpx.DecodingError`, which the callers
already treat as a transport failure. The requests say ``Accept-Encoding: gzip, deflate``
(:data:`ACCEPT_ENCODING`) so a conforming upstream never sends another coding.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Final

import httpx

from protocol_py.bounded_text import quote_value

__all__ = [
    "ACCEPT_ENCODING",
    "DECODE_STEP_BYTES",
    "MAX_CONTENT_CODINGS",
    "MAX_ERROR_BODY_BYTES",
    "decoded_body",
    "read_capped",
]

ACCEPT_ENCODING: Final = "gzip, deflate"
"""The ``Accept-Encoding`` request header: the codings :func:`decoded_body` can undo."""

DECODE_STEP_BYTES: Final = 64 * 1024
"""The most decoded bytes one decompression step produces, in bytes (64 KiB): a body's decoded
chunks are never larger, whatever the compression ratio."""

MAX_CONTENT_CODINGS: Final = 2
"""The most codings a ``Content-Encoding`` header may stack (``gzip, gzip``); more is refused
(:class:`httpx.DecodingError`)."""

MAX_ERROR_BODY_BYTES: Final = 64 * 1024
"""The most DECODED bytes read from a non-2xx (error) response body, in bytes (64 KiB); the rest
is not read (the connection is closed). Vendor error bodies are a few hundred bytes."""

_INFLATE: Final = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 0}
"""zlib ``wbits`` per supported coding (0 for ``deflate``: zlib header or, failing that, raw)."""


class _Inflater:
    """One gzip / deflate stage: decodes pushed bytes in steps of at most DECODE_STEP_BYTES."""

    __slots__ = ("_coding", "_raw_fallback", "_started", "_z")

    def __init__(self, coding: str) -> None:
        self._coding = coding
        wbits = _INFLATE[coding]
        self._raw_fallback = wbits == 0  # RFC 9110 deflate is zlib-wrapped; some send it raw
        self._z = zlib.decompressobj(wbits or zlib.MAX_WBITS)
        self._started = False

    def feed(self, pieces: Iterable[bytes]) -> Iterator[bytes]:
        for piece in pieces:
            data = piece
            while data and not self._z.eof:
                try:
                    out = self._z.decompress(data, DECODE_STEP_BYTES)
                except zlib.error:
                    if self._raw_fallback and not self._started:
                        self._raw_fallback = False
                        self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                        continue
                    raise httpx.DecodingError(f"corrupt {self._coding} response body") from None
                self._started = True
                data = self._z.unconsumed_tail
                if out:
                    yield out
                while len(out) == DECODE_STEP_BYTES and not data and not self._z.eof:
                    out = self._z.decompress(b"", DECODE_STEP_BYTES)  # output still pending
                    if out:
                        yield out


def _codings(header: str) -> list[str]:
    """The non-identity codings of a ``Content-Encoding`` value, in the order applied."""
    return [c for c in (p.strip().lower() for p in header.split(",")) if c and c != "identity"]


def decoded_body(response: httpx.Response) -> AsyncIterator[bytes]:
    """The response body, decoded, as chunks of at most :data:`DECODE_STEP_BYTES` bytes
    (an identity body: the network chunks as read, at most 64 KiB each; a response already
    read by a custom transport: its content).

    Raises (while iterating):
        httpx.DecodingError: an unsupported or corrupt ``Content-Encoding`` (module docstring).
        httpx.HTTPError: any transport failure while reading.
    """
    if response.is_stream_consumed:
        return _already_read(response)
    codings = _codings(response.headers.get("content-encoding", ""))
    if not codings:
        return response.aiter_raw()
    return _decoded(response, codings)


async def _already_read(response: httpx.Response) -> AsyncIterator[bytes]:
    """A response a custom transport returned already read (``httpx.Response(content=...)``):
    httpx decoded it then; its content is given in :data:`DECODE_STEP_BYTES` pieces."""
    content = response.content
    for start in range(0, len(content), DECODE_STEP_BYTES):
        yield content[start : start + DECODE_STEP_BYTES]


async def _decoded(response: httpx.Response, codings: list[str]) -> AsyncIterator[bytes]:
    unsupported = [c for c in codings if c not in _INFLATE]
    if unsupported or len(codings) > MAX_CONTENT_CODINGS:
        what = f"coding {quote_value(unsupported[0])}" if unsupported else "stacked codings"
        raise httpx.DecodingError(
            f"unsupported content-encoding: {what} (accepted: {ACCEPT_ENCODING}; at most "
            f"{MAX_CONTENT_CODINGS} stacked)"
        )
    stages = [_Inflater(c) for c in reversed(codings)]  # the last coding applied is undone first
    async for raw in response.aiter_raw():
        pieces: Iterable[bytes] = (raw,)
        for stage in stages:
            pieces = stage.feed(pieces)
        for piece in pieces:
            yield piece


async def read_capped(response: httpx.Response, limit: int = MAX_ERROR_BODY_BYTES) -> bytes:
    """At most ``limit`` decoded bytes of the body; reading stops at the limit.

    Raises:
        httpx.DecodingError: see :func:`decoded_body`.
        httpx.HTTPError: any transport failure while reading.
    """
    body = bytearray()
    chunks = decoded_body(response)
    try:
        async for piece in chunks:
            body += piece[: limit - len(body)]
            if len(body) >= limit:
                break
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
    return bytes(body)
