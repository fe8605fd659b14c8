"""Token counting of the reference provider: its tokenizer and the prompt rendered as text.

:func:`tokenize` splits text into runs of word characters, runs of whitespace and
single other characters; the tokens concatenate back to the text. The prompt is rendered to
text segment by segment (context sections, the tool list, each message; see
:func:`prompt_segments`) and its token count is what CountTokens answers (method TOKENIZER)
and what ``usage`` reports as the prompt size (``input_tokens + cache_read_tokens +
cache_write_tokens``).

Long texts are stripped, searched and hashed :data:`TOKEN_COUNT_CHUNK_CHARS` characters at a
time and tokenized :data:`TOKEN_SLICE_CHARS` characters per regular-expression call, never
copied or joined whole, so no single step holds the interpreter for long whatever the text's
shape (no whitespace, one huge word, combining characters, emoji).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from protocol_py.codec.structs import dumps, from_struct
from protocol_py.server.offload import checkpoint
from protocol_py_gen.content.v1 import ContentBlock, ContextSection, Message, Role
from protocol_py_gen.model.v1 import ToolDeclaration

_TOKEN_RE: Final = re.compile(r"\w+|\s+|[^\w\s]", re.UNICODE)


TOKEN_SLICE_CHARS: Final = 4 * 1024
"""Characters one regular-expression call of the tokenizer sees (4 Ki): every token of the
text may be one character (punctuation, emoji, combining marks), so a call creates at most
this many token strings, a few milliseconds of the interpreter whatever the text's shape
(a 256 Ki slice of one-character tokens held it for 160-380 ms). Between two calls the worker
thread running the count can hand the interpreter to the event loop."""


def _joins(before: str, after: str) -> bool:
    """Whether a token ending in ``before`` and one starting with ``after`` (adjacent
    characters) are one token of the whole text: a run of word characters or of whitespace
    continuing across the seam."""
    return (_is_word_char(before) and _is_word_char(after)) or (
        before.isspace() and after.isspace()
    )


def _slice_tokens(text: str, start: int, end: int) -> Iterator[str]:
    """The reference tokens of ``text[start:end]``, found :data:`TOKEN_SLICE_CHARS`
    characters per regular-expression call; a run cut by a slice boundary is yielded once,
    joined (only such a run is built from pieces)."""
    pending: list[str] = []
    for a in range(start, end, TOKEN_SLICE_CHARS):
        tokens = _TOKEN_RE.findall(text, a, min(a + TOKEN_SLICE_CHARS, end))
        if pending and tokens and _joins(pending[-1][-1], tokens[0][0]):
            pending.append(tokens[0])
            del tokens[0]
        if tokens:
            if pending:
                yield "".join(pending)
            yield from tokens[:-1]
            pending = [tokens[-1]]
    if pending:
        yield "".join(pending)


def iter_tokens(text: str) -> Iterator[str]:
    """The reference tokens of ``text`` one by one, as :func:`tokenize` gives them, each
    regular-expression call seeing at most :data:`TOKEN_SLICE_CHARS` characters."""
    return _slice_tokens(text, 0, len(text))


def tokenize(text: str) -> list[str]:
    """Split ``text`` into the reference tokenizer's tokens.

    Tokens are runs of word characters, runs of whitespace and single other characters; their
    concatenation is ``text`` exactly. Found :data:`TOKEN_SLICE_CHARS` characters per
    regular-expression call (:func:`iter_tokens`), so no single call holds the interpreter
    for long whatever the text's shape.
    """
    return list(iter_tokens(text))


TOKEN_COUNT_CHUNK_CHARS: Final = 256 * 1024
"""Characters per copying pass over a long text (256 Ki): stripping, lowering, searching and
UTF-8 encoding go this many characters per C call (each well under a millisecond); the
regular-expression passes go :data:`TOKEN_SLICE_CHARS` at a time."""


def _is_word_char(c: str) -> bool:
    """Whether ``c`` is in ``re``'s Unicode ``\\w`` (alphanumeric or ``_``)."""
    return c.isalnum() or c == "_"


def count_text_tokens(text: str) -> int:
    """Number of reference tokens in ``text``.

    Counted :data:`TOKEN_SLICE_CHARS` characters per regular-expression call; a token cut by
    a slice boundary (word characters or whitespace on both sides of it) is counted twice
    there and subtracted once, so the total equals ``len(tokenize(text))`` exactly. A
    cancelled worker step stops every :data:`TOKEN_COUNT_CHUNK_CHARS` characters
    (:func:`protocol_py.server.offload.checkpoint`)."""
    return _count_text_tokens(text, None)[0]


def _count_text_tokens(text: str, stop_above: int | None) -> tuple[int, bool]:
    """``(count, whole)``: :func:`count_text_tokens` of ``text`` when ``whole``; else the
    count stopped after the first slice that took it above ``stop_above`` (tokens), a lower
    bound of the text's count (the tokens of a prefix, the last one perhaps continuing)."""
    if len(text) <= TOKEN_SLICE_CHARS:
        return len(_TOKEN_RE.findall(text)), True
    total = 0
    size = len(text)
    for a in range(0, size, TOKEN_SLICE_CHARS):
        if a % TOKEN_COUNT_CHUNK_CHARS == 0:
            checkpoint()  # a cancelled worker step stops here
        total += len(_TOKEN_RE.findall(text, a, a + TOKEN_SLICE_CHARS))
        if a > 0 and _joins(text[a - 1], text[a]):
            total -= 1
        if stop_above is not None and total > stop_above and a + TOKEN_SLICE_CHARS < size:
            return total, False
    return total, True


def _count_words(text: str) -> int:
    """``len(text.split())``, :data:`TOKEN_SLICE_CHARS` characters per ``split`` (which
    creates up to half as many words); a word cut by a slice boundary is counted once."""
    if len(text) <= TOKEN_SLICE_CHARS:
        return len(text.split())
    total = 0
    for a in range(0, len(text), TOKEN_SLICE_CHARS):
        total += len(text[a : a + TOKEN_SLICE_CHARS].split())
        if a > 0 and not text[a - 1].isspace() and not text[a].isspace():
            total -= 1
    return total


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
    text)."""
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
    ``max(TOKEN_COUNT_CHUNK_CHARS, len(needle))`` characters overlapping by
    ``len(needle) - 1`` (a long needle widens the step, so the characters copied stay within
    about twice the text's)."""
    step = max(TOKEN_COUNT_CHUNK_CHARS, len(needle))
    for at in range(0, total, step):
        pos = _spans_slice(spans, at, at + step + len(needle) - 1).find(needle)
        if pos != -1:
            return at + pos
    return -1


def _spans_tokens(spans: Sequence[_Span], end: int, count: int) -> list[str]:
    """The first ``count`` reference tokens of the concatenation's first ``end`` characters,
    found :data:`TOKEN_COUNT_CHUNK_CHARS` characters (copied out of the spans) at a time and
    :data:`TOKEN_SLICE_CHARS` per regular-expression call: a run crossing a chunk is joined,
    and only the chunks up to the ``count + 1``-th token's start are read (every token before
    it is complete)."""
    out: list[str] = []
    if count <= 0:
        return out
    run: list[str] = []  # the last token so far, in pieces: it may still continue
    for at in range(0, end, TOKEN_COUNT_CHUNK_CHARS):
        piece = _spans_slice(spans, at, min(at + TOKEN_COUNT_CHUNK_CHARS, end))
        for token in _slice_tokens(piece, 0, len(piece)):
            if run and _joins(run[-1][-1], token[0]):
                run.append(token)
                continue
            if run:
                out.append("".join(run))
                if len(out) >= count:
                    return out
            run = [token]
    if run and len(out) < count:
        out.append("".join(run))
    return out


def count_spans_tokens(spans: Sequence[_Span], end: int) -> int:
    """Number of reference tokens in the concatenation's first ``end`` characters, counted
    :data:`TOKEN_COUNT_CHUNK_CHARS` characters at a time (no copy of the whole)."""
    parts = (
        _spans_slice(spans, at, min(at + TOKEN_COUNT_CHUNK_CHARS, end))
        for at in range(0, end, TOKEN_COUNT_CHUNK_CHARS)
    )
    return count_parts_tokens(parts)


def _plain_text(blocks: list[ContentBlock]) -> str:
    return "".join(b.text.text for b in blocks if b.text is not None)


def _section_text(section: ContextSection) -> str:
    body = "".join(_block_text(b) for b in section.content)
    return f"[context {section.provider}/{section.label}]\n{body}\n"


def _tools_text(tools: list[ToolDeclaration]) -> str:
    lines = [f"{t.name}: {t.description} {dumps(from_struct(t.input_schema))}" for t in tools]
    return "[tools]\n" + "\n".join(lines) + "\n"


def _message_parts(message: Message) -> tuple[str, ...]:
    """The rendered message as parts, never joined: a large text block stays the block's own
    string (a join would copy it whole in one long hold of the interpreter)."""
    role = "assistant" if message.role is Role.ASSISTANT else "user"
    return (f"[{role}]\n", *(_block_text(b) for b in message.content), "\n")


def count_parts_tokens(parts: Iterable[str]) -> int:
    """:func:`count_text_tokens` of ``"".join(parts)``, without joining: each part counted on
    its own, less one wherever a part's last character and the next part's first form one
    token (both word characters or both whitespace: the run continues across the seam)."""
    return _count_parts_tokens(parts, None)[0]


def _count_parts_tokens(parts: Iterable[str], stop_above: int | None) -> tuple[int, bool]:
    """``(count, whole)`` of :func:`count_parts_tokens`, stopping inside a long part as
    :func:`_count_text_tokens` does once the count exceeds ``stop_above`` (tokens); the
    short parts of one message (its header, trailer, blocks) are counted whole."""
    total = 0
    last = ""
    for part in parts:
        if not part:
            continue
        left = None if stop_above is None else stop_above - total
        counted, whole = _count_text_tokens(part, left)
        total += counted
        if last and _joins(last, part[0]):
            total -= 1
        if not whole:
            return total, False
        last = part[-1]
    return total, True


def _utf8_pieces(parts: Sequence[str]) -> Iterator[bytes]:
    """The UTF-8 bytes of ``"".join(parts)``, :data:`TOKEN_COUNT_CHUNK_CHARS` characters at a
    time (for hashing without one long encode)."""
    step = TOKEN_COUNT_CHUNK_CHARS
    for part in parts:
        for at in range(0, len(part), step):
            checkpoint()
            yield part[at : at + step].encode("utf-8")


def _contains_lowered(text: str, needle: str) -> bool:
    """``needle in text.lower()`` for an ASCII ``needle``, lowered
    :data:`TOKEN_COUNT_CHUNK_CHARS` characters at a time, consecutive chunks overlapping by
    ``len(needle) - 1`` (a match spans at most ``len(needle)`` characters of ``text``; lowering
    depends on context only for a final sigma, which never lowers to ASCII), so no single call
    holds the interpreter for long."""
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
    """Render a request's input as segments: context sections, the tool list, each message
    (a cancelled worker step stops before each: :func:`protocol_py.server.offload.checkpoint`)."""
    segments = [
        PromptSegment("context", i, (text,), count_text_tokens(text))
        for i, text in enumerate(_section_text(s) for s in assembled_context)
    ]
    if tools:
        text = _tools_text(tools)
        segments.append(PromptSegment("tools", 0, (text,), count_text_tokens(text)))
    segments.extend(
        PromptSegment("message", i, parts, count_parts_tokens(parts))
        for i, parts in enumerate(_message_parts(_checked(m)) for m in messages)
    )
    return segments


def count_prompt_tokens(
    messages: list[Message],
    tools: list[ToolDeclaration],
    assembled_context: list[ContextSection],
    *,
    stop_above: int | None = None,
) -> tuple[int, bool]:
    """``(count, whole)``: the sum of :func:`prompt_segments`' token counts, rendered and
    counted segment by segment. With ``stop_above`` (tokens) the count stops once it exceeds
    that bound (``whole`` False, the count a lower bound above it): a 60 MiB text is not
    counted to the end when its first slices already pass a model's context window."""
    count = len(assembled_context) + (1 if tools else 0) + len(messages)
    total = 0
    for n, parts in enumerate(_segment_parts(messages, tools, assembled_context), 1):
        counted, whole = _count_parts_tokens(
            parts, None if stop_above is None else stop_above - total
        )
        total += counted
        if not whole:
            return total, False
        if stop_above is not None and total > stop_above:
            return total, n == count
    return total, True


def _segment_parts(
    messages: list[Message],
    tools: list[ToolDeclaration],
    assembled_context: list[ContextSection],
) -> Iterator[tuple[str, ...]]:
    """The parts of each prompt segment in :func:`prompt_segments`' order, rendered one at a
    time."""
    for section in assembled_context:
        yield (_section_text(section),)
    if tools:
        yield (_tools_text(tools),)
    for message in messages:
        yield _message_parts(_checked(message))


def _checked(item: Message) -> Message:
    checkpoint()
    return item


__all__ = [
    "TOKEN_COUNT_CHUNK_CHARS",
    "TOKEN_SLICE_CHARS",
    "PromptSegment",
    "count_parts_tokens",
    "count_prompt_tokens",
    "count_text_tokens",
    "iter_tokens",
    "prompt_segments",
    "tokenize",
]
